"""A drain that ends empty (core/maintenance/drain.py and the session's drain rounds): partitions that arrive on the drained
brokers while the plan's moves run are moved off in the same run, within the same limits; bounded; resumable."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession, run
from airflow_kafka_reassign.core.execution.run_state import read_drain_rounds
from airflow_kafka_reassign.core.maintenance.drain import DrainSpec, drain_moves, leftovers, merge, read_drain
from airflow_kafka_reassign.core.records.store import MemoryStore
from airflow_kafka_reassign.core.vocabulary.models import (
    Broker,
    ClusterSnapshot,
    Move,
    PartitionState,
    ReassignmentPlan,
    TopicPartition,
    TopicState,
)
from airflow_kafka_reassign.testing import FakeClusterAdmin

RACKS = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}


def snap(*parts: tuple[str, int, tuple[int, ...]], brokers=RACKS) -> ClusterSnapshot:
    return ClusterSnapshot(brokers=tuple(Broker(id=b, rack=r) for b, r in brokers.items()),
                           partitions=tuple(PartitionState(topic=t, partition=p, replicas=r) for t, p, r in parts))


def test_a_replica_on_a_drained_broker_goes_to_its_own_rack_first_then_the_least_loaded():
    s = snap(("new", 0, (4, 2, 3)), ("old", 0, (1, 5, 6)), ("old", 1, (1, 2, 6)))
    plan, refused = drain_moves(s, DrainSpec(brokers=(4,)))
    assert refused == {}
    (move,) = plan.moves
    assert move.target_replicas == (1, 2, 3)  # broker 1: rack "a" like 4; order kept, leader position kept
    assert move.current_replicas == (4, 2, 3) and plan.partition_counts == {"new": 1}


def test_a_new_rack_is_preferred_to_a_rack_the_partition_already_uses():
    brokers = {1: "a", 2: "b", 3: "c", 4: "d"}
    s = snap(("t", 0, (4, 1)), brokers=brokers)
    plan, _ = drain_moves(s, DrainSpec(brokers=(4,)))
    (move,) = plan.moves
    assert move.target_replicas[0] in (2, 3)  # no broker left in rack "d": a rack the partition lacks, not "a"


def test_a_partition_that_cannot_be_placed_is_named_and_not_half_moved():
    s = snap(("t", 0, (1, 2, 3)), brokers={1: "a", 2: "b", 3: "c"})
    plan, refused = drain_moves(s, DrainSpec(brokers=(3,)))
    assert plan.moves == () and "no broker to take its replica on 3" in refused[TopicPartition("t", 0)]


def test_cordoned_brokers_take_nothing_and_topic_filters_bound_a_partial_drain():
    s = snap(("keep", 0, (4, 2)), ("drain", 0, (4, 2)))
    spec = DrainSpec(brokers=(4,), topic_include=("drain",))
    assert [p.topic for p in leftovers(s, spec)] == ["drain"]
    plan, _ = drain_moves(s, spec, cordoned={1})
    (move,) = plan.moves
    assert 1 not in move.target_replicas and 4 not in move.target_replicas


def test_merge_takes_the_later_round_for_a_partition_of_both():
    a = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(2, 3)),),
                         partition_counts={"t": 1})
    b = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(2, 5)),
                                Move(topic="u", partition=0, current_replicas=(4,), target_replicas=(5,))),
                         partition_counts={"t": 2, "u": 1})
    merged = merge(a, b)
    assert [m.target_replicas for m in merged.moves] == [(2, 5), (5,)] and merged.partition_counts == {"t": 2, "u": 1}


class LivelyCluster(FakeClusterAdmin):
    """A cluster that lives on while the drain runs: a topic is created onto broker 4 at each of the first
    ``arrivals`` completions (the controller's placement ignores a drain)."""

    arrivals = 1
    created = 0

    def complete(self, partitions=None):
        super().complete(partitions)
        if self.created < self.arrivals:
            self.created += 1
            name = f"created-{self.created}"
            self.topics[name] = TopicState(name=name, partition_count=2, replication_factor=2)
            self.topic_configs[name] = {}
            self.replicas[TopicPartition(name, 0)] = (4, 1)
            self.replicas[TopicPartition(name, 1)] = (2, 4)


def lively(arrivals=1) -> LivelyCluster:
    admin = LivelyCluster.build(brokers=RACKS, topics={"orders": [[4, 2], [4, 3], [1, 4]]})
    admin.arrivals = arrivals
    return admin


PLAN = ReassignmentPlan(moves=(
    Move(topic="orders", partition=0, current_replicas=(4, 2), target_replicas=(1, 2)),
    Move(topic="orders", partition=1, current_replicas=(4, 3), target_replicas=(5, 3)),
    Move(topic="orders", partition=2, current_replicas=(1, 4), target_replicas=(1, 6)),
), partition_counts={"orders": 3})


def on(admin: FakeClusterAdmin, broker: int) -> list[TopicPartition]:
    return sorted(tp for tp, r in admin.replicas.items() if broker in r)


def test_partitions_created_during_the_drain_are_drained_in_the_same_run(caplog):
    admin = lively()
    state = MemoryStore()
    result = run(admin, PLAN, ExecutionConfig(max_moves_per_broker=1), state_dir=state, sleep=lambda s: admin.complete(),
                 settle_s=0, drain=DrainSpec(brokers=(4,)))
    assert result.status.ok and result.drain_short is None
    assert on(admin, 4) == [] and all(len(r) == 2 for r in admin.replicas.values())  # RF kept
    assert sorted(map(str, result.drained_later)) == ["created-1-0", "created-1-1"]
    assert "still have a replica on the drained broker(s) [4] once the plan" in caplog.text and "KIP-1066" in caplog.text
    assert result.summary()["drained_later"] == 2
    # the per-broker limit held for the round too: never two moves in flight touching one broker at once
    assert all(len(targets) <= 2 for targets, _ in admin.alter_requests)
    assert len(read_drain_rounds(state)) == 1  # kept on the run state before its moves went out


def test_the_rounds_are_bounded_and_the_shortfall_is_named():
    admin = lively(arrivals=10)
    result = run(admin, PLAN, ExecutionConfig(), state_dir=MemoryStore(), sleep=lambda s: admin.complete(),
                 settle_s=0, drain=DrainSpec(brokers=(4,), max_rounds=2))
    assert result.drain_short and "after 2 drain round(s) (max_rounds=2)" in result.drain_short
    assert "cordon the brokers (Kafka 4.3+, KIP-1066)" in result.drain_short


def test_a_resumed_session_goes_on_with_the_rounds_an_earlier_process_planned():
    admin = lively()
    state = MemoryStore()
    first = ExecutionSession(admin, PLAN, ExecutionConfig(), state_dir=state, settle_s=0, drain=DrainSpec(brokers=(4,)))
    while not first.drained_later:
        first.tick()
        admin.complete()
    later = ExecutionSession.resume(admin, PLAN, ExecutionConfig(), state_dir=state, holder="try 2", settle_s=0,
                                    drain=DrainSpec(brokers=(4,)))  # a retry on another worker: the plan.json only
    assert {m.tp for m in later.plan.moves} == {m.tp for m in first.plan.moves} and later.drain_rounds == 1
    while not later.tick().status.complete:
        admin.complete()
    assert on(admin, 4) == []


def test_a_decommission_plan_directory_says_what_is_drained():
    store = MemoryStore()
    assert read_drain(store) is None
    store.write("drain.json", DrainSpec(brokers=(4, 5)).model_dump_json().encode())
    assert read_drain(store) == DrainSpec(brokers=(4, 5))
    with pytest.raises(ValueError):
        DrainSpec(brokers=())


def test_a_stale_move_whose_partition_left_the_drained_broker_is_dropped_not_failed():
    """A topic deleted and re-created elsewhere mid-drain, seen without topic ids (an adapter or cluster without
    KIP-516's ids): its moves are stale, but its partitions hold no replica on the drained broker, so the drain needs
    nothing more of them. Before: the run ended with 2 stale moves, not ok, and the wait failed on them ("stale:
    replicas are [4, 2], the plan expected [5, 3]", seen on the sandbox). A stale partition still on the drained
    broker is re-planned by the drain round instead."""
    admin = FakeClusterAdmin.build(brokers=RACKS, topics={"orders": [[4, 2], [4, 3]], "again": [[4, 1], [2, 4]],
                                                          "still": [[4, 5]]})
    plan = ReassignmentPlan(moves=(
        Move(topic="orders", partition=0, current_replicas=(4, 2), target_replicas=(1, 2)),
        Move(topic="orders", partition=1, current_replicas=(4, 3), target_replicas=(6, 3)),
        Move(topic="again", partition=0, current_replicas=(4, 1), target_replicas=(6, 1)),
        Move(topic="again", partition=1, current_replicas=(2, 4), target_replicas=(2, 1)),
        Move(topic="still", partition=0, current_replicas=(4, 5), target_replicas=(1, 5)),
    ), partition_counts={"orders": 2, "again": 2, "still": 1})
    session = ExecutionSession(admin, plan, ExecutionConfig(max_moves=1), state_dir=MemoryStore(), settle_s=0,
                               drain=DrainSpec(brokers=(4,)))
    session.tick()  # one move in flight; the others wait for the limit
    admin.delete_topic("again")
    admin.create_topic("again", [[3, 5], [5, 1]])  # placed off the drained broker
    admin.replicas[TopicPartition("still", 0)] = (5, 4)  # moved by someone else, still on broker 4
    admin.topic_ids.clear()  # no ids to tell the re-created topic from the planned one
    for _ in range(20):
        tick = session.tick()
        if tick.over:
            break
        admin.complete()
    status = tick.status
    assert status.ok and status.stale == {}, status.summary()
    assert set(status.gone) == {TopicPartition("again", 0), TopicPartition("again", 1)}
    assert "the drain needs nothing more of it" in status.gone[TopicPartition("again", 0)]
    assert any("2 stale move(s) dropped" in line and "[4]" in line for line in session.events), session.events
    assert on(admin, 4) == [] and session.drained_later == [TopicPartition("still", 0)]
