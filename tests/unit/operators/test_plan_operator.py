"""PlanReassignmentOperator without Spark or Kafka: request building, output location, XCom,
skip on an empty plan, the job's bad-input error surfaced. (The real spark-submit and cluster
run in tests/integration/test_plan_on_sandbox.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow.providers.common.compat.sdk import AirflowSkipException

from airflow_kafka_reassign.core.planner import PlanRequest
from airflow_kafka_reassign.core.planner.staged import plan_staged
from airflow_kafka_reassign.core.records.plan_io import ERROR_FILE, write_plan_dir
from airflow_kafka_reassign.core.records.snapshot_io import read_snapshot
from airflow_kafka_reassign.exceptions import ConfigurationError, IncompleteSnapshotError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator
from airflow_kafka_reassign.testing import FakeClusterAdmin


class TI:
    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value


class Run:
    run_id = "manual__2026-11-22T08:00:00+00:00"


class Dag:
    dag_id = "maintenance"


def context() -> dict:
    return {"ti": TI(), "dag_run": Run(), "dag": Dag()}


@pytest.fixture
def cluster(monkeypatch):
    """A fake cluster behind the hook; spark-submit replaced by the staged planner in-process."""
    admin = FakeClusterAdmin.build(
        {1: "a", 2: "b", 3: "c", 4: "a"},
        {"orders": [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 2, 3]], "audit": [[1, 2], [2, 1]]},
    )
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    submitted: list[tuple[Path, Path, PlanRequest]] = []

    def fake_submit(self, snapshot: str, plan: str, request_file: str, **_: object) -> None:
        snapshot, plan = Path(snapshot), Path(plan)
        request = PlanRequest.model_validate_json(Path(request_file).read_text())
        submitted.append((snapshot, plan, request))
        write_plan_dir(plan_staged(read_snapshot(snapshot), request), plan, snapshot=str(snapshot))

    monkeypatch.setattr(PlanReassignmentOperator, "spark_submit", fake_submit)
    return submitted


def test_request_from_parameters_and_rendered_params():
    op = PlanReassignmentOperator(task_id="plan", goal="remove-brokers", brokers="4, 5", topic_exclude='["audit-.*"]',
                                  request={"max_leader_spread": 3})
    r = op.build_request()
    assert r.goal == "remove-brokers" and r.brokers == (4, 5) and r.topic_exclude == ("audit-.*",)
    assert r.max_leader_spread == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"goal": "shuffle"}, "goal"),
        ({"brokers": [1, 1], "goal": "remove-brokers"}, "twice"),
        ({"topic_include": ["("]}, "not a regular expression"),
    ],
)
def test_a_bad_parameter_fails_before_the_cluster_is_touched(kwargs, message, cluster):
    op = PlanReassignmentOperator(task_id="plan", **kwargs)
    with pytest.raises(ConfigurationError, match=message):
        op.execute(context())
    assert cluster == []


def test_plan_pushes_a_small_summary_and_keeps_the_plan_in_its_directory(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("AKR_OUTPUT_DIR", str(tmp_path))
    out = PlanReassignmentOperator(task_id="plan", goal="add-brokers", brokers=[4]).execute(context())
    assert out["plan_uri"] == str(tmp_path / "maintenance" / "manual__2026-11-22T08_00_00_00_00" / "plan" / "plan")
    assert Path(out["plan_uri"], "plan.json").is_file() and Path(out["snapshot_uri"], "partitions.parquet").is_file()
    assert out["replica_moves"] >= out["lower_bound"] > 0 and out["partitions_moved"] > 0
    assert len(json.dumps(out)) < 3000
    (_, _, request), = cluster
    assert request.goal == "add-brokers" and request.brokers == (4,)


def test_empty_plan_can_skip_downstream(cluster, tmp_path):
    ctx = context()
    op = PlanReassignmentOperator(task_id="plan", topic_include=["nothing-.*"], skip_if_empty=True,
                                  output_uri=str(tmp_path / "out"))
    with pytest.raises(AirflowSkipException):
        op.execute(ctx)
    assert ctx["ti"].pushed["plan"]["partitions_moved"] == 0


def test_the_jobs_bad_input_message_becomes_the_task_error(monkeypatch, tmp_path):
    admin = FakeClusterAdmin.build({1: None, 2: None}, {"orders": [[1, 2]]})
    admin.voters = []  # not about the quorum: the job's own refusal
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)

    def failing_submit(self, snapshot: str, plan: str, request_file: str, **_: object) -> None:
        plan = Path(plan)
        plan.mkdir(parents=True, exist_ok=True)  # (the run state may hold the cordon backup already)
        (plan / ERROR_FILE).write_text("removing broker(s) [1, 2] would leave no broker\n")
        raise ConfigurationError((plan / ERROR_FILE).read_text().strip())

    monkeypatch.setattr(PlanReassignmentOperator, "spark_submit", failing_submit)
    op = PlanReassignmentOperator(task_id="plan", goal="remove-brokers", brokers=[1, 2], output_uri=str(tmp_path))
    with pytest.raises(ConfigurationError, match="would leave no broker"):
        op.execute(context())


@pytest.mark.parametrize("hide", [{"configs": True}, {"partitions": [1]}], ids=["configs", "a-partition"])
def test_no_plan_is_made_from_a_partial_snapshot(hide, monkeypatch, tmp_path):
    """A topic whose configs (or one partition's metadata) the cluster does not show within the
    settle time: the task fails naming it, before the snapshot is written or Spark submitted."""
    admin = FakeClusterAdmin.build({1: "a", 2: "b", 3: "c"},
                                   {"orders": [[1, 2], [2, 3], [3, 1]], "audit": [[1, 2], [2, 3], [3, 1]]})
    admin.hide("audit", **hide)
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    submitted = []
    monkeypatch.setattr(PlanReassignmentOperator, "spark_submit", lambda self, *a, **kw: submitted.append(a))
    op = PlanReassignmentOperator(task_id="plan", output_uri=str(tmp_path), snapshot_settle_timeout_s=20)
    with pytest.raises(IncompleteSnapshotError, match="'audit': (configs|metadata of partition\\(s\\) 1 \\(of 0-2\\))") as e:
        op.execute(context())
    assert list(e.value.missing) == ["audit"]
    assert submitted == [] and not (tmp_path / "snapshot").exists()
    assert admin.now == 20 and admin.snapshot_reads > 3  # read again, backing off, for the settle time


def test_a_topic_that_settles_within_the_settle_time_is_planned(cluster, monkeypatch, tmp_path):
    admin = FakeClusterAdmin.build({1: "a", 2: "b", 3: "c"}, {"orders": [[1, 2], [2, 3], [3, 1]]})
    admin.hide("orders", configs=True, reads=2)
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    out = PlanReassignmentOperator(task_id="plan", output_uri=str(tmp_path)).execute(context())
    assert read_snapshot(out["snapshot_uri"]).check.attempts == 3
    assert len(cluster) == 1


def test_capacity_parameters_build_a_load_aware_request(tmp_path):
    doc = tmp_path / "capacity.yaml"
    doc.write_text("default: {disk: 1TB}\n")
    op = PlanReassignmentOperator(task_id="plan", goal="offload", capacity=str(doc), offload_threshold=0.7)
    r = op.build_request()
    assert r.capacity is not None and r.capacity.default is not None and r.capacity.default.disk == 10**12
    assert r.offload_threshold == 0.7
    op = PlanReassignmentOperator(task_id="plan", capacity={"default": {"disk": 0}})
    with pytest.raises(ConfigurationError, match="default.disk: disk capacity 0 is not positive"):
        op.build_request()


def test_a_spark_conn_id_typo_is_refused_by_name_before_anything_runs(cluster, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_PROD", json.dumps({"conn_type": "spark", "host": "spark://m:7077"}))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_PROD", json.dumps({"conn_type": "kafka", "extra": {}}))
    with pytest.raises(ConfigurationError, match="spark_conn_id 'spark_prd' is not an Airflow connection: create it"):
        PlanReassignmentOperator(task_id="plan", spark_conn_id="spark_prd").execute(context())
    with pytest.raises(ConfigurationError, match="'kafka_prod' is a 'kafka' connection, not a 'spark' one"):
        PlanReassignmentOperator(task_id="plan", spark_conn_id="kafka_prod").execute(context())
    assert cluster == []  # nothing was snapshotted or submitted
    PlanReassignmentOperator(task_id="plan", spark_conn_id="spark_prod").check_spark_connection()


def test_the_plan_xcom_carries_what_an_approval_binds_to(cluster, tmp_path):
    from airflow_kafka_reassign.core.records.plan_io import plan_digest

    ctx = context()
    out = PlanReassignmentOperator(task_id="plan", goal="add-brokers", brokers=[4],
                                   output_uri=str(tmp_path / "out")).execute(ctx)
    assert out["plan_sha256"] == plan_digest(Path(out["plan_uri"], "plan.json").read_bytes())
    assert out["snapshot_taken_at"].startswith("20")


@pytest.mark.parametrize(
    ("kwargs", "window"),
    [
        ({}, 0.0),
        ({"capacity": {"default": {"disk": "1TB"}}}, 0.0),
        ({"capacity": {"default": {"disk": "1TB"}, "brokers": {"2": {"disk": "1TB", "network_in": "10MB"}}}}, 30.0),
        ({"capacity": {"default": {"disk": "1TB", "network_in": "10MB"}}, "sample_window_s": 0}, 0.0),
        ({"sample_window_s": "5"}, 5.0),
    ],
)
def test_bytes_in_rates_are_sampled_by_default_only_for_a_network_in_capacity(kwargs, window):
    op = PlanReassignmentOperator(task_id="plan", **kwargs)
    assert op.sample_window(op.build_request()) == window


@pytest.mark.parametrize("bad", [-1, "soon"])
def test_a_bad_sample_window_fails_before_the_cluster_is_touched(bad, cluster, tmp_path):
    op = PlanReassignmentOperator(task_id="plan", sample_window_s=bad, output_uri=str(tmp_path))
    with pytest.raises(ConfigurationError, match="sample_window_s .* is not a number of seconds >= 0"):
        op.execute(context())
    assert cluster == []


def test_the_snapshot_carries_the_sampled_rates(cluster, tmp_path):
    out = PlanReassignmentOperator(task_id="plan", sample_window_s=0.01, output_uri=str(tmp_path)).execute(context())
    snap = read_snapshot(out["snapshot_uri"])
    assert snap.bytes_in is not None and snap.bytes_in.window_s > 0


def test_capacity_cluster_is_filled_from_the_brokers_log_dirs_before_the_job(cluster, tmp_path, monkeypatch):
    from airflow_kafka_reassign.core.vocabulary.models import TopicPartition

    admin = KafkaReassignHook(kafka_config_id="k").get_admin()
    for i, replicas in enumerate([[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 2, 3]]):
        admin.sizes[TopicPartition("orders", i)] = dict.fromkeys(replicas, 1000)
    for i, replicas in enumerate([[1, 2], [2, 1]]):
        admin.sizes[TopicPartition("audit", i)] = dict.fromkeys(replicas, 10)
    admin.disk_total.update({1: 10**6, 2: 10**6, 3: 10**6, 4: 2 * 10**6})  # broker 4: twice the disk
    out = PlanReassignmentOperator(task_id="plan", capacity="cluster", output_uri=str(tmp_path)).execute(context())
    (_, _, request), = cluster  # what the Spark job got: the brokers' own disks, no placeholder
    assert {b: c.disk for b, c in request.capacity.resolve({1: "a", 2: "b", 3: "c", 4: "a"}).items()} == \
        {1: 10**6, 2: 10**6, 3: 10**6, 4: 2 * 10**6}
    disks = json.loads(Path(out["snapshot_uri"], "disks.json").read_text())
    assert disks["4"] == {"total_bytes": 2 * 10**6, "usable_bytes": 2 * 10**6}  # nothing on broker 4 yet
    assert disks["1"]["usable_bytes"] == 10**6 - 4 * 1000 - 2 * 10


def test_a_broker_cordoned_by_someone_else_gets_no_replica_whatever_the_goal(monkeypatch, tmp_path):
    from airflow_kafka_reassign.core.maintenance.cordon import CORDONED_LOG_DIRS
    from airflow_kafka_reassign.core.records.plan_io import read_plan

    admin = FakeClusterAdmin.build({1: "a", 2: "b", 3: "c", 4: "a", 5: "b"},
                                   {"orders": [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 2, 3], [2, 1, 3], [3, 2, 1]]})
    admin.broker_configs[4][CORDONED_LOG_DIRS] = "*"  # 4 and 5 are empty; 4 is cordoned (another maintenance)
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    requests: list[PlanRequest] = []

    def fake_submit(self, snapshot: str, plan: str, request_file: str, **_: object) -> None:
        requests.append(PlanRequest.model_validate_json(Path(request_file).read_text()))
        write_plan_dir(plan_staged(read_snapshot(Path(snapshot)), requests[-1]), Path(plan), snapshot=snapshot)

    monkeypatch.setattr(PlanReassignmentOperator, "spark_submit", fake_submit)
    out = PlanReassignmentOperator(task_id="plan", goal="rebalance", output_uri=str(tmp_path)).execute(context())
    assert requests[0].cordoned == (4,)
    targets = {b for m in read_plan(Path(out["plan_uri"])).moves for b in m.adding_replicas}
    assert 5 in targets and 4 not in targets
    assert any("cordoned" in w for w in out["warnings"])
