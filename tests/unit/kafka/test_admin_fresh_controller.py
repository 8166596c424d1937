"""A call routed to kafka-python's "controller" is tried again on a fresh client when its broker is gone."""

from __future__ import annotations

import time

import pytest
from kafka import errors as kp_errors

import airflow_kafka_reassign.kafka.admin.client as admin_module  # where the clients are made
from airflow_kafka_reassign.kafka.admin import FRESH_CONTROLLER_ATTEMPTS, KafkaClusterAdmin


class Client:
    def __init__(self, **_kw: object) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def admin(monkeypatch):
    made: list[Client] = []
    slept: list[float] = []

    def client(**kw: object) -> Client:
        made.append(Client(**kw))
        return made[-1]

    monkeypatch.setattr(admin_module, "SafeKafkaAdminClient", client)
    monkeypatch.setattr(time, "sleep", slept.append)
    return KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"}), made, slept


def failing(times: int, error: type[Exception] = kp_errors.UnknownBrokerIdError):
    calls: list[Client] = []

    def call(client: Client) -> str:
        calls.append(client)
        if len(calls) <= times:
            raise error("broker 3 is gone")
        return "listed"

    return call, calls


def test_a_stale_controller_is_left_for_a_fresh_client_a_moment_later(admin):
    adapter, made, slept = admin
    call, calls = failing(2)
    assert adapter._with_fresh_controller(call) == "listed"  # noqa: SLF001
    assert calls == made and len(made) == 3
    assert [c.closed for c in made] == [True, True, False]
    assert [s for s in slept if s] == [0.5]  # at once, then half a second later
    assert adapter._kafka_python() is made[-1]  # noqa: SLF001 (the working client is kept)


def test_after_the_last_try_the_error_is_raised_as_it_is(admin):
    adapter, made, slept = admin
    call, calls = failing(99, kp_errors.NodeNotReadyError)
    with pytest.raises(kp_errors.NodeNotReadyError, match="broker 3 is gone"):
        adapter._with_fresh_controller(call)  # noqa: SLF001
    assert len(calls) == len(made) == FRESH_CONTROLLER_ATTEMPTS
    assert [s for s in slept if s] == [0.5, 1.0, 1.5]
    assert not made[-1].closed


def test_other_errors_are_not_retried(admin):
    adapter, made, slept = admin
    call, calls = failing(1, kp_errors.KafkaTimeoutError)
    with pytest.raises(kp_errors.KafkaTimeoutError):
        adapter._with_fresh_controller(call)  # noqa: SLF001
    assert len(calls) == len(made) == 1 and slept == []
