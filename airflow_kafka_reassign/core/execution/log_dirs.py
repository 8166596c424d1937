"""Moves between the log dirs of a broker (AlterReplicaLogDirs, KIP-113): one more kind of work of the one engine.

A plan pins a replica's log dir in a move's ``log_dirs`` (Kafka's reassignment format): the replica stays on its
broker and its data is copied into the pinned dir (a *future* replica, which replaces the current one once it has
caught up). :func:`~airflow_kafka_reassign.core.execution.iteration.step` calls, at each tick:

* :func:`observe_log_dirs` (read-only, before the reassignments' batch): one DescribeLogDirs of the plan's pinned
  partitions classifies each pinned replica *done* (its current replica is in the pinned dir), *in flight* (a future
  replica is in the pinned dir: the offset lag is its progress), *pending*, or *waiting* (the reassignment that adds
  it to its broker is not done yet; AlterPartitionReassignments carries no log dir, so a pin on a new replica is
  sent once the replica exists). A log dir of a broker with moves left that is OFFLINE stops the run: nothing new
  is sent, neither here nor as a reassignment (``status.blocked``), nothing is cancelled, the run state is kept;
  the task fails naming the dir, and a later run on the plan resumes. A move that cannot be done (its replica is
  moved elsewhere by someone else, its broker no longer holds it, the broker refused it) is refused by partition
  (``status.failed``) like a refused reassignment. A move whose topic was deleted (or re-created: a new topic id)
  under the run is *gone*, as the reassignment path judged it (``status.gone``, one line in ``status.events``):
  dropped, neither waited for nor failed, and not counted in the log-dir moves; a topic that grew keeps its moves;
* :func:`submit_log_dirs` (after the reassignments' throttles are reconciled, under the lease): the log-dir throttle
  (``replica.alter.log.dirs.io.max.bytes.per.second``) on the brokers moving, backed up first
  (:func:`~airflow_kafka_reassign.core.execution.throttle.sync_log_dir_throttle`) and set back on a broker as soon as it has
  nothing left in flight; then the pending moves that fit: at most ``max_moves_per_dir`` in flight out of and into
  each log dir, the disk guard per target volume (usable bytes less what the copies under way still write there,
  less this replica, above the reserve), never onto a cordoned dir; one AlterReplicaLogDirs, journalled.

Pure: the cluster is read and changed through the :class:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterAdmin` port.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_kafka_reassign.core.execution.config import ExecutionLimits, ExecutionOptions
from airflow_kafka_reassign.core.execution.status import ExecutionStatus, LogDirStatus
from airflow_kafka_reassign.core.execution.throttle import LOG_DIR_RATE, read_backup, sync_log_dir_throttle
from airflow_kafka_reassign.core.guards.disk import DiskReserve
from airflow_kafka_reassign.core.maintenance.cordon import CordonView, cordon_violations
from airflow_kafka_reassign.core.records.journal import StateLocation, journal
from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import SAME_VOLUME, ClusterAdmin, LogDir, TopicPartitionReplica
from airflow_kafka_reassign.core.vocabulary.units import format_bytes
from airflow_kafka_reassign.exceptions import ConfigurationError

#: The journal event of the moves between log dirs a step sent.
LOG_DIR_MOVES = "log-dir-moves-submitted"

_log = logging.getLogger(__name__)

Replica = TopicPartitionReplica


def pinned(plan: ReassignmentPlan) -> list[tuple[Replica, str]]:
    """Every replica the plan pins to a log dir, with the dir (plan order)."""
    return [(Replica(m.topic, m.partition, b), d) for m in plan.moves for b, d in m.pinned_dirs.items()]


def observe_log_dirs(
    admin: ClusterAdmin,
    plan: ReassignmentPlan,
    status: ExecutionStatus,
    *,
    known_failed: Mapping[TopicPartition, str] | None = None,
    log: logging.Logger | None = None,
) -> LogDirStatus | None:
    """Classify the plan's moves between log dirs (``None``, and no request, when it pins none); sets
    ``status.log_dirs``, refuses failed ones by partition (``status.failed``) and stops the run while a log dir of a
    broker with moves left is offline (``status.blocked``). Moves of a partition already ``status.gone`` (its topic
    deleted or re-created) are left out, even one the broker refused earlier in the run (the topic vanished between
    the read and the send). Read-only."""
    log = log or _log
    moves = pinned(plan)
    if not moves:
        return None
    # a topic deleted (or re-created) under the plan: its moves are gone (status.gone, counted there), not waited for
    moves = [(r, d) for r, d in moves if r.tp not in status.gone]
    tps = sorted({r.tp for r, _ in moves})
    seen = admin.log_dirs(tps)
    out = LogDirStatus(total=len(moves), dirs=seen.dirs)
    known = known_failed or {}
    refused = set(status.failed) | set(status.stale) | set(status.foreign)
    for r, d in moves:
        out.target[r] = d
        if r.tp in refused:
            why = status.failed.get(r.tp) or "its partition's move is stale (see the reassignment)"
            out.failed[r] = why if r.tp in status.failed else f"not sent: {why}"
            continue
        if r.tp in known:
            out.failed[r] = known[r.tp]
            continue
        if r.tp not in status.done or r.broker not in seen.dirs:
            out.waiting.append(r)  # the reassignment adds it (or it lags), or the broker did not answer
            continue
        current, future = seen.dir_of(r), seen.future_of(r)
        out.size[r] = next((x.size for x in _replicas(seen.dirs, r) if not x.future), 0)
        if current is not None:
            out.source[r] = current
        if future is not None and future[0] == d:
            out.in_flight[r] = future[1].offset_lag
        elif future is not None:
            out.failed[r] = (f"refused: replica {r} is being moved to log dir {future[0]} by someone else "
                             f"(AlterReplicaLogDirs); the plan moves it to {d}. Plan again once that move is done")
        elif current == d:
            out.done.append(r)
        elif current is None:
            out.failed[r] = (f"refused: broker {r.broker} holds no replica of {r.tp} (DescribeLogDirs): the plan is "
                             "stale, plan again")
        else:
            out.pending.append(r)
    offline = [f"log dir {x.path} of broker {b} ({x.error or 'offline'})" for b in sorted(out.brokers)
               for x in seen.dirs.get(b, ()) if x.offline]
    if offline:
        out.stopped = (
            f"STOPPED: {', '.join(offline)} is offline: no new move is sent (between log dirs or to other brokers); "
            f"nothing is cancelled and the run state is kept ({len(out.in_flight)} move(s) between log dirs in "
            f"flight, {len(out.pending) + len(out.waiting)} left). Replace the disk or bring the dir back (KAFKA-19571: "
            "an intra-broker move could mark a dir failed), then run the task again on this plan: it resumes")
        status.blocked = status.blocked or out.stopped
        log.error("%s", out.stopped)
    for r, why in out.failed.items():
        if r.tp in status.done:
            status.done.remove(r.tp)
        status.failed.setdefault(r.tp, f"the move of replica {r} to log dir {out.target[r]}: {why}")
    status.log_dirs = out
    return out


def _replicas(dirs: Mapping[int, Iterable[LogDir]], r: Replica) -> list[Any]:
    return [x for d in dirs.get(r.broker, ()) for x in d.replicas if x.topic == r.topic and x.partition == r.partition]


class _VolumeRoom:
    """The disk guard per target volume: usable bytes less the reserve and what the copies under way still write."""

    def __init__(self, dirs: Mapping[int, Iterable[LogDir]], ld: LogDirStatus, guard: DiskReserve) -> None:
        self.guard = guard
        self.volume: dict[tuple[int, str], tuple[int, int]] = {}
        self.room: dict[tuple[int, int], int] = {}
        self.why: dict[tuple[int, int], str] = {}
        for b, ds in dirs.items():
            kept: list[tuple[int, int, int]] = []
            for d in ds:
                if d.total_bytes is None or d.usable_bytes is None:
                    continue
                k = next((k for t, u, k in kept if t == d.total_bytes and abs(u - d.usable_bytes) <= SAME_VOLUME * t),
                         None)
                if k is None:
                    k = len(kept)
                    kept.append((d.total_bytes, d.usable_bytes, k))
                    reserve = max(guard.bytes, int(guard.ratio * d.total_bytes))
                    self.room[(b, k)] = d.usable_bytes - reserve
                    self.why[(b, k)] = f"{format_bytes(d.usable_bytes)} usable, {format_bytes(reserve)} reserve ({guard})"
                self.volume[(b, d.path)] = (b, k)
        for r in ld.in_flight:  # the future replicas still to write
            key = self.volume.get((r.broker, ld.target[r]))
            if key is not None:
                written = next((x.size for x in _replicas(dirs, r) if x.future), 0)
                self.room[key] -= max(0, ld.size.get(r, 0) - written)

    def take(self, r: Replica, path: str, size: int) -> str | None:
        """``None`` (and the room taken) when ``size`` fits the volume of ``path``; else why not."""
        key = self.volume.get((r.broker, path))
        if key is None:
            return None  # the broker reports no space (Kafka < 3.3): not guarded
        if self.room[key] < size:
            return (f"log dir {path} of broker {r.broker}: {self.why[key]}, room {format_bytes(max(0, self.room[key]))} "
                    f"after the copies under way, {format_bytes(size)} needed")
        self.room[key] -= size
        return None


def select_log_dir_moves(ld: LogDirStatus, limits: ExecutionLimits, options: ExecutionOptions) -> list[Replica]:
    """The pending moves that fit now: at most ``limits.max_moves_per_dir`` in flight out of and into each log dir
    (every future replica DescribeLogDirs shows counts), the disk guard per target volume (held ones in
    ``ld.held``), never onto a cordoned dir (refused in ``ld.failed``); smallest first unless ``order="plan"``."""
    busy: Counter[tuple[int, str]] = Counter()
    for b, ds in ld.dirs.items():
        for d in ds:
            busy[(b, d.path)] += sum(1 for x in d.replicas if x.future)
    for r in ld.in_flight:
        if r in ld.source:
            busy[(r.broker, ld.source[r])] += 1
    view = CordonView.from_log_dirs(ld.dirs)
    for v in cordon_violations(view, log_dir_moves={r: ld.target[r] for r in ld.pending}):
        r = Replica(v.topic, v.partition, v.broker)
        ld.failed[r] = (f"refused: its target log dir {v.log_dir} of broker {v.broker} is cordoned (cordoned.log.dirs, "
                        "KIP-1066): the broker would refuse it. Uncordon the dir or plan again")
    guard = options.disk_reserve if isinstance(options.disk_reserve, DiskReserve) else None
    room = _VolumeRoom(ld.dirs, ld, guard) if guard is not None else None
    # the moves between log dirs keep smallest-first under the default order ("balanced" schedules reassignments)
    order = ld.pending if limits.order == "plan" else sorted(
        ld.pending, key=lambda r: ld.size.get(r, 0) * (-1 if limits.order == "largest-first" else 1))
    limit = limits.max_moves_per_dir
    batch = []
    for r in order:
        if r in ld.failed:
            continue
        src, dst = (r.broker, ld.source[r]), (r.broker, ld.target[r])
        if limit is not None and (busy[src] >= limit or busy[dst] >= limit):
            continue
        why = room.take(r, ld.target[r], ld.size.get(r, 0)) if room is not None else None
        if why is not None:
            ld.held[r] = why
            continue
        batch.append(r)
        busy[src] += 1
        busy[dst] += 1
    return batch


def submit_log_dirs(
    admin: ClusterAdmin,
    ld: LogDirStatus | None,
    status: ExecutionStatus,
    limits: ExecutionLimits,
    options: ExecutionOptions,
    *,
    state_dir: StateLocation | None,
    submit: bool,
    log: logging.Logger | None = None,
    holder: str | None = None,
) -> None:
    """The log-dir throttle on the brokers moving (set back where nothing is left in flight), then the pending moves
    that fit, in one AlterReplicaLogDirs (``submit``, and the run not blocked, paused or stopped; ``dry_run``: logged
    only). Call it under the lease, after the replication throttles."""
    if ld is None:
        return
    log = log or _log
    rate = options.log_dir_throttle_bytes_per_sec
    may = submit and status.blocked is None and status.paused is None and ld.stopped is None
    batch = select_log_dir_moves(ld, limits, options) if may and ld.pending else []
    for r in [r for r in ld.pending if r in ld.failed]:
        ld.pending.remove(r)
        status.failed.setdefault(r.tp, f"the move of replica {r} to log dir {ld.target[r]}: {ld.failed[r]}")
        if r.tp in status.done:
            status.done.remove(r.tp)
    if ld.held and not batch and not ld.in_flight and not status.in_flight and may:
        status.blocked = (f"disk guard: no pending move between log dirs fits and none is in flight: "
                          f"{'; '.join(f'{r}: {why}' for r, why in sorted(ld.held.items())[:3])}. Free space on "
                          "those volumes or lower disk_reserve, then run the task again on this plan")
    targets = {r: ld.target[r] for r in batch}
    if options.dry_run:
        if batch:
            status.would_submit.extend(sorted({r.tp for r in batch}))
            log.info("DRY RUN: would set %s=%s on brokers %s and send AlterReplicaLogDirs: %s", LOG_DIR_RATE, rate,
                     sorted({r.broker for r in batch}), _request_json(targets))
        return
    moving = {r.broker for r in ld.in_flight} | {r.broker for r in batch}
    if rate is not None and moving:
        if state_dir is None:
            raise ConfigurationError("a log-dir throttle needs a state_dir to keep the backup of the previous values "
                                     "in; pass state_dir (the operators use <plan dir>/run)")
        sync_log_dir_throttle(admin, sorted(moving), rate, state_dir=state_dir, log=log)
    backup = read_backup(state_dir)
    idle = sorted(b for b, values in (backup.brokers.items() if backup is not None else ())
                  if LOG_DIR_RATE in values and b not in moving and b in ld.dirs)
    if idle and state_dir is not None:
        sync_log_dir_throttle(admin, idle, None, state_dir=state_dir, log=log)  # back to its value before the run
    if not batch:
        return
    log.info("moving %d replica(s) between log dirs (AlterReplicaLogDirs): %s", len(batch), _request_json(targets))
    results = {x.replica: x for x in admin.alter_replica_log_dirs(targets)}
    for r in batch:
        res = results.get(r)
        ld.pending.remove(r)
        if res is not None and res.ok:
            ld.submitted.append(r)
            ld.in_flight[r] = -1  # its future replica shows at the next DescribeLogDirs
            continue
        why = f"{res.error_code}: {res.error}" if res is not None else "the broker's response did not mention it"
        ld.failed[r] = why
        log.error("the move of replica %s to log dir %s was refused: %s", r, ld.target[r], why)
        status.failed.setdefault(r.tp, f"the move of replica {r} to log dir {ld.target[r]}: {why}")
        if r.tp in status.done:
            status.done.remove(r.tp)
    journal(state_dir, {"event": LOG_DIR_MOVES, "holder": holder,
                        "submitted": [[r.topic, r.partition, r.broker, ld.target[r]] for r in ld.submitted],
                        "refused": {str(r): ld.failed[r] for r in batch if r in ld.failed},
                        "log_dir_throttle_bytes_per_sec": rate}, log=log)


def _request_json(targets: Mapping[Replica, str]) -> str:
    by_dir: dict[str, list[str]] = {}
    for r, d in sorted(targets.items()):
        by_dir.setdefault(f"{r.broker}:{d}", []).append(f"{r.topic}-{r.partition}")
    return json.dumps(by_dir, sort_keys=True)


def cancel_log_dir_moves(admin: ClusterAdmin, plan: ReassignmentPlan, *,
                         log: logging.Logger | None = None) -> dict[Replica, str | None]:
    """Stop the plan's moves between log dirs that are in flight: each future replica in its pinned dir is dropped by
    an AlterReplicaLogDirs back to the dir of its current replica (what ``kafka-reassign-partitions --cancel`` does).
    Returns ``{replica: None, or why the broker refused}``; moves done stay done (a rollback plan moves replicas
    back between brokers, not between log dirs)."""
    log = log or _log
    moves = pinned(plan)
    if not moves:
        return {}
    seen = admin.log_dirs(sorted({r.tp for r, _ in moves}))
    back = {}
    for r, d in moves:
        future, current = seen.future_of(r), seen.dir_of(r)
        if future is not None and future[0] == d and current is not None:
            back[r] = current
    if not back:
        return {}
    out: dict[Replica, str | None] = {}
    for res in admin.alter_replica_log_dirs(back):
        out[res.replica] = None if res.ok else f"{res.error_code}: {res.error}"
    log.warning("cancelled %d move(s) between log dirs in flight (back to the dir of their current replica): %s%s",
                sum(1 for e in out.values() if e is None), _request_json(back),
                f"; refused: { {str(r): e for r, e in out.items() if e} }" if any(out.values()) else "")
    return out
