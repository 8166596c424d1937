"""The pre-4.3 drain on an older Kafka line (the sandbox's version option: 4.2.2 by default, or
``AKR_PRE_CORDON_KAFKA_VERSION``): there are no cordons, so topics created and grown while the drain runs get
partitions on the drained broker; the drain rounds move them off in the same run, and the logs say why (cordoning
needs Kafka 4.3).

PlanReassignmentOperator on the real cluster (its cordon step warns and goes on; the plan job is replaced by the same
planner in process: the Spark path is tested elsewhere), then the execution engine with the drain the plan task wrote
(``drain.json``), while the cluster lives on. A cluster of its own, started once for the module: 4 nodes, 1-3
combined broker+controller voters, 4 a broker (the one drained).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka_helpers import dynamic_broker_configs, make_topic, plan_tasks_in_process, wait_until

from airflow_kafka_reassign.core.execution import ExecutionConfig, run
from airflow_kafka_reassign.core.maintenance.drain import read_drain
from airflow_kafka_reassign.core.records.plan_io import read_plan
from airflow_kafka_reassign.core.records.store import LocalStore
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator
from airflow_kafka_reassign.sandbox import Sandbox
from airflow_kafka_reassign.sandbox.maven import parse_version

VERSION = os.environ.get("AKR_PRE_CORDON_KAFKA_VERSION") or "4.2.2"
DRAINED = 4
BROKERS = [1, 2, 3, 4]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    sandbox = Sandbox(tmp_path_factory.mktemp(f"kafka-{VERSION}"))
    sandbox.up(brokers=4, racks=0, kafka_version=VERSION, timeout=float(os.environ.get("AKR_SANDBOX_TIMEOUT", "180")))
    try:
        yield sandbox
    finally:
        sandbox.down()


class _TI:
    def xcom_push(self, key: str, value: object) -> None:
        pass


def test_partitions_created_during_a_drain_before_kafka_4_3_are_drained_in_the_same_run(cluster, tmp_path,
                                                                                       monkeypatch, caplog, capfd):
    assert (parse_version(cluster.kafka_version) or ()) < (4, 3), cluster.kafka_version
    config = cluster.client_config()
    make_topic(config, "orders", [[DRAINED, 1], [DRAINED, 2], [3, DRAINED], [1, 2]], megabytes=2)
    make_topic(config, "grown", [[1, 2]])
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        assert not admin.capabilities().cordons  # metadata.version below 4.3-IV0: no cordoned.log.dirs
    configs = dynamic_broker_configs(config, BROKERS)

    # the plan task, on the real cluster: its cordon step says why it cannot cordon, and plans all the same
    plan_tasks_in_process(monkeypatch, config)
    op = PlanReassignmentOperator(task_id="plan", goal="remove-brokers", brokers=[DRAINED], output_uri=str(tmp_path))
    capfd.readouterr()
    out = op.execute({"ti": _TI()})
    task_log = capfd.readouterr()  # the task's logger (structlog) writes to the process's output
    assert "brokers [4] are not cordoned: cordons need Kafka 4.3+" in task_log.out + task_log.err, task_log
    plan_dir = Path(out["plan_uri"])
    plan, drain = read_plan(plan_dir), read_drain(LocalStore(plan_dir))
    assert drain is not None and drain.brokers == (DRAINED,) and len(plan) >= 3
    assert dynamic_broker_configs(config, BROKERS) == configs  # nothing was cordoned

    client = AdminClient({"bootstrap.servers": config["bootstrap.servers"]})
    lived: list[bool] = []

    def the_cluster_lives_on(status) -> None:
        """While the first moves are in flight: a topic created and another grown, placed by the controller."""
        if lived:
            return
        lived.append(True)
        for f in client.create_topics([NewTopic("created", num_partitions=12, replication_factor=2)]).values():
            f.result()
        for f in client.create_partitions([NewPartitions("grown", 11)]).values():
            f.result()

    caplog.clear()
    with KafkaClusterAdmin(config, timeout_s=20) as admin, caplog.at_level(logging.WARNING):
        result = run(admin, plan, ExecutionConfig(max_moves_per_broker=1, throttle_bytes_per_sec=300_000),
                     state_dir=plan_dir / "run", poll_interval_s=1.0, progress=the_cluster_lives_on, drain=drain)
        assert lived, "the moves finished before the cluster could live on: make them slower"
        new = [p.tp for t in ("created", "grown") for p in admin.snapshot(topics=[t]).partitions]
        assert result.status.ok and result.drain_short is None, result.summary()
        assert result.drained_later, "the controller put none of the 22 new partitions on the drained broker"
        assert set(result.drained_later) <= set(new)
        # why, in the log: they arrived during the drain, and cordons (Kafka 4.3+) would have kept them off
        assert "still have a replica on the drained broker(s) [4] once the plan" in caplog.text, caplog.text
        assert "Kafka 4.3+" in caplog.text, caplog.text

        def settled() -> bool:
            parts = [p for t in ("orders", "grown", "created") for p in admin.snapshot(topics=[t]).partitions]
            return len(parts) == 4 + 12 + 11 and all(
                DRAINED not in p.replicas and set(p.isr) == set(p.replicas) and len(p.replicas) == 2 for p in parts)
        wait_until(settled, "every partition off broker 4, fully replicated, RF 2", timeout=90)
    assert dynamic_broker_configs(config, BROKERS) == configs  # the throttles restored exactly
