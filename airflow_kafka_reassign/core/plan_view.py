"""What a reviewer sees of a plan: per-broker load before and after, the moves broker to broker.

Pure and fast enough for a million replicas (numpy over flat columns, no pydantic object per
partition): :func:`assignment_from_snapshot` takes a :class:`ClusterSnapshot`,
:func:`read_assignment` reads a snapshot directory (``core.snapshot_io`` format) straight from
its Parquet columns. :func:`plan_view` applies a plan's moves to that and gives a
:class:`PlanView`: replicas, preferred leaders and bytes per broker before and after, the
replicas each broker sends to each other broker (:attr:`PlanView.matrix`), the replica moves
per topic and the replication-factor changes the plan makes. :func:`aggregate_matrix` folds
the broker matrix into racks or the busiest brokers for display.

Conventions (the same as ``core.planner.metrics``): in-flight reassignments count at their
*target* replicas; leaders are *preferred* leaders (the first replica), what a preferred
leader election makes the leaders once the plan is done; a partition's bytes are its largest
replica's size, and each of its replicas counts that many bytes.

A moved replica is paired, in order, from a broker losing the partition to a broker gaining
it. Kafka copies the data from the partition's leader, not from the broker losing the replica:
the matrix says where replicas go, not which link carries the bytes. A replica added without
one removed (an RF increase) comes from :data:`NEW_REPLICA`; one removed without one added
(an RF decrease) goes to :data:`DROPPED_REPLICA`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from airflow_kafka_reassign.core.models import ClusterSnapshot, ReassignmentPlan

#: Matrix source of replicas added without one removed (an RF increase, a heal).
NEW_REPLICA = -1
#: Matrix destination of replicas removed without one added (an RF decrease).
DROPPED_REPLICA = -2

IntArray = np.ndarray[Any, np.dtype[np.int64]]


@dataclass
class Assignment:
    """A snapshot's replica assignment as flat columns (target replicas of every partition).

    Partition ``i`` is ``(topics[i], partitions[i])``; its target replicas are
    ``replicas[offsets[i]:offsets[i + 1]]``; ``sizes[i]`` is one replica's bytes (-1: unknown).
    """

    racks: dict[int, str | None]
    topics: list[str]
    partitions: IntArray
    offsets: IntArray
    replicas: IntArray
    sizes: IntArray
    cluster_id: str | None = None
    taken_at: datetime | None = None

    @property
    def partition_count(self) -> int:
        return len(self.topics)

    @property
    def has_sizes(self) -> bool:
        return bool((self.sizes >= 0).any()) if len(self.sizes) else False

    def brokers(self) -> list[int]:
        """Every broker of the snapshot plus any broker a replica names."""
        named = np.unique(self.replicas).tolist() if len(self.replicas) else []
        return sorted(set(self.racks) | set(named))

    def loads(self) -> tuple[Counter[int], Counter[int], Counter[int]]:
        """Replicas, preferred leaders and bytes per broker."""
        reps = self.replicas
        lengths = np.diff(self.offsets)
        nonempty = lengths > 0
        leaders = reps[self.offsets[:-1][nonempty]] if len(reps) else reps
        per_replica_size = np.repeat(np.maximum(self.sizes, 0), lengths)
        return (
            _bincount(reps),
            _bincount(leaders),
            _bincount(reps, per_replica_size),
        )

    def lookup(self, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[tuple[int, ...], int]]:
        """``(topic, partition)`` -> (target replicas, bytes of one replica or -1), for ``keys`` only."""
        wanted = set(keys)
        out: dict[tuple[str, int], tuple[tuple[int, ...], int]] = {}
        if not wanted:
            return out
        offsets = self.offsets
        for i, key in enumerate(zip(self.topics, self.partitions.tolist(), strict=True)):
            if key in wanted:
                out[key] = (tuple(self.replicas[offsets[i]:offsets[i + 1]].tolist()), int(self.sizes[i]))
        return out


def _bincount(ids: IntArray, weights: IntArray | None = None) -> Counter[int]:
    if not len(ids):
        return Counter()
    counts = np.bincount(ids, weights=weights)
    nz = np.flatnonzero(counts)
    return Counter(dict(zip(nz.tolist(), counts[nz].astype(np.int64).tolist(), strict=True)))


def assignment_from_snapshot(snapshot: ClusterSnapshot) -> Assignment:
    """The flat assignment of a :class:`ClusterSnapshot` (in-flight moves at their targets)."""
    topics: list[str] = []
    partitions: list[int] = []
    lengths: list[int] = []
    flat: list[int] = []
    sizes: list[int] = []
    for p in snapshot.partitions:
        target = p.target_replicas if p.removing_replicas else p.replicas
        topics.append(p.topic)
        partitions.append(p.partition)
        lengths.append(len(target))
        flat.extend(target)
        sizes.append(max(p.replica_sizes.values()) if p.replica_sizes else -1)
    return Assignment(
        racks=dict(snapshot.racks),
        topics=topics,
        partitions=np.asarray(partitions, dtype=np.int64),
        offsets=np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64),
        replicas=np.asarray(flat, dtype=np.int64),
        sizes=np.asarray(sizes, dtype=np.int64),
        cluster_id=snapshot.cluster_id,
        taken_at=snapshot.taken_at,
    )


def read_assignment(directory: str | Path) -> Assignment:
    """The flat assignment of a snapshot directory, read column-wise (no per-partition validation).

    About 20 times faster than ``snapshot_io.read_snapshot`` on a million replicas; the report
    reads what the planner already validated.
    """
    src = Path(directory)
    meta_path = src / "snapshot.json"
    if not meta_path.is_file():
        raise ValueError(f"{src} is not a snapshot directory: {meta_path.name} is missing")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    brokers = pq.read_table(src / "brokers.parquet").to_pydict()
    racks = dict(zip(brokers["id"], brokers["rack"], strict=True))
    table = pq.read_table(
        src / "partitions.parquet", columns=["topic", "partition", "replicas", "removing_replicas", "replica_sizes"]
    ).combine_chunks()
    n = table.num_rows
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Assignment(racks, [], empty, np.zeros(1, dtype=np.int64), empty, empty,
                          meta.get("cluster_id"), _parse_time(meta.get("taken_at")))
    offsets, values = _list_column(table.column("replicas").chunk(0))

    # a partition's size: its largest replica's size (-1: null list, size unknown)
    sizes = np.full(n, -1, dtype=np.int64)
    size_col = table.column("replica_sizes").chunk(0)
    if size_col.null_count < n:
        s_off, s_val = _list_column(size_col)
        lengths = np.diff(s_off)
        starts = np.flatnonzero(lengths > 0)
        if len(starts):
            maxima = np.maximum.reduceat(s_val, s_off[:-1][starts])
            valid = size_col.is_valid().to_numpy(zero_copy_only=False)[starts]
            sizes[starts[valid]] = maxima[valid]

    # in-flight reassignments: drop the removing replicas (the plan moves from the target)
    removing = table.column("removing_replicas").chunk(0)
    rows = np.flatnonzero(np.diff(_list_column(removing)[0]) > 0)
    if len(rows):
        keep = np.ones(len(values), dtype=bool)
        for row, gone in zip(rows.tolist(), removing.take(rows).to_pylist(), strict=True):
            gone_set = set(gone or ())
            for j in range(offsets[row], offsets[row + 1]):
                if values[j] in gone_set:
                    keep[j] = False
        cum = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
        offsets = cum[offsets]
        values = values[keep]
    return Assignment(
        racks=racks,
        topics=table.column("topic").to_pylist(),
        partitions=table.column("partition").to_numpy().astype(np.int64),
        offsets=offsets,
        replicas=values,
        sizes=sizes,
        cluster_id=meta.get("cluster_id"),
        taken_at=_parse_time(meta.get("taken_at")),
    )


def _list_column(column: Any) -> tuple[IntArray, IntArray]:
    """(offsets from 0, values) of a pyarrow ListArray, slicing offset handled."""
    off = column.offsets.to_numpy().astype(np.int64)
    values = column.values.to_numpy(zero_copy_only=False)[off[0]:off[-1]].astype(np.int64)
    return off - off[0], values


def _parse_time(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


@dataclass(frozen=True)
class PlannedMove:
    """One move as the view needs it (plain data; from ``plan.json`` or a :class:`Move`)."""

    topic: str
    partition: int
    current: tuple[int, ...] | None
    target: tuple[int, ...]
    allow_rf_change: bool = False


def moves_of(plan: ReassignmentPlan) -> list[PlannedMove]:
    return [
        PlannedMove(m.topic, m.partition, m.current_replicas, m.target_replicas, m.allow_rf_change)
        for m in plan.moves
    ]


def read_plan_moves(plan_file: str | Path) -> list[PlannedMove]:
    """The moves of a ``plan.json`` (our format) read as plain JSON, checked for shape only.

    ``plan_io.read_plan`` validates every move with pydantic (four times slower on 100k moves);
    the report reads what ``write_plan_dir`` wrote. A file that is not a plan fails here with
    the entry named.
    """
    data = json.loads(Path(plan_file).read_text(encoding="utf-8"))
    moves = data.get("moves") if isinstance(data, dict) else None
    if not isinstance(moves, list):
        raise ValueError(f"{plan_file} is not a plan: it has no \"moves\" list")
    out = []
    for i, m in enumerate(moves):
        try:
            current = m.get("current_replicas")
            out.append(
                PlannedMove(
                    str(m["topic"]),
                    int(m["partition"]),
                    tuple(int(b) for b in current) if current is not None else None,
                    tuple(int(b) for b in m["target_replicas"]),
                    bool(m.get("allow_rf_change", False)),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"{plan_file}: moves[{i}] is not a move ({e!r}): {str(m)[:200]}") from None
    return out


@dataclass(frozen=True)
class RfChange:
    partition: str
    replicas_before: tuple[int, ...]
    replicas_after: tuple[int, ...]
    allowed: bool


@dataclass
class PlanView:
    """Per-broker load before and after a plan, and where its replicas go."""

    brokers: list[int]
    racks: dict[int, str | None]
    replicas_before: Counter[int]
    replicas_after: Counter[int]
    leaders_before: Counter[int]
    leaders_after: Counter[int]
    #: ``None`` when the snapshot has no replica sizes.
    bytes_before: Counter[int] | None
    bytes_after: Counter[int] | None
    #: (from broker, to broker) -> replicas; :data:`NEW_REPLICA` / :data:`DROPPED_REPLICA` ends.
    matrix: Counter[tuple[int, int]]
    #: Replica moves (copies to a new broker) per topic.
    topic_moves: Counter[str]
    partitions_moved: int
    replica_moves: int
    leader_changes: int
    #: ``None`` when the snapshot has no replica sizes.
    bytes_to_move: int | None
    rf_changes: list[RfChange] = field(default_factory=list)
    #: Moves naming a partition the snapshot does not have.
    unknown_partitions: list[str] = field(default_factory=list)
    removed: tuple[int, ...] = ()
    added: tuple[int, ...] = ()

    def rack_of(self, broker: int) -> str | None:
        return self.racks.get(broker)

    def rack_names(self) -> list[str | None]:
        return sorted({self.racks.get(b) for b in self.brokers}, key=_rack_key)

    def broker_status(self, broker: int) -> str:
        """``removed`` / ``added`` (by the request), ``unregistered`` (named by replicas only) or ``""``."""
        if broker in self.removed:
            return "removed"
        if broker in self.added:
            return "added"
        if broker not in self.racks:
            return "unregistered"
        return ""

    def broker_traffic(self) -> Counter[int]:
        """Replicas each broker sends plus receives."""
        out: Counter[int] = Counter()
        for (src, dst), n in self.matrix.items():
            if src >= 0:
                out[src] += n
            if dst >= 0:
                out[dst] += n
        return out


def _rack_key(rack: str | None) -> tuple[bool, str]:
    return (rack is None, rack or "")


def plan_view(
    assignment: Assignment,
    moves: Sequence[PlannedMove],
    *,
    removed: Iterable[int] = (),
    added: Iterable[int] = (),
) -> PlanView:
    """Apply ``moves`` to ``assignment`` and count what changes (see the module doc)."""
    replicas_before, leaders_before, bytes_before = assignment.loads()
    has_sizes = assignment.has_sizes
    info = assignment.lookup((m.topic, m.partition) for m in moves)
    replicas_after = Counter(replicas_before)
    leaders_after = Counter(leaders_before)
    bytes_after = Counter(bytes_before)
    matrix: Counter[tuple[int, int]] = Counter()
    topic_moves: Counter[str] = Counter()
    rf_changes: list[RfChange] = []
    unknown: list[str] = []
    replica_moves = leader_changes = bytes_moved = 0
    for m in moves:
        found = info.get((m.topic, m.partition))
        if found is None:
            unknown.append(f"{m.topic}-{m.partition}")
            continue
        snap_target, size = found
        current = m.current if m.current is not None else snap_target
        size = max(size, 0)
        cur_set = set(current)
        tgt_set = set(m.target)
        adding = [b for b in m.target if b not in cur_set]
        removing = [b for b in current if b not in tgt_set]
        for b in removing:
            replicas_after[b] -= 1
            bytes_after[b] -= size
        for b in adding:
            replicas_after[b] += 1
            bytes_after[b] += size
        if current and m.target and current[0] != m.target[0]:
            leader_changes += 1
            leaders_after[current[0]] -= 1
            leaders_after[m.target[0]] += 1
        for i in range(max(len(adding), len(removing))):
            src = removing[i] if i < len(removing) else NEW_REPLICA
            dst = adding[i] if i < len(adding) else DROPPED_REPLICA
            matrix[(src, dst)] += 1
        replica_moves += len(adding)
        bytes_moved += size * len(adding)
        if adding:
            topic_moves[m.topic] += len(adding)
        if len(current) != len(m.target):
            rf_changes.append(RfChange(f"{m.topic}-{m.partition}", tuple(current), m.target, m.allow_rf_change))
    brokers = sorted(set(assignment.brokers()) | {b for pair in matrix for b in pair if b >= 0})
    return PlanView(
        brokers=brokers,
        racks=dict(assignment.racks),
        replicas_before=replicas_before,
        replicas_after=replicas_after,
        leaders_before=leaders_before,
        leaders_after=leaders_after,
        bytes_before=bytes_before if has_sizes else None,
        bytes_after=bytes_after if has_sizes else None,
        matrix=matrix,
        topic_moves=topic_moves,
        partitions_moved=len(moves) - len(unknown),
        replica_moves=replica_moves,
        leader_changes=leader_changes,
        bytes_to_move=bytes_moved if has_sizes else None,
        rf_changes=rf_changes,
        unknown_partitions=unknown,
        removed=tuple(sorted(set(removed))),
        added=tuple(sorted(set(added))),
    )


def request_brokers(request: Mapping[str, Any], assignment_brokers: Iterable[int],
                    replicas_before: Mapping[int, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(removed, added) brokers of a plan request (``metrics.json``'s ``request``).

    ``add-brokers`` without a list adds every broker holding no replica, as the planner does.
    """
    goal = request.get("goal")
    listed = tuple(int(b) for b in request.get("brokers") or ())
    if goal == "remove-brokers":
        return listed, ()
    if goal == "add-brokers":
        return (), listed or tuple(b for b in assignment_brokers if not replicas_before.get(b))
    return (), ()


@dataclass(frozen=True)
class MatrixTable:
    """A matrix ready to draw: row and column labels and counts (rows: from, columns: to)."""

    rows: list[str]
    columns: list[str]
    counts: list[list[int]]
    title: str

    @property
    def total(self) -> int:
        return sum(sum(r) for r in self.counts)


NEW_LABEL = "(new replica)"
DROPPED_LABEL = "(dropped)"
OTHER_LABEL = "other brokers"


def aggregate_matrix(
    matrix: Mapping[tuple[int, int], int],
    group_of: Callable[[int], str],
    order: Sequence[str],
    *,
    title: str,
) -> MatrixTable:
    """Fold a broker matrix into groups (``group_of(broker)``), rows and columns in ``order``.

    Rows get :data:`NEW_LABEL` and columns :data:`DROPPED_LABEL` only when replicas come from
    or go there. Groups of ``order`` nobody sends to or receives from are kept (a rack that
    moves nothing is information); groups missing from ``order`` are appended.
    """
    counts: Counter[tuple[str, str]] = Counter()
    for (src, dst), n in matrix.items():
        s = NEW_LABEL if src == NEW_REPLICA else group_of(src)
        d = DROPPED_LABEL if dst == DROPPED_REPLICA else group_of(dst)
        counts[(s, d)] += n
    groups = list(order)
    for s, d in counts:
        for g in (s, d):
            if g not in groups and g not in (NEW_LABEL, DROPPED_LABEL):
                groups.append(g)
    rows = groups + ([NEW_LABEL] if any(s == NEW_LABEL for s, _ in counts) else [])
    cols = groups + ([DROPPED_LABEL] if any(d == DROPPED_LABEL for _, d in counts) else [])
    return MatrixTable(rows, cols, [[counts.get((r, c), 0) for c in cols] for r in rows], title)


def rack_label(rack: str | None) -> str:
    return rack if rack is not None else "(no rack)"


def broker_matrix(view: PlanView, *, max_brokers: int = 40) -> MatrixTable:
    """The broker-to-broker matrix: every broker up to ``max_brokers``, else the
    ``max_brokers - 1`` brokers with the most traffic and one ``other brokers`` row/column."""
    brokers = view.brokers
    if len(brokers) <= max_brokers:
        names = {b: str(b) for b in brokers}
        return aggregate_matrix(view.matrix, names.__getitem__, [names[b] for b in brokers],
                                title="replicas moved, broker to broker")
    traffic = view.broker_traffic()
    top = sorted(sorted(traffic, key=lambda b: (-traffic[b], b))[: max_brokers - 1])
    names = {b: str(b) for b in top}
    order = [names[b] for b in top] + [OTHER_LABEL]
    return aggregate_matrix(
        view.matrix,
        lambda b: names.get(b, OTHER_LABEL),
        order,
        title=f"replicas moved between the {len(top)} busiest of {len(brokers)} brokers (the rest: {OTHER_LABEL})",
    )


def rack_matrix(view: PlanView) -> MatrixTable:
    """The matrix folded into racks (replicas moving inside a rack sit on the diagonal)."""
    order = [rack_label(r) for r in view.rack_names()]
    return aggregate_matrix(view.matrix, lambda b: rack_label(view.racks.get(b)), order,
                            title="replicas moved, rack to rack")


def rack_loads(view: PlanView) -> list[dict[str, Any]]:
    """Per rack: brokers, and replicas / leaders / bytes before and after (rows in rack order)."""
    out = []
    for rack in view.rack_names():
        members = [b for b in view.brokers if view.racks.get(b) == rack]
        row: dict[str, Any] = {"rack": rack_label(rack), "brokers": len(members)}
        for name, before, after in (
            ("replicas", view.replicas_before, view.replicas_after),
            ("leaders", view.leaders_before, view.leaders_after),
            ("bytes", view.bytes_before, view.bytes_after),
        ):
            if before is None or after is None:
                row[f"{name}_before"] = row[f"{name}_after"] = None
            else:
                row[f"{name}_before"] = sum(before[b] for b in members)
                row[f"{name}_after"] = sum(after[b] for b in members)
        out.append(row)
    return out
