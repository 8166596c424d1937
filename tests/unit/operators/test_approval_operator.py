"""PlanApprovalOperator without an API server: the record it returns, the form's text, Airflow 3.0's fail-closed
path. (A real approval and rejection through the UI's API: tests/integration/test_airflow_ui.py.)"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_kafka_reassign.operators import approval as approval_module
from airflow_kafka_reassign.operators.approval import PlanApprovalOperator, plan_body

PLAN = {"plan_uri": "/plans/p/plan", "plan_sha256": "sha256:ab", "snapshot_taken_at": "2026-11-22T08:00:00+00:00",
        "report_uri": "/plans/p/plan/report/report.html", "goal": "remove-brokers", "partitions_moved": 16,
        "replica_moves": 20, "lower_bound": 20, "bytes_to_move": 32_000_000, "leader_changes": 5,
        "before": {"replica_max_min": 9, "replicas_on_removed_brokers": 16},
        "after": {"replica_max_min": 1, "replicas_on_removed_brokers": 0}, "warnings": ["partial drain: 3 left"]}


class TI:
    dag_id, run_id = "d", "manual__1"

    def __init__(self) -> None:
        self.pushed: dict = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value

    def xcom_pull(self, task_ids=None, key=None):
        return self.pushed.get(key)


def test_no_approval_required_returns_an_approving_record_at_once():
    op = PlanApprovalOperator(task_id="approve", plan=str(PLAN), required="False")
    out = op.execute({"ti": TI()})
    assert out == {"plan_uri": "/plans/p/plan", "plan_sha256": "sha256:ab",
                   "snapshot_taken_at": "2026-11-22T08:00:00+00:00", "approved": True, "required": False,
                   "approved_by": None, "responded_at": None}


def test_the_form_shows_the_plan_and_the_report_link():
    body = plan_body(PLAN, "http://airflow/kafka-reassign/report/d/r/plan/report.html")
    assert "16 partitions to move, 20 replica moves (lower bound 20), 32.0 MB to copy" in body
    assert "| replicas on removed brokers | 16 | 0 |" in body and "- partial drain: 3 left" in body
    assert "sha256:ab" in body and "[Open the plan report](http://airflow/kafka-reassign/report/" in body


def test_without_human_in_the_loop_a_required_approval_fails_closed(monkeypatch):
    op = PlanApprovalOperator(task_id="approve", plan=PLAN)
    monkeypatch.setattr(approval_module, "HITL_AVAILABLE", False)  # as on Airflow 3.0
    with pytest.raises(AirflowFailException, match="no human-in-the-loop approval.*nothing is executed.*"
                                                   "require_approval=false"):
        op.execute({"ti": TI()})


@pytest.mark.skipif(not approval_module.HITL_AVAILABLE, reason="Airflow 3.1+")
def test_an_approval_returns_the_record_of_what_was_shown():
    op = PlanApprovalOperator(task_id="approve", plan=PLAN)
    ti = TI()
    ti.xcom_push(approval_module.REQUEST_KEY, {"plan_uri": "/plans/p/plan", "plan_sha256": "sha256:ab",
                                               "snapshot_taken_at": PLAN["snapshot_taken_at"]})
    at = datetime(2026, 11, 22, 9, tzinfo=UTC)
    out = op.execute_complete({"ti": ti, "task": op}, {"chosen_options": ["Approve"], "params_input": {},
                                                       "responded_at": at,
                                                       "responded_by_user": {"id": "7", "name": "alice"}})
    assert out["approved"] is True and out["plan_sha256"] == "sha256:ab" and out["approved_by"] == "alice"
    assert out["responded_at"] == at.isoformat()
