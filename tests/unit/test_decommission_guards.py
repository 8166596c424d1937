"""The decommission's guards through the engine and the operators, on the fake (Kafka 4.4 by default): a plan
never targets a cordoned broker, growth avoids or refuses one, a cancel or rollback uncordons exactly, and a
KRaft voter is not drained."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.cordon import CORDONED_LOG_DIRS, apply_cordons, decommission_cordons
from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession, cancel_then_roll_back, preflight
from airflow_kafka_reassign.core.growth import GrowthRequest, grow_partitions
from airflow_kafka_reassign.core.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.store import MemoryStore
from airflow_kafka_reassign.testing import FakeClusterAdmin

RACKS = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b"}


def cluster() -> FakeClusterAdmin:
    return FakeClusterAdmin.build(brokers=RACKS, topics={"t": [[1, 2], [2, 3]]})


def test_a_hand_edited_plan_onto_a_cordoned_broker_is_refused_in_pre_flight_naming_it():
    admin = cluster()
    apply_cordons(admin, decommission_cordons([5]), state_dir=MemoryStore())
    plan = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(1, 5)),))
    session = ExecutionSession(admin, plan, ExecutionConfig(), state_dir=MemoryStore(), settle_s=0)
    status = session.preflight()
    assert status.blocked and "t-0 -> broker 5" in status.blocked and "cordon" in status.blocked
    assert admin.alter_requests == []
    assert "t-0 -> broker 5" in (preflight(admin, plan, ExecutionConfig().options()).blocked or "")  # approval's


def test_a_plan_that_only_moves_off_a_cordoned_broker_runs():
    admin = cluster()
    apply_cordons(admin, decommission_cordons([2]), state_dir=MemoryStore())  # draining broker 2
    plan = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(1, 5)),))
    session = ExecutionSession(admin, plan, ExecutionConfig(), state_dir=MemoryStore(), settle_s=0)
    assert session.preflight().blocked is None
    assert session.tick().status.submitted == [TopicPartition("t", 0)]


def test_growth_places_no_replica_on_a_cordoned_broker_and_refuses_an_explicit_one():
    admin = cluster()
    apply_cordons(admin, decommission_cordons([4, 5]), state_dir=MemoryStore())
    grown = grow_partitions(admin, GrowthRequest(targets={"t": 8}))
    assert not grown.failed and not any(b in (4, 5) for tp, r in admin.replicas.items() for b in r)
    explicit = grow_partitions(admin, GrowthRequest(targets={"t": 9}, assignments={"t": ((1, 5),)}))
    (refused,) = [t for t in explicit.topics if t.status == "refused"]
    assert "broker(s) [5] are cordoned" in refused.reason and admin.replicas.get(TopicPartition("t", 8)) is None


def test_a_cancelled_decommission_uncordons_exactly_and_a_finished_one_stays_cordoned():
    admin = cluster()
    admin.broker_configs[5][CORDONED_LOG_DIRS] = "/kafka/5/data-1"  # someone's own cordon, kept exactly
    before = {b: dict(c) for b, c in admin.broker_configs.items()}
    state = MemoryStore()
    apply_cordons(admin, decommission_cordons([2, 5]), state_dir=state)
    assert admin.broker_configs[2][CORDONED_LOG_DIRS] == "*"
    plan = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(1, 4)),))
    session = ExecutionSession(admin, plan, ExecutionConfig(throttle_bytes_per_sec=1000), state_dir=state, settle_s=0)
    session.tick()
    session.finish()  # a drain that finished: the cordon stays until the broker is unregistered
    assert admin.broker_configs[2][CORDONED_LOG_DIRS] == "*"
    outcome = cancel_then_roll_back(admin, plan, ExecutionConfig(), state_dir=state)  # the operator cancels it
    assert outcome.cordons_restored and admin.broker_configs == before


def test_a_controller_voter_is_not_drained(monkeypatch, tmp_path):
    from airflow.providers.common.compat.sdk import AirflowFailException

    from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
    from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator

    admin = cluster()  # voters 1, 2, 3 (combined broker+controller nodes, as on the sandbox)
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    monkeypatch.setattr(PlanReassignmentOperator, "spark_submit", lambda *a, **k: pytest.fail("planned a voter"))
    op = PlanReassignmentOperator(task_id="plan", goal="remove-brokers", brokers=[2], output_uri=str(tmp_path))
    with pytest.raises(AirflowFailException, match=r"broker\(s\) 2: they are KRaft controller voters.*3 voter"):
        op.execute({"ti": None, "run_id": "r"})
    assert all(CORDONED_LOG_DIRS not in c for c in admin.broker_configs.values())  # refused before the cordon


def test_the_shutdown_sensor_waits_for_fenced_brokers_and_unregister_refuses_a_running_one(monkeypatch):
    from airflow.providers.common.compat.sdk import AirflowFailException

    from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
    from airflow_kafka_reassign.operators.decommission import UnregisterBrokersOperator, WaitForBrokerShutdownSensor

    admin = cluster()
    admin.close = lambda: None
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    sensor = WaitForBrokerShutdownSensor(task_id="wait_for_shutdown", brokers=[4, 5])
    unregister = UnregisterBrokersOperator(task_id="unregister", brokers=[4, 5])
    assert sensor.poke({}) is False  # both running
    with pytest.raises(AirflowFailException, match="refused to unregister broker 4: it is still running"):
        unregister.execute({})
    assert admin.unregistered == set()  # nothing sent
    admin.down |= {4, 5}  # their processes stopped: fenced
    assert sensor.poke({}).xcom_value == {"shut_down": [4, 5], "states": {"4": "fenced", "5": "fenced"}}
    dry = UnregisterBrokersOperator(task_id="u", brokers=[4, 5], dry_run=True).execute({})
    assert dry["dry_run"] and admin.unregistered == set()
    assert unregister.execute({}) == {"unregistered": [4, 5], "already": [], "dry_run": False}
    assert {b.id for b in admin.describe_cluster(include_fenced=True).brokers} == {1, 2, 3}
    assert unregister.execute({})["already"] == [4, 5]  # a retry is fine


def test_uncordon_restores_what_the_decommission_set(monkeypatch, tmp_path):
    from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
    from airflow_kafka_reassign.operators.decommission import UncordonBrokersOperator

    admin = cluster()
    admin.close = lambda: None
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    (plan_dir / "plan.json").write_text(ReassignmentPlan(moves=()).model_dump_json())
    (plan_dir / "metrics.json").write_text("{}")
    from airflow_kafka_reassign.core.store import LocalStore

    apply_cordons(admin, decommission_cordons([5]), state_dir=LocalStore(plan_dir / "run"))
    assert admin.broker_configs[5][CORDONED_LOG_DIRS] == "*"
    assert UncordonBrokersOperator(task_id="uncordon", plan_uri=str(plan_dir)).execute({}) == {"restored": True}
    assert CORDONED_LOG_DIRS not in admin.broker_configs[5]
