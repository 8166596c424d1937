"""Plain data the planner's steps exchange: picklable, cheap, no pydantic in the hot paths.

The Spark job builds these from columnar rows (one :class:`TopicPartitions` per topic group,
:class:`TopicLoad` from a ``groupBy(topic, broker)`` count), so nothing here needs a
:class:`~airflow_kafka_reassign.core.vocabulary.models.ClusterSnapshot`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from typing import NamedTuple

from airflow_kafka_reassign.core.vocabulary.models import Move


@dataclass(frozen=True)
class BrokerLayout:
    """The brokers a plan may place replicas on, their racks, and the brokers being removed.

    ``rack_of`` maps every broker id the planner may meet (live, removed, dead) to a small rack
    index; live brokers' racks are ``0 .. n_racks-1``. With rack awareness off, or when no
    broker has a ``broker.rack``, every broker is in rack 0 (one rack).
    """

    #: Brokers that hold replicas after the plan, sorted.
    brokers: tuple[int, ...]
    #: Broker id -> rack index.
    rack_of: Mapping[int, int]
    #: Rack names by index (``None`` when racks are not used).
    rack_names: tuple[str | None, ...] = (None,)
    #: Brokers that must end with no replicas (decommission), sorted.
    removed: tuple[int, ...] = ()

    @cached_property
    def n_racks(self) -> int:
        return len({self.rack_of[b] for b in self.brokers}) or 1

    @cached_property
    def _rack_sizes(self) -> tuple[int, ...]:
        sizes = [0] * self.n_racks
        for b in self.brokers:
            sizes[self.rack_of[b]] += 1
        return tuple(sizes)

    def rack_sizes(self) -> list[int]:
        """Live brokers per rack index."""
        return list(self._rack_sizes)

    @cached_property
    def live(self) -> frozenset[int]:
        return frozenset(self.brokers)

    @cached_property
    def live_racks(self) -> tuple[int, ...]:
        """The rack index of each live broker, in :attr:`brokers` order."""
        return tuple(self.rack_of[b] for b in self.brokers)

    @cached_property
    def rack_members(self) -> tuple[tuple[int, ...], ...]:
        """The live brokers of each rack index, sorted."""
        return tuple(tuple(b for b in self.brokers if self.rack_of[b] == g) for g in range(self.n_racks))

    @cached_property
    def rack_member_sets(self) -> tuple[frozenset[int], ...]:
        """:attr:`rack_members` as sets."""
        return tuple(frozenset(m) for m in self.rack_members)

    def rack(self, broker: int) -> int:
        """Rack index of ``broker``; -1 for a broker the layout does not know (a dead one)."""
        return self.rack_of.get(broker, -1)


@dataclass
class TopicPartitions:
    """One topic's partitions, as the per-topic step needs them.

    ``replicas`` are the replicas to plan from: for a partition being reassigned these are its
    *target* replicas (never the intermediate set, KIP-860's race). ``target_rf`` differs from
    ``len(replicas)`` only for an explicitly requested RF change or heal. ``frozen`` partitions
    (in-flight reassignments left alone) count towards the topic's balance but never move.
    ``sizes`` are bytes per partition (one replica's size), when known.
    """

    topic: str
    partitions: list[int]
    replicas: list[tuple[int, ...]]
    target_rf: list[int]
    frozen: list[bool] | None = None
    sizes: list[int] | None = None
    #: Rebalance this topic (False: only RF changes and evacuations of removed brokers).
    balance: bool = True

    def load(self, layout: BrokerLayout | None = None) -> TopicLoad:
        """The topic's aggregates; with ``layout``, also where its forced replicas may land."""
        counts = dict(Counter(chain.from_iterable(self.replicas)))  # per broker, in the order first named
        slots = 0
        slot_racks: dict[int, int] = {}
        if layout is not None and not (
            layout.live.issuperset(counts) and list(map(len, self.replicas)) == self.target_rf
        ):  # else no partition has a replica to add or to move off a broker that is not live
            slots, slot_racks = self.slot_racks(layout)
        return TopicLoad(
            topic=self.topic,
            counts=counts,
            replicas=sum(self.target_rf),
            rf_counts=dict(Counter(self.target_rf)),
            slots=slots,
            slot_racks=slot_racks,
        )

    def slot_racks(self, layout: BrokerLayout) -> tuple[int, dict[int, int]]:
        """Forced replicas (those leaving removed brokers, those an RF increase adds) and, per
        rack, how many of them the rack may take without breaking a partition's spread."""
        live = layout.live
        rack = layout.rack_of
        k_racks = layout.n_racks
        sizes = layout._rack_sizes
        total = 0
        compat = [0] * k_racks
        for p, reps in enumerate(self.replicas):
            if self.frozen is not None and self.frozen[p]:
                continue
            r = self.target_rf[p]
            present = [b for b in reps if b in live][:r]
            slots = r - len(present)
            if slots <= 0:
                continue
            total += slots
            per_rack_max = r - min(r, k_racks) + 1
            in_rack = [0] * k_racks
            for b in present:
                in_rack[rack[b]] += 1
            for g in range(k_racks):
                compat[g] += max(0, min(slots, per_rack_max - in_rack[g], sizes[g] - in_rack[g]))
        return total, {g: c for g, c in enumerate(compat) if c}


@dataclass(frozen=True)
class TopicLoad:
    """The aggregates of one topic that the global step needs (a ``groupBy`` in Spark)."""

    topic: str
    #: Current replicas of the topic per broker (live, removed and dead brokers alike).
    counts: Mapping[int, int]
    #: Replicas the topic has after the plan (sum of target RFs).
    replicas: int
    #: Partitions per target replication factor.
    rf_counts: Mapping[int, int] = field(default_factory=dict)
    #: Forced replicas (leaving removed brokers, added by an RF increase) ...
    slots: int = 0
    #: ... and how many of them each rack index may take (rack spread).
    slot_racks: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicParams:
    """Knobs of the per-topic step."""

    #: Move replicas so the topic's per-broker counts meet its quotas.
    balance: bool = True
    #: Fix partitions spread over fewer than min(RF, racks) racks.
    fix_racks: bool = True
    #: Prefer moving small partitions (needs ``TopicPartitions.sizes``).
    use_sizes: bool = False


class TopicMove(NamedTuple):
    """One planned partition change, as plain tuples (a row of the Spark job's output)."""

    topic: str
    partition: int
    current_replicas: tuple[int, ...]
    target_replicas: tuple[int, ...]
    #: Bytes of one replica of the partition (0 when unknown).
    size: int = 0

    @property
    def replica_moves(self) -> int:
        cur = self.current_replicas
        return sum(1 for b in self.target_replicas if b not in cur)

    @property
    def leader_changes(self) -> bool:
        return self.current_replicas[0] != self.target_replicas[0]

    @property
    def changes_rf(self) -> bool:
        return len(self.current_replicas) != len(self.target_replicas)

    def to_move(self) -> Move:
        """The validated-model form; the planner has already checked every field."""
        return Move.model_construct(
            topic=self.topic,
            partition=self.partition,
            target_replicas=self.target_replicas,
            current_replicas=self.current_replicas,
            allow_rf_change=self.changes_rf,
        )


def as_quota_map(brokers: Sequence[int], quotas: Sequence[int] | Mapping[int, int]) -> dict[int, int]:
    """Quotas aligned with ``brokers`` (or already a mapping) as ``{broker: quota}``."""
    if isinstance(quotas, Mapping):
        return {b: int(quotas.get(b, 0)) for b in brokers}
    if len(quotas) != len(brokers):
        raise ValueError(f"{len(quotas)} quotas for {len(brokers)} brokers")
    return dict(zip(brokers, (int(q) for q in quotas), strict=True))
