"""Benchmark of the plan report: prints numbers, asserts nothing about time.

Builds a synthetic cluster (100 brokers in 3 racks plus 10 new ones, RF 2 and 3, replica
sizes, 20 in-flight reassignments), plans the scale-out with the pure planner, writes the plan
directory and the snapshot directory (setup, not timed), then times ``write_report`` from the
directories, as the CLI and the operator call it, and prints its phases (wall and CPU seconds)
the peak RSS of this process, then runs the CLI
(``python -m airflow_kafka_reassign.report``) in a fresh process: wall, CPU and peak RSS.

    .venv/bin/python tests/benchmarks/bench_report.py              # 1M replicas
    .venv/bin/python tests/benchmarks/bench_report.py 250000       # another size
    .venv/bin/python tests/benchmarks/bench_report.py --keep DIR   # keep (and reuse) the directories

Before printing, the sizes are checked (sizes.py): the snapshot holds the replicas asked for
(a ``--keep`` directory of another size stops the run) and the report read every move of the plan.

Note: with ``PYTHONDONTWRITEBYTECODE=1`` every run compiles matplotlib's modules again; the
import line shows that cost separately.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = (time.perf_counter(), time.process_time())
from sizes import expect, synthetic  # noqa: E402

from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment  # noqa: E402
from airflow_kafka_reassign.core.planner.synthetic import synthetic_cluster, to_snapshot  # noqa: E402
from airflow_kafka_reassign.core.records.plan_io import read_metrics, write_plan_dir  # noqa: E402
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot  # noqa: E402
from airflow_kafka_reassign.report import view as pv  # noqa: E402
from airflow_kafka_reassign.report import write_report  # noqa: E402

IMPORT = (time.perf_counter() - T0[0], time.process_time() - T0[1])


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class Clock:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float]] = []

    def __call__(self, name: str, func, *args, **kwargs):  # type: ignore[no-untyped-def]
        w, c = time.perf_counter(), time.process_time()
        out = func(*args, **kwargs)
        self.rows.append((name, time.perf_counter() - w, time.process_time() - c))
        return out


def setup(replicas: int, root: Path) -> tuple[Path, Path]:
    plan_dir, snap_dir = root / "plan", root / "snapshot"
    if (plan_dir / "metrics.json").is_file() and (snap_dir / "snapshot.json").is_file():
        print(f"reusing {root}")
        return plan_dir, snap_dir
    t = time.perf_counter()
    cluster = synthetic_cluster(brokers=100, racks=3, new_brokers=10, replicas=replicas, sizes=True, in_flight=20, seed=1)
    snapshot = to_snapshot(cluster, validate=False)
    result = plan_reassignment(snapshot, PlanRequest(goal="add-brokers"))
    write_snapshot(snapshot, snap_dir)
    write_plan_dir(result, plan_dir, snapshot=str(snap_dir))
    print(f"setup (synthetic cluster, plan, directories; not timed below): {time.perf_counter() - t:.1f} s")
    return plan_dir, snap_dir


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("replicas", nargs="?", type=int, default=1_000_000)
    parser.add_argument("--keep", help="directory to keep the plan and snapshot in (reused when present)")
    args = parser.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        plan_dir, snap_dir = setup(args.replicas, root)
        metrics = read_metrics(plan_dir)
        clock = Clock()
        assignment = clock("read snapshot columns", pv.read_assignment, snap_dir)
        moves = clock("read plan.json", pv.read_plan_moves, plan_dir / "plan.json")
        before, _, _ = assignment.loads()
        removed, added = pv.request_brokers(metrics["request"], assignment.brokers(), before)
        view = clock("per-broker loads and matrix", pv.plan_view, assignment, moves, removed=removed, added=added)
        out = clock("write_report (all of it)", write_report, plan_dir, snap_dir, out_dir=root / "report")
        # the figures are for the size asked (a --keep directory of another size is not reused silently)
        synthetic("replicas in the snapshot", len(assignment.replicas), args.replicas)
        expect("partitions moved (plan.json)", len(moves), metrics["summary"]["partitions_moved"])
        expect("replica moves (the report's view)", view.replica_moves, metrics["summary"]["replica_moves"])
        size = sum(p.stat().st_size for p in out.parent.iterdir())
        print(f"replicas {len(assignment.replicas):,}  partitions {assignment.partition_count:,}  "
              f"brokers {len(view.brokers)}  moves {len(moves):,} partitions / {view.replica_moves:,} replicas")
        print(f"{'import (report, planner, matplotlib)':<40} {IMPORT[0]:7.2f} s wall {IMPORT[1]:7.2f} s cpu")
        for name, wall, cpu in clock.rows:
            print(f"{name:<40} {wall:7.2f} s wall {cpu:7.2f} s cpu")
        print(f"report: {out} ({size / 1e6:.1f} MB with its PNGs)")
        print(f"peak RSS of this process (setup included when not reused): {peak_rss_mb():.0f} MB")
        # the CLI in a fresh process: what a user or an operator pays, imports included
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "airflow_kafka_reassign.report", str(plan_dir), "--snapshot", str(snap_dir),
                        "--out", str(root / "report-cli")], check=True, stdout=subprocess.DEVNULL)
        child = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(f"{'CLI in a fresh process':<40} {time.perf_counter() - t:7.2f} s wall {child.ru_utime + child.ru_stime:7.2f} s cpu"
              f"  peak RSS {child.ru_maxrss / 1024:.0f} MB")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
