"""How the Spark plan job reads partitions.parquet, without Spark: the topic grouping over Arrow
batches and the row-group splits executors read with pyarrow (the job itself runs in
tests/integration/test_plan_job_readers.py)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_kafka_reassign.core.planner.synthetic import synthetic_snapshot
from airflow_kafka_reassign.core.records.snapshot_io import PARTITIONS_SCHEMA, partitions_table, write_partitions
from airflow_kafka_reassign.core.vocabulary.models import PartitionState
from airflow_kafka_reassign.spark.snapshot_reader import (
    read_row_groups,
    row_group_index,
    row_group_splits,
    topic_groups,
    topics_between,
)


def batch(rows: list[dict]) -> pa.RecordBatch:
    full = [{"isr": None, "leader": None, "adding_replicas": [], "removing_replicas": [], "replica_sizes": None} | r
            for r in rows]
    return pa.RecordBatch.from_pylist(full, schema=PARTITIONS_SCHEMA)


def test_a_topic_spanning_batches_is_one_group_sorted_by_partition():
    groups = list(topic_groups([
        batch([{"topic": "a", "partition": 1, "replicas": [1, 2]}, {"topic": "b", "partition": 2, "replicas": [2, 3]}]),
        batch([{"topic": "b", "partition": 0, "replicas": [3, 1], "adding_replicas": None},
               {"topic": "c", "partition": 0, "replicas": [1], "replica_sizes": [7]}]),
    ]))
    assert [t for t, _ in groups] == ["a", "b", "c"]
    b = groups[1][1]
    assert [(r.partition, r.replicas, r.adding_replicas) for r in b] == [(0, (3, 1), ()), (2, (2, 3), ())]
    assert groups[2][1][0].replica_sizes == {1: 7}


def test_a_sliced_batch_reads_its_own_rows():
    whole = batch([{"topic": "a", "partition": p, "replicas": [p, p + 1], "adding_replicas": [p + 1],
                    "removing_replicas": [p]} for p in range(6)])
    [(topic, rows)] = list(topic_groups([whole.slice(2, 3)]))
    assert [(r.partition, r.replicas, r.adding_replicas, r.removing_replicas) for r in rows] == [
        (p, (p, p + 1), (p + 1,), (p,)) for p in (2, 3, 4)
    ]


def test_a_topic_whose_rows_are_apart_comes_out_twice_and_a_bad_row_names_the_partition():
    groups = list(topic_groups([batch([
        {"topic": "a", "partition": 0, "replicas": [1, 2]},
        {"topic": "b", "partition": 0, "replicas": [2, 2]},
        {"topic": "a", "partition": 1, "replicas": [1, 2]},
    ])]))
    assert [t for t, _ in groups] == ["a", "b", "a"]  # the driver sees "a" twice and shuffles
    assert groups[1][1] == "partition b-0: replicas [2, 2] lists broker 2 twice; each broker may hold one replica of a partition"


def test_splits_cover_the_row_groups_in_order_in_runs_of_similar_size(tmp_path):
    snap = synthetic_snapshot(brokers=6, racks=3, topics=40, seed=3)
    write_partitions(partitions_table(snap), tmp_path / "partitions.parquet", rows=50)
    groups = pq.ParquetFile(tmp_path / "partitions.parquet").metadata.num_row_groups
    index = row_group_index(str(tmp_path))
    assert index is not None
    splits = row_group_splits(index, 4)
    assert len(splits) == 4
    assert [g for _, gs in splits for g in gs] == list(range(groups))
    sizes = [sum(b.num_rows for b in read_row_groups(path, gs)) for path, gs in splits]
    assert sum(sizes) == len(snap.partitions) and max(sizes) - min(sizes) <= 0.5 * max(sizes)
    # a URI (file:// too) is read through Spark: the driver passes the file's bytes
    assert row_group_index(f"file://{tmp_path}") is None
    data = (tmp_path / "partitions.parquet").read_bytes()
    index_of_bytes = row_group_index(f"file://{tmp_path}", data)
    assert index_of_bytes is not None and index_of_bytes.path == ""
    from_bytes = row_group_splits(index_of_bytes, 4)
    assert [gs for _, gs in from_bytes] == [gs for _, gs in splits]
    assert sum(b.num_rows for _, gs in from_bytes for b in read_row_groups("", gs, data)) == len(snap.partitions)


def test_no_splits_when_topics_overlap_row_groups_or_the_snapshot_is_not_local(tmp_path):
    parts = [PartitionState(topic=t, partition=p, replicas=(1, 2)) for p in range(4) for t in ("a", "b")]
    table = partitions_table(synthetic_snapshot(brokers=3, topics=1, seed=1).model_copy(update={"partitions": tuple(parts)}))
    pq.write_table(table, tmp_path / "partitions.parquet", row_group_size=3)  # a, b, a, b, ... in groups of 3
    assert row_group_index(str(tmp_path)) is None
    assert row_group_index("s3a://bucket/snap") is None
    assert row_group_index(str(tmp_path / "missing")) is None


def test_topics_between_keeps_the_rows_of_a_range_of_topics():
    rows = [{"topic": t, "partition": p, "replicas": [1]} for t in "abcde" for p in range(3)]
    batches = [batch(rows[:7]), batch(rows[7:])]  # b's rows in both batches
    def topics(lo, hi):
        return [(t, [r.partition for r in rs]) for t, rs in topic_groups(topics_between(batches, lo, hi))]
    assert topics(None, None) == [(t, [0, 1, 2]) for t in "abcde"]
    assert topics("b", "d") == [("b", [0, 1, 2]), ("c", [0, 1, 2])]
    assert topics(None, "b") == [("a", [0, 1, 2])]
    assert topics("bb", None) == [(t, [0, 1, 2]) for t in "cde"]
    assert topics("x", None) == []
