"""The bytes-in step (core/planner/ingress.py) on plain data: which exchange it picks, what refuses one,
and what it says when it stops short. Small table-driven fixtures; the step at scale is in
tests/benchmarks/bench_ingress.py."""

from __future__ import annotations

import itertools
import random

import pytest

from airflow_kafka_reassign.core.planner.disk import DiskGoal
from airflow_kafka_reassign.core.planner.ingress import STOP_REASONS, IngressGoal, IngressStep, _Window
from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicPartitions

GB, MB = 10**9, 10**6


def step(partitions, *, racks=None, disk=20 * GB, network=100 * MB, tolerance=0.02, cap=0.85, count_spread=2,
         fixed_bytes=None, original=None, frozen=None):
    """The step alone on one topic: ``partitions`` is [(replicas, size, rate), ...]; ``original``: the replicas
    before the plan (default: the same, nothing moved yet). Returns the outcome, the final replicas and bytes."""
    brokers = sorted({b for reps, _, _ in partitions for b in reps} | set(racks or ()))
    racks = racks or dict.fromkeys(brokers, 0)
    reps = [tuple(r) for r, _, _ in partitions]
    sizes = [s for _, s, _ in partitions]
    topic = TopicPartitions(topic="t", partitions=list(range(len(reps))), replicas=list(original or reps),
                            target_rf=[len(r) for r in reps], sizes=sizes, frozen=frozen)
    layout = BrokerLayout(brokers=tuple(brokers), rack_of=racks, rack_names=tuple(sorted(set(racks.values()))))
    goal = IngressGoal(
        capacity=dict.fromkeys(brokers, network), tolerance=0.05,
        disk=DiskGoal(capacity=dict.fromkeys(brokers, disk), cap=cap, tolerance=tolerance, count_spread=count_spread,
                      topic_spread=10**9))
    out = IngressStep([topic], [reps], [[r for _, _, r in partitions]], layout, fixed_bytes or {}, {}, {}, goal).run()
    final = list(reps)
    for (_, pi), r in out.changed.items():
        final[pi] = r
    after = dict.fromkeys(brokers, 0) | dict(fixed_bytes or {})
    for r, s in zip(final, sizes, strict=True):
        for b in r:
            after[b] += s
    return out, final, after


def share_deviation(out, network=100 * MB):
    mean = sum(out.after.values()) / len(out.after)
    return max(abs(x - mean) for x in out.after.values()) / network


# -- the exchange it picks --------------------------------------------------------------------

def test_a_swap_evens_rates_with_a_cold_partner_of_the_same_size():
    # brokers 1 and 2 are even on disk (4 GB each) and counts (4 each); broker 1 takes in 40 MB/s, broker 2 none.
    # Broker 2's cold replicas are 1 GB and 3 GB ones; with a 2-point disk band (0.4 GB) only a 1 GB partner keeps
    # both disks in the band: the step swaps a 1 GB hot replica for a 1 GB cold one, twice.
    parts = [((1,), GB, 10 * MB)] * 4 + [((2,), GB, 0.0)] * 2 + [((2,), 3 * GB // 2, 0.0)] * 1 + [((2,), GB // 2, 0.0)]
    out, final, after = step(parts, disk=10 * GB)
    assert out.swaps == 2 and out.moves == 4, out
    assert share_deviation(out) <= 0.05 + 1e-9 and out.after == {1: 20 * MB, 2: 20 * MB}
    assert after == {1: 4 * GB, 2: 4 * GB}
    moved_back = [pi for pi, r in enumerate(final) if pi >= 4 and r == (1,)]
    assert all(parts[pi][1] == GB for pi in moved_back), moved_back
    assert not out.stopped_by and not out.warnings


def test_a_plain_move_when_the_disk_band_and_counts_leave_room():
    # a wide disk band and count window: hot replicas simply move, no replica comes back
    parts = [((1,), GB, 10 * MB)] * 4 + [((2,), GB, 0.0)] * 4
    out, _, _ = step(parts, disk=100 * GB, tolerance=0.5, count_spread=4)
    assert out.moves == 2 and out.swaps == 0 and out.after == {1: 20 * MB, 2: 20 * MB}


def test_replicas_an_earlier_step_placed_move_on_first_they_cost_no_more_bytes():
    # partitions 0 and 1 were on broker 3 before the plan: the disk step put them on broker 1; moving them
    # on to broker 2 still moves each once, where moving partitions 2 or 3 (broker 1's own) adds bytes
    parts = [((1,), GB, 10 * MB)] * 4 + [((2,), GB, 0.0)] * 4 + [((3,), GB, 0.0)] * 4
    original = [(3,), (3,), (1,), (1,)] + [(2,)] * 4 + [(3,)] * 4
    out, final, _ = step(parts, original=original, disk=100 * GB, tolerance=0.5, count_spread=4)
    moved = {pi for pi, r in enumerate(final) if r != parts[pi][0]}
    assert {0, 1} & moved and not {2, 3} & moved, final


@pytest.mark.parametrize(
    ("case", "kwargs", "reason"),
    [
        ("the disk band: a 1 GB hot replica has only 0.1 GB cold partners, 0.9 GB more than the band allows",
         {"cold": GB // 10, "fixed_bytes": {3: 3_600_000_000, 4: 3_600_000_000}}, "disk band"),
        ("the cap: the receivers are near 85%, however wide the band",
         {"cold": GB // 10, "tolerance": 0.5, "fixed_bytes": {3: 16_500_000_000, 4: 16_500_000_000}}, "disk band"),
        ("racks: broker 1 is its rack's only broker and every partition keeps two racks",
         {"racks": {1: 0, 2: 1, 3: 1, 4: 1}}, "racks"),
        ("pinned: broker 1's and 2's busy partitions are in flight", {"frozen": True}, "pinned"),
    ],
)
def test_each_refusal_is_named_in_what_stopped_the_broker(case, kwargs, reason):
    cold = kwargs.pop("cold", GB)
    frozen = kwargs.pop("frozen", False)
    parts = [((1, 2), GB, 10 * MB)] * 4 + [((3, 4), cold, 0.0)] * 4
    out, final, after = step(parts, frozen=[True] * 4 + [False] * 4 if frozen else None, **kwargs)
    assert out.stopped_by.get(1) == reason, (case, out.stopped_by)
    assert out.warnings and STOP_REASONS[reason] in out.warnings[0], (case, out.warnings)
    assert "broker(s) [1" in out.warnings[0]
    for reps in final:  # RF unchanged, a replica per broker at most
        assert len(set(reps)) == 2


def test_a_replica_busier_than_any_band_leaves_its_broker_above_and_says_so():
    # one partition alone takes 60 MB/s on broker 1 (band 20 +- 5): no receiver can take it without going above
    # its own band, and no partner is busy enough to swap for it
    parts = [((1,), GB, 60 * MB)] + [((2,), GB, 5 * MB)] + [((3,), GB, 0.0)] * 2 + [((1,), GB, 0.0)]
    out, final, _ = step(parts, disk=100 * GB, tolerance=0.5, count_spread=4)
    assert final[0] == (1,)
    assert out.stopped_by.get(1) == "too busy", out.stopped_by


# -- the count window: O(1) checks that agree with recounting -------------------------------

@pytest.mark.parametrize("seed", range(5))
def test_the_count_window_agrees_with_recounting_the_brokers(seed):
    rng = random.Random(seed)
    brokers = list(range(6))
    counts = {b: rng.randrange(3, 7) for b in brokers}
    window = _Window(counts, brokers, spread=2)
    limit = window.limit
    for _ in range(200):
        src, dst = rng.sample(brokers, 2)
        after = dict(counts)
        after[src] -= 1
        after[dst] += 1
        expected = max(after.values()) - min(after.values()) <= limit
        assert window.allows(src, dst) == expected, (counts, src, dst)
        if expected:
            window.apply(src, dst)
            counts = after
        assert (window.hi, window.lo) == (max(counts.values()), min(counts.values()))


def test_every_pair_of_a_window_at_its_limit():
    window = _Window({1: 5, 2: 3, 3: 4}, [1, 2, 3], spread=2)
    allowed = {(s, d) for s, d in itertools.permutations((1, 2, 3), 2) if window.allows(s, d)}
    # 1 -> 2 evens out; 2 -> 1 would spread 6 and 2; moves that keep max - min <= 2 pass
    assert allowed == {(1, 2), (1, 3), (3, 2)}
