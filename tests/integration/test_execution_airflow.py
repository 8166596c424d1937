"""ExecuteReassignmentOperator and CancelReassignmentOperator as REAL Airflow task runs on the sandbox.

Each DAG runs with ``dag.test()`` in a subprocess (the ``airflow_home`` fixture: a migrated metadata
database, the ``kafka_default`` connection over SASL). A task is killed mid-plan (SIGKILL: no
on_kill; SIGTERM: Airflow's task runner calls on_kill) and the DAG run is retried: ``dag.test()``
with the same logical date clears the task and runs it again. The engine's rules are covered in
detail by test_execution_engine.py; these prove the operators end to end.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from dagrun import FAST_EXECUTION_API
from kafka_helpers import make_topic, replicas, throttles

from airflow_kafka_reassign.core.records.plan_io import METRICS_FILE, PLAN_FILE, ROLLBACK_FILE
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import produce

RUNNER = FAST_EXECUTION_API + '''
import json, sys, importlib.util
from datetime import datetime
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session

spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
when = datetime.fromisoformat(sys.argv[2])
# run_after fixes the run_id: running the file again is a retry of the same DAG run (as Airflow's retries are),
# which takes over the plan's lease at once
run = module.dag.test(run_after=when, logical_date=when)
with create_session() as session:
    tis = {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}
    rows = session.query(XComModel).filter_by(dag_id=module.dag.dag_id, run_id=run.run_id).all()
    xcom = {f"{r.task_id}.{r.key}": XComModel.deserialize_value(r) for r in rows}
print("DAG-RESULT " + json.dumps({"state": str(run.state), "run_id": run.run_id, "tis": tis, "xcom": xcom}, default=str))
'''

HEADER = '''
from datetime import datetime
from airflow.sdk import DAG
from airflow_kafka_reassign.operators.cancel import CancelReassignmentOperator
from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
'''

LOGICAL_DATE = "2026-11-22T02:00:00+00:00"
_SUBMITTED = re.compile(r'submitting \d+ move\(s\) \([^)]*\): (\{"version":1,"partitions":.*)')


class DagRun:
    """One ``dag.test()`` of a DAG file in its own process group (so it can be killed mid-task)."""

    def __init__(self, env: dict[str, str], dag_file: Path, log: Path) -> None:
        self.log_path = log
        self._out = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(dag_file), LOGICAL_DATE],
            env={**env, "PYTHONUNBUFFERED": "1"}, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True,
        )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, pattern: str, count: int = 1, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while len(re.findall(pattern, self.log)) < count:
            assert self.proc.poll() is None, f"the DAG run ended before {pattern!r} x{count}:\n{self.log[-4000:]}"
            assert time.monotonic() < deadline, f"no {pattern!r} x{count} in {timeout:g} s:\n{self.log[-4000:]}"
            time.sleep(0.2)

    def kill(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def result(self, timeout: float = 600) -> dict:
        try:
            self.proc.wait(timeout)
        finally:
            self._out.close()
        lines = [line for line in self.log.splitlines() if line.startswith("DAG-RESULT ")]
        assert lines, f"no result from the DAG run (exit {self.proc.returncode}):\n{self.log[-4000:]}"
        return json.loads(lines[-1].removeprefix("DAG-RESULT "))

    def submitted(self) -> list[TopicPartition]:
        """Every partition the task submitted, from the engine's log lines (exact requests)."""
        decoder = json.JSONDecoder()  # the request JSON, then the log line's decoration
        return [TopicPartition(p["topic"], p["partition"])
                for text in _SUBMITTED.findall(self.log) for p in decoder.raw_decode(text)[0]["partitions"]]


def run_dag(env: dict[str, str], dag_file: Path, log: Path) -> tuple[dict, DagRun]:
    run = DagRun(env, dag_file, log)
    return run.result(), run


def write_dag(env: dict[str, str], dag_id: str, body: str) -> Path:
    path = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / f"{dag_id}.py"
    path.write_text(textwrap.dedent(HEADER.format(dag_id=dag_id)) + textwrap.indent(textwrap.dedent(body), "    "))
    return path


def write_plan(path: Path, plan: ReassignmentPlan, *, rollback: bool) -> Path:
    path.mkdir(parents=True)
    (path / PLAN_FILE).write_text(plan.model_dump_json())
    if rollback:
        (path / ROLLBACK_FILE).write_text(plan.rollback().model_dump_json())
    (path / METRICS_FILE).write_text(json.dumps({"format_version": 1}))
    return path


def moves(topic: str, *spec: tuple[tuple[int, ...], tuple[int, ...]]) -> ReassignmentPlan:
    return ReassignmentPlan(moves=tuple(Move(topic=topic, partition=i, current_replicas=c, target_replicas=t)
                                        for i, (c, t) in enumerate(spec)))


@pytest.fixture
def admin(sandbox):
    with KafkaClusterAdmin(sandbox.client_config(), timeout_s=20) as a:
        yield a


def test_execute_as_a_task_run_throttles_elects_leaders_writes_the_rollback_and_pushes_xcom(
        sandbox, airflow_home, admin, unique_topic, tmp_path):
    make_topic(sandbox.client_config(), unique_topic, [[1, 2], [2, 3]], megabytes=1)
    before = throttles(admin, [unique_topic])
    plan = moves(unique_topic, ((1, 2), (3, 1)), ((2, 3), (4, 5)))
    plan_dir = write_plan(tmp_path / "plan", plan, rollback=False)
    dag = write_dag(airflow_home, "akr_execute_ok", f'''
        ExecuteReassignmentOperator(
            task_id="execute", plan_uri={str(plan_dir)!r}, max_moves_per_broker=1,
            throttle_bytes_per_sec="{{{{ 150000 }}}}", elect_leaders=True, poll_interval=1,
        )
    ''')
    result, _ = run_dag(airflow_home, dag, tmp_path / "run.log")
    assert result["state"] == "success", result
    summary = result["xcom"]["execute.return_value"]
    assert summary["ok"] and summary["done"] == 2 and summary["throttles_restored"] == "yes"
    # (how many elections that took is Kafka's business: the controller may already have moved a leader on its own,
    # CI saw 0; what elect_leaders promises is the end state below)
    assert isinstance(summary["elected"], int), summary
    # a second observer, a client of the test's own: every partition led by its preferred (first) replica
    from confluent_kafka.admin import AdminClient
    listed = AdminClient(sandbox.client_config()).list_topics(unique_topic, timeout=20).topics[unique_topic]
    assert {p: m.leader for p, m in listed.partitions.items()} == {0: 3, 1: 4}
    assert len(json.dumps(summary)) < 2000
    rollback = ReassignmentPlan.model_validate_json((plan_dir / ROLLBACK_FILE).read_text())
    assert [m.target_replicas for m in rollback.moves] == [(1, 2), (2, 3)]
    assert replicas(admin, unique_topic) == [(3, 1), (4, 5)]
    assert [p.leader for p in admin.snapshot(topics=[unique_topic]).partitions] == [3, 4]  # preferred leaders
    assert throttles(admin, [unique_topic]) == before


def test_a_stale_move_fails_the_task_run_with_the_diff_in_xcom_after_the_others_ran(
        sandbox, airflow_home, admin, unique_topic, tmp_path):
    make_topic(sandbox.client_config(), unique_topic, [[1, 2], [2, 3]], megabytes=0.2)
    plan = moves(unique_topic, ((1, 5), (3, 1)), ((2, 3), (4, 3)))  # the plan expected partition 0 on [1, 5]
    plan_dir = write_plan(tmp_path / "plan", plan, rollback=True)
    dag = write_dag(airflow_home, "akr_execute_stale", f'''
        ExecuteReassignmentOperator(task_id="execute", plan_uri={str(plan_dir)!r}, poll_interval=1, retries=0)
    ''')
    result, run = run_dag(airflow_home, dag, tmp_path / "run.log")
    assert result["state"] == "failed" and result["tis"]["execute"] == "failed"
    summary = result["xcom"]["execute.summary"]
    assert summary["stale_partitions"] == {f"{unique_topic}-0": {"expected": [1, 5], "actual": [1, 2]}}
    assert summary["done"] == 1
    assert replicas(admin, unique_topic) == [(1, 2), (4, 3)]
    assert "the plan expects replicas [1, 5], the cluster has [1, 2]" in run.log


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_task_killed_mid_plan_and_retried_submits_nothing_twice_and_leaves_no_throttle(
        sandbox, airflow_home, admin, unique_topic, tmp_path, sig):
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2], [2, 3], [3, 4]])
    # only the second move must still copy when the kill comes (2 MB: ~20 s at 100 kB/s); the first and the last
    # (0.2 MB) copy in about two seconds each
    for partition, megabytes in ((0, 0.2), (1, 2), (2, 0.2)):
        produce(config, unique_topic, partition=partition, megabytes=megabytes)
    before = throttles(admin, [unique_topic])
    plan = moves(unique_topic, ((1, 2), (3, 2)), ((2, 3), (4, 3)), ((3, 4), (5, 4)))
    plan_dir = write_plan(tmp_path / "plan", plan, rollback=True)
    dag = write_dag(airflow_home, f"akr_execute_kill_{sig.name.lower()}", f'''
        ExecuteReassignmentOperator(
            task_id="execute", plan_uri={str(plan_dir)!r}, max_moves=1, order="plan",
            throttle_bytes_per_sec=100_000, poll_interval=1,
        )
    ''')
    first = DagRun(airflow_home, dag, tmp_path / "first.log")
    first.wait_for_log(r"submitting 1 move", count=2)  # the second move of three is in flight
    first.kill(sig)
    if sig == signal.SIGKILL:
        first.proc.wait(30)
        assert throttles(admin, [unique_topic]) != before  # a kill -9 leaves them: the retry restores them
        assert (plan_dir / "run" / "throttle-backup.json").is_file()
    else:
        outcome = first.result(timeout=60)  # on_kill restored the throttles and the try failed (retryable)
        assert outcome["state"] == "failed" and "stopped (on_kill)" in first.log
        assert throttles(admin, [unique_topic]) == before
    # the killed try's move goes on (or is already done: on_kill lifted the throttle that slowed it)
    assert admin.list_reassignments([TopicPartition(unique_topic, 1)]) or replicas(admin, unique_topic)[1] == (4, 3)

    retry = DagRun(airflow_home, dag, tmp_path / "retry.log")
    result = retry.result()
    assert result["state"] == "success", retry.log[-3000:]
    sent = first.submitted() + retry.submitted()
    assert sorted(sent) == sorted(plan.partitions), sent  # each partition submitted exactly once
    assert retry.submitted() == [TopicPartition(unique_topic, 2)]
    assert result["xcom"]["execute.return_value"]["ok"]
    assert replicas(admin, unique_topic) == [(3, 2), (4, 3), (5, 4)]
    assert throttles(admin, [unique_topic]) == before
    assert not (plan_dir / "run" / "throttle-backup.json").exists()


def test_execute_then_cancel_with_rollback_in_one_dag_run(sandbox, airflow_home, admin, unique_topic, tmp_path):
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2], [2, 3]])
    produce(config, unique_topic, partition=0, megabytes=0.1)  # copies at once
    produce(config, unique_topic, partition=1, megabytes=3)    # still copying when the cancel comes
    before = throttles(admin, [unique_topic])
    plan = moves(unique_topic, ((1, 2), (3, 2)), ((2, 3), (4, 5)))
    plan_dir = write_plan(tmp_path / "plan", plan, rollback=True)
    dag = write_dag(airflow_home, "akr_execute_cancel", f'''
        execute = ExecuteReassignmentOperator(
            task_id="execute", plan_uri={str(plan_dir)!r}, throttle_bytes_per_sec=100_000,
            wait_for_completion=False,
        )
        cancel = CancelReassignmentOperator(
            task_id="cancel", plan_uri={str(plan_dir)!r}, rollback=True, throttle_bytes_per_sec=1_000_000,
            poll_interval=1,
        )
        execute >> cancel
    ''')
    result, _ = run_dag(airflow_home, dag, tmp_path / "run.log")
    assert result["state"] == "success", result
    assert result["xcom"]["execute.return_value"]["in_flight"] >= 1
    summary = result["xcom"]["cancel.return_value"]
    # partition 1 is still copying; partition 0 may have finished (then it is moved back) or been cancelled
    # too (then the controller may have put its original replicas back in another order: rolled back to it)
    assert f"{unique_topic}-1" in summary["cancelled_partitions"] and summary["rf_changed"] == {}
    assert summary["throttles_restored"] == "yes" and summary["rollback"]["ok"]
    assert replicas(admin, unique_topic) == [(1, 2), (2, 3)]
    assert admin.list_reassignments() == {}
    assert throttles(admin, [unique_topic]) == before
