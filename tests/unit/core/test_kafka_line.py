"""The Kafka lines the provider runs on (core/guards/kafka_line.py), on the in-memory fake: the floor (Kafka 3.0)
refused before anything is sent, and the replication-factor guard ``rf_guard="auto"`` chooses on a ZooKeeper-mode
cluster (client-side, said in the log and the summary) while a forced ``"broker"`` fails naming the line. The same
on a real ZooKeeper-mode 3.9 cluster: tests/integration/test_zookeeper_mode.py."""

from __future__ import annotations

import logging

import pytest
from execution_helpers import RACKS, mv, plan_of, tp

from airflow_kafka_reassign.core.execution import ExecutionOptions, run
from airflow_kafka_reassign.core.execution.config import ExecutionLimits
from airflow_kafka_reassign.core.guards.kafka_line import check_kafka_line, choose_rf_guard
from airflow_kafka_reassign.core.vocabulary.ports import ClusterCapabilities
from airflow_kafka_reassign.exceptions import UnsupportedBrokerError
from airflow_kafka_reassign.testing import FakeClusterAdmin

NO_LIMITS = ExecutionLimits()
ZK_39 = ClusterCapabilities(zookeeper_mode=True, kafka_line="3.9")
KRAFT_39 = ClusterCapabilities(metadata_version=21, describe_quorum=True, unregister_broker=True, jbod=True,
                               kafka_line="3.9")


def cluster(caps: ClusterCapabilities, *, kip860: bool = False) -> FakeClusterAdmin:
    f = FakeClusterAdmin.build(brokers=RACKS, topics={"t": [[1, 2], [2, 3]]}, rf_guard_supported=kip860)
    f.caps = caps
    return f


@pytest.mark.parametrize("line", ["2.8", "2.4", "0.11"])
def test_a_cluster_older_than_3_0_is_refused_before_anything_is_sent_naming_its_line(tmp_path, line):
    f = cluster(ClusterCapabilities(zookeeper_mode=True, kafka_line=line))
    with pytest.raises(UnsupportedBrokerError, match=rf"runs Kafka {line}, ZooKeeper mode .*needs Apache Kafka 3\.0 "
                                                     r"or newer.*Nothing was sent"):
        run(f, plan_of(mv("t", 0, (1, 2), (4, 2))), NO_LIMITS, ExecutionOptions(throttle_bytes_per_sec=1000),
            state_dir=tmp_path, sleep=lambda s: None, settle_s=0, wait=False)
    assert f.alter_requests == [] and f.broker_configs == {b: {} for b in RACKS}  # no throttle either


@pytest.mark.parametrize("line", ["3.0", "3.9", "4.4", None])
def test_kafka_3_0_and_newer_pass_the_floor(line):
    check_kafka_line(ClusterCapabilities(zookeeper_mode=True, kafka_line=line))


def test_auto_chooses_the_client_side_guard_on_zookeeper_mode_and_says_so(tmp_path, caplog):
    f = cluster(ZK_39)
    with caplog.at_level(logging.WARNING):
        result = run(f, plan_of(mv("t", 0, (1, 2), (4, 2))), NO_LIMITS, ExecutionOptions(), state_dir=tmp_path,
                     sleep=lambda s: None, settle_s=0, wait=False)
    assert result.status.submitted == [tp("t", 0)] and result.status.blocked is None
    summary = result.summary()
    assert summary["rf_guard"] == "client" and "ZooKeeper mode" in summary["rf_guard_why"]
    assert "rf_guard='auto' chose 'client': this cluster runs Kafka 3.9, ZooKeeper mode" in caplog.text


def test_broker_forced_on_zookeeper_mode_fails_naming_the_line(tmp_path):
    f = cluster(ZK_39)
    result = run(f, plan_of(mv("t", 0, (1, 2), (4, 2))), NO_LIMITS, ExecutionOptions(rf_guard="broker"),
                 state_dir=tmp_path, sleep=lambda s: None, settle_s=0, wait=False)
    assert "the brokers (Kafka 3.9, ZooKeeper mode) do not support KIP-860" in result.status.blocked
    assert f.alter_requests == [] and result.summary()["rf_guard"] == "broker"


def test_auto_on_kraft_before_4_1_stays_the_broker_guard_and_is_refused(tmp_path):
    f = cluster(KRAFT_39)
    result = run(f, plan_of(mv("t", 0, (1, 2), (4, 2))), NO_LIMITS, ExecutionOptions(), state_dir=tmp_path,
                 sleep=lambda s: None, settle_s=0)
    assert "the brokers (Kafka 3.9) do not support KIP-860" in result.status.blocked and f.alter_requests == []


@pytest.mark.parametrize(("requested", "supported", "caps", "chosen"), [
    ("auto", True, ClusterCapabilities(kafka_line="4.4"), "broker"),
    ("auto", None, ZK_39, "broker"),  # cannot tell: the broker guard, which the adapter checks before sending
    ("auto", False, ZK_39, "client"),
    ("auto", False, KRAFT_39, "broker"),
    ("broker", False, ZK_39, "broker"),
    ("client", True, ClusterCapabilities(), "client"),
])
def test_choose_rf_guard(requested, supported, caps, chosen):
    guard, why = choose_rf_guard(requested, supported=supported, caps=caps)
    assert guard == chosen and (why is not None) == (requested == "auto" and chosen == "client")
