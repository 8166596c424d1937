"""The stack's process handling (airflow_kafka_reassign.sandbox.stack): what it kills and stops leaves nothing running;
what it restarts and revives comes back.

The stack itself (PostgreSQL, Redis, Celery workers, ...) is exercised by tests/integration/test_stack.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from airflow_kafka_reassign.sandbox import wait_until
from airflow_kafka_reassign.sandbox.processes import free_ports
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


def _stack_with_state(tmp_path, state: dict) -> Stack:
    (tmp_path / "stack.json").write_text(json.dumps(state))
    (tmp_path / "secrets.json").write_text(json.dumps({"redis": "s3cret", "postgres": "p"}))
    return Stack(tmp_path)


@pytest.mark.skipif(not shutil.which("redis-server"), reason="Debian's redis-server (make stack-deps)")
def test_restart_stops_redis_runs_while_down_and_starts_it_again_on_the_same_port(tmp_path):
    import redis

    (port,) = free_ports(1)
    stack = _stack_with_state(tmp_path, {"ports": {"redis": port}, "pids": {}})
    state = stack.state
    stack._redis_up(state)
    first = stack.state["pids"]["redis"]
    client = redis.Redis(host="127.0.0.1", port=port, password="s3cret", socket_timeout=2)
    client.set("queued", "1")
    seen_down: list[bool] = []

    inside: list[float] = []

    def while_down() -> None:
        began = time.monotonic()
        with pytest.raises(redis.exceptions.ConnectionError):
            client.ping()
        seen_down.append(not stack.process_running(first))
        inside.append(time.monotonic() - began)

    try:
        began = time.monotonic()
        took = stack.restart("redis", while_down=while_down)
        outside = time.monotonic() - began
        # the time it reports is the outage: it covers while_down and lies within the whole call (0.1 s rounding)
        assert seen_down == [True] and inside[0] - 0.05 <= took <= outside + 0.05, (inside, took, outside)
        again = stack.state["pids"]["redis"]
        assert again != first and stack.alive("redis")
        assert client.ping() and client.get("queued") is None  # same port and password, nothing persisted
    finally:
        stop_group(stack.state["pids"]["redis"], 10)


def test_restart_starts_the_service_again_when_while_down_fails(tmp_path, monkeypatch):
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    stack = _stack_with_state(tmp_path, {"ports": {}, "pids": {"redis": proc.pid}})
    started: list[int] = []
    monkeypatch.setattr(Stack, "_redis_start", lambda self, state, timeout=30.0: started.append(1))

    def broken() -> None:
        raise TimeoutError("the outage never showed")

    with pytest.raises(TimeoutError):
        stack.restart("redis", while_down=broken)
    assert started == [1]
    assert proc.wait(10) is not None


def test_revive_starts_only_the_components_that_exited(tmp_path, monkeypatch):
    dead = subprocess.Popen(["true"], start_new_session=True)
    dead.wait(10)
    live = subprocess.Popen(["sleep", "300"], start_new_session=True)
    stack = _stack_with_state(tmp_path, {"workers": ["stack-worker-1"], "pids": {
        "scheduler": dead.pid, "triggerer": live.pid, "dag-processor": live.pid, "api-server": live.pid,
        "stack-worker-1": dead.pid}})
    launched: list[list[str]] = []
    monkeypatch.setattr(Stack, "_launch", lambda self, names, timeout: launched.append(list(names)))
    try:
        assert stack.revive() == ["scheduler", "stack-worker-1"]
        assert launched == [["scheduler", "stack-worker-1"]]
    finally:
        stop_group(live.pid, 10)


def test_a_restarted_component_is_ready_only_with_a_heartbeat_of_its_own():
    from airflow_kafka_reassign.sandbox.stack import _heartbeat_since

    since = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    assert not _heartbeat_since(None, since)
    assert not _heartbeat_since("2027-01-15T07:59:58.5+00:00", since)  # the dead one's, still recent
    assert _heartbeat_since("2027-01-15T08:00:01.25+00:00", since)
    assert _heartbeat_since("2027-01-15T09:00:01+01:00", since)
