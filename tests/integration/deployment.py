"""A throw-away, real Airflow deployment for the tests: each component its own process.

A fresh metadata database (SQLite), an API server (the execution API the task runners talk to),
a scheduler (LocalExecutor), and triggerer(s), started with ``airflow ...`` commands. Used by the
deferrable-wait tests (a triggerer killed mid-wait). The production-shaped deployment (PostgreSQL,
the CeleryExecutor with two workers that share no disk) is the stack: test_stack.py.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

AIRFLOW = str(Path(sys.executable).with_name("airflow"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Airflow:
    """A throw-away Airflow deployment: metadata DB, API server, scheduler, triggerer(s), each its own process."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home, self.env = home, env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str, env: Mapping[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.Popen[bytes]:
        """``airflow *args`` as the component ``name`` (``env`` replaces the deployment's whole)."""
        out = open(self.home / f"{name}.out", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([AIRFLOW, *args], env=dict(env or self.env), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=cwd)
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(timeout=60)

    def stop_all(self) -> None:
        for name in list(self.procs):
            proc = self.procs[name]
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            if proc.poll() is None:
                self.kill(name)
            else:
                self.procs.pop(name)

    def cli(self, *args: str, timeout: float = 180) -> str:
        proc = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"airflow {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout

    def query(self, sql: str, *params: object) -> list[tuple]:
        with sqlite3.connect(self.home / "airflow.db", timeout=30) as db:
            return db.execute(sql, params).fetchall()

    def tail(self, name: str, chars: int = 3000) -> str:
        path = self.home / f"{name}.out"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""




@contextlib.contextmanager
def airflow_deployment(home: Path, extra_env: Mapping[str, str]) -> Iterator[Airflow]:
    """API server, scheduler and one triggerer (``triggerer-1``) on a fresh database in ``home``.

    ``extra_env`` goes over the defaults (LocalExecutor, 2 tasks at once, quick heartbeats)."""
    (home / "dags").mkdir(parents=True)
    port = free_port()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(32),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        # a task's calls to the execution API: 5 s by default, reached on a loaded 2-core machine (httpx ReadTimeout
        # failed check_request before it ran); Airflow 3.1.1+ reads it
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
        # the log servers on free ports: 8793/8794 by default, taken when two deployments run at once (xdist)
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        **extra_env,
    }
    env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)
    af = Airflow(home, env)
    af.cli("db", "migrate", timeout=300)
    af.start("api-server", "api-server", "--port", str(port), "--workers", "1")
    af.start("scheduler", "scheduler")
    af.start("triggerer-1", "triggerer")
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"the API server did not start:\n{af.tail('api-server')}"
            time.sleep(1)
        yield af
    finally:
        af.stop_all()
