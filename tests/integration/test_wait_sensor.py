"""WaitForReassignmentSensor on the real sandbox: poke mode in a real DAG run, and the ETA's accuracy.

Moves are throttled (core/throttle.py) so they take 10-40 s and can be watched; the data is real (produced
with kafka/workload.py). The deferrable mode through a real triggerer process is in test_wait_sensor_deferrable.py.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from dagrun import run_dag_file
from kafka_helpers import make_topic, write_plan_dir

from airflow_kafka_reassign.core.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.progress import ReassignmentWatch
from airflow_kafka_reassign.core.throttle import apply_throttle, restore_throttle
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

MB = 1_000_000






POKE_DAG = '''
from datetime import datetime
from airflow.sdk import DAG
from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

with DAG("wait_poke", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    WaitForReassignmentSensor(
        task_id="wait",
        plan_uri={plan_dir!r},
        deferrable=False,
        mode="poke",
        poke_interval=2,
        timeout=300,
        submit_pending=True,
        max_moves=1,
        throttle_bytes_per_sec=200_000,
    )
'''


def test_poke_mode_submits_and_completes_a_throttled_plan_in_a_real_dag_run(sandbox, airflow_home, unique_topic,
                                                                            tmp_path):
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2], [2, 3]], megabytes=2)
    plan = ReassignmentPlan(moves=(
        Move(topic=unique_topic, partition=0, current_replicas=(1, 2), target_replicas=(4, 2)),
        Move(topic=unique_topic, partition=1, current_replicas=(2, 3), target_replicas=(2, 5)),
    ))
    plan_dir = write_plan_dir(tmp_path / "plan", plan)
    with KafkaClusterAdmin(config) as admin:
        throttles_before = admin.describe_throttles([1, 2, 3, 4, 5], [unique_topic])
    dag_file = Path(airflow_home["AIRFLOW__CORE__DAGS_FOLDER"]) / "wait_poke.py"
    dag_file.write_text(textwrap.dedent(POKE_DAG.format(plan_dir=str(plan_dir))))
    started = time.monotonic()
    result = run_dag_file(airflow_home, dag_file)
    took = time.monotonic() - started
    assert result["state"] == "success", result["log"][-6000:]

    summary = result["xcom"]["wait.return_value"]
    assert summary["status"] == "complete" and summary["done"] == 2 and summary["submitted"] == 2
    assert summary["bytes_total"] >= 4 * MB and summary["finish"]["throttles_restored"] == "yes"
    with KafkaClusterAdmin(config) as admin:
        parts = {p.partition: p for p in admin.snapshot(topics=[unique_topic]).partitions}
        assert parts[0].replicas == (4, 2) and parts[1].replicas == (2, 5)
        assert set(parts[0].isr) == {4, 2} and set(parts[1].isr) == {2, 5}
        assert admin.list_reassignments() == {}
        assert admin.describe_throttles([1, 2, 3, 4, 5], [unique_topic]) == throttles_before

    lines = [line for line in result["log"].splitlines() if "| moves " in line]
    print(f"\npoke-mode DAG run: {took:.1f} s, {len(lines)} progress lines; first and last:\n{lines[0]}\n{lines[-1]}")
    assert len(lines) >= 3
    assert any("1/2 done" in line for line in lines) and "2/2 done" in lines[-1]
    assert all(line.count("| moves ") == 1 for line in lines)
    # no wall of debug output: the engine's per-step INFO lines (exact requests, throttle changes) stay out
    assert "submitting" not in result["log"] and "throttle configs set" not in result["log"]


def test_eta_at_half_progress_is_within_25_percent_of_the_actual_remaining_time(sandbox, unique_topic):
    """One throttled move of ~20 MB at 1 MB/s (~20 s): the ETA reported when half the bytes are copied
    is compared with the time the move then really takes.

    The rate is 1 MB/s rather than 200 kB/s because followers fetch in 1 MB chunks (replica.fetch.max.bytes):
    at 200 kB/s a 20 s move is four chunks, and no estimator can tell the rate from four steps.
    """
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2]], megabytes=20)
    move = Move(topic=unique_topic, partition=0, current_replicas=(1, 2), target_replicas=(1, 3))
    plan = ReassignmentPlan(moves=(move,))
    with KafkaClusterAdmin(config) as admin:
        backup = apply_throttle(admin, [move], 1_000_000)
        try:
            time.sleep(1)
            t0 = time.time()
            admin.alter_reassignments({move.tp: move.target_replicas})
            watch = ReassignmentWatch(plan, started_at=t0, stuck_after_s=600)
            at_half = None
            while True:
                now = time.time()
                progress = watch.poke(admin, now=now)
                if at_half is None and progress.observation.fraction >= 0.5:
                    at_half = (now, progress.eta_s, progress.line())
                if progress.status == "complete":
                    done_at = now
                    break
                assert now - t0 < 180, f"the move did not finish: {progress.line()}"
                time.sleep(1.0)
        finally:
            restore_throttle(admin, backup)
    assert at_half is not None
    half_at, eta, line = at_half
    actual = done_at - half_at
    print(f"\nETA at half progress: {eta:.1f} s, actual remaining {actual:.1f} s "
          f"(error {100 * (eta - actual) / actual:+.0f} %), move took {done_at - t0:.1f} s\n{line}")
    assert eta is not None and abs(eta - actual) <= 0.25 * actual
    assert TopicPartition(unique_topic, 0) == move.tp
