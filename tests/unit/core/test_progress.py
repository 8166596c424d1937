"""core/execution/progress.py: the completion rule, bytes, throughput/ETA, stall detection, the wait loop (with the fake)."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_reassign.core.execution.progress import (
    MoveState,
    Observation,
    ProgressTracker,
    ReassignmentWatch,
    SubmitOutcome,
    TrackerState,
    check_timeout_policy,
    classify,
    final_message,
    format_duration,
    parse_names,
    slope,
)
from airflow_kafka_reassign.core.vocabulary.models import Move, PartitionState, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.testing import FakeClusterAdmin

MB = 1_000_000
MOVE = Move(topic="t", partition=0, current_replicas=(1, 2, 3), target_replicas=(4, 2, 3))


def part(replicas, isr=None, adding=(), removing=(), topic="t", partition=0):
    return PartitionState(topic=topic, partition=partition, replicas=tuple(replicas),
                          isr=tuple(replicas if isr is None else isr), adding_replicas=tuple(adding),
                          removing_replicas=tuple(removing))


# -- classify: the completion rule ----------------------------------------------------------------------------

def test_done_needs_target_replicas_full_isr_and_no_reassignment():
    p = classify(MOVE, part([4, 2, 3]), {4: 10 * MB, 2: 10 * MB, 3: 10 * MB})
    assert p.state is MoveState.DONE
    assert (p.bytes_total, p.bytes_copied) == (10 * MB, 10 * MB)


def test_target_replicas_but_a_target_replica_outside_the_isr_is_lagging_and_counts_as_in_flight():
    p = classify(MOVE, part([4, 2, 3], isr=[2, 3]), {4: 4 * MB, 2: 10 * MB, 3: 10 * MB})
    assert p.state is MoveState.LAGGING
    obs = Observation(at=0.0, partitions=(p,))
    assert (obs.in_flight, obs.lagging, obs.copying, obs.unfinished, obs.blocked) == (0, 1, 1, 1, 0)
    assert p.lagging == (4,)
    assert "not in ISR" in p.detail
    assert (p.bytes_total, p.bytes_copied) == (10 * MB, 4 * MB)


def test_listed_reassignment_to_the_plans_target_is_in_flight_with_bytes_copied():
    p = classify(MOVE, part([4, 2, 3, 1], isr=[1, 2, 3], adding=[4], removing=[1]), {1: 10 * MB, 2: 10 * MB, 4: 3 * MB})
    assert p.state is MoveState.IN_FLIGHT and p.listed
    assert (p.bytes_total, p.bytes_copied) == (10 * MB, 3 * MB)


def test_same_replica_set_in_another_order_is_not_done():
    p = classify(MOVE, part([2, 4, 3]))
    assert p.state is MoveState.STALE


def test_adding_replica_in_the_isr_counts_as_fully_copied():
    move = Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 4))
    sizes = {1: 8 * MB, 2: 8 * MB, 3: 7 * MB, 4: MB}
    p = classify(move, part([3, 4, 1, 2], isr=[1, 2, 3], adding=[3, 4], removing=[1, 2]), sizes)
    assert (p.bytes_total, p.bytes_copied) == (16 * MB, 9 * MB)


def test_intermediate_replicas_without_a_listed_reassignment_are_finishing_not_stale():
    # metadata still shows the intermediate set, the controller already finished
    p = classify(MOVE, part([4, 2, 3, 1]))
    assert p.state is MoveState.IN_FLIGHT and p.detail == "finishing" and not p.listed


def test_pending_when_still_on_the_current_replicas():
    p = classify(MOVE, part([1, 2, 3]), {1: 5 * MB, 2: 5 * MB, 3: 5 * MB})
    assert p.state is MoveState.PENDING
    assert (p.bytes_total, p.bytes_copied) == (5 * MB, 0)


def test_a_foreign_reassignment_is_waited_for_a_stale_move_blocked_a_missing_partition_gone():
    foreign = classify(MOVE, part([5, 2, 3, 1], adding=[5], removing=[1]))
    assert foreign.state is MoveState.FOREIGN and "[5, 2, 3]" in foreign.detail
    stale = classify(MOVE, part([5, 2, 3]))
    assert stale.state is MoveState.STALE and "[5, 2, 3]" in stale.detail
    missing = classify(MOVE, None)
    assert missing.state is MoveState.GONE and "does not exist" in missing.detail


def test_plain_kafka_file_without_current_replicas_is_pending_until_moved():
    move = Move(topic="t", partition=0, target_replicas=(4, 2, 3))
    assert classify(move, part([5, 1, 2])).state is MoveState.PENDING
    assert classify(move, part([4, 2, 3])).state is MoveState.DONE


def test_sizes_unknown_leave_bytes_unknown():
    p = classify(MOVE, part([4, 2, 3, 1], adding=[4], removing=[1]), None)
    assert p.bytes_total is None and p.bytes_copied is None
    # the sources' broker is down: no size reported for them
    p = classify(MOVE, part([4, 2, 3, 1], adding=[4], removing=[1]), {4: MB})
    assert p.bytes_total is None


# -- observations --------------------------------------------------------------------------------------------

def obs_of(*parts, at=0.0):
    return Observation(at=at, partitions=tuple(parts))


def test_observation_counts_bytes_and_fraction_exclude_blocked_moves():
    done = classify(MOVE, part([4, 2, 3]), {4: 10 * MB, 2: 10 * MB, 3: 10 * MB})
    moving = classify(MOVE.model_copy(update={"partition": 1}),
                      part([4, 2, 3, 1], isr=[1, 2, 3], adding=[4], removing=[1], partition=1), {1: 10 * MB, 4: 5 * MB})
    stale = classify(MOVE.model_copy(update={"partition": 2}), part([5, 2, 3], partition=2), {5: 99 * MB})
    o = obs_of(done, moving, stale)
    assert o.counts["done"] == 1 and o.in_flight == 1 and o.blocked == 1
    assert (o.bytes_total, o.bytes_copied, o.bytes_remaining) == (20 * MB, 15 * MB, 5 * MB)
    assert o.fraction == pytest.approx(0.75)
    assert not o.complete


def test_fraction_by_moves_when_bytes_unknown():
    done = classify(MOVE, part([4, 2, 3]))
    pending = classify(MOVE.model_copy(update={"partition": 1}), part([1, 2, 3], partition=1))
    o = obs_of(done, pending)
    assert o.bytes_total is None and o.fraction == 0.5


# -- throughput, ETA, stall ----------------------------------------------------------------------------------

def in_flight_obs(at, remaining, total=100 * MB, done=0):
    copied = total - remaining
    p = classify(MOVE, part([4, 2, 3, 1], isr=[1, 2, 3], adding=[4], removing=[1]), {1: total, 4: copied})
    extra = tuple(classify(MOVE.model_copy(update={"partition": i + 1}), part([4, 2, 3], partition=i + 1))
                  for i in range(done))
    return Observation(at=at, partitions=(p, *extra))


def test_slope_is_least_squares():
    assert slope([(0, 10), (1, 8), (2, 6)]) == pytest.approx(-2)
    assert slope([(0, 1)]) is None and slope([(1, 1), (1, 2)]) is None


def test_eta_on_linear_progress_is_exact():
    tr = ProgressTracker(started_at=0, stuck_after_s=600)
    for t in range(0, 50, 5):
        prog = tr.update(in_flight_obs(t, 100 * MB - t * 1 * MB))
    assert prog.rate == pytest.approx(1 * MB)
    assert prog.eta_s == pytest.approx(55)  # 55 MB left at 1 MB/s


def test_eta_on_stepwise_fetches_stays_within_25_percent():
    # followers fetch in ~1 MB chunks: the remaining bytes fall in steps, every 6.6 s at 150 kB/s
    tr = ProgressTracker(started_at=0, stuck_after_s=600)
    total, rate = 20 * MB, 150_000
    t = 0.0
    while True:
        copied = min(total, int(t * rate // MB) * MB + MB)  # a burst of one chunk at the start
        prog = tr.update(in_flight_obs(t, total - copied, total=total))
        if copied >= total / 2:
            break
        t += 2.0
    actual = (total - copied) / rate
    assert prog.eta_s == pytest.approx(actual, rel=0.25)


def test_no_rate_before_two_samples():
    tr = ProgressTracker(started_at=0, stuck_after_s=600)
    prog = tr.update(in_flight_obs(0, 50 * MB))
    assert prog.rate is None and prog.eta_s is None
    assert "ETA --" in prog.line()


def test_stall_warns_once_per_period_and_names_the_in_flight_moves():
    tr = ProgressTracker(started_at=0, stuck_after_s=60)
    warnings = []
    for t in range(0, 200, 10):
        prog = tr.update(in_flight_obs(t, 50 * MB))
        if prog.warn:
            warnings.append((t, prog.stuck_message()))
    assert [t for t, _ in warnings] == [60, 120, 180]
    assert "t-0 (in_flight" in warnings[0][1] and "no progress for 1m 00s" in warnings[0][1]


def test_progress_resets_the_stall_clock():
    tr = ProgressTracker(started_at=0, stuck_after_s=60)
    for t, rem in [(0, 50), (50, 50), (55, 49), (110, 49)]:
        prog = tr.update(in_flight_obs(t, rem * MB))
    assert prog.stalled_for_s == 55 and not prog.stuck
    assert tr.update(in_flight_obs(115, 49 * MB)).warn


def test_a_finished_move_is_progress_even_without_bytes():
    tr = ProgressTracker(started_at=0, stuck_after_s=60)
    tr.update(obs_of(classify(MOVE, part([4, 2, 3, 1], adding=[4], removing=[1])), at=0))
    prog = tr.update(obs_of(classify(MOVE, part([4, 2, 3])), at=100))
    assert prog.stalled_for_s == 0 and prog.observation.complete


def test_tracker_state_round_trips_through_json_and_keeps_the_stall_clock():
    tr = ProgressTracker(started_at=0, stuck_after_s=60)
    tr.update(in_flight_obs(0, 50 * MB))
    tr.update(in_flight_obs(30, 40 * MB))
    state = TrackerState.model_validate_json(tr.state.model_dump_json())
    again = ProgressTracker(started_at=999, stuck_after_s=60, state=state)
    prog = again.update(in_flight_obs(95, 40 * MB))  # no progress since t=30
    assert prog.warn and prog.stalled_for_s == 65 and prog.elapsed_s == 95
    assert len(json.dumps(state.model_dump(mode="json"))) < 2000


def test_samples_stay_bounded():
    tr = ProgressTracker(started_at=0, stuck_after_s=600, window_s=10_000)
    for t in range(1000):
        tr.update(in_flight_obs(t, (1000 - t) * MB, total=1000 * MB))
    assert len(tr.state.samples) <= 64
    assert tr.state.samples[-1][0] == 999


def test_bad_tracker_settings_are_refused():
    with pytest.raises(ConfigurationError, match="stuck_after"):
        ProgressTracker(started_at=0, stuck_after_s=0)


# -- the line and the summary ------------------------------------------------------------------------------

def test_progress_line_has_bar_counts_bytes_rate_and_eta():
    tr = ProgressTracker(started_at=0, stuck_after_s=600)
    tr.update(in_flight_obs(0, 60 * MB))
    line = tr.update(in_flight_obs(10, 50 * MB)).line()
    assert line.startswith("[##########----------]  50% | moves 0/1 done, 1 in flight, 0 pending")
    assert "50.0 MB of 100.0 MB copied" in line and "1.0 MB/s" in line and "ETA 50s" in line
    assert "\n" not in line


def test_summary_is_small_json():
    tr = ProgressTracker(started_at=0, stuck_after_s=600)
    s = tr.update(in_flight_obs(0, 60 * MB, done=500)).summary(plan_uri="/plans/x")
    text = json.dumps(s)
    assert json.loads(text)["moves"] == 501 and len(text) < 1000


@pytest.mark.parametrize(("s", "text"), [(45, "45s"), (365, "6m 05s"), (7380, "2h 03m"), (273600, "3d 04h")])
def test_format_duration(s, text):
    assert format_duration(s) == text


def test_parse_names_keeps_dashes_in_topics():
    assert parse_names(["a-b-3"]) == [TopicPartition("a-b", 3)]


def test_timeout_policy_names_the_choices():
    with pytest.raises(ConfigurationError, match="leave, cancel, rollback"):
        check_timeout_policy("wait")


# -- the wait loop against the fake -------------------------------------------------------------------------

def fake_and_plan(n=3):
    fake = FakeClusterAdmin.build(brokers={1: "r1", 2: "r2", 3: "r3", 4: "r1"},
                                  topics={"orders": [[1, 2]] * n, "other": [[1, 2]]})
    plan = ReassignmentPlan(moves=tuple(
        Move(topic="orders", partition=i, current_replicas=(1, 2), target_replicas=(3, 2)) for i in range(n)))
    for i in range(n):
        fake.sizes[TopicPartition("orders", i)] = {1: 10 * MB, 2: 10 * MB}
    return fake, plan


def test_watch_follows_a_plan_to_completion():
    fake, plan = fake_and_plan()
    watch = ReassignmentWatch(plan, started_at=0, stuck_after_s=600)
    assert watch.poke(fake, now=0).observation.pending == 3
    fake.alter_reassignments({m.tp: m.target_replicas for m in plan.moves})
    prog = watch.poke(fake, now=10)
    assert prog.status == "running" and prog.observation.in_flight == 3
    fake.complete([TopicPartition("orders", 0)])
    assert watch.poke(fake, now=20).observation.done == 1
    fake.complete()
    for i in range(3):
        fake.sizes[TopicPartition("orders", i)][3] = 10 * MB
    prog = watch.poke(fake, now=30)
    assert prog.status == "complete"
    assert prog.summary()["bytes_copied"] == 30 * MB


def test_each_poke_costs_the_same_few_requests_whatever_the_plan_size():
    costs = []
    for n in (2, 500):
        fake, plan = fake_and_plan(n)
        watch = ReassignmentWatch(plan, started_at=0, stuck_after_s=600)
        fake.calls.clear()
        watch.poke(fake, now=0)
        costs.append(dict(fake.calls))
    assert costs[0] == costs[1] == {"snapshot": 1, "replica_sizes": 1}


def test_watch_times_out_listing_the_unfinished_moves():
    fake, plan = fake_and_plan()
    fake.alter_reassignments({plan.moves[0].tp: (3, 2)})
    watch = ReassignmentWatch(plan, started_at=0, stuck_after_s=600, timeout_s=60)
    assert watch.poke(fake, now=30).status == "running"
    prog = watch.poke(fake, now=61)
    assert prog.status == "timeout"
    assert [p.tp for p in prog.stuck] == [TopicPartition("orders", 0)]


def test_a_target_broker_that_is_not_alive_is_named_in_the_line_the_summary_and_the_timeout():
    fake, plan = fake_and_plan()
    fake.alter_reassignments({m.tp: m.target_replicas for m in plan.moves})
    fake.down.add(3)
    watch = ReassignmentWatch(plan, started_at=0, stuck_after_s=600, timeout_s=60)
    prog = watch.poke(fake, now=10)
    assert prog.observation.waiting_on == ((3, 3),)
    assert prog.line().endswith("| broker 3 not alive: 3 move(s) wait for it")
    assert prog.summary()["waiting_on_brokers"] == {"3": 3}
    assert "(broker 3 not alive: 3 move(s) wait for it)" in final_message(watch.poke(fake, now=61))
    fake.down.clear()
    assert watch.poke(fake, now=62).observation.waiting_on == ()


def test_watch_reports_blocked_when_only_unreachable_moves_remain():
    fake, plan = fake_and_plan(2)
    fake.alter_reassignments({plan.moves[0].tp: (3, 2)})
    fake.complete()
    fake.alter_reassignments({plan.moves[1].tp: (4, 2)})  # someone else moves partition 1 elsewhere
    fake.complete()
    prog = ReassignmentWatch(plan, started_at=0, stuck_after_s=600).poke(fake, now=1)
    assert prog.status == "blocked"
    assert prog.summary()["blocked_partitions"][0].startswith("orders-1 (stale")


def test_a_topic_the_metadata_does_not_know_yet_is_asked_for_again(monkeypatch):
    monkeypatch.setattr("airflow_kafka_reassign.core.execution.progress.time.sleep", lambda s: None)
    fake, plan = fake_and_plan(1)
    real, calls = fake.snapshot, []

    def lagging(**kw):
        calls.append(kw.get("topics"))
        if len(calls) == 1:
            raise ConfigurationError("topic(s) orders do not exist in the cluster")
        return real(**kw)

    fake.snapshot = lagging
    prog = ReassignmentWatch(plan, started_at=0, stuck_after_s=600).poke(fake, now=1)
    assert calls == [["orders"], ["orders"]] and prog.observation.pending == 1


def test_a_missing_topic_is_reported_not_raised(monkeypatch):
    monkeypatch.setattr("airflow_kafka_reassign.core.execution.progress.time.sleep", lambda s: None)
    fake, plan = fake_and_plan(1)
    gone = ReassignmentPlan(moves=(*plan.moves, Move(topic="deleted", partition=0, current_replicas=(1, 2),
                                                          target_replicas=(3, 2))))
    prog = ReassignmentWatch(gone, started_at=0, stuck_after_s=600).poke(fake, now=1)
    assert prog.observation.gone == 1 and prog.summary()["gone"] == 1 and prog.summary()["failed"] == 0
    assert "1 gone (dropped: topic deleted or re-created, or off the drained brokers)" in prog.line()


def test_submitter_runs_first_and_its_refusals_block_the_move():
    fake, plan = fake_and_plan(2)

    def submitter(admin):
        admin.alter_reassignments({plan.moves[0].tp: (3, 2)})
        return SubmitOutcome(submitted=1, refused={plan.moves[1].tp: "INVALID_REPLICATION_FACTOR"})

    watch = ReassignmentWatch(plan, started_at=0, stuck_after_s=600, submitter=submitter)
    prog = watch.poke(fake, now=1)
    assert prog.submitted == 1 and "+1 submitted" in prog.line()
    assert prog.observation.in_flight == 1 and prog.observation.counts["failed"] == 1


def test_empty_plan_is_refused():
    with pytest.raises(ConfigurationError, match="no moves"):
        ReassignmentWatch(ReassignmentPlan(), started_at=0, stuck_after_s=1)


def test_blocked_is_confirmed_by_a_second_look_before_the_wait_ends(monkeypatch):
    monkeypatch.setattr("airflow_kafka_reassign.core.execution.progress.time.sleep", lambda s: None)
    fake, plan = fake_and_plan(1)
    real, seen = fake.snapshot, []

    def lagging(**kw):
        seen.append(1)
        if len(seen) == 1:  # a broker still shows someone else's replicas for a moment
            fake.replicas[plan.moves[0].tp] = (4, 2)
            try:
                return real(**kw)
            finally:
                fake.replicas[plan.moves[0].tp] = (3, 2)
        return real(**kw)

    fake.snapshot = lagging
    prog = ReassignmentWatch(plan, started_at=0, stuck_after_s=600).poke(fake, now=1)
    assert len(seen) == 2 and prog.status == "complete"


def test_zero_bytes_to_copy_counts_progress_in_moves():
    empty = classify(MOVE, part([4, 2, 3, 1], isr=[1, 2, 3], adding=[4], removing=[1]), {1: 0, 4: 0})
    prog = ProgressTracker(started_at=0, stuck_after_s=60).update(obs_of(empty))
    assert prog.unit == "moves" and "ETA --" in prog.line()


def test_a_wait_that_observes_the_plan_itself_keeps_the_sessions_gone_moves():
    """The sensor's last poke observes the plan itself when its session measured nothing (every move finished: no
    sizes read at that tick), and so does the settle re-check before "blocked". Both judged a re-created topic's move
    by the replicas alone: stale, and the wait ended blocked although the session had dropped it ("3 blocked, 3
    gone", seen on the sandbox during a decommission). They keep the session's verdicts now."""
    from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession
    from airflow_kafka_reassign.core.records.store import MemoryStore
    from airflow_kafka_reassign.wait import poke_outcome

    fake = FakeClusterAdmin.build(brokers={1: "a", 2: "b", 3: "c", 4: "a"}, topics={"t": [[1, 2]], "again": [[1, 2]]})
    plan = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(2, 3)),
                                   Move(topic="again", partition=0, current_replicas=(1, 2), target_replicas=(2, 3))),
                            topic_ids=dict(fake.topic_ids))
    session = ExecutionSession(fake, plan, ExecutionConfig(), state_dir=MemoryStore(), settle_s=0)
    watch = ReassignmentWatch(plan, started_at=0, stuck_after_s=600, settle_s=0.01,
                              submitter=lambda admin: poke_outcome(session, measure_bytes=True))
    assert watch.poke(fake, now=1).status == "running"  # both submitted
    fake.complete([TopicPartition("t", 0)])
    fake.delete_topic("again")
    fake.create_topic("again", [[3, 4]])  # a new topic id: the planned partition is gone
    prog = watch.poke(fake, now=2)
    assert prog.status == "complete", prog.line()
    assert prog.observation.gone == 1 and prog.observation.blocked == 0
