"""A plan never targets a cordoned broker, whatever the goal (PlanRequest.cordoned, KIP-1066): cordoned brokers are
left out of the balance, their partitions left as they are unless the plan must change them; the same through the
staged (Spark) path."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.staged import plan_staged
from airflow_kafka_reassign.core.planner.synthetic import apply_plan, snapshot_from_assignment, synthetic_snapshot
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.exceptions import ConfigurationError


def adding(result) -> set[int]:
    return {b for m in result.plan.moves for b in m.adding_replicas}


@pytest.mark.parametrize("planner", [plan_reassignment, plan_staged])
def test_a_rebalance_sends_nothing_to_a_cordoned_broker_and_leaves_its_partitions(planner):
    snapshot = synthetic_snapshot(brokers=6, new_brokers=2, racks=3, topics=12, seed=7)  # 6 and 7 are empty
    free = planner(snapshot, PlanRequest(goal="rebalance"))
    assert {6, 7} <= adding(free)  # without a cordon the empty brokers take their share
    cordoned = planner(snapshot, PlanRequest(goal="rebalance", cordoned=(3, 7)))
    assert not adding(cordoned) & {3, 7} and 6 in adding(cordoned)
    on_3 = {p.tp for p in snapshot.partitions if 3 in p.replicas}
    assert not on_3 & {m.tp for m in cordoned.plan.moves}  # a cordon does not evict: partitions on 3 left alone
    assert any("cordoned broker(s) [3, 7] are left as they are" in w for w in cordoned.warnings), cordoned.warnings


@pytest.mark.parametrize("planner", [plan_reassignment, plan_staged])
def test_a_drain_goes_around_another_cordoned_broker(planner):
    snapshot = synthetic_snapshot(brokers=6, racks=3, topics=10, seed=2)
    result = planner(snapshot, PlanRequest(goal="remove-brokers", brokers=(5,), cordoned=(4,)))
    assert 4 not in adding(result)
    after = apply_plan(snapshot, result.plan)
    assert not any(5 in p.replicas for p in after.partitions)
    # a partition on both the drained broker and the cordoned one must change: its replica on 4 moves too
    both = [p.tp for p in snapshot.partitions if {4, 5} <= set(p.replicas)]
    assert both and not any(4 in p.replicas for p in after.partitions if p.tp in both)


def test_a_heal_places_nothing_on_a_cordoned_broker():
    snapshot = snapshot_from_assignment({1: "a", 2: "b", 3: "c", 4: "a"}, {"t": [[1, 2, 3], [1, 2], [2, 3, 4]]})
    result = plan_reassignment(snapshot, PlanRequest(goal="heal", heal_targets={"t-1": 3}, cordoned=(3,)))
    (move,) = result.plan.moves
    assert move.tp == TopicPartition("t", 1) and len(move.target_replicas) == 3 and 3 not in move.target_replicas


def test_adding_a_cordoned_broker_or_cordoning_every_broker_is_refused():
    snapshot = synthetic_snapshot(brokers=4, new_brokers=1, racks=1, topics=3, seed=1)
    with pytest.raises(ConfigurationError, match=r"broker\(s\) \[4\] being added are cordoned.*uncordon them first"):
        plan_reassignment(snapshot, PlanRequest(goal="add-brokers", brokers=(4,), cordoned=(4,)))
    with pytest.raises(ConfigurationError, match="every broker that would hold replicas is cordoned"):
        plan_reassignment(snapshot, PlanRequest(goal="rebalance", cordoned=(0, 1, 2, 3, 4)))


def test_a_request_without_cordons_keeps_its_bytes():
    assert "cordoned" not in PlanRequest(goal="rebalance").model_dump_json()
    assert PlanRequest(cordoned=(4, 2, 4)).cordoned == (2, 4)
