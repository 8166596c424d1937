"""The snapshot file: a directory of Parquet files that pandas, Spark and this package read.

Layout (``format_version`` 1; see docs/formats.md)::

    SNAPSHOT_DIR/
      snapshot.json        {"format_version": 1, "cluster_id": ..., "taken_at": ISO-8601}
      brokers.parquet      id int32, rack string (null: no broker.rack)
      topics.parquet       name string, internal bool, partition_count int32,
                           replication_factor int32, configs map<string, string>
      partitions.parquet   topic string, partition int32, replicas list<int32>,
                           isr list<int32>, leader int32 (null: none),
                           adding_replicas list<int32>, removing_replicas list<int32>,
                           replica_sizes list<int64> (aligned with replicas; null: unknown)

Columnar so that a Spark job reads ``partitions.parquet`` in parallel splits and a million
replicas stay a few tens of MB. Rows are sorted by (topic, partition) and every topic is whole
in one Parquet row group (:data:`ROW_GROUP_ROWS` rows or more per group), so each split the
Spark job reads holds whole topics and the job needs no shuffle (a file written otherwise still
plans: the job then shuffles by topic). Reading validates the whole snapshot with the core
models, so a hand-edited file with a bad replica list fails with the partition named.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_kafka_reassign.core.models import Broker, ClusterSnapshot, PartitionState, TopicState

FORMAT_VERSION = 1

BROKERS_SCHEMA = pa.schema([("id", pa.int32()), ("rack", pa.string())])
TOPICS_SCHEMA = pa.schema([
    ("name", pa.string()), ("internal", pa.bool_()), ("partition_count", pa.int32()),
    ("replication_factor", pa.int32()), ("configs", pa.map_(pa.string(), pa.string())),
])
PARTITIONS_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("replicas", pa.list_(pa.int32())),
    ("isr", pa.list_(pa.int32())), ("leader", pa.int32()),
    ("adding_replicas", pa.list_(pa.int32())), ("removing_replicas", pa.list_(pa.int32())),
    ("replica_sizes", pa.list_(pa.int64())),
])


def partitions_table(snapshot: ClusterSnapshot) -> pa.Table:
    parts = snapshot.partitions
    return pa.table(
        {
            "topic": [p.topic for p in parts],
            "partition": [p.partition for p in parts],
            "replicas": [list(p.replicas) for p in parts],
            "isr": [list(p.isr) for p in parts],
            "leader": [p.leader for p in parts],
            "adding_replicas": [list(p.adding_replicas) for p in parts],
            "removing_replicas": [list(p.removing_replicas) for p in parts],
            "replica_sizes": [
                None if p.replica_sizes is None else [p.replica_sizes.get(b, 0) for b in p.replicas]
                for p in parts
            ],
        },
        schema=PARTITIONS_SCHEMA,
    )


#: Rows per Parquet row group of ``partitions.parquet`` (a group ends at a topic boundary, so
#: one with a bigger topic is bigger): small enough for a few splits per core at 100k rows.
ROW_GROUP_ROWS = 8192


def topic_row_groups(table: pa.Table, rows: int = ROW_GROUP_ROWS) -> list[tuple[int, int]]:
    """(offset, length) of the row groups of ``table`` (sorted by topic): each at least ``rows``
    rows (but the last) and ending where a topic ends, so no topic spans two groups."""
    topics = table.column("topic").to_pylist()
    groups: list[tuple[int, int]] = []
    start = 0
    n = len(topics)
    while start < n:
        end = min(start + rows, n)
        while end < n and topics[end] == topics[end - 1]:
            end += 1
        groups.append((start, end - start))
        start = end
    return groups


def write_partitions(table: pa.Table, path: str | Path, rows: int = ROW_GROUP_ROWS) -> None:
    """``partitions.parquet``: sorted by (topic, partition), a topic whole in one row group."""
    table = table.sort_by([("topic", "ascending"), ("partition", "ascending")])
    with pq.ParquetWriter(path, table.schema) as writer:
        for offset, length in topic_row_groups(table, rows) or [(0, 0)]:
            writer.write_table(table.slice(offset, length), row_group_size=max(1, length))


def write_snapshot(snapshot: ClusterSnapshot, directory: str | Path) -> Path:
    """Write ``snapshot`` into ``directory`` (created); returns the directory."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [b.id for b in snapshot.brokers], "rack": [b.rack for b in snapshot.brokers]},
                            schema=BROKERS_SCHEMA), out / "brokers.parquet")
    pq.write_table(pa.table({
        "name": [t.name for t in snapshot.topics],
        "internal": [t.internal for t in snapshot.topics],
        "partition_count": [t.partition_count for t in snapshot.topics],
        "replication_factor": [t.replication_factor for t in snapshot.topics],
        "configs": [sorted(t.configs.items()) for t in snapshot.topics],
    }, schema=TOPICS_SCHEMA), out / "topics.parquet")
    write_partitions(partitions_table(snapshot), out / "partitions.parquet")
    meta = {"format_version": FORMAT_VERSION, "cluster_id": snapshot.cluster_id,
            "taken_at": snapshot.taken_at.isoformat()}
    (out / "snapshot.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def read_snapshot(directory: str | Path) -> ClusterSnapshot:
    """Read and validate a snapshot directory written by :func:`write_snapshot`."""
    src = Path(directory)
    meta_path = src / "snapshot.json"
    if not meta_path.is_file():
        raise ValueError(f"{src} is not a snapshot directory: {meta_path.name} is missing")
    meta = json.loads(meta_path.read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{src}: snapshot format_version {meta.get('format_version')!r} is not supported "
            f"(this version reads {FORMAT_VERSION}); take a new snapshot"
        )
    brokers = tuple(Broker(id=r["id"], rack=r["rack"]) for r in pq.read_table(src / "brokers.parquet").to_pylist())
    topics = tuple(
        TopicState(name=r["name"], internal=r["internal"], partition_count=r["partition_count"],
                   replication_factor=r["replication_factor"], configs=dict(r["configs"] or []))
        for r in pq.read_table(src / "topics.parquet").to_pylist()
    )
    partitions = []
    for r in pq.read_table(src / "partitions.parquet").to_pylist():
        sizes = r.pop("replica_sizes")
        partitions.append(PartitionState(
            **r, replica_sizes=None if sizes is None else dict(zip(r["replicas"], sizes, strict=True))
        ))
    return ClusterSnapshot(
        cluster_id=meta.get("cluster_id"),
        taken_at=datetime.fromisoformat(meta["taken_at"]),
        brokers=brokers,
        topics=topics,
        partitions=tuple(partitions),
    )
