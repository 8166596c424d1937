"""Balance metrics of an assignment: what a plan promises and what a cluster shows.

Counts are over the *live* brokers (those that hold replicas after the plan; a removed
broker is reported separately by ``replicas_on_removed_brokers``), with in-flight
reassignments counted at their target replicas. Leaders are *preferred* leaders (the first
replica): what a preferred-leader election makes the leaders once the plan is done.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Protocol

from pydantic import Field

from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot, ReassignmentPlan, TopicPartition, _Frozen


class BalanceMetrics(_Frozen):
    """Balance of one assignment (before or after a plan)."""

    brokers: int
    partitions: int
    replicas: int
    #: max - min of replicas per live broker.
    replica_max_min: int
    #: max - min of preferred leaders per live broker.
    leader_max_min: int
    #: The worst topic's max - min of its replicas per live broker, and that topic.
    topic_replica_max_min: int
    worst_topic: str | None = None
    #: Partitions spread over fewer than min(RF, racks) racks.
    rack_violations: int
    #: Partitions whose replication factor differs from the snapshot's.
    rf_changes: int = 0
    #: Replicas on brokers that are not live (being removed, or dead).
    replicas_on_removed_brokers: int = 0
    #: max - min of bytes per live broker, when replica sizes are known.
    bytes_max_min: int | None = None
    replicas_per_broker: dict[int, int] = Field(default_factory=dict)
    leaders_per_broker: dict[int, int] = Field(default_factory=dict)
    bytes_per_broker: dict[int, int] | None = None

    def summary(self) -> dict[str, int | str | None]:
        """The scalar fields (for XCom and logs)."""
        return {
            k: v
            for k, v in self.model_dump().items()
            if not isinstance(v, dict)
        }


def assignment_metrics(
    rows: Iterable[tuple[str, Sequence[int], int, int | None]],
    brokers: Sequence[int],
    rack_of: Mapping[int, object],
    *,
    topics: Collection[str] | None = None,
) -> BalanceMetrics:
    """Metrics of ``rows`` = (topic, replicas, RF in the snapshot, bytes of one replica or None).

    ``brokers``: the live brokers; ``rack_of``: broker -> rack (any hashable; ``None`` for no
    rack); ``topics``: the topics whose per-topic balance is reported (all when ``None``).
    """
    acc = MetricsAccumulator(brokers, rack_of, topics=topics)
    acc.add(rows)
    return acc.result()


class MetricsAccumulator:
    """:func:`assignment_metrics` in parts: ``add`` rows in any number of accumulators (one
    per Spark task), ``merge`` them, then ``result``. A topic's rows must all go to the same
    accumulator (the Spark job groups by topic)."""

    def __init__(self, brokers: Sequence[int], rack_of: Mapping[int, object], *, topics: Collection[str] | None = None) -> None:
        self.brokers = list(brokers)
        self.rack_of = dict(rack_of)
        self._live = frozenset(self.brokers)
        racks_live = {self.rack_of.get(b) for b in self.brokers}
        self._k_racks = len(racks_live) if racks_live != {None} else 1
        self.topics = None if topics is None else set(topics)
        self.replicas = dict.fromkeys(self.brokers, 0)
        self.leaders = dict.fromkeys(self.brokers, 0)
        self.size_per = dict.fromkeys(self.brokers, 0)
        self.any_size = False
        self.partitions = self.total = self.violations = self.rf_changes = self.on_removed = 0
        #: topic -> max-min of its replicas per live broker
        self.topic_spread: dict[str, int] = {}

    def add(self, rows: Iterable[tuple[str, Sequence[int], int, int | None]]) -> dict[str, dict[int, int]]:
        """Count ``rows``; returns, per topic of theirs whose balance is reported, its replicas per broker."""
        live = self._live
        rack_of = self.rack_of
        k_racks = self._k_racks
        replicas, leaders, size_per = self.replicas, self.leaders, self.size_per
        topics = self.topics
        per_topic: dict[str, dict[int, int]] = {}
        partitions = total = violations = rf_changes = on_removed = 0
        any_size = False
        last_topic: str | None = None
        tc: dict[int, int] | None = None
        for topic, reps, rf_before, size in rows:
            partitions += 1
            n = len(reps)
            total += n
            if n != rf_before:
                rf_changes += 1
            if reps and reps[0] in leaders:
                leaders[reps[0]] += 1
            if topic != last_topic:  # rows come topic by topic: one look-up per run
                last_topic = topic
                if topics is None or topic in topics:
                    tc = per_topic.get(topic)
                    if tc is None:
                        tc = per_topic[topic] = {}
                else:
                    tc = None
            if size is not None:
                any_size = True
            for b in reps:
                if tc is not None:
                    tc[b] = tc.get(b, 0) + 1
                if b in live:
                    replicas[b] += 1
                    if size is not None:
                        size_per[b] += size
                else:
                    on_removed += 1
            if k_racks > 1 and n > 1 and len({rack_of.get(b) for b in reps}) < min(n, k_racks):
                violations += 1
        if any_size:
            self.any_size = True
        for topic, tc in per_topic.items():
            spread = self.max_min(tc)
            if spread is not None:
                self.topic_spread[topic] = spread
        self.partitions += partitions
        self.total += total
        self.violations += violations
        self.rf_changes += rf_changes
        self.on_removed += on_removed
        return per_topic

    def max_min(self, tc: Mapping[int, int]) -> int | None:
        """A topic's max-min over the live brokers from its replicas per broker (a live broker
        without one counts 0); ``None`` when no live broker holds one."""
        live = self._live
        vals = [c for b, c in tc.items() if c and b in live]
        if not vals:
            return None
        return max(vals) - (min(vals) if len(vals) == len(self.brokers) else 0)

    def violates(self, reps: Sequence[int]) -> bool:
        """The partition spans fewer than ``min(RF, racks)`` racks."""
        n = len(reps)
        k = self._k_racks
        return k > 1 and n > 1 and len({self.rack_of.get(b) for b in reps}) < min(n, k)

    def shift(self, reps: Sequence[int], size: int | None, sign: int, tc: dict[int, int] | None) -> None:
        """Add (``sign`` 1) or take out (-1) one row's replicas, leader and rack check (a row of a
        topic already counted: its partition, RF in the snapshot and size stay); ``tc``: its topic's
        replicas per broker, when reported."""
        live = self._live
        if reps and reps[0] in self.leaders:
            self.leaders[reps[0]] += sign
        self.total += sign * len(reps)
        for b in reps:
            if tc is not None:
                tc[b] = tc.get(b, 0) + sign
            if b in live:
                self.replicas[b] += sign
                if size is not None:
                    self.size_per[b] += sign * size
            else:
                self.on_removed += sign
        if self.violates(reps):
            self.violations += sign

    def merge(self, other: MetricsAccumulator) -> None:
        for mine, theirs in ((self.replicas, other.replicas), (self.leaders, other.leaders), (self.size_per, other.size_per)):
            for b, c in theirs.items():
                mine[b] = mine.get(b, 0) + c
        self.any_size = self.any_size or other.any_size
        self.partitions += other.partitions
        self.total += other.total
        self.violations += other.violations
        self.rf_changes += other.rf_changes
        self.on_removed += other.on_removed
        self.topic_spread.update(other.topic_spread)

    def result(self) -> BalanceMetrics:
        worst, worst_topic = 0, None
        for topic in sorted(self.topic_spread):
            if self.topic_spread[topic] > worst:
                worst, worst_topic = self.topic_spread[topic], topic
        return BalanceMetrics(
            brokers=len(self.brokers),
            partitions=self.partitions,
            replicas=self.total,
            replica_max_min=_spread(self.replicas.values()),
            leader_max_min=_spread(self.leaders.values()),
            topic_replica_max_min=worst,
            worst_topic=worst_topic,
            rack_violations=self.violations,
            rf_changes=self.rf_changes,
            replicas_on_removed_brokers=self.on_removed,
            bytes_max_min=_spread(self.size_per.values()) if self.any_size else None,
            replicas_per_broker=dict(self.replicas),
            leaders_per_broker=dict(self.leaders),
            bytes_per_broker=dict(self.size_per) if self.any_size else None,
        )


class PlanMetrics:
    """The metrics before and after a plan over the same rows: each row is counted once (before),
    and ``after`` is ``before`` with the rows the plan changes taken out and counted again as they
    end (most rows do not change: counting every row twice was most of the ``finish`` stage).
    ``add_topic`` the rows of each topic (a topic's rows all in one), ``merge`` the parts, then
    ``result``. The same figures as two :class:`MetricsAccumulator` over the rows before and after."""

    def __init__(self, brokers: Sequence[int], rack_of: Mapping[int, object]) -> None:
        self.before = MetricsAccumulator(brokers, rack_of, topics=())
        #: what the plan changes, per broker and in all (may be negative)
        self.diff = MetricsAccumulator(brokers, rack_of, topics=())
        #: the changed topics whose balance is reported: their max-min after (``None``: none on a live broker)
        self.spread_after: dict[str, int | None] = {}

    def add_topic(
        self,
        topic: str,
        rows: Sequence[tuple[int, Sequence[int], int | None]],
        changed: Mapping[int, Sequence[int]],
        *,
        report: bool,
    ) -> None:
        """``rows``: the topic's (partition, replicas before, bytes of one replica or None), sorted by
        partition; ``changed``: partition -> replicas after, where the plan changes them; ``report``:
        the topic's balance is in the per-topic report (a topic the plan balances)."""
        before, diff = self.before, self.diff
        if report:
            before.topics.add(topic)  # type: ignore[union-attr]
        per_topic = before.add((topic, reps, len(reps), size) for _, reps, size in rows)
        if not changed:
            return
        tc = dict(per_topic.get(topic, {})) if report else None
        for p, new in changed.items():
            i = bisect_left(rows, p, key=itemgetter(0))
            if i == len(rows) or rows[i][0] != p:
                continue  # not a row of the snapshot's: nothing to count
            _, old, size = rows[i]
            if tuple(new) == tuple(old):
                continue
            diff.shift(old, size, -1, tc)
            diff.shift(new, size, 1, tc)
            if len(new) != len(old):
                diff.rf_changes += 1
        if tc is not None:
            self.spread_after[topic] = diff.max_min(tc)

    def merge(self, other: PlanMetrics) -> None:
        self.before.merge(other.before)
        self.diff.merge(other.diff)
        self.spread_after.update(other.spread_after)

    def result(self) -> tuple[BalanceMetrics, BalanceMetrics]:
        """The metrics (before, after)."""
        after = MetricsAccumulator(self.before.brokers, self.before.rack_of, topics=())
        after.merge(self.before)
        after.merge(self.diff)
        for topic, spread in self.spread_after.items():
            if spread is None:
                after.topic_spread.pop(topic, None)
            else:
                after.topic_spread[topic] = spread
        return self.before.result(), after.result()


def _spread(values: Iterable[int]) -> int:
    vals = list(values)
    return max(vals) - min(vals) if vals else 0


class _HasReplicas(Protocol):
    @property
    def replicas(self) -> tuple[int, ...]: ...
    @property
    def removing_replicas(self) -> tuple[int, ...]: ...
    @property
    def target_replicas(self) -> tuple[int, ...]: ...


def target_of(p: _HasReplicas) -> tuple[int, ...]:
    """``p.target_replicas`` without building a set when nothing is being removed."""
    return p.target_replicas if p.removing_replicas else p.replicas


def partition_size(replica_sizes: Mapping[int, int] | None) -> int | None:
    """Bytes one replica of the partition copies: the largest replica's size (the leader's)."""
    if not replica_sizes:
        return None
    return max(replica_sizes.values())


def compute_metrics(
    snapshot: ClusterSnapshot,
    plan: ReassignmentPlan | None = None,
    *,
    brokers: Collection[int] | None = None,
    removed: Collection[int] = (),
    topics: Collection[str] | None = None,
    rack_aware: bool = True,
) -> BalanceMetrics:
    """Metrics of ``snapshot`` with ``plan`` applied (``None``: as it is).

    ``brokers``: the live brokers (default: the snapshot's brokers minus ``removed``);
    ``topics``: the topics whose per-topic balance is reported (default: all). In-flight
    reassignments count at their target replicas.
    """
    live = sorted(brokers) if brokers is not None else [b for b in snapshot.broker_ids if b not in set(removed)]
    rack_of: dict[int, object] = {b.id: (b.rack if rack_aware else None) for b in snapshot.brokers}
    moves = plan.by_partition() if plan is not None else {}

    def rows() -> Iterable[tuple[str, Sequence[int], int, int | None]]:
        for p in snapshot.partitions:
            target = target_of(p)
            m = moves.get(TopicPartition(p.topic, p.partition)) if moves else None
            yield (
                p.topic,
                m.target_replicas if m is not None else target,
                len(target),
                partition_size(p.replica_sizes),
            )

    return assignment_metrics(rows(), live, rack_of, topics=topics)
