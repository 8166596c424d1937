"""The cordons of a plan whose moves were never sent go back: a rejected approval, an approval that timed out, a plan
refused in pre-flight, a plan task that failed after it had cordoned.

PlanReassignment cordons before its snapshot (a decommission's brokers, a disk removal's log dirs: core/maintenance/cordon.py),
long before anything is executed, and backs up each broker's previous ``cordoned.log.dirs`` in the plan's run state.
From the first move sent, the cordons belong to the execution: a cancel or a rollback restores them, a finished drain
keeps them (until the brokers are unregistered, or for good for a removed dir). Before that, nothing else gives them
back; :func:`release_unexecuted_cordons` does, called by a clean-up task that runs whatever happened upstream
(the ``restore_cordons`` task of the example DAGs ``kafka_decommission_brokers`` and ``kafka_remove_disk``).

It restores the backup exactly (:func:`~airflow_kafka_reassign.core.maintenance.cordon.restore_cordons`: journalled, checked,
the backup deleted) unless the execution has it:

* the run's journal records a submission (reassignments, moves between log dirs, a drain round), or
* the cluster shows one of the plan's moves done or in flight (a submission whose journal entry was never written:
  the process died between the two);

and it keeps the cordons of a plan that moves nothing (what was to be emptied already is: like a finished drain).

Pure: imports no Airflow, no Kafka client, no PySpark.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from airflow_kafka_reassign.core.execution import ExecutionConfig, preflight
from airflow_kafka_reassign.core.execution.log_dirs import LOG_DIR_MOVES
from airflow_kafka_reassign.core.execution.run_state import DRAIN_ROUND, SUBMITTED
from airflow_kafka_reassign.core.maintenance.cordon import read_backup, restore_cordons
from airflow_kafka_reassign.core.records.journal import StateLocation, read_journal
from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin

_log = logging.getLogger(__name__)

#: The journal events that say the execution sent something (core/execution: iteration, log_dirs).
_SENT = (SUBMITTED, LOG_DIR_MOVES)


@dataclass(frozen=True)
class CordonRelease:
    """What :func:`release_unexecuted_cordons` did: ``restored`` (the backup put back exactly), ``kept`` (the
    execution owns the cordons, or the plan moves nothing) or ``none`` (no backup: nothing was cordoned, or it was
    restored already), and why."""

    outcome: Literal["restored", "kept", "none"]
    why: str
    brokers: tuple[int, ...] = ()

    def summary(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "why": self.why, "brokers": list(self.brokers)}


def sent_in_journal(entries: Iterable[Mapping[str, Any]]) -> str | None:
    """The first journal entry that says the execution sent something, described (``None``: nothing was sent)."""
    for e in entries:
        if e.get("event") in _SENT and e.get("submitted"):
            return f"the run's journal records {len(e['submitted'])} move(s) submitted at {e.get('at', '?')}"
        if e.get("event") == DRAIN_ROUND:
            return f"the run's journal records drain round {e.get('round', '?')} at {e.get('at', '?')}"
    return None


def started_on_cluster(admin: ClusterAdmin, plan: ReassignmentPlan, *, log: logging.Logger | None = None) -> str | None:
    """Which of the plan's moves the cluster shows done, in flight or lagging (``None``: none): the execution's own
    read-only pre-flight classification, with where the replicas of its moves between log dirs are. A move that keeps
    its replicas exactly (it only pins log dirs: a disk removal's) is "done" as a reassignment from the start: only
    its replicas' dirs tell whether it was sent."""
    status = preflight(admin, plan, ExecutionConfig().options(), log=log)
    same = {m.tp for m in plan.moves if m.current_replicas == m.target_replicas}
    started = sorted({*(tp for tp in status.done if tp not in same), *status.in_flight, *status.lagging})
    dirs = status.log_dirs
    if dirs is not None:
        started = sorted({*started, *(r.tp for r in (*dirs.done, *dirs.in_flight))})
    if not started:
        return None
    shown = ", ".join(str(tp) for tp in started[:5]) + (f" and {len(started) - 5} more" if len(started) > 5 else "")
    return f"the cluster shows {len(started)} of the plan's move(s) done or in flight ({shown})"


def release_unexecuted_cordons(
    admin: ClusterAdmin,
    state_dir: StateLocation,
    plan: ReassignmentPlan | None,
    *,
    before_restore: Callable[[], None] | None = None,
    log: logging.Logger | None = None,
) -> CordonRelease:
    """Restore the cordons the plan's task set (backed up in ``state_dir``, the plan's run state) when none of the
    plan's moves was sent; keep them otherwise (see the module docstring). ``plan``: the plan's moves (``None``: the
    plan task failed before writing one). ``before_restore`` runs right before anything is changed (a task takes the
    plan's lease there). Raises what :func:`restore_cordons` raises (the backup stays)."""
    log = log or _log
    backup = read_backup(state_dir)
    if backup is None or backup.empty:
        return CordonRelease("none", "the plan's run state holds no cordon backup: nothing was cordoned (a dry run, "
                                     "cordon=False, a cluster before Kafka 4.3), or the cordons were restored already")
    brokers = tuple(sorted(backup.brokers))
    owner = ("the execution owns the cordons now (a cancel or rollback restores them, a finished drain keeps them; "
             "UncordonBrokersOperator(plan_uri=...) takes them back): ")
    sent = sent_in_journal(read_journal(state_dir))
    if sent:
        return CordonRelease("kept", owner + sent, brokers)
    if plan is not None and not plan.moves:
        return CordonRelease("kept", "the plan moves nothing: what it was to empty is empty already, and stays "
                                     "cordoned like a finished drain (UncordonBrokersOperator(plan_uri=...) takes it "
                                     "back)", brokers)
    if plan is not None:
        started = started_on_cluster(admin, plan, log=log)
        if started:
            return CordonRelease("kept", owner + started, brokers)
    if before_restore is not None:
        before_restore()
        sent = sent_in_journal(read_journal(state_dir))  # an execution that ran meanwhile, now the lease is ours
        if sent:
            return CordonRelease("kept", owner + sent, brokers)
    restore_cordons(admin, state_dir, log=log)
    why = ("none of the plan's moves was sent" if plan is not None
           else "the plan task wrote no plan (it failed after cordoning)")
    return CordonRelease("restored", f"{why}: cordoned.log.dirs restored exactly as before on brokers "
                                     f"{list(brokers)}", brokers)
