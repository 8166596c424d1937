"""The snapshot file: a directory of Parquet files that pandas, Spark and this package read.

Layout (``format_version`` 1; see docs/formats.md)::

    SNAPSHOT_DIR/
      snapshot.json        {"format_version": 1, "cluster_id": ..., "taken_at": ISO-8601,
                            "check": {"source", "topics", "partitions", "replicas", "replica_sizes",
                                      "partition_counts": {topic: n}, "attempts", "settle_s"},
                            "bytes_in": {"window_s", "shrunk", "unmeasured"} (only when sampled)}
      brokers.parquet      id int32, rack string (null: no broker.rack)
      topics.parquet       name string, internal bool, partition_count int32,
                           replication_factor int32, configs map<string, string>,
                           topic_id string (KIP-516, as Kafka prints it; null: not known;
                           optional: older snapshots have no such column and read with None)
      partitions.parquet   topic string, partition int32, replicas list<int32>,
                           isr list<int32>, leader int32 (null: none),
                           adding_replicas list<int32>, removing_replicas list<int32>,
                           replica_sizes list<int64> (aligned with replicas; null: unknown),
                           bytes_in_per_s float64 (estimated bytes/s; null: not sampled;
                           optional: older snapshots have no such column)

Columnar so that a Spark job reads ``partitions.parquet`` in parallel splits and a million
replicas stay a few tens of MB. Rows are sorted by (topic, partition) and every topic is whole
in one Parquet row group (:data:`ROW_GROUP_ROWS` rows or more per group), so each split the
Spark job reads holds whole topics and the job needs no shuffle (a file written otherwise still
plans: the job then shuffles by topic). Reading validates the whole snapshot with the core
models, so a hand-edited file with a bad replica list fails with the partition named.

``check`` records the snapshot's counts (:class:`~airflow_kafka_reassign.core.vocabulary.models.SnapshotCheck`):
:func:`write_snapshot` refuses a snapshot whose partitions do not cover each topic's partition count,
and :func:`read_snapshot` (like the Spark plan job) refuses files that do not hold what it records
(:func:`check_files`), naming the topic and the counts. A snapshot written before the record existed
still reads, with a warning.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_kafka_reassign.core.guards.completeness import PartitionIds, compare_counts, id_ranges, mismatch_message
from airflow_kafka_reassign.core.vocabulary.models import (
    Broker,
    BytesInWindow,
    ClusterSnapshot,
    PartitionState,
    SnapshotCheck,
    TopicState,
)

log = logging.getLogger(__name__)

FORMAT_VERSION = 1

BROKERS_SCHEMA = pa.schema([("id", pa.int32()), ("rack", pa.string())])
TOPICS_SCHEMA = pa.schema([
    ("name", pa.string()), ("internal", pa.bool_()), ("partition_count", pa.int32()),
    ("replication_factor", pa.int32()), ("configs", pa.map_(pa.string(), pa.string())),
    ("topic_id", pa.string()),
])
PARTITIONS_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("replicas", pa.list_(pa.int32())),
    ("isr", pa.list_(pa.int32())), ("leader", pa.int32()),
    ("adding_replicas", pa.list_(pa.int32())), ("removing_replicas", pa.list_(pa.int32())),
    ("replica_sizes", pa.list_(pa.int64())), ("bytes_in_per_s", pa.float64()),
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
            "bytes_in_per_s": [p.bytes_in_per_s for p in parts],
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


def content_check(snapshot: ClusterSnapshot) -> SnapshotCheck:
    """The counts of ``snapshot`` to record, after checking that it is whole: every topic's
    partitions 0 to ``partition_count`` - 1, each once, no partition of a topic it does not list,
    and, when the snapshot carries a :class:`SnapshotCheck`, the same counts. ``ValueError``
    naming the topic otherwise: a partial snapshot is never written."""
    ids: dict[str, list[int]] = defaultdict(list)
    for p in snapshot.partitions:
        ids[p.topic].append(p.partition)
    problems = []
    listed = {t.name: t.partition_count for t in snapshot.topics}
    for name in sorted(set(ids) | set(listed)):
        have = sorted(ids.get(name, ()))
        want = listed.get(name)
        if want is None:
            problems.append(f"partitions of topic {name!r}, which is not in its topics")
        elif have != list(range(want)):
            absent = sorted(set(range(want)) - set(have))
            extra = sorted(set(have) - set(range(want)))
            what = [f"lacks partition(s) {id_ranges(absent)}"] if absent else []
            what += [f"has partition(s) {id_ranges(extra)} beyond"] if extra else []
            what += ["lists a partition twice"] if not what else []
            problems.append(f"topic {name!r} of {want} partition(s) {' and '.join(what)}")
    if problems:
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise ValueError(f"refusing to write a partial snapshot: {'; '.join(problems[:5])}{more}")
    counted = SnapshotCheck.of(snapshot)
    if snapshot.check is None:
        return counted
    if not snapshot.check.same_counts(counted):
        raise ValueError(
            f"refusing to write a snapshot that no longer holds what its check records ({snapshot.check.partitions} "
            f"partition(s) of {snapshot.check.topics} topic(s), {snapshot.check.replicas} replica(s); it holds "
            f"{counted.partitions}, {counted.topics} and {counted.replicas}): it was changed after it was taken. "
            "Take a new snapshot, or write the changed one with check=None (model_copy(update={'check': None}))"
        )
    return snapshot.check


def write_snapshot(snapshot: ClusterSnapshot, directory: str | Path) -> Path:
    """Write ``snapshot`` into ``directory`` (created); returns the directory.

    snapshot.json records the counts (:func:`content_check`: a snapshot that does not hold every
    partition of its topics is refused with ``ValueError``)."""
    check = content_check(snapshot)
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
        "topic_id": [t.topic_id for t in snapshot.topics],
    }, schema=TOPICS_SCHEMA), out / "topics.parquet")
    write_partitions(partitions_table(snapshot), out / "partitions.parquet")
    meta = {"format_version": FORMAT_VERSION, "cluster_id": snapshot.cluster_id,
            "taken_at": snapshot.taken_at.isoformat(), "check": check.model_dump(mode="json")}
    if snapshot.bytes_in is not None:
        meta["bytes_in"] = snapshot.bytes_in.model_dump(mode="json")
    (out / "snapshot.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def read_meta(directory: str | Path) -> dict[str, Any]:
    """snapshot.json of a snapshot directory (``ValueError`` when it is not one, or of another format)."""
    src = Path(directory)
    meta_path = src / "snapshot.json"
    if not meta_path.is_file():
        raise ValueError(f"{src} is not a snapshot directory: {meta_path.name} is missing")
    try:
        meta: dict[str, Any] = json.loads(meta_path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{meta_path} is not valid JSON ({e}); take a new snapshot") from None
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{src}: snapshot format_version {meta.get('format_version')!r} is not supported "
            f"(this version reads {FORMAT_VERSION}); take a new snapshot"
        )
    return meta


def recorded_check(meta: dict[str, Any], where: str) -> SnapshotCheck | None:
    """The :class:`SnapshotCheck` snapshot.json records; ``None`` (with a warning) for a snapshot
    written before the record existed."""
    raw = meta.get("check")
    if raw is None:
        log.warning("snapshot %s records no check of its partition counts (written by an older version): "
                    "reading it unchecked; take a new snapshot to have it checked", where)
        return None
    try:
        return SnapshotCheck.model_validate(raw)
    except ValueError as e:
        raise ValueError(f"snapshot {where}: snapshot.json's check is not valid ({e}); take a new snapshot") from None


def partition_ids(table: pa.Table) -> tuple[dict[str, PartitionIds], int, bool]:
    """Per topic of a partitions table (columns topic, partition, replicas, replica_sizes): its
    :class:`PartitionIds`; the replicas in all; whether every row has sizes. Vectorised: a
    million rows take a fraction of a second."""
    grouped = table.select(["topic", "partition"]).group_by("topic").aggregate([
        ("partition", "count"), ("partition", "count_distinct"), ("partition", "min"), ("partition", "max"),
    ])
    stats = {
        t: PartitionIds(int(n), int(d), int(lo), int(hi))
        for t, n, d, lo, hi in zip(
            grouped.column("topic").to_pylist(), grouped.column("partition_count").to_pylist(),
            grouped.column("partition_count_distinct").to_pylist(), grouped.column("partition_min").to_pylist(),
            grouped.column("partition_max").to_pylist(), strict=True)
    }
    replicas = int(pc.sum(pc.list_value_length(table.column("replicas"))).as_py() or 0) if table.num_rows else 0
    sizes = table.column("replica_sizes").null_count == 0 if "replica_sizes" in table.column_names else False
    return stats, replicas, sizes


def check_files(directory: str | Path, *, meta: dict[str, Any] | None = None) -> SnapshotCheck | None:
    """Check a snapshot directory's Parquet files against the counts snapshot.json records: the
    record, or ``None`` (a warning) when it has none. ``ValueError`` naming the topic and the
    counts when they disagree (what the plan job turns into exit code 2)."""
    src = Path(directory)
    record = recorded_check(read_meta(src) if meta is None else meta, str(src))
    if record is None:
        return None
    topics = pq.read_table(src / "topics.parquet", columns=["name", "partition_count"])
    stats, replicas, sizes = partition_ids(
        pq.read_table(src / "partitions.parquet", columns=["topic", "partition", "replicas", "replica_sizes"]))
    problems = compare_counts(
        record,
        topics=dict(zip(topics.column("name").to_pylist(), topics.column("partition_count").to_pylist(), strict=True)),
        partitions=stats, replicas=replicas, sizes_complete=sizes,
    )
    if problems:
        raise ValueError(mismatch_message(str(src), problems))
    return record


def read_snapshot(directory: str | Path) -> ClusterSnapshot:
    """Read and validate a snapshot directory written by :func:`write_snapshot`: every partition
    with the models, and the files against the counts snapshot.json records (:func:`check_files`;
    a snapshot without the record reads with a warning)."""
    src = Path(directory)
    meta = read_meta(src)
    check = check_files(src, meta=meta)
    brokers = tuple(Broker(id=r["id"], rack=r["rack"]) for r in pq.read_table(src / "brokers.parquet").to_pylist())
    topics = tuple(
        TopicState(name=r["name"], topic_id=r.get("topic_id"), internal=r["internal"],
                   partition_count=r["partition_count"], replication_factor=r["replication_factor"],
                   configs=dict(r["configs"] or []))
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
        check=check,
        bytes_in=BytesInWindow.model_validate(meta["bytes_in"]) if meta.get("bytes_in") else None,
    )
