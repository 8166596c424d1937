"""The local Kafka sandbox itself: topology, broker restarts, the reference tool, SASL."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import TypeVar

import pytest

from airflow_kafka_reassign.kafka import readiness
from airflow_kafka_reassign.sandbox import Sandbox, cluster, nodes, wait_until

T = TypeVar("T")
CLI = [sys.executable, "-m", "airflow_kafka_reassign.sandbox"]


def cli(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_brokers_have_the_requested_racks(sandbox: Sandbox) -> None:
    brokers = readiness.describe_brokers(sandbox.client_config())
    assert {b.id: b.rack for b in brokers} == {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"}
    info = sandbox.info
    assert {b["id"]: b["rack"] for b in info["brokers"]} == {b.id: b.rack for b in brokers}
    assert {b.port for b in brokers} == {b["port"] for b in info["brokers"]}
    assert info["controllers"] == [1, 2, 3]
    assert info["bootstrap_servers"].count(",") == 4
    assert info["kafka_version"] == sandbox.kafka_version


def test_status_reports_every_node(sandbox: Sandbox) -> None:
    proc = cli("status", "--dir", str(sandbox.dir))
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert status["all_alive"] is True
    assert [(n["id"], n["alive"]) for n in status["nodes"]] == [(i, True) for i in range(1, 6)]
    assert [n["roles"] for n in status["nodes"]][2:4] == [["broker", "controller"], ["broker"]]


def test_broker_log_is_written(sandbox: Sandbox) -> None:
    for node_id in sandbox.broker_ids:
        assert "Kafka Server started" in sandbox.log_path(node_id).read_text()


def test_stop_and_start_a_broker_only_node(sandbox: Sandbox) -> None:
    old_pid = sandbox.state["nodes"][4]["pid"]
    sandbox.stop_broker(5)
    try:
        assert not sandbox.is_alive(5)
        wait_until(
            lambda: 5 not in readiness.live_broker_ids(sandbox.client_config()),
            "broker 5 to leave the cluster metadata",
        )
    finally:
        sandbox.start_broker(5)
    assert sandbox.is_alive(5)
    assert 5 in readiness.live_broker_ids(sandbox.client_config())
    assert Sandbox.load(sandbox.dir).state["nodes"][4]["pid"] not in (None, old_pid)


def test_cluster_survives_a_stopped_controller_via_the_cli(sandbox: Sandbox) -> None:
    proc = cli("stop-broker", "--dir", str(sandbox.dir), "1")
    try:
        assert proc.returncode == 0, proc.stderr
        assert not Sandbox.load(sandbox.dir).is_alive(1)
        # two of three KRaft voters remain: the cluster still creates topics
        readiness.create_and_delete_topic(
            sandbox.client_config(), replication_factor=3, timeout=60.0, topic="_controller_down"
        )
    finally:
        proc = cli("start-broker", "--dir", str(sandbox.dir), "1")
    assert proc.returncode == 0, proc.stderr
    reloaded = Sandbox.load(sandbox.dir)
    assert reloaded.is_alive(1)
    assert 1 in readiness.live_broker_ids(reloaded.client_config())


def test_reference_reassign_tool_runs(sandbox: Sandbox) -> None:
    proc = sandbox.reassign_tool(["--list"])
    assert proc.returncode == 0, proc.stderr
    assert "reassignment" in proc.stdout.lower()

    via_cli = cli("kafka-reassign-partitions", "--dir", str(sandbox.dir), "--", "--list")
    assert via_cli.returncode == 0, via_cli.stderr
    assert via_cli.stdout == proc.stdout


def test_reference_reassign_tool_passes_the_exit_code_through(sandbox: Sandbox) -> None:
    proc = cli("kafka-reassign-partitions", "--dir", str(sandbox.dir), "--", "--no-such-option")
    assert proc.returncode != 0


def test_sasl_listener_accepts_the_scram_credentials_of_the_state_file(sandbox: Sandbox) -> None:
    if sandbox.sasl_bootstrap_servers is None:
        pytest.skip("the reused sandbox has no SASL listener")
    state_file = sandbox.dir / "sandbox.json"
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    state = json.loads(state_file.read_text())
    config = {
        "bootstrap.servers": sandbox.sasl_bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": state["sasl_username"],
        "sasl.password": state["sasl_password"],
    }
    assert state["sasl_username"] == "sandbox-admin"
    readiness.list_topic_names(config, timeout=20.0)  # raises unless authenticated
    brokers = readiness.describe_brokers(config)
    assert sorted(b.port for b in brokers) == sorted(
        int(hp.rsplit(":", 1)[1]) for hp in sandbox.sasl_bootstrap_servers.split(",")
    )


def test_sasl_listener_rejects_a_wrong_password(sandbox: Sandbox) -> None:
    if sandbox.sasl_bootstrap_servers is None:
        pytest.skip("the reused sandbox has no SASL listener")
    config = {**sandbox.client_config(sasl=True), "sasl.password": "not-the-password"}
    with pytest.raises(readiness.AuthenticationFailed, match="(?i)authentication"):
        readiness.list_topic_names(config, timeout=20.0)


def test_the_sasl_password_is_never_printed_or_logged(sandbox: Sandbox) -> None:
    if sandbox.sasl_credentials is None:
        pytest.skip("the reused sandbox has no SASL listener")
    password = sandbox.sasl_credentials[1]
    assert password not in json.dumps(sandbox.info)
    assert password not in json.dumps(sandbox.status())
    for root, _dirs, files in os.walk(sandbox.dir):  # os.walk skips what Kafka deletes meanwhile
        for name in files:
            path = Path(root, name)
            if path.suffix in (".log", ".properties", ".xml"):
                try:
                    assert password not in path.read_text(errors="replace"), path
                except FileNotFoundError:
                    continue  # deleted meanwhile (a topic's folder, a rotated log)


def test_cli_up_prints_one_json_line_and_down_is_idempotent(tmp_path: Path) -> None:
    directory = tmp_path / "one-broker"
    proc = cli("up", "--dir", str(directory), "--brokers", "1", "--racks", "0")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    info = json.loads(lines[0])
    try:
        assert info["sasl_bootstrap_servers"] is None
        assert info["controllers"] == [1]
        assert [(b["id"], b["rack"]) for b in info["brokers"]] == [(1, None)]
        assert readiness.live_broker_ids({"bootstrap.servers": info["bootstrap_servers"]}) == {1}
        pid = info["brokers"][0]["pid"]
        assert Path(f"/proc/{pid}").exists()
    finally:
        first = cli("down", "--dir", str(directory))
    assert first.returncode == 0, first.stderr
    assert not Sandbox.load(directory).is_alive(1)
    second = cli("down", "--dir", str(directory))
    assert second.returncode == 0, second.stderr
    status = json.loads(cli("status", "--dir", str(directory)).stdout)
    assert status["all_alive"] is False


def test_up_refuses_a_directory_whose_sandbox_runs(sandbox: Sandbox) -> None:
    proc = cli("up", "--dir", str(sandbox.dir), timeout=60.0)
    assert proc.returncode == 1
    assert "already running" in proc.stderr
    assert proc.stdout == ""
    assert Sandbox.load(sandbox.dir).status()["all_alive"]


def test_pinning_a_kafka_version_older_than_3_9_is_refused(tmp_path: Path) -> None:
    proc = cli("up", "--dir", str(tmp_path / "old"), "--kafka-version", "3.8.1", timeout=60.0)
    assert proc.returncode == 1
    assert ">= 3.9" in proc.stderr
    env_proc = subprocess.run(
        [*CLI, "up", "--dir", str(tmp_path / "old-env")],
        capture_output=True,
        text=True,
        timeout=60.0,
        env={**os.environ, "AKR_KAFKA_VERSION": "3.7.2"},
    )
    assert env_proc.returncode == 1
    assert ">= 3.9" in env_proc.stderr


def test_a_port_taken_between_its_choice_and_the_nodes_bind_starts_again_on_other_ports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Three workers start their sandboxes at once (make test): a port free when chosen can be taken before the node
    binds it. Here the first choice's broker port is held by another socket; the node fails to bind it, and the
    sandbox starts again on new ports instead of failing the session."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    chosen: list[list[int]] = []
    free = nodes.free_ports

    def first_one_taken(count: int) -> list[int]:
        ports = free(count)
        if not chosen:
            ports[0] = taken  # node 1's broker listener
        chosen.append(ports)
        return ports

    monkeypatch.setattr(nodes, "free_ports", first_one_taken)  # where new_state chooses the ports
    box = Sandbox(tmp_path / "retry")
    try:
        with caplog.at_level("WARNING", logger=cluster.__name__):
            box.up(brokers=1, racks=0, timeout=120)
        assert len(chosen) == 2 and chosen[0][0] == taken != chosen[1][0]
        assert any("taken before the node bound it (attempt 1 of 3)" in r.getMessage() for r in caplog.records)
        assert box.bootstrap_servers == f"127.0.0.1:{chosen[1][0]}"
        assert readiness.live_broker_ids({"bootstrap.servers": box.bootstrap_servers}) == {1}
    finally:
        box.down()
        held.close()
