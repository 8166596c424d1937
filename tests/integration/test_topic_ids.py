"""Topic ids (KIP-516) in the adapter's snapshot, on the real sandbox: a topic's id as the snapshot gives it equals
what a client of the test's own reads (confluent-kafka's DescribeTopics) and what Kafka's own kafka-topics tool
prints; a grown topic keeps its id; a topic deleted and re-created under the same name has a new one; the id
survives the snapshot file. The test's observers share no code with the adapter (which reads kafka-python's
Metadata and renders the id itself)."""

from __future__ import annotations

import re
import uuid

import pytest
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka_helpers import make_topic

from airflow_kafka_reassign.core.records.snapshot_io import read_snapshot, write_snapshot
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.sandbox import wait_until


def own_id(client: AdminClient, topic: str) -> uuid.UUID | None:
    """The topic's id as confluent-kafka's DescribeTopics reads it (its two 64-bit halves); ``None``: no such topic."""
    try:
        found = client.describe_topics(TopicCollection([topic]), request_timeout=15)[topic].result(30)
    except KafkaException:
        return None
    tid = found.topic_id
    return uuid.UUID(int=(tid.get_most_significant_bits() % 2**64) << 64 | tid.get_least_significant_bits() % 2**64)


def as_uuid(kafka_printed: str) -> uuid.UUID:
    """Kafka's printed form (URL-safe base64 of the 16 bytes, no padding) back to the UUID, decoded here."""
    import base64

    return uuid.UUID(bytes=base64.urlsafe_b64decode(kafka_printed + "=="))


def printed_by_kafka(sandbox, topic: str) -> str:
    """``TopicId:`` as ``kafka-topics.sh --describe`` prints it (Kafka's own tool, its own client)."""
    out = sandbox.run_tool("org.apache.kafka.tools.TopicCommand",
                           ["--bootstrap-server", sandbox.bootstrap_servers.split(",")[0], "--describe", "--topic", topic],
                           check=True).stdout
    found = re.search(r"TopicId:\s*(\S+)", out)
    assert found, out
    return found.group(1)


@pytest.mark.timeout(300)
def test_ids_equal_the_clusters_survive_growth_and_change_when_a_topic_is_re_created(sandbox, unique_topic, tmp_path):
    config = sandbox.client_config(sasl=True)
    own = AdminClient(dict(sandbox.client_config()))
    topic = unique_topic
    make_topic(config, topic, [[1, 2], [2, 3], [3, 4]])
    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        first = admin.snapshot(topics=[topic]).topic(topic).topic_id
        assert first is not None and re.fullmatch(r"[A-Za-z0-9_-]{22}", first), first
        assert admin.snapshot().topic(topic).topic_id == first  # the whole cluster's snapshot: the same id
        assert as_uuid(first) == own_id(own, topic)
        assert printed_by_kafka(sandbox, topic) == first  # rendered as Kafka prints it

        # grown (by the test's own client): the same topic, the same id
        own.create_partitions([NewPartitions(topic, 5)], request_timeout=30)[topic].result(60)
        grown = wait_until(lambda: (s := admin.snapshot(topics=[topic])).topic(topic).partition_count == 5 and s,
                           "the snapshot to show the topic grown to 5 partitions", timeout=60)
        assert grown.topic(topic).topic_id == first and own_id(own, topic) == as_uuid(first)
        path = write_snapshot(grown, tmp_path / "snap")
        assert read_snapshot(path).topic(topic).topic_id == first  # and in the snapshot file

        # deleted and re-created under the same name: a new id, the one the cluster gives
        own.delete_topics([topic], operation_timeout=30)[topic].result(60)
        wait_until(lambda: own_id(own, topic) is None, f"topic {topic} to be deleted", timeout=60)

        def recreated() -> bool:
            try:
                own.create_topics([NewTopic(topic, 2, 2)], operation_timeout=30)[topic].result(60)
            except KafkaException as e:
                if "already exists" in str(e) or "marked for deletion" in str(e):
                    return False  # the deletion is still being applied
                raise
            return True

        wait_until(recreated, f"topic {topic} to be created again", timeout=60)
        again = wait_until(lambda: (s := admin.snapshot(topics=[topic])).topic(topic).partition_count == 2 and s,
                           "the snapshot to show the re-created topic", timeout=60)
        second = again.topic(topic).topic_id
        assert second is not None and second != first
        assert as_uuid(second) == own_id(own, topic)
        assert printed_by_kafka(sandbox, topic) == second
