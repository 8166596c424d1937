"""The stack's process handling (airflow_kafka_reassign.sandbox.stack): what it kills and stops leaves nothing running.

The stack itself (PostgreSQL, Redis, Celery workers, ...) is exercised by tests/integration/test_stack.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from airflow_kafka_reassign.sandbox import wait_until
from airflow_kafka_reassign.sandbox.stack import HOSTNAME_ENV, Stack, hostname, stop_group


def test_a_worker_names_itself_from_its_environment(monkeypatch):
    monkeypatch.setenv(HOSTNAME_ENV, "stack-worker-2")
    assert hostname() == "stack-worker-2"
    monkeypatch.delenv(HOSTNAME_ENV)
    assert hostname()  # the machine's name otherwise


def _pid_of_grandchild(path) -> int:
    return int(wait_until(lambda: path.exists() and path.read_text().strip(), "the grandchild's pid", 10, 0.05))


def test_kill_reaches_descendants_that_left_the_process_group(tmp_path):
    """A Celery worker's task runs in processes that may make their own session: kill() signals them too."""
    pidfile = tmp_path / "grandchild.pid"
    proc = subprocess.Popen(["bash", "-c", f"setsid sleep 300 & echo $! > {pidfile}; sleep 300"],
                            start_new_session=True)
    grandchild = _pid_of_grandchild(pidfile)
    # in a session of its own, once setsid ran (the pid file is written as soon as bash forked it)
    wait_until(lambda: os.getpgid(grandchild) != proc.pid, "the grandchild's own session", 30, 0.02)
    stack = Stack(tmp_path)
    (tmp_path / "stack.json").write_text(json.dumps({"pids": {"stack-worker-1": proc.pid}}))
    killed = stack.kill("stack-worker-1", signal.SIGKILL)
    assert {proc.pid, grandchild} <= set(killed)
    proc.wait(10)
    assert not stack.process_running(proc.pid) and not stack.process_running(grandchild)


def test_stop_group_escalates_to_sigkill_and_says_so(tmp_path):
    ready = tmp_path / "ignoring"
    proc = subprocess.Popen([sys.executable, "-c", "import pathlib, signal, sys, time; "
                             "signal.signal(signal.SIGTERM, signal.SIG_IGN); pathlib.Path(sys.argv[1]).touch(); "
                             "time.sleep(300)", str(ready)], start_new_session=True)
    wait_until(ready.exists, "the child to ignore SIGTERM", 30, 0.05)
    how = stop_group(proc.pid, timeout=1)
    assert "SIGKILL after 1 s" in how
    assert proc.wait(10) is not None
