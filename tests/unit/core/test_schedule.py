"""The copy slots simulated under the per-broker limits (core/execution/schedule.py): the plan's ETA, checked by hand."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.execution.schedule import MAX_EXACT_SHARE, Copy, Rates, simulate, throttle_bound_s


def test_one_broker_shares_its_rate_between_its_copies_and_refills_a_freed_slot_at_once():
    # broker 1 takes 10 B/s, two copies at once. t=0: a (100 B) and b (50 B) at 5 B/s each; b ends at 10 s with a
    # at 50 B left; c (50 B) starts then: a and c at 5 B/s, both end at 20 s.
    copies = [Copy("a", 100, adding=(1,)), Copy("b", 50, adding=(1,)), Copy("c", 50, adding=(1,))]
    s = simulate(copies, Rates(default_in=10), max_moves_per_broker=2)
    assert s is not None and s.end_s == pytest.approx(20.0) and s.exact and s.started == 3
    assert s.first_s is None  # nothing was in flight


def test_a_lone_copy_takes_the_whole_rate_and_the_leader_side_limits_too():
    # a alone on broker 1 at 10 B/s: 100 B in 10 s; its leader 9 sends at most 4 B/s: 25 s
    assert simulate([Copy("a", 100, adding=(1,))], Rates(default_in=10)).end_s == pytest.approx(10.0)
    assert simulate([Copy("a", 100, adding=(1,), source=9)], Rates(default_in=10, default_out=4)).end_s \
        == pytest.approx(25.0)
    # two adding replicas from one leader: it sends the partition twice, 2 B/s each: 50 s
    assert simulate([Copy("a", 100, adding=(1, 2), source=9)], Rates(default_in=10, default_out=4)).end_s \
        == pytest.approx(50.0)


def test_copies_in_flight_hold_their_slots_first_and_first_s_is_the_soonest_to_end():
    # x (in flight, 30 B left) and y (in flight, 60 B) on broker 1 at 10 B/s with two slots: 5 B/s each; x ends at
    # 6 s (y has 30 B left), then p (pending, 20 B) starts: y and p at 5 B/s: p ends at 10 s, y alone at 10 B/s:
    # 10 B left at 10 s, ends at 11 s
    copies = [Copy("x", 30, adding=(1,), running=True), Copy("y", 60, adding=(1,), running=True),
              Copy("p", 20, adding=(1,))]
    s = simulate(copies, Rates(default_in=10), max_moves_per_broker=2)
    assert s.first_s == pytest.approx(6.0) and s.end_s == pytest.approx(11.0) and s.started == 1


def test_the_cluster_limit_and_removing_replicas_hold_slots_too():
    # max_moves=1: one at a time whatever the brokers: 4 + 2 + 4 s
    copies = [Copy("a", 40, adding=(1,)), Copy("b", 20, adding=(2,)), Copy("c", 40, adding=(3,))]
    assert simulate(copies, Rates(default_in=10), max_moves=1).end_s == pytest.approx(10.0)
    # a decommission: every move removes a replica from broker 9, one slot each: one move at a time
    drain = [Copy(k, 40, adding=(b,), touched=(b, 9)) for k, b in (("a", 1), ("b", 2))]
    assert simulate(drain, Rates(default_in=10), max_moves_per_broker=1).end_s == pytest.approx(8.0)
    # without the per-broker limit both run at once
    assert simulate(drain, Rates(default_in=10), max_moves=4).end_s == pytest.approx(4.0)


def test_a_move_that_only_reorders_replicas_ends_at_once_and_nothing_left_is_zero():
    assert simulate([Copy("r", 0, adding=(), touched=())], Rates()).end_s == 0.0
    assert simulate([], Rates()).end_s == 0.0


def test_unknown_or_zero_rates_give_no_eta():
    assert simulate([Copy("a", 10, adding=(1,))], Rates()) is None
    assert simulate([Copy("a", 10, adding=(1,))], Rates(into={1: 0.0}, default_in=5)) is None
    assert simulate([Copy("a", 10, adding=(1,), source=2)], Rates(default_in=5, out={2: 0})) is None


def test_per_broker_rates_differ():
    # broker 1 is slow (2 B/s), broker 2 fast (10 B/s): the plan ends with broker 1's 20 B
    copies = [Copy("a", 20, adding=(1,)), Copy("b", 50, adding=(2,))]
    assert simulate(copies, Rates(into={1: 2.0}, default_in=10), max_moves_per_broker=1).end_s == pytest.approx(10.0)


def test_without_a_small_limit_the_eta_is_the_busiest_brokers_bytes_over_its_rate():
    copies = [Copy(i, 10, adding=(1 + i % 2,), source=3) for i in range(7)]  # 4 copies into 1, 3 into 2
    s = simulate(copies, Rates(default_in=5, default_out=100))
    assert s is not None and not s.exact and s.end_s == pytest.approx(40 / 5)
    s = simulate(copies, Rates(default_in=5, default_out=7))  # the leader's 70 B at 7 B/s
    assert s.end_s == pytest.approx(10.0)
    limited = simulate(copies, Rates(default_in=5, default_out=100), max_moves_per_broker=MAX_EXACT_SHARE + 1)
    assert limited is not None and not limited.exact


def test_beyond_the_simulated_moves_the_cluster_goes_on_at_the_rate_it_reached():
    # 400 copies of 10 B over 4 brokers at 1 B/s, one slot each: 100 rounds of 10 s. Simulating the first 40 and
    # extrapolating the rest gives the same end here (every broker equally busy); the flag says it is not exact.
    copies = [Copy(i, 10, adding=(1 + i % 4,)) for i in range(400)]
    exact = simulate(copies, Rates(default_in=1), max_moves_per_broker=1, exact_pending=400)
    bounded = simulate(copies, Rates(default_in=1), max_moves_per_broker=1, exact_pending=40)
    assert exact.exact and exact.end_s == pytest.approx(1000.0)
    assert not bounded.exact and bounded.started == 400 and bounded.end_s == pytest.approx(1000.0, rel=0.02)


# -- the plan's ETA in the engine and the watch (the one place: plan_eta) ------------------------------------

MB = 1_000_000


def eta_session(state_dir):
    from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession
    from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
    from airflow_kafka_reassign.testing import FakeClusterAdmin

    # three moves into broker 4 (30, 20, 10 MB, each from its own broker) and one of 40 MB into broker 5
    f = FakeClusterAdmin.build(brokers={b: None for b in range(1, 7)},
                               topics={"a": [[1]], "b": [[2]], "c": [[3]], "d": [[6]]})
    moves = {"a": ((1,), (4,), 30), "b": ((2,), (4,), 10), "c": ((3,), (4,), 20), "d": ((6,), (5,), 40)}
    f.sizes = {TopicPartition(t, 0): {cur[0]: n * MB} for t, (cur, _, n) in moves.items()}
    plan = ReassignmentPlan(moves=tuple(Move(topic=t, partition=0, current_replicas=cur, target_replicas=tgt)
                                        for t, (cur, tgt, _) in moves.items()))
    clock = [0.0]
    session = ExecutionSession(f, plan, ExecutionConfig(max_moves_per_broker=1, throttle_bytes_per_sec=10 * MB),
                               state_dir=state_dir, measure=True, clock_s=lambda: clock[0], settle_s=0, sleep=lambda s: None,
                               default_disk_reserve="off")
    return f, session, clock


def test_the_engines_eta_is_the_schedule_under_its_limits_by_hand(tmp_path):
    from airflow_kafka_reassign.core.execution.finishing import progress_observation
    from airflow_kafka_reassign.core.execution.progress import ReassignmentWatch
    from airflow_kafka_reassign.core.vocabulary.models import TopicPartition

    f, session, clock = eta_session(tmp_path)
    tick = session.tick()
    # balanced: broker 4 (60 MB) first, largest first: a (30) and d (40, broker 5) go out, then c (20), then b (10).
    # Each broker takes 10 MB/s (the throttle; no rate observed yet): broker 4 copies 30 + 20 + 10 MB one after
    # the other, 6 s; broker 5 its 40 MB in 4 s. The plan's ETA is 6 s (the average rate would say 100 MB / 20 MB/s)
    assert sorted(str(tp) for tp in tick.status.submitted) == ["a-0", "d-0"]
    assert tick.status.queue == [TopicPartition("c", 0), TopicPartition("b", 0)]
    assert tick.status.eta_s == pytest.approx(6.0)
    # the progress line of the execute task and of the sensor's poke shows the same ETA
    obs = progress_observation(session.plan, tick.status, at=0.0)
    progress = ReassignmentWatch(session.plan, started_at=0.0, stuck_after_s=600).record(obs, now=0.0)
    assert progress.eta_s == pytest.approx(6.0) and "ETA 6s" in progress.line()
    # 1 s later broker 4 took only 5 MB (5 MB/s observed), broker 5 its 10 MB: broker 4 still has 25 + 20 + 10 MB
    # at 5 MB/s: 11 s
    clock[0] = 1.0
    f.sizes[TopicPartition("a", 0)][4] = 5 * MB
    f.sizes[TopicPartition("d", 0)][5] = 10 * MB
    assert session.tick().status.eta_s == pytest.approx(11.0)
    assert session.governor.inbound.rates == {4: pytest.approx(5 * MB), 5: pytest.approx(10 * MB)}


def test_a_watch_that_does_not_submit_shares_the_throughput_between_the_brokers_copying():
    from airflow_kafka_reassign.core.execution.progress import Observation, ProgressTracker
    from airflow_kafka_reassign.core.vocabulary.move_state import MoveState, PartitionProgress

    def obs(at: float, left: int) -> Observation:
        return Observation(at=at, partitions=tuple(
            PartitionProgress(topic=t, partition=0, state=MoveState.IN_FLIGHT, bytes_total=20 * MB,
                              bytes_copied=20 * MB - left) for t in "xyz"))

    # 60 MB left, then 30 MB a second later: 30 MB/s overall. Broker 4 has two of the copies (20 MB left), broker 5
    # one (10 MB): each broker copying gets an equal share, 15 MB/s; broker 4 ends last, at 20 / 15 s, where
    # remaining / throughput would say 1 s
    copies = [Copy("x", 10 * MB, adding=(4,), running=True), Copy("y", 10 * MB, adding=(4,), running=True),
              Copy("z", 10 * MB, adding=(5,), running=True)]
    tr = ProgressTracker(started_at=0, stuck_after_s=600)
    tr.update(obs(0.0, 20 * MB))
    progress = tr.update(obs(1.0, 10 * MB), copies=lambda: copies)
    assert progress.rate == pytest.approx(30 * MB) and progress.eta_s == pytest.approx(20 / 15)
    # without the brokers (a plan in Kafka's own format) it is remaining / throughput
    assert tr.update(obs(2.0, 5 * MB)).eta_s == pytest.approx(15 * MB / tr.update(obs(2.0, 5 * MB)).rate)


def test_the_throttle_bound_is_the_busiest_brokers_bytes_in_or_out_over_the_throttle():
    # broker 1 leads both copies: it sends 3 MB + 2 MB x 2 adding replicas = 7 MB; broker 4 takes in 3 + 2 = 5 MB
    copies = [Copy("a", 3_000_000, adding=(4,), source=1), Copy("b", 2_000_000, adding=(4, 5), source=1),
              Copy("c", 9_000_000, adding=(), source=2)]  # reorders replicas only: nothing to copy
    assert throttle_bound_s(copies, 1_000_000) == 7.0
    assert throttle_bound_s([c._replace(source=None) for c in copies], 1_000_000) == 5.0  # the in side alone
    assert throttle_bound_s([], 1_000_000) == 0.0
    # no limit on moves in flight makes the simulation beat it
    assert simulate(copies, Rates(default_in=1e6, default_out=1e6), max_moves_per_broker=1).end_s >= 7.0
    with pytest.raises(ValueError, match="throttle must be positive"):
        throttle_bound_s(copies, 0)
