"""A real local Apache Kafka KRaft cluster for demos and integration tests.

Layout of a sandbox directory ``DIR``::

    DIR/sandbox.json             state (mode 600): ports, pids, command lines, SASL passwords
                                 (created through the admin API, never on a command line)
    DIR/tools-log4j2.xml         log4j2 configuration of Kafka command-line tools (stderr, WARN)
    DIR/tls/                     with ``tls``: the CA certificate and the brokers' PEM keystore (:mod:`.tls`),
                                 made once and kept when the sandbox is replaced
    DIR/node-<id>/server.properties
    DIR/node-<id>/log4j2.xml
    DIR/node-<id>/server.log     the broker's log (log4j2)
    DIR/node-<id>/stdout.log     the JVM's stdout and stderr
    DIR/node-<id>/data/          log.dirs (and the KRaft metadata log)
    DIR/node-<id>/data-<k>/      with ``log_dirs=N`` > 1: the N log dirs ``data-1 .. data-N`` (KRaft JBOD,
                                 KIP-858) instead of ``data/``; the metadata log is in ``data-1``, the first
                                 of ``log.dirs`` (Kafka's default for ``metadata.log.dir``)

Topology: node ids are ``1..N``; nodes ``1..min(3, N)`` are combined ``broker,controller``
nodes (the static KRaft voters), the others are brokers only, so a cluster of 3+ nodes
survives the loss of any one controller. With ``R`` racks, broker ``i`` gets
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

The JVMs run in their own sessions: they outlive the Python process that started them and
are stopped by :meth:`Sandbox.down` (or ``python -m airflow_kafka_reassign.sandbox down``).
Jars come from :mod:`.maven`; JVMs map the class-data-sharing archives of :mod:`.cds`.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import string
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from airflow_kafka_reassign.sandbox import cds, maven

log = logging.getLogger(__name__)

STATE_FILE = "sandbox.json"
STATE_SCHEMA = 1
SASL_USERNAME = "sandbox-admin"
#: with ``acls``: may describe the cluster, topics and configs, nothing more
LIMITED_USERNAME = "sandbox-limited"
#: with ``acls``: no ACL at all
NO_ACL_USERNAME = "sandbox-nobody"
AUTHORIZER_CLASS = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SASL_MECHANISM = "SCRAM-SHA-512"
MAX_CONTROLLERS = 3
#: a node still running this long after the KRaft quorum is gone is SIGKILLed by ``down``
QUORUM_LOST_GRACE_S = 3.0
FORMAT_TIMEOUT_S = 180.0
#: Start-up attempts when a node could not bind a port chosen for it: the port was free when chosen
#: (:func:`free_ports`) but another process took it before the node bound it (several sandboxes starting at once,
#: or a client's outgoing connection given it as its local port). Each attempt chooses new ports.
PORT_ATTEMPTS = 3
#: What a Kafka node logs when a listener's port is taken.
PORT_TAKEN = "Address already in use"
REASSIGN_MAIN_CLASS = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
STORAGE_TOOL_MAIN_CLASS = "kafka.tools.StorageTool"
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
#: Settings of short-lived tool JVMs (storage format, kafka-reassign-partitions).
TOOL_JVM_OPTS: tuple[str, ...] = (
    "-Xms32m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)
#: glibc arenas are a large part of an idle JVM's resident memory: keep them few.
_JVM_ENV = {"MALLOC_ARENA_MAX": "2"}


class SandboxError(RuntimeError):
    """The sandbox could not do what was asked (the message says why, with log tails)."""


# --------------------------------------------------------------------------- helpers


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


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held open together while choosing)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def tail_file(path: Path, lines: int = 60) -> str:
    """The last ``lines`` lines of ``path`` ('' when it does not exist)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            end = fh.tell()
            block = 65536
            data = b""
            pos = end
            while pos > 0 and data.count(b"\n") <= lines:
                pos = max(0, pos - block)
                fh.seek(pos)
                data = fh.read(end - pos)
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is our exited child (so it does not linger as a zombie)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _is_zombie_or_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :].startswith(("Z", "X"))


def process_matches(pid: int | None, marker: str) -> bool:
    """Whether ``pid`` is running and has ``marker`` (a node's properties path) in its argv.

    Guards against signalling a recycled pid; zombies count as stopped. A process caught in
    the middle of ``execve`` (right after ``Popen`` returns) briefly shows an empty command
    line: it is read again for up to a second.
    """
    if not pid:
        return False
    _reap(pid)
    for _ in range(20):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        if raw:
            return marker.encode() in raw.split(b"\0")
        if _is_zombie_or_gone(pid):  # exited (or a kernel thread that took a recycled pid)
            _reap(pid)
            return False
        time.sleep(0.05)
    return False


def _write_private(path: Path, text: str) -> None:
    """Atomically write ``text`` to ``path`` with mode 600."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise SandboxError("'java' (17 or newer) is not on PATH: Kafka 4.x brokers need it")
    return java


def _jvm_env() -> dict[str, str]:
    return {**os.environ, **_JVM_ENV}


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
) -> dict[str, object]:
    """``server.properties`` of one node of a ``brokers``-node sandbox (``data_dir``: its log dir, or
    several, JBOD; ``keystore``: the PEM keystore of an SSL listener; ``acls``: KRaft's StandardAuthorizer
    with the sandbox's super users)."""
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
    props: dict[str, object] = {
        "process.roles": ",".join(node["roles"]),
        "node.id": node["id"],
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
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


def _render_log4j2(template: str, log_file: Path) -> str:
    return (
        (_TEMPLATES / template)
        .read_text()
        .replace("${sandbox.log.file}", escape(str(log_file), {'"': "&quot;"}))
    )


# --------------------------------------------------------------------------- the sandbox


class Sandbox:
    """A local Kafka KRaft cluster living in directory ``dir``.

    ``Sandbox(dir).up(...)`` creates and starts one; ``Sandbox.load(dir)`` attaches to one
    created earlier (possibly by another process). All state is in ``dir/sandbox.json``.
    """

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        self.dir = Path(dir).expanduser().resolve()
        self._state: dict[str, Any] | None = None

    # ------------------------------------------------------------------ state

    @property
    def state_path(self) -> Path:
        """Path of the state file."""
        return self.dir / STATE_FILE

    @classmethod
    def load(cls, dir: str | os.PathLike[str]) -> Sandbox:
        """Attach to the sandbox previously created in ``dir`` (:class:`SandboxError` if none)."""
        sandbox = cls(dir)
        sandbox._read_state()
        return sandbox

    def _read_state(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            raise SandboxError(f"no sandbox in {self.dir} (missing {STATE_FILE})") from None
        if state.get("schema") != STATE_SCHEMA:
            raise SandboxError(f"{self.state_path} has an unknown schema {state.get('schema')!r}")
        self._state = state
        return state

    @property
    def state(self) -> dict[str, Any]:
        """The raw state (includes the SASL password: never print it)."""
        return self._state if self._state is not None else self._read_state()

    def _save(self) -> None:
        _write_private(self.state_path, json.dumps(self.state, indent=2) + "\n")

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".sandbox.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _node(self, node_id: int) -> dict[str, Any]:
        nodes: list[dict[str, Any]] = self.state["nodes"]
        for node in nodes:
            if node["id"] == node_id:
                return node
        ids = [n["id"] for n in self.state["nodes"]]
        raise SandboxError(f"no node {node_id} in the sandbox (nodes are {ids})")

    # ------------------------------------------------------------------ properties

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` list of every broker's PLAINTEXT listener."""
        return ",".join(f"127.0.0.1:{n['port']}" for n in self.state["nodes"])

    @property
    def sasl_bootstrap_servers(self) -> str | None:
        """``host:port`` list of the SASL_PLAINTEXT listeners, or ``None`` without SASL."""
        if not self.state["sasl"]:
            return None
        return ",".join(f"127.0.0.1:{n['sasl_port']}" for n in self.state["nodes"])

    @property
    def ssl_bootstrap_servers(self) -> str | None:
        """``host:port`` list of the SSL (TLS) listeners, or ``None`` without ``tls``."""
        if not self.state.get("tls"):
            return None
        return ",".join(f"127.0.0.1:{n['ssl_port']}" for n in self.state["nodes"])

    @property
    def tls_ca_path(self) -> Path | None:
        """The CA certificate that signed the brokers' certificates (``ssl.ca.location``), or ``None``."""
        ca = self.state.get("tls_ca")
        return Path(ca) if ca else None

    @property
    def acls(self) -> bool:
        """Whether the brokers run StandardAuthorizer with the sandbox's users and ACLs."""
        return bool(self.state.get("acls"))

    @property
    def sasl_credentials(self) -> tuple[str, str] | None:
        """``(username, password)`` of the SCRAM-SHA-512 admin user, or ``None`` without SASL."""
        if not self.state["sasl"]:
            return None
        return self.state["sasl_username"], self.state["sasl_password"]

    @property
    def broker_ids(self) -> list[int]:
        """All node ids (every node is a broker)."""
        return [n["id"] for n in self.state["nodes"]]

    def log_dirs(self, node_id: int) -> list[str]:
        """The absolute paths of node ``node_id``'s log dirs (its ``log.dirs``), the first holding the
        metadata log."""
        node = self._node(node_id)
        return list(node.get("log_dirs") or [str(Path(node["dir"]) / "data")])

    @property
    def kafka_version(self) -> str:
        """The Apache Kafka version the sandbox runs."""
        return str(self.state["kafka_version"])

    @property
    def info(self) -> dict[str, Any]:
        """Public description (no secrets), as printed by ``up``."""
        state = self.state
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "sasl_bootstrap_servers": self.sasl_bootstrap_servers,
            "brokers": [
                {
                    "id": n["id"],
                    "rack": n["rack"],
                    "pid": n["pid"],
                    "port": n["port"],
                    "sasl_port": n.get("sasl_port"),
                    "ssl_port": n.get("ssl_port"),
                    "log_dirs": self.log_dirs(n["id"]),
                }
                for n in state["nodes"]
            ],
            "ssl_bootstrap_servers": self.ssl_bootstrap_servers,
            "tls_ca": state.get("tls_ca"),
            "acls": self.acls,
            "controllers": list(state["controllers"]),
            "kafka_version": state["kafka_version"],
            "dir": str(self.dir),
            "started_in_s": state.get("started_in_s"),
        }

    def client_config(self, sasl: bool = False, *, tls: bool = False, user: str | None = None) -> dict[str, str]:
        """A librdkafka (confluent-kafka) configuration dict reaching the sandbox.

        With ``sasl=True`` it uses the SASL_PLAINTEXT listener and the admin credentials, or those
        of ``user`` (:data:`LIMITED_USERNAME` or :data:`NO_ACL_USERNAME`, with ``acls``). With
        ``tls=True`` the SSL listener, trusting the sandbox's CA (``ssl.ca.location``).
        """
        if tls:
            if sasl or user:
                raise SandboxError("the sandbox's TLS listener is SSL only (no SASL): pass tls or sasl, not both")
            if self.ssl_bootstrap_servers is None:
                raise SandboxError("this sandbox was started without --tls")
            return {"bootstrap.servers": self.ssl_bootstrap_servers, "security.protocol": "SSL",
                    "ssl.ca.location": str(self.tls_ca_path)}
        if not sasl and user is None:
            return {"bootstrap.servers": self.bootstrap_servers}
        creds = self.sasl_credentials
        if creds is None:
            raise SandboxError("this sandbox was started without --sasl")
        if user is not None and user != creds[0]:
            users: dict[str, str] = self.state.get("acl_users") or {}
            if user not in users:
                raise SandboxError(f"no SCRAM user {user!r} in this sandbox (start it with --acls for "
                                   f"{LIMITED_USERNAME!r} and {NO_ACL_USERNAME!r})")
            creds = (user, users[user])
        return {
            "bootstrap.servers": self.sasl_bootstrap_servers or "",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": SASL_MECHANISM,
            "sasl.username": creds[0],
            "sasl.password": creds[1],
        }

    def log_path(self, node_id: int) -> Path:
        """Path of node ``node_id``'s ``server.log``."""
        return Path(self._node(node_id)["dir"]) / "server.log"

    def log_tail(self, node_id: int, lines: int = 60) -> str:
        """The last ``lines`` lines of node ``node_id``'s ``server.log`` (and, when the broker
        log is empty, of its ``stdout.log``, where JVM start-up errors go)."""
        node_dir = Path(self._node(node_id)["dir"])
        text = tail_file(node_dir / "server.log", lines)
        stdout = tail_file(node_dir / "stdout.log", lines)
        if stdout.strip() and not text.strip():
            return stdout
        return text

    # ------------------------------------------------------------------ processes

    def is_alive(self, node_id: int) -> bool:
        """Whether node ``node_id``'s JVM is running."""
        node = self._node(node_id)
        return process_matches(node.get("pid"), node["properties"])

    def status(self) -> dict[str, Any]:
        """Each node's process state: ``{"nodes": [{"id", "alive", "pid", ...}], ...}``."""
        nodes = [
            {
                "id": n["id"],
                "roles": n["roles"],
                "rack": n["rack"],
                "pid": n["pid"],
                "port": n["port"],
                "alive": process_matches(n.get("pid"), n["properties"]),
            }
            for n in self.state["nodes"]
        ]
        return {
            "dir": str(self.dir),
            "kafka_version": self.state["kafka_version"],
            "bootstrap_servers": self.bootstrap_servers,
            "all_alive": all(n["alive"] for n in nodes),
            "nodes": nodes,
        }

    def _spawn(self, node: dict[str, Any]) -> int:
        node_dir = Path(node["dir"])
        with open(node_dir / "stdout.log", "ab") as out:
            out.write(f"\n=== sandbox start {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                node["command"],
                cwd=node_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=_jvm_env(),
                start_new_session=True,
            )
        return proc.pid

    def _voters_alive(self) -> int:
        return sum(
            1
            for n in self.state["nodes"]
            if "controller" in n["roles"] and process_matches(n.get("pid"), n["properties"])
        )

    def _terminate(
        self, nodes: Sequence[dict[str, Any]], timeout: float, quorum_grace: float | None = None
    ) -> list[int]:
        """SIGTERM the live ones among ``nodes``, wait up to ``timeout`` s, then SIGKILL.

        With ``quorum_grace``, nodes still running ``quorum_grace`` s after the KRaft quorum
        is lost are killed at once: they only wait for peers that are gone (the Raft client's
        graceful resignation, or a controlled shutdown nobody can acknowledge any more), as
        the last voters of a whole-cluster stop do.
        Returns the ids that had to be killed.
        """
        live = [n for n in nodes if process_matches(n.get("pid"), n["properties"])]
        for node in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(node["pid"], signal.SIGTERM)
        majority = len(self.state["controllers"]) // 2 + 1
        deadline = time.monotonic() + timeout
        quorum_lost_at: float | None = None
        reason = f"ignored SIGTERM for {timeout:.0f} s"
        while live and time.monotonic() < deadline:
            time.sleep(0.1)
            live = [n for n in live if process_matches(n["pid"], n["properties"])]
            if live and quorum_grace is not None and self._voters_alive() < majority:
                quorum_lost_at = quorum_lost_at or time.monotonic()
                if time.monotonic() - quorum_lost_at >= quorum_grace:
                    reason = f"still running {quorum_grace:.0f} s after the KRaft quorum was lost"
                    break
        killed = []
        for node in live:
            if process_matches(node["pid"], node["properties"]):
                log.info("node %s (pid %s) %s: SIGKILL", node["id"], node["pid"], reason)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node["pid"], signal.SIGKILL)
                killed.append(node["id"])
        for node in live:
            for _ in range(50):
                if not process_matches(node["pid"], node["properties"]):
                    break
                time.sleep(0.1)
        return killed

    def _check_alive(self, node_ids: Sequence[int]) -> None:
        dead = [i for i in node_ids if not self.is_alive(i)]
        if dead:
            raise SandboxError(f"Kafka node(s) {dead} exited during start-up\n" + self._tails(dead, lines=40))

    def _tails(self, node_ids: Sequence[int], lines: int = 40) -> str:
        parts = []
        for node_id in node_ids:
            node_dir = Path(self._node(node_id)["dir"])
            parts.append(f"--- tail of {node_dir / 'server.log'}\n{self.log_tail(node_id, lines)}")
        return "\n".join(parts)

    # ------------------------------------------------------------------ lifecycle

    def up(
        self,
        brokers: int = 5,
        racks: int = 3,
        sasl: bool = False,
        kafka_version: str | None = None,
        timeout: float = 120.0,
        *,
        tls: bool = False,
        acls: bool = False,
        log_dirs: int = 1,
    ) -> dict[str, Any]:
        """Create and start a fresh cluster; return :attr:`info` once it is ready.

        ``tls`` adds an SSL listener (certificates made once in ``DIR/tls``); ``acls`` (with
        ``sasl``) runs KRaft's StandardAuthorizer with the limited users described above.
        ``log_dirs`` > 1 gives every broker that many log dirs (KRaft JBOD, KIP-858: intra-broker
        moves with AlterReplicaLogDirs); the metadata log stays in the first.

        Ready means: every broker is registered (the cluster metadata lists all ids) and a topic
        with replication factor ``min(3, brokers)`` can be created and deleted, within
        ``timeout`` seconds of launching the brokers. On failure everything started is
        stopped and :class:`SandboxError` carries the tail of the failing nodes' logs.
        ``kafka_version`` (or ``$AKR_KAFKA_VERSION``) pins a version >= 3.9 (below 4.1 without KIP-860), otherwise the
        newest resolvable 4.x release is used (see :mod:`.maven`). The first run of a
        version downloads it and trains class-data-sharing archives (see :mod:`.cds`).
        """
        if brokers < 1:
            raise SandboxError("a sandbox needs at least 1 broker")
        if racks < 0:
            raise SandboxError("racks must be >= 0 (0: no broker.rack)")
        if acls and not sasl:
            raise SandboxError("acls needs sasl: the limited users are SCRAM users (pass --sasl with --acls)")
        if log_dirs < 1:
            raise SandboxError("log_dirs must be >= 1 (the number of log dirs of each broker)")
        started = time.monotonic()
        with self._lock():
            self._prepare_dir()
            try:
                dist = maven.resolve(kafka_version)
            except maven.KafkaFetchError as exc:
                raise SandboxError(str(exc)) from exc
            archives = cds.ensure_archives(dist, _java(), self._train_archives(dist))
            for attempt in range(1, PORT_ATTEMPTS + 1):
                try:
                    self._start(dist, brokers, racks, sasl, timeout, archives, tls=tls, acls=acls,
                                log_dirs=log_dirs)
                    break
                except SandboxError:
                    if attempt == PORT_ATTEMPTS or not self.port_taken():
                        raise
                    log.warning("a port chosen for a node was taken before the node bound it (attempt %d of %d): "
                                "starting again on other ports", attempt, PORT_ATTEMPTS)
                    self._remove_node_files()  # its nodes are stopped (_start stops them on failure)
            self.state["started_in_s"] = round(time.monotonic() - started, 1)
            self._save()
        log.info("sandbox ready in %.1f s: %s", self.state["started_in_s"], self.bootstrap_servers)
        return self.info

    def _start(
        self,
        dist: maven.KafkaDistribution,
        brokers: int,
        racks: int,
        sasl: bool,
        timeout: float,
        archives: tuple[Path | None, Path | None],
        broker_jvm_extra: Sequence[str] = (),
        *,
        tls: bool = False,
        acls: bool = False,
        log_dirs: int = 1,
    ) -> None:
        self._state = self._create_state(dist, brokers, racks, sasl, tls=tls, acls=acls, log_dirs=log_dirs)
        if tls:
            from airflow_kafka_reassign.sandbox.tls import ensure_certificates

            files = ensure_certificates(self.dir / "tls")
            self.state["tls_ca"], self.state["tls_keystore"] = str(files.ca), str(files.keystore)
        self.state["cds"] = {
            "broker": str(archives[0]) if archives[0] else None,
            "tools": str(archives[1]) if archives[1] else None,
        }
        self._write_node_files(broker_jvm_extra)
        self._format()
        log.info("starting %d Kafka %s nodes in %s", brokers, dist.version, self.dir)
        launched = time.monotonic()
        try:
            for node in self.state["nodes"]:
                node["pid"] = self._spawn(node)
            self._save()
            self._wait_ready(timeout)
            if self.state["sasl"]:
                # through the admin API on the PLAINTEXT listener, not kafka-storage's
                # --add-scram: a secret never goes on a command line
                from airflow_kafka_reassign.kafka import readiness

                readiness.upsert_scram_user(
                    self.client_config(), SASL_USERNAME, self.state["sasl_password"], timeout=timeout
                )
            if self.state.get("acls"):
                self._add_acl_users(timeout)
        except BaseException:
            log.error("start-up failed: stopping the nodes already started")
            self._terminate(self.state["nodes"], timeout=10.0, quorum_grace=1.0)
            raise
        log.info("%d brokers ready %.1f s after launch", brokers, time.monotonic() - launched)

    def port_taken(self) -> bool:
        """Whether a node of this sandbox failed to start because one of its ports was taken."""
        for log_file in [*self.dir.glob("node-*/server.log"), *self.dir.glob("node-*/stdout.log")]:
            try:
                if PORT_TAKEN in log_file.read_text(errors="replace"):
                    return True
            except OSError:
                continue
        return False

    def _add_acl_users(self, timeout: float) -> None:
        """The limited SCRAM users and their ACLs, through the admin API on the PLAINTEXT listener
        (``User:ANONYMOUS``, a super user)."""
        from airflow_kafka_reassign.kafka import readiness

        for user, password in self.state["acl_users"].items():
            readiness.upsert_scram_user(self.client_config(), user, password, timeout=timeout)
        readiness.allow_describe_only(self.client_config(), LIMITED_USERNAME, timeout=timeout)

    def _train_archives(self, dist: maven.KafkaDistribution) -> Callable[[Path, Path, Path], None]:
        """How :func:`.cds.ensure_archives` trains: a throwaway 1-node SASL sandbox whose broker
        and one ``kafka-reassign-partitions --list`` dump the classes they loaded."""

        def train(work: Path, broker_target: Path, tools_target: Path) -> None:
            from airflow_kafka_reassign.kafka import readiness

            trainer = Sandbox(work)
            trainer.dir.mkdir(parents=True, exist_ok=True)
            try:
                trainer._start(dist, 1, 1, True, 90.0, (None, None), cds.dump_opts(broker_target))
                readiness.list_topic_names(trainer.client_config(sasl=True), timeout=20.0)
                proc = trainer.run_tool(
                    REASSIGN_MAIN_CLASS,
                    ["--bootstrap-server", trainer.bootstrap_servers, "--list"],
                    jvm_extra=cds.dump_opts(tools_target),
                    timeout=120.0,
                )
                if proc.returncode != 0:
                    raise SandboxError(f"kafka-reassign-partitions --list failed: {proc.stderr}")
            finally:
                trainer.down(timeout=60.0)

        return train

    def _prepare_dir(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self.state_path.exists():
            foreign = sorted(p.name for p in self.dir.iterdir() if p.name != ".sandbox.lock")
            if foreign:
                raise SandboxError(
                    f"{self.dir} is not empty and holds no sandbox ({', '.join(foreign[:5])}): "
                    "give an empty or new directory"
                )
        else:
            old = Sandbox.load(self.dir)
            alive = [n["id"] for n in old.state["nodes"] if old.is_alive(n["id"])]
            if alive:
                raise SandboxError(
                    f"a sandbox is already running in {self.dir} (nodes {alive} alive): "
                    f"run 'down --dir {self.dir}' first"
                )
            log.info("replacing the stopped sandbox in %s", self.dir)
        self._remove_node_files()

    def _remove_node_files(self) -> None:
        for path in [*self.dir.glob("node-*"), self.state_path, self.dir / "tools-log4j2.xml"]:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()

    def _create_state(
        self, dist: maven.KafkaDistribution, brokers: int, racks: int, sasl: bool, *, tls: bool = False,
        acls: bool = False, log_dirs: int = 1,
    ) -> dict[str, Any]:
        voters = controller_ids(brokers)
        ports = iter(free_ports(brokers + len(voters) + (brokers if sasl else 0) + (brokers if tls else 0)))
        nodes = []
        for node_id in range(1, brokers + 1):
            controller = node_id in voters
            node_dir = self.dir / f"node-{node_id}"
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
            "dir": str(self.dir),
            "kafka_version": dist.version,
            "libs_dir": str(dist.libs_dir),
            "cluster_id": new_cluster_id(),
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

    def _classpath(self) -> str:
        return str(Path(self.state["libs_dir"]) / "*")

    def _write_node_files(self, broker_jvm_extra: Sequence[str] = ()) -> None:
        state = self.state
        by_id = {n["id"]: n for n in state["nodes"]}
        voters = ",".join(f"{i}@127.0.0.1:{by_id[i]['controller_port']}" for i in state["controllers"])
        java = _java()
        (self.dir / "tools-log4j2.xml").write_text(_render_log4j2("tools-log4j2.xml", Path()))
        for node in state["nodes"]:
            node_dir = Path(node["dir"])
            data_dirs = [Path(p) for p in node.get("log_dirs") or [node_dir / "data"]]
            for data_dir in data_dirs:
                data_dir.mkdir(parents=True)
            keystore = state.get("tls_keystore")
            props = node_properties(node, voters, state["brokers"],
                                    data_dirs[0] if len(data_dirs) == 1 else data_dirs, state["sasl"],
                                    keystore=Path(keystore) if keystore else None, acls=bool(state.get("acls")))
            Path(node["properties"]).write_text(render_properties(props))
            log4j = node_dir / "log4j2.xml"
            log4j.write_text(_render_log4j2("broker-log4j2.xml", node_dir / "server.log"))
            broker_archive = self.state["cds"]["broker"]
            node["command"] = [
                java,
                *BROKER_JVM_OPTS,
                *cds.use_opts(Path(broker_archive) if broker_archive else None),
                *broker_jvm_extra,
                f"-Dlog4j2.configurationFile={log4j}",
                f"-Dkafka.logs.dir={node_dir}",
                "-cp",
                self._classpath(),
                BROKER_MAIN_CLASS,
                node["properties"],
            ]
        self._save()

    def _tool_command(self, main_class: str, args: Sequence[str], jvm_extra: Sequence[str] = ()) -> list[str]:
        return [
            _java(),
            *TOOL_JVM_OPTS,
            *jvm_extra,
            f"-Dlog4j2.configurationFile={self.dir / 'tools-log4j2.xml'}",
            "-cp",
            self._classpath(),
            main_class,
            *args,
        ]

    def _format(self) -> None:
        """``kafka-storage format`` every node's log dir, in parallel."""
        state = self.state
        password = state["sasl_password"]
        started = time.monotonic()
        procs = []
        for node in state["nodes"]:
            args = ["format", "-t", state["cluster_id"], "-c", node["properties"]]
            archive = state["cds"]["broker"]
            jvm_extra = cds.use_opts(Path(archive) if archive else None)
            procs.append(
                (
                    node,
                    subprocess.Popen(
                        self._tool_command(STORAGE_TOOL_MAIN_CLASS, args, jvm_extra),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        text=True,
                        env=_jvm_env(),
                    ),
                )
            )
        failures = []
        deadline = time.monotonic() + FORMAT_TIMEOUT_S
        for node, proc in procs:
            try:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for _, other in procs:
                    other.kill()
                    other.communicate()
                raise SandboxError(
                    f"kafka-storage format did not finish within {FORMAT_TIMEOUT_S:.0f} s"
                ) from None
            if password:
                out = out.replace(password, "***")
            if proc.returncode != 0:
                failures.append(f"node {node['id']} (exit {proc.returncode}):\n{out.strip()}")
        if failures:
            raise SandboxError("kafka-storage format failed:\n" + "\n".join(failures))
        log.info("formatted %d nodes in %.1f s", len(procs), time.monotonic() - started)

    def _wait_ready(self, timeout: float) -> None:
        from airflow_kafka_reassign.kafka import readiness

        ids = self.broker_ids
        try:
            readiness.wait_until_ready(
                self.client_config(),
                ids,
                replication_factor=min(MAX_CONTROLLERS, len(ids)),
                timeout=max(1.0, timeout),
                check=lambda: self._check_alive(ids),
            )
        except readiness.ReadinessError as exc:
            suspects = sorted(exc.missing) or list(self.state["controllers"])
            raise SandboxError(
                f"the sandbox in {self.dir} was not ready: {exc}\n" + self._tails(suspects[:3])
            ) from exc

    def down(self, timeout: float = 20.0) -> list[int]:
        """Stop every node (SIGTERM, then SIGKILL after ``timeout`` s). Idempotent.

        Broker-only nodes stop first, then the controllers; a node still running
        ``QUORUM_LOST_GRACE_S`` after the quorum is gone is killed (it only waits for peers
        that are gone: seconds to minutes).

        Only pids recorded in the state whose command line still names the node's properties
        file are signalled. Returns the ids of the nodes that were running.
        """
        if not self.state_path.exists():
            log.info("no sandbox state in %s: nothing to stop", self.dir)
            return []
        with self._lock():
            self._read_state()
            nodes = self.state["nodes"]
            running = [n["id"] for n in nodes if process_matches(n.get("pid"), n["properties"])]
            # brokers first, then controllers: a broker's controlled shutdown needs a quorum
            brokers_only = [n for n in nodes if "controller" not in n["roles"]]
            controllers = [n for n in nodes if "controller" in n["roles"]]
            self._terminate(brokers_only, timeout, quorum_grace=QUORUM_LOST_GRACE_S)
            self._terminate(controllers, timeout, quorum_grace=QUORUM_LOST_GRACE_S)
            for node in nodes:
                node["pid"] = None
            self._save()
        if running:
            log.info("stopped nodes %s of %s", running, self.dir)
        return running

    def stop_broker(self, node_id: int, timeout: float = 60.0) -> None:
        """Stop node ``node_id`` gracefully (SIGTERM) and wait until its process has exited.

        SIGKILL follows after ``timeout`` s, or ``QUORUM_LOST_GRACE_S`` s when the KRaft
        quorum is (or becomes) lost, since a graceful stop can then no longer complete.
        """
        with self._lock():
            self._read_state()
            node = self._node(node_id)
            if not process_matches(node.get("pid"), node["properties"]):
                log.info("node %s is not running", node_id)
                return
            killed = self._terminate([node], timeout, quorum_grace=QUORUM_LOST_GRACE_S)
            if killed:
                log.warning("node %s had to be killed", node_id)
            log.info("stopped node %s", node_id)

    def start_broker(self, node_id: int, timeout: float = 120.0) -> None:
        """Start node ``node_id`` again with its recorded command line and wait until it is
        registered as a live broker (:class:`SandboxError` with its log tail otherwise)."""
        from airflow_kafka_reassign.kafka import readiness

        with self._lock():
            self._read_state()
            node = self._node(node_id)
            if process_matches(node.get("pid"), node["properties"]):
                raise SandboxError(f"node {node_id} is already running (pid {node['pid']})")
            node["pid"] = self._spawn(node)
            self._save()
        log.info("started node %s (pid %s); waiting for it to register", node_id, node["pid"])
        try:
            readiness.wait_for_brokers(
                self.client_config(), [node_id], timeout, check=lambda: self._check_alive([node_id])
            )
        except readiness.ReadinessError as exc:
            raise SandboxError(f"node {node_id} did not register: {exc}\n" + self._tails([node_id])) from exc
        log.info("node %s is registered again", node_id)

    # ------------------------------------------------------------------ tools

    def run_tool(
        self,
        main_class: str,
        args: Sequence[str],
        *,
        check: bool = False,
        capture: bool = True,
        timeout: float | None = 300.0,
        jvm_extra: Sequence[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Kafka command-line tool (its main class) on the sandbox's classpath."""
        if jvm_extra is None:
            archive = self.state.get("cds", {}).get("tools")
            jvm_extra = cds.use_opts(Path(archive) if archive else None)
        return subprocess.run(
            self._tool_command(main_class, args, jvm_extra),
            stdin=subprocess.DEVNULL,
            capture_output=capture,
            text=True,
            env=_jvm_env(),
            check=check,
            timeout=timeout,
        )

    def reassign_tool(
        self,
        args: Sequence[str],
        *,
        check: bool = False,
        capture: bool = True,
        timeout: float | None = 300.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run Apache Kafka's ``kafka-reassign-partitions`` (the reference tool).

        ``--bootstrap-server`` (the PLAINTEXT listeners) is prepended unless ``args`` names
        ``--bootstrap-server`` or ``--bootstrap-controller`` itself. With ``check=True`` a
        non-zero exit raises ``CalledProcessError``.
        """
        args = list(args)
        if not any(a.split("=")[0] in ("--bootstrap-server", "--bootstrap-controller") for a in args):
            args = ["--bootstrap-server", self.bootstrap_servers, *args]
        return self.run_tool(REASSIGN_MAIN_CLASS, args, check=check, capture=capture, timeout=timeout)
