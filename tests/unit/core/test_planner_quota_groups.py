"""The quota step per group of topics (what the Spark job runs as tasks): same guarantees as
the step over every topic at once, results independent of how the groups run, a fallback
when a group cannot meet its share."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from airflow_kafka_reassign.core.planner import PlanRequest, TopicParams, compute_quotas, plan_reassignment, plan_topic
from airflow_kafka_reassign.core.planner.quotas import (
    QuotaGroup,
    rack_bounds,
    rack_shares,
    solve_quota_group,
    split_capacity,
)
from airflow_kafka_reassign.core.planner.synthetic import planner_scope, synthetic_cluster, to_snapshot
from airflow_kafka_reassign.core.planner.types import BrokerLayout

SCENARIOS = {
    "scale-out": ({"brokers": 12, "racks": 3, "new_brokers": 3}, ()),
    "decommission": ({"brokers": 12, "racks": 3}, (9, 10, 11)),
    "skewed": ({"brokers": 12, "racks": 3, "skew": 0.6}, ()),
    "one rack": ({"brokers": 12, "racks": 1, "new_brokers": 2}, ()),
}


def scope_of(name: str, replicas: int = 30_000):
    kwargs, removed = SCENARIOS[name]
    return planner_scope(synthetic_cluster(replicas=replicas, seed=5, **kwargs), removed=removed)


def moves(sc, quotas) -> int:  # noqa: ANN001
    return sum(m.replica_moves for t in sc.topics for m in plan_topic(t, quotas[t.topic], sc.layout, TopicParams()))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_groups_keep_every_guarantee_of_the_global_step(name: str) -> None:
    sc = scope_of(name)
    loads = [t.load(sc.layout) for t in sc.topics]
    calls: list[int] = []

    def counting(groups: Sequence[QuotaGroup], layout: BrokerLayout) -> list[list[tuple[int, ...]] | None]:
        calls.append(len(groups))
        return [solve_quota_group(g, layout) for g in groups]

    grouped = compute_quotas(loads, sc.layout, sc.fixed_load, group_replicas=5_000, map_groups=counting)
    whole = compute_quotas(loads, sc.layout, sc.fixed_load, group_replicas=0)
    assert calls and calls[0] >= 5 and grouped.groups == calls[0]  # it did run per group
    assert whole.groups == 0
    totals = Counter[int](sc.fixed_load)
    for ld in loads:
        q = grouped.quotas[ld.topic]
        assert sum(q) == ld.replicas
        assert max(q) - min(q) <= max(max(whole.quotas[ld.topic]) - min(whole.quotas[ld.topic]), 1)
        totals.update(dict(zip(sc.layout.brokers, q, strict=True)))
    spread = max(totals[b] for b in sc.layout.brokers) - min(totals[b] for b in sc.layout.brokers)
    assert spread <= 1
    assert grouped.broker_loads == {b: totals[b] for b in sc.layout.brokers}
    assert moves(sc, grouped.quotas) <= 1.02 * moves(sc, whole.quotas)


def test_the_result_does_not_depend_on_how_the_groups_run() -> None:
    sc = scope_of("scale-out")
    loads = [t.load(sc.layout) for t in sc.topics]

    def backwards(groups: Sequence[QuotaGroup], layout: BrokerLayout) -> list[list[tuple[int, ...]] | None]:
        return [solve_quota_group(g, layout) for g in reversed(groups)][::-1]

    here = compute_quotas(loads, sc.layout, group_replicas=5_000)
    assert compute_quotas(loads, sc.layout, group_replicas=5_000, map_groups=backwards) == here
    assert compute_quotas(list(reversed(loads)), sc.layout, group_replicas=5_000).quotas == here.quotas


def test_a_group_that_cannot_meet_its_share_sends_every_topic_to_the_global_step() -> None:
    sc = scope_of("skewed")
    loads = [t.load(sc.layout) for t in sc.topics]

    def one_fails(groups: Sequence[QuotaGroup], layout: BrokerLayout) -> list[list[tuple[int, ...]] | None]:
        return [None if i == 1 else solve_quota_group(g, layout) for i, g in enumerate(groups)]

    assert compute_quotas(loads, sc.layout, group_replicas=5_000, map_groups=one_fails) == compute_quotas(
        loads, sc.layout, group_replicas=0
    )


def test_a_group_asked_for_more_than_its_topics_can_take_says_so() -> None:
    sc = scope_of("scale-out", replicas=600)
    loads = [t.load(sc.layout) for t in sc.topics][:1]
    whole = compute_quotas(loads, sc.layout, group_replicas=0)
    sizes = sc.layout.rack_sizes()
    lo, hi = rack_bounds(loads[0].rf_counts, sizes, loads[0].replicas)
    share = rack_shares(loads[0].replicas, lo, hi, sizes)
    # all of the topic's extras asked of one broker: one extra per broker at most
    capacity = [0] * len(sc.layout.brokers)
    capacity[0] = share.extras + 1
    assert solve_quota_group(QuotaGroup(tuple(loads), (share,), tuple(capacity)), sc.layout) is None
    assert sum(whole.quotas[loads[0].topic]) == loads[0].replicas


@pytest.mark.parametrize(("remaining", "extras"), [([5, 5, 4, 0], [7, 7]), ([3, 1, 2], [1, 2, 3]), ([9], [2, 3, 4])])
def test_split_capacity_keeps_every_row_and_column_exact(remaining: list[int], extras: list[int]) -> None:
    cap = split_capacity(remaining, extras)
    assert [sum(row) for row in cap] == extras
    assert [sum(cap[g][i] for g in range(len(extras))) for i in range(len(remaining))] == remaining
    total = sum(extras)
    for g, row in enumerate(cap):
        for i, c in enumerate(row):
            assert abs(c - remaining[i] * extras[g] / total) < 1  # proportional, rounded


def test_small_clusters_are_planned_as_before() -> None:
    sc = scope_of("skewed", replicas=3_000)
    loads = [t.load(sc.layout) for t in sc.topics]
    assert compute_quotas(loads, sc.layout) == compute_quotas(loads, sc.layout, group_replicas=0)


def test_the_request_sets_the_group_size_and_plans_stay_sound() -> None:
    cluster = synthetic_cluster(replicas=20_000, brokers=10, racks=3, new_brokers=2, seed=9)
    snapshot = to_snapshot(cluster, validate=False)
    grouped = plan_reassignment(snapshot, PlanRequest(goal="add-brokers", quota_group_replicas=4_000))
    whole = plan_reassignment(snapshot, PlanRequest(goal="add-brokers", quota_group_replicas=0))
    assert grouped.after.replica_max_min <= 1
    assert grouped.after.rack_violations == 0
    assert grouped.replica_moves <= 1.05 * grouped.lower_bound
    assert grouped.replica_moves <= 1.02 * whole.replica_moves


def test_targets_more_than_one_apart_keep_every_topic_together() -> None:
    """Racks of 5, 5 and 4 brokers: the rack spread makes the brokers' targets unequal, where
    the step over all topics may widen topics to level them; groups are not used."""
    sc = planner_scope(synthetic_cluster(replicas=30_000, seed=11, brokers=12, racks=3, new_brokers=2))
    loads = [t.load(sc.layout) for t in sc.topics]
    grouped = compute_quotas(loads, sc.layout, group_replicas=4_000)
    assert grouped.groups == 0
    assert grouped == compute_quotas(loads, sc.layout, group_replicas=0)
