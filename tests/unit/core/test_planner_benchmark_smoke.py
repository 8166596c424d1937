"""The planner benchmark script still runs (tiny size; it prints numbers, asserts none)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_planner_core.py"


def test_benchmark_script_runs(capsys) -> None:
    spec = importlib.util.spec_from_file_location("bench_planner_core", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--brokers", "12", "--new", "2", "--full", "5000"])
    out = capsys.readouterr().out
    assert "lower bound" in out and "plan_reassignment" in out
    result = bench.run(5000, "remove-brokers", 12, 1, 3, 1)
    assert result["moves"] >= result["lower_bound"] > 0
