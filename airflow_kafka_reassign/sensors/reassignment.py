"""WaitForReassignmentSensor: wait for a plan's moves to complete, with one progress line per poke.

Example (see docs/wait.md)::

    wait = WaitForReassignmentSensor(
        task_id="wait",
        plan_uri="{{ ti.xcom_pull(task_ids='plan')['plan_uri'] }}",
        kafka_config_id="kafka_prod",
        poke_interval=30,
        timeout=6 * 3600,
        stuck_after=900,
        on_timeout="cancel",
    )

Each poke logs ONE line::

    [#########-----------]  45% | moves 3/10 done, 2 in flight, 5 pending | 45.0 MB of 100.0 MB copied | 150.0 kB/s | ETA 6m 05s

and the final summary goes to XCom (``return_value``, small JSON).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException, AirflowSensorTimeout, conf
from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_kafka_reassign.core.execution import ExecutionConfig, cancel_then_roll_back, finish
from airflow_kafka_reassign.core.execution.progress import (
    DEFAULT_WINDOW_S,
    Progress,
    ReassignmentWatch,
    TimeoutPolicy,
    TrackerState,
    check_timeout_policy,
    format_duration,
)
from airflow_kafka_reassign.core.execution.session import MAX_UNREACHABLE_POLLS
from airflow_kafka_reassign.core.records.lease import task_lease_identity
from airflow_kafka_reassign.core.records.plan_io import read_rollback
from airflow_kafka_reassign.core.vocabulary.durations import deadline as parse_deadline
from airflow_kafka_reassign.core.vocabulary.durations import duration_s
from airflow_kafka_reassign.exceptions import ClusterAccessError, ClusterUnreachableError, ConfigurationError
from airflow_kafka_reassign.operators._base import ExecutionTask, execution_settings
from airflow_kafka_reassign.plan_storage import DEFAULT_TIMEOUT_S
from airflow_kafka_reassign.triggers.reassignment import ReassignmentTrigger
from airflow_kafka_reassign.wait import WaitSpec, event_payload, log_progress, make_admin

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin

#: task_state_store key of the tracker state in reschedule mode.
STATE_KEY = "wait_for_reassignment.tracker"


class WaitForReassignmentSensor(ExecutionTask, BaseSensorOperator):
    """Wait until every move of a plan is complete; log progress; act on a stall or a timeout.

    A move is complete when the partition's replicas equal its target, the ISR contains every target replica and
    the controller lists no reassignment for it. Every poke costs the same few batched requests whatever the plan's
    size (one snapshot of the plan's topics with the controller's in-flight list, one DescribeLogDirs per broker).

    :param plan_uri: the plan directory (``PlanReassignment``'s XCom ``plan_uri``), or its ``plan.json``: a local
        path, or an object-storage URI (``s3://...``) read through ``storage_conn_id``. Templated.
    :param storage_conn_id: the Airflow connection of the plan's object storage (for S3 an ``aws`` connection).
    :param storage_timeout_s: bound on each request to the plan's storage.
    :param state_dir: where the run state lives (default ``<plan>/run``). Templated.
    :param kafka_config_id: the ``kafka`` connection. Templated.
    :param which: ``"plan"`` waits for ``plan.json``; ``"rollback"`` for the directory's ``rollback.json`` (after a
        rollback was started).
    :param submit_pending: submit the plan's pending moves on every poke, within ``max_moves`` /
        ``max_moves_per_broker`` and under ``throttle_bytes_per_sec``, with every guard of ExecuteReassignment
        (KIP-860 RF guard, stale and foreign checks). Off by default: the sensor only watches.
    :param stuck_after: no progress (no move finished, no byte copied) for this long logs a warning naming the
        stuck moves. Seconds or a timedelta (default 10 minutes).
    :param timeout: how long to wait in total (seconds or timedelta; Airflow's sensor default when unset). When it
        passes, the task fails with the unfinished moves listed, after applying ``on_timeout``.
    :param on_timeout: ``"leave"`` (default: in-flight moves continue), ``"cancel"`` (cancel the plan's in-flight
        moves, KIP-455, and restore the throttles) or ``"rollback"`` (cancel them, then start moving the finished
        ones back with the directory's ``rollback.json``; wait for that with ``which="rollback"``).
    :param measure_bytes: read replica sizes (DescribeLogDirs) for bytes copied, throughput and ETA; without them
        progress and ETA are counted in moves.
    :param eta_window: the sliding window of the throughput estimate (seconds, default 300).
    :param finish_on_complete: when every move is done, restore the throttles the run set (from
        ``<plan dir>/run``) and, with ``elect_leaders``, elect the preferred leaders. Default True.
    :param deferrable: wait in the triggerer instead of a worker slot (default: ``[operators] default_deferrable``).
    :param kafka_timeout_s: bound on every request to the cluster.
    :param deadline: with ``submit_pending``, no move is submitted at or after this time (a datetime, or
        ISO-8601 text such as ``"{{ (dag_run.start_date + macros.timedelta(minutes=180)).isoformat() }}"``
        renders to; a duration is refused, since it would restart at every poke). Once it has passed, the
        moves in flight finish, and the wait ends with status ``"deadline"`` (the task succeeds, the
        throttles are restored, the moves not submitted are named in a warning and counted in the XCom's
        ``pending``: running the plan again resumes them). If some moves are blocked (stale, foreign, failed)
        the wait ends ``"blocked"`` instead and fails, naming them. ``None``: no deadline. Templated.
    :param execution: the execution settings (:class:`~airflow_kafka_reassign.core.execution.ExecutionConfig`, or
        its fields as keyword arguments: ``max_moves``, ``max_moves_per_broker``, ``throttle_bytes_per_sec``, the
        health gate, ``disk_reserve``, ``adaptive_limits``, ...), documented once there and meaning what they mean
        for ExecuteReassignment: with ``submit_pending`` each poke ticks the same execution session
        ExecuteReassignment runs (one governor across the pokes: the same health gate and adaptive limits); they
        are also used for finishing and for the rollback policy. When the health policy stops the submissions
        (a pause longer than ``max_pause_s``, ``on_unhealthy="fail"``, or ``"cancel"``, which also cancels the
        plan's moves in flight), the pending moves are refused by name and the wait ends ``blocked`` (the task
        fails) once nothing of the plan is in flight; the throttles are restored then. A plan refused for its plan
        errors (``on_plan_error="refuse"``, the default) submits nothing, and the wait ends ``blocked`` once the
        moves already in flight are done. Templated.
    """

    # the execution settings are one templated field, as for ExecuteReassignment
    template_fields: Sequence[str] = ("plan_uri", "kafka_config_id", "state_dir", "storage_conn_id", "execution",
                                      "deadline")
    ui_color = "#e8f4e4"

    def __init__(
        self,
        *,
        plan_uri: str,
        kafka_config_id: str = "kafka_default",
        which: str = "plan",
        submit_pending: bool = False,
        execution: ExecutionConfig | dict[str, Any] | None = None,
        stuck_after: timedelta | float = 600,
        on_timeout: str = "leave",
        measure_bytes: bool = True,
        eta_window: timedelta | float = DEFAULT_WINDOW_S,
        finish_on_complete: bool = True,
        kafka_timeout_s: float = 30.0,
        storage_conn_id: str | None = None,
        storage_timeout_s: float = DEFAULT_TIMEOUT_S,
        state_dir: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        deadline: Any = None,
        **kwargs: Any,
    ) -> None:
        settings = execution_settings(kwargs)
        super().__init__(**kwargs)
        self.plan_uri = plan_uri
        self.deadline = deadline
        self.storage_conn_id = storage_conn_id
        self.storage_timeout_s = storage_timeout_s
        self.state_dir = state_dir
        self.kafka_config_id = kafka_config_id
        self.which = which
        self.submit_pending = submit_pending
        self.stuck_after_s = duration_s(stuck_after, "stuck_after")
        self.on_timeout: TimeoutPolicy = check_timeout_policy(on_timeout)
        self.measure_bytes = measure_bytes
        self.eta_window_s = duration_s(eta_window, "eta_window")
        self.finish_on_complete = finish_on_complete
        self.kafka_timeout_s = kafka_timeout_s
        self.deferrable = deferrable
        # Our own check ends the wait at `timeout` (policy applied, moves listed); the base class's check is
        # only a backstop, a little later, in case a poke itself hangs.
        self.wait_timeout_s = float(self.timeout)
        self.timeout = self.wait_timeout_s + max(60.0, 2 * self.poke_interval)
        self._watch: ReassignmentWatch | None = None
        self._admin: ClusterAdmin | None = None
        self._started_at: float | None = None
        self._last_blocked: str | None = None
        self._unreachable = 0
        self._take_execution(execution, settings)
        if not (isinstance(deadline, str) and "{{" in deadline):
            self._submit_until()  # a deadline without submit_pending is refused at DAG parse time

    # -- the spec shared with the trigger ---------------------------------------------------------------

    def spec(self, context: Context | None = None) -> WaitSpec:
        """The wait's spec; with the task's ``context`` it names the holder of the plan's lease."""
        holder, scope = task_lease_identity(context, self.task_id) if context is not None else (None, None)
        config = self.execution_config()
        if config.disk_reserve is None:  # the deployment's default, read here in the worker
            config = config.model_copy(update={"disk_reserve": self.default_disk_reserve()})
        return WaitSpec(
            plan_uri=str(self.plan_uri), which=self.which,  # type: ignore[arg-type]
            kafka_config_id=self.kafka_config_id, kafka_timeout_s=self.kafka_timeout_s,
            stuck_after_s=self.stuck_after_s or 600.0, timeout_s=self.wait_timeout_s,
            measure_bytes=self.measure_bytes, window_s=self.eta_window_s or DEFAULT_WINDOW_S,
            submit_pending=self.submit_pending, execution=config.to_json(),
            storage_conn_id=self.storage_conn_id or None, storage_timeout_s=float(self.storage_timeout_s),
            state_dir=str(self.state_dir) if self.state_dir else None, lease_holder=holder, lease_scope=scope,
            submit_until=self._submit_until(), poll_interval_s=float(self.poke_interval),
        )

    def _submit_until(self) -> str | None:
        at = parse_deadline(self.deadline, name="deadline", durations=False)
        if at is not None and not self.submit_pending:
            raise ConfigurationError("deadline bounds the submissions of submit_pending=True: set submit_pending=True, "
                                     "or leave deadline unset (the sensor's timeout bounds the wait)")
        return at.isoformat() if at is not None else None

    def _get_admin(self, spec: WaitSpec) -> ClusterAdmin:
        if self._admin is None:
            self._admin = make_admin(spec)
        return self._admin

    def _close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            admin.close()

    # -- poke and reschedule modes ----------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        self._started_at = time.time()
        try:
            spec = self.spec(context)
            spec.plan_store  # noqa: B018 (fails now, with the URI and the fix, when there is no plan)
        except ConfigurationError as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from e
        try:
            if not self.deferrable:
                return super().execute(context)
            # deferrable: one poke here (fails fast on a bad plan or connection, submits the first batch)
            progress = self._poke_once(spec, context)
            if progress.status != "running":
                return self._conclude(event_payload(progress, spec), spec, context)
            assert self._watch is not None
            remaining = max(0.0, self.wait_timeout_s - (time.time() - self._started_at))
            self.defer(
                trigger=ReassignmentTrigger(spec=spec.to_dict(), started_at=self._watch.state.started_at,
                                            poke_interval=self.poke_interval,
                                            state=self._watch.state.model_dump(mode="json")),
                method_name="execute_complete",
                timeout=timedelta(seconds=remaining + max(60.0, 2 * self.poke_interval)),
            )
        finally:
            self._close()

    def poke(self, context: Context) -> bool | PokeReturnValue:
        spec = self.spec(context)
        try:
            progress = self._poke_once(spec, context)
            self._unreachable = 0
        except ClusterUnreachableError as e:
            self._unreachable += 1
            if self._unreachable >= MAX_UNREACHABLE_POLLS:
                raise
            self.log.warning("poke %d/%d failed: %s", self._unreachable, MAX_UNREACHABLE_POLLS, e)
            return False
        if progress.status == "running":
            return False
        return PokeReturnValue(True, self._conclude(event_payload(progress, spec), spec, context))

    def _poke_once(self, spec: WaitSpec, context: Context) -> Progress:
        store = context.get("task_state_store") if self.reschedule else None
        try:
            if self._watch is None:
                state = self._load_state(store, context)
                started_at = state.started_at if state else (self._started_at or time.time())
                self._watch = spec.watch(started_at=started_at, state=state, admin=self._get_admin(spec))
            progress = self._watch.poke(self._get_admin(spec), now=time.time())
        except ClusterAccessError as e:  # not transient: no other poke, no retry
            raise AirflowFailException(f"task {self.task_id}: {e}") from None
        self._last_blocked = log_progress(self.log, progress, self._watch, self._last_blocked)
        if store is not None:
            store.set(STATE_KEY, {"try": context["ti"].try_number, "state": self._watch.state.model_dump(mode="json")})
        if self.reschedule:
            self._close()  # the next poke may run in another process
        return progress

    def _load_state(self, store: Any, context: Context) -> TrackerState | None:
        if store is None:
            return None
        saved = store.get(STATE_KEY)
        if isinstance(saved, dict) and saved.get("try") == context["ti"].try_number and saved.get("state"):
            return TrackerState.model_validate(saved["state"])
        return None

    # -- deferrable mode --------------------------------------------------------------------------------

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        if not isinstance(event, dict) or event.get("status") not in ("complete", "blocked", "timeout", "deadline",
                                                                       "error"):
            raise AirflowException(f"the reassignment trigger sent an unexpected event: {event!r}")
        if event["status"] == "error":
            if event.get("fatal"):  # the cluster refused the client (authentication, authorization, TLS)
                raise AirflowFailException(f"task {self.task_id}: {event.get('message')}")
            raise AirflowException(f"waiting for the reassignment failed: {event.get('message')}")
        try:
            return self._conclude(event, self.spec(context), context)
        finally:
            self._close()

    # -- the end of the wait (every mode) ---------------------------------------------------------------

    def _conclude(self, event: dict[str, Any], spec: WaitSpec, context: Context) -> dict[str, Any]:
        """Push the summary (returned), finish, or apply the timeout policy and fail (the summary then in the
        XCom ``summary``, as ExecuteReassignment's)."""
        status, summary, message = event["status"], dict(event["summary"]), event["message"]
        stop = spec.health_stop() if spec.submit_pending else None
        if stop is not None:  # the health policy stopped this try's submissions (and cancelled, with "cancel")
            summary["health_stop"] = stop
            if stop["cancel"] is not None:
                message += (f". on_unhealthy=cancel cancelled {stop['cancel']['cancelled']} in-flight move(s) "
                            "(XCom 'summary': health_stop.cancel)")
        config = spec.config()
        options = config.options()
        admin = self._get_admin(spec)
        plan = spec.load_plan(admin)
        if status == "deadline":
            self.log.warning("%s", message)
        if status == "complete" and not self.finish_on_complete:
            self.log.info("all %d move(s) complete in %s", summary["moves"], format_duration(summary["elapsed_s"]))
            return summary
        if status == "deadline" and not self.finish_on_complete:
            return summary
        # Finishing and the timeout policies change the cluster: under the plan's lease.
        lease = spec.take_lease(self.log)
        try:
            if status == "deadline":  # nothing in flight: the throttles go, the done moves get their leaders
                summary["finish"] = finish(admin, plan, options, state_dir=spec.state, log=self.log, lease=lease)
                return summary
            if status == "complete":
                summary["finish"] = finish(admin, plan, options, state_dir=spec.state, log=self.log, lease=lease)
                self.log.info("all %d move(s) complete in %s", summary["moves"],
                              format_duration(summary["elapsed_s"]))
                return summary
            ti = context.get("ti")
            if status == "blocked":
                if self.finish_on_complete:
                    finish(admin, plan, options, state_dir=spec.state, elect=False, log=self.log, lease=lease)
                _push_summary(ti, summary)
                raise AirflowFailException(message)
            # timeout
            policy = self.apply_timeout_policy(admin, plan, spec, config)
            summary["on_timeout"] = {"policy": self.on_timeout, "done": policy}
            _push_summary(ti, summary)
            raise AirflowSensorTimeout(f"{message}. on_timeout={self.on_timeout}: {policy}")
        finally:
            if lease is not None:
                lease.release()

    def apply_timeout_policy(self, admin: ClusterAdmin, plan: Any, spec: WaitSpec, config: ExecutionConfig) -> str:
        """Leave, cancel or roll back the plan's unfinished moves; returns what was done, in words."""
        if self.on_timeout == "leave":
            return ("the in-flight moves were left running (and their throttles in place); wait again with this "
                    "sensor, or cancel them with CancelReassignmentOperator")
        roll_back = self.on_timeout == "rollback" and spec.which == "plan"
        outcome = cancel_then_roll_back(admin, plan, config, state_dir=spec.state,
                                        rollback=read_rollback(spec.plan_store) if roll_back else None, wait=False,
                                        log=self.log)
        result = outcome.cancel
        text = f"cancelled {len(result.cancelled)} in-flight move(s); throttles restored"
        if outcome.cordons_restored:
            text += "; cordons restored (before the reorder)"
        if result.reordered:
            text += f"; {len(result.reordered)} put back in their original replica order (no data copied)"
        if outcome.rollback is None:
            problems = result.problems()
            if problems:
                text += "; " + "; ".join(problems)
            if spec.which != "plan" and self.on_timeout == "rollback":
                text += "; a rollback of the rollback is not started (which='rollback')"
            return text
        status = outcome.rollback.status
        text += (f"; rollback started: {len(status.submitted)} move(s) submitted, {len(status.pending)} pending, "
                 f"{len(status.done)} already back")
        if status.blocked:
            text += f"; the rollback is refused: {status.blocked}"
        elif status.failed or status.stale:
            text += f", {len(status.failed) + len(status.stale)} refused (see the log)"
        if not status.complete:
            text += (f". Finish it with WaitForReassignmentSensor(plan_uri={spec.plan_uri!r}, which='rollback', "
                     "submit_pending=True)")
        return text


def _push_summary(ti: Any, summary: dict[str, Any]) -> None:
    """The summary of a wait that fails, in the XCom ``summary`` (a failing task has no return value)."""
    if ti is not None:
        ti.xcom_push(key="summary", value=summary)
