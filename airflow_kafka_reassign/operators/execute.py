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
throttles a killed try left behind. The plan's lease (core/lease.py) refuses a second run of the
same plan from another DAG run while this one drives it.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException
from airflow.sdk import BaseOperator

from airflow_kafka_reassign.core.adaptive import DEFAULT_MIN_POLL_S, AdaptiveBounds
from airflow_kafka_reassign.core.approval import ApprovalRecord, check_approval, check_snapshot_age
from airflow_kafka_reassign.core.disk_guard import default_reserve
from airflow_kafka_reassign.core.execution import (
    ExecutionLimits,
    ExecutionOptions,
    ExecutionStatus,
    RunResult,
    finish,
    progress_observation,
    run,
    write_rollback_if_missing,
)
from airflow_kafka_reassign.core.health import HealthPolicy
from airflow_kafka_reassign.core.journal import journal
from airflow_kafka_reassign.core.lease import DEFAULT_TTL_S, LeaseHeldError, LeaseKeeper, LeaseLostError
from airflow_kafka_reassign.core.plan_io import read_plan_with_digest
from airflow_kafka_reassign.core.progress import ReassignmentWatch
from airflow_kafka_reassign.core.store import Store, StoreError
from airflow_kafka_reassign.exceptions import ClusterAccessError, ConfigurationError, GuardRefusedError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.links import PlanReportLink, push_report_location
from airflow_kafka_reassign.operators._params import as_bool, health_args
from airflow_kafka_reassign.plan_access import PLAN_EXECUTED, lease_identity, log_progress, plan_store
from airflow_kafka_reassign.storage import DEFAULT_TIMEOUT_S, run_state, snapshot_taken_at

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_kafka_reassign.core.models import ReassignmentPlan
    from airflow_kafka_reassign.core.ports import ClusterAdmin

_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*h)?\s*(?:(\d+(?:\.\d+)?)\s*m)?\s*(?:(\d+(?:\.\d+)?)\s*s)?\s*$", re.I)
_ISO_DURATION = re.compile(r"^P(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)$", re.I)


def parse_deadline(value: Any, *, now: datetime) -> datetime | None:
    """An aware UTC deadline from a datetime, a duration from ``now``, or their text forms.

    Accepted: ``None``/``""`` (no deadline); a ``datetime`` (naive means UTC); a ``timedelta``
    or a number of seconds; text: an ISO-8601 date-time (what ``{{ data_interval_end }}``
    renders to), a duration such as ``"90m"``, ``"2h"``, ``"1h30m"``, ``"45s"``, ``"PT2H30M"``,
    or a number of seconds.
    """
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, timedelta):
        return now + value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return now + timedelta(seconds=float(value))
    if isinstance(value, str):
        text = value.strip()
        try:
            return now + timedelta(seconds=float(text))
        except ValueError:
            pass
        for pattern in (_ISO_DURATION, _DURATION):
            match = pattern.match(text)
            if match and any(match.groups()):
                h, m, s = (float(g) if g else 0.0 for g in match.groups())
                return now + timedelta(hours=h, minutes=m, seconds=s)
        try:
            return parse_deadline(datetime.fromisoformat(text.replace("Z", "+00:00")), now=now)
        except ValueError:
            pass
    raise ConfigurationError(
        f"deadline {value!r} is neither a date-time nor a duration; give a datetime, a timedelta, a number of "
        "seconds, an ISO-8601 date-time such as '{{ data_interval_end }}' renders to, or a duration like '2h30m'"
    )


def _reserve(value: Any) -> Any:
    """A task's ``disk_reserve``, or the deployment's default (``AKR_DISK_RESERVE``, else 1%)."""
    return default_reserve(os.environ) if value is None else value


class _ExecutionParams:
    """The limits and options every execution-engine operator takes, and the kill switch."""

    def _init_execution(self, *, max_moves: int | None, max_moves_per_broker: int | None, order: str,
                        throttle_bytes_per_sec: int | None, allow_replication_factor_change: bool, rf_guard: str,
                        allow_concurrent_reassignments: bool, strict: bool, elect_leaders: bool,
                        dry_run: bool, on_plan_error: str = "refuse", allow_offline_brokers: bool = False,
                        health_gate: bool = True, on_unhealthy: str = "pause", max_pause_s: float | None = 1800.0,
                        below_min_isr: str = "last", disk_reserve: Any = None) -> None:
        self.max_moves = max_moves
        self.max_moves_per_broker = max_moves_per_broker
        self.order = order
        self.throttle_bytes_per_sec = throttle_bytes_per_sec
        self.allow_replication_factor_change = allow_replication_factor_change
        self.rf_guard = rf_guard
        self.allow_concurrent_reassignments = allow_concurrent_reassignments
        self.strict = strict
        self.on_plan_error = on_plan_error
        self.allow_offline_brokers = allow_offline_brokers
        self.elect_leaders = elect_leaders
        self.dry_run = dry_run
        self.health_gate = health_gate
        self.on_unhealthy = on_unhealthy
        self.max_pause_s = max_pause_s
        self.below_min_isr = below_min_isr
        self.disk_reserve = disk_reserve
        self._stop_requested = False
        self._running: tuple[ReassignmentPlan, ExecutionOptions, Store] | None = None
        self._lease: LeaseKeeper | None = None

    def _take_lease(self, state: Store, context: Any, ttl_s: float) -> LeaseKeeper:
        holder, scope = lease_identity(context, self.task_id)  # type: ignore[attr-defined]
        try:
            self._lease = LeaseKeeper.take(state, holder=holder, scope=scope, ttl_s=ttl_s,
                                           log=self.log)  # type: ignore[attr-defined]
        except StoreError as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from e  # type: ignore[attr-defined]
        except LeaseHeldError as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from e  # type: ignore[attr-defined]
        return self._lease

    def _release_lease(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            try:
                lease.release()
            except Exception:  # noqa: BLE001 (it expires by itself)
                self.log.warning("could not release the plan's lease; it expires by itself",  # type: ignore[attr-defined]
                                 exc_info=True)

    def execution_params(self) -> tuple[ExecutionLimits, ExecutionOptions]:
        """The engine's limits and options from the operator's arguments (validated)."""
        def as_int(v: Any) -> int | None:
            return None if v is None or v == "" else int(v)

        return (
            ExecutionLimits(max_moves=as_int(self.max_moves), max_moves_per_broker=as_int(self.max_moves_per_broker),
                            order=self.order),  # type: ignore[arg-type]
            ExecutionOptions(
                allow_replication_factor_change=bool(self.allow_replication_factor_change),
                rf_guard=self.rf_guard,  # type: ignore[arg-type]
                allow_concurrent_reassignments=bool(self.allow_concurrent_reassignments),
                strict=bool(self.strict),
                on_plan_error=self.on_plan_error,  # type: ignore[arg-type]
                allow_offline_brokers=bool(self.allow_offline_brokers),
                throttle_bytes_per_sec=as_int(self.throttle_bytes_per_sec),
                elect_leaders=bool(self.elect_leaders),
                dry_run=as_bool(self.dry_run, "dry_run"),
                health=HealthPolicy(**health_args(getattr(self, "health_gate", True),
                                                  getattr(self, "on_unhealthy", "pause"),
                                                  getattr(self, "max_pause_s", 1800.0),
                                                  getattr(self, "below_min_isr", "last"))),
                disk_reserve=_reserve(getattr(self, "disk_reserve", None)),
            ),
        )

    def _should_stop(self) -> bool:
        return self._stop_requested

    def _kill(self, admin_factory: Any, log: Any) -> None:
        """on_kill: stop submitting and restore the throttles of the run now (the next run would too)."""
        self._stop_requested = True
        running = self._running
        if running is None:
            return
        plan, options, state_dir = running
        try:
            admin = admin_factory()
            try:
                finish(admin, plan, options, state_dir=state_dir, elect=False, log=log, lease=self._lease)
            finally:
                admin.close()
        except Exception:  # noqa: BLE001 (a kill must not fail; the next run restores from the backup)
            log.exception("on_kill: restoring the throttles failed; the next run restores them from %s", state_dir)


class ExecuteReassignmentOperator(_ExecutionParams, BaseOperator):
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
    :param max_moves: concurrent reassignments in the cluster (``None``: no limit).
    :param max_moves_per_broker: concurrent reassignments touching (adding or removing a replica on)
        any one broker.
    :param order: ``"smallest-first"`` (default), ``"largest-first"`` (bytes to copy, from
        DescribeLogDirs) or ``"plan"``.
    :param throttle_bytes_per_sec: replication throttle on the brokers and replicas involved; the
        previous values are restored exactly at the end (and after a failure or a kill).
    :param allow_replication_factor_change: let the moves the plan marks as RF changes change the
        RF (KIP-860 AllowReplicationFactorChange=true for those only).
    :param rf_guard: ``"broker"`` (Kafka 4.1+ enforces KIP-860; older brokers fail the task) or
        ``"client"`` (older brokers: checked client-side just before sending; racy).
    :param allow_concurrent_reassignments: run although reassignments this plan did not start
        are in flight (they count against the limits).
    :param on_plan_error: ``"refuse"`` (default) refuses the whole plan, before anything is sent
        (no throttle, no reassignment), when a move names a broker the cluster does not list as
        alive, a topic or partition that no longer exists, or a topic whose partition count
        differs from the plan's snapshot; the task fails naming each problem. ``"skip"`` refuses
        only those moves (by name; the task fails at the end) and runs the others.
    :param allow_offline_brokers: let target replicas name a broker that is registered but down:
        those moves are sent and wait for it (no throttle is set on it). Without it they are plan
        errors.
    :param strict: refuse the whole plan if any move is refused, stale moves included (a stale
        move alone is otherwise refused by itself and the others run). Cannot be combined with
        ``on_plan_error="skip"``.
    :param elect_leaders: elect the preferred leader of each moved partition once it is done.
    :param dry_run: validate everything and log the exact requests; change nothing.
    :param health_gate: read the cluster's under-replicated, under-min-ISR and offline partitions
        before each batch (default ``True``); those the run's own moves do not explain are trouble.
    :param on_unhealthy: on trouble, ``"pause"`` (default: submit nothing new, one line per poll
        saying why, resume when healthy), ``"cancel"`` (cancel the moves in flight and fail) or
        ``"fail"`` (fail at once; moves in flight keep running with their throttles).
    :param max_pause_s: a pause longer than this fails the task as ``"fail"`` would (``None``: no bound).
    :param below_min_isr: pending moves whose target keeps fewer in-sync replicas than
        ``min.insync.replicas`` go ``"last"`` (default) or are ``"refuse"``-d; counted in the XCom.
    :param disk_reserve: the disk guard: before each batch every broker's free disk space is read
        (DescribeLogDirs, Kafka 3.3+), and a move is submitted only if each broker it adds keeps this
        much free after it and the moves in flight: a share of the disk (``"1%"``, the default, or
        the ``AKR_DISK_RESERVE`` environment variable of the deployment; e.g. ``"15%"``), a size
        (``"50GiB"``, bytes), or ``"off"``. A move that does not fit waits
        (``disk_held`` in the XCom); nothing in flight and nothing fitting fails the task naming the
        broker and the numbers. Templated.
    :param adaptive_limits: AIMD bounds (core/adaptive.py), e.g. ``{"max_moves": 8,
        "min_throttle": 10_000_000, "max_throttle": 100_000_000}``: concurrency starts at
        ``min_moves`` (default 1) and the throttle at ``throttle_bytes_per_sec``; both grow while
        healthy and progressing and halve on trouble (concurrency also on a stalled copy); each
        change is logged; the throttles are restored exactly at the end as always.
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

    # The limits, the throttle and dry_run are templated so that DAG Params can set them
    # ("{{ params.throttle_bytes_per_sec }}"); the allow_* overrides are not: they belong in code.
    template_fields: Sequence[str] = (
        "plan_uri", "kafka_config_id", "deadline", "state_dir", "storage_conn_id",
        "max_moves", "max_moves_per_broker", "throttle_bytes_per_sec", "dry_run", "approval", "disk_reserve",
    )
    ui_color = "#fde8d0"
    operator_extra_links = (PlanReportLink(),)

    def __init__(
        self,
        *,
        plan_uri: str,
        kafka_config_id: str = "kafka_default",
        max_moves: int | None = None,
        max_moves_per_broker: int | None = None,
        order: str = "smallest-first",
        throttle_bytes_per_sec: int | None = None,
        allow_replication_factor_change: bool = False,
        rf_guard: str = "broker",
        allow_concurrent_reassignments: bool = False,
        on_plan_error: str = "refuse",
        allow_offline_brokers: bool = False,
        strict: bool = False,
        elect_leaders: bool = False,
        dry_run: bool = False,
        deadline: Any = None,
        on_deadline: str = "finish",
        poll_interval: float = 5.0,
        min_poll_interval: float = DEFAULT_MIN_POLL_S,
        health_gate: bool = True,
        on_unhealthy: str = "pause",
        max_pause_s: float | None = 1800.0,
        below_min_isr: str = "last",
        disk_reserve: Any = None,
        adaptive_limits: dict[str, Any] | None = None,
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
        super().__init__(**kwargs)
        self.plan_uri = plan_uri
        self.approval = approval
        self.max_snapshot_age = max_snapshot_age
        self.kafka_config_id = kafka_config_id
        self.storage_conn_id = storage_conn_id
        self.storage_timeout_s = storage_timeout_s
        self.lease_ttl_s = lease_ttl_s
        self._init_execution(
            max_moves=max_moves, max_moves_per_broker=max_moves_per_broker, order=order,
            throttle_bytes_per_sec=throttle_bytes_per_sec,
            allow_replication_factor_change=allow_replication_factor_change, rf_guard=rf_guard,
            allow_concurrent_reassignments=allow_concurrent_reassignments, strict=strict,
            elect_leaders=elect_leaders, dry_run=dry_run, on_plan_error=on_plan_error,
            allow_offline_brokers=allow_offline_brokers, health_gate=health_gate, on_unhealthy=on_unhealthy,
            max_pause_s=max_pause_s, below_min_isr=below_min_isr, disk_reserve=disk_reserve,
        )
        self.adaptive_limits = adaptive_limits
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
            limits, options = self.execution_params()
            if not options.dry_run:  # the sensor that submits the later batches refuses a plan.json other than this
                journal(state, {"event": PLAN_EXECUTED, "plan_sha256": digest}, log=self.log)
            deadline = parse_deadline(self.deadline, now=datetime.now(UTC))
            if self.on_deadline not in ("finish", "cancel"):
                raise ConfigurationError(f"on_deadline must be 'finish' or 'cancel', not {self.on_deadline!r}")
            adaptive = self._adaptive_bounds()
        except (ConfigurationError, GuardRefusedError, StoreError, FileNotFoundError, ValueError) as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from e
        self.log.info(
            "Executing %s: %d moves; max_moves=%s max_moves_per_broker=%s order=%s throttle=%s B/s rf_guard=%s "
            "on_plan_error=%s deadline=%s (then %s)%s", store.uri, len(plan), limits.max_moves,
            limits.max_moves_per_broker, limits.order, options.throttle_bytes_per_sec, options.rf_guard,
            "refuse (strict)" if options.strict else options.on_plan_error,
            deadline.isoformat() if deadline else None, self.on_deadline, " DRY RUN" if options.dry_run else "",
        )
        lease = None if options.dry_run else self._take_lease(state, context, float(self.lease_ttl_s))
        admin = self._admin()
        self._running = (plan, options, state)
        try:
            result = run(
                admin, plan, limits, options,
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
                adaptive=adaptive,
                min_poll_interval_s=float(self.min_poll_interval),
                progress=self._progress_logger(plan),
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

    def _adaptive_bounds(self) -> AdaptiveBounds | None:
        return AdaptiveBounds.parse(self.adaptive_limits, max_moves=self.execution_params()[0].max_moves)

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
        now = datetime.now(UTC)
        max_age = self.max_snapshot_age
        max_age_s = None
        if max_age is not None and max_age != "":
            bound = parse_deadline(max_age, now=now)
            max_age_s = (bound - now).total_seconds() if bound is not None else None
            if max_age_s is not None and max_age_s <= 0:
                raise ConfigurationError(f"max_snapshot_age must be a positive duration, not {max_age!r}")
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
        summary = {"plan_uri": plan_uri, "dry_run": bool(self.dry_run), **result.summary()}
        status = result.status
        self.log.info("Result: %s", status.progress_line())
        problem = None
        if status.blocked:
            problem = f"the plan was refused: {status.blocked}"
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
