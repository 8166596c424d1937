"""Unit-test setup shared by every test (unit and integration).

Airflow writes its config, database and logs under ``AIRFLOW_HOME`` (``~/airflow`` when
unset), and reads it when ``airflow`` is first imported: point it at a throw-away directory
before any test module imports Airflow.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_AIRFLOW_HOME = tempfile.mkdtemp(prefix="akr-unit-airflow-home-")
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")


# -- kafka-python IO threads left running ------------------------------------------------------
# A kafka-python client that is never closed keeps its "kafka-io-*" thread retrying and logging
# for the rest of the process (and, at the end of a run, into closed streams). Each test is
# checked; the summary names the tests that left one behind.

import threading  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402

_LEAKS: list[str] = []


def _io_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("kafka-io-") and t.is_alive()}


@pytest.fixture(autouse=True)
def _kafka_io_threads_are_stopped(request: pytest.FixtureRequest):
    before = _io_threads()
    yield
    deadline = time.monotonic() + 3
    while (left := _io_threads() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        _LEAKS.append(f"{request.node.nodeid}: {sorted(t.name for t in left)}")


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    if _LEAKS:
        terminalreporter.section("kafka-python clients left open")
        for line in _LEAKS:
            terminalreporter.line(line)


# -- where the time goes (tests/timings.py) ------------------------------------------------------

def pytest_configure(config: pytest.Config) -> None:
    import timings

    config.pluginmanager.register(timings, "akr-test-times")
