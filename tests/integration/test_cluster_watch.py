"""KafkaClusterWatchTrigger against the real sandbox (issue 37): its ``run()`` in asyncio, as the triggerer runs it,
with short dwell times, while a broker is stopped and started.

* a broker stopped past its dwell fires exactly ONE ``broker_down`` incident naming it (and no second one in the
  polls that follow), and librdkafka's own DescribeCluster (a second observer) no longer lists that broker;
* a broker restarted within its dwell fires nothing (the watch did see it down: its state says so);
* a trigger rebuilt (a new instance, the same ``state_uri``) after the broker has been down for part of the dwell
  fires once, at the first-seen time the first trigger recorded plus the dwell, not its own start plus the dwell.

Every test restarts the broker it stopped, so the session's cluster is left as found. No sleeps in the tests: they
wait on the trigger's own polls (its ``poll_interval_s`` is the product's pause), counted.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from airflow_kafka_reassign.core.healing.incident import Incident
from airflow_kafka_reassign.core.healing.watch import WatchStep, state_name
from airflow_kafka_reassign.kafka.config import to_confluent
from airflow_kafka_reassign.triggers.cluster_watch import KafkaClusterWatchTrigger

DOWN = 5  # not a KRaft voter: stopping it leaves the quorum whole
CONN = "kafka_watch"
#: An upper bound on any one wait of these tests (a stuck test fails, naming what it waited for).
BOUND_S = 300.0


@pytest.fixture
def conn(sandbox, monkeypatch) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps({"conn_type": "kafka", "extra": sandbox.client_config()}))
    return CONN


@pytest.fixture
def broker_restored(sandbox):
    """Broker :data:`DOWN` running again after the test, whatever happened."""
    yield
    if not any(n["alive"] for n in sandbox.status()["nodes"] if n["id"] == DOWN):
        sandbox.start_broker(DOWN)


class Run:
    """A trigger's ``run()`` driven in asyncio; every poll's step and every event recorded."""

    def __init__(self, trigger: KafkaClusterWatchTrigger) -> None:
        self.trigger = trigger
        self.steps: list[WatchStep] = []
        self.events: list[Incident] = []
        self._polled = threading.Condition()
        real = trigger.poll

        def poll(now: Any = None) -> WatchStep:
            step = real(now)
            with self._polled:
                self.steps.append(step)
                self._polled.notify_all()
            return step

        trigger.poll = poll  # type: ignore[method-assign]

    async def until(self, what: str, done: Callable[[Run], bool]) -> None:
        """Run the trigger until ``done(self)`` holds after a poll (an event counts once it is yielded)."""
        async def consume() -> None:
            async for event in self.trigger.run():
                self.events.append(Incident.from_payload(event.payload))

        task = asyncio.create_task(consume())
        try:
            while not done(self):
                seen = len(self.steps)
                await asyncio.wait_for(asyncio.to_thread(self._wait_poll, seen), BOUND_S)
                await asyncio.sleep(0)  # let the consumer take an event yielded after that poll
                if task.done():
                    task.result()  # a trigger that stopped: its error
                    raise AssertionError(f"the trigger stopped while waiting for {what}")
        except TimeoutError:
            raise AssertionError(f"no poll within {BOUND_S} s while waiting for {what}") from None
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await self.trigger.cleanup()

    def _wait_poll(self, seen: int) -> None:
        with self._polled:
            self._polled.wait_for(lambda: len(self.steps) > seen, BOUND_S)

    def changes(self) -> list[str]:
        return [c for s in self.steps for c in s.changes]


def trigger(tmp_path, conn: str, dwell_s: float, **kw: Any) -> KafkaClusterWatchTrigger:
    return KafkaClusterWatchTrigger(kafka_conn_id=conn, state_uri=str(tmp_path / "watch"), cluster="sandbox",
                                    kinds=["broker_down"], dwell_s={"broker_down": dwell_s}, poll_interval_s=1.0,
                                    kafka_timeout_s=15.0, **kw)


def listed_brokers(sandbox) -> set[int]:
    """The brokers librdkafka's DescribeCluster lists (unfenced): the second observer, sharing no code with the watch."""
    client = AdminClient(to_confluent(sandbox.client_config(), timeout_s=15))
    return {n.id for n in client.describe_cluster(request_timeout=15).result(timeout=30).nodes}


def test_a_stopped_broker_fires_exactly_one_broker_down_incident_naming_it(sandbox, conn, tmp_path, broker_restored):
    sandbox.stop_broker(DOWN)
    assert DOWN not in listed_brokers(sandbox)
    run = Run(trigger(tmp_path, conn, dwell_s=5.0))
    fired_at_poll: list[int] = []

    def fired_then_five_more_polls(r: Run) -> bool:
        if r.events and not fired_at_poll:
            fired_at_poll.append(len(r.steps))
        return bool(fired_at_poll) and len(r.steps) >= fired_at_poll[0] + 5

    asyncio.run(run.until("one incident and five polls after it", fired_then_five_more_polls))
    assert [(i.kind, i.brokers, i.cluster) for i in run.events] == [("broker_down", (DOWN,), "sandbox")]
    incident = run.events[0]
    assert incident.last_seen - incident.first_seen >= timedelta(seconds=5)
    assert incident.id == f"sandbox/broker_down/b{DOWN}/{incident.first_seen.strftime('%Y%m%dT%H%M%SZ')}"
    stored = json.loads((tmp_path / "watch" / state_name("sandbox")).read_text())
    assert stored["conditions"][f"broker_down/b{DOWN}"]["fired"] == incident.id
    sandbox.start_broker(DOWN)
    assert DOWN in listed_brokers(sandbox)


def test_a_broker_restarted_within_its_dwell_fires_nothing(sandbox, conn, tmp_path, broker_restored):
    run = Run(trigger(tmp_path, conn, dwell_s=600.0))
    restarted = threading.Event()

    def restart() -> None:
        try:
            sandbox.stop_broker(DOWN)
            with run._polled:  # the watch sees it down at least once
                run._polled.wait_for(lambda: any("seen" in c for c in run.changes()), BOUND_S)
            sandbox.start_broker(DOWN)
        finally:
            restarted.set()

    async def scenario() -> None:
        worker = asyncio.create_task(asyncio.to_thread(restart))
        await run.until("the restart to be seen and cleared",
                        lambda r: restarted.is_set() and any("nothing fired" in c for c in r.changes()))
        await worker

    asyncio.run(scenario())
    changes = run.changes()
    assert any(c.startswith(f"broker_down/b{DOWN}: seen") for c in changes), changes
    assert any(c.startswith(f"broker_down/b{DOWN}: cleared after") and "nothing fired" in c for c in changes), changes
    assert run.events == []
    assert DOWN in listed_brokers(sandbox)
    assert json.loads((tmp_path / "watch" / state_name("sandbox")).read_text())["conditions"] == {}


def test_a_rebuilt_trigger_fires_once_at_the_first_triggers_first_seen_plus_the_dwell(sandbox, conn, tmp_path,
                                                                                      broker_restored):
    dwell = 20.0
    sandbox.stop_broker(DOWN)
    first = Run(trigger(tmp_path, conn, dwell_s=dwell))
    state_file = tmp_path / "watch" / state_name("sandbox")

    def first_seen() -> Any:
        record = json.loads(state_file.read_text())["conditions"][f"broker_down/b{DOWN}"]
        from datetime import datetime
        return datetime.fromisoformat(record["first_seen"])

    # the first trigger runs until the broker has been down for half the dwell in its view, then is killed
    asyncio.run(first.until("half the dwell", lambda r: bool(r.steps) and bool(r.steps[-1].state.conditions) and (
        r.steps[-1].state.conditions[f"broker_down/b{DOWN}"].last_seen - first_seen()).total_seconds() >= dwell / 2))
    assert first.events == []
    seen_at = first_seen()

    second = Run(trigger(tmp_path, conn, dwell_s=dwell))  # rebuilt from the same arguments
    started: list[Any] = []
    fired_at_poll: list[int] = []

    def fired_then_five_more_polls(r: Run) -> bool:
        if not started and r.steps:
            started.append(r.steps[0].state.conditions[f"broker_down/b{DOWN}"].last_seen)
        if r.events and not fired_at_poll:
            fired_at_poll.append(len(r.steps))
        return bool(fired_at_poll) and len(r.steps) >= fired_at_poll[0] + 5

    asyncio.run(second.until("the incident and five polls after it", fired_then_five_more_polls))
    assert len(second.events) == 1
    incident = second.events[0]
    assert incident.first_seen == seen_at  # the dwell counted from the first trigger's first sight
    assert incident.last_seen >= seen_at + timedelta(seconds=dwell)
    # fired before the rebuilt trigger's own start plus the dwell: it did not start the dwell again
    assert incident.last_seen < started[0] + timedelta(seconds=dwell)
    sandbox.start_broker(DOWN)
    assert DOWN in listed_brokers(sandbox)


def test_one_poll_reads_log_dirs_without_partitions_and_folds_every_partition(sandbox, unique_topic):
    """The watch's requests on the real cluster: DescribeLogDirs with Topics=[] gives every live broker's log dirs
    with their space and NO replica; the folded Metadata counts what librdkafka's own Metadata (the second
    observer) lists, and a topic's min.insync.replicas is read from its config."""
    from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
    from airflow_kafka_reassign.kafka.workload import create_topic

    config = sandbox.client_config()
    create_topic(config, unique_topic, [[1, 2], [2, 3], [3, 4]], timeout_s=60)
    client = AdminClient(to_confluent(config, timeout_s=15))
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    resource = ConfigResource(ConfigResource.Type.TOPIC, unique_topic, incremental_configs=[
        ConfigEntry("min.insync.replicas", "3", incremental_operation=AlterConfigOpType.SET)])
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        dirs = admin.log_dirs(())
        health = admin.partition_health()
    assert sorted(dirs.dirs) == sorted(sandbox.broker_ids) and dirs.sizes == {}
    assert all(d.total_bytes and d.usable_bytes is not None and d.replicas == () for ds in dirs.dirs.values() for d in ds)
    assert sorted(dirs.space) == sorted(sandbox.broker_ids)
    md = client.list_topics(timeout=30)
    replicas: dict[int, int] = {}
    for t in md.topics.values():
        for p in t.partitions.values():
            for b in p.replicas:
                replicas[b] = replicas.get(b, 0) + 1
    assert health.partitions == sum(len(t.partitions) for t in md.topics.values())
    assert health.replicas == replicas
    # RF 2 below min.insync.replicas 3: always under it by configuration, counted apart, not an incident
    assert health.min_isr_above_rf >= 3 and all(tp.topic != unique_topic for tp in health.under_min_isr_sample)
