"""wait_until: the first truthy value of a condition, polled at a fixed pace until a deadline."""

from __future__ import annotations

import itertools
import time

import pytest

from airflow_kafka_reassign.sandbox.waiting import wait_until


@pytest.fixture
def clock(monkeypatch):
    """time.sleep advances time.monotonic: no real waiting."""
    now = [1000.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    monkeypatch.setattr(time, "sleep", sleep)
    return slept


def test_the_first_truthy_value_is_returned(clock):
    values = iter([None, 0, [], ["broker 4"]])
    assert wait_until(lambda: next(values), "broker 4", every=0.5) == ["broker 4"]
    assert clock == [0.5, 0.5, 0.5]


def test_no_poll_comes_after_the_timeout(clock):
    polls = itertools.count(1)
    seen: list[int] = []
    with pytest.raises(TimeoutError, match=r"^timed out after 2 s waiting for the ISR$"):
        wait_until(lambda: seen.append(next(polls)), "the ISR", timeout=2, every=0.5)
    assert seen == [1, 2, 3, 4] and sum(clock) < 2  # at 0, 0.5, 1 and 1.5 s


def test_an_error_of_the_condition_ends_the_wait(clock):
    def cond() -> bool:
        raise KeyError("topic")

    with pytest.raises(KeyError):
        wait_until(cond, "the topic")
    assert clock == []
