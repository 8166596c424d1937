"""ExecuteReassignmentOperator and CancelReassignmentOperator with the fake cluster behind the hook.

The real cluster and real Airflow task runs are in tests/integration/test_execution_*.py.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_kafka_reassign.core.execution import THROTTLE_BACKUP_FILE
from airflow_kafka_reassign.core.execution.throttle import FOLLOWER_RATE, LEADER_RATE
from airflow_kafka_reassign.core.records.plan_io import METRICS_FILE, PLAN_FILE, ROLLBACK_FILE
from airflow_kafka_reassign.core.vocabulary.durations import deadline as parse_deadline
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators.cancel import CancelReassignmentOperator
from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
from airflow_kafka_reassign.testing import FakeClusterAdmin

RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"}
NOW = datetime(2026, 11, 22, 2, 0, tzinfo=timezone.utc)


class TI:
    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value


def tp(topic: str, p: int) -> TopicPartition:
    return TopicPartition(topic, p)


def write_plan(d: Path, moves: list[Move], *, rollback: bool = True) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    plan = ReassignmentPlan(moves=tuple(moves))
    (d / PLAN_FILE).write_text(plan.model_dump_json())
    if rollback:
        (d / ROLLBACK_FILE).write_text(plan.rollback().model_dump_json())
    (d / METRICS_FILE).write_text(json.dumps({"format_version": 1}))
    return d


MOVES = [
    Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 4)),
    Move(topic="t", partition=1, current_replicas=(2, 3), target_replicas=(4, 5)),
]


@pytest.fixture
def cluster(monkeypatch) -> FakeClusterAdmin:
    admin = FakeClusterAdmin.build(RACKS, {"t": [[1, 2], [2, 3]], "other": [[1, 2]]})
    admin.closed = 0  # type: ignore[attr-defined]

    def close() -> None:
        admin.closed += 1  # type: ignore[attr-defined]

    admin.close = close  # type: ignore[method-assign]
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    return admin


def completing(admin: FakeClusterAdmin, monkeypatch) -> None:
    """Moves finish between two polls (time.sleep completes them)."""
    monkeypatch.setattr("airflow_kafka_reassign.core.execution.clock.sleep", lambda s: admin.complete())


def op(plan_dir: Path, **kw) -> ExecuteReassignmentOperator:
    kw.setdefault("poll_interval", 0)
    return ExecuteReassignmentOperator(task_id="execute", plan_uri=str(plan_dir), kafka_config_id="k", **kw)


# -- deadlines -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    (None, None),
    ("", None),
    (timedelta(hours=2), NOW + timedelta(hours=2)),
    (90, NOW + timedelta(seconds=90)),
    ("3600", NOW + timedelta(hours=1)),
    ("2h", NOW + timedelta(hours=2)),
    ("1h30m", NOW + timedelta(minutes=90)),
    ("45s", NOW + timedelta(seconds=45)),
    ("PT2H30M", NOW + timedelta(minutes=150)),
    ("2026-11-22T06:00:00+00:00", datetime(2026, 11, 22, 6, tzinfo=timezone.utc)),
    ("2026-11-22T07:00:00+01:00", datetime(2026, 11, 22, 6, tzinfo=timezone.utc)),
    ("2026-11-22T06:00:00Z", datetime(2026, 11, 22, 6, tzinfo=timezone.utc)),
    (datetime(2026, 11, 22, 6), datetime(2026, 11, 22, 6, tzinfo=timezone.utc)),
])
def test_deadline_forms(value, expected):
    assert parse_deadline(value, now=NOW) == expected


@pytest.mark.parametrize("value", ["tomorrow", "2h later", [1]])
def test_a_bad_deadline_names_the_accepted_forms(value):
    with pytest.raises(ConfigurationError, match="data_interval_end"):
        parse_deadline(value, now=NOW)


# -- execute ---------------------------------------------------------------------------------------


def test_execute_runs_the_plan_restores_throttles_and_pushes_a_small_summary(tmp_path, cluster, monkeypatch):
    completing(cluster, monkeypatch)
    plan_dir = write_plan(tmp_path / "plan", MOVES, rollback=False)
    cluster.broker_configs[3][LEADER_RATE] = "42"
    summary = op(plan_dir, throttle_bytes_per_sec=1000, max_moves=1).execute({"ti": TI()})
    assert summary["ok"] and summary["done"] == 2 and summary["moves"] == 2
    assert summary["plan_uri"] == str(plan_dir) and summary["throttles_restored"] == "yes"
    assert len(json.dumps(summary)) < 2000
    assert cluster.replicas[tp("t", 0)] == (3, 4) and cluster.replicas[tp("t", 1)] == (4, 5)
    assert [len(r[0]) for r in cluster.alter_requests] == [1, 1]  # max_moves=1
    assert cluster.broker_configs[3] == {LEADER_RATE: "42"} and all(
        FOLLOWER_RATE not in c for c in cluster.broker_configs.values())
    assert (plan_dir / ROLLBACK_FILE).is_file()  # written before the first submission
    assert not (plan_dir / "run" / THROTTLE_BACKUP_FILE).exists()
    assert cluster.closed == 1


def test_a_stale_move_fails_the_task_after_the_others_ran(tmp_path, cluster, monkeypatch):
    completing(cluster, monkeypatch)
    cluster.replicas[tp("t", 0)] = (1, 5)
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    ti = TI()
    with pytest.raises(AirflowFailException, match="1 stale") as e:
        op(plan_dir).execute({"ti": ti})
    assert "t-0" in str(e.value)
    assert cluster.replicas[tp("t", 1)] == (4, 5)
    assert ti.pushed["summary"]["stale_partitions"] == {"t-0": {"expected": [1, 2], "actual": [1, 5]}}


def test_a_foreign_reassignment_fails_the_task_before_anything_changes(tmp_path, cluster):
    cluster.alter_reassignments({tp("other", 0): [3, 4]})
    cluster.alter_requests.clear()
    plan_dir = write_plan(tmp_path / "plan", MOVES, rollback=False)
    with pytest.raises(AirflowFailException, match="allow_concurrent_reassignments=True"):
        op(plan_dir, throttle_bytes_per_sec=1000).execute({"ti": TI()})
    assert cluster.alter_requests == []
    assert not (plan_dir / ROLLBACK_FILE).exists()
    assert cluster.broker_configs == {b: {} for b in RACKS}


def test_a_plan_naming_a_broker_the_cluster_lacks_fails_the_task_before_anything_is_sent(tmp_path, cluster):
    moves = [MOVES[0], Move(topic="t", partition=1, current_replicas=(2, 3), target_replicas=(2, 99))]
    plan_dir = write_plan(tmp_path / "plan", moves, rollback=False)
    ti = TI()
    with pytest.raises(AirflowFailException, match="the plan was refused: the whole plan is refused") as e:
        op(plan_dir, throttle_bytes_per_sec=1000).execute({"ti": ti})
    assert "broker 99 does not exist in the cluster" in str(e.value) and "Plan again" in str(e.value)
    assert cluster.alter_requests == [] and cluster.broker_configs == {b: {} for b in RACKS}
    assert not (plan_dir / ROLLBACK_FILE).exists() and not (plan_dir / "run" / THROTTLE_BACKUP_FILE).exists()
    assert ti.pushed["summary"]["plan_errors"][0].startswith("broker 99")


def test_on_plan_error_skip_runs_the_other_moves_and_fails_the_task_naming_the_refused_one(
        tmp_path, cluster, monkeypatch):
    completing(cluster, monkeypatch)
    moves = [MOVES[0], Move(topic="t", partition=1, current_replicas=(2, 3), target_replicas=(2, 99))]
    plan_dir = write_plan(tmp_path / "plan", moves)
    with pytest.raises(AirflowFailException, match="1 refused or failed move") as e:
        op(plan_dir, on_plan_error="skip").execute({"ti": TI()})
    assert "t-1" in str(e.value) and cluster.replicas[tp("t", 0)] == (3, 4)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_moves": 0}, "max_moves"),
    ({"on_plan_error": "ignore"}, "on_plan_error"),
    ({"strict": True, "on_plan_error": "skip"}, "strict=True"),
    ({"order": "random"}, "order"),
    ({"rf_guard": "off"}, "rf_guard"),
])
def test_bad_execution_settings_fail_when_the_dag_is_parsed(tmp_path, cluster, kwargs, message):
    """Every execution setting is read once (ExecutionConfig) as soon as it is known: a wrong one fails the DAG's
    import, before any run, naming the setting (a templated one fails the task, as below)."""
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    with pytest.raises(ConfigurationError, match=message):
        op(plan_dir, **kwargs)
    templated = {k: "{{ params.x }}" for k in kwargs}
    task = op(plan_dir, **templated)
    task.execution = {**task.execution, **kwargs}  # as rendered
    with pytest.raises(AirflowFailException, match=message):
        task.execute({"ti": TI()})
    assert cluster.calls == {}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"deadline": "soon"}, "deadline"),
    ({"on_deadline": "abort"}, "on_deadline"),
])
def test_bad_parameters_fail_without_retry_before_the_cluster_is_touched(tmp_path, cluster, kwargs, message):
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    with pytest.raises(AirflowFailException, match=message):
        op(plan_dir, **kwargs).execute({"ti": TI()})
    assert cluster.calls == {}


def test_a_missing_plan_directory_fails_clearly(tmp_path, cluster):
    with pytest.raises(AirflowFailException, match="not a plan directory"):
        op(tmp_path / "nowhere").execute({"ti": TI()})


def test_dry_run_changes_nothing(tmp_path, cluster):
    plan_dir = write_plan(tmp_path / "plan", MOVES, rollback=False)
    summary = op(plan_dir, dry_run=True, throttle_bytes_per_sec=1000).execute({"ti": TI()})
    assert summary["dry_run"] and summary["would_submit"] == 2 and summary["pending"] == 2
    assert cluster.alter_requests == [] and cluster.broker_configs == {b: {} for b in RACKS}
    assert sorted(p.name for p in plan_dir.iterdir()) == [METRICS_FILE, PLAN_FILE]


def test_without_waiting_the_first_batch_goes_out_and_the_throttles_stay_for_the_sensor(tmp_path, cluster):
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    summary = op(plan_dir, wait_for_completion=False, max_moves=1, throttle_bytes_per_sec=1000,
                 order="plan").execute({"ti": TI()})
    assert summary["in_flight"] == 1 and summary["pending"] == 1 and not summary["complete"]
    assert (plan_dir / "run" / THROTTLE_BACKUP_FILE).is_file()
    assert cluster.broker_configs[3][FOLLOWER_RATE] == "1000"


def test_a_deadline_ends_the_task_successfully_with_the_remaining_moves_reported(tmp_path, cluster, monkeypatch):
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    polls = []

    def tick(s):
        polls.append(s)
        time.sleep(0.3)
        cluster.complete()

    monkeypatch.setattr("airflow_kafka_reassign.core.execution.clock.sleep", tick)
    summary = op(plan_dir, max_moves=1, order="plan", deadline=0.2).execute({"ti": TI()})
    assert summary["deadline_reached"] and summary["done"] == 1 and summary["pending"] == 1
    assert summary["remaining_partitions"] == ["t-1"]


def test_on_kill_stops_submitting_and_restores_the_throttles(tmp_path, cluster, monkeypatch):
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    cluster.topic_configs["t"]["leader.replication.throttled.replicas"] = "9:9"
    task = op(plan_dir, max_moves=1, order="plan", throttle_bytes_per_sec=1000)
    def sleep(s: float) -> None:  # the kill arrives while the first move is in flight (no timer: CI load varies)
        if cluster.alter_requests:
            threading.Thread(target=task.on_kill).start()
        time.sleep(0.02)

    monkeypatch.setattr("airflow_kafka_reassign.core.execution.clock.sleep", sleep)
    ti = TI()
    with pytest.raises(AirflowException, match="stopped") as e:
        task.execute({"ti": ti})
    assert not isinstance(e.value, AirflowFailException)  # retryable: a retry resumes
    summary = ti.pushed["summary"]
    assert summary["stopped"] and summary["in_flight"] == 1 and summary["pending"] == 1
    assert cluster.broker_configs == {b: {} for b in RACKS}
    assert cluster.topic_configs["t"] == {"leader.replication.throttled.replicas": "9:9"}
    assert len(cluster.alter_requests) == 1


def test_the_operator_templates_its_uris_and_deadline():
    assert set(ExecuteReassignmentOperator.template_fields) >= {"plan_uri", "kafka_config_id", "deadline", "state_dir"}
    assert set(CancelReassignmentOperator.template_fields) >= {"plan_uri", "kafka_config_id"}


# -- cancel ---------------------------------------------------------------------------------------


def _start(cluster: FakeClusterAdmin, plan_dir: Path, **kw) -> None:
    op(plan_dir, wait_for_completion=False, **kw).execute({"ti": TI()})


def test_cancel_stops_the_plans_moves_clears_throttles_and_leaves_others(tmp_path, cluster):
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    _start(cluster, plan_dir, throttle_bytes_per_sec=1000, allow_concurrent_reassignments=True)
    cluster.alter_reassignments({tp("other", 0): [3, 4]})
    summary = CancelReassignmentOperator(task_id="cancel", plan_uri=str(plan_dir)).execute({"ti": TI()})
    assert summary["cancelled"] == 2 and summary["rf_changed"] == {} and summary["throttles_restored"] == "yes"
    assert cluster.replicas[tp("t", 0)] == (1, 2) and list(cluster.inflight) == [tp("other", 0)]
    assert cluster.broker_configs == {b: {} for b in RACKS}


def test_cancel_all_needs_no_plan_and_a_missing_plan_is_refused(tmp_path, cluster):
    cluster.alter_reassignments({tp("other", 0): [3, 4]})
    with pytest.raises(AirflowFailException, match="cancel_all=True"):
        CancelReassignmentOperator(task_id="cancel").execute({"ti": TI()})
    summary = CancelReassignmentOperator(task_id="cancel", cancel_all=True).execute({"ti": TI()})
    assert summary["cancelled_partitions"] == ["other-0"] and not cluster.inflight


def test_cancel_with_rollback_moves_finished_partitions_back(tmp_path, cluster, monkeypatch):
    completing(cluster, monkeypatch)
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    _start(cluster, plan_dir, max_moves=1, order="plan")
    cluster.complete()                      # t-0 done
    _start(cluster, plan_dir, max_moves=1, order="plan")  # t-1 in flight
    summary = CancelReassignmentOperator(task_id="cancel", plan_uri=str(plan_dir), rollback=True,
                                         throttle_bytes_per_sec=500, poll_interval=0).execute({"ti": TI()})
    assert summary["cancelled_partitions"] == ["t-1"]
    assert summary["rollback"]["ok"] and summary["rollback"]["done"] == 2
    assert cluster.replicas == {tp("t", 0): (1, 2), tp("t", 1): (2, 3), tp("other", 0): (1, 2)}
    assert cluster.broker_configs == {b: {} for b in RACKS}


def test_cancel_reports_an_rf_left_changed_and_fails_on_a_failed_cancel(tmp_path, cluster, monkeypatch):
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    _start(cluster, plan_dir)
    real = cluster.cancel_reassignments

    def half(partitions):
        out = real(partitions)
        cluster.replicas[tp("t", 0)] = (1, 2, 3)
        return type(out)(results=(*out.results[:1], out.results[1].model_copy(
            update={"error": "timed out", "error_code": "REQUEST_TIMED_OUT"})))

    monkeypatch.setattr(cluster, "cancel_reassignments", half)
    now = [0.0]  # the settle wait (t-0 never comes back to its replicas) passes on a clock of its own, not 15 s of CPU
    monkeypatch.setattr("airflow_kafka_reassign.core.execution.cancel._sleep", lambda s: now.__setitem__(0, now[0] + s))
    monkeypatch.setattr("airflow_kafka_reassign.core.execution.cancel._clock", lambda: now[0])
    ti = TI()
    with pytest.raises(AirflowFailException, match="REQUEST_TIMED_OUT"):
        CancelReassignmentOperator(task_id="cancel", plan_uri=str(plan_dir)).execute({"ti": ti})
    assert ti.pushed["summary"]["rf_changed"] == {"t-0": {"before": [1, 2], "after": [1, 2, 3]}}


def test_templated_dry_run_text_is_read_as_a_boolean(tmp_path, cluster):
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    assert op(plan_dir, dry_run="False").execution_config().dry_run is False
    assert op(plan_dir, dry_run="true").execution_config().dry_run is True
    with pytest.raises(ConfigurationError, match="dry_run"):
        op(plan_dir, dry_run="maybe").execution_config()


def test_the_python_examples_of_docs_execute_md_run():
    import re

    text = (Path(__file__).resolve().parents[3] / "docs" / "execute.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 3
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/execute.md", "exec"), namespace)
    assert set(namespace["dag"].task_ids) == {"execute", "cancel_on_failure"}
    assert namespace["execute"].execution_config().max_moves_per_broker == 2
    assert namespace["cancel_everything"].cancel_all is True
    headroom = namespace["execute_with_headroom"].execution_config().options().throttle_headroom
    assert headroom is not None and headroom.capacity(7).network_out == 800_000_000
    assert headroom.capacity(1).network_in == 1_000_000_000 and headroom.margin == 0.2


def test_a_refused_login_fails_execute_and_cancel_without_retry(tmp_path, cluster, monkeypatch):
    from airflow_kafka_reassign.exceptions import ClusterAccessError

    def refused(*a, **kw):
        raise ClusterAccessError("authentication failed for user 'admin' with mechanism SCRAM-SHA-512",
                                 cause="authentication")

    monkeypatch.setattr(cluster, "snapshot", refused)
    monkeypatch.setattr(cluster, "list_reassignments", refused)
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    with pytest.raises(AirflowFailException, match="authentication failed for user 'admin'"):
        op(plan_dir).execute({"ti": TI()})
    with pytest.raises(AirflowFailException, match="authentication failed for user 'admin'"):
        CancelReassignmentOperator(task_id="cancel", plan_uri=str(plan_dir)).execute({"ti": TI()})


# -- approval, snapshot age, what the XCom says ---------------------------------------------------------


def approval_for(plan_dir: Path, **kw) -> dict:
    from airflow_kafka_reassign.core.records.plan_io import plan_digest

    record = {"approved": True, "plan_sha256": plan_digest((plan_dir / PLAN_FILE).read_bytes()),
              "snapshot_taken_at": datetime.now(timezone.utc).isoformat(), "plan_uri": str(plan_dir),
              "approved_by": "sre-on-call"}
    return {**record, **kw}


def test_an_approved_plan_runs_and_the_xcom_counts_this_try_and_all_tries(tmp_path, cluster, monkeypatch):
    completing(cluster, monkeypatch)
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    ti = TI()
    summary = op(plan_dir, throttle_bytes_per_sec=1000, max_moves=1, approval=approval_for(plan_dir),
                 max_snapshot_age="1h").execute({"ti": ti})
    # max_moves=1: two steps submitted one move each; the XCom counts both (it said 0 before)
    assert summary["ok"] and summary["submitted"] == 2 and summary["submitted_total"] == 2
    assert summary["throttles_restored"] == "yes"
    assert ti.pushed["plan_report"] == {"report_uri": f"{plan_dir}/report/report.html", "storage_conn_id": None}
    # a second run of the same, finished plan submits nothing now; the total remembers the first run's two
    again = op(plan_dir, approval=approval_for(plan_dir)).execute({"ti": TI()})
    assert again["submitted"] == 0 and again["submitted_total"] == 2 and again["throttles_restored"] == "none-set"


def test_a_plan_edited_after_approval_is_refused_before_anything_is_sent(tmp_path, cluster):
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    approval = approval_for(plan_dir)
    edited = [MOVES[0], Move(topic="t", partition=1, current_replicas=(2, 3), target_replicas=(5, 1))]
    write_plan(plan_dir, edited)
    before = {p.tp: p.replicas for p in cluster.snapshot().partitions}
    with pytest.raises(AirflowFailException, match="the plan changed after it was approved.*re-plan"):
        op(plan_dir, approval=approval).execute({"ti": TI()})
    assert {p.tp: p.replicas for p in cluster.snapshot().partitions} == before
    assert cluster.list_reassignments() == {}


@pytest.mark.parametrize(("kw", "message"), [
    ({"approved": False, "approved_by": "alice"}, "was not approved \\(rejected by alice\\).*re-plan"),
    ({"snapshot_taken_at": "2020-01-01T00:00:00+00:00"}, "longer ago than max_snapshot_age \\(60 min\\).*re-plan"),
])
def test_a_rejected_or_too_old_plan_is_refused(tmp_path, cluster, kw, message):
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    with pytest.raises(AirflowFailException, match=message):
        op(plan_dir, approval=approval_for(plan_dir, **kw), max_snapshot_age=3600).execute({"ti": TI()})
    assert cluster.list_reassignments() == {}


def test_the_approval_may_arrive_as_rendered_text(tmp_path, cluster, monkeypatch):
    completing(cluster, monkeypatch)
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    summary = op(plan_dir, approval=repr(approval_for(plan_dir))).execute({"ti": TI()})
    assert summary["ok"]


def test_the_execute_task_logs_the_sensors_progress_line_while_it_waits(tmp_path, cluster, monkeypatch, capsys):
    completing(cluster, monkeypatch)
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    op(plan_dir, max_moves=2).execute({"ti": TI()})
    lines = [line for line in capsys.readouterr().out.splitlines() if "| moves " in line]
    assert lines and "0% | moves 0/2 done, 2 in flight, 0 pending" in lines[0] and "| ETA" in lines[0]


def test_the_disk_guard_refusal_fails_the_task_in_one_line_with_the_summary(tmp_path, cluster):
    from airflow_kafka_reassign.core.vocabulary.models import TopicPartition

    cluster.sizes.update({TopicPartition("t", 0): {1: 5_000, 2: 5_000}, TopicPartition("t", 1): {2: 5_000, 3: 5_000}})
    cluster.disk_total.update({4: 4_000})  # broker 4 cannot take a 5 kB replica
    plan_dir = write_plan(tmp_path / "plan", MOVES)
    ti = TI()
    with pytest.raises(AirflowFailException, match=r"disk guard: 2 move\(s\) wait for disk space: t-0: needs 5.0 KB "
                                                   r"on broker 4: 4.0 KB free, reserve 0 B; t-1.*lower disk_reserve \(now 0 B\)"):
        op(plan_dir, disk_reserve="0").execute({"ti": ti})
    assert cluster.alter_requests == [] and ti.pushed["summary"]["disk_held"] == 2


def test_a_run_refused_by_a_dead_runs_lease_is_told_in_one_line_and_takes_over_with_take_over_from(
        tmp_path, cluster, monkeypatch):
    from airflow_kafka_reassign.core.records.lease import acquire
    from airflow_kafka_reassign.core.records.store import LocalStore

    plan_dir = write_plan(tmp_path / "plan", MOVES)
    before = {b: dict(c) for b, c in cluster.broker_configs.items()}
    acquire(LocalStore(plan_dir / "run"), holder="dag d / run dead / task execute / try 1 on w1 (pid 7)",
            scope="d/dead")  # its worker was lost with the task: never released, not expired
    with pytest.raises(AirflowFailException) as e:
        op(plan_dir, throttle_bytes_per_sec=1000).execute({"ti": TI(), "run_id": "new"})
    assert "\n" not in str(e.value) and str(e.value).startswith("task execute: the plan's lease (")
    assert "held by DAG run 'dead'" in str(e.value) and "take_over_from='dead'" in str(e.value)
    assert not cluster.inflight  # nothing sent by the refused run
    completing(cluster, monkeypatch)
    summary = op(plan_dir, throttle_bytes_per_sec=1000, take_over_from="dead").execute({"ti": TI(), "run_id": "new"})
    assert summary["complete"] and cluster.broker_configs == before
