"""Bytes-in rates from two reads of the replicas' sizes (core/vocabulary/rates.py); the snapshot carries them."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_reassign.core.records.snapshot_io import read_snapshot, write_snapshot
from airflow_kafka_reassign.core.vocabulary.models import (
    Broker,
    BytesInWindow,
    ClusterSnapshot,
    PartitionState,
    TopicPartition,
    TopicState,
)
from airflow_kafka_reassign.core.vocabulary.rates import estimate_bytes_in, sample_bytes_in, snapshot_bytes_in
from airflow_kafka_reassign.testing import FakeClusterAdmin

A0, A1, A2, A3 = (TopicPartition("a", i) for i in range(4))


@pytest.mark.parametrize(
    ("first", "second", "leaders", "rate", "shrunk", "unmeasured"),
    [
        # the leader's growth over the window
        ({A0: {1: 100, 2: 90}}, {A0: {1: 1100, 2: 1000}}, {A0: 1}, 100.0, 0, 0),
        # leader unknown: the largest growth of a replica in both reads
        ({A0: {1: 100, 2: 90}}, {A0: {1: 1100, 2: 1090}}, {}, 100.0, 0, 0),
        # the leader is not in both reads (moved, its broker down): another replica
        ({A0: {2: 0}}, {A0: {1: 500, 2: 300}}, {A0: 1}, 30.0, 0, 0),
        # retention deleted a segment: the growth is unknown, counted as 0
        ({A0: {1: 5000}}, {A0: {1: 100}}, {A0: 1}, 0.0, 1, 0),
        # idle
        ({A0: {1: 7}}, {A0: {1: 7}}, {A0: 1}, 0.0, 0, 0),
    ],
)
def test_rate_is_the_growth_of_the_leader_over_the_window(first, second, leaders, rate, shrunk, unmeasured):
    sample = estimate_bytes_in(first, second, 10.0, leaders)
    assert sample.rates == {A0: rate} and (sample.shrunk, sample.unmeasured) == (shrunk, unmeasured)


def test_a_partition_missing_from_a_read_has_no_rate():
    sample = estimate_bytes_in({A0: {1: 1}, A1: {1: 1}}, {A0: {1: 11}, A2: {1: 5}}, 10.0)
    assert sample.rates == {A0: 1.0} and sample.unmeasured == 2


def test_sampling_waits_out_the_window_and_measures_between_the_reads_midpoints():
    now = [0.0]
    reads = []

    def read():
        now[0] += 0.5  # each read takes half a second
        reads.append(now[0])
        return {A0: {1: 1000 * len(reads)}}

    def sleep(s):
        now[0] += s

    sample = sample_bytes_in(read, 10.0, clock=lambda: now[0], sleep=sleep)
    # first read [0, 0.5], sleep 9.5, second read [10, 10.5]: midpoints 10 s apart
    assert sample.window_s == pytest.approx(10.0) and sample.rates[A0] == pytest.approx(100.0)


@pytest.mark.parametrize("window", [0, -1])
def test_a_window_that_is_not_positive_is_refused(window):
    with pytest.raises(ValueError, match="positive"):
        sample_bytes_in(lambda: {}, window)


def test_snapshot_carries_rates_and_older_snapshots_still_load(tmp_path):
    fake = FakeClusterAdmin.build({1: "a", 2: "b"}, {"busy": [[1, 2]], "idle": [[2, 1]]})
    busy, idle = TopicPartition("busy", 0), TopicPartition("idle", 0)
    fake.sizes = {busy: {1: 0, 2: 0}, idle: {1: 50, 2: 50}}

    def sleep(s):  # the producer writes 3000 bytes to "busy" while the sampler waits
        fake.sizes[busy] = {1: 3000, 2: 3000}

    snap = snapshot_bytes_in(fake.replica_sizes, fake.snapshot(), 30.0, clock=lambda: 0.0, sleep=sleep)
    rates = {p.tp: p.bytes_in_per_s for p in snap.partitions}
    assert rates == {busy: 100.0, idle: 0.0} and snap.bytes_in == BytesInWindow(window_s=30.0)
    back = read_snapshot(write_snapshot(snap, tmp_path / "s"))
    assert {p.tp: p.bytes_in_per_s for p in back.partitions} == rates and back.bytes_in == snap.bytes_in
    assert json.loads((tmp_path / "s" / "snapshot.json").read_text())["bytes_in"]["window_s"] == 30.0
    # window 0: unchanged, no rates
    assert snapshot_bytes_in(fake.replica_sizes, fake.snapshot(), 0).bytes_in is None


def test_a_snapshot_written_before_rates_existed_reads_without_them(tmp_path):
    import pyarrow.parquet as pq

    snap = ClusterSnapshot(brokers=(Broker(id=1),), topics=(TopicState(name="t", partition_count=1, replication_factor=1),),
                           partitions=(PartitionState(topic="t", partition=0, replicas=(1,)),))
    out = write_snapshot(snap, tmp_path / "old")
    table = pq.read_table(out / "partitions.parquet")
    pq.write_table(table.drop(["bytes_in_per_s"]), out / "partitions.parquet")
    back = read_snapshot(out)
    assert back.partitions[0].bytes_in_per_s is None and back.bytes_in is None


def test_a_negative_rate_is_refused_by_the_model():
    with pytest.raises(ValueError, match="bytes_in_per_s"):
        PartitionState(topic="t", partition=0, replicas=(1,), bytes_in_per_s=-1.0)
