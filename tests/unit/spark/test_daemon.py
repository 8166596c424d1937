"""The plan job's worker daemon takes the pip-installed PySpark's own zip off the path, and
leaves any other Spark's zip first."""

from __future__ import annotations

import os
from importlib.util import find_spec

from airflow_kafka_reassign.spark.daemon import redundant_pyspark_zips
from airflow_kafka_reassign.spark.submit import default_conf


def test_only_the_installed_packages_own_zip_is_redundant(tmp_path):
    spec = find_spec("pyspark")
    assert spec is not None and spec.origin
    own = os.path.join(os.path.dirname(spec.origin), "python", "lib", "pyspark.zip")
    other = str(tmp_path / "spark-4.0.0" / "python" / "lib" / "pyspark.zip")
    py4j = os.path.join(os.path.dirname(spec.origin), "python", "lib", "py4j-0.10.9.9-src.zip")
    path = [own, py4j, "/somewhere/else"]
    assert redundant_pyspark_zips(path) == [own]
    assert path == [own, py4j, "/somewhere/else"]  # looked at, not changed
    assert redundant_pyspark_zips([other, py4j]) == []
    assert redundant_pyspark_zips(["/a", "/b"]) == []


def test_the_default_conf_runs_the_workers_under_this_daemon():
    assert default_conf()["spark.python.daemon.module"] == "airflow_kafka_reassign.spark.daemon"
    replaced = default_conf({"spark.python.daemon.module": "pyspark.daemon"})
    assert replaced["spark.python.daemon.module"] == "pyspark.daemon"
