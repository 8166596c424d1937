"""The sandbox's ZooKeeper mode (``up --zookeeper``) without starting a cluster: the brokers' properties, the
ZooKeeper server's files, the version choice and the CLI. The real cluster is tests/integration/test_zookeeper_mode.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_kafka_reassign.sandbox import cluster, maven, nodes, processes, zookeeper
from airflow_kafka_reassign.sandbox.__main__ import _parser

NODE = {"id": 4, "roles": ["broker"], "rack": "r2", "port": 9092, "controller_port": None}


def test_a_zookeeper_mode_broker_has_a_broker_id_and_no_kraft_settings(tmp_path: Path) -> None:
    props = nodes.node_properties(NODE, "", 5, tmp_path / "data", False, zookeeper_connect="127.0.0.1:2181")
    assert props["broker.id"] == 4 and props["zookeeper.connect"] == "127.0.0.1:2181"
    assert props["zookeeper.session.timeout.ms"] == zookeeper.SESSION_TIMEOUT_MS
    assert not {"process.roles", "node.id", "controller.quorum.voters", "controller.listener.names"} & set(props)
    assert props["broker.rack"] == "r2" and props["listeners"] == "PLAINTEXT://127.0.0.1:9092"


def test_a_kraft_broker_keeps_its_kraft_settings(tmp_path: Path) -> None:
    props = nodes.node_properties({**NODE, "roles": ["broker", "controller"], "controller_port": 9093},
                                  "4@127.0.0.1:9093", 5, tmp_path / "data", False)
    assert props["process.roles"] == "broker,controller" and "zookeeper.connect" not in props


def test_the_state_of_a_zookeeper_mode_sandbox_has_brokers_only_and_a_zookeeper_server(tmp_path: Path) -> None:
    dist = maven.KafkaDistribution("3.9.1", tmp_path / "libs")
    state = nodes.new_state(tmp_path, dist, 4, 2, False, log_dirs=2, zookeeper_mode=True)
    assert state["mode"] == "zookeeper" and state["controllers"] == [] and state["cluster_id"] is None
    assert all(n["roles"] == ["broker"] and n["controller_port"] is None for n in state["nodes"])
    assert [n["rack"] for n in state["nodes"]] == ["r1", "r2", "r1", "r2"]
    server = state["zookeeper"]
    ports = [n["port"] for n in state["nodes"]] + [server["port"]]
    assert len(set(ports)) == 5  # the server's port is a port of its own
    assert server["dir"] == str(tmp_path / "zookeeper") and server["pid"] is None
    assert nodes.is_zookeeper_mode(state)
    assert not nodes.is_zookeeper_mode(nodes.new_state(tmp_path, dist, 3, 3, False))


def test_the_zookeeper_server_files_run_quorum_peer_main_on_loopback(tmp_path: Path) -> None:
    dist = maven.KafkaDistribution("3.9.1", tmp_path / "libs")
    state = nodes.new_state(tmp_path, dist, 3, 3, False, zookeeper_mode=True)
    state["cds"] = {"broker": None, "tools": None}
    nodes.write_node_files(tmp_path, state)
    server = state["zookeeper"]
    text = Path(server["properties"]).read_text()
    assert f"clientPort={server['port']}" in text and "clientPortAddress=127.0.0.1" in text
    assert "admin.enableServer=false" in text and f"dataDir={server['data_dir']}" in text
    assert Path(server["data_dir"]).is_dir()
    assert server["command"][-2:] == [zookeeper.ZOOKEEPER_MAIN_CLASS, server["properties"]]
    broker = Path(state["nodes"][0]["properties"]).read_text()
    assert f"zookeeper.connect=127.0.0.1:{server['port']}" in broker and "process.roles" not in broker
    nodes.remove_node_files(tmp_path, cluster.STATE_FILE)
    assert not (tmp_path / zookeeper.ZOOKEEPER_DIR).exists()


def test_the_zookeeper_server_is_the_quorum_of_a_zookeeper_mode_sandbox() -> None:
    state = {"mode": "zookeeper", "controllers": [], "nodes": [],
             "zookeeper": {"pid": None, "properties": "/nowhere/zookeeper.properties"}}
    assert not processes.quorum_alive(state)


@pytest.mark.parametrize("version", ["2.8.2", "3.0.0", "3.6.2", "3.9.1"])
def test_zookeeper_mode_takes_a_3x_release(version: str) -> None:
    assert maven.check_pinned_version(version, zookeeper=True) == version


@pytest.mark.parametrize("version", ["2.7.2", "4.0.0", "4.3.1"])
def test_zookeeper_mode_refuses_a_line_without_it(version: str) -> None:
    with pytest.raises(maven.KafkaFetchError, match=re.escape("ZooKeeper-mode Kafka 2.8 to 3.9")):
        maven.check_pinned_version(version, zookeeper=True)


def test_zookeeper_mode_defaults_to_3_9_1_and_needs_the_zookeeper_jar(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    monkeypatch.delenv(maven.VERSION_ENV, raising=False)
    libs = tmp_path / maven.ZOOKEEPER_DEFAULT_VERSION / "libs"
    libs.mkdir(parents=True)
    (libs / maven.COMPLETE_MARKER).write_text("{}")
    with pytest.raises(maven.KafkaFetchError, match="holds no zookeeper-\\*.jar"):
        maven.resolve(root=tmp_path, zookeeper=True)
    (libs / "zookeeper-3.8.4.jar").write_text("")
    assert maven.resolve(root=tmp_path, zookeeper=True).version == "3.9.1"


def test_acls_are_refused_in_zookeeper_mode_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(cluster.SandboxError, match="acls is KRaft only"):
        cluster.Sandbox(tmp_path / "sb").up(brokers=3, sasl=True, acls=True, zookeeper=True)
    assert not (tmp_path / "sb").exists()


def test_the_cli_has_zookeeper_mode() -> None:
    assert _parser().parse_args(["up", "--dir", "/x", "--zookeeper"]).zookeeper is True
    assert _parser().parse_args(["up", "--dir", "/x"]).zookeeper is False
