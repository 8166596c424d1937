"""The pre-flight's plan errors on the sandbox: hand-edited or outdated plans given to ExecuteReassignmentOperator.

Each plan is refused whole before any request that changes the cluster is sent (no throttle config, no
reassignment, no rollback written by the task), and the task fails with a message that names the problem (a broker
id, a topic and both partition counts, a deleted topic), not "unreachable". Every test takes an assignment dump of
the whole cluster (every partition's replicas, every broker's and topic's throttle configs, the controller's
in-flight reassignments) before and after, and they must be identical. A plan that is only outdated (a topic grown or
deleted since planning) is not refused: its other moves run (issue 36). The operator runs in-process through the
real hook and adapter (SASL), with a recorder around the adapter that lists every call that writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka_helpers import BROKERS, TI, delete_topics, make_topic, replicas_of, wait_until, write_plan_dir

from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator

CONN_ID = "kafka_preflight"
#: The port methods that change the cluster.
WRITES = ("alter_reassignments", "cancel_reassignments", "set_throttles", "create_partitions",
          "elect_preferred_leaders")


class Recorder:
    """The real adapter, with every call of a method that changes the cluster recorded."""

    def __init__(self, admin: KafkaClusterAdmin) -> None:
        self._admin = admin
        self.writes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._admin, name)
        if name in WRITES:
            def record(*a: Any, **kw: Any) -> Any:
                self.writes.append(name)
                return attr(*a, **kw)
            return record
        return attr


@pytest.fixture
def config(sandbox) -> dict[str, str]:
    return sandbox.client_config()


@pytest.fixture
def recorders(sandbox, monkeypatch) -> list[Recorder]:
    """The operator's admin (through the hook and a ``kafka`` connection over SASL), recorded."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}",
                       json.dumps({"conn_type": "kafka", "extra": sandbox.client_config(sasl=True)}))
    made: list[Recorder] = []
    real = KafkaReassignHook.get_admin

    def get_admin(self: KafkaReassignHook) -> Recorder:
        made.append(Recorder(real(self)))
        return made[-1]

    monkeypatch.setattr(KafkaReassignHook, "get_admin", get_admin)
    return made


@pytest.fixture
def topics(config) -> Iterator[list[str]]:
    """Topics the test creates; deleted at the end."""
    created: list[str] = []
    yield created
    delete_topics(config, [t for t in created if replicas_of(config, t)])


def new_topic(config: dict[str, str], topics: list[str], name: str, assignment: list[list[int]]) -> str:
    make_topic(config, name, assignment)
    topics.append(name)
    return name


def dump(config: dict[str, str]) -> dict[str, Any]:
    """The whole cluster's assignment: every partition's replicas, every throttle config, what is in flight."""
    with KafkaClusterAdmin(config) as admin:
        snap = admin.snapshot()
        names = sorted({p.topic for p in snap.partitions})
        return {
            "replicas": {f"{p.topic}-{p.partition}": list(p.replicas) for p in snap.partitions},
            "throttles": admin.describe_throttles(BROKERS, names).model_dump(),
            "reassignments": sorted(str(tp) for tp in admin.list_reassignments()),
        }


def execute(plan_dir: Path) -> tuple[str, dict[str, Any]]:
    """Run the operator on ``plan_dir`` with a throttle; returns its failure message and the summary it pushed."""
    ti = TI()
    operator = ExecuteReassignmentOperator(task_id="execute", plan_uri=str(plan_dir), kafka_config_id=CONN_ID,
                                           throttle_bytes_per_sec=1_000_000, poll_interval=0.5, kafka_timeout_s=20)
    with pytest.raises(AirflowFailException) as e:
        operator.execute({"ti": ti})
    return str(e.value), ti.pushed["summary"]


def refused_before_anything_is_sent(config, recorders: list[Recorder], plan_dir: Path, before: dict) -> str:
    message, summary = execute(plan_dir)
    assert dump(config) == before
    assert [r.writes for r in recorders] == [[]]  # not one request that changes the cluster
    assert not (plan_dir / "run" / "throttle-backup.json").exists()
    assert summary["submitted"] == 0 and summary["blocked"] and summary["plan_errors"]
    assert "the plan was refused: the whole plan is refused" in message
    assert "Plan again from the current cluster" in message
    assert "unreachable" not in message.lower() and "did not answer" not in message
    return message


def test_a_replica_on_broker_99_is_refused_before_anything_is_sent(config, recorders, topics, unique_topic, tmp_path):
    topic = new_topic(config, topics, unique_topic, [[1, 2], [2, 3], [3, 4]])
    plan = ReassignmentPlan(moves=(
        Move(topic=topic, partition=0, current_replicas=(1, 2), target_replicas=(1, 3)),  # a sound move
        Move(topic=topic, partition=1, current_replicas=(2, 3), target_replicas=(2, 99)),  # hand-edited
        Move(topic=topic, partition=2, current_replicas=(3, 4), target_replicas=(5, 4)),
    ), partition_counts={topic: 3})
    plan_dir = write_plan_dir(tmp_path / "plan", plan)
    before = dump(config)
    message = refused_before_anything_is_sent(config, recorders, plan_dir, before)
    assert "broker 99 does not exist in the cluster" in message
    assert "live brokers: 1, 2, 3, 4, 5" in message and f"{topic}-1 -> [2, 99]" in message


def executes(plan_dir: Path) -> dict[str, Any]:
    """Run the operator on ``plan_dir`` with a throttle, to the end; returns the summary it pushed."""
    return ExecuteReassignmentOperator(task_id="execute", plan_uri=str(plan_dir), kafka_config_id=CONN_ID,
                                       throttle_bytes_per_sec=1_000_000, poll_interval=0.5,
                                       kafka_timeout_s=20).execute({"ti": TI()})


def throttle_configs(config: dict[str, str], topics: list[str]) -> dict[str, dict[str, str]]:
    """Every broker's and the topics' dynamic throttle configs, read with a client of the test's own."""
    from confluent_kafka.admin import ConfigResource

    client = AdminClient(dict(config))
    out = {}
    # librdkafka takes one broker resource per describe_configs call
    for group in [[ConfigResource(ConfigResource.Type.BROKER, str(b))] for b in BROKERS] + [
            [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]]:
        for res, fut in client.describe_configs(group, request_timeout=30).items():
            out[f"{res.restype}:{res.name}"] = {k: e.value for k, e in fut.result(60).items() if "throttled" in k}
    return out


def test_a_topic_grown_since_planning_keeps_its_moves(config, recorders, topics, unique_topic, tmp_path):
    """Issue 36: partitions added after planning are not a plan error; the planned moves run, the line says so."""
    topic = new_topic(config, topics, unique_topic, [[1, 2], [2, 3]])
    with KafkaClusterAdmin(config) as admin:
        snap = admin.snapshot(topics=[topic])
        counts, ids = snap.partition_counts([topic]), snap.topic_ids([topic])  # what the planner records
    assert counts == {topic: 2}
    plan = ReassignmentPlan(moves=(
        Move(topic=topic, partition=0, current_replicas=(1, 2), target_replicas=(1, 3)),
        Move(topic=topic, partition=1, current_replicas=(2, 3), target_replicas=(4, 3)),
    ), partition_counts=counts, topic_ids=ids)
    plan_dir = write_plan_dir(tmp_path / "plan", plan)
    client = AdminClient(dict(config))
    for fut in client.create_partitions([NewPartitions(topic, 3)]).values():  # after planning: a third partition
        fut.result(60)
    wait_until(lambda: len(replicas_of(config, topic)) == 3, what=f"the third partition of {topic}")
    before = throttle_configs(config, [topic])
    summary = executes(plan_dir)
    assert summary["ok"] and summary["failed"] == 0
    assert f"topic {topic} grew from 2 to 3 partitions: its moves continue" in summary["cluster_events"]
    assert replicas_of(config, topic)[0] == (1, 3) and replicas_of(config, topic)[1] == (4, 3)
    assert throttle_configs(config, [topic]) == before  # restored exactly, read with the test's own client


def test_a_deleted_topic_s_moves_are_dropped_and_the_rest_runs(config, recorders, topics, unique_topic, tmp_path):
    """Issue 36: a topic deleted since planning touches its own moves only: they are gone, the others run."""
    kept = new_topic(config, topics, unique_topic, [[1, 2]])
    gone = new_topic(config, topics, f"{unique_topic}-gone", [[2, 3], [3, 4]])
    plan = ReassignmentPlan(moves=(
        Move(topic=kept, partition=0, current_replicas=(1, 2), target_replicas=(1, 3)),
        Move(topic=gone, partition=0, current_replicas=(2, 3), target_replicas=(2, 4)),
        Move(topic=gone, partition=1, current_replicas=(3, 4), target_replicas=(5, 4)),
    ), partition_counts={kept: 1, gone: 2})
    plan_dir = write_plan_dir(tmp_path / "plan", plan)
    delete_topics(config, [gone])
    wait_until(lambda: not replicas_of(config, gone), what=f"topic {gone} to be deleted")
    before = throttle_configs(config, [kept])
    summary = executes(plan_dir)
    assert summary["ok"] and summary["failed"] == 0 and summary["gone"] == 2
    assert f"topic {gone} deleted: dropped 2 move(s) ({gone}-0, {gone}-1)" in summary["cluster_events"]
    assert replicas_of(config, kept)[0] == (1, 3)
    assert throttle_configs(config, [kept]) == before
