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
