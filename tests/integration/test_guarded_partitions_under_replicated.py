"""Under-replicated growth (KIP-409) and its heal, on a SEPARATE 3-broker rack-less sandbox.

This module starts its own small cluster (module-scoped) and stops it at the end: it stops and
starts brokers and grows ``__consumer_offsets`` for real, which must not disturb the session
sandbox the other tests share.

What a real Kafka 4.x (KRaft) cluster does, and what the tests pin:

* a stopped broker is absent from the cluster's brokers (Metadata/DescribeCluster list the
  unfenced ones) while partitions still name it as a replica;
* CreatePartitions refuses a new partition with fewer replicas than the topic's others
  (``INVALID_REPLICA_ASSIGNMENT ... not consistent with previous partitions``), but accepts a
  replica on a stopped, still registered broker: so ``allow_under_replicated=True`` creates
  the new partitions at the topic's RF with the missing replicas on the stopped broker (out of
  the ISR until it is back; it then copies them by itself);
* partitions really short of replicas are healed by the heal plan plus execution, as an
  explicitly allowed RF change for exactly those partitions.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException
from kafka_helpers import TI, delete_topics, make_coordinator_topics_exist, replicas_of, wait_until

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, run
from airflow_kafka_reassign.core.maintenance.growth import read_heal_targets, update_heal_targets
from airflow_kafka_reassign.core.records.plan_io import read_plan
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import NewPartitions
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import create_topic
from airflow_kafka_reassign.operators.partitions import GuardedCreatePartitionsOperator, PlanHealOperator
from airflow_kafka_reassign.sandbox import Sandbox

CONN_ID = "kafka_small"
STOPPED = 3


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Iterator[Sandbox]:
    sb = Sandbox(tmp_path_factory.mktemp("small-sandbox"))
    sb.up(brokers=3, racks=0, timeout=180)
    try:
        yield sb
    finally:
        sb.down()


@pytest.fixture
def config(small, monkeypatch) -> dict[str, str]:
    cfg = small.client_config()
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({"conn_type": "kafka", "extra": cfg}))
    return cfg


def snapshot(config):
    """A fresh admin each time: brokers stop and start between calls."""
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        return admin.snapshot()


def rf_and_replicas(config) -> dict[TopicPartition, tuple[int, ...]]:
    return {p.tp: p.replicas for p in snapshot(config).partitions}


def isr_of(config, topic: str) -> dict[int, tuple[int, ...]]:
    return {p.partition: p.isr for p in snapshot(config).partitions if p.topic == topic}


def rf3_topic(config, name: str, partitions: int = 3) -> str:
    assignment = [[(i + k) % 3 + 1 for k in range(3)] for i in range(partitions)]
    create_topic(config, name, assignment, configs={"min.insync.replicas": "2"})
    wait_until(lambda: len(replicas_of(config, name)) == partitions, what=f"topic {name}")
    return name


def grow(**kwargs):
    return GuardedCreatePartitionsOperator(task_id="grow", kafka_config_id=CONN_ID, **kwargs)


def test_the_override_grows_consumer_offsets_and_logs_the_warning(config, capsys):
    make_coordinator_topics_exist(config)
    before = len(replicas_of(config, "__consumer_offsets"))
    result = grow(new_total_partitions={"__consumer_offsets": before + 1},
                  allow_internal_topic_partition_increase=True).execute({"ti": TI()})
    assert result["topics"]["__consumer_offsets"]["status"] == "created"
    wait_until(lambda: len(replicas_of(config, "__consumer_offsets")) == before + 1, what="__consumer_offsets growth")
    warned = [line for line in capsys.readouterr().out.splitlines() if "GROWING INTERNAL TOPIC" in line]
    assert len(warned) == 1 and f"hash % {before} to hash % {before + 1}" in warned[0]


def test_kafka_refuses_a_new_partition_with_fewer_replicas_than_the_topics_others(config):
    """Why allow_under_replicated uses the stopped broker instead of creating RF-2 partitions."""
    topic = rf3_topic(config, f"t-rf-mismatch-{uuid.uuid4().hex[:8]}", 1)
    with KafkaClusterAdmin(config) as admin:
        result = admin.create_partitions([NewPartitions(topic=topic, total_count=2, assignment=((1, 2),))])
    assert result[topic].error_code == "INVALID_REPLICA_ASSIGNMENT"
    assert "not consistent with previous partitions" in result[topic].error
    delete_topics(config, [topic])


def test_rf3_growth_with_a_broker_stopped(small, config, tmp_path: Path):
    topic = rf3_topic(config, f"t-ur-{uuid.uuid4().hex[:8]}")
    before = rf_and_replicas(config)
    heal_file = tmp_path / "heal-targets.json"
    small.stop_broker(STOPPED)
    try:
        snap = snapshot(config)
        assert snap.broker_ids == (1, 2)  # the stopped broker is absent ...
        assert all(STOPPED in p.replicas for p in snap.partitions if p.topic == topic)  # ... yet still named

        ti = TI()
        with pytest.raises(AirflowFailException, match="under-replicated"):
            grow(new_total_partitions={topic: 5}).execute({"ti": ti})
        refused = ti.pushed["return_value"]["topics"][topic]
        assert refused["refusal"] == "under-replicated" and "allow_under_replicated=True" in refused["reason"]
        assert len(replicas_of(config, topic)) == 3

        result = grow(new_total_partitions={topic: 5}, allow_under_replicated=True,
                      heal_targets_path=str(heal_file)).execute({"ti": TI()})
        assert result["topics"][topic]["status"] == "created"
        expected = {f"{topic}-3": 3, f"{topic}-4": 3}
        assert result["heal_targets"] == expected == read_heal_targets(heal_file)
        # read through the snapshot: it waits until every live broker has applied the metadata (a broker's own
        # Metadata answer, read 40 ms after the creation, listed only the 3 old partitions once)
        new = {p.partition: p.replicas for p in snapshot(config).partitions if p.topic == topic and p.partition >= 3}
        assert set(new) == {3, 4}
        for replicas in new.values():  # live brokers first (leader among them), the stopped one last
            assert len(replicas) == 3 and replicas[-1] == STOPPED and set(replicas[:2]) == {1, 2}
        isr = isr_of(config, topic)
        assert all(set(isr[p]) == {1, 2} for p in (3, 4))
    finally:
        small.start_broker(STOPPED)

    wait_until(lambda: all(len(isr_of(config, topic)[p]) == 3 for p in (3, 4)), what="the new partitions' ISR",
               timeout=90)
    ti = TI()
    with pytest.raises(AirflowSkipException, match="nothing to move"):
        PlanHealOperator(task_id="heal", kafka_config_id=CONN_ID, heal_targets_path=str(heal_file),
                         plan_dir=str(tmp_path / "plan")).execute({"ti": ti})
    assert ti.pushed["return_value"]["states"]["healed"] == 2 and read_heal_targets(heal_file) == {}
    after = rf_and_replicas(config)
    assert {tp: r for tp, r in after.items() if tp in before} == before  # no other partition changed
    assert {tp: len(r) for tp, r in after.items() if tp not in before} == {
        TopicPartition(topic, 3): 3, TopicPartition(topic, 4): 3}


def test_heal_plan_and_execution_restore_the_rf_of_short_partitions_only(config, tmp_path: Path):
    topic = rf3_topic(config, f"t-short-{uuid.uuid4().hex[:8]}", 4)
    # partitions 1 and 2 short of one replica (as if created under-replicated), set up with an explicit RF change
    with KafkaClusterAdmin(config) as admin:
        current = {p: r for p, r in replicas_of(config, topic).items()}
        shrink = {TopicPartition(topic, p): current[p][:2] for p in (1, 2)}
        assert not admin.alter_reassignments(shrink, allow_replication_factor_change=True).failed
    wait_until(lambda: all(len(replicas_of(config, topic)[p]) == 2 for p in (1, 2)), what="RF-2 partitions")
    before = rf_and_replicas(config)
    heal_file = tmp_path / "heal-targets.json"
    update_heal_targets(heal_file, add={f"{topic}-1": 3, f"{topic}-2": 3})

    plan_dir = tmp_path / "heal-plan"
    summary = PlanHealOperator(task_id="heal", kafka_config_id=CONN_ID, heal_targets_path=str(heal_file),
                               plan_dir=str(plan_dir)).execute({"ti": TI()})
    assert summary["moves"] == 2 and summary["states"]["short"] == 2 and summary["plan_dir"] == str(plan_dir)
    plan = read_plan(plan_dir)
    assert {m.tp for m in plan.moves} == {TopicPartition(topic, 1), TopicPartition(topic, 2)}
    assert all(m.allow_rf_change and len(m.target_replicas) == 3 for m in plan.moves)

    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        outcome = run(admin, plan, ExecutionLimits(), ExecutionOptions(allow_replication_factor_change=True),
                      state_dir=plan_dir / "run", poll_interval_s=1.0)
    assert outcome.status.complete, outcome.summary()

    after = rf_and_replicas(config)
    assert {len(after[TopicPartition(topic, p)]) for p in (1, 2)} == {3}
    assert {tp: r for tp, r in after.items() if tp.topic != topic or tp.partition not in (1, 2)} == {
        tp: r for tp, r in before.items() if tp.topic != topic or tp.partition not in (1, 2)}
    wait_until(lambda: all(len(isr_of(config, topic)[p]) == 3 for p in (1, 2)), what="healed ISR")
    with pytest.raises(AirflowSkipException):  # a second heal finds them healed and prunes the file
        PlanHealOperator(task_id="heal", kafka_config_id=CONN_ID, heal_targets_path=str(heal_file),
                         plan_dir=str(tmp_path / "again")).execute({"ti": TI()})
    assert read_heal_targets(heal_file) == {}
