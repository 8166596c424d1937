"""Bytes-in rates per partition, estimated from the admin API alone (no metrics reporter).

:func:`sample_bytes_in` reads every replica's size (DescribeLogDirs, through the port's
``replica_sizes``) twice, ``window_s`` seconds apart, and takes a partition's rate as the growth
of its leader's log over the time between the two reads (the midpoints of the two requests).
It is an **estimate**:

* retention deleting a segment during the window shrinks the log: the partition's growth is
  then unknown and counted as 0 (:attr:`BytesInSample.shrunk` says how many);
* compaction rewriting segments shrinks or grows the log without any producer: compacted
  topics' rates are rough;
* a window catches bursts or quiet moments: a longer window smooths them, at the cost of a
  longer snapshot;
* a partition whose leader moved between the reads is measured on a replica present in both.

Brokers take in a partition's bytes on every replica (the leader from producers, followers by
replication), so a broker's bytes in is the sum of the rates of the replicas it holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping

from pydantic import Field

from airflow_kafka_reassign.core.vocabulary.models import BytesInWindow, ClusterSnapshot, TopicPartition, _Frozen

#: The window ``PlanReassignmentOperator`` samples over when a capacity document gives ``network_in``.
DEFAULT_SAMPLE_WINDOW_S = 30.0

Sizes = Mapping[TopicPartition, Mapping[int, int]]


class BytesInSample(_Frozen):
    """Rates from two reads of the replicas' sizes."""

    #: Seconds between the two reads (midpoint to midpoint).
    window_s: float = Field(gt=0)
    #: Partition -> estimated bytes per second (>= 0).
    rates: dict[TopicPartition, float] = Field(default_factory=dict)
    #: Partitions whose measured replica shrank (retention or compaction): counted as 0.
    shrunk: int = 0
    #: Partitions absent from one of the reads (created, deleted, or their brokers down): no rate.
    unmeasured: int = 0


def estimate_bytes_in(
    first: Sizes, second: Sizes, window_s: float, leaders: Mapping[TopicPartition, int | None] | None = None
) -> BytesInSample:
    """Rates from two size reads ``window_s`` apart: per partition, the growth of its leader's
    replica (``leaders``; or, when the leader is unknown or not in both reads, the largest growth
    of a replica present in both) over ``window_s``; a shrinking replica counts as 0."""
    if window_s <= 0:
        raise ValueError(f"window_s {window_s!r} is not positive: two reads of the sizes need time between them")
    rates: dict[TopicPartition, float] = {}
    shrunk = unmeasured = 0
    for tp in first.keys() | second.keys():
        a = first.get(tp)
        b = second.get(tp)
        common = sorted(set(a or ()) & set(b or ()))
        if not a or not b or not common:
            unmeasured += 1
            continue
        leader = (leaders or {}).get(tp)
        grown = b[leader] - a[leader] if leader in common else max(b[r] - a[r] for r in common)
        if grown < 0:
            shrunk += 1
            grown = 0
        rates[tp] = grown / window_s
    return BytesInSample(window_s=window_s, rates=rates, shrunk=shrunk, unmeasured=unmeasured)


def sample_bytes_in(
    read_sizes: Callable[[], Sizes],
    window_s: float,
    *,
    leaders: Mapping[TopicPartition, int | None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> BytesInSample:
    """Read the sizes, wait until ``window_s`` passed, read again: :func:`estimate_bytes_in` over
    the time between the two reads' midpoints."""
    if window_s <= 0:
        raise ValueError(f"sample window {window_s!r} s: give a positive window, or 0 to sample no rates")
    t0 = clock()
    first = read_sizes()
    t1 = clock()
    sleep(max(0.0, window_s - (t1 - t0)))
    t2 = clock()
    second = read_sizes()
    t3 = clock()
    elapsed = (t2 + t3) / 2 - (t0 + t1) / 2
    return estimate_bytes_in(first, second, elapsed if elapsed > 0 else window_s, leaders)


def with_bytes_in(snapshot: ClusterSnapshot, sample: BytesInSample) -> ClusterSnapshot:
    """``snapshot`` with each partition's ``bytes_in_per_s`` from ``sample`` (``None`` where unmeasured)."""
    rates = sample.rates
    parts = tuple(
        p.model_copy(update={"bytes_in_per_s": rates.get(p.tp)}) for p in snapshot.partitions
    )
    window = BytesInWindow(window_s=sample.window_s, shrunk=sample.shrunk, unmeasured=sample.unmeasured)
    return snapshot.model_copy(update={"partitions": parts, "bytes_in": window})


def snapshot_bytes_in(
    replica_sizes: Callable[[Collection[TopicPartition]], Sizes],
    snapshot: ClusterSnapshot,
    window_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ClusterSnapshot:
    """``snapshot`` with the bytes-in rates of its partitions sampled over ``window_s`` through a
    port's ``replica_sizes`` (one DescribeLogDirs per broker per read); ``window_s`` 0: unchanged."""
    if not window_s:
        return snapshot
    tps = [p.tp for p in snapshot.partitions]
    leaders = {p.tp: p.leader for p in snapshot.partitions}
    sample = sample_bytes_in(lambda: replica_sizes(tps), float(window_s), leaders=leaders, clock=clock, sleep=sleep)
    return with_bytes_in(snapshot, sample)
