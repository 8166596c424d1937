"""The console command on a synthetic snapshot (planning in-process: --no-spark; the Spark path
runs in tests/integration/test_plan_on_sandbox.py)."""

from __future__ import annotations

import json

from airflow_kafka_reassign.cli import main
from airflow_kafka_reassign.core.planner.synthetic import synthetic_snapshot
from airflow_kafka_reassign.core.records.plan_io import read_metrics, read_plan
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot


def test_plan_then_metrics(tmp_path, capsys):
    snap = write_snapshot(synthetic_snapshot(brokers=6, racks=3, new_brokers=2, topics=8, seed=1), tmp_path / "snap")
    assert main(["plan", "--snapshot", str(snap), "--goal", "add-brokers", "--out", str(tmp_path / "plan"),
                 "--no-spark"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["replica_moves"] == read_metrics(tmp_path / "plan")["summary"]["replica_moves"] > 0
    assert main(["metrics", "--snapshot", str(snap), "--plan", str(tmp_path / "plan")]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["partitions_moved"] == len(read_plan(tmp_path / "plan"))
    assert metrics["after"] == read_metrics(tmp_path / "plan")["summary"]["after"]
    # the same plan in Kafka's format (as the reference tool's --generate prints it)
    assert main(["metrics", "--snapshot", str(snap), "--plan", str(tmp_path / "plan" / "reassignment.json")]) == 0
    assert json.loads(capsys.readouterr().out)["replica_moves"] == summary["replica_moves"]


def test_bad_input_exits_2_naming_the_problem(tmp_path, capsys):
    snap = write_snapshot(synthetic_snapshot(brokers=3, racks=1, topics=2, rf=(3,), seed=1), tmp_path / "snap")
    code = main(["plan", "--snapshot", str(snap), "--goal", "remove-brokers", "--brokers", "0", "--out",
                 str(tmp_path / "plan"), "--no-spark"])
    assert code == 2
    assert "replication factor 3" in capsys.readouterr().err
    assert not (tmp_path / "plan" / "plan.json").exists()


def test_rf_change_argument_is_checked(tmp_path, capsys):
    snap = write_snapshot(synthetic_snapshot(brokers=3, racks=1, topics=2, seed=1), tmp_path / "snap")
    assert main(["plan", "--snapshot", str(snap), "--rf-change", "orders", "--out", str(tmp_path / "p"), "--no-spark"]) == 2
    assert "TOPIC=RF" in capsys.readouterr().err


def test_snapshot_of_a_cluster_that_does_not_settle_exits_1_and_writes_nothing(tmp_path, capsys, monkeypatch):
    from airflow_kafka_reassign.kafka import admin as kafka_admin
    from airflow_kafka_reassign.testing import FakeClusterAdmin

    fake = FakeClusterAdmin.build({1: "a", 2: "b"}, {"orders": [[1, 2], [2, 1]], "audit": [[1, 2]]})
    fake.hide("orders", configs=True)
    monkeypatch.setattr(kafka_admin, "KafkaClusterAdmin", lambda config, timeout_s: fake)
    out = tmp_path / "snap"
    assert main(["snapshot", "--bootstrap-servers", "k:9092", "--out", str(out), "--settle-timeout", "7"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: the snapshot of the fake cluster is incomplete") and "'orders': configs" in err
    assert "settle_timeout_s=7" in err and not out.exists() and fake.now == 7
    fake.reveal()
    assert main(["snapshot", "--bootstrap-servers", "k:9092", "--out", str(out)]) == 0
    assert "3 partitions, complete after 1 read(s)" in capsys.readouterr().out


def test_plan_refuses_a_snapshot_whose_files_do_not_hold_its_counts(tmp_path, capsys):
    import pyarrow.parquet as pq

    snap = write_snapshot(synthetic_snapshot(brokers=3, racks=1, topics=3, seed=1), tmp_path / "snap")
    table = pq.read_table(snap / "partitions.parquet")
    pq.write_table(table.slice(0, table.num_rows - 1), snap / "partitions.parquet")  # the last topic's last row gone
    assert main(["plan", "--snapshot", str(snap), "--out", str(tmp_path / "plan"), "--no-spark"]) == 2
    err = capsys.readouterr().err
    last = table.column("topic")[table.num_rows - 1].as_py()
    assert f"topic {last!r}: snapshot.json records" in err and "take a new snapshot" in err
    assert not (tmp_path / "plan").exists()


def test_plan_with_a_capacity_document_reports_disk_and_the_bytes_bound(tmp_path, capsys):
    from airflow_kafka_reassign.core.planner.synthetic import synthetic_capacities, synthetic_cluster, to_snapshot

    cluster = synthetic_cluster(brokers=9, racks=3, replicas=2000, sizes="skewed", seed=2)
    snap = write_snapshot(to_snapshot(cluster), tmp_path / "snap")
    caps = synthetic_capacities(cluster, fill=0.6)
    doc = tmp_path / "capacity.json"
    doc.write_text(json.dumps({"brokers": {str(b): {"disk": v} for b, v in caps.items()}}))
    assert main(["plan", "--snapshot", str(snap), "--capacity", str(doc), "--disk-cap", "0.9",
                 "--out", str(tmp_path / "plan"), "--no-spark"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["bytes_lower_bound"] <= summary["bytes_to_move"]
    assert summary["disk"]["brokers_over_cap"] == []
    metrics = read_metrics(tmp_path / "plan")
    assert metrics["request"]["disk_cap"] == 0.9
    assert set(metrics["disk"]["bytes_after"]) == {str(b) for b in range(9)}
    doc.write_text(json.dumps({"default": {"disk": 1000}, "brokers": {"99": {"disk": 5}}}))
    assert main(["plan", "--snapshot", str(snap), "--capacity", str(doc), "--out", str(tmp_path / "p2"),
                 "--no-spark"]) == 2
    assert "broker(s) [99]" in capsys.readouterr().err


def test_plan_on_spark_with_a_missing_snapshot_exits_2_with_one_line(tmp_path, capsys):
    # the Spark path (no --no-spark): refused in-process before any JVM starts
    assert main(["plan", "--snapshot", str(tmp_path / "missing"), "--out", str(tmp_path / "plan")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith(f"error: {tmp_path / 'missing'}: no snapshot there")


def test_plan_job_bad_input_is_one_line_without_the_jvm_chatter(tmp_path, capsys, monkeypatch):
    import subprocess

    from airflow_kafka_reassign.spark import submit

    snap = write_snapshot(synthetic_snapshot(brokers=3, racks=1, topics=2, seed=1), tmp_path / "snap")
    chatter = "WARNING: Using incubator modules: jdk.incubator.vector\nplan_job: no plan: brokers [9] are unknown\n"
    monkeypatch.setattr(submit, "submit_plan", lambda *a, **k: subprocess.CompletedProcess([], 2, "", chatter))
    assert main(["plan", "--snapshot", str(snap), "--out", str(tmp_path / "plan")]) == 2
    assert capsys.readouterr().err == "error: brokers [9] are unknown\n"


def test_snapshot_samples_bytes_in_rates_over_the_window_given(tmp_path, capsys, monkeypatch):
    import pytest

    from airflow_kafka_reassign.core.records.snapshot_io import read_snapshot
    from airflow_kafka_reassign.kafka import admin as kafka_admin
    from airflow_kafka_reassign.testing import FakeClusterAdmin

    fake = FakeClusterAdmin.build({1: "a", 2: "b"}, {"orders": [[1, 2]]})
    monkeypatch.setattr(kafka_admin, "KafkaClusterAdmin", lambda config, timeout_s: fake)
    out = tmp_path / "snap"
    assert main(["snapshot", "--bootstrap-servers", "k:9092", "--out", str(out), "--sample-window-s", "0.01"]) == 0
    assert read_snapshot(out).bytes_in.window_s > 0
    assert main(["snapshot", "--bootstrap-servers", "k:9092", "--out", str(tmp_path / "s2")]) == 0
    assert read_snapshot(tmp_path / "s2").bytes_in is None
    with pytest.raises(SystemExit):
        main(["snapshot", "--bootstrap-servers", "k:9092", "--out", str(tmp_path / "s3"), "--sample-window-s", "-2"])
    assert "'-2' is not a number of seconds >= 0" in capsys.readouterr().err


def test_the_goals_on_log_dirs_from_a_snapshot_with_its_log_dirs(tmp_path, capsys, monkeypatch):
    from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
    from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica
    from airflow_kafka_reassign.kafka import admin as kafka_admin
    from airflow_kafka_reassign.testing import FakeClusterAdmin

    fake = FakeClusterAdmin.build({1: "a", 2: "b"}, {"t": [[1, 2], [2, 1]]}, log_dirs=2)
    fake.replica_dirs[TopicPartitionReplica("t", 0, 1)] = "/kafka/1/data-2"
    fake.sizes = {TopicPartition("t", 0): {1: 1000, 2: 1000}}
    monkeypatch.setattr(kafka_admin, "KafkaClusterAdmin", lambda config, timeout_s: fake)
    snap, bare = tmp_path / "snap", tmp_path / "bare"
    assert main(["snapshot", "--bootstrap-servers", "k:9092", "--log-dirs", "--out", str(snap)]) == 0
    assert main(["snapshot", "--bootstrap-servers", "k:9092", "--out", str(bare)]) == 0
    assert (snap / "log_dirs.json").is_file() and not (bare / "log_dirs.json").exists()
    capsys.readouterr()

    assert main(["plan", "--snapshot", str(snap), "--goal", "remove-disks", "--log-dir", "1:/kafka/1/data-2",
                 "--out", str(tmp_path / "plan"), "--no-spark"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["goal"] == "remove-disks" and summary["log_dirs"]["intra_moves"] == 1
    (move,) = read_plan(tmp_path / "plan").moves
    assert move.tp == TopicPartition("t", 0) and move.log_dirs == ("/kafka/1/data-1", "any")
    assert main(["plan", "--snapshot", str(snap), "--goal", "rebalance-disks", "--out", str(tmp_path / "even"),
                 "--no-spark"]) == 0
    assert json.loads(capsys.readouterr().out)["goal"] == "rebalance-disks"

    # bad input: exit 2, the problem and the fix named, no plan written
    for argv, problem in (
        (["--snapshot", str(snap), "--goal", "remove-disks", "--log-dir", "1:/kafka/1/data-9"], "no such log dir"),
        (["--snapshot", str(snap), "--goal", "remove-disks", "--log-dir", "data-2"], "BROKER:/ABSOLUTE/PATH"),
        (["--snapshot", str(snap), "--goal", "rebalance", "--log-dir", "1:/kafka/1/data-2"], "only applies to goal"),
        (["--snapshot", str(bare), "--goal", "rebalance-disks"], "snapshot --log-dirs"),
    ):
        assert main(["plan", *argv, "--out", str(tmp_path / "bad"), "--no-spark"]) == 2, argv
        assert problem in capsys.readouterr().err, argv
        assert not (tmp_path / "bad" / "plan.json").exists()
