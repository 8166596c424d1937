"""A run owns its end state while the cluster lives on (issue 36): each change of the cluster under a plan touches the
moves it touches, never the whole run. On the in-memory fake; the same cases run on a real sandbox in
tests/integration/test_living_cluster.py and test_living_cluster_disk.py."""

from __future__ import annotations

from execution_helpers import RACKS, fake, mv, plan_of, tp

from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession, run
from airflow_kafka_reassign.core.execution.run_state import cluster_events, read_topic_ids
from airflow_kafka_reassign.core.execution.throttle import FOLLOWER_REPLICAS, THROTTLE_BACKUP_FILE
from airflow_kafka_reassign.core.maintenance.drain import DrainSpec
from airflow_kafka_reassign.core.records.store import MemoryStore
from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan

THROTTLED = ExecutionConfig(throttle_bytes_per_sec=1000, health_gate=False)


class Clock:
    """The session's clock (seconds), advanced by each of the run's sleeps."""

    def __init__(self, step_s: float = 10.0) -> None:
        self.t, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        return self.t


def no_throttle_left(f) -> bool:
    return f.broker_configs == {b: {} for b in RACKS} and not any(
        k.endswith("throttled.replicas") for c in f.topic_configs.values() for k in c)


def test_a_grown_topic_keeps_its_moves_and_the_run_says_so():
    f = fake(t=[[1, 2], [2, 3]], u=[[1, 2]])
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 2), (1, 4)), mv("u", 0, (1, 2), (2, 5))),
                            partition_counts={"t": 2, "u": 1}, topic_ids=dict(f.topic_ids))
    f.grow_topic("t", [[3, 1], [1, 2]])  # 2 -> 4 partitions, the same id
    result = run(f, plan, THROTTLED, state_dir=MemoryStore(), sleep=lambda s: f.complete(), settle_s=0)
    assert result.status.ok and f.replicas[tp("t", 0)] == (1, 4) and f.replicas[tp("u", 0)] == (2, 5)
    assert result.cluster_events == ["topic t grew from 2 to 4 partitions: its moves continue"]
    assert no_throttle_left(f)


def test_a_topic_deleted_with_its_move_in_flight_is_dropped_and_leaves_no_throttle():
    """The report: the next step's throttle sync named the deleted topic, the task failed on every try and the
    throttles stayed on four brokers. Now its moves are gone, its throttles forgotten, the rest finishes."""
    f = fake(a=[[1, 2], [2, 3]], b=[[1, 2]])
    plan = plan_of(mv("a", 0, (1, 2), (4, 2)), mv("a", 1, (2, 3), (2, 5)), mv("b", 0, (1, 2), (1, 6)))
    state = MemoryStore()
    polls = iter(range(100))

    def sleep(_s):
        n = next(polls)
        if n == 0:
            assert f.topic_configs["a"][FOLLOWER_REPLICAS]  # throttled while in flight
            f.delete_topic("a")  # deleted by its owner with a move in flight
        else:
            f.complete()

    result = run(f, plan, ExecutionConfig(throttle_bytes_per_sec=1000, health_gate=False, max_moves=2),
                 state_dir=state, sleep=sleep, settle_s=0)
    assert result.status.blocked is None and result.status.failed == {}
    assert set(result.gone) == {tp("a", 0), tp("a", 1)} and f.replicas[tp("b", 0)] == (1, 6)
    assert result.summary()["gone"] == 2 and result.summary()["throttles_restored"] == "yes"
    assert "topic a deleted: dropped 2 move(s) (a-0, a-1)" in result.cluster_events
    assert no_throttle_left(f) and state.read(THROTTLE_BACKUP_FILE) is None


def test_a_re_created_topic_s_moves_are_dropped_and_a_drain_plans_its_new_partitions_again():
    f = fake(keep=[[4, 1]], again=[[4, 2], [3, 1]])
    plan = ReassignmentPlan(moves=(mv("keep", 0, (4, 1), (5, 1)), mv("again", 0, (4, 2), (6, 2)),
                                   mv("again", 1, (3, 1), (3, 2))), partition_counts={"keep": 1, "again": 2},
                            topic_ids=dict(f.topic_ids))
    old_id = f.topic_ids["again"]
    f.delete_topic("again")
    new_id = f.create_topic("again", [[1, 4], [2, 3]])  # the controller put a replica on the drained broker 4 again
    result = run(f, plan, THROTTLED, state_dir=MemoryStore(), sleep=lambda s: f.complete(), settle_s=0,
                 drain=DrainSpec(brokers=(4,)))
    assert new_id != old_id and result.status.ok, result.summary()
    assert not [t for t, r in f.replicas.items() if 4 in r]  # the goal: broker 4 empty
    assert {str(t) for t in result.gone} == {"again-0", "again-1"}
    assert "topic again re-created (new topic id): dropped 2 move(s) (again-0, again-1)" in result.cluster_events
    assert f.replicas[tp("again", 1)] == (2, 3)  # the new partition not on 4 was left alone
    assert all(len(r) == 2 for r in f.replicas.values()) and no_throttle_left(f)


def test_a_plan_without_ids_is_judged_by_the_ids_the_run_saw_first_kept_for_a_retry():
    f = fake(t=[[1, 2]], u=[[2, 3]])
    state = MemoryStore()
    plan = plan_of(mv("t", 0, (1, 2), (1, 4)), mv("u", 0, (2, 3), (2, 5)))
    first = ExecutionSession(f, plan, THROTTLED, state_dir=state, settle_s=0)
    first.preflight()
    assert read_topic_ids(state) == {"t": f.topic_ids["t"], "u": f.topic_ids["u"]}
    f.delete_topic("t")
    f.create_topic("t", [[1, 2]])  # the same replicas: only the id tells it is another topic
    retry = ExecutionSession(f, plan, THROTTLED, state_dir=state, settle_s=0)  # another worker, plan.json only
    status = retry.tick().status
    assert list(status.gone) == [tp("t", 0)] and status.submitted == [tp("u", 0)]
    assert f.replicas[tp("t", 0)] == (1, 2)  # never moved: it is not the planned partition


def test_a_rolling_restart_pauses_only_the_moves_that_need_the_broker_and_they_resume_when_it_is_back():
    f = fake(a=[[1, 2], [3, 1], [6, 3]])  # broker 6 holds a replica: a broker of the cluster, restarting
    f.down.add(6)
    plan = plan_of(mv("a", 0, (1, 2), (1, 6)), mv("a", 1, (3, 1), (3, 5)))
    clock = Clock()
    polls = iter(range(100))

    def sleep(_s):
        clock.t += 10
        n = next(polls)
        f.complete()
        if n == 2:
            f.down.discard(6)  # back after 30 s

    result = run(f, plan, THROTTLED, state_dir=MemoryStore(), sleep=sleep, settle_s=0, clock=clock)
    assert result.status.ok and f.replicas[tp("a", 0)] == (1, 6) and f.replicas[tp("a", 1)] == (3, 5)
    events = result.cluster_events
    assert events[0] == "broker 6 is not alive (restarting?): 1 move(s) wait for it (a-0), the others go on"
    assert "broker 6 back after 30s: the moves that waited for it go on" in events
    assert [t for targets, _ in f.alter_requests for t in targets] == [tp("a", 1), tp("a", 0)]  # a-1 did not wait


def test_a_broker_down_longer_than_the_bound_refuses_its_moves_naming_it():
    f = fake(a=[[1, 2], [6, 3]])
    f.down.add(6)
    plan = plan_of(mv("a", 0, (1, 2), (1, 6)))
    clock = Clock()

    def sleep(_s):
        clock.t += 60

    result = run(f, plan, ExecutionConfig(broker_restart_wait_s=120, health_gate=False), state_dir=None, sleep=sleep,
                 settle_s=0, clock=clock)
    why = result.status.failed[tp("a", 0)]
    assert why.startswith("refused: broker 6 not alive for 2m 00s, longer than broker_restart_wait_s=120")
    assert "allow_offline_brokers=True" in why and f.alter_requests == [] and not result.status.ok


def test_a_restart_during_a_drain_burns_no_round():
    """The report: 14 moves refused while broker 2 restarted were planned again by rounds 2-5 within 0.3 s."""
    f = fake(a=[[4, 1], [4, 3], [6, 4]])
    f.down.add(6)
    plan = plan_of(mv("a", 0, (4, 1), (2, 1)), mv("a", 1, (4, 3), (6, 3)), mv("a", 2, (6, 4), (6, 5)))
    clock = Clock()
    polls = iter(range(100))

    def sleep(_s):
        clock.t += 5
        f.complete()
        if next(polls) == 3:
            f.down.discard(6)

    result = run(f, plan, THROTTLED, state_dir=MemoryStore(), sleep=sleep, settle_s=0, clock=clock,
                 drain=DrainSpec(brokers=(4,)))
    assert result.status.ok and not [t for t, r in f.replicas.items() if 4 in r]
    assert result.drained_later == [] and result.drain_short is None


def test_someone_else_s_reassignment_of_a_planned_partition_is_waited_for_then_judged_against_the_goal():
    f = fake(a=[[4, 1], [2, 3]])
    f.alter_reassignments({tp("a", 0): [4, 5]})  # someone else's, in flight: keeps the replica on 4
    f.alter_requests.clear()
    plan = plan_of(mv("a", 0, (4, 1), (2, 1)), mv("a", 1, (2, 3), (2, 6)))
    result = run(f, plan, THROTTLED, state_dir=MemoryStore(), sleep=lambda s: f.complete(), settle_s=0,
                 drain=DrainSpec(brokers=(4,)))
    assert result.status.ok and not [t for t, r in f.replicas.items() if 4 in r]
    assert len(f.replicas[tp("a", 0)]) == 2 and 5 in f.replicas[tp("a", 0)]  # its move planned again from [4, 5]
    assert any(e.startswith("the reassignment of a-0 is in flight (not ours)") for e in result.cluster_events)
    # a hand-written plan (no goal) refuses the stale move by name
    g = fake(a=[[4, 1]])
    g.alter_reassignments({tp("a", 0): [4, 5]})
    hand = run(g, plan_of(mv("a", 0, (4, 1), (2, 1))), THROTTLED, state_dir=MemoryStore(),
               sleep=lambda s: g.complete(), settle_s=0)
    assert hand.status.stale == {tp("a", 0): ((4, 1), (4, 5))} and not hand.status.ok


def test_rounds_stop_at_their_bound_naming_what_is_left():
    f = fake(a=[[4, 1]])
    made = iter(range(100))

    def sleep(_s):
        f.complete()
        f.create_topic(f"new{next(made)}", [[4, 2]])  # something keeps creating topics on the drained broker

    result = run(f, plan_of(mv("a", 0, (4, 1), (2, 1))), THROTTLED, state_dir=MemoryStore(), sleep=sleep, settle_s=0,
                 drain=DrainSpec(brokers=(4,), max_rounds=2))
    assert "after 2 drain round(s) (max_rounds=2)" in result.drain_short
    assert [e for e in result.cluster_events if e.startswith("round ")][:2] == [
        "round 1 of at most 2: 1 move(s) planned from a fresh snapshot (new0-0)",
        "round 2 of at most 2: 1 move(s) planned from a fresh snapshot (new1-0)"]


def test_the_cluster_events_are_journalled_once_across_the_processes_of_a_run(caplog):
    """The sensor's pokes each resume the session in a new process: a change is logged and journalled once, and the
    wait's summary reads every process's lines from the journal."""
    f = fake(t=[[1, 2]], u=[[2, 3]])
    state = MemoryStore()
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 2), (1, 4)), mv("u", 0, (2, 3), (2, 5))), partition_counts={"t": 1},
                            topic_ids=dict(f.topic_ids))
    f.grow_topic("t", [[2, 1]])
    with caplog.at_level("WARNING"):
        ExecutionSession.resume(f, plan, THROTTLED, state_dir=state, holder="wait#1", settle_s=0).tick()
    assert "grew from 1 to 2" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        ExecutionSession.resume(f, plan, THROTTLED, state_dir=state, holder="wait#1", settle_s=0).tick()
    assert "grew from 1 to 2" not in caplog.text  # the second poke knew it already
    assert cluster_events(state) == ["topic t grew from 1 to 2 partitions: its moves continue"]
