"""What to plan: the request, the result, and the checks that turn a snapshot into planner input.

:func:`prepare` validates a snapshot against a :class:`PlanRequest` and raises
:class:`~airflow_kafka_reassign.exceptions.ConfigurationError` before anything is planned
when the input cannot give a sound plan: replicas on brokers the snapshot does not know,
a replication factor larger than the brokers left, racks set on some brokers only, removing
every broker, ... Each message names the partition, topic or broker and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from pydantic import Field, field_validator, model_validator

from airflow_kafka_reassign.core.planner.ingress import IngressReport, TieredReport
from airflow_kafka_reassign.core.planner.metrics import BalanceMetrics, partition_size, target_of
from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicPartitions
from airflow_kafka_reassign.core.vocabulary.capacity import CapacityDocument
from airflow_kafka_reassign.core.vocabulary.models import (
    INTERNAL_COORDINATOR_TOPICS,
    Broker,
    ClusterSnapshot,
    PartitionState,
    ReassignmentPlan,
    TopicPartition,
    TopicState,
    _Frozen,
    check_partition_replicas,
)
from airflow_kafka_reassign.core.vocabulary.models import target_of as target_of_replicas
from airflow_kafka_reassign.exceptions import ConfigurationError

Goal = Literal["rebalance", "add-brokers", "remove-brokers", "heal", "offload", "remove-disks", "rebalance-disks"]
BALANCE_GOALS = ("rebalance", "add-brokers", "remove-brokers")
#: The goals on log dirs (JBOD, :mod:`~airflow_kafka_reassign.core.planner.log_dirs`): planned from the brokers' log
#: dirs (``log_dirs.json`` beside the snapshot) by the pure planner, on the plan job's driver.
LOG_DIR_GOALS = ("remove-disks", "rebalance-disks")


def parse_dir_removal(entry: str) -> tuple[int, str]:
    """``"1:/var/lib/kafka/data-2"`` -> ``(1, "/var/lib/kafka/data-2")``: a broker and one of its log dirs (the
    absolute path DescribeLogDirs reports; a trailing ``/`` is dropped)."""
    broker, sep, path = str(entry).strip().partition(":")
    if not sep or not broker.strip().isdigit() or not path.strip().startswith("/"):
        raise ValueError(f"log dir {entry!r} is not BROKER:/ABSOLUTE/PATH; write it as the broker id and the log dir "
                         "as DescribeLogDirs reports it, for example 1:/var/lib/kafka/data-2")
    return int(broker), path.strip().rstrip("/") or "/"


def parse_partition(key: str) -> TopicPartition:
    """``"orders-3"`` -> ``TopicPartition("orders", 3)`` (topic names may contain ``-``)."""
    topic, sep, number = key.rpartition("-")
    if not sep or not topic or not number.isdigit():
        raise ValueError(f"{key!r} is not a partition; write it as TOPIC-PARTITION, for example orders-3")
    return TopicPartition(topic, int(number))


class PlanRequest(_Frozen):
    """What the plan should achieve.

    * ``rebalance``: replicas balanced over brokers (max-min <= 1) and per topic (max-min <= 1
      where the arithmetic allows, else <= 2), preferred leaders balanced (max-min <=
      ``max_leader_spread``), every partition over ``min(RF, racks)`` racks, fewest moves.
      Where racks of unequal size force a rack's share (the only broker of a rack holds a
      replica of every partition spanning all racks), the brokers end within 1 of the best
      balance the racks allow and topics spread unevenly over the racks as far as that needs
      (:attr:`PlanResult.replica_max_min_floor`, :attr:`PlanResult.replica_balance_bounded_by`).
    * ``add-brokers``: the same, the new brokers (``brokers``, or every broker of the snapshot
      holding no replica) receiving their share.
    * ``remove-brokers``: the same on the brokers left; ``brokers`` end with no replicas. A
      topic that ``topic_include`` / ``topic_exclude`` leave out but that has a replica on a
      removed broker makes the plan fail, unless ``partial_drain=True``: then only the selected
      topics are drained now (the others keep their replicas there, with a warning), so that a
      large decommission can run in steps, topic group by topic group.
    * ``heal``: only restore the intended replication factor of partitions created
      under-replicated (``heal_targets``, or partitions with fewer replicas than their
      topic's replication factor).

    ``cordoned`` brokers (KIP-1066: every log dir cordoned, set by someone else; PlanReassignment reads them from the
    cluster) receive no replica whatever the goal: they are left out of the balance, the partitions with a replica
    there are left as they are (cordons do not evict), except those the plan must change (a drain, a heal, an RF
    change), whose replica there moves to an uncordoned broker too. Removed brokers are not "cordoned" here.

    Topic names are matched with :func:`re.fullmatch` against ``topic_include`` /
    ``topic_exclude``. ``rf_changes`` and ``heal_targets`` are the only way the plan changes a
    partition's replication factor; those moves carry ``allow_rf_change=True`` (KIP-860).
    """

    goal: Goal = "rebalance"
    #: Brokers added (add-brokers) or removed (remove-brokers).
    brokers: tuple[int, ...] = ()
    topic_include: tuple[str, ...] = ()
    topic_exclude: tuple[str, ...] = ()
    include_internal: bool = False
    #: Plan partitions with an in-flight reassignment too (from their target replicas).
    include_in_flight: bool = False
    #: Topic -> new replication factor, for exactly these topics.
    rf_changes: dict[str, int] = Field(default_factory=dict)
    #: ``"topic-partition"`` -> intended replication factor, for partitions to heal.
    heal_targets: dict[str, int] = Field(default_factory=dict)
    #: Prefer moving small partitions (needs replica sizes in the snapshot).
    use_sizes: bool = False
    #: Spread every partition over min(RF, racks) racks; False plans as if there were one rack.
    rack_aware: bool = True
    #: Allowed max-min of preferred leaders per broker.
    max_leader_spread: int = Field(default=2, ge=1)
    #: How far a topic's replicas per broker may spread (max-min) when that is what levels
    #: the brokers' totals (fixed load, racks of unequal size); where racks of unequal size
    #: force a rack's share, topics spread further over the racks, as far as the best balance
    #: the racks allow needs. 1 keeps every topic even, whatever the racks.
    max_topic_spread: int = Field(default=2, ge=1)
    #: Replicas per group of topics in the quota step (0: never group). From two groups' worth
    #: on, the quotas of each group of consecutive topics are settled on their own, within its
    #: share of every broker's room (a Spark task each). Plans depend on this, never on the
    #: number of tasks; the default keeps moves within 0.2% of settling all topics at once.
    quota_group_replicas: int = Field(default=65_536, ge=0)
    balance_leaders: bool = True
    #: remove-brokers: leave the replicas of topics left out by topic_include/topic_exclude on the
    #: removed brokers (drain in steps) instead of refusing the plan.
    partial_drain: bool = False
    #: Per-broker disk capacity (:class:`~airflow_kafka_reassign.core.vocabulary.capacity.CapacityDocument`):
    #: balance disk usage as a share of capacity, not only replica counts. Needs replica sizes.
    capacity: CapacityDocument | None = None
    #: No broker above this share of its disk capacity after the plan (hard; with ``capacity``).
    disk_cap: float = Field(default=0.85, gt=0, le=1)
    #: Every broker's disk share within this of the mean share (with ``capacity``).
    disk_tolerance: float = Field(default=0.02, gt=0, lt=1)
    #: How far the disk step may spread a topic's replicas per broker (max-min); ``None``: as far
    #: as disk balance needs (disk balance comes before per-topic balance in the goals' order).
    disk_topic_spread: int | None = Field(default=None, ge=1)
    #: With a ``network_in`` capacity and bytes-in rates in the snapshot: every broker's bytes in
    #: within this of the mean share of its ``network_in`` (after disk balance, before counts).
    ingress_tolerance: float = Field(default=0.05, gt=0, lt=1)
    #: goal offload: brokers above this share of their disk shed down to it (default ``disk_cap``).
    offload_threshold: float | None = Field(default=None, gt=0, le=1)
    #: goal remove-disks: the log dirs to empty, ``"BROKER:/absolute/path"`` each (not written when empty: the
    #: requests of the other goals keep their bytes). Their replicas go to the broker's other log dirs, else to
    #: other brokers; ``disk_cap`` bounds every log dir's volume after the plan.
    log_dirs: tuple[str, ...] = Field(default=(), exclude_if=lambda v: not v)
    #: Brokers whose every log dir is cordoned (``cordoned.log.dirs``, KIP-1066), other than the removed ones: the plan
    #: puts no replica on them (see above; not written when empty).
    cordoned: tuple[int, ...] = Field(default=(), exclude_if=lambda v: not v)

    @field_validator("cordoned")
    @classmethod
    def _check_cordoned(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(b < 0 for b in v):
            raise ValueError(f"cordoned: broker ids are >= 0, not {list(v)}")
        return tuple(sorted(set(v)))

    @field_validator("log_dirs")
    @classmethod
    def _check_log_dirs(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        out = tuple(f"{b}:{path}" for b, path in (parse_dir_removal(e) for e in v))
        if len(set(out)) != len(out):
            raise ValueError(f"log_dirs {list(v)} lists a log dir twice")
        return out

    def dir_removals(self) -> tuple[tuple[int, str], ...]:
        """goal remove-disks: ``(broker, log dir)`` of each entry of ``log_dirs``."""
        return tuple(parse_dir_removal(e) for e in self.log_dirs)

    @model_validator(mode="after")
    def _check_log_dir_goals(self) -> PlanRequest:
        if self.goal == "remove-disks" and not self.log_dirs:
            raise ValueError('goal remove-disks needs log_dirs=["BROKER:/path", ...]: the log dirs to empty')
        if self.log_dirs and self.goal != "remove-disks":
            raise ValueError(f"log_dirs only applies to goal remove-disks, not {self.goal}")
        if self.goal in LOG_DIR_GOALS and (self.brokers or self.capacity is not None or self.rf_changes
                                           or self.heal_targets):
            raise ValueError(f"goal {self.goal} moves replicas off log dirs (and between them); brokers, capacity, "
                             "rf_changes and heal_targets do not apply to it")
        return self

    @model_validator(mode="after")
    def _check_capacity(self) -> PlanRequest:
        if self.goal == "offload" and self.capacity is None:
            raise ValueError("goal offload needs capacity=...: a capacity document (disk bytes per broker)")
        if self.offload_threshold is not None and self.goal != "offload":
            raise ValueError(f"offload_threshold only applies to goal offload, not {self.goal}")
        if self.capacity is not None and self.goal == "heal":
            raise ValueError("capacity does not apply to goal heal (it only restores replication factors)")
        return self

    @field_validator("brokers")
    @classmethod
    def _check_brokers(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        bad = [b for b in v if b < 0]
        if bad:
            raise ValueError(f"broker id {bad[0]} is negative")
        if len(set(v)) != len(v):
            raise ValueError(f"brokers {list(v)} lists a broker twice")
        return tuple(sorted(v))

    @field_validator("topic_include", "topic_exclude")
    @classmethod
    def _check_patterns(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in v:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"topic pattern {pattern!r} is not a regular expression: {e}") from None
        return v

    @field_validator("rf_changes")
    @classmethod
    def _check_rf_changes(cls, v: dict[str, int]) -> dict[str, int]:
        for topic, rf in v.items():
            if rf < 1:
                raise ValueError(f"rf_changes[{topic!r}] = {rf}: a replication factor is at least 1")
        return v

    @field_validator("heal_targets")
    @classmethod
    def _check_heal_targets(cls, v: dict[str, int]) -> dict[str, int]:
        for key, rf in v.items():
            parse_partition(key)
            if rf < 1:
                raise ValueError(f"heal_targets[{key!r}] = {rf}: a replication factor is at least 1")
        return v

    def heal_partitions(self) -> dict[TopicPartition, int]:
        return {parse_partition(k): rf for k, rf in self.heal_targets.items()}


class PlanResult(_Frozen):
    """A plan and what it costs and promises."""

    request: PlanRequest
    plan: ReassignmentPlan
    #: Lower bound on the replica moves of any plan reaching the same balance.
    lower_bound: int
    lower_bound_parts: dict[str, int] = Field(default_factory=dict)
    #: Replicas copied to a new broker.
    replica_moves: int
    #: Bytes those copies move (``None`` when the snapshot has no replica sizes).
    bytes_to_move: int | None = None
    #: Partitions whose preferred leader (first replica) changes.
    leader_changes: int
    #: The fewest leader changes leader balance needs.
    leader_changes_lower_bound: int
    before: BalanceMetrics
    after: BalanceMetrics
    #: Partitions left alone because a reassignment is in flight.
    excluded_in_flight: tuple[TopicPartition, ...] = ()
    warnings: tuple[str, ...] = ()
    #: The smallest max-min of replicas per broker any plan can reach: more than 1 where racks
    #: of unequal size force a rack's share (every partition over min(RF, racks) racks) or
    #: replicas the plan may not move weigh on some brokers.
    replica_max_min_floor: int = 0
    #: What kept the brokers' replica counts more than 1 apart: ``"racks"``, ``"fixed load"``
    #: (replicas the plan may not move), ``"topic spread"`` (topics kept within
    #: ``max_topic_spread``); empty when they end within 1.
    replica_balance_bounded_by: tuple[str, ...] = ()
    #: Topics spread unevenly over the racks (beyond ``max_topic_spread`` where needed) so that
    #: the brokers' totals reach the best balance the racks allow.
    topics_uneven_for_racks: int = 0
    #: With a capacity document: the fewest bytes any plan reaching the same disk balance moves.
    bytes_lower_bound: int | None = None
    #: With a capacity document: per-broker disk before/after against capacity.
    disk: DiskReport | None = None
    #: With bytes-in rates in the snapshot: bytes in per broker before/after (against network_in).
    ingress: IngressReport | None = None
    #: With tiered topics in the snapshot: how many, and their local bytes.
    tiered: TieredReport | None = None
    #: The goals on log dirs: what moves between log dirs, per log dir before and after.
    log_dirs: LogDirReport | None = None

    @property
    def bytes_ratio(self) -> float | None:
        """Bytes moved over the bytes lower bound (``None`` without a capacity document)."""
        if self.bytes_lower_bound is None or self.bytes_to_move is None:
            return None
        if self.bytes_lower_bound == 0:
            return 1.0 if self.bytes_to_move == 0 else float("inf")
        return self.bytes_to_move / self.bytes_lower_bound

    @property
    def moves_ratio(self) -> float:
        """Replica moves over the lower bound (1.0 when both are zero)."""
        if self.lower_bound == 0:
            return 1.0 if self.replica_moves == 0 else float("inf")
        return self.replica_moves / self.lower_bound

    def summary(self) -> dict[str, Any]:
        """Small JSON-able summary (XCom, logs)."""
        return {
            "goal": self.request.goal,
            "partitions_moved": len(self.plan),
            "replica_moves": self.replica_moves,
            "lower_bound": self.lower_bound,
            "bytes_to_move": self.bytes_to_move,
            "leader_changes": self.leader_changes,
            "leader_changes_lower_bound": self.leader_changes_lower_bound,
            "before": self.before.summary(),
            "after": self.after.summary(),
            "excluded_in_flight": len(self.excluded_in_flight),
            "replica_max_min_floor": self.replica_max_min_floor,
            "replica_balance_bounded_by": list(self.replica_balance_bounded_by),
            "topics_uneven_for_racks": self.topics_uneven_for_racks,
            **({"bytes_lower_bound": self.bytes_lower_bound, "disk": self.disk.summary()} if self.disk else {}),
            **({"ingress": self.ingress.summary()} if self.ingress else {}),
            **({"tiered": self.tiered.model_dump(mode="json")} if self.tiered else {}),
            **({"log_dirs": self.log_dirs.summary()} if self.log_dirs else {}),
            "warnings": list(self.warnings),
        }


class LogDirReport(_Frozen):
    """What a goal on log dirs moves (:mod:`~airflow_kafka_reassign.core.planner.log_dirs`): replicas between the
    log dirs of their broker (``intra_*``, AlterReplicaLogDirs) and to other brokers (``cross_*``, reassignments),
    and each log dir's bytes (``"BROKER:/path"``) before and, as planned, after."""

    goal: str
    #: goal remove-disks: the log dirs emptied (``"BROKER:/path"``)
    removed: tuple[str, ...] = ()
    intra_moves: int = 0
    intra_bytes: int = 0
    cross_moves: int = 0
    cross_bytes: int = 0
    dirs_before: dict[str, int] = Field(default_factory=dict)
    #: a replica sent to another broker is counted in the log dir the plan found room in (Kafka picks the dir)
    dirs_after: dict[str, int] = Field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"removed": list(self.removed), "intra_moves": self.intra_moves, "intra_bytes": self.intra_bytes,
                "cross_moves": self.cross_moves, "cross_bytes": self.cross_bytes}


class DiskReport(_Frozen):
    """Disk usage per broker before and after a load-aware plan, against capacity."""

    goal: str
    #: Live broker -> disk capacity (bytes).
    capacity: dict[int, int]
    #: Broker -> bytes before (live and removed brokers) and after the plan (live brokers).
    bytes_before: dict[int, int]
    bytes_after: dict[int, int]
    disk_cap: float
    tolerance: float
    offload_threshold: float | None = None
    #: Total bytes over total capacity of the live brokers (after the plan).
    mean_share: float
    #: Replicas of tiered topics (remote.storage.enable) counted at their local bytes.
    tiered_topics: int = 0

    def share_after(self, broker: int) -> float:
        return self.bytes_after.get(broker, 0) / self.capacity[broker]

    def share_before(self, broker: int) -> float:
        return self.bytes_before.get(broker, 0) / self.capacity[broker] if broker in self.capacity else 0.0

    @property
    def max_deviation_after(self) -> float:
        """Largest distance of a live broker's share from the mean share, after the plan."""
        return max((abs(self.share_after(b) - self.mean_share) for b in self.capacity), default=0.0)

    @property
    def max_deviation_before(self) -> float:
        return max((abs(self.share_before(b) - self.mean_share) for b in self.capacity), default=0.0)

    def over_cap(self) -> list[int]:
        return [b for b in self.capacity if self.share_after(b) > self.disk_cap]

    def summary(self) -> dict[str, Any]:
        return {
            "mean_share": round(self.mean_share, 4),
            "max_deviation_before": round(self.max_deviation_before, 4),
            "max_deviation_after": round(self.max_deviation_after, 4),
            "max_share_after": round(max((self.share_after(b) for b in self.capacity), default=0.0), 4),
            "brokers_over_cap": self.over_cap(),
            "tiered_topics": self.tiered_topics,
        }


@dataclass
class Scope:
    """Planner input derived from a snapshot and a request (plain data)."""

    layout: BrokerLayout
    topics: list[TopicPartitions]
    #: Replicas / preferred leaders per live broker of partitions the plan leaves alone.
    fixed_load: dict[int, int] = field(default_factory=dict)
    fixed_leaders: dict[int, int] = field(default_factory=dict)
    excluded_in_flight: list[TopicPartition] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Bytes per live broker of partitions the plan leaves alone (when sizes are known).
    fixed_bytes: dict[int, int] = field(default_factory=dict)
    #: Balance brokers' totals, topics and leaders (every goal but heal).
    balance: bool = True
    #: Broker -> rack name (for metrics).
    broker_racks: dict[int, str | None] = field(default_factory=dict)


def _fmt(ids: Collection[int]) -> str:
    return "[" + ", ".join(str(b) for b in sorted(ids)) + "]"


def _layout(racks: Mapping[int, str | None], live: list[int], removed: list[int], rack_aware: bool) -> BrokerLayout:
    if rack_aware:
        with_rack = [b for b in live if racks.get(b) is not None]
        without = [b for b in live if racks.get(b) is None]
        if with_rack and without:
            raise ConfigurationError(
                f"brokers {_fmt(without)} have no broker.rack while brokers {_fmt(with_rack)} do: "
                "the rack constraint (every partition over min(RF, racks) racks) cannot be met; "
                "set broker.rack on every broker, or plan with rack_aware=False"
            )
    names = sorted({r for b in live if (r := racks.get(b)) is not None}) if rack_aware else []
    if not names:
        return BrokerLayout(
            brokers=tuple(live),
            rack_of=dict.fromkeys([*racks, *removed], 0),
            rack_names=(None,),
            removed=tuple(removed),
        )
    index = {name: i for i, name in enumerate(names)}
    rack_of = {b: index.get(r, -1) if r is not None else -1 for b, r in racks.items()}
    for b in removed:
        rack_of.setdefault(b, -1)
    return BrokerLayout(brokers=tuple(live), rack_of=rack_of, rack_names=tuple(names), removed=tuple(removed))


def _brokers(
    known: set[int] | frozenset[int], request: PlanRequest, named: Mapping[int, TopicPartition] | None
) -> tuple[list[int], list[int], list[str]]:
    """Live and removed brokers for the goal, and warnings.

    ``named``: broker -> a partition naming it; ``None`` skips the checks that need it (the
    Spark job learns it in its first per-topic stage and calls :func:`check_named` then).
    """
    listed = list(request.brokers)
    if named is None:
        named_known = False
        named = {}
    else:
        named_known = True
    warnings: list[str] = []
    removed: list[int] = []
    if request.goal == "remove-brokers":
        if not listed:
            raise ConfigurationError("goal remove-brokers needs brokers=[...]: the broker ids to remove")
        unknown = [b for b in listed if b not in known and b not in named]
        if unknown and named_known:
            raise ConfigurationError(
                f"cannot remove broker(s) {_fmt(unknown)}: neither in the snapshot's brokers "
                f"{_fmt(known)} nor named by any replica; check the ids"
            )
        removed = listed
    elif request.goal == "add-brokers":
        if listed:
            missing = [b for b in listed if b not in known]
            if missing:
                raise ConfigurationError(
                    f"cannot add broker(s) {_fmt(missing)}: not in the snapshot's brokers {_fmt(known)}; "
                    "start them so they register with the cluster, then take a new snapshot"
                )
            busy = [b for b in listed if b in named]
            if busy and named_known:
                warnings.append(f"broker(s) {_fmt(busy)} being added already hold replicas")
        else:
            empty = [b for b in sorted(known) if b not in named]
            if not empty and named_known:
                raise ConfigurationError(
                    "goal add-brokers found no new broker: every broker of the snapshot holds replicas; "
                    "list the new brokers with brokers=[...]"
                )
    elif listed:
        raise ConfigurationError(
            f"brokers={list(listed)} only applies to goal add-brokers or remove-brokers, not {request.goal}"
        )
    live = sorted(known - set(removed))
    if not live:
        raise ConfigurationError(
            f"removing broker(s) {_fmt(removed)} would leave no broker to hold replicas; remove fewer brokers"
        )
    dead = sorted(set(named) - known - set(removed))
    if dead and named_known:
        examples = ", ".join(str(named[b]) for b in dead[:3])
        raise ConfigurationError(
            f"partition(s) {examples} have replicas on broker(s) {_fmt(dead)}, which are not in the "
            f"snapshot's brokers {_fmt(known)}; if they are gone for good, plan goal='remove-brokers' "
            f"with brokers={list(dead)}, otherwise take the snapshot again once they are back"
        )
    return live, removed, warnings


class PartitionRow(NamedTuple):
    """One partition as the planner reads it: the columns of ``partitions.parquet`` it needs.

    :class:`~airflow_kafka_reassign.core.vocabulary.models.PartitionState` has the same attributes; the
    Spark job builds these plain tuples instead (cheap, picklable) after
    :func:`check_partition_row` has applied the same checks as the pydantic model.
    """

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    #: Broker -> bytes, when known.
    replica_sizes: dict[int, int] | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return target_of_replicas(self.replicas, self.removing_replicas)

    @property
    def replication_factor(self) -> int:
        return len(self.target_replicas)


PartitionLike = PartitionState | PartitionRow


def check_partition_row(row: PartitionRow) -> PartitionRow:
    """The checks :class:`PartitionState` applies, on a plain row; raises ``ValueError`` naming the partition."""
    if not row.topic:
        raise ValueError(f"partition {row.topic}-{row.partition}: the topic name is empty")
    if row.partition < 0:
        raise ValueError(f"partition {row.topic}-{row.partition}: the partition number is negative")
    check_partition_replicas(row.topic, row.partition, row.replicas, row.adding_replicas, row.removing_replicas)
    return row


@dataclass
class PrepareContext:
    """What every per-topic preparation needs: plain, picklable (a Spark broadcast)."""

    request: PlanRequest
    layout: BrokerLayout
    #: Brokers of the snapshot (registered with the cluster).
    known: frozenset[int]
    live: frozenset[int]
    removed: frozenset[int]
    #: Topics that are internal (coordinator topics or marked internal by Kafka).
    internal_topics: frozenset[str]
    #: Topic -> replication factor the topic was created with (for heal).
    topic_rf: dict[str, int]
    #: Explicit heal targets; ``auto_heal``: heal every under-replicated partition instead.
    heal: dict[TopicPartition, int]
    auto_heal: bool
    balance: bool
    any_sizes: bool
    broker_racks: dict[int, str | None]
    warnings: list[str] = field(default_factory=list)
    #: Broker -> its ``broker.rack`` whether or not racks are used (a capacity document's overrides).
    rack_names: dict[int, str | None] = field(default_factory=dict)
    #: Cordoned brokers (not removed, known): no replica goes there (:attr:`PlanRequest.cordoned`).
    cordoned: frozenset[int] = frozenset()

    @property
    def nb(self) -> int:
        return len(self.layout.brokers)

    def internal(self, name: str) -> bool:
        return name in self.internal_topics

    def selected(self, name: str) -> bool:
        r = self.request
        return (
            (r.include_internal or not self.internal(name))
            and (not r.topic_include or any(re.fullmatch(p, name) for p in r.topic_include))
            and not any(re.fullmatch(p, name) for p in r.topic_exclude)
        )

    def why_excluded(self, name: str) -> str:
        if self.internal(name) and not self.request.include_internal:
            return "it is an internal topic (include_internal=True plans it)"
        return "topic_include/topic_exclude leave it out"


@dataclass
class TopicPrep:
    """One topic's share of :class:`Scope` (merged by :func:`merge_preps`)."""

    topic: str
    planned: TopicPartitions | None = None
    fixed_load: dict[int, int] = field(default_factory=dict)
    fixed_leaders: dict[int, int] = field(default_factory=dict)
    fixed_bytes: dict[int, int] = field(default_factory=dict)
    excluded_in_flight: list[TopicPartition] = field(default_factory=list)
    evacuated: bool = False
    auto_healed: int = 0
    #: replicas of this (left out) topic that stay on removed brokers (partial_drain)
    left_on_removed: int = 0
    #: partitions left as they are for a replica on a cordoned broker; replicas moved off one (a partition the
    #: plan must change)
    kept_for_cordon: int = 0
    moved_off_cordoned: int = 0


def named_brokers(partitions: Iterable[PartitionLike]) -> dict[int, TopicPartition]:
    """Broker -> the smallest partition (by topic, number) naming it among target replicas."""
    named: dict[int, TopicPartition] = {}
    for p in partitions:
        topic, number = p.topic, p.partition
        for b in target_of(p):
            seen = named.get(b)
            # (topic, number) < seen, without building the pair for every replica
            if seen is None or (number < seen[1] if seen[0] == topic else topic < seen[0]):
                named[b] = TopicPartition(topic, number)
    return named


def merge_named(parts: Iterable[Mapping[int, TopicPartition]]) -> dict[int, TopicPartition]:
    """:func:`named_brokers` of several topics' results."""
    out: dict[int, TopicPartition] = {}
    for part in parts:
        for b, tp in part.items():
            seen = out.get(b)
            if seen is None or tp < seen:
                out[b] = tp
    return out


def check_named(ctx: PrepareContext, named: Mapping[int, TopicPartition]) -> None:
    """The checks of the brokers that need every replica's broker (deferred by ``plan_context(named=None)``)."""
    _, _, warnings = _brokers(ctx.known, ctx.request, named)
    ctx.warnings = [*warnings, *ctx.warnings]


def plan_context(
    brokers: Sequence[Broker],
    topics: Sequence[TopicState],
    named: Mapping[int, TopicPartition] | None,
    request: PlanRequest,
    *,
    any_sizes: bool,
) -> PrepareContext:
    """The global checks (brokers to add or remove, racks) and the context of :func:`prepare_topic`.

    ``named`` (:func:`named_brokers`) ``None``: the checks that need it wait for :func:`check_named`.
    """
    known = {b.id for b in brokers}
    live, removed, warnings = _brokers(known, request, named)
    cordoned = sorted(set(request.cordoned) & known - set(removed))
    if cordoned:
        added = sorted(set(request.brokers) & set(cordoned)) if request.goal == "add-brokers" else []
        if added:
            raise ConfigurationError(
                f"broker(s) {_fmt(added)} being added are cordoned (cordoned.log.dirs, KIP-1066): they would take no "
                "replica; uncordon them first (UncordonBrokersOperator(brokers=[...]))")
        live = [b for b in live if b not in cordoned]
        if not live:
            raise ConfigurationError(
                f"every broker that would hold replicas is cordoned ({_fmt(cordoned)}, cordoned.log.dirs, KIP-1066): "
                "nothing can be placed; uncordon some first")
        warnings.append(f"broker(s) {_fmt(cordoned)} are cordoned (cordoned.log.dirs, KIP-1066): the plan puts no "
                        "replica on them and leaves them out of the balance")
    racks = {b.id: b.rack for b in brokers}
    layout = _layout(racks, live, removed, request.rack_aware)
    internal = {t.name for t in topics if t.is_coordinator_topic}
    internal |= {n for n in INTERNAL_COORDINATOR_TOPICS if n not in {t.name for t in topics}}
    return PrepareContext(
        request=request,
        layout=layout,
        known=frozenset(known),
        live=frozenset(live),
        removed=frozenset(removed),
        internal_topics=frozenset(internal),
        topic_rf={t.name: t.replication_factor for t in topics},
        heal=request.heal_partitions(),
        auto_heal=request.goal == "heal" and not request.heal_targets,
        balance=request.goal in BALANCE_GOALS,
        any_sizes=any_sizes,
        broker_racks={b.id: (b.rack if request.rack_aware else None) for b in brokers},
        warnings=warnings,
        rack_names={b.id: b.rack for b in brokers},
        cordoned=frozenset(cordoned),
    )


def check_targets(ctx: PrepareContext, all_topics: Collection[str], found: Mapping[TopicPartition, PartitionLike]) -> None:
    """Checks of ``rf_changes`` and ``heal_targets`` against the snapshot's topics and the
    partitions the heal targets name (``found``)."""
    nb, live = ctx.nb, ctx.layout.brokers
    for topic, rf in sorted(ctx.request.rf_changes.items()):
        if topic not in all_topics:
            raise ConfigurationError(f"rf_changes names topic {topic!r}, which is not in the snapshot")
        if not ctx.selected(topic):
            raise ConfigurationError(f"rf_changes names topic {topic!r}, but {ctx.why_excluded(topic)}")
        if rf > nb:
            raise ConfigurationError(
                f"rf_changes[{topic!r}] = {rf} but only {nb} broker(s) {_fmt(live)} would hold replicas; "
                "lower the replication factor or add brokers"
            )
    for tp, rf in sorted(ctx.heal.items()):
        p = found.get(tp)
        if p is None:
            raise ConfigurationError(f"heal_targets names partition {tp}, which is not in the snapshot")
        if not ctx.selected(tp.topic):
            raise ConfigurationError(f"heal_targets names partition {tp}, but {ctx.why_excluded(tp.topic)}")
        if rf < p.replication_factor:
            raise ConfigurationError(
                f"heal_targets[{str(tp)!r}] = {rf} is below the partition's {p.replication_factor} replicas; "
                "heal only adds replicas (use rf_changes to lower a topic's replication factor)"
            )
        if rf > nb:
            raise ConfigurationError(
                f"heal_targets[{str(tp)!r}] = {rf} but only {nb} broker(s) {_fmt(live)} can hold replicas; "
                "add brokers or lower the target"
            )


def prepare_topic(ctx: PrepareContext, topic: str, partitions: Sequence[PartitionLike]) -> TopicPrep:
    """One topic's planner input: its :class:`TopicPartitions` (if planned) or fixed load.

    ``partitions`` sorted by partition number. Raises :class:`ConfigurationError` for the
    first partition that cannot be planned (same messages as :func:`prepare`).
    """
    request = ctx.request
    removed_set, nb, live = ctx.removed, ctx.nb, ctx.layout.brokers
    out = TopicPrep(topic)
    selected = ctx.selected(topic)
    heal = ctx.heal
    if ctx.auto_heal and selected:
        want = ctx.topic_rf.get(topic)
        if want is not None:
            heal = dict(heal)
            for p in partitions:
                if not p.reassigning and p.replication_factor < want:
                    heal[p.tp] = min(want, nb)
                    out.auto_healed += 1
    heal_topic = out.auto_healed > 0 or any(tp.topic == topic for tp in ctx.heal)
    tps: TopicPartitions | None = None

    def add(p: PartitionLike, target: tuple[int, ...], rf: int, frozen: bool, balanced: bool) -> None:
        nonlocal tps
        if tps is None:
            tps = TopicPartitions(
                topic=topic, partitions=[], replicas=[], target_rf=[], frozen=[],
                sizes=[] if ctx.any_sizes else None, balance=balanced,
            )
        tps.partitions.append(p.partition)
        tps.replicas.append(target)
        tps.target_rf.append(rf)
        assert tps.frozen is not None
        tps.frozen.append(frozen)
        if tps.sizes is not None:
            tps.sizes.append(partition_size(p.replica_sizes) or 0)

    def fix(target: tuple[int, ...], size: int) -> None:
        for b in target:
            out.fixed_load[b] = out.fixed_load.get(b, 0) + 1
            if size:
                out.fixed_bytes[b] = out.fixed_bytes.get(b, 0) + size
        out.fixed_leaders[target[0]] = out.fixed_leaders.get(target[0], 0) + 1

    for p in partitions:
        target = target_of(p)
        on_removed = [b for b in target if b in removed_set] if removed_set else []
        in_flight = p.reassigning and not request.include_in_flight
        if in_flight:
            out.excluded_in_flight.append(p.tp)
            if on_removed:
                raise ConfigurationError(
                    f"partition {p.tp} is being reassigned to replicas {list(target)}, which include "
                    f"removed broker(s) {_fmt(on_removed)}; wait for the reassignment to finish or cancel it, "
                    "or plan with include_in_flight=True"
                )
        if not selected:
            if on_removed:
                if ctx.internal(topic) and not request.include_internal and not in_flight:
                    add(p, target, len(target), False, False)
                    out.evacuated = True
                    continue
                if not request.partial_drain:
                    raise ConfigurationError(
                        f"partition {p.tp} has a replica on removed broker(s) {_fmt(on_removed)} but "
                        f"{ctx.why_excluded(topic)}; include the topic, remove other brokers, or plan with "
                        "partial_drain=True to drain only the selected topics now"
                    )
                out.left_on_removed += len(on_removed)
            fix(target, partition_size(p.replica_sizes) or 0)
            continue
        rf = request.rf_changes.get(topic, len(target))
        if heal and p.tp in heal:
            rf = heal[p.tp]
        if in_flight:
            rf = len(target)
        on_cordoned = [b for b in target if b in ctx.cordoned] if ctx.cordoned else []
        if on_cordoned:
            if in_flight or not (on_removed or rf != len(target)):  # nothing forces a change: left as it is
                out.kept_for_cordon += 1
                fix(target, partition_size(p.replica_sizes) or 0)
                continue
            out.moved_off_cordoned += len(on_cordoned)
        elif rf > nb:
            raise ConfigurationError(
                f"topic {topic!r} has replication factor {rf} (partition {p.tp}) but only {nb} broker(s) "
                f"{_fmt(live)} would hold replicas; remove fewer brokers, or lower its RF with rf_changes"
            )
        if ctx.balance:
            add(p, target, rf, in_flight, True)
        elif heal_topic or request.goal == "offload":
            add(p, target, rf, in_flight, False)
        else:
            fix(target, partition_size(p.replica_sizes) or 0)
    out.planned = tps
    return out


def merge_preps(ctx: PrepareContext, preps: Iterable[TopicPrep]) -> Scope:
    """The :class:`Scope` of every topic's :class:`TopicPrep` (topics in name order)."""
    live_set = ctx.live
    topics: list[TopicPartitions] = []
    fixed_load: dict[int, int] = {}
    fixed_leaders: dict[int, int] = {}
    fixed_bytes: dict[int, int] = {}
    excluded: list[TopicPartition] = []
    evacuated: list[str] = []
    healed = 0
    left_on_removed: dict[str, int] = {}
    kept_for_cordon = moved_off_cordoned = 0
    for prep in sorted(preps, key=lambda x: x.topic):
        if prep.left_on_removed:
            left_on_removed[prep.topic] = prep.left_on_removed
        kept_for_cordon += prep.kept_for_cordon
        moved_off_cordoned += prep.moved_off_cordoned
        if prep.planned is not None:
            topics.append(prep.planned)
        for b, c in prep.fixed_load.items():
            fixed_load[b] = fixed_load.get(b, 0) + c
        for b, c in prep.fixed_leaders.items():
            fixed_leaders[b] = fixed_leaders.get(b, 0) + c
        for b, c in prep.fixed_bytes.items():
            fixed_bytes[b] = fixed_bytes.get(b, 0) + c
        excluded.extend(prep.excluded_in_flight)
        if prep.evacuated:
            evacuated.append(prep.topic)
        healed += prep.auto_healed
    warnings = list(ctx.warnings)
    if ctx.auto_heal:
        if healed:
            warnings.append(
                f"heal: no heal_targets given; healing {healed} partition(s) with fewer replicas than "
                "their topic's replication factor"
            )
        else:
            warnings.append("heal: nothing to heal (no heal_targets, no under-replicated partition)")
    if evacuated:
        warnings.append(
            f"internal topic(s) {evacuated} hold replicas on removed broker(s) {_fmt(ctx.removed)}: "
            "only those replicas are moved (include_internal=True balances these topics too)"
        )
    if left_on_removed:
        names = sorted(left_on_removed)
        warnings.append(
            f"partial drain: {sum(left_on_removed.values())} replica(s) of {len(names)} topic(s) left out by "
            f"topic_include/topic_exclude stay on removed broker(s) {_fmt(ctx.removed)} "
            f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}); those brokers are not empty yet"
        )
    if kept_for_cordon:
        warnings.append(
            f"{kept_for_cordon} partition(s) with a replica on cordoned broker(s) {_fmt(ctx.cordoned)} are left as they "
            "are (a cordon keeps new replicas away; it does not move the ones there)"
        )
    if moved_off_cordoned:
        warnings.append(
            f"{moved_off_cordoned} replica(s) on cordoned broker(s) {_fmt(ctx.cordoned)} move off with the drain, heal "
            "or RF change of their partition (the plan places no replica on a cordoned broker)"
        )
    if excluded:
        warnings.append(
            f"{len(excluded)} partition(s) with an in-flight reassignment are left alone "
            "(include_in_flight=True plans them from their target replicas)"
        )
    return Scope(
        layout=ctx.layout,
        topics=topics,
        fixed_load={b: c for b, c in fixed_load.items() if b in live_set},
        fixed_leaders={b: c for b, c in fixed_leaders.items() if b in live_set},
        fixed_bytes={b: c for b, c in fixed_bytes.items() if b in live_set},
        excluded_in_flight=excluded,
        warnings=warnings,
        balance=ctx.balance,
        broker_racks=ctx.broker_racks,
    )


def prepare(snapshot: ClusterSnapshot, request: PlanRequest) -> Scope:
    """Validate and split the snapshot into planned topics and fixed load (see module doc).

    The same steps the Spark job runs distributed: :func:`plan_context` (global checks),
    :func:`check_targets`, :func:`prepare_topic` per topic, :func:`merge_preps`.
    """
    ctx = plan_context(
        snapshot.brokers,
        snapshot.topics,
        named_brokers(snapshot.partitions),
        request,
        any_sizes=any(p.replica_sizes for p in snapshot.partitions),
    )
    by_topic: dict[str, list[PartitionState]] = {}
    for p in snapshot.partitions:
        by_topic.setdefault(p.topic, []).append(p)
    pmap = snapshot.partition_map() if ctx.heal else {}
    check_targets(ctx, by_topic.keys(), {tp: pmap[tp] for tp in ctx.heal if tp in pmap})
    preps = []
    for topic in sorted(by_topic):
        parts = sorted(by_topic[topic], key=lambda p: p.partition)
        preps.append(prepare_topic(ctx, topic, parts))
    return merge_preps(ctx, preps)
