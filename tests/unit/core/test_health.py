"""The health gate (core/guards/health.py), adaptive limits (core/guards/adaptive.py) and dead brokers, on the fake cluster."""

from __future__ import annotations

import logging

import pytest

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, restore_throttles, run, step
from airflow_kafka_reassign.core.execution.throttle import FOLLOWER_RATE, LEADER_RATE, read_backup
from airflow_kafka_reassign.core.guards.adaptive import (
    MAX_STALL_S,
    MIN_STALL_S,
    AdaptiveBounds,
    CopyWatch,
    Limits,
    adapt,
    bytes_left,
    next_poll_s,
    soonest_eta_s,
    stall_window_s,
)
from airflow_kafka_reassign.core.guards.health import HealthPolicy, assess, below_min_isr, drained_brokers
from airflow_kafka_reassign.core.vocabulary.models import Move, PartitionState, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.testing import FakeClusterAdmin

RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2", 6: "r3"}


def tp(topic: str, p: int) -> TopicPartition:
    return TopicPartition(topic, p)


def mv(topic: str, p: int, current, target) -> Move:
    return Move(topic=topic, partition=p, current_replicas=tuple(current), target_replicas=tuple(target))


def part(p: int, replicas, isr, leader=-1, adding=(), topic="t") -> PartitionState:
    return PartitionState(topic=topic, partition=p, replicas=tuple(replicas), isr=tuple(isr),
                          leader=(isr[0] if isr else None) if leader == -1 else leader, adding_replicas=tuple(adding))


def fake(**topics) -> FakeClusterAdmin:
    return FakeClusterAdmin.build(brokers=RACKS, topics=topics)


SAFE, NO_LIMITS = ExecutionOptions(), ExecutionLimits()


def quiet(admin, plan, options=SAFE, limits=NO_LIMITS, **kw):
    return step(admin, plan, limits, options, settle_s=0, sleep=lambda s: None, **kw)


# -- assess: expected or trouble -------------------------------------------------------------------


def test_adding_replicas_catching_up_are_expected_anything_else_is_trouble():
    ours = part(0, (1, 2, 3, 4), (1, 2, 3), adding=(4,))
    other = part(1, (1, 2, 5), (1, 2))
    report = assess([ours, other, part(2, (1, 2), (1, 2))], {"t": 2}, moving={tp("t", 0)})
    assert report.expected == {tp("t", 0): "adding replicas catching up: 4"}
    assert report.trouble == {tp("t", 1): "replicas [1, 2, 5], ISR [1, 2], missing 5"}
    assert not report.healthy and report.under_replicated == {tp("t", 0): (4,), tp("t", 1): (5,)}
    assert report.line().startswith("cluster unhealthy: 1 partition(s) under-replicated, 0 under min ISR, 0 offline "
                                    "(t-1: replicas [1, 2, 5], ISR [1, 2], missing 5); 1 more are expected")
    # the same partition catching up in someone else's reassignment: its original replicas are in sync,
    # expected too (a run with allow_concurrent_reassignments must not pause for it)
    assert assess([ours], {"t": 2}).healthy


def test_under_min_isr_and_offline_are_trouble_even_on_our_moves():
    short = part(0, (1, 2, 3, 4), (1,), adding=(4,))
    offline = part(1, (1, 2), (), leader=None)
    report = assess([short, offline], {"t": 2}, moving={tp("t", 0), tp("t", 1)})
    assert report.under_min_isr == [tp("t", 0), tp("t", 1)] and report.offline == [tp("t", 1)]
    assert report.trouble[tp("t", 0)].startswith("under min ISR (1 < 2)")
    assert report.trouble[tp("t", 1)].startswith("offline (no leader)")


def test_replicas_missing_on_a_down_broker_the_plan_drains_are_expected():
    report = assess([part(0, (1, 2, 5), (1, 2))], {"t": 2}, drained={5}, live_brokers={1, 2, 3, 4})
    assert report.healthy and "down broker(s) this plan drains: 5" in report.expected[tp("t", 0)]
    # drained but alive and out of sync: the plan does not explain it
    assert not assess([part(0, (1, 2, 5), (1, 2))], {"t": 2}, drained={5}, live_brokers={1, 2, 5}).healthy


def test_drained_brokers_and_moves_below_min_isr():
    moves = [mv("t", 0, (1, 2, 5), (1, 2, 3)), mv("t", 1, (5, 2, 3), (4, 2, 3)), mv("t", 2, (1, 2, 3), (4, 5, 6))]
    assert drained_brokers(moves) == {1, 2}  # 3 and 5 gain a replica elsewhere
    isr = {tp("t", 0): (1, 2), tp("t", 1): (2, 3), tp("t", 2): (1, 2, 3)}
    assert below_min_isr(moves, isr, {"t": 2}) == [tp("t", 2)]  # its target keeps no in-sync replica
    assert below_min_isr(moves, isr, {"t": 1}) == []  # Kafka's default min ISR: nothing qualifies


@pytest.mark.parametrize("kwargs", [{"on_unhealthy": "wait"}, {"below_min_isr": "first"}, {"max_pause_s": -1}])
def test_the_policy_is_validated(kwargs):
    with pytest.raises(ConfigurationError):
        HealthPolicy(**kwargs)


# -- the gate in the engine -------------------------------------------------------------------------


def test_trouble_pauses_submissions_with_one_line_and_they_resume_when_healthy(caplog):
    f = fake(t=[[1, 2], [1, 2]], other=[[5, 6]])
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 2), (1, 3)), mv("t", 1, (1, 2), (2, 3))))
    f.down.add(5)  # another topic's replica: not this run's doing
    with caplog.at_level(logging.WARNING):
        s = quiet(f, plan)
    assert s.submitted == [] and f.alter_requests == [] and s.pending == [tp("t", 0), tp("t", 1)]
    assert "other-0: replicas [5, 6], ISR [6], missing 5" in s.paused
    assert [r.message for r in caplog.records if "PAUSED" in r.message] == [
        "PAUSED, nothing new is submitted (2 pending, 0 in flight): " + s.paused]
    assert s.summary()["paused"] == s.paused and s.summary()["health"]["trouble"] == 1
    f.down.clear()
    s = quiet(f, plan)
    assert s.paused is None and s.submitted == [tp("t", 0), tp("t", 1)]


def test_our_own_copy_does_not_pause_the_next_batch():
    f = fake(t=[[1, 2]] * 3)
    f.catching_up = True
    plan = ReassignmentPlan(moves=tuple(mv("t", i, (1, 2), (1, 3 + i)) for i in range(3)))
    s = quiet(f, plan, limits=ExecutionLimits(max_moves=1, order="plan"))
    assert s.submitted == [tp("t", 0)]
    s = quiet(f, plan, limits=ExecutionLimits(max_moves=2, order="plan"))
    assert s.paused is None and s.submitted == [tp("t", 1)] and tp("t", 0) in s.health.expected


def test_moves_below_min_isr_go_last_or_are_refused():
    f = fake(t=[[1, 2, 3], [1, 2, 3]])
    f.topic_configs["t"] = {"min.insync.replicas": "2"}
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 2, 3), (4, 5, 6)), mv("t", 1, (1, 2, 3), (1, 2, 4))))
    s = quiet(f, plan, limits=ExecutionLimits(max_moves=1, order="plan"))
    assert s.submitted == [tp("t", 1)] and s.below_min_isr == [tp("t", 0)]
    assert "1 below min ISR (last)" in s.progress_line() and s.summary()["below_min_isr"] == 1
    f.complete()
    refuse = ExecutionOptions(health=HealthPolicy(below_min_isr="refuse"))
    s = quiet(f, plan, options=refuse)
    assert s.submitted == [] and "than min.insync.replicas=2" in s.failed[tp("t", 0)]


class Ticker:
    """The run's sleep and clock: each poll advances the clock; ``on`` runs a callback at a poll."""

    def __init__(self, f: FakeClusterAdmin, on: dict | None = None) -> None:
        self.f, self.t, self.polls, self.on = f, 0.0, 0, on or {}

    def sleep(self, s: float) -> None:
        self.polls += 1
        self.t += max(s, 60.0)
        self.on.get(self.polls, lambda: None)()

    def clock(self) -> float:
        return self.t


def test_a_pause_resumes_by_itself_and_the_run_completes_with_throttles_restored(tmp_path):
    f = fake(t=[[1, 2]] * 2, other=[[5, 6]])
    f.broker_configs[1] = {LEADER_RATE: "7"}  # someone else's value: restored exactly
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 2), (1, 3)), mv("t", 1, (1, 2), (1, 4))))
    ticker = Ticker(f, {1: lambda: (f.complete(), f.down.add(5)), 3: lambda: f.down.clear()})
    ticker.on[4] = f.complete
    result = run(f, plan, ExecutionLimits(max_moves=1, order="plan"), ExecutionOptions(throttle_bytes_per_sec=100),
                 state_dir=tmp_path, sleep=ticker.sleep, clock=ticker.clock, settle_s=0)
    assert result.status.ok and result.unhealthy is None and result.paused_s >= 60
    assert [targets for targets, _ in f.alter_requests] == [{tp("t", 0): (1, 3)}, {tp("t", 1): (1, 4)}]
    assert f.broker_configs[1] == {LEADER_RATE: "7"} and read_backup(tmp_path) is None


@pytest.mark.parametrize("policy", ["fail", "pause", "cancel"])
def test_the_policy_stops_the_run_fail_and_a_long_pause_keep_throttles_cancel_cancels(tmp_path, policy):
    f = fake(t=[[1, 2]] * 2, other=[[5, 6]])
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 2), (1, 3)), mv("t", 1, (1, 2), (1, 4))))
    ticker = Ticker(f, {1: lambda: f.down.add(5)})
    options = ExecutionOptions(throttle_bytes_per_sec=100, health=HealthPolicy(on_unhealthy=policy, max_pause_s=100))
    result = run(f, plan, ExecutionLimits(max_moves=1, order="plan"), options, state_dir=tmp_path,
                 sleep=ticker.sleep, clock=ticker.clock, settle_s=0)
    assert result.unhealthy and "stopped by the health gate" in result.status.blocked
    assert "other-0" in result.unhealthy and "Run the task again on the same plan" in result.unhealthy
    assert len(f.alter_requests) == 1  # nothing after the trouble began
    if policy == "cancel":
        assert result.cancel.cancelled == [tp("t", 0)] and read_backup(tmp_path) is None
        assert f.broker_configs[1] == {}
    else:
        assert f.inflight and f.broker_configs[1][FOLLOWER_RATE] == "100"  # still throttled: still copying
        assert "gave up after pausing" in result.unhealthy if policy == "pause" else "on_unhealthy='fail'" in \
            result.unhealthy


# -- KIP-966: eligible leader replicas ---------------------------------------------------------------


def elr(p: PartitionState, eligible, last_known=None) -> PartitionState:
    return p.model_copy(update={"elr": tuple(eligible), "last_known_elr": last_known})


def test_below_min_isr_with_eligible_leader_replicas_is_reported_as_such():
    kept = elr(part(0, (4, 5), (4,)), (5,))
    none_left = elr(part(1, (4, 5), (4,)), ())
    unread = part(2, (4, 5), (4,))  # ELR off, or not known: as before
    offline = elr(part(3, (4, 5), (), leader=None), (4, 5))
    unclean = elr(part(4, (4, 5), (), leader=None), (), last_known=(5,))
    report = assess([kept, none_left, unread, offline, unclean], {"t": 2}, live_brokers={1, 2, 3, 4})
    assert report.under_min_isr_elr == {tp("t", 0): (5,), tp("t", 3): (4, 5)}
    assert report.trouble[tp("t", 0)] == (
        "under min ISR (1 < 2), eligible leader replicas [5] (down: 5) (KIP-966: acks=all writes refused until the "
        "ISR is back to 2; every committed record is on the ISR and ELR [4, 5], none lost if the leader fails); "
        "replicas [4, 5], ISR [4], missing 5")
    assert report.trouble[tp("t", 1)].startswith(
        "under min ISR (1 < 2), no eligible leader replica (KIP-966: committed records only on the ISR [4]); ")
    assert report.trouble[tp("t", 2)] == "under min ISR (1 < 2); replicas [4, 5], ISR [4], missing 5"
    assert report.trouble[tp("t", 3)].startswith(
        "offline (no leader), eligible leader replicas [4, 5] (down: 5) hold every committed record")
    assert report.trouble[tp("t", 4)].startswith("offline (no leader), only last known eligible replicas [5] left")
    assert report.line().startswith("cluster unhealthy: 5 partition(s) under-replicated, 5 under min ISR (2 with "
                                    "eligible leader replicas: committed records kept), 2 offline (t-0: under min ISR")
    assert report.summary()["under_min_isr_elr"] == 2


def test_the_gate_reads_eligible_leaders_of_the_partitions_below_min_isr_only():
    f = fake(t=[[1, 2], [1, 2]], short=[[4, 5]], under=[[1, 5, 6]])
    f.topic_configs["short"] = {"min.insync.replicas": "2"}
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 2), (1, 3)), mv("t", 1, (1, 2), (2, 3))))
    asked: list[list[TopicPartition]] = []
    read = f.describe_eligible_leaders
    f.describe_eligible_leaders = lambda parts: (asked.append(sorted(parts)), read(parts))[1]  # type: ignore[method-assign]
    assert quiet(f, plan, limits=ExecutionLimits(max_moves=1, order="plan")).paused is None
    assert asked == []  # a healthy cluster: no DescribeTopicPartitions
    f.down.add(5)
    f.elr[tp("short", 0)] = (5,)  # left the ISR while it was below min ISR: kept every committed record
    s = quiet(f, plan)
    assert asked == [[tp("short", 0)]]  # not under-0, only under-replicated (min ISR 1)
    assert s.health.under_min_isr_elr == {tp("short", 0): (5,)} and s.summary()["health"]["under_min_isr_elr"] == 1
    assert "1 under min ISR (1 with eligible leader replicas: committed records kept)" in s.paused
    assert "short-0: under min ISR (1 < 2), eligible leader replicas [5] (down: 5) (KIP-966: " in s.paused
    assert s.pending == [tp("t", 1)] and s.submitted == []  # still trouble: acks=all writes are refused


@pytest.mark.parametrize("cluster", ["elr-off", "elr-unreadable"])
def test_without_eligible_leader_replicas_the_gate_reports_as_before(cluster, caplog):
    f = fake(t=[[1, 2]], short=[[4, 5]])
    f.topic_configs["short"] = {"min.insync.replicas": "2"}
    f.down.add(5)
    f.elr[tp("short", 0)] = (5,)
    if cluster == "elr-off":  # eligible.leader.replicas.version 0 (Kafka 4.0's default), or a broker before 4.0
        f.caps = f.caps.model_copy(update={"eligible_leader_replicas": False})
    else:
        def refused(parts):
            raise ConfigurationError("DescribeTopicPartitions refused")

        f.describe_eligible_leaders = refused  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        s = quiet(f, ReassignmentPlan(moves=(mv("t", 0, (1, 2), (1, 3)),)))
    assert s.health.trouble == {tp("short", 0): "under min ISR (1 < 2); replicas [4, 5], ISR [4], missing 5"}
    assert s.health.under_min_isr_elr == {} and "eligible leader replicas:" not in s.paused
    assert "describe_eligible_leaders" not in f.calls
    assert ("could not be read" in caplog.text) == (cluster == "elr-unreadable")


# -- dead brokers: throttles ----------------------------------------------------------------------


def test_a_backed_up_broker_that_dies_is_skipped_and_cleaned_when_it_is_back(tmp_path, caplog):
    f = fake(t=[[1, 2], [5, 2]])
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 2), (1, 3)), mv("t", 1, (5, 2), (5, 4))))
    options = ExecutionOptions(throttle_bytes_per_sec=100, health=HealthPolicy(gate=False))
    quiet(f, plan, options=options, state_dir=tmp_path)
    assert f.broker_configs[5][LEADER_RATE] == "100"
    f.down.add(5)  # the fake, like Kafka, times out a config request to a broker that is down
    with caplog.at_level(logging.WARNING):
        quiet(f, plan, options=options, state_dir=tmp_path)
        f.complete()
        assert restore_throttles(f, tmp_path)
    assert "broker(s) [5] are down: their throttle configs are left as they are" in caplog.text
    assert "broker(s) [5] are down: their throttle configs are restored when they are back" in caplog.text
    assert f.broker_configs[1] == {} and f.broker_configs[5][LEADER_RATE] == "100"
    assert set(read_backup(tmp_path).brokers) == {5} and read_backup(tmp_path).topics == {}
    f.down.clear()
    assert restore_throttles(f, tmp_path)  # the next run (or the cancel operator) on the plan
    assert f.broker_configs[5] == {} and read_backup(tmp_path) is None


def test_a_decommission_of_a_broker_that_is_down_completes_without_touching_it(tmp_path):
    f = fake(t=[[1, 5], [5, 2]], other=[[5, 3]])
    f.topic_configs["t"] = {"min.insync.replicas": "1"}
    f.down.add(5)
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 5), (1, 3)), mv("t", 1, (5, 2), (4, 2))))
    result = run(f, plan, ExecutionLimits(), ExecutionOptions(throttle_bytes_per_sec=100, allow_offline_brokers=True),
                 state_dir=tmp_path, sleep=lambda s: f.complete(), settle_s=0)
    # other-0 lost its replica on 5 too and is not in the plan; but the plan drains 5, so the missing
    # replicas there are what the run repairs: no pause, and no config request to 5 (it would time out)
    assert result.status.ok and result.unhealthy is None
    assert f.broker_configs[5] == {} and read_backup(tmp_path) is None


# -- adaptive limits and polls ---------------------------------------------------------------------


def test_aimd_increases_additively_and_decreases_multiplicatively_within_bounds():
    b = AdaptiveBounds(min_moves=2, max_moves=4, min_throttle=100, max_throttle=1000)
    assert b.start(None) == Limits(2, 100) and b.start(5000) == Limits(2, 1000)
    up, why = adapt(Limits(4, 950), b, healthy=True, progressing=True, stalled=False)
    assert up == Limits(4, 1000) and why == "healthy and progressing: throttle 950 -> 1000 B/s"
    assert adapt(up, b, healthy=True, progressing=True, stalled=False) == (up, None)  # at the bounds
    down, why = adapt(Limits(4, 1000), b, healthy=False, progressing=True, stalled=False)
    assert down == Limits(2, 500) and why.startswith("cluster unhealthy")
    stalled, why = adapt(Limits(4, 1000), b, healthy=True, progressing=False, stalled=True)
    assert stalled == Limits(2, 1000) and why == "copy stalled: moves 4 -> 2"  # the throttle is not the cure
    assert adapt(Limits(3, 500), b, healthy=True, progressing=False, stalled=False) == (Limits(3, 500), None)


@pytest.mark.parametrize("kwargs", [{"max_moves": 0}, {"max_moves": 2, "min_moves": 3},
                                    {"max_moves": 2, "min_throttle": 5}, {"max_moves": 2, "decrease": 1.0},
                                    {"max_moves": 2, "min_throttle": 9, "max_throttle": 5}])
def test_adaptive_bounds_are_validated(kwargs):
    with pytest.raises(ConfigurationError):
        AdaptiveBounds(**kwargs)


def test_a_copy_that_does_not_gain_on_its_leader_is_stalled():
    w = CopyWatch(stall_polls=2)
    assert not w.update(0, 1000) and not w.update(10, 800) and w.rate == 20 and w.progressing
    assert not w.update(20, 800) and w.update(30, 810)  # two polls without gaining
    assert not w.update(40, 810, finished=1)  # a move finished: progress after all
    assert not w.update(50, None) and w.rate is None


def test_the_rate_is_read_over_the_same_moves_only_and_carries_over_when_the_set_changes():
    """20 moves of 1 MB end and 20 new ones are sent between two polls: the sums of bytes left (2 MB, then 19.9 MB)
    are of different moves. Their difference is no rate; the last one measured goes on, so the first new move is
    predicted to end in about 1.4 s at 14 MB/s, not in minutes (which sent the next poll a poke_interval away)."""
    old, new = frozenset({"a"}), frozenset({"b"})
    w = CopyWatch()
    w.update(0.0, 16_000_000, key=old)
    w.update(1.0, 2_000_000, key=old)
    assert w.rate == 14_000_000
    w.update(2.0, 19_900_000, finished=20, key=new)
    assert w.rate == 14_000_000  # not (2.0 - 19.9) MB/s, nor a near-zero gain
    left = {tp("t", i): 995_000 for i in range(20)}
    assert soonest_eta_s(left, w.rate) == pytest.approx(1.42, abs=0.01)
    assert next_poll_s(soonest_eta_s(left, w.rate), previous_s=1.3, floor_s=0.5, ceiling_s=15) < 1
    w.update(3.0, 5_900_000, key=new)
    assert w.rate == 14_000_000  # measured again over the new set


def test_fast_polls_under_a_low_throttle_are_not_a_stall_before_two_fetch_steps():
    """A follower under a 100 kB/s throttle gains in ~1 MiB steps, ~10 s apart: half-second polls see it flat."""
    window = stall_window_s(100_000)
    assert window == pytest.approx(2 * 1_048_576 / 100_000) and stall_window_s(None) == MIN_STALL_S
    assert stall_window_s(1_000_000_000) == MIN_STALL_S and stall_window_s(1_000) == MAX_STALL_S
    w = CopyWatch(stall_polls=3)
    flat = [w.update(t / 2, 1_000_000, window_s=window) for t in range(50)]  # 25 s of flat half-second polls
    first = flat.index(True) / 2
    assert window <= first < window + 0.5 and all(flat[flat.index(True):])  # stalled after the window, not before
    assert not w.update(25.0, 1_000_000, key="another move in flight", window_s=window)  # new moves: count again


def test_bytes_left_eta_and_poll_interval():
    moves = {tp("t", 0): mv("t", 0, (1, 2), (1, 3)), tp("t", 1): mv("t", 1, (1, 2), (1, 4))}
    left = bytes_left(moves, {tp("t", 0): {1: 1000, 2: 1000, 3: 400}, tp("t", 1): {1: 3000}})
    assert left == {tp("t", 0): 600, tp("t", 1): 3000}
    assert soonest_eta_s(left, 120.0) == 10.0 and soonest_eta_s(left, None) is None
    assert next_poll_s(10.0, previous_s=None, floor_s=0.5, ceiling_s=30) == 5.0
    assert next_poll_s(0.1, previous_s=None, floor_s=0.5, ceiling_s=30) == 0.5  # about to finish: soon
    assert next_poll_s(None, previous_s=None, floor_s=0.5, ceiling_s=30) == 0.5
    assert next_poll_s(None, previous_s=2, floor_s=0.5, ceiling_s=30) == 4  # nothing finished: rarer
    assert next_poll_s(None, previous_s=2, floor_s=0.5, ceiling_s=30, progressed=True) == 2  # moves finish: same pace
    assert next_poll_s(None, previous_s=20, floor_s=0.5, ceiling_s=30) == 30  # far, unknown: rarely


def test_adaptive_run_logs_each_change_reports_a_stall_and_restores_throttles_exactly(tmp_path, caplog):
    f = fake(t=[[1, 2]] * 4)
    f.broker_configs[3] = {FOLLOWER_RATE: "9"}
    plan = ReassignmentPlan(moves=tuple(mv("t", i, (1, 2), (1, 3 + i % 2)) for i in range(4)))
    for i in range(4):
        f.sizes[tp("t", i)] = {1: 1000, 2: 1000}
    polls: list[float] = []
    clock = [0.0]

    def sleep(s: float) -> None:
        polls.append(s)
        clock[0] += s
        if len(polls) >= 6:  # the copy stalls for five polls (12.5 s: over the 10 s window), then moves finish
            f.complete()

    bounds = AdaptiveBounds(min_moves=1, max_moves=4, min_throttle=500_000, max_throttle=2_000_000, stall_polls=2)
    with caplog.at_level(logging.INFO):
        result = run(f, plan, ExecutionLimits(order="plan"), ExecutionOptions(throttle_bytes_per_sec=1_000_000),
                     state_dir=tmp_path, sleep=sleep, settle_s=0, adaptive=bounds, poll_interval_s=5.0,
                     clock=lambda: clock[0])
    assert "copy STALLED: 1 move(s) in flight (t-0) have not gained on their leaders for 5 polls (12 s)" in caplog.text
    assert "the throttle (1000000 B/s) is likely below these partitions' ingest rate" in caplog.text
    assert result.status.ok and f.broker_configs[3] == {FOLLOWER_RATE: "9"} and f.broker_configs[1] == {}
    assert result.stalled_polls >= 1 and result.summary()["stalled_polls"] == result.stalled_polls
    assert polls[:3] == [0.5, 1.0, 2.0]  # no rate known (nothing copied): sooner first, then rarer
    assert max(polls) <= 5.0
