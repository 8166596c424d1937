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
