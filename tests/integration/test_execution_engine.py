"""The execution engine (core/execution.py) with the real adapter on the sandbox cluster.

Real data in the topics (kafka/workload.py) and replication throttles of 100-150 kB/s make moves
last a few seconds, long enough to observe, interrupt and cancel. (Kafka's replication quota
measures over about 10 one-second windows, so the first ~10 s worth of the rate passes at once:
a move of X bytes at R bytes/s lasts about X/R - 10 s.) Real Airflow task runs of the
operators (kill + retry, cancel) are in test_execution_airflow.py.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kafka_helpers import make_topic, replicas, throttles, wait_until

from airflow_kafka_reassign.core.execution import (
    ExecutionLimits,
    ExecutionOptions,
    restore_throttles,
    run,
)
from airflow_kafka_reassign.core.execution.cancel import cancel
from airflow_kafka_reassign.core.execution.throttle import (
    FOLLOWER_RATE,
    LEADER_RATE,
    LEADER_REPLICAS,
    apply_throttle,
    restore_throttle,
)
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin


def described(config: dict, topic: str) -> list[tuple[int, ...]]:
    """What describe (Metadata from any broker) shows: KIP-860's view, intermediate sets included."""
    md = AdminClient({"bootstrap.servers": config["bootstrap.servers"]}).list_topics(topic, timeout=10)
    parts = md.topics[topic].partitions
    return [tuple(parts[i].replicas) for i in sorted(parts)]


def plan_of(topic: str, *moves: tuple[int, tuple[int, ...] | None, tuple[int, ...]]) -> ReassignmentPlan:
    return ReassignmentPlan(moves=tuple(
        Move(topic=topic, partition=p, current_replicas=c, target_replicas=t) for p, c, t in moves))


class Recording:
    """The real adapter, recording every partition submitted (AlterPartitionReassignments)."""

    def __init__(self, admin: KafkaClusterAdmin, fail_on_read: int | None = None) -> None:
        self._admin = admin
        self.sent: list[TopicPartition] = []
        self._reads = 0
        self._fail_on_read = fail_on_read

    def alter_reassignments(self, targets, **kw):
        self.sent.extend(targets)
        return self._admin.alter_reassignments(targets, **kw)

    def _read(self) -> None:
        """The ``fail_on_read``-th read of the cluster's state (a snapshot or a listing) fails."""
        self._reads += 1
        if self._reads == self._fail_on_read:
            raise ConnectionError("simulated: the cluster stopped answering")

    def list_reassignments(self, partitions=None):
        self._read()
        return self._admin.list_reassignments(partitions)

    def snapshot(self, **kw):
        self._read()
        return self._admin.snapshot(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._admin, name)


@pytest.fixture
def admin(sandbox):
    with KafkaClusterAdmin(sandbox.client_config(), timeout_s=20) as a:
        yield a


def test_kip860_race_a_plan_from_the_intermediate_replica_set_is_refused_and_nothing_changes(
        sandbox, admin, unique_topic, tmp_path):
    """The seed's race on 5 brokers: [1,2] moving to [3,4] under a throttle; describe shows the RF-4
    intermediate set; plans that "preserve" that RF are refused, in flight and after completion."""
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2]], megabytes=3)
    tp = TopicPartition(unique_topic, 0)
    backup = apply_throttle(admin, [Move(topic=unique_topic, partition=0, current_replicas=(1, 2),
                                         target_replicas=(3, 4))], 100_000)
    try:
        assert admin.alter_reassignments({tp: [3, 4]}).failed == ()
        intermediate = wait_until(lambda: next((r for r in described(config, unique_topic) if len(r) == 4), None),
                                  "describe to show the intermediate replica set")
        from_describe = plan_of(unique_topic, (0, intermediate, (2, 3, 4, 5)))  # "keeps" RF 4
        kafka_file = plan_of(unique_topic, (0, None, (5, 4, 3, 2)))            # no current replicas at all
        throttles_before = throttles(admin, [unique_topic])
        listing_before = admin.list_reassignments()

        for plan in (from_describe, kafka_file):
            rec = Recording(admin)
            for options in (ExecutionOptions(), ExecutionOptions(allow_concurrent_reassignments=True)):
                # the move in flight is not ours; a planned partition's foreign reassignment is waited for, but a plan
                # from its intermediate replica set (an RF change: KIP-860's race) is refused at once
                refused = run(rec, plan, ExecutionLimits(), options, state_dir=tmp_path, poll_interval_s=0.2)
                assert tp in refused.status.stale and refused.status.foreign == [tp] and not refused.status.ok
            assert rec.sent == []
            assert admin.list_reassignments() == listing_before
            assert throttles(admin, [unique_topic]) == throttles_before

        restore_throttle(admin, backup)  # let the move complete: describe may still show RF 4 for a moment
        wait_until(lambda: not admin.list_reassignments([tp]), "the move to [3, 4] to complete")
        throttles_before = throttles(admin, [unique_topic])
        rec = Recording(admin)
        after = run(rec, from_describe, ExecutionLimits(), ExecutionOptions(), state_dir=tmp_path, poll_interval_s=0.2)
        assert after.status.stale == {tp: (intermediate, (3, 4))}
        after = run(rec, kafka_file, ExecutionLimits(), ExecutionOptions(), state_dir=tmp_path, poll_interval_s=0.2)
        assert "replication factor from 2 to 4" in after.status.failed[tp]
        assert rec.sent == []
        assert replicas(admin, unique_topic) == [(3, 4)] and admin.list_reassignments() == {}
        assert throttles(admin, [unique_topic]) == throttles_before
    finally:
        admin.cancel_reassignments([tp])
        restore_throttle(admin, backup)


def test_stale_moves_are_refused_with_a_diff_the_others_complete_and_foreign_moves_block(
        sandbox, admin, unique_topic, tmp_path):
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2], [2, 3], [3, 4]], megabytes=0.3)
    other = unique_topic + "-foreign"
    make_topic(config, other, [[1, 2]], megabytes=2)
    plan = plan_of(unique_topic, (0, (1, 2), (5, 2)), (1, (2, 3), (2, 5)), (2, (3, 4), (3, 5)))

    # someone moves partition 0 by hand after the plan was made
    assert admin.alter_reassignments({TopicPartition(unique_topic, 0): [1, 3]}).failed == ()
    wait_until(lambda: replicas(admin, unique_topic)[0] == (1, 3), "the manual move")

    # a foreign reassignment in flight blocks the run before anything changes
    foreign = TopicPartition(other, 0)
    foreign_backup = apply_throttle(admin, [Move(topic=other, partition=0, current_replicas=(1, 2),
                                                 target_replicas=(4, 5))], 100_000)
    try:
        assert admin.alter_reassignments({foreign: [4, 5]}).failed == ()
        rec = Recording(admin)
        blocked = run(rec, plan, ExecutionLimits(), ExecutionOptions(), state_dir=tmp_path, poll_interval_s=0.5)
        assert blocked.status.foreign == [foreign] and "allow_concurrent_reassignments=True" in blocked.status.blocked
        assert rec.sent == [] and replicas(admin, unique_topic) == [(1, 3), (2, 3), (3, 4)]

        # allowed: the stale move is refused with its diff, the two others run to completion
        done = run(rec, plan, ExecutionLimits(max_moves=2), ExecutionOptions(allow_concurrent_reassignments=True),
                   state_dir=tmp_path, poll_interval_s=0.5)
        assert done.status.stale == {TopicPartition(unique_topic, 0): ((1, 2), (1, 3))}
        assert done.summary()["stale_partitions"] == {f"{unique_topic}-0": {"expected": [1, 2], "actual": [1, 3]}}
        assert sorted(done.status.done) == [TopicPartition(unique_topic, 1), TopicPartition(unique_topic, 2)]
        assert done.status.complete and not done.status.ok
        assert sorted(rec.sent) == sorted(done.status.done)
        assert replicas(admin, unique_topic) == [(1, 3), (2, 5), (3, 5)]
        assert foreign in admin.list_reassignments()  # never touched
    finally:
        admin.cancel_reassignments([foreign])
        restore_throttle(admin, foreign_backup)


def test_batch_limits_hold_while_the_controller_is_polled(sandbox, admin, unique_topic, tmp_path):
    config = sandbox.client_config()
    assignment = [[1, 2], [2, 3], [3, 4], [4, 5], [5, 1], [1, 3]]
    make_topic(config, unique_topic, assignment, megabytes=1)
    targets = [(3, 4), (4, 5), (5, 1), (1, 2), (2, 3), (4, 2)]
    plan = plan_of(unique_topic, *((i, tuple(a), t) for i, (a, t) in enumerate(zip(assignment, targets, strict=True))))
    limits = ExecutionLimits(max_moves=3, max_moves_per_broker=2)
    seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def poll() -> None:
        with KafkaClusterAdmin(config, timeout_s=20) as watcher:
            while not stop.is_set():
                listing = watcher.list_reassignments()
                per_broker = Counter(b for r in listing.values() for b in {*r.adding_replicas, *r.removing_replicas})
                seen.append((len(listing), max(per_broker.values(), default=0)))
                time.sleep(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        rec = Recording(admin)
        result = run(rec, plan, limits, ExecutionOptions(throttle_bytes_per_sec=150_000), state_dir=tmp_path,
                     poll_interval_s=0.5)
    finally:
        stop.set()
        poller.join(30)
    assert result.status.ok, result.summary()
    assert sorted(rec.sent) == sorted(plan.partitions)  # each exactly once
    assert len(seen) > 20
    assert max(n for n, _ in seen) <= 3 and max(b for _, b in seen) <= 2
    assert max(n for n, _ in seen) >= 2  # the limits, not a serial run, kept it there
    assert replicas(admin, unique_topic) == targets


def _preexisting(admin: KafkaClusterAdmin, topic: str) -> None:
    """Throttle values someone else set before the run: they must come back exactly."""
    admin.set_throttles({1: {LEADER_RATE: "7777777"}, 5: {FOLLOWER_RATE: "5555555"}},
                        {topic: {LEADER_REPLICAS: "2:5"}})
    # a broker applies a committed config write a moment after it is answered (KRaft): read "before" once it has
    wait_until(lambda: (t := throttles(admin, [topic]))["brokers"][1][LEADER_RATE] == "7777777"
               and t["brokers"][5][FOLLOWER_RATE] == "5555555", "the pre-existing throttles to show", timeout=30)


@pytest.mark.parametrize("ending", ["success", "failure", "cancel"])
def test_throttle_configs_are_exactly_as_before_after_the_run(sandbox, admin, unique_topic, tmp_path, ending,
                                                               request):
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2], [2, 3], [4, 5]], megabytes=2)
    _preexisting(admin, unique_topic)
    # "someone else's" broker rates are the test's own: gone after it (the sandbox is shared with other modules)
    request.addfinalizer(lambda: admin.set_throttles({1: {LEADER_RATE: None}, 5: {FOLLOWER_RATE: None}}, {}))
    before = throttles(admin, [unique_topic])
    plan = plan_of(unique_topic, (0, (1, 2), (1, 3)), (1, (2, 3), (2, 1)))
    options = ExecutionOptions(throttle_bytes_per_sec=100_000)
    during: dict = {}

    def spy() -> None:
        wait_until(lambda: admin.list_reassignments(), "a move in flight")
        during.update(throttles(admin, [unique_topic]))

    watcher = threading.Thread(target=spy, daemon=True)
    if ending != "cancel":
        watcher.start()
    if ending == "success":
        result = run(admin, plan, ExecutionLimits(), options, state_dir=tmp_path, poll_interval_s=0.5)
        assert result.status.ok and result.finish["throttles_restored"] == "yes"
    elif ending == "failure":
        with pytest.raises(ConnectionError):
            run(Recording(admin, fail_on_read=4), plan, ExecutionLimits(), options, state_dir=tmp_path,
                poll_interval_s=0.5)
        # the moves go on (a failed run cancels nothing; only the throttles are back, so they may finish at once):
        # they reach their targets without any other run
        wait_until(lambda: replicas(admin, unique_topic) == [(1, 3), (2, 1), (4, 5)] and not admin.list_reassignments(),
                   "the moves the failed run left in flight to finish", timeout=120)
    else:
        started = run(admin, plan, ExecutionLimits(), options, state_dir=tmp_path, poll_interval_s=0.5,
                      wait=False, finish_at_end=False)
        assert started.status.in_flight and (tmp_path / "throttle-backup.json").is_file()
        during.update(throttles(admin, [unique_topic]))
        result = cancel(admin, plan)
        assert sorted(result.cancelled) == sorted(plan.partitions) and result.rf_changed == {}
        assert restore_throttles(admin, tmp_path)
        assert replicas(admin, unique_topic) == [(1, 2), (2, 3), (4, 5)]
    if watcher.is_alive() or ending != "cancel":
        watcher.join(60)
    # while moving: our rate on the brokers involved (1, 2, 3) only, the lists merged with the old entry
    assert during["brokers"][2] == {LEADER_RATE: "100000", FOLLOWER_RATE: "100000"}
    assert during["brokers"][4] == before["brokers"][4] and during["brokers"][5] == before["brokers"][5]
    assert "2:5" in during["topics"][unique_topic][LEADER_REPLICAS]
    assert throttles(admin, [unique_topic]) == before
    assert not (tmp_path / "throttle-backup.json").exists()


def test_a_deadline_stops_new_submissions_and_the_next_run_completes_exactly_the_rest(
        sandbox, admin, unique_topic, tmp_path):
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2], [2, 3], [3, 4], [4, 5]], megabytes=2)
    before = throttles(admin, [unique_topic])
    plan = plan_of(unique_topic, (0, (1, 2), (3, 2)), (1, (2, 3), (4, 3)), (2, (3, 4), (5, 4)), (3, (4, 5), (1, 5)))
    limits = ExecutionLimits(max_moves=1, order="plan")
    options = ExecutionOptions(throttle_bytes_per_sec=100_000)  # the first move lasts ~10 s: past the deadline

    first = Recording(admin)
    one = run(first, plan, limits, options, state_dir=tmp_path, poll_interval_s=0.5,
              deadline=datetime.now(timezone.utc) + timedelta(seconds=3))
    assert one.deadline_reached and not one.status.complete
    assert one.status.in_flight == []  # the move in flight at the deadline finished
    assert len(first.sent) == len(one.status.done) and 1 <= len(first.sent) < 4
    remaining = set(one.status.pending)
    assert remaining == set(plan.partitions) - set(first.sent)
    assert throttles(admin, [unique_topic]) == before

    second = Recording(admin)
    fast = ExecutionOptions(throttle_bytes_per_sec=2_000_000)
    two = run(second, plan, limits, fast, state_dir=tmp_path, poll_interval_s=0.5)
    assert two.status.ok
    assert set(second.sent) == remaining and len(second.sent) == len(remaining)
    assert throttles(admin, [unique_topic]) == before
    assert replicas(admin, unique_topic) == [(3, 2), (4, 3), (5, 4), (1, 5)]


def test_cancel_at_the_deadline_puts_the_move_back_and_leaves_no_throttle(sandbox, admin, unique_topic, tmp_path):
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2], [2, 3]], megabytes=3)
    before = throttles(admin, [unique_topic])
    plan = plan_of(unique_topic, (0, (1, 2), (3, 4)), (1, (2, 3), (4, 5)))
    result = run(admin, plan, ExecutionLimits(max_moves=1, order="plan"), ExecutionOptions(throttle_bytes_per_sec=100_000),
                 state_dir=tmp_path, poll_interval_s=0.5, deadline=datetime.now(timezone.utc) + timedelta(seconds=2),
                 on_deadline="cancel")
    assert result.deadline_reached and result.cancel is not None
    assert result.cancel.cancelled == [TopicPartition(unique_topic, 0)] and result.cancel.rf_changed == {}
    assert sorted(result.status.pending) == sorted(plan.partitions)
    assert replicas(admin, unique_topic) == [(1, 2), (2, 3)] and admin.list_reassignments() == {}
    assert throttles(admin, [unique_topic]) == before


def test_the_disk_guard_reads_each_brokers_free_space_and_holds_a_move_that_would_not_leave_the_reserve(
        sandbox, admin, unique_topic, tmp_path):
    """KIP-827's free space from DescribeLogDirs (Kafka 3.3+), read in the request that reads the sizes; a move
    onto a broker that would keep less than ``disk_reserve`` free is not sent and, nothing else being in flight,
    the run is refused naming the broker. (The sandbox's brokers share one filesystem: the same numbers each.)"""
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2]], megabytes=3)
    dirs = admin.log_dirs([TopicPartition(unique_topic, 0)])
    assert set(dirs.space) == {1, 2, 3, 4, 5}
    space = dirs.space[3]
    assert 0 < space.usable_bytes <= space.total_bytes and len(space.dirs) == 1
    size = max(dirs.sizes[TopicPartition(unique_topic, 0)].values())
    assert size >= 2_000_000
    plan = plan_of(unique_topic, (0, (1, 2), (3, 2)))
    rec = Recording(admin)
    # a reserve that leaves about 1 MB of room on broker 3 (the others write little meanwhile): 3 MB do not fit
    reserve = space.usable_bytes - 1_000_000
    result = run(rec, plan, ExecutionLimits(), ExecutionOptions(disk_reserve=reserve), state_dir=tmp_path,
                 poll_interval_s=0.2)
    assert rec.sent == [] and replicas(admin, unique_topic) == [(1, 2)]
    assert result.status.blocked and result.status.blocked.startswith(
        f"disk guard: 1 move(s) wait for disk space: {unique_topic}-0: needs ")
    assert "on broker 3" in result.status.blocked and "lower disk_reserve" in result.status.blocked
    assert result.summary()["disk_held"] == 1
    ok = run(rec, plan, ExecutionLimits(), ExecutionOptions(disk_reserve="64MiB"), state_dir=tmp_path,
             poll_interval_s=0.2)
    assert ok.status.ok and replicas(admin, unique_topic) == [(3, 2)]
