"""Benchmark of the bytes-in step (core/planner/ingress.py) at scale. Prints numbers, asserts nothing about time.

Synthetic clusters with skewed, log-normal partition sizes (``sizes="skewed"``), log-normal bytes-in
rates with hot topics (:func:`synthetic_rates`), 100 brokers in 3 racks, heterogeneous disks
(:func:`synthetic_capacities`, 60% full) and heterogeneous ``network_in`` (:func:`synthetic_network_in`,
50% busy: a broker's disk class times 0.8-1.25): a disk-balanced cluster whose bytes in is not.
Per size, the pure planner in one process with the default goals (disk band 2 points, cap 85%,
bytes-in band 5 points): plan time and the bytes-in step's own time, bytes-in max deviation from
the mean share (before the plan, after the disk step, after the plan), disk max deviation after,
bytes moved against the bytes lower bound (and, ``--disk-only``, the same plan without ``network_in``),
replica-count max-min, rack violations, RF changes, brokers over the cap, what stopped the step short.

    cd tests/benchmarks && ../../.venv/bin/python bench_ingress.py                 # 100k and 1M
    cd tests/benchmarks && ../../.venv/bin/python bench_ingress.py 100000 1000000 2000000 --disk-only
    cd tests/benchmarks && ../../.venv/bin/python bench_ingress.py 100000 --independent   # a harsher mismatch
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from typing import Any

from sizes import SizeMismatch, expect, synthetic

from airflow_kafka_reassign.core.planner import PlanRequest, pipeline, plan_reassignment
from airflow_kafka_reassign.core.planner.ingress import IngressOutcome, IngressStep
from airflow_kafka_reassign.core.planner.synthetic import (
    synthetic_capacities,
    synthetic_cluster,
    synthetic_network_in,
    synthetic_rates,
    to_snapshot,
)
from airflow_kafka_reassign.core.vocabulary.capacity import BrokerCapacity, CapacityDocument

#: ``--independent``: network classes that do not follow the disk's.
INDEPENDENT = (1.0, 0.5, 2.0, 1.0)


class TimedStep(IngressStep):
    """The bytes-in step, timed, its outcome kept (what the benchmark reports of the step alone)."""

    runs: list[tuple[float, IngressOutcome, float]] = []

    def run(self) -> IngressOutcome:
        t0 = time.process_time()
        out = super().run()
        cap = self.goal.capacity
        mean = sum(out.before.values()) / sum(cap.values())
        dev = max(abs(out.before[b] / cap[b] - mean) for b in cap)
        TimedStep.runs.append((time.process_time() - t0, out, dev))
        return out


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def bytes_line(s: dict[str, Any]) -> str:
    bound = s["bytes_lower_bound"]
    return f"bytes moved {s['bytes_to_move']:,} vs bound {bound:,} = {s['bytes_to_move'] / bound if bound else 0:.4f}x"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("replicas", type=int, nargs="*", default=[100_000, 1_000_000])
    ap.add_argument("--brokers", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tolerance", type=float, default=0.05, help="ingress_tolerance (bytes-in band)")
    ap.add_argument("--disk-only", action="store_true", help="also plan without network_in (bytes moved for disk alone)")
    ap.add_argument("--independent", action="store_true",
                    help="network_in independent of the disk (classes 1, 0.5, 2, 1): a 2x disk may have a 0.5x network")
    args = ap.parse_args(argv)
    pipeline.IngressStep = TimedStep  # type: ignore[misc]
    for n in args.replicas:
        cluster = synthetic_cluster(brokers=args.brokers, racks=3, replicas=n, sizes="skewed", seed=args.seed)
        synthetic_rates(cluster, seed=args.seed)
        synthetic("replicas in the cluster", cluster.replica_count, n)
        disk = synthetic_capacities(cluster, fill=0.6)
        net = (synthetic_network_in(cluster, fill=0.5, classes=INDEPENDENT, disk_classes=None) if args.independent
               else synthetic_network_in(cluster, fill=0.5))
        expect("brokers with a capacity", len(disk), args.brokers)
        snapshot = to_snapshot(cluster, validate=False)
        del cluster
        if args.disk_only:
            doc = CapacityDocument(brokers={b: BrokerCapacity(disk=v) for b, v in disk.items()})
            t0 = time.perf_counter()
            plain = plan_reassignment(snapshot, PlanRequest(capacity=doc))
            print(f"{n:>9,} replicas disk only: plan {time.perf_counter() - t0:.1f}s, {bytes_line(plain.summary())}, "
                  f"moves {plain.replica_moves:,}", flush=True)
            del plain
        doc = CapacityDocument(brokers={b: BrokerCapacity(disk=v, network_in=net[b]) for b, v in disk.items()})
        TimedStep.runs.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        result = plan_reassignment(snapshot, PlanRequest(capacity=doc, ingress_tolerance=args.tolerance))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        expect("partitions planned", result.before.partitions, len(snapshot.partitions))
        expect("bytes-in step runs", len(TimedStep.runs), 1)
        step_cpu, out, dev_in = TimedStep.runs[0]
        flow, d, s = result.ingress, result.disk, result.summary()
        if flow is None or d is None:
            raise SizeMismatch("benchmark: the plan returned no bytes-in or no disk report: no figure printed")
        print(f"{n:>9,} replicas: plan {wall:.1f}s ({cpu:.1f}s CPU), bytes-in step {step_cpu:.2f}s CPU "
              f"({out.moves:,} moves, {out.swaps:,} swaps), peak RSS {peak_rss_mb():,.0f} MB; "
              f"bytes-in max deviation {flow.max_deviation(False):.1%} -> {dev_in:.1%} (disk step) -> "
              f"{flow.max_deviation(True):.1%} (mean share {flow.mean_share:.1%}, band {args.tolerance:.0%}); "
              f"disk max deviation {d.max_deviation_before:.1%} -> {d.max_deviation_after:.1%}, over cap "
              f"{len(d.over_cap())}; {bytes_line(s)}; replica max-min {result.before.replica_max_min} -> "
              f"{result.after.replica_max_min}, rack violations {result.after.rack_violations}, RF changes "
              f"{result.after.rf_changes}; stopped short: {flow.summary().get('stopped_short') or 'no'}; {load()}",
              flush=True)
        del result, snapshot


if __name__ == "__main__":
    main()
