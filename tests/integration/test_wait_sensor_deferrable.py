"""WaitForReassignmentSensor in deferrable mode through a REAL triggerer process, which is killed mid-wait.

Real Airflow components run as separate processes on a fresh metadata database: an API server (the execution
API the task runner talks to), a scheduler (LocalExecutor) and a triggerer. The DAG is serialised with
``airflow dags reserialize``, triggered with ``airflow dags trigger``; the sensor submits a throttled two-move plan
(``submit_pending``, ``max_moves=1``), defers, and the trigger watches (and submits the second move) in the
triggerer. The triggerer is SIGKILLed mid-wait; a new one adopts the orphaned trigger once the old one's heartbeat
is stale, rebuilds it from its serialised kwargs, and the task still succeeds.
"""

from __future__ import annotations

import json
import secrets
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deployment import Airflow, airflow_deployment
from kafka_helpers import make_topic, wait_until, write_plan_dir

from airflow_kafka_reassign.core.models import Move, ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

DAG_ID = "wait_deferrable"

DAG = '''
from datetime import datetime
from airflow.sdk import DAG
from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    WaitForReassignmentSensor(
        task_id="wait",
        plan_uri={plan_dir!r},
        deferrable=True,
        poke_interval=2,
        timeout=600,
        submit_pending=True,
        max_moves=1,
        throttle_bytes_per_sec=500_000,
    )
'''


@pytest.fixture
def deployment(tmp_path: Path, sandbox) -> Iterator[Airflow]:
    env = {
        # a killed triggerer's triggers are adopted once its heartbeat is this old
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": sandbox.client_config(sasl=True)}),
    }
    with airflow_deployment(tmp_path / "airflow", env) as af:
        yield af


def wait_for(cond, what: str, af: Airflow, timeout: float = 240.0, every: float = 1.0):
    """:func:`wait_until`, with the scheduler's and the triggerers' log tails when it times out."""
    try:
        return wait_until(cond, what, timeout, every)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n--- scheduler\n{af.tail('scheduler')}"
                             f"\n--- triggerers\n{af.tail('triggerer-1')}\n{af.tail('triggerer-2')}") from None


def polls_logged(af: Airflow, triggerer_id: int) -> int:
    """Progress lines the sensor's trigger logged while it ran in triggerer ``triggerer_id`` (Airflow writes a
    trigger's log to ``<task log>.trigger.<triggerer job id>.log``, a line at a time)."""
    return sum(p.read_text(errors="replace").count("| moves ")
               for p in (af.home / "logs").rglob(f"*task_id=wait*/*.trigger.{triggerer_id}.log"))


@pytest.mark.timeout(900)
def test_deferred_wait_survives_a_killed_triggerer(sandbox, deployment, unique_topic, tmp_path):
    af = deployment
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2], [2, 3]], megabytes=8)
    plan = ReassignmentPlan(moves=(
        Move(topic=unique_topic, partition=0, current_replicas=(1, 2), target_replicas=(4, 2)),
        Move(topic=unique_topic, partition=1, current_replicas=(2, 3), target_replicas=(2, 5)),
    ))
    plan_dir = write_plan_dir(tmp_path / "plan", plan)
    with KafkaClusterAdmin(config) as admin:
        throttles_before = admin.describe_throttles([1, 2, 3, 4, 5], [unique_topic])
    (af.home / "dags" / f"{DAG_ID}.py").write_text(textwrap.dedent(DAG.format(dag_id=DAG_ID, plan_dir=str(plan_dir))))
    af.cli("dags", "reserialize")
    af.cli("dags", "unpause", DAG_ID)
    run_id = f"deferrable-{secrets.token_hex(3)}"
    af.cli("dags", "trigger", DAG_ID, "--run-id", run_id)

    def ti_state():
        rows = af.query("select state from task_instance where dag_id=? and run_id=? and task_id='wait'", DAG_ID, run_id)
        return rows[0][0] if rows else None

    wait_for(lambda: ti_state() == "deferred", "the sensor to defer", af)
    deferred_at = time.monotonic()
    first = wait_for(lambda: af.query("select t.id, t.triggerer_id from trigger t join task_instance ti "
                                      "on ti.trigger_id = t.id where ti.run_id=?", run_id)[0][1] and
                     af.query("select t.id, t.triggerer_id from trigger t join task_instance ti "
                              "on ti.trigger_id = t.id where ti.run_id=?", run_id)[0], "a triggerer to take the trigger", af)
    # it polls the plan from the first triggerer (progress lines in that triggerer's log of the trigger) before
    # the kill: the second triggerer then takes over a wait under way, not one that never started
    wait_for(lambda: polls_logged(af, first[1]) >= 2, "the first triggerer to poll the plan twice", af)
    af.kill("triggerer-1")  # SIGKILL: no clean shutdown, the trigger stays assigned to a dead triggerer
    killed_at = time.monotonic()
    with KafkaClusterAdmin(config) as admin:
        in_flight = admin.list_reassignments()
    still_running = ti_state()
    assert still_running == "deferred", f"the task should still be deferred after the kill, not {still_running}"
    assert any(tp.topic == unique_topic for tp in in_flight), "the plan finished before the triggerer was killed"

    af.start("triggerer-2", "triggerer")
    wait_for(lambda: (af.query("select triggerer_id from trigger where id=?", first[0]) or [(None,)])[0][0]
             not in (None, first[1]) or ti_state() not in ("deferred",), "the new triggerer to adopt the trigger", af)
    adopted_at = time.monotonic()
    final = wait_for(lambda: (s := af.query("select state from dag_run where dag_id=? and run_id=?", DAG_ID, run_id)[0][0])
                     in ("success", "failed") and s, "the DAG run to finish", af, timeout=400)
    done_at = time.monotonic()

    logs = sorted((af.home / "logs").rglob("*task_id=wait*/*"))
    text = "\n".join(p.read_text(errors="replace") for p in logs if p.is_file())
    assert final == "success", f"run {final}:\n{text[-5000:]}\n{af.tail('triggerer-2')}"

    xcom = af.query("select value from xcom where dag_id=? and run_id=? and task_id='wait' and key='return_value'",
                    DAG_ID, run_id)
    summary = json.loads(xcom[0][0])
    assert summary["status"] == "complete" and summary["done"] == 2 and summary["finish"]["throttles_restored"] == "yes"
    with KafkaClusterAdmin(config) as admin:
        parts = {p.partition: p.replicas for p in admin.snapshot(topics=[unique_topic]).partitions}
        assert parts == {0: (4, 2), 1: (2, 5)}
        assert admin.list_reassignments() == {}
        assert admin.describe_throttles([1, 2, 3, 4, 5], [unique_topic]) == throttles_before

    progress = [line for line in text.splitlines() if "| moves " in line]
    trigger_logs = [p for p in logs if "trigger" in p.name]
    print(f"\ndeferred after launch; killed the triggerer {killed_at - deferred_at:.0f} s after deferral; adopted "
          f"{adopted_at - killed_at:.0f} s after the kill; run finished {done_at - adopted_at:.0f} s later; "
          f"{len(progress)} progress lines in {len(logs)} log file(s) ({len(trigger_logs)} from triggerers)")
    for line in progress[-3:]:
        print(line[:220])
    assert progress and any("2/2 done" in line for line in progress)
    # both triggerers logged progress lines into the task's log: the second rebuilt the wait from the kwargs
    assert len(trigger_logs) >= 2, [p.name for p in logs]
    assert all("| moves " in p.read_text(errors="replace") for p in trigger_logs)
