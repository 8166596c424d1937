"""The decommission's guards through the engine and the operators, on the fake (Kafka 4.4 by default): a plan
never targets a cordoned broker, growth avoids or refuses one, a cancel or rollback uncordons exactly, and a
KRaft voter is not drained."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession, cancel_then_roll_back, preflight
from airflow_kafka_reassign.core.maintenance.cordon import CORDONED_LOG_DIRS, apply_cordons, decommission_cordons
from airflow_kafka_reassign.core.maintenance.growth import GrowthRequest, grow_partitions
from airflow_kafka_reassign.core.records.store import MemoryStore
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
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
    from airflow_kafka_reassign.core.records.store import LocalStore

    apply_cordons(admin, decommission_cordons([5]), state_dir=LocalStore(plan_dir / "run"))
    assert admin.broker_configs[5][CORDONED_LOG_DIRS] == "*"
    assert UncordonBrokersOperator(task_id="uncordon", plan_uri=str(plan_dir)).execute({}) == {"restored": True}
    assert CORDONED_LOG_DIRS not in admin.broker_configs[5]


# -- the clean-up of a plan never executed (a rejected approval, a failure before execution) --------------------------


class _TI:
    dag_id, run_id, try_number, map_index = "decommission", "manual__1", 1, -1

    def __init__(self, xcom: dict | None = None) -> None:
        self.xcom = dict(xcom or {})

    def xcom_pull(self, task_ids=None, key="return_value"):
        return self.xcom.get((task_ids, key))

    def xcom_push(self, key, value):
        self.xcom[(None, key)] = value


DRAIN_3 = ReassignmentPlan(moves=(Move(topic="t", partition=1, current_replicas=(2, 3), target_replicas=(2, 4)),))


def _cordoned_plan(admin, plan_dir):
    """What PlanReassignment leaves: a plan directory, and broker 3 cordoned with its backup in ``<plan>/run``."""
    from airflow_kafka_reassign.core.records.store import LocalStore

    plan_dir.mkdir(parents=True)
    (plan_dir / "plan.json").write_text(DRAIN_3.model_dump_json())
    (plan_dir / "metrics.json").write_text("{}")
    apply_cordons(admin, decommission_cordons([3]), state_dir=LocalStore(plan_dir / "run"))
    assert admin.broker_configs[3][CORDONED_LOG_DIRS] == "*"


def test_restore_cordons_gives_back_what_a_rejected_plan_cordoned_and_keeps_an_executed_ones(monkeypatch, tmp_path):
    from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
    from airflow_kafka_reassign.operators.decommission import RestoreCordonsOperator

    admin = cluster()
    admin.close = lambda: None
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    before = {b: dict(c) for b, c in admin.broker_configs.items()}
    rejected = tmp_path / "rejected" / "plan"
    _cordoned_plan(admin, rejected)
    op = RestoreCordonsOperator(task_id="restore_cordons")
    assert op.trigger_rule == "all_done"  # it runs whatever happened upstream: a rejection skips them
    out = op.execute({"ti": _TI({("plan", "return_value"): {"plan_uri": str(rejected)}})})
    assert out["outcome"] == "restored" and out["brokers"] == [3] and out["plan_uri"] == str(rejected)
    assert admin.broker_configs == before and admin.alter_requests == []
    assert json.loads((rejected / "run" / "lease.json").read_text())["released"]  # held while it restored

    executed = tmp_path / "executed" / "plan"
    _cordoned_plan(admin, executed)
    admin.alter_reassignments({TopicPartition("t", 1): (2, 4)})  # its move is in flight: the execution has it
    out = op.execute({"ti": _TI({("plan", "return_value"): {"plan_uri": str(executed)}})})
    assert out["outcome"] == "kept" and admin.broker_configs[3][CORDONED_LOG_DIRS] == "*"


def test_restore_cordons_finds_the_plan_of_a_plan_task_that_failed_after_cordoning(monkeypatch, tmp_path):
    from airflow.sdk import DAG

    from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
    from airflow_kafka_reassign.operators.decommission import RestoreCordonsOperator
    from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator

    admin = cluster()
    admin.close = lambda: None
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    with DAG("decommission", schedule=None):
        plan = PlanReassignmentOperator(task_id="plan", goal="remove-brokers", brokers=[3],
                                        output_uri=str(tmp_path / "{{ run_id }}"))
        restore = RestoreCordonsOperator(task_id="restore_cordons")
        plan >> restore
    # the plan task cordoned, then failed (no plan.json, no XCom)
    from airflow_kafka_reassign.core.records.store import LocalStore

    apply_cordons(admin, decommission_cordons([3]), state_dir=LocalStore(tmp_path / "manual__1" / "plan" / "run"))
    context = {"ti": _TI(), "run_id": "manual__1"}
    assert restore.plan_location(context) == f"{tmp_path}/manual__1/plan"
    out = restore.execute(context)
    assert out["outcome"] == "restored" and "wrote no plan" in out["why"]
    assert CORDONED_LOG_DIRS not in admin.broker_configs[3]
    # a run whose plan never ran: nothing there, nothing to do
    assert restore.execute({"ti": _TI(), "run_id": "manual__2"})["outcome"] == "none"


@pytest.mark.skipif(not __import__("airflow_kafka_reassign.operators.approval", fromlist=["x"]).HITL_AVAILABLE,
                    reason="Airflow 3.1+")
def test_a_rejection_ends_the_approval_task_by_skipping_and_its_record_says_rejected():
    """On Airflow 3 the approval's skip raises DownstreamTasksSkipped: nothing after it in the task runs (which is
    why the cordons go back in a clean-up task); the record is pushed before."""
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import DownstreamTasksSkipped

    from airflow_kafka_reassign.operators.approval import REQUEST_KEY, PlanApprovalOperator
    from airflow_kafka_reassign.operators.decommission import RestoreCordonsOperator

    with DAG("decommission", schedule=None):
        approve = PlanApprovalOperator(task_id="approve", plan={})
        restore = RestoreCordonsOperator(task_id="restore_cordons")
        approve >> restore
    ti = _TI()
    ti.xcom[("approve", REQUEST_KEY)] = {"plan_uri": "/p/plan", "plan_sha256": "sha256:ab"}
    from datetime import datetime, timezone

    with pytest.raises(DownstreamTasksSkipped):
        approve.execute_complete({"ti": ti, "task": approve}, {
            "chosen_options": ["Reject"], "params_input": {}, "responded_at": datetime(2026, 11, 28, tzinfo=timezone.utc),
            "responded_by_user": {"id": "1", "name": "alice"}})
    record = ti.xcom[(None, "return_value")]
    assert record["approved"] is False and record["approved_by"] == "alice" and record["plan_sha256"] == "sha256:ab"


def test_the_clean_up_restores_the_throttles_a_failed_wait_left_once_no_move_is_in_flight(monkeypatch, tmp_path):
    """The report: the wait failed on all its tries and the run ended with the throttles on four brokers."""
    from airflow_kafka_reassign.core.execution.throttle import FOLLOWER_RATE, sync_throttles
    from airflow_kafka_reassign.core.records.store import LocalStore
    from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
    from airflow_kafka_reassign.operators.decommission import RestoreCordonsOperator

    admin = cluster()
    admin.close = lambda: None
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    before = {b: dict(c) for b, c in admin.broker_configs.items()}
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    (plan_dir / "plan.json").write_text(DRAIN_3.model_dump_json())
    (plan_dir / "metrics.json").write_text("{}")
    admin.alter_reassignments({TopicPartition("t", 1): (2, 4)})
    sync_throttles(admin, DRAIN_3.moves, 1000, state_dir=LocalStore(plan_dir / "run"))  # what the run set
    assert admin.broker_configs[4][FOLLOWER_RATE] == "1000"
    op = RestoreCordonsOperator(task_id="restore_cordons", plan_uri=str(plan_dir))
    out = op.execute({"ti": _TI()})  # the move is still in flight: its throttles stay, and the line says who restores
    assert out["throttles"] == "kept" and "WaitForReassignmentSensor(plan_uri=" in out["throttles_why"]
    assert "CancelReassignmentOperator(plan_uri=" in out["throttles_why"]
    assert admin.broker_configs[4][FOLLOWER_RATE] == "1000"
    admin.complete()
    out = op.execute({"ti": _TI()})
    assert out["throttles"] == "restored" and admin.broker_configs == before
    assert not (plan_dir / "run" / "throttle-backup.json").exists()
    assert op.execute({"ti": _TI()})["throttles"] == "none"
