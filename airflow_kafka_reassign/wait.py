"""The wait for a plan: what WaitForReassignmentSensor and its trigger share.

:class:`WaitSpec` is everything a wait needs, JSON-serialisable: the sensor builds it and the trigger (in the
triggerer, which shares no disk with the workers) rebuilds it from its kwargs. With ``submit_pending`` each poke
ticks the plan's :class:`~airflow_kafka_reassign.core.execution.ExecutionSession` once, the same session
ExecuteReassignment runs, resumed from the run state (:meth:`ExecutionSession.resume`) wherever the poke runs.

No Airflow import at module level beyond what the hook needs, and none of the trigger module: the sensor imports
this, the trigger too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession, progress_observation
from airflow_kafka_reassign.core.execution.cancel import live_rollback
from airflow_kafka_reassign.core.execution.config import SUMMARY_SAMPLE
from airflow_kafka_reassign.core.execution.progress import (
    DEFAULT_WINDOW_S,
    Progress,
    ReassignmentWatch,
    SubmitOutcome,
    Submitter,
    TrackerState,
    final_message,
)
from airflow_kafka_reassign.core.execution.run_state import cluster_events, executed_digest, health_stop, try_key
from airflow_kafka_reassign.core.maintenance.rounds import read_goal
from airflow_kafka_reassign.core.records.lease import DEFAULT_TTL_S, LeaseKeeper
from airflow_kafka_reassign.core.records.plan_io import read_plan, read_plan_with_digest, read_rollback
from airflow_kafka_reassign.core.records.store import Store, StoreError
from airflow_kafka_reassign.core.vocabulary.durations import deadline as parse_deadline
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.plan_storage import DEFAULT_TIMEOUT_S, plan_store, run_state

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan
    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin

Which = Literal["plan", "rollback"]

#: The logger the execution engine logs to while the sensor submits: its INFO lines (the exact requests,
#: throttle changes) are kept out of the task log, so each poke stays ONE line; warnings and errors pass.
STEP_LOGGER = "airflow_kafka_reassign.sensors.submit"
#: The adapter logs each AlterPartitionReassignments it sends at INFO; while the sensor submits, the progress
#: line's "+N submitted" says it instead.
ADAPTER_LOGGER = "airflow_kafka_reassign.kafka.admin"
#: The soonest a deferred wait pokes again after a poke (a move predicted to finish sooner is seen at the next one).
MIN_POLL_S = 1.0


def _step_logger() -> logging.Logger:
    log = logging.getLogger(STEP_LOGGER)
    log.setLevel(logging.WARNING)
    return log


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """INFO of logger ``name`` off for the duration (warnings and errors still pass)."""
    log = logging.getLogger(name)
    before = log.level
    if before == logging.NOTSET or before < logging.WARNING:
        log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        log.setLevel(before)


@dataclass(frozen=True)
class WaitSpec:
    """Everything a wait needs, JSON-serialisable (the trigger's kwargs carry it as a dict).

    ``execution`` is the task's :class:`~airflow_kafka_reassign.core.execution.ExecutionConfig` as JSON (its
    ``disk_reserve`` resolved by the sensor, in the worker), used when ``submit_pending`` is on and for finishing
    (throttles, leader election) and the timeout policies.
    """

    plan_uri: str
    which: Which = "plan"
    kafka_config_id: str = "kafka_default"
    kafka_timeout_s: float = 30.0
    stuck_after_s: float = 600.0
    timeout_s: float | None = None
    measure_bytes: bool = True
    window_s: float = DEFAULT_WINDOW_S
    submit_pending: bool = False
    execution: dict[str, Any] = field(default_factory=dict)
    storage_conn_id: str | None = None
    storage_timeout_s: float = DEFAULT_TIMEOUT_S
    state_dir: str | None = None
    lease_holder: str | None = None
    lease_scope: str | None = None
    lease_ttl_s: float = DEFAULT_TTL_S
    #: With ``submit_pending``: no move is submitted at or after this time (ISO-8601 with a time zone); the
    #: wait then ends once the moves in flight are done, leaving the pending ones for the next run.
    submit_until: str | None = None
    #: The longest pause between two pokes (the sensor's ``poke_interval``): with ``submit_pending`` the trigger
    #: pokes sooner, when the session predicts the first move in flight finishes (a freed slot is refilled then).
    poll_interval_s: float = 30.0

    def __post_init__(self) -> None:
        if self.which not in ("plan", "rollback"):
            raise ConfigurationError(f"which must be 'plan' or 'rollback', not {self.which!r}")
        self.config()  # validate the settings now, not at the first poke
        self.deadline()

    def config(self) -> ExecutionConfig:
        """The execution settings."""
        return ExecutionConfig.parse(self.execution)

    def deadline(self) -> datetime | None:
        """``submit_until`` as an aware datetime (``None``: no deadline)."""
        return parse_deadline(self.submit_until, name="submit_until", durations=False)

    @cached_property
    def plan_store(self) -> Store:
        """The plan directory (local or object storage), checked to hold a plan."""
        return plan_store(self.plan_uri, conn_id=self.storage_conn_id, timeout_s=self.storage_timeout_s)

    @cached_property
    def state(self) -> Store:
        """Where the run state lives (throttle backup, lease, journal): ``state_dir`` or ``<plan>/run``."""
        try:
            return run_state(self.plan_store, self.state_dir, conn_id=self.storage_conn_id,
                             timeout_s=self.storage_timeout_s)
        except StoreError as e:
            raise ConfigurationError(str(e)) from None

    def load_plan(self, admin: ClusterAdmin | None = None) -> ReassignmentPlan:
        """The plan this wait is about. With ``which="rollback"`` and an ``admin``, the rollback starts from
        where each partition is now (:func:`~airflow_kafka_reassign.core.execution.cancel.live_rollback`): a partition
        that a cancel left on its replicas in another order, or finished, is not refused as stale."""
        if self.which == "plan":
            plan, digest = read_plan_with_digest(self.plan_store)
            object.__setattr__(self, "_digest", digest)  # a frozen spec: the digest of the plan it loaded, not a field
            return plan
        rollback = read_rollback(self.plan_store)
        return rollback if admin is None else live_rollback(admin, rollback, read_plan(self.plan_store))

    def take_lease(self, log: logging.Logger | None = None) -> LeaseKeeper | None:
        """The plan's lease for this wait's task (``None`` when the spec names no holder: a bare watch)."""
        if not self.lease_holder or not self.lease_scope:
            return None
        return LeaseKeeper.take(self.state, holder=self.lease_holder, scope=self.lease_scope, ttl_s=self.lease_ttl_s,
                                log=log, take_over_from=self.config().take_over_from)

    def session(self, admin: ClusterAdmin, plan: ReassignmentPlan, log: logging.Logger | None = None
                ) -> ExecutionSession:
        """The plan's execution session for this task try, resumed from the run state; the lease is taken at its
        first tick, in the process that ticks (worker or triggerer)."""
        log = log or _step_logger()
        return ExecutionSession.resume(admin, plan, self.config(), state_dir=self.state,
                                       holder=try_key(self.lease_holder), lease=lambda: self.take_lease(log),
                                       deadline=self.deadline(), measure=self.measure_bytes, log=log,
                                       poll_interval_s=self.poll_interval_s, min_poll_interval_s=MIN_POLL_S,
                                       goal=read_goal(self.plan_store) if self.which == "plan" else None)

    def submitter(self, plan: ReassignmentPlan) -> Submitter | None:
        """Ticks the plan's session once per poke (with ``submit_pending``); see :func:`poke_outcome`."""
        if not self.submit_pending:
            return None
        self._check_executed_digest(self.state)
        sessions: list[ExecutionSession] = []  # built at the first poke, with that poke's admin

        def submit(admin: ClusterAdmin) -> SubmitOutcome:
            if not sessions:
                sessions.append(self.session(admin, plan))
            session = sessions[0]
            session.admin = admin
            with _quiet(ADAPTER_LOGGER):
                outcome = poke_outcome(session, measure_bytes=self.measure_bytes)
            session.save()
            return outcome

        return submit

    def health_stop(self) -> dict[str, Any] | None:
        """What the health policy did in this task try, for the summary (``None``: nothing)."""
        return health_stop(self.state, try_key(self.lease_holder))

    def _check_executed_digest(self, state: Store) -> None:
        """Refuse to submit from a plan.json other than the one ExecuteReassignment ran (and its approval
        covered): its digest is in the run's journal (``plan-executed``)."""
        digest = getattr(self, "_digest", None)
        ran = executed_digest(state)
        if digest and ran and ran != digest:
            raise ConfigurationError(
                f"plan.json in {self.plan_uri} changed since ExecuteReassignment ran it (sha256 {ran}, now "
                f"{digest}): nothing is submitted from an edited plan. Plan again (and approve it again), then run it")

    def watch(self, *, started_at: float, state: TrackerState | None = None,
              plan: ReassignmentPlan | None = None, admin: ClusterAdmin | None = None) -> ReassignmentWatch:
        plan = plan if plan is not None else self.load_plan(admin)
        return ReassignmentWatch(
            plan, started_at=started_at, stuck_after_s=self.stuck_after_s, timeout_s=self.timeout_s,
            measure_bytes=self.measure_bytes, window_s=self.window_s, state=state, submitter=self.submitter(plan),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def poke_outcome(session: ExecutionSession, *, measure_bytes: bool) -> SubmitOutcome:
    """One tick of ``session`` as a poke of the wait sees it: the moves submitted, the moves refused (those the
    health policy, the disk guard or a refused plan will never send, named, so the wait ends ``blocked`` once the
    moves in flight are done), why nothing may be submitted, the adaptive limits' notes, the deadline, and the
    plan as the tick read it (the poke then reads the cluster no second time)."""
    tick = session.tick()
    status = tick.status
    known = session.known_failed
    refused = {**status.failed, **{tp: known[tp] for tp in status.pending if tp in known}}
    if status.disk_held and status.blocked and not status.in_flight:
        # the disk guard: nothing in flight to free space and no pending move fits
        refused.update({tp: f"not sent, disk guard: {status.disk_held.get(tp, 'nothing fits before it')}"
                        for tp in status.pending})
        session.log.error("%s", status.blocked)
    if status.plan_errors and status.blocked:
        # the plan is refused whole: its pending moves are never sent, so the wait does not wait for them
        refused.update(dict.fromkeys(status.pending, "not sent: the whole plan is refused for its plan errors "
                                                     "(see the warning)"))
    covered = status.observation is not None and (status.sizes is not None or not measure_bytes)
    plan = session.plan
    observed = (lambda at, refused_now: progress_observation(plan, status, at=at, refused=refused_now)) \
        if covered else None
    notes = [f"adaptive limits: {why}" for why in tick.adaptations]
    if tick.drained_later:
        what = session.goal.what if session.goal is not None else "the goal"
        notes.append(f"round {session.drain_rounds}: {len(tick.drained_later)} partition(s) that arrived on {what} "
                     "meanwhile are moved off in this run")
    return SubmitOutcome(submitted=len(status.submitted), refused=refused, blocked=tick.health_stop or status.blocked,
                         notes=tuple(notes), closed=tick.past_deadline, observed=observed, plan=plan,
                         next_poll_s=tick.next_poll_s, gone=dict(status.gone), waiting=dict(status.waiting))


def make_admin(spec: WaitSpec) -> ClusterAdmin:
    """A cluster admin from the spec's Airflow connection (tests replace this)."""
    from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook

    return KafkaReassignHook(kafka_config_id=spec.kafka_config_id, timeout_s=spec.kafka_timeout_s).get_admin()


def log_progress(log: logging.Logger | Any, progress: Progress, watch: ReassignmentWatch, last_blocked: str | None) -> str | None:
    """Log a poke: ONE line, plus a warning when moves are stuck or submission is blocked (when that changes)."""
    log.info("%s", progress.line())
    for note in watch.notes:
        log.info("%s", note)
    if progress.warn:
        log.warning("%s", progress.stuck_message())
    if watch.blocked and watch.blocked != last_blocked:
        log.warning("no move is submitted: %s", watch.blocked)
    return watch.blocked


def event_payload(progress: Progress, spec: WaitSpec) -> dict[str, Any]:
    """The trigger event (and the sensor's conclusion input) for a finished wait."""
    extra: dict[str, Any] = {}
    if spec.submit_pending:  # what the cluster did under the plan, as the session journalled it (every process)
        try:
            extra["cluster_events"] = cluster_events(spec.state)[:SUMMARY_SAMPLE]
        except (StoreError, ConfigurationError) as e:
            extra["cluster_events_unread"] = str(e)
    return {
        "status": progress.status,
        "message": final_message(progress),
        "summary": progress.summary(plan_uri=spec.plan_uri, which=spec.which, **extra),
    }
