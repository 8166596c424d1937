"""The metrics before and after a plan counted once plus the changed rows (PlanMetrics, what the
``finish`` stage adds up) against every row counted twice by two MetricsAccumulator (what it did
before), on random topics: RF changes, replicas on removed brokers, rack violations made and
mended, topics whose balance is reported or not, changes that leave a row as it was, parts merged."""

from __future__ import annotations

import random

import pytest

from airflow_kafka_reassign.core.planner.metrics import MetricsAccumulator, PlanMetrics

BROKERS = [1, 2, 3, 4, 5, 6]
RACKS = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c", 7: "c", 8: None}  # 7, 8: removed


Rows = list[tuple[int, tuple[int, ...], int | None]]


def random_topic(rng: random.Random) -> tuple[Rows, dict[int, tuple[int, ...]]]:
    sized = rng.random() < 0.8
    rows = []
    for p in sorted(rng.sample(range(12), rng.randint(0, 8))):
        reps = tuple(rng.sample([*BROKERS, 7, 8], rng.randint(1, 4)))
        rows.append((p, reps, rng.randint(0, 1000) if sized else None))
    changed = {}
    for p, reps, _ in rows:
        if rng.random() < 0.4:
            pool = BROKERS if rng.random() < 0.9 else [*BROKERS, 7]
            k = len(reps) if rng.random() < 0.8 else rng.randint(1, 4)
            changed[p] = reps if rng.random() < 0.15 else tuple(rng.sample(pool, k))
    return rows, changed


@pytest.mark.parametrize("seed", range(8))
def test_the_same_metrics_as_every_row_counted_twice(seed: int) -> None:
    rng = random.Random(seed)
    parts = [PlanMetrics(BROKERS, RACKS) for _ in range(3)]
    before = MetricsAccumulator(BROKERS, RACKS, topics=())
    after = MetricsAccumulator(BROKERS, RACKS, topics=())
    for t in range(40):
        topic = f"t{t:02d}"
        rows, changed = random_topic(rng)
        report = rng.random() < 0.7
        rng.choice(parts).add_topic(topic, rows, changed, report=report)
        if report:
            before.topics.add(topic)  # type: ignore[union-attr]
            after.topics.add(topic)  # type: ignore[union-attr]
        before.add((topic, reps, len(reps), size) for _, reps, size in rows)
        after.add((topic, changed.get(p, reps), len(reps), size) for p, reps, size in rows)
    merged = PlanMetrics(BROKERS, RACKS)
    for part in parts:
        merged.merge(part)
    got_before, got_after = merged.result()
    assert got_before == before.result()
    assert got_after == after.result()
    assert got_after != got_before  # the changes changed something


def test_a_topic_moved_evenly_reports_its_new_spread() -> None:
    metrics = PlanMetrics([1, 2, 3], {})
    rows = [(0, (1,), 10), (1, (1,), 10), (2, (1,), 10)]
    metrics.add_topic("t", rows, {1: (2,), 2: (3,)}, report=True)
    before, after = metrics.result()
    assert (before.topic_replica_max_min, after.topic_replica_max_min) == (3, 0)
    assert before.worst_topic == "t" and after.worst_topic is None
    assert after.replicas_per_broker == {1: 1, 2: 1, 3: 1}
    assert after.bytes_per_broker == {1: 10, 2: 10, 3: 10}
