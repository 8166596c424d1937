"""The planner benchmark script still runs (tiny size; it prints numbers, asserts nothing about time), and a
benchmark that measured another size than it says stops without its figure (tests/benchmarks/sizes.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_planner_core.py"


def test_benchmark_script_runs(capsys, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH.parent))  # as when run as a script: its sizes.py beside it
    spec = importlib.util.spec_from_file_location("bench_planner_core", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--brokers", "12", "--new", "2", "--full", "5000"])
    out = capsys.readouterr().out
    assert "lower bound" in out and "plan_reassignment" in out
    result = bench.run(5000, "remove-brokers", 12, 1, 3, 1)
    assert result["moves"] >= result["lower_bound"] > 0


def test_bytes_in_benchmark_runs(capsys, monkeypatch) -> None:
    from airflow_kafka_reassign.core.planner import pipeline

    monkeypatch.syspath_prepend(str(BENCH.parent))
    monkeypatch.setattr(pipeline, "IngressStep", pipeline.IngressStep)  # the benchmark times its own
    path = BENCH.parent / "bench_ingress.py"
    spec = importlib.util.spec_from_file_location("bench_ingress", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["5000", "--brokers", "12"])
    out = capsys.readouterr().out
    assert "5,000 replicas" in out and "bytes-in max deviation" in out and "vs bound" in out


def test_a_benchmark_stops_without_its_figure_when_it_measured_another_size(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH.parent))
    from sizes import expect, synthetic

    assert expect("partitions", 10_000, 10_000) == 10_000 and synthetic("replicas", 1_000_002, 1_000_000) == 1_000_002
    with pytest.raises(SystemExit, match="measured 2,000 partitions in the snapshot, not the 10,000 it says"):
        expect("partitions in the snapshot", 2_000, 10_000)
    with pytest.raises(SystemExit, match="not the 1,000,000 it says"):
        synthetic("replicas", 999_999, 1_000_000)
