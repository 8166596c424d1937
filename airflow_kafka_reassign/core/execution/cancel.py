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
* :func:`cancel_plan` is the cancel of a whole run: :func:`cancel` with the run's cordons restored BEFORE the
  reorder (Kafka 4.4 refuses any reassignment naming a broker whose log dirs are all cordoned, a reorder of the
  replicas already there included: a drained broker's partitions could not be put back in order while it was
  cordoned, issue 36), then the exact restore of the run's throttles: what the cancel operator and the sensor's
  ``on_timeout="cancel"`` / ``"rollback"`` do first. The session's own cancels (``on_deadline="cancel"``,
  ``on_unhealthy="cancel"``) keep the cordons (the drain goes on): a partition whose reorder names a cordoned broker
  keeps Kafka's order there, named and journalled (``order-held``), and the cancel of the whole run puts it back.
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
from airflow_kafka_reassign.core.guards.kafka_line import RfGuardChoice, choose_rf_guard
from airflow_kafka_reassign.core.maintenance.cordon import cordoned_brokers, restore_cordons
from airflow_kafka_reassign.core.maintenance.cordon import read_backup as read_cordon_backup
from airflow_kafka_reassign.core.vocabulary.models import ANY_LOG_DIR, Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.exceptions import ConfigurationError, UnsupportedBrokerError

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.records.journal import StateLocation
    from airflow_kafka_reassign.core.records.lease import LeaseKeeper
    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin, InFlightReassignment

_log = logging.getLogger(__name__)

#: Partitions named per category in a summary (XCom stays small).
SUMMARY_SAMPLE = 20
#: Seconds between two looks at the cluster while a cancel (or the reorder after it) settles.
SETTLE_POLL_S = 0.5
#: The journal event of the partitions a cancel left in Kafka's order because a broker they name is cordoned
#: (``partitions``: ``[{"topic", "partition", "before", "left"}]``): the cancel of the whole run reorders them.
ORDER_HELD = "order-held"

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
    #: partition -> why its reorder was not sent: it names a broker whose log dirs are all cordoned (also in
    #: ``order_changed``; the cancel of the whole run restores the cordons, then the order)
    order_held: dict[TopicPartition, str] = field(default_factory=dict)
    #: whether the run's throttles were restored (:func:`cancel_plan`; ``None``: not asked)
    throttles_restored: bool | None = None
    #: whether the run's cordons were restored (:func:`cancel_plan`, before the reorder; ``None``: not asked)
    cordons_restored: bool | None = None
    #: the plan's moves between log dirs that were in flight, dropped (:func:`cancel_plan`; ``{replica: None, or
    #: why the broker refused}``)
    log_dir_moves_cancelled: dict[Any, str | None] = field(default_factory=dict)

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
            ("left in another replica order (another preferred leader)",
             {tp: v for tp, v in self.order_changed.items() if tp not in self.order_held},
             "reassign each to its replicas before (same replicas: no data is copied), or run the rollback"),
            ("kept in Kafka's replica order because a broker they name is cordoned (Kafka 4.4+ refuses a "
             "reassignment naming it)", {tp: v for tp, v in self.order_changed.items() if tp in self.order_held},
             "the cancel of the whole run (CancelReassignmentOperator on the plan) restores the run's cordons, then "
             "their order"),
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
        if self.order_held:
            out["order_held"] = [str(tp) for tp in sorted(self.order_held)[:SUMMARY_SAMPLE]]
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


def _cordon_refused(error: str | None) -> bool:
    """Whether a refusal is Kafka 4.4's for a target naming a fully cordoned broker ("... includes broker N, but all
    its log directories are cordoned.")."""
    return "cordoned" in (error or "")


def read_held(state_dir: StateLocation | None) -> dict[TopicPartition, tuple[Replicas, Replicas]]:
    """The partitions earlier cancels of this run left in Kafka's order because a broker they name was cordoned
    (journal events ``order-held``): ``{partition: (replicas before, the order the cancel left)}``, the latest
    record of each partition winning."""
    if state_dir is None:
        return {}
    from airflow_kafka_reassign.core.records.journal import read_journal

    out: dict[TopicPartition, tuple[Replicas, Replicas]] = {}
    for e in read_journal(state_dir):
        if e.get("event") != ORDER_HELD:
            continue
        for p in e.get("partitions") or ():
            out[TopicPartition(p["topic"], int(p["partition"]))] = (tuple(p["before"]), tuple(p["left"]))
    return out


def cancel(
    admin: ClusterAdmin,
    plan: ReassignmentPlan | None,
    *,
    cancel_all: bool = False,
    dry_run: bool = False,
    restore_order: bool = True,
    rf_guard: RfGuardChoice = "auto",
    settle_timeout_s: float = 15.0,
    before_reorder: Callable[[], None] | None = None,
    state_dir: StateLocation | None = None,
    held: Mapping[TopicPartition, tuple[Replicas, Replicas]] | None = None,
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

    The order of a cancel, one for every path (see the module docstring):

    1. Kafka's cancel, then the wait until the cancelled partitions are back on their replicas;
    2. ``before_reorder()`` (called once, even when nothing was in flight; never on a dry run): the cancel of a whole
       run restores its cordons there, so that the reorder of a partition on a drained broker goes through (Kafka 4.4
       refuses any reassignment whose target names a broker whose log dirs are all cordoned, even one that only
       reorders the replicas already there);
    3. the reorder, of the partitions this cancel left in another order and of ``held`` (the partitions an earlier
       cancel of the run had to leave so, :func:`read_held`, when the cluster still shows them as it left them). A
       reorder naming a broker that is still fully cordoned (a drain that goes on after ``on_deadline="cancel"`` or
       ``on_unhealthy="cancel"``: its cordons stay; a cordon set before the run) is not sent on a cluster that refuses
       it (Kafka 4.4+): the partition keeps Kafka's order, reported in ``order_changed`` and ``order_held`` and
       recorded in ``state_dir``'s journal (``order-held``) for the cancel of the whole run. A reorder the controller
       refuses for a cordon the brokers no longer show (it learns a restored cordon a moment later) is sent again
       until ``settle_timeout_s``.
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
    before: dict[TopicPartition, Replicas] = {}
    for tp, listed in targets.items():
        before[tp], known = order_before(planned.get(tp), listed)
        if not known:
            result.order_unknown.append(tp)
    listing = ", ".join(f"{tp} {list(before[tp])}->{list(r.target_replicas)}" for tp, r in sorted(targets.items()))
    if dry_run:
        if targets:
            log.info("DRY RUN: would cancel %d reassignment(s): %s", len(targets), listing)
        else:
            log.info("DRY RUN: nothing to cancel: no %sreassignment is in flight", "" if cancel_all else "move of the plan ")
        result.cancelled = sorted(targets)
        return result
    # an earlier cancel's held partitions, unless in flight again (then this cancel's own) or not the plan's
    earlier = {tp: ba for tp, ba in (held or {}).items() if tp not in targets and tp in planned}
    topics = sorted({tp.topic for tp in (*targets, *earlier)})
    leaders: dict[TopicPartition, int | None] = {}
    if not targets:
        log.info("nothing to cancel: no %sreassignment is in flight", "" if cancel_all else "move of the plan ")
    else:
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

    now: dict[TopicPartition, Any] = {}
    still: Mapping[TopicPartition, Any] = {}

    def look() -> None:
        nonlocal now, still
        still = admin.list_reassignments([*result.cancelled, *earlier])
        now = {p.tp: p for p in admin.snapshot(topics=topics).partitions}

    def back_on_same_set() -> bool:
        look()
        return not any(tp in still or tp not in now or set(now[tp].replicas) != set(before[tp])
                       for tp in result.cancelled)

    if result.cancelled:
        _settle(back_on_same_set, settle_timeout_s, wait, clock)
    if before_reorder is not None:
        before_reorder()
    if not result.cancelled and not earlier:
        log.info("cancelled 0, %d had already finished, %d failed", len(result.not_in_flight), len(result.failed))
        return result
    look()
    out_of_order = {tp: now[tp].replicas for tp in result.cancelled
                    if tp not in still and tp in now and set(now[tp].replicas) == set(before[tp])
                    and len(now[tp].replicas) == len(before[tp]) and now[tp].replicas != before[tp]
                    and tp not in result.order_unknown}
    for tp, (original, left) in sorted(earlier.items()):
        if tp not in still and tp in now and now[tp].replicas == left != original:
            before[tp], out_of_order[tp] = original, left
        else:
            log.info("%s was left in Kafka's order %s by an earlier cancel of this run; it is now %s: not reordered",
                     tp, list(left), list(now[tp].replicas) if tp in now else "gone")
    if out_of_order and restore_order:
        _reorder(admin, {tp: before[tp] for tp in out_of_order}, out_of_order, result, rf_guard=rf_guard,
                 settle_timeout_s=settle_timeout_s, wait=wait, clock=clock, log=log)

        def reordered() -> bool:
            look()
            return all(tp not in still and tp in now and now[tp].replicas == before[tp] for tp in result.reordered)

        _settle(reordered, settle_timeout_s, wait, clock)
    for tp in [*result.cancelled, *(tp for tp in sorted(earlier) if tp in out_of_order)]:
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
                    "(preferred leader %s instead of %s)%s", tp, list(b), list(a), b[0], a[0],
                    f"; {result.order_held[tp]}" if tp in result.order_held else "")
    for tp, (was, now_leader) in sorted(result.leader_changed.items()):
        log.warning("the leader of partition %s changed during the cancel: %s before, %s now", tp, was, now_leader)
    if result.order_unknown:
        log.info("%d cancelled partition(s) keep the controller's replica order (their order before the "
                 "reassignment is not in the plan): %s", len(result.order_unknown),
                 ", ".join(str(tp) for tp in sorted(result.order_unknown)[:10]))
    held_now = {tp: result.order_changed[tp] for tp in result.order_held if tp in result.order_changed}
    if held_now:
        from airflow_kafka_reassign.core.records.journal import journal

        journal(state_dir, {"event": ORDER_HELD, "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "before": list(a), "left": list(b)}
            for tp, (a, b) in sorted(held_now.items())]}, log=log)
    log.info("cancelled %d (%d put back in their original replica order), %d had already finished, %d failed",
             len(result.cancelled), len(result.reordered), len(result.not_in_flight), len(result.failed))
    return result


def _reorder(
    admin: ClusterAdmin,
    reorder: dict[TopicPartition, Replicas],
    left: Mapping[TopicPartition, Replicas],
    result: CancelResult,
    *,
    rf_guard: RfGuardChoice,
    settle_timeout_s: float,
    wait: Callable[[float], None],
    clock: Callable[[], float],
    log: logging.Logger,
) -> None:
    """Send the reorders (step 3 of :func:`cancel`): those naming a fully cordoned broker are held on a cluster that
    refuses them; a cordon refusal for a cordon the brokers no longer show is sent again until the controller has
    learned it, within ``settle_timeout_s``. Fills ``result.reordered`` and ``result.order_held``."""
    caps = admin.capabilities()
    rf_guard = choose_rf_guard(rf_guard, supported=admin.supports_rf_guard(), caps=caps)[0]
    if caps.cordons and caps.cordons_refuse_explicit_assignments:
        cordoned = cordoned_brokers(admin, sorted({b for r in reorder.values() for b in r}))
        for tp, order in sorted(reorder.items()):
            named = sorted(set(order) & cordoned)
            if named:
                result.order_held[tp] = (
                    f"kept in Kafka's order: the reorder names broker(s) {named}, whose log dirs are all cordoned "
                    "(cordoned.log.dirs), and Kafka 4.4+ refuses any reassignment naming such a broker; the cancel "
                    "of the whole run (CancelReassignmentOperator on the plan, or the wait's on_timeout='cancel') "
                    "restores the run's cordons, then this order")
        for tp in result.order_held:
            reorder.pop(tp)
    if not reorder:
        return
    log.info("Kafka's cancel left %d partition(s) on their replicas in another order; putting them back in "
             "their original order (same replicas, no data copied): %s", len(reorder),
             ", ".join(f"{tp} {list(left[tp])}->{list(reorder[tp])}" for tp in sorted(reorder)))
    deadline = clock() + settle_timeout_s
    todo = dict(reorder)
    refused: dict[TopicPartition, str] = {}
    while todo:
        try:
            sent = admin.alter_reassignments(todo, allow_replication_factor_change=False, rf_guard=rf_guard)
            now_refused = {r.tp: f"{r.error_code}: {r.error}" for r in sent.results if not r.ok}
        except UnsupportedBrokerError as e:
            refused.update(dict.fromkeys(todo, str(e)))
            break
        for tp in todo:
            refused.pop(tp, None)
        refused.update(now_refused)
        # the controller learns a cordon the brokers no longer show a moment later: the same again, bounded
        todo = {tp: todo[tp] for tp, why in now_refused.items() if _cordon_refused(why)}
        if not todo or clock() >= deadline:
            break
        log.info("the reorder of %d partition(s) was refused for a cordon the controller still sees; sending it "
                 "again", len(todo))
        wait(SETTLE_POLL_S)
    for tp, why in sorted(refused.items()):
        log.error("the reorder of %s back to %s was refused: %s", tp, list(reorder[tp]), why)
    result.reordered = {tp: (reorder[tp], left[tp]) for tp in reorder if tp not in refused}


def cancel_plan(
    admin: ClusterAdmin,
    plan: ReassignmentPlan | None,
    *,
    state_dir: StateLocation | None,
    cancel_all: bool = False,
    dry_run: bool = False,
    rf_guard: RfGuardChoice = "auto",
    lease: LeaseKeeper | None = None,
    log: logging.Logger | None = None,
    sleep: Callable[[float], None] | None = None,
) -> CancelResult:
    """The cancel of a whole run, which gives back everything the run set (from ``state_dir``), in one order:

    1. Kafka's cancel of the plan's moves in flight (they stop copying), and the wait until they settle;
    2. (``lease`` confirmed first: a run that lost it changes nothing more) the run's cordons restored exactly as
       before it (a decommission's, a disk removal's: ``cordon-backup.json``), so that nothing sent next names a
       cordoned broker or dir: Kafka 4.4 refuses any reassignment naming a fully cordoned broker, a reorder of the
       replicas already there included;
    3. the plan's moves between log dirs in flight dropped (back to the dir of the current replica);
    4. the partitions Kafka's cancel left in another order put back in their order, with those an earlier cancel of
       the run had to leave so because of the cordons (:func:`read_held`);
    5. the run's throttles restored exactly, last (every copy has stopped by then).

    What CancelReassignmentOperator and the wait's ``on_timeout="cancel"`` / ``"rollback"`` do first
    (:func:`~airflow_kafka_reassign.core.execution.rollback.cancel_then_roll_back`). The session's own cancels
    (``on_deadline="cancel"``, ``on_unhealthy="cancel"``) are steps 1 and 4 only: the run's drain goes on (its cordons
    stay), and the run's end restores its throttles. ``result.throttles_restored`` / ``cordons_restored`` say whether
    there was a backup to restore."""
    log = log or _log
    done: dict[str, Any] = {}

    def give_back() -> None:  # step 2 and 3, between Kafka's cancel and the reorder
        if lease is not None:
            lease.confirm()
        done["lease"] = True
        if state_dir is not None and read_cordon_backup(state_dir) is not None:
            done["cordons"] = restore_cordons(admin, state_dir, log=log)
        if plan is not None and any(m.log_dirs for m in plan.moves):
            from airflow_kafka_reassign.core.execution.log_dirs import cancel_log_dir_moves  # it builds on this package

            done["log_dirs"] = cancel_log_dir_moves(admin, plan, log=log)

    result = cancel(admin, plan, cancel_all=cancel_all, dry_run=dry_run, rf_guard=rf_guard, log=log, sleep=sleep,
                    before_reorder=give_back, state_dir=state_dir, held=read_held(state_dir))
    if dry_run:
        result.throttles_restored = False
        return result
    if "lease" not in done:
        give_back()
    result.cordons_restored = bool(done.get("cordons"))
    result.log_dir_moves_cancelled = done.get("log_dirs") or {}
    result.throttles_restored = restore_throttles(admin, state_dir, log=log)
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
