"""The Airflow experience in a real browser: approval, the "Plan report" link, the run to the end.

One ``airflow standalone`` (the Airflow that ``make ui`` starts: API server + UI, scheduler,
triggerer, dag processor, LocalExecutor) with the decommission example DAG, ``kafka_default``
pointing at the session sandbox, and a headless Chromium (DevTools protocol, tests/integration/
browser.py). One test, two DAG runs:

1. approved: trigger through the REST API -> the run stops at ``approve`` (awaiting a person) ->
   in Chromium, the ``plan`` task's page shows the "Plan report" extra link; clicking it opens the
   report, served by the provider's plugin route (the same URL without Airflow's login is
   refused) -> approve through the REST API -> the run finishes, the broker is drained;
2. rejected: trigger again on other topics -> reject -> ``execute`` is skipped, the topics'
   assignment is unchanged, and ``restore_cordons`` has taken back the cordon the plan set.

The walk-through's screenshots (docs/first-decommission.md: the approval form, the plan task's
"Plan report" link, the report) are taken on the way, into the test's tmp dir, or into
``AKR_SCREENSHOTS_DIR`` when set: ``make screenshots`` regenerates docs/img/ that way (PNG, reduced
to a 256-colour palette: each well under 200 kB, checked by tests/unit/test_docs_build.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from browser import browser  # noqa: F401 (fixture)
from dagrun import copy_migrated_db
from kafka_helpers import make_topic, reopen_cordoned_brokers, wait_until

from airflow_kafka_reassign.demo import _health, _stop_group

# airflow standalone's start, two DAG runs (approved, rejected) and Chromium: pytest-timeout's 600 s counts set-up and
# tear-down too, and was reached on a loaded machine (the steps themselves passed)
pytestmark = pytest.mark.timeout(1200)

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
DAG_ID = "kafka_decommission_brokers"
DRAINED = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: A real login (not make ui's "all admins": that mode lets anybody in, so it could not show a refusal).
USER, PASSWORD = "sre", "test-only-password"


class Api:
    def __init__(self, url: str) -> None:
        self.url = url
        self.token = json.loads(self._raw("POST", "/auth/token", {"username": USER, "password": PASSWORD}))[
            "access_token"]

    def _raw(self, method: str, path: str, body: Any = None, token: str | None = None) -> bytes:
        req = urllib.request.Request(self.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=60) as r:  # noqa: S310 (local URL)
            return r.read()

    def __call__(self, method: str, path: str, body: Any = None) -> Any:
        for attempt in range(3):  # a loaded machine: the API server may answer late; a GET is safe to repeat
            try:
                return json.loads(self._raw(method, "/api/v2" + path, body, self.token) or b"null")
            except (TimeoutError, urllib.error.URLError) as e:
                if method != "GET" or attempt == 2 or isinstance(e, urllib.error.HTTPError):
                    raise
        raise AssertionError("unreachable")

    def get_or_none(self, path: str) -> Any:
        try:
            return self("GET", path)
        except urllib.error.HTTPError:
            return None


@pytest.fixture(scope="module")
def airflow_ui(sandbox, tmp_path_factory, migrated_airflow_db):
    """``airflow standalone`` on a free port with the decommission DAG (unpaused) and kafka_default -> sandbox."""
    home = tmp_path_factory.mktemp("airflow-ui")
    dags = home / "dags"
    dags.mkdir()
    shutil.copyfile(EXAMPLES / f"{DAG_ID}.py", dags / f"{DAG_ID}.py")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        # a task's calls to the execution API: 5 s by default, reached on a loaded 2-core machine (httpx ReadTimeout
        # failed check_request before it ran); Airflow 3.1.1+ reads it
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
        # the log servers on free ports: 8793/8794 by default, taken when two deployments run at once (xdist)
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "AKR_OUTPUT_DIR": str(home / "plans"),
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": sandbox.client_config(sasl=True)}),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    (home / "passwords.json").write_text(json.dumps({USER: PASSWORD}))
    airflow = str(Path(sys.executable).with_name("airflow"))
    copy_migrated_db(migrated_airflow_db, home)
    log = open(home / "standalone.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([airflow, "standalone"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_until(lambda: _health(url) is not None or proc.poll() is not None, what="airflow standalone up", every=1,
                   timeout=240)
        assert proc.poll() is None, (home / "standalone.log").read_text()[-4000:]
        api = Api(url)
        wait_until(lambda: api.get_or_none(f"/dags/{DAG_ID}") is not None, what="the DAG parsed", timeout=180, every=1.5)
        api("PATCH", f"/dags/{DAG_ID}", {"is_paused": False})
        yield api, home
    finally:
        stopped = _stop_group(proc.pid)
        print(f"\nairflow standalone stopped in {stopped.line()} (make ui-stop stops it the same way)")
        log.close()


def trigger(api: Api, conf: dict) -> str:
    run = api("POST", f"/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": conf})
    return str(run["dag_run_id"])


def ti_state(api: Api, run_id: str, task_id: str) -> str | None:
    ti = api.get_or_none(f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}")
    return ti and ti.get("state")


def log_tail(home: Path, run_id: str, task_id: str, chars: int = 4000) -> str:
    """The end of a task's last try's log (for a failure's message)."""
    logs = sorted((home / "logs").glob(f"dag_id={DAG_ID}/run_id={run_id}/task_id={task_id}/attempt=*.log"))
    return logs[-1].read_text(errors="replace")[-chars:] if logs else "(no log)"


def wait_for_approval_request(api: Api, home: Path, run_id: str) -> dict:
    def waiting() -> Any:
        state = api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}")["state"]
        assert state in ("queued", "running"), f"the run ended {state} before the approval"
        # answered before the task has finished pausing (its hitlDetails exist a moment before its state is
        # set), Airflow 3.3 never resumed it once in CI: answer only a task that waits (deferred)
        if ti_state(api, run_id, "approve") not in ("deferred", "awaiting_input"):
            return None
        return api.get_or_none(f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/approve/-1/hitlDetails")
    details = wait_until(waiting, what="the approve task waiting for a person", timeout=420, every=1.5)
    # Answered before the scheduler has handled the executor's event of the try that parked ("finished with state
    # success"), Airflow 3.3's scheduler finds the resumed task queued or running under the same try, takes it for
    # killed externally ("... but the task instance's state attribute is queued") and fails it: seen twice in CI, the
    # rejected run's execute then read upstream_failed, once even 5 s after the parking. A person is never that
    # fast; the test waits for the scheduler's own line saying it has handled that event.
    handled = f"TaskInstance Finished: dag_id={DAG_ID}, task_id=approve, run_id={run_id},"
    log = home / "standalone.log"
    wait_until(lambda: handled in log.read_text(errors="replace"), every=0.5, timeout=180,
               what="the scheduler's 'TaskInstance Finished' for the parked approve task (standalone.log)")
    return details


def answer(api: Api, run_id: str, option: str) -> None:
    api("PATCH", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/approve/-1/hitlDetails",
        {"chosen_options": [option], "params_input": {}})


def wait_for_run(api: Api, run_id: str) -> str:
    def ended() -> str | None:
        state = api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}")["state"]
        return state if state in ("success", "failed") else None
    return wait_until(ended, what=f"the run {run_id} ended", timeout=600, every=1.5)


#: The screenshots docs/first-decommission.md shows, as this test names them (docs/img/).
SCREENSHOTS = ("first-decommission-approve.png", "first-decommission-plan-task.png", "first-decommission-report.png")


def doc_screenshot(browser, default_dir: Path, name: str) -> Path:  # noqa: F811
    """A screenshot for the docs: the page as shown, reduced to a palette PNG (small, sharp for a UI)."""
    from PIL import Image

    assert name in SCREENSHOTS
    target = Path(os.environ.get("AKR_SCREENSHOTS_DIR") or default_dir) / name
    raw = browser.screenshot(target.with_suffix(".raw.png"))
    with Image.open(raw) as image:
        image.convert("RGB").quantize(colors=256).save(target, optimize=True)
    raw.unlink()
    return target


def assignment(sandbox, topics: list[str]) -> dict:
    from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

    with KafkaClusterAdmin(sandbox.client_config(), timeout_s=30) as admin:
        return {p.tp: p.replicas for p in admin.snapshot(topics=topics).partitions}


def test_approve_open_the_plan_report_and_finish_then_a_rejected_run_changes_nothing(
        sandbox, airflow_ui, browser, unique_topic, tmp_path, capsys):  # noqa: F811
    api, home = airflow_ui
    config = sandbox.client_config()
    topics = [f"{unique_topic}-a", f"{unique_topic}-b"]
    make_topic(config, topics[0], [[5, 1], [1, 5], [5, 2], [3, 4]], megabytes=0.3)
    make_topic(config, topics[1], [[5, 3, 1], [2, 5, 4]], megabytes=0.3)
    conf = {"broker_ids": [DRAINED], "dry_run": False, "throttle_bytes_per_sec": 5_000_000, "max_moves": 4,
            "max_moves_per_broker": 2, "topic_include": [re.escape(unique_topic) + "-[ab]"], "partial_drain": True}

    run_id = trigger(api, conf)
    detail = wait_for_approval_request(api, home, run_id)
    assert "replica moves" in detail["body"] and "Open the plan report" in detail["body"]
    assert "Pre-flight against the cluster now" in detail["body"] and "Every move can run as planned." in detail["body"]
    assert ti_state(api, run_id, "execute") in (None, "none", "scheduled", "queued")  # nothing submitted yet

    # the browser: logged in as the UI does it (the JWT in Airflow's "_token" cookie); the approval form first
    browser.call("Network.setCookie", name="_token", value=api.token, url=api.url, path="/")
    browser.goto(f"{api.url}/dags/{DAG_ID}/runs/{run_id}/tasks/approve/required_actions")
    browser.wait_for("document.body.innerText.includes('Pre-flight against the cluster now') && "
                     "[...document.querySelectorAll('button')].some(b => b.textContent.trim() === 'Approve')",
                     what="the approval form with the plan's summary, its pre-flight and the Approve button", timeout=90)
    approve_shot = doc_screenshot(browser, tmp_path, "first-decommission-approve.png")
    browser.goto(f"{api.url}/dags/{DAG_ID}/runs/{run_id}/tasks/plan")
    # the task instance's "Details" tab holds its "Extra Links"
    browser.wait_for("(() => { const t = [...document.querySelectorAll('a, button')].find(e => e.textContent.trim() "
                     "=== 'Details'); if (t) { t.click(); } return !!t; })()", what="the task's Details tab")
    href = browser.wait_for(
        "(() => { const a = [...document.querySelectorAll('a')].find(e => e.textContent.trim() === 'Plan report');"
        " return a && a.href; })()", what="the 'Plan report' extra link on the plan task's page", timeout=90)
    assert href.startswith(f"{api.url}/kafka-reassign/report/{DAG_ID}/")
    shot = doc_screenshot(browser, tmp_path, "first-decommission-plan-task.png")
    browser.eval("(() => { const a = [...document.querySelectorAll('a')].find(e => e.textContent.trim() === "
                 "'Plan report'); a.removeAttribute('target'); a.click(); })()")
    browser.wait_for("location.href.includes('/kafka-reassign/report/') && document.readyState === 'complete'",
                     what="the report opened from the link")
    text = browser.eval("document.body.innerText")
    assert "replica moves" in text.lower()
    assert browser.eval("[...document.images].filter(i => i.complete && i.naturalWidth > 0).length") >= 5
    browser.eval("window.scrollTo(0, 0)")
    report_shot = doc_screenshot(browser, tmp_path, "first-decommission-report.png")
    with capsys.disabled():
        print(f"\nscreenshots: {approve_shot} {shot} {report_shot}")
    # the same route without Airflow's login is refused
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(href, timeout=30)  # noqa: S310
    assert refused.value.code in (401, 403)

    answer(api, run_id, "Approve")
    assert wait_for_run(api, run_id) == "success"
    assert not any(DRAINED in r for r in assignment(sandbox, topics).values())
    assert ti_state(api, run_id, "verify_drained") == "success"
    assert reopen_cordoned_brokers(config) == [DRAINED]  # the finished drain left it cordoned: a re-commission

    # a rejected plan: nothing is submitted
    other = [f"{unique_topic}-c"]
    make_topic(config, other[0], [[5, 1], [1, 5]], megabytes=0.1)
    before = assignment(sandbox, other)
    rejected = trigger(api, {**conf, "topic_include": [re.escape(unique_topic) + "-c"]})
    wait_for_approval_request(api, home, rejected)
    answer(api, rejected, "Reject")
    wait_for_run(api, rejected)
    states = {t: ti_state(api, rejected, t) for t in ("approve", "execute", "restore_cordons")}
    assert states["execute"] == "skipped" and states["restore_cordons"] == "success", (
        f"{states}; the approve task's log: {log_tail(home, rejected, 'approve')}")
    assert assignment(sandbox, other) == before
    assert reopen_cordoned_brokers(config) == []  # the rejected plan's cordon was taken back (restore_cordons)
