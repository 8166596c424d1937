"""WaitForReassignmentSensor and ReassignmentTrigger with the in-memory fake behind the hook."""

from __future__ import annotations

import asyncio
import importlib
import json
import time

import pytest
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    TaskDeferred,
)
from airflow.sdk import PokeReturnValue

try:
    from airflow.sdk.exceptions import AirflowRescheduleException
except ImportError:  # Airflow < 3.2
    from airflow.exceptions import AirflowRescheduleException

from airflow_kafka_reassign.core.execution import RUN_DIR, THROTTLE_BACKUP_FILE
from airflow_kafka_reassign.core.execution.throttle import FOLLOWER_RATE, LEADER_RATE
from airflow_kafka_reassign.core.records.journal import read_journal
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.plan_storage import plan_store
from airflow_kafka_reassign.sensors.reassignment import STATE_KEY, WaitForReassignmentSensor
from airflow_kafka_reassign.testing import FakeClusterAdmin
from airflow_kafka_reassign.triggers.reassignment import ReassignmentTrigger
from airflow_kafka_reassign.wait import WaitSpec

MB = 1_000_000


class SteppingFake(FakeClusterAdmin):
    """Completes one in-flight move every ``every`` snapshots (a cluster that makes progress)."""

    every = 1

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.snapshots = 0
        self.frozen = False

    def snapshot(self, **kw):
        self.snapshots += 1
        if not self.frozen and self.inflight and self.snapshots % self.every == 0:
            self.complete([sorted(self.inflight)[0]])
        return super().snapshot(**kw)


def build_fake(n=3):
    fake = SteppingFake.build(brokers={1: "r1", 2: "r2", 3: "r3", 4: "r1"}, topics={"orders": [[1, 2]] * n})
    for i in range(n):
        fake.sizes[TopicPartition("orders", i)] = {1: MB, 2: MB, 3: MB}
    return fake


def write_plan(tmp_path, n=3):
    plan = ReassignmentPlan(moves=tuple(
        Move(topic="orders", partition=i, current_replicas=(1, 2), target_replicas=(3, 2)) for i in range(n)))
    d = tmp_path / "plan"
    d.mkdir()
    (d / "plan.json").write_text(plan.model_dump_json())
    (d / "rollback.json").write_text(plan.rollback().model_dump_json())
    (d / "metrics.json").write_text(json.dumps({"format_version": 1}))
    return d, plan


@pytest.fixture
def fake(monkeypatch):
    admin = build_fake()
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    return admin


@pytest.fixture
def plan_dir(tmp_path):
    return write_plan(tmp_path)[0]


def sensor(plan_dir, **kw):
    kw.setdefault("poke_interval", 0)
    kw.setdefault("deferrable", False)
    kw.setdefault("timeout", 10)
    return WaitForReassignmentSensor(task_id="wait", plan_uri=str(plan_dir), **kw)


class Store:
    def __init__(self):
        self.data = {}

    def get(self, key, default=None):
        return self.data.get(key, default)

    def set(self, key, value, **_):
        json.dumps(value)
        self.data[key] = value


class TI:
    try_number = 1

    def get_first_reschedule_date(self, context):
        return None


# -- construction --------------------------------------------------------------------------------------------

def test_init_only_stores_and_validates_arguments(plan_dir):
    op = sensor("{{ ti.xcom_pull('plan')['plan_uri'] }}", timeout=100, stuck_after=30)
    assert op.plan_uri.startswith("{{")
    assert set(op.template_fields) == {"plan_uri", "kafka_config_id", "state_dir", "storage_conn_id", "execution",
                                       "deadline"}
    # limits from DAG Params: validated once rendered
    templated = sensor(plan_dir, submit_pending=True, max_moves_per_broker="{{ params.max_moves_per_broker }}")
    templated.execution = {"max_moves_per_broker": "3"}  # what rendering leaves
    assert templated.spec().execution["max_moves_per_broker"] == 3
    templated.execution = {"max_moves_per_broker": "three"}
    with pytest.raises(ConfigurationError, match="max_moves_per_broker: Input should be a valid integer.*'three'"):
        templated.spec()
    assert op.wait_timeout_s == 100 and op.timeout > 100  # the base class's check is a later backstop
    with pytest.raises(ConfigurationError, match="leave, cancel, rollback"):
        sensor(plan_dir, on_timeout="ignore")
    with pytest.raises(ConfigurationError, match="max_moves"):
        sensor(plan_dir, max_moves=0)
    with pytest.raises(ConfigurationError, match="stuck_after"):
        sensor(plan_dir, stuck_after=0)


def test_deferrable_defaults_to_the_airflow_setting(monkeypatch, plan_dir):
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    import airflow_kafka_reassign.sensors.reassignment as mod

    try:
        assert importlib.reload(mod).WaitForReassignmentSensor(task_id="w", plan_uri=str(plan_dir)).deferrable
    finally:
        monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE")
        importlib.reload(mod)


def test_plan_uri_forms(plan_dir):
    assert plan_store(str(plan_dir / "plan.json")).uri == str(plan_dir)
    assert plan_store(f"file://{plan_dir}").uri == str(plan_dir)
    assert plan_store(f"{plan_dir}/").uri == str(plan_dir)
    with pytest.raises(ConfigurationError, match="does not exist on this machine.*object storage"):
        plan_store(str(plan_dir / "nope"))
    (plan_dir / "metrics.json").unlink()
    with pytest.raises(ConfigurationError, match="no plan there"):
        plan_store(str(plan_dir))
    with pytest.raises(ConfigurationError, match="plan_uri is empty"):
        plan_store("  ")


# -- poke mode -----------------------------------------------------------------------------------------------

def task_log(capsys):
    """The task's log records (the task SDK logs through structlog to stdout)."""
    return [line for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_poke_mode_waits_for_completion_one_line_per_poke(fake, plan_dir, capsys):
    fake.alter_reassignments({TopicPartition("orders", i): (3, 2) for i in range(3)})
    result = sensor(plan_dir).execute({})
    assert result["status"] == "complete" and result["done"] == 3 and result["moves"] == 3
    json.dumps(result)
    log = task_log(capsys)
    lines = [line for line in log if "| moves " in line]
    assert len(lines) == 3  # 1, 2, 3 done: one line per poke
    assert "moves 1/3 done, 2 in flight, 0 pending | 3.0 MB of 3.0 MB copied" in lines[0]
    assert "100%" in lines[-1] and "done in" in lines[-1]
    assert len(log) <= len(lines) + 4  # nothing else but the start, the end and the finish


def in_flight_after_each_submission(fake, then=None) -> list[int]:
    """Record how many moves are in flight right after each AlterPartitionReassignments (and call ``then``)."""
    seen: list[int] = []
    orig = fake.alter_reassignments

    def alter(targets, **kw):
        out = orig(targets, **kw)
        seen.append(len(fake.inflight))
        if then is not None:
            then()
        return out

    fake.alter_reassignments = alter
    return seen


def test_submit_pending_submits_within_the_limits(fake, plan_dir):
    limit_seen = in_flight_after_each_submission(fake)
    result = sensor(plan_dir, submit_pending=True, max_moves=1).execute({})
    assert result["status"] == "complete" and result["submitted"] == 3
    assert max(limit_seen) == 1


def test_submit_pending_with_throttle_restores_the_throttle_at_the_end(fake, plan_dir):
    fake.broker_configs[1][LEADER_RATE] = "999"  # someone's value, kept exactly
    result = sensor(plan_dir, submit_pending=True, throttle_bytes_per_sec=100_000).execute({})
    assert result["finish"]["throttles_restored"] == "yes"
    assert fake.broker_configs[1] == {LEADER_RATE: "999"}
    assert all(FOLLOWER_RATE not in c for c in fake.broker_configs.values())
    assert not (plan_dir / RUN_DIR / THROTTLE_BACKUP_FILE).exists()


def test_pending_moves_without_submitter_time_out_naming_them(fake, plan_dir):
    fake.frozen = True
    with pytest.raises(AirflowSensorTimeout) as e:
        sensor(plan_dir, timeout=0.05, poke_interval=0.02).execute({})
    assert "0/3 move(s) done" in str(e.value) and "orders-0 (pending" in str(e.value)
    assert "on_timeout=leave" in str(e.value)


def test_stuck_warning_names_the_in_flight_moves(fake, plan_dir, capsys):
    fake.frozen = True
    fake.alter_reassignments({TopicPartition("orders", 0): (3, 2)})
    with pytest.raises(AirflowSensorTimeout):
        sensor(plan_dir, timeout=0.2, poke_interval=0.05, stuck_after=0.1).execute({})
    # structlog (3.1+) / logging (3.0)
    warnings = [line for line in task_log(capsys) if "[warning" in line or "} WARNING - " in line]
    assert any("no progress for" in w and "orders-0 (in_flight" in w for w in warnings)


def test_timeout_cancel_policy_cancels_only_the_plans_moves(fake, plan_dir):
    fake.frozen = True
    fake.alter_reassignments({TopicPartition("orders", 0): (3, 2), TopicPartition("orders", 1): (4, 2)})
    ti = XComTI()
    with pytest.raises(AirflowSensorTimeout) as e:
        sensor(plan_dir, timeout=0.05, poke_interval=0.02, on_timeout="cancel").execute({"ti": ti})
    assert "cancelled 1 in-flight move(s)" in str(e.value)
    summary = ti.pushed["summary"]  # the failing task's summary, as ExecuteReassignment's
    assert summary["status"] == "timeout" and summary["on_timeout"]["policy"] == "cancel"
    assert summary["on_timeout"]["done"].startswith("cancelled 1 in-flight move(s)")
    assert list(fake.inflight) == [TopicPartition("orders", 1)]  # the foreign one is untouched
    assert fake.replicas[TopicPartition("orders", 0)] == (1, 2)


def test_timeout_rollback_policy_moves_finished_partitions_back(fake, plan_dir):
    fake.frozen = True
    fake.alter_reassignments({TopicPartition("orders", 0): (3, 2), TopicPartition("orders", 1): (3, 2)})
    fake.complete([TopicPartition("orders", 0)])
    with pytest.raises(AirflowSensorTimeout) as e:
        sensor(plan_dir, timeout=0.05, poke_interval=0.02, on_timeout="rollback").execute({})
    assert "rollback started: 1 move(s) submitted" in str(e.value) and "which='rollback'" in str(e.value)
    assert fake.inflight == {TopicPartition("orders", 0): ((3, 2), (1, 2))}
    assert fake.replicas[TopicPartition("orders", 1)] == (1, 2)  # cancelled back
    # the rollback is then waited for like any plan
    fake.frozen = False
    result = sensor(plan_dir, which="rollback").execute({})
    assert result["status"] == "complete" and result["which"] == "rollback"
    assert all(fake.replicas[TopicPartition("orders", i)] == (1, 2) for i in range(3))


def test_blocked_plan_fails_naming_the_partitions(fake, plan_dir):
    fake.alter_reassignments({TopicPartition("orders", i): (3, 2) for i in (0, 1)})
    fake.alter_reassignments({TopicPartition("orders", 2): (4, 1)})  # someone else's move
    fake.complete()
    with pytest.raises(AirflowFailException, match=r"1 of 3 move\(s\) cannot complete .*orders-2 \(stale"):
        sensor(plan_dir).execute({})


def test_submit_pending_refuses_a_plan_with_plan_errors_and_the_wait_ends_blocked(fake, tmp_path, capsys):
    plan = ReassignmentPlan(moves=(
        Move(topic="orders", partition=0, current_replicas=(1, 2), target_replicas=(3, 2)),
        Move(topic="orders", partition=1, current_replicas=(1, 2), target_replicas=(99, 2)),
    ))
    d = tmp_path / "bad"
    d.mkdir()
    (d / "plan.json").write_text(plan.model_dump_json())
    (d / "metrics.json").write_text(json.dumps({"format_version": 1}))
    with pytest.raises(AirflowFailException, match=r"2 of 2 move\(s\) cannot complete") as e:
        sensor(d, submit_pending=True, throttle_bytes_per_sec=1000).execute({})
    assert "name broker 99" in str(e.value)
    assert fake.alter_requests == [] and fake.broker_configs == {b: {} for b in (1, 2, 3, 4)}
    assert "broker 99 does not exist in the cluster" in "\n".join(task_log(capsys))  # the refusal, once


def test_unreachable_cluster_is_tolerated_twice(fake, plan_dir, monkeypatch):
    from airflow_kafka_reassign.exceptions import ClusterUnreachableError

    calls = {"n": 0}
    real = fake.snapshot

    def flaky(**kw):
        calls["n"] += 1
        if calls["n"] <= 2:
            raise ClusterUnreachableError("down for a moment")
        return real(**kw)

    fake.snapshot = flaky
    fake.alter_reassignments({TopicPartition("orders", i): (3, 2) for i in range(3)})
    fake.complete()
    assert sensor(plan_dir).execute({})["status"] == "complete"
    calls["n"] = -10  # three failures in a row end the wait
    fake.snapshot = lambda **kw: (_ for _ in ()).throw(ClusterUnreachableError("gone"))
    with pytest.raises(ClusterUnreachableError):
        sensor(plan_dir).execute({})


# -- reschedule mode ------------------------------------------------------------------------------------------

def test_reschedule_mode_keeps_the_tracker_state_between_pokes(fake, plan_dir):
    fake.alter_reassignments({TopicPartition("orders", i): (3, 2) for i in range(3)})
    fake.every = 2
    store = Store()
    ctx = {"task_state_store": store, "ti": TI()}
    op = sensor(plan_dir, mode="reschedule", poke_interval=60)
    with pytest.raises(AirflowRescheduleException):
        op.execute(ctx)
    first = store.data[STATE_KEY]["state"]
    op2 = sensor(plan_dir, mode="reschedule", poke_interval=60)
    while True:
        try:
            result = op2.execute(ctx)
            break
        except AirflowRescheduleException:
            op2 = sensor(plan_dir, mode="reschedule", poke_interval=60)
    assert result["status"] == "complete"
    assert store.data[STATE_KEY]["state"]["started_at"] == first["started_at"]


# -- deferrable mode and the trigger -------------------------------------------------------------------------

def run_trigger(trigger):
    async def first_event():
        async for event in trigger.run():
            await trigger.cleanup()
            return event.payload
        return None

    return asyncio.run(first_event())


def test_deferrable_mode_defers_then_concludes_from_the_event(fake, plan_dir):
    fake.alter_reassignments({TopicPartition("orders", i): (3, 2) for i in range(3)})
    op = sensor(plan_dir, deferrable=True)
    with pytest.raises(TaskDeferred) as d:
        op.execute({})
    trigger = d.value.trigger
    assert isinstance(trigger, ReassignmentTrigger) and d.value.method_name == "execute_complete"
    event = run_trigger(trigger)
    assert event["status"] == "complete"
    result = op.execute_complete({}, event)
    assert result["done"] == 3 and result["plan_uri"] == str(plan_dir)


def test_trigger_serialisation_round_trip(plan_dir):
    spec = WaitSpec(plan_uri=str(plan_dir), submit_pending=True, execution={"max_moves": 2, "throttle_bytes_per_sec": 100_000})
    trigger = ReassignmentTrigger(spec=spec.to_dict(), started_at=12.5, poke_interval=7,
                                  state={"started_at": 12.5, "last_progress_at": 20.0})
    path, kwargs = trigger.serialize()
    json.dumps(kwargs)
    module, name = path.rsplit(".", 1)
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert again.serialize() == (path, kwargs)
    assert path == "airflow_kafka_reassign.triggers.reassignment.ReassignmentTrigger"


def test_trigger_restart_resumes_from_its_kwargs(fake, plan_dir):
    """A triggerer restart rebuilds the trigger from its serialised kwargs: the wait continues."""
    fake.alter_reassignments({TopicPartition("orders", i): (3, 2) for i in range(3)})
    fake.frozen = True
    spec = WaitSpec(plan_uri=str(plan_dir), timeout_s=3600)
    trigger = ReassignmentTrigger(spec=spec.to_dict(), started_at=time.time(), poke_interval=0.01)

    async def two_polls():
        agen = trigger.run()
        task = asyncio.ensure_future(agen.__anext__())
        await asyncio.sleep(0.1)
        task.cancel()  # the triggerer dies
        await trigger.cleanup()

    asyncio.run(two_polls())
    path, kwargs = trigger.serialize()
    fake.frozen = False
    restarted = ReassignmentTrigger(**kwargs)
    event = run_trigger(restarted)
    assert event["status"] == "complete" and event["summary"]["done"] == 3


def test_trigger_reports_errors_as_events(tmp_path):
    trigger = ReassignmentTrigger(spec={"plan_uri": str(tmp_path / "missing")}, started_at=0)
    event = run_trigger(trigger)
    assert event["status"] == "error" and "does not exist" in event["message"]


def test_trigger_timeout_event_lists_unfinished_moves(fake, plan_dir):
    fake.frozen = True
    fake.alter_reassignments({TopicPartition("orders", 0): (3, 2)})
    spec = WaitSpec(plan_uri=str(plan_dir), timeout_s=0.05)
    event = run_trigger(ReassignmentTrigger(spec=spec.to_dict(), started_at=0, poke_interval=0.01))
    assert event["status"] == "timeout" and "orders-0 (in_flight" in event["message"]
    with pytest.raises(AirflowSensorTimeout, match="orders-0"):
        sensor(plan_dir, deferrable=True).execute_complete({}, event)


def test_execute_complete_refuses_bad_events(plan_dir):
    op = sensor(plan_dir, deferrable=True)
    with pytest.raises(AirflowException, match="unexpected event"):
        op.execute_complete({}, {"status": "weird"})
    with pytest.raises(AirflowException, match="boom"):
        op.execute_complete({}, {"status": "error", "message": "boom"})


def test_poke_return_value_carries_the_summary(fake, plan_dir):
    fake.alter_reassignments({TopicPartition("orders", i): (3, 2) for i in range(3)})
    fake.complete()
    out = sensor(plan_dir).poke({})
    assert isinstance(out, PokeReturnValue) and out.xcom_value["status"] == "complete"


def test_the_python_examples_of_docs_wait_md_run():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "wait.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2
    for block in blocks:
        namespace: dict = {}
        exec(compile(block, "docs/wait.md", "exec"), namespace)
    assert namespace["execute_and_wait"].execution_config().max_moves_per_broker == 2


# -- the health gate and adaptive limits on the submit path (the same RunGovernor as ExecuteReassignment) ----

def unhealthy_fake(monkeypatch, **kw):
    """Three moves of "orders" onto broker 3; "other" has a replica on broker 4, which a test takes down."""
    admin = SteppingFake.build(brokers={1: "r1", 2: "r2", 3: "r3", 4: "r1"},
                               topics={"orders": [[1, 2]] * 3, "other": [[4, 1]]}, **kw)
    for i in range(3):
        admin.sizes[TopicPartition("orders", i)] = {1: MB, 2: MB}
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    return admin


def test_submit_pending_adapts_its_concurrency_like_execute(fake, plan_dir, capsys):
    in_flight_after = in_flight_after_each_submission(fake)
    fake.every = 2  # a move completes every other snapshot: the copy progresses, poke after poke
    result = sensor(plan_dir, submit_pending=True, max_moves=3, adaptive_limits={"min_moves": 1}).execute({})
    assert result["status"] == "complete" and result["submitted"] == 3
    assert in_flight_after[0] == 1  # starts at min_moves, not at max_moves
    log = task_log(capsys)
    assert any("adaptive limits: healthy and progressing: moves 1 -> 2" in line for line in log)  # in the task log
    journal = [e for e in read_journal(plan_dir / RUN_DIR) if e.get("event") == "adapted"]
    assert journal and journal[0]["max_moves"] == 2


def test_submit_pending_pauses_while_unhealthy_and_gives_up_after_max_pause_s(monkeypatch, plan_dir):
    admin = unhealthy_fake(monkeypatch)
    admin.down.add(4)  # "other-0" under-replicated: not this plan's doing
    with pytest.raises(AirflowFailException) as e:
        sensor(plan_dir, submit_pending=True, max_pause_s=0).execute({})
    assert admin.alter_requests == []  # nothing submitted while paused, nor after giving up
    assert "gave up after pausing" in str(e.value) and "max_pause_s=0.0" in str(e.value)
    assert "other-0: replicas [4, 1], ISR [1], missing 4" in str(e.value)


def test_submit_pending_on_unhealthy_cancel_cancels_the_moves_in_flight(monkeypatch, plan_dir):
    admin = unhealthy_fake(monkeypatch)
    admin.frozen = True  # nothing completes by itself
    in_flight_after_each_submission(admin, then=lambda: admin.down.add(4))  # trouble right after the first one
    ti = XComTI()
    with pytest.raises(AirflowFailException) as e:
        sensor(plan_dir, submit_pending=True, max_moves=1, on_unhealthy="cancel").execute({"ti": ti})
    assert "on_unhealthy='cancel'" in str(e.value)
    assert "on_unhealthy=cancel cancelled 1 in-flight move(s)" in str(e.value)
    stop = ti.pushed["summary"]["health_stop"]  # what the policy did, for the DAG: the failing task's XCom
    assert "on_unhealthy='cancel'" in stop["why"]
    assert stop["cancel"]["cancelled"] == 1 and stop["cancel"]["cancelled_partitions"] == ["orders-0"]
    assert not admin.inflight  # the move in flight was cancelled
    assert [p.replicas for p in admin.snapshot(topics=["orders"]).partitions] == [(1, 2)] * 3
    assert not (plan_dir / RUN_DIR / THROTTLE_BACKUP_FILE).exists()


class XComTI:
    dag_id, run_id, task_id, try_number, map_index = "d", "manual__1", "wait", 1, -1

    def __init__(self) -> None:
        self.pushed: dict = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


def test_health_and_adaptive_options_are_validated_at_parse_time(plan_dir):
    with pytest.raises(ConfigurationError, match="on_unhealthy: Input should be 'pause', 'cancel' or 'fail', not 'panic'"):
        sensor(plan_dir, submit_pending=True, on_unhealthy="panic")
    with pytest.raises(ConfigurationError, match=r"adaptive_limits: unknown key\(s\) \['max_move'\]"):
        sensor(plan_dir, submit_pending=True, adaptive_limits={"max_move": 3})
    spec = sensor(plan_dir, submit_pending=True, max_pause_s="60", adaptive_limits={"max_moves": 4}).spec()
    again = WaitSpec(**json.loads(json.dumps(spec.to_dict())))  # the trigger's kwargs
    assert again.config().options().health.max_pause_s == 60.0 and again.config().adaptive().max_moves == 4


# -- a submission deadline (the maintenance window) -------------------------------------------------------------


PAST = "2026-01-01T00:00:00+00:00"


def test_after_the_deadline_nothing_is_submitted_the_moves_in_flight_finish_and_the_wait_succeeds(fake, plan_dir):
    fake.alter_reassignments({TopicPartition("orders", 0): (3, 2)})  # submitted before the window closed
    fake.broker_configs[1][LEADER_RATE] = "999"
    result = sensor(plan_dir, submit_pending=True, max_moves=1, throttle_bytes_per_sec=100_000,
                    deadline=PAST).execute({})
    assert result["status"] == "deadline" and result["submitted"] == 0
    assert (result["done"], result["pending"], result["in_flight"]) == (1, 2, 0)
    assert [targets for targets, _ in fake.alter_requests] == [{TopicPartition("orders", 0): (3, 2)}]  # only ours
    assert result["finish"]["throttles_restored"] in ("yes", "none-set") and fake.broker_configs[1] == {LEADER_RATE: "999"}


def test_before_the_deadline_the_sensor_submits_as_usual(fake, plan_dir):
    result = sensor(plan_dir, submit_pending=True, max_moves=1, deadline="2999-01-01T00:00:00Z").execute({})
    assert result["status"] == "complete" and result["submitted"] == 3


def test_the_deadline_reaches_the_trigger_and_ends_a_deferred_wait(fake, plan_dir):
    fake.alter_reassignments({TopicPartition("orders", 0): (3, 2)})
    fake.frozen = True  # the move in flight finishes only when the trigger has polled once
    op = sensor(plan_dir, submit_pending=True, deferrable=True, deadline=PAST)
    with pytest.raises(TaskDeferred) as d:
        op.execute({})
    trigger = d.value.trigger
    assert WaitSpec(**trigger.spec).submit_until == PAST
    fake.frozen = False
    event = run_trigger(trigger)
    assert event["status"] == "deadline" and "1/3 move(s) done and 2 not submitted (orders-1 (pending" in event["message"]
    assert op.execute_complete({}, event)["status"] == "deadline"
    assert len(fake.alter_requests) == 1


@pytest.mark.parametrize(("kw", "error"), [
    ({"submit_pending": True, "deadline": "2h"}, "deadline '2h' is not a date-time.*a duration would restart"),
    ({"deadline": PAST}, "deadline bounds the submissions of submit_pending=True"),
])
def test_a_bad_deadline_is_refused_in_one_line(plan_dir, kw, error):
    with pytest.raises(ConfigurationError, match=error):
        sensor(plan_dir, **kw)


# -- what outlives one submitter: the plan execute ran, a health policy's stop (review of 2026-11-24) ----------


def test_the_sensor_submits_nothing_from_a_plan_edited_after_execute_ran_it(fake, plan_dir):
    from airflow_kafka_reassign.core.execution.run_state import PLAN_EXECUTED
    from airflow_kafka_reassign.core.records.journal import journal

    journal(plan_dir / RUN_DIR, {"event": PLAN_EXECUTED, "plan_sha256": "sha256:what-execute-ran-and-was-approved"})
    with pytest.raises((ConfigurationError, AirflowFailException), match="changed since ExecuteReassignment ran it"):
        sensor(plan_dir, submit_pending=True).execute({})
    assert fake.alter_requests == []


def test_a_health_stop_outlives_the_submitter_of_the_same_try_but_not_a_new_try(fake, plan_dir):
    from airflow_kafka_reassign.core.execution.run_state import HEALTH_STOPPED
    from airflow_kafka_reassign.core.records.journal import journal

    def spec(try_number):
        return WaitSpec(plan_uri=str(plan_dir), kafka_config_id="k", submit_pending=True,
                        lease_holder=f"dag d / run r / task wait / try {try_number} on host (pid {try_number})",
                        lease_scope="d/r")

    journal(plan_dir / RUN_DIR, {"event": HEALTH_STOPPED, "holder": "dag d / run r / task wait / try 1",
                                 "why": "stopped by the health gate, on_unhealthy='cancel': ..."})
    same_try = spec(1)
    outcome = same_try.submitter(same_try.load_plan())(fake)  # rebuilt (a reschedule poke, the triggerer)
    assert outcome.submitted == 0 and fake.alter_requests == []
    assert all(why.startswith("not sent: stopped by the health gate") for why in outcome.refused.values())
    assert len(outcome.refused) == 3
    new_try = spec(2)  # cleared once the cluster is healthy: it resumes
    assert new_try.submitter(new_try.load_plan())(fake).submitted > 0


def test_a_poke_that_submits_reads_the_cluster_once(fake, plan_dir):
    """The submitter's step and the progress line share one snapshot and one DescribeLogDirs per poke."""
    spec = WaitSpec(plan_uri=str(plan_dir), kafka_config_id="k", submit_pending=True, execution={"max_moves": 1})
    watch = spec.watch(started_at=0, admin=fake)
    fake.frozen = True  # nothing completes: every poke has moves in flight
    before = dict(fake.calls)
    progress = watch.poke(fake, now=1)
    calls = {k: v - before.get(k, 0) for k, v in fake.calls.items() if v != before.get(k, 0)}
    # one snapshot (every topic: the health gate's, which needs no listing of its own); one DescribeLogDirs of the
    # plan's partitions: it orders the batch (max_moves), and the copy watch and the line reuse it
    assert calls.get("snapshot") == 1 and calls.get("replica_sizes") == 1 and "list_reassignments" not in calls
    assert progress.submitted == 1 and progress.observation.in_flight == 1 and progress.observation.pending == 2
    assert progress.observation.bytes_total == 3 * MB  # sizes measured by that one DescribeLogDirs


def _try_spec(plan_dir, try_number=1, **kw):
    return WaitSpec(plan_uri=str(plan_dir), kafka_config_id="k", submit_pending=True,
                    lease_holder=f"dag d / run r / task wait / try {try_number} on host-{try_number} (pid 9)",
                    lease_scope="d/r", **kw)


def test_a_pause_outlives_the_submitter_so_max_pause_s_holds_across_reschedules(monkeypatch, plan_dir):
    """Each reschedule poke (and the deferral, a triggerer restart) builds a new submitter: the pause clock
    goes on from the journal, else a sensor rescheduled more often than max_pause_s would pause forever."""
    admin = unhealthy_fake(monkeypatch)
    admin.down.add(4)  # "other-0" under-replicated: submissions pause
    clock = [1_000_000.0]
    monkeypatch.setattr("airflow_kafka_reassign.core.execution.session.time.time", lambda: clock[0])
    spec = _try_spec(plan_dir, execution={"max_pause_s": 60})
    first = spec.submitter(spec.load_plan())(admin)
    assert first.submitted == 0 and first.blocked is None  # paused, not stopped
    clock[0] += 45
    again = _try_spec(plan_dir, execution={"max_pause_s": 60})  # rebuilt: a reschedule poke
    assert again.submitter(again.load_plan())(admin).blocked is None  # 45 s < 60 s
    clock[0] += 30
    third = _try_spec(plan_dir, execution={"max_pause_s": 60})
    stopped = third.submitter(third.load_plan())(admin)
    assert stopped.blocked and "gave up after pausing" in stopped.blocked and admin.alter_requests == []
    # a new try starts its own clock (cleared once the cluster is healthy)
    assert _try_spec(plan_dir, 2, execution={"max_pause_s": 60}).submitter(
        spec.load_plan())(admin).blocked is None


def test_the_adaptive_limits_grow_across_rebuilt_submitters(plan_dir, monkeypatch):
    """A new submitter at every poke (reschedule mode): the limits go on from the last poke's and still grow while
    healthy and progressing (the done count and the copy watch are carried too, not only the limits)."""
    from airflow_kafka_reassign.core.execution import RunGovernor

    d = plan_dir.parent / "many"
    d.mkdir()
    plan_dir12, _ = write_plan(d, n=12)
    fake = build_fake(12)
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: fake)
    fake.every = 2  # a move completes every other snapshot
    seen: list[int] = []
    orig = RunGovernor.for_step
    monkeypatch.setattr(RunGovernor, "for_step",
                        lambda self, limits, options: seen.append(self.current.moves) or orig(self, limits, options))
    for _ in range(30):
        spec = _try_spec(plan_dir12, execution={"max_moves": 6, "adaptive_limits": {"min_moves": 1}})  # rebuilt every poke
        spec.submitter(spec.load_plan())(fake)
    adapted = [e["max_moves"] for e in read_journal(plan_dir12 / RUN_DIR) if e.get("event") == "adapted"]
    assert adapted[:2] == [2, 3] and max(seen) >= 3, (adapted, seen)
    assert all(e.get("holder") == "dag d / run r / task wait / try 1"
               for e in read_journal(plan_dir12 / RUN_DIR) if e.get("event") == "adapted")
    other = _try_spec(plan_dir12, 2, execution={"max_moves": 6, "adaptive_limits": {"min_moves": 1}})  # a new try starts over
    seen.clear()
    other.submitter(other.load_plan())(fake)
    assert seen[0] == 1


def test_the_disk_guard_ends_the_wait_blocked_when_nothing_fits_and_nothing_is_in_flight(fake, plan_dir):
    fake.disk_total[3] = MB // 2  # every move adds broker 3, each partition is 1 MB
    with pytest.raises(AirflowFailException, match=r"3 of 3 move\(s\) cannot complete") as e:
        sensor(plan_dir, submit_pending=True, disk_reserve="0").execute({})
    assert "orders-0 (failed: submission refused: not sent, disk guard: needs 1.0 MB on broker 3: 0 B free, " \
           "reserve 0 B)" in str(e.value)
    assert fake.alter_requests == []


def test_a_damaged_governor_object_costs_the_adaptive_state_not_the_run(fake, plan_dir):
    from airflow_kafka_reassign.core.execution.run_state import _governor_name

    key = "dag d / run r / task wait / try 1"
    (plan_dir / RUN_DIR / "governor").mkdir(parents=True)
    (plan_dir / RUN_DIR / _governor_name(key)).write_text("{not json")
    spec = _try_spec(plan_dir, execution={"max_moves": 3, "adaptive_limits": {"min_moves": 1}})
    assert spec.submitter(spec.load_plan())(fake).submitted == 1  # from min_moves, afresh
    (plan_dir / RUN_DIR / _governor_name(key)).write_text(json.dumps({"holder": key, "governor": {"current": "x"}}))
    again = _try_spec(plan_dir, execution={"max_moves": 3, "adaptive_limits": {"min_moves": 1}})
    # afresh again: min_moves (1), not max_moves (3), and not a failed poke; the first move finished meanwhile
    # (the stepping fake completes one per snapshot), so exactly one more, orders-1, goes out
    assert again.submitter(again.load_plan())(fake).submitted == 1
    assert [list(targets) for targets, _ in fake.alter_requests] == [[TopicPartition("orders", 0)],
                                                                     [TopicPartition("orders", 1)]]
    saved = json.loads((plan_dir / RUN_DIR / _governor_name(key)).read_text())  # and a sound state kept for the next
    assert saved["holder"] == key and saved["governor"]["current"] == [1, None] and saved["done"] == 1
