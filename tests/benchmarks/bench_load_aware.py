"""Benchmark of load-aware planning (capacity document, disk step) next to count-only planning,
single process (the pure core: what the Spark job runs on its driver for a capacity document).
Prints numbers, asserts nothing about time.

Synthetic clusters with skewed, log-normal partition sizes (``sizes="skewed"``), 100 brokers in
3 racks, heterogeneous disks (:func:`synthetic_capacities`, 60% full). Per size: plan time and
peak RSS with and without the capacity document, bytes moved against the bytes lower bound,
disk share spread before/after, replica-count max-min, rack violations, brokers over the cap.

    .venv/bin/python tests/benchmarks/bench_load_aware.py              # 1M replicas
    .venv/bin/python tests/benchmarks/bench_load_aware.py 2000000      # 2M
"""

from __future__ import annotations

import argparse
import resource
import time

from sizes import expect, synthetic

from airflow_kafka_reassign.core.capacity import BrokerCapacity, CapacityDocument
from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.synthetic import synthetic_capacities, synthetic_cluster, to_snapshot


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("replicas", type=int, nargs="*", default=[1_000_000])
    ap.add_argument("--brokers", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-count-only", action="store_true", help="skip the count-only plan")
    args = ap.parse_args()
    for n in args.replicas:
        cluster = synthetic_cluster(brokers=args.brokers, racks=3, replicas=n, sizes="skewed", seed=args.seed)
        synthetic("replicas in the cluster", cluster.replica_count, n)
        caps = synthetic_capacities(cluster, fill=0.6)
        expect("brokers with a capacity", len(caps), args.brokers)
        snapshot = to_snapshot(cluster, validate=False)
        doc = CapacityDocument(brokers={b: BrokerCapacity(disk=v) for b, v in caps.items()})
        if not args.no_count_only:
            t0 = time.perf_counter()
            plain = plan_reassignment(snapshot, PlanRequest(use_sizes=True))
            t_plain = time.perf_counter() - t0
            expect("partitions planned (count-only)", plain.before.partitions, cluster.partition_count)
            print(f"{n:>9,} replicas count-only: plan {t_plain:6.1f}s, moves {plain.replica_moves:,} "
                  f"(bound {plain.lower_bound:,}), bytes {plain.bytes_to_move:,}, peak RSS {peak_rss_mb():,.0f} MB",
                  flush=True)
        t0 = time.perf_counter()
        result = plan_reassignment(snapshot, PlanRequest(capacity=doc))
        t_load = time.perf_counter() - t0
        expect("partitions planned (load-aware)", result.before.partitions, cluster.partition_count)
        d = result.disk
        assert d is not None
        ratio = result.bytes_ratio or 0.0
        print(f"{n:>9,} replicas load-aware: plan {t_load:6.1f}s, peak RSS {peak_rss_mb():,.0f} MB, "
              f"moves {result.replica_moves:,} (bound {result.lower_bound:,}), "
              f"bytes {result.bytes_to_move:,} vs bound {result.bytes_lower_bound:,} = {ratio:.3f}x, "
              f"disk share mean {d.mean_share:.1%}, max deviation {d.max_deviation_before:.1%} -> "
              f"{d.max_deviation_after:.1%}, over cap {len(d.over_cap())}, "
              f"replica max-min {result.before.replica_max_min} -> {result.after.replica_max_min}, "
              f"rack violations {result.after.rack_violations}, RF changes {result.after.rf_changes}, "
              f"warnings {len(result.warnings)}", flush=True)


if __name__ == "__main__":
    main()
