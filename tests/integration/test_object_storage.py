"""Plans and run state on a REAL S3-compatible store (S3Proxy from Maven Central, started once per session).

What production Airflow looks like: the workers and the triggerer share no disk, so everything a task needs
from another one travels through the object store (and the cluster). Here each DAG run or task runs in its own
process with its own working directory, temporary directory and AIRFLOW_HOME (one metadata database, as in
production); the directories of one are deleted before the next starts, so nothing can be read from them.

* the decommission example DAG, unchanged, with plans on S3 (the ``akr_plan_storage`` Variable);
* the execute task SIGKILLed mid-run on "worker A", A's directories deleted, retried on "worker B": it resumes
  from the cluster and the store, submits nothing twice, and every throttle config ends exactly as before;
* a decommission (its plan task cordons broker 5, the backup on S3) whose execute is SIGKILLed with a move in flight
  on worker A, then cancelled and rolled back on worker B (``take_over_from`` the dead run): every broker's dynamic
  configs (cordons, throttle rates) exactly the dump before, every partition on its replicas before;
* a second run of the same plan from another DAG run is refused while the first holds the plan's lease;
* (a deferrable wait whose trigger reads the plan from the store only: test_stack.py, in the stack's triggerer);
* bad input: a wrong secret, a missing bucket, an unreachable endpoint, a plan URI with no plan.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from dagrun import FAST_EXECUTION_API
from kafka_helpers import (
    TI,
    dynamic_broker_configs,
    make_topic,
    plan_tasks_in_process,
    put_plan,
    replicas,
    throttles,
    wait_until,
)

from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.kafka.workload import produce
from airflow_kafka_reassign.plan_storage import ObjectStore
from airflow_kafka_reassign.sandbox.objectstore import ObjectStoreSandbox

STORAGE_CONN_ID = "akr_plans"
EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"

RUNNER = FAST_EXECUTION_API + '''
import json, sys, importlib.util
from datetime import datetime
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session

spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
dag = next(v for v in vars(module).values() if type(v).__name__ == "DAG")
when = datetime.fromisoformat(sys.argv[2])
run = dag.test(run_after=when, logical_date=when, run_conf=json.loads(sys.argv[3]))  # the same run_id: a retry
with create_session() as session:
    tis = {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}
    durations = {ti.task_id: ti.duration for ti in run.get_task_instances(session=session)}
    rows = session.query(XComModel).filter_by(dag_id=dag.dag_id, run_id=run.run_id).all()
    xcom = {f"{r.task_id}.{r.key}": XComModel.deserialize_value(r) for r in rows}
print("DAG-RESULT " + json.dumps({"state": str(run.state), "run_id": run.run_id, "tis": tis, "xcom": xcom,
                                  "durations": durations}, default=str))
'''


@pytest.fixture(scope="session")
def s3_env(airflow_home, object_store, tmp_path_factory):
    """The session's Airflow environment plus the ``akr_plans`` aws connection to the store."""
    return {**airflow_home, f"AIRFLOW_CONN_{STORAGE_CONN_ID.upper()}": object_store.airflow_connection(),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": _db_url(airflow_home)}


def _db_url(env):
    out = subprocess.run([str(Path(sys.executable).with_name("airflow")), "config", "get-value", "database",
                          "sql_alchemy_conn"], env=env, capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip()


class Worker:
    """A process with its own working, temporary and AIRFLOW_HOME directories (one metadata database)."""

    def __init__(self, base: Path, name: str, env: dict[str, str]) -> None:
        self.root = base / name
        self.cwd, self.tmp, self.home = self.root / "cwd", self.root / "tmp", self.root / "airflow-home"
        for d in (self.cwd, self.tmp, self.home):
            d.mkdir(parents=True)
        self.env = {**env, "TMPDIR": str(self.tmp), "AIRFLOW_HOME": str(self.home),
                    "AKR_OUTPUT_DIR": str(self.root / "must-stay-unused"), "PYTHONUNBUFFERED": "1"}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = base / f"{name}.log"

    def start(self, dag_file: Path, logical_date: str, conf: dict | None = None) -> Worker:
        self._out = self.log_path.open("w")
        self.proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(dag_file), logical_date, json.dumps(conf or {})],
                                     cwd=self.cwd, env=self.env, stdout=self._out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        return self

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def result(self, timeout: float = 600) -> dict:
        assert self.proc is not None
        try:
            self.proc.wait(timeout)
        finally:
            self._out.close()
        lines = [line for line in self.log.splitlines() if line.startswith("DAG-RESULT ")]
        assert lines, f"no result (exit {self.proc.returncode}):\n{self.log[-4000:]}"
        return json.loads(lines[-1].removeprefix("DAG-RESULT "))

    def wait_for_log(self, text: str, count: int = 1, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while self.log.count(text) < count:
            assert self.proc is not None and self.proc.poll() is None, f"ended before {text!r}:\n{self.log[-4000:]}"
            assert time.monotonic() < deadline, f"no {text!r} x{count} in {timeout:g} s:\n{self.log[-4000:]}"
            time.sleep(0.2)

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, 9)
        self.proc.wait(30)
        self._out.close()

    def remove_local_dirs(self) -> None:
        """What a worker that is gone leaves: nothing. ``must-stay-unused`` must never have been created."""
        assert not (self.root / "must-stay-unused").exists(), "a task wrote plan files to the worker's disk"
        leftovers = sorted(p.name for p in self.tmp.iterdir() if p.name.startswith("akr-"))
        shutil.rmtree(self.root)
        assert not leftovers, f"the task left local plan files behind: {leftovers}"


def s3_keys(store: ObjectStoreSandbox, prefix: str) -> list[str]:
    data = Path(store.state["data_dir"]) / store.bucket
    return sorted(str(p.relative_to(data)) for p in (data / prefix).rglob("*") if p.is_file())


@pytest.fixture
def admin(idle_admin):
    return idle_admin


def write_dag(env: dict[str, str], dag_id: str, body: str) -> Path:
    path = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / f"{dag_id}.py"
    path.write_text(textwrap.dedent(f'''
        from datetime import datetime
        from airflow.sdk import DAG
        from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
        from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

        with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    ''') + textwrap.indent(textwrap.dedent(body), "    "))
    return path


def moves(topic: str, *spec: tuple[tuple[int, ...], tuple[int, ...]]) -> ReassignmentPlan:
    return ReassignmentPlan(moves=tuple(Move(topic=topic, partition=i, current_replicas=c, target_replicas=t)
                                        for i, (c, t) in enumerate(spec)))


# -- the example DAG with plans on S3 ------------------------------------------------------------------------

@pytest.mark.parametrize("storage", ["s3", "local"])
def test_decommission_example_with_plans_on_s3_reads_nothing_from_a_worker_disk(
        sandbox, s3_env, object_store, admin, unique_topic, tmp_path, storage):
    """The same example DAG with plans on S3 and (for comparison, its task durations printed) on local disk."""
    config = sandbox.client_config()
    for i in range(2):
        make_topic(config, f"{unique_topic}-{i}", [[1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 1]], megabytes=0.3)
    before = throttles(admin, [f"{unique_topic}-{i}" for i in range(2)])
    dag = Path(s3_env["AIRFLOW__CORE__DAGS_FOLDER"]) / "kafka_decommission_brokers.py"
    shutil.copyfile(EXAMPLES / dag.name, dag)
    env = dict(s3_env)
    if storage == "s3":
        env.update({"AIRFLOW_VAR_AKR_PLAN_STORAGE": f"s3://{object_store.bucket}/airflow",
                    "AIRFLOW_VAR_AKR_STORAGE_CONN_ID": STORAGE_CONN_ID})
    worker = Worker(tmp_path, "worker", env)
    if storage == "local":
        worker.env["AKR_OUTPUT_DIR"] = str(tmp_path / "local-plans")
    started = time.monotonic()
    result = worker.start(dag, "2026-11-24T01:00:00+00:00" if storage == "s3" else "2026-11-24T01:30:00+00:00", {
        "broker_ids": [5], "dry_run": False, "require_approval": False, "throttle_bytes_per_sec": 5_000_000,
        "topic_include": [f"{unique_topic}-.*"], "partial_drain": True}).result()
    elapsed = time.monotonic() - started
    assert result["state"] == "success", worker.log[-5000:]
    for i in range(2):
        assert all(5 not in r for r in replicas(admin, f"{unique_topic}-{i}"))
    assert throttles(admin, [f"{unique_topic}-{i}" for i in range(2)]) == before
    times = {k: round(float(result["durations"][k]), 1) for k in ("plan", "execute", "wait")}
    print(f"\ndecommission example, plans on {storage}: {elapsed:.1f} s in all; task durations {times}")
    if storage == "local":
        return
    plan_uri = result["xcom"]["plan.return_value"]["plan_uri"]
    assert plan_uri.startswith(f"s3://{object_store.bucket}/airflow/kafka_decommission_brokers/")
    worker.remove_local_dirs()  # no plan file was ever on the worker's disk
    prefix = plan_uri.removeprefix(f"s3://{object_store.bucket}/").removesuffix("/plan")
    keys = s3_keys(object_store, prefix)
    for name in ("plan/plan.json", "plan/rollback.json", "plan/metrics.json", "snapshot/partitions.parquet"):
        assert name in [k.removeprefix(prefix + "/") for k in keys], keys
    assert any("/run/journal/" in k for k in keys) and any(k.endswith("/run/lease.json") for k in keys)


# -- kill on worker A, retry on worker B -----------------------------------------------------------------------

def test_execute_killed_on_one_worker_resumes_on_another_from_the_store_only(
        sandbox, s3_env, object_store, admin, unique_topic, tmp_path):
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2], [2, 3], [3, 4]])
    # only the second move must still copy when the kill comes (2 MB: ~20 s at 100 kB/s); the others take ~2 s
    for partition, megabytes in ((0, 0.2), (1, 2), (2, 0.2)):
        produce(config, unique_topic, partition=partition, megabytes=megabytes)
    before = throttles(admin, [unique_topic])
    plan = moves(unique_topic, ((1, 2), (3, 2)), ((2, 3), (4, 3)), ((3, 4), (5, 4)))
    plan_uri = put_plan(object_store, f"kill-{unique_topic}", plan, tmp_path)
    dag = write_dag(s3_env, "akr_s3_kill", f'''
        ExecuteReassignmentOperator(
            task_id="execute", plan_uri={plan_uri!r}, storage_conn_id={STORAGE_CONN_ID!r}, max_moves=1,
            order="plan", throttle_bytes_per_sec=100_000, poll_interval=1,
        )
    ''')
    a = Worker(tmp_path, "worker-a", s3_env).start(dag, "2026-11-24T02:00:00+00:00")
    a.wait_for_log("submitting 1 move", count=2)  # the second move of three goes out, throttled
    # the second "submitted" entry (the journal also holds "plan-executed"): the kill comes after it is written
    wait_until(lambda: sum(json.loads(e).get("event") == "submitted"
                           for e in _journal(object_store, f"kill-{unique_topic}/plan/run")) >= 2,
               what="the second submission in the run's journal", timeout=60)
    a.kill()
    a.remove_local_dirs()
    assert throttles(admin, [unique_topic]) != before  # a kill -9 leaves them: the retry restores them
    state_keys = s3_keys(object_store, f"kill-{unique_topic}/plan/run")
    assert f"kill-{unique_topic}/plan/run/throttle-backup.json" in state_keys

    b = Worker(tmp_path, "worker-b", s3_env).start(dag, "2026-11-24T02:00:00+00:00")  # the same DAG run: a retry
    result = b.result()
    assert result["state"] == "success", b.log[-4000:]
    assert "took over the plan's lease" in b.log
    submitted = [json.loads(k) for k in _journal(object_store, f"kill-{unique_topic}/plan/run")]
    sent = [TopicPartition(t, p) for entry in submitted for t, p, _ in entry.get("submitted", [])]
    assert sorted(sent) == sorted(plan.partitions), sent  # each partition submitted exactly once, over both workers
    assert replicas(admin, unique_topic) == [(3, 2), (4, 3), (5, 4)]
    assert throttles(admin, [unique_topic]) == before  # exactly as before the run
    assert f"kill-{unique_topic}/plan/run/throttle-backup.json" not in s3_keys(object_store, f"kill-{unique_topic}")
    b.remove_local_dirs()


def test_a_decommission_killed_mid_batch_then_cancelled_on_another_worker_gives_its_cordons_back(
        sandbox, s3_env, object_store, admin, unique_topic, tmp_path, monkeypatch):
    """The decommission's plan task cordons broker 5 (its backup on the plan's run state on S3), the execute task is
    SIGKILLed with a move in flight on worker A, and a cancel with rollback on worker B (the run state from the store
    only) puts everything back: every broker's dynamic configs (cordoned.log.dirs, the throttle rates) are exactly
    the dump before, each partition on its replicas before (order too), no throttle left."""
    from airflow_kafka_reassign.core.records.lease import run_of
    from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator

    config = sandbox.client_config()
    make_topic(config, unique_topic, [[5, 1], [2, 5]])
    # partition 0 (one record) moves in about a second, before the kill; partition 1 is still in flight when worker B
    # cancels it (B's Airflow start-up: about 35 s on a loaded machine). A throttle this low is leaky: the leader
    # sends a whole fetch (up to replica.fetch.max.bytes, 1 MiB) whenever the rate over the quota window (11 s) is
    # under it, so about 1 MiB per 11 s whatever the rate below that (2 MB took under 37 s): 10 MB, about 110 s
    produce(config, unique_topic, partition=0, megabytes=0.01)
    produce(config, unique_topic, partition=1, megabytes=10)
    before = replicas(admin, unique_topic)
    configs = dynamic_broker_configs(config)
    assert not any(c.get("cordoned.log.dirs") for c in configs.values()), configs
    topic_throttles = throttles(admin, [unique_topic])

    # the plan task, in this process (the planner the Spark job runs, without its start-up), writing to S3: it
    # cordons broker 5 before its snapshot and backs the previous value up on the plan's run state there
    plan_tasks_in_process(monkeypatch, config)
    monkeypatch.setenv(f"AIRFLOW_CONN_{STORAGE_CONN_ID.upper()}", object_store.airflow_connection())
    prefix = f"decom-kill-{unique_topic}"
    out = PlanReassignmentOperator(
        task_id="plan", goal="remove-brokers", brokers=[5], topic_include=[unique_topic], partial_drain=True,
        output_uri=f"s3://{object_store.bucket}/{prefix}", storage_conn_id=STORAGE_CONN_ID).execute({"ti": TI()})
    plan_uri = out["plan_uri"]
    assert out["partitions_moved"] == 2, out
    run_keys = s3_keys(object_store, f"{prefix}/plan/run")
    assert f"{prefix}/plan/run/cordon-backup.json" in run_keys, run_keys
    assert dynamic_broker_configs(config)[5].get("cordoned.log.dirs") == "*"

    dag = write_dag(s3_env, "akr_s3_decom_kill", f'''
        ExecuteReassignmentOperator(
            task_id="execute", plan_uri={plan_uri!r}, storage_conn_id={STORAGE_CONN_ID!r}, max_moves=1,
            order="smallest-first", throttle_bytes_per_sec=10_000, poll_interval=1,
        )
    ''')
    a = Worker(tmp_path, "worker-a", s3_env).start(dag, "2026-11-24T07:00:00+00:00")
    p1 = TopicPartition(unique_topic, 1)
    # the second batch (partition 1, the large one) in the journal and in flight on the cluster: kill mid-batch
    wait_until(lambda: _events(object_store, f"{prefix}/plan/run").count("submitted") >= 2
               and p1 in admin.list_reassignments(), what="the second move journalled and in flight", timeout=120)
    a.kill()
    a.remove_local_dirs()
    assert replicas(admin, unique_topic)[0] != before[0]  # partition 0 moved off broker 5 before the kill
    killed = dynamic_broker_configs(config)
    assert killed[5].get("cordoned.log.dirs") == "*" and killed != configs  # the cordon and the throttles stay
    run_keys = s3_keys(object_store, f"{prefix}/plan/run")
    assert {f"{prefix}/plan/run/cordon-backup.json", f"{prefix}/plan/run/throttle-backup.json"} <= set(run_keys)
    lease = json.loads((Path(object_store.state["data_dir"]) / object_store.bucket / prefix / "plan/run/lease.json")
                       .read_text())
    dead_run = run_of(lease["scope"])  # the operator confirmed that run is dead: its worker is gone

    cancel = write_dag(s3_env, "akr_s3_decom_cancel", f'''
        from airflow_kafka_reassign.operators.cancel import CancelReassignmentOperator
        CancelReassignmentOperator(
            task_id="cancel", plan_uri={plan_uri!r}, storage_conn_id={STORAGE_CONN_ID!r}, rollback=True,
            throttle_bytes_per_sec=5_000_000, poll_interval=1, take_over_from={dead_run!r}, retries=0,
        )
    ''')
    b = Worker(tmp_path, "worker-b", s3_env).start(cancel, "2026-11-24T07:30:00+00:00")
    result = b.result()
    assert result["state"] == "success", b.log[-5000:]
    assert "took over the plan's lease at once from DAG run" in b.log
    summary = result["xcom"]["cancel.return_value"]
    assert summary["cancelled_partitions"] == [str(p1)] and summary["cordons_restored"] is True, summary
    assert summary["rollback"] is not None, summary

    assert admin.list_reassignments() == {}
    after = replicas(admin, unique_topic)
    assert [len(r) for r in after] == [len(r) for r in before]  # RF unchanged
    assert after == before, after  # every partition on its replicas before, in their order
    assert throttles(admin, [unique_topic]) == topic_throttles  # no throttle left, topic or broker
    dump = json.dumps(dynamic_broker_configs(config), sort_keys=True)
    assert dump == json.dumps(configs, sort_keys=True), dump  # the config dump, byte for byte as before
    events = _events(object_store, f"{prefix}/plan/run")
    assert events[0] == "cordoned" and "cordons-restored" in events, events
    left = s3_keys(object_store, f"{prefix}/plan/run")
    assert not {f"{prefix}/plan/run/cordon-backup.json", f"{prefix}/plan/run/throttle-backup.json"} & set(left), left
    b.remove_local_dirs()


def _journal(store: ObjectStoreSandbox, prefix: str) -> list[str]:
    data = Path(store.state["data_dir"]) / store.bucket / prefix / "journal"
    return [p.read_text() for p in sorted(data.iterdir())] if data.is_dir() else []


def _events(store: ObjectStoreSandbox, prefix: str) -> list[str]:
    """The journal's events in order; an entry the store is still writing (an empty file on its disk) is left out."""
    return [json.loads(e).get("event") for e in _journal(store, prefix) if e.strip()]


# -- one driver per plan ------------------------------------------------------------------------------------

def test_a_second_dag_run_of_the_same_plan_is_refused_naming_the_holder(
        sandbox, s3_env, object_store, admin, unique_topic, tmp_path):
    make_topic(sandbox.client_config(), unique_topic, [[1, 2], [2, 3]], megabytes=2)
    before = throttles(admin, [unique_topic])
    plan = moves(unique_topic, ((1, 2), (3, 2)), ((2, 3), (4, 3)))
    plan_uri = put_plan(object_store, f"lease-{unique_topic}", plan, tmp_path)
    dag = write_dag(s3_env, "akr_s3_lease", f'''
        ExecuteReassignmentOperator(
            task_id="execute", plan_uri={plan_uri!r}, storage_conn_id={STORAGE_CONN_ID!r}, max_moves=1,
            order="plan", throttle_bytes_per_sec=200_000, poll_interval=1, retries=0,
        )
    ''')
    first = Worker(tmp_path, "first", s3_env).start(dag, "2026-11-24T03:00:00+00:00")
    first.wait_for_log("submitting 1 move")
    # the first run is frozen while it holds the lease, so the second surely meets it however slowly it starts
    os.killpg(first.proc.pid, signal.SIGSTOP)
    try:
        second = Worker(tmp_path, "second", s3_env).start(dag, "2026-11-24T04:00:00+00:00")  # another DAG run
        refused = second.result()
    finally:
        os.killpg(first.proc.pid, signal.SIGCONT)
    assert refused["state"] == "failed" and refused["tis"]["execute"] == "failed"
    assert "is held by DAG run " in second.log and "(dag akr_s3_lease / run " in second.log
    assert "2026-11-24T03:00:00" in second.log.split("is held by DAG run")[1][:80]  # the holder's run
    assert "this run can take over once it expires, or at once with take_over_from=" in second.log
    assert "submitting" not in second.log  # nothing sent by the refused run
    done = first.result()
    assert done["state"] == "success", first.log[-4000:]
    assert replicas(admin, unique_topic) == [(3, 2), (4, 3)]
    assert throttles(admin, [unique_topic]) == before


# -- bad input -----------------------------------------------------------------------------------------------

def _conn(object_store: ObjectStoreSandbox, **change) -> str:
    doc = json.loads(object_store.airflow_connection())
    if "password" in change:
        doc["password"] = change["password"]
    if "endpoint_url" in change:
        doc["extra"]["endpoint_url"] = change["endpoint_url"]
    return json.dumps(doc)


#: each bad input, and what its task's log must say
BAD_STORAGE = {
    "wrong_secret": "access denied",
    "missing_bucket": "the bucket 'no-such-bucket' does not exist",
    "unreachable": "the object store did not answer: check the endpoint",
    "no_plan": "no plan there",
}


def task_sections(log: str) -> dict[str, str]:
    """The log of a ``dag.test()`` run split by task (it runs one task at a time): ``{task_id: its lines}``."""
    parts = re.split(r"\[DAG TEST\] starting task_id=(\w+)", log)
    return {task: text for task, text in zip(parts[1::2], parts[2::2], strict=True)}


def test_bad_storage_input_fails_the_task_naming_the_uri_never_the_secret(
        sandbox, s3_env, object_store, admin, unique_topic, tmp_path):
    """Four bad inputs, a task each in one DAG run (one Airflow start-up for the four): a wrong secret, a missing
    bucket, an unreachable endpoint, no plan at the URI. Each task fails naming the problem and the URI; no secret
    in the log; nothing submitted."""
    make_topic(sandbox.client_config(), unique_topic, [[1, 2]])
    plan_uri = put_plan(object_store, f"bad-{unique_topic}", moves(unique_topic, ((1, 2), (3, 2))), tmp_path)
    env, uris, tasks = dict(s3_env), {}, []
    for case in BAD_STORAGE:
        conn, uris[case] = object_store.airflow_connection(), plan_uri
        if case == "wrong_secret":
            conn = _conn(object_store, password="not-the-secret-" + "x" * 20)
        elif case == "missing_bucket":
            uris[case] = plan_uri.replace(object_store.bucket, "no-such-bucket")
        elif case == "unreachable":
            conn = _conn(object_store, endpoint_url="http://127.0.0.1:9")
        else:
            uris[case] = plan_uri.replace("/plan", "/nothing-here")
        env[f"AIRFLOW_CONN_AKR_PLANS_{case.upper()}"] = conn
        tasks.append(f"ExecuteReassignmentOperator(task_id={case!r}, plan_uri={uris[case]!r}, "
                     f"storage_conn_id={'akr_plans_' + case!r}, storage_timeout_s=5, retries=0)")
    dag = write_dag(env, "akr_s3_bad_input", "\n".join(tasks))
    worker = Worker(tmp_path, "worker", env)
    result = worker.start(dag, "2026-11-24T06:00:00+00:00").result()
    log = worker.log
    assert result["state"] == "failed", log[-3000:]
    sections = task_sections(log)
    for case, expected in BAD_STORAGE.items():
        assert result["tis"][case] == "failed", (case, result["tis"])
        assert expected in sections[case], (case, sections[case][-3000:])
        assert uris[case].rsplit("/", 1)[0] in sections[case], case  # the URI is named
        print(f"\n{case}: the task failed after {float(result['durations'][case]):.1f} s")
    _, secret = object_store.credentials()
    assert secret not in log and "not-the-secret" not in log
    assert "submitting" not in log and admin.list_reassignments() == {}
    worker.remove_local_dirs()


def test_object_store_adapter_against_the_real_store(object_store, monkeypatch):
    monkeypatch.setenv(f"AIRFLOW_CONN_{STORAGE_CONN_ID.upper()}", object_store.airflow_connection())
    store = ObjectStore(f"s3://{object_store.bucket}/adapter/run", conn_id=STORAGE_CONN_ID, timeout_s=10)
    store.write("a.json", b"1")
    assert store.read("a.json") == b"1" and store.read("missing") is None
    assert not store.write_if("a.json", b"2", None)  # exists: If-None-Match refused (412)
    data, version = store.read_versioned("a.json")
    assert store.write_if("a.json", b"3", version) and not store.write_if("a.json", b"4", version)  # stale ETag
    assert store.read("a.json") == b"3" and store.list() == ["a.json"]
    store.delete("a.json")
    assert store.list() == []


def test_heal_targets_file_on_the_real_store(object_store, monkeypatch):
    """GuardedCreatePartitions records, PlanHeal reads and prunes: the file on S3, updated by If-Match."""
    from airflow_kafka_reassign.core.maintenance.growth import read_heal_targets, update_heal_targets
    from airflow_kafka_reassign.plan_storage import heal_targets_file

    monkeypatch.setenv(f"AIRFLOW_CONN_{STORAGE_CONN_ID.upper()}", object_store.airflow_connection())
    where = heal_targets_file(f"s3://{object_store.bucket}/heal/heal-targets.json", conn_id=STORAGE_CONN_ID)
    assert read_heal_targets(where) == {}
    update_heal_targets(where, add={"orders-3": 3})
    update_heal_targets(where, add={"audit-0": 3}, remove=["orders-3"])
    assert read_heal_targets(where) == {"audit-0": 3}
