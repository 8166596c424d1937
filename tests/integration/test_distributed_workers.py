"""Two workers, no shared disk: a real Airflow deployment where every task try is its own process.

An API server, a scheduler and a triggerer, each its own process on one metadata database
(:mod:`deployment`); the scheduler's executor (:mod:`isolated_executor`) starts every task try as
Airflow's container entry point in a fresh process with its own working directory, ``TMPDIR`` and
``AIRFLOW_HOME``, and deletes them when the try ends; the triggerer has its own too. Plans and run
state live on the sandbox's S3 store (S3Proxy), the only thing the tasks share besides the cluster.

* the decommission example DAG, unchanged, triggered as a user would (``airflow dags trigger``);
* a deferrable wait whose trigger runs in the separate triggerer and reads only the store.
"""

from __future__ import annotations

import json
import secrets
import shutil
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deployment import Airflow, airflow_deployment
from kafka_helpers import make_topic, put_plan, replicas, throttles, wait_until

from airflow_kafka_reassign.core.models import Move, ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "example_dags"
STORAGE_CONN_ID = "akr_plans"


@pytest.fixture(scope="module")
def cluster_of_workers(sandbox, object_store, tmp_path_factory) -> Iterator[tuple[Airflow, Path, Path]]:
    """The deployment, the folder of its workers' records, and the triggerer's own folder."""
    root = tmp_path_factory.mktemp("distributed")
    workers, triggerer = root / "workers", root / "triggerer"
    env = {
        "AIRFLOW__CORE__EXECUTOR": "isolated_executor.IsolatedProcessExecutor",
        "PYTHONPATH": str(HERE),
        "AKR_WORKERS_DIR": str(workers),
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": sandbox.client_config(sasl=True)}),
        f"AIRFLOW_CONN_{STORAGE_CONN_ID.upper()}": object_store.airflow_connection(),
        "AIRFLOW_VAR_AKR_PLAN_STORAGE": f"s3://{object_store.bucket}/distributed",
        "AIRFLOW_VAR_AKR_STORAGE_CONN_ID": STORAGE_CONN_ID,
    }
    with airflow_deployment(root / "airflow", env, triggerer_dir=triggerer) as af:
        yield af, workers, triggerer


def run_dag(af: Airflow, dag_id: str, conf: dict | None = None, timeout: float = 600) -> tuple[str, str]:
    """Trigger ``dag_id`` (already in the dags folder) and wait for the run to end: (run_id, state)."""
    af.cli("dags", "reserialize")
    af.cli("dags", "unpause", dag_id)
    run_id = f"distributed-{secrets.token_hex(3)}"
    af.cli("dags", "trigger", dag_id, "--run-id", run_id, "--conf", json.dumps(conf or {}))

    def state() -> str | None:
        rows = af.query("select state from dag_run where dag_id=? and run_id=?", dag_id, run_id)
        return rows[0][0] if rows and rows[0][0] in ("success", "failed") else None

    try:
        return run_id, wait_until(state, f"the {dag_id} run to end", timeout, 2)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n--- scheduler\n{af.tail('scheduler')}\n--- triggerer\n{af.tail('triggerer-1')}") from None


def tries(workers: Path, dag_id: str) -> list[dict]:
    path = workers / "tries.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [t for t in map(json.loads, lines) if t["dag_id"] == dag_id]


def task_logs(workers: Path, dag_id: str) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(workers.glob(f"{dag_id}.*.log")))


def durations(af: Airflow, dag_id: str, run_id: str) -> dict[str, float]:
    rows = af.query("select task_id, duration from task_instance where dag_id=? and run_id=?", dag_id, run_id)
    return {task: round(float(d or 0), 1) for task, d in rows}


def test_decommission_example_runs_each_task_in_its_own_process_and_directories(
        sandbox, cluster_of_workers, object_store, unique_topic):
    af, workers, _ = cluster_of_workers
    config = sandbox.client_config()
    topics = [f"{unique_topic}-{i}" for i in range(2)]
    for topic in topics:
        make_topic(config, topic, [[1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 1]], megabytes=0.3)
    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        before = throttles(admin, topics)
    dag_id = "kafka_decommission_brokers"
    shutil.copyfile(EXAMPLES / f"{dag_id}.py", af.home / "dags" / f"{dag_id}.py")
    started = time.monotonic()
    run_id, state = run_dag(af, dag_id, {
        "broker_ids": [5], "dry_run": False, "require_approval": False, "throttle_bytes_per_sec": 5_000_000,
        "topic_include": [f"{unique_topic}-.*"], "partial_drain": True})
    elapsed = time.monotonic() - started
    logs = task_logs(workers, dag_id)
    assert state == "success", logs[-6000:]

    # the run ends when its last task reports; its process is reaped by the executor's next sync
    expected = {"check_request", "plan", "execute", "wait", "verify_drained"}
    ran = wait_until(lambda: (r := tries(workers, dag_id)) and expected <= {t["task_id"] for t in r} and r,
                     "every task's process to be reaped", 60, 1)
    tasks = [t["task_id"] for t in ran]
    assert expected <= set(tasks), tasks
    assert len({t["pid"] for t in ran}) == len(ran)  # one process per try
    assert all(t["exit_code"] == 0 for t in ran), ran
    assert [t for t in ran if t["violations"]] == [], "a task left files on its worker's disk"
    # a worker's folder not reaped yet (the scheduler may stop before it reaps a deferred task's resumed try, a
    # second process of the same try number) must not hold what a reaped one would have been blamed for either
    for left in (workers / "workers").iterdir() if (workers / "workers").exists() else ():
        assert not (left / "must-stay-unused").exists(), f"{left.name} wrote plan files on the worker's disk"
        assert not [p.name for p in (left / "tmp").iterdir() if p.name.startswith("akr-")], \
            f"{left.name} left local files in its TMPDIR"

    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        for topic in topics:
            assert all(5 not in r for r in replicas(admin, topic))
        assert throttles(admin, topics) == before
    plan = json.loads(af.query("select value from xcom where dag_id=? and run_id=? and task_id='plan' and "
                               "key='return_value'", dag_id, run_id)[0][0])
    assert plan["plan_uri"] == f"s3://{object_store.bucket}/distributed/{dag_id}/{run_id}/plan"
    data = Path(object_store.state["data_dir"]) / object_store.bucket / "distributed" / dag_id / run_id
    for name in ("plan/plan.json", "plan/metrics.json", "plan/report/report.html", "snapshot/partitions.parquet",
                 "request.json", "plan/run/lease.json"):
        assert (data / name).is_file(), name
    print(f"\ndecommission example on a distributed deployment (S3 plans): {elapsed:.1f} s from trigger to end; "
          f"task durations {durations(af, dag_id, run_id)}")


def test_deferrable_wait_runs_in_a_triggerer_with_its_own_directories(
        sandbox, cluster_of_workers, object_store, unique_topic, tmp_path):
    af, workers, triggerer = cluster_of_workers
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2], [2, 3]], megabytes=8)  # about 25 s per move at the throttle
    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        before = throttles(admin, [unique_topic])
    plan = ReassignmentPlan(moves=(
        Move(topic=unique_topic, partition=0, current_replicas=(1, 2), target_replicas=(3, 2)),
        Move(topic=unique_topic, partition=1, current_replicas=(2, 3), target_replicas=(4, 3)),
    ))
    plan_uri = put_plan(object_store, f"defer-{unique_topic}", plan, tmp_path)
    dag_id = "akr_distributed_defer"
    (af.home / "dags" / f"{dag_id}.py").write_text(textwrap.dedent(f'''
        from datetime import datetime
        from airflow.sdk import DAG
        from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
        from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

        with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
            execute = ExecuteReassignmentOperator(
                task_id="execute", plan_uri={plan_uri!r}, storage_conn_id={STORAGE_CONN_ID!r},
                throttle_bytes_per_sec=300_000, wait_for_completion=False)
            wait = WaitForReassignmentSensor(
                task_id="wait", plan_uri={plan_uri!r}, storage_conn_id={STORAGE_CONN_ID!r}, deferrable=True,
                poke_interval=1, timeout=300)
            execute >> wait
    '''))
    run_id, state = run_dag(af, dag_id)
    logs = task_logs(workers, dag_id)
    assert state == "success", logs[-6000:] + af.tail("triggerer-1")
    # the wait deferred, and the separate triggerer (its own folders) ran the trigger to the end
    wait_tries = wait_until(lambda: (w := [t for t in tries(workers, dag_id) if t["task_id"] == "wait"])
                            and len(w) >= 2 and w, "the wait's two processes to be reaped", 60, 1)
    assert len(wait_tries) == 2, wait_tries  # deferred, then resumed with the trigger's event: two processes
    trigger_logs = list((triggerer / "airflow-home" / "logs").rglob(f"dag_id={dag_id}/run_id={run_id}/task_id=wait/*"))
    assert trigger_logs and "| moves 2/2 done" in trigger_logs[0].read_text(), af.tail("triggerer-1")
    assert not (triggerer / "must-stay-unused").exists()
    assert not [p.name for p in (triggerer / "tmp").iterdir() if p.name.startswith("akr-")]
    summary = json.loads(af.query("select value from xcom where dag_id=? and run_id=? and task_id='wait' and "
                                  "key='return_value'", dag_id, run_id)[0][0])
    assert summary["done"] == 2 and summary["finish"]["throttles_restored"] == "yes"
    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        assert replicas(admin, unique_topic) == [(3, 2), (4, 3)]
        assert throttles(admin, [unique_topic]) == before
