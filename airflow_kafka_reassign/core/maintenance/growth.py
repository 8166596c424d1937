"""Guarded partition growth: every decision of GuardedCreatePartitions, on a snapshot.

Pure (no Airflow, no Kafka client). :func:`plan_growth` decides, per topic of a batch, from a
:class:`~airflow_kafka_reassign.core.vocabulary.models.ClusterSnapshot`:

* **internal topics** (KAFKA-20029): ``__consumer_offsets``, ``__transaction_state``,
  ``__share_group_state``, any topic Kafka marks internal, and the caller's extra names or
  pattern are refused. Their coordinators are found by ``hash(id) % partition count``: growing
  them re-maps consumer groups and transactional ids to other partitions while brokers
  disagree on the count (split brain, orphaned and hanging transactions). Only
  ``allow_internal_topic_partition_increase=True`` lets them through, with a loud warning.
* **compacted topics** (``cleanup.policy`` contains ``compact``) are refused unless
  ``allow_compacted=True``: a key's new records land in another partition than its old ones,
  so compaction never removes the old value. Every growing topic gets the key re-mapping
  warning (``hash(key) % N`` changes with N).
* **never shrink**: a lower count is refused (Kafka cannot remove partitions); an equal
  count is a no-op success, so a retried task is harmless.
* **placement**: the new partitions keep the topic's replication factor (never another,
  KIP-860's spirit), spread over racks, on the least-loaded live brokers by the planner's
  load model: the fewest replicas in total, as long as the topic's own replicas per broker
  stay within :data:`MAX_TOPIC_SPREAD` of each other (the planner's ``max_topic_spread``);
  preferred leaders go to the brokers leading the fewest of the topic's, then of all partitions.
* **under-replicated creation** (KIP-409, client side): with fewer live brokers than the
  replication factor the topic is refused by default. With ``allow_under_replicated=True``
  it grows when the live brokers are at least ``min(min.insync.replicas, RF)``: every live
  broker gets a replica and the leader, and the missing replicas go to brokers that are
  registered but not running (KRaft keeps a stopped broker registered; it is absent from the
  snapshot's brokers while partitions still name it). Those replicas are KIP-409's
  placeholders: the broker copies them when it comes back. Kafka refuses a new partition with
  fewer replicas than the topic's others (``INVALID_REPLICA_ASSIGNMENT``), so placeholders are
  the only way to keep creating during a rolling restart. The partitions are recorded as
  *heal targets* (``"topic-partition" -> intended RF``) for :func:`assess_heal` /
  :func:`plan_heal`.

:func:`grow_partitions` runs a plan through the ``ClusterAdmin`` port (one CreatePartitions
request for the whole batch) and returns per-topic outcomes; the heal-targets file is written
before the request (so a crash in between loses nothing) and corrected after it.

Example::

    >>> from airflow_kafka_reassign.testing import FakeClusterAdmin
    >>> fake = FakeClusterAdmin.build({1: None, 2: None, 3: None},
    ...                               {"orders": [[1, 2], [2, 3]], "__consumer_offsets": [[1, 2]]})
    >>> out = grow_partitions(fake, GrowthRequest(targets={"orders": 4, "__consumer_offsets": 2}))
    >>> [(t.topic, t.status) for t in out.topics]
    [('__consumer_offsets', 'refused'), ('orders', 'created')]
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from airflow_kafka_reassign.core.maintenance.cordon import cordoned_brokers
from airflow_kafka_reassign.core.planner import PlanRequest, PlanResult, plan_reassignment
from airflow_kafka_reassign.core.planner.goals import parse_partition
from airflow_kafka_reassign.core.records.store import LocalStore, Store
from airflow_kafka_reassign.core.vocabulary.loads import broker_loads
from airflow_kafka_reassign.core.vocabulary.models import (
    INTERNAL_COORDINATOR_TOPICS,
    ClusterSnapshot,
    PartitionState,
    TopicPartition,
    _Frozen,
)
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin, NewPartitions, TopicResult
from airflow_kafka_reassign.exceptions import ConfigurationError

#: How far a topic's replicas per live broker may spread (max - min) so that the brokers'
#: totals even out: the planner's default ``max_topic_spread``.
MAX_TOPIC_SPREAD = 2

#: At most this many new partitions' replica lists per topic go into a result's summary (XCom).
SUMMARY_ASSIGNMENT_LIMIT = 50

Decision = Literal["grow", "no-op", "refused"]
Status = Literal["created", "validated", "no-op", "refused", "failed"]

#: Why a topic was refused, as a stable code (XCom, tests, alerting).
RefusalCode = Literal[
    "unknown-topic", "internal-topic", "shrink", "compacted-topic", "under-replicated",
    "too-few-live-brokers", "assignment", "cordoned",
]


def internal_topic_warning(topic: str, current: int, target: int) -> str:
    """The loud warning of an allowed internal-topic growth (KAFKA-20029)."""
    return (
        f"GROWING INTERNAL TOPIC {topic} from {current} to {target} partitions "
        "(allow_internal_topic_partition_increase=True). Kafka finds the coordinator of a "
        f"consumer group, transactional id or share group by hash(id) % partition count of {topic}: "
        f"every id moves from partition hash % {current} to hash % {target}. While brokers' "
        "metadata converges, brokers disagree on the count and route the same id to two "
        "coordinators (split brain): offset commits and fetches fail or go to the wrong partition, "
        "groups become unfindable, transactions are orphaned or hang. The state already written "
        "stays in the old partitions and is not migrated. Do this only in a maintenance window "
        "with producers and consumers stopped."
    )


def key_remap_warning(topic: str, current: int, target: int) -> str:
    """The warning every growing topic gets: keyed records map to other partitions."""
    return (
        f"{topic}: records with a key map to partition hash(key) % {target} from now on instead "
        f"of hash(key) % {current}: most keys move to another partition, per-key ordering across "
        "the change is lost, and consumers that rely on a key's partition (Kafka Streams, "
        "co-partitioned joins, compaction) see keys in two partitions"
    )


class GrowthRequest(_Frozen):
    """A batch of topics to grow and the guards' overrides.

    ``targets`` maps each topic to its new TOTAL partition count (Kafka's ``increaseTo``),
    not to the number of partitions to add.
    """

    targets: dict[str, int]
    #: Let internal/coordinator topics grow (KAFKA-20029). Dangerous: see :func:`internal_topic_warning`.
    allow_internal_topic_partition_increase: bool = False
    #: More topic names treated as internal (refused unless the override is set).
    extra_internal_topics: tuple[str, ...] = ()
    #: A regular expression (``re.fullmatch``): matching topics are treated as internal.
    internal_topic_pattern: str | None = None
    #: Let compacted topics (``cleanup.policy`` contains ``compact``) grow.
    allow_compacted: bool = False
    #: KIP-409: create with fewer live brokers than the RF (at least min(min.insync.replicas, RF)).
    allow_under_replicated: bool = False
    #: Spread each new partition's replicas over racks (``broker.rack``).
    rack_aware: bool = True
    #: Explicit replicas of the NEW partitions of a topic (``{topic: [[1, 2], [2, 3]]}``, one list per partition
    #: added, each as long as the topic's replication factor), in place of the guarded placement. Every guard
    #: still applies, and no replica may be on a cordoned broker (KIP-1066: Kafka 4.3.0/4.3.1 would accept it).
    assignments: dict[str, tuple[tuple[int, ...], ...]] = Field(default_factory=dict)

    @field_validator("targets", mode="before")
    @classmethod
    def _check_targets(cls, v: Any) -> Any:
        if not isinstance(v, Mapping) or not v:
            raise ValueError(
                "targets must be a non-empty mapping topic -> new total partition count, "
                'for example {"orders": 12}'
            )
        for topic, count in v.items():
            if not isinstance(topic, str) or not topic:
                raise ValueError(f"topic name {topic!r} is not a non-empty string")
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(
                    f"targets[{topic!r}] = {count!r}: the new total partition count must be an integer >= 1 "
                    "(the TOTAL count, not the number of partitions to add)"
                )
        return dict(v)

    @field_validator("internal_topic_pattern")
    @classmethod
    def _check_pattern(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"internal_topic_pattern {v!r} is not a regular expression: {e}") from None
        return v

    def internal_reason(self, name: str, kafka_internal: bool) -> str | None:
        """Why ``name`` counts as internal, or ``None``."""
        if name in INTERNAL_COORDINATOR_TOPICS:
            return "it is a Kafka coordinator topic"
        if kafka_internal:
            return "Kafka marks it internal"
        if name in self.extra_internal_topics:
            return "it is listed in extra_internal_topics"
        if self.internal_topic_pattern is not None and re.fullmatch(self.internal_topic_pattern, name):
            return f"it matches internal_topic_pattern {self.internal_topic_pattern!r}"
        return None


class TopicGrowth(_Frozen):
    """The decision for one topic of the batch."""

    topic: str
    decision: Decision
    target_partitions: int
    current_partitions: int | None = None
    replication_factor: int | None = None
    #: Why it was refused (names the parameter that would allow it).
    reason: str | None = None
    refusal: RefusalCode | None = None
    warnings: tuple[str, ...] = ()
    #: Replicas of each new partition, in partition order (the first is the preferred leader).
    assignment: tuple[tuple[int, ...], ...] = ()
    #: New partitions created with replicas on brokers that are not running: ``"topic-p"`` -> intended RF.
    under_replicated: dict[str, int] = Field(default_factory=dict)
    #: Their replicas on brokers that are not running (KIP-409 placeholders), by ``"topic-p"``.
    offline_replicas: dict[str, tuple[int, ...]] = Field(default_factory=dict)

    @property
    def new_partitions(self) -> dict[int, tuple[int, ...]]:
        first = self.current_partitions or 0
        return {first + i: reps for i, reps in enumerate(self.assignment)}


class GrowthPlan(_Frozen):
    """Every topic's decision, plus what the whole batch should know."""

    request: GrowthRequest
    topics: tuple[TopicGrowth, ...]
    live_brokers: tuple[int, ...]
    #: Brokers named by replicas but not running (KRaft: registered, fenced).
    offline_brokers: tuple[int, ...] = ()
    warnings: tuple[str, ...] = ()

    def growing(self) -> tuple[TopicGrowth, ...]:
        return tuple(t for t in self.topics if t.decision == "grow")

    def requests(self) -> list[NewPartitions]:
        """One CreatePartitions entry per growing topic, with our replica placement."""
        return [
            NewPartitions(topic=t.topic, total_count=t.target_partitions, assignment=t.assignment)
            for t in self.growing()
        ]

    @property
    def heal_targets(self) -> dict[str, int]:
        return {k: rf for t in self.growing() for k, rf in t.under_replicated.items()}


class TopicOutcome(_Frozen):
    """What happened to one topic: ``created``, ``validated`` (validate_only), ``no-op``,
    ``refused`` (a guard) or ``failed`` (Kafka answered with an error)."""

    topic: str
    status: Status
    partitions_before: int | None = None
    partitions_after: int | None = None
    replication_factor: int | None = None
    reason: str | None = None
    refusal: RefusalCode | None = None
    error_code: str | None = None
    warnings: tuple[str, ...] = ()
    new_partitions: dict[int, tuple[int, ...]] = Field(default_factory=dict)
    under_replicated: dict[str, int] = Field(default_factory=dict)
    offline_replicas: dict[str, tuple[int, ...]] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in ("created", "validated", "no-op")

    def summary(self) -> dict[str, Any]:
        """Small JSON for XCom: at most :data:`SUMMARY_ASSIGNMENT_LIMIT` new partitions listed."""
        shown = dict(list(self.new_partitions.items())[:SUMMARY_ASSIGNMENT_LIMIT])
        out: dict[str, Any] = {
            "topic": self.topic,
            "status": self.status,
            "partitions_before": self.partitions_before,
            "partitions_after": self.partitions_after,
            "replication_factor": self.replication_factor,
            "reason": self.reason,
            "refusal": self.refusal,
            "error_code": self.error_code,
            "new_partitions": {str(p): list(r) for p, r in shown.items()},
            "under_replicated": dict(self.under_replicated),
            "warnings": list(self.warnings),
        }
        if len(shown) < len(self.new_partitions):
            out["new_partitions_not_listed"] = len(self.new_partitions) - len(shown)
        return out


class GrowthOutcome(_Frozen):
    """Per-topic outcomes of one batch."""

    topics: tuple[TopicOutcome, ...]
    validate_only: bool = False
    warnings: tuple[str, ...] = ()
    heal_targets_path: str | None = None

    def by_status(self, *status: Status) -> tuple[TopicOutcome, ...]:
        return tuple(t for t in self.topics if t.status in status)

    @property
    def refused(self) -> tuple[TopicOutcome, ...]:
        return self.by_status("refused")

    @property
    def failed(self) -> tuple[TopicOutcome, ...]:
        return self.by_status("failed")

    @property
    def heal_targets(self) -> dict[str, int]:
        return {k: rf for t in self.topics if t.status == "created" for k, rf in t.under_replicated.items()}

    def summary(self) -> dict[str, Any]:
        """The task's XCom: small JSON, one entry per topic."""
        counts = Counter(t.status for t in self.topics)
        return {
            "validate_only": self.validate_only,
            "counts": {s: counts.get(s, 0) for s in ("created", "validated", "no-op", "refused", "failed")},
            "topics": {t.topic: t.summary() for t in self.topics},
            "heal_targets": self.heal_targets,
            "heal_targets_path": self.heal_targets_path,
            "warnings": list(self.warnings),
        }

    def describe_problems(self) -> str:
        """One line per refused or failed topic (for the task's final error)."""
        lines = [f"{t.topic}: {t.status}: {t.reason}" for t in self.topics if not t.ok]
        return "\n".join(lines)


# ------------------------------------------------------------------------------ placement


def _topic_rf(parts: Sequence[PartitionState]) -> tuple[int, bool]:
    """The topic's replication factor (the largest of its partitions' target RFs) and
    whether its partitions disagree."""
    rfs = {len(p.target_replicas) for p in parts}
    return max(rfs), len(rfs) > 1


class _Placer:
    """Greedy least-loaded, rack-aware placement of new partitions, updating loads as it goes."""

    def __init__(self, snapshot: ClusterSnapshot, rack_aware: bool) -> None:
        loads = broker_loads(snapshot)
        self.total: Counter[int] = Counter({b: v["replicas"] for b, v in loads.items()})
        self.leaders: Counter[int] = Counter({b: v["preferred_leaders"] for b, v in loads.items()})
        racks = snapshot.racks
        with_rack = [b for b, r in racks.items() if r is not None]
        self.warnings: list[str] = []
        if rack_aware and with_rack and len(with_rack) < len(racks):
            without = sorted(b for b, r in racks.items() if r is None)
            self.warnings.append(
                f"brokers {without} have no broker.rack while {sorted(with_rack)} do: new partitions are "
                "placed without rack awareness; set broker.rack on every broker"
            )
            rack_aware = False
        self.rack: dict[int, str | None] = racks if rack_aware else dict.fromkeys(racks)

    def place(
        self,
        parts: Sequence[PartitionState],
        count: int,
        rf: int,
        live: Sequence[int],
        offline: Sequence[int],
    ) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """``count`` new partitions: (replicas, of which offline placeholders) each."""
        topic_replicas: Counter[int] = Counter()
        topic_leaders: Counter[int] = Counter()
        for p in parts:
            target = p.target_replicas
            topic_replicas.update(target)
            topic_leaders[target[0]] += 1
        out = []
        n_live = min(rf, len(live))
        for _ in range(count):
            chosen: list[int] = []
            racks_used: Counter[str | None] = Counter()
            for _ in range(n_live):
                floor = min(topic_replicas[x] for x in live)
                b = min(
                    (b for b in live if b not in chosen),
                    key=lambda b: (
                        racks_used[self.rack.get(b)],
                        topic_replicas[b] + 1 - floor > MAX_TOPIC_SPREAD,
                        self.total[b],
                        topic_replicas[b],
                        b,
                    ),
                )
                chosen.append(b)
                racks_used[self.rack.get(b)] += 1
            leader = min(chosen, key=lambda b: (topic_leaders[b], self.leaders[b], topic_replicas[b], b))
            chosen.remove(leader)
            chosen.insert(0, leader)
            placeholders = sorted(offline, key=lambda b: (topic_replicas[b], self.total[b], b))[: rf - n_live]
            replicas = (*chosen, *placeholders)
            for b in replicas:
                topic_replicas[b] += 1
                self.total[b] += 1
            topic_leaders[leader] += 1
            self.leaders[leader] += 1
            out.append((replicas, tuple(placeholders)))
        return out


# ------------------------------------------------------------------------------ decisions


def plan_growth(snapshot: ClusterSnapshot, request: GrowthRequest, *,
                cordoned: Collection[int] = ()) -> GrowthPlan:
    """Decide every topic of ``request`` against ``snapshot`` (see the module doc). ``cordoned``: brokers that
    take no new replica (KIP-1066): the placement avoids them, an explicit assignment naming one is refused.

    ``snapshot`` should cover the whole cluster (every topic), so the brokers' loads and the
    brokers that are not running are known. The snapshot's brokers are the live ones.
    """
    live = list(snapshot.broker_ids)
    live_set = set(live)
    named = {b for p in snapshot.partitions for b in p.target_replicas}
    offline = sorted(named - live_set)
    by_topic: dict[str, list[PartitionState]] = {}
    for p in snapshot.partitions:
        by_topic.setdefault(p.topic, []).append(p)
    states = {t.name: t for t in snapshot.topics}
    placer = _Placer(snapshot, request.rack_aware)
    decisions = []
    for name in sorted(request.targets):
        decisions.append(_decide(name, request, states, by_topic, live, offline, placer, frozenset(cordoned)))
    warnings = list(placer.warnings)
    if offline:
        warnings.append(
            f"broker(s) {offline} hold replicas but are not running (not in the cluster's live brokers {live})"
        )
    return GrowthPlan(
        request=request,
        topics=tuple(decisions),
        live_brokers=tuple(live),
        offline_brokers=tuple(offline),
        warnings=tuple(warnings),
    )


def _decide(
    name: str,
    request: GrowthRequest,
    states: Mapping[str, Any],
    by_topic: Mapping[str, list[PartitionState]],
    live: list[int],
    offline: list[int],
    placer: _Placer,
    cordoned: frozenset[int] = frozenset(),
) -> TopicGrowth:
    target = request.targets[name]
    state = states.get(name)
    parts = sorted(by_topic.get(name, ()), key=lambda p: p.partition)

    def refuse(code: RefusalCode, reason: str, **kw: Any) -> TopicGrowth:
        return TopicGrowth(topic=name, decision="refused", target_partitions=target, refusal=code, reason=reason, **kw)

    why_internal = request.internal_reason(name, state is not None and state.internal)
    known: dict[str, Any] = {}
    if state is not None and parts:
        known = {"current_partitions": len(parts), "replication_factor": _topic_rf(parts)[0]}
    if why_internal is not None and not request.allow_internal_topic_partition_increase:
        return refuse(
            "internal-topic",
            f"internal topic {name!r} refused ({why_internal}): growing it re-maps coordinators by "
            f"hash(id) % partition count and causes split brain, orphaned and hanging transactions "
            "(KAFKA-20029); pass allow_internal_topic_partition_increase=True only if you accept that",
            **known,
        )
    if state is None or not parts:
        return refuse("unknown-topic", f"topic {name!r} does not exist in the cluster; check the name (nothing to grow)")
    current = len(parts)
    rf, mixed = _topic_rf(parts)
    warnings: list[str] = []
    if target < current:
        return refuse(
            "shrink",
            f"topic {name!r} has {current} partitions; {target} would remove partitions, which Kafka cannot do "
            "(create a new topic with fewer partitions and migrate instead)",
            **known,
        )
    if target == current:
        return TopicGrowth(topic=name, decision="no-op", target_partitions=target, **known,
                           reason=f"already has {current} partitions")
    if why_internal is not None:
        warnings.append(internal_topic_warning(name, current, target))
    elif state.is_compacted and not request.allow_compacted:
        return refuse(
            "compacted-topic",
            f"compacted topic {name!r} (cleanup.policy={state.configs.get('cleanup.policy')}) refused: keys map to "
            f"other partitions after growing, so compaction keeps each moved key's old value forever in its old "
            "partition and readers of the latest value per key see two; pass allow_compacted=True to grow it anyway",
            **known,
        )
    if mixed:
        warnings.append(
            f"{name}: partitions have different replication factors; new partitions get the largest, {rf}"
        )
    warnings.append(key_remap_warning(name, current, target))
    n_live = len(live)
    placeholders: list[int] = []
    if n_live < rf:
        min_isr = state.min_insync_replicas
        need = min(min_isr if min_isr is not None else 1, rf)
        shortage = f"only {n_live} live broker(s) {live} for replication factor {rf}"
        if not request.allow_under_replicated:
            return refuse(
                "under-replicated",
                f"{shortage}: the new partitions would be under-replicated; wait for the brokers to come back, "
                f"or pass allow_under_replicated=True to create them with replicas on the live brokers "
                f"(needs at least min(min.insync.replicas, RF) = {need} live brokers)",
                **known,
            )
        if n_live < need:
            return refuse(
                "too-few-live-brokers",
                f"{shortage}: fewer than min(min.insync.replicas={min_isr if min_isr is not None else 'unset'}, "
                f"RF={rf}) = {need}, so producers with acks=all could not write to the new partitions; "
                "bring brokers back first",
                **known,
            )
        # every replica of the topic's largest partition is on a live or a stopped broker, so
        # the stopped ones always suffice for the missing replicas
        placeholders = offline
        if min_isr is None:
            warnings.append(f"{name}: min.insync.replicas unknown; assumed Kafka's default 1")
    explicit = request.assignments.get(name)
    if explicit is not None:
        why = _explicit_problem(explicit, target - current, rf, live, cordoned)
        if why:
            return refuse("assignment", f"{name}: the explicit assignment {[list(r) for r in explicit]} is refused: "
                                        f"{why}; nothing was created", **known)
        placed: list[tuple[tuple[int, ...], tuple[int, ...]]] = [(tuple(r), ()) for r in explicit]
    else:
        placeable = [b for b in live if b not in cordoned]
        if cordoned & set(live) and len(placeable) < rf and n_live >= rf:
            return refuse("cordoned", f"only {len(placeable)} live broker(s) {placeable} are not cordoned for "
                                      f"replication factor {rf}: cordoned broker(s) {sorted(cordoned & set(live))} "
                                      "take no new replica (KIP-1066); wait until their decommission ends or "
                                      "uncordon one", **known)
        placed = placer.place(parts, target - current, rf, placeable if cordoned else live, placeholders)
    under: dict[str, int] = {}
    offline_reps: dict[str, tuple[int, ...]] = {}
    for i, (_, ph) in enumerate(placed):
        if ph:
            key = str(TopicPartition(name, current + i))
            under[key] = rf
            offline_reps[key] = ph
    if under:
        warnings.append(
            f"{name}: {len(under)} new partition(s) created under-replicated (allow_under_replicated=True): "
            f"replicas on stopped broker(s) {sorted({b for v in offline_reps.values() for b in v})} stay out of "
            "the ISR until those brokers are back and have copied them"
        )
    return TopicGrowth(
        topic=name,
        decision="grow",
        target_partitions=target,
        warnings=tuple(warnings),
        assignment=tuple(r for r, _ in placed),
        under_replicated=under,
        offline_replicas=offline_reps,
        **known,
    )


def outcomes(
    plan: GrowthPlan, results: Mapping[str, TopicResult], *, validate_only: bool = False
) -> GrowthOutcome:
    """Merge the plan's decisions with Kafka's per-topic answers."""
    out = []
    for t in plan.topics:
        base: dict[str, Any] = {
            "topic": t.topic,
            "partitions_before": t.current_partitions,
            "replication_factor": t.replication_factor,
            "warnings": t.warnings,
        }
        if t.decision == "refused":
            out.append(TopicOutcome(status="refused", partitions_after=t.current_partitions,
                                    reason=t.reason, refusal=t.refusal, **base))
        elif t.decision == "no-op":
            out.append(TopicOutcome(status="no-op", partitions_after=t.current_partitions, reason=t.reason, **base))
        else:
            r = results.get(t.topic)
            if r is None or not r.ok:
                error = (r.error if r is not None else None) or "no answer from Kafka for this topic"
                code = r.error_code if r is not None else None
                out.append(TopicOutcome(
                    status="failed", partitions_after=t.current_partitions, error_code=code,
                    reason=f"Kafka refused the request{f' ({code})' if code else ''}: {error}; "
                           "no partition of this topic was created",
                    **base,
                ))
                continue
            out.append(TopicOutcome(
                status="validated" if validate_only else "created",
                partitions_after=t.current_partitions if validate_only else t.target_partitions,
                new_partitions=t.new_partitions,
                under_replicated=t.under_replicated,
                offline_replicas=t.offline_replicas,
                **base,
            ))
    return GrowthOutcome(topics=tuple(out), validate_only=validate_only, warnings=plan.warnings)


def grow_partitions(
    admin: ClusterAdmin,
    request: GrowthRequest,
    *,
    validate_only: bool = False,
    heal_targets_path: HealTargetsLocation | None = None,
    log: Callable[[str, str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> GrowthOutcome:
    """Snapshot, decide, create (one request for every valid topic), and report per topic.

    A topic the request names but the snapshot lacks may have been created a moment ago and
    not be known to every broker yet: the snapshot is taken again (``SNAPSHOT_RETRIES`` times,
    ``SNAPSHOT_RETRY_S`` apart, with ``sleep``) before such a topic is refused as unknown.

    ``validate_only=True`` sends the request with Kafka's validate-only flag: the full check
    against the cluster, nothing created, no file written. New under-replicated partitions
    are merged into ``heal_targets_path`` BEFORE the request (a crash right after it loses no
    record) and removed again for topics Kafka refused. ``log(level, message)`` receives the
    warnings (``"warning"``) and decisions (``"info"``).
    """
    if request.allow_under_replicated and heal_targets_path is None and not validate_only:
        raise ConfigurationError(
            "allow_under_replicated=True needs heal_targets_path: the file where the partitions created "
            "under-replicated are recorded for the heal step; set it to a path the heal task can read"
        )
    emit = log or (lambda level, message: None)
    snapshot = _snapshot_naming(admin, request.targets, sleep)
    # the brokers being emptied (KIP-1066): the placement avoids them and an explicit assignment naming one is
    # refused (Kafka 4.3.0/4.3.1 would accept it, KAFKA-20832)
    plan = plan_growth(snapshot, request, cordoned=cordoned_brokers(admin, snapshot.broker_ids))
    for w in plan.warnings:
        emit("warning", w)
    for t in plan.topics:
        for w in t.warnings:
            emit("warning", w)
        if t.decision == "refused":
            emit("warning", f"REFUSED {t.topic}: {t.reason}")
        elif t.decision == "grow":
            emit("info", f"{t.topic}: {t.current_partitions} -> {t.target_partitions} partitions, RF "
                         f"{t.replication_factor}, new replicas {dict(t.new_partitions)}")
        else:
            emit("info", f"{t.topic}: no-op ({t.reason})")
    heal = plan.heal_targets
    path = heal_targets_path
    if heal and path is not None and not validate_only:
        update_heal_targets(path, add=heal)
    requests = plan.requests()
    results = admin.create_partitions(requests, validate_only=validate_only) if requests else {}
    outcome = outcomes(plan, results, validate_only=validate_only)
    failed = {t.topic for t in outcome.failed}
    lost = [k for t in plan.growing() if t.topic in failed for k in t.under_replicated]
    if lost and path is not None and not validate_only:
        update_heal_targets(path, remove=lost)
    recorded = heal_targets_uri(path) if (path is not None and outcome.heal_targets and not validate_only) else None
    return outcome.model_copy(update={"heal_targets_path": recorded})


#: How often, and how far apart, a snapshot missing a requested topic is taken again.
SNAPSHOT_RETRIES = 3
SNAPSHOT_RETRY_S = 1.0


def _snapshot_naming(admin: ClusterAdmin, names: Iterable[str], sleep: Callable[[float], None]) -> ClusterSnapshot:
    """The cluster's snapshot, taken again while it lacks one of ``names`` (see :func:`grow_partitions`)."""
    wanted = set(names)
    snapshot = admin.snapshot()
    for _ in range(SNAPSHOT_RETRIES):
        if wanted <= {t.name for t in snapshot.topics}:
            break
        sleep(SNAPSHOT_RETRY_S)
        snapshot = admin.snapshot()
    return snapshot


# ------------------------------------------------------------------------------ heal targets file

#: Where the heal-targets file is: a local path, or ``(store, file name)`` (object storage:
#: ``airflow_kafka_reassign.plan_storage.heal_targets_file`` opens one from a URI).
HealTargetsLocation = str | os.PathLike[str] | tuple[Store, str]

#: Attempts of a compare-and-set update of the heal-targets file against concurrent writers.
HEAL_TARGETS_CAS_ATTEMPTS = 20


def _heal_file(location: HealTargetsLocation) -> tuple[Store, str]:
    if isinstance(location, tuple):
        return location
    p = Path(location)
    return LocalStore(p.parent), p.name


def heal_targets_uri(location: HealTargetsLocation) -> str:
    """The path or URI of the heal-targets file, for messages."""
    if isinstance(location, tuple):
        return f"{location[0].uri.rstrip('/')}/{location[1]}"
    return str(location)


def _parse_heal_targets(data: bytes | None, where: str) -> dict[str, int]:
    if data is None:
        return {}
    try:
        doc = json.loads(data.decode("utf-8") or "{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigurationError(f"heal-targets file {where} is not valid JSON ({e}); fix or delete it") from None
    if not isinstance(doc, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in doc.items()
    ):
        raise ConfigurationError(
            f'heal-targets file {where} must be a JSON object {{"topic-partition": replication factor}}, '
            'for example {"orders-12": 3}'
        )
    return doc


def read_heal_targets(location: HealTargetsLocation) -> dict[str, int]:
    """The heal-targets file: a JSON object ``{"topic-partition": intended RF}``.

    Its content is what ``PlanRequest(goal="heal", heal_targets=...)`` takes. A missing file
    reads as ``{}``. ``location``: a local path, or ``(store, name)`` on object storage.
    """
    store, name = _heal_file(location)
    return _parse_heal_targets(store.read(name), heal_targets_uri(location))


def update_heal_targets(
    location: HealTargetsLocation, *, add: Mapping[str, int] | None = None, remove: Iterable[str] = ()
) -> dict[str, int]:
    """Merge ``add`` into the file (keeping the larger RF), drop ``remove``: one whole-file write,
    by compare-and-set, so two tasks recording at once (growth on two topics, a heal pruning)
    lose neither's update."""
    store, name = _heal_file(location)
    removed = list(remove)
    for _ in range(HEAL_TARGETS_CAS_ATTEMPTS):
        current = store.read_versioned(name)
        data = _parse_heal_targets(current[0] if current else None, heal_targets_uri(location))
        for k, rf in (add or {}).items():
            data[k] = max(rf, data.get(k, 0))
        for k in removed:
            data.pop(k, None)
        text = (json.dumps(dict(sorted(data.items())), indent=1) + "\n").encode("utf-8")
        if store.write_if(name, text, current[1] if current else None):
            return data
    raise ConfigurationError(
        f"heal-targets file {heal_targets_uri(location)} kept changing under {HEAL_TARGETS_CAS_ATTEMPTS} "
        "attempts to update it: another task writes it continuously; run this task again"
    )


# ------------------------------------------------------------------------------ heal

HealState = Literal["healed", "catching-up", "waiting-for-broker", "short", "missing"]


class HealAssessment(_Frozen):
    """Where each heal target stands.

    * ``healed``: the intended RF, every replica in the ISR (drop it from the file);
    * ``catching-up``: the intended RF on running brokers, some replica not yet in the ISR
      (or a reassignment in flight): wait;
    * ``waiting-for-broker``: a replica on a broker that is not running: wait for it (or, if it
      is gone for good, plan ``goal="remove-brokers"`` for it);
    * ``short``: fewer replicas than intended: the heal plan adds them;
    * ``missing``: the partition no longer exists (topic deleted, or a creation that failed).
    """

    states: dict[str, HealState]
    #: For ``waiting-for-broker``: the brokers each partition waits for.
    waiting_for: dict[str, tuple[int, ...]] = Field(default_factory=dict)
    #: What the heal plan gets: every present, running partition at max(intended, current) RF.
    plan_targets: dict[str, int] = Field(default_factory=dict)

    def of(self, state: HealState) -> list[str]:
        return sorted(k for k, s in self.states.items() if s == state)

    def counts(self) -> dict[str, int]:
        c = Counter(self.states.values())
        return {s: c.get(s, 0) for s in ("healed", "catching-up", "waiting-for-broker", "short", "missing")}


def assess_heal(snapshot: ClusterSnapshot, targets: Mapping[str, int]) -> HealAssessment:
    """Classify each ``"topic-partition" -> intended RF`` against the cluster (see :class:`HealAssessment`)."""
    live = set(snapshot.broker_ids)
    pmap = snapshot.partition_map()
    states: dict[str, HealState] = {}
    waiting: dict[str, tuple[int, ...]] = {}
    plan_targets: dict[str, int] = {}
    for key, rf in sorted(targets.items()):
        p = pmap.get(parse_partition(key))
        if p is None:
            states[key] = "missing"
            continue
        replicas = p.target_replicas
        down = tuple(b for b in p.replicas if b not in live)
        if down:
            states[key] = "waiting-for-broker"
            waiting[key] = down
            continue
        plan_targets[key] = max(rf, len(replicas))
        if p.reassigning:
            states[key] = "catching-up"
        elif len(replicas) < rf:
            states[key] = "short"
        elif set(replicas) - set(p.isr):
            states[key] = "catching-up"
        else:
            states[key] = "healed"
    return HealAssessment(states=states, waiting_for=waiting, plan_targets=plan_targets)


def plan_heal(
    snapshot: ClusterSnapshot, targets: Mapping[str, int], *, rack_aware: bool = True, cordoned: Collection[int] = ()
) -> tuple[HealAssessment, PlanResult | None]:
    """The heal plan for ``targets``: ``(assessment, PlanResult or None)``.

    Runs the planner's ``goal="heal"`` with exactly the present partitions of ``targets``, so
    only the ``short`` ones get moves (each an explicitly allowed RF change, KIP-860) and no
    other partition is touched; no replica goes to a ``cordoned`` broker (KIP-1066:
    :func:`~airflow_kafka_reassign.core.maintenance.cordon.cordoned_brokers`). ``None`` when no target
    partition exists any more. Raises
    :class:`ConfigurationError` when a target still has a replica on a broker that is not running.
    """
    assessment = assess_heal(snapshot, targets)
    if assessment.waiting_for:
        waits = ", ".join(f"{k} (broker {list(v)})" for k, v in list(assessment.waiting_for.items())[:5])
        brokers = sorted({b for v in assessment.waiting_for.values() for b in v})
        raise ConfigurationError(
            f"{len(assessment.waiting_for)} heal target(s) still have replicas on broker(s) {brokers} that are not "
            f"running: {waits}; heal once they are back (they then copy those replicas themselves), or, if they are "
            f"gone for good, plan goal='remove-brokers' with brokers={brokers}"
        )
    if not assessment.plan_targets:
        return assessment, None
    request = PlanRequest(
        goal="heal", heal_targets=assessment.plan_targets, include_internal=True, rack_aware=rack_aware,
        cordoned=tuple(cordoned),
    )
    return assessment, plan_reassignment(snapshot, request)


def _explicit_problem(assignment: Sequence[Sequence[int]], count: int, rf: int, live: Sequence[int],
                      cordoned: Collection[int]) -> str | None:
    """What is wrong with an explicit assignment of ``count`` new partitions (``None``: nothing)."""
    if len(assignment) != count:
        return f"it names {len(assignment)} partition(s), the request adds {count}"
    for i, replicas in enumerate(assignment):
        if len(replicas) != rf or len(set(replicas)) != len(replicas):
            return f"partition {i} of it has replicas {list(replicas)}: give {rf} distinct brokers (the topic's RF)"
        down = [b for b in replicas if b not in live]
        if down:
            return f"broker(s) {down} are not live brokers of the cluster (live: {list(live)})"
        on = [b for b in replicas if b in cordoned]
        if on:
            return (f"broker(s) {on} are cordoned (cordoned.log.dirs, KIP-1066: they are being emptied and take no "
                    "new replica; Kafka 4.3.0/4.3.1 would accept this assignment, KAFKA-20832): choose other brokers")
    return None
