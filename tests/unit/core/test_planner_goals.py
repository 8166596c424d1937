"""Goals and options of the planner: determinism, RF changes, heal, in-flight reassignments,
internal topics, topic patterns, replica sizes, metrics."""

from __future__ import annotations

import random

from airflow_kafka_reassign.core.planner import PlanRequest, compute_metrics, plan_reassignment
from airflow_kafka_reassign.core.planner.synthetic import apply_plan, snapshot_from_assignment, synthetic_snapshot
from airflow_kafka_reassign.core.vocabulary.models import Broker, ClusterSnapshot, PartitionState, TopicPartition, TopicState


def racks_of(snapshot: ClusterSnapshot) -> dict[int, str | None]:
    return {b.id: b.rack for b in snapshot.brokers}


def test_same_input_same_plan_whatever_the_order() -> None:
    snapshot = synthetic_snapshot(brokers=6, new_brokers=2, racks=3, topics=25, seed=5)
    request = PlanRequest(goal="add-brokers")
    first = plan_reassignment(snapshot, request)
    shuffled = list(snapshot.partitions)
    random.Random(1).shuffle(shuffled)
    again = plan_reassignment(
        snapshot.model_copy(update={"partitions": tuple(shuffled), "brokers": tuple(reversed(snapshot.brokers))}),
        request,
    )
    assert first.plan.model_dump_json() == again.plan.model_dump_json()
    assert first.model_dump(exclude={"request"}) == again.model_dump(exclude={"request"})


def test_balanced_cluster_gives_an_empty_plan() -> None:
    snapshot = snapshot_from_assignment([0, 1, 2], {"orders": [[0, 1], [1, 2], [2, 0]]})
    result = plan_reassignment(snapshot)
    assert len(result.plan) == 0
    assert result.replica_moves == result.lower_bound == result.leader_changes == 0
    assert result.moves_ratio == 1.0


def test_rf_change_only_for_the_requested_topic() -> None:
    snapshot = synthetic_snapshot(brokers=6, racks=3, topics=12, rf=(2,), seed=3)
    topic = snapshot.partitions[0].topic
    result = plan_reassignment(snapshot, PlanRequest(rf_changes={topic: 3}))
    after = apply_plan(snapshot, result.plan)
    for p in after.partitions:
        assert len(p.replicas) == (3 if p.topic == topic else 2)
    changed = {m.tp for m in result.plan.moves if m.allow_rf_change}
    assert changed == {p.tp for p in snapshot.partitions if p.topic == topic}
    assert all(m.changes_rf == m.allow_rf_change for m in result.plan.moves)
    assert result.after.rf_changes == len(changed) and result.after.rack_violations == 0


def test_rf_decrease_drops_replicas_without_moves() -> None:
    snapshot = snapshot_from_assignment([0, 1, 2], {"orders": [[0, 1, 2], [1, 2, 0], [2, 0, 1]]})
    result = plan_reassignment(snapshot, PlanRequest(rf_changes={"orders": 2}))
    assert result.replica_moves == 0 and result.leader_changes == 0
    assert all(len(m.target_replicas) == 2 and m.allow_rf_change for m in result.plan.moves)
    assert result.after.replica_max_min == 0


def under_replicated() -> ClusterSnapshot:
    """orders has RF 3 but partition 2 was created with 2 replicas (KIP-409)."""
    snapshot = snapshot_from_assignment(
        {0: "a", 1: "b", 2: "c", 3: "a"}, {"orders": [[0, 1, 2], [1, 2, 3], [2, 3]], "other": [[0, 1], [3, 2]]}
    )
    topics = tuple(t.model_copy(update={"replication_factor": 3}) if t.name == "orders" else t for t in snapshot.topics)
    return snapshot.model_copy(update={"topics": topics})


def test_heal_restores_the_listed_partitions_only() -> None:
    snapshot = under_replicated()
    result = plan_reassignment(snapshot, PlanRequest(goal="heal", heal_targets={"orders-2": 3}))
    assert [str(m.tp) for m in result.plan.moves] == ["orders-2"]
    move = result.plan.moves[0]
    assert move.allow_rf_change and move.current_replicas == (2, 3)
    assert len(move.target_replicas) == 3 and move.target_replicas[:2] == (2, 3)  # leader kept
    assert {racks_of(snapshot)[b] for b in move.target_replicas} == {"a", "b", "c"}
    assert result.replica_moves == result.lower_bound == 1


def test_heal_without_targets_uses_the_topics_rf() -> None:
    snapshot = under_replicated()
    result = plan_reassignment(snapshot, PlanRequest(goal="heal"))
    assert [str(m.tp) for m in result.plan.moves] == ["orders-2"]
    assert any("no heal_targets given" in w for w in result.warnings)


def test_in_flight_reassignments_are_left_alone_and_reported() -> None:
    snapshot = synthetic_snapshot(brokers=6, new_brokers=1, topics=10, rf=(3,), in_flight=3, seed=8)
    in_flight = {p.tp for p in snapshot.partitions if p.reassigning}
    result = plan_reassignment(snapshot, PlanRequest(goal="add-brokers"))
    assert set(result.excluded_in_flight) == in_flight
    assert not in_flight & {m.tp for m in result.plan.moves}
    # their target replicas count as the brokers' load (KIP-860's race: never the intermediate set)
    assert result.before.replicas == sum(len(p.target_replicas) for p in snapshot.partitions)


def test_in_flight_planned_from_target_replicas_when_asked() -> None:
    part = PartitionState(
        topic="orders", partition=0, replicas=(0, 1, 3, 2), adding_replicas=(3,), removing_replicas=(2,)
    )
    snapshot = ClusterSnapshot(
        brokers=tuple(Broker(id=b) for b in range(4)),
        topics=(TopicState(name="orders", partition_count=1, replication_factor=3),),
        partitions=(part,),
    )
    result = plan_reassignment(snapshot, PlanRequest(goal="remove-brokers", brokers=(3,), include_in_flight=True))
    (move,) = result.plan.moves
    assert move.current_replicas == (0, 1, 3)  # the target, not (0, 1, 3, 2)
    assert move.target_replicas == (0, 1, 2) and not move.allow_rf_change


def test_internal_topics_excluded_unless_asked() -> None:
    snapshot = synthetic_snapshot(brokers=4, new_brokers=1, topics=6, internal_topic=True, seed=2)
    plain = plan_reassignment(snapshot, PlanRequest(goal="add-brokers"))
    assert not any(m.topic == "__consumer_offsets" for m in plain.plan.moves)
    assert plain.after.worst_topic != "__consumer_offsets"
    both = plan_reassignment(snapshot, PlanRequest(goal="add-brokers", include_internal=True))
    assert any(m.topic == "__consumer_offsets" for m in both.plan.moves)


def test_internal_topic_replicas_leave_a_removed_broker() -> None:
    snapshot = synthetic_snapshot(brokers=4, topics=6, internal_topic=True, seed=2)
    result = plan_reassignment(snapshot, PlanRequest(goal="remove-brokers", brokers=(3,)))
    after = apply_plan(snapshot, result.plan)
    assert not any(3 in p.replicas for p in after.partitions)
    assert any("internal topic(s) ['__consumer_offsets']" in w for w in result.warnings)
    moved_internal = [m for m in result.plan.moves if m.topic == "__consumer_offsets"]
    assert moved_internal and all(3 in m.current_replicas for m in moved_internal)


def test_topic_patterns() -> None:
    snapshot = snapshot_from_assignment(
        [0, 1, 2], {"orders": [[0, 1]] * 3, "orders-dlq": [[0, 1]] * 3, "audit": [[0, 1]] * 3}
    )
    result = plan_reassignment(snapshot, PlanRequest(topic_include=["orders.*"], topic_exclude=[".*-dlq"]))
    assert {m.topic for m in result.plan.moves} == {"orders"}
    assert result.after.worst_topic in (None, "orders")


def test_sizes_prefer_small_partitions_and_report_bytes() -> None:
    sizes = {"t": [10, 10_000, 10, 10_000, 10, 10_000]}
    snapshot = snapshot_from_assignment([0, 1, 2], {"t": [[0, 1]] * 6}, sizes=sizes)
    plain = plan_reassignment(snapshot, PlanRequest())
    small = plan_reassignment(snapshot, PlanRequest(use_sizes=True))
    # 12 replicas over 3 brokers: broker 2 takes one replica of 4 different partitions; only
    # 3 partitions are small, so the least is 3 * 10 + 10_000 bytes
    assert small.replica_moves == plain.replica_moves == 4
    assert small.bytes_to_move == 3 * 10 + 10_000
    assert plain.bytes_to_move is not None and small.bytes_to_move < plain.bytes_to_move
    no_sizes = plan_reassignment(snapshot_from_assignment([0, 1, 2], {"t": [[0, 1]] * 6}))
    assert no_sizes.bytes_to_move is None


def test_size_metrics() -> None:
    snapshot = snapshot_from_assignment([0, 1], {"t": [[0, 1], [1, 0]]}, sizes={"t": [5, 7]})
    m = compute_metrics(snapshot)
    assert m.bytes_per_broker == {0: 12, 1: 12} and m.bytes_max_min == 0


def test_compute_metrics_with_a_plan_matches_the_result() -> None:
    snapshot = synthetic_snapshot(brokers=5, new_brokers=1, racks=3, topics=10, seed=4)
    result = plan_reassignment(snapshot, PlanRequest(goal="add-brokers"))
    before = compute_metrics(snapshot)
    after = compute_metrics(snapshot, result.plan)
    assert after.replicas_per_broker == result.after.replicas_per_broker
    assert after.leaders_per_broker == result.after.leaders_per_broker
    assert after.replica_max_min == result.after.replica_max_min
    assert before.replica_max_min == result.before.replica_max_min
    assert after.summary()["replica_max_min"] == after.replica_max_min


def test_compute_metrics_of_a_decommission() -> None:
    snapshot = snapshot_from_assignment([0, 1, 2], {"t": [[0, 2], [1, 2]]})
    m = compute_metrics(snapshot, removed=[2])
    assert m.brokers == 2 and m.replicas_on_removed_brokers == 2
    assert m.replicas_per_broker == {0: 1, 1: 1}


def test_result_summary_is_small_json() -> None:
    snapshot = synthetic_snapshot(brokers=4, new_brokers=1, topics=5, seed=9)
    result = plan_reassignment(snapshot, PlanRequest(goal="add-brokers"))
    summary = result.summary()
    assert summary["replica_moves"] == result.replica_moves
    assert "replicas_per_broker" not in summary["after"]
    import json

    assert len(json.dumps(summary)) < 2000


def test_leader_only_moves_cost_no_replica_moves() -> None:
    snapshot = snapshot_from_assignment([0, 1], {"t": [[0, 1]] * 8})
    result = plan_reassignment(snapshot)
    assert result.replica_moves == 0
    assert result.leader_changes == result.leader_changes_lower_bound == 3
    assert all(set(m.target_replicas) == set(m.current_replicas) for m in result.plan.moves)
    assert result.after.leader_max_min <= 2


def test_moves_are_valid_models_and_round_trip_through_kafka_json() -> None:
    snapshot = synthetic_snapshot(brokers=6, new_brokers=2, racks=3, topics=8, seed=6)
    result = plan_reassignment(snapshot, PlanRequest(goal="add-brokers"))
    current = {p.tp: p.target_replicas for p in snapshot.partitions}
    from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan

    again = ReassignmentPlan.from_kafka_json(result.plan.to_kafka_json(), current)
    assert [m.target_replicas for m in again.moves] == [m.target_replicas for m in result.plan.moves]
    assert isinstance(result.excluded_in_flight, tuple)
    assert all(isinstance(tp, TopicPartition) for tp in result.plan.partitions)
