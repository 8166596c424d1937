"""``place`` reads a plain topic's rows as columns (:func:`topic_inputs`, :class:`PlainRows`) instead of
a ``PartitionRow`` per partition through ``prepare_topic`` again: the same topic must come out of
``stage_place`` the same either way, and the lower bound's shortcuts (the band costs from sorted
counts, a usual topic's facts without the per-replica loop) must give what the loops gave."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from airflow_kafka_reassign.core.planner.goals import PlanRequest, plan_context
from airflow_kafka_reassign.core.planner.lower_bound import _band_costs, _facts, topic_facts
from airflow_kafka_reassign.core.planner.metrics import partition_size, target_of
from airflow_kafka_reassign.core.planner.staged import PlainRows, driver_quotas, plain_topic, stage_place, stage_prepare
from airflow_kafka_reassign.core.planner.synthetic import synthetic_snapshot
from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicPartitions
from airflow_kafka_reassign.core.records.snapshot_io import PARTITIONS_SCHEMA
from airflow_kafka_reassign.spark.snapshot_reader import topic_groups, topic_inputs


def batch(rows: list[dict]) -> pa.RecordBatch:
    full = [{"isr": None, "leader": None, "adding_replicas": [], "removing_replicas": [], "replica_sizes": None} | r
            for r in rows]
    return pa.RecordBatch.from_pylist(full, schema=PARTITIONS_SCHEMA)


def test_topic_inputs_give_plain_topics_as_columns_and_the_others_as_topic_groups_does():
    batches = [
        batch([{"topic": "a", "partition": 1, "replicas": [1, 2], "replica_sizes": [5, 9]},
               {"topic": "b", "partition": 2, "replicas": [2, 3], "replica_sizes": [4, 4]}]),
        batch([{"topic": "b", "partition": 0, "replicas": [3, 1], "adding_replicas": None},
               {"topic": "c", "partition": 0, "replicas": [1, 2], "adding_replicas": [2], "replica_sizes": [7, 1]},
               {"topic": "c", "partition": 1, "replicas": [2, 3]},
               {"topic": "d", "partition": 0, "replicas": [1], "replica_sizes": [3]},
               {"topic": "e", "partition": 3, "replicas": [3, 2, 1], "replica_sizes": [1, 8, 2]}]),
        batch([{"topic": "e", "partition": 0, "replicas": [1, 3, 2]},
               {"topic": "x", "partition": 0, "replicas": [1]}]).slice(0, 1),
        batch([{"topic": "f", "partition": 0, "replicas": [1, 2], "replica_sizes": [4]}]),
    ]
    expected = list(topic_groups(batches, check=False))
    got = list(topic_inputs(batches, plain=lambda topic: topic != "d"))
    assert [t for t, _ in got] == [t for t, _ in expected] == ["a", "b", "c", "d", "e", "f"]
    for (topic, x), (_, rows) in zip(got, expected, strict=True):
        if topic in ("c", "d", "f"):  # a row being reassigned; not a plain topic; sizes that do not match
            assert x == rows
            continue
        assert isinstance(x, PlainRows)
        assert x == PlainRows([r.partition for r in rows], [target_of(r) for r in rows],
                              [partition_size(r.replica_sizes) for r in rows])
    assert got[1][1] == PlainRows([0, 2], [(3, 1), (2, 3)], [None, 4])
    assert got[4][1] == PlainRows([0, 3], [(1, 3, 2), (3, 2, 1)], [None, 8])
    assert got[5][1] == "partition f-0: replica_sizes has 1 entries for 2 replicas"


def topics_and_quotas(ctx, snap):
    """Each topic's rows in partition order, by topic name, and the driver's quota step over their prepared inputs."""
    by_topic: dict[str, list] = {}
    for p in snap.partitions:
        by_topic.setdefault(p.topic, []).append(p)
    groups = {t: sorted(rows, key=lambda p: p.partition) for t, rows in sorted(by_topic.items())}
    return groups, driver_quotas(ctx, [stage_prepare(ctx, t, rows) for t, rows in groups.items()])


@pytest.mark.parametrize("request_", [
    PlanRequest(),
    PlanRequest(goal="remove-brokers", brokers=(5,)),
    PlanRequest(rf_changes={"topic-00001": 2}, topic_exclude=("topic-00002",)),
])
def test_a_plain_topic_is_placed_as_prepare_topic_places_it(request_):
    snap = synthetic_snapshot(brokers=9, racks=3, topics=12, sizes="skewed", in_flight=3, seed=4)
    ctx = plan_context(snap.brokers, snap.topics, None, request_, any_sizes=False)
    groups, step = topics_and_quotas(ctx, snap)
    plain = 0
    for topic, rows in groups.items():
        if not plain_topic(ctx, topic) or any(p.reassigning for p in rows):
            continue
        plain += 1
        columns = PlainRows([p.partition for p in rows], [p.replicas for p in rows],
                            [partition_size(p.replica_sizes) for p in rows])
        assert stage_place(ctx, step, topic, columns) == stage_place(ctx, step, topic, rows)
        prep_ctx = plan_context(snap.brokers, snap.topics, None, request_, any_sizes=False)
        assert stage_prepare(prep_ctx, topic, columns) == stage_prepare(prep_ctx, topic, rows)
    assert plain >= 6


def test_prepare_reads_a_plain_topic_as_columns_only_when_its_rows_pass_the_checks():
    good = [{"topic": "a", "partition": 1, "replicas": [1, 2], "replica_sizes": [5, 9]},
            {"topic": "a", "partition": 0, "replicas": [2, 3]}]
    unsound = {  # each row fails check_partition_row (or the topic's checks), in a topic of its own
        "b": {"partition": 0, "replicas": [2, 2]},
        "c": {"partition": -1, "replicas": [1]},
        "d": {"partition": 0, "replicas": []},
        "e": {"partition": 0, "replicas": [1, -2]},
        "f": {"partition": 0, "replicas": [1, 2], "removing_replicas": [3]},
        "g": {"partition": 0, "replicas": [1, 2, 3, 4]},  # more replicas than max_rf
    }
    rows = good + [{"topic": t, **r} for t, r in unsound.items()]
    rows += [{"topic": "h", "partition": 0, "replicas": [1]}, {"topic": "h", "partition": 0, "replicas": [2]}]
    batches = [batch(rows[:3]), batch(rows[3:])]
    got = list(topic_inputs(batches, plain=lambda topic: True, check=True, max_rf=3))
    expected = list(topic_groups(batches, check=True))
    assert [t for t, _ in got] == [t for t, _ in expected] == ["a", "b", "c", "d", "e", "f", "g", "h"]
    assert got[0][1] == PlainRows([0, 1], [(2, 3), (1, 2)], [None, 9])
    assert got[1:] == expected[1:]
    assert all(isinstance(x, str) for _, x in got[1:6])


def _band_costs_loop(counts, n, brokers, width, removals=0, on_removed=0):
    """The band costs as the loop over every broker and every count gave them (before the prefix sums)."""
    nb = len(brokers)
    if nb == 0:
        return 0, 0, 0
    on = [c for c in (counts.get(b, 0) for b in brokers) if c > 0]
    zeros = nb - len(on)
    best_in = best_out = best = None
    for t in range(max(0, -(-n // nb) - width), n // nb + 1):
        hi = t + width
        clamped = zeros * t
        below = over = 0
        for c in on:
            if c < t:
                clamped += t
                below += t - c
            elif c > hi:
                clamped += hi
                over += c - hi
            else:
                clamped += c
        inflow = zeros * t + below + max(0, n - clamped)
        outflow = on_removed + over + max(0, clamped - n)
        cost = max(inflow, outflow - removals)
        best = cost if best is None else min(best, cost)
        best_in = inflow if best_in is None else min(best_in, inflow)
        best_out = outflow if best_out is None else min(best_out, outflow)
    return best_in or 0, best_out or 0, best or 0


def test_the_band_costs_from_sorted_counts_are_the_loops():
    rng = random.Random(7)
    for _ in range(3000):
        brokers = sorted(rng.sample(range(1, 40), rng.randint(1, 12)))
        counts = {b: rng.choice([0, rng.randint(0, 9), rng.randint(0, 60)]) for b in rng.sample(range(1, 45), rng.randint(0, 20))}
        n = rng.randint(0, 200)
        width = rng.randint(1, 4)
        removals, on_removed = rng.randint(0, 5), rng.randint(0, 5)
        want = _band_costs_loop(counts, n, brokers, width, removals, on_removed)
        assert _band_costs(counts, n, brokers, width, removals, on_removed) == want
        assert _band_costs(counts, n, brokers, width, removals, on_removed, frozenset(brokers)) == want


def test_a_usual_topics_facts_are_the_general_loops():
    rng = random.Random(11)
    layout = BrokerLayout(brokers=tuple(range(1, 10)), rack_of={b: (b - 1) % 3 for b in range(0, 12)}, rack_names=("a", "b", "c"))
    for case in range(400):
        n = rng.randint(0, 30)
        pool = list(range(1, 10)) if case % 3 else list(range(0, 12))  # some with replicas on brokers not live
        replicas = [tuple(rng.sample(pool, rng.randint(1, 4))) for _ in range(n)]
        target_rf = [len(r) if case % 5 else rng.randint(1, 4) for r in replicas]
        frozen = [rng.random() < 0.1 for _ in replicas] if case % 7 == 0 else None
        t = TopicPartitions("t", list(range(n)), replicas, target_rf, frozen=frozen, balance=case % 4 != 0)
        for fix in (True, False):
            assert _facts(t, layout, layout.live, fix) == _facts(t, layout, layout.live, fix, shortcut=False)
        assert topic_facts(t, layout).counts == _facts(t, layout, layout.live, shortcut=False).counts


@pytest.mark.parametrize(("cluster", "request_"), [
    ({"brokers": 9, "racks": 3}, PlanRequest()),
    ({"brokers": 10, "racks": 3, "skew": 0.6}, PlanRequest()),  # racks of unequal size: forced rack shares
    ({"brokers": 10, "racks": 3, "rack_violations": 0.3}, PlanRequest(goal="remove-brokers", brokers=(4,))),
    ({"brokers": 8, "racks": 1, "new_brokers": 2}, PlanRequest(goal="add-brokers", brokers=(8, 9))),
    ({"brokers": 7, "racks": 2, "in_flight": 4, "internal_topic": True}, PlanRequest(rf_changes={"topic-00003": 3})),
    ({"brokers": 9, "racks": 3, "rack_violations": 0.2}, PlanRequest(goal="heal")),
])
def test_a_tasks_shares_of_the_bound_at_once_are_the_topics_shares_merged(cluster, request_):
    from airflow_kafka_reassign.core.planner.lower_bound import BoundPart, bound_parts, combine_bound_parts

    snap = synthetic_snapshot(topics=30, sizes="skewed", seed=5, **cluster)
    ctx = plan_context(snap.brokers, snap.topics, None, request_, any_sizes=False)
    groups, step = topics_and_quotas(ctx, snap)
    each = [stage_place(ctx, step, t, rows) for t, rows in groups.items()]
    deferred = [stage_place(ctx, step, t, rows, defer_bound=True) for t, rows in groups.items()]
    merged = BoundPart(ctx.layout.n_racks)
    for x in each:
        if x.bound is not None:
            merged.merge(x.bound)
    at_once = bound_parts([x.facts for x in deferred if x.facts is not None], ctx.layout, balance_brokers=ctx.balance)
    assert at_once == merged
    assert [(x.topic, x.final) for x in deferred] == [(x.topic, x.final) for x in each]
    args = {"balance_brokers": ctx.balance, "fixed_load": step.fixed_load}
    assert combine_bound_parts(at_once, ctx.layout, **args) == combine_bound_parts(merged, ctx.layout, **args)
    assert merged.per_topic > 0 or merged.per_partition > 0 or not ctx.balance
