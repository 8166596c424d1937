"""What a person approved, and whether the plan about to run is still that plan.

The approval step (``operators/approval.py``, Airflow's human-in-the-loop ApprovalOperator)
records an :class:`ApprovalRecord`: the plan's content hash (:func:`~airflow_kafka_reassign.core.records.plan_io.plan_digest`
of ``plan.json``) and the time of the snapshot it was planned from. ExecuteReassignment checks it
with :func:`check_approval` just before its pre-flight, on the plan bytes it is about to run:

* not approved (rejected, or no decision) -> refused;
* the plan's hash differs from the approved one (the file was edited or replaced after the
  approval) -> refused, "re-plan and approve again";
* the snapshot is older than the DAG's bound (``max_snapshot_age``) -> refused, "re-plan": the
  cluster may have changed since the person looked at the plan.

Pure: no Airflow import. Every refusal is a :class:`~airflow_kafka_reassign.exceptions.GuardRefusedError`
whose message names the problem and the fix.

    >>> from datetime import datetime, timezone
    >>> record = ApprovalRecord(approved=True, plan_sha256="sha256:ab", snapshot_taken_at="2026-11-22T08:00:00+00:00")
    >>> check_approval(record, plan_sha256="sha256:ab", now=datetime(2026, 11, 22, 9, tzinfo=timezone.utc),
    ...                max_snapshot_age_s=7200)
"""

from __future__ import annotations

import ast
import json
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from airflow_kafka_reassign.exceptions import ConfigurationError, GuardRefusedError

REPLAN = "re-plan (trigger the DAG again) and approve the new plan"


class ApprovalRecord(BaseModel):
    """One decision about one plan (what the approval task returns to XCom)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    approved: bool
    plan_sha256: str
    snapshot_taken_at: str | None = None
    plan_uri: str | None = None
    #: False when the DAG run said no approval was needed (``require_approval=false``)
    required: bool = True
    approved_by: str | None = None
    responded_at: str | None = None

    @classmethod
    def parse(cls, value: Any) -> ApprovalRecord:
        """From the approval task's XCom: a dict, or its text when the DAG renders templates as text."""
        if isinstance(value, str):
            text = value.strip()
            try:
                value = json.loads(text)
            except ValueError:
                try:
                    value = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    raise ConfigurationError(
                        f"approval {text[:80]!r} is not the approval task's result; pass "
                        "\"{{ ti.xcom_pull(task_ids='approve') }}\" (with render_template_as_native_obj=True)"
                    ) from None
        if not isinstance(value, dict):
            raise ConfigurationError(
                f"approval is {type(value).__name__}, not the approval task's result (a dict): did the approval task "
                "run? Pass \"{{ ti.xcom_pull(task_ids='approve') }}\""
            )
        try:
            return cls.model_validate(value)
        except ValidationError as e:
            raise ConfigurationError(f"approval is not an approval record: {e.errors()[0]['loc']}: "
                                     f"{e.errors()[0]['msg']}") from None


def _aware(text: str, name: str) -> datetime:
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError(f"{name} {text!r} is not an ISO-8601 date-time") from None
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def snapshot_age_s(snapshot_taken_at: str, now: datetime) -> float:
    return (now - _aware(snapshot_taken_at, "snapshot_taken_at")).total_seconds()


def check_snapshot_age(snapshot_taken_at: str | None, *, now: datetime, max_snapshot_age_s: float | None) -> None:
    """Refuse a plan whose snapshot is older than ``max_snapshot_age_s`` (None: no bound)."""
    if max_snapshot_age_s is None:
        return
    if not snapshot_taken_at:
        raise GuardRefusedError(
            f"max_snapshot_age is set ({max_snapshot_age_s:g} s) but the time of the plan's snapshot is unknown: "
            f"{REPLAN}, or unset max_snapshot_age"
        )
    age = snapshot_age_s(snapshot_taken_at, now)
    if age > max_snapshot_age_s:
        raise GuardRefusedError(
            f"the plan's snapshot was taken at {snapshot_taken_at}, {age / 60:.0f} min ago, longer ago than "
            f"max_snapshot_age ({max_snapshot_age_s / 60:g} min): the cluster may have changed since; {REPLAN}"
        )


def check_approval(record: ApprovalRecord, *, plan_sha256: str, now: datetime,
                   max_snapshot_age_s: float | None = None) -> None:
    """Refuse (:class:`GuardRefusedError`) unless ``record`` approves exactly this plan, recently enough."""
    if not record.approved:
        who = f" by {record.approved_by}" if record.approved_by else ""
        raise GuardRefusedError(f"the plan {record.plan_sha256} was not approved (rejected{who}): nothing is "
                                f"executed; {REPLAN}")
    if record.plan_sha256 != plan_sha256:
        raise GuardRefusedError(
            f"the plan changed after it was approved: approved {record.plan_sha256}, now {plan_sha256} "
            f"({record.plan_uri or 'plan_uri'} was edited or replaced); nothing is executed; {REPLAN}"
        )
    check_snapshot_age(record.snapshot_taken_at, now=now, max_snapshot_age_s=max_snapshot_age_s)
