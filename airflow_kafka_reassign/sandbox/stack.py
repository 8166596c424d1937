"""A real Airflow deployment on this machine: PostgreSQL, Redis, the CeleryExecutor with two workers, a triggerer.

What production runs, each part its own process (its own process group), on 127.0.0.1 and free ports::

    python -m airflow_kafka_reassign.sandbox.stack up --dir /tmp/akr-stack     # prints where the UI is
    python -m airflow_kafka_reassign.sandbox.stack status --dir /tmp/akr-stack
    python -m airflow_kafka_reassign.sandbox.stack restart postgres --dir /tmp/akr-stack  # a fault, by hand
    python -m airflow_kafka_reassign.sandbox.stack revive --dir /tmp/akr-stack   # start what exited meanwhile
    python -m airflow_kafka_reassign.sandbox.stack down --dir /tmp/akr-stack

* **PostgreSQL** (Debian's ``postgresql``; ``make stack-deps`` installs it when missing): a throw-away cluster made
  by ``initdb`` with a random password, the metadata database and the Celery result backend.
* **Redis** (Debian's ``redis-server``): the Celery broker, with a random password, nothing persisted.
* **Kafka** (:class:`~airflow_kafka_reassign.sandbox.Sandbox`, 5 brokers on 3 racks, SASL) and **S3Proxy**
  (:class:`~airflow_kafka_reassign.sandbox.objectstore.ObjectStoreSandbox`), or ones already running (``kafka_dir``,
  ``object_store_dir``): plans and task logs live on the store (``s3://<bucket>/airflow``, ``s3://<bucket>/logs``).
* **Airflow**: ``api-server`` (UI, REST and execution API), ``scheduler`` (CeleryExecutor), ``dag-processor``,
  ``triggerer`` and two ``celery worker`` processes. Each worker and the triggerer has its own working directory,
  ``TMPDIR``, ``AIRFLOW_HOME`` and copy of the DAGs (as an image would): the workers share nothing but the
  database (Celery's results), the broker queue, Kafka and the plan storage. A worker's ``AKR_OUTPUT_DIR`` points
  into its folder and must stay unused (a plan written to a worker's disk). Each worker names itself
  ``stack-worker-N`` (Celery's hostname and the task instance's ``hostname`` in the database).

Every start waits, bounded, for the part to answer (no fixed sleep); ``down`` stops each process group and waits
for it (SIGKILL only for what outlives ``timeout``). Secrets (database, broker, S3) stay in ``DIR/secrets.json``
(mode 600) and the processes' environments; never on a command line, never printed. Layout of ``DIR``::

    stack.json  secrets.json  logs/<component>.log  airflow/ (the scheduler's, API server's, CLI's AIRFLOW_HOME)
    dags/  worker-N/{cwd,tmp,airflow-home,dags}/  triggerer/{cwd,tmp,airflow-home}/  redis/  kafka/  objectstore/
    postgres data: DIR/postgres, or a private temporary folder owned by ``postgres`` when run as root
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from airflow_kafka_reassign.sandbox.cluster import Sandbox
from airflow_kafka_reassign.sandbox.errors import SandboxError
from airflow_kafka_reassign.sandbox.objectstore import ObjectStoreSandbox
from airflow_kafka_reassign.sandbox.processes import free_ports, tail_file, write_private
from airflow_kafka_reassign.sandbox.waiting import wait_until

log = logging.getLogger(__name__)

STATE_FILE = "stack.json"
SECRETS_FILE = "secrets.json"
KAFKA_CONN_ID = "kafka_default"
STORAGE_CONN_ID = "akr_plans"
#: the environment variable a worker's ``hostname_callable`` (:func:`hostname`) reads
HOSTNAME_ENV = "AKR_STACK_HOSTNAME"
EXAMPLE_DAGS = Path(__file__).resolve().parents[2] / "example_dags"
WORKER_PREFIX = "stack-worker-"
#: the Airflow components, in the order they are stopped (workers first: they finish or drop their tasks)
COMPONENTS = ("scheduler", "triggerer", "dag-processor", "api-server")
#: the backing services, in the order they are stopped, and the signal that stops each (SIGINT: PostgreSQL's fast
#: shutdown)
BACKING_SERVICES = {"redis": signal.SIGTERM, "postgres": signal.SIGINT}
_SAVING = threading.Lock()


def hostname() -> str:
    """``[core] hostname_callable`` of the stack's processes: a worker's own name (``stack-worker-N``), else the
    machine's. Both workers run on one machine: this is what tells them apart in the database."""
    return os.environ.get(HOSTNAME_ENV) or socket.getfqdn()


def _pg_bin(name: str) -> str:
    """A PostgreSQL server program: Debian keeps them in /usr/lib/postgresql/<major>/bin, off PATH."""
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parts[-3]), reverse=True)
    if found:
        return str(found[0])
    on_path = shutil.which(name)
    if on_path:
        return on_path
    raise SandboxError(f"PostgreSQL's {name} is missing: `make stack-deps` installs Debian's postgresql "
                       "(apt-get install postgresql)")


def _redis_bin() -> str:
    found = shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)
    if not found:
        raise SandboxError("redis-server is missing: `make stack-deps` installs Debian's redis-server")
    return found


def airflow_bin() -> str:
    return str(Path(sys.executable).with_name("airflow"))


def _group_alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a group whose only member is a zombie leader is over
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z" or _group_members(pid) > 1
    except OSError:
        return _group_members(pid) > 0


def _group_members(pgid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                count += 1
    return count


def _processes() -> dict[int, tuple[int, int, str]]:
    """``{pid: (parent pid, process group, state)}`` of every process (Linux ``/proc``)."""
    found: dict[int, tuple[int, int, str]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
                found[int(entry.name)] = (int(fields[1]), int(fields[2]), fields[0])
            except (OSError, IndexError, ValueError):
                continue
    return found


def _descendants(pid: int) -> set[int]:
    procs = _processes()
    out: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, (ppid, _, _) in procs.items() if ppid in frontier and p not in out}
        out |= frontier
    return out


def _group_pids(pgid: int) -> set[int]:
    return {p for p, (_, group, _) in _processes().items() if group == pgid}


def _running(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    state = _processes().get(pid)
    return state is not None and state[2] != "Z"


def _heartbeat_since(heartbeat: str | None, since: float) -> bool:
    """Whether the health endpoint's ``latest_..._heartbeat`` (ISO 8601, with its zone) is at or after ``since``."""
    if not heartbeat:
        return False
    from datetime import datetime

    return datetime.fromisoformat(heartbeat).timestamp() >= since


def stop_group(pid: int, timeout: float, sig: int = signal.SIGTERM) -> str:
    """Stop the process group ``pid`` (``sig``, then SIGKILL after ``timeout`` s); how it went, in words."""
    started = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
    while time.monotonic() - started < timeout:
        if not _group_alive(pid):
            return f"{time.monotonic() - started:.1f} s"
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        wait_until(lambda: not _group_alive(pid), f"process group {pid} to die", 30, 0.1)
    return f"{time.monotonic() - started:.1f} s (SIGKILL after {timeout:.0f} s)"


class Stack:
    """The deployment living in ``dir`` (see the module docstring)."""

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        self.dir = Path(dir).expanduser().resolve()

    # -- state -----------------------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.dir / STATE_FILE

    @property
    def state(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.state_path.read_text()))
        except FileNotFoundError:
            raise SandboxError(f"no stack in {self.dir} (missing {STATE_FILE}): `stack up` first") from None

    def _save(self, state: Mapping[str, Any]) -> None:
        with _SAVING:  # the backing services start in threads, each recording its pid
            write_private(self.state_path, json.dumps(state, indent=1) + "\n")

    def _secrets(self) -> dict[str, str]:
        return dict(json.loads((self.dir / SECRETS_FILE).read_text()))

    @property
    def url(self) -> str:
        """Where the UI (and the REST API) is."""
        return f"http://127.0.0.1:{self.state['ports']['api']}"

    @property
    def kafka(self) -> Sandbox:
        return Sandbox.load(self.state["kafka_dir"])

    @property
    def object_store(self) -> ObjectStoreSandbox:
        return ObjectStoreSandbox(self.state["object_store_dir"])

    @property
    def workers(self) -> list[str]:
        return list(self.state.get("workers", []))

    def home(self, component: str | None = None) -> Path:
        """The ``AIRFLOW_HOME`` of ``component`` (a worker, ``triggerer``) or of the others and the CLI."""
        if component and (component.startswith(WORKER_PREFIX) or component == "triggerer"):
            return self.dir / component / "airflow-home"
        return self.dir / "airflow"

    def dags_folders(self) -> list[Path]:
        """Every copy of the DAGs: the DAG processor's and each worker's."""
        return [self.dir / "dags", *(self.dir / w / "dags" for w in self.workers)]

    def add_dag(self, path: str | os.PathLike[str], name: str | None = None) -> None:
        """Deploy a DAG file: into the DAG processor's folder and each worker's (as a new image would)."""
        for folder in self.dags_folders():
            shutil.copyfile(path, folder / (name or Path(path).name))

    def sql_url(self, driver: str = "postgresql+psycopg2") -> str:
        s = self._secrets()
        return f"{driver}://airflow:{s['postgres']}@127.0.0.1:{self.state['ports']['postgres']}/airflow"

    # -- the environment ---------------------------------------------------------------------------

    def env(self, component: str | None = None) -> dict[str, str]:
        """The environment of ``component`` (``None``: the CLI, e.g. ``airflow dags trigger``). Holds secrets."""
        state, s = self.state, self._secrets()
        ports = state["ports"]
        api = f"http://127.0.0.1:{ports['api']}"
        store = self.object_store
        kafka = Sandbox.load(state["kafka_dir"])
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(self.home()),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dir / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "airflow_kafka_reassign.sandbox.stack.hostname",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.sql_url(),
            "AIRFLOW__CELERY__BROKER_URL": f"redis://:{s['redis']}@127.0.0.1:{ports['redis']}/0",
            "AIRFLOW__CELERY__RESULT_BACKEND": self.sql_url("db+postgresql+psycopg2"),
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(ports["api"]),
            "AIRFLOW__API__BASE_URL": api,
            "AIRFLOW__API_AUTH__JWT_SECRET": s["jwt"],
            "AIRFLOW__API__SECRET_KEY": s["api"],
            # ONE Fernet key for every component: trigger kwargs (an AssetWatcher's, a deferred task's) are encrypted
            # by the DAG processor or the API server and decrypted by the triggerer; without it each AIRFLOW_HOME
            # generates its own key and the triggerer's runner dies on InvalidToken (seen on this stack)
            **({"AIRFLOW__CORE__FERNET_KEY": s["fernet"]} if s.get("fernet") else {}),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "2",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
            # a triggerer that died (no heartbeat for this long) has its triggers taken by a live one (default 30 s)
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
            # a task whose worker died is failed (then retried, if it has retries) after this long without heartbeat
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(state.get("heartbeat_timeout_s", 30)),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            # task logs on the object store: the UI reads them there, whichever worker wrote them
            "AIRFLOW__LOGGING__REMOTE_LOGGING": "True",
            "AIRFLOW__LOGGING__REMOTE_BASE_LOG_FOLDER": f"s3://{store.bucket}/logs",
            "AIRFLOW__LOGGING__REMOTE_LOG_CONN_ID": STORAGE_CONN_ID,
            # the log servers' ports (8793/8794 by default) may be taken by another Airflow on this machine
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(ports.get("trigger_logs", 8794)),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(ports.get("worker_logs", 8793)),
            f"AIRFLOW_CONN_{KAFKA_CONN_ID.upper()}": json.dumps({"conn_type": "kafka",
                                                                 "extra": kafka.client_config(sasl=True)}),
            f"AIRFLOW_CONN_{STORAGE_CONN_ID.upper()}": store.airflow_connection(),
            "AIRFLOW_VAR_AKR_PLAN_STORAGE": f"s3://{store.bucket}/airflow",
            "AIRFLOW_VAR_AKR_STORAGE_CONN_ID": STORAGE_CONN_ID,
            "AKR_OUTPUT_DIR": str(self.dir / "must-stay-unused"),
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            "PYTHONUNBUFFERED": "1",
        }
        # the deployment's own settings (``up(env=...)``): what an operator puts in every component's environment
        env.update(state.get("env") or {})
        # the sandbox brokers share this machine's disk, whose free space is not the stack's business
        env.setdefault("AKR_DISK_RESERVE", "64MiB")
        if component and (component.startswith(WORKER_PREFIX) or component == "triggerer"):
            own = self.dir / component
            env.update({"AIRFLOW_HOME": str(own / "airflow-home"), "TMPDIR": str(own / "tmp"),
                        "AKR_OUTPUT_DIR": str(own / "must-stay-unused"), HOSTNAME_ENV: component})
            if component.startswith(WORKER_PREFIX):
                env["AIRFLOW__CORE__DAGS_FOLDER"] = str(own / "dags")
                # a worker runs tasks through the execution API: no metadata database (Celery's results aside)
                env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
        return env

    def cli(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``airflow ARGS`` as the operator would run it against this deployment."""
        proc = subprocess.run([airflow_bin(), *args], env=self.env(), capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise SandboxError(f"airflow {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                               f"{proc.stderr[-3000:]}")
        return proc

    def query(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` (``%s`` placeholders) on the metadata database."""
        import psycopg2

        conn = psycopg2.connect(self.sql_url("postgresql"))
        try:
            with conn, conn.cursor() as cur:
                cur.execute(sql, params)
                return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()

    def log_path(self, component: str) -> Path:
        return self.dir / "logs" / f"{component}.log"

    def tail(self, component: str, lines: int = 40) -> str:
        return tail_file(self.log_path(component), lines)

    # -- processes -------------------------------------------------------------------------------

    def _spawn(self, name: str, command: Sequence[str], *, env: Mapping[str, str] | None = None,
               cwd: Path | None = None, user: str | None = None) -> int:
        self.log_path(name).parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path(name), "ab") as out:
            proc = subprocess.Popen(list(command), env=dict(env) if env is not None else None, cwd=cwd,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, user=user)
        return proc.pid

    def _airflow_command(self, name: str) -> list[str]:
        if name.startswith(WORKER_PREFIX):
            return [airflow_bin(), "celery", "worker", "--celery-hostname", f"{name}@%h", "--skip-serve-logs",
                    "--concurrency", "2"]
        if name == "api-server":
            return [airflow_bin(), "api-server", "--port", str(self.state["ports"]["api"]), "--workers", "1"]
        return [airflow_bin(), name]

    def start(self, name: str, timeout: float = 180.0) -> None:
        """Start the Airflow component ``name`` (again) and wait until it is ready."""
        state = self.state
        if name in state["pids"] and _group_alive(state["pids"][name]):
            raise SandboxError(f"{name} already runs (process group {state['pids'][name]})")
        self._launch([name], timeout)

    def _launch(self, names: Sequence[str], timeout: float) -> None:
        """Start the Airflow components ``names`` again and wait until each is ready (a worker: ready since now)."""
        state = self.state
        offsets = {n: self.log_path(n).stat().st_size for n in names if self.log_path(n).exists()}
        since = time.time()
        for name in names:
            own = self.dir / name
            cwd = own / "cwd" if (own / "cwd").is_dir() else self.dir
            state["pids"][name] = self._spawn(name, self._airflow_command(name), env=self.env(name), cwd=cwd)
            self._save(state)
        self._wait_ready(names, timeout, offsets, since)

    def restart(self, name: str, *, while_down: Callable[[], object] | None = None, timeout: float = 60.0) -> float:
        """Stop ``name``, call ``while_down()`` (e.g. a bounded wait for what the outage does), start it again as it
        was; return how long it was down (s). ``postgres``: a fast shutdown (SIGINT: every session cut, the data
        kept), started on the same port and data; ``redis``: SIGTERM, started on the same port, empty (nothing is
        persisted: a message queued then is lost); an Airflow component: SIGTERM, then :meth:`start`. The Airflow
        components that exit for want of the service are not started again here: :meth:`revive` does."""
        state = self.state
        pid = state["pids"][name]
        stop_group(pid, timeout, BACKING_SERVICES.get(name, signal.SIGTERM))
        down = time.monotonic()
        try:
            if while_down is not None:
                while_down()
        finally:  # started again whatever while_down did
            if name == "postgres":
                self._postgres_start(state, timeout)
            elif name == "redis":
                self._redis_start(state, timeout)
            else:
                self.start(name, max(timeout, 180.0))
        return round(time.monotonic() - down, 1)

    def revive(self, timeout: float = 180.0) -> list[str]:
        """Start again every Airflow component that has exited, as a process supervisor would (systemd's
        ``Restart=always``, Kubernetes' restart policy), and wait until they are ready: the ones started. The
        scheduler, the triggerer and the DAG processor exit when the metadata database is unreachable for a few
        seconds (docs/stack.md)."""
        pids = self.state["pids"]
        dead = [n for n in (*COMPONENTS, *self.workers) if n in pids and not _group_alive(pids[n])]
        if dead:
            self._launch(dead, timeout)
        return dead

    def kill(self, name: str, sig: int = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to every process of the component ``name``: its process group and every descendant (a worker:
        its pool, the task supervisors and the tasks they run, whatever session they made). The pids signalled."""
        pid = self.state["pids"][name]
        targets = sorted({pid, *_descendants(pid), *_group_pids(pid)})
        for target in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, sig)
        if sig == signal.SIGKILL:
            wait_until(lambda: not _group_alive(pid) and not any(_running(t) for t in targets), f"{name} to die", 30, 0.1)
        return targets

    @staticmethod
    def process_running(pid: int) -> bool:
        """Whether ``pid`` or a process of its group still runs (zombies do not count)."""
        return _running(pid) or bool({p for p in _group_pids(pid) if _running(p)})

    def alive(self, name: str) -> bool:
        pid = self.state["pids"].get(name)
        return bool(pid) and _group_alive(pid)

    def _worker_ready(self, name: str, since: int) -> bool:
        try:
            with open(self.log_path(name), "rb") as f:
                f.seek(since)
                return b" ready." in f.read()
        except FileNotFoundError:
            return False

    def health(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=3) as r:  # noqa: S310 (loopback)
                return dict(json.loads(r.read()))
        except Exception:  # noqa: BLE001 (not up yet)
            return None

    def _execution_api_answers(self) -> bool:
        """The execution API (what task runners call) answers: its first request builds its versioned app, which
        took over a minute on a busy machine; the tasks' own requests would time out on it."""
        try:
            with urllib.request.urlopen(f"{self.url}/execution/health", timeout=120) as r:  # noqa: S310 (loopback)
                return bool(r.status == 200)
        except Exception:  # noqa: BLE001 (not up yet)
            return False

    def _wait_ready(self, names: Sequence[str], timeout: float, offsets: Mapping[str, int] | None = None,
                    since: float | None = None) -> None:
        """Wait (bounded) until each component answers: the API server's health names the scheduler, the
        triggerer and the DAG processor healthy (``since``: with a heartbeat since then, not a dead one's still
        recent heartbeat); a worker has said ``ready`` (connected to the broker) after ``offsets`` in its log."""
        offsets = offsets or {}
        pids = self.state["pids"]

        def ready() -> bool:
            for name in names:
                if not _group_alive(pids[name]):
                    raise SandboxError(f"{name} exited during start-up:\n{self.tail(name)}")
            health = self.health() if set(names) - set(self.workers) else {}
            for name in names:
                if name.startswith(WORKER_PREFIX):
                    if not self._worker_ready(name, offsets.get(name, 0)):
                        return False
                elif health is None or name == "api-server" and not self._execution_api_answers():
                    return False
                elif name != "api-server":
                    key = name.replace("-", "_")
                    if (health.get(key) or {}).get("status") != "healthy":
                        return False
                    if since is not None and not _heartbeat_since(health[key].get(f"latest_{key}_heartbeat"), since):
                        return False
            return True

        try:
            wait_until(ready, f"{', '.join(names)} to be ready", timeout, 0.5)
        except TimeoutError as e:
            raise SandboxError(f"{e}\n" + "\n".join(f"--- {n}\n{self.tail(n)}" for n in names)) from None

    # -- up / down -------------------------------------------------------------------------------

    def up(self, *, workers: int = 2, kafka_dir: str | os.PathLike[str] | None = None,
           object_store_dir: str | os.PathLike[str] | None = None, brokers: int = 5, racks: int = 3,
           api_port: int | None = None, dags: str | os.PathLike[str] | None = EXAMPLE_DAGS,
           heartbeat_timeout_s: int = 30, env: Mapping[str, str] | None = None,
           timeout: float = 300.0) -> dict[str, Any]:
        """Start everything (see the module docstring); return :meth:`info` once every part is ready.

        ``kafka_dir`` / ``object_store_dir``: use the Kafka sandbox / S3Proxy already running there (left running by
        :meth:`down`); otherwise the stack starts its own in ``DIR/kafka`` and ``DIR/objectstore``. ``dags``: the
        folder whose ``*.py`` files are deployed (the example DAGs; ``None``: none). ``env``: the deployment's own
        environment variables, in every component's environment (e.g. ``AKR_WATCH_DWELL_S`` for the healing DAGs'
        watch; kept in ``stack.json``: no secrets)."""
        if self.state_path.exists() and any(_group_alive(p) for p in self.state.get("pids", {}).values()):
            raise SandboxError(f"a stack already runs in {self.dir}: `stack down` first")
        started = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        for old in ("logs", "dags", "airflow", "redis", "triggerer", *(f"{WORKER_PREFIX}{i}" for i in range(1, 10))):
            shutil.rmtree(self.dir / old, ignore_errors=True)
        from cryptography.fernet import Fernet

        write_private(self.dir / SECRETS_FILE, json.dumps({**{k: secrets.token_urlsafe(24) for k in
                                                              ("postgres", "redis", "jwt", "api")},
                                                           "fernet": Fernet.generate_key().decode()}) + "\n")
        pg_port, redis_port, free_api, trigger_logs, worker_logs = free_ports(5)
        names = [f"{WORKER_PREFIX}{i}" for i in range(1, workers + 1)]
        state: dict[str, Any] = {
            "ports": {"postgres": pg_port, "redis": redis_port, "api": api_port or free_api,
                      "trigger_logs": trigger_logs, "worker_logs": worker_logs},
            "pids": {}, "heartbeat_timeout_s": heartbeat_timeout_s,
            "kafka_dir": str(Path(kafka_dir).resolve()) if kafka_dir else str(self.dir / "kafka"),
            "own_kafka": kafka_dir is None,
            "object_store_dir": str(Path(object_store_dir).resolve()) if object_store_dir else str(self.dir / "objectstore"),
            "own_object_store": object_store_dir is None,
            "postgres_dir": None, "workers": names, "env": dict(env or {}),
        }
        self._save(state)
        (self.dir / "logs").mkdir()
        took: dict[str, float] = {}

        def timed(what: str, fn: Callable[[], Any]) -> Callable[[], Any]:
            def run() -> Any:
                t = time.monotonic()
                try:
                    return fn()
                finally:
                    took[what] = round(time.monotonic() - t, 1)
            return run

        try:
            # the backing services at once: PostgreSQL, Redis, Kafka, S3Proxy
            with ThreadPoolExecutor(4) as pool:
                jobs = [pool.submit(timed("postgres", lambda: self._postgres_up(state))),
                        pool.submit(timed("redis", lambda: self._redis_up(state)))]
                if state["own_kafka"]:
                    jobs.append(pool.submit(timed("kafka", lambda: Sandbox(state["kafka_dir"]).up(
                        brokers=brokers, racks=racks, sasl=True))))
                if state["own_object_store"]:
                    jobs.append(pool.submit(timed("object store", lambda: ObjectStoreSandbox(
                        state["object_store_dir"]).up())))
                for job in jobs:
                    job.result()
            self._save(state)
            # the folders: the DAG processor's DAGs, each worker's and the triggerer's own
            for folder in ("dags", "airflow", *(f"{n}/{d}" for n in names for d in ("cwd", "tmp", "airflow-home", "dags")),
                           *(f"triggerer/{d}" for d in ("cwd", "tmp", "airflow-home"))):
                (self.dir / folder).mkdir(parents=True, exist_ok=True)
            if dags is not None:
                for path in sorted(Path(dags).glob("*.py")):
                    for folder in self.dags_folders():
                        shutil.copyfile(path, folder / path.name)
            t = time.monotonic()
            with open(self.log_path("db-migrate"), "ab") as out:
                proc = subprocess.run([airflow_bin(), "db", "migrate"], env=self.env(), stdout=out,
                                      stderr=subprocess.STDOUT, timeout=timeout)
            if proc.returncode != 0:
                raise SandboxError(f"airflow db migrate exited {proc.returncode}:\n{self.tail('db-migrate')}")
            took["db migrate"] = round(time.monotonic() - t, 1)
            t = time.monotonic()
            components = [*COMPONENTS, *names]
            for name in components:
                own = self.dir / name
                cwd = own / "cwd" if (own / "cwd").is_dir() else self.dir
                state["pids"][name] = self._spawn(name, self._airflow_command(name), env=self.env(name), cwd=cwd)
                self._save(state)
            self._wait_ready(components, timeout)
            took["airflow"] = round(time.monotonic() - t, 1)
        except BaseException:
            self.down()
            raise
        state["started_in_s"] = round(time.monotonic() - started, 1)
        state["took_s"] = took
        self._save(state)
        log.info("stack ready in %.1f s (%s); the UI is at %s", state["started_in_s"], took, self.url)
        return self.info()

    def info(self) -> dict[str, Any]:
        """Public description (no secrets), as ``stack up`` prints it."""
        state = self.state
        return {"ui": self.url, "dir": str(self.dir), "workers": state["workers"],
                "postgres": f"127.0.0.1:{state['ports']['postgres']}", "redis": f"127.0.0.1:{state['ports']['redis']}",
                "kafka": Sandbox.load(state["kafka_dir"]).bootstrap_servers,
                "object_store": self.object_store.endpoint_url, "bucket": self.object_store.bucket,
                "pids": state["pids"], "started_in_s": state.get("started_in_s"), "took_s": state.get("took_s")}

    def status(self) -> dict[str, Any]:
        state = self.state
        out = {name: _group_alive(pid) for name, pid in state["pids"].items()}
        health = self.health()
        return {"ui": self.url, "alive": out, "health": health}

    def down(self, timeout: float = 30.0) -> dict[str, str]:
        """Stop every part (idempotent); how long each took. Kafka and S3Proxy only if the stack started them."""
        try:
            state = self.state
        except SandboxError:
            return {}
        pids: dict[str, int] = dict(state.get("pids", {}))
        stopped: dict[str, str] = {}
        airflow = [n for n in pids if n not in ("postgres", "redis")]
        with ThreadPoolExecutor(max(1, len(airflow))) as pool:
            for name, how in zip(airflow, pool.map(lambda n: stop_group(pids[n], timeout), airflow), strict=True):
                stopped[name] = how
        for name, sig in BACKING_SERVICES.items():
            if name in pids:
                stopped[name] = stop_group(pids[name], timeout, sig)
        if state.get("own_kafka"):
            with contextlib.suppress(SandboxError):
                Sandbox(state["kafka_dir"]).down()
        if state.get("own_object_store"):
            ObjectStoreSandbox(state["object_store_dir"]).down()
        if state.get("postgres_dir") and state["postgres_dir"] != str(self.dir / "postgres"):
            shutil.rmtree(state["postgres_dir"], ignore_errors=True)
        state["pids"] = {}
        self._save(state)
        return stopped

    # -- PostgreSQL and Redis --------------------------------------------------------------------------

    def _postgres_up(self, state: dict[str, Any], timeout: float = 60.0) -> None:
        user = None
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root: as its own system user, in a folder it owns
            user = "postgres"
            try:
                account = pwd.getpwnam(user)
            except KeyError:
                raise SandboxError("running as root, PostgreSQL needs the 'postgres' system user (Debian's "
                                   "postgresql package creates it: make stack-deps)") from None
            base = Path(tempfile.mkdtemp(prefix="akr-stack-postgres-"))
            os.chown(base, account.pw_uid, account.pw_gid)
        else:
            base = self.dir / "postgres"
            shutil.rmtree(base, ignore_errors=True)
            base.mkdir(parents=True)
        state["postgres_dir"] = str(base)
        self._save(state)
        data = base / "data"
        pwfile = base / "pw"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self._secrets()["postgres"] + "\n")
        if user:
            account = pwd.getpwnam(user)
            os.chown(pwfile, account.pw_uid, account.pw_gid)
        with open(self.log_path("postgres"), "ab") as out:
            proc = subprocess.run([_pg_bin("initdb"), "-D", str(data), "-U", "airflow", "--pwfile", str(pwfile),
                                   "--auth=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync"],
                                  stdout=out, stderr=subprocess.STDOUT, cwd=base, user=user, timeout=120,
                                  env={"PATH": os.environ.get("PATH", ""), "LANG": "C"})
        pwfile.unlink()
        if proc.returncode != 0:
            raise SandboxError(f"initdb exited {proc.returncode}:\n{self.tail('postgres')}")
        self._postgres_start(state, timeout, create=True)

    def _postgres_start(self, state: dict[str, Any], timeout: float = 60.0, *, create: bool = False) -> None:
        """Start PostgreSQL on the cluster ``initdb`` made (``create``: then make the ``airflow`` database); wait
        until it accepts a login."""
        base = Path(state["postgres_dir"])
        user = "postgres" if os.geteuid() == 0 else None
        port = state["ports"]["postgres"]
        state["pids"]["postgres"] = self._spawn("postgres", [
            _pg_bin("postgres"), "-D", str(base / "data"), "-p", str(port), "-c", "listen_addresses=127.0.0.1",
            "-c", "unix_socket_directories=", "-c", "max_connections=200", "-c", "fsync=off",
            "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "shared_buffers=64MB"],
            cwd=base, user=user, env={"PATH": os.environ.get("PATH", ""), "LANG": "C"})
        self._save(state)
        import psycopg2

        def connects() -> bool:
            if not _group_alive(state["pids"]["postgres"]):
                raise SandboxError(f"PostgreSQL exited during start-up:\n{self.tail('postgres')}")
            try:
                conn = psycopg2.connect(host="127.0.0.1", port=port, user="airflow",
                                        dbname="postgres" if create else "airflow",
                                        password=self._secrets()["postgres"], connect_timeout=2)
            except psycopg2.OperationalError:
                return False
            if create:
                conn.autocommit = True
                with conn.cursor() as cur:
                    cur.execute("CREATE DATABASE airflow")
            conn.close()
            return True

        wait_until(connects, f"PostgreSQL on 127.0.0.1:{port}", timeout, 0.2)

    def _redis_up(self, state: dict[str, Any], timeout: float = 30.0) -> None:
        rdir = self.dir / "redis"
        rdir.mkdir(parents=True, exist_ok=True)
        port = state["ports"]["redis"]
        conf = rdir / "redis.conf"
        write_private(conf, "\n".join([
            f"port {port}", "bind 127.0.0.1", f"dir {rdir}", f"requirepass {self._secrets()['redis']}",
            'save ""', "appendonly no", "daemonize no", "protected-mode yes", "loglevel notice",
        ]) + "\n")
        self._redis_start(state, timeout)

    def _redis_start(self, state: dict[str, Any], timeout: float = 30.0) -> None:
        """Start Redis on its configuration (:meth:`_redis_up` wrote it); wait until it answers ``PING``."""
        rdir, port = self.dir / "redis", state["ports"]["redis"]
        state["pids"]["redis"] = self._spawn("redis", [_redis_bin(), str(rdir / "redis.conf")], cwd=rdir)
        self._save(state)
        import redis

        client = redis.Redis(host="127.0.0.1", port=port, password=self._secrets()["redis"], socket_timeout=2)

        def pings() -> bool:
            if not _group_alive(state["pids"]["redis"]):
                raise SandboxError(f"redis-server exited during start-up:\n{self.tail('redis')}")
            try:
                return bool(client.ping())
            except redis.exceptions.ConnectionError:
                return False

        wait_until(pings, f"Redis on 127.0.0.1:{port}", timeout, 0.1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_kafka_reassign.sandbox.stack",
                                     description="A real Airflow deployment: PostgreSQL, Redis, CeleryExecutor with "
                                                 "two workers, triggerer, API server, Kafka and S3Proxy.")
    sub = parser.add_subparsers(dest="command", required=True)
    default_dir = os.environ.get("AKR_STACK_DIR")
    for name, text in (("up", "start the stack; prints one JSON line and where the UI is"),
                       ("down", "stop every process of the stack (idempotent)"),
                       ("status", "JSON: each process alive or not, and Airflow's health"),
                       ("restart", "stop one part (postgres, redis, or an Airflow component) and start it again"),
                       ("revive", "start again every Airflow component that has exited (as a process supervisor "
                                  "would, e.g. after the database was down)")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--dir", default=default_dir, required=default_dir is None,
                       help="the stack's folder (default: $AKR_STACK_DIR)")
        if name == "up":
            p.add_argument("--port", type=int, help="the API server's (UI's) port (default: a free one)")
            p.add_argument("--kafka-dir", help="use the Kafka sandbox already running there")
            p.add_argument("--object-store-dir", help="use the S3Proxy already running there")
            p.add_argument("--timeout", type=float, default=300.0, help="bound on each readiness wait, s (300)")
        if name == "restart":
            p.add_argument("name", help="postgres, redis, scheduler, triggerer, dag-processor, api-server or "
                                        "stack-worker-N")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="stack: %(message)s")
    stack = Stack(args.dir)
    try:
        if args.command == "up":
            info = stack.up(api_port=args.port, kafka_dir=args.kafka_dir, object_store_dir=args.object_store_dir,
                            timeout=args.timeout)
            print(json.dumps(info), flush=True)
            print(f"\nThe Airflow UI is at {info['ui']} (workers {', '.join(info['workers'])}; "
                  f"stop with: python -m airflow_kafka_reassign.sandbox.stack down --dir {stack.dir})",
                  file=sys.stderr, flush=True)
        elif args.command == "down":
            for name, how in stack.down().items():
                print(f"stack: {name} stopped in {how}", file=sys.stderr)
        elif args.command == "restart":
            print(f"stack: {args.name} down for {stack.restart(args.name)} s", file=sys.stderr)
        elif args.command == "revive":
            print(f"stack: started again: {', '.join(stack.revive()) or 'nothing (all running)'}", file=sys.stderr)
        else:
            print(json.dumps(stack.status()), flush=True)
    except SandboxError as e:
        logging.getLogger(__name__).error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
