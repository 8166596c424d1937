"""The plan job plans the goals on log dirs on its driver, from the snapshot and the log dirs beside it, without a
Spark session; the plan files carry Kafka's log_dirs."""

from __future__ import annotations

import json

from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable
from airflow_kafka_reassign.core.records.plan_io import ERROR_FILE, KAFKA_PLAN_FILE, read_metrics, read_plan
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica as R
from airflow_kafka_reassign.spark import plan_job
from airflow_kafka_reassign.testing import FakeClusterAdmin

REQUEST = '{"goal": "remove-disks", "log_dirs": ["2:/kafka/2/data-2"]}'


def test_remove_disks_is_planned_on_the_driver_without_spark(tmp_path, monkeypatch):
    f = FakeClusterAdmin.build({1: None, 2: None, 3: None}, {"t": [[1, 2], [2, 3]]}, log_dirs=2)
    f.replica_dirs[R("t", 1, 2)] = "/kafka/2/data-2"
    f.sizes[TopicPartition("t", 1)] = {2: 1000, 3: 1000}
    snapshot = tmp_path / "snapshot"
    write_snapshot(f.snapshot(include_sizes=True), snapshot)
    out = tmp_path / "plan"
    assert plan_job.main(["--snapshot", str(snapshot), "--out", str(out), "--request-json", REQUEST]) == 2
    assert "has no log_dirs.json" in (out / ERROR_FILE).read_text()

    LogDirTable.of(f.log_dirs(None)).write(snapshot)
    monkeypatch.setitem(__import__("sys").modules, "pyspark", None)  # a Spark session would fail to import
    assert plan_job.main(["--snapshot", str(snapshot), "--out", str(out), "--request-json", REQUEST]) == 0
    (move,) = read_plan(out).moves
    assert move.tp == TopicPartition("t", 1) and move.log_dirs == ("/kafka/2/data-1", "any")
    assert json.loads((out / KAFKA_PLAN_FILE).read_text())["partitions"][0]["log_dirs"] == ["/kafka/2/data-1", "any"]
    metrics = read_metrics(out)
    assert metrics["summary"]["log_dirs"]["intra_moves"] == 1 and metrics["log_dirs"]["dirs_after"] == {
        "1:/kafka/1/data-1": 0, "1:/kafka/1/data-2": 0, "2:/kafka/2/data-1": 1000, "2:/kafka/2/data-2": 0,
        "3:/kafka/3/data-1": 1000, "3:/kafka/3/data-2": 0}
