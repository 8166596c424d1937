"""The in-memory fake's snapshots are complete or fail, as the Kafka adapter's are (testing.py)."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.guards.completeness import DEFAULT_SETTLE_S
from airflow_kafka_reassign.exceptions import ConfigurationError, IncompleteSnapshotError
from airflow_kafka_reassign.testing import FakeClusterAdmin


def fake() -> FakeClusterAdmin:
    return FakeClusterAdmin.build({1: "a", 2: "b", 3: "c"},
                                  {"orders": [[1, 2], [2, 3], [3, 1], [1, 2]], "audit": [[1, 2]]})


def test_a_snapshot_records_its_counts():
    snap = fake().snapshot()
    assert snap.check.source == "cluster" and snap.check.attempts == 1
    assert snap.check.partition_counts == {"audit": 1, "orders": 4} and snap.check.replicas == 10


def test_a_topic_settling_for_a_few_reads_is_waited_for():
    f = fake()
    f.hide("orders", configs=True, partitions=[1], reads=3)
    snap = f.snapshot()
    assert snap.check.attempts == 4 and f.snapshot_reads == 4
    assert len(snap.partitions) == 5 and 0 < f.now < DEFAULT_SETTLE_S


def test_hidden_configs_fail_the_snapshot_naming_the_topic_once_the_budget_is_spent():
    f = fake()
    f.hide("audit", configs=True)
    with pytest.raises(IncompleteSnapshotError, match=r"'audit': configs\. .*no plan was made") as e:
        f.snapshot(settle_timeout_s=5)
    assert e.value.missing == {"audit": ("configs",)}
    assert f.now == 5


def test_a_partition_missing_from_the_metadata_fails_the_snapshot():
    f = fake()
    f.hide("orders", partitions=[2])
    with pytest.raises(IncompleteSnapshotError, match=r"'orders': metadata of partition\(s\) 2 \(of 0-3\)"):
        f.snapshot()
    f.reveal()
    assert len(f.snapshot().partitions) == 5


def test_only_the_selected_topics_must_be_complete():
    f = fake()
    f.hide("audit", configs=True)
    assert [t.name for t in f.snapshot(topics=["orders"]).topics] == ["orders"]
    with pytest.raises(ConfigurationError, match="do not exist"):
        f.snapshot(topics=["gone"])
