"""PlanApprovalOperator: a person approves or rejects a plan before it is executed.

It is Airflow's own human-in-the-loop approval (the standard provider's ``ApprovalOperator``,
Airflow 3.1+): the run waits on the task's "Required actions" page in the UI (or
``PATCH /api/v2/hitlDetails/...`` through the REST API) with the plan's summary (moves, bytes,
lower bound, balance before/after, warnings) and a link to the plan report. "Reject" skips the
downstream tasks: nothing is submitted.

The decision is bound to the plan: the task returns an approval record (XCom ``return_value``)::

    {"approved": true, "plan_sha256": "sha256:...", "snapshot_taken_at": "...", "plan_uri": "...",
     "required": true, "approved_by": "alice", "responded_at": "..."}

and ExecuteReassignment (``approval="{{ ti.xcom_pull(task_ids='approve') }}"``) refuses a plan
whose ``plan.json`` no longer has that hash, or whose snapshot is older than its
``max_snapshot_age``, with a message that says to re-plan (core/approval.py).

``required=False`` (a rendered Param, ``"{{ params.require_approval }}"``) returns an approval
record at once without asking anybody (for ``airflow dags test``, CI, and dry runs).

Airflow 3.0 has no human-in-the-loop operator: there the task fails closed when an approval is
required, saying so (upgrade to 3.1+, or trigger with ``require_approval`` false after reading the
report), and works as above when it is not.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk import BaseOperator

from airflow_kafka_reassign.core.report import human_bytes
from airflow_kafka_reassign.links import report_url
from airflow_kafka_reassign.operators._params import as_bool

try:
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    HITL_AVAILABLE = True
except Exception:  # noqa: BLE001 (ImportError, or the provider's "needs Airflow 3.1+" exception on 3.0)
    ApprovalOperator = BaseOperator  # type: ignore[assignment,misc]
    HITL_AVAILABLE = False

if TYPE_CHECKING:
    from airflow.sdk import Context

REQUEST_KEY = "approval_request"


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


def plan_body(plan: Mapping[str, Any], report_link: str | None) -> str:
    """The approval form's text (Markdown): what the plan does, what it found, where the report is."""
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

    The other keyword arguments go to Airflow's ``ApprovalOperator`` (``assigned_users``,
    ``notifiers``, ...). XCom ``return_value``: the approval record (see the module doc).
    """

    template_fields: Sequence[str] = ("plan", "required", "subject")
    ui_color = "#fff4d6"

    def __init__(self, *, plan: Any, plan_task_id: str = "plan", required: Any = True,
                 subject: str = "Approve this Kafka reassignment plan?", **kwargs: Any) -> None:
        if HITL_AVAILABLE:
            super().__init__(subject=subject, body="(the plan summary is filled in when the task runs)", **kwargs)
        else:
            response_timeout = kwargs.pop("response_timeout", None)
            super().__init__(**kwargs)
            self.subject = subject
            self.response_timeout = response_timeout
        self.plan = plan
        self.plan_task_id = plan_task_id
        self.required = required

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
        if not HITL_AVAILABLE:
            raise AirflowFailException(
                "this Airflow has no human-in-the-loop approval (it needs Airflow 3.1+ and its standard provider): "
                "the plan cannot be approved here and nothing is executed. Read the plan report "
                f"({plan.get('report_uri')}), then trigger again with require_approval=false, or upgrade Airflow"
            )
        ti.xcom_push(key=REQUEST_KEY, value=record)
        self.body = plan_body(plan, link)
        self.log.info("Waiting for a person to approve plan %s (the task's 'Required actions' in the UI)%s",
                      record["plan_sha256"], f"; report: {link}" if link else "")
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        response = super().execute_complete(context=context, event=event)
        record = context["ti"].xcom_pull(task_ids=self.task_id, key=REQUEST_KEY) or {}
        user = response.get("responded_by_user") or {}
        approved = list(response.get("chosen_options") or []) == [self.APPROVE]
        at = response.get("responded_at")
        out = {**record, "approved": approved, "required": True,
               "approved_by": (user.get("name") or user.get("id")) if isinstance(user, Mapping) else str(user),
               "responded_at": at.isoformat() if hasattr(at, "isoformat") else at}
        self.log.info("Plan %s %s by %s", record.get("plan_sha256"), "APPROVED" if approved else "REJECTED: nothing "
                      "is executed", out["approved_by"])
        return out
