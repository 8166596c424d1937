"""Complete snapshots or none: what a snapshot must hold, how it is checked, and the error when
the cluster does not settle in time.

A snapshot combines several views of the cluster, each answered by whichever broker the client
asks: the Metadata response (every partition of every topic with its replicas, ISR and leader),
the topics' configs (DescribeConfigs), the controller's in-flight reassignments and, when asked,
the replicas' sizes (DescribeLogDirs, one answer per broker). Brokers learn of a new topic (or a
grown one) at slightly different moments, so for a few seconds after a change the views disagree:
one broker's metadata lists a topic whose configs another broker does not know yet. Leaving such a
topic out gives a partial snapshot, and a plan made from it looks balanced while the cluster is
not. So:

* :func:`find_gaps` names, per topic, whatever is missing or inconsistent between the views;
* :func:`settle` reads the views again, backing off, until nothing is missing or the time budget
  (``settle_timeout_s``, :data:`DEFAULT_SETTLE_S` by default) is spent, and then raises
  :class:`~airflow_kafka_reassign.exceptions.IncompleteSnapshotError` listing what is missing
  (:func:`describe_gaps`: the first topics in full, more by name, then a count);
* :func:`compare_counts` checks the files a planner reads against the counts the snapshot
  recorded (:class:`~airflow_kafka_reassign.core.vocabulary.models.SnapshotCheck`).

Pure: the Kafka adapter and the in-memory fake both feed their views to these functions.

Example::

    >>> gaps = find_gaps({"orders": TopicMetadata({0: (1, 2), 2: (2, 3)})}, configs=())
    >>> gaps.missing()
    {'orders': ('metadata of partition(s) 1 (of 0-2)', 'configs')}
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from airflow_kafka_reassign.core.vocabulary.models import SnapshotCheck, TopicPartition
from airflow_kafka_reassign.exceptions import IncompleteSnapshotError

#: Seconds a snapshot keeps reading the cluster again while its views disagree, by default.
DEFAULT_SETTLE_S = 30.0
#: The first pause between two reads; each next one doubles, up to :data:`MAX_RETRY_S`.
FIRST_RETRY_S = 0.1
MAX_RETRY_S = 4.0
#: Topics an error names with what each lacks, then topics named only.
TOPICS_IN_FULL = 10
TOPICS_BY_NAME = 40
#: Partition ids listed per problem before "(N in all)".
IDS_LISTED = 10

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class TopicMetadata(NamedTuple):
    """One topic as the Metadata response gives it: replicas by partition id (the controller's
    full set for a reassigning partition), and the topic's error name, if any."""

    partitions: Mapping[int, Sequence[int]]
    error: str | None = None


@dataclass
class Gaps:
    """What a snapshot lacks: per topic, and for the whole cluster (``cluster``)."""

    topics: dict[str, list[str]] = field(default_factory=dict)
    cluster: list[str] = field(default_factory=list)

    def add(self, topic: str, what: str) -> None:
        self.topics.setdefault(topic, []).append(what)

    def __bool__(self) -> bool:
        return bool(self.topics or self.cluster)

    def missing(self) -> dict[str, tuple[str, ...]]:
        """``{topic: what it lacks}``; the cluster-wide problems under ``""``."""
        out = {t: tuple(w) for t, w in sorted(self.topics.items())}
        if self.cluster:
            out[""] = tuple(self.cluster)
        return out

    def summary(self) -> str:
        parts = [f"{len(self.topics)} topic(s) incomplete"] if self.topics else []
        return "; ".join(parts + self.cluster)


def id_ranges(ids: Collection[int], limit: int = IDS_LISTED) -> str:
    """``0-3, 7, 9`` for [0, 1, 2, 3, 7, 9]; after ``limit`` ranges, ``... (N in all)``."""
    ordered = sorted(ids)
    ranges: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    if len(ranges) > limit:
        return f"{', '.join(ranges[:limit])}, ... ({len(ordered)} in all)"
    return ", ".join(ranges)


def find_gaps(
    metadata: Mapping[str, TopicMetadata],
    *,
    configs: Collection[str],
    sizes: Mapping[TopicPartition, Mapping[int, int]] | None = None,
    brokers: Collection[int] = (),
    reassigning: Collection[TopicPartition] = (),
) -> Gaps:
    """What the views of the selected topics (``metadata``) lack, per topic.

    * the metadata: no topic error, partitions 0 to the highest id all present, each with replicas;
    * ``configs``: the topics whose configs were read; each selected topic needs them;
    * ``reassigning``: the controller's in-flight reassignments: one on a partition the metadata
      does not list means the metadata's partition count is behind;
    * ``sizes`` (``None``: not asked): every replica on a live broker (``brokers``) has a size,
      and no broker holds a partition the metadata does not list.
    """
    gaps = Gaps()
    beyond: dict[str, dict[str, set[int]]] = {}

    def outside(tp: TopicPartition, source: str) -> None:
        meta = metadata.get(tp.topic)
        if meta is not None and meta.error is None and tp.partition not in meta.partitions:
            beyond.setdefault(tp.topic, {}).setdefault(source, set()).add(tp.partition)

    for tp in reassigning:
        outside(tp, "the controller lists as reassigning")
    if sizes is not None:
        for tp in sizes:
            outside(tp, "the brokers' log dirs hold")
    live = set(brokers)
    for name in sorted(metadata):
        meta = metadata[name]
        if meta.error is not None:
            gaps.add(name, f"metadata ({meta.error})")
            continue
        parts = meta.partitions
        if not parts:
            gaps.add(name, "metadata of every partition")
        else:
            count = max(parts) + 1
            absent = [p for p in range(count) if p not in parts]
            if absent:
                gaps.add(name, f"metadata of partition(s) {id_ranges(absent)} (of 0-{count - 1})")
            empty = [p for p, r in parts.items() if not r]
            if empty:
                gaps.add(name, f"replicas of partition(s) {id_ranges(empty)}")
        for source, ids in sorted(beyond.get(name, {}).items()):
            gaps.add(name, f"partition(s) {id_ranges(ids)} that {source} (the metadata's partition count is behind)")
        if name not in configs:
            gaps.add(name, "configs")
        if sizes is not None:
            unsized = [(p, b) for p, r in sorted(parts.items()) for b in r
                       if b in live and b not in sizes.get(TopicPartition(name, p), {})]
            if unsized:
                p, b = unsized[0]
                gaps.add(name, f"sizes of {len(unsized)} replica(s) (first: partition {p} on broker {b})")
    return gaps


def describe_gaps(gaps: Gaps, *, what: str, attempts: int, waited_s: float, budget_s: float) -> str:
    """One line: what is missing, the first :data:`TOPICS_IN_FULL` topics in full, then names, then
    a count; what it means and what to do."""
    text = [f"the snapshot of {what} is incomplete after {attempts} read(s) over {waited_s:.1f} s "
            f"(settle_timeout_s={budget_s:g})"]
    if gaps.topics:
        names = sorted(gaps.topics)
        full = "; ".join(f"{n!r}: {', '.join(gaps.topics[n])}" for n in names[:TOPICS_IN_FULL])
        text.append(f": {len(names)} topic(s) lack something: {full}")
        more = names[TOPICS_IN_FULL:]
        if more:
            listed = ", ".join(repr(n) for n in more[:TOPICS_BY_NAME])
            rest = len(more) - TOPICS_BY_NAME
            text.append(f"; and {len(more)} more: {listed}" + (f" and {rest} more" if rest > 0 else ""))
    if gaps.cluster:
        text.append(("; " if gaps.topics else ": ") + "; ".join(gaps.cluster))
    text.append(
        ". The cluster's metadata had not settled (topics created, grown or deleted a moment ago are not yet "
        "known to every broker), or a broker is not answering. Nothing was written and no plan was made: try "
        "again in a moment, or allow more time (settle_timeout_s; the CLI's --settle-timeout)"
    )
    return "".join(text)


def settle(
    attempt: Callable[[], tuple[_T | None, Gaps]],
    *,
    budget_s: float,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[_T, int, float]:
    """``attempt()`` until it reports no gaps: ``(its result, attempts, seconds spent)``.

    Between attempts it pauses :data:`FIRST_RETRY_S`, doubling up to :data:`MAX_RETRY_S`, and
    never past ``budget_s`` after the start: the last attempt is made at the deadline. Still
    incomplete then: :class:`~airflow_kafka_reassign.exceptions.IncompleteSnapshotError` naming
    what is missing (``budget_s=0``: one attempt only).
    """
    start = clock()
    pause = FIRST_RETRY_S
    attempts = 0
    while True:
        attempts += 1
        result, gaps = attempt()
        spent = clock() - start
        if not gaps:
            assert result is not None
            if attempts > 1:
                log.info("snapshot of %s complete after %d reads over %.1f s", what, attempts, spent)
            return result, attempts, spent
        left = budget_s - spent
        if left <= 0:
            raise IncompleteSnapshotError(
                describe_gaps(gaps, what=what, attempts=attempts, waited_s=spent, budget_s=budget_s),
                gaps.missing(),
            )
        wait = min(pause, left)
        log.info("snapshot of %s not complete yet (%s); reading again in %.2f s", what, gaps.summary(), wait)
        sleep(wait)
        pause = min(pause * 2, MAX_RETRY_S)


# -- the record, checked again by readers -----------------------------------------------------------------------


class PartitionIds(NamedTuple):
    """A topic's rows in a partitions file: how many, distinct ids, lowest and highest id."""

    rows: int
    distinct: int
    lowest: int
    highest: int


#: Problems a mismatch error lists before "and N more".
MISMATCHES_LISTED = 5


def compare_counts(
    record: SnapshotCheck,
    *,
    topics: Mapping[str, int],
    partitions: Mapping[str, PartitionIds],
    replicas: int,
    sizes_complete: bool,
) -> list[str]:
    """Where a snapshot's files disagree with the counts it recorded: an empty list when they agree.

    ``topics``: each topic's ``partition_count`` in topics.parquet; ``partitions``: each topic's
    rows in partitions.parquet; ``replicas``: the replicas in all; ``sizes_complete``: every row
    has its replicas' sizes. Each problem names the topic and the counts.
    """
    problems: list[str] = []
    expected = record.partition_counts
    for name in sorted(set(expected) | set(partitions) | set(topics)):
        want = expected.get(name)
        ids = partitions.get(name)
        if want is None:
            where = "partitions.parquet" if ids is not None else "topics.parquet"
            problems.append(f"topic {name!r} is in {where} but not in the counts snapshot.json records")
            continue
        if ids is None:
            problems.append(f"topic {name!r}: snapshot.json records {want} partition(s), partitions.parquet has none")
            continue
        if ids.rows != want or ids.distinct != want or ids.lowest != 0 or ids.highest != want - 1:
            problems.append(
                f"topic {name!r}: snapshot.json records {want} partition(s) (0-{want - 1}), partitions.parquet "
                f"has {ids.rows} row(s) with {ids.distinct} distinct id(s) from {ids.lowest} to {ids.highest}"
            )
        if name in topics and topics[name] != want:
            problems.append(
                f"topic {name!r}: snapshot.json records {want} partition(s), topics.parquet's partition_count "
                f"is {topics[name]}"
            )
        elif name not in topics and topics:
            problems.append(f"topic {name!r}: snapshot.json records {want} partition(s), topics.parquet lacks it")
    rows = sum(x.rows for x in partitions.values())
    if not problems and (rows, len(partitions), replicas) != (record.partitions, record.topics, record.replicas):
        problems.append(
            f"snapshot.json records {record.topics} topic(s), {record.partitions} partition(s) and {record.replicas} "
            f"replica(s), partitions.parquet has {len(partitions)}, {rows} and {replicas}"
        )
    if record.replica_sizes and not sizes_complete:
        problems.append("snapshot.json records replica sizes for every partition, partitions.parquet lacks some")
    return problems


def mismatch_message(where: str, problems: Sequence[str]) -> str:
    """One line for :func:`compare_counts`' problems (the first :data:`MISMATCHES_LISTED`)."""
    listed = "; ".join(problems[:MISMATCHES_LISTED])
    more = len(problems) - MISMATCHES_LISTED
    return (
        f"snapshot {where} does not hold what it recorded: {listed}"
        + (f"; and {more} more problem(s)" if more > 0 else "")
        + ". Its files are partial or do not belong together (an interrupted copy, files from two snapshots, "
        "an edit): take a new snapshot"
    )


#: One broker's view of the partitions a snapshot reads (ZooKeeper mode's barrier): ``{topic: (topic id, {partition:
#: replicas})}``.
BrokerView = Mapping[str, tuple[str | None, Mapping[int, tuple[int, ...]]]]


def views_disagree(views: Mapping[int, BrokerView | None], *, listed: int = MISMATCHES_LISTED) -> str:
    """The snapshot's barrier in ZooKeeper mode, where there is no metadata log to catch up with: every live broker's
    Metadata (each topic's id, partitions and replicas) must agree, so no broker answers with a view older than the
    others. ``""`` when they agree (brokers that did not answer, ``None``, are not waited for); else which brokers
    differ from the view most of them hold, and on which topics (at most ``listed``)."""
    answered = [(b, v) for b, v in sorted(views.items()) if v is not None]
    groups: list[tuple[BrokerView, list[int]]] = []
    for broker, view in answered:
        for seen, members in groups:
            if seen == view:
                members.append(broker)
                break
        else:
            groups.append((view, [broker]))
    if len(groups) <= 1:
        return ""
    common, _ = max(groups, key=lambda g: (len(g[1]), len(g[0])))
    odd = sorted(b for view, members in groups if view is not common for b in members)
    topics = sorted({t for view, members in groups if view is not common
                     for t in set(view) ^ set(common) | {t for t in set(view) & set(common) if view[t] != common[t]}})
    shown = ", ".join(topics[:listed]) + (f" and {len(topics) - listed} more" if len(topics) > listed else "")
    return (f"broker(s) {', '.join(map(str, odd))} do not yet agree with the other brokers' metadata (ZooKeeper mode: "
            f"the controller's UpdateMetadata has not reached them) on topic(s) {shown}")
