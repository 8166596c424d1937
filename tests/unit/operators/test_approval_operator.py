"""PlanApprovalOperator without an API server: the record it returns, the form's text, Airflow 3.0's fail-closed
path. (A real approval and rejection through the UI's API: tests/integration/test_airflow_ui.py.)"""

from __future__ import annotations

from datetime import datetime, timezone

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
    at = datetime(2026, 11, 22, 9, tzinfo=timezone.utc)
    out = op.execute_complete({"ti": ti, "task": op}, {"chosen_options": ["Approve"], "params_input": {},
                                                       "responded_at": at,
                                                       "responded_by_user": {"id": "7", "name": "alice"}})
    assert out["approved"] is True and out["plan_sha256"] == "sha256:ab" and out["approved_by"] == "alice"
    assert out["responded_at"] == at.isoformat()


# -- the pre-flight before asking (execution's own, read-only, on the fake cluster) --------------------


@pytest.fixture
def cluster(monkeypatch):
    from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
    from airflow_kafka_reassign.testing import FakeClusterAdmin

    admin = FakeClusterAdmin.build({1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"},
                                   {"t": [[1, 2], [2, 3], [3, 1]], "other": [[1, 2]]})
    admin.close = lambda: None  # type: ignore[method-assign]
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    return admin


def plan_dir(tmp_path, moves) -> dict:
    """A plan directory and the plan task's XCom for it."""
    from airflow_kafka_reassign.core.records.plan_io import METRICS_FILE, PLAN_FILE, plan_digest
    from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan

    d = tmp_path / "plan"
    d.mkdir()
    data = ReassignmentPlan(moves=tuple(moves)).model_dump_json().encode()
    (d / PLAN_FILE).write_bytes(data)
    (d / METRICS_FILE).write_text('{"format_version": 1}')
    return {**PLAN, "plan_uri": str(d), "plan_sha256": plan_digest(data), "report_uri": None}


def approval_in_dag(xcom: dict, **execute_kw) -> PlanApprovalOperator:
    from airflow.sdk import DAG

    from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator

    with DAG("d", schedule=None, render_template_as_native_obj=True):
        approve = PlanApprovalOperator(task_id="approve", plan=xcom)
        execute = ExecuteReassignmentOperator(task_id="execute", plan_uri=xcom["plan_uri"], kafka_config_id="k",
                                              **execute_kw)
        approve >> execute
    return approve


def move(p, current, target, **kw):
    from airflow_kafka_reassign.core.vocabulary.models import Move

    return Move(topic="t", partition=p, current_replicas=current, target_replicas=target, **kw)


def test_the_form_lists_what_execute_would_skip_and_changes_nothing(cluster, tmp_path):
    xcom = plan_dir(tmp_path, [move(0, (1, 2), (4, 2)), move(1, (2, 1), (5, 3))])  # t-1 is on [2, 3]: stale
    op = approval_in_dag(xcom, throttle_bytes_per_sec=1_000_000)
    status = op._preflight({"ti": TI()}, xcom)
    assert [str(tp) for tp in status.pending] == ["t-0"] and [str(tp) for tp in status.stale] == ["t-1"]
    body = plan_body(xcom, None, status)
    assert "**Pre-flight against the cluster now**" in body and "1 pending, 1 stale (refused)" in body
    assert "- stale move t-1 refused: the plan expects replicas [2, 1], the cluster has [2, 3]" in body
    assert cluster.alter_requests == [] and all(not c for c in cluster.broker_configs.values())  # read-only


def test_a_clean_plan_says_every_move_can_run(cluster, tmp_path):
    xcom = plan_dir(tmp_path, [move(0, (1, 2), (4, 2))])
    status = approval_in_dag(xcom)._preflight({"ti": TI()}, xcom)
    assert "Every move can run as planned." in plan_body(xcom, None, status)


@pytest.mark.parametrize(("arrange", "moves", "refused"), [
    pytest.param(lambda c: c.inflight.update({_tp("other", 0): ((1, 2), (3, 4))}), [((1, 2), (4, 2), {})],
                 r"1 reassignment\(s\) are in flight that this plan did not start \(other-0\).*"
                 "allow_concurrent_reassignments=True", id="foreign-reassignment"),
    pytest.param(None, [((1, 2), (9, 2), {})], r"the whole plan is refused.*broker 9 does not exist in the cluster.*Plan again",
                 id="broker-missing"),
    pytest.param(None, [((1, 2), (1, 2, 4), {"allow_rf_change": True})],
                 r"none of the plan's 1 move\(s\) can run: 0 stale and 1 refused.*plan again", id="kip-860-rf-change"),
    pytest.param(None, [((3, 4), (4, 5), {})], r"none of the plan's 1 move\(s\) can run: 1 stale", id="all-stale"),
    pytest.param(lambda c: setattr(c, "rf_guard_supported", False), [((1, 2), (4, 2), {})],
                 r"the brokers \(Kafka 4\.4\) do not support KIP-860's AllowReplicationFactorChange"
                 r".*rf_guard=\"client\"", id="no-rf-guard"),
])
def test_a_plan_execute_would_refuse_entirely_is_refused_before_asking(cluster, tmp_path, arrange, moves, refused):
    if arrange:
        arrange(cluster)
    xcom = plan_dir(tmp_path, [move(0, *m[:2], **m[2]) for m in moves])
    op = approval_in_dag(xcom)
    ti = TI()
    with pytest.raises(AirflowFailException, match="the plan is refused before approval \\(nobody is asked, "
                                                   "nothing is executed\\): " + refused) as e:
        op.execute({"ti": ti})
    assert "\n" not in str(e.value) and approval_module.REQUEST_KEY not in ti.pushed  # one line; nothing asked
    assert cluster.alter_requests == []


def test_the_execute_tasks_guard_options_apply(cluster, tmp_path):
    cluster.inflight[_tp("other", 0)] = ((1, 2), (3, 4))
    xcom = plan_dir(tmp_path, [move(0, (1, 2), (4, 2))])
    status = approval_in_dag(xcom, allow_concurrent_reassignments=True)._preflight({"ti": TI()}, xcom)
    assert status.blocked is None and [str(tp) for tp in status.foreign] == ["other-0"]
    assert "- foreign reassignment in flight: other-0 [1, 2] -> [3, 4]" in plan_body(xcom, None, status)


def test_a_plan_edited_since_the_plan_task_is_refused_before_asking(cluster, tmp_path):
    xcom = plan_dir(tmp_path, [move(0, (1, 2), (4, 2))])
    (tmp_path / "plan" / "plan.json").write_text((tmp_path / "plan" / "plan.json").read_text().replace("4", "5"))
    with pytest.raises(AirflowFailException, match="has changed since the plan task wrote it.*re-plan"):
        approval_in_dag(xcom).execute({"ti": TI()})


def test_no_execute_task_no_preflight(tmp_path):
    xcom = plan_dir(tmp_path, [move(0, (1, 2), (4, 2))])
    op = PlanApprovalOperator(task_id="approve", plan=xcom, execute_task_id=None)
    assert op._preflight({"ti": TI()}, xcom) is None


def _tp(topic, p):
    from airflow_kafka_reassign.core.vocabulary.models import TopicPartition

    return TopicPartition(topic, p)


# -- a plan on log dirs: the form shows the dirs as they are now --------------------------------------------------

D1, D2 = "/kafka/1/data-1", "/kafka/1/data-2"


@pytest.fixture
def jbod(monkeypatch):
    """3 brokers with 2 log dirs each; t-0, t-1 with broker 1's replica in its second dir (1 MB each), which is
    cordoned; late-0 in its first dir."""
    from airflow_kafka_reassign.core.maintenance.cordon import CORDONED_LOG_DIRS
    from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica as R
    from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
    from airflow_kafka_reassign.testing import FakeClusterAdmin

    admin = FakeClusterAdmin.build({1: "a", 2: "b", 3: "c"}, {"t": [[1, 2], [2, 1]], "late": [[1, 3]]}, log_dirs=2)
    for p in (0, 1):
        admin.replica_dirs[R("t", p, 1)] = D2
        admin.sizes[_tp("t", p)] = {1: 1_000_000, 2: 1_000_000}
    admin.broker_configs[1][CORDONED_LOG_DIRS] = D2
    admin.close = lambda: None  # type: ignore[method-assign]
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    return admin


def removal_xcom(admin, tmp_path) -> dict:
    from airflow_kafka_reassign.core.planner.goals import PlanRequest
    from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable, plan_log_dirs

    request = PlanRequest(goal="remove-disks", log_dirs=[f"1:{D2}"])
    result = plan_log_dirs(admin.snapshot(include_sizes=True), LogDirTable.of(admin.log_dirs(None)), request)
    return {**plan_dir(tmp_path, result.plan.moves), "goal": "remove-disks", "log_dirs": result.summary()["log_dirs"]}


def test_the_form_of_a_disk_removal_shows_the_dirs_cordons_and_bytes_now(jbod, tmp_path):
    xcom = removal_xcom(jbod, tmp_path)
    op = approval_in_dag(xcom)
    status = op._preflight({"ti": TI()}, xcom)
    body = plan_body(xcom, None, status, op.log_dir_lines)
    assert "log dirs: 0/2 replicas moved, 0 in flight, 2 pending" in body  # pre-flight: where the replicas are
    assert "**Log dirs now** (DescribeLogDirs; nothing was changed):" in body
    assert f"| `1:{D2}` (removed) | yes | 2 | 2.0 MB |" in body  # cordoned, what the plan empties
    assert f"| `1:{D1}` | no | 1 | 0 B |" in body  # late-0
    assert "/kafka/2/" not in body  # only the brokers concerned
    assert "not cordoned" not in body and "does not move" not in body  # nothing to warn about
    assert body.index("Pre-flight against the cluster now") < body.index("Log dirs now")


def test_the_form_says_a_removed_dir_is_not_cordoned_or_holds_replicas_the_plan_does_not_move(jbod, tmp_path):
    from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica as R

    xcom = removal_xcom(jbod, tmp_path)
    jbod.set_cordons({1: None})  # someone took the cordon off ...
    jbod.replica_dirs[R("late", 0, 1)] = D2  # ... and a replica landed in the dir since the plan
    op = approval_in_dag(xcom)
    body = plan_body(xcom, None, op._preflight({"ti": TI()}, xcom), op.log_dir_lines)
    assert f"| `1:{D2}` (removed) | no | 3 |" in body
    assert f"- `1:{D2}` is not cordoned: a topic created or grown meanwhile may get replicas there" in body
    assert (f"- `1:{D2}` holds 1 replica(s) of partitions the plan does not move (late-0): it will not end empty; "
            "reject and plan again") in body


def test_a_plan_without_log_dirs_shows_none_and_asks_nothing_more(cluster, tmp_path):
    xcom = plan_dir(tmp_path, [move(0, (1, 2), (4, 2))])
    op = approval_in_dag(xcom)
    asked = []
    real = cluster.log_dirs
    cluster.log_dirs = lambda partitions: asked.append(partitions) or real(partitions)  # type: ignore[method-assign]
    status = op._preflight({"ti": TI()}, xcom)
    assert op.log_dir_lines == [] and "Log dirs now" not in plan_body(xcom, None, status, op.log_dir_lines)
    assert None not in asked  # no DescribeLogDirs of every partition for a plan that pins no log dir


def test_log_dirs_section_names_a_broker_that_did_not_answer():
    from airflow_kafka_reassign.operators.approval import log_dirs_section

    lines = log_dirs_section({}, brokers=[4], removed=["4:/d"])
    assert "| broker 4 | ? | ? | did not answer DescribeLogDirs |" in lines
