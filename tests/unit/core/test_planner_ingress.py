"""The bytes-in goal (core/planner/ingress.py) after disk balance, and tiered topics at their local bytes:
small table-driven fixtures, each showing one goal or one refusal."""

from __future__ import annotations

import re

import pytest

from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.synthetic import snapshot_from_assignment
from airflow_kafka_reassign.core.vocabulary.capacity import capacity_document
from airflow_kafka_reassign.core.vocabulary.models import TopicState
from airflow_kafka_reassign.exceptions import ConfigurationError

GB, MB = 10**9, 10**6
NO_RACKS = {1: None, 2: None, 3: None, 4: None}
RACKS = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}


def cluster(brokers, topics, sizes, rates=None, configs=None):
    """A snapshot from ``{topic: [replicas, ...]}``, one size and (optionally) one rate per partition."""
    snap = snapshot_from_assignment(brokers, topics, sizes=sizes)
    if rates is not None:
        snap = snap.model_copy(update={"partitions": tuple(
            p.model_copy(update={"bytes_in_per_s": rates[p.topic][p.partition]}) for p in snap.partitions)})
    if configs:
        snap = snap.model_copy(update={"topics": tuple(
            t.model_copy(update={"configs": configs.get(t.name, {})}) for t in snap.topics)})
    return snap


def hot_and_cold(brokers=NO_RACKS, hot=((1, 2),) * 4, cold=((3, 4),) * 4, cold_size=GB, rate=10 * MB):
    """One topic whose partitions on some brokers are hot (10 MB/s each) and idle elsewhere: replica counts,
    per topic too, and disk already even, so only the bytes-in step has something to do."""
    return cluster(brokers, {"t": [list(r) for r in (*hot, *cold)]},
                   sizes={"t": [GB] * len(hot) + [cold_size] * len(cold)},
                   rates={"t": [rate] * len(hot) + [0.0] * len(cold)})


def doc(disk=20 * GB, network_in="100MB", **brokers):
    out = {"default": {"disk": disk, **({"network_in": network_in} if network_in else {})}}
    if brokers:
        out["brokers"] = {k.removeprefix("b"): v for k, v in brokers.items()}
    return capacity_document(out)


def final(snapshot, result):
    moved = {(m.topic, m.partition): m.target_replicas for m in result.plan.moves}
    return {p.tp: moved.get((p.topic, p.partition), p.replicas) for p in snapshot.partitions}


def check_hard_goals(snapshot, result):
    """RF unchanged, racks valid, counts within 2, no broker over its disk cap."""
    assert result.after.rf_changes == 0 and result.after.rack_violations == 0
    assert result.after.replica_max_min <= 2
    assert result.disk.over_cap() == []
    for reps in final(snapshot, result).values():
        assert len(set(reps)) == len(reps)


# -- the goal -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("name", "brokers", "hot", "cold"),
    [
        ("one rack: swaps between any brokers", NO_RACKS, ((1, 2),) * 4, ((3, 4),) * 4),
        ("three racks: swaps within a rack keep every partition on 3 racks", RACKS, ((1, 2, 3),) * 4,
         ((4, 5, 6),) * 4),
    ],
)
def test_bytes_in_evens_out_by_swaps_when_the_disk_band_allows_no_plain_move(name, brokers, hot, cold):
    snap = hot_and_cold(brokers, hot, cold)
    result = plan_reassignment(snap, PlanRequest(capacity=doc(), ingress_tolerance=0.05))
    flow = result.ingress
    assert flow is not None and flow.balanced, name
    assert flow.max_deviation(after=False) >= 0.15  # hot brokers at 40 MB/s, cold at 0, mean 20
    assert flow.max_deviation(after=True) <= 0.05 + 1e-9, (flow.rate_after, result.warnings)
    assert flow.swaps > 0
    check_hard_goals(snap, result)
    # disk stays exactly as even as it was: every swap exchanges replicas of the same size
    assert result.disk.bytes_after == {b: result.disk.bytes_before[b] for b in result.disk.capacity}
    assert not [w for w in result.warnings if w.startswith("bytes in")], result.warnings


def test_a_plain_move_when_disk_and_counts_allow_it():
    # wide disk band (big disks, 50 points tolerance): one hot replica simply moves
    snap = hot_and_cold(hot=((1, 2),) * 2, cold=((3, 4),) * 2)
    result = plan_reassignment(snap, PlanRequest(capacity=doc(disk=100 * GB), disk_tolerance=0.5,
                                                 ingress_tolerance=0.05))
    flow = result.ingress
    assert flow.moves >= 2 and flow.swaps == 0 and flow.max_deviation() <= 0.05 + 1e-9, flow
    check_hard_goals(snap, result)


def test_heterogeneous_network_in_gets_a_share_of_bytes_in():
    # broker 4's network is twice the others': it ends with more bytes in than any of them
    snap = hot_and_cold(hot=((1, 2),) * 8, cold=((3, 4),) * 8, rate=5 * MB)
    result = plan_reassignment(snap, PlanRequest(
        capacity=doc(disk=40 * GB, b4={"disk": 40 * GB, "network_in": "200MB"}), ingress_tolerance=0.05))
    flow = result.ingress
    assert flow.max_deviation() <= 0.05 + 1e-9, flow.rate_after
    assert flow.rate_after[4] > max(flow.rate_after[b] for b in (1, 2, 3))


def test_bytes_moved_and_the_bound_count_what_bytes_in_must_shed():
    snap = hot_and_cold()
    result = plan_reassignment(snap, PlanRequest(capacity=doc(), ingress_tolerance=0.05))
    # brokers 1 and 2 shed 40 - 25 MB/s each with 10 MB/s replicas of 1 GB: at least 1.5 GB each
    assert result.bytes_lower_bound >= 3 * GB
    assert result.bytes_to_move >= result.bytes_lower_bound


# -- when the step does not run, and refusals -------------------------------------------------

def test_without_network_in_rates_are_reported_but_not_balanced():
    snap = hot_and_cold()
    with_rates = plan_reassignment(snap, PlanRequest(capacity=doc(network_in=None)))
    without = plan_reassignment(hot_and_cold().model_copy(update={"partitions": tuple(
        p.model_copy(update={"bytes_in_per_s": None}) for p in snap.partitions)}), PlanRequest(capacity=doc(network_in=None)))
    assert with_rates.plan == without.plan and without.ingress is None
    flow = with_rates.ingress
    assert not flow.balanced and flow.capacity == {} and flow.rate_before[1] == 40 * MB
    assert "mean_share" not in flow.summary()


def test_network_in_without_rates_in_the_snapshot_warns():
    snap = hot_and_cold()
    snap = snap.model_copy(update={"partitions": tuple(p.model_copy(update={"bytes_in_per_s": None})
                                                       for p in snap.partitions)})
    result = plan_reassignment(snap, PlanRequest(capacity=doc()))
    assert result.ingress is None
    assert any("the snapshot has no bytes-in rates" in w and "sample_window_s" in w for w in result.warnings)


def test_network_in_for_some_brokers_only_is_refused_naming_the_others():
    with pytest.raises(ConfigurationError, match=re.escape("not for broker(s) [1, 2, 3]")):
        plan_reassignment(hot_and_cold(), PlanRequest(capacity=capacity_document(
            {"default": {"disk": 20 * GB}, "brokers": {"4": {"disk": 20 * GB, "network_in": "1GB"}}})))


@pytest.mark.parametrize("tolerance", [0, 1, -0.1])
def test_a_tolerance_outside_0_1_is_refused(tolerance):
    with pytest.raises(ValueError, match="ingress_tolerance"):
        PlanRequest(capacity=doc(), ingress_tolerance=tolerance)


def test_offload_moves_no_replica_for_bytes_in():
    snap = hot_and_cold()
    result = plan_reassignment(snap, PlanRequest(goal="offload", capacity=doc()))
    assert len(result.plan) == 0 and not result.ingress.balanced and result.ingress.moves == 0


def test_frozen_partitions_never_move_for_bytes_in():
    snap = hot_and_cold()
    parts = list(snap.partitions)
    # every hot partition is in flight: nothing can shed broker 1's and 2's bytes in
    parts = [p.model_copy(update={"replicas": (*p.replicas, 3), "adding_replicas": (3,), "removing_replicas": (3,)})
             if p.partition < 4 else p for p in parts]
    snap = snap.model_copy(update={"partitions": tuple(parts)})
    result = plan_reassignment(snap, PlanRequest(capacity=doc()))
    assert not {m.partition for m in result.plan.moves} & {0, 1, 2, 3}
    assert result.ingress.moves == 0


# -- tiered topics --------------------------------------------------------------------------

def test_tiered_partitions_move_at_their_local_bytes_and_are_counted():
    # 'logs' is tiered: DescribeLogDirs reports its 100 MB local segments (the rest is in remote storage),
    # which is all a new replica copies; the plan counts them at that and says how many there are
    snap = cluster(NO_RACKS, {"logs": [[1, 2], [1, 2]], "db": [[1, 2], [3, 4]]},
                   sizes={"logs": [100 * MB, 100 * MB], "db": [GB, GB]},
                   configs={"logs": {"remote.storage.enable": "true"}, "db": {"remote.storage.enable": "false"}})
    assert {t.name: t.is_tiered for t in snap.topics} == {"logs": True, "db": False}
    result = plan_reassignment(snap, PlanRequest(capacity=doc(disk=4 * GB, network_in=None), disk_tolerance=0.02))
    tiered = result.tiered
    assert tiered is not None and (tiered.topics, tiered.partitions) == (1, 2)
    assert (tiered.local_bytes, tiered.total_bytes) == (400 * MB, 4400 * MB)
    moved = {m.topic: m for m in result.plan.moves}
    assert tiered.bytes_to_move == sum(100 * MB * m.replica_moves for m in result.plan.moves if m.topic == "logs")
    assert result.bytes_to_move == sum((100 * MB if m.topic == "logs" else GB) * m.replica_moves
                                       for m in result.plan.moves)
    assert "logs" in moved  # the cheap tiered replicas are what evens the disks out
    assert result.disk.tiered_topics == 1 and result.summary()["tiered"]["partitions"] == 2


def test_no_tiered_report_without_tiered_topics():
    result = plan_reassignment(hot_and_cold(), PlanRequest(capacity=doc()))
    assert result.tiered is None and "tiered" not in result.summary()
    assert TopicState(name="t", partition_count=1, replication_factor=1,
                      configs={"remote.storage.enable": "TRUE"}).is_tiered


# -- the step on plain data: what each limit refuses ----------------------------------------

def run_step(*, racks=None, cold_size=GB, fixed_bytes=None, tolerance=0.02, cap=0.85, count_spread=2):
    """The bytes-in step alone: one topic, hot partitions (10 MB/s) on [1, 2], idle ones on [3, 4]."""
    from airflow_kafka_reassign.core.planner.disk import DiskGoal
    from airflow_kafka_reassign.core.planner.ingress import IngressGoal, IngressStep
    from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicPartitions

    racks = racks or {1: 0, 2: 0, 3: 0, 4: 0}
    reps = [(1, 2)] * 4 + [(3, 4)] * 4
    topic = TopicPartitions(topic="t", partitions=list(range(8)), replicas=list(reps), target_rf=[2] * 8,
                            sizes=[GB] * 4 + [cold_size] * 4)
    layout = BrokerLayout(brokers=(1, 2, 3, 4), rack_of=racks, rack_names=tuple(sorted(set(racks.values()))))
    disk = DiskGoal(capacity=dict.fromkeys((1, 2, 3, 4), 20 * GB), cap=cap, tolerance=tolerance,
                    count_spread=count_spread, topic_spread=count_spread)
    goal = IngressGoal(capacity=dict.fromkeys((1, 2, 3, 4), 100 * MB), disk=disk, tolerance=0.05)
    fixed = fixed_bytes or {}
    out = IngressStep([topic], [reps], [[10 * MB] * 4 + [0.0] * 4], layout, fixed, {}, {}, goal).run()
    final = list(reps)
    for (_, pi), r in out.changed.items():
        final[pi] = r
    bytes_after = dict(fixed)
    for r, s in zip(final, topic.sizes, strict=True):
        for b in r:
            bytes_after[b] = bytes_after.get(b, 0) + s
    return out, final, bytes_after


@pytest.mark.parametrize(
    ("case", "kwargs", "balanced"),
    [
        ("equal sizes, tight disk band: swaps even bytes in", {}, True),
        ("the disk band: idle replicas 10x smaller, any swap moves 0.9 GB, more than 2 points of 20 GB",
         {"cold_size": GB // 10, "fixed_bytes": {3: 3_600_000_000, 4: 3_600_000_000}}, False),
        ("the cap: receivers near 85% take no more bytes, however wide the band",
         {"cold_size": GB // 10, "tolerance": 0.5, "fixed_bytes": {3: 16_500_000_000, 4: 16_500_000_000}}, False),
        ("racks: broker 1 is its rack's only broker, broker 2's replicas may go to 3 and 4",
         {"racks": {1: 0, 2: 1, 3: 1, 4: 1}}, False),
    ],
)
def test_each_limit_outranks_bytes_in(case, kwargs, balanced):
    out, final, bytes_after = run_step(**kwargs)
    deviation = max(abs(r - 20 * MB) for r in out.after.values()) / (100 * MB)
    assert (deviation <= 0.05 + 1e-9) == balanced, (case, out.after)
    assert bool(out.warnings) != balanced, (case, out.warnings)
    before_bytes = {b: (4 * GB if b in (1, 2) else 4 * kwargs.get("cold_size", GB)) + kwargs.get("fixed_bytes", {}).get(b, 0)
                    for b in (1, 2, 3, 4)}
    total = sum(before_bytes.values())
    tol = kwargs.get("tolerance", 0.02)
    for b, x in bytes_after.items():  # never further out of the disk band, never over the cap
        lo, hi = (total / 80 / GB - tol) * 20 * GB, (total / 80 / GB + tol) * 20 * GB
        assert min(lo, before_bytes[b]) <= x <= max(min(hi, 0.85 * 20 * GB), before_bytes[b]), (case, b, x)
    if "racks" in kwargs:
        assert out.after[1] == 40 * MB  # broker 1's replicas had nowhere to go
        assert out.after[2] < 40 * MB
        rack = kwargs["racks"]
        assert all(len({rack[b] for b in r}) >= min(2, len({rack[b] for b in o}))
                   for r, o in zip(final, [(1, 2)] * 4 + [(3, 4)] * 4, strict=True))


def test_a_count_window_of_zero_turns_every_move_into_a_swap():
    # a wide disk band would allow plain moves, but no broker's replica count may change
    out, final, _ = run_step(tolerance=0.5, count_spread=0)
    counts = {b: sum(b in r for r in final) for b in (1, 2, 3, 4)}
    assert counts == {1: 4, 2: 4, 3: 4, 4: 4} and out.swaps * 2 == out.moves > 0
    assert max(out.after.values()) <= 25 * MB
