"""A drain that ends empty: what arrived on the drained brokers while their moves ran, and where it goes.

A decommission plans from a snapshot; while its moves run, the cluster lives on: topics are created and grown (Kafka
Streams, connectors, CI pipelines) and the controller places their replicas on every registered broker, the drained
ones included. Kafka 4.3 answers this with cordons (KIP-1066, core/maintenance/cordon.py); before 4.3, or where cordons are not
set, the drain itself goes on: once the plan's moves are done, :func:`leftovers` finds the partitions that still
have a replica on a drained broker, and :func:`drain_moves` moves each of them off, within the same run, the same
limits and the same guards, round after round until the brokers are empty or :attr:`DrainSpec.max_rounds` is
reached.

The placement is deliberately simple (these are few, new partitions: the plan balanced the rest): each replica on
a drained broker is replaced, in place (the other replicas and their order stay), by the live, uncordoned broker
with the fewest replicas that keeps the partition's racks: the drained replica's own rack first, then a rack the
partition does not use yet, then any. A partition that cannot be placed (more replicas than eligible brokers) is
named, never half-moved.

Example::

    >>> from airflow_kafka_reassign.core.vocabulary.models import Broker, ClusterSnapshot, PartitionState
    >>> snap = ClusterSnapshot(brokers=(Broker(id=1, rack="a"), Broker(id=2, rack="b"), Broker(id=3, rack="a")),
    ...                        partitions=(PartitionState(topic="new", partition=0, replicas=(1, 2)),))
    >>> spec = DrainSpec(brokers=(1,))
    >>> [str(p.tp) for p in leftovers(snap, spec)]
    ['new-0']
    >>> plan, refused = drain_moves(snap, spec)
    >>> [m.target_replicas for m in plan.moves], refused
    ([(3, 2)], {})
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable

from pydantic import Field

from airflow_kafka_reassign.core.records.store import Store, as_store
from airflow_kafka_reassign.core.vocabulary.models import (
    ClusterSnapshot,
    Move,
    PartitionState,
    ReassignmentPlan,
    TopicPartition,
    _Frozen,
)

#: The file a decommission's plan directory holds beside plan.json: what is drained (PlanReassignment writes it).
DRAIN_FILE = "drain.json"
#: The rounds of leftovers a run plans after its plan's moves are done, by default.
DEFAULT_MAX_ROUNDS = 5


class DrainSpec(_Frozen):
    """What a decommission drains, for the rounds after its plan: the brokers, and which topics (regexes, full
    match; no ``topic_include``: every topic, as a whole decommission must; a partial drain names its topics)."""

    brokers: tuple[int, ...] = Field(min_length=1)
    topic_include: tuple[str, ...] = ()
    topic_exclude: tuple[str, ...] = ()
    #: rounds of leftovers planned after the plan's moves are done (0: none, the pre-4.3 behaviour of a plan alone)
    max_rounds: int = Field(default=DEFAULT_MAX_ROUNDS, ge=0)

    def covers(self, topic: str) -> bool:
        included = not self.topic_include or any(re.fullmatch(p, topic) for p in self.topic_include)
        return included and not any(re.fullmatch(p, topic) for p in self.topic_exclude)


def leftovers(snapshot: ClusterSnapshot, spec: DrainSpec) -> list[PartitionState]:
    """The partitions of the covered topics with a replica on a drained broker (in flight ones included: a
    reassignment that removes it leaves it when done, one that keeps it does not)."""
    drained = set(spec.brokers)
    out = []
    for p in snapshot.partitions:
        target = set(p.replicas) - set(p.removing_replicas) if p.reassigning else set(p.replicas)
        if target & drained and spec.covers(p.topic):
            out.append(p)
    return out


def drain_moves(snapshot: ClusterSnapshot, spec: DrainSpec, *, cordoned: Collection[int] = (),
                skip: Iterable[TopicPartition] = ()) -> tuple[ReassignmentPlan, dict[TopicPartition, str]]:
    """Moves that take every leftover partition off the drained brokers (``skip``: partitions not to move now,
    for example ones with a reassignment in flight), and the partitions that cannot be placed, with why.

    The plan carries the topics' partition counts as the snapshot saw them (execution refuses the moves of a topic
    that grows again before they go out: the next round takes them)."""
    drained = set(spec.brokers)
    racks = {b.id: b.rack for b in snapshot.brokers}
    eligible = sorted(b.id for b in snapshot.brokers if b.id not in drained and b.id not in set(cordoned))
    load: Counter[int] = Counter(r for p in snapshot.partitions for r in p.replicas)
    skipped = set(skip)
    moves: list[Move] = []
    refused: dict[TopicPartition, str] = {}
    for p in leftovers(snapshot, spec):
        if p.tp in skipped or p.reassigning:
            continue
        target = list(p.replicas)
        why = None
        for i, r in enumerate(p.replicas):
            if r not in drained:
                continue
            used_racks = {racks.get(b) for j, b in enumerate(target) if j != i}
            free = [b for b in eligible if b not in target]
            if not free:
                why = (f"no broker to take its replica on {r}: {len(eligible)} eligible broker(s) {eligible} (not "
                       f"drained, not cordoned) for {len(p.replicas)} replicas")
                break

            def rank(b: int, r: int = r, used: set[str | None] = used_racks) -> tuple[int, int, int]:
                rack = racks.get(b)
                tier = 0 if rack is not None and rack == racks.get(r) else 1 if rack not in used else 2
                return tier, load[b], b

            best = min(free, key=rank)
            target[i] = best
            load[best] += 1
            load[r] -= 1
        if why is not None:
            refused[p.tp] = why
            continue
        moves.append(Move(topic=p.topic, partition=p.partition, current_replicas=p.replicas,
                          target_replicas=tuple(target)))
    topics = {m.topic for m in moves}
    counts = Counter(p.topic for p in snapshot.partitions if p.topic in topics)
    for t in snapshot.topics:
        if t.name in topics and t.partition_count:
            counts[t.name] = t.partition_count
    return ReassignmentPlan(moves=tuple(moves), partition_counts=dict(counts) or None,
                            topic_ids=snapshot.topic_ids(topics)), refused


def merge(plan: ReassignmentPlan, extra: ReassignmentPlan) -> ReassignmentPlan:
    """``plan`` with ``extra``'s moves: a partition of both takes ``extra``'s move (the later round's), and the
    partition counts and topic ids of ``extra``'s topics are ``extra``'s (as when that round was planned). The moves
    of a topic whose id changed in between (deleted and re-created) are dropped: they moved another topic."""
    then, now = plan.topic_ids or {}, extra.topic_ids or {}
    recreated = {t for t, i in now.items() if t in then and then[t] != i}
    later = {m.tp for m in extra.moves}
    moves = tuple(m for m in plan.moves if m.tp not in later and m.topic not in recreated) + extra.moves
    counts = {**(plan.partition_counts or {}), **(extra.partition_counts or {})} \
        if plan.partition_counts is not None or extra.partition_counts else None
    ids = {**then, **now} or None
    return ReassignmentPlan(moves=moves, partition_counts=counts, topic_ids=ids)


def read_drain(plan_dir: Store | str) -> DrainSpec | None:
    """The drain a plan directory's ``drain.json`` describes (``None``: not a decommission's plan)."""
    data = as_store(plan_dir).read(DRAIN_FILE)
    return DrainSpec.model_validate_json(data) if data is not None else None
