"""Load-aware planning on the sandbox cluster: topics of very different sizes, one broker with half
the disk of the others; plan with a capacity document, execute, wait; the brokers' bytes from
DescribeLogDirs afterwards match the plan's predicted per-broker bytes within 10%."""

from __future__ import annotations

import pytest
from kafka_helpers import make_topic, wait_until

from airflow_kafka_reassign.core.capacity import capacity_document
from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, run
from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.metrics import partition_size
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
