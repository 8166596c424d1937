"""Bad input fails before any plan, with a ConfigurationError naming the culprit and the fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.synthetic import snapshot_from_assignment
from airflow_kafka_reassign.core.vocabulary.models import Broker, ClusterSnapshot, PartitionState, TopicState
from airflow_kafka_reassign.exceptions import ConfigurationError

THREE = {0: None, 1: None, 2: None}


def plan(snapshot: ClusterSnapshot, **request: object):
    return plan_reassignment(snapshot, PlanRequest(**request))


def test_replicas_on_an_unknown_broker() -> None:
    snapshot = snapshot_from_assignment([0, 1], {"orders": [[0, 1], [1, 0]]})
    snapshot = snapshot.model_copy(update={"brokers": (Broker(id=0), Broker(id=2))})  # 1 is gone
    with pytest.raises(ConfigurationError, match=r"orders-0.*broker\(s\) \[1\].*remove-brokers.*brokers=\[1\]"):
        plan(snapshot)


def test_a_dead_broker_listed_for_removal_is_evacuated() -> None:
    snapshot = snapshot_from_assignment([0, 1, 2], {"orders": [[0, 3], [3, 1], [1, 2]]})
    snapshot = snapshot.model_copy(update={"brokers": tuple(b for b in snapshot.brokers if b.id != 3)})
    result = plan(snapshot, goal="remove-brokers", brokers=[3])
    assert result.after.replicas_on_removed_brokers == 0
    assert {m.partition for m in result.plan.moves} >= {0, 1}
    assert all(3 not in m.target_replicas for m in result.plan.moves)


def test_a_topic_left_out_with_replicas_on_a_removed_broker_is_refused_unless_partial_drain() -> None:
    snapshot = snapshot_from_assignment([0, 1, 2, 3], {"orders": [[0, 3], [3, 1], [1, 2]], "other": [[3, 0], [2, 1]]})
    with pytest.raises(ConfigurationError, match=r"other-0 has a replica on removed broker\(s\) \[3\].*partial_drain=True"):
        plan(snapshot, goal="remove-brokers", brokers=[3], topic_include=["orders"])

    result = plan(snapshot, goal="remove-brokers", brokers=[3], topic_include=["orders"], partial_drain=True)
    assert {m.topic for m in result.plan.moves} == {"orders"}
    assert all(3 not in m.target_replicas for m in result.plan.moves)
    assert {m.partition for m in result.plan.moves} >= {0, 1}
    assert result.after.replicas_on_removed_brokers == 1  # other-0 stays on broker 3 for a later step
    assert any("partial drain: 1 replica(s) of 1 topic(s)" in w and "other" in w for w in result.warnings)


def test_removing_a_broker_nobody_knows() -> None:
    snapshot = snapshot_from_assignment(THREE, {"orders": [[0, 1]]})
    with pytest.raises(ConfigurationError, match=r"cannot remove broker\(s\) \[9\]"):
        plan(snapshot, goal="remove-brokers", brokers=[9])


def test_rf_larger_than_the_brokers_left() -> None:
    snapshot = snapshot_from_assignment(THREE, {"orders": [[0, 1, 2], [1, 2, 0]]})
    with pytest.raises(ConfigurationError, match=r"topic 'orders' has replication factor 3.*only 2 broker\(s\).*rf_changes"):
        plan(snapshot, goal="remove-brokers", brokers=[2])


def test_rf_change_larger_than_the_brokers() -> None:
    snapshot = snapshot_from_assignment(THREE, {"orders": [[0, 1]]})
    with pytest.raises(ConfigurationError, match=r"rf_changes\['orders'\] = 4 but only 3 broker"):
        plan(snapshot, rf_changes={"orders": 4})


def test_racks_on_some_brokers_only() -> None:
    snapshot = snapshot_from_assignment({0: "a", 1: "b", 2: None}, {"orders": [[0, 1]]})
    with pytest.raises(ConfigurationError, match=r"brokers \[2\] have no broker.rack.*rack_aware=False"):
        plan(snapshot)
    assert plan(snapshot, rack_aware=False).after.rack_violations == 0


def test_removing_every_broker() -> None:
    snapshot = snapshot_from_assignment([0, 1], {"orders": [[0, 1]]})
    with pytest.raises(ConfigurationError, match="would leave no broker"):
        plan(snapshot, goal="remove-brokers", brokers=[0, 1])


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"goal": "remove-brokers"}, "needs brokers="),
        ({"goal": "add-brokers", "brokers": [7]}, r"cannot add broker\(s\) \[7\].*start them"),
        ({"goal": "add-brokers"}, "found no new broker"),
        ({"goal": "rebalance", "brokers": [1]}, "only applies to goal add-brokers or remove-brokers"),
        ({"rf_changes": {"nope": 2}}, "topic 'nope', which is not in the snapshot"),
        ({"rf_changes": {"orders": 2}, "topic_exclude": ["orders"]}, "topic_include/topic_exclude leave it out"),
        ({"heal_targets": {"orders-9": 3}}, "partition orders-9, which is not in the snapshot"),
        ({"heal_targets": {"orders-0": 1}}, "heal only adds replicas"),
    ],
)
def test_request_that_does_not_fit_the_snapshot(request_: dict, message: str) -> None:
    snapshot = snapshot_from_assignment(THREE, {"orders": [[0, 1], [1, 2], [2, 0]]})
    with pytest.raises(ConfigurationError, match=message):
        plan(snapshot, **request_)


@pytest.mark.parametrize(
    "request_",
    [
        {"topic_include": ["("]},
        {"rf_changes": {"orders": 0}},
        {"heal_targets": {"orders": 3}},
        {"brokers": [1, 1], "goal": "remove-brokers"},
        {"goal": "shrink"},
        {"max_leader_spread": 0},
    ],
)
def test_invalid_request_fails_in_its_validator(request_: dict) -> None:
    with pytest.raises(ValidationError):
        PlanRequest(**request_)


def test_excluded_topic_on_a_removed_broker() -> None:
    snapshot = snapshot_from_assignment(THREE, {"orders": [[0, 2]], "audit": [[2, 1]]})
    with pytest.raises(ConfigurationError, match=r"audit-0 has a replica on removed broker\(s\) \[2\].*include the topic"):
        plan(snapshot, goal="remove-brokers", brokers=[2], topic_exclude=["audit"])


def test_in_flight_reassignment_onto_a_removed_broker() -> None:
    part = PartitionState(topic="orders", partition=0, replicas=(0, 2, 1), adding_replicas=(2,), removing_replicas=(1,))
    snapshot = ClusterSnapshot(
        brokers=(Broker(id=0), Broker(id=1), Broker(id=2)),
        topics=(TopicState(name="orders", partition_count=1, replication_factor=2),),
        partitions=(part,),
    )
    with pytest.raises(ConfigurationError, match=r"orders-0 is being reassigned.*\[0, 2\].*include_in_flight"):
        plan(snapshot, goal="remove-brokers", brokers=[2])


def test_errors_come_before_any_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_kafka_reassign.core.planner import pipeline

    called = []
    monkeypatch.setattr(pipeline, "plan_topics", lambda *a, **k: called.append(1))
    snapshot = snapshot_from_assignment([0, 1], {"orders": [[0, 1]]})
    with pytest.raises(ConfigurationError):
        plan(snapshot, goal="remove-brokers", brokers=[0, 1])
    assert not called
