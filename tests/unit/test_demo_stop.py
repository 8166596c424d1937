"""``make ui-stop``: the process group of ``airflow standalone`` is stopped by escalation (no real Airflow
here: a process group that records which signal stopped it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_kafka_reassign.demo import _group_alive, _stop_group

CHILD = """import signal, sys, time
out = sys.argv[1]
def stop(name):
    def handler(*_):
        open(out, "a").write(name)
        sys.exit(0)
    return handler
signal.signal(signal.SIGINT, {sigint})
signal.signal(signal.SIGTERM, stop("TERM"))
print("up", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize(("sigint", "stopped_by"), [
    ("signal.SIG_IGN", "TERM"),  # a component that ignores SIGINT: SIGTERM follows
    ('stop("INT")', "INT"),      # one that stops on SIGINT gets nothing more
])
def test_the_group_is_stopped_by_escalation(tmp_path, sigint, stopped_by):
    record = tmp_path / "signals"
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(sigint=sigint), str(record)],
                            start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"  # its handlers are set
    _stop_group(proc.pid, timeout=3)
    assert not _group_alive(proc.pid)
    assert record.read_text() == stopped_by


LEADER = """import signal, subprocess, sys, time
out = sys.argv[1]
component = subprocess.Popen([sys.executable, "-c", {component!r}, out], stdout=subprocess.PIPE, text=True)
assert component.stdout.readline().strip() == "ready"  # its handlers are set
signal.signal(signal.SIGINT, {sigint})
def stop(*_):  # airflow standalone's Ctrl-C path: SIGTERM to each component, wait for it
    component.terminate()
    component.wait()
    open(out, "a").write(" leader-stopped")
    sys.exit(0)
if {sigint} is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
print("up", flush=True)
time.sleep(600)
"""
COMPONENT = """import signal, sys, time
def stop(name):
    def handler(*_):
        open(sys.argv[1], "a").write(name)
        sys.exit(0)
    return handler
signal.signal(signal.SIGINT, stop("component-INT"))
signal.signal(signal.SIGTERM, stop("component-TERM"))
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("sigint", ["signal.default_int_handler", "signal.SIG_IGN"])
def test_standalone_and_its_components_stop_by_their_own_handlers(tmp_path, sigint):
    """The leader's Ctrl-C path (SIGINT), or, when it ignores SIGINT (started by a script), the same done for it:
    each component gets one SIGTERM, and nothing is forced."""
    record = tmp_path / "signals"
    proc = subprocess.Popen([sys.executable, "-c", LEADER.format(component=COMPONENT, sigint=sigint), str(record)],
                            start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"  # the component's handlers are set
    stopped = _stop_group(proc.pid, timeout=20)
    assert not _group_alive(proc.pid)
    assert record.read_text() == "component-TERM leader-stopped"
    assert stopped.forced == []
