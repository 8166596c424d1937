"""Per-broker config requests (librdkafka takes one broker resource per DescribeConfigs / IncrementalAlterConfigs)
are sent together and waited for under one deadline: N brokers cost one round trip. Every one is waited for before a
failure is raised, so no request is left in flight unseen."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from airflow_kafka_reassign.kafka.acl import Refused
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin


def done(value: object = None, error: BaseException | None = None, after_s: float = 0.0) -> Future:
    f: Future = Future()

    def settle() -> None:
        f.set_exception(error) if error is not None else f.set_result(value)

    threading.Timer(after_s, settle).start() if after_s else settle()
    return f


def test_every_request_is_waited_for_and_the_first_failure_raised_after_them():
    admin = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"}, timeout_s=5)
    needs = Refused.on_cluster("DESCRIBE_CONFIGS", "DescribeConfigs")
    late = done("late", after_s=0.3)
    with pytest.raises(ValueError, match="broker 1"):
        admin._wait_each({1: (done(error=ValueError("broker 1")), needs), 2: (late, needs),
                          3: (done(error=ValueError("broker 3")), needs)})
    assert late.done()  # the slower request was waited for, not left behind
    assert admin._wait_each({1: (done("a"), needs), 2: (done("b", after_s=0.1), needs)}) == {1: "a", 2: "b"}


def test_brokers_that_do_not_answer_their_own_requests_are_named_together():
    """A broker killed is listed alive until the cluster notices; its own config requests only time out. Those
    brokers are named in one BrokerUnreachableError (after the others were waited for), so that a caller can leave
    them out; any other failure is raised first."""
    from confluent_kafka import KafkaError, KafkaException

    from airflow_kafka_reassign.exceptions import BrokerUnreachableError, ClusterUnreachableError

    admin = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"}, timeout_s=5)
    needs = Refused.on_cluster("DESCRIBE_CONFIGS", "DescribeConfigs")

    def timed_out() -> Future:
        return done(error=KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed while waiting for broker")))

    with pytest.raises(BrokerUnreachableError, match=r"broker\(s\) \[1, 3\] did not answer") as raised:
        admin._wait_each({1: (timed_out(), needs), 2: (done("b"), needs), 3: (timed_out(), needs)}, kind="broker")
    assert raised.value.brokers == (1, 3) and isinstance(raised.value, ClusterUnreachableError)
    assert not raised.value.broker_lost  # a broker's own request: routing it elsewhere cannot help
    with pytest.raises(ValueError, match="broker 2"):
        admin._wait_each({1: (timed_out(), needs), 2: (done(error=ValueError("broker 2")), needs)}, kind="broker")
    with pytest.raises(ClusterUnreachableError) as raised:  # topics: the cluster did not answer, no broker to leave out
        admin._wait_each({"a": (timed_out(), needs)}, kind="topic")
    assert not isinstance(raised.value, BrokerUnreachableError)
