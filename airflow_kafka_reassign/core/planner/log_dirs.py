"""The goals on log dirs (JBOD): empty given log dirs (``remove-disks``) and even out the bytes between the log dirs
of each broker (``rebalance-disks``).

Planned from a snapshot and the brokers' log dirs (:class:`LogDirTable`, ``log_dirs.json`` beside the snapshot:
DescribeLogDirs of every partition: each dir's volume, offline and cordoned flags, and the replicas it holds). The
plan is Kafka's reassignment format with ``log_dirs`` (KIP-113): a replica moved between the log dirs of its broker
is a move whose replicas stay and whose ``log_dirs`` pins that replica's new dir (execution sends
AlterReplicaLogDirs); a replica that must leave its broker is an ordinary reassignment (``"any"``: the receiving
broker picks its log dir, never a cordoned one on Kafka 4.3+). Each move also records the dir every moved replica
leaves (``current_log_dirs``), so that the plan's rollback pins it back there.

``remove-disks``: each replica of a removed dir (largest first) goes to the log dir of the same broker whose volume
has the most usable bytes after what the plan already put there, if that volume stays within ``disk_cap`` of its
size; else to another broker (the same rack first, never below ``min(RF, racks)`` racks with ``rack_aware``; the most
room first, each broker's room counted the same way); a replica that fits nowhere refuses the plan, naming it and
the fix (nothing is sent). Cruise Control's ``remove_disks`` moves only within the broker; Strimzi drives it.

``rebalance-disks``: within each broker, replicas move from the log dir most above its share of the broker's bytes
(by volume size) to the one most below, each time the replica that leaves the two closest to their shares, until
every dir is within ``disk_tolerance`` of its volume from its share (or no replica brings the two closer).

Dirs on one filesystem report the same volume (KIP-827 reports each log dir's filesystem): they are taken as one
volume (:data:`~airflow_kafka_reassign.core.vocabulary.ports.SAME_VOLUME`), whose room a move into any of them uses.

Pure: imports no Airflow, no Kafka client, no PySpark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pydantic import Field

from airflow_kafka_reassign.core.planner.goals import LogDirReport, PlanRequest, PlanResult
from airflow_kafka_reassign.core.planner.metrics import assignment_metrics, partition_size, target_of
from airflow_kafka_reassign.core.vocabulary.models import (
    ANY_LOG_DIR,
    ClusterSnapshot,
    Move,
    PartitionState,
    ReassignmentPlan,
    TopicPartition,
    _Frozen,
)
from airflow_kafka_reassign.core.vocabulary.ports import SAME_VOLUME, LogDirs
from airflow_kafka_reassign.core.vocabulary.units import format_bytes
from airflow_kafka_reassign.exceptions import ConfigurationError

#: The brokers' log dirs beside a snapshot (goals on log dirs).
LOG_DIRS_FILE = "log_dirs.json"
LOG_DIRS_FORMAT = 1


class DirState(_Frozen):
    """One log dir of one broker: its volume (``None``: not reported, Kafka < 3.3), flags, and what it holds as
    ``(topic, partition, bytes)``: current replicas and the future replicas of intra-broker moves into it."""

    path: str
    total_bytes: int | None = None
    usable_bytes: int | None = None
    offline: bool = False
    cordoned: bool = False
    replicas: tuple[tuple[str, int, int], ...] = ()
    futures: tuple[tuple[str, int, int], ...] = ()

    def held_bytes(self) -> int:
        return sum(size for _, _, size in self.replicas)


class LogDirTable(_Frozen):
    """Every answering broker's log dirs (in the broker's order) with the replicas each holds: what the goals on log
    dirs plan from, written beside the snapshot (:data:`LOG_DIRS_FILE`)."""

    format_version: int = LOG_DIRS_FORMAT
    brokers: dict[int, tuple[DirState, ...]] = Field(default_factory=dict)
    #: live brokers that did not answer DescribeLogDirs
    unanswered: tuple[int, ...] = ()

    @classmethod
    def of(cls, log_dirs: LogDirs) -> LogDirTable:
        """From :meth:`ClusterAdmin.log_dirs(None) <airflow_kafka_reassign.core.vocabulary.ports.ClusterAdmin.log_dirs>`."""
        return cls(brokers={
            b: tuple(DirState(path=d.path, total_bytes=d.total_bytes, usable_bytes=d.usable_bytes, offline=d.offline,
                              cordoned=bool(d.cordoned),
                              replicas=tuple((r.topic, r.partition, r.size) for r in d.replicas if not r.future),
                              futures=tuple((r.topic, r.partition, r.size) for r in d.replicas if r.future))
                     for d in dirs)
            for b, dirs in sorted(log_dirs.dirs.items())}, unanswered=tuple(log_dirs.unanswered))

    def dir(self, broker: int, path: str) -> DirState | None:
        return next((d for d in self.brokers.get(broker, ()) if d.path == path), None)

    def write(self, directory: str | Path) -> Path:
        path = Path(directory) / LOG_DIRS_FILE
        path.write_text(self.model_dump_json(), encoding="utf-8")
        return path

    @classmethod
    def read(cls, directory: str | Path) -> LogDirTable:
        path = Path(directory) / LOG_DIRS_FILE
        if not path.is_file():
            raise ConfigurationError(
                f"{directory} has no {LOG_DIRS_FILE}: the goals on log dirs plan from the brokers' log dirs, which "
                "PlanReassignmentOperator writes beside the snapshot for them; take the snapshot with that goal (or with "
                "`airflow-kafka-reassign snapshot --log-dirs`)")
        table = cls.model_validate_json(path.read_bytes())
        if table.format_version != LOG_DIRS_FORMAT:
            raise ConfigurationError(f"{path} has format_version {table.format_version}; this version reads "
                                     f"{LOG_DIRS_FORMAT}: take the snapshot again")
        return table


def _label(broker: int, path: str) -> str:
    return f"{broker}:{path}"


def _sample(items: Sequence[str], limit: int = 5) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def check_dir_removals(table: LogDirTable, brokers: Iterable[int], removals: Sequence[tuple[int, str]]) -> None:
    """Refuse (:class:`ConfigurationError`, naming it and the fix) a removal of a broker the cluster does not have, of
    a broker that did not report its log dirs, of a path that is not one of the broker's log dirs (another broker's
    included) or of an offline dir, before anything is planned or sent."""
    known = set(brokers)
    owner = {d.path: b for b, dirs in table.brokers.items() for d in dirs}
    for b, path in removals:
        if b not in known:
            raise ConfigurationError(
                f"cannot remove log dir {path} of broker {b}: broker {b} is not in the cluster (its brokers: "
                f"{sorted(known)}); check the broker id. Nothing was sent")
        if b not in table.brokers:
            raise ConfigurationError(
                f"cannot remove log dir {path} of broker {b}: broker {b} did not report its log dirs (DescribeLogDirs; "
                "down or unreachable); start it, then plan again. Nothing was sent")
        mine = [d.path for d in table.brokers[b]]
        if path not in mine:
            other = owner.get(path)
            where = (f"it is a log dir of broker {other}: write \"{other}:{path}\"" if other is not None
                     else "use a path exactly as DescribeLogDirs reports it")
            raise ConfigurationError(
                f"cannot remove log dir {path} of broker {b}: broker {b} has no such log dir (its log dirs: {mine}); "
                f"{where}. Nothing was sent")
        d = table.dir(b, path)
        if d is not None and d.offline:
            raise ConfigurationError(
                f"cannot remove log dir {path} of broker {b}: it is offline (the broker reports an error for it, "
                "KAFKA_STORAGE_ERROR for a failed disk): its replicas cannot be copied from it. Reassign its "
                "partitions to other brokers from their other replicas, or bring the dir back first. Nothing was sent")


class _Room:
    """Each broker's volumes: bytes a new replica may still take (usable bytes above ``1 - disk_cap`` of the volume),
    less what the plan puts there; ``None``: the broker does not report space (not bounded)."""

    def __init__(self, table: LogDirTable, cap: float) -> None:
        self.volume: dict[tuple[int, str], int] = {}
        self.room: dict[tuple[int, int], int | None] = {}
        for b, dirs in table.brokers.items():
            kept: list[tuple[int, int, int]] = []  # (total, usable, volume index)
            for d in dirs:
                if d.total_bytes is None or d.usable_bytes is None:
                    self.volume[(b, d.path)] = -1 - len(self.volume)
                    self.room[(b, self.volume[(b, d.path)])] = None
                    continue
                same = next((k for t, u, k in kept if t == d.total_bytes
                             and abs(u - d.usable_bytes) <= SAME_VOLUME * t), None)
                if same is None:
                    same = len(kept)
                    kept.append((d.total_bytes, d.usable_bytes, same))
                    self.room[(b, same)] = int(d.usable_bytes - (1 - cap) * d.total_bytes)
                else:  # one volume: the least usable kept
                    room = int(d.usable_bytes - (1 - cap) * d.total_bytes)
                    self.room[(b, same)] = min(room, self.room[(b, same)] or room)
                self.volume[(b, d.path)] = same
        #: the room before the plan
        self.initial = dict(self.room)

    def of(self, broker: int, path: str) -> int | None:
        return self.room[(broker, self.volume[(broker, path)])]

    def fits(self, broker: int, path: str, size: int) -> bool:
        room = self.of(broker, path)
        return room is None or room >= size

    def take(self, broker: int, path: str, size: int) -> None:
        key = (broker, self.volume[(broker, path)])
        room = self.room[key]
        if room is not None:
            self.room[key] = room - size


def _eligible(table: LogDirTable, broker: int, exclude: Iterable[str] = ()) -> list[str]:
    """The log dirs of ``broker`` a replica may move into: online, not cordoned, not ``exclude``-d."""
    skip = set(exclude)
    return [d.path for d in table.brokers.get(broker, ()) if not d.offline and not d.cordoned and d.path not in skip]


class _Plan:
    """The moves being built: new replica sets (cross-broker) and pinned log dirs (intra-broker) per partition."""

    def __init__(self, parts: Mapping[TopicPartition, PartitionState]) -> None:
        self.parts = parts
        self.targets: dict[TopicPartition, list[int]] = {}
        self.pins: dict[TopicPartition, dict[int, str]] = {}
        #: the dir each moved replica leaves (``current_log_dirs``: the rollback pins it back there)
        self.sources: dict[TopicPartition, dict[int, str]] = {}
        self.intra = self.intra_bytes = self.cross = self.cross_bytes = 0
        self.after: dict[str, int] = {}

    def target(self, tp: TopicPartition) -> list[int]:
        return self.targets.get(tp) or list(target_of(self.parts[tp]))

    def pin(self, tp: TopicPartition, broker: int, src: str, dst: str, size: int) -> None:
        self.pins.setdefault(tp, {})[broker] = dst
        self.sources.setdefault(tp, {})[broker] = src
        self.intra += 1
        self.intra_bytes += size
        self.after[_label(broker, src)] -= size
        self.after[_label(broker, dst)] = self.after.get(_label(broker, dst), 0) + size

    def replace(self, tp: TopicPartition, broker: int, src: str, new: int, where: str, size: int) -> None:
        reps = self.target(tp)
        reps[reps.index(broker)] = new
        self.targets[tp] = reps
        self.sources.setdefault(tp, {})[broker] = src
        self.cross += 1
        self.cross_bytes += size
        self.after[_label(broker, src)] -= size
        self.after[_label(new, where)] = self.after.get(_label(new, where), 0) + size

    def moves(self) -> list[Move]:
        out = []
        for tp in sorted({*self.targets, *self.pins}):
            current = self.parts[tp].replicas
            target = tuple(self.targets.get(tp, current))
            pins = self.pins.get(tp, {})
            dirs = tuple(pins.get(b, ANY_LOG_DIR) for b in target) if pins else None
            sources = self.sources.get(tp, {})
            before = tuple(sources.get(b, ANY_LOG_DIR) for b in current) if sources else None
            out.append(Move(topic=tp.topic, partition=tp.partition, current_replicas=current, target_replicas=target,
                            log_dirs=dirs, current_log_dirs=before))
        return out


def _racks_ok(racks: Mapping[int, str | None], before: Sequence[int], after: Sequence[int], n_racks: int) -> bool:
    """``after`` spreads over at least as many racks as ``min(RF, racks)`` asks, or as ``before`` did if fewer."""
    if n_racks <= 1:
        return True
    spread = len({racks.get(b) for b in after})
    return spread >= min(len({racks.get(b) for b in before}), len(after), n_racks)


def _remove_disks(snapshot: ClusterSnapshot, table: LogDirTable, request: PlanRequest) -> tuple[_Plan, int, list[str]]:
    removals = request.dir_removals()
    check_dir_removals(table, snapshot.broker_ids, removals)
    parts = snapshot.partition_map()
    racks = {b.id: (b.rack if request.rack_aware else None) for b in snapshot.brokers}
    n_racks = len({r for r in racks.values() if r is not None})
    room = _Room(table, request.disk_cap)
    plan = _Plan(parts)
    plan.after = {_label(b, d.path): d.held_bytes() for b, dirs in table.brokers.items() for d in dirs}
    removed_by: dict[int, set[str]] = {}
    for b, path in removals:
        removed_by.setdefault(b, set()).add(path)
    warnings: list[str] = []
    whole = {b for b, dirs in table.brokers.items() if not _eligible(table, b)}
    nowhere: list[tuple[int, str, TopicPartition, int]] = []
    leaving: dict[int, list[int]] = {}
    for b, path in sorted(removals):
        d = table.dir(b, path)
        assert d is not None
        if d.futures:
            tp = TopicPartition(*d.futures[0][:2])
            raise ConfigurationError(
                f"cannot remove log dir {path} of broker {b}: an intra-broker move into it is in flight ({tp}, "
                f"{len(d.futures)} in all, AlterReplicaLogDirs by someone else); wait for it to finish or move the "
                "replica elsewhere, then plan again. Nothing was sent")
        moving_out = {(t, p) for other in table.brokers[b] if other.path != path for t, p, _ in other.futures}
        for topic, partition, size in sorted(d.replicas, key=lambda r: (-r[2], r[0], r[1])):
            tp = TopicPartition(topic, partition)
            p = parts.get(tp)
            if p is None:
                warnings.append(f"{tp} in log dir {path} of broker {b} is not in the snapshot (created or deleted "
                                "since): left alone")
                continue
            if p.reassigning:
                raise ConfigurationError(
                    f"partition {tp} in log dir {path} of broker {b} is being reassigned ({list(p.original_replicas)} -> "
                    f"{list(p.target_replicas)}); wait for the reassignment to finish or cancel it, then plan again. "
                    "Nothing was sent")
            if (topic, partition) in moving_out:
                warnings.append(f"{tp} is already being moved out of log dir {path} of broker {b} (AlterReplicaLogDirs "
                                "in flight): left to that move")
                continue
            leaving.setdefault(b, []).append(size)
            dirs = [x for x in _eligible(table, b, removed_by[b]) if room.fits(b, x, size)]
            if dirs:
                best = max(dirs, key=lambda x: (room.of(b, x) or 0, -plan.after.get(_label(b, x), 0)))
                room.take(b, best, size)
                plan.pin(tp, b, path, best, size)
                continue
            reps = plan.target(tp)
            options = []
            for c in snapshot.broker_ids:
                if c in reps or c in whole or c not in table.brokers:
                    continue
                after = [c if r == b else r for r in reps]
                if not _racks_ok(racks, reps, after, n_racks):
                    continue
                fit = [x for x in _eligible(table, c, removed_by.get(c, ())) if room.fits(c, x, size)]
                if fit:
                    x = max(fit, key=lambda x: room.of(c, x) or 0)
                    options.append((racks.get(c) != racks.get(b), -(room.of(c, x) or 0), c, x))
            if not options:
                nowhere.append((b, path, tp, size))
                continue
            _, _, c, x = min(options)
            room.take(c, x, size)
            plan.replace(tp, b, path, c, x, size)
    if nowhere:
        raise ConfigurationError(_nowhere(nowhere, table, removed_by, request.disk_cap))
    for b, paths in sorted(removed_by.items()):
        if not _eligible(table, b, paths) and leaving.get(b):
            warnings.append(f"broker {b} keeps no usable log dir: its {len(leaving[b])} replica(s) in {sorted(paths)} go "
                            "to other brokers")
    return plan, _cross_lower_bound(table, removed_by, leaving, room), warnings


def _nowhere(nowhere: Sequence[tuple[int, str, TopicPartition, int]], table: LogDirTable,
             removed_by: Mapping[int, set[str]], cap: float) -> str:
    parts = []
    for b in sorted({b for b, *_ in nowhere}):
        mine = [x for x in nowhere if x[0] == b]
        others = _eligible(table, b, removed_by[b])
        where = (f"its other log dirs {others} have no room for them within disk_cap={cap:g}" if others
                 else "they are in the broker's last usable log dir")
        parts.append(f"broker {b}: {len(mine)} replica(s) of {sorted({p for _, p, *_ in mine})} "
                     f"({_sample([f'{tp} {format_bytes(s)}' for _, _, tp, s in mine])}) have nowhere to go: {where}, "
                     "and no other broker can take them (each holds a replica of the partition already, is cordoned, "
                     "would break the rack spread, or lacks room)")
    return ("cannot empty the log dir(s): " + "; ".join(parts) + ". Nothing was sent. Add a log dir or free space on "
            "the broker, add brokers, or raise disk_cap; to take the broker out altogether, plan goal=remove-brokers")


def _cross_lower_bound(table: LogDirTable, removed_by: Mapping[int, set[str]], leaving: Mapping[int, list[int]],
                       room: _Room) -> int:
    """The fewest replicas any plan sends to other brokers: per broker, the bytes its other log dirs cannot hold (all
    their room at once, a relaxation), covered largest replica first. A broker reporting no space needs none."""
    total = 0
    for b, sizes in leaving.items():
        volumes = {room.volume[(b, x)] for x in _eligible(table, b, removed_by[b])}
        rooms = [room.initial[(b, v)] for v in volumes]
        if any(r is None for r in rooms):
            continue
        excess = sum(sizes) - sum(max(0, r or 0) for r in rooms)
        for size in sorted(sizes, reverse=True):
            if excess <= 0:
                break
            excess -= size
            total += 1
    return total


def _rebalance_disks(snapshot: ClusterSnapshot, table: LogDirTable, request: PlanRequest) -> tuple[_Plan, int, list[str]]:
    parts = snapshot.partition_map()
    room = _Room(table, request.disk_cap)
    plan = _Plan(parts)
    plan.after = {_label(b, d.path): d.held_bytes() for b, dirs in table.brokers.items() for d in dirs}
    warnings: list[str] = []
    for b, dirs in sorted(table.brokers.items()):
        usable = [d for d in dirs if not d.offline and not d.cordoned and d.total_bytes]
        if len(usable) < 2:
            continue
        held = {d.path: [(size, t, p) for t, p, size in d.replicas if (tp := TopicPartition(t, p)) in parts
                         and not parts[tp].reassigning and size > 0] for d in usable}
        cap = {d.path: float(d.total_bytes or 0) for d in usable}
        load = {d.path: float(sum(s for s, _, _ in held[d.path])) for d in usable}
        share = sum(load.values()) / sum(cap.values())
        moved: set[tuple[str, int]] = set()
        for _ in range(sum(len(v) for v in held.values())):
            gap = {x: load[x] - share * cap[x] for x in load}
            over = max(gap, key=lambda x: (gap[x] / cap[x], x))
            under = min(gap, key=lambda x: (gap[x] / cap[x], x))
            if gap[over] / cap[over] <= request.disk_tolerance and -gap[under] / cap[under] <= request.disk_tolerance:
                break
            g_over, g_under, c_over, c_under = gap[over], gap[under], cap[over], cap[under]
            worst = max(g_over / c_over, -g_under / c_under)
            # the deviation of the worse of the two once a replica of each size has moved
            after = {r: max(abs(g_over - r[0]) / c_over, abs(g_under + r[0]) / c_under) for r in held[over]
                     if (r[1], r[2]) not in moved}
            fits = [r for r, dev in after.items() if dev < worst]
            if not fits:
                break
            size, topic, partition = min(fits, key=lambda r: (after[r], -r[0], r[1], r[2]))
            if not room.fits(b, under, size):
                warnings.append(f"broker {b}: log dir {under} has no room within disk_cap={request.disk_cap:g} for "
                                f"{topic}-{partition} ({format_bytes(size)}): its dirs stay uneven")
                break
            room.take(b, under, size)
            tp = TopicPartition(topic, partition)
            plan.pin(tp, b, over, under, size)
            moved.add((topic, partition))
            held[over].remove((size, topic, partition))
            held[under].append((size, topic, partition))
            load[over] -= size
            load[under] += size
    return plan, 0, warnings


def _rows(snapshot: ClusterSnapshot,
          moved: Mapping[TopicPartition, Sequence[int]]) -> Iterable[tuple[str, Sequence[int], int, int | None]]:
    for p in snapshot.partitions:
        target = target_of(p)
        yield p.topic, moved.get(p.tp, target), len(target), partition_size(p.replica_sizes)


def plan_log_dirs(snapshot: ClusterSnapshot, table: LogDirTable, request: PlanRequest) -> PlanResult:
    """Plan a goal on log dirs (``remove-disks``, ``rebalance-disks``; see the module doc) for ``snapshot`` and the
    brokers' log dirs ``table``. Raises :class:`ConfigurationError` on input that cannot give a sound plan (a broker
    or log dir the cluster does not have, one of another broker, replicas with nowhere to go), before any move."""
    if request.goal == "remove-disks":
        plan, bound, warnings = _remove_disks(snapshot, table, request)
    elif request.goal == "rebalance-disks":
        plan, bound, warnings = _rebalance_disks(snapshot, table, request)
    else:
        raise ConfigurationError(f"goal {request.goal} is not a goal on log dirs (remove-disks, rebalance-disks)")
    moves = plan.moves()
    moved = {m.topic for m in moves}
    result_plan = ReassignmentPlan(moves=tuple(moves), partition_counts=snapshot.partition_counts(moved),
                                   topic_ids=snapshot.topic_ids(moved))
    live = snapshot.broker_ids
    rack_of = {b.id: (b.rack if request.rack_aware else None) for b in snapshot.brokers}
    targets = {m.tp: m.target_replicas for m in moves}
    before = assignment_metrics(_rows(snapshot, {}), live, rack_of)
    after = assignment_metrics(_rows(snapshot, targets), live, rack_of)
    dirs_before = {_label(b, d.path): d.held_bytes() for b, dirs in table.brokers.items() for d in dirs}
    report = LogDirReport(goal=request.goal, removed=request.log_dirs, intra_moves=plan.intra,
                          intra_bytes=plan.intra_bytes, cross_moves=plan.cross, cross_bytes=plan.cross_bytes,
                          dirs_before=dirs_before, dirs_after=dict(plan.after))
    return PlanResult(
        request=request, plan=result_plan, lower_bound=bound, lower_bound_parts={"log_dirs": bound},
        replica_moves=sum(m.replica_moves for m in moves), bytes_to_move=plan.cross_bytes,
        leader_changes=sum(1 for m in moves if m.leader_changes), leader_changes_lower_bound=0,
        before=before, after=after, warnings=tuple(warnings), log_dirs=report,
    )
