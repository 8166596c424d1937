"""The Spark plan job gives the same plan whichever way it reads the snapshot (real spark-submit):

* ``row-groups``: a snapshot written by ``write_snapshot``; executors read their row groups
  with pyarrow, no shuffle;
* ``row-groups-broadcast``: the same through a ``file://`` URI read the way a snapshot on
  object storage is (``--reader broadcast``: the driver reads the file whole through Spark and
  broadcasts its bytes);
* ``splits``: the same file through Spark's reader (``--reader spark``, what a snapshot on
  object storage takes);
* ``shuffled``: a file written otherwise (rows in any order, topics across row groups); the
  job sees topics span splits and shuffles by topic.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_kafka_reassign.core.planner import PlanRequest
from airflow_kafka_reassign.core.planner.staged import plan_staged
from airflow_kafka_reassign.core.planner.synthetic import synthetic_cluster, to_snapshot
from airflow_kafka_reassign.core.records.plan_io import read_metrics
from airflow_kafka_reassign.core.records.snapshot_io import partitions_table, read_snapshot, write_snapshot
from airflow_kafka_reassign.spark.submit import plan_job_path, spark_submit_command, submit_env

ADD_BROKERS = '{"goal": "add-brokers"}'


def run_job(snapshot: Path | str, out: Path, *extra: str, request: str = ADD_BROKERS) -> subprocess.CompletedProcess[str]:
    args = ["--snapshot", str(snapshot), "--out", str(out), "--request-json", request, *extra]
    cmd = spark_submit_command(plan_job_path(), args, master="local[2]")
    return subprocess.run(cmd, env={**os.environ, **submit_env()}, capture_output=True, text=True, timeout=600)


def submit(snapshot: Path | str, out: Path, *extra: str, request: str = ADD_BROKERS) -> dict:
    done = run_job(snapshot, out, *extra, request=request)
    assert done.returncode == 0, done.stderr[-4000:]
    return read_metrics(out)


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("readers")
    snap = to_snapshot(synthetic_cluster(brokers=10, racks=3, new_brokers=2, replicas=30_000, seed=11))
    ours = write_snapshot(snap, base / "ours")
    other = base / "other"
    shutil.copytree(ours, other)
    table = partitions_table(snap)  # the synthetic order, not sorted by topic
    pq.write_table(table.take(list(range(table.num_rows))[::-1]), other / "partitions.parquet", row_group_size=2000)
    return ours, other


def test_every_reader_gives_the_same_plan_as_the_in_process_stages(snapshots, tmp_path):
    ours, other = snapshots
    runs = {
        "row-groups": submit(ours, tmp_path / "a"),
        "row-groups-broadcast": submit(f"file://{ours}", tmp_path / "b", "--reader", "broadcast"),
        "splits": submit(ours, tmp_path / "c", "--reader", "spark"),
        "shuffled": submit(other, tmp_path / "d"),
    }
    assert {k: m["job"]["input"] for k, m in runs.items()} == {k: k for k in runs}
    plans = {k: (tmp_path / d / "plan.json").read_bytes() for k, d in zip(runs, "abcd", strict=True)}
    assert len(set(plans.values())) == 1
    expected = plan_staged(read_snapshot(ours), PlanRequest(goal="add-brokers"))
    assert plans["row-groups"].decode() == expected.plan.model_dump_json()
    assert runs["row-groups"]["summary"]["replica_moves"] == expected.replica_moves
    assert runs["row-groups"]["job"]["quota_groups"] == 0  # 30k replicas: all topics at once


def test_the_quota_groups_settled_in_the_place_tasks_give_the_in_process_plan(snapshots, tmp_path):
    ours, _ = snapshots
    request = PlanRequest(goal="add-brokers", quota_group_replicas=4_000)
    metrics = submit(ours, tmp_path / "plan", request=request.model_dump_json())
    assert metrics["job"]["quota_groups"] == 8  # 30k replicas: 7 groups of 4k fit, rounded up to a power of two
    assert metrics["job"]["quota_groups_in_place"]  # settled by the place stage's tasks
    expected = plan_staged(read_snapshot(ours), request)
    assert (tmp_path / "plan" / "plan.json").read_text() == expected.plan.model_dump_json()
    assert metrics["after"]["replica_max_min"] <= 1 and metrics["after"]["rack_violations"] == 0
    assert metrics["summary"]["replica_moves"] <= 1.05 * metrics["summary"]["lower_bound"]


def test_unknown_brokers_are_named_by_their_first_partition_across_tasks(snapshots, tmp_path):
    """Which partition names a broker is merged per task, then on the driver: the error names
    the same partitions as the in-process planner, wherever they are read."""
    from airflow_kafka_reassign.core.records.plan_io import ERROR_FILE
    from airflow_kafka_reassign.exceptions import ConfigurationError

    ours, _ = snapshots
    snap = read_snapshot(ours)
    parts = list(snap.partitions)  # sorted by (topic, partition): the first and last rows are in different tasks
    for i, dead in ((len(parts) - 1, 99), (len(parts) - 2, 98), (0, 99)):
        parts[i] = parts[i].model_copy(update={"replicas": (*parts[i].replicas[:-1], dead)})
    bad = write_snapshot(snap.model_copy(update={"partitions": tuple(parts)}), tmp_path / "bad")
    with pytest.raises(ConfigurationError) as expected:
        plan_staged(read_snapshot(bad), PlanRequest(goal="add-brokers"))
    done = run_job(bad, tmp_path / "plan")
    assert done.returncode == 2, done.stderr[-3000:]
    message = (tmp_path / "plan" / ERROR_FILE).read_text().strip()
    assert message == str(expected.value)
    assert f"{parts[0].topic}-{parts[0].partition}" in message and "[98, 99]" in message
    assert not (tmp_path / "plan" / "plan.json").exists()


def test_racks_left_uneven_give_the_in_process_plan(tmp_path):
    """A decommission that leaves one broker alone in its rack (6 brokers on 3 racks, broker 4
    of rack-1 removed): the quota step lets topics give way to the racks on the driver, the
    place tasks meet those quotas and compute the bound's parts; the job writes the
    in-process plan byte for byte, with the same balance floor, bound and warnings."""
    from airflow_kafka_reassign.core.planner import plan_reassignment

    snap = to_snapshot(synthetic_cluster(brokers=6, racks=3, rf=(2, 3), replicas=6_000, seed=5))
    snapshot = write_snapshot(snap, tmp_path / "snapshot")
    request = PlanRequest(goal="remove-brokers", brokers=(4,))
    metrics = submit(snapshot, tmp_path / "plan", request=request.model_dump_json())
    expected = plan_reassignment(read_snapshot(snapshot), request)
    assert expected.topics_uneven_for_racks > 0  # the path under test was taken
    assert (tmp_path / "plan" / "plan.json").read_text() == expected.plan.model_dump_json()
    summary = metrics["summary"]
    for key in ("replica_moves", "lower_bound", "replica_max_min_floor", "topics_uneven_for_racks"):
        assert summary[key] == getattr(expected, key), key
    assert summary["replica_balance_bounded_by"] == list(expected.replica_balance_bounded_by)
    assert metrics["warnings"] == list(expected.warnings)
    assert metrics["after"]["replica_max_min"] <= max(1, expected.replica_max_min_floor + 1)
