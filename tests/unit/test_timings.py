"""The time table's own logic (tests/timings.py): what it prints from recorded times."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import timings  # noqa: E402


def test_the_table_names_the_slowest_test_file_and_fixture_and_the_machines_speed():
    tests = {"tests/a.py::t1": 3.0, "tests/a.py::t2": 1.0, "tests/b.py::t": 2.5}
    fixtures = [("sandbox", "session", 9.0), ("sandbox", "session", 8.0), ("tiny", "module", 0.2)]
    lines = timings.summary(tests, fixtures, 5.0, {"start": 0.21, "end": 0.55})
    assert lines[0] == "3 tests, 6 s of test time in 5 s of wall clock"
    assert "0.21 s at the start and 0.55 s at the end" in lines[1]
    def row(seconds: str, name: str) -> str:
        return f"{seconds:>9}  {name}"

    assert lines.index(row("3.0 s", "tests/a.py::t1")) < lines.index(row("2.5 s", "tests/b.py::t"))
    assert row("4.0 s", "tests/a.py") in lines and row("17.0 s", "sandbox (session) x2") in lines
    assert not [x for x in lines if "tiny" in x]  # under a second: not a fixed cost worth naming
    assert not [x for x in timings.summary(tests, fixtures, None) if "machine speed" in x]  # an old record
    assert not [x for x in lines if "xdist" in x]  # no workers, no worker table


def test_the_table_names_each_xdist_workers_test_time_and_its_end():
    lines = timings.summary({"tests/a.py::t": 1.0}, [], 1200.0, None, {"gw1": (990.4, 1150.2), "gw0": (1061.0, 1100.0)})
    at = lines.index("-- xdist workers: test time, and when the last test ended (s after the start)")
    assert lines[at + 1:] == ["   1061 s  gw0, last test ended at 1100 s", "    990 s  gw1, last test ended at 1150 s"]


def test_the_reference_loop_reports_its_best_of_three_runs_in_seconds(monkeypatch):
    """The clock is the test's (no loop of ten million steps burnt here): three runs of 0.9, 0.4 and 0.7 s give 0.4."""
    monkeypatch.setattr(timings, "_REFERENCE_STEPS", 10)
    ticks = iter([100.0, 100.9, 200.0, 200.4, 300.0, 300.7])
    monkeypatch.setattr(timings.time, "perf_counter", lambda: next(ticks))
    assert timings.reference_loop_s() == pytest.approx(0.4)
    assert next(ticks, None) is None  # exactly three runs timed


def test_the_integration_files_named_to_start_first_exist():
    """A renamed or deleted file left in FIRST would silently fall back to xdist's order."""
    import ast

    integration = Path(__file__).resolve().parents[1] / "integration"
    tree = ast.parse((integration / "conftest.py").read_text())
    first = next(ast.literal_eval(node.value) for node in ast.walk(tree)
                 if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "FIRST")
    assert len(first) == len(set(first)) >= 4
    assert [name for name in first if not (integration / name).is_file()] == []
