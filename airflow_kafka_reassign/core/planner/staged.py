"""The planner cut into the stages a cluster runs: per-topic work on executors, aggregates on the driver.

:func:`~airflow_kafka_reassign.core.planner.pipeline.plan_reassignment` runs every step in
one process. This module runs the *same* steps in the order a Spark job needs them, with
only small aggregates crossing from the per-topic stages to the driver:

1. ``prepare`` (per topic, executors): :func:`stage_prepare` checks the rows, builds the
   topic's planner input (:func:`~.goals.prepare_topic`) and returns its aggregates
   (:class:`~.types.TopicLoad`, fixed load, the first error);
2. ``quotas`` (driver): :func:`driver_quotas` merges them and runs the global step
   (:func:`~.quotas.compute_quotas`); on large inputs the driver only splits the brokers'
   room between groups of topics and each group is settled on its own (executors: through
   ``map_groups``, or, with ``defer_groups``, by the ``place`` task of its topics:
   :func:`place_grouped`);
3. ``place`` (per topic, executors): :func:`stage_place` runs :func:`~.topic.plan_topic` with
   the topic's quotas and returns the topic's outcome: its moves, the final replica sets the
   leader step needs, the lower bound's per-topic facts and final counts;
4. ``leaders`` (driver): :func:`driver_leaders` balances preferred leaders over every
   partition (:func:`~.leaders.balance_leaders_flat`) and returns the changes per topic; it
   reads :class:`LeaderInput` batches (one per task, flat numpy arrays: no Python object per
   partition crosses to the driver);
5. ``finish`` (per topic, executors): :func:`stage_finish` applies the leader changes, writes
   the moves as JSON fragments of every plan file, and accumulates the before/after metrics;
6. ``result`` (driver): :func:`driver_result` adds up the metrics and the lower bound.

:func:`plan_staged` runs the stages one after the other in one process: the reference the
Spark job is tested against (same snapshot and request, same plan as
``plan_reassignment``).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from airflow_kafka_reassign.core.planner.disk import (
    DiskBounds,
    DiskFlat,
    DiskGoal,
    DiskInput,
    DiskOutcome,
    balance_disk_input,
    disk_bounds,
)
from airflow_kafka_reassign.core.planner.disk_groups import DiskGroup, GroupRunner, LocalGroups, disk_by_groups
from airflow_kafka_reassign.core.planner.disk_index import FlatRows
from airflow_kafka_reassign.core.planner.goals import (
    PartitionLike,
    PartitionRow,
    PlanRequest,
    PlanResult,
    PrepareContext,
    TopicPrep,
    check_named,
    check_targets,
    merge_named,
    merge_preps,
    named_brokers,
    plan_context,
    prepare_topic,
)
from airflow_kafka_reassign.core.planner.leaders import balance_leaders_flat
from airflow_kafka_reassign.core.planner.lower_bound import (
    BoundPart,
    TopicFacts,
    bound_part,
    combine_bound_parts,
    topic_facts,
)
from airflow_kafka_reassign.core.planner.metrics import BalanceMetrics, PlanMetrics, partition_size, target_of
from airflow_kafka_reassign.core.planner.pipeline import (
    balance_warnings,
    disk_report_of,
    leader_changes_bound,
    make_disk_goal,
)
from airflow_kafka_reassign.core.planner.quotas import MapGroups, QuotaGroup, compute_quotas, solve_quota_group
from airflow_kafka_reassign.core.planner.topic import plan_topic
from airflow_kafka_reassign.core.planner.types import TopicLoad, TopicMove, TopicParams, TopicPartitions
from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.exceptions import ConfigurationError

# -- 1. prepare (per topic) ----------------------------------------------------------------


@dataclass
class Prepared:
    """What the driver needs of one topic after ``prepare``."""

    topic: str
    #: ``None`` when the topic leaves nothing for :func:`merge_preps` (or failed)
    prep: TopicPrep | None = None
    load: TopicLoad | None = None
    #: rows the request's heal targets name (checked on the driver)
    heal_rows: list[PartitionLike] = field(default_factory=list)
    #: the first planning error of the topic (ConfigurationError message)
    error: str | None = None
    #: the snapshot itself is invalid (a bad row, a partition listed twice, an unknown topic)
    invalid: str | None = None
    #: broker -> the topic's first partition naming it; the topic has replica sizes
    named: dict[int, TopicPartition] = field(default_factory=dict)
    any_sizes: bool = False
    #: bytes of the topic's replicas (one replica's size times the replicas of each partition)
    bytes: int = 0


def check_topic_rows(ctx: PrepareContext, topic: str, rows: Sequence[PartitionLike]) -> str | None:
    """The snapshot-level checks :class:`ClusterSnapshot` applies, for one topic's sorted rows."""
    if ctx.topic_rf and topic not in ctx.topic_rf:
        p = rows[0]
        return (
            f"snapshot: partition {p.topic}-{p.partition} belongs to topic {topic!r}, "
            "which is not in the snapshot's topics"
        )
    for a, b in zip(rows, rows[1:], strict=False):
        if a.partition == b.partition:
            return f"snapshot: partition {a.topic}-{a.partition} is listed twice"
    return None


def stage_prepare(ctx: PrepareContext, topic: str, rows: Sequence[PartitionLike] | PlainRows) -> Prepared:
    """Per-topic step 1; ``rows`` are the topic's partitions sorted by partition number, or its
    :class:`PlainRows` when :func:`plain_topic` holds, the snapshot names the topic and no
    partition is listed twice or has more replicas than the brokers that would hold them
    (``spark/snapshot_reader.topic_inputs``)."""
    if isinstance(rows, PlainRows):
        return _prepare_plain(ctx, topic, rows)
    invalid = check_topic_rows(ctx, topic, rows)
    if invalid is not None:
        return Prepared(topic, invalid=invalid)
    heal_rows = [p for p in rows if p.tp in ctx.heal] if ctx.heal else []
    named = named_brokers(rows)
    any_sizes = any(p.replica_sizes for p in rows)
    total = sum((partition_size(p.replica_sizes) or 0) * len(target_of(p)) for p in rows) if any_sizes else 0
    try:
        prep = prepare_topic(ctx, topic, rows)
    except ConfigurationError as e:
        return Prepared(topic, heal_rows=heal_rows, error=str(e), named=named, any_sizes=any_sizes, bytes=total)
    load = prep.planned.load(ctx.layout) if prep.planned is not None else None
    prep.planned = None  # stays on the executor; the driver only needs the aggregates
    # most topics leave nothing for merge_preps (no fixed load, warning or exclusion): not sent
    kept = None if prep == TopicPrep(topic) else prep
    return Prepared(topic, prep=kept, load=load, heal_rows=heal_rows, named=named, any_sizes=any_sizes, bytes=total)


def _prepare_plain(ctx: PrepareContext, topic: str, rows: PlainRows) -> Prepared:
    """:func:`stage_prepare` of a plain topic's columns: what it gives of the topic's rows."""
    partitions, replicas, sizes = rows
    first: dict[int, int] = {}  # broker -> the first (smallest) partition naming it
    for p, reps in zip(partitions, replicas, strict=True):
        for b in reps:
            if b not in first:
                first[b] = p
    any_sizes = any(s is not None for s in sizes)
    total = sum((s or 0) * len(r) for s, r in zip(sizes, replicas, strict=True)) if any_sizes else 0
    t = _plain_input(ctx, topic, rows)
    assert t is not None  # the reader gives no partition more replicas than the brokers
    return Prepared(topic, load=t.load(ctx.layout), named={b: TopicPartition(topic, p) for b, p in first.items()},
                    any_sizes=any_sizes, bytes=total)


# -- 2. quotas (driver) ----------------------------------------------------------------------


@dataclass
class QuotaStep:
    """The driver's state after the global step (broadcast to ``place``: ``quotas`` and ``params``)."""

    quotas: dict[str, tuple[int, ...]]
    params: TopicParams
    fixed_load: dict[int, int]
    fixed_leaders: dict[int, int]
    excluded_in_flight: list[TopicPartition]
    warnings: list[str]
    #: groups of topics the quota step settled on their own (0: all at once)
    quota_groups: int = 0
    #: with ``defer_groups``: the groups ``place`` has to solve first (their topics are not in
    #: ``quotas``; :func:`place_grouped`), and every topic's load for :func:`quotas_at_once`
    pending: tuple[QuotaGroup, ...] = ()
    loads: list[TopicLoad] = field(default_factory=list)
    #: the global step's balance floor and what bounded the brokers' balance (:class:`~.quotas.QuotaPlan`)
    floor: int = 0
    bounded_by: tuple[str, ...] = ()
    relaxed_topics: int = 0
    #: the load-aware goal (a capacity document), and the bytes per broker of partitions not planned
    disk: DiskGoal | None = None
    fixed_bytes: dict[int, int] = field(default_factory=dict)


def driver_quotas(
    ctx: PrepareContext, prepared: Iterable[Prepared], map_groups: MapGroups | None = None, *, defer_groups: bool = False
) -> QuotaStep:
    """Merge ``prepare``'s outputs, raise the first error (topics in name order), run the global step.

    Completes ``ctx`` (broker checks that need every replica, replica sizes present): the
    ``place`` stage must get this updated context. ``map_groups`` runs the quota step's
    groups of topics (:func:`~.quotas.compute_quotas`; the Spark job: as tasks);
    ``defer_groups`` leaves them to ``place`` instead (:attr:`QuotaStep.pending`).
    """
    items = sorted(prepared, key=lambda x: x.topic)
    for x in items:
        if x.invalid is not None:
            raise ValueError(x.invalid)
    check_named(ctx, merge_named(x.named for x in items))
    ctx.any_sizes = any(x.any_sizes for x in items)
    found = {p.tp: p for x in items for p in x.heal_rows}
    check_targets(ctx, {x.topic for x in items}, found)
    for x in items:
        if x.error is not None:
            raise ConfigurationError(x.error)
    preps = [x.prep for x in items if x.prep is not None]
    scope = merge_preps(ctx, preps)
    request = ctx.request
    disk = make_disk_goal(request, ctx.rack_names, ctx.layout, sum(x.bytes for x in items), ctx.any_sizes)
    loads = [x.load for x in items if x.load is not None]
    quota_plan = compute_quotas(
        loads, ctx.layout, scope.fixed_load, max_topic_spread=request.max_topic_spread,
        group_replicas=request.quota_group_replicas, map_groups=map_groups, defer_groups=defer_groups,
    )
    # the disk step balances the counts itself (pipeline.plan_topics): place only fixes racks and
    # empties removed brokers
    params = {"balance": not (disk is not None and disk.balance_counts), "fix_racks": True,
              "use_sizes": request.use_sizes or disk is not None}
    return QuotaStep(
        quotas=dict(quota_plan.quotas),
        params=TopicParams(**params),
        fixed_load=scope.fixed_load,
        fixed_leaders=scope.fixed_leaders,
        excluded_in_flight=scope.excluded_in_flight,
        warnings=[*scope.warnings, *quota_plan.warnings],
        quota_groups=quota_plan.groups,
        pending=quota_plan.pending,
        loads=loads if quota_plan.pending else [],
        floor=quota_plan.floor,
        bounded_by=quota_plan.bounded_by,
        relaxed_topics=quota_plan.relaxed_topics,
        disk=disk,
        fixed_bytes=scope.fixed_bytes,
    )


def quotas_at_once(ctx: PrepareContext, step: QuotaStep) -> QuotaStep:
    """``step`` with every topic's quotas from the quota step over all topics at once: what
    ``place`` falls back to when one of the pending groups cannot meet its share (the same
    quotas as :func:`driver_quotas` without ``defer_groups`` then gives)."""
    request = ctx.request
    quota_plan = compute_quotas(
        step.loads, ctx.layout, step.fixed_load, max_topic_spread=request.max_topic_spread, group_replicas=0
    )
    return replace(
        step, quotas=dict(quota_plan.quotas), warnings=[*step.warnings, *quota_plan.warnings], quota_groups=0,
        pending=(), loads=[], floor=quota_plan.floor, bounded_by=quota_plan.bounded_by,
        relaxed_topics=quota_plan.relaxed_topics,
    )


def place_grouped(
    ctx: PrepareContext, params: TopicParams, groups: Sequence[QuotaGroup],
    topics: Iterable[tuple[str, Sequence[PartitionLike] | PlainRows]], *, defer_bound: bool = False,
) -> Iterator[Placed] | None:
    """``place`` for topics whose quota groups (pending in :class:`QuotaStep`) are among
    ``groups``: each group's extras handed out (:func:`~.quotas.solve_quota_group`), then
    every topic placed. ``None`` (nothing placed) if a group cannot meet its share: the caller
    then takes :func:`quotas_at_once`."""
    quotas: dict[str, tuple[int, ...]] = {}
    for group in groups:
        result = solve_quota_group(group, ctx.layout)
        if result is None:
            return None
        quotas.update(zip((ld.topic for ld in group.loads), result, strict=True))
    return (stage_place(ctx, (quotas, params), topic, rows, defer_bound=defer_bound) for topic, rows in topics)


# -- 3. place (per topic) ------------------------------------------------------------------


@dataclass
class Placed:
    """One topic after ``place``: everything ``leaders``, ``finish`` and the bound need."""

    topic: str
    #: every partition of the topic: (partition, target replicas now, bytes of one replica or None)
    rows: list[tuple[int, tuple[int, ...], int | None]]
    balance: bool = False
    #: planned partitions (a subset of rows for evacuated internal topics), their replicas
    #: before and after the per-topic step, frozen flags and sizes
    partitions: list[int] = field(default_factory=list)
    current: list[tuple[int, ...]] = field(default_factory=list)
    final: list[tuple[int, ...]] = field(default_factory=list)
    frozen: list[bool] = field(default_factory=list)
    sizes: list[int] | None = None
    #: the topic's share of the lower bound
    bound: BoundPart | None = None
    #: with ``defer_bound``, what that share is computed from instead (its facts and final counts per
    #: live broker, :func:`~.lower_bound.bound_parts`: a task's topics at once)
    facts: tuple[TopicFacts, dict[int, int] | None] | None = None


class PlainRows(NamedTuple):
    """A topic's partitions as plain columns, sorted by partition, none of them being reassigned
    (no adding or removing replicas): what ``place`` reads when :func:`plain_topic` holds, instead
    of a :class:`~.goals.PartitionRow` per partition."""

    partitions: list[int]
    replicas: list[tuple[int, ...]]
    #: bytes of one replica of each partition (its largest replica), ``None`` when not known
    sizes: list[int | None]


def plain_topic(ctx: PrepareContext, topic: str) -> bool:
    """Whether :func:`~.goals.prepare_topic` plans every partition of ``topic`` that is not being
    reassigned as it is: at its replicas and replication factor, balanced, not frozen (the goal
    balances, the topic is selected, no heal, RF change or cordoned broker concerns it). A removed
    broker changes nothing here: the per-topic step empties it. ``place`` then builds the topic's
    :class:`~.types.TopicPartitions` from :class:`PlainRows` (:func:`stage_place`); ``prepare`` has
    checked the rows and raised the topic's errors already."""
    return (
        ctx.balance and not ctx.auto_heal and not ctx.cordoned and topic not in ctx.request.rf_changes
        and not any(tp.topic == topic for tp in ctx.heal) and ctx.selected(topic)
    )


def _plain_input(ctx: PrepareContext, topic: str, rows: PlainRows) -> TopicPartitions | None:
    """:func:`~.goals.prepare_topic`'s planned partitions of a :func:`plain_topic` (``None``: leave
    it to ``prepare_topic``, which raises for a replication factor above the brokers)."""
    partitions, replicas, sizes = rows
    target_rf = [len(r) for r in replicas]
    if not partitions or max(target_rf) > ctx.nb:
        return None
    return TopicPartitions(
        topic=topic, partitions=list(partitions), replicas=list(replicas), target_rf=target_rf,
        frozen=[False] * len(partitions), sizes=[s or 0 for s in sizes] if ctx.any_sizes else None, balance=True,
    )


def stage_place(
    ctx: PrepareContext,
    step: QuotaStep | tuple[Mapping[str, Sequence[int]], TopicParams],
    topic: str,
    rows: Sequence[PartitionLike] | PlainRows,
    *,
    defer_bound: bool = False,
) -> Placed:
    """Per-topic step 3 (``step``: the :class:`QuotaStep`, or just its quotas and params).
    ``rows``: the topic's partitions, or its :class:`PlainRows` when :func:`plain_topic` holds.
    ``defer_bound``: leave the topic's share of the lower bound to the caller (:attr:`Placed.facts`)."""
    quotas, params = (step.quotas, step.params) if isinstance(step, QuotaStep) else step
    t: TopicPartitions | None = None
    if isinstance(rows, PlainRows):
        t = _plain_input(ctx, topic, rows)
        if t is None:  # as prepare_topic does it
            rows = [PartitionRow(topic, p, reps, (), (), None if s is None else {reps[0]: s})
                    for p, reps, s in zip(*rows, strict=True)]
    if isinstance(rows, PlainRows):
        out = Placed(topic, rows=list(zip(*rows, strict=True)))
    else:
        t = prepare_topic(ctx, topic, rows).planned
        out = Placed(topic, rows=[(p.partition, target_of(p), partition_size(p.replica_sizes)) for p in rows])
    if t is None:
        return out
    topic_params = TopicParams(balance=t.balance and params.balance, fix_racks=t.balance, use_sizes=params.use_sizes)
    moves = plan_topic(t, quotas[topic], ctx.layout, topic_params)
    moved = {m.partition: m.target_replicas for m in moves}
    out.balance = t.balance
    out.partitions = list(t.partitions)
    out.current = list(t.replicas)
    out.final = [moved.get(p, reps) for p, reps in zip(t.partitions, t.replicas, strict=True)]
    out.frozen = list(t.frozen or [False] * len(t.partitions))
    out.sizes = list(t.sizes) if t.sizes is not None else None
    facts = topic_facts(t, ctx.layout, fix_racks=ctx.balance)
    final_counts: dict[int, int] | None = None
    if t.balance:
        live = ctx.live
        # per live broker, in the order the replicas first name them
        final_counts = {b: c for b, c in Counter(chain.from_iterable(out.final)).items() if b in live}
    if defer_bound:
        out.facts = (facts, final_counts)
    else:
        out.bound = bound_part(facts, ctx.layout, final_counts, balance_brokers=ctx.balance)
    return out


# -- 3b. disk (driver; load-aware goals only) ------------------------------------------------


def _flat(rows: Sequence[Sequence[int]]) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
    lens = np.fromiter(map(len, rows), dtype=np.int32, count=len(rows))
    return lens, np.fromiter(chain.from_iterable(rows), dtype=np.int32, count=int(lens.sum()))


@dataclass
class DiskArrays:
    """What the disk step needs of some placed topics, in flat arrays (one per Spark task, like
    :class:`LeaderInput`): per planned partition its replicas after the count steps and before
    the plan, its bytes and whether it is frozen."""

    topics: list[str]
    balance: list[bool]
    counts: list[int]
    partitions: npt.NDArray[np.int32]
    now_lens: npt.NDArray[np.int32]
    now: npt.NDArray[np.int32]
    orig_lens: npt.NDArray[np.int32]
    orig: npt.NDArray[np.int32]
    sizes: npt.NDArray[np.int64]
    frozen: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, placed: Iterable[Placed]) -> DiskArrays:
        return cls.of_views([cls.view(x) for x in placed])

    @staticmethod
    def view(x: Placed) -> Placed:
        """What :meth:`of_views` needs of a placed topic (its rows and bound left out)."""
        return Placed(x.topic, [], x.balance, x.partitions, x.current, x.final, x.frozen, x.sizes)

    @classmethod
    def of_views(cls, xs: Sequence[Placed]) -> DiskArrays:
        now_lens, now = _flat([r for x in xs for r in x.final])
        orig_lens, orig = _flat([r for x in xs for r in x.current])
        n = len(now_lens)
        return cls(
            topics=[x.topic for x in xs],
            balance=[x.balance for x in xs],
            counts=[len(x.partitions) for x in xs],
            partitions=np.fromiter((p for x in xs for p in x.partitions), dtype=np.int32, count=n),
            now_lens=now_lens,
            now=now,
            orig_lens=orig_lens,
            orig=orig,
            sizes=np.fromiter((s for x in xs for s in (x.sizes or [0] * len(x.partitions))), dtype=np.int64, count=n),
            frozen=np.fromiter((f for x in xs for f in x.frozen), dtype=bool, count=n),
        )

    def group(self, gid: int) -> DiskGroup:
        """These topics as one group of the disk step by groups (:mod:`.disk_groups`)."""
        now = FlatRows(self.now_lens.astype(np.int64), self.now.astype(np.int64))
        return DiskGroup(
            gid=gid, topics=list(self.topics), balance=list(self.balance), counts=list(self.counts),
            partitions=self.partitions.astype(np.int64), start=now,
            orig=FlatRows(self.orig_lens.astype(np.int64), self.orig.astype(np.int64)),
            sizes=self.sizes.astype(np.int64), frozen=self.frozen.astype(bool),
            now=FlatRows(now.lens, now.flat.copy()),
        )

    def split(self, n: int) -> list[DiskArrays]:
        """These topics cut into ``n`` runs of consecutive topics with about as many replicas each
        (what :func:`plan_staged` groups, as the Spark job's place tasks do)."""
        p_starts = np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)])
        r_starts = np.concatenate([[0], np.cumsum(self.now_lens, dtype=np.int64)])
        o_starts = np.concatenate([[0], np.cumsum(self.orig_lens, dtype=np.int64)])
        per_topic = r_starts[p_starts[1:]] - r_starts[p_starts[:-1]]
        cuts = np.searchsorted(np.cumsum(per_topic), np.linspace(0, per_topic.sum(), n + 1)[1:-1], side="right")
        bounds = [0, *sorted(set(cuts.tolist()) - {0, len(self.topics)}), len(self.topics)]
        out = []
        for j0, j1 in zip(bounds, bounds[1:], strict=False):
            a, b = int(p_starts[j0]), int(p_starts[j1])
            out.append(DiskArrays(
                topics=self.topics[j0:j1], balance=self.balance[j0:j1], counts=self.counts[j0:j1],
                partitions=self.partitions[a:b], now_lens=self.now_lens[a:b], now=self.now[r_starts[a]:r_starts[b]],
                orig_lens=self.orig_lens[a:b], orig=self.orig[o_starts[a]:o_starts[b]], sizes=self.sizes[a:b],
                frozen=self.frozen[a:b],
            ))
        return out


@dataclass
class DiskDone:
    """The disk step's result on the driver: replicas it changed per topic and partition, what it
    saw, and the plan's bytes per broker and bounds."""

    changes: dict[str, dict[int, tuple[int, ...]]]
    outcome: DiskOutcome
    bounds: DiskBounds
    #: the disk step left the replica counts further apart than the goal (:func:`counts_in_place`)
    counts_missed: bool = False
    #: the disk step by groups: its rounds (0: the serial step)
    rounds: int = 0


def counts_in_place(step: QuotaStep) -> QuotaStep:
    """``step`` with the per-topic steps balancing the replica counts and the disk step not: what
    ``place`` runs again when the disk step's own count balance fell short (racks)."""
    assert step.disk is not None
    return replace(step, params=replace(step.params, balance=True), disk=replace(step.disk, balance_counts=False))


def driver_disk(ctx: PrepareContext, step: QuotaStep, inputs: Iterable[DiskArrays]) -> DiskDone | None:
    """The disk step over every planned partition (topics in name order, as the pure planner
    takes them, whichever task placed them); ``None`` without a capacity document."""
    goal = step.disk
    if goal is None:
        return None
    segments = sorted(((x, j) for x in inputs for j in range(len(x.topics))), key=lambda v: v[0].topics[v[1]])
    # runs of consecutive topics of one input (the usual case: each task's topics in name order)
    runs: list[tuple[DiskArrays, int, int]] = []
    for x, j in segments:
        if runs and runs[-1][0] is x and runs[-1][2] == j:
            runs[-1] = (x, runs[-1][1], j + 1)
        else:
            runs.append((x, j, j + 1))
    topics: list[str] = []
    balance: list[bool] = []
    counts: list[int] = []
    parts: dict[str, list[Any]] = {k: [] for k in ("partitions", "now_lens", "now", "orig_lens", "orig", "sizes", "frozen")}
    starts: dict[int, tuple[list[int], npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}
    for x, j0, j1 in runs:
        if id(x) not in starts:
            starts[id(x)] = (np.concatenate([[0], np.cumsum(x.counts)]).astype(np.int64).tolist(),
                             np.concatenate([[0], np.cumsum(x.now_lens, dtype=np.int64)]),
                             np.concatenate([[0], np.cumsum(x.orig_lens, dtype=np.int64)]))
        p_starts, now_starts, orig_starts = starts[id(x)]
        a, b = p_starts[j0], p_starts[j1]
        topics.extend(x.topics[j0:j1])
        balance.extend(x.balance[j0:j1])
        counts.extend(x.counts[j0:j1])
        parts["partitions"].append(x.partitions[a:b])
        parts["now_lens"].append(x.now_lens[a:b])
        parts["now"].append(x.now[now_starts[a]:now_starts[b]])
        parts["orig_lens"].append(x.orig_lens[a:b])
        parts["orig"].append(x.orig[orig_starts[a]:orig_starts[b]])
        parts["sizes"].append(x.sizes[a:b])
        parts["frozen"].append(x.frozen[a:b])
    starts.clear()

    def joined(k: str, dtype: Any) -> Any:
        return np.concatenate(parts[k]).astype(dtype, copy=False) if parts[k] else np.zeros(0, dtype=dtype)

    now = FlatRows(joined("now_lens", np.int64), joined("now", np.int64))
    flat = DiskFlat(now, FlatRows(joined("orig_lens", np.int64), joined("orig", np.int64)), joined("sizes", np.int64),
                    joined("frozen", bool))
    partitions = joined("partitions", np.int64)
    parts.clear()
    inp = DiskInput(counts=counts, balance=balance, replicas=(), original=(), sizes=(), frozen=(), flat=flat)
    outcome = balance_disk_input(inp, ctx.layout, step.fixed_bytes, step.fixed_load, goal)
    changes: dict[str, dict[int, tuple[int, ...]]] = {}
    p_starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).tolist()
    r_starts = now.starts()
    final = FlatRows(now.lens, now.flat.copy())
    for (ti, pi), reps in outcome.changed.items():
        e = p_starts[ti] + pi
        changes.setdefault(topics[ti], {})[int(partitions[e])] = reps
        r = int(r_starts[e])
        final.flat[r:r + len(reps)] = reps  # a change keeps the partition's replica count
    bounds = disk_bounds(inp, final, goal, ctx.layout.brokers, step.fixed_bytes, step.fixed_load)
    return DiskDone(changes, outcome, bounds, outcome.counts_missed(goal, step.floor))


def driver_disk_groups(ctx: PrepareContext, step: QuotaStep, runner: GroupRunner) -> DiskDone | None:
    """The disk step by groups (:func:`~.disk_groups.disk_by_groups`) over the groups ``runner``
    holds (one per place task: :meth:`DiskArrays.group`); ``None`` without a capacity document."""
    goal = step.disk
    if goal is None:
        return None
    done = disk_by_groups(runner, ctx.layout, goal, step.fixed_bytes, step.fixed_load)
    return DiskDone(done.changes, done.outcome, done.bounds, done.outcome.counts_missed(goal, step.floor), done.rounds)


def apply_disk_changes(inputs: Iterable[LeaderInput], changes: Mapping[str, Mapping[int, tuple[int, ...]]]) -> None:
    """Write the disk step's replica changes into the leader step's inputs (in place; a change
    keeps the partition's replica count)."""
    if not changes:
        return
    for x in inputs:
        p_starts = np.concatenate([[0], np.cumsum(x.counts, dtype=np.int64)]).tolist()
        r_starts = np.concatenate([[0], np.cumsum(x.lens, dtype=np.int64)])
        for j, topic in enumerate(x.topics):
            mine = changes.get(topic)
            if not mine:
                continue
            ps = x.partitions[p_starts[j]:p_starts[j + 1]]
            for p, reps in mine.items():
                i = p_starts[j] + int(np.searchsorted(ps, p))
                r = int(r_starts[i])
                x.final[r:r + len(reps)] = reps


def merge_changes(
    disk: DiskDone | None, leaders: dict[str, dict[int, tuple[int, ...]]]
) -> dict[str, dict[int, tuple[int, ...]]]:
    """Replicas per topic and partition for ``finish``: the disk step's changes, then the leader
    step's (which were computed on them: its replicas win)."""
    if disk is None or not disk.changes:
        return leaders
    out = {t: dict(c) for t, c in disk.changes.items()}
    for t, c in leaders.items():
        out.setdefault(t, {}).update(c)
    return out


# -- 4. leaders (driver) -------------------------------------------------------------------


@dataclass
class LeaderInput:
    """What ``leaders`` needs of some topics' planned partitions, in flat arrays (a Spark
    task sends one for all its topics: the driver collects this, not the rows, and reads it
    without building a Python object per partition)."""

    topics: list[str]
    balance: list[bool]
    #: planned partitions per topic
    counts: list[int]
    #: per planned partition, topic by topic: its number, how many replicas it has, its
    #: preferred leader before the plan, whether leader balance may reorder it
    partitions: npt.NDArray[np.int32]
    lens: npt.NDArray[np.int32]
    original: npt.NDArray[np.int32]
    movable: npt.NDArray[np.bool_]
    #: every planned partition's replicas after the per-topic step, one after the other
    final: npt.NDArray[np.int32]

    @classmethod
    def of(cls, placed: Iterable[Placed]) -> LeaderInput:
        return cls.of_views([cls.view(x) for x in placed])

    @staticmethod
    def view(x: Placed) -> LeaderView:
        """What :meth:`of_views` needs of a placed topic (keeps less alive than the topic)."""
        return x.topic, x.balance, x.partitions, x.final, [c[0] for c in x.current], x.frozen

    @classmethod
    def of_views(cls, views: Sequence[LeaderView]) -> LeaderInput:
        n = sum(len(v[2]) for v in views)
        lens = np.fromiter((len(r) for v in views for r in v[3]), dtype=np.int32, count=n)
        return cls(
            topics=[v[0] for v in views],
            balance=[v[1] for v in views],
            counts=[len(v[2]) for v in views],
            partitions=np.fromiter((p for v in views for p in v[2]), dtype=np.int32, count=n),
            lens=lens,
            original=np.fromiter((b for v in views for b in v[4]), dtype=np.int32, count=n),
            movable=np.fromiter((not f for v in views for f in v[5]), dtype=bool, count=n),
            final=np.fromiter(chain.from_iterable(r for v in views for r in v[3]), dtype=np.int32, count=int(lens.sum())),
        )


LeaderView = tuple[str, bool, list[int], list[tuple[int, ...]], list[int], list[bool]]
"""(topic, balanced, planned partitions, their final replicas, original leaders, frozen flags)."""


def driver_leaders(ctx: PrepareContext, step: QuotaStep, inputs: Iterable[LeaderInput]) -> dict[str, dict[int, tuple[int, ...]]]:
    """Leader balance over every planned partition: topic -> {partition: reordered replicas}.

    Partitions are taken topic by topic in name order, whichever input holds them, so the
    result does not depend on how the topics were split between tasks."""
    request = ctx.request
    if not (ctx.balance and request.balance_leaders):
        return {}
    xs = sorted((x for x in inputs if x.topics), key=lambda x: x.topics[0])
    topics = [t for x in xs for t in x.topics]
    if all(a < b for a, b in zip(topics, topics[1:], strict=False)):
        # the usual case (each task's topics are consecutive by name): whole arrays
        parts = [(x, 0, len(x.topics)) for x in xs]
    else:  # topic by topic, in name order
        parts = sorted(((x, j, j + 1) for x in xs for j in range(len(x.topics))), key=lambda v: v[0].topics[v[1]])
    fixed = dict(step.fixed_leaders)
    arrays: dict[str, list[Any]] = {"final": [], "lens": [], "original": [], "movable": []}
    balanced: list[tuple[str, npt.NDArray[np.int32], int]] = []  # topic, its partitions from an offset
    starts: list[int] = []  # index of each balanced topic's first partition
    n = 0
    # per input, once: where each topic's partitions and each partition's replicas start
    p_starts = {id(x): np.concatenate([[0], np.cumsum(x.counts, dtype=np.int64)]).tolist() for x in xs}
    r_starts = {id(x): np.concatenate([[0], np.cumsum(x.lens, dtype=np.int64)]) for x in xs}
    for x, j0, j1 in parts:
        p0, p1 = p_starts[id(x)][j0], p_starts[id(x)][j1]
        r_offsets = r_starts[id(x)][p0:p1 + 1]
        final = x.final[int(r_offsets[0]):int(r_offsets[-1])]
        r_offsets = r_offsets - r_offsets[0]
        keep = np.repeat(np.asarray(x.balance[j0:j1], dtype=bool), x.counts[j0:j1])
        if not keep.all():  # topics not balanced: their leaders count as fixed
            heads = final[r_offsets[:-1][~keep]]
            for b, c in zip(*np.unique(heads, return_counts=True), strict=True):
                fixed[int(b)] = fixed.get(int(b), 0) + int(c)
            final = final[np.repeat(keep, x.lens[p0:p1])]
        q = p0
        for j in range(j0, j1):
            if x.balance[j] and x.counts[j]:
                balanced.append((x.topics[j], x.partitions, q))
                starts.append(n)
                n += x.counts[j]
            q += x.counts[j]
        arrays["final"].append(final)
        arrays["lens"].append(x.lens[p0:p1][keep])
        arrays["original"].append(x.original[p0:p1][keep])
        arrays["movable"].append(x.movable[p0:p1][keep])
    if not balanced:
        return {}
    flat, lens, original, movable = (np.concatenate(arrays[k]) for k in ("final", "lens", "original", "movable"))
    changes = balance_leaders_flat(
        flat, lens, original, ctx.layout.brokers, fixed, movable, spread=request.max_leader_spread
    )
    out: dict[str, dict[int, tuple[int, ...]]] = {}
    for i, reps in changes.items():
        j = bisect_right(starts, i) - 1
        topic, partitions, offset = balanced[j]
        out.setdefault(topic, {})[int(partitions[offset + i - starts[j]])] = reps
    return out


# -- 5. finish (per topic) -----------------------------------------------------------------


def _ints(xs: Sequence[int]) -> str:
    return "[" + ",".join(str(int(x)) for x in xs) + "]"


def move_fragments(m: TopicMove) -> tuple[str, str, str, str]:
    """JSON of one move in plan.json, rollback.json, reassignment.json, rollback-kafka.json.

    Byte for byte what ``ReassignmentPlan.model_dump_json`` / ``to_kafka_json`` write (a test
    checks), built without pydantic so a million replicas' moves serialise on the executors.
    """
    topic = json.dumps(m.topic, ensure_ascii=False)  # as pydantic writes it
    ktopic = json.dumps(m.topic)  # as json.dumps (to_kafka_json) writes it
    rf = "true" if m.changes_rf else "false"
    cur, tgt = _ints(m.current_replicas), _ints(m.target_replicas)
    return (
        f'{{"topic":{topic},"partition":{m.partition},"target_replicas":{tgt},"current_replicas":{cur},"allow_rf_change":{rf}}}',
        f'{{"topic":{topic},"partition":{m.partition},"target_replicas":{cur},"current_replicas":{tgt},"allow_rf_change":{rf}}}',
        f'{{"topic":{ktopic},"partition":{m.partition},"replicas":{tgt}}}',
        f'{{"topic":{ktopic},"partition":{m.partition},"replicas":{cur}}}',
    )


def new_metrics(ctx: PrepareContext) -> PlanMetrics:
    """Empty before/after metrics; :func:`stage_finish` adds each balanced topic to their per-topic report."""
    return PlanMetrics(ctx.layout.brokers, ctx.broker_racks)


def stage_finish(
    ctx: PrepareContext, placed: Placed, changes: Mapping[int, tuple[int, ...]], metrics: PlanMetrics
) -> tuple[list[TopicMove], list[tuple[str, str, str, str]]]:
    """Per-topic step 5: the topic's final moves and their JSON; adds its rows to the metrics."""
    finals = dict(zip(placed.partitions, placed.final, strict=True))
    finals.update(changes)
    moves: list[TopicMove] = []
    for i, p in enumerate(placed.partitions):
        cur, fin = placed.current[i], finals[p]
        if fin != cur:
            moves.append(TopicMove(placed.topic, p, cur, fin, placed.sizes[i] if placed.sizes else 0))
    # every row ends as ``finals`` says, or as it was: the moves' partitions and the changes differ
    changed = dict(changes)
    changed.update((m.partition, m.target_replicas) for m in moves)
    metrics.add_topic(placed.topic, placed.rows, changed, report=placed.balance)
    return moves, [move_fragments(m) for m in moves]


# -- 6. result (driver) --------------------------------------------------------------------


@dataclass
class MoveTotals:
    """What the moves cost, added up where the moves are (executors)."""

    partitions: int = 0
    replica_moves: int = 0
    bytes: int = 0
    leader_changes: int = 0

    def add(self, moves: Iterable[TopicMove]) -> None:
        for m in moves:
            self.partitions += 1
            self.replica_moves += m.replica_moves
            self.bytes += m.size * m.replica_moves
            self.leader_changes += m.leader_changes

    def merge(self, other: MoveTotals) -> None:
        self.partitions += other.partitions
        self.replica_moves += other.replica_moves
        self.bytes += other.bytes
        self.leader_changes += other.leader_changes


def driver_result(
    ctx: PrepareContext,
    step: QuotaStep,
    bound_parts: BoundPart,
    totals: MoveTotals,
    before: BalanceMetrics,
    after: BalanceMetrics,
    original_leaders: Mapping[int, int],
    disk: DiskDone | None = None,
) -> PlanResult:
    """The :class:`PlanResult` (its ``plan`` holds no moves: the Spark job writes them from
    fragments; :func:`plan_staged` fills it) from the merged outputs."""
    request = ctx.request
    layout = ctx.layout
    bound = combine_bound_parts(bound_parts, layout, balance_brokers=ctx.balance, fixed_load=step.fixed_load)
    leader_bound = leader_changes_bound(original_leaders, layout, request, balance=ctx.balance)
    has_sizes = ctx.any_sizes
    warnings = list(step.warnings)
    parts = bound.as_dict()
    moves_bound = bound.moves
    if disk is not None:
        warnings.extend(disk.outcome.warnings)
        parts["disk"] = disk.bounds.moves_bound
        moves_bound = max(moves_bound, disk.bounds.moves_bound)
    warnings.extend(balance_warnings(after, request, balance=ctx.balance))
    return PlanResult(
        request=request,
        plan=ReassignmentPlan.model_construct(moves=()),
        lower_bound=moves_bound,
        lower_bound_parts=parts,
        replica_moves=totals.replica_moves,
        bytes_to_move=totals.bytes if has_sizes else None,
        leader_changes=totals.leader_changes,
        leader_changes_lower_bound=leader_bound,
        before=before,
        after=after,
        excluded_in_flight=tuple(step.excluded_in_flight),
        warnings=tuple(warnings),
        replica_max_min_floor=step.floor,
        replica_balance_bounded_by=step.bounded_by,
        topics_uneven_for_racks=step.relaxed_topics,
        bytes_lower_bound=disk.bounds.bytes_bound if disk is not None else None,
        disk=disk_report_of(disk.bounds, step.disk, request) if disk is not None and step.disk is not None else None,
    )


def new_bound(ctx: PrepareContext) -> BoundPart:
    """An empty :class:`BoundPart` to merge the topics' parts into."""
    return BoundPart(ctx.layout.n_racks)


def leader_counts(rows: Iterable[tuple[int, tuple[int, ...], int | None]]) -> dict[int, int]:
    """Preferred leaders per broker (any broker) of ``Placed.rows``: the leader bound's input."""
    out: dict[int, int] = {}
    for _, reps, _ in rows:
        out[reps[0]] = out.get(reps[0], 0) + 1
    return out


# -- all stages in one process ----------------------------------------------------------------


def plan_staged(snapshot: ClusterSnapshot, request: PlanRequest | None = None, disk_groups: int = 0) -> PlanResult:
    """Every stage in order, in this process: what the Spark job computes, for tests.
    ``disk_groups``: the disk step by that many groups of topics (0: the serial step)."""
    request = request or PlanRequest()
    ctx = plan_context(snapshot.brokers, snapshot.topics, None, request, any_sizes=False)
    by_topic: dict[str, list[PartitionLike]] = {}
    for p in snapshot.partitions:
        by_topic.setdefault(p.topic, []).append(p)
    groups = {t: sorted(rows, key=lambda p: p.partition) for t, rows in sorted(by_topic.items())}
    step = driver_quotas(ctx, [stage_prepare(ctx, t, rows) for t, rows in groups.items()])
    placed = [stage_place(ctx, step, t, rows) for t, rows in groups.items()]

    def disk_step(step: QuotaStep) -> DiskDone | None:
        if not disk_groups:
            return driver_disk(ctx, step, [DiskArrays.of(placed)])
        parts = DiskArrays.of(placed).split(disk_groups)
        return driver_disk_groups(ctx, step, LocalGroups([x.group(i) for i, x in enumerate(parts)]))

    disk = disk_step(step)
    if disk is not None and disk.counts_missed:
        step = counts_in_place(step)
        placed = [stage_place(ctx, step, t, rows) for t, rows in groups.items()]
        disk = disk_step(step)
    leader_inputs = [LeaderInput.of(placed)]
    if disk is not None:
        apply_disk_changes(leader_inputs, disk.changes)
    changes = merge_changes(disk, driver_leaders(ctx, step, leader_inputs))
    metrics = new_metrics(ctx)
    moves: list[TopicMove] = []
    originals: dict[int, int] = {}
    for x in placed:
        m, _ = stage_finish(ctx, x, changes.get(x.topic, {}), metrics)
        moves.extend(m)
        for b, c in leader_counts(x.rows).items():
            originals[b] = originals.get(b, 0) + c
    totals = MoveTotals()
    totals.add(moves)
    bound = new_bound(ctx)
    for x in placed:
        if x.bound is not None:
            bound.merge(x.bound)
    result = driver_result(ctx, step, bound, totals, *metrics.result(), originals, disk)
    moved = {m.topic for m in moves}
    plan = ReassignmentPlan.model_construct(
        moves=tuple(m.to_move() for m in sorted(moves, key=lambda m: (m.topic, m.partition))),
        # every partition of a moved topic is a row of its Placed (what the Spark job records too)
        partition_counts={x.topic: len(x.rows) for x in sorted(placed, key=lambda x: x.topic) if x.topic in moved},
    )
    return result.model_copy(update={"plan": plan})
