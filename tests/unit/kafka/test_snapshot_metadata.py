"""The snapshot's one Metadata request (kafka/admin/snapshot.py ``_read_metadata``): each topic's id as Kafka prints
it, its internal flag, and its partitions, from a Metadata v12 response made here (no cluster); the sandbox test
is tests/integration/test_topic_ids.py."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kafka import errors as kp_errors
from kafka.protocol.metadata import MetadataResponse

from airflow_kafka_reassign.core.vocabulary.models import Broker
from airflow_kafka_reassign.exceptions import ClusterOperationError
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.admin.snapshot import kafka_topic_id

T = MetadataResponse.MetadataResponseTopic
P = T.MetadataResponsePartition


def test_a_topic_id_is_rendered_as_kafka_prints_it():
    # kafka-topics.sh --describe printed "TopicId: MRx6ma28Sd6HMucLnct_fg" for this topic on the sandbox (Kafka 4.4),
    # whose id librdkafka prints as MRx6ma28Sd6HMucLnct/fg and kafka-python reads as this UUID
    assert kafka_topic_id(uuid.UUID("311c7a99-adbc-49de-8732-e70b9dcb7f7e")) == "MRx6ma28Sd6HMucLnct_fg"
    assert kafka_topic_id(uuid.UUID(int=0)) is None and kafka_topic_id(None) is None  # Kafka's "no id"


def topic(name: str, error: int = 0, *, internal: bool = False, topic_id: uuid.UUID | None = None, n: int = 2) -> Any:
    return T(error_code=error, name=name, topic_id=topic_id or uuid.uuid4(), is_internal=internal,
             authorized_operations=None,
             partitions=[P(error_code=0, partition_index=i, leader_id=-1 if i else 2, leader_epoch=0,
                           replica_nodes=[2, 3], isr_nodes=[2], offline_replicas=[]) for i in range(n)])


def admin_answering(response_topics: list[Any], *, error: int = 0) -> tuple[KafkaClusterAdmin, list[Any]]:
    """An adapter whose Metadata request is answered with ``response_topics`` (encoded and decoded as v13)."""
    admin = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"}, timeout_s=5)
    data = MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=1, topics=response_topics,
                            error_code=error).encode(version=13)
    sent: list[Any] = []

    class Manager:
        def send(self, request: Any, **_kw: Any) -> Any:
            sent.append(request)
            return MetadataResponse.decode(data, version=13)

        async def wait_for(self, response: Any, _timeout_ms: int) -> Any:
            return response

        def run(self, coro: Any) -> Any:
            try:
                coro().send(None)
            except StopIteration as done:
                return done.value
            raise AssertionError("the coroutine awaited something else")

    admin._with_fresh_controller = lambda call: call(type("KP", (), {"_manager": Manager()})())  # type: ignore[method-assign]
    return admin, sent


def test_the_metadata_gives_ids_internal_flags_and_partitions():
    tid = uuid.UUID("311c7a99-adbc-49de-8732-e70b9dcb7f7e")
    admin, sent = admin_answering([topic("orders", topic_id=tid), topic("__consumer_offsets", internal=True, n=1)])
    md = admin._read_metadata(None)
    assert sent[0].topics is None and sent[0].allow_auto_topic_creation is False  # every topic, none created
    assert md["orders"].topic_id == "MRx6ma28Sd6HMucLnct_fg" and not md["orders"].internal
    assert md["__consumer_offsets"].internal and md["__consumer_offsets"].topic_id is not None
    p0, p1 = md["orders"].partitions[0], md["orders"].partitions[1]
    assert (p0.replicas, p0.isrs, p0.leader, p1.leader) == ((2, 3), (2,), 2, -1) and md["orders"].error is None


def test_named_topics_are_asked_for_by_name_and_absent_or_hidden_ones_are_left_out():
    admin, sent = admin_answering([
        topic("orders"),
        topic("gone", kp_errors.UnknownTopicOrPartitionError.errno, n=0),
        topic("hidden", kp_errors.TopicAuthorizationFailedError.errno, n=0),
        topic("new", kp_errors.LeaderNotAvailableError.errno, n=0),
    ])
    md = admin._read_metadata(["orders", "gone", "hidden", "new"])
    assert [t.name for t in sent[0].topics] == ["gone", "hidden", "new", "orders"]
    assert sorted(md) == ["new", "orders"]  # what the snapshot then calls missing (and names hidden ones as such)
    assert md["new"].error == "LEADER_NOT_AVAILABLE" and md["new"].partitions == {}  # find_gaps reads again


def test_an_error_of_the_whole_response_leaves_the_snapshot_as_the_projects_own(monkeypatch):
    admin, _ = admin_answering([], error=kp_errors.PolicyViolationError.errno)
    monkeypatch.setattr(admin, "_describe_cluster_brokers", lambda: ("c", [Broker(id=1)]))
    monkeypatch.setattr(admin, "_snapshot_barrier", lambda *_a: type("Caught up", (), {"lagging": lambda s: None})())
    with pytest.raises(ClusterOperationError) as e:
        admin.snapshot()
    assert e.value.code == "POLICY_VIOLATION" and "snapshot failed" in str(e.value)
    assert isinstance(e.value.__cause__, kp_errors.PolicyViolationError)
