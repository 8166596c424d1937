"""The execution engine: submit a plan's moves safely, in batches, under throttles; watch, cancel, roll back.

Pure (no Airflow, no Kafka client): it works on the :class:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterAdmin` port,
so the operators, the sensor, the trigger and the CLI share it, and unit tests drive it with the in-memory fake.

One object runs a plan: :class:`ExecutionSession` (``session.py``), ticked by every path (ExecuteReassignment
through :func:`run`, the sensor in each mode and its trigger, the rollback of cancel and of the timeout policy).
One tick is one retry-safe iteration (:func:`step`) that derives everything from the cluster and the plan:

* the controller's in-flight reassignments and the live replicas classify every move as **done**, **lagging**
  (replicas equal the target, the ISR misses one), **in flight** (the controller lists a reassignment to exactly
  the move's target: ours, whoever submitted it), **pending**, **stale** (elsewhere than the plan expected:
  refused with a diff) or **failed** (refused by a guard or the broker); every other reassignment is **foreign**;
* throttles are brought to exactly what the moves in flight need, from a backup of the values that existed
  before, written to the run state before the first throttle is set;
* then the next pending moves that fit the limits, the health gate and the disk guard are submitted, with
  KIP-860's AllowReplicationFactorChange=false unless a move is a deliberate RF change.

The parts, one concept each: ``config`` (the settings), ``status`` (where a plan stands), ``observe`` (reading and
classifying, pre-flight), ``batch`` (selecting and submitting), ``iteration`` (one step), ``governor`` (what carries
over between steps), ``finishing`` (restore, elect), ``rollback`` (the rollback plan), ``run_state`` (what a run
keeps on the plan storage), ``session`` (the loop), ``clock`` (the one wait).
"""

from __future__ import annotations

from airflow_kafka_reassign.core.execution.batch import select_batch
from airflow_kafka_reassign.core.execution.config import (
    ADAPTED,
    EXECUTION_SETTINGS,
    RUN_DIR,
    SETTLE_RECHECK_S,
    SUMMARY_SAMPLE,
    ExecutionConfig,
    ExecutionLimits,
    ExecutionOptions,
    OnDeadline,
    OnPlanError,
    Order,
)
from airflow_kafka_reassign.core.execution.finishing import finish, progress_observation, submitted_total
from airflow_kafka_reassign.core.execution.governor import RunGovernor
from airflow_kafka_reassign.core.execution.iteration import step
from airflow_kafka_reassign.core.execution.observe import (
    check_plan,
    plan_refusal,
    preflight,
    preflight_findings,
    refusal,
    report_preflight,
    rf_refusal,
)
from airflow_kafka_reassign.core.execution.rollback import CancelOutcome, cancel_then_roll_back, write_rollback_if_missing
from airflow_kafka_reassign.core.execution.session import ExecutionSession, RunResult, Tick, run
from airflow_kafka_reassign.core.execution.status import ExecutionStatus
from airflow_kafka_reassign.core.execution.throttle import THROTTLE_BACKUP_FILE, restore_throttles

__all__ = [
    "ADAPTED", "EXECUTION_SETTINGS", "RUN_DIR", "SETTLE_RECHECK_S", "SUMMARY_SAMPLE", "THROTTLE_BACKUP_FILE",
    "ExecutionConfig", "ExecutionLimits", "ExecutionOptions", "ExecutionSession", "ExecutionStatus", "OnDeadline",
    "OnPlanError", "Order", "RunGovernor", "RunResult", "Tick", "check_plan", "finish", "plan_refusal", "preflight",
    "preflight_findings", "progress_observation", "refusal", "report_preflight", "restore_throttles", "rf_refusal",
    "CancelOutcome", "cancel_then_roll_back", "run", "select_batch", "step", "submitted_total", "write_rollback_if_missing",
]
