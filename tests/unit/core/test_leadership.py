"""core.maintenance.leader_evacuation: leadership off brokers or racks by reordering replicas and electing, and back."""

from __future__ import annotations

import json
import re

import pytest

from airflow_kafka_reassign.core.maintenance.leader_evacuation import (
    RECORD_FILE,
    LeadershipRecord,
    apply_leadership,
    brokers_to_evacuate,
    evacuation_plan,
    read_record,
    restore_plan,
    save_record,
)
from airflow_kafka_reassign.core.records.store import MemoryStore
from airflow_kafka_reassign.core.vocabulary.models import Broker, ClusterSnapshot, PartitionState, TopicPartition, TopicState
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.testing import FakeClusterAdmin

RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2", 6: "r3"}


def snap(*parts: PartitionState) -> ClusterSnapshot:
    topics = sorted({p.topic for p in parts})
    return ClusterSnapshot(
        cluster_id="c", brokers=tuple(Broker(id=b, rack=r) for b, r in RACKS.items()),
        topics=tuple(TopicState(name=t, partition_count=sum(p.topic == t for p in parts), replication_factor=3)
                     for t in topics),
        partitions=parts)


def part(partition, replicas, isr=None, leader=None, **kw):
    isr = replicas if isr is None else isr
    return PartitionState(topic="t", partition=partition, replicas=replicas, isr=isr,
                          leader=isr[0] if leader is None else leader, **kw)


@pytest.mark.parametrize("brokers, racks, expected", [
    ((4,), (), (4,)),
    ((), ("r1",), (1, 4)),
    ((6,), ("r1",), (1, 4, 6)),
])
def test_brokers_and_racks_name_the_brokers_to_evacuate(brokers, racks, expected):
    assert brokers_to_evacuate(snap(), brokers, racks) == expected


@pytest.mark.parametrize("brokers, racks, words", [
    ((9,), (), "broker(s) [9] are not in the cluster"),
    ((), ("r9",), "rack(s) ['r9'] are not in the cluster"),
    ((), (), "name the brokers or racks"),
    ((), ("r1", "r2", "r3"), "leadership has nowhere to go"),
])
def test_bad_brokers_or_racks_are_refused_by_name(brokers, racks, words):
    with pytest.raises(ConfigurationError, match=re.escape(words)):
        brokers_to_evacuate(snap(), brokers, racks)


def test_each_case_of_an_evacuation():
    plan = evacuation_plan(snap(
        part(0, (1, 2, 3)),                             # preferred on rack r1: an in-sync replica elsewhere leads
        part(1, (2, 1, 3), leader=1),                   # preferred fine, leader on r1: an election only
        part(2, (4, 1, 5), isr=(4, 1)),                 # nothing in sync outside r1: refused, never forced
        part(3, (3, 2, 5)),                             # nothing on r1 leads: untouched
        part(4, (1, 2, 3, 5), isr=(1, 2, 3), adding_replicas=(5,)),  # in flight: left alone
        part(5, (2, 1, 3), isr=(1, 3), leader=1),       # preferred 2 out of sync: 3 becomes preferred
    ), brokers=(1, 4))
    changes = {c.partition: (c.before, c.after) for c in plan.changes}
    assert changes[0][1][0] in (2, 3) and sorted(changes[0][1]) == [1, 2, 3]
    assert changes[1] == ((2, 1, 3), (2, 1, 3))
    assert changes[5] == ((2, 1, 3), (3, 2, 1))
    assert set(changes) == {0, 1, 5}
    assert set(plan.refused) == {"t-2", "t-4"}
    assert "no in-sync replica outside brokers [1, 4]" in plan.refused["t-2"] and "[5] not in sync" in plan.refused["t-2"]
    assert "reassignment is in flight" in plan.refused["t-4"]
    assert plan.reorders == 2


def test_new_preferred_leaders_spread_over_the_brokers_that_stay():
    parts = [part(i, (1, 2, 3)) for i in range(6)]
    plan = evacuation_plan(snap(*parts), brokers=(1,))
    firsts = [c.after[0] for c in plan.changes]
    assert sorted(firsts) == [2, 2, 2, 3, 3, 3]


def fake_cluster():
    return FakeClusterAdmin.build(brokers=RACKS, auto_complete=True, topics={
        "orders": [[1, 2, 3], [4, 5, 6], [2, 1, 3], [1, 5, 6]],
        "clicks": [[4, 2], [3, 4]],
    })


def leaders(fake):
    return {tp: p.leader for tp, p in fake.snapshot().partition_map().items()}


def test_evacuate_then_restore_moves_no_data_and_ends_where_it_began():
    fake = fake_cluster()
    before = dict(fake.replicas)
    store = MemoryStore()
    snapshot = fake.snapshot()
    away = brokers_to_evacuate(snapshot, racks=("r1",))
    plan = evacuation_plan(snapshot, away)
    record = save_record(store, plan, cluster_id="fake")
    result = apply_leadership(fake, plan, batch_size=2, sleep=fake.sleep)
    assert result.ok, result.problems()
    assert result.reordered == 4 and not any(leader in away for leader in leaders(fake).values())
    # only reorders went out: every request kept each partition's replica set
    for targets, allow_rf in fake.alter_requests:
        assert not allow_rf and all(set(r) == set(before[tp]) for tp, r in targets.items())
    assert {(e.topic, e.partition): e.replicas for e in record.partitions} == {
        (tp.topic, tp.partition): r for tp, r in before.items() if r[0] in away}

    back = restore_plan(fake.snapshot(), read_record(store)[0])
    result = apply_leadership(fake, back, sleep=fake.sleep)
    assert result.ok, result.problems()
    assert fake.replicas == before


def test_a_retried_evacuation_keeps_the_original_order_in_the_record():
    fake = fake_cluster()
    store = MemoryStore()
    first = evacuation_plan(fake.snapshot(), (1,))
    save_record(store, first, cluster_id="fake")
    apply_leadership(fake, first, sleep=fake.sleep)
    again = evacuation_plan(fake.snapshot(), (1,))  # the retry reads the evacuated order back
    assert not again.changes
    record = save_record(store, again, cluster_id="fake")
    assert {e.partition: e.replicas for e in record.partitions if e.topic == "orders"} == {0: (1, 2, 3), 3: (1, 5, 6)}


def test_a_record_of_other_brokers_is_not_overwritten():
    fake = fake_cluster()
    store = MemoryStore()
    save_record(store, evacuation_plan(fake.snapshot(), (1,)), cluster_id="fake")
    with pytest.raises(ConfigurationError, match="restore that one first"):
        save_record(store, evacuation_plan(fake.snapshot(), (2,)), cluster_id="fake")


def test_restore_leaves_a_partition_someone_moved_since_and_says_so():
    fake = fake_cluster()
    store = MemoryStore()
    plan = evacuation_plan(fake.snapshot(), (1,))
    save_record(store, plan, cluster_id="fake")
    apply_leadership(fake, plan, sleep=fake.sleep)
    fake.alter_reassignments({TopicPartition("orders", 0): (2, 3, 6)})  # a later move replaced broker 1
    back = restore_plan(fake.snapshot(), read_record(store)[0])
    assert "stale: its replicas are [2, 3, 6] now, the record kept [1, 2, 3]" in back.refused["orders-0"]
    result = apply_leadership(fake, back, sleep=fake.sleep)
    assert fake.replicas[TopicPartition("orders", 0)] == (2, 3, 6)
    assert fake.replicas[TopicPartition("orders", 3)] == (1, 5, 6)
    assert not result.ok and "1 refused: orders-0 (stale" in result.problems()


def test_a_partition_that_changed_before_its_batch_is_planned_again():
    fake = fake_cluster()
    plan = evacuation_plan(fake.snapshot(), (1,))
    fake.down.add(2)  # broker 2 drops out of every ISR after the plan
    result = apply_leadership(fake, plan, sleep=fake.sleep)
    assert result.ok, result.problems()
    assert fake.replicas[TopicPartition("orders", 0)][0] == 3  # 2 was the pick; no longer in sync


def test_elections_the_cluster_refuses_are_reported_and_retried_until_the_deadline():
    fake = fake_cluster()
    calls = []

    def refuse(tps):
        from airflow_kafka_reassign.core.vocabulary.ports import PartitionResult
        calls.append(sorted(tps))
        return tuple(PartitionResult(topic=tp.topic, partition=tp.partition, error_code="PREFERRED_LEADER_NOT_AVAILABLE",
                                     error="not in sync") for tp in tps)

    fake.elect_preferred_leaders = refuse
    plan = evacuation_plan(fake.snapshot(), (1,))
    result = apply_leadership(fake, plan, timeout_s=5, poll_s=1, sleep=fake.sleep, clock=lambda: fake.now)
    assert len(calls) >= 5 and set(result.failed) == {"orders-0", "orders-3"}
    assert "election failed: PREFERRED_LEADER_NOT_AVAILABLE" in result.problems()


def test_a_record_that_is_not_one_is_refused_with_the_fix():
    store = MemoryStore()
    store.write(RECORD_FILE, b"{}")
    with pytest.raises(ConfigurationError, match="not a leadership record"):
        read_record(store)
    record = LeadershipRecord(brokers=(1,), created_at="2026-11-24T00:00:00+00:00")
    store.write(RECORD_FILE, json.dumps(record.model_dump(mode="json")).encode())
    assert read_record(store)[0] == record


def test_topics_narrow_the_evacuation_and_a_bad_pattern_is_refused():
    fake = fake_cluster()
    plan = evacuation_plan(fake.snapshot(), (4,), topics=["click.*"])
    assert {c.topic for c in plan.changes} == {"clicks"}
    with pytest.raises(ConfigurationError, match=r"topics: '\(' is not a regular expression"):
        evacuation_plan(fake.snapshot(), (4,), topics=["("])


def test_the_restore_waits_for_a_returning_broker_to_rejoin_the_isr_then_puts_its_order_back():
    """The rack is back but broker 1 is still catching up (out of every ISR) when the restore starts: its reorders
    wait, within the timeout, instead of being refused as changed; then every order is as before the evacuation."""
    fake = fake_cluster()
    before = dict(fake.replicas)
    store = MemoryStore()
    plan = evacuation_plan(fake.snapshot(), (1,))
    save_record(store, plan, cluster_id="fake")
    apply_leadership(fake, plan, sleep=fake.sleep)
    fake.down.add(1)  # restarted: registered again, not yet back in sync
    back = restore_plan(fake.snapshot(), read_record(store)[0])
    assert not back.refused and back.changes
    polls = []

    def sleep(s):
        polls.append(s)
        fake.sleep(s)
        if len(polls) == 3:
            fake.down.discard(1)  # caught up after three polls

    result = apply_leadership(fake, back, timeout_s=60, poll_s=1, sleep=sleep, clock=lambda: fake.now)
    assert result.ok, result.problems()
    assert fake.replicas == before and len(polls) >= 3


def test_a_broker_that_never_rejoins_is_named_when_the_restore_times_out():
    fake = fake_cluster()
    store = MemoryStore()
    plan = evacuation_plan(fake.snapshot(), (1,))
    save_record(store, plan, cluster_id="fake")
    apply_leadership(fake, plan, sleep=fake.sleep)
    fake.down.add(1)
    back = restore_plan(fake.snapshot(), read_record(store)[0])
    result = apply_leadership(fake, back, timeout_s=5, poll_s=1, sleep=fake.sleep, clock=lambda: fake.now)
    assert not result.ok
    assert "broker 1 is not back in the ISR" in result.problems()
