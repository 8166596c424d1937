"""A cancel keeps each partition's replica order and leader, on the sandbox (5 brokers, racks r1 r2 r3 r1 r2).

Kafka's cancel (KIP-455) restores a partition's replica set in the order of the controller's merged list:
a move of [1, 2, 3] to [5, 4, 3] cancelled comes back as [3, 1, 2], another preferred leader. The cancel
(core/execution/cancel.py) puts it back in the plan's order with a reassignment to the same replicas (no data copied).
Each test runs an acks=all producer through the move, the cancel (and the rollback) and reads everything back.
Moves are throttled to 100 kB/s over 3 MB so that they are still copying when the cancel comes.
"""

from __future__ import annotations

import json

import pytest
from kafka_helpers import Traffic, make_topic, replicas, throttles, write_plan_dir

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, run
from airflow_kafka_reassign.core.execution.cancel import cancel_plan
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import produce

CONN_ID = "kafka_cancel_order"
RATE = 100_000
#: the original replicas and the moves' targets: both come back from Kafka's cancel in another order
ORIGINAL = [(1, 2, 3), (2, 3, 4)]
TARGETS = [(5, 4, 3), (1, 5, 4)]


def leaders(admin: KafkaClusterAdmin, topic: str) -> list[int | None]:
    return [p.leader for p in admin.snapshot(topics=[topic]).partitions]


def plan_of(topic: str, targets: list[tuple[int, ...]]) -> ReassignmentPlan:
    return ReassignmentPlan(moves=tuple(Move(topic=topic, partition=p, current_replicas=ORIGINAL[p],
                                             target_replicas=t) for p, t in enumerate(targets)))


@pytest.fixture
def admin(idle_admin):
    return idle_admin


def test_a_cancelled_move_ends_on_its_original_replicas_in_order_with_its_leader(sandbox, admin, unique_topic,
                                                                                 tmp_path):
    config = sandbox.client_config()
    make_topic(config, unique_topic, [list(r) for r in ORIGINAL], megabytes=3)
    plan = plan_of(unique_topic, TARGETS)
    before_throttles, before_leaders = throttles(admin, [unique_topic]), leaders(admin, unique_topic)
    with Traffic(config, unique_topic, partitions=2) as traffic:
        started = run(admin, plan, ExecutionLimits(), ExecutionOptions(throttle_bytes_per_sec=RATE),
                      state_dir=tmp_path, poll_interval_s=0.5, wait=False, finish_at_end=False)
        assert sorted(started.status.in_flight) == sorted(plan.partitions)
        result = cancel_plan(admin, plan, state_dir=tmp_path)
    traffic.check()
    assert result.cancelled == sorted(plan.partitions) and result.ok, result.summary()
    # Kafka's own cancel left both in another order; each was put back (same replicas: nothing copied)
    assert {tp.partition: b for tp, (a, b) in result.reordered.items()} == {0: (3, 1, 2), 1: (4, 2, 3)}
    assert result.order_changed == {} and result.leader_changed == {} and result.throttles_restored
    assert replicas(admin, unique_topic) == ORIGINAL
    assert leaders(admin, unique_topic) == before_leaders == [1, 2]
    assert admin.list_reassignments() == {}
    assert throttles(admin, [unique_topic]) == before_throttles


@pytest.mark.parametrize("policy", ["cancel", "rollback"])
def test_the_sensors_timeout_policies_leave_each_partition_on_its_original_replicas_in_order(
        sandbox, admin, unique_topic, tmp_path, monkeypatch, policy):
    """on_timeout="cancel": the slow move is cancelled and reordered back. on_timeout="rollback": besides, a move
    that had finished goes back, and the wait with which="rollback" (the path the timeout message recommends)
    finishes it without refusing anything as stale (issue 15 saw 'bulk-0 (stale: replicas are [3, 1, 2] ...')."""
    from airflow.providers.common.compat.sdk import AirflowSensorTimeout

    from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}",
                       json.dumps({"conn_type": "kafka", "extra": sandbox.client_config(sasl=True)}))
    config = sandbox.client_config()
    make_topic(config, unique_topic, [list(r) for r in ORIGINAL])
    # partition 0 is still copying at the timeout; under the rollback policy partition 1 (no data but the
    # traffic's) is done within the first poke
    for p in (0, 1) if policy == "cancel" else (0,):
        produce(config, unique_topic, partition=p, megabytes=3)
    plan = plan_of(unique_topic, TARGETS if policy == "cancel" else [TARGETS[0], (2, 3, 5)])
    plan_dir = write_plan_dir(tmp_path / "plan", plan)
    before_throttles, before_leaders = throttles(admin, [unique_topic]), leaders(admin, unique_topic)
    common = dict(task_id="wait", plan_uri=str(plan_dir), kafka_config_id=CONN_ID, deferrable=False, mode="poke",
                  submit_pending=True, throttle_bytes_per_sec=RATE, measure_bytes=False)
    with Traffic(config, unique_topic, partitions=2) as traffic:
        with pytest.raises(AirflowSensorTimeout) as timed_out:
            WaitForReassignmentSensor(timeout=15, poke_interval=1, on_timeout=policy, **common).execute({})
        message = str(timed_out.value)
        assert "put back in their original replica order" in message, message
        if policy == "rollback":
            assert "rollback started: 1 move(s) submitted" in message and "1 already back" in message, message
            done = WaitForReassignmentSensor(timeout=120, poke_interval=1, which="rollback", **common).execute({})
            assert done["status"] == "complete", done
    traffic.check()
    assert replicas(admin, unique_topic) == ORIGINAL
    assert leaders(admin, unique_topic) == before_leaders == [1, 2]
    assert admin.list_reassignments() == {}
    assert throttles(admin, [unique_topic]) == before_throttles
