"""Moves between log dirs in the one engine (core/execution/log_dirs.py), on the in-memory fake: the per-dir limit,
the log-dir throttle backed up and restored, the stop on an offline log dir, the disk guard per volume, pins on new
replicas after their reassignment, refusals by partition."""

from __future__ import annotations

import logging

import pytest

from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession, run
from airflow_kafka_reassign.core.execution.throttle import LOG_DIR_RATE, read_backup
from airflow_kafka_reassign.core.planner.goals import PlanRequest
from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable, plan_log_dirs
from airflow_kafka_reassign.core.records.store import MemoryStore
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica as R
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.testing import FakeClusterAdmin

MB = 1_000_000
D1, D2 = "/kafka/1/data-1", "/kafka/1/data-2"


class Fake(FakeClusterAdmin):
    """The fake, counting the replicas each AlterReplicaLogDirs carried."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.dir_requests: list[dict[R, str]] = []

    def alter_replica_log_dirs(self, targets):
        self.dir_requests.append(dict(targets))
        return super().alter_replica_log_dirs(targets)


def cluster(partitions: int = 4, **topics) -> Fake:
    """3 brokers with 2 log dirs each; t-0..t-3 on [1, 2] / [2, 1] with broker 1's replica in its second dir."""
    f = Fake.build({1: "a", 2: "b", 3: "c"},
                   {"t": [[1, 2] if p % 2 == 0 else [2, 1] for p in range(partitions)], **topics}, log_dirs=2)
    for p in range(partitions):
        f.replica_dirs[R("t", p, 1)] = D2
        f.sizes[TopicPartition("t", p)] = {1: (p + 1) * MB, 2: (p + 1) * MB}
    return f


def removal(f: FakeClusterAdmin, *entries: str) -> ReassignmentPlan:
    request = PlanRequest(goal="remove-disks", log_dirs=list(entries or [f"1:{D2}"]))
    return plan_log_dirs(f.snapshot(include_sizes=True), LogDirTable.of(f.log_dirs(None)), request).plan


def future_replicas(f: FakeClusterAdmin) -> dict[str, int]:
    """Future replicas per log dir, as DescribeLogDirs shows them (the integration test samples the same)."""
    out: dict[str, int] = {}
    for dirs in f.log_dirs(None).dirs.values():
        for d in dirs:
            out[d.path] = sum(1 for x in d.replicas if x.future)
    return out


def session(f: FakeClusterAdmin, plan: ReassignmentPlan, state=None, **settings) -> ExecutionSession:
    return ExecutionSession(f, plan, ExecutionConfig(**settings), state_dir=state, settle_s=0, sleep=lambda s: None)


def test_one_move_per_dir_at_a_time_by_default_until_the_dir_is_empty():
    f = cluster()
    plan = removal(f)
    s = session(f, plan)
    sent = []
    for _ in range(6):
        tick = s.tick()
        assert max(future_replicas(f).values()) <= 1  # the sampled invariant: never more than one per dir
        sent.extend(r for req in f.dir_requests[len(sent):] for r in req)
        f.complete_log_dir_moves()
        if tick.status.complete:
            break
    assert tick.status.complete and tick.status.ok
    assert [len(r) for r in f.dir_requests] == [1, 1, 1, 1]
    assert [r.partition for req in f.dir_requests for r in req] == [0, 1, 2, 3]  # smallest first
    assert not [x for x in f.log_dirs(None).dirs[1] if x.path == D2][0].replicas  # the removed dir is empty
    assert "log dirs: 4/4 replicas moved" in tick.status.progress_line()


def test_the_limit_counts_source_and_target_dirs_and_is_a_setting():
    f = cluster()
    f.replica_dirs[R("t", 0, 2)] = "/kafka/2/data-2"  # broker 2 empties its second dir too: in parallel with 1
    plan = removal(f, f"1:{D2}", "2:/kafka/2/data-2")
    session(f, plan).tick()
    assert sorted(r.broker for r in f.dir_requests[0]) == [1, 2]
    f2 = cluster()
    session(f2, removal(f2), max_moves_per_dir=3).tick()
    assert len(f2.dir_requests[0]) == 3 and future_replicas(f2)[D1] == 3
    with pytest.raises(ConfigurationError, match="max_moves_per_dir must be a positive integer"):
        ExecutionConfig.parse(max_moves_per_dir=0)


def test_the_log_dir_throttle_is_backed_up_set_while_moving_and_restored_exactly():
    f = cluster(2)
    f.broker_configs[1][LOG_DIR_RATE] = "7000000"  # someone else's value, put back exactly
    state = MemoryStore()
    plan = removal(f)
    s = session(f, plan, state, log_dir_throttle_bytes_per_sec=500_000)
    s.tick()
    assert read_backup(state).brokers[1][LOG_DIR_RATE] == "7000000"
    assert f.broker_configs[1][LOG_DIR_RATE] == "500000" and LOG_DIR_RATE not in f.broker_configs[2]
    f.complete_log_dir_moves()
    s.tick()  # the second move goes out, still throttled
    assert f.broker_configs[1][LOG_DIR_RATE] == "500000"
    f.complete_log_dir_moves()
    tick = s.tick()
    assert tick.status.complete and f.broker_configs[1][LOG_DIR_RATE] == "7000000"  # nothing left: set back at once
    assert s.finish()["throttles_restored"] == "yes"
    assert read_backup(state) is None and f.broker_configs[1][LOG_DIR_RATE] == "7000000"
    with pytest.raises(ConfigurationError, match="a throttle needs a state_dir"):
        session(f, plan, None, log_dir_throttle_bytes_per_sec=1).tick()


def test_an_offline_log_dir_stops_every_new_move_and_keeps_the_state(caplog):
    f = cluster(u=[[2, 3], [3, 2]])
    others = (Move(topic="u", partition=0, current_replicas=(2, 3), target_replicas=(1, 3)),
              Move(topic="u", partition=1, current_replicas=(3, 2), target_replicas=(3, 1)))
    plan = ReassignmentPlan(moves=(*removal(f).moves, *others))
    state = MemoryStore()
    s = session(f, plan, state, log_dir_throttle_bytes_per_sec=1_000_000, max_moves=1, order="plan")
    s.tick()
    assert len(f.dir_requests) == 1 and f.log_dir_moves and len(f.alter_requests) == 1
    f.complete()  # u-0 done: u-1 could go now
    f.offline_dirs.add(D1)  # KAFKA-19571: the target dir failed
    with caplog.at_level(logging.ERROR):
        tick = s.tick()
    status = tick.status
    assert status.blocked.startswith("STOPPED: log dir /kafka/1/data-1 of broker 1 (KAFKA_STORAGE_ERROR) is offline")
    assert "STOPPED" in caplog.text and "run the task again on this plan: it resumes" in status.blocked
    assert len(f.dir_requests) == 1 and len(f.alter_requests) == 1  # nothing new: between dirs nor to brokers
    assert f.log_dir_moves and status.log_dirs.stopped  # nothing cancelled, the move stays
    assert status.pending == [TopicPartition("u", 1)] and not status.complete
    assert read_backup(state) is not None  # the throttle backup is kept
    f.offline_dirs.clear()
    f.complete_log_dir_moves()
    assert s.tick().status.blocked is None and len(f.dir_requests) == 2  # back: it resumes


def test_the_disk_guard_holds_a_move_its_target_volume_cannot_take():
    f = cluster(2)
    plan = removal(f)  # planned with room; the volume shrinks before execution
    f.dir_total[D1] = 3 * MB  # 3 MB free (nothing in it), 1% reserve: t-0 (1 MB) fits, t-1 (2 MB) does not after it
    s = session(f, plan, max_moves_per_dir=2, disk_reserve="1%")
    tick = s.tick()
    assert [r.partition for r in f.dir_requests[0]] == [0]
    assert "log dir /kafka/1/data-1 of broker 1" in tick.status.log_dirs.held[R("t", 1, 1)]
    f.complete_log_dir_moves()
    f.dir_total[D1] = int(1.5 * MB)
    tick = s.tick()
    assert tick.status.blocked.startswith("disk guard: no pending move between log dirs fits")


def test_a_pin_on_a_new_replica_waits_for_its_reassignment_then_is_sent():
    f = cluster(1)
    plan = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 2),
                                        log_dirs=("/kafka/3/data-2", "any")),))
    s = session(f, plan)
    tick = s.tick()
    assert tick.status.in_flight == [TopicPartition("t", 0)] and not f.dir_requests
    assert tick.status.log_dirs.waiting == [R("t", 0, 3)] and not tick.status.complete
    f.complete()
    s.tick()
    assert f.dir_requests == [{R("t", 0, 3): "/kafka/3/data-2"}]
    f.complete_log_dir_moves()
    assert s.tick().status.ok


def test_a_cordoned_target_and_a_replica_moved_elsewhere_are_refused_by_partition():
    f = cluster(2)
    plan = removal(f)
    f.set_cordons({1: D1})
    status = session(f, plan).tick().status
    assert not f.dir_requests and set(status.failed) == {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert "is cordoned (cordoned.log.dirs, KIP-1066)" in status.failed[TopicPartition("t", 0)]
    assert not status.done and status.complete and not status.ok
    f.set_cordons({1: None})
    f.log_dir_moves[R("t", 0, 1)] = ("/kafka/1/data-2", 5)  # someone moves it (back) meanwhile
    status = session(f, plan).tick().status
    assert "being moved to log dir /kafka/1/data-2 by someone else" in status.failed[TopicPartition("t", 0)]


def test_run_moves_every_replica_out_and_the_dry_run_sends_nothing(caplog):
    f = cluster()
    plan = removal(f)
    with caplog.at_level(logging.INFO):
        dry = run(f, plan, ExecutionConfig(dry_run=True), state_dir=None, settle_s=0, sleep=lambda s: None)
    assert not f.dir_requests and dry.status.would_submit == [TopicPartition("t", 0)]
    assert 'would set replica.alter.log.dirs.io.max.bytes.per.second=None on brokers [1] and send AlterReplicaLogDirs: ' \
           '{"1:/kafka/1/data-1": ["t-0"]}' in caplog.text
    f.auto_complete = True
    result = run(f, plan, ExecutionConfig(log_dir_throttle_bytes_per_sec=1_000_000), state_dir=MemoryStore(),
                 settle_s=0, sleep=lambda s: None, poll_interval_s=0)
    assert result.status.ok and result.finish["throttles_restored"] == "yes"
    assert {f.replica_dirs[R("t", p, 1)] for p in range(4)} == {D1}
    assert result.summary()["log_dirs"]["done"] == 4


def test_a_wait_ends_when_the_moves_between_log_dirs_are_done_too():
    """The sensor's two paths: with submit_pending (the session's tick observes for it) and a bare watch (its own
    DescribeLogDirs): the partitions are in place from the first poke, but not done until their dirs are."""
    from airflow_kafka_reassign.core.execution.progress import ReassignmentWatch
    from airflow_kafka_reassign.wait import poke_outcome

    f = cluster(2)
    plan = removal(f)
    s = session(f, plan)
    submitting = ReassignmentWatch(plan, started_at=0, stuck_after_s=600, submitter=lambda admin: poke_outcome(
        s, measure_bytes=False))
    watching = ReassignmentWatch(plan, started_at=0, stuck_after_s=600, settle_s=0)
    first = submitting.poke(f, now=1)
    assert first.status == "running" and first.observation.in_flight == 1 and first.observation.pending == 1
    seen = watching.poke(f, now=1).observation
    assert (seen.in_flight, seen.pending, seen.done) == (1, 1, 0)
    for now in (2, 3):
        f.complete_log_dir_moves()
        progress = submitting.poke(f, now=now)
    assert progress.status == "complete" and watching.poke(f, now=4).status == "complete"
    f.set_cordons({1: D1})
    f.replica_dirs[R("t", 0, 1)] = D2  # back in the removed dir: its move now refused (the target is cordoned)
    again = ReassignmentWatch(plan, started_at=0, stuck_after_s=600, settle_s=0, submitter=lambda admin: poke_outcome(
        session(f, plan), measure_bytes=False))
    assert again.poke(f, now=5).status == "blocked"


def test_the_moves_between_log_dirs_in_flight_can_be_cancelled():
    from airflow_kafka_reassign.core.execution.log_dirs import cancel_log_dir_moves

    f = cluster(2)
    plan = removal(f)
    session(f, plan, max_moves_per_dir=2).tick()
    assert len(f.log_dir_moves) == 2
    assert cancel_log_dir_moves(f, plan) == {R("t", 0, 1): None, R("t", 1, 1): None}
    assert not f.log_dir_moves and {f.replica_dirs[R("t", p, 1)] for p in (0, 1)} == {D2}
    assert cancel_log_dir_moves(f, plan) == {}  # nothing in flight: nothing sent


def test_a_rolled_back_disk_removal_puts_each_replica_back_in_the_log_dir_it_left_and_uncordons_it():
    """The plan records the dir each moved replica leaves (current_log_dirs); its rollback pins it back there, in
    Kafka's format too, after the cancel has restored the cordon (the dir was cordoned: nothing could go back)."""
    from airflow_kafka_reassign.core.execution import cancel_then_roll_back
    from airflow_kafka_reassign.core.maintenance.cordon import CORDONED_LOG_DIRS
    from airflow_kafka_reassign.core.maintenance.disk_removal import cordon_for_removal

    f = cluster(2)
    before = {b: dict(c) for b, c in f.broker_configs.items()}
    state = MemoryStore()
    request = PlanRequest(goal="remove-disks", log_dirs=[f"1:{D2}"])
    assert cordon_for_removal(f, request, state_dir=state) == {1: D2}
    plan = removal(f)
    assert [m.current_log_dirs for m in plan.moves] == [(D2, "any"), ("any", D2)]
    rollback = plan.rollback()
    assert [m.pinned_dirs for m in rollback.moves] == [{1: D2}, {1: D2}]
    assert [p["log_dirs"] for p in rollback.to_kafka_dict()["partitions"]] == [[D2, "any"], ["any", D2]]
    assert ReassignmentPlan.model_validate_json(rollback.model_dump_json()) == rollback  # rollback.json round trip

    f.auto_complete = True
    assert run(f, plan, ExecutionConfig(), state_dir=state, poll_interval_s=0, sleep=lambda s: None).status.ok
    assert {f.replica_dirs[R("t", p, 1)] for p in (0, 1)} == {D1}  # removed, the dir still cordoned
    assert f.broker_configs[1][CORDONED_LOG_DIRS] == D2

    outcome = cancel_then_roll_back(f, plan, ExecutionConfig(), state_dir=state, rollback=rollback, poll_interval_s=0)
    assert outcome.cordons_restored and outcome.rollback is not None and outcome.rollback.status.ok
    assert {f.replica_dirs[R("t", p, 1)] for p in (0, 1)} == {D2}  # back in the dir they left
    assert f.broker_configs == before and not f.log_dir_moves


def test_the_rollback_of_a_replica_sent_to_another_broker_pins_it_back_in_its_dir():
    f = cluster(1)
    f.dir_total[D1] = 1  # no room on broker 1: t-0's replica goes to broker 3
    move = removal(f).moves[0]
    assert (move.current_replicas, move.target_replicas, move.log_dirs) == ((1, 2), (3, 2), None)
    assert move.current_log_dirs == (D2, "any") and move.current_dirs == {1: D2}
    back = ReassignmentPlan(moves=(move,)).rollback().moves[0]
    assert (back.target_replicas, back.pinned_dirs, back.current_log_dirs) == ((1, 2), {1: D2}, None)


def test_current_log_dirs_are_checked_like_log_dirs():
    with pytest.raises(ValueError, match=r"partition t-0 \(current\): log_dirs .* has 1 entries but target_replicas"):
        Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(1, 2), current_log_dirs=(D1,))
    with pytest.raises(ValueError, match="current_log_dirs .* needs current_replicas"):
        Move(topic="t", partition=0, target_replicas=(1, 2), current_log_dirs=(D1, "any"))
    plain = Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(1, 3))
    assert "current_log_dirs" not in plain.model_dump_json()  # plans without log dirs: the same bytes as before


# -- the cluster living under a disk removal (issue 36): a topic deleted or grown while a log-dir move is in flight --


def living(**settings):
    """Broker 1's second dir (D2) holds t-0..t-3 and u-0..u-1 (u the smallest: moved first); the dir is cordoned, as
    cordon_for_removal leaves it; a session removing it, one move per dir."""
    f = cluster(4, u=[[1, 3], [3, 1]])
    for p in range(2):
        f.replica_dirs[R("u", p, 1)] = D2
        f.sizes[TopicPartition("u", p)] = {1: MB // 2, 3: MB // 2}
    plan = removal(f)
    f.set_cordons({1: D2})
    state = MemoryStore()
    return f, plan, state, session(f, plan, state, **settings)


def until_complete(f: FakeClusterAdmin, s: ExecutionSession, ticks: int = 20):
    for _ in range(ticks):
        tick = s.tick()
        assert max(future_replicas(f).values()) <= 1  # max_moves_per_dir=1, whatever the cluster did
        if tick.status.complete:
            return tick
        f.complete_log_dir_moves()
    raise AssertionError(f"not complete after {ticks} ticks: {tick.status.progress_line()}")


def in_d2(f: FakeClusterAdmin) -> list:
    return [x for d in f.log_dirs(None).dirs[1] if d.path == D2 for x in d.replicas]


def test_a_topic_deleted_while_its_log_dir_move_is_in_flight_is_dropped_and_the_dir_ends_empty():
    f, plan, state, s = living(log_dir_throttle_bytes_per_sec=1_000_000)
    s.tick()
    assert f.dir_requests == [{R("u", 0, 1): D1}] and R("u", 0, 1) in f.log_dir_moves  # u-0's move in flight
    f.delete_topic("u")
    tick = until_complete(f, s)
    status = tick.status
    assert status.ok, status.progress_line()  # gone is not failed
    assert set(status.gone) == {TopicPartition("u", 0), TopicPartition("u", 1)} and not status.failed
    assert sorted(r.partition for r in status.log_dirs.done) == [0, 1, 2, 3] and status.log_dirs.total == 4
    assert not in_d2(f)  # the dir is empty
    assert any("topic u deleted: dropped 2 move(s)" in e for e in s.events)
    assert "2 gone (dropped)" in status.progress_line() and "log dirs: 4/4 replicas moved" in status.progress_line()
    assert s.finish()["throttles_restored"] == "yes" and LOG_DIR_RATE not in f.broker_configs[1]


def test_a_topic_deleted_between_the_read_and_the_send_is_dropped_not_failed():
    """The broker refuses a move of a replica that no longer exists; the next step sees the topic gone."""

    class Racing(Fake):
        def alter_replica_log_dirs(self, targets):
            if "u" in self.topics:
                self.delete_topic("u")
            return super().alter_replica_log_dirs(targets)

    f = Racing.build({1: "a", 2: "b", 3: "c"}, {"t": [[1, 2], [2, 1]], "u": [[1, 3]]}, log_dirs=2)
    for r, size in ((R("t", 0, 1), 2), (R("t", 1, 1), 3), (R("u", 0, 1), 1)):
        f.replica_dirs[r] = D2
        f.sizes[r.tp] = {b: size * MB for b in f.replicas[r.tp]}
    plan = removal(f)
    s = session(f, plan, MemoryStore())
    tick = until_complete(f, s)
    assert tick.status.ok, tick.status.progress_line()
    assert set(tick.status.gone) == {TopicPartition("u", 0)} and not tick.status.failed and not in_d2(f)


def test_a_topic_grown_while_a_log_dir_move_is_in_flight_keeps_its_moves_and_the_dir_ends_empty():
    f, plan, state, s = living()
    s.tick()
    f.grow_topic("t", [[1, 3], [3, 1]])  # the controller skips the cordoned dir: the new replicas land in D1
    tick = until_complete(f, s)
    assert tick.status.ok and not tick.status.gone and len(tick.status.log_dirs.done) == 6
    assert not in_d2(f) and any("topic t grew from 4 to 6 partitions" in e for e in s.events)


def test_a_topic_deleted_under_a_disk_removal_that_also_moves_to_another_broker_leaves_no_throttle():
    """A replica with no room on its broker goes to another broker under the replication throttle: its topic deleted
    mid-move, the throttle syncs drop it (no raise) and every throttle config ends as before."""
    f = cluster(1, u=[[1, 2]])
    f.replica_dirs[R("u", 0, 1)] = D2
    f.sizes[TopicPartition("u", 0)] = {1: 4 * MB, 2: 4 * MB}
    f.dir_total[D1] = 3 * MB  # t-0 (1 MB) fits in D1, u-0 (4 MB) does not: it goes to broker 3
    before = {b: dict(c) for b, c in f.broker_configs.items()}
    plan = removal(f)
    assert {m.topic: m.target_replicas for m in plan.moves} == {"t": (1, 2), "u": (3, 2)}
    state = MemoryStore()
    s = session(f, plan, state, throttle_bytes_per_sec=1_000_000, log_dir_throttle_bytes_per_sec=1_000_000)
    s.tick()
    assert TopicPartition("u", 0) in f.inflight and f.topic_configs["u"]  # throttled, in flight
    f.delete_topic("u")
    tick = until_complete(f, s)
    assert tick.status.ok and set(tick.status.gone) == {TopicPartition("u", 0)}
    assert s.finish()["throttles_restored"] == "yes" and read_backup(state) is None
    assert {b: {k: v for k, v in c.items()} for b, c in f.broker_configs.items()} == before


def test_a_topic_re_created_while_its_log_dir_move_is_in_flight_is_dropped_and_the_new_one_is_left_alone():
    f, plan, state, s = living()
    s.tick()
    assert R("u", 0, 1) in f.log_dir_moves
    f.delete_topic("u")
    f.create_topic("u", [[1, 3], [3, 1]])  # a new topic id; the broker places its replicas outside the cordoned dir
    tick = until_complete(f, s)
    assert tick.status.ok and set(tick.status.gone) == {TopicPartition("u", 0), TopicPartition("u", 1)}
    assert not in_d2(f) and f.replica_dirs[R("u", 0, 1)] == D1 and len(f.dir_requests) == 5  # u's new one: not moved
    assert any("topic u re-created (new topic id): dropped 2 move(s)" in e for e in s.events)


# -- a disk removal's rounds (issue 36): what lands in the removed dir meanwhile is moved off in the same run --------


def removal_goal(max_rounds: int = 5):
    from airflow_kafka_reassign.core.maintenance.rounds import DiskRemovalGoal, DiskRemovalSpec

    return DiskRemovalGoal(DiskRemovalSpec(request=PlanRequest(goal="remove-disks", log_dirs=[f"1:{D2}"]),
                                           max_rounds=max_rounds))


def uncordoned_run(goal):
    """The disk removal on a cluster without cordons (Kafka before 4.3): the controller may place a new replica in
    the dir being emptied. One move per dir."""
    f = cluster(2)
    plan = removal(f)
    state = MemoryStore()
    s = ExecutionSession(f, plan, ExecutionConfig(), state_dir=state, settle_s=0, sleep=lambda s: None, goal=goal)
    return f, plan, state, s


def test_a_replica_placed_in_the_removed_dir_during_the_run_is_moved_off_in_a_round_and_the_dir_ends_empty():
    f, plan, state, s = uncordoned_run(removal_goal())
    s.tick()
    f.create_topic("v", [[1, 3]])
    f.replica_dirs[R("v", 0, 1)] = D2  # Kafka placed it in the dir being emptied (no cordon before 4.3)
    tick = until_complete(f, s)
    assert tick.status.ok and not in_d2(f), in_d2(f)  # the dir is empty, v-0 included
    assert s.drain_rounds == 1 and s.drained_later == [TopicPartition("v", 0)] and s.drain_short is None
    assert any("round 1 of at most 5: 1 move(s)" in e for e in s.events)
    assert f.replica_dirs[R("v", 0, 1)] == D1  # moved within its broker: no data crossed the network
    assert f.replicas[TopicPartition("v", 0)] == (1, 3)


def test_without_a_goal_the_same_run_ends_with_the_replica_left_in_the_dir():
    """What the rounds change: the plan alone completes and leaves v-0 in the dir being removed."""
    f, plan, state, s = uncordoned_run(None)
    s.tick()
    f.create_topic("v", [[1, 3]])
    f.replica_dirs[R("v", 0, 1)] = D2
    until_complete(f, s)
    assert [(x.topic, x.partition) for x in in_d2(f)] == [("v", 0)]


def test_the_rounds_are_bounded_and_the_run_names_what_is_left_and_what_to_do():
    f, plan, state, s = uncordoned_run(removal_goal(max_rounds=0))
    s.tick()
    f.create_topic("v", [[1, 3]])
    f.replica_dirs[R("v", 0, 1)] = D2
    until_complete(f, s)
    assert s.drain_rounds == 0 and s.drain_short is not None
    assert "1 partition(s) still have a replica in the removed log dir(s) 1:/kafka/1/data-2 after 0 disk-removal round(s)" \
        in s.drain_short and "v-0" in s.drain_short and "cordon the dirs" in s.drain_short


def test_a_resumed_session_takes_the_round_an_earlier_process_recorded():
    f, plan, state, s = uncordoned_run(removal_goal())
    s.tick()
    f.create_topic("v", [[1, 3]])
    f.replica_dirs[R("v", 0, 1)] = D2
    for _ in range(20):
        if s.tick().status.complete or s.drain_rounds:
            break
        f.complete_log_dir_moves()
    assert s.drain_rounds == 1
    again = ExecutionSession.resume(f, plan, ExecutionConfig(), state_dir=state, holder=None, settle_s=0,
                                    sleep=lambda s: None, goal=removal_goal())
    assert again.drain_rounds == 1 and TopicPartition("v", 0) in again.plan.partitions
