from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from airflow_kafka_reassign.core.vocabulary.models import (
    Broker,
    ClusterSnapshot,
    Move,
    PartitionState,
    ReassignmentPlan,
    TopicPartition,
    TopicState,
)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_replicas": (1, 2, 2)}, "partition orders-3: target_replicas [1, 2, 2] lists broker 2 twice"),
        ({"target_replicas": ()}, "partition orders-3: target_replicas is empty"),
        ({"target_replicas": (1, -2)}, "partition orders-3: target_replicas [1, -2] has negative broker id -2"),
        ({"target_replicas": (1, 2), "current_replicas": (3, 3)}, "current_replicas [3, 3] lists broker 3 twice"),
        (
            {"target_replicas": (1, 2), "current_replicas": (1, 2, 3)},
            "partition orders-3: the move changes the replication factor from 3 to 2",
        ),
    ],
)
def test_move_rejects_bad_replica_lists_naming_the_partition(kwargs, message):
    with pytest.raises(ValidationError) as e:
        Move(topic="orders", partition=3, **kwargs)
    assert message in str(e.value)


def test_move_derives_adding_and_removing_replicas():
    m = Move(topic="t", partition=0, current_replicas=(1, 2, 3), target_replicas=(4, 2, 5))
    assert m.adding_replicas == (4, 5)
    assert m.removing_replicas == (1, 3)
    assert m.replica_moves == 2
    assert m.leader_changes
    assert not m.changes_rf


def test_move_allows_an_explicit_rf_change():
    m = Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(1, 2, 3), allow_rf_change=True)
    assert m.changes_rf and m.adding_replicas == (3,)


def test_models_are_frozen():
    m = Move(topic="t", partition=0, target_replicas=(1,))
    with pytest.raises(ValidationError):
        m.topic = "other"  # type: ignore[misc]


def test_partition_state_undoes_the_intermediate_replica_set():
    # KIP-860's race: [1,2,3] moving to [4,5,6] is described as [1..6]
    p = PartitionState(
        topic="tp", partition=0, replicas=(1, 2, 3, 4, 5, 6),
        adding_replicas=(4, 5, 6), removing_replicas=(1, 2, 3), leader=1, isr=(1, 2, 3),
    )
    assert p.reassigning
    assert p.target_replicas == (4, 5, 6)
    assert p.original_replicas == (1, 2, 3)
    assert p.replication_factor == 3


def test_partition_state_rejects_adding_replicas_outside_replicas():
    with pytest.raises(ValidationError, match=r"partition tp-0: adding_replicas \[7\] names broker\(s\) \[7\]"):
        PartitionState(topic="tp", partition=0, replicas=(1, 2), adding_replicas=(7,))


def test_partition_state_maps_no_leader_to_none():
    assert PartitionState(topic="t", partition=0, replicas=(1,), leader=-1).leader is None


def test_snapshot_rejects_a_partition_listed_twice():
    p = PartitionState(topic="t", partition=0, replicas=(1,))
    with pytest.raises(ValidationError, match="partition t-0 is listed twice"):
        ClusterSnapshot(
            brokers=(Broker(id=1),),
            topics=(TopicState(name="t", partition_count=1, replication_factor=1),),
            partitions=(p, p),
        )


def test_snapshot_rejects_duplicate_brokers():
    with pytest.raises(ValidationError, match="broker 1 is listed twice"):
        ClusterSnapshot(brokers=(Broker(id=1), Broker(id=1, rack="a")))


def test_topic_state_flags():
    t = TopicState(name="__consumer_offsets", internal=True, partition_count=50, replication_factor=3,
                   configs={"cleanup.policy": "compact", "min.insync.replicas": "2"})
    assert t.is_compacted and t.is_coordinator_topic and t.min_insync_replicas == 2
    assert TopicState(name="__share_group_state", partition_count=1, replication_factor=1).is_coordinator_topic


KAFKA_JSON = (
    '{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1,2,3],'
    '"log_dirs":["any","any","any"]},{"topic":"orders","partition":1,"replicas":[2,3,4]}]}'
)


def test_plan_reads_kafka_json_as_the_reference_tool_prints_it():
    plan = ReassignmentPlan.from_kafka_json(KAFKA_JSON)
    assert plan.partitions == (TopicPartition("orders", 0), TopicPartition("orders", 1))
    assert plan.moves[1].target_replicas == (2, 3, 4)
    assert plan.moves[0].current_replicas is None


def test_plan_round_trips_kafka_json():
    plan = ReassignmentPlan.from_kafka_json(KAFKA_JSON)
    again = ReassignmentPlan.from_kafka_json(plan.to_kafka_json())
    assert again == plan
    assert json.loads(plan.to_kafka_json()) == {
        "version": 1,
        "partitions": [
            {"topic": "orders", "partition": 0, "replicas": [1, 2, 3]},
            {"topic": "orders", "partition": 1, "replicas": [2, 3, 4]},
        ],
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"version":2,"partitions":[]}', "unknown reassignment JSON version 2"),
        (
            '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1]},'
            '{"topic":"a","partition":0,"replicas":[2]}]}',
            "partition a-0 is listed twice",
        ),
        ('{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[]}]}', "partition a-0: target_replicas is empty"),
        ('{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1,1]}]}', "lists broker 1 twice"),
        ('{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[-1]}]}', "negative broker id -1"),
        ('{"version":1,"partitions":[{"topic":"a","partition":0}]}', "needs topic, partition and replicas"),
        ('{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1],"log_dirs":["/d"]}]}', 'log_dirs="keep"'),
        ("[1,2]", "must be an object"),
        ("{nope", "not valid JSON"),
    ],
)
def test_plan_rejects_bad_kafka_json(text, message):
    with pytest.raises(ValueError, match=None) as e:
        ReassignmentPlan.from_kafka_json(text)
    assert message in str(e.value)


def test_plan_with_current_replicas_refuses_an_rf_change_unless_allowed():
    current = {TopicPartition("orders", 0): [1, 2], TopicPartition("orders", 1): [2, 3, 4]}
    with pytest.raises(ValidationError, match="changes the replication factor from 2 to 3"):
        ReassignmentPlan.from_kafka_json(KAFKA_JSON, current)
    plan = ReassignmentPlan.from_kafka_json(KAFKA_JSON, current, allow_rf_change=True)
    assert [m.allow_rf_change for m in plan.moves] == [True, False]


def test_rollback_plan_reverses_each_move():
    plan = ReassignmentPlan.from_moves(
        [Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 2))]
    )
    back = plan.rollback()
    assert back.moves[0].target_replicas == (1, 2)
    assert back.moves[0].current_replicas == (3, 2)


def test_rollback_needs_current_replicas():
    with pytest.raises(ValueError, match="cannot build a rollback plan: partition\\(s\\) orders-0"):
        ReassignmentPlan.from_kafka_json(KAFKA_JSON).rollback()


def test_rich_plan_json_round_trips():
    plan = ReassignmentPlan.from_moves(
        [Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 2))]
    )
    assert ReassignmentPlan.model_validate_json(plan.model_dump_json()) == plan


def test_plan_partition_counts_round_trip_and_plans_without_them_still_read():
    move = Move(topic="t", partition=3, current_replicas=(1, 2), target_replicas=(3, 2))
    plan = ReassignmentPlan.from_moves([move], partition_counts={"t": 4})
    assert ReassignmentPlan.model_validate_json(plan.model_dump_json()) == plan
    assert plan.rollback().partition_counts == {"t": 4}
    older = json.dumps({"version": 1, "moves": [json.loads(move.model_dump_json())]})  # written before the field
    assert ReassignmentPlan.model_validate_json(older).partition_counts is None


@pytest.mark.parametrize(("counts", "message"), [
    ({"t": 3}, "partition t-3 is beyond the 3 partition\\(s\\) that partition_counts gives topic 't'"),
    ({"t": 0, "u": 2}, "partition_counts gives topic 't' 0 partitions"),
])
def test_plan_partition_counts_must_agree_with_the_moves(counts, message):
    move = Move(topic="t", partition=3, current_replicas=(1, 2), target_replicas=(3, 2))
    with pytest.raises(ValidationError, match=message):
        ReassignmentPlan(moves=(move,), partition_counts=counts)


def test_the_planner_records_the_partition_count_of_every_moved_topic():
    from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment

    snapshot = ClusterSnapshot(
        brokers=tuple(Broker(id=b, rack=f"r{b}") for b in (1, 2, 3, 4)),
        topics=(TopicState(name="moved", partition_count=4, replication_factor=2),
                TopicState(name="still", partition_count=1, replication_factor=2)),
        partitions=(*(PartitionState(topic="moved", partition=p, replicas=(1, 2), isr=(1, 2)) for p in range(4)),
                    PartitionState(topic="still", partition=0, replicas=(3, 4), isr=(3, 4))),
    )
    result = plan_reassignment(snapshot, PlanRequest())
    moved = {m.topic for m in result.plan.moves}
    assert "moved" in moved
    expected = {"moved": 4, **({"still": 1} if "still" in moved else {})}  # the moved topics only, by name
    assert result.plan.partition_counts == expected and list(expected) == sorted(moved)
    assert snapshot.partition_counts(["still"]) == {"still": 1}


# -- log dirs (Kafka's ``log_dirs``, KIP-113) ---------------------------------------------------------------------


def test_a_plan_without_log_dirs_is_the_same_bytes_as_before_the_field():
    move = Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 2))
    plan = ReassignmentPlan.from_moves([move], partition_counts={"t": 1})
    assert plan.model_dump_json() == (
        '{"version":1,"moves":[{"topic":"t","partition":0,"target_replicas":[3,2],"current_replicas":[1,2],'
        '"allow_rf_change":false}],"partition_counts":{"t":1}}')
    assert "log_dirs" not in plan.to_kafka_json() and "log_dirs" not in move.model_dump()


def test_a_move_pins_log_dirs_as_kafka_writes_them():
    move = Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(1, 2),
                log_dirs=("any", "/kafka/2/data-1/"))
    assert move.log_dirs == ("any", "/kafka/2/data-1") and move.pinned_dirs == {2: "/kafka/2/data-1"}
    assert not move.adding_replicas  # an intra-broker move: the replicas stay, one changes its log dir
    plan = ReassignmentPlan.from_moves([move])
    assert json.loads(plan.to_kafka_json())["partitions"][0]["log_dirs"] == ["any", "/kafka/2/data-1"]
    assert ReassignmentPlan.model_validate_json(plan.model_dump_json()) == plan
    # read back from Kafka's format with log_dirs="keep"; "any" everywhere pins nothing
    again = ReassignmentPlan.from_kafka_json(plan.to_kafka_json(), {move.tp: (1, 2)}, log_dirs="keep")
    assert again.moves[0].log_dirs == move.log_dirs
    assert Move(topic="t", partition=0, target_replicas=(1, 2), log_dirs=("any", "any")).log_dirs is None
    assert ReassignmentPlan.from_kafka_json(plan.to_kafka_json(), log_dirs="ignore").moves[0].log_dirs is None


@pytest.mark.parametrize(("dirs", "message"), [
    (("any",), "log_dirs \\['any'\\] has 1 entries but target_replicas \\[1, 2\\] has 2"),
    (("any", "data-1"), "log_dirs entry 'data-1' is neither \"any\" nor an absolute path"),
])
def test_a_move_refuses_log_dirs_that_do_not_fit_its_replicas(dirs, message):
    with pytest.raises(ValidationError, match=f"partition t-0: {message}"):
        Move(topic="t", partition=0, target_replicas=(1, 2), log_dirs=dirs)
