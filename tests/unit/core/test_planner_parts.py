"""The planner's pieces on their own: global step, per-topic step, leader fix-up, bounds."""

from __future__ import annotations

import copy
import itertools
import random
from collections import Counter

import pytest

from airflow_kafka_reassign.core.planner import (
    BrokerLayout,
    PlanRequest,
    TopicParams,
    TopicPartitions,
    balance_leaders,
    compute_quotas,
    fewest_leader_changes,
    plan_reassignment,
    plan_topic,
)
from airflow_kafka_reassign.core.planner.lower_bound import _joint_bound, band_bound
from airflow_kafka_reassign.core.synthetic import planner_scope, snapshot_from_assignment, synthetic_cluster


def scope(**kwargs: object):
    return planner_scope(synthetic_cluster(**kwargs))  # type: ignore[arg-type]


# -- global step -------------------------------------------------------------------------


@pytest.mark.parametrize("racks", [1, 3])
def test_quotas_balance_topics_and_brokers(racks: int) -> None:
    sc = scope(brokers=9, new_brokers=3, racks=racks, topics=40, seed=3)
    layout = sc.layout
    loads = [t.load(layout) for t in sc.topics]
    plan = compute_quotas(loads, layout)
    totals = Counter[int]()
    for ld in loads:
        q = plan.quotas[ld.topic]
        assert sum(q) == ld.replicas
        assert max(q) - min(q) <= 1
        totals.update(dict(zip(layout.brokers, q, strict=True)))
    assert max(totals.values()) - min(totals.values()) <= 1
    assert dict(totals) == plan.broker_loads
    assert compute_quotas(loads, layout) == plan  # deterministic


@pytest.mark.parametrize(("fixed", "level"), [(10, True), (30, False)])
def test_quotas_compensate_fixed_load_by_widening_topics(fixed: int, level: bool) -> None:
    """Broker 0 holds ``fixed`` replicas the plan may not move. Each of the 20 topics (all
    without extras here) may drop broker 0 one below its base (max-min 2): enough for 10,
    not for 30, where the topics stay at max-min 1 and a warning says why."""
    sc = scope(brokers=4, topics=20, rf=(2,), seed=1, partition_counts=(2, 4, 6, 8))
    loads = [t.load(sc.layout) for t in sc.topics]
    plan = compute_quotas(loads, sc.layout, {0: fixed})
    totals = {b: fixed * (b == 0) + sum(plan.quotas[ld.topic][i] for ld in loads) for i, b in enumerate(sc.layout.brokers)}
    spread = max(totals.values()) - min(totals.values())
    widths = [max(q) - min(q) for q in plan.quotas.values()]
    if level:
        assert spread <= 1 and max(widths) == 2
    else:
        assert spread > 1 and max(widths) <= 1
        assert any("replicas the plan may not move" in w for w in plan.warnings)


# -- per-topic step ----------------------------------------------------------------------


def test_plan_topic_is_pure_and_meets_its_quotas() -> None:
    sc = scope(brokers=6, new_brokers=2, racks=3, topics=10, rf=(3,), seed=2)
    layout = sc.layout
    loads = [t.load(layout) for t in sc.topics]
    quotas = compute_quotas(loads, layout)
    for topic in sc.topics:
        before = copy.deepcopy(topic)
        moves = plan_topic(topic, quotas.quotas[topic.topic], layout, TopicParams())
        assert topic == before  # inputs untouched
        assert plan_topic(topic, quotas.quotas[topic.topic], layout) == moves
        final = dict(zip(topic.partitions, topic.replicas, strict=True))
        for m in moves:
            assert m.topic == topic.topic and m.current_replicas == final[m.partition]
            assert m.target_replicas != m.current_replicas
            final[m.partition] = m.target_replicas
        counts = Counter(b for reps in final.values() for b in reps)
        assert [counts[b] for b in layout.brokers] == list(quotas.quotas[topic.topic])
        for reps in final.values():
            assert len({layout.rack(b) for b in reps}) == min(len(reps), layout.n_racks)


def test_plan_topic_keeps_leaders_and_moves_only_what_it_must() -> None:
    layout = BrokerLayout(brokers=(0, 1, 2, 3), rack_of={0: 0, 1: 0, 2: 0, 3: 0})
    topic = TopicPartitions("t", [0, 1, 2, 3], [(0, 1), (1, 2), (2, 0), (0, 1)], [2, 2, 2, 2])
    moves = plan_topic(topic, {0: 2, 1: 2, 2: 2, 3: 2}, layout)
    assert sum(m.replica_moves for m in moves) == 2
    assert not any(m.leader_changes for m in moves)


def test_plan_topic_leaves_frozen_partitions_alone() -> None:
    layout = BrokerLayout(brokers=(0, 1, 2), rack_of={0: 0, 1: 0, 2: 0})
    topic = TopicPartitions("t", [0, 1, 2], [(0, 1), (0, 1), (0, 1)], [2, 2, 2], frozen=[True, False, False])
    moves = plan_topic(topic, {0: 2, 1: 2, 2: 2}, layout)
    assert {m.partition for m in moves} <= {1, 2}


def test_plan_topic_accepts_quotas_as_mapping_or_sequence() -> None:
    layout = BrokerLayout(brokers=(0, 1, 2), rack_of={0: 0, 1: 0, 2: 0})
    topic = TopicPartitions("t", [0, 1, 2], [(0, 1), (0, 1), (0, 1)], [2, 2, 2])
    assert plan_topic(topic, [2, 2, 2], layout) == plan_topic(topic, {0: 2, 1: 2, 2: 2}, layout)
    with pytest.raises(ValueError, match="3 brokers"):
        plan_topic(topic, [2, 2], layout)


# -- leader fix-up -----------------------------------------------------------------------


def test_balance_leaders_only_reorders() -> None:
    rng = random.Random(4)
    replicas = [tuple(rng.sample(range(5), 3)) for _ in range(60)]
    replicas = [(0, *[b for b in r if b != 0][:2]) if i % 2 else r for i, r in enumerate(replicas)]
    changes = balance_leaders(replicas, [r[0] for r in replicas], range(5))
    final = [changes.get(i, r) for i, r in enumerate(replicas)]
    assert all(sorted(a) == sorted(b) for a, b in zip(final, replicas, strict=True))
    leaders = Counter(r[0] for r in final)
    assert max(leaders.values()) - min(leaders[b] for b in range(5)) <= 2
    needed = fewest_leader_changes(Counter(r[0] for r in replicas), range(5))
    assert needed <= len(changes) <= 1.1 * needed + 1


def test_fewest_leader_changes_by_hand() -> None:
    # 6 leaders on broker 0 of 3: band [1, 3] needs max(excess 3, deficit 2) = 3
    assert fewest_leader_changes({0: 6, 1: 0, 2: 0}, [0, 1, 2]) == 3
    # a removed broker's leaders all move: 4 of them, live brokers already level
    assert fewest_leader_changes({0: 4, 1: 4, 9: 4}, [0, 1], removed=[9]) == 4
    assert fewest_leader_changes({0: 3, 1: 3}, [0, 1], spread=0) == 0


# -- bounds ------------------------------------------------------------------------------


def test_band_bound_by_hand() -> None:
    # 8 replicas on 4 brokers: 3, 3, 2, 0 -> each 2: broker 3 needs 2
    assert band_bound({0: 3, 1: 3, 2: 2}, 8, [0, 1, 2, 3], 1) == 2
    # a removed broker (9) holds 2: both must land somewhere
    assert band_bound({0: 2, 1: 2, 9: 2}, 6, [0, 1, 2], 1, on_removed=2) == 2


def test_joint_bound_never_exceeds_the_optimum() -> None:
    """Brute force of the extras problem: topics hand e extras to distinct brokers, broker b
    takes at least x_lo[b]; an extra costs 1 unless the broker saves a move there."""
    rng = random.Random(3)
    checked = 0
    for _ in range(400):
        nb, nt = rng.randint(1, 4), rng.randint(1, 3)
        dual = [(rng.randint(0, nb), sorted(rng.sample(range(nb), rng.randint(0, nb))), 0) for _ in range(nt)]
        x_lo = [rng.randint(0, 2) for _ in range(nb)]
        best = None
        for combo in itertools.product(*(itertools.combinations(range(nb), e) for e, _, _ in dual)):
            load = Counter(i for pick in combo for i in pick)
            if all(load[i] >= x_lo[i] for i in range(nb)):
                cost = sum(1 for (_, saving, _), pick in zip(dual, combo, strict=True) for i in pick if i not in saving)
                best = cost if best is None else min(best, cost)
        if best is not None:
            checked += 1
            assert _joint_bound(dual, x_lo) <= best
    assert checked > 100


def _brute_force_min_moves(snapshot, result) -> int:
    """Fewest moves of any assignment reaching the plan's per-topic and global spreads (at
    least 1) with every partition over min(RF, racks) racks: exhaustive search."""
    racks = {b.id: b.rack for b in snapshot.brokers}
    live = snapshot.broker_ids
    k = len({racks[b] for b in live})
    parts = snapshot.partitions
    topics = sorted({p.topic for p in parts})
    w_global = max(1, result.after.replica_max_min)
    w_topic = max(1, result.after.topic_replica_max_min)
    options = []
    for p in parts:
        rf = len(p.replicas)
        opts = [c for c in itertools.combinations(live, rf) if len({racks[b] for b in c}) >= min(rf, k)]
        options.append([(c, sum(1 for b in c if b not in p.replicas)) for c in opts])
    best = None
    for combo in itertools.product(*options):
        cost = sum(c for _, c in combo)
        if best is not None and cost >= best:
            continue
        total = Counter(b for reps, _ in combo for b in reps)
        if max(total[b] for b in live) - min(total[b] for b in live) > w_global:
            continue
        ok = True
        for t in topics:
            tc = Counter(b for (reps, _), p in zip(combo, parts, strict=True) if p.topic == t for b in reps)
            if max(tc[b] for b in live) - min(tc[b] for b in live) > w_topic:
                ok = False
                break
        if ok:
            best = cost
    assert best is not None
    return best


@pytest.mark.parametrize("seed", range(12))
def test_lower_bound_is_below_the_true_optimum_on_tiny_clusters(seed: int) -> None:
    rng = random.Random(seed)
    n_brokers = rng.choice([3, 4])
    racks = rng.choice([None, ["a", "b"], ["a", "b", "c"]])
    brokers = {b: (racks[b % len(racks)] if racks else None) for b in range(n_brokers)}
    topics = {}
    for t in range(rng.choice([1, 2])):
        topics[f"t{t}"] = [rng.sample(range(n_brokers - 1), 2) for _ in range(rng.choice([2, 3]))]
    snapshot = snapshot_from_assignment(brokers, topics)
    goal = rng.choice(["rebalance", "add-brokers"])
    request = PlanRequest(goal=goal, brokers=(n_brokers - 1,) if goal == "add-brokers" else ())
    result = plan_reassignment(snapshot, request)
    optimum = _brute_force_min_moves(snapshot, result)
    assert result.lower_bound <= optimum <= result.replica_moves
