"""WaitForReassignmentSensor on the real sandbox: poke mode in a real DAG run, and the ETA of a real copy.

Moves are throttled (core/execution/throttle.py) so they take 10-40 s and can be watched; the data is real (produced
with kafka/workload.py). The deferrable mode through a real triggerer process (killed mid-wait) is in test_stack.py.
"""

from __future__ import annotations

import itertools
import statistics
import textwrap
import time
from pathlib import Path

import pytest
from dagrun import run_dag_file
from kafka_helpers import make_topic, write_plan_dir

from airflow_kafka_reassign.core.execution.progress import ReassignmentWatch
from airflow_kafka_reassign.core.execution.throttle import apply_throttle, restore_throttle
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
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


def test_eta_at_half_progress_is_the_bytes_left_at_the_rate_observed(sandbox, unique_topic):
    """One throttled move of ~20 MB at 1 MB/s (~20 s): the ETA reported when half the bytes are copied is the
    bytes left at that poke over the copy rate of the pokes before it, the least-squares slope of (time, bytes
    left) over the throughput window (recomputed here with the standard library from what each poke reported).
    How close it came to the time the move then took is printed: that is the machine's and the throttle's, not
    asserted.

    The rate is 1 MB/s rather than 200 kB/s because followers fetch in 1 MB chunks (replica.fetch.max.bytes):
    at 200 kB/s a 20 s move is four chunks, and no estimator can tell the rate from four steps.
    """
    window_s = 10.0  # shorter than the move: the window's start is not the move's
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2]], megabytes=20)
    move = Move(topic=unique_topic, partition=0, current_replicas=(1, 2), target_replicas=(1, 3))
    plan = ReassignmentPlan(moves=(move,))
    seen: list[tuple[float, float | None]] = []  # (time, bytes left) of every poke, as the watch reported them
    with KafkaClusterAdmin(config) as admin:
        backup = apply_throttle(admin, [move], 1_000_000)
        try:
            time.sleep(1)
            t0 = time.time()
            admin.alter_reassignments({move.tp: move.target_replicas})
            watch = ReassignmentWatch(plan, started_at=t0, stuck_after_s=600, window_s=window_s)
            at_half = None
            while True:
                now = time.time()
                progress = watch.poke(admin, now=now)
                obs = progress.observation
                seen.append((obs.at, obs.bytes_remaining if obs.bytes_total else None))
                if at_half is None and obs.fraction >= 0.5:
                    at_half = (now, progress, list(seen))
                if progress.status == "complete":
                    done_at = now
                    break
                assert now - t0 < 180, f"the move did not finish: {progress.line()}"
                time.sleep(1.0)
        finally:
            restore_throttle(admin, backup)
    assert at_half is not None
    half_at, progress, before = at_half
    left = progress.observation.bytes_remaining
    # the samples the window holds at that poke: the bytes ones since sizes were known, not older than window_s
    known = list(itertools.takewhile(lambda x: x[1] is not None, reversed(before)))[::-1]
    window = [(t, float(b)) for t, b in known if half_at - t <= window_s]
    assert len(window) >= 3 and left is not None and progress.unit == "bytes", (window, progress.line())
    fit = statistics.linear_regression([t for t, _ in window], [b for _, b in window])
    actual = done_at - half_at
    error = 100 * (progress.eta_s - actual) / actual
    print(f"\nETA at half progress: {progress.eta_s:.1f} s ({left / 1e6:.1f} MB left at {progress.rate / 1e6:.2f} MB/s "
          f"over {len(window)} pokes), actual remaining {actual:.1f} s (error {error:+.0f} %), "
          f"move took {done_at - t0:.1f} s\n{progress.line()}")
    assert fit.slope < 0, window  # bytes left fell over the window: the move was copying
    assert progress.rate == pytest.approx(-fit.slope, rel=1e-6), (progress.rate, fit.slope, window)
    assert progress.eta_s == pytest.approx(left / -fit.slope, rel=1e-6), (progress.eta_s, left, fit.slope)
    assert TopicPartition(unique_topic, 0) == move.tp
