"""Select and submit the next moves: the order, the per-cluster and per-broker limits, the disk guard's room,
the AlterPartitionReassignments requests."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from airflow_kafka_reassign.core.disk_guard import DiskFit, DiskReserve, DiskRoom
from airflow_kafka_reassign.core.disk_guard import refusal as disk_refusal
from airflow_kafka_reassign.core.execution.config import ExecutionLimits, ExecutionOptions
from airflow_kafka_reassign.core.execution.status import ExecutionStatus
from airflow_kafka_reassign.core.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.ports import ClusterAdmin, InFlightReassignment

_log = logging.getLogger(__name__)


def _touched(adding: Iterable[int], removing: Iterable[int]) -> set[int]:
    return set(adding) | set(removing)


def _order(moves: list[Move], limits: ExecutionLimits, sizes: Mapping[TopicPartition, Mapping[int, int]],
           plan_index: Mapping[TopicPartition, int]) -> list[Move]:
    if limits.order == "plan":
        return sorted(moves, key=lambda m: plan_index[m.tp])

    def cost(m: Move) -> int | None:
        s = sizes.get(m.tp)
        return max(s.values()) * max(1, len(m.adding_replicas)) if s else None

    sign = 1 if limits.order == "smallest-first" else -1
    return sorted(moves, key=lambda m: (cost(m) is None, sign * (cost(m) or 0), plan_index[m.tp]))


def select_batch(
    pending: Sequence[Move],
    reassignments: Mapping[TopicPartition, InFlightReassignment],
    limits: ExecutionLimits,
    room: DiskRoom | None = None,
    held: dict[TopicPartition, str] | None = None,
) -> list[Move]:
    """The moves of ``pending`` (already ordered) that fit the limits next to what is in flight and, with
    the disk guard's ``room``, the brokers' disks: a move that does not fit is put in ``held`` with why,
    and the next one gets its slot."""
    in_cluster = len(reassignments)
    per_broker: Counter[int] = Counter()
    for r in reassignments.values():
        per_broker.update(_touched(r.adding_replicas, r.removing_replicas))
    batch: list[Move] = []
    for m in pending:
        if limits.max_moves is not None and in_cluster >= limits.max_moves:
            break
        touched = _touched(m.adding_replicas, m.removing_replicas)
        if limits.max_moves_per_broker is not None and any(
            per_broker[b] >= limits.max_moves_per_broker for b in touched
        ):
            continue
        if room is not None:
            why = room.take(m)
            if why is not None:
                if held is not None:
                    held[m.tp] = why
                continue
        batch.append(m)
        in_cluster += 1
        per_broker.update(touched)
    return batch


def _request_json(moves: Sequence[Move]) -> str:
    return ReassignmentPlan.model_construct(moves=tuple(moves)).to_kafka_json()  # sound moves: no re-validation


def _submit(
    admin: ClusterAdmin,
    batch: Sequence[Move],
    options: ExecutionOptions,
    status: ExecutionStatus,
    log: logging.Logger,
) -> None:
    groups = (
        (False, [m for m in batch if not m.changes_rf]),
        (True, [m for m in batch if m.changes_rf]),
    )
    for allow, moves in groups:
        if not moves:
            continue
        targets = {m.tp: m.target_replicas for m in moves}
        log.info("submitting %d move(s) (AllowReplicationFactorChange=%s, rf_guard=%s): %s",
                 len(moves), str(allow).lower(), options.rf_guard, _request_json(moves))
        result = admin.alter_reassignments(targets, allow_replication_factor_change=allow,
                                           rf_guard=options.rf_guard)
        by = result.by_partition()
        for m in moves:
            r = by.get(m.tp)
            if r is None:
                status.failed[m.tp] = "the controller's response did not mention this partition"
            elif r.ok:
                status.submitted.append(m.tp)
            else:
                why = f"{r.error_code}: {r.error}"
                if r.error_code == "INVALID_REPLICATION_FACTOR":
                    why = f"refused by the replication-factor guard (KIP-860): {why}"
                status.failed[m.tp] = why
                log.error("move %s -> %s refused: %s", m.tp, list(m.target_replicas), why)


def _disk_room(admin: ClusterAdmin, plan: ReassignmentPlan, status: ExecutionStatus,
               guard: DiskReserve) -> tuple[Mapping[TopicPartition, Mapping[int, int]], DiskRoom]:
    """The plan's sizes (kept in ``status.sizes``) and each broker's room, from one DescribeLogDirs that also
    measures the reassignments in flight the plan did not start: the copies under way (every reassignment in
    flight, and the plan's moves still catching up) count against the room."""
    foreign = [tp for tp in status.reassignments if tp not in status.moves]
    dirs = admin.log_dirs([*plan.partitions, *foreign])
    status.sizes = dirs.sizes if not foreign else {tp: s for tp, s in dirs.sizes.items() if tp in status.moves}
    by_tp = plan.by_partition() if status.lagging else {}
    copies = [(tp, r.adding_replicas) for tp, r in status.reassignments.items()] + \
             [(tp, by_tp[tp].adding_replicas) for tp in status.lagging if tp in by_tp]
    return dirs.sizes, DiskRoom(copies, dirs.sizes, dirs.space, guard, dirs.unanswered)


def _disk_verdict(room: DiskRoom, held: dict[TopicPartition, str], batch: list[Move], status: ExecutionStatus,
                  guard: DiskReserve, log: logging.Logger) -> None:
    """What the disk guard did this step, in the status and the log: the moves held, and the run blocked
    (refused, naming the brokers and the numbers) when nothing is in flight and no pending move fits."""
    if room.unguarded:  # the adapter warns once per broker
        log.info("disk guard: broker(s) %s report no free space (DescribeLogDirs v4, Kafka 3.3+): the moves onto "
                 "them are not checked", sorted(room.unguarded))
    if room.unsized:
        log.info("disk guard: %d move(s) not checked, no broker reports their size (%s)", len(room.unsized),
                 ", ".join(map(str, room.unsized[:3])))
    if not held:
        return
    status.disk_held = held
    fit = DiskFit(fits=batch, held=held)
    # nothing under way would free space, and no held move merely waits for a broker to answer
    if not batch and not status.reassignments and not status.lagging and not (room.waiting & held.keys()):
        status.blocked = disk_refusal(fit, guard)
    else:
        log.warning("disk guard: %s", fit.line())

