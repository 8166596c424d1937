"""The plan job's own storage access (spark/job_storage.py) and the credentials the operator hands it.

The real store is exercised in tests/integration/test_spark_standalone.py (S3Proxy); here: which
URIs count as remote, the S3 settings taken from the environment, local checks, and the
connection's credentials turned into environment variables (never into arguments).
"""

from __future__ import annotations

import json

import pytest

from airflow_kafka_reassign.core.planner.synthetic import synthetic_cluster, to_snapshot
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot
from airflow_kafka_reassign.plan_storage import job_environment
from airflow_kafka_reassign.spark import job_storage
from airflow_kafka_reassign.spark.job_storage import JobStorageError, check_local_snapshot, is_remote, publish
from airflow_kafka_reassign.spark.plan_job import main


@pytest.mark.parametrize(("uri", "remote"), [
    ("s3://b/p", True), ("gs://b/p", True), ("abfs://c/p", True), ("/tmp/x", False), ("file:///tmp/x", False),
    ("relative/dir", False), ("C:/plans", False),
])
def test_what_is_remote(uri, remote):
    assert is_remote(uri) is remote


def test_s3_settings_come_from_the_standard_aws_variables():
    fs, path = job_storage.filesystem("s3://kafka-plans/a/b/", {
        "AWS_ACCESS_KEY_ID": "AKIA-test", "AWS_SECRET_ACCESS_KEY": "s3cr3t-value", "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000"})
    assert path == "kafka-plans/a/b"
    assert fs.region == "eu-west-1"
    assert "s3cr3t-value" not in repr(fs)


def test_a_local_snapshot_folder_without_its_files_is_named(tmp_path):
    with pytest.raises(JobStorageError, match=r"no snapshot there \(.* does not exist\)"):
        check_local_snapshot(str(tmp_path / "missing"))
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "brokers.parquet").write_bytes(b"")
    with pytest.raises(JobStorageError, match="has no topics.parquet, partitions.parquet"):
        check_local_snapshot(str(tmp_path / "half"))
    snap = write_snapshot(to_snapshot(synthetic_cluster(brokers=3, racks=1, replicas=30, seed=1)), tmp_path / "snap")
    check_local_snapshot(str(snap))
    check_local_snapshot(f"file://{snap}")


def test_the_job_refuses_a_missing_snapshot_before_spark_starts(tmp_path, capsys):
    """Exit 2 and error.txt in the plan folder, without a Spark session (none is installed here either way)."""
    out = tmp_path / "plan"
    assert main(["--snapshot", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "no snapshot there" in (out / "error.txt").read_text()
    assert "no snapshot there" in capsys.readouterr().err


def test_publish_writes_metrics_last(tmp_path, monkeypatch):
    written: list[str] = []

    class Stream:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            written.append(self.name)

        def write(self, data):
            pass

    class FS:
        def open_output_stream(self, path):
            return Stream(path)

    monkeypatch.setattr(job_storage, "filesystem", lambda uri, env=None: (FS(), "bucket/plan"))
    for name in ("metrics.json", "plan.json", "rollback.json", "report/report.html"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    publish(tmp_path, "s3://bucket/plan")
    assert written[-1] == "bucket/plan/metrics.json" and len(written) == 4


def test_job_environment_from_an_aws_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_AKR_PLANS_TEST", json.dumps({
        "conn_type": "aws", "login": "AKIA-login", "password": "the-secret",
        "extra": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-central-1"}}))
    env = job_environment("s3://kafka-plans/x", conn_id="akr_plans_test", timeout_s=7)
    assert env == {"AKR_STORAGE_TIMEOUT_S": "7", "AWS_ACCESS_KEY_ID": "AKIA-login", "AWS_SECRET_ACCESS_KEY": "the-secret",
                   "AWS_REGION": "eu-central-1", "AWS_DEFAULT_REGION": "eu-central-1",
                   "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000"}
    # no connection, or another scheme: the driver's own default credentials
    assert job_environment("s3://kafka-plans/x", conn_id=None) == {"AKR_STORAGE_TIMEOUT_S": "30"}
    assert job_environment("gs://plans/x", conn_id="akr_plans_test") == {"AKR_STORAGE_TIMEOUT_S": "30"}


def test_the_job_refuses_a_snapshot_that_does_not_hold_its_recorded_counts_before_spark_starts(tmp_path, capsys):
    import pyarrow.parquet as pq

    snap = write_snapshot(to_snapshot(synthetic_cluster(brokers=3, racks=1, replicas=60, seed=1)), tmp_path / "snap")
    table = pq.read_table(snap / "partitions.parquet")
    first = table.column("topic")[0].as_py()
    pq.write_table(table.slice(1), snap / "partitions.parquet")  # partition 0 of the first topic gone
    out = tmp_path / "plan"
    assert main(["--snapshot", f"file://{snap}", "--out", str(out)]) == 2
    error = (out / "error.txt").read_text()
    assert f"topic {first!r}: snapshot.json records" in error and "from 1 to" in error
    assert "no plan:" in capsys.readouterr().err
