"""One retry-safe iteration, :func:`step`: observe, reconcile the throttles, submit what fits."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from airflow_kafka_reassign.core.execution.batch import (
    _disk_room,
    _disk_verdict,
    _request_json,
    _submit,
    ordered,
    select_batch,
)
from airflow_kafka_reassign.core.execution.config import SETTLE_RECHECK_S, ExecutionLimits, ExecutionOptions
from airflow_kafka_reassign.core.execution.log_dirs import observe_log_dirs, submit_log_dirs
from airflow_kafka_reassign.core.execution.observe import _assess, with_rf_guard
from airflow_kafka_reassign.core.execution.run_state import SUBMITTED
from airflow_kafka_reassign.core.execution.status import ExecutionStatus
from airflow_kafka_reassign.core.execution.throttle import (
    brokers_involved,
    sync_throttles,
)
from airflow_kafka_reassign.core.guards.disk import DiskReserve
from airflow_kafka_reassign.core.records.journal import StateLocation, journal
from airflow_kafka_reassign.core.records.lease import LeaseKeeper
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin
from airflow_kafka_reassign.exceptions import ConfigurationError

_log = logging.getLogger(__name__)




def step(
    admin: ClusterAdmin,
    plan: ReassignmentPlan,
    limits: ExecutionLimits,
    options: ExecutionOptions,
    *,
    state_dir: StateLocation | None = None,
    submit: bool = True,
    log: logging.Logger | None = None,
    known_failed: Mapping[TopicPartition, str] | None = None,
    settle_s: float = SETTLE_RECHECK_S,
    sleep: Callable[[float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    lease: LeaseKeeper | None = None,
) -> ExecutionStatus:
    """One retry-safe iteration: observe, reconcile throttles, submit what fits.

    Safe to call at any moment, from any process, any number of times: a move in flight is
    recognised from the controller's listing and never submitted again, a killed earlier call
    leaves nothing that this one does not reconcile. With ``submit=False`` (or when the run is
    blocked) nothing new goes out, but finished partitions still lose their throttles.

    :param state_dir: where the throttle backup lives (required with a throttle; the operators
        use ``<plan dir>/run``).
    :param known_failed: moves refused earlier in this run (``status.failed``), not sent again.
    :param settle_s: a move that looks stale is observed again after this delay before it is
        refused (describe can lag the controller right after a reassignment completes).
    :param should_stop: asked right before anything is written; ``True`` (a kill arrived while
        observing) submits nothing and leaves the throttles as they are.
    :param lease: the plan's lease (core/records/lease.py), confirmed (and renewed) right before anything
        is written; :class:`~airflow_kafka_reassign.core.records.lease.LeaseLostError` when another run
        took it over, and then nothing is written.
    """
    log = log or _log
    options = with_rf_guard(admin, options)[0]  # "auto" said once by the session; here only chosen
    if (options.throttled or options.log_dir_throttle_bytes_per_sec) and state_dir is None \
            and not options.dry_run:
        raise ConfigurationError(
            "a throttle needs a state_dir to keep the backup of the previous throttle values in; "
            "pass state_dir (the operators use <plan dir>/run)"
        )
    status, obs = _assess(admin, plan, options, known_failed=known_failed, settle_s=settle_s, sleep=sleep, log=log,
                          rf_guard_check=submit)
    if options.throttle_headroom is not None:  # before anything is set: every broker the plan copies on has a capacity
        options.throttle_headroom.check(brokers_involved(plan.moves) & obs.brokers, obs.racks)
    dirs = observe_log_dirs(admin, plan, status, known_failed=known_failed, log=log)  # None: the plan pins no log dir
    batch: list[Move] = []
    if submit and status.blocked is None and status.paused is None and status.pending:
        pending = [status.moves[tp] for tp in status.pending]
        sizes: Mapping[TopicPartition, Mapping[int, int]] = {}
        guard = options.disk_reserve if isinstance(options.disk_reserve, DiskReserve) else None
        room = None
        # every partition of the plan, once: the copy watch and the progress line of this poll reuse it
        if guard is not None:
            sizes, room = _disk_room(admin, plan, status, guard)
        elif limits.order != "plan" and limits.limited and len(pending) > 1:
            sizes = status.sizes = admin.replica_sizes(list(plan.partitions))
        plan_index = {m.tp: i for i, m in enumerate(plan.moves)}
        # redundancy first, below min ISR last (status.urgency, core/guards/health.py), then the order
        leaders = {tp: obs.partitions[tp].leader for tp in status.pending if tp in obs.partitions} \
            if limits.order == "balanced" else None
        in_order, touched = ordered(pending, limits, sizes, plan_index, urgency=status.urgency, tps=status.pending,
                                    leaders=leaders)
        held: dict[TopicPartition, str] = {}
        batch = select_batch(in_order, status.reassignments, limits, room, held, touched)
        status.queue = [m.tp for m in in_order]
        if room is not None and guard is not None:
            _disk_verdict(room, held, batch, status, guard, log)

    rate = options.replication_rate  # one rate, or per broker under the headroom throttle
    in_flight = [status.moves[tp] for tp in status.in_flight]
    if options.dry_run:
        sync_throttles(admin, [*in_flight, *batch], rate, state_dir=state_dir, dry_run=True, log=log,
                       live_brokers=obs.brokers)
        submit_log_dirs(admin, dirs, status, limits, options, state_dir=state_dir, submit=submit, log=log)
        if batch:
            status.would_submit = [m.tp for m in batch]
            for allow in (False, True):
                group = [m for m in batch if m.changes_rf == allow]
                if group:
                    log.info("DRY RUN: would send AlterPartitionReassignments (AllowReplicationFactorChange=%s, "
                             "rf_guard=%s): %s", str(allow).lower(), options.rf_guard, _request_json(group))
        return status

    if should_stop is not None and should_stop():
        return status
    if lease is not None:
        lease.confirm()
    sync_throttles(admin, [*in_flight, *batch], rate, state_dir=state_dir, log=log, live_brokers=obs.brokers)
    submit_log_dirs(admin, dirs, status, limits, options, state_dir=state_dir, submit=submit, log=log,
                    holder=lease.lease.holder if lease is not None else None)
    if batch:
        _submit(admin, batch, options, status, log)
        # sets, not the status's lists: every lookup below is O(1), so a step is linear in the moves
        sent = set(status.submitted)
        in_batch = {m.tp for m in batch}
        ok = [m for m in batch if m.tp in sent]
        journal(state_dir, {
            "event": SUBMITTED,
            "holder": lease.lease.holder if lease is not None else None,
            "submitted": [[m.topic, m.partition, list(m.target_replicas)] for m in ok],
            "refused": {str(tp): why for tp, why in status.failed.items() if tp in in_batch},
            "throttle_bytes_per_sec": options.throttle_bytes_per_sec,
        }, log=log)
        refused = [m for m in batch if m.tp in status.failed]
        status.pending = [tp for tp in status.pending if tp not in in_batch]
        if status.queue is not None:
            status.queue = [tp for tp in status.queue if tp not in in_batch]
        status.in_flight.extend(m.tp for m in ok)
        status.in_flight.sort()
        if refused and rate:
            sync_throttles(admin, [*in_flight, *ok], rate, state_dir=state_dir, log=log, live_brokers=obs.brokers)
    if options.elect_leaders:
        _elect(admin, [tp for tp in status.done if obs.partitions[tp].leader != status.moves[tp].target_replicas[0]],
               status, log)
    log.info("%s", status.progress_line())
    return status


def _elect(admin: ClusterAdmin, partitions: Sequence[TopicPartition], status: ExecutionStatus,
           log: logging.Logger) -> None:
    if not partitions:
        return
    for r in admin.elect_preferred_leaders(partitions):
        status.elections[r.tp] = r.error
        if r.error:
            log.warning("preferred-leader election of %s failed: %s %s", r.tp, r.error_code, r.error)
    log.info("preferred leaders elected for %d moved partition(s)", sum(1 for e in status.elections.values() if e is None))

