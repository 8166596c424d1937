"""A call routed to kafka-python's "controller" is tried again on a fresh client when its broker is gone."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from kafka import errors as kp_errors

import airflow_kafka_reassign.kafka.admin.client as admin_module  # where the clients are made
from airflow_kafka_reassign.kafka.admin import FRESH_CONTROLLER_ATTEMPTS, KafkaClusterAdmin

DEAD = 5  # the broker killed: its port refuses connections


class Manager:
    """kafka-python's connection manager as ``_pin_live_controller`` uses it: each Metadata answer names the next
    of ``named`` as controller."""

    def __init__(self, named: list[int]) -> None:
        self.named = named
        self.cluster = self
        self.asked = 0

    def run(self, fn, *args):
        self.asked += 1
        return self.named.pop(0) if self.named else 1

    def broker_metadata(self, node_id: int):
        return SimpleNamespace(node_id=node_id, host="127.0.0.1", port=9000 + node_id)


class Client:
    def __init__(self, named: list[int] | None = None, **_kw: object) -> None:
        self.closed = False
        self._manager = Manager(list(named or []))
        self._refresh_controller_id = object()
        self._controller_id = None

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def admin(monkeypatch):
    made: list[Client] = []
    slept: list[float] = []
    namings: list[list[int]] = []  # what each fresh client's Metadata answers name as controller, in turn

    def client(**kw: object) -> Client:
        made.append(Client(namings.pop(0) if namings else None, **kw))
        return made[-1]

    monkeypatch.setattr(admin_module, "SafeKafkaAdminClient", client)
    monkeypatch.setattr(admin_module, "accepts_connections", lambda host, port, *a: port != 9000 + DEAD)
    monkeypatch.setattr(time, "sleep", slept.append)
    adapter = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"})
    adapter.namings = namings  # type: ignore[attr-defined]
    return adapter, made, slept


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
    assert [c._controller_id for c in made] == [None, 1, 1]  # noqa: SLF001 (each fresh one routed to a live broker)
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


def test_a_fresh_client_is_routed_past_a_controller_that_refuses_connections(admin):
    """A broker killed a moment ago is still named as "controller" by some brokers until it is fenced: the fresh
    client asks again until the one named accepts a connection."""
    adapter, made, slept = admin
    adapter.namings.extend([[], [DEAD, DEAD, 3]])  # the first client's own; the fresh one's first two answers: 5
    call, calls = failing(1)
    assert adapter._with_fresh_controller(call) == "listed"  # noqa: SLF001
    assert made[1]._controller_id == 3 and made[1]._manager.asked == 3  # noqa: SLF001
    assert [s for s in slept if s] == [admin_module.CONTROLLER_RELEARN_S] * 2
