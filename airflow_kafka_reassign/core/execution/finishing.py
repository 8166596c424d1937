"""The end of a run: throttles restored exactly, preferred leaders elected; and what a run reports from a step's reads."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from airflow_kafka_reassign.core.execution.config import ExecutionOptions
from airflow_kafka_reassign.core.execution.iteration import _elect
from airflow_kafka_reassign.core.execution.observe import _classify, _observe
from airflow_kafka_reassign.core.execution.progress import Observation, assess_parts, with_log_dirs
from airflow_kafka_reassign.core.execution.run_state import SUBMITTED
from airflow_kafka_reassign.core.execution.status import ExecutionStatus
from airflow_kafka_reassign.core.execution.throttle import (
    NONE_SET,
    RESTORED,
    read_backup,
    restore_throttles,
)
from airflow_kafka_reassign.core.records.journal import StateLocation, read_journal
from airflow_kafka_reassign.core.records.lease import LeaseKeeper
from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.vocabulary.move_state import MoveState
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin

_log = logging.getLogger(__name__)


def finish(
    admin: ClusterAdmin,
    plan: ReassignmentPlan,
    options: ExecutionOptions,
    *,
    state_dir: StateLocation | None,
    elect: bool | None = None,
    log: logging.Logger | None = None,
    lease: LeaseKeeper | None = None,
) -> dict[str, Any]:
    """Restore the throttles exactly as they were before the run; elect preferred leaders.

    ``elect`` defaults to ``options.elect_leaders``; it elects the preferred leader of every
    done move whose leader is not its first target replica. Returns a small summary. With
    ``lease``, it is confirmed first (a run that lost it restores nothing).
    """
    log = log or _log
    out: dict[str, Any] = {"throttles_restored": NONE_SET}
    if options.dry_run:
        return out
    if lease is not None:
        lease.confirm()
    out["throttles_restored"] = RESTORED if restore_throttles(admin, state_dir, log=log) else NONE_SET
    if elect if elect is not None else options.elect_leaders:
        obs = _observe(admin, {m.topic for m in plan.moves})
        status = _classify(plan, obs, options, {})
        status.elections.clear()
        _elect(admin, [tp for tp in status.done if obs.partitions[tp].leader != status.moves[tp].target_replicas[0]],
               status, log)
        out["elected"] = sum(1 for e in status.elections.values() if e is None)
        out["election_failed"] = {str(tp): e for tp, e in status.elections.items() if e}
    return out


def progress_observation(plan: ReassignmentPlan, status: ExecutionStatus, *, at: float,
                         refused: Mapping[TopicPartition, str] | None = None) -> Observation:
    """The progress watch's :class:`~airflow_kafka_reassign.core.execution.progress.Observation` of ``plan`` from what
    the step that made ``status`` read (its partitions, the live brokers, the sizes measured for the line):
    the execute task's progress line, and the sensor's poke that submitted, cost no request of their own.
    ``refused``: the moves refused so far (default: this step's ``status.failed``)."""
    obs = status.observation
    if obs is None:
        raise ValueError("this status was not made by step(): it has no observation to report progress from")
    seen = assess_parts(plan, obs.partitions, obs.brokers, status.sizes, at=at,
                        refused=status.failed if refused is None else refused, submitted=set(status.submitted),
                        gone=status.gone, waiting=status.waiting)
    if status.eta_s is not None:  # the engine's schedule under its limits (core/execution/schedule.py)
        seen = replace(seen, eta_s=status.eta_s)
    ld = status.log_dirs  # the moves between log dirs the step classified: a partition is done when they are
    if ld is None:
        return seen
    states = {r.tp: MoveState.FAILED for r in ld.failed}
    states.update({r.tp: MoveState.PENDING for r in (*ld.pending, *ld.waiting)})
    states.update({r.tp: MoveState.IN_FLIGHT for r in ld.in_flight})
    return with_log_dirs(seen, states)


def submitted_total(state_dir: StateLocation | None, this_run: Iterable[TopicPartition] = ()) -> int:
    """Distinct moves submitted for this plan by any run so far: the journal's ``submitted`` entries (and ``this_run``)."""
    seen = {(tp.topic, tp.partition) for tp in this_run}
    if state_dir is not None:
        try:
            entries = read_journal(state_dir)
        except Exception:  # noqa: BLE001 (the journal is a best-effort record)
            entries = []
        for entry in entries:
            if entry.get("event") == SUBMITTED:
                seen.update((str(t), int(p)) for t, p, *_ in entry.get("submitted", []))
    return len(seen)



def release_idle_throttles(admin: ClusterAdmin, plan: ReassignmentPlan | None, state_dir: StateLocation, *,
                           before_restore: Callable[[], None] | None = None, plan_uri: str = "",
                           log: logging.Logger | None = None) -> tuple[str, str]:
    """The clean-up's half for throttles: however the run ended (a wait that failed on its last try, a worker lost),
    the throttles it set go back once none of the plan's moves is in flight. ``(outcome, why)``: ``"restored"``,
    ``"none"`` (no backup on the run state: none set, or restored already) or ``"kept"`` (moves still in flight keep
    them, and the line names the tasks that restore them). ``before_restore`` runs right before anything is written
    (a task takes the plan's lease there)."""
    log = log or _log
    if read_backup(state_dir) is None:
        return "none", "no throttle backup on the run state: none was set, or they were restored already"
    moves = {m.tp: m.target_replicas for m in plan.moves} if plan is not None else {}
    listed = admin.list_reassignments(list(moves)) if moves else admin.list_reassignments()
    ours = sorted(tp for tp, r in listed.items() if tp in moves and r.target_replicas == moves[tp])
    if ours:
        where = f"plan_uri={plan_uri!r}" if plan_uri else "the plan"
        return "kept", (f"{len(ours)} move(s) of the plan are still in flight ({', '.join(map(str, ours[:5]))}"
                        f"{' ...' if len(ours) > 5 else ''}) and keep their throttles: WaitForReassignmentSensor("
                        f"{where}) restores them when they finish, CancelReassignmentOperator({where}) cancels them "
                        "and restores them")
    if before_restore is not None:
        before_restore()
    restore_throttles(admin, state_dir, log=log)
    return "restored", "no move of the plan is in flight: the throttle configs it set are back as they were before"
