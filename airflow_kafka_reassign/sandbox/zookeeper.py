"""The ZooKeeper server of a ZooKeeper-mode sandbox (``up --zookeeper``, Kafka 3.x).

Kafka 3.x's ``kafka_2.13`` depends on ``org.apache.zookeeper:zookeeper`` (3.9.1: ZooKeeper 3.8.4), so the Kafka
classpath :mod:`.maven` resolves already holds the server: ``QuorumPeerMain`` with a standalone configuration (one
server, no ensemble) runs it, as Kafka's own ``zookeeper-server-start.sh`` does. It listens on 127.0.0.1 only, on a
port chosen free, keeps its data in ``DIR/zookeeper/data``, logs through the sandbox's log4j2 configuration to
``DIR/zookeeper/zookeeper.log`` and serves no admin server (Jetty, port 8080 by default).

The server is recorded in the sandbox state like a node (``state["zookeeper"]``: ``dir``, ``port``, ``properties``,
``command``, ``pid``), so :mod:`.processes` spawns, recognises and stops it as it does the brokers.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_kafka_reassign.sandbox.errors import SandboxError

ZOOKEEPER_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
#: The folder of the ZooKeeper server in a sandbox directory.
ZOOKEEPER_DIR = "zookeeper"
#: The brokers' ZooKeeper session timeout: a broker killed (SIGKILL) leaves the cluster this long after (Kafka's
#: default is 18 s); at least twice ZooKeeper's tick (``TICK_MS``), ZooKeeper's own floor.
SESSION_TIMEOUT_MS = 6000
TICK_MS = 2000
#: The ZooKeeper JVM's heap and JIT settings (a standalone server with a handful of znodes).
ZOOKEEPER_JVM_OPTS: tuple[str, ...] = (
    "-Xms32m",
    "-Xmx128m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Dzookeeper.admin.enableServer=false",
)


def new_server(dir: Path, port: int) -> dict[str, Any]:
    """The state of the sandbox's ZooKeeper server (no process yet): its folder, port and files."""
    zk_dir = dir / ZOOKEEPER_DIR
    return {
        "id": "zookeeper",
        "dir": str(zk_dir),
        "port": port,
        "data_dir": str(zk_dir / "data"),
        "properties": str(zk_dir / "zookeeper.properties"),
        "pid": None,
        "command": [],
    }


def connect_string(server: Mapping[str, Any]) -> str:
    """The brokers' ``zookeeper.connect``."""
    return f"127.0.0.1:{server['port']}"


def server_properties(server: Mapping[str, Any]) -> dict[str, object]:
    """``zookeeper.properties`` of a standalone server on 127.0.0.1."""
    return {
        "dataDir": server["data_dir"],
        "clientPort": server["port"],
        "clientPortAddress": "127.0.0.1",
        "tickTime": TICK_MS,
        "maxClientCnxns": 0,
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "ruok,srvr",
        "autopurge.purgeInterval": 1,
    }


def is_serving(server: Mapping[str, Any], timeout: float = 1.0) -> bool:
    """Whether the server answers ZooKeeper's ``ruok`` with ``imok`` on its client port."""
    try:
        with socket.create_connection(("127.0.0.1", int(server["port"])), timeout=timeout) as sock:
            sock.sendall(b"ruok")
            sock.shutdown(socket.SHUT_WR)
            return sock.recv(16) == b"imok"
    except OSError:
        return False


def wait_serving(server: Mapping[str, Any], timeout: float, alive: Any) -> None:
    """Wait until the server answers ``ruok``; :class:`SandboxError` when ``alive()`` says its process exited or
    ``timeout`` s pass."""
    deadline = time.monotonic() + timeout
    while not is_serving(server):
        if not alive():
            raise SandboxError("the ZooKeeper server exited during start-up")
        if time.monotonic() >= deadline:
            raise SandboxError(f"the ZooKeeper server did not answer on 127.0.0.1:{server['port']} within "
                               f"{timeout:.0f} s")
        time.sleep(0.2)
