"""core/maintenance/lifecycle.py on the fake: wait until a broker is shut down, unregister it, verify."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.maintenance.lifecycle import (
    BrokerStillRunningError,
    LifecycleTimeoutError,
    broker_state,
    is_shut_down,
    unregister,
    wait_for_shutdown,
)
from airflow_kafka_reassign.core.records.journal import read_journal
from airflow_kafka_reassign.core.records.store import MemoryStore
from airflow_kafka_reassign.core.vocabulary.ports import BrokerResult, ClusterCapabilities, ClusterDescription, RegisteredBroker
from airflow_kafka_reassign.exceptions import UnsupportedBrokerError
from airflow_kafka_reassign.testing import FakeClusterAdmin


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def sleep(self, s: float) -> None:
        self.t += s

    def __call__(self) -> float:
        return self.t


def fake() -> FakeClusterAdmin:
    return FakeClusterAdmin.build({1: None, 2: None, 3: None, 4: None}, {"t": [[1, 2]]})


def test_states():
    d = ClusterDescription(brokers=(RegisteredBroker(id=1), RegisteredBroker(id=4, fenced=True)), includes_fenced=True)
    assert [broker_state(d, b) for b in (1, 4, 9)] == ["running", "fenced", "unregistered"]
    assert not is_shut_down(d, 1) and is_shut_down(d, 4) and is_shut_down(d, 9)


def test_wait_for_shutdown_polls_until_fenced_and_times_out_naming_the_running():
    f, clock = fake(), Clock()
    calls = {"n": 0}
    describe = f.describe_cluster

    def stopping(**kw):
        calls["n"] += 1
        if calls["n"] == 3:
            f.down.add(4)
        return describe(**kw)
    f.describe_cluster = stopping  # type: ignore[method-assign]
    assert wait_for_shutdown(f, [4], timeout_s=10, sleep=clock.sleep, clock=clock).broker(4).fenced
    assert calls["n"] == 3
    with pytest.raises(LifecycleTimeoutError, match=r"broker\(s\) \[3\] are still running 5 s later"):
        wait_for_shutdown(f, [3, 4], timeout_s=5, sleep=clock.sleep, clock=clock)


def test_a_running_broker_is_never_unregistered():
    f = fake()
    with pytest.raises(BrokerStillRunningError, match="still running.*STALE_BROKER_EPOCH.*Nothing was sent"):
        unregister(f, 4)
    assert 4 in {b.id for b in f.brokers}


def test_a_fenced_broker_is_unregistered_and_verified_and_a_retry_is_a_no_op():
    f, store = fake(), MemoryStore()
    f.down.add(4)
    out = unregister(f, 4, state_dir=store, sleep=lambda s: None)
    assert out.outcome == "unregistered" and out.before == "fenced"
    assert f.describe_cluster(include_fenced=True).broker(4) is None
    assert [e["event"] for e in read_journal(store)] == ["broker-unregistered"]
    assert unregister(f, 4).outcome == "already"


def test_a_registration_that_stays_listed_times_out():
    f, clock = fake(), Clock()
    f.down.add(4)
    f.unregister_broker = lambda b: BrokerResult(broker=b)  # type: ignore[method-assign]  # accepted, never applied
    with pytest.raises(LifecycleTimeoutError, match="still listed"):
        unregister(f, 4, check_s=3, sleep=clock.sleep, clock=clock)


def test_unregistered_means_on_every_broker_the_check_waits_for_them_to_apply_it():
    f, clock, store = fake(), Clock(), MemoryStore()
    f.down.add(4)
    f.metadata_lag_polls = 3  # the answering broker no longer lists it; the others replay the record a moment later
    out = unregister(f, 4, state_dir=store, sleep=clock.sleep, clock=clock)
    assert out.outcome == "unregistered" and f.metadata_lag_polls == 0  # it asked until none lagged
    assert [e["event"] for e in read_journal(store)] == ["broker-unregistered"]

    f, clock, store = fake(), Clock(), MemoryStore()
    f.down.add(4)
    f.metadata_lag_polls = 10**6  # a broker that never catches up
    with pytest.raises(LifecycleTimeoutError, match=r"not every broker has applied it.*metadata offset 9 of 10"):
        unregister(f, 4, state_dir=store, check_s=3, sleep=clock.sleep, clock=clock)
    assert read_journal(store) == []  # not recorded as done: the step runs again


def test_a_cluster_that_cannot_list_fenced_brokers_is_refused():
    f = FakeClusterAdmin.build({1: None, 2: None}, {"t": [[1]]},
                               capabilities=ClusterCapabilities(unregister_broker=True, fenced_brokers=False))
    f.down.add(2)
    with pytest.raises(UnsupportedBrokerError, match="KIP-1073"):
        unregister(f, 2)


def zookeeper_fake() -> FakeClusterAdmin:
    f = fake()
    f.caps = ClusterCapabilities(zookeeper_mode=True, kafka_line="3.9")  # no UnregisterBroker, no fenced brokers
    return f


def test_zookeeper_mode_has_nothing_to_unregister_once_the_broker_stopped(caplog):
    f = zookeeper_fake()
    f.down.add(4)
    with caplog.at_level("INFO"):
        out = unregister(f, 4, sleep=lambda s: None)
    assert out.outcome == "already" and f.unregistered == set()  # nothing sent
    assert "unregister skipped for broker 4: this cluster runs Kafka 3.9, ZooKeeper mode" in caplog.text


def test_zookeeper_mode_refuses_a_broker_still_running():
    with pytest.raises(BrokerStillRunningError, match="still running.*Kafka 3.9, ZooKeeper mode.*Nothing was sent"):
        unregister(zookeeper_fake(), 4)
