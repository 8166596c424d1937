"""Where a plan is and who drives it: what the operators, the sensor and the trigger share.

* :func:`plan_store` opens the plan directory of a ``plan_uri`` through the storage layer
  (``airflow_kafka_reassign.storage``: a local path, or object storage with ``storage_conn_id``),
  failing with the URI and the fix named when there is no plan there or the store cannot be used.
* :func:`lease_identity` names the task that takes a plan's lease (core/lease.py): the tasks of
  one DAG run share a scope (a retry or the next task takes over at once), any other run waits
  for the lease to expire.
* :class:`WaitSpec` is everything a wait needs, JSON-serialisable: the sensor builds it and the
  trigger (in the triggerer, which shares no disk with the workers) rebuilds it from its kwargs.

No Airflow import at module level beyond what the hook needs, and none of the trigger module:
operators import this, not ``triggers/``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from airflow_kafka_reassign.core.adaptive import AdaptiveBounds
from airflow_kafka_reassign.core.cancel import cancel, live_rollback
from airflow_kafka_reassign.core.execution import (
    ExecutionLimits,
    ExecutionOptions,
    RunGovernor,
    progress_observation,
    step,
)
from airflow_kafka_reassign.core.health import HealthPolicy
from airflow_kafka_reassign.core.journal import journal, read_journal
from airflow_kafka_reassign.core.lease import DEFAULT_TTL_S, LeaseKeeper
from airflow_kafka_reassign.core.plan_io import read_plan, read_plan_with_digest, read_rollback
from airflow_kafka_reassign.core.progress import (
    DEFAULT_WINDOW_S,
    Progress,
    ReassignmentWatch,
    SubmitOutcome,
    Submitter,
    TrackerState,
    final_message,
)
from airflow_kafka_reassign.core.store import Store, StoreError
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.storage import DEFAULT_TIMEOUT_S, open_plan, run_state

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.models import ReassignmentPlan, TopicPartition
    from airflow_kafka_reassign.core.ports import ClusterAdmin

Which = Literal["plan", "rollback"]


def plan_store(plan_uri: str, *, conn_id: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Store:
    """The plan directory of ``plan_uri`` (see :func:`airflow_kafka_reassign.storage.open_plan`).

    Storage failures become :class:`~airflow_kafka_reassign.exceptions.ConfigurationError` too: the
    message names the URI and the fix, and retrying the task with the same settings would not help
    more than the bounded retries the store already made."""
    try:
        return open_plan(plan_uri, conn_id=conn_id, timeout_s=timeout_s)
    except StoreError as e:
        raise ConfigurationError(str(e)) from None


def _governor_name(key: str) -> str:
    return f"{GOVERNOR_DIR}/{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def _read_governor(state: Store, key: str | None, log: logging.Logger) -> dict[str, Any] | None:
    """The governor this task try's submitter left (``None``: none, another try's, or unreadable: best effort,
    as the write, so a damaged object costs the adaptive state, never the run)."""
    if not key:
        return None
    try:
        data = state.read(_governor_name(key))
        saved = json.loads(data) if data else None
        ok = isinstance(saved, dict) and saved.get("holder") == key and isinstance(saved.get("governor"), dict)
    except Exception as e:  # noqa: BLE001 (see above)
        log.warning("could not read the submitter's adaptive state in %s (%s): starting afresh", state.uri, e)
        return None
    return saved if ok else None


def _write_governor(state: Store, key: str | None, data: dict[str, Any], written: list[str],
                    log: logging.Logger) -> None:
    """Keep the governor for a rebuilt submitter of this try (written when it changed; best effort: a failed
    write costs a rebuilt submitter its adaptive state, never the run)."""
    if not key:
        return
    text = json.dumps({"holder": key, **data}, sort_keys=True)
    # the watch's last sample and rate change at every poke with a copy under way; a rebuilt watch can take its
    # rate over a longer interval, so those alone do not make a write
    same = json.dumps({"holder": key, **data, "governor": {**data["governor"], "watch": {
        k: v for k, v in (data["governor"].get("watch") or {}).items() if k not in ("last", "rate")}}}, sort_keys=True)
    if written and written[-1] == same:
        return
    try:
        state.write(_governor_name(key), text.encode())
    except Exception as e:  # noqa: BLE001 (see above)
        log.warning("could not keep the submitter's adaptive state in %s: %s", state.uri, e)
        return
    written[:] = [same]


def lease_identity(context: Mapping[str, Any] | None, task_id: str) -> tuple[str, str]:
    """``(holder, scope)`` of the lease a task takes: scope = the DAG run, holder = the task try and worker."""
    ti = (context or {}).get("ti")
    dag_id = getattr(ti, "dag_id", None) or "-"
    run_id = getattr(ti, "run_id", None) or (context or {}).get("run_id") or f"pid-{os.getpid()}"
    try_number = getattr(ti, "try_number", None)
    map_index = getattr(ti, "map_index", -1)
    task = task_id if map_index in (None, -1) else f"{task_id}[{map_index}]"
    holder = (f"dag {dag_id} / run {run_id} / task {task}" + (f" / try {try_number}" if try_number else "")
              + f" on {socket.gethostname()} (pid {os.getpid()})")
    return holder, f"{dag_id}/{run_id}"


#: Journal events: ExecuteReassignment ran this plan.json (its digest), and a health policy stopped a task try's
#: submissions (kept across the sensor's pokes, deferral and triggerer restarts).
PLAN_EXECUTED = "plan-executed"
HEALTH_STOPPED = "health-stopped"
#: The journal event of the moves in flight cancelled by ``on_unhealthy="cancel"`` (with the cancel's summary).
HEALTH_CANCELLED = "health-cancelled"
#: Where a sensor's submitter keeps its governor between rebuilds (one small object per task try, overwritten):
#: ``<run dir>/governor/<try>.json``.
GOVERNOR_DIR = "governor"

#: The logger the execution engine logs to while the sensor submits: its INFO lines (the exact requests,
#: throttle changes) are kept out of the task log, so each poke stays ONE line; warnings and errors pass.
STEP_LOGGER = "airflow_kafka_reassign.sensors.submit"
#: Consecutive polls that may fail to reach the cluster before the wait fails.
MAX_UNREACHABLE_POLLS = 3

Which = Literal["plan", "rollback"]


#: The adapter logs each AlterPartitionReassignments it sends at INFO; while the sensor submits, the progress
#: line's "+N submitted" says it instead.
ADAPTER_LOGGER = "airflow_kafka_reassign.kafka.admin"


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


def absolute_deadline(value: Any, name: str = "deadline") -> datetime | None:
    """An aware datetime from a datetime or ISO-8601 text (naive means UTC); ``None``/``""``: no deadline.

    A duration is refused: a wait re-reads its arguments at every poke (and after a reschedule), so
    "2h from now" would move; the DAG renders the absolute time once, for example
    ``"{{ (dag_run.start_date + macros.timedelta(minutes=params.window_minutes)).isoformat() }}"``."""
    if value is None or value == "":
        return None
    at = value
    if isinstance(value, str):
        try:
            at = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            at = None
    if not isinstance(at, datetime):
        raise ConfigurationError(
            f"{name} {value!r} is not a date-time: give a datetime or ISO-8601 text, such as "
            "'{{ (dag_run.start_date + macros.timedelta(minutes=90)).isoformat() }}' renders to (a duration would "
            "restart at every poke)"
        )
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


@dataclass(frozen=True)
class WaitSpec:
    """Everything a wait needs, JSON-serialisable (the trigger's kwargs carry it as a dict).

    ``limits`` and ``options`` are the keyword arguments of
    :class:`~airflow_kafka_reassign.core.execution.ExecutionLimits` /
    :class:`~airflow_kafka_reassign.core.execution.ExecutionOptions` (``options["health"]``: those of
    :class:`~airflow_kafka_reassign.core.health.HealthPolicy`), used when ``submit_pending`` is on and for
    finishing (throttles, leader election) and the timeout policies. ``adaptive``: the
    :class:`~airflow_kafka_reassign.core.adaptive.AdaptiveBounds` of the submissions (``None``: fixed limits).
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
    limits: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    storage_conn_id: str | None = None
    storage_timeout_s: float = DEFAULT_TIMEOUT_S
    state_dir: str | None = None
    lease_holder: str | None = None
    lease_scope: str | None = None
    lease_ttl_s: float = DEFAULT_TTL_S
    adaptive: dict[str, Any] | None = None
    #: With ``submit_pending``: no move is submitted at or after this time (ISO-8601 with a time zone); the
    #: wait then ends once the moves in flight are done, leaving the pending ones for the next run.
    submit_until: str | None = None

    def __post_init__(self) -> None:
        if self.which not in ("plan", "rollback"):
            raise ConfigurationError(f"which must be 'plan' or 'rollback', not {self.which!r}")
        self.execution()  # validate the limits and options now, not at the first poke
        self.adaptive_bounds()
        self.deadline()

    def deadline(self) -> datetime | None:
        """``submit_until`` as an aware datetime (``None``: no deadline)."""
        return absolute_deadline(self.submit_until, "submit_until")

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
        where each partition is now (:func:`~airflow_kafka_reassign.core.cancel.live_rollback`): a partition
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
                                log=log)

    def execution(self) -> tuple[ExecutionLimits, ExecutionOptions]:
        options = dict(self.options)
        health = options.pop("health", None)
        try:
            if health is not None:
                options["health"] = HealthPolicy(**health)
            return ExecutionLimits(**self.limits), ExecutionOptions(**options)
        except TypeError as e:
            raise ConfigurationError(f"invalid execution limits or options: {e}") from None

    def adaptive_bounds(self) -> AdaptiveBounds | None:
        return AdaptiveBounds.parse(self.adaptive, max_moves=self.limits.get("max_moves"))

    def submitter(self, plan: ReassignmentPlan) -> Submitter | None:
        """Calls :func:`~airflow_kafka_reassign.core.execution.step` on every poke (with ``submit_pending``).

        The pokes share one :class:`~airflow_kafka_reassign.core.execution.RunGovernor`, as ExecuteReassignment's
        steps do: the health gate pauses (one ``PAUSED`` line per poke) and its policy stops the submissions
        (``max_pause_s`` passed, ``on_unhealthy="fail"``, or ``"cancel"``, which also cancels the plan's moves in
        flight); the pending moves are then refused by name, the wait goes on for the moves in flight and ends
        ``blocked``. With ``adaptive`` bounds the concurrency and the throttle follow AIMD from poke to poke.
        """
        if not self.submit_pending:
            return None
        limits, options = self.execution()
        state = self.state
        known: dict[TopicPartition, str] = {}
        log = _step_logger()
        leases: list[LeaseKeeper | None] = []
        self._check_executed_digest(state)
        # what the governor of this task try decided outlives this submitter (rebuilt at each reschedule poke, at
        # the deferral and when the triggerer restarts): a stop by the health policy (the same try never submits
        # again after it), a pause still running (its clock: max_pause_s), the adaptive limits
        key = self.lease_holder.split(" on ")[0] if self.lease_holder else None
        events = self._try_events(key)
        governor = RunGovernor(options.health, self.adaptive_bounds(), options.throttle_bytes_per_sec, holder=key)
        saved = _read_governor(state, key, log)
        if saved:
            try:
                governor.restore(saved["governor"])
            except (KeyError, TypeError, ValueError) as e:  # another provider version's shape: start afresh
                log.warning("could not restore the submitter's adaptive state (%s): starting afresh", e)
                governor = RunGovernor(options.health, self.adaptive_bounds(), options.throttle_bytes_per_sec,
                                       holder=key)
                saved = None
        stopped: list[str] = [e["why"] for e in events if e.get("event") == HEALTH_STOPPED][:1]
        done_before: list[int | None] = [saved.get("done") if saved else None]
        written: list[str] = []
        until = self.deadline()
        said: list[bool] = []

        def submit(admin: ClusterAdmin) -> SubmitOutcome:
            if not leases:  # taken at the first submission, in the process that submits (worker or triggerer)
                leases.append(self.take_lease(log))
            past = until is not None and datetime.now(UTC) >= until
            step_limits, step_options = governor.for_step(limits, options)
            changes = len(governor.adaptations)
            with _quiet(ADAPTER_LOGGER):
                status = step(admin, plan, step_limits, step_options, state_dir=state,
                              submit=not stopped and not past, log=log, known_failed=known, lease=leases[0])
                if not stopped and not past:  # wall-clock times: a rebuilt submitter goes on from them
                    stop = governor.health(status, at=time.time(), submitting=True, log=log)
                    if stop is not None:
                        stopped.append(stop)
                        log.error("%s", stop)
                        journal(state, {"event": HEALTH_STOPPED, "holder": key, "why": stop}, log=log)
                        if options.health.on_unhealthy == "cancel" and status.in_flight:
                            cancelled = cancel(admin, plan, rf_guard=options.rf_guard, log=log)
                            log.warning("on_unhealthy=cancel: %s", cancelled.line())
                            journal(state, {"event": HEALTH_CANCELLED, "holder": key,
                                            "cancel": cancelled.summary()}, log=log)
                    else:  # a new submitter's first poke counts nothing as just finished
                        before = len(status.done) if done_before[0] is None else done_before[0]
                        governor.adapt(admin, status, before, at=time.time(), options=step_options,
                                       state_dir=state, log=log, measure=plan.partitions if self.measure_bytes else None)
            if past and status.pending and not said:
                said.append(True)
                log.warning("deadline %s passed: no new move is submitted; %d in flight finish, %d pending are left "
                            "for the next run", until.isoformat() if until else "", len(status.in_flight),
                            len(status.pending))
            if stopped:  # never sent now (nor a cancelled move again): the wait ends "blocked", naming them,
                # once the moves in flight are done
                known.update(dict.fromkeys(status.pending, f"not sent: {stopped[0]}"))
            done_before[0] = len(status.done)
            _write_governor(state, key, {"governor": governor.export(), "done": done_before[0]}, written, log)
            known.update(status.failed)
            refused = {**status.failed, **{tp: known[tp] for tp in status.pending if tp in known}}
            if status.disk_held and status.blocked and not status.in_flight:
                # the disk guard: nothing in flight to free space and no pending move fits; the wait ends "blocked"
                refused.update({tp: f"not sent, disk guard: {status.disk_held.get(tp, 'nothing fits before it')}"
                                for tp in status.pending})
                log.error("%s", status.blocked)
            if status.plan_errors and status.blocked:
                # the plan is refused whole: its pending moves are never sent, so the wait does not wait for them
                # (it ends "blocked", naming them, once the moves in flight are done)
                refused.update(dict.fromkeys(status.pending, "not sent: the whole plan is refused for its plan "
                                                             "errors (see the warning)"))
            # the poke's progress line from this step's reads, when they cover the plan (sizes measured or not wanted)
            covered = status.observation is not None and (status.sizes is not None or not self.measure_bytes)
            observed = (lambda at, refused_now: progress_observation(plan, status, at=at, refused=refused_now)) \
                if covered else None
            return SubmitOutcome(submitted=len(status.submitted), refused=refused,
                                 blocked=stopped[0] if stopped else status.blocked,
                                 notes=tuple(f"adaptive limits: {why}" for why in governor.adaptations[changes:]),
                                 closed=past, observed=observed)

        return submit

    def _try_events(self, key: str | None = None) -> list[dict[str, Any]]:
        """This task try's journal entries: the lease holder without its host and pid names the try, whichever
        worker or triggerer wrote them."""
        key = key or (self.lease_holder.split(" on ")[0] if self.lease_holder else None)
        return [e for e in read_journal(self.state) if e.get("holder") == key] if key else []

    def health_stop(self) -> dict[str, Any] | None:
        """What the health policy did in this task try, for the summary: ``{"why": ..., "cancel": {...}}``
        (``cancel`` with ``on_unhealthy="cancel"``: the cancel's summary), or ``None``."""
        events = self._try_events()
        stops = [e for e in events if e.get("event") == HEALTH_STOPPED]
        if not stops:
            return None
        cancels = [e["cancel"] for e in events if e.get("event") == HEALTH_CANCELLED]
        return {"why": stops[0]["why"], "cancel": cancels[0] if cancels else None}

    def _check_executed_digest(self, state: Store) -> None:
        """Refuse to submit from a plan.json other than the one ExecuteReassignment ran (and its approval
        covered): its digest is in the run's journal (``plan-executed``)."""
        digest = getattr(self, "_digest", None)
        ran = [e.get("plan_sha256") for e in read_journal(state) if e.get("event") == PLAN_EXECUTED]
        if digest and ran and ran[-1] != digest:
            raise ConfigurationError(
                f"plan.json in {self.plan_uri} changed since ExecuteReassignment ran it (sha256 {ran[-1]}, now "
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
    return {
        "status": progress.status,
        "message": final_message(progress),
        "summary": progress.summary(plan_uri=spec.plan_uri, which=spec.which),
    }
