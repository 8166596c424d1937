"""What a reviewer sees of a plan: per-broker load before and after, the moves broker to broker.

Pure and fast enough for a million replicas (numpy over flat columns, no pydantic object per
partition): :func:`assignment_from_snapshot` takes a :class:`ClusterSnapshot`,
:func:`read_assignment` reads a snapshot directory (``core.records.snapshot_io`` format) straight from
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

:func:`broker_table` is the text form of a snapshot's per-broker load, for a terminal or a log.
Pure like the planner: no Airflow, Kafka client or PySpark import.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow.parquet as pq

from airflow_kafka_reassign.core.vocabulary.loads import broker_loads
from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot, ReassignmentPlan
from airflow_kafka_reassign.core.vocabulary.units import format_bytes

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

    def rows_of(self, keys: Iterable[tuple[str, int]]) -> list[int | None]:
        """The row of each ``(topic, partition)`` of ``keys`` (``None``: not in the snapshot)."""
        index = dict(zip(zip(self.topics, self.partitions.tolist(), strict=True), range(len(self.topics)), strict=True))
        return [index.get(k) for k in keys]


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
    # ParquetFile, not read_table: read_table's first call imports pyarrow.dataset (2 s of CPU)
    brokers = pq.ParquetFile(src / "brokers.parquet").read().to_pydict()
    racks = dict(zip(brokers["id"], brokers["rack"], strict=True))
    table = pq.ParquetFile(src / "partitions.parquet").read(
        columns=["topic", "partition", "replicas", "removing_replicas", "replica_sizes"]
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
            valid = _valid(size_col)[starts]
            sizes[starts[valid]] = maxima[valid]

    # in-flight reassignments: drop the removing replicas (the plan moves from the target)
    r_off, r_val = _list_column(table.column("removing_replicas").chunk(0))
    rows = np.flatnonzero(np.diff(r_off) > 0)
    if len(rows):
        keep = np.ones(len(values), dtype=bool)
        for row in rows.tolist():
            gone_set = set(r_val[r_off[row]:r_off[row + 1]].tolist())
            for j in range(offsets[row], offsets[row + 1]):
                if values[j] in gone_set:
                    keep[j] = False
        cum = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
        offsets = cum[offsets]
        values = values[keep]
    return Assignment(
        racks=racks,
        topics=table.column("topic").to_pylist(),
        partitions=_ints(table.column("partition").chunk(0)),
        offsets=offsets,
        replicas=values,
        sizes=sizes,
        cluster_id=meta.get("cluster_id"),
        taken_at=_parse_time(meta.get("taken_at")),
    )


def _ints(array: Any) -> IntArray:
    """A pyarrow integer array without nulls as int64 numpy, read from its buffer
    (``Array.to_numpy`` imports pandas: seconds of CPU for nothing)."""
    if array.null_count:
        raise ValueError(f"unexpected null in a {array.type} column of the snapshot")
    width = array.type.bit_width // 8
    data = array.buffers()[1]
    if data is None or len(array) == 0:
        return np.zeros(0, dtype=np.int64)
    out = np.frombuffer(data, dtype=np.dtype(f"<i{width}"), count=len(array), offset=array.offset * width)
    return out.astype(np.int64)


def _valid(array: Any) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Validity of each entry of a pyarrow array (from its bitmap)."""
    bitmap = array.buffers()[0]
    if bitmap is None or array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[array.offset:array.offset + len(array)].astype(bool)


def _list_column(column: Any) -> tuple[IntArray, IntArray]:
    """(offsets from 0, values) of a pyarrow ListArray of integers, slicing offset handled."""
    off = _ints(column.offsets)
    values = _ints(column.values)[off[0]:off[-1]]
    return off - off[0], values


def _parse_time(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


class PlannedMove(NamedTuple):
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
            move = PlannedMove(
                m["topic"],
                m["partition"],
                tuple(current) if current is not None else None,
                tuple(m["target_replicas"]),
                m.get("allow_rf_change", False) is True,
            )
            if (
                type(move.topic) is not str
                or type(move.partition) is not int
                or not move.target
                or not all(type(b) is int for b in move.target)
                or (move.current is not None and not all(type(b) is int for b in move.current))
            ):
                raise TypeError("topic must be a string, partition and broker ids integers, target_replicas not empty")
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{plan_file}: moves[{i}] is not a move ({e}): {str(m)[:200]}") from None
        out.append(move)
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



def _after(
    before: Counter[int], came: list[int], gone: list[int],
    came_weights: list[int] | None = None, gone_weights: list[int] | None = None,
) -> Counter[int]:
    """``before`` plus what ``came`` minus what ``gone`` (each weighted, or 1)."""
    out = Counter(before)
    for ids, weights, sign in ((came, came_weights, 1), (gone, gone_weights, -1)):
        if not ids:
            continue
        arr = np.asarray(ids, dtype=np.int64)
        counts = np.bincount(arr, weights=None if weights is None else np.asarray(weights, dtype=np.float64))
        for b in np.unique(arr).tolist():
            out[b] += sign * int(round(float(counts[b])))
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
    rows = assignment.rows_of((m.topic, m.partition) for m in moves)
    flat = assignment.replicas.tolist()
    offsets = assignment.offsets.tolist()
    sizes = assignment.sizes.tolist()
    # per-replica events, counted at the end (C-speed Counter / bincount, not one update each)
    gone: list[int] = []
    gone_bytes: list[int] = []
    came: list[int] = []
    came_bytes: list[int] = []
    lead_gone: list[int] = []
    lead_came: list[int] = []
    pairs: list[tuple[int, int]] = []
    topic_moves: Counter[str] = Counter()
    rf_changes: list[RfChange] = []
    unknown: list[str] = []
    bytes_moved = 0
    for m, row in zip(moves, rows, strict=True):
        if row is None:
            unknown.append(f"{m.topic}-{m.partition}")
            continue
        current = m.current if m.current is not None else tuple(flat[offsets[row]:offsets[row + 1]])
        target = m.target
        if current[0] != target[0]:
            lead_gone.append(current[0])
            lead_came.append(target[0])
        if len(current) == len(target) and set(current) == set(target):
            continue  # a new replica order only
        cur_set = set(current)
        tgt_set = set(target)
        adding = [b for b in target if b not in cur_set]
        removing = [b for b in current if b not in tgt_set]
        size = sizes[row] if sizes[row] > 0 else 0
        gone += removing
        came += adding
        if size:
            gone_bytes += [size] * len(removing)
            came_bytes += [size] * len(adding)
            bytes_moved += size * len(adding)
        else:
            gone_bytes += [0] * len(removing)
            came_bytes += [0] * len(adding)
        if len(adding) == len(removing):
            pairs += zip(removing, adding, strict=True)
        else:
            pairs += (
                (removing[i] if i < len(removing) else NEW_REPLICA, adding[i] if i < len(adding) else DROPPED_REPLICA)
                for i in range(max(len(adding), len(removing)))
            )
            rf_changes.append(RfChange(f"{m.topic}-{m.partition}", tuple(current), target, m.allow_rf_change))
        if adding:
            topic_moves[m.topic] += len(adding)
    replicas_after = _after(replicas_before, came, gone)
    leaders_after = _after(leaders_before, lead_came, lead_gone)
    bytes_after = _after(bytes_before, came, gone, came_bytes, gone_bytes)
    matrix: Counter[tuple[int, int]] = Counter(pairs)
    replica_moves = len(came)
    leader_changes = len(lead_came)
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
    column_of: Callable[[int], str] | None = None,
    column_order: Sequence[str] | None = None,
) -> MatrixTable:
    """Fold a broker matrix into groups: row ``group_of(from broker)``, column
    ``column_of(to broker)`` (default: ``group_of``), rows in ``order``, columns in
    ``column_order`` (default: ``order``).

    Rows get :data:`NEW_LABEL` and columns :data:`DROPPED_LABEL` only when replicas come from
    or go there. Groups of the orders that nobody sends to or receives from are kept (a rack
    that moves nothing is information); groups missing from them are appended.
    """
    col_of = column_of or group_of
    counts: Counter[tuple[str, str]] = Counter()
    for (src, dst), n in matrix.items():
        s = NEW_LABEL if src == NEW_REPLICA else group_of(src)
        d = DROPPED_LABEL if dst == DROPPED_REPLICA else col_of(dst)
        counts[(s, d)] += n
    rows = list(order)
    cols = list(column_order if column_order is not None else order)
    for s, d in counts:
        if s not in rows and s != NEW_LABEL:
            rows.append(s)
        if d not in cols and d != DROPPED_LABEL:
            cols.append(d)
    if any(s == NEW_LABEL for s, _ in counts):
        rows.append(NEW_LABEL)
    if any(d == DROPPED_LABEL for _, d in counts):
        cols.append(DROPPED_LABEL)
    return MatrixTable(rows, cols, [[counts.get((r, c), 0) for c in cols] for r in rows], title)


def rack_label(rack: str | None) -> str:
    return rack if rack is not None else "(no rack)"


def broker_matrix(view: PlanView, *, max_brokers: int = 40) -> MatrixTable:
    """The broker-to-broker matrix.

    Up to ``max_brokers`` brokers: every broker is a row and a column. Above: the rows are the
    ``max_brokers - 1`` brokers sending the most replicas and the columns the ``max_brokers - 1``
    receiving the most (separately: a scale-out's columns are the new brokers), the rest folded
    into one ``other brokers`` row and column.
    """
    brokers = view.brokers
    if len(brokers) <= max_brokers:
        names = {b: str(b) for b in brokers}
        return aggregate_matrix(view.matrix, names.__getitem__, [names[b] for b in brokers],
                                title="replicas moved, broker to broker")
    sent: Counter[int] = Counter()
    received: Counter[int] = Counter()
    for (src, dst), n in view.matrix.items():
        if src >= 0:
            sent[src] += n
        if dst >= 0:
            received[dst] += n

    def top(counter: Counter[int]) -> list[int]:
        return sorted(sorted(counter, key=lambda b: (-counter[b], b))[: max_brokers - 1])

    senders, receivers = top(sent), top(received)
    row_names = {b: str(b) for b in senders}
    col_names = {b: str(b) for b in receivers}
    rows_other = len(sent) > len(senders)
    cols_other = len(received) > len(receivers)
    return aggregate_matrix(
        view.matrix,
        lambda b: row_names.get(b, OTHER_LABEL),
        [row_names[b] for b in senders] + ([OTHER_LABEL] if rows_other else []),
        column_of=lambda b: col_names.get(b, OTHER_LABEL),
        column_order=[col_names[b] for b in receivers] + ([OTHER_LABEL] if cols_other else []),
        title=f"replicas moved: the {len(senders)} brokers sending and the {len(receivers)} receiving the most, "
              f"of {len(brokers)}",
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


def broker_table(snapshot: ClusterSnapshot, *, title: str | None = None) -> str:
    """A fixed-width table of a snapshot: broker, rack, replicas, leaders, bytes, with a max-min line."""
    loads = broker_loads(snapshot)
    racks = snapshot.racks
    lines = [title] if title else []
    lines.append(f"{'broker':>6}  {'rack':<8} {'replicas':>8} {'leaders':>8} {'bytes':>10}")
    for b, load in loads.items():
        rack = racks.get(b) or ("-" if b in racks else "(gone)")
        lines.append(
            f"{b:>6}  {rack:<8} {load['replicas']:>8} {load['leaders']:>8} {format_bytes(load['bytes']):>10}"
        )
    if loads:
        spread = {k: max(v[k] for v in loads.values()) - min(v[k] for v in loads.values())
                  for k in ("replicas", "leaders")}
        lines.append(f"{'max-min':>6}  {'':<8} {spread['replicas']:>8} {spread['leaders']:>8}")
    return "\n".join(lines)
