"""Load-aware planning on the sandbox cluster: topics of very different sizes, one broker with half
the disk of the others; plan with a capacity document, execute, wait; the brokers' bytes from
DescribeLogDirs afterwards match the plan's predicted per-broker bytes within 10%. The same
snapshot planned by the Spark job (``plan --capacity``: real spark-submit, the disk step on the
driver after the executors' per-topic stages) gives the pure planner's plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kafka_helpers import make_topic, wait_until

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, run
from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.metrics import partition_size
from airflow_kafka_reassign.core.records.plan_io import read_metrics, read_plan
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot
from airflow_kafka_reassign.core.vocabulary.capacity import capacity_document
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

pytestmark = pytest.mark.integration


def _bytes(snapshot) -> dict[int, int]:
    out: dict[int, int] = {}
    for p in snapshot.partitions:
        size = partition_size(p.replica_sizes) or 0
        for b in p.replicas:
            out[b] = out.get(b, 0) + size
    return out


def test_plan_execute_wait_bytes_match_the_prediction(sandbox, unique_topic, tmp_path):
    config = sandbox.client_config()
    big, small = f"{unique_topic}-big", f"{unique_topic}-small"
    # racks: r1 = {1, 4}, r2 = {2, 5}, r3 = {3}; 8 MB partitions on 1/4 and 2/5, small ones around 3
    make_topic(config, big, [[1, 2], [4, 5], [1, 5], [4, 2]], megabytes=8)
    make_topic(config, small, [[3, 1], [3, 4], [2, 3], [5, 3], [1, 2], [4, 5]], megabytes=0.3)
    topics = [big, small]
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        snapshot = admin.snapshot(topics=topics, include_sizes=True)
        before = _bytes(snapshot)
        total = sum(before.values())
        unit = int(total / 0.5 / 4.5)  # brokers 1,2,3,5 one unit, broker 4 half: 50% full
        doc = capacity_document({"default": {"disk": unit}, "brokers": {"4": {"disk": unit // 2}}})
        result = plan_reassignment(snapshot, PlanRequest(capacity=doc, disk_tolerance=0.05))
        disk = result.disk
        assert disk is not None and len(result.plan) > 0
        assert disk.share_before(4) > disk.mean_share + 0.1  # the half-size broker starts overfull
        assert result.after.rack_violations == 0 and result.after.rf_changes == 0
        moves = [(m.current_replicas, m.target_replicas) for m in result.plan.moves]
        assert disk.over_cap() == [], (result.warnings, disk.bytes_before, disk.bytes_after, disk.capacity, moves)
        outcome = run(admin, result.plan, ExecutionLimits(), ExecutionOptions(), state_dir=tmp_path,
                      poll_interval_s=0.5)
        status = outcome.status
        assert status.ok and not status.failed and not status.stale, outcome.summary()
        assert len(status.done) == len(result.plan)
        wait_until(lambda: not admin.list_reassignments(), "the reassignments to finish", timeout=120)

        def settled() -> bool:
            got = _bytes(admin.snapshot(topics=topics, include_sizes=True))
            return all(abs(got.get(b, 0) - want) <= 0.10 * max(want, 1)
                       for b, want in disk.bytes_after.items())

        wait_until(settled, "DescribeLogDirs to show the predicted bytes (within 10%)", timeout=60)
        got = _bytes(admin.snapshot(topics=topics, include_sizes=True))
        assert abs(got.get(4, 0) / (unit // 2) - disk.mean_share) < abs(before[4] / (unit // 2) - disk.mean_share)


def test_spark_job_plans_the_same_load_aware_plan_as_the_pure_planner(sandbox, unique_topic, tmp_path):
    config = sandbox.client_config()
    big, small = f"{unique_topic}-big", f"{unique_topic}-small"
    make_topic(config, big, [[1, 2], [4, 5], [1, 5], [4, 2], [1, 4]], megabytes=2)
    make_topic(config, small, [[3, 1], [3, 4], [2, 3], [5, 3], [1, 2], [4, 5]], megabytes=0.1)
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        snapshot = admin.snapshot(topics=[big, small], include_sizes=True)
    total = sum(_bytes(snapshot).values())
    unit = int(total / 0.5 / 4.5)
    capacity = {"default": {"disk": unit}, "brokers": {"4": {"disk": unit // 2}}}
    expected = plan_reassignment(snapshot, PlanRequest(capacity=capacity_document(capacity), disk_tolerance=0.05))
    assert len(expected.plan) > 0
    (tmp_path / "capacity.json").write_text(json.dumps(capacity))
    snap = write_snapshot(snapshot, tmp_path / "snapshot")
    cli = str(Path(sys.executable).with_name("airflow-kafka-reassign"))
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [cli, "plan", "--snapshot", str(snap), "--capacity", str(tmp_path / "capacity.json"), "--disk-tolerance", "0.05",
         "--out", str(tmp_path / "plan"), "--master", "local[2]"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    metrics = read_metrics(tmp_path / "plan")
    assert metrics["job"]["stages_s"].get("disk") is not None  # the disk step ran on the driver of the staged job
    assert read_plan(tmp_path / "plan").model_dump_json() == expected.plan.model_dump_json()
    assert metrics["summary"]["bytes_to_move"] == expected.bytes_to_move
    assert metrics["summary"]["bytes_lower_bound"] == expected.bytes_lower_bound
    disk = expected.disk
    assert disk is not None
    assert {int(b): v for b, v in metrics["disk"]["bytes_after"].items()} == disk.bytes_after

    # a network_in capacity (the bytes-in goal) is planned on the driver with the pure planner: same plan
    capacity["default"]["network_in"] = 10_000_000
    capacity["brokers"]["4"]["network_in"] = 10_000_000
    (tmp_path / "capacity.json").write_text(json.dumps(capacity))
    expected = plan_reassignment(snapshot, PlanRequest(capacity=capacity_document(capacity), disk_tolerance=0.05))
    done = subprocess.run(
        [cli, "plan", "--snapshot", str(snap), "--capacity", str(tmp_path / "capacity.json"), "--disk-tolerance", "0.05",
         "--out", str(tmp_path / "plan-in"), "--master", "local[2]"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert read_plan(tmp_path / "plan-in").model_dump_json() == expected.plan.model_dump_json()
    assert any("bytes in not balanced" in w for w in read_metrics(tmp_path / "plan-in")["warnings"])


def test_spark_job_places_again_where_racks_keep_the_counts_apart(tmp_path):
    # racks of unequal size (5, 5, 4 brokers) and two new brokers: the disk step cannot even out
    # the replica counts itself; the job places again with the per-topic steps balancing them,
    # and its plan is still the pure planner's (no Kafka needed: a synthetic snapshot)
    from airflow_kafka_reassign.core.planner.synthetic import synthetic_capacities, synthetic_cluster, to_snapshot

    cluster = synthetic_cluster(brokers=12, racks=3, new_brokers=2, replicas=6000, sizes="skewed", seed=3, skew=0.4)
    capacity = {"brokers": {str(b): {"disk": v} for b, v in synthetic_capacities(cluster, fill=0.55).items()}}
    snapshot = to_snapshot(cluster)
    expected = plan_reassignment(
        snapshot, PlanRequest(goal="add-brokers", brokers=(12, 13), capacity=capacity_document(capacity))
    )
    assert expected.after.replica_max_min <= 2
    (tmp_path / "capacity.json").write_text(json.dumps(capacity))
    snap = write_snapshot(snapshot, tmp_path / "snapshot")
    cli = str(Path(sys.executable).with_name("airflow-kafka-reassign"))
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [cli, "plan", "--snapshot", str(snap), "--goal", "add-brokers", "--brokers", "12,13", "--capacity",
         str(tmp_path / "capacity.json"), "--out", str(tmp_path / "plan"), "--master", "local[2]"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    metrics = read_metrics(tmp_path / "plan")
    assert "place again" in metrics["job"]["stages_s"]
    assert read_plan(tmp_path / "plan").model_dump_json() == expected.plan.model_dump_json()
    assert metrics["after"]["replica_max_min"] == expected.after.replica_max_min


def test_capacity_cluster_takes_each_brokers_disk_as_it_reports_it(sandbox, unique_topic, tmp_path, capsys):
    """``snapshot --sizes`` writes disks.json (KIP-827: each broker's log-dir total and usable bytes); ``plan
    --capacity cluster`` balances disk shares of those totals, with no capacity file. (The sandbox's brokers share
    one filesystem: the same total each.)"""
    from airflow_kafka_reassign.cli import main

    make_topic(sandbox.client_config(), unique_topic, [[1, 2], [1, 4]], megabytes=0.5)
    config = tmp_path / "client.properties"
    config.write_text("\n".join(f"{k}={v}" for k, v in sandbox.client_config().items()
                                if k != "bootstrap.servers"), encoding="utf-8")
    snap, out = tmp_path / "snapshot", tmp_path / "plan"
    assert main(["snapshot", "--bootstrap-servers", sandbox.client_config()["bootstrap.servers"],
                 "--command-config", str(config), "--sizes", "--out", str(snap)]) == 0
    disks = json.loads((snap / "disks.json").read_text())
    assert sorted(map(int, disks)) == [1, 2, 3, 4, 5]
    assert all(0 < d["usable_bytes"] <= d["total_bytes"] for d in disks.values())
    capsys.readouterr()
    assert main(["plan", "--snapshot", str(snap), "--out", str(out), "--no-spark", "--capacity", "cluster",
                 "--disk-cap", "0.99"]) == 0, capsys.readouterr().err
    capacity = read_metrics(out)["disk"]["capacity"]
    assert {int(b): c for b, c in capacity.items()} == {int(b): d["total_bytes"] for b, d in disks.items()}
    (snap / "disks.json").unlink()  # a snapshot without it: one line, exit 2
    assert main(["plan", "--snapshot", str(snap), "--out", str(tmp_path / "p2"), "--no-spark",
                 "--capacity", "cluster"]) == 2
    assert "has no disks.json: take the snapshot with `airflow-kafka-reassign snapshot --sizes`" in \
        capsys.readouterr().err


def test_spark_job_disk_step_by_groups_plans_as_well_as_the_serial_step(tmp_path):
    """``--disk-step groups``: the disk step by the place tasks' groups of topics on the executors
    (real spark-submit, local[2], 8 groups). Judged from the snapshot and the plan file alone: the
    disk band (or a warning), the cap, racks, replication factors and replica counts, and bytes
    within 5% of both the plan's bound and the serial step's plan of the same snapshot (the
    staged planner in this process)."""
    from airflow_kafka_reassign.core.planner.staged import plan_staged
    from airflow_kafka_reassign.core.planner.synthetic import synthetic_capacities, synthetic_cluster, to_snapshot
    from airflow_kafka_reassign.spark.submit import plan_job_args, plan_job_path, spark_submit_command, submit_env

    cluster = synthetic_cluster(brokers=30, racks=3, replicas=40_000, sizes="skewed", seed=2)
    caps = synthetic_capacities(cluster, fill=0.6)
    capacity = {"brokers": {str(b): {"disk": v} for b, v in caps.items()}}
    snapshot = to_snapshot(cluster)
    request = PlanRequest(capacity=capacity_document(capacity))
    serial = plan_staged(snapshot, request)
    snap = write_snapshot(snapshot, tmp_path / "snapshot")
    (tmp_path / "request.json").write_text(request.model_dump_json())
    cmd = spark_submit_command(plan_job_path(), [
        *plan_job_args(str(snap), str(tmp_path / "plan"), str(tmp_path / "request.json")), "--disk-step", "groups"],
        master="local[2]")
    done = subprocess.run(cmd, env={**os.environ, **submit_env()}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    metrics = read_metrics(tmp_path / "plan")
    assert metrics["job"]["disk_step"] == "groups" and metrics["job"]["disk_rounds"] >= 1
    moved = {(m.topic, m.partition): tuple(m.target_replicas) for m in read_plan(tmp_path / "plan").moves}
    serial_moved = {(m.topic, m.partition): tuple(m.target_replicas) for m in serial.plan.moves}
    racks = {b.id: b.rack for b in snapshot.brokers}

    def judged(moves: dict) -> tuple[int, float, int, int, int, list[int]]:
        after = dict.fromkeys(caps, 0)
        count = dict.fromkeys(caps, 0)
        moved_bytes = violations = rf = 0
        for p in snapshot.partitions:
            size = max(p.replica_sizes.values())
            final = moves.get((p.topic, p.partition), tuple(p.replicas))
            moved_bytes += size * len(set(final) - set(p.replicas))
            rf += len(final) != len(p.replicas)
            violations += len({racks[b] for b in final}) < min(len(final), 3, len({racks[b] for b in p.replicas}))
            for b in final:
                after[b] += size
                count[b] += 1
        mean = sum(after.values()) / sum(caps.values())
        deviation = max(abs(after[b] / caps[b] - mean) for b in caps)
        over = [b for b in caps if after[b] > 0.85 * caps[b]]
        return moved_bytes, deviation, max(count.values()) - min(count.values()), violations, rf, over

    got, want = judged(moved), judged(serial_moved)
    bytes_moved, deviation, spread, violations, rf, over = got
    assert (violations, rf, over) == (0, 0, [])
    assert spread <= 2
    assert deviation <= max(want[1], 0.02) + 0.001 or metrics["warnings"]
    assert bytes_moved == metrics["summary"]["bytes_to_move"]
    assert bytes_moved <= 1.05 * metrics["summary"]["bytes_lower_bound"]
    assert bytes_moved <= 1.05 * want[0]
