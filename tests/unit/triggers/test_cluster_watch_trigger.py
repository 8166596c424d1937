"""KafkaClusterWatchTrigger on the fake cluster: its serialisation round-trip, its arguments checked at the DAG's
import, one event per incident with the incident's payload, a rebuilt trigger (from its serialised arguments)
resuming from the state, and the back-off of a failing watch. The trigger's clock and pause are the test's own:
nothing waits. The real cluster: tests/integration/test_cluster_watch.py."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_kafka_reassign.core.healing.incident import Incident
from airflow_kafka_reassign.core.healing.ledger import outcome
from airflow_kafka_reassign.exceptions import ClusterUnreachableError
from airflow_kafka_reassign.get_provider_info import get_provider_info
from airflow_kafka_reassign.operators.healing import healing_ledger
from airflow_kafka_reassign.testing import FakeClusterAdmin
from airflow_kafka_reassign.triggers.cluster_watch import MAX_BACKOFF_S, KafkaClusterWatchTrigger, backoff_s

T0 = datetime(2026, 12, 3, 6, 0, tzinfo=timezone.utc)


def fake() -> FakeClusterAdmin:
    return FakeClusterAdmin.build(brokers={1: "r1", 2: "r2", 3: "r3"}, topics={"orders": [[1, 2], [2, 3], [3, 1]]})


class Clock:
    """The trigger's clock and pause: each pause moves the clock on, and the run stops after ``polls`` pauses."""

    def __init__(self, polls: int, start: datetime = T0) -> None:
        self.now = start
        self.left = polls
        self.pauses: list[float] = []

    def __call__(self) -> datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += timedelta(seconds=seconds)
        self.left -= 1
        if self.left <= 0:
            raise asyncio.CancelledError  # the triggerer stopping the trigger


def run(trigger: KafkaClusterWatchTrigger, admin: Any, clock: Clock) -> list[dict[str, Any]]:
    trigger._clock, trigger._sleep = clock, clock.sleep
    trigger._log = logging.getLogger("test.cluster_watch")  # a stdlib logger (Airflow's is structlog): caplog sees it
    trigger.make_admin = (lambda: admin) if not callable(admin) or isinstance(admin, FakeClusterAdmin) else admin

    async def collect() -> list[dict[str, Any]]:
        events = []
        try:
            async for event in trigger.run():
                events.append(event.payload)
        except asyncio.CancelledError:
            pass
        await trigger.cleanup()
        return events

    return asyncio.run(collect())


def watch(tmp_path, **kw: Any) -> KafkaClusterWatchTrigger:
    return KafkaClusterWatchTrigger(kafka_conn_id="kafka_prod", state_uri=str(tmp_path / "state"),
                                    kinds=["broker_down"], poll_interval_s=30, **kw)


def test_serialize_round_trips_and_the_rebuilt_trigger_is_the_same(tmp_path):
    trigger = KafkaClusterWatchTrigger(
        kafka_conn_id="kafka_prod", state_uri="s3://plans/watch", cluster="prod", kinds=["broker_down", "imbalance"],
        dwell_s={"broker_down": 300}, recovery_s={"imbalance": 7200}, poll_interval_s=15, log_dir_full_ratio=0.9,
        imbalance_band=0.3, kafka_timeout_s=20, storage_conn_id="aws_plans", storage_timeout_s=10)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_kafka_reassign.triggers.cluster_watch.KafkaClusterWatchTrigger"
    rebuilt = KafkaClusterWatchTrigger(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert rebuilt.settings == trigger.settings and rebuilt.settings.dwell("broker_down") == 300
    assert all(isinstance(v, (str, int, float, list, dict, type(None))) for v in kwargs.values())


def test_wrong_arguments_fail_at_the_dags_import_naming_them():
    with pytest.raises(ValueError, match="'broker_gone' is not an incident kind"):
        KafkaClusterWatchTrigger(state_uri="/tmp/w", dwell_s={"broker_gone": 1})
    with pytest.raises(ValueError, match="log_dir_full_ratio"):
        KafkaClusterWatchTrigger(state_uri="/tmp/w", log_dir_full_ratio=1.5)


def test_without_state_uri_the_watch_keeps_its_state_where_the_healing_dags_keep_theirs(tmp_path, monkeypatch):
    """No ``state_uri``: the Variables ``akr_plan_storage`` / ``akr_storage_conn_id`` (the healing tasks' and the plans'
    storage), read when the watch starts, not at the DAG's import; an explicit ``storage_conn_id`` wins."""
    trigger = KafkaClusterWatchTrigger(kinds=["broker_down"])
    assert trigger.serialize()[1]["state_uri"] is None and trigger.serialize()[1]["storage_conn_id"] is None
    monkeypatch.setenv("AIRFLOW_VAR_AKR_PLAN_STORAGE", "s3://kafka-plans/airflow")
    monkeypatch.setenv("AIRFLOW_VAR_AKR_STORAGE_CONN_ID", "aws_plans")
    assert trigger.storage() == ("s3://kafka-plans/airflow", "aws_plans")
    assert KafkaClusterWatchTrigger(storage_conn_id="mine").storage() == ("s3://kafka-plans/airflow", "mine")
    assert KafkaClusterWatchTrigger(state_uri=str(tmp_path)).storage() == (str(tmp_path), None)
    monkeypatch.setenv("AIRFLOW_VAR_AKR_PLAN_STORAGE", str(tmp_path / "plans"))
    monkeypatch.delenv("AIRFLOW_VAR_AKR_STORAGE_CONN_ID")
    admin = fake()
    admin.down.add(3)
    events = run(KafkaClusterWatchTrigger(kafka_conn_id="kafka_prod", kinds=["broker_down"]), admin, Clock(polls=40))
    assert len(events) == 1
    assert (tmp_path / "plans" / "cluster-watch" / "kafka_prod.json").is_file()


def test_without_the_variable_the_state_stays_on_the_triggerers_disk_and_says_so(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("AIRFLOW_VAR_AKR_PLAN_STORAGE", raising=False)
    monkeypatch.setenv("AKR_OUTPUT_DIR", str(tmp_path / "local"))
    trigger = KafkaClusterWatchTrigger(kinds=["broker_down"])
    trigger._log = logging.getLogger("test.cluster_watch")
    caplog.set_level(logging.WARNING)
    assert trigger.storage() == (str(tmp_path / "local"), None)
    assert "akr_plan_storage is not set" in caplog.text and "another triggerer does not see" in caplog.text


def test_the_trigger_is_listed_in_the_provider_info():
    modules = [m for t in get_provider_info()["triggers"] for m in t["python-modules"]]
    assert "airflow_kafka_reassign.triggers.cluster_watch" in modules


def test_a_broker_down_past_its_dwell_is_one_event_with_the_incidents_payload(tmp_path, caplog):
    admin = fake()
    admin.down.add(3)
    caplog.set_level(logging.INFO)
    events = run(watch(tmp_path), admin, Clock(polls=40))  # 20 minutes of 30 s polls
    assert len(events) == 1
    incident = Incident.from_payload(events[0])
    assert (incident.kind, incident.brokers, incident.cluster) == ("broker_down", (3,), "kafka_prod")
    assert incident.first_seen == T0 and incident.last_seen == T0 + timedelta(minutes=10)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "cluster watch" in r.getMessage()]
    assert len(lines) == 2 and "seen" in lines[0] and f"incident {incident.id} fired" in lines[1]


def test_a_trigger_rebuilt_from_its_arguments_resumes_from_the_state(tmp_path):
    admin = fake()
    admin.down.add(3)
    first = watch(tmp_path)
    assert run(first, admin, Clock(polls=16)) == []  # 8 minutes, then the triggerer goes away
    rebuilt = KafkaClusterWatchTrigger(**first.serialize()[1])
    events = run(rebuilt, admin, Clock(polls=14, start=T0 + timedelta(minutes=8, seconds=30)))  # to 15 minutes
    assert [Incident.from_payload(e).last_seen for e in events] == [T0 + timedelta(minutes=10)]
    # a healing run decided on it (its ledger beside the state): a rebuilt trigger never fires it again
    healing_ledger(str(tmp_path / "state"), "kafka_prod").record(
        outcome(Incident.from_payload(events[0]), "act", "drain broker(s) [3]", at=T0 + timedelta(minutes=11)))
    again = KafkaClusterWatchTrigger(**first.serialize()[1])
    assert run(again, admin, Clock(polls=10, start=T0 + timedelta(minutes=40))) == []


def test_an_incident_no_healing_run_decided_on_is_fired_again_with_its_id_until_one_does(tmp_path, caplog):
    """An asset event Airflow left without a DAG run (two events of one asset in one poll: one run consumed the first
    only): the trigger fires the incident again, same id, after refire_after_s, then twice as long; a run's decision
    on the healing ledger (under the same plan storage) stops it."""
    admin = fake()
    admin.down.add(3)
    caplog.set_level(logging.INFO)
    events = run(watch(tmp_path, refire_after_s=300), admin, Clock(polls=60))  # 30 minutes, nobody decides
    fired = [(Incident.from_payload(e).id, Incident.from_payload(e).last_seen - T0) for e in events]
    first = fired[0][0]
    assert fired == [(first, timedelta(minutes=m)) for m in (10, 15, 25)], fired  # after 5, then 10 minutes
    assert any("fired again: no healing run has decided on it" in r.getMessage() for r in caplog.records)
    healing_ledger(str(tmp_path / "state"), "kafka_prod").record(
        outcome(Incident.from_payload(events[-1]), "handled", "run r1 healed it", at=T0 + timedelta(minutes=30)))
    assert run(watch(tmp_path, refire_after_s=300), admin, Clock(polls=120, start=T0 + timedelta(minutes=30))) == []
    # cleared: nothing is fired again either
    admin.down.discard(3)
    other = tmp_path / "other"
    admin.down.add(3)
    assert len(run(watch(other, refire_after_s=300), admin, Clock(polls=21))) == 1  # fired at 10 minutes
    admin.down.discard(3)
    assert run(watch(other, refire_after_s=300), admin, Clock(polls=60, start=T0 + timedelta(minutes=10, seconds=30))) == []


def test_a_failing_watch_backs_off_and_makes_its_admin_again(tmp_path, caplog):
    admin = fake()
    admin.down.add(3)
    made: list[int] = []

    def make_admin() -> FakeClusterAdmin:
        made.append(1)
        if len(made) <= 5:
            raise ClusterUnreachableError("bootstrap.servers=kafka:9092 did not answer within 30 s")
        return admin

    clock = Clock(polls=8)
    caplog.set_level(logging.WARNING)
    run(watch(tmp_path), make_admin, clock)
    assert clock.pauses == [30, 60, 120, 240, 480, 30, 30, 30]
    assert len(made) == 6  # made again after each failure; kept once it works
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 5 and "poll failed (5 in a row), next in 480 s" in warnings[-1]


def test_backoff_doubles_up_to_its_cap():
    assert [backoff_s(n, 30) for n in range(8)] == [30, 30, 60, 120, 240, 480, 600, 600]
    assert backoff_s(3, 900) == 900 and MAX_BACKOFF_S == 600  # never shorter than the poll interval
