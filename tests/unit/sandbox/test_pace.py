"""The throttle bound the demo and bench_window judge a pace against (sandbox/pace.py), from a snapshot by hand."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.vocabulary.models import Broker, ClusterSnapshot, Move, PartitionState, ReassignmentPlan
from airflow_kafka_reassign.sandbox.pace import plan_throttle_bound_s


def snapshot(*parts: tuple[int, tuple[int, ...], dict[int, int] | None]) -> ClusterSnapshot:
    return ClusterSnapshot(brokers=tuple(Broker(id=b) for b in range(1, 6)), partitions=tuple(
        PartitionState(topic="t", partition=p, replicas=r, isr=r, leader=r[0], replica_sizes=s)
        for p, r, s in parts))


def test_the_bound_is_the_busiest_brokers_bytes_in_or_out_at_the_throttle():
    snap = snapshot((0, (1, 2), {1: 6_000_000, 2: 5_000_000}), (1, (1, 3), {1: 2_000_000, 3: 2_000_000}),
                    (2, (2, 3), {2: 1_000_000, 3: 1_000_000}))
    plan = ReassignmentPlan(moves=(
        Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(1, 4)),  # 6 MB, the largest replica
        Move(topic="t", partition=1, current_replicas=(1, 3), target_replicas=(1, 5)),  # 2 MB
        Move(topic="t", partition=2, current_replicas=(2, 3), target_replicas=(2, 4)),  # 1 MB
    ))
    # out of leader 1: 6 + 2 = 8 MB; into broker 4: 6 + 1 = 7 MB; at 1 MB/s the bound is 8 s
    assert plan_throttle_bound_s(plan, snap, throttle=1_000_000) == 8.0
    assert plan_throttle_bound_s(plan, snap, throttle=4_000_000) == 2.0


def test_a_partition_without_sizes_is_named():
    snap = snapshot((0, (1, 2), None))
    plan = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(1, 3)),))
    with pytest.raises(ValueError, match=r"no size for \['t-0'\]: take it with include_sizes=True"):
        plan_throttle_bound_s(plan, snap, throttle=1_000_000)
