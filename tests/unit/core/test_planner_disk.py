"""Load-aware planning: capacity documents, the disk step's goals, offload, refusals, bounds."""

from __future__ import annotations

import re

import pytest

from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.synthetic import (
    snapshot_from_assignment,
    synthetic_capacities,
    synthetic_cluster,
    to_snapshot,
)
from airflow_kafka_reassign.core.vocabulary.capacity import BrokerCapacity, CapacityDocument, capacity_document, load_capacity
from airflow_kafka_reassign.exceptions import ConfigurationError

GB = 10**9


def _cluster(brokers: int = 12, replicas: int = 3000, seed: int = 1):
    c = synthetic_cluster(brokers=brokers, racks=3, replicas=replicas, sizes="skewed", seed=seed)
    return c, to_snapshot(c)


def _doc(caps: dict[int, int]) -> CapacityDocument:
    return CapacityDocument(brokers={b: BrokerCapacity(disk=v) for b, v in caps.items()})


def _final(snapshot, result):
    moved = {(m.topic, m.partition): m.target_replicas for m in result.plan.moves}
    return {p.tp: moved.get((p.topic, p.partition), p.replicas) for p in snapshot.partitions}


# -- capacity documents ----------------------------------------------------------------------

@pytest.mark.parametrize(
    ("doc", "brokers", "message"),
    [
        ({"default": {"disk": "1TB"}, "brokers": {"9": {"disk": "1TB"}}}, {0: "a", 1: "b"}, "broker(s) [9]"),
        ({"default": {"disk": "1TB"}, "racks": {"zz": {"disk": "1TB"}}}, {0: "a", 1: "b"}, "rack(s) ['zz']"),
        ({"brokers": {"0": {"disk": "1TB"}}}, {0: "a", 1: "b"}, "no capacity for broker(s) [1]"),
    ],
)
def test_capacity_document_that_does_not_fit_the_cluster_is_refused(doc, brokers, message):
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        capacity_document(doc).resolve(brokers)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"default": {"disk": 0}}, "default.disk: disk capacity 0 is not positive"),
        ({"default": {"disk": "-5GB"}}, "default.disk: disk capacity '-5GB' is not positive"),
        ({"brokers": {"3": {"disk": -1}}}, "brokers.3.disk: disk capacity -1 is not positive"),
        ({"default": {"disk": "2 parsecs"}}, "is not a size"),
        ({"default": {"disk": "1TB", "network_in": 0}}, "network_in capacity 0 is not positive"),
        ({"default": {"disk": "1TB", "cpu": 4}}, "default.cpu"),
    ],
)
def test_bad_capacity_values_name_the_field_and_number(doc, message):
    with pytest.raises(ConfigurationError, match=message):
        capacity_document(doc)


def test_capacity_overrides_broker_then_rack_then_default_and_units(tmp_path):
    f = tmp_path / "cap.yaml"
    f.write_text("default: {disk: 2TiB}\nracks: {b: {disk: 4T}}\nbrokers: {2: {disk: 1000, network_in: 100MiB}}\n")
    caps = load_capacity(f).resolve({0: "a", 1: "b", 2: "b"})
    assert caps[0].disk == 2 * 1024**4
    assert caps[1].disk == 4 * 10**12
    assert (caps[2].disk, caps[2].network_in) == (1000, 100 * 1024**2)
    j = tmp_path / "cap.json"
    j.write_text('{"default": {"disk": 5}}')
    assert load_capacity(j).resolve({7: None})[7].disk == 5


@pytest.mark.parametrize(("doc", "brokers", "totals", "expected"), [
    ("cluster", {1: "a", 2: "b"}, {1: 100, 2: 200}, {1: 100, 2: 200}),
    ({"default": {"disk": "2TiB"}, "racks": {"b": {"disk": "cluster", "network_in": "1MiB"}}}, {1: "a", 2: "b"},
     {1: 7, 2: 9}, {1: 2 * 1024**4, 2: 9}),
    ({"default": {"disk": "cluster"}, "brokers": {"1": {"disk": 50}}}, {1: "a", 2: "b"}, {2: 300}, {1: 50, 2: 300}),
], ids=["all", "one-rack-keeps-its-network-in", "a-broker-override"])
def test_a_cluster_disk_is_filled_from_what_each_broker_reports(doc, brokers, totals, expected):
    cap = load_capacity(doc) if isinstance(doc, str) else capacity_document(doc)
    assert cap.from_cluster
    with pytest.raises(ConfigurationError, match="takes disks from the cluster.*not read.*snapshot --sizes"):
        cap.resolve(brokers)  # never planned with the placeholder
    filled = cap.with_cluster_disks(totals, brokers)
    assert {b: c.disk for b, c in filled.resolve(brokers).items()} == expected
    if "racks" in doc:
        assert filled.resolve(brokers)[2].network_in == 1024**2


@pytest.mark.parametrize(("doc", "brokers", "totals", "message"), [
    ("cluster", {1: "a", 2: "b"}, {1: 100}, r"broker\(s\) \[2\] from the cluster.*report no log-dir size.*Kafka 3.3"),
    ({"default": {"disk": "cluster"}, "brokers": {"9": {"disk": 5}}}, {1: "a"}, {1: 100},
     r"names broker\(s\) \[9\], which the cluster does not have"),
    ({"default": {"disk": "clusterr"}}, {1: "a"}, {1: 100}, "disk: 'clusterr' is not a size"),
])
def test_a_cluster_disk_that_cannot_be_filled_is_refused_naming_the_broker(doc, brokers, totals, message):
    with pytest.raises(ConfigurationError, match=message):
        capacity_document(doc).with_cluster_disks(totals, brokers)


def test_impossible_cap_is_refused_before_planning_with_the_numbers():
    snap = snapshot_from_assignment({0: None, 1: None}, {"t": [[0, 1]]}, sizes={"t": [900]})
    with pytest.raises(ConfigurationError, match=r"1,800 bytes .* may hold 1,700 \(85% of 2,000\)"):
        plan_reassignment(snap, PlanRequest(capacity=_doc({0: 1000, 1: 1000})))


def test_capacity_needs_sizes_and_offload_needs_capacity():
    snap = snapshot_from_assignment({0: None, 1: None}, {"t": [[0, 1]]})
    with pytest.raises(ConfigurationError, match="needs replica sizes"):
        plan_reassignment(snap, PlanRequest(capacity=_doc({0: 1000, 1: 1000})))
    with pytest.raises(ValueError, match="goal offload needs capacity"):
        PlanRequest(goal="offload")
    with pytest.raises(ValueError, match="offload_threshold only applies to goal offload"):
        PlanRequest(offload_threshold=0.5, capacity=_doc({0: 1}))


def test_unknown_broker_in_capacity_is_refused_by_the_planner():
    _, snap = _cluster(brokers=6, replicas=300)
    with pytest.raises(ConfigurationError, match=r"broker\(s\) \[42\]"):
        plan_reassignment(snap, PlanRequest(capacity=_doc({**dict.fromkeys(range(6), 10**15), 42: 1})))


# -- goals -----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2])
def test_rebalance_balances_disk_share_under_the_cap_with_counts_racks_and_rf_kept(seed):
    c, snap = _cluster(brokers=30, replicas=20000, seed=seed)
    caps = synthetic_capacities(c, fill=0.6)
    result = plan_reassignment(snap, PlanRequest(capacity=_doc(caps)))
    disk = result.disk
    assert disk is not None
    assert disk.max_deviation_before > 0.5  # heterogeneous disks: far from balanced before
    # within 5 points of the mean share, or a warning names the broker and why
    outside = [b for b in disk.capacity if abs(disk.share_after(b) - disk.mean_share) > 0.05]
    for b in outside:
        assert any(w.startswith((f"broker {b} ", "rack ")) for w in result.warnings), (b, result.warnings)
    assert len(outside) <= 3
    assert disk.max_deviation_after < disk.max_deviation_before / 4
    assert disk.over_cap() == []
    assert result.after.replica_max_min <= 2
    assert result.after.rack_violations == 0
    assert result.after.rf_changes == 0
    assert result.bytes_lower_bound is not None and result.bytes_to_move is not None
    assert result.bytes_lower_bound <= result.bytes_to_move <= 1.15 * result.bytes_lower_bound
    assert result.lower_bound <= result.replica_moves
    # predicted per-broker bytes are those of the final assignment
    sizes = {p.tp: max(p.replica_sizes.values()) for p in snap.partitions}
    got: dict[int, int] = {}
    for tp, reps in _final(snap, result).items():
        for b in reps:
            got[b] = got.get(b, 0) + sizes[tp]
    assert got == {b: v for b, v in disk.bytes_after.items() if v}


def test_half_capacity_broker_gets_half_the_bytes():
    c, snap = _cluster(brokers=9, replicas=6000, seed=3)
    caps = dict.fromkeys(range(9), 0)
    base = synthetic_capacities(c, fill=0.5, classes=(1.0,))
    caps = {b: (v // 2 if b == 4 else v) for b, v in base.items()}
    result = plan_reassignment(snap, PlanRequest(capacity=_doc(caps), disk_tolerance=0.03))
    d = result.disk
    assert abs(d.share_after(4) - d.mean_share) <= 0.05
    assert d.bytes_after[4] < 0.7 * sum(d.bytes_after[b] for b in range(9) if b != 4) / 8


def test_without_capacity_the_count_only_plan_is_unchanged():
    _, snap = _cluster(brokers=12, replicas=3000)
    plain = plan_reassignment(snap, PlanRequest(use_sizes=True))
    assert plain.disk is None and plain.bytes_lower_bound is None
    assert "disk" not in plain.summary() and "disk" not in plain.lower_bound_parts


def test_offload_only_brokers_above_the_threshold_send():
    c, snap = _cluster(brokers=12, replicas=4000, seed=5)
    caps = synthetic_capacities(c, fill=0.55)
    result = plan_reassignment(snap, PlanRequest(goal="offload", capacity=_doc(caps), offload_threshold=0.7))
    d = result.disk
    above = {b for b in d.capacity if d.share_before(b) > 0.7}
    assert above, "the fixture must have brokers above the threshold"
    senders = {b for m in result.plan.moves for b in m.current_replicas if b not in m.target_replicas}
    receivers = {b for m in result.plan.moves for b in m.target_replicas if b not in m.current_replicas}
    assert senders and senders <= above
    assert not receivers & above
    for b in above:
        assert d.share_after(b) < d.share_before(b)
    for b in d.capacity:
        if b not in above:
            assert d.bytes_after[b] >= d.bytes_before[b]
            assert d.share_after(b) <= 0.7 + 1e-9
    assert result.after.rack_violations == 0 and result.after.rf_changes == 0
    assert result.bytes_lower_bound <= result.bytes_to_move <= 1.10 * result.bytes_lower_bound


def test_in_flight_partitions_and_left_out_topics_never_move_in_the_disk_step():
    c = synthetic_cluster(brokers=9, racks=3, replicas=3000, sizes="skewed", in_flight=20, seed=4)
    snap = to_snapshot(c)
    caps = synthetic_capacities(c, fill=0.5)
    result = plan_reassignment(snap, PlanRequest(capacity=_doc(caps), topic_exclude=("topic-0000[0-4]",)))
    moved = {m.topic for m in result.plan.moves}
    assert not any(t.startswith("topic-0000") and t[-1] in "01234" for t in moved)
    assert not {m.tp for m in result.plan.moves} & set(result.excluded_in_flight)


def test_nothing_movable_plans_nothing_and_says_why():
    """Every topic left out (review 2026-11-24: the disk bounds failed on an empty set of movable replicas)."""
    c = synthetic_cluster(brokers=9, racks=3, replicas=600, sizes="skewed", seed=5)
    caps = synthetic_capacities(c, fill=0.5)
    result = plan_reassignment(to_snapshot(c), PlanRequest(capacity=_doc(caps), topic_exclude=(".*",)))
    assert len(result.plan) == 0


def _sandbox_like(big: int = 8_500_000, small: int = 330_000):
    """The sandbox test's layout: racks r1 = {1, 4}, r2 = {2, 5}, r3 = {3}, RF 2 (< 3 racks); 8 MB
    partitions on 1/4 and 2/5, small ones around 3; broker 4 has half the disk of the others."""
    snap = snapshot_from_assignment(
        {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"},
        {"big": [[1, 2], [4, 5], [1, 5], [4, 2]], "small": [[3, 1], [3, 4], [2, 3], [5, 3], [1, 2], [4, 5]]},
        sizes={"big": [big] * 4, "small": [small] * 6},
    )
    unit = int((8 * big + 12 * small) / 0.5 / 4.5)
    return snap, unit, capacity_document({"default": {"disk": unit}, "brokers": {"4": {"disk": unit // 2}}})


@pytest.mark.parametrize("big", [7_000_000, 8_500_000, 8_900_000])
def test_broker_over_its_cap_sends_a_replica_larger_than_any_room_in_the_band(big):
    # an 8 MB replica is larger than the room under any receiver's band top (5% of the disk): the
    # cap is hard and the band is not, so the broker over its cap sends it to one that stays under
    snap, unit, doc = _sandbox_like(big)
    result = plan_reassignment(snap, PlanRequest(capacity=doc, disk_tolerance=0.05))
    d = result.disk
    assert d.share_before(4) > 1.0
    assert d.over_cap() == [], (result.warnings, d.bytes_after)
    assert abs(d.share_after(4) - d.mean_share) < 0.1
    assert result.after.rack_violations == 0 and result.after.rf_changes == 0
    assert result.after.replica_max_min <= 2
    # RF 2 < 3 racks: no rack's bytes are pinned (a rack the passes leave outside the band is
    # only balanced around the share it ended at: "rack ... ends at")
    assert not [w for w in result.warnings if w.startswith("rack ") and " can hold " in w], result.warnings
    # every broker outside the band is named, or its rack
    racks = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"}
    for b in d.capacity:
        if abs(d.share_after(b) - d.mean_share) > 0.05 + 1e-3:
            assert any(w.startswith((f"broker {b} ", f"rack {racks[b]} ")) for w in result.warnings), (b, result.warnings)


def test_rack_holding_one_replica_of_every_partition_gets_its_own_band():
    # RF 3 = racks: each rack holds one replica of every partition, so rack a (twice the disk)
    # cannot reach the mean share; its brokers are balanced around the share it can reach
    brokers = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    parts = [[0, 2, 4]] * 6 + [[1, 3, 5]] * 2
    snap = snapshot_from_assignment(brokers, {"t": parts}, sizes={"t": [1000] * 8})
    caps = {0: 16000, 1: 16000, 2: 8000, 3: 8000, 4: 8000, 5: 8000}
    result = plan_reassignment(snap, PlanRequest(capacity=_doc(caps), disk_tolerance=0.02))
    d = result.disk
    assert result.after.rack_violations == 0
    notes = [w for w in result.warnings if w.startswith("rack ")]
    assert notes[0] == (
        "rack a can hold no more than 25.0% of its disk, not the mean share: replicas that must keep a copy "
        "in each rack (RF >= racks) or may not move fix its bytes; its brokers are balanced around that share"
    )
    assert [w.split(" can hold ")[1][:16] for w in notes[1:]] == ["no less than 50.", "no less than 50."]
    assert d.bytes_after[0] == d.bytes_after[1] == 4000
    assert d.bytes_after[2] == d.bytes_after[3] == d.bytes_after[4] == d.bytes_after[5] == 4000


# -- the disk step's count windows ---------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_count_window_checks_match_recounting(seed):
    """The disk step's O(1) check of a move against the count window (max - min within the
    limit) gives what recounting every broker gives, and keeps min and max exact."""
    import random

    from airflow_kafka_reassign.core.planner.disk import _Spread

    rng = random.Random(seed)
    for _ in range(300):
        nb = rng.randint(2, 6)
        counts = {b: rng.randint(0, 5) for b in range(nb) if rng.random() < 0.8}
        spread = _Spread(dict(counts), nb, rng.randint(1, 3))
        full = {b: counts.get(b, 0) for b in range(nb)}
        for _ in range(20):
            src, dst = rng.sample(range(nb), 2)
            if full[src] == 0:
                continue
            after = dict(full)
            after[src] -= 1
            after[dst] += 1
            ok = max(after.values()) - min(after.values()) <= spread.limit
            assert spread.allows(src, dst) == ok, (full, src, dst)
            if ok or rng.random() < 0.5:
                spread.move(src, dst)
                full = after
                assert (spread.lo, spread.hi) == (min(full.values()), max(full.values()))


@pytest.mark.parametrize("seed", [1, 2])
def test_disk_step_balances_counts_itself_with_the_smallest_replicas(seed):
    # a skewed cluster (counts 30% off): per-topic balance ranks below disk balance, so the count
    # steps move nothing for it; the disk step brings the counts within 2 with the smallest
    # replicas, then balances bytes, within 1.10x of the bytes any plan must move
    c = synthetic_cluster(brokers=30, racks=3, replicas=20000, sizes="skewed", skew=0.5, seed=seed)
    snap = to_snapshot(c)
    result = plan_reassignment(snap, PlanRequest(capacity=_doc(synthetic_capacities(c, fill=0.6))))
    assert result.before.replica_max_min > 50
    assert result.after.replica_max_min <= 2
    assert result.after.rack_violations == 0 and result.after.rf_changes == 0
    assert result.disk is not None and result.disk.over_cap() == []
    assert result.disk.max_deviation_after <= 0.05
    assert result.bytes_to_move <= 1.10 * result.bytes_lower_bound
    assert result.lower_bound <= result.replica_moves


@pytest.mark.parametrize(
    ("counts_after", "expected"),
    [
        # counts may not change (max-min 0, at least 1): the two large replicas leaving broker 0
        # need two replicas coming back (swaps), whatever t the window starts at
        ({0: 4, 1: 4}, 4),
        # counts may end 2 apart: broker 0 sends its two largest and takes one small one back
        # (4 - 2 = 2 would leave the counts 4 apart)
        ({0: 3, 1: 5}, 3),
    ],
)
def test_replica_moves_bound_counts_the_swaps_that_counts_force(counts_after, expected):
    from airflow_kafka_reassign.core.planner.disk import DiskGoal, replica_moves_lower_bound_disk

    goal = DiskGoal(capacity={0: 1000, 1: 1000}, tolerance=0.02)
    before = {0: 400, 1: 4}
    after = {0: 203, 1: 201}
    largest = {0: [100, 100, 100, 100], 1: [1, 1, 1, 1]}
    # without counts: only the replicas covering broker 0's bytes above the band
    assert replica_moves_lower_bound_disk(before, after, goal, [0, 1], 404, largest) == 2
    got = replica_moves_lower_bound_disk(
        before, after, goal, [0, 1], 404, largest, counts={0: 4, 1: 4}, counts_after=counts_after
    )
    assert got == expected
