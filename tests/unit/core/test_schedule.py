"""The copy slots simulated under the per-broker limits (core/schedule.py): the plan's ETA, checked by hand."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.schedule import MAX_EXACT_SHARE, Copy, Rates, simulate


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
