from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from airflow_kafka_reassign.core.models import Broker, ClusterSnapshot, PartitionState, TopicState
from airflow_kafka_reassign.core.snapshot_io import read_snapshot, write_snapshot


def snapshot() -> ClusterSnapshot:
    return ClusterSnapshot(
        cluster_id="c1",
        brokers=(Broker(id=1, rack="r1"), Broker(id=2, rack=None), Broker(id=3, rack="r3")),
        topics=(
            TopicState(name="a", partition_count=2, replication_factor=2, configs={"cleanup.policy": "compact"}),
            TopicState(name="__consumer_offsets", internal=True, partition_count=1, replication_factor=3),
        ),
        partitions=(
            PartitionState(topic="a", partition=0, replicas=(1, 2), isr=(1, 2), leader=1,
                           replica_sizes={1: 10, 2: 12}),
            PartitionState(topic="a", partition=1, replicas=(2, 3, 1), isr=(2,), leader=None,
                           adding_replicas=(1,), removing_replicas=(3,)),
            PartitionState(topic="__consumer_offsets", partition=0, replicas=(1, 2, 3)),
        ),
    )


def test_snapshot_round_trips(tmp_path):
    snap = snapshot()
    assert read_snapshot(write_snapshot(snap, tmp_path / "s")) == snap


def test_snapshot_files_are_plain_parquet(tmp_path):
    write_snapshot(snapshot(), tmp_path)
    rows = pq.read_table(tmp_path / "partitions.parquet").to_pylist()
    assert rows[0]["replicas"] == [1, 2] and rows[0]["replica_sizes"] == [10, 12]
    assert json.loads((tmp_path / "snapshot.json").read_text())["format_version"] == 1


def test_reading_validates_and_names_the_partition(tmp_path):
    write_snapshot(snapshot(), tmp_path)
    table = pq.read_table(tmp_path / "partitions.parquet").to_pylist()
    table[0]["replicas"] = [1, 1]
    import pyarrow as pa

    from airflow_kafka_reassign.core.snapshot_io import PARTITIONS_SCHEMA
    pq.write_table(pa.Table.from_pylist(table, schema=PARTITIONS_SCHEMA), tmp_path / "partitions.parquet")
    with pytest.raises(ValidationError, match=r"partition a-0: replicas \[1, 1\] lists broker 1 twice"):
        read_snapshot(tmp_path)


def test_not_a_snapshot_directory(tmp_path):
    with pytest.raises(ValueError, match="snapshot.json is missing"):
        read_snapshot(tmp_path)
