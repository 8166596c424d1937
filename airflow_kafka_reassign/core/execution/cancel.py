"""Cancel and roll back: what CancelReassignmentOperator, the sensor's timeout policies and ``run``'s
``on_deadline="cancel"`` share.

Pure (no Airflow, no Kafka client): it works on the
:class:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterAdmin` port.

* :func:`cancel` cancels the plan's in-flight moves (KIP-455) and puts each cancelled partition back on
  its replicas **in their original order**. Kafka's cancel restores the replica *set* but rebuilds the
  order from the controller's merged list (``[1, 2, 3] -> [5, 4, 3]`` cancelled comes back as
  ``[3, 1, 2]``: another preferred leader). The true order is the plan's ``Move.current_replicas``
  (the controller's listing has lost it), so a cancelled partition in another order gets one more
  reassignment to that order: the same replicas, so no data is copied and it completes at once. The
  result names every partition whose order (``order_changed``) or leader (``leader_changed``) differs
  from before the cancel, and those left with another replication factor (``rf_changed``).
* :func:`cancel_plan` is :func:`cancel` plus the exact restore of the run's throttles: what the cancel
  operator and the sensor's ``on_timeout="cancel"`` / ``"rollback"`` do first.
* :func:`rebase_rollback` / :func:`live_rollback`: the plan directory's ``rollback.json`` starting from
  where each partition is now (cancelled, finished, or reordered), so that a rollback after a cancel is
  not refused as stale. The cancel operator, the sensor's ``on_timeout="rollback"`` and the wait with
  ``which="rollback"`` all read the rollback through :func:`live_rollback`.

Example (with the in-memory fake, which reverts a cancel in the controller's order as Kafka does)::

    >>> from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, step
    >>> from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
    >>> from airflow_kafka_reassign.testing import FakeClusterAdmin
    >>> fake = FakeClusterAdmin.build(brokers={b: None for b in range(1, 6)}, topics={"t": [[1, 2, 3]]})
    >>> plan = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 2, 3),
    ...                                     target_replicas=(5, 4, 3)),))
    >>> _ = step(fake, plan, ExecutionLimits(), ExecutionOptions())
    >>> result = cancel(fake, plan, sleep=lambda s: None)
    >>> [str(tp) for tp in result.reordered], result.order_changed, fake.replicas[plan.moves[0].tp]
    (['t-0'], {}, (1, 2, 3))
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_kafka_reassign.core.execution.throttle import NONE_SET, RESTORED, restore_throttles
from airflow_kafka_reassign.core.vocabulary.models import ANY_LOG_DIR, Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.exceptions import ConfigurationError, UnsupportedBrokerError

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.records.journal import StateLocation
    from airflow_kafka_reassign.core.records.lease import LeaseKeeper
    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin, InFlightReassignment, RfGuard

_log = logging.getLogger(__name__)

#: Partitions named per category in a summary (XCom stays small).
SUMMARY_SAMPLE = 20
#: Seconds between two looks at the cluster while a cancel (or the reorder after it) settles.
SETTLE_POLL_S = 0.5

Replicas = tuple[int, ...]


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _clock() -> float:
    return time.monotonic()


def _pairs(items: Mapping[TopicPartition, tuple[Any, Any]]) -> dict[str, dict[str, Any]]:
    def shown(v: Any) -> Any:
        return list(v) if isinstance(v, tuple) else v

    return {str(tp): {"before": shown(a), "after": shown(b)} for tp, (a, b) in sorted(items.items())[:SUMMARY_SAMPLE]}


@dataclass
class CancelResult:
    """What a cancel did, per partition.

    ``rf_changed``: the replica count after the cancel differs from the one before the reassignment
    (KIP-455: a cancel stops a move, it does not remove replicas that had joined). ``not_reverted``:
    same count, other brokers. ``reordered``: back on its replicas in another order after Kafka's
    cancel, then put back in the original order (no data copied). ``order_changed``: left in another
    order than before (the preferred leader differs), with why in the log. ``leader_changed``: the
    leader differs from the one just before the cancel. ``order_unknown``: cancelled partitions whose
    order before is unknown (no plan, or a plan without ``current_replicas``): the controller's order
    was kept."""

    cancelled: list[TopicPartition] = field(default_factory=list)
    #: finished (or never started) before the cancel arrived
    not_in_flight: list[TopicPartition] = field(default_factory=list)
    failed: dict[TopicPartition, str] = field(default_factory=dict)
    #: partition -> (replicas before the reassignment, replicas after the cancel)
    rf_changed: dict[TopicPartition, tuple[Replicas, Replicas]] = field(default_factory=dict)
    #: partition -> (replicas before the reassignment, replicas after the cancel): same RF, other brokers
    not_reverted: dict[TopicPartition, tuple[Replicas, Replicas]] = field(default_factory=dict)
    #: partition -> (replicas before the reassignment, the order Kafka's cancel left): put back in order
    reordered: dict[TopicPartition, tuple[Replicas, Replicas]] = field(default_factory=dict)
    #: partition -> (replicas before the reassignment, replicas now): same replicas, another order
    order_changed: dict[TopicPartition, tuple[Replicas, Replicas]] = field(default_factory=dict)
    #: partition -> (leader just before the cancel, leader now)
    leader_changed: dict[TopicPartition, tuple[int | None, int | None]] = field(default_factory=dict)
    order_unknown: list[TopicPartition] = field(default_factory=list)
    #: whether the run's throttles were restored (:func:`cancel_plan`; ``None``: not asked)
    throttles_restored: bool | None = None

    @property
    def ok(self) -> bool:
        """Every cancel went through and every cancelled partition is back exactly as before."""
        return not (self.failed or self.rf_changed or self.not_reverted or self.order_changed)

    def problems(self, *, placement: bool = True) -> list[str]:
        """One line per kind of failure: the failed cancels and, with ``placement``, each kind of
        partition left off its replicas before (their count, brokers or order). Empty when :attr:`ok`."""
        out = []
        if self.failed:
            out.append(f"{len(self.failed)} cancel(s) failed: "
                       + "; ".join(f"{tp}: {e}" for tp, e in sorted(self.failed.items())[:5]))
        if not placement:
            return out
        for what, items, fix in (
            ("left with another replication factor (KIP-455)", self.rf_changed,
             "run the rollback (allow_replication_factor_change=True) or a reassignment to the replicas before"),
            ("left on other brokers", self.not_reverted, "run the rollback or plan again"),
            ("left in another replica order (another preferred leader)", self.order_changed,
             "reassign each to its replicas before (same replicas: no data is copied), or run the rollback"),
        ):
            if items:
                shown = ", ".join(f"{tp} {list(a)} -> {list(b)}" for tp, (a, b) in sorted(items.items())[:5])
                out.append(f"{len(items)} partition(s) {what}: {shown}{' ...' if len(items) > 5 else ''}; {fix}")
        return out

    def line(self) -> str:
        """One line: how many in-flight moves were cancelled, then each kind of problem (:meth:`problems`)."""
        text = f"cancelled {len(self.cancelled)} in-flight move(s)"
        if self.reordered:
            text += f", {len(self.reordered)} put back in their original replica order (no data copied)"
        return "; ".join([text, *self.problems()])

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cancelled": len(self.cancelled),
            "not_in_flight": len(self.not_in_flight),
            "failed": {str(tp): e for tp, e in sorted(self.failed.items())[:SUMMARY_SAMPLE]},
            "rf_changed": _pairs(self.rf_changed),
            "not_reverted": _pairs(self.not_reverted),
            "reordered": _pairs(self.reordered),
            "order_changed": _pairs(self.order_changed),
            "leader_changed": _pairs(self.leader_changed),
            "cancelled_partitions": [str(tp) for tp in sorted(self.cancelled)[:SUMMARY_SAMPLE]],
        }
        if self.order_unknown:
            out["order_unknown"] = len(self.order_unknown)
        if self.throttles_restored is not None:
            out["throttles_restored"] = RESTORED if self.throttles_restored else NONE_SET
        return out


def order_before(move: Move | None, listed: InFlightReassignment) -> tuple[Replicas, bool]:
    """``(the replicas of a partition before its reassignment, whether that order is known)``.

    The controller lists the replicas of a reassignment merged in its own order (target first), so
    its ``original_replicas`` has the right brokers but not necessarily the right order; the plan's
    ``current_replicas`` has the order, when it names the same brokers."""
    ctrl = listed.original_replicas
    if move is not None and move.current_replicas is not None and sorted(move.current_replicas) == sorted(ctrl):
        return move.current_replicas, True
    return ctrl, False


def _settle(
    done: Callable[[], bool], timeout_s: float, sleep: Callable[[float], None], clock: Callable[[], float]
) -> None:
    deadline = clock() + timeout_s
    while not done() and clock() < deadline:
        sleep(SETTLE_POLL_S)


def cancel(
    admin: ClusterAdmin,
    plan: ReassignmentPlan | None,
    *,
    cancel_all: bool = False,
    dry_run: bool = False,
    restore_order: bool = True,
    rf_guard: RfGuard = "broker",
    settle_timeout_s: float = 15.0,
    sleep: Callable[[float], None] | None = None,
    clock: Callable[[], float] | None = None,
    log: logging.Logger | None = None,
) -> CancelResult:
    """Cancel the plan's in-flight moves (or, with ``cancel_all=True``, every reassignment).

    Only reassignments heading to exactly a plan move's target are the plan's: others are left alone
    unless ``cancel_all``. After the cancel (waiting up to ``settle_timeout_s`` for the controller and
    the metadata to settle) each partition is compared with its replicas before the reassignment: a
    partition on the same replicas in another order is reassigned to the original order (no data
    copied; with ``restore_order=False`` it is only reported), and every partition whose order, replica
    count or leader differs afterwards is reported (see :class:`CancelResult`). ``rf_guard`` is the
    KIP-860 guard of that reorder (see ``ExecutionOptions.rf_guard``; a reorder never changes the RF).
    """
    log = log or _log
    wait = sleep or _sleep
    clock = clock or _clock
    if plan is None and not cancel_all:
        raise ConfigurationError("cancel needs a plan, or cancel_all=True to cancel every reassignment")
    inflight = admin.list_reassignments()
    planned = plan.by_partition() if plan is not None else {}
    if cancel_all:
        targets = dict(inflight)
    else:
        targets = {tp: r for tp, r in inflight.items() if tp in planned
                   and r.target_replicas == planned[tp].target_replicas}
    result = CancelResult()
    if not targets:
        log.info("nothing to cancel: no %sreassignment is in flight", "" if cancel_all else "move of the plan ")
        return result
    before: dict[TopicPartition, Replicas] = {}
    for tp, listed in targets.items():
        before[tp], known = order_before(planned.get(tp), listed)
        if not known:
            result.order_unknown.append(tp)
    listing = ", ".join(f"{tp} {list(before[tp])}->{list(r.target_replicas)}" for tp, r in sorted(targets.items()))
    if dry_run:
        log.info("DRY RUN: would cancel %d reassignment(s): %s", len(targets), listing)
        result.cancelled = sorted(targets)
        return result
    topics = sorted({tp.topic for tp in targets})
    leaders = {p.tp: p.leader for p in admin.snapshot(topics=topics).partitions if p.tp in targets}
    log.info("cancelling %d reassignment(s): %s", len(targets), listing)
    for r in admin.cancel_reassignments(sorted(targets)).results:
        if r.ok:
            result.cancelled.append(r.tp)
        elif r.error_code == "NO_REASSIGNMENT_IN_PROGRESS":
            result.not_in_flight.append(r.tp)
        else:
            result.failed[r.tp] = f"{r.error_code}: {r.error}"
    result.cancelled.sort()
    result.not_in_flight.sort()
    if not result.cancelled:
        log.info("cancelled 0, %d had already finished, %d failed", len(result.not_in_flight), len(result.failed))
        return result

    now: dict[TopicPartition, Any] = {}
    still: Mapping[TopicPartition, Any] = {}

    def look() -> None:
        nonlocal now, still
        still = admin.list_reassignments(result.cancelled)
        now = {p.tp: p for p in admin.snapshot(topics=topics).partitions}

    def back_on_same_set() -> bool:
        look()
        return not any(tp in still or tp not in now or set(now[tp].replicas) != set(before[tp])
                       for tp in result.cancelled)

    _settle(back_on_same_set, settle_timeout_s, wait, clock)
    out_of_order = {tp: now[tp].replicas for tp in result.cancelled
                    if tp not in still and tp in now and set(now[tp].replicas) == set(before[tp])
                    and len(now[tp].replicas) == len(before[tp]) and now[tp].replicas != before[tp]
                    and tp not in result.order_unknown}
    if out_of_order and restore_order:
        reorder = {tp: before[tp] for tp in out_of_order}
        log.info("Kafka's cancel left %d partition(s) on their replicas in another order; putting them back in "
                 "their original order (same replicas, no data copied): %s", len(reorder),
                 ", ".join(f"{tp} {list(out_of_order[tp])}->{list(reorder[tp])}" for tp in sorted(reorder)))
        try:
            sent = admin.alter_reassignments(reorder, allow_replication_factor_change=False, rf_guard=rf_guard)
            refused = {r.tp: f"{r.error_code}: {r.error}" for r in sent.results if not r.ok}
        except UnsupportedBrokerError as e:
            refused = dict.fromkeys(reorder, str(e))
        for tp, why in sorted(refused.items()):
            log.error("the reorder of %s back to %s was refused: %s", tp, list(before[tp]), why)
        result.reordered = {tp: (before[tp], out_of_order[tp]) for tp in reorder if tp not in refused}

        def reordered() -> bool:
            look()
            return all(tp not in still and tp in now and now[tp].replicas == before[tp] for tp in result.reordered)

        _settle(reordered, settle_timeout_s, wait, clock)
    for tp in result.cancelled:
        after = now[tp].replicas if tp in now else ()
        if tp in still or len(after) != len(before[tp]):
            result.rf_changed[tp] = (before[tp], after)
        elif set(after) != set(before[tp]):
            result.not_reverted[tp] = (before[tp], after)
        elif after != before[tp] and tp not in result.order_unknown:
            result.order_changed[tp] = (before[tp], after)
            result.reordered.pop(tp, None)
        leader_now = now[tp].leader if tp in now else None
        if tp in leaders and leader_now != leaders[tp]:
            result.leader_changed[tp] = (leaders[tp], leader_now)
    for tp, (a, b) in sorted(result.rf_changed.items()):
        log.warning("partition %s was left with replication factor %d after the cancel (%s; before the "
                    "reassignment %s); run a reassignment to restore the RF (KIP-455)", tp, len(b), list(b), list(a))
    for tp, (a, b) in sorted(result.order_changed.items()):
        log.warning("partition %s is back on its replicas but in another order: %s, before the reassignment %s "
                    "(preferred leader %s instead of %s)", tp, list(b), list(a), b[0], a[0])
    for tp, (was, now_leader) in sorted(result.leader_changed.items()):
        log.warning("the leader of partition %s changed during the cancel: %s before, %s now", tp, was, now_leader)
    if result.order_unknown:
        log.info("%d cancelled partition(s) keep the controller's replica order (their order before the "
                 "reassignment is not in the plan): %s", len(result.order_unknown),
                 ", ".join(str(tp) for tp in sorted(result.order_unknown)[:10]))
    log.info("cancelled %d (%d put back in their original replica order), %d had already finished, %d failed",
             len(result.cancelled), len(result.reordered), len(result.not_in_flight), len(result.failed))
    return result


def cancel_plan(
    admin: ClusterAdmin,
    plan: ReassignmentPlan | None,
    *,
    state_dir: StateLocation | None,
    cancel_all: bool = False,
    dry_run: bool = False,
    rf_guard: RfGuard = "broker",
    lease: LeaseKeeper | None = None,
    log: logging.Logger | None = None,
    sleep: Callable[[float], None] | None = None,
) -> CancelResult:
    """:func:`cancel`, then the run's throttles restored exactly as before the run (from ``state_dir``).

    With ``lease``, it is confirmed before the throttles are touched (a run that lost it restores none).
    ``result.throttles_restored`` says whether there was a throttle backup to restore."""
    result = cancel(admin, plan, cancel_all=cancel_all, dry_run=dry_run, rf_guard=rf_guard, log=log, sleep=sleep)
    if lease is not None:
        lease.confirm()
    result.throttles_restored = False if dry_run else restore_throttles(admin, state_dir, log=log)
    return result


# -- the rollback -----------------------------------------------------------------------------------------


def rebase_rollback(
    rollback: ReassignmentPlan,
    plan: ReassignmentPlan | None,
    live: Mapping[TopicPartition, Sequence[int]],
) -> ReassignmentPlan:
    """The rollback's moves, starting from where a cancel (or a finished move) left each partition.

    ``rollback`` puts every partition of ``plan`` back on the replicas it had before (its moves
    expect the plan's targets); ``live``: the partitions' replicas now. A finished move is on the
    plan's target: its rollback move stays as it is. A cancelled one is back on its original
    replicas but possibly in another order (the controller rebuilds them from the adding replicas,
    so the preferred leader may differ) or with adding replicas that had joined (KIP-455: a higher
    RF). Such a move then starts from the live replicas: a reorder, or an RF change marked
    ``allow_rf_change`` (the execution still refuses it unless the task allows RF changes); a
    partition already exactly on its original replicas is then done at once (nothing is sent). A
    partition on replicas outside the plan move's before and after (someone else moved it) keeps
    its expected replicas, and the execution refuses it as stale. A move's ``log_dirs`` (the rollback of a plan on
    log dirs pins each moved replica back in the dir it left) are kept: the targets do not change.
    """
    planned = plan.by_partition() if plan is not None else {}
    moves: list[Move] = []
    for m in rollback.moves:
        now = tuple(live.get(m.tp, ()))
        forward = planned.get(m.tp)
        if not now or now == m.current_replicas or forward is None:
            moves.append(m)
            continue
        known = set(forward.target_replicas) | set(forward.current_replicas or ())
        if not set(now) <= known:
            moves.append(m)  # moved by someone else: stale
            continue
        recorded = m.current_dirs  # the dirs the forward move pinned: by broker, for the replicas now
        moves.append(Move(topic=m.topic, partition=m.partition, current_replicas=now,
                          target_replicas=m.target_replicas, allow_rf_change=len(now) != len(m.target_replicas),
                          log_dirs=m.log_dirs,
                          current_log_dirs=tuple(recorded.get(b, ANY_LOG_DIR) for b in now) if recorded else None))
    return ReassignmentPlan(moves=tuple(moves), partition_counts=rollback.partition_counts)


def live_rollback(admin: ClusterAdmin, rollback: ReassignmentPlan, plan: ReassignmentPlan | None) -> ReassignmentPlan:
    """:func:`rebase_rollback` on the cluster as it is now: each partition's replicas, or, for one
    the controller is reassigning, the replicas that reassignment started from (its set: the
    execution recognises a move in flight by its target)."""
    if not rollback.moves:
        return rollback
    topics = sorted({m.topic for m in rollback.moves})
    live: dict[TopicPartition, Sequence[int]] = {p.tp: p.replicas for p in admin.snapshot(topics=topics).partitions}
    for tp, r in admin.list_reassignments(list(rollback.partitions)).items():
        if tp in live:
            live[tp] = r.original_replicas
    return rebase_rollback(rollback, plan, live)
