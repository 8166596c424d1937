"""The sandbox's --log-dirs option (KRaft JBOD), without starting a cluster (the cluster test is
tests/integration/test_maintenance.py)."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.sandbox import cluster, nodes
from airflow_kafka_reassign.sandbox.__main__ import _parser

NODE = {"id": 2, "roles": ["broker", "controller"], "rack": None, "port": 9092, "controller_port": 9093}


def test_one_log_dir_keeps_the_data_folder(tmp_path):
    assert nodes.log_dir_paths(tmp_path, 1) == [tmp_path / "data"]
    props = nodes.node_properties(NODE, "2@127.0.0.1:9093", 3, tmp_path / "data", False)
    assert props["log.dirs"] == str(tmp_path / "data") and "metadata.log.dir" not in props


def test_several_log_dirs_are_data_1_to_n_and_the_metadata_log_stays_in_the_first(tmp_path):
    dirs = nodes.log_dir_paths(tmp_path, 3)
    assert dirs == [tmp_path / "data-1", tmp_path / "data-2", tmp_path / "data-3"]
    props = nodes.node_properties(NODE, "2@127.0.0.1:9093", 3, dirs, False)
    assert props["log.dirs"] == ",".join(map(str, dirs))
    assert "metadata.log.dir" not in props  # Kafka's default: the first of log.dirs


def test_log_dirs_must_be_positive(tmp_path):
    with pytest.raises(cluster.SandboxError, match="at least 1 log dir"):
        nodes.log_dir_paths(tmp_path, 0)
    with pytest.raises(cluster.SandboxError, match="log_dirs must be >= 1"):
        cluster.Sandbox(tmp_path / "sb").up(brokers=1, log_dirs=0)


def test_the_cli_defaults_to_one_log_dir():
    assert _parser().parse_args(["up", "--dir", "/x"]).log_dirs == 1
    assert _parser().parse_args(["up", "--dir", "/x", "--log-dirs", "2"]).log_dirs == 2
