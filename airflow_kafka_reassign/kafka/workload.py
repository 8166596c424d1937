"""Test and demo workloads: topics with an exact replica placement, and real data in them.

Kept beside the adapter because it needs the Kafka clients: confluent-kafka cannot create a
topic with an explicit replica assignment (its client refuses the combination), so topic
creation goes through kafka-python, which can.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Producer
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from airflow_kafka_reassign.kafka.admin import SafeKafkaAdminClient
from airflow_kafka_reassign.kafka.config import to_confluent, to_kafka_python


def create_topic(
    config: Mapping[str, Any],
    name: str,
    assignment: Sequence[Sequence[int]],
    *,
    configs: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create ``name`` with partition ``i`` on replicas ``assignment[i]`` (first = preferred leader)."""
    kp = SafeKafkaAdminClient(**to_kafka_python(config, timeout_s=timeout_s))
    try:
        kp.create_topics(
            [NewTopic(name, -1, -1, replica_assignments={i: list(r) for i, r in enumerate(assignment)},
                      topic_configs=dict(configs or {}))],
            timeout_ms=int(timeout_s * 1000),
        )
    except TopicAlreadyExistsError:
        # kafka-python sends the request again after NOT_CONTROLLER, and the first one may have created the topic
        # (seen in CI under load): the topic is there; one with another layout is refused by name
        found = kp.describe_topics([name])[0]
        if len(found.get("partitions") or ()) != len(assignment):
            raise
    finally:
        kp.close()


def produce(
    config: Mapping[str, Any],
    topic: str,
    *,
    partition: int,
    megabytes: float,
    record_bytes: int = 10_000,
    timeout_s: float = 60.0,
) -> int:
    """Write about ``megabytes`` of records into one partition; returns the bytes written."""
    producer = Producer({**to_confluent(config, timeout_s=timeout_s), "linger.ms": 20, "acks": "all"})
    payload = b"x" * record_bytes
    count = max(1, int(megabytes * 1_000_000 / record_bytes))
    deadline = time.monotonic() + timeout_s
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"producing to {topic}-{partition} took over {timeout_s:g} s") from None
        producer.poll(0)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    if left:
        raise TimeoutError(f"{left} record(s) to {topic}-{partition} were not acknowledged in {timeout_s:g} s")
    return count * record_bytes


def create_topics(
    config: Mapping[str, Any],
    partitions: Mapping[str, int],
    *,
    replication_factor: int,
    timeout_s: float = 120.0,
) -> None:
    """Create many topics at once, placed by the brokers (``{name: partition count}``)."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic as CKNewTopic

    admin = AdminClient(to_confluent(config, timeout_s=timeout_s))
    names = list(partitions)
    batch: list[str] = []
    # the controller refuses "excessively large" batches (thousands of partitions at once)
    for i, name in enumerate(names):
        batch.append(name)
        if sum(partitions[n] for n in batch) >= 2000 or i == len(names) - 1:
            futures = admin.create_topics(
                [CKNewTopic(n, partitions[n], replication_factor) for n in batch],
                request_timeout=timeout_s, operation_timeout=timeout_s,
            )
            for fut in futures.values():
                fut.result(timeout_s)
            batch = []
