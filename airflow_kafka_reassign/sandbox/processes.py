"""The sandbox's JVMs as operating-system processes: find ``java``, spawn a node, recognise it by its command line
(never signal a recycled pid), stop nodes (SIGTERM, then SIGKILL, sooner when the KRaft quorum is gone), run a tool
JVM (``kafka-storage format`` of every node), choose free ports and see when one was taken before a node bound it;
and the small file helpers the sandboxes share (log tails, private state files).

The JVMs run in their own sessions: they outlive the Python process that started them. What each node runs
(its command line and files) is :mod:`.nodes`; :mod:`.cluster` is the facade.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_kafka_reassign.sandbox import cds
from airflow_kafka_reassign.sandbox.errors import SandboxError

log = logging.getLogger(__name__)

#: a node still running this long after the KRaft quorum is gone is SIGKILLed by ``down``
QUORUM_LOST_GRACE_S = 3.0
FORMAT_TIMEOUT_S = 180.0
#: What a Kafka node logs when a listener's port is taken.
PORT_TAKEN = "Address already in use"
STORAGE_TOOL_MAIN_CLASS = "kafka.tools.StorageTool"
#: The log4j2 configuration of the Kafka command-line tools, in the sandbox's directory (:func:`~.nodes.write_node_files`).
TOOLS_LOG4J2 = "tools-log4j2.xml"

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


def port_taken(dir: Path) -> bool:
    """Whether a node of the sandbox in ``dir`` failed to start because one of its ports was taken."""
    for log_file in [*dir.glob("node-*/server.log"), *dir.glob("node-*/stdout.log"), *dir.glob("zookeeper/*.log")]:
        try:
            if PORT_TAKEN in log_file.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False


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


def write_private(path: Path, text: str) -> None:
    """Atomically write ``text`` to ``path`` with mode 600."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise SandboxError("'java' (17 or newer) is not on PATH: Kafka 4.x brokers need it")
    return java


def jvm_env() -> dict[str, str]:
    return {**os.environ, **_JVM_ENV}


def tool_command(dir: Path, classpath: str, main_class: str, args: Sequence[str], jvm_extra: Sequence[str] = ()) -> list[str]:
    """The command line of a Kafka command-line tool (its main class) on ``classpath``, logging as ``dir``'s tools
    configuration says."""
    return [
        java(),
        *TOOL_JVM_OPTS,
        *jvm_extra,
        f"-Dlog4j2.configurationFile={dir / TOOLS_LOG4J2}",
        "-cp",
        classpath,
        main_class,
        *args,
    ]


def spawn(node: Mapping[str, Any]) -> int:
    """Start ``node``'s recorded command line in its own session (output to its ``stdout.log``); its pid."""
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
            env=jvm_env(),
            start_new_session=True,
        )
    return proc.pid


def voters_alive(state: Mapping[str, Any]) -> int:
    """How many of the sandbox's KRaft voters are running."""
    return sum(
        1
        for n in state["nodes"]
        if "controller" in n["roles"] and process_matches(n.get("pid"), n["properties"])
    )


def quorum_alive(state: Mapping[str, Any]) -> bool:
    """Whether the sandbox's metadata quorum is up: a majority of the KRaft voters running, or, in ZooKeeper mode,
    the ZooKeeper server."""
    server = state.get("zookeeper")
    if state.get("mode") == "zookeeper" and server:
        return process_matches(server.get("pid"), server["properties"])
    return voters_alive(state) >= len(state["controllers"]) // 2 + 1


def terminate(
    state: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], timeout: float, quorum_grace: float | None = None
) -> list[int]:
    """SIGTERM the live ones among ``nodes`` (of the sandbox whose state is ``state``), wait up to ``timeout`` s,
    then SIGKILL.

    With ``quorum_grace``, nodes still running ``quorum_grace`` s after the KRaft quorum (or the ZooKeeper
    server) is lost are killed at once: they only wait for peers that are gone (the Raft client's
    graceful resignation, or a controlled shutdown nobody can acknowledge any more), as
    the last voters of a whole-cluster stop do.
    Returns the ids that had to be killed.
    """
    live = [n for n in nodes if process_matches(n.get("pid"), n["properties"])]
    for node in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(node["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    quorum_lost_at: float | None = None
    reason = f"ignored SIGTERM for {timeout:.0f} s"
    while live and time.monotonic() < deadline:
        time.sleep(0.1)
        live = [n for n in live if process_matches(n["pid"], n["properties"])]
        if live and quorum_grace is not None and not quorum_alive(state):
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


def format_storage(dir: Path, state: Mapping[str, Any], classpath: str) -> None:
    """``kafka-storage format`` every node's log dir, in parallel (the SASL password never in the error)."""
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
                    tool_command(dir, classpath, STORAGE_TOOL_MAIN_CLASS, args, jvm_extra),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    env=jvm_env(),
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
