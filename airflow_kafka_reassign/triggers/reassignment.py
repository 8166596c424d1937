"""The deferrable half of :class:`~airflow_kafka_reassign.sensors.reassignment.WaitForReassignmentSensor`.

:class:`ReassignmentTrigger` polls a plan's progress in the triggerer: every ``poke_interval`` seconds it runs one
:meth:`~airflow_kafka_reassign.core.progress.ReassignmentWatch.poke` (the same code the sensor runs in poke mode) in
a thread (``asyncio.to_thread``: the Kafka clients block), logs one progress line, and yields ONE event when the
wait is over::

    {"status": "complete" | "blocked" | "timeout" | "error", "message": str, "summary": {...}}

The worker then concludes (XCom summary, throttles restored, the timeout policy): the trigger itself never cancels
or rolls back anything. With ``submit_pending`` it does submit the plan's pending moves within the limits
(:func:`airflow_kafka_reassign.core.execution.step`), which is retry-safe by construction.

Restart-safe: the kwargs hold only the plan's location, the settings, the start time and the small tracker state
at deferral (last progress time, best values, throughput samples). Everything else is read again from the cluster
and the plan directory, so a triggerer that dies and restarts the trigger loses nothing but the samples taken since
deferral (the ETA needs a poke or two to settle again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_kafka_reassign.core.execution import RUN_DIR, ExecutionLimits, ExecutionOptions, step
from airflow_kafka_reassign.core.plan_io import read_plan, read_rollback
from airflow_kafka_reassign.core.progress import (
    DEFAULT_WINDOW_S,
    Progress,
    ReassignmentWatch,
    SubmitOutcome,
    Submitter,
    TrackerState,
    final_message,
)
from airflow_kafka_reassign.exceptions import ClusterUnreachableError, ConfigurationError

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.models import ReassignmentPlan, TopicPartition
    from airflow_kafka_reassign.core.ports import ClusterAdmin

#: The logger the execution engine logs to while the sensor submits: its INFO lines (the exact requests,
#: throttle changes) are kept out of the task log, so each poke stays ONE line; warnings and errors pass.
STEP_LOGGER = "airflow_kafka_reassign.sensors.submit"
#: Consecutive polls that may fail to reach the cluster before the wait fails.
MAX_UNREACHABLE_POLLS = 3

Which = Literal["plan", "rollback"]


def resolve_plan_dir(plan_uri: str) -> Path:
    """The local plan directory of ``plan_uri``: a directory, a ``file://`` URI, or the path of its ``plan.json``."""
    raw = plan_uri[len("file://"):] if plan_uri.startswith("file://") else plan_uri
    if "://" in raw:
        raise ConfigurationError(
            f"plan_uri {plan_uri!r}: only local plan directories (or file:// URIs) are supported by the wait; "
            "give the plan directory PlanReassignment wrote, on storage the workers and the triggerer share"
        )
    path = Path(raw)
    if path.suffix == ".json":
        path = path.parent
    if not path.is_dir():
        raise ConfigurationError(f"plan_uri {plan_uri!r}: {path} is not a plan directory (it does not exist)")
    return path


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


@dataclass(frozen=True)
class WaitSpec:
    """Everything a wait needs, JSON-serialisable (the trigger's kwargs carry it as a dict).

    ``limits`` and ``options`` are the keyword arguments of
    :class:`~airflow_kafka_reassign.core.execution.ExecutionLimits` /
    :class:`~airflow_kafka_reassign.core.execution.ExecutionOptions`, used when ``submit_pending`` is on and for
    finishing (throttles, leader election) and the timeout policies.
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

    def __post_init__(self) -> None:
        if self.which not in ("plan", "rollback"):
            raise ConfigurationError(f"which must be 'plan' or 'rollback', not {self.which!r}")
        self.execution()  # validate the limits and options now, not at the first poke

    @property
    def plan_dir(self) -> Path:
        return resolve_plan_dir(self.plan_uri)

    @property
    def state_dir(self) -> Path:
        """Where the execution engine keeps the run's throttle backup: ``<plan dir>/run``."""
        return self.plan_dir / RUN_DIR

    def load_plan(self) -> ReassignmentPlan:
        return read_plan(self.plan_dir) if self.which == "plan" else read_rollback(self.plan_dir)

    def execution(self) -> tuple[ExecutionLimits, ExecutionOptions]:
        try:
            return ExecutionLimits(**self.limits), ExecutionOptions(**self.options)
        except TypeError as e:
            raise ConfigurationError(f"invalid execution limits or options: {e}") from None

    def submitter(self, plan: ReassignmentPlan) -> Submitter | None:
        """Calls :func:`~airflow_kafka_reassign.core.execution.step` on every poke (with ``submit_pending``)."""
        if not self.submit_pending:
            return None
        limits, options = self.execution()
        state_dir = self.state_dir
        known: dict[TopicPartition, str] = {}
        log = _step_logger()

        def submit(admin: ClusterAdmin) -> SubmitOutcome:
            with _quiet(ADAPTER_LOGGER):
                status = step(admin, plan, limits, options, state_dir=state_dir, submit=True, log=log,
                              known_failed=known)
            known.update(status.failed)
            return SubmitOutcome(submitted=len(status.submitted), refused=dict(status.failed), blocked=status.blocked)

        return submit

    def watch(self, *, started_at: float, state: TrackerState | None = None,
              plan: ReassignmentPlan | None = None) -> ReassignmentWatch:
        plan = plan if plan is not None else self.load_plan()
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


class ReassignmentTrigger(BaseTrigger):
    """Polls a plan's progress until it is complete, blocked or timed out; see the module docstring.

    :param spec: a :class:`WaitSpec` as a dict.
    :param started_at: when the wait started (seconds since the epoch): the timeout counts from here.
    :param poke_interval: seconds between polls.
    :param state: the :class:`~airflow_kafka_reassign.core.progress.TrackerState` at deferral, as a dict.
    """

    def __init__(self, *, spec: dict[str, Any], started_at: float, poke_interval: float = 30.0,
                 state: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.spec = dict(spec)
        self.started_at = float(started_at)
        self.poke_interval = float(poke_interval)
        self.state = state
        self._admin: ClusterAdmin | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"spec": self.spec, "started_at": self.started_at, "poke_interval": self.poke_interval,
             "state": self.state},
        )

    def _start(self) -> tuple[WaitSpec, ReassignmentWatch, ClusterAdmin]:
        spec = WaitSpec(**self.spec)
        state = TrackerState.model_validate(self.state) if self.state else None
        watch = spec.watch(started_at=self.started_at, state=state)
        return spec, watch, make_admin(spec)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            spec, watch, self._admin = await asyncio.to_thread(self._start)
        except Exception as e:  # noqa: BLE001 - reported to the worker, which fails the task with it
            yield TriggerEvent({"status": "error", "message": f"could not start the wait: {type(e).__name__}: {e}"})
            return
        admin = self._admin
        last_blocked: str | None = None
        unreachable = 0
        while True:
            try:
                progress = await asyncio.to_thread(watch.poke, admin, now=time.time())
                unreachable = 0
            except ClusterUnreachableError as e:
                unreachable += 1
                self.log.warning("poll %d/%d failed: %s", unreachable, MAX_UNREACHABLE_POLLS, e)
                if unreachable >= MAX_UNREACHABLE_POLLS:
                    yield TriggerEvent({"status": "error", "message": str(e)})
                    return
                await asyncio.sleep(self.poke_interval)
                continue
            except Exception as e:  # noqa: BLE001
                yield TriggerEvent({"status": "error", "message": f"{type(e).__name__}: {e}"})
                return
            last_blocked = log_progress(self.log, progress, watch, last_blocked)
            if progress.status != "running":
                yield TriggerEvent(event_payload(progress, spec))
                return
            await asyncio.sleep(self.poke_interval)

    async def cleanup(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                await asyncio.to_thread(admin.close)
            except Exception:  # noqa: BLE001 - closing is best effort
                self.log.warning("closing the Kafka admin client failed", exc_info=True)
