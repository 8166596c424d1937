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


# -- a decommission of a cordoned broker, cancelled (issue 36) --------------------------------------------------------

#: broker 1 drained: in each move broker 1 leaves and the others keep their places, so Kafka's cancel (target first,
#: then the removing replica) brings every partition back with broker 1 LAST: [2, 3, 1], [3, 4, 1], [2, 3, 1]
DRAINED = 1
DRAIN_ORIGINAL = [(1, 2, 3), (1, 3, 4), (2, 1, 3)]
DRAIN_TARGETS = [(5, 2, 3), (5, 3, 4), (2, 5, 3)]


def topic_configs(config: dict, topic: str) -> dict:
    """The topic's dynamic configs (the throttled-replica lists among them), read with a client of the test's own."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    client = AdminClient(dict(config))  # kept alive until the future is done
    entries = client.describe_configs([res], request_timeout=30)[res].result(60)
    return {n: e.value for n, e in sorted(entries.items())
            if getattr(e.source, "value", e.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def test_a_timeout_with_on_timeout_cancel_during_a_decommission_of_a_cordoned_broker_leaves_everything_as_before(
        sandbox, admin, unique_topic, tmp_path, monkeypatch):
    """Issue 36's last case, on Kafka 4.4 (which refuses any reassignment naming a broker whose log dirs are all
    cordoned, a reorder of the replicas already there included): broker 1 cordoned as the plan task does, its
    partitions moving off under a 100 kB/s throttle, the wait times out with on_timeout='cancel'. Kafka's cancel
    leaves every partition with broker 1 last; the cancel restores the cordons first, then puts each back in its
    order. Read back with a confluent-kafka AdminClient of the test's own: the replicas in order, every broker's
    dynamic configs (cordoned.log.dirs, throttle rates) and the topic's throttled-replica lists as before."""
    from airflow.providers.common.compat.sdk import AirflowSensorTimeout
    from kafka_helpers import TI, dynamic_broker_configs, replicas_of

    from airflow_kafka_reassign.core.maintenance.cordon import apply_cordons, decommission_cordons
    from airflow_kafka_reassign.core.records.store import LocalStore
    from airflow_kafka_reassign.sandbox import wait_until
    from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

    if not admin.capabilities().cordons_refuse_explicit_assignments:
        pytest.skip(f"the sandbox runs Kafka {sandbox.kafka_version}: it accepts a reorder onto a cordoned broker "
                    "(KAFKA-20832); the order of the cancel matters from 4.4")
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}",
                       json.dumps({"conn_type": "kafka", "extra": sandbox.client_config(sasl=True)}))
    config = sandbox.client_config()
    make_topic(config, unique_topic, [list(r) for r in DRAIN_ORIGINAL], megabytes=3)
    plan = ReassignmentPlan(moves=tuple(Move(topic=unique_topic, partition=p, current_replicas=DRAIN_ORIGINAL[p],
                                             target_replicas=t) for p, t in enumerate(DRAIN_TARGETS)))
    plan_dir = write_plan_dir(tmp_path / "plan", plan)
    before_brokers, before_topic = dynamic_broker_configs(config), topic_configs(config, unique_topic)
    assert replicas_of(config, unique_topic) == dict(enumerate(DRAIN_ORIGINAL))
    apply_cordons(admin, decommission_cordons([DRAINED]), state_dir=LocalStore(plan_dir / "run"))  # as `plan` does
    wait_until(lambda: dynamic_broker_configs(config, [DRAINED])[DRAINED].get("cordoned.log.dirs") == "*",
               what="broker 1 to show its cordon", timeout=30)
    ti = TI()
    with Traffic(config, unique_topic, partitions=len(DRAIN_ORIGINAL)) as traffic, \
            pytest.raises(AirflowSensorTimeout) as timed_out:
        WaitForReassignmentSensor(task_id="wait", plan_uri=str(plan_dir), kafka_config_id=CONN_ID, deferrable=False,
                                  mode="poke", submit_pending=True, throttle_bytes_per_sec=RATE, measure_bytes=False,
                                  timeout=15, poke_interval=1, on_timeout="cancel").execute({"ti": ti})
    traffic.check()
    message = str(timed_out.value)
    # every move was still copying at the timeout, and Kafka's cancel left each with broker 1 last
    assert f"cancelled {len(DRAIN_ORIGINAL)} in-flight move(s)" in message, message
    assert f"{len(DRAIN_ORIGINAL)} put back in their original replica order" in message, message
    assert "cordons restored" in message and "another replica order" not in message, message
    wait_until(lambda: replicas_of(config, unique_topic) == dict(enumerate(DRAIN_ORIGINAL)),
               what="every partition's replicas in their order before the run, as the test's own client reads them",
               timeout=30)
    assert dynamic_broker_configs(config) == before_brokers  # cordoned.log.dirs and throttle rates, every broker
    assert topic_configs(config, unique_topic) == before_topic  # the throttled-replica lists
    assert ti.pushed["summary"]["on_timeout"]["policy"] == "cancel"
