"""A held client fails over to a live broker when librdkafka's "controller" is killed under it (kafka/admin/client.py:
``_on_fresh_controller``, ``_live_controller``, ``_answer``). No cluster: librdkafka's answers are made here; the
integration test test_broker_kill_failover.py kills real brokers."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

import airflow_kafka_reassign.kafka.admin.client as admin_module
from airflow_kafka_reassign.exceptions import ClusterUnreachableError
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

DEAD = 5


class Librdkafka:
    """confluent-kafka's AdminClient as the fail-over uses it: each Metadata answer names the next of ``named``."""

    def __init__(self, named: list[int]) -> None:
        self.named = named
        self.listed = 0
        self.error_cb = None

    def list_topics(self, timeout: float) -> SimpleNamespace:
        self.listed += 1
        controller = self.named.pop(0) if self.named else 1
        return SimpleNamespace(controller_id=controller, brokers={
            b: SimpleNamespace(id=b, host="127.0.0.1", port=9000 + b) for b in (1, 2, 3, 4, 5)})

    def poll(self, _timeout: float) -> int:
        return 0


@pytest.fixture
def admin(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(admin_module, "accepts_connections", lambda host, port, *a: port != 9000 + DEAD)
    monkeypatch.setattr(time, "sleep", slept.append)
    adapter = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"}, timeout_s=20)
    adapter._answered = True  # noqa: SLF001 (the cluster answered this client before)
    return adapter, slept


def lost(code: int = KafkaError._TRANSPORT, text: str | None = None) -> KafkaException:
    return KafkaException(KafkaError(code, text) if text else KafkaError(code))


@pytest.mark.parametrize(("error", "broker_lost"), [
    (lost(), True),  # the request failed on the dead broker's connection
    (lost(KafkaError._TIMED_OUT, "Failed while waiting for controller: Local: Timed out"), True),
    (lost(KafkaError._TIMED_OUT, "Failed while waiting for response from broker: Local: Timed out"), False),
    (lost(KafkaError._ALL_BROKERS_DOWN), False),
])
def test_librdkafkas_two_ways_of_saying_its_broker_is_gone(admin, error, broker_lost):
    adapter, _ = admin
    translated = adapter._translate(error)  # noqa: SLF001
    assert isinstance(translated, ClusterUnreachableError) and translated.broker_lost is broker_lost


def test_a_call_whose_broker_is_gone_is_made_again_once_a_live_controller_is_named(admin):
    adapter, slept = admin
    adapter._ck = ck = Librdkafka([DEAD, DEAD, 2])  # noqa: SLF001 (5 is named until it is fenced)
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise adapter._translate(lost())  # noqa: SLF001
        return "described"

    assert adapter._on_fresh_controller(call) == "described"  # noqa: SLF001
    assert len(calls) == 2 and ck.listed == 3  # metadata read until it named 2, which accepts connections
    assert slept == [admin_module.CONTROLLER_RELEARN_S] * 2
    assert adapter._ck is ck  # noqa: SLF001 (the held client, routed anew: no new client)


@pytest.mark.parametrize("why", ["never answered", "not a lost broker"])
def test_other_failures_are_raised_at_once(admin, why):
    adapter, _ = admin
    adapter._ck = ck = Librdkafka([])  # noqa: SLF001
    error = lost(KafkaError._TIMED_OUT) if why == "not a lost broker" else lost()
    adapter._answered = why != "never answered"  # noqa: SLF001 (a cluster never reached fails once)
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        raise adapter._translate(error)  # noqa: SLF001

    with pytest.raises(ClusterUnreachableError):
        adapter._on_fresh_controller(call)  # noqa: SLF001
    assert len(calls) == 1 and ck.listed == 0


def test_the_fail_over_ends_with_the_calls_timeout(admin, monkeypatch):
    adapter, _ = admin
    adapter._ck = Librdkafka([DEAD] * 1000)  # noqa: SLF001 (no broker ever accepts: the last error is raised)
    clock = iter(range(0, 10_000, 3))
    monkeypatch.setattr(admin_module.time, "monotonic", lambda: float(next(clock)))
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        raise adapter._translate(lost())  # noqa: SLF001

    with pytest.raises(ClusterUnreachableError, match="Broker transport failure"):
        adapter._on_fresh_controller(call)  # noqa: SLF001
    assert len(calls) == 1


def test_a_request_waiting_for_a_dead_controller_is_rerouted_when_a_broker_connection_fails(admin):
    """librdkafka reports the failed connection through error_cb while the request waits for its "controller": the
    adapter reads the metadata again (which wakes the request towards the live broker it names), not waiting for the
    dead one until the request times out."""
    adapter, _ = admin
    future: Future = Future()
    ck = Librdkafka([DEAD, 3])

    def listed(timeout: float) -> SimpleNamespace:
        md = Librdkafka.list_topics(ck, timeout)
        if md.controller_id != DEAD:
            threading.Timer(0.05, future.set_result, ["described"]).start()  # librdkafka sends it to 3
        return md

    polls: list[int] = []

    def poll(_timeout: float) -> int:  # serves error_cb: the connection to 5 failed, once, while the request waits
        polls.append(1)
        if len(polls) == 2:
            adapter._ck_errors.append(KafkaError(  # noqa: SLF001
                KafkaError._TRANSPORT, "127.0.0.1:9005/5: Connect to ipv4#127.0.0.1:9005 failed: Connection refused"))
        return 0

    ck.list_topics, ck.poll = listed, poll  # type: ignore[method-assign]
    adapter._ck = ck  # noqa: SLF001
    assert adapter._answer(future) == "described"  # noqa: SLF001
    assert ck.listed == 2


def test_a_request_waiting_long_makes_sure_its_controller_is_live(admin, monkeypatch):
    """No error reported (librdkafka reports a failed connection once, then suppresses the identical ones), the
    request waits: every CONTROLLER_CHECK_S the metadata is read again until it names a live broker."""
    adapter, _ = admin
    monkeypatch.setattr(admin_module, "CONTROLLER_CHECK_S", 0.05)
    future: Future = Future()
    ck = Librdkafka([DEAD, 4])

    def listed(timeout: float) -> SimpleNamespace:
        md = Librdkafka.list_topics(ck, timeout)
        if md.controller_id != DEAD:
            future.set_result("described")
        return md

    ck.list_topics = listed  # type: ignore[method-assign]
    adapter._ck = ck  # noqa: SLF001
    assert adapter._answer(future) == "described"  # noqa: SLF001
    assert ck.listed == 2


def test_a_client_never_answered_waits_without_rerouting(admin, monkeypatch):
    adapter, _ = admin
    adapter._answered = False  # noqa: SLF001
    monkeypatch.setattr(admin_module, "CONTROLLER_CHECK_S", 0.01)
    future: Future = Future()
    adapter._ck = ck = Librdkafka([])  # noqa: SLF001
    threading.Timer(0.3, future.set_result, ["described"]).start()
    assert adapter._answer(future) == "described" and ck.listed == 0  # noqa: SLF001
