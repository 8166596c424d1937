"""Where the test time goes: a pytest plugin (registered by ``tests/conftest.py``) that prints, after every run,

* the slowest tests (set-up + call + tear-down),
* the time per test file,
* the fixed costs: each module- or session-scoped fixture's set-up (the sandbox's start, Airflow's ``db migrate``,
  S3Proxy, a small cluster of a test's own), with how often it ran,

and writes the same data to ``build/test-times.json`` (``make test-times`` prints it again). It works under
pytest-xdist: the fixture times travel to the controller in each report's ``user_properties``.

Nothing here asserts anything about time: the numbers are for people (the project's rule: speed goes to
benchmarks and tables, never into assertions).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from cpu_use import CpuUse, table

FIXTURE_KEY = "fixture-setup-s"
#: fixtures of these scopes are fixed costs worth naming; function-scoped ones show in their test's set-up
_FIXED_SCOPES = {"session", "package", "module", "class"}
_TOP = 15
_OUT = Path(__file__).resolve().parent.parent / "build" / "test-times.json"
#: another file for the data (``make test`` gives the unit tests, which run beside the integration tests, their own)
OUT_ENV = "AKR_TEST_TIMES"

_pending: list[tuple[str, str, float]] = []  # fixtures set up since the last report (this process)
_tests: dict[str, float] = defaultdict(float)
_fixtures: list[tuple[str, str, float]] = []
_started = time.monotonic()
_REFERENCE_STEPS = 10_000_000
_reference: dict[str, float] = {}
_workers: dict[str, tuple[float, float]] = {}  # xdist worker -> (test time, when its last report came)
_cpu: list[CpuUse] = []  # the controller's sampler (cpu_use.py)


def reference_loop_s() -> float:
    """How fast this machine runs Python right now: the best of three runs of a fixed loop, in seconds.

    Machines of the same kind ran the very same suite 2-3x slower on some days than on others (the CPU time of every
    process grew with the wall clock), so a table is only compared with another next to this figure."""
    best = float("inf")
    for _ in range(3):
        began, total = time.perf_counter(), 0
        for i in range(_REFERENCE_STEPS):
            total += i
        best = min(best, time.perf_counter() - began)
    return best


def pytest_configure(config: pytest.Config) -> None:
    # before xdist starts its workers (pytest_sessionstart), so that they and all they start carry the run's mark
    if not hasattr(config, "workerinput") and not _cpu:
        _cpu.append(CpuUse())
        _cpu[0].start()


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller (or a run without xdist)
        _reference["start"] = reference_loop_s()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Generator[None, Any, Any]:
    began = time.perf_counter()
    try:
        return (yield)
    finally:
        if fixturedef.scope in _FIXED_SCOPES:
            _pending.append((fixturedef.argname, fixturedef.scope, time.perf_counter() - began))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if _pending:
        report.user_properties.append((FIXTURE_KEY, list(_pending)))
        _pending.clear()
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _tests[report.nodeid] += report.duration
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)  # xdist's controller
    if worker:
        busy, _ = _workers.get(worker, (0.0, 0.0))
        _workers[worker] = (busy + report.duration, time.monotonic() - _started)
    for key, value in report.user_properties:
        if key == FIXTURE_KEY:
            _fixtures.extend((name, scope, float(s)) for name, scope, s in value)


def _table(title: str, rows: list[tuple[str, str]]) -> list[str]:
    return [f"-- {title}", *(f"{left:>9}  {right}" for left, right in rows)]


def summary(tests: dict[str, float], fixtures: list[tuple[str, str, float]], wall_s: float | None,
            reference: dict[str, float] | None = None,
            workers: dict[str, tuple[float, float]] | None = None) -> list[str]:
    """The printed tables, from the recorded times (also what ``make test-times`` prints)."""
    per_file: dict[str, float] = defaultdict(float)
    for nodeid, seconds in tests.items():
        per_file[nodeid.split("::", 1)[0]] += seconds
    per_fixture: dict[str, list[float]] = defaultdict(list)
    for name, scope, seconds in fixtures:
        per_fixture[f"{name} ({scope})"].append(seconds)
    total = sum(tests.values())
    head = f"{len(tests)} tests, {total:.0f} s of test time"
    if wall_s is not None:
        head += f" in {wall_s:.0f} s of wall clock"
    lines = [head]
    if reference:
        lines.append(f"machine speed: a fixed {_REFERENCE_STEPS:,}-step Python loop took "
                     + " and ".join(f"{v:.2f} s at the {k}" for k, v in reference.items())
                     + " (compare tables only beside this figure)")
    lines += _table(f"slowest {_TOP} tests (set-up + call + tear-down)",
                    [(f"{s:.1f} s", n) for n, s in sorted(tests.items(), key=lambda kv: -kv[1])[:_TOP]])
    lines += _table(f"slowest {_TOP} files",
                    [(f"{s:.1f} s", n) for n, s in sorted(per_file.items(), key=lambda kv: -kv[1])[:_TOP]])
    lines += _table("fixed costs: module/session fixtures over 1 s (total, times set up)",
                    [(f"{sum(v):.1f} s", f"{k} x{len(v)}")
                     for k, v in sorted(per_fixture.items(), key=lambda kv: -sum(kv[1])) if sum(v) >= 1.0])
    if workers:  # how evenly xdist spread the files: a worker that ends long before the others left a core idle
        lines += _table("xdist workers: test time, and when the last test ended (s after the start)",
                        [(f"{busy:.0f} s", f"{w}, last test ended at {end:.0f} s")
                         for w, (busy, end) in sorted(workers.items())])
    return lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _tests or hasattr(config, "workerinput"):  # an xdist worker: the controller prints
        return
    wall = time.monotonic() - _started
    _reference["end"] = reference_loop_s()
    terminalreporter.section("test times")
    cpu = _cpu[0].stop() if _cpu else {}
    for line in summary(_tests, _fixtures, wall, _reference, _workers) + table(cpu, wall):
        terminalreporter.line(line)
    out = Path(os.environ.get(OUT_ENV, _OUT))
    try:
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps({"wall_s": wall, "reference_loop_s": _reference, "tests": _tests,
                                    "fixtures": _fixtures, "workers": _workers, "cpu_by_kind": cpu}, indent=1))
    except OSError as exc:  # a read-only checkout (the compat check's installed copy) must not fail the run
        terminalreporter.line(f"(test times not written to {out}: {exc})")


if __name__ == "__main__":  # make test-times: the tables of the last run again
    path = Path(os.environ.get(OUT_ENV, _OUT))
    if not path.exists():
        raise SystemExit(f"{path} does not exist: run `make test` (or `make unit`) first")
    data = json.loads(path.read_text())
    lines = summary(data["tests"], [tuple(f) for f in data["fixtures"]], data.get("wall_s"), data.get("reference_loop_s"),
                    {k: tuple(v) for k, v in data.get("workers", {}).items()})
    print("\n".join(lines + table({k: tuple(v) for k, v in data.get("cpu_by_kind", {}).items()}, data.get("wall_s") or 1)))
