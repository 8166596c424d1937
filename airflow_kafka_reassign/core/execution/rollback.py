"""The rollback plan written before the first move goes out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_kafka_reassign.core.execution.cancel import CancelResult, cancel_plan, live_rollback
from airflow_kafka_reassign.core.execution.config import ExecutionConfig
from airflow_kafka_reassign.core.records.lease import LeaseKeeper
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.execution.session import RunResult

import logging

from airflow_kafka_reassign.core.execution.status import ExecutionStatus
from airflow_kafka_reassign.core.records.journal import StateLocation
from airflow_kafka_reassign.core.records.plan_io import KAFKA_ROLLBACK_FILE, ROLLBACK_FILE
from airflow_kafka_reassign.core.records.store import as_store
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan

_log = logging.getLogger(__name__)


def write_rollback_if_missing(plan_dir: StateLocation, plan: ReassignmentPlan, status: ExecutionStatus,
                              *, log: logging.Logger | None = None) -> str | None:
    """Write ``rollback.json`` (and Kafka's ``rollback-kafka.json``) into ``plan_dir`` unless present.

    Every move goes back to its expected current replicas, or, for a move read from a plain
    Kafka file (no ``current_replicas``), to the replicas the cluster has now, before anything
    is submitted. Returns where it was written, or ``None`` when a rollback plan already existed.
    """
    log = log or _log
    store = as_store(plan_dir)
    if store.read(ROLLBACK_FILE) is not None:
        return None
    moves = []
    for m in plan.moves:
        current = m.current_replicas
        if current is None and m.tp in status.moves:
            current = status.moves[m.tp].current_replicas
        if current is None:
            log.warning("rollback plan: %s is left out (its current replicas are unknown)", m.tp)
            continue
        moves.append(Move(topic=m.topic, partition=m.partition, target_replicas=current,
                          current_replicas=m.target_replicas,
                          allow_rf_change=len(current) != len(m.target_replicas)))
    rollback = ReassignmentPlan(moves=tuple(moves), partition_counts=plan.partition_counts)
    store.write(KAFKA_ROLLBACK_FILE, rollback.to_kafka_json().encode())
    store.write(ROLLBACK_FILE, rollback.model_dump_json().encode())
    where = f"{store.uri.rstrip('/')}/{ROLLBACK_FILE}"
    log.info("rollback plan written to %s (%d moves)", where, len(moves))
    return where



@dataclass
class CancelOutcome:
    """What :func:`cancel_then_roll_back` did: the cancel, and the rollback's run (``None``: none started)."""

    cancel: CancelResult
    rollback: RunResult | None = None
    #: the run's cordons (a decommission's, a disk removal's) were put back as they were before it
    cordons_restored: bool = False
    #: the plan's moves between log dirs that were in flight, dropped (``{replica: None, or why it failed}``)
    log_dir_moves_cancelled: dict[Any, str | None] = field(default_factory=dict)

    def rollback_problem(self) -> str | None:
        """Why the rollback did not put everything back (``None``: none was started, or it did)."""
        rolled = self.rollback
        if rolled is None or rolled.status.ok:
            return None
        status = rolled.status
        if status.blocked:
            return f"the rollback was refused: {status.blocked}"
        if status.stale or status.failed:
            return (f"the rollback refused {len(status.stale) + len(status.failed)} move(s) "
                    f"({', '.join(str(tp) for tp in sorted([*status.stale, *status.failed])[:10])})")
        if status.remaining:
            return (f"the rollback did not finish: {len(status.remaining)} move(s) remain; run this task again (it "
                    "resumes) or wait with WaitForReassignmentSensor(which='rollback', submit_pending=True)")
        return None


def cancel_then_roll_back(
    admin: ClusterAdmin,
    plan: ReassignmentPlan | None,
    config: ExecutionConfig,
    *,
    state_dir: StateLocation | None,
    rollback: ReassignmentPlan | None = None,
    cancel_all: bool = False,
    wait: bool = True,
    lease: LeaseKeeper | None = None,
    deadline: datetime | None = None,
    poll_interval_s: float = 5.0,
    should_stop: Callable[[], bool] = lambda: False,
    default_disk_reserve: str | None = None,
    log: logging.Logger | None = None,
) -> CancelOutcome:
    """Cancel the plan's moves in flight (or every reassignment, ``cancel_all``), restore the run's cordons (a
    decommission's: the brokers take new replicas again) BEFORE putting the cancelled partitions back in their replica
    order, and its throttles (:func:`~airflow_kafka_reassign.core.execution.cancel.cancel_plan`), then,
    with a ``rollback`` plan, move the partitions back: the rollback starts from where each partition is now
    (:func:`~airflow_kafka_reassign.core.execution.cancel.live_rollback`) and runs through the same session as any plan
    (to the end with ``wait``; else its first batch, its throttles left for the sensor that waits for it).

    The one path of CancelReassignment and of the sensor's ``on_timeout="cancel"`` / ``"rollback"``."""
    log = log or _log
    options = config.options(**({"default_disk_reserve": default_disk_reserve} if default_disk_reserve else {}))
    # one order (cancel_plan): Kafka's cancel, the cordons restored, the log-dir moves dropped, the reorder, the
    # throttles restored; then the rollback, whose moves go back onto the brokers and dirs the cordons had closed
    cancelled = cancel_plan(admin, plan, state_dir=state_dir, cancel_all=cancel_all, dry_run=options.dry_run,
                            rf_guard=options.rf_guard, lease=lease, log=log)
    outcome = CancelOutcome(cancelled, cordons_restored=bool(cancelled.cordons_restored),
                            log_dir_moves_cancelled=cancelled.log_dir_moves_cancelled)
    if rollback is None or should_stop():
        return outcome
    rollback = live_rollback(admin, rollback, plan)
    log.info("rolling back: %d move(s)", len(rollback))
    from airflow_kafka_reassign.core.execution.session import run  # the session builds on this module

    outcome.rollback = run(admin, rollback, config, state_dir=state_dir, deadline=deadline, wait=wait,
                           finish_at_end=wait, poll_interval_s=poll_interval_s, should_stop=should_stop, log=log,
                           lease=lease, default_disk_reserve=default_disk_reserve)
    return outcome
