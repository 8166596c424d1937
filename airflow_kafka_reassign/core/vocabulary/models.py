"""Immutable, validated domain models: brokers, partitions, snapshots, moves and plans.

Everything here is pure (pydantic v2, no Airflow, Kafka client or PySpark import) so the
planner, the guards, the Spark job and the CLI share one vocabulary, in Kafka's own words:
*replicas* (the first one is the preferred leader), *ISR*, *adding* and *removing*
replicas of an in-flight reassignment.

Invalid input fails in a validator with a message that names the partition and the problem,
for example::

    >>> Move(topic="orders", partition=3, target_replicas=(1, 2, 2))
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for Move
      Value error, partition orders-3: target_replicas [1, 2, 2] lists broker 2 twice ...
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Kafka's own coordinator topics: growing them re-maps coordinators (KAFKA-20029).
INTERNAL_COORDINATOR_TOPICS = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state"}
)

#: The only reassignment JSON version Kafka's tools read and write.
KAFKA_REASSIGNMENT_JSON_VERSION = 1

#: A ``log_dirs`` entry of Kafka's reassignment JSON that pins no log dir (the broker chooses one).
ANY_LOG_DIR = "any"


class TopicPartition(NamedTuple):
    """A (topic, partition) pair; prints as Kafka does: ``topic-partition``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


def check_replica_list(
    replicas: Sequence[int], *, what: str, where: str, allow_empty: bool = False
) -> tuple[int, ...]:
    """Validate a broker id list: non-empty (unless allowed), no negatives, no duplicates.

    ``where`` names the owner (``partition orders-3``) and ``what`` the field, so the
    error says exactly which list is wrong and how.
    """
    ids = tuple(replicas)
    if ids and min(ids) >= 0 and len(set(ids)) == len(ids):
        return ids  # sound: the common case, decided fast (the Spark job checks a million rows)
    if not ids:
        if allow_empty:
            return ids
        raise ValueError(f"{where}: {what} is empty; a partition needs at least one replica")
    negative = [b for b in ids if b < 0]
    if negative:
        raise ValueError(
            f"{where}: {what} {list(ids)} has negative broker id {negative[0]}; "
            "broker ids are >= 0"
        )
    dupes = [b for b, n in Counter(ids).items() if n > 1]
    if dupes:
        raise ValueError(
            f"{where}: {what} {list(ids)} lists broker {dupes[0]} twice; "
            "each broker may hold one replica of a partition"
        )
    return ids


def check_partition_replicas(
    topic: str,
    partition: int,
    replicas: Sequence[int],
    adding: Sequence[int] = (),
    removing: Sequence[int] = (),
    isr: Sequence[int] = (),
) -> None:
    """A partition's replica lists are sound: raises ``ValueError`` naming the partition."""
    if not (adding or removing or isr) and replicas and min(replicas) >= 0 and len(set(replicas)) == len(replicas):
        return  # the common case, decided before naming the partition (the Spark job checks millions of rows)
    where = f"partition {topic}-{partition}"
    check_replica_list(replicas, what="replicas", where=where)
    if isr:
        check_replica_list(isr, what="isr", where=where, allow_empty=True)
    for name, value in (("adding_replicas", adding), ("removing_replicas", removing)):
        if not value:
            continue
        ids = check_replica_list(value, what=name, where=where, allow_empty=True)
        stray = sorted(set(ids) - set(replicas))
        if stray:
            raise ValueError(
                f"{where}: {name} {list(ids)} names broker(s) {stray} that are not in replicas {list(replicas)}"
            )


def target_of(replicas: Sequence[int], removing: Sequence[int]) -> tuple[int, ...]:
    """The replica set a reassignment ends with: ``replicas`` less the removing ones."""
    gone = set(removing)
    return tuple(b for b in replicas if b not in gone)


def original_of(replicas: Sequence[int], adding: Sequence[int]) -> tuple[int, ...]:
    """The replica set before a reassignment (what a cancel returns to)."""
    new = set(adding)
    return tuple(b for b in replicas if b not in new)


class Broker(_Frozen):
    """A broker of the cluster and its ``broker.rack`` (``None`` when unset)."""

    id: int = Field(ge=0)
    rack: str | None = None


class TopicState(_Frozen):
    """A topic and the configs that matter to moving and growing it."""

    name: str = Field(min_length=1)
    #: The topic's id (KIP-516, a base64 UUID as Kafka prints it): a topic deleted and re-created under the same
    #: name has a new one. ``None`` when the source did not give it (older snapshots, Kafka's own JSON).
    topic_id: str | None = None
    internal: bool = False
    partition_count: int = Field(ge=0)
    replication_factor: int = Field(ge=0)
    #: Topic configs that guards and throttles read, by Kafka name; only those present.
    #: Keys used: ``min.insync.replicas``, ``cleanup.policy``, ``remote.storage.enable``,
    #: ``leader.replication.throttled.replicas``, ``follower.replication.throttled.replicas``.
    configs: dict[str, str] = Field(default_factory=dict)

    @property
    def is_compacted(self) -> bool:
        return "compact" in self.configs.get("cleanup.policy", "")

    @property
    def is_tiered(self) -> bool:
        """Tiered storage (KIP-405, ``remote.storage.enable=true``): older segments live in remote
        storage, so a replica's local bytes (what DescribeLogDirs reports) are all a move copies."""
        return self.configs.get("remote.storage.enable", "").strip().lower() == "true"

    @property
    def is_coordinator_topic(self) -> bool:
        return self.internal or self.name in INTERNAL_COORDINATOR_TOPICS

    @property
    def min_insync_replicas(self) -> int | None:
        value = self.configs.get("min.insync.replicas")
        return int(value) if value is not None else None


class PartitionState(_Frozen):
    """One partition as the cluster reports it.

    ``replicas`` is the full replica set the metadata shows; during a reassignment that is
    the *intermediate* set (KIP-860's race: ``[1,2,3,4,5,6]`` while moving ``[1,2,3]`` to
    ``[4,5,6]``). :attr:`target_replicas` and :attr:`original_replicas` undo that using
    ``adding_replicas`` / ``removing_replicas`` as the controller lists them.
    """

    topic: str = Field(min_length=1)
    partition: int = Field(ge=0)
    replicas: tuple[int, ...]
    isr: tuple[int, ...] = ()
    leader: int | None = None
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    #: Bytes on disk of each replica, by broker id (from DescribeLogDirs), when known.
    replica_sizes: dict[int, int] | None = None
    #: Estimated bytes per second produced to the partition (each replica takes them in), when
    #: sampled (:mod:`airflow_kafka_reassign.core.vocabulary.rates`).
    bytes_in_per_s: float | None = Field(default=None, ge=0)
    #: KIP-966's eligible leader replicas (Kafka 4.0+ with ELR on; DescribeTopicPartitions): replicas out of the
    #: ISR that still hold every committed record (they left it while the ISR was below ``min.insync.replicas``,
    #: when nothing new could be committed), so the controller may elect one without losing committed data.
    #: ``None``: not read (ELR off, or the partition was not below min ISR nor offline); not kept in snapshot files.
    elr: tuple[int, ...] | None = None
    #: KIP-966's last known ELR: former eligible replicas that shut down uncleanly (they may have lost committed
    #: records); the last resort when no ISR or ELR member is left. ``None``: not read.
    last_known_elr: tuple[int, ...] | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @model_validator(mode="after")
    def _check(self) -> PartitionState:
        check_partition_replicas(
            self.topic, self.partition, self.replicas, self.adding_replicas, self.removing_replicas, self.isr
        )
        if self.leader is not None and self.leader < 0:
            object.__setattr__(self, "leader", None)  # Kafka reports -1 for "no leader"
        return self

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replica set this partition ends with once its reassignment (if any) completes."""
        return target_of(self.replicas, self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replica set before the in-flight reassignment (what a cancel goes back to)."""
        return original_of(self.replicas, self.adding_replicas)

    @property
    def replication_factor(self) -> int:
        """The RF the partition has when no reassignment is in flight (the target's size)."""
        return len(self.target_replicas)


class SnapshotCheck(_Frozen):
    """How a snapshot was checked complete: its counts, per topic and in all.

    The Kafka adapter sets it on the snapshots it takes (``source="cluster"``: every partition of
    every topic's partition count in the metadata, with configs and, when asked, sizes, consistent
    with each other; see :mod:`airflow_kafka_reassign.core.guards.completeness`). ``write_snapshot``
    keeps it in snapshot.json under ``check`` (counted from the content, ``source="content"``, for
    a snapshot built in memory), and every reader that plans checks the files against it.
    """

    #: ``cluster``: checked against the cluster when taken; ``content``: counted when written.
    source: Literal["cluster", "content"] = "content"
    topics: int = Field(ge=0)
    partitions: int = Field(ge=0)
    replicas: int = Field(ge=0)
    #: Every partition carries the sizes of its replicas.
    replica_sizes: bool = False
    #: Partitions per topic (partition ids 0 to count - 1).
    partition_counts: dict[str, int] = Field(default_factory=dict)
    #: Reads of the cluster it took, and the seconds they spanned (``source="cluster"``).
    attempts: int | None = None
    settle_s: float | None = None

    @classmethod
    def of(cls, snapshot: ClusterSnapshot, **fields: Any) -> SnapshotCheck:
        """The counts of ``snapshot``'s partitions (``fields``: the other fields)."""
        counts = Counter(p.topic for p in snapshot.partitions)
        return cls(
            topics=len(counts),
            partitions=len(snapshot.partitions),
            replicas=sum(len(p.replicas) for p in snapshot.partitions),
            replica_sizes=bool(snapshot.partitions) and all(p.replica_sizes is not None for p in snapshot.partitions),
            partition_counts=dict(sorted(counts.items())),
            **fields,
        )

    def same_counts(self, other: SnapshotCheck) -> bool:
        return (self.topics, self.partitions, self.replicas, self.replica_sizes, self.partition_counts) == (
            other.topics, other.partitions, other.replicas, other.replica_sizes, other.partition_counts)


class BytesInWindow(_Frozen):
    """How a snapshot's bytes-in rates were sampled (:mod:`airflow_kafka_reassign.core.vocabulary.rates`)."""

    #: Seconds between the two reads of the replicas' sizes.
    window_s: float = Field(gt=0)
    #: Partitions whose log shrank during the window (retention, compaction): rate counted as 0.
    shrunk: int = Field(default=0, ge=0)
    #: Partitions without a rate (absent from one read).
    unmeasured: int = Field(default=0, ge=0)


class ClusterSnapshot(_Frozen):
    """Brokers, topics and partitions at one moment, plus what the controller was moving.

    ``check`` records how the snapshot was checked complete (:class:`SnapshotCheck`): set by the
    Kafka adapter and by :func:`~airflow_kafka_reassign.core.records.snapshot_io.read_snapshot`.
    """

    format_version: int = 1
    cluster_id: str | None = None
    taken_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    brokers: tuple[Broker, ...]
    topics: tuple[TopicState, ...] = ()
    partitions: tuple[PartitionState, ...] = ()
    check: SnapshotCheck | None = None
    #: Set when the partitions carry sampled bytes-in rates (``bytes_in_per_s``).
    bytes_in: BytesInWindow | None = None

    @model_validator(mode="after")
    def _check(self) -> ClusterSnapshot:
        ids = [b.id for b in self.brokers]
        dupes = [b for b, n in Counter(ids).items() if n > 1]
        if dupes:
            raise ValueError(f"snapshot: broker {dupes[0]} is listed twice")
        names = {t.name for t in self.topics}
        seen: set[tuple[str, int]] = set()
        for p in self.partitions:
            key = (p.topic, p.partition)
            if key in seen:
                raise ValueError(f"snapshot: partition {p.topic}-{p.partition} is listed twice")
            seen.add(key)
            if names and p.topic not in names:
                raise ValueError(
                    f"snapshot: partition {p.topic}-{p.partition} belongs to topic "
                    f"{p.topic!r}, which is not in the snapshot's topics"
                )
        return self

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return tuple(sorted(b.id for b in self.brokers))

    @property
    def racks(self) -> dict[int, str | None]:
        return {b.id: b.rack for b in self.brokers}

    def topic(self, name: str) -> TopicState:
        for t in self.topics:
            if t.name == name:
                return t
        raise KeyError(f"topic {name!r} is not in the snapshot")

    def partition_map(self) -> dict[TopicPartition, PartitionState]:
        return {p.tp: p for p in self.partitions}

    def partition_counts(self, topics: Iterable[str] | None = None) -> dict[str, int]:
        """``{topic: partitions in this snapshot}`` (of ``topics`` only, when given), counted
        from the partitions the snapshot holds: what a plan made from it records."""
        counts = Counter(p.topic for p in self.partitions)
        names = sorted(counts) if topics is None else sorted(set(topics))
        return {t: counts[t] for t in names if counts[t]}

    def topic_ids(self, topics: Iterable[str] | None = None) -> dict[str, str] | None:
        """``{topic: topic id}`` of the topics (``topics`` only, when given) whose id the snapshot knows (KIP-516):
        what a plan made from it records, so that execution tells a re-created topic from the one planned.
        ``None`` when it knows none."""
        wanted = None if topics is None else set(topics)
        ids = {t.name: t.topic_id for t in self.topics
               if t.topic_id is not None and (wanted is None or t.name in wanted)}
        return dict(sorted(ids.items())) or None

    def reassigning(self) -> tuple[PartitionState, ...]:
        return tuple(p for p in self.partitions if p.reassigning)


class Move(_Frozen):
    """One partition's reassignment: from ``current_replicas`` to ``target_replicas``.

    ``current_replicas`` is what the planner saw (``None`` when read from a plain Kafka
    reassignment file, which does not carry it); execution refuses the move as *stale* if
    the live partition no longer has exactly those replicas. ``allow_rf_change`` marks the
    moves the plan deliberately changes the replication factor of (KIP-860): every other
    move must keep it.
    """

    topic: str = Field(min_length=1)
    partition: int = Field(ge=0)
    target_replicas: tuple[int, ...]
    current_replicas: tuple[int, ...] | None = None
    allow_rf_change: bool = False
    #: Kafka's ``log_dirs``: one entry per target replica, ``"any"`` (the broker chooses) or the absolute path of
    #: the log dir that replica must end in (AlterReplicaLogDirs, KIP-113). ``None`` (no entry pinned, always so in
    #: plans without log dirs) is not written: such plans are the same bytes as before the field existed. A move
    #: whose target equals its current replicas and that pins a dir moves that replica between its broker's dirs.
    log_dirs: tuple[str, ...] | None = Field(default=None, exclude_if=lambda v: v is None)
    #: The log dir each current replica was in when the plan was made, in the same format (one entry per current
    #: replica, ``"any"``: not recorded). A plan on log dirs records the dirs its replicas leave, so that its
    #: :meth:`ReassignmentPlan.rollback` pins them back there. Not part of Kafka's format; ``None`` is not written.
    current_log_dirs: tuple[str, ...] | None = Field(default=None, exclude_if=lambda v: v is None)

    @model_validator(mode="after")
    def _check(self) -> Move:
        where = f"partition {self.topic}-{self.partition}"
        check_replica_list(self.target_replicas, what="target_replicas", where=where)
        if self.log_dirs is not None:
            dirs = check_log_dirs(self.log_dirs, self.target_replicas, where=where)
            object.__setattr__(self, "log_dirs", dirs)
        if self.current_log_dirs is not None:
            if self.current_replicas is None:
                raise ValueError(f"{where}: current_log_dirs {list(self.current_log_dirs)} needs current_replicas "
                                 "(one entry per current replica); give both, or neither")
            dirs = check_log_dirs(self.current_log_dirs, self.current_replicas, where=f"{where} (current)")
            object.__setattr__(self, "current_log_dirs", dirs)
        if self.current_replicas is not None:
            check_replica_list(self.current_replicas, what="current_replicas", where=where)
            if self.changes_rf and not self.allow_rf_change:
                raise ValueError(
                    f"{where}: the move changes the replication factor from "
                    f"{len(self.current_replicas)} to {len(self.target_replicas)} "
                    f"({list(self.current_replicas)} -> {list(self.target_replicas)}) but is "
                    "not marked allow_rf_change=true; plans keep every partition's RF unless "
                    "an RF change was explicitly requested (KIP-860)"
                )
        return self

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def changes_rf(self) -> bool:
        return self.current_replicas is not None and len(self.current_replicas) != len(
            self.target_replicas
        )

    @property
    def adding_replicas(self) -> tuple[int, ...]:
        current = set(self.current_replicas or ())
        return tuple(b for b in self.target_replicas if b not in current)

    @property
    def removing_replicas(self) -> tuple[int, ...]:
        target = set(self.target_replicas)
        return tuple(b for b in (self.current_replicas or ()) if b not in target)

    @property
    def replica_moves(self) -> int:
        """Replicas that must be copied to a new broker (the cost of the move)."""
        return len(self.adding_replicas)

    @property
    def leader_changes(self) -> bool:
        current = self.current_replicas
        return bool(current) and current is not None and current[0] != self.target_replicas[0]

    @property
    def pinned_dirs(self) -> dict[int, str]:
        """``{broker: log dir}`` of the target replicas whose log dir the move pins (``log_dirs``)."""
        if self.log_dirs is None:
            return {}
        return {b: d for b, d in zip(self.target_replicas, self.log_dirs, strict=True) if d != ANY_LOG_DIR}

    @property
    def current_dirs(self) -> dict[int, str]:
        """``{broker: log dir}`` of the current replicas whose log dir the plan recorded (``current_log_dirs``)."""
        if self.current_log_dirs is None or self.current_replicas is None:
            return {}
        return {b: d for b, d in zip(self.current_replicas, self.current_log_dirs, strict=True) if d != ANY_LOG_DIR}


def check_log_dirs(dirs: Sequence[str], replicas: Sequence[int], *, where: str) -> tuple[str, ...] | None:
    """A move's ``log_dirs`` checked against its target ``replicas`` (Kafka's format: one entry per replica, ``"any"``
    or an absolute path); ``None`` when every entry is ``"any"`` (nothing pinned). Raises ``ValueError`` naming the
    partition."""
    out = tuple(dirs)
    if len(out) != len(replicas):
        raise ValueError(f"{where}: log_dirs {list(out)} has {len(out)} entries but target_replicas {list(replicas)} "
                         f"has {len(replicas)}; give one per replica (\"{ANY_LOG_DIR}\" where the broker chooses)")
    bad = [d for d in out if d != ANY_LOG_DIR and not (isinstance(d, str) and d.startswith("/"))]
    if bad:
        raise ValueError(f"{where}: log_dirs entry {bad[0]!r} is neither \"{ANY_LOG_DIR}\" nor an absolute path of a "
                         "log dir (as DescribeLogDirs reports it)")
    if all(d == ANY_LOG_DIR for d in out):
        return None
    return tuple(d if d == ANY_LOG_DIR else (d.rstrip("/") or "/") for d in out)


class ReassignmentPlan(_Frozen):
    """An ordered set of moves, at most one per partition.

    Reads and writes Kafka's reassignment JSON exactly as ``kafka-reassign-partitions``
    accepts it (:meth:`from_kafka_json`, :meth:`to_kafka_json`), and a richer JSON of its
    own (``model_dump_json``) that also keeps each move's expected current replicas and
    the partition count of every moved topic in the snapshot the plan was made from.

    ``partition_counts`` (``{topic: partitions}``, optional): each moved topic's partition count in the snapshot
    the plan was made from. A topic that grew since keeps its moves (its new partitions are the cordon's or the
    drain rounds' business); a move beyond the count is a malformed plan.

    ``topic_ids`` (``{topic: topic id}``, optional, KIP-516): each moved topic's id in that snapshot. Execution
    drops the moves of a topic whose id changed (deleted and re-created under the same name) and, for a goal, plans
    its new partitions again. ``None`` in plans from a source that did not give ids (Kafka's own format, older
    snapshots): execution then takes the ids it sees first, before it sends anything.
    """

    version: int = KAFKA_REASSIGNMENT_JSON_VERSION
    moves: tuple[Move, ...] = ()
    partition_counts: dict[str, int] | None = None
    topic_ids: dict[str, str] | None = Field(default=None, exclude_if=lambda v: v is None)

    @field_validator("version")
    @classmethod
    def _check_version(cls, v: int) -> int:
        if v != KAFKA_REASSIGNMENT_JSON_VERSION:
            raise ValueError(
                f"unknown reassignment JSON version {v}; Kafka's format is version "
                f"{KAFKA_REASSIGNMENT_JSON_VERSION}"
            )
        return v

    @model_validator(mode="after")
    def _check(self) -> ReassignmentPlan:
        seen: set[TopicPartition] = set()
        counts = self.partition_counts
        for topic, n in (counts or {}).items():
            if n < 1:
                raise ValueError(
                    f"partition_counts gives topic {topic!r} {n} partitions; a topic has at least one"
                )
        for m in self.moves:
            if m.tp in seen:
                raise ValueError(
                    f"partition {m.tp} is listed twice in the plan; each partition may "
                    "appear once"
                )
            seen.add(m.tp)
            if counts is not None and m.topic in counts and m.partition >= counts[m.topic]:
                raise ValueError(
                    f"partition {m.tp} is beyond the {counts[m.topic]} partition(s) that partition_counts "
                    f"gives topic {m.topic!r}; the plan's moves and counts disagree: plan again"
                )
        return self

    def __len__(self) -> int:
        return len(self.moves)

    @property
    def partitions(self) -> tuple[TopicPartition, ...]:
        return tuple(m.tp for m in self.moves)

    def by_partition(self) -> dict[TopicPartition, Move]:
        return {m.tp: m for m in self.moves}

    # -- Kafka's own format -------------------------------------------------------------

    def to_kafka_dict(self) -> dict[str, Any]:
        """Kafka's format; a move's ``log_dirs`` only when it pins one (a plan without log dirs has none)."""
        return {
            "version": KAFKA_REASSIGNMENT_JSON_VERSION,
            "partitions": [
                {"topic": m.topic, "partition": m.partition, "replicas": list(m.target_replicas),
                 **({"log_dirs": list(m.log_dirs)} if m.log_dirs is not None else {})}
                for m in self.moves
            ],
        }

    def to_kafka_json(self) -> str:
        """Kafka's ``{"version":1,"partitions":[...]}``, for ``--reassignment-json-file``."""
        return json.dumps(self.to_kafka_dict(), separators=(",", ":"))

    @classmethod
    def from_kafka_json(
        cls,
        text: str | bytes,
        current: dict[TopicPartition, Sequence[int]] | None = None,
        *,
        allow_rf_change: bool = False,
        log_dirs: Literal["refuse", "ignore", "keep"] = "refuse",
    ) -> ReassignmentPlan:
        """Parse Kafka's reassignment JSON (as ``--generate`` prints and ``--execute`` reads).

        ``current`` optionally supplies each partition's present replicas, so the moves
        can be checked for staleness and RF changes; a move that would change a partition's
        replication factor is then refused unless ``allow_rf_change=True``. ``log_dirs`` entries other than
        ``"any"``: ``"refuse"`` (default) refuses them, ``"keep"`` reads them into each move's ``log_dirs``
        (execution moves those replicas between log dirs, AlterReplicaLogDirs), ``"ignore"`` drops them (the
        reference tool prints the *current* assignment with real paths).
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"reassignment JSON is not valid JSON: {e}") from None
        if not isinstance(data, dict) or "partitions" not in data:
            raise ValueError(
                'reassignment JSON must be an object {"version": 1, "partitions": [...]}'
            )
        moves = []
        for i, entry in enumerate(data["partitions"]):
            if not isinstance(entry, dict) or not {"topic", "partition", "replicas"} <= entry.keys():
                raise ValueError(
                    f"reassignment JSON partitions[{i}] needs topic, partition and replicas; "
                    f"got {entry!r}"
                )
            dirs = entry.get("log_dirs")
            if log_dirs == "refuse" and dirs is not None and any(d != ANY_LOG_DIR for d in dirs):
                raise ValueError(
                    f"partition {entry['topic']}-{entry['partition']}: log_dirs {dirs} pin log dirs; read them "
                    "with log_dirs=\"keep\" to move those replicas between log dirs, or use \"any\""
                )
            tp = TopicPartition(entry["topic"], entry["partition"])
            cur = current.get(tp) if current else None
            moves.append(
                Move(
                    topic=entry["topic"],
                    partition=entry["partition"],
                    target_replicas=tuple(entry["replicas"]),
                    current_replicas=tuple(cur) if cur is not None else None,
                    allow_rf_change=allow_rf_change
                    and cur is not None
                    and len(cur) != len(entry["replicas"]),
                    log_dirs=tuple(dirs) if log_dirs == "keep" and dirs is not None else None,
                )
            )
        return cls(version=data.get("version", KAFKA_REASSIGNMENT_JSON_VERSION), moves=tuple(moves))

    @classmethod
    def from_moves(cls, moves: Iterable[Move], partition_counts: dict[str, int] | None = None,
                   topic_ids: dict[str, str] | None = None) -> ReassignmentPlan:
        return cls(moves=tuple(moves), partition_counts=partition_counts, topic_ids=topic_ids)

    def rollback(self) -> ReassignmentPlan:
        """The plan that puts every moved partition back on its current replicas, and every replica whose log dir
        the plan recorded (``current_log_dirs``: a plan on log dirs) back in that log dir (``log_dirs``).

        Needs every move's ``current_replicas``: a plain Kafka file cannot be rolled back.
        """
        missing = [str(m.tp) for m in self.moves if m.current_replicas is None]
        if missing:
            raise ValueError(
                f"cannot build a rollback plan: partition(s) {', '.join(missing[:5])} have no "
                "current_replicas; plan from a snapshot so each move records them"
            )
        return ReassignmentPlan(
            moves=tuple(
                Move(
                    topic=m.topic,
                    partition=m.partition,
                    target_replicas=m.current_replicas or (),
                    current_replicas=m.target_replicas,
                    allow_rf_change=m.allow_rf_change,
                    log_dirs=m.current_log_dirs,
                    current_log_dirs=m.log_dirs,
                )
                for m in self.moves
            ),
            partition_counts=self.partition_counts,
            topic_ids=self.topic_ids,
        )
