"""What each node of a sandbox is, and the files it runs from.

Topology: node ids are ``1..N``; nodes ``1..min(3, N)`` are combined ``broker,controller``
nodes (the static KRaft voters), the others are brokers only, so a cluster of 3+ nodes
survives the loss of any one controller. In ZooKeeper mode (``zookeeper=True``, Kafka 3.x) every node is a
broker only (``broker.id``, ``zookeeper.connect``; no ``process.roles``, no storage format): the controller is
whichever broker ZooKeeper elects, and the ZooKeeper server is :mod:`.zookeeper`. With ``R`` racks, broker ``i`` gets
``broker.rack=r{(i - 1) % R + 1}`` (``r1, r2, r3, r1, r2`` for 5 brokers on 3 racks);
``R == 0`` sets no rack at all.

Every node listens on 127.0.0.1 only: a PLAINTEXT listener (clients and inter-broker
traffic), a CONTROLLER listener on controller nodes and, with ``sasl=True``, a
SASL_PLAINTEXT listener accepting SCRAM-SHA-512 for the user ``sandbox-admin`` whose random
password is kept only in ``sandbox.json``. With ``tls=True`` an SSL listener (server-side TLS,
certificates from :mod:`.tls` in ``DIR/tls``). With ``acls=True`` (needs ``sasl``) KRaft's
StandardAuthorizer: ``User:ANONYMOUS`` (the PLAINTEXT, CONTROLLER and SSL listeners) and
``sandbox-admin`` are super users; two more SCRAM users are refused what the provider needs:
``sandbox-limited`` may only describe (the cluster, every topic and their configs), not alter
reassignments or configs, and ``sandbox-nobody`` has no ACL at all.

Here: the state of a new sandbox (:func:`new_state`: every node's id, roles, rack, ports and
directories, the cluster id and passwords), each node's ``server.properties``
(:func:`node_properties`), ``log4j2.xml`` and Java command line (:func:`write_node_files`). The
processes themselves are :mod:`.processes`; the facade that ties them is :mod:`.cluster`.
"""

from __future__ import annotations

import base64
import secrets
import shutil
import string
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from airflow_kafka_reassign.sandbox import cds, maven, zookeeper
from airflow_kafka_reassign.sandbox.errors import SandboxError
from airflow_kafka_reassign.sandbox.processes import TOOLS_LOG4J2, free_ports, java

STATE_SCHEMA = 1
SASL_USERNAME = "sandbox-admin"
#: with ``acls``: may describe the cluster, topics and configs, nothing more
LIMITED_USERNAME = "sandbox-limited"
#: with ``acls``: no ACL at all
NO_ACL_USERNAME = "sandbox-nobody"
AUTHORIZER_CLASS = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SASL_MECHANISM = "SCRAM-SHA-512"
MAX_CONTROLLERS = 3
BROKER_MAIN_CLASS = "kafka.Kafka"

_TEMPLATES = Path(__file__).parent / "templates"

#: Heap and JIT settings of a broker: small enough for 5 brokers in well under 2 GB RSS.
BROKER_JVM_OPTS: tuple[str, ...] = (
    "-Xms64m",
    "-Xmx384m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:MaxMetaspaceSize=160m",
    "-XX:ReservedCodeCacheSize=48m",
    "-XX:MaxDirectMemorySize=128m",
    "-Xss512k",
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djdk.nio.maxCachedBufferSize=262144",
    "-Djava.awt.headless=true",
)


def rack_of(node_id: int, racks: int) -> str | None:
    """Rack of broker ``node_id`` (1-based) when brokers are spread over ``racks`` racks."""
    if racks <= 0:
        return None
    return f"r{(node_id - 1) % racks + 1}"


def controller_ids(brokers: int) -> list[int]:
    """Ids of the combined broker+controller nodes (the KRaft voters)."""
    return list(range(1, min(MAX_CONTROLLERS, brokers) + 1))


def new_cluster_id() -> str:
    """A random KRaft cluster id (22 characters of URL-safe base64, like ``kafka-storage random-uuid``)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def render_properties(props: Mapping[str, object]) -> str:
    """Java properties text (values written verbatim: sandbox values need no escaping)."""
    lines = ["# Written by airflow_kafka_reassign.sandbox: a local test cluster node."]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def log_dir_paths(node_dir: Path, log_dirs: int) -> list[Path]:
    """The log dirs of a node: ``data`` alone, or ``data-1 .. data-N`` for ``log_dirs`` N > 1 (JBOD)."""
    if log_dirs < 1:
        raise SandboxError("a broker needs at least 1 log dir")
    return [node_dir / "data"] if log_dirs == 1 else [node_dir / f"data-{k}" for k in range(1, log_dirs + 1)]


def node_properties(
    node: Mapping[str, Any],
    voters: str,
    brokers: int,
    data_dir: Path | Sequence[Path],
    sasl: bool,
    keystore: Path | None = None,
    acls: bool = False,
    zookeeper_connect: str | None = None,
) -> dict[str, object]:
    """``server.properties`` of one node of a ``brokers``-node sandbox (``data_dir``: its log dir, or
    several, JBOD; ``keystore``: the PEM keystore of an SSL listener; ``acls``: KRaft's StandardAuthorizer
    with the sandbox's super users; ``zookeeper_connect``: a ZooKeeper-mode broker of that ZooKeeper, with
    ``broker.id`` and no KRaft settings)."""
    controller = "controller" in node["roles"]
    listeners = [f"PLAINTEXT://127.0.0.1:{node['port']}"]
    advertised = [f"PLAINTEXT://127.0.0.1:{node['port']}"]
    if controller:
        listeners.append(f"CONTROLLER://127.0.0.1:{node['controller_port']}")
    if sasl:
        listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{node['sasl_port']}")
        advertised.append(f"SASL_PLAINTEXT://127.0.0.1:{node['sasl_port']}")
    if keystore is not None:
        listeners.append(f"SSL://127.0.0.1:{node['ssl_port']}")
        advertised.append(f"SSL://127.0.0.1:{node['ssl_port']}")
    internal_rf = min(MAX_CONTROLLERS, brokers)
    if zookeeper_connect is not None:
        identity: dict[str, object] = {
            "broker.id": node["id"],
            "zookeeper.connect": zookeeper_connect,
            "zookeeper.session.timeout.ms": zookeeper.SESSION_TIMEOUT_MS,
        }
    else:
        identity = {
            "process.roles": ",".join(node["roles"]),
            "node.id": node["id"],
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
        }
    props: dict[str, object] = {
        **identity,
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(advertised),
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL"
        ),
        "log.dirs": str(data_dir) if isinstance(data_dir, Path) else ",".join(map(str, data_dir)),
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": internal_rf,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": internal_rf,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 10,
        "share.coordinator.state.topic.replication.factor": internal_rf,
        "share.coordinator.state.topic.min.isr": 1,
        "share.coordinator.state.topic.num.partitions": 10,
        "group.initial.rebalance.delay.ms": 0,
        "log.segment.bytes": 16 * 1024 * 1024,
        "log.index.size.max.bytes": 1024 * 1024,
        "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
        "log.cleaner.threads": 1,
        "num.network.threads": 2,
        "num.io.threads": 4,
        "background.threads": 4,
        "num.recovery.threads.per.data.dir": 1,
        "num.replica.fetchers": 1,
        # An idle sandbox costs a third of a core less (5 brokers, 1,000 RF-3 partitions: 34% -> 15% of one core,
        # measured over 30 s): a follower's fetch with nothing to copy waits up to 2 s at the leader instead of
        # 0.5 s (new records, and a high watermark that moves, answer it at once), and the controller appends its
        # no-op record to the metadata log every 5 s instead of every 0.5 s (every broker replays each one).
        "replica.fetch.wait.max.ms": 2000,
        "metadata.max.idle.interval.ms": 5000,
    }
    if node.get("rack"):
        props["broker.rack"] = node["rack"]
    if sasl:
        props["sasl.enabled.mechanisms"] = SASL_MECHANISM
        props["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        )
    if keystore is not None:  # server-side TLS only: a client without a certificate is User:ANONYMOUS
        props["listener.name.ssl.ssl.keystore.type"] = "PEM"
        props["listener.name.ssl.ssl.keystore.location"] = str(keystore)
    if acls:
        props["authorizer.class.name"] = AUTHORIZER_CLASS
        props["super.users"] = f"User:ANONYMOUS;User:{SASL_USERNAME}"
    return props


def render_log4j2(template: str, log_file: Path) -> str:
    return (
        (_TEMPLATES / template)
        .read_text()
        .replace("${sandbox.log.file}", escape(str(log_file), {'"': "&quot;"}))
    )


def new_state(
    dir: Path, dist: maven.KafkaDistribution, brokers: int, racks: int, sasl: bool, *, tls: bool = False,
    acls: bool = False, log_dirs: int = 1, zookeeper_mode: bool = False,
) -> dict[str, Any]:
    """The state (``sandbox.json``) of a new ``brokers``-node sandbox in ``dir``: every node's ports chosen free now
    (:func:`~.processes.free_ports`), no process yet; with ``zookeeper_mode`` brokers only, and the ZooKeeper
    server's state under ``"zookeeper"``."""
    voters = [] if zookeeper_mode else controller_ids(brokers)
    ports = iter(free_ports(brokers + len(voters) + (brokers if sasl else 0) + (brokers if tls else 0)
                            + (1 if zookeeper_mode else 0)))
    nodes = []
    for node_id in range(1, brokers + 1):
        controller = node_id in voters
        node_dir = dir / f"node-{node_id}"
        nodes.append(
            {
                "id": node_id,
                "roles": ["broker", "controller"] if controller else ["broker"],
                "rack": rack_of(node_id, racks),
                "port": next(ports),
                "controller_port": next(ports) if controller else None,
                "sasl_port": next(ports) if sasl else None,
                "ssl_port": next(ports) if tls else None,
                "dir": str(node_dir),
                "log_dirs": [str(p) for p in log_dir_paths(node_dir, log_dirs)],
                "properties": str(node_dir / "server.properties"),
                "pid": None,
                "command": [],
            }
        )
    alphabet = string.ascii_letters + string.digits

    def password() -> str:
        return "".join(secrets.choice(alphabet) for _ in range(32))

    return {
        "schema": STATE_SCHEMA,
        "dir": str(dir),
        "mode": "zookeeper" if zookeeper_mode else "kraft",
        "zookeeper": zookeeper.new_server(dir, next(ports)) if zookeeper_mode else None,
        "kafka_version": dist.version,
        "libs_dir": str(dist.libs_dir),
        "cluster_id": None if zookeeper_mode else new_cluster_id(),
        "brokers": brokers,
        "racks": racks,
        "controllers": voters,
        "log_dirs": log_dirs,
        "sasl": sasl,
        "sasl_mechanism": SASL_MECHANISM if sasl else None,
        "sasl_username": SASL_USERNAME if sasl else None,
        "sasl_password": password() if sasl else None,
        "tls": tls,
        "tls_ca": None,
        "tls_keystore": None,
        "acls": acls,
        "acl_users": {LIMITED_USERNAME: password(), NO_ACL_USERNAME: password()} if acls else {},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "started_in_s": None,
        "nodes": nodes,
    }


def classpath(state: Mapping[str, Any]) -> str:
    """The Java classpath of the sandbox's Kafka jars (from :mod:`.maven`)."""
    return str(Path(state["libs_dir"]) / "*")


def is_zookeeper_mode(state: Mapping[str, Any]) -> bool:
    """Whether the sandbox runs in ZooKeeper mode (Kafka 3.x brokers and a ZooKeeper server)."""
    return state.get("mode") == "zookeeper"


def write_zookeeper_files(state: dict[str, Any]) -> None:
    """The ZooKeeper server's data folder, ``zookeeper.properties``, ``log4j2.xml`` and Java command line
    (``state["zookeeper"]["command"]``: the caller saves it)."""
    server = state["zookeeper"]
    zk_dir = Path(server["dir"])
    Path(server["data_dir"]).mkdir(parents=True)
    Path(server["properties"]).write_text(render_properties(zookeeper.server_properties(server)))
    log4j = zk_dir / "log4j2.xml"
    log4j.write_text(render_log4j2("broker-log4j2.xml", zk_dir / "zookeeper.log"))
    server["command"] = [
        java(),
        *zookeeper.ZOOKEEPER_JVM_OPTS,
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        classpath(state),
        zookeeper.ZOOKEEPER_MAIN_CLASS,
        server["properties"],
    ]


def write_node_files(dir: Path, state: dict[str, Any], broker_jvm_extra: Sequence[str] = ()) -> None:
    """Every node's log dirs, ``server.properties``, ``log4j2.xml`` and Java command line (``node["command"]``,
    in ``state``: the caller saves it), the ZooKeeper server's in ZooKeeper mode, and the tools' log4j2
    configuration."""
    by_id = {n["id"]: n for n in state["nodes"]}
    voters = ",".join(f"{i}@127.0.0.1:{by_id[i]['controller_port']}" for i in state["controllers"])
    zk = state.get("zookeeper") if is_zookeeper_mode(state) else None
    java_path = java()
    (dir / TOOLS_LOG4J2).write_text(render_log4j2("tools-log4j2.xml", Path()))
    if zk is not None:
        write_zookeeper_files(state)
    for node in state["nodes"]:
        node_dir = Path(node["dir"])
        data_dirs = [Path(p) for p in node.get("log_dirs") or [node_dir / "data"]]
        for data_dir in data_dirs:
            data_dir.mkdir(parents=True)
        keystore = state.get("tls_keystore")
        props = node_properties(node, voters, state["brokers"],
                                data_dirs[0] if len(data_dirs) == 1 else data_dirs, state["sasl"],
                                keystore=Path(keystore) if keystore else None, acls=bool(state.get("acls")),
                                zookeeper_connect=zookeeper.connect_string(zk) if zk is not None else None)
        Path(node["properties"]).write_text(render_properties(props))
        log4j = node_dir / "log4j2.xml"
        log4j.write_text(render_log4j2("broker-log4j2.xml", node_dir / "server.log"))
        broker_archive = state["cds"]["broker"]
        node["command"] = [
            java_path,
            *BROKER_JVM_OPTS,
            *cds.use_opts(Path(broker_archive) if broker_archive else None),
            *broker_jvm_extra,
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={node_dir}",
            "-cp",
            classpath(state),
            BROKER_MAIN_CLASS,
            node["properties"],
        ]


def remove_node_files(dir: Path, state_file: str) -> None:
    """What a sandbox wrote in ``dir`` (its nodes' folders, its ZooKeeper server's, its state, the tools' log4j2
    configuration); the TLS certificates in ``dir/tls`` are kept."""
    for path in [*dir.glob("node-*"), dir / zookeeper.ZOOKEEPER_DIR, dir / state_file, dir / TOOLS_LOG4J2]:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
