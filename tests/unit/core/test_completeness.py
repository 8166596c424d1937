"""Complete snapshots or none (core/guards/completeness.py): what counts as missing, the bounded re-reads,
the error for thousands of topics, and the counts a snapshot's files are checked against."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.guards.completeness import (
    FIRST_RETRY_S,
    MAX_RETRY_S,
    TOPICS_BY_NAME,
    TOPICS_IN_FULL,
    Gaps,
    PartitionIds,
    TopicMetadata,
    compare_counts,
    find_gaps,
    id_ranges,
    settle,
    views_disagree,
)
from airflow_kafka_reassign.core.vocabulary.models import SnapshotCheck, TopicPartition
from airflow_kafka_reassign.exceptions import IncompleteSnapshotError


def meta(n: int, *, without: tuple[int, ...] = (), replicas: tuple[int, ...] = (1, 2)) -> TopicMetadata:
    return TopicMetadata({p: replicas for p in range(n) if p not in without})


def test_a_complete_view_has_no_gaps():
    gaps = find_gaps({"a": meta(3), "b": meta(1)}, configs={"a", "b"},
                     sizes={TopicPartition("a", p): {1: 5, 2: 5} for p in range(3)} | {TopicPartition("b", 0): {1: 0, 2: 0}},
                     brokers={1, 2, 3}, reassigning={TopicPartition("a", 2)})
    assert not gaps and gaps.missing() == {}


def test_each_kind_of_gap_is_named_per_topic():
    metadata = {
        "no-configs": meta(2),
        "hole": meta(10, without=(3, 4, 5, 8)),
        "erred": TopicMetadata({}, "LEADER_NOT_AVAILABLE"),
        "empty": TopicMetadata({0: (1,), 1: ()}),
        "grown": meta(2),
        "unsized": meta(2),
    }
    sizes = {TopicPartition(t, p): dict.fromkeys(r, 1) for t, m in metadata.items() for p, r in m.partitions.items()}
    sizes[TopicPartition("unsized", 0)] = {1: 7}
    del sizes[TopicPartition("unsized", 1)]
    sizes |= {TopicPartition("grown", p): {1: 0} for p in range(2, 10)}
    gaps = find_gaps(
        metadata, configs={"hole", "erred", "empty", "grown", "unsized"}, sizes=sizes, brokers={1, 2},
        reassigning={TopicPartition("grown", 3), TopicPartition("elsewhere", 0)},
    )
    assert gaps.missing() == {
        "empty": ("replicas of partition(s) 1",),
        "erred": ("metadata (LEADER_NOT_AVAILABLE)",),
        "grown": ("partition(s) 2-9 that the brokers' log dirs hold (the metadata's partition count is behind)",
                  "partition(s) 3 that the controller lists as reassigning (the metadata's partition count is behind)"),
        "hole": ("metadata of partition(s) 3-5, 8 (of 0-9)",),
        "no-configs": ("configs",),
        "unsized": ("sizes of 3 replica(s) (first: partition 0 on broker 2)",),
    }


def test_replicas_on_a_broker_that_is_down_need_no_size():
    sizes = {TopicPartition("a", 0): {1: 3}}
    assert not find_gaps({"a": meta(1, replicas=(1, 9))}, configs={"a"}, sizes=sizes, brokers={1, 2})


def test_id_ranges_are_short_for_thousands():
    assert id_ranges([5, 0, 1, 2, 9]) == "0-2, 5, 9"
    assert id_ranges(range(0, 4000, 2)) == "0, 2, 4, 6, 8, 10, 12, 14, 16, 18, ... (2000 in all)"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def sleep(self, s: float) -> None:
        self.pauses.append(s)
        self.now += s


def test_settle_reads_again_backing_off_until_complete():
    clock = Clock()
    answers = [Gaps(topics={"a": ["configs"]})] * 3 + [Gaps()]
    result, attempts, spent = settle(lambda: ("snap", answers.pop(0)), budget_s=30, what="c",
                                     sleep=clock.sleep, clock=lambda: clock.now)
    assert (result, attempts) == ("snap", 4)
    assert clock.pauses == [FIRST_RETRY_S, 2 * FIRST_RETRY_S, 4 * FIRST_RETRY_S]
    assert spent == sum(clock.pauses)


def test_settle_fails_at_the_budget_naming_what_is_missing():
    clock = Clock()
    reads = []

    def attempt():
        reads.append(clock.now)
        return None, Gaps(topics={"orders": ["configs"], "audit": ["metadata of partition(s) 2 (of 0-3)"]})

    with pytest.raises(IncompleteSnapshotError) as e:
        settle(attempt, budget_s=20, what="the cluster at k:9092", sleep=clock.sleep, clock=lambda: clock.now)
    assert reads[-1] == 20  # the last read at the deadline, never past it
    assert max(clock.pauses) == MAX_RETRY_S
    message = str(e.value)
    assert message.startswith(f"the snapshot of the cluster at k:9092 is incomplete after {len(reads)} read(s) over 20.0 s")
    assert "'audit': metadata of partition(s) 2 (of 0-3); 'orders': configs" in message
    assert "settle_timeout_s" in message and "\n" not in message
    assert e.value.missing == {"audit": ("metadata of partition(s) 2 (of 0-3)",), "orders": ("configs",)}


def test_a_zero_budget_reads_once():
    clock = Clock()
    with pytest.raises(IncompleteSnapshotError):
        settle(lambda: (None, Gaps(cluster=["broker(s) 4 behind"])), budget_s=0, what="c", sleep=clock.sleep,
               clock=lambda: clock.now)
    assert clock.pauses == []


def test_the_error_for_thousands_of_topics_stays_short():
    gaps = Gaps(topics={f"t-{i:04d}": ["configs"] for i in range(3000)}, cluster=["broker(s) 5 behind"])
    with pytest.raises(IncompleteSnapshotError) as e:
        settle(lambda: (None, gaps), budget_s=0, what="c")
    message = str(e.value)
    assert "3000 topic(s) lack something: 't-0000': configs;" in message
    assert f"'t-{TOPICS_IN_FULL - 1:04d}': configs; and {3000 - TOPICS_IN_FULL} more: 't-{TOPICS_IN_FULL:04d}'" in message
    assert f"'t-{TOPICS_IN_FULL + TOPICS_BY_NAME - 1:04d}' and {3000 - TOPICS_IN_FULL - TOPICS_BY_NAME} more" in message
    assert "t-2999" not in message and "broker(s) 5 behind" in message
    assert len(message) < 1500
    assert len(e.value.missing) == 3001  # the whole list stays on the exception


def record(**counts: int) -> SnapshotCheck:
    return SnapshotCheck(topics=len(counts), partitions=sum(counts.values()), replicas=2 * sum(counts.values()),
                         partition_counts=counts)


def test_files_that_hold_the_recorded_counts_pass():
    assert compare_counts(record(a=3, b=1), topics={"a": 3, "b": 1},
                          partitions={"a": PartitionIds(3, 3, 0, 2), "b": PartitionIds(1, 1, 0, 0)},
                          replicas=8, sizes_complete=False) == []


def test_a_topic_whose_files_disagree_is_named_with_the_counts():
    problems = compare_counts(
        record(a=3, b=10, c=2), topics={"a": 3, "b": 10, "c": 3},
        partitions={"a": PartitionIds(3, 2, 0, 1), "b": PartitionIds(7, 7, 0, 6), "c": PartitionIds(2, 2, 0, 1),
                    "d": PartitionIds(1, 1, 0, 0)},
        replicas=26, sizes_complete=False)
    assert problems == [
        "topic 'a': snapshot.json records 3 partition(s) (0-2), partitions.parquet has 3 row(s) with 2 distinct "
        "id(s) from 0 to 1",
        "topic 'b': snapshot.json records 10 partition(s) (0-9), partitions.parquet has 7 row(s) with 7 distinct "
        "id(s) from 0 to 6",
        "topic 'c': snapshot.json records 2 partition(s), topics.parquet's partition_count is 3",
        "topic 'd' is in partitions.parquet but not in the counts snapshot.json records",
    ]


def test_totals_and_sizes_are_checked_too():
    problems = compare_counts(record(a=2).model_copy(update={"replica_sizes": True}), topics={"a": 2},
                              partitions={"a": PartitionIds(2, 2, 0, 1)}, replicas=5, sizes_complete=False)
    assert problems == [
        "snapshot.json records 1 topic(s), 2 partition(s) and 4 replica(s), partitions.parquet has 1, 2 and 5",
        "snapshot.json records replica sizes for every partition, partitions.parquet lacks some",
    ]


# -- ZooKeeper mode's barrier: the live brokers' Metadata agree ------------------------------------

A = {"t": ("id-1", {0: (1, 2), 1: (2, 3)})}


def test_brokers_that_agree_pass_and_silent_ones_are_not_waited_for():
    assert views_disagree({1: A, 2: A, 3: A}) == ""
    assert views_disagree({1: A, 2: None, 3: A}) == ""
    assert views_disagree({1: A}) == ""


@pytest.mark.parametrize("late", [
    {},  # the topic has not reached broker 3 yet
    {"t": ("id-1", {0: (1, 2)})},  # its growth has not
    {"t": ("id-1", {0: (1, 2), 1: (2, 4)})},  # a finished reassignment has not
    {"t": ("id-0", {0: (1, 2), 1: (2, 3)})},  # the topic was re-created: another id
])
def test_a_broker_behind_the_others_is_named_with_the_topic(late):
    assert views_disagree({1: A, 2: A, 3: late}) == (
        "broker(s) 3 do not yet agree with the other brokers' metadata (ZooKeeper mode: the controller's "
        "UpdateMetadata has not reached them) on topic(s) t")
