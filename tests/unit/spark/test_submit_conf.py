"""The Spark conf the plan job is submitted with (spark-submit itself runs in the integration tests)."""

from __future__ import annotations

from airflow_kafka_reassign.spark.submit import default_conf, log4j_config_path


def test_the_driver_jvm_is_tuned_for_a_short_run_and_executors_keep_the_defaults():
    conf = default_conf()
    quiet = f"-Dlog4j2.configurationFile=file:{log4j_config_path()}"
    assert conf["spark.driver.extraJavaOptions"].split() == [quiet, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    assert conf["spark.executor.extraJavaOptions"] == quiet
    assert conf["spark.ui.enabled"] == "false"


def test_a_callers_conf_replaces_a_key_whole():
    conf = default_conf({"spark.driver.extraJavaOptions": "-Xss4m", "spark.executor.memory": "4g"})
    assert conf["spark.driver.extraJavaOptions"] == "-Xss4m"
    assert conf["spark.executor.memory"] == "4g"
