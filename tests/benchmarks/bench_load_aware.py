"""Benchmark of load-aware planning (capacity document, disk step) next to count-only planning.
Prints numbers, asserts nothing about time.

Synthetic clusters with skewed, log-normal partition sizes (``sizes="skewed"``), 100 brokers in
3 racks, heterogeneous disks (:func:`synthetic_capacities`, 60% full). Per size: plan time and
peak memory with and without the capacity document, bytes moved against the bytes lower bound,
disk share spread before/after, replica-count max-min, rack violations, brokers over the cap.

By default the pure core in one process (CPU seconds and peak RSS of this process); ``--spark``
submits the plan job (``spark-submit``, ``local[2]`` by default) for both plans on the same
snapshot (written once, cached under ``$AKR_BENCH_DIR``, default /tmp/akr-bench) and prints
spark-submit wall time, the job's planning time and stages, the CPU seconds of the job's processes
(the JVM, the Python driver, the Python workers: on a shared machine, what the job itself used)
and the process tree's peak memory.
The machine's load average is printed with the figures (a shared 2-core machine).

    .venv/bin/python tests/benchmarks/bench_load_aware.py              # 1M replicas, pure core
    .venv/bin/python tests/benchmarks/bench_load_aware.py 2000000      # 2M
    .venv/bin/python tests/benchmarks/bench_load_aware.py 1000000 2000000 --spark   # spark-submit, local[2]
    .venv/bin/python tests/benchmarks/bench_load_aware.py 1000000 --spark --disk-step groups  # the disk step by groups
    .venv/bin/python tests/benchmarks/bench_load_aware.py 1000000 --spark --standalone 2  # a 2-worker standalone cluster
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from sizes import SizeMismatch, expect, synthetic

from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.synthetic import SyntheticCluster, synthetic_capacities, synthetic_cluster, to_snapshot
from airflow_kafka_reassign.core.vocabulary.capacity import BrokerCapacity, CapacityDocument

ROOT = Path(os.environ.get("AKR_BENCH_DIR", "/tmp/akr-bench"))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def capacity(cluster: SyntheticCluster, brokers: int) -> CapacityDocument:
    caps = synthetic_capacities(cluster, fill=0.6)
    expect("brokers with a capacity", len(caps), brokers)
    return CapacityDocument(brokers={b: BrokerCapacity(disk=v) for b, v in caps.items()})


def disk_line(label: str, n: int, seconds: str, memory: str, s: dict[str, Any], disk: dict[str, Any] | None) -> str:
    """One printed row from a plan's summary (``PlanResult.summary()`` / metrics.json's)."""
    text = (f"{n:>9,} replicas {label}: {seconds}, {memory}, moves {s['replica_moves']:,} (bound {s['lower_bound']:,}), "
            f"bytes {s['bytes_to_move']:,}")
    if disk is None:
        return text
    bound = s["bytes_lower_bound"]
    return (f"{text} vs bound {bound:,} = {s['bytes_to_move'] / bound if bound else 0:.4f}x, disk share mean "
            f"{disk['mean_share']:.1%}, max deviation {disk['max_deviation_before']:.1%} -> "
            f"{disk['max_deviation_after']:.1%}, over cap {len(disk['over_cap'])}")


def pure(n: int, cluster: SyntheticCluster, doc: CapacityDocument, count_only: bool) -> None:
    snapshot = to_snapshot(cluster, validate=False)
    if count_only:
        t0, c0 = time.perf_counter(), time.process_time()
        plain = plan_reassignment(snapshot, PlanRequest(use_sizes=True))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        expect("partitions planned (count-only)", plain.before.partitions, cluster.partition_count)
        print(disk_line("count-only", n, f"plan {wall:6.1f}s ({cpu:.1f}s CPU)", f"peak RSS {peak_rss_mb():,.0f} MB",
                        plain.summary(), None) + f"; {load()}", flush=True)
    t0, c0 = time.perf_counter(), time.process_time()
    result = plan_reassignment(snapshot, PlanRequest(capacity=doc))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    expect("partitions planned (load-aware)", result.before.partitions, cluster.partition_count)
    d = result.disk
    if d is None:
        raise SizeMismatch("benchmark: the load-aware plan returned no disk report: no figure printed")
    disk = {"mean_share": d.mean_share, "max_deviation_before": d.max_deviation_before,
            "max_deviation_after": d.max_deviation_after, "over_cap": d.over_cap()}
    print(disk_line("load-aware", n, f"plan {wall:6.1f}s ({cpu:.1f}s CPU)", f"peak RSS {peak_rss_mb():,.0f} MB",
                    result.summary(), disk)
          + f"; replica max-min {result.before.replica_max_min} -> {result.after.replica_max_min}, "
          f"rack violations {result.after.rack_violations}, RF changes {result.after.rf_changes}, "
          f"warnings {len(result.warnings)}; {load()}", flush=True)


def spark(
    n: int, cluster: SyntheticCluster, doc: CapacityDocument, seed: int, master: str, count_only: bool, disk_step: str,
    workers: tuple[int, ...] = (), options: tuple[str, ...] = (),
) -> None:
    from bench_spark_plan import check_size, run_plan

    from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot

    snap = ROOT / f"snap-{n}-s{seed}-skewed"
    if not (snap / "snapshot.json").is_file():
        write_snapshot(to_snapshot(cluster, validate=False), snap)
    requests = [("count-only", json.dumps({"use_sizes": True}))] if count_only else []
    requests.append(("load-aware", PlanRequest(capacity=doc).model_dump_json()))
    for label, request in requests:
        with tempfile.TemporaryDirectory(prefix="akr-bench-load-") as tmp:
            r = run_plan(snap, master, Path(tmp) / "plan", request_json=request, extra=("--disk-step", disk_step),
                         workers=workers, options=options)
            digest = plan_digest(Path(tmp) / "plan")
        check_size(n, snap, r)
        m = r["metrics"]
        job, after = m["job"], m["after"]
        stages = " ".join(f"{k} {v:.1f}" for k, v in job["stages_s"].items())
        disk = m.get("disk")
        if disk is not None:
            from airflow_kafka_reassign.core.planner.goals import DiskReport

            report = DiskReport.model_validate(disk)
            disk = {"mean_share": report.mean_share, "max_deviation_before": report.max_deviation_before,
                    "max_deviation_after": report.max_deviation_after, "over_cap": report.over_cap()}
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in r["cpu_s"].items())
        for line in r["output"].splitlines():
            # the disk step by groups: its rounds; the disk stage's wall and the driver's CPU in it
            if line.startswith(("[plan_job]   disk", "[plan_job] disk ")):
                print(f"    {line}")
        if job.get("disk_step"):
            rounds = f", {job['disk_rounds']} rounds" if job.get("disk_rounds") else ""
            label = f"{label} ({job['disk_step']} disk step{rounds})"
        print(disk_line(f"{label} {master}", n, f"spark-submit {r['wall_s']:6.1f}s, planning {job['planning_s']:.1f}s "
                        f"[{stages}], CPU s [{cpu}]", f"peak {r['peak_mb']:,.0f} MB (process tree)", m["summary"], disk)
              + f"; replica max-min {m['before']['replica_max_min']} -> {after['replica_max_min']}, "
              f"rack violations {after['rack_violations']}, RF changes {after['rf_changes']}, plan files {digest}; {load()}",
              flush=True)


def plan_digest(plan: Path) -> str:
    """A digest of the plan folder's files but metrics.json (which holds the job's timings): the same
    plan, to the byte, gives the same digest."""
    digest = hashlib.sha256()
    for f in sorted(x for x in plan.rglob("*") if x.is_file() and x.name != "metrics.json"):
        digest.update(f.relative_to(plan).as_posix().encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("replicas", type=int, nargs="*", default=[1_000_000])
    ap.add_argument("--brokers", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-count-only", action="store_true", help="skip the count-only plan")
    ap.add_argument("--spark", action="store_true", help="plan with spark-submit (the plan job) instead of in-process")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--standalone", type=int, metavar="WORKERS",
                    help="with --spark: on a Spark standalone cluster of this many 1-core workers started here "
                         "(standalone.py); their executors' CPU and memory count with the job's")
    ap.add_argument("--disk-step", choices=("serial", "groups"), default="serial",
                    help="with --spark: the plan job's disk step (serial on the driver, or by groups on the executors)")
    args = ap.parse_args()
    if args.spark and args.standalone:
        from standalone import standalone

        with standalone(workers=args.standalone, cores=1, memory="4g") as (url, pids):
            args.master = url
            run_sizes(args, tuple(pids), ("--executor-memory", "3g"))
    else:
        run_sizes(args)


def run_sizes(args: argparse.Namespace, workers: tuple[int, ...] = (), options: tuple[str, ...] = ()) -> None:
    for n in args.replicas:
        cluster = synthetic_cluster(brokers=args.brokers, racks=3, replicas=n, sizes="skewed", seed=args.seed)
        synthetic("replicas in the cluster", cluster.replica_count, n)
        doc = capacity(cluster, args.brokers)
        if args.spark:
            spark(n, cluster, doc, args.seed, args.master, not args.no_count_only, args.disk_step, workers, options)
        else:
            pure(n, cluster, doc, not args.no_count_only)


if __name__ == "__main__":
    main()
