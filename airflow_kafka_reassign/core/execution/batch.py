"""Select and submit the next moves: the order, the per-cluster and per-broker limits, the disk guard's room,
the AlterPartitionReassignments requests."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from airflow_kafka_reassign.core.execution.config import ExecutionLimits, ExecutionOptions
from airflow_kafka_reassign.core.execution.status import ExecutionStatus
from airflow_kafka_reassign.core.guards.disk import DiskFit, DiskReserve, DiskRoom
from airflow_kafka_reassign.core.guards.disk import refusal as disk_refusal
from airflow_kafka_reassign.core.guards.health import NORMAL
from airflow_kafka_reassign.core.guards.kafka_line import choose_rf_guard
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin, InFlightReassignment

_log = logging.getLogger(__name__)


def _touched(adding: Iterable[int], removing: Iterable[int]) -> set[int]:
    return set(adding) | set(removing)


def ordered(
    pending: Sequence[Move],
    limits: ExecutionLimits,
    sizes: Mapping[TopicPartition, Mapping[int, int]],
    plan_index: Mapping[TopicPartition, int],
    *,
    urgency: Mapping[TopicPartition, int] | None = None,
    leaders: Mapping[TopicPartition, int | None] | None = None,
    tps: Sequence[TopicPartition] | None = None,
) -> tuple[list[Move], list[list[int]]]:
    """``pending`` in the order the engine sends them, each with the brokers it touches (its adding and removing
    replicas: :func:`select_batch` takes both). First by ``urgency`` first (core/guards/health.py: the moves that restore
    redundancy, then the others, then those below min ISR; absent: normal), then by ``limits.order``:

    * ``"balanced"``: the moves of the busiest brokers first, largest first among them: a move's key is the bytes
      its busiest broker has to move (the pending moves adding or removing a replica on it, or copying from it as
      their leader, ``leaders``), then its own bytes. The brokers with the most bytes set when the plan can end, so
      their slots start at once and stay full, and the small moves fill the others' slots and the end (a
      longest-processing-time-first schedule over the per-broker slots);
    * ``"largest-first"`` / ``"smallest-first"``: by bytes to copy (partition size x adding replicas);
    * ``"plan"``: the plan's order.

    Moves of unknown size go after the sized ones, in plan order. O(n log n): one pass for the sizes and the
    brokers' bytes, one sort. ``tps``: the moves' partitions, when the caller has them (``status.pending``)."""
    urgency = urgency or {}
    n = len(pending)
    tps = [m.tp for m in pending] if tps is None else tps
    urg = [urgency.get(tp, NORMAL) for tp in tps] if urgency else [NORMAL] * n
    idx = [plan_index[tp] for tp in tps]
    touched: list[list[int]] = []
    cost: list[int] = []  # -1: unknown
    balanced = limits.order == "balanced"
    load: dict[int, int] = {}
    source: dict[int, int] = {}  # move -> its leader, when it is not among the brokers the move touches
    for i, (m, tp) in enumerate(zip(pending, tps, strict=True)):
        current, target = m.current_replicas or (), m.target_replicas
        adding = [b for b in target if b not in current]
        on = adding + [b for b in current if b not in target]
        touched.append(on)
        if limits.order == "plan":
            continue
        s = sizes.get(tp)
        c = max(s.values()) * (len(adding) or 1) if s else -1
        cost.append(c)
        if balanced:
            leader = leaders.get(tp) if leaders is not None else None
            if leader is not None and adding and leader not in on:
                source[i] = leader
            if c > 0:
                for b in on:
                    load[b] = load.get(b, 0) + c
                if i in source:
                    load[source[i]] = load.get(source[i], 0) + c
    keys: list[tuple[int | float, ...]]
    if limits.order == "plan":
        keys = list(zip(urg, idx, strict=True))
    elif balanced:
        keys = []
        for i in range(n):
            busiest = max([load.get(b, 0) for b in touched[i]], default=0)
            if i in source:
                busiest = max(busiest, load.get(source[i], 0))
            keys.append((urg[i], cost[i] < 0, -busiest, -cost[i], idx[i]))
    else:
        sign = 1 if limits.order == "smallest-first" else -1
        keys = [(urg[i], cost[i] < 0, sign * cost[i], idx[i]) for i in range(n)]
    order = sorted(range(n), key=keys.__getitem__)
    return [pending[i] for i in order], [touched[i] for i in order]


def select_batch(
    pending: Sequence[Move],
    reassignments: Mapping[TopicPartition, InFlightReassignment],
    limits: ExecutionLimits,
    room: DiskRoom | None = None,
    held: dict[TopicPartition, str] | None = None,
    touched: Sequence[Sequence[int]] | None = None,
) -> list[Move]:
    """The moves of ``pending`` (already ordered) that fit the limits next to what is in flight and, with
    the disk guard's ``room``, the brokers' disks: a move that does not fit is put in ``held`` with why,
    and the next one gets its slot. ``touched``: each move's adding and removing replicas, when the caller has
    them (:func:`ordered`): the scan of a long pending list then costs a few set lookups per move."""
    in_cluster = len(reassignments)
    per_broker: Counter[int] = Counter()
    for r in reassignments.values():
        per_broker.update(_touched(r.adding_replicas, r.removing_replicas))
    k = limits.max_moves_per_broker
    full = {b for b, n in per_broker.items() if k is not None and n >= k}  # brokers with no slot left
    batch: list[Move] = []
    for j, m in enumerate(pending):
        if limits.max_moves is not None and in_cluster >= limits.max_moves:
            break
        if touched is not None:
            on = touched[j]
        else:
            current, target = m.current_replicas or (), m.target_replicas
            on = [b for b in target if b not in current] + [b for b in current if b not in target]
        if full and not full.isdisjoint(on):
            continue
        if room is not None:
            why = room.take(m)
            if why is not None:
                if held is not None:
                    held[m.tp] = why
                continue
        batch.append(m)
        in_cluster += 1
        per_broker.update(on)
        if k is not None:
            full.update(b for b in on if per_broker[b] >= k)
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
        guard = options.rf_guard  # step() chose it already (with_rf_guard); a direct caller gets the same choice
        if guard == "auto":
            guard = choose_rf_guard(guard, supported=admin.supports_rf_guard(), caps=admin.capabilities())[0]
        result = admin.alter_reassignments(targets, allow_replication_factor_change=allow, rf_guard=guard)
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

