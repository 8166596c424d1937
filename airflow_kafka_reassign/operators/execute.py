"""ExecuteReassignmentOperator: run a plan's moves with guards, batches and throttles.

Example (docs/execute.md)::

    execute = ExecuteReassignmentOperator(
        task_id="execute",
        plan_uri="{{ ti.xcom_pull(task_ids='plan')['plan_uri'] }}",
        kafka_config_id="kafka_prod",
        max_moves=20,
        max_moves_per_broker=2,
        throttle_bytes_per_sec=50_000_000,
        deadline="{{ data_interval_end }}",
    )

The task is thin: it reads the plan directory, builds a
:class:`~airflow_kafka_reassign.kafka.admin.KafkaClusterAdmin` through
:class:`~airflow_kafka_reassign.hooks.kafka_reassign.KafkaReassignHook`, and calls
:func:`airflow_kafka_reassign.core.execution.run` (pre-flight, rollback plan, batches until done
or the deadline, throttles restored exactly). It pushes a small summary to XCom and fails
(without retry) when a guard refused the plan or some of its moves, after everything else ran.

Retry-safe and worker-independent: all state is derived from the cluster and the plan, plus the
run state in ``<plan>/run`` (the throttle backup, the lease, the journal), on the plan's storage
(object storage for distributed workers: ``plan_uri="s3://..."`` with ``storage_conn_id``). A
retried or re-run task, on any worker, resumes, never submits a move twice, and restores
throttles a killed try left behind. The plan's lease (core/records/lease.py) refuses a second run of the
same plan from another DAG run while this one drives it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException
from airflow.sdk import BaseOperator

from airflow_kafka_reassign.core.execution import (
    ExecutionConfig,
    ExecutionStatus,
    RunResult,
    progress_observation,
    run,
    write_rollback_if_missing,
)
from airflow_kafka_reassign.core.execution.progress import ReassignmentWatch
from airflow_kafka_reassign.core.execution.run_state import PLAN_EXECUTED, try_key
from airflow_kafka_reassign.core.guards.adaptive import DEFAULT_MIN_POLL_S
from airflow_kafka_reassign.core.guards.approval import ApprovalRecord, check_approval, check_snapshot_age
from airflow_kafka_reassign.core.maintenance.rounds import read_goal
from airflow_kafka_reassign.core.records.journal import journal
from airflow_kafka_reassign.core.records.lease import DEFAULT_TTL_S, LeaseLostError
from airflow_kafka_reassign.core.records.plan_io import read_plan_with_digest
from airflow_kafka_reassign.core.records.store import Store, StoreError
from airflow_kafka_reassign.core.vocabulary.durations import deadline as parse_deadline
from airflow_kafka_reassign.core.vocabulary.durations import duration_s
from airflow_kafka_reassign.exceptions import ClusterAccessError, ConfigurationError, GuardRefusedError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators._base import ExecutionTask, execution_settings
from airflow_kafka_reassign.plan_storage import DEFAULT_TIMEOUT_S, plan_store, run_state, snapshot_taken_at
from airflow_kafka_reassign.report.links import PlanReportLink, push_report_location
from airflow_kafka_reassign.wait import log_progress

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan
    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin


class ExecuteReassignmentOperator(ExecutionTask, BaseOperator):
    """Execute a reassignment plan: pre-flight guards, batches, throttles, deadline, rollback plan.

    :param plan_uri: the plan directory PlanReassignment wrote (its ``plan.json`` works too), usually
        ``"{{ ti.xcom_pull(task_ids='plan')['plan_uri'] }}"``: a local path (one machine, or a disk all
        workers share) or an object-storage URI (``s3://bucket/...``). Templated.
    :param storage_conn_id: the Airflow connection of the plan's object storage (for S3 the amazon
        provider's ``aws`` connection; ``endpoint_url`` in its extra for an S3-compatible store).
    :param storage_timeout_s: bound on each request to the plan's storage.
    :param lease_ttl_s: how long the plan's lease lasts without renewal (renewed while the task runs;
        a run of another DAG run is refused until then).
    :param kafka_config_id: the ``kafka`` connection of the cluster. Templated.
    :param execution: the execution settings, an
        :class:`~airflow_kafka_reassign.core.execution.ExecutionConfig` or a dict of its fields; each field may
        also be passed as a keyword argument of the task (``max_moves``, ``max_moves_per_broker``, ``order``,
        ``throttle_bytes_per_sec``, ``allow_replication_factor_change``, ``rf_guard``,
        ``allow_concurrent_reassignments``, ``on_plan_error``, ``allow_offline_brokers``, ``strict``,
        ``elect_leaders``, ``dry_run``, ``health_gate``, ``on_unhealthy``, ``max_pause_s``, ``below_min_isr``,
        ``disk_reserve``, ``adaptive_limits``, ``take_over_from``): each is documented once, on ExecutionConfig. Templated, all of
        them: ``throttle_bytes_per_sec="{{ params.throttle_bytes_per_sec }}"`` is read after rendering.
    :param min_poll_interval: the poll interval adapts between this and ``poll_interval``: soon when
        a move in flight is about to finish, rarely when far.
    :param deadline: no new move after it: a datetime, a timedelta / seconds from the task's
        start, or text (``"{{ data_interval_end }}"``, ``"2h"``, ``"PT90M"``). Templated.
    :param on_deadline: ``"finish"`` (in-flight moves finish, the task waits for them) or
        ``"cancel"`` (they are cancelled, KIP-455). The remaining moves are reported; running
        the task again on the same plan resumes them.
    :param poll_interval: seconds between two iterations.
    :param wait_for_completion: ``False`` submits the first batch and returns, leaving the
        throttles in place for ``WaitForReassignmentSensor(submit_pending=True)`` to continue.
    :param state_dir: where the run state lives (default ``<plan>/run``; a path or a URI). Templated.
    :param kafka_timeout_s: bound on every request to the cluster.
    :param approval: the approval task's result (``"{{ ti.xcom_pull(task_ids='approve') }}"``, see
        :class:`~airflow_kafka_reassign.operators.approval.PlanApprovalOperator`). When set, the task
        refuses (before anything is sent) a plan that was rejected, whose ``plan.json`` differs from
        the approved content hash (edited after the approval), or whose snapshot is older than
        ``max_snapshot_age``: the message says to re-plan. ``None``: no approval is checked. Templated.
    :param max_snapshot_age: refuse a plan planned from a snapshot older than this (seconds, a
        timedelta, or ``"2h"``); the snapshot's time comes from ``approval``, else from the
        ``snapshot`` folder next to the plan. ``None``: no bound.

    XCom (``return_value``): ``{"plan_uri", "moves", "done", "in_flight", "pending", "stale",
    "failed", "foreign", "complete", "ok", "deadline_reached", ...}`` with at most a few
    partitions named per kind. When the task fails because something was refused, the same
    summary is pushed under the key ``summary``.
    """

    # every execution setting is one templated field (DAG Params can set them: "{{ params.throttle_bytes_per_sec }}")
    template_fields: Sequence[str] = (
        "plan_uri", "kafka_config_id", "deadline", "state_dir", "storage_conn_id", "execution", "approval",
    )
    ui_color = "#fde8d0"
    operator_extra_links = (PlanReportLink(),)

    def __init__(
        self,
        *,
        plan_uri: str,
        kafka_config_id: str = "kafka_default",
        execution: ExecutionConfig | dict[str, Any] | None = None,
        deadline: Any = None,
        on_deadline: str = "finish",
        poll_interval: float = 5.0,
        min_poll_interval: float = DEFAULT_MIN_POLL_S,
        wait_for_completion: bool = True,
        state_dir: str | None = None,
        kafka_timeout_s: float = 30.0,
        storage_conn_id: str | None = None,
        storage_timeout_s: float = DEFAULT_TIMEOUT_S,
        lease_ttl_s: float = DEFAULT_TTL_S,
        approval: Any = None,
        max_snapshot_age: Any = None,
        **kwargs: Any,
    ) -> None:
        settings = execution_settings(kwargs)
        super().__init__(**kwargs)
        self._take_execution(execution, settings)
        self.plan_uri = plan_uri
        self.approval = approval
        self.max_snapshot_age = max_snapshot_age
        self.kafka_config_id = kafka_config_id
        self.storage_conn_id = storage_conn_id
        self.storage_timeout_s = storage_timeout_s
        self.lease_ttl_s = lease_ttl_s
        self.min_poll_interval = min_poll_interval
        self.deadline = deadline
        self.on_deadline = on_deadline
        self.poll_interval = poll_interval
        self.wait_for_completion = wait_for_completion
        self.state_dir = state_dir
        self.kafka_timeout_s = kafka_timeout_s

    def _admin(self) -> ClusterAdmin:
        return KafkaReassignHook(kafka_config_id=self.kafka_config_id, timeout_s=self.kafka_timeout_s).get_admin()

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            store = plan_store(str(self.plan_uri), conn_id=self.storage_conn_id or None,
                               timeout_s=float(self.storage_timeout_s))
            plan, digest = read_plan_with_digest(store)
            push_report_location(context, store.uri, self.storage_conn_id)
            self._check_approval(store, digest)
            state = run_state(store, self.state_dir, conn_id=self.storage_conn_id or None,
                              timeout_s=float(self.storage_timeout_s))
            config = self.execution_config()
            options = config.options(default_disk_reserve=self.default_disk_reserve())
            if not options.dry_run:  # the sensor that submits the later batches refuses a plan.json other than this
                journal(state, {"event": PLAN_EXECUTED, "plan_sha256": digest}, log=self.log)
            deadline = parse_deadline(self.deadline, now=datetime.now(timezone.utc))
            if self.on_deadline not in ("finish", "cancel"):
                raise ConfigurationError(f"on_deadline must be 'finish' or 'cancel', not {self.on_deadline!r}")
        except (ConfigurationError, GuardRefusedError, StoreError, FileNotFoundError, ValueError) as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from e
        self.log.info(
            "Executing %s: %d moves; max_moves=%s max_moves_per_broker=%s order=%s throttle=%s B/s rf_guard=%s "
            "on_plan_error=%s deadline=%s (then %s)%s", store.uri, len(plan), config.max_moves,
            config.max_moves_per_broker, config.order, options.throttle_bytes_per_sec, options.rf_guard,
            "refuse (strict)" if options.strict else options.on_plan_error,
            deadline.isoformat() if deadline else None, self.on_deadline, " DRY RUN" if options.dry_run else "",
        )
        lease = None if options.dry_run else self._take_lease(state, context, float(self.lease_ttl_s))
        admin = self._admin()
        self._running = (plan, options, state)
        try:
            result = run(
                admin, plan, config,
                state_dir=state,
                deadline=deadline,
                on_deadline=self.on_deadline,  # type: ignore[arg-type]
                poll_interval_s=float(self.poll_interval),
                before_first_submit=lambda status: write_rollback_if_missing(store, plan, status, log=self.log),
                should_stop=self._should_stop,
                finish_at_end=bool(self.wait_for_completion),
                wait=bool(self.wait_for_completion),
                log=self.log,
                lease=lease,
                holder=try_key(lease.lease.holder) if lease is not None else None,
                min_poll_interval_s=float(self.min_poll_interval),
                progress=self._progress_logger(plan),
                default_disk_reserve=self.default_disk_reserve(),
                goal=read_goal(store),
            )
        except (GuardRefusedError, LeaseLostError, ClusterAccessError) as e:  # the same again on a retry
            raise AirflowFailException(f"task {self.task_id}: {e}") from e
        except StoreError as e:
            raise AirflowException(f"task {self.task_id}: {e}") from e
        finally:
            self._running = None
            admin.close()
            self._release_lease()
        return self._conclude(context, result, store.uri)

    def _progress_logger(self, plan: ReassignmentPlan) -> Callable[[ExecutionStatus], None]:
        """While the task waits for its moves: the sensor's progress line (bytes copied, rate, ETA) per poll."""
        watch = ReassignmentWatch(plan, started_at=time.time(), stuck_after_s=600.0)
        last: list[str | None] = [None]

        def progress(status: ExecutionStatus) -> None:
            try:  # from what the engine's step read this poll: no request of its own
                now = time.time()
                obs = progress_observation(plan, status, at=now)
                last[0] = log_progress(self.log, watch.record(obs, now=now), watch, last[0])
            except Exception as e:  # noqa: BLE001 (a progress line is never a reason to stop the run)
                self.log.debug("no progress line this time: %s", e)

        return progress

    def _check_approval(self, store: Store, digest: str) -> None:
        """Refuse a rejected plan, one edited after its approval, or one planned from too old a snapshot."""
        now = datetime.now(timezone.utc)
        max_age = self.max_snapshot_age
        max_age_s = duration_s(max_age, "max_snapshot_age")
        if self.approval is not None and self.approval != "":
            record = ApprovalRecord.parse(self.approval)
            check_approval(record, plan_sha256=digest, now=now, max_snapshot_age_s=max_age_s)
            self.log.info("Approval: plan %s %s%s; snapshot taken at %s", digest,
                          "approved" if record.required else "run without approval (require_approval=false)",
                          f" by {record.approved_by}" if record.approved_by else "", record.snapshot_taken_at)
        elif max_age_s is not None:
            check_snapshot_age(snapshot_taken_at(store, conn_id=self.storage_conn_id or None,
                                                 timeout_s=float(self.storage_timeout_s)), now=now, max_snapshot_age_s=max_age_s)

    def _conclude(self, context: Context, result: RunResult, plan_uri: str) -> dict[str, Any]:
        summary = {"plan_uri": plan_uri, "dry_run": self.execution_config().dry_run, **result.summary()}
        status = result.status
        self.log.info("Result: %s", status.progress_line())
        problem = None
        if status.blocked:
            problem = f"the plan was refused: {status.blocked}"
        elif result.drain_short:
            problem = f"the run did not reach its goal: {result.drain_short}"
        elif status.stale or status.failed:
            problem = (
                f"{len(status.stale)} stale and {len(status.failed)} refused or failed move(s) were not executed "
                f"({', '.join(str(tp) for tp in sorted([*status.stale, *status.failed])[:10])}); the other moves ran. "
                "See the warnings above; plan again from the current cluster for the refused partitions"
            )
        if result.deadline_reached and status.remaining:
            self.log.warning("deadline reached with %d move(s) not done (%s); run this task again on the same plan "
                             "to resume", len(status.remaining), ", ".join(str(tp) for tp in status.remaining[:10]))
        if problem:
            context["ti"].xcom_push(key="summary", value=summary)
            raise AirflowFailException(f"task {self.task_id}: {problem}")
        if result.stopped:
            context["ti"].xcom_push(key="summary", value=summary)
            raise AirflowException(
                f"task {self.task_id}: stopped (on_kill) with {len(status.remaining)} move(s) not done; the throttles "
                "were restored; a retry (or a new run on the same plan) resumes where this one stopped"
            )
        return summary

    def on_kill(self) -> None:
        self._kill(self._admin, self.log)
