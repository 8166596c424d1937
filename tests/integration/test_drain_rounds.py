"""A drain that ends empty on a real cluster without cordons: topics created and grown while the plan's moves run
land on the drained broker (the controller places them there), and the same run drains them (core/maintenance/drain.py).

The drain is partial (this test's topics only: the cluster is shared with other tests); a whole decommission
covers every topic the same way."""

from __future__ import annotations

import logging

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka_helpers import make_topic, throttles, wait_until

from airflow_kafka_reassign.core.execution import ExecutionConfig, run
from airflow_kafka_reassign.core.maintenance.drain import DrainSpec
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

DRAINED = 5


def test_partitions_created_and_grown_during_the_drain_are_drained_in_the_same_run(sandbox, unique_topic, tmp_path,
                                                                                    caplog):
    config = sandbox.client_config()
    grown, created = f"{unique_topic}-grown", f"{unique_topic}-created"
    make_topic(config, unique_topic, [[DRAINED, 1], [DRAINED, 2], [3, DRAINED]], megabytes=2)
    make_topic(config, grown, [[1, 2]])
    plan = ReassignmentPlan(moves=(
        Move(topic=unique_topic, partition=0, current_replicas=(DRAINED, 1), target_replicas=(4, 1)),
        Move(topic=unique_topic, partition=1, current_replicas=(DRAINED, 2), target_replicas=(1, 2)),
        Move(topic=unique_topic, partition=2, current_replicas=(3, DRAINED), target_replicas=(3, 4)),
    ), partition_counts={unique_topic: 3})
    client = AdminClient({"bootstrap.servers": config["bootstrap.servers"]})
    lived: list[bool] = []

    def the_cluster_lives_on(status) -> None:
        """While the first moves are in flight: a topic created and another grown, placed by the controller."""
        if lived:
            return
        lived.append(True)
        for f in client.create_topics([NewTopic(created, num_partitions=12, replication_factor=2)]).values():
            f.result()
        for f in client.create_partitions([NewPartitions(grown, 11)]).values():
            f.result()

    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        before = throttles(admin, [unique_topic, grown])
        spec = DrainSpec(brokers=(DRAINED,), topic_include=(f"{unique_topic}.*",))
        with caplog.at_level(logging.WARNING):
            result = run(admin, plan, ExecutionConfig(max_moves_per_broker=2, throttle_bytes_per_sec=400_000),
                         state_dir=tmp_path / "run", poll_interval_s=1.0, progress=the_cluster_lives_on, drain=spec)
        assert lived, "the moves finished before the cluster could live on: make them slower"
        landed = [p.tp for t in (created, grown) for p in admin.snapshot(topics=[t]).partitions]
        assert result.status.ok and result.drain_short is None, result.summary()
        assert result.drained_later, "the controller put none of 22 new partitions on the drained broker"
        assert set(result.drained_later) <= set(landed)
        assert "still hold a replica on the drained broker(s) [5]" in caplog.text and "KIP-1066" in caplog.text

        def settled() -> bool:
            parts = [p for t in (unique_topic, created, grown) for p in admin.snapshot(topics=[t]).partitions]
            return all(DRAINED not in p.replicas and set(p.isr) == set(p.replicas) and len(p.replicas) == 2
                       for p in parts) and len(parts) == 3 + 12 + 11
        wait_until(settled, "every partition of the test's topics off broker 5, fully replicated, RF 2", timeout=60)
        assert throttles(admin, [unique_topic, grown]) == before  # restored exactly, the rounds' throttles too
        assert all(v is None for v in throttles(admin, [created])["topics"].get(created, {}).values())
