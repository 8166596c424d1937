from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from airflow_kafka_reassign.core.records.snapshot_io import (
    PARTITIONS_SCHEMA,
    partitions_table,
    read_snapshot,
    write_partitions,
    write_snapshot,
)
from airflow_kafka_reassign.core.vocabulary.models import Broker, ClusterSnapshot, PartitionState, SnapshotCheck, TopicState


def snapshot() -> ClusterSnapshot:
    return ClusterSnapshot(
        cluster_id="c1",
        brokers=(Broker(id=1, rack="r1"), Broker(id=2, rack=None), Broker(id=3, rack="r3")),
        topics=(
            TopicState(name="a", topic_id="MRx6ma28Sd6HMucLnct_fg", partition_count=2, replication_factor=2,
                       configs={"cleanup.policy": "compact"}),
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


def test_snapshot_round_trips_with_partitions_sorted(tmp_path):
    snap = snapshot()
    back = read_snapshot(write_snapshot(snap, tmp_path / "s"))
    by_tp = sorted(snap.partitions, key=lambda p: (p.topic, p.partition))
    assert back == snap.model_copy(update={"partitions": tuple(by_tp), "check": SnapshotCheck.of(snap)})


def test_the_topic_ids_are_a_column_of_topics_parquet_and_read_back(tmp_path):
    write_snapshot(snapshot(), tmp_path)
    rows = pq.read_table(tmp_path / "topics.parquet").to_pylist()
    assert {r["name"]: r["topic_id"] for r in rows} == {"a": "MRx6ma28Sd6HMucLnct_fg", "__consumer_offsets": None}
    back = read_snapshot(tmp_path)
    assert back.topic_ids() == {"a": "MRx6ma28Sd6HMucLnct_fg"} and back.topic("__consumer_offsets").topic_id is None


def test_a_snapshot_written_before_topic_ids_reads_with_none(tmp_path):
    write_snapshot(snapshot(), tmp_path)
    table = pq.read_table(tmp_path / "topics.parquet")
    pq.write_table(table.drop_columns(["topic_id"]), tmp_path / "topics.parquet")  # the columns of older versions
    assert "topic_id" not in pq.read_schema(tmp_path / "topics.parquet").names
    back = read_snapshot(tmp_path)
    assert [t.topic_id for t in back.topics] == [None, None] and back.topic_ids() is None
    assert back.topic("a").configs == {"cleanup.policy": "compact"}  # the rest reads as before


def test_snapshot_json_records_the_counts_it_was_checked_with(tmp_path):
    write_snapshot(snapshot(), tmp_path)
    check = json.loads((tmp_path / "snapshot.json").read_text())["check"]
    assert check == {"source": "content", "topics": 2, "partitions": 3, "replicas": 8, "replica_sizes": False,
                     "partition_counts": {"__consumer_offsets": 1, "a": 2}, "attempts": None, "settle_s": None}
    taken = snapshot().model_copy(update={"check": SnapshotCheck.of(snapshot(), source="cluster", attempts=3,
                                                                     settle_s=0.75)})
    write_snapshot(taken, tmp_path / "taken")
    assert read_snapshot(tmp_path / "taken").check == taken.check


def drop_rows(path, keep) -> None:
    table = pq.read_table(path / "partitions.parquet").to_pylist()
    pq.write_table(pa.Table.from_pylist([r for r in table if keep(r)], schema=PARTITIONS_SCHEMA),
                   path / "partitions.parquet")


def test_files_that_do_not_hold_the_recorded_counts_are_refused_naming_the_topic(tmp_path):
    write_snapshot(snapshot(), tmp_path)
    drop_rows(tmp_path, lambda r: (r["topic"], r["partition"]) != ("a", 1))
    with pytest.raises(ValueError, match=r"snapshot .* does not hold what it recorded: topic 'a': snapshot.json "
                                         r"records 2 partition\(s\) \(0-1\), partitions.parquet has 1 row\(s\) "
                                         r"with 1 distinct id\(s\) from 0 to 0\. .*take a new snapshot"):
        read_snapshot(tmp_path)


def test_a_snapshot_without_the_record_still_reads_with_a_warning(tmp_path, caplog):
    write_snapshot(snapshot(), tmp_path)
    meta = json.loads((tmp_path / "snapshot.json").read_text())
    del meta["check"]
    (tmp_path / "snapshot.json").write_text(json.dumps(meta))
    drop_rows(tmp_path, lambda r: r["topic"] == "a")  # unchecked: nothing to tell it from a whole snapshot
    assert len(read_snapshot(tmp_path).partitions) == 2
    assert "records no check of its partition counts" in caplog.text


def test_a_partial_snapshot_is_never_written(tmp_path):
    snap = snapshot()
    partial = snap.model_copy(update={"partitions": snap.partitions[1:]})
    with pytest.raises(ValueError, match=r"refusing to write a partial snapshot: topic 'a' of 2 partition\(s\) "
                                         r"lacks partition\(s\) 0"):
        write_snapshot(partial, tmp_path / "p")
    taken = snap.model_copy(update={"check": SnapshotCheck.of(snap, source="cluster")})
    trimmed = taken.model_copy(update={"topics": snap.topics[:1], "partitions": snap.partitions[:2]})
    with pytest.raises(ValueError, match="no longer holds what its check records"):
        write_snapshot(trimmed, tmp_path / "t")
    assert not (tmp_path / "p" / "snapshot.json").exists() and not (tmp_path / "t").exists()
    write_snapshot(trimmed.model_copy(update={"check": None}), tmp_path / "t")


def test_a_topic_is_whole_in_one_row_group_so_spark_splits_hold_whole_topics(tmp_path):
    sizes = {"big": 23, "a": 3, "c": 1, "d": 7, "b": 4}  # written in a shuffled order
    parts = [PartitionState(topic=t, partition=p, replicas=(1, 2)) for p in range(30) for t in sizes if p < sizes[t]]
    snap = snapshot().model_copy(update={
        "topics": tuple(TopicState(name=t, partition_count=n, replication_factor=2) for t, n in sizes.items()),
        "partitions": tuple(parts),
    })
    path = tmp_path / "partitions.parquet"
    write_partitions(partitions_table(snap), path, rows=5)
    f = pq.ParquetFile(path)
    groups = [f.read_row_group(i).select(["topic", "partition"]).to_pylist() for i in range(f.num_row_groups)]
    assert f.num_row_groups > 2 and all(len(g) >= 5 for g in groups[:-1])
    flat = [(r["topic"], r["partition"]) for g in groups for r in g]
    assert flat == sorted(flat) and len(flat) == len(parts)
    topics_of = [{r["topic"] for r in g} for g in groups]
    assert all(not (a & b) for i, a in enumerate(topics_of) for b in topics_of[i + 1:])  # no topic in two groups
    assert {"big"} in topics_of  # a topic bigger than a group is a group of its own


def test_snapshot_files_are_plain_parquet(tmp_path):
    write_snapshot(snapshot(), tmp_path)
    rows = pq.read_table(tmp_path / "partitions.parquet").to_pylist()
    assert rows[1]["topic"] == "a" and rows[1]["replicas"] == [1, 2] and rows[1]["replica_sizes"] == [10, 12]
    assert json.loads((tmp_path / "snapshot.json").read_text())["format_version"] == 1


def test_reading_validates_and_names_the_partition(tmp_path):
    write_snapshot(snapshot(), tmp_path)
    table = pq.read_table(tmp_path / "partitions.parquet").to_pylist()
    table[1]["replicas"] = [1, 1]
    pq.write_table(pa.Table.from_pylist(table, schema=PARTITIONS_SCHEMA), tmp_path / "partitions.parquet")
    with pytest.raises(ValidationError, match=r"partition a-0: replicas \[1, 1\] lists broker 1 twice"):
        read_snapshot(tmp_path)


def test_not_a_snapshot_directory(tmp_path):
    with pytest.raises(ValueError, match="snapshot.json is missing"):
        read_snapshot(tmp_path)
