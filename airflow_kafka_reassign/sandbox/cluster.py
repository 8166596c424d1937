"""A real local Apache Kafka cluster for demos and integration tests: the :class:`Sandbox` facade. KRaft by default;
``zookeeper=True`` (``up --zookeeper``) runs ZooKeeper-mode Kafka 3.x brokers and a ZooKeeper server instead.

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
    DIR/zookeeper/               ZooKeeper mode: the ZooKeeper server's zookeeper.properties, log4j2.xml,
                                 zookeeper.log, stdout.log and data/ (:mod:`.zookeeper`)

Where each part lives:

* this module: the facade (``up``, ``down``, ``stop_broker``, ``start_broker``, the tools), the state file, how
  a client reaches the cluster (:meth:`Sandbox.client_config`), start-up with a retry on new ports when a port
  was taken before a node bound it, and readiness (every broker registered, a topic created and deleted: the
  checks themselves are airflow_kafka_reassign/kafka/readiness.py, the one sandbox code that uses a Kafka client);
* :mod:`.nodes`: what each node is (ids, roles, racks, ports, listeners, users) and the files it runs from;
* :mod:`.processes`: the JVMs as processes (spawn, recognise, stop, the storage format tool, free ports);
* :mod:`.zookeeper`: the ZooKeeper server of a ZooKeeper-mode sandbox;
* :mod:`.maven` the jars, :mod:`.cds` the class-data-sharing archives, :mod:`.tls` the certificates.

The JVMs run in their own sessions: they outlive the Python process that started them and
are stopped by :meth:`Sandbox.down` (or ``python -m airflow_kafka_reassign.sandbox down``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from airflow_kafka_reassign.sandbox import cds, maven, nodes, processes, zookeeper
from airflow_kafka_reassign.sandbox.errors import SandboxError

log = logging.getLogger(__name__)

STATE_FILE = "sandbox.json"
#: Start-up attempts when a node could not bind a port chosen for it: the port was free when chosen
#: (:func:`.processes.free_ports`) but another process took it before the node bound it (several sandboxes starting
#: at once, or a client's outgoing connection given it as its local port). Each attempt chooses new ports.
PORT_ATTEMPTS = 3
REASSIGN_MAIN_CLASS = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


class Sandbox:
    """A local Kafka cluster (KRaft, or ZooKeeper mode) living in directory ``dir``.

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
        if state.get("schema") != nodes.STATE_SCHEMA:
            raise SandboxError(f"{self.state_path} has an unknown schema {state.get('schema')!r}")
        self._state = state
        return state

    @property
    def state(self) -> dict[str, Any]:
        """The raw state (includes the SASL password: never print it)."""
        return self._state if self._state is not None else self._read_state()

    def _save(self) -> None:
        processes.write_private(self.state_path, json.dumps(self.state, indent=2) + "\n")

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
        node: dict[str, Any]
        for node in self.state["nodes"]:
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
    def zookeeper_mode(self) -> bool:
        """Whether the brokers run in ZooKeeper mode (a ZooKeeper server, no KRaft controllers)."""
        return nodes.is_zookeeper_mode(self.state)

    @property
    def zookeeper_connect(self) -> str | None:
        """The brokers' ``zookeeper.connect`` (``127.0.0.1:PORT``), or ``None`` for a KRaft sandbox."""
        return zookeeper.connect_string(self.state["zookeeper"]) if self.zookeeper_mode else None

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
            "mode": state.get("mode", "kraft"),
            "zookeeper_connect": self.zookeeper_connect,
            "kafka_version": state["kafka_version"],
            "dir": str(self.dir),
            "started_in_s": state.get("started_in_s"),
        }

    def client_config(self, sasl: bool = False, *, tls: bool = False, user: str | None = None) -> dict[str, str]:
        """A librdkafka (confluent-kafka) configuration dict reaching the sandbox.

        With ``sasl=True`` it uses the SASL_PLAINTEXT listener and the admin credentials, or those
        of ``user`` (:data:`nodes.LIMITED_USERNAME` or :data:`nodes.NO_ACL_USERNAME`, with ``acls``). With
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
                                   f"{nodes.LIMITED_USERNAME!r} and {nodes.NO_ACL_USERNAME!r})")
            creds = (user, users[user])
        return {
            "bootstrap.servers": self.sasl_bootstrap_servers or "",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": nodes.SASL_MECHANISM,
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
        text = processes.tail_file(node_dir / "server.log", lines)
        stdout = processes.tail_file(node_dir / "stdout.log", lines)
        if stdout.strip() and not text.strip():
            return stdout
        return text

    # ------------------------------------------------------------------ processes

    def is_alive(self, node_id: int) -> bool:
        """Whether node ``node_id``'s JVM is running."""
        node = self._node(node_id)
        return processes.process_matches(node.get("pid"), node["properties"])

    def status(self) -> dict[str, Any]:
        """Each node's process state: ``{"nodes": [{"id", "alive", "pid", ...}], ...}``."""
        rows = [
            {
                "id": n["id"],
                "roles": n["roles"],
                "rack": n["rack"],
                "pid": n["pid"],
                "port": n["port"],
                "alive": processes.process_matches(n.get("pid"), n["properties"]),
            }
            for n in self.state["nodes"]
        ]
        out = {
            "dir": str(self.dir),
            "kafka_version": self.state["kafka_version"],
            "bootstrap_servers": self.bootstrap_servers,
            "all_alive": all(n["alive"] for n in rows) and (not self.zookeeper_mode or self.zookeeper_alive()),
            "nodes": rows,
        }
        if self.zookeeper_mode:
            server = self.state["zookeeper"]
            out["zookeeper"] = {"pid": server["pid"], "port": server["port"], "alive": self.zookeeper_alive()}
        return out

    def zookeeper_alive(self) -> bool:
        """Whether the ZooKeeper server's JVM is running (``False`` for a KRaft sandbox)."""
        server = self.state.get("zookeeper")
        return bool(server) and processes.process_matches(server.get("pid"), server["properties"])

    def _terminate(
        self, targets: Sequence[dict[str, Any]], timeout: float, quorum_grace: float | None = None
    ) -> list[int]:
        """:func:`.processes.terminate` of ``targets`` (nodes of this sandbox); the ids that had to be killed."""
        return processes.terminate(self.state, targets, timeout, quorum_grace)

    def _check_alive(self, node_ids: Sequence[int]) -> None:
        if self.zookeeper_mode and not self.zookeeper_alive():
            raise SandboxError("the ZooKeeper server exited\n--- tail of its log\n"
                               + processes.tail_file(Path(self.state["zookeeper"]["dir"]) / "zookeeper.log", 40))
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
        zookeeper: bool = False,
    ) -> dict[str, Any]:
        """Create and start a fresh cluster; return :attr:`info` once it is ready.

        ``zookeeper``: ZooKeeper-mode Kafka (``kafka_version`` 2.8 to 3.9, 3.9.1 by default; the provider needs
        3.0+) with a standalone ZooKeeper server from the same classpath, started first; every node is a broker
        (``broker.id``), the controller is the broker ZooKeeper elects. Racks, SASL, TLS and ``log_dirs`` work as
        in KRaft (JBOD with ``log_dirs`` > 1: ZooKeeper-mode Kafka has had it since 1.1, KIP-112/113); ``acls`` is
        KRaft only.

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
        if zookeeper and acls:
            raise SandboxError("acls is KRaft only here (StandardAuthorizer): drop --acls or --zookeeper")
        started = time.monotonic()
        with self._lock():
            self._prepare_dir()
            try:
                dist = maven.resolve(kafka_version, zookeeper=zookeeper)
            except maven.KafkaFetchError as exc:
                raise SandboxError(str(exc)) from exc
            archives = cds.ensure_archives(dist, processes.java(), self._train_archives(dist))
            for attempt in range(1, PORT_ATTEMPTS + 1):
                try:
                    self._start(dist, brokers, racks, sasl, timeout, archives, tls=tls, acls=acls,
                                log_dirs=log_dirs, zookeeper_mode=zookeeper)
                    break
                except SandboxError:
                    if attempt == PORT_ATTEMPTS or not processes.port_taken(self.dir):
                        raise
                    log.warning("a port chosen for a node was taken before the node bound it (attempt %d of %d): "
                                "starting again on other ports", attempt, PORT_ATTEMPTS)
                    nodes.remove_node_files(self.dir, STATE_FILE)  # its nodes are stopped (_start stops them on failure)
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
        zookeeper_mode: bool = False,
    ) -> None:
        self._state = nodes.new_state(self.dir, dist, brokers, racks, sasl, tls=tls, acls=acls, log_dirs=log_dirs,
                                      zookeeper_mode=zookeeper_mode)
        if tls:
            from airflow_kafka_reassign.sandbox.tls import ensure_certificates

            files = ensure_certificates(self.dir / "tls")
            self.state["tls_ca"], self.state["tls_keystore"] = str(files.ca), str(files.keystore)
        self.state["cds"] = {
            "broker": str(archives[0]) if archives[0] else None,
            "tools": str(archives[1]) if archives[1] else None,
        }
        self._write_node_files(broker_jvm_extra)
        if not zookeeper_mode:  # a ZooKeeper-mode broker writes its meta.properties itself
            self._format()
        log.info("starting %d Kafka %s nodes in %s%s", brokers, dist.version, self.dir,
                 " (ZooKeeper mode)" if zookeeper_mode else "")
        launched = time.monotonic()
        try:
            if zookeeper_mode:
                self._start_zookeeper(timeout)
            for node in self.state["nodes"]:
                node["pid"] = processes.spawn(node)
            self._save()
            self._wait_ready(timeout)
            if self.state["sasl"]:
                # through the admin API on the PLAINTEXT listener, not kafka-storage's
                # --add-scram: a secret never goes on a command line
                from airflow_kafka_reassign.kafka import readiness

                readiness.upsert_scram_user(
                    self.client_config(), nodes.SASL_USERNAME, self.state["sasl_password"], timeout=timeout
                )
            if self.state.get("acls"):
                self._add_acl_users(timeout)
        except BaseException:
            log.error("start-up failed: stopping the nodes already started")
            self._terminate(self.state["nodes"], timeout=10.0, quorum_grace=1.0)
            self._stop_zookeeper(timeout=10.0)
            raise
        log.info("%d brokers ready %.1f s after launch", brokers, time.monotonic() - launched)

    def _start_zookeeper(self, timeout: float) -> None:
        """Spawn the ZooKeeper server and wait until it answers ``ruok``."""
        server = self.state["zookeeper"]
        server["pid"] = processes.spawn(server)
        self._save()
        zookeeper.wait_serving(server, timeout, alive=self.zookeeper_alive)
        log.info("ZooKeeper serving on %s", zookeeper.connect_string(server))

    def _stop_zookeeper(self, timeout: float) -> None:
        """SIGTERM the ZooKeeper server (SIGKILL after ``timeout`` s), when this is a ZooKeeper-mode sandbox."""
        server = self.state.get("zookeeper")
        if not self.zookeeper_mode or not server:
            return
        processes.terminate(self.state, [server], timeout)
        server["pid"] = None

    def _add_acl_users(self, timeout: float) -> None:
        """The limited SCRAM users and their ACLs, through the admin API on the PLAINTEXT listener
        (``User:ANONYMOUS``, a super user)."""
        from airflow_kafka_reassign.kafka import readiness

        for user, password in self.state["acl_users"].items():
            readiness.upsert_scram_user(self.client_config(), user, password, timeout=timeout)
        readiness.allow_describe_only(self.client_config(), nodes.LIMITED_USERNAME, timeout=timeout)

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
            alive += ["zookeeper"] if old.zookeeper_alive() else []
            if alive:
                raise SandboxError(
                    f"a sandbox is already running in {self.dir} (nodes {alive} alive): "
                    f"run 'down --dir {self.dir}' first"
                )
            log.info("replacing the stopped sandbox in %s", self.dir)
        nodes.remove_node_files(self.dir, STATE_FILE)

    def _write_node_files(self, broker_jvm_extra: Sequence[str] = ()) -> None:
        nodes.write_node_files(self.dir, self.state, broker_jvm_extra)
        self._save()

    def _format(self) -> None:
        """``kafka-storage format`` every node's log dir, in parallel."""
        processes.format_storage(self.dir, self.state, nodes.classpath(self.state))

    def _wait_ready(self, timeout: float) -> None:
        from airflow_kafka_reassign.kafka import readiness

        ids = self.broker_ids
        try:
            readiness.wait_until_ready(
                self.client_config(),
                ids,
                replication_factor=min(nodes.MAX_CONTROLLERS, len(ids)),
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

        Broker-only nodes stop first, then the controllers, then (ZooKeeper mode) the ZooKeeper server; a node
        still running ``processes.QUORUM_LOST_GRACE_S`` after the quorum is gone is killed (it only waits for peers
        that are gone: seconds to minutes).

        Only pids recorded in the state whose command line still names the node's properties
        file are signalled. Returns the ids of the nodes that were running.
        """
        if not self.state_path.exists():
            log.info("no sandbox state in %s: nothing to stop", self.dir)
            return []
        with self._lock():
            self._read_state()
            every = self.state["nodes"]
            running = [n["id"] for n in every if processes.process_matches(n.get("pid"), n["properties"])]
            # brokers first, then controllers: a broker's controlled shutdown needs a quorum
            brokers_only = [n for n in every if "controller" not in n["roles"]]
            controllers = [n for n in every if "controller" in n["roles"]]
            self._terminate(brokers_only, timeout, quorum_grace=processes.QUORUM_LOST_GRACE_S)
            self._terminate(controllers, timeout, quorum_grace=processes.QUORUM_LOST_GRACE_S)
            self._stop_zookeeper(timeout)
            for node in every:
                node["pid"] = None
            self._save()
        if running:
            log.info("stopped nodes %s of %s", running, self.dir)
        return running

    def stop_broker(self, node_id: int, timeout: float = 60.0) -> None:
        """Stop node ``node_id`` gracefully (SIGTERM) and wait until its process has exited.

        SIGKILL follows after ``timeout`` s, or ``processes.QUORUM_LOST_GRACE_S`` s when the KRaft
        quorum is (or becomes) lost, since a graceful stop can then no longer complete.
        """
        with self._lock():
            self._read_state()
            node = self._node(node_id)
            if not processes.process_matches(node.get("pid"), node["properties"]):
                log.info("node %s is not running", node_id)
                return
            killed = self._terminate([node], timeout, quorum_grace=processes.QUORUM_LOST_GRACE_S)
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
            if processes.process_matches(node.get("pid"), node["properties"]):
                raise SandboxError(f"node {node_id} is already running (pid {node['pid']})")
            node["pid"] = processes.spawn(node)
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
            processes.tool_command(self.dir, nodes.classpath(self.state), main_class, args, jvm_extra),
            stdin=subprocess.DEVNULL,
            capture_output=capture,
            text=True,
            env=processes.jvm_env(),
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
