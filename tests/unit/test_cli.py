"""The console command on a synthetic snapshot (planning in-process: --no-spark; the Spark path
runs in tests/integration/test_plan_on_sandbox.py)."""

from __future__ import annotations

import json

from airflow_kafka_reassign.cli import main
from airflow_kafka_reassign.core.plan_io import read_metrics, read_plan
from airflow_kafka_reassign.core.snapshot_io import write_snapshot
from airflow_kafka_reassign.core.synthetic import synthetic_snapshot


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
