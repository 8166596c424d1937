"""Every client error leaves the adapter as the project's own, naming the resource (kafka/admin/client.py's
``_translate``): a topic deleted while a run used it as TopicNotFoundError naming it, in the throttle calls too;
per-topic and per-partition results stay results. No cluster: the clients' futures and exceptions are made here."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigEntry, ConfigSource
from kafka import errors as kp_errors

from airflow_kafka_reassign.core.vocabulary.ports import NewPartitions
from airflow_kafka_reassign.exceptions import (
    ClusterAccessError,
    ClusterOperationError,
    ClusterUnreachableError,
    KafkaReassignError,
    TopicNotFoundError,
    UnsupportedBrokerError,
)
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.admin.client import CLIENT_ERRORS


def answered(value: Any = None) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


def failed(code: int) -> Future:
    f: Future = Future()
    f.set_exception(KafkaException(KafkaError(code)))
    return f


GONE = KafkaError.UNKNOWN_TOPIC_OR_PART


class Librdkafka:
    """confluent-kafka's AdminClient as the adapter uses it, answering from ``topics`` (``None``: deleted)."""

    def __init__(self, topics: dict[str, dict[str, str] | None]) -> None:
        self.topics = topics
        self.altered: list[str] = []
        self.awaited: list[Future] = []

    def _answer(self, name: str, value: Any) -> Future:
        f = failed(GONE) if self.topics.get(name, None) is None else answered(value)
        self.awaited.append(f)
        return f

    def describe_configs(self, resources: list[Any], **_kw: Any) -> dict[Any, Future]:
        out = {}
        for res in resources:
            if res.restype_int == 2:  # a topic
                values = self.topics.get(res.name) or {}
                out[res] = self._answer(res.name, {k: ConfigEntry(k, v, source=ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
                                                   for k, v in values.items()})
            else:
                out[res] = answered({})
        return out

    def incremental_alter_configs(self, resources: list[Any], **_kw: Any) -> dict[Any, Future]:
        out = {}
        for res in resources:
            if res.restype_int == 2 and self.topics.get(res.name) is not None:
                self.altered.append(res.name)
            out[res] = self._answer(res.name, None) if res.restype_int == 2 else answered(None)
        return out

    def create_partitions(self, new: list[Any], **_kw: Any) -> dict[str, Future]:
        return {n.topic: self._answer(n.topic, None) for n in new}

    def list_topics(self, **_kw: Any) -> Any:
        raise KafkaException(KafkaError(KafkaError.POLICY_VIOLATION, "not today"))


@pytest.fixture
def admin_on() -> Any:
    def make(topics: dict[str, dict[str, str] | None]) -> tuple[KafkaClusterAdmin, Librdkafka]:
        admin = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"}, timeout_s=5)
        client = Librdkafka(topics)
        admin._confluent = lambda: client  # type: ignore[method-assign]
        return admin, client

    return make


def test_describe_throttles_of_deleted_topics_names_them_all(admin_on):
    admin, client = admin_on({"kept": {"leader.replication.throttled.replicas": "0:1"}, "gone": None, "also": None})
    with pytest.raises(TopicNotFoundError) as e:
        admin.describe_throttles([1], ["kept", "gone", "also"])
    assert e.value.topics == ("also", "gone") and e.value.code == "UNKNOWN_TOPIC_OR_PARTITION"
    assert "also, gone" in str(e.value) and "127.0.0.1:9" in str(e.value) and "DescribeConfigs" in str(e.value)
    assert e.value.resource == "topic also, gone" and not e.value.retriable
    assert all(f.done() for f in client.awaited)
    assert admin.describe_throttles([1], ["kept"]).topics["kept"]["leader.replication.throttled.replicas"] == "0:1"


def test_set_throttles_sets_the_topics_that_exist_then_names_the_deleted_ones(admin_on):
    admin, client = admin_on({"kept": {}, "gone": None})
    values = {"leader.replication.throttled.replicas": "0:1"}
    with pytest.raises(TopicNotFoundError, match="topic.s. gone no longer exist") as e:
        admin.set_throttles({1: {"leader.replication.throttled.rate": "1000"}}, {"kept": values, "gone": values})
    assert e.value.topics == ("gone",) and "IncrementalAlterConfigs" in str(e.value)
    assert client.altered == ["kept"]


def test_create_partitions_keeps_a_deleted_topic_as_its_result(admin_on):
    admin, _ = admin_on({"kept": {}, "gone": None})
    out = admin.create_partitions([NewPartitions(topic="kept", total_count=3),
                                   NewPartitions(topic="gone", total_count=3)])
    assert out["kept"].ok and not out["gone"].ok and out["gone"].error_code == "UNKNOWN_TOPIC_OR_PART"


def test_a_raw_librdkafka_error_escaping_a_public_method_is_translated_with_the_call_and_code(admin_on):
    admin, _ = admin_on({})
    with pytest.raises(ClusterOperationError) as e:
        admin.list_topic_names()
    assert type(e.value) is ClusterOperationError and e.value.code == "POLICY_VIOLATION"
    assert "list_topic_names failed for the cluster" in str(e.value) and "not today" in str(e.value)
    assert isinstance(e.value.__cause__, KafkaException)


@pytest.mark.parametrize(("error", "expected", "code"), [
    (KafkaException(KafkaError(KafkaError._TRANSPORT)), ClusterUnreachableError, None),
    (KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), ClusterAccessError, None),
    (KafkaException(KafkaError(KafkaError.REASSIGNMENT_IN_PROGRESS)), ClusterOperationError, "REASSIGNMENT_IN_PROGRESS"),
    (kp_errors.KafkaTimeoutError("no answer"), ClusterUnreachableError, None),
    (kp_errors.UnknownBrokerIdError("broker 3 is gone"), ClusterUnreachableError, None),
    (kp_errors.TopicAuthorizationFailedError(), ClusterAccessError, None),
    (kp_errors.IncompatibleBrokerVersion("no key 45"), UnsupportedBrokerError, None),
    (kp_errors.PolicyViolationError("refused"), ClusterOperationError, "POLICY_VIOLATION"),
    (kp_errors.NotControllerError(), ClusterOperationError, "NOT_CONTROLLER"),
    (kp_errors.KafkaError("DescribeQuorum: odd"), ClusterOperationError, "KafkaError"),
])
def test_each_client_error_becomes_the_projects_own(error, expected, code):
    admin = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"}, timeout_s=5)
    translated = admin._translate(error, call="describe_cluster", resource="broker 2")
    assert type(translated) is expected
    if code is not None:
        assert translated.code == code and translated.resource == "broker 2"
        assert "describe_cluster failed for broker 2 at bootstrap.servers=127.0.0.1:9" in str(translated)
        assert translated.retriable == isinstance(error, kp_errors.NotControllerError)


def test_a_vanished_topic_from_kafka_python_is_named_too():
    admin = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"}, timeout_s=5)
    translated = admin._translate(kp_errors.UnknownTopicOrPartitionError(), call="describe", resource="topic t1")
    assert isinstance(translated, TopicNotFoundError) and translated.topics == ("t1",)


def test_every_public_method_of_the_adapter_goes_through_the_translation(monkeypatch):
    """A method added to an area later is covered too: nothing raw leaves any of them."""
    public = [n for n in dir(KafkaClusterAdmin) if not n.startswith("_") and callable(getattr(KafkaClusterAdmin, n))]
    unwrapped = [n for n in public if n != "close" and not getattr(getattr(KafkaClusterAdmin, n), "__translated__", 0)]
    assert len(public) > 20 and unwrapped == []
    admin = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"}, timeout_s=5)

    def raw(*_a: Any, **_kw: Any) -> Any:
        raise kp_errors.PolicyViolationError("raw")

    monkeypatch.setattr(admin, "_with_fresh_controller", raw)
    monkeypatch.setattr(admin, "capabilities", lambda: type("Caps", (), {"describe_quorum": True, "fenced_brokers": True})())
    for call in (admin.describe_cluster, admin.describe_quorum, admin.list_reassignments):
        with pytest.raises(KafkaReassignError) as e:
            call()
        assert not isinstance(e.value, CLIENT_ERRORS) and e.value.code == "POLICY_VIOLATION"
