"""PlanApprovalOperator: a person approves or rejects a plan before it is executed.

It is Airflow's own human-in-the-loop approval (the standard provider's ``ApprovalOperator``,
Airflow 3.1+): the run waits on the task's "Required actions" page in the UI (or
``PATCH /api/v2/hitlDetails/...`` through the REST API) with the plan's summary (moves, bytes,
lower bound, balance before/after, warnings) and a link to the plan report. "Reject" skips the
downstream tasks: nothing is submitted. (On Airflow 3 the skip ends the task then and there: the task
SDK raises ``DownstreamTasksSkipped`` from the approval's ``execute_complete``, so no code of this task
runs after it. What a rejected plan leaves behind, the cordons its plan task set, is given back by a
clean-up task that runs whatever happened upstream: ``RestoreCordonsOperator``, operators/decommission.py.)

The decision is bound to the plan: the task returns an approval record (XCom ``return_value``)::

    {"approved": true, "plan_sha256": "sha256:...", "snapshot_taken_at": "...", "plan_uri": "...",
     "required": true, "approved_by": "alice", "responded_at": "..."}

and ExecuteReassignment (``approval="{{ ti.xcom_pull(task_ids='approve') }}"``) refuses a plan
whose ``plan.json`` no longer has that hash, or whose snapshot is older than its
``max_snapshot_age``, with a message that says to re-plan (core/guards/approval.py).

Before asking, the task runs the execution's pre-flight against the cluster, read-only (the same
core code as ExecuteReassignment's first step: :func:`airflow_kafka_reassign.core.execution.preflight`,
with the execute task's guard options): moves that are stale (the cluster changed since the
snapshot), reassignments in flight that the plan did not start, brokers, topics or partitions
missing, KIP-860 replication-factor changes not allowed, moves below min ISR, an unhealthy cluster.
The form lists what it found. A plan that execute would refuse entirely (or whose ``plan.json`` no
longer has the hash the plan task reported) fails the task before anybody is asked, in one line.
For a plan on log dirs (``remove-disks``, ``rebalance-disks``) the form also shows the log dirs of
the brokers concerned as DescribeLogDirs reports them now (:func:`log_dirs_section`): which are
cordoned, the replicas and bytes each holds, and whether a removed dir is not cordoned or holds
replicas the plan does not move (it would not end empty).

``required=False`` (a rendered Param, ``"{{ params.require_approval }}"``) returns an approval
record at once without asking anybody (for ``airflow dags test``, CI, and dry runs); no pre-flight
runs then (execute's own pre-flight does).

Airflow 3.0 has no human-in-the-loop operator: there the task fails closed when an approval is
required, saying so (upgrade to 3.1+, or trigger with ``require_approval`` false after reading the
report), and works as above when it is not.
"""

from __future__ import annotations

import ast
import copy
import json
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk import BaseOperator

from airflow_kafka_reassign.core.execution import ExecutionOptions, ExecutionStatus, preflight, preflight_findings, refusal
from airflow_kafka_reassign.core.records.plan_io import read_plan_with_digest
from airflow_kafka_reassign.core.vocabulary.units import format_bytes as human_bytes
from airflow_kafka_reassign.exceptions import KafkaReassignError
from airflow_kafka_reassign.operators._base import as_bool
from airflow_kafka_reassign.report.links import report_url

try:
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    HITL_AVAILABLE = True
except Exception:  # noqa: BLE001 (ImportError, or the provider's "needs Airflow 3.1+" exception on 3.0)
    ApprovalOperator = BaseOperator  # type: ignore[assignment,misc]
    HITL_AVAILABLE = False
try:  # Airflow 3's SkipMixin.skip raises it (the task runner skips the tasks it names)
    from airflow.sdk.exceptions import DownstreamTasksSkipped
except ImportError:  # pragma: no cover (Airflow 2 has no task SDK; this provider needs 3)
    class DownstreamTasksSkipped(Exception):  # type: ignore[no-redef]  # noqa: N818
        """Never raised here."""

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan
    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin, LogDir

REQUEST_KEY = "approval_request"
#: Findings listed in the form (the counts line covers the rest).
FINDINGS_SHOWN = 10


def _as_dict(value: Any, name: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = ast.literal_eval(value)
    if not isinstance(value, Mapping):
        raise AirflowFailException(f"{name} must be the plan task's XCom (a dict), not {type(value).__name__}: pass "
                                   "\"{{ ti.xcom_pull(task_ids='plan') }}\"")
    return dict(value)


def preflight_section(status: ExecutionStatus) -> list[str]:
    """The form's pre-flight part (Markdown lines): the counts as execution logs them, then what it would
    refuse or skip (:func:`~airflow_kafka_reassign.core.execution.preflight_findings`)."""
    findings = [line for _, line in preflight_findings(status, limit=FINDINGS_SHOWN)]
    lines = ["", "**Pre-flight against the cluster now** (what execute would find; nothing was changed): "
             + status.progress_line() + "."]
    if findings:
        lines += [f"- {line}" for line in findings[:FINDINGS_SHOWN]]
        if len(findings) > FINDINGS_SHOWN:
            lines.append(f"- ... and {len(findings) - FINDINGS_SHOWN} more (the execute task logs them all)")
    else:
        lines.append("Every move can run as planned.")
    return lines


def log_dir_brokers(plan: Mapping[str, Any], moves: ReassignmentPlan) -> set[int]:
    """The brokers whose log dirs a plan on log dirs concerns: those of its removed dirs (the plan task's XCom
    ``log_dirs.removed``, ``"BROKER:/path"``) and of every replica it moves between dirs (empty: not such a plan)."""
    removed = (plan.get("log_dirs") or {}).get("removed") or []
    brokers = {int(str(e).partition(":")[0]) for e in removed if str(e).partition(":")[0].isdigit()}
    return brokers | {b for m in moves.moves for b in (*m.pinned_dirs, *m.current_dirs)}


def log_dirs_section(dirs: Mapping[int, Sequence[LogDir]], *, brokers: Collection[int], removed: Sequence[str] = (),
                     planned: Collection[tuple[str, int]] = ()) -> list[str]:
    """The form's log-dir part (Markdown lines) for a plan on log dirs: every log dir of ``brokers`` as DescribeLogDirs
    shows it now (``dirs``: ``ClusterAdmin.log_dirs(None).dirs``): cordoned or not, the replicas and bytes it holds;
    then what a person should know about a removed dir (``removed``, ``"BROKER:/path"``): not cordoned (a topic
    created meanwhile may land there), or holding replicas of partitions the plan (``planned``) does not move."""
    gone = {(int(b), path.rstrip("/")) for b, _, path in (str(e).partition(":") for e in removed) if b.isdigit()}
    lines = ["", "**Log dirs now** (DescribeLogDirs; nothing was changed):", "",
             "| log dir | cordoned | replicas | bytes |", "|---|---|---|---|"]
    notes, moved = [], set(planned)
    for b in sorted(brokers):
        if b not in dirs:
            lines.append(f"| broker {b} | ? | ? | did not answer DescribeLogDirs |")
            continue
        for d in dirs[b]:
            current = [r for r in d.replicas if not r.future]
            moving_in = len(d.replicas) - len(current)
            label = f"`{b}:{d.path}`" + (" (removed)" if (b, d.path) in gone else "") + (" OFFLINE" if d.offline else "")
            cordoned = {True: "yes", False: "no", None: "not reported"}[d.cordoned]
            count = f"{len(current)}" + (f" (+{moving_in} moving in)" if moving_in else "")
            lines.append(f"| {label} | {cordoned} | {count} | {human_bytes(sum(r.size for r in current))} |")
            if (b, d.path) not in gone:
                continue
            if not d.cordoned:
                notes.append(f"- `{b}:{d.path}` is not cordoned: a topic created or grown meanwhile may get replicas "
                             "there that the plan does not move (cordons: Kafka 4.3+)")
            unplanned = sorted({str(r.tp) for r in current if (r.topic, r.partition) not in moved})
            if unplanned:
                shown = ", ".join(unplanned[:5]) + (f" and {len(unplanned) - 5} more" if len(unplanned) > 5 else "")
                notes.append(f"- `{b}:{d.path}` holds {len(unplanned)} replica(s) of partitions the plan does not "
                             f"move ({shown}): it will not end empty; reject and plan again")
    return lines + notes


def plan_body(plan: Mapping[str, Any], report_link: str | None, status: ExecutionStatus | None = None,
              log_dirs: Sequence[str] = ()) -> str:
    """The approval form's text (Markdown): what the plan does, what it found, what pre-flight found
    against the cluster now (``status``), the log dirs concerned (``log_dirs``: :func:`log_dirs_section`'s lines),
    where the report is."""
    before, after = plan.get("before") or {}, plan.get("after") or {}
    lines = [
        f"**{plan.get('goal', '?')}**: {plan.get('partitions_moved', '?')} partitions to move, "
        f"{plan.get('replica_moves', '?')} replica moves (lower bound {plan.get('lower_bound', '?')}), "
        f"{human_bytes(plan.get('bytes_to_move') or 0)} to copy, {plan.get('leader_changes', '?')} leader changes.",
        "",
        "| | before | after |", "|---|---|---|",
    ]
    for key, label in (("replica_max_min", "replicas per broker, max-min"),
                       ("leader_max_min", "leaders per broker, max-min"),
                       ("rack_violations", "rack violations"),
                       ("replicas_on_removed_brokers", "replicas on removed brokers")):
        lines.append(f"| {label} | {before.get(key, '-')} | {after.get(key, '-')} |")
    bounded = plan.get("replica_balance_bounded_by") or []
    if plan.get("replica_max_min_floor") is not None:
        lines += ["", f"Balance floor the racks allow: {plan['replica_max_min_floor']}"
                  + (f" (bounded by {', '.join(map(str, bounded))})" if bounded else "")]
    warnings = plan.get("warnings") or []
    lines += ["", f"**Warnings ({len(warnings)})**" if warnings else "No warning."]
    lines += [f"- {w}" for w in warnings]
    if status is not None:
        lines += preflight_section(status)
    lines += list(log_dirs)
    lines += ["", f"Plan `{plan.get('plan_sha256')}`, snapshot taken at {plan.get('snapshot_taken_at')}. "
              "Execution refuses this approval if the plan file changes or the snapshot gets too old."]
    if report_link:
        lines += ["", f"[Open the plan report]({report_link})"]
    return "\n".join(lines)


class PlanApprovalOperator(ApprovalOperator):  # type: ignore[misc,valid-type]
    """Wait for a person to approve or reject a plan (Airflow's human-in-the-loop approval, 3.1+).

    :param plan: the plan task's XCom, ``"{{ ti.xcom_pull(task_ids='plan') }}"`` (with
        ``render_template_as_native_obj=True``, or its rendered text). Templated.
    :param plan_task_id: the plan task, whose "Plan report" link the form shows (default ``"plan"``).
    :param required: ``False`` approves at once without asking (``airflow dags test``, CI); a rendered
        Param (``"{{ params.require_approval }}"``) works. Templated.
    :param subject: the form's headline.
    :param response_timeout: how long to wait for a decision (a timedelta); then the task fails and
        nothing is executed. ``None``: no bound (the DAG run's timeout still applies).
    :param execute_task_id: the ExecuteReassignment task that runs the plan (default ``"execute"``):
        its Kafka connection, plan storage connection and guard options (``allow_*``, ``strict``,
        ``on_plan_error``, ``rf_guard``, health gate) drive the pre-flight shown in the form.
        ``None`` (or no such task in the DAG): no pre-flight.

    The other keyword arguments go to Airflow's ``ApprovalOperator`` (``assigned_users``,
    ``notifiers``, ...). XCom ``return_value``: the approval record (see the module doc).
    """

    template_fields: Sequence[str] = ("plan", "required", "subject")
    ui_color = "#fff4d6"

    def __init__(self, *, plan: Any, plan_task_id: str = "plan", required: Any = True,
                 subject: str = "Approve this Kafka reassignment plan?", execute_task_id: str | None = "execute",
                 **kwargs: Any) -> None:
        if HITL_AVAILABLE:
            super().__init__(subject=subject, body="(the plan summary is filled in when the task runs)", **kwargs)
        else:
            # the HITL arguments (Airflow 3.1+) kept, not passed to BaseOperator: a DAG written for 3.1+ still
            # imports on 3.0, and a required approval fails at run time naming the version (execute)
            response_timeout = kwargs.pop("response_timeout", None)
            defaults = kwargs.pop("defaults", None)
            super().__init__(**kwargs)
            self.subject = subject
            self.response_timeout = response_timeout
            self.defaults = defaults
        self.plan = plan
        self.plan_task_id = plan_task_id
        self.required = required
        self.execute_task_id = execute_task_id
        #: the form's log-dir lines of a plan on log dirs, filled by the pre-flight
        self.log_dir_lines: list[str] = []

    def execute(self, context: Context) -> Any:
        plan = _as_dict(self.plan, "plan")
        ti = context["ti"]
        record = {"plan_uri": plan.get("plan_uri"), "plan_sha256": plan.get("plan_sha256"),
                  "snapshot_taken_at": plan.get("snapshot_taken_at")}
        if not record["plan_sha256"]:
            raise AirflowFailException("the plan task's XCom has no plan_sha256: re-plan with this provider version")
        link = report_url(ti.dag_id, ti.run_id, self.plan_task_id) if plan.get("report_uri") else None
        if not as_bool(self.required, "required"):
            self.log.info("No approval required for this run (require_approval=false): plan %s goes on as is",
                          record["plan_sha256"])
            return {**record, "approved": True, "required": False, "approved_by": None, "responded_at": None}
        status = self._preflight(context, plan)  # what execute would refuse is refused first, on every Airflow line
        if not HITL_AVAILABLE:
            report = f" ({plan['report_uri']})" if plan.get("report_uri") else ""
            raise AirflowFailException(
                "this Airflow has no human-in-the-loop approval (it needs Airflow 3.1+ and its standard provider): "
                f"the plan cannot be approved here and nothing is executed. Read the plan report{report}, "
                "then trigger again with require_approval=false, or upgrade Airflow"
            )
        if status is not None:
            record["preflight"] = {k: v for k, v in status.summary().items()
                                   if k in ("moves", "done", "in_flight", "pending", "lagging", "stale", "failed",
                                            "foreign", "below_min_isr")}
        ti.xcom_push(key=REQUEST_KEY, value=record)
        self.body = plan_body(plan, link, status, self.log_dir_lines)
        self.log.info("Waiting for a person to approve plan %s (the task's 'Required actions' in the UI)%s",
                      record["plan_sha256"], f"; report: {link}" if link else "")
        return super().execute(context)

    def _execute_task(self, context: Context) -> Any:
        """The execute task of this DAG, its connection ids rendered for this run (``None``: no pre-flight)."""
        dag = self.dag if self.execute_task_id and self.has_dag() else None
        if dag is None or not dag.has_task(self.execute_task_id):
            return None
        task = dag.get_task(self.execute_task_id)
        if not callable(getattr(task, "execution_options", None)):
            return None
        task = copy.copy(task)  # rendered here for the pre-flight only; the execute task renders its own
        for name in ("kafka_config_id", "storage_conn_id", "execution"):
            if hasattr(task, name):
                setattr(task, name, self.render_template(getattr(task, name), context))
        return task

    def _admin(self, kafka_config_id: str, timeout_s: float) -> ClusterAdmin:
        from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook

        return KafkaReassignHook(kafka_config_id=kafka_config_id, timeout_s=timeout_s).get_admin()

    def _preflight(self, context: Context, plan: Mapping[str, Any]) -> ExecutionStatus | None:
        """Execution's pre-flight, read-only; refuses (before anybody is asked) what execute would refuse."""
        task = self._execute_task(context)
        if task is None:
            self.log.info("No pre-flight: no execute task %r in this DAG", self.execute_task_id)
            return None
        from airflow_kafka_reassign.plan_storage import plan_store

        fail = f"task {self.task_id}: the plan is refused before approval (nobody is asked, nothing is executed): "
        try:
            options: ExecutionOptions = task.execution_options()
            store = plan_store(str(plan.get("plan_uri")), conn_id=task.storage_conn_id or None,
                               timeout_s=float(getattr(task, "storage_timeout_s", 60.0)))
            moves, digest = read_plan_with_digest(store)
            if digest != plan.get("plan_sha256"):
                raise AirflowFailException(
                    f"{fail}{store.uri} has changed since the plan task wrote it (plan task: {plan.get('plan_sha256')}, "
                    f"now: {digest}); re-plan (trigger the DAG again)")
            admin = self._admin(str(task.kafka_config_id), float(getattr(task, "kafka_timeout_s", 30.0)))
            try:
                status = preflight(admin, moves, options, log=self.log)
                brokers = log_dir_brokers(plan, moves)
                if brokers:  # a plan on log dirs: its dirs as they are now (one DescribeLogDirs)
                    self.log_dir_lines = log_dirs_section(
                        admin.log_dirs(None).dirs, brokers=brokers,
                        removed=(plan.get("log_dirs") or {}).get("removed") or (),
                        planned={(m.topic, m.partition) for m in moves.moves})
            finally:
                admin.close()
        except (KafkaReassignError, OSError, ValueError) as e:  # storage, cluster, bad options
            raise AirflowFailException(f"task {self.task_id}: the pre-flight could not run, nobody is asked: {e}") from e
        why = refusal(status)
        if why:
            raise AirflowFailException(f"{fail}{why}")
        self.log.info("Pre-flight (as %s would find it now): %s", self.execute_task_id, status.progress_line())
        for level, line in preflight_findings(status):
            self.log.log(level, "pre-flight: %s", line)
        for line in self.log_dir_lines:
            if line.startswith(("| `", "- ")):
                self.log.info("log dirs now: %s", line)
        return status

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        try:
            response = super().execute_complete(context=context, event=event)
        except DownstreamTasksSkipped:
            # Airflow 3: "Reject" skips the downstream tasks by raising from the approval's execute_complete; the task
            # ends there (success), so the decision is recorded now. The cordons the plan set are restored by the
            # clean-up task after the drain (RestoreCordonsOperator: trigger_rule all_done), not here.
            self._record(context, event, approved=False, push=True)
            raise
        return self._record(context, response, approved=list(response.get("chosen_options") or []) == [self.APPROVE])

    def _record(self, context: Context, response: Mapping[str, Any], *, approved: bool, push: bool = False) -> dict:
        """The approval record (see the module doc), logged; ``push``: pushed as the task's XCom ``return_value``
        itself (a rejection ends the task before it returns)."""
        record = context["ti"].xcom_pull(task_ids=self.task_id, key=REQUEST_KEY) or {}
        user = response.get("responded_by_user") or {}
        at = response.get("responded_at")
        out = {**record, "approved": approved, "required": True,
               "approved_by": (user.get("name") or user.get("id")) if isinstance(user, Mapping) else str(user),
               "responded_at": at.isoformat() if hasattr(at, "isoformat") else at}
        self.log.info("Plan %s %s by %s", record.get("plan_sha256"), "APPROVED" if approved else "REJECTED: nothing "
                      "is executed (a clean-up task, RestoreCordonsOperator, gives back the cordons its plan set)",
                      out["approved_by"])
        if push:
            context["ti"].xcom_push(key="return_value", value=out)
        return out
