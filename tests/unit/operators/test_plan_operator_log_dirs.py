"""PlanReassignmentOperator(goal="remove-disks") on the fake: bad input fails before anything is sent (no cordon),
a good one cordons the dirs (backed up on the plan's run state) before the snapshot, writes the log dirs beside it,
and the plan job's driver plans from them."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_kafka_reassign.core.maintenance.cordon import read_backup
from airflow_kafka_reassign.core.planner import PlanRequest
from airflow_kafka_reassign.core.planner.log_dirs import LOG_DIRS_FILE
from airflow_kafka_reassign.core.records.plan_io import read_plan
from airflow_kafka_reassign.core.records.store import LocalStore
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica as R
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator
from airflow_kafka_reassign.spark.plan_job import plan_log_dirs_on_driver
from airflow_kafka_reassign.testing import FakeClusterAdmin

D2 = "/kafka/1/data-2"


class TI:
    def xcom_push(self, key: str, value: object) -> None:
        pass


@pytest.fixture
def fake(monkeypatch):
    admin = FakeClusterAdmin.build({1: "a", 2: "b", 3: "c"}, {"t": [[1, 2], [2, 1]], "u": [[2, 3]]}, log_dirs=2)
    admin.replica_dirs[R("t", 0, 1)] = D2
    admin.sizes = {TopicPartition("t", 0): {1: 1000, 2: 1000}}
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    snapshot = admin.snapshot
    admin.cordoned_at_snapshot = []

    def snapshot_recording_the_cordon(**kwargs):
        if kwargs.get("topics") is None:  # the snapshot the plan is made from
            admin.cordoned_at_snapshot.append(admin.cordoned(1))
        return snapshot(**kwargs)

    monkeypatch.setattr(admin, "snapshot", snapshot_recording_the_cordon)

    def submit(self, snapshot: str, plan: str, request_file: str, **_: object) -> None:
        # what the plan job does for this goal: its driver plans, no Spark session
        plan_log_dirs_on_driver(snapshot, plan, PlanRequest.model_validate_json(Path(request_file).read_text()),
                                snapshot)

    monkeypatch.setattr(PlanReassignmentOperator, "spark_submit", submit)
    monkeypatch.setattr(PlanReassignmentOperator, "_write_report", lambda self, *a: None)
    return admin


def test_remove_disks_cordons_first_then_plans_moves_between_log_dirs(fake, tmp_path):
    op = PlanReassignmentOperator(task_id="plan", goal="remove-disks", log_dirs="1:/kafka/1/data-2",
                                  output_uri=str(tmp_path))
    out = op.execute({"ti": TI()})
    assert fake.cordoned_at_snapshot == [{D2}]  # cordoned before the snapshot the plan is made from
    assert read_backup(LocalStore(tmp_path / "plan" / "run")).brokers == {1: None}  # backed up on the run state
    assert (tmp_path / "snapshot" / LOG_DIRS_FILE).is_file()
    (move,) = read_plan(tmp_path / "plan").moves
    assert move.tp == TopicPartition("t", 0) and move.log_dirs == ("/kafka/1/data-1", "any")
    assert out["goal"] == "remove-disks" and out["log_dirs"]["intra_moves"] == 1 and out["replica_moves"] == 0


def test_cordon_false_checks_and_plans_but_cordons_nothing(fake, tmp_path):
    op = PlanReassignmentOperator(task_id="plan", goal="remove-disks", log_dirs="1:/kafka/1/data-2",
                                  output_uri=str(tmp_path), cordon="False")
    out = op.execute({"ti": TI()})
    assert fake.cordoned_at_snapshot == [frozenset()] and not any(fake.cordoned(b) for b in (1, 2, 3))
    assert read_backup(LocalStore(tmp_path / "plan" / "run")) is None  # nothing to restore either
    assert out["log_dirs"]["intra_moves"] == 1  # planned as with the cordon
    bad = PlanReassignmentOperator(task_id="plan", goal="remove-disks", log_dirs="1:/kafka/1/data-9",
                                   output_uri=str(tmp_path / "bad"), cordon=False)
    with pytest.raises(AirflowFailException, match="broker 1 has no such log dir"):  # still checked
        bad.execute({"ti": TI()})


@pytest.mark.parametrize(("log_dirs", "message"), [
    (["7:/kafka/7/data-2"], "broker 7 is not in the cluster"),
    (["1:/kafka/1/data-9"], "broker 1 has no such log dir"),
    (["1:/kafka/3/data-2"], 'it is a log dir of broker 3: write "3:/kafka/3/data-2"'),
])
def test_bad_input_fails_the_task_before_anything_is_sent(fake, tmp_path, log_dirs, message):
    op = PlanReassignmentOperator(task_id="plan", goal="remove-disks", log_dirs=log_dirs, output_uri=str(tmp_path))
    with pytest.raises(AirflowFailException, match=message):
        op.execute({"ti": TI()})
    assert not any(fake.cordoned(b) for b in (1, 2, 3)) and not (tmp_path / "plan" / "run").exists()


def test_nowhere_to_go_fails_before_the_cordon(monkeypatch, tmp_path):
    admin = FakeClusterAdmin.build({1: "a", 2: "b"}, {"t": [[1, 2]]}, log_dirs=1)
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    op = PlanReassignmentOperator(task_id="plan", goal="remove-disks", log_dirs=["1:/kafka/1/data-1"],
                                  output_uri=str(tmp_path))
    with pytest.raises(AirflowFailException, match="have nowhere to go: they are in the broker's last usable log dir"):
        op.execute({"ti": TI()})
    assert not admin.cordoned(1)


def test_the_request_takes_log_dirs_only_with_remove_disks():
    op = PlanReassignmentOperator(task_id="plan", goal="remove-disks", log_dirs='["1:/d/1/", "2:/d/2"]')
    assert op.build_request().log_dirs == ("1:/d/1", "2:/d/2")
    with pytest.raises(Exception, match="log_dirs only applies to goal remove-disks"):
        PlanReassignmentOperator(task_id="plan", log_dirs=["1:/d"]).build_request()
