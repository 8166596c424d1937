"""Benchmark of the pure planner core, single-threaded (no Spark): prints numbers, asserts nothing about time.

Builds synthetic clusters of 250k / 500k / 1M replicas (100 brokers in 3 racks, RF 2 and 3,
uneven topic sizes), plans a scale-out to 110 brokers, and prints per size: generation time,
global step (aggregates + quotas), per-topic step total, leader fix-up, lower bound, peak
RSS, moves, bound and ratio. The per-topic step is what the Spark job spreads over its
executors; the global step and the fix-up run on the driver.

    .venv/bin/python tests/benchmarks/bench_planner_core.py            # 250k, 500k, 1M
    .venv/bin/python tests/benchmarks/bench_planner_core.py 100000     # one size
    .venv/bin/python tests/benchmarks/bench_planner_core.py --goal remove-brokers 250000
    .venv/bin/python tests/benchmarks/bench_planner_core.py --full 1000000   # + plan_reassignment

``--full`` also times :func:`plan_reassignment` on a pydantic snapshot (what the CLI and
small clusters use: validation, metrics before/after and the PlanResult included).

Before printing, each size is checked (sizes.py): the cluster holds the replicas asked for (up
to RF - 1 more: it stops at the first partition that reaches the size) and the planner saw
every partition of it.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from sizes import expect, synthetic

from airflow_kafka_reassign.core.planner.goals import PlanRequest
from airflow_kafka_reassign.core.planner.leaders import fewest_leader_changes
from airflow_kafka_reassign.core.planner.lower_bound import replica_moves_lower_bound
from airflow_kafka_reassign.core.planner.pipeline import final_counts, fix_leaders, plan_reassignment
from airflow_kafka_reassign.core.planner.quotas import compute_quotas
from airflow_kafka_reassign.core.planner.synthetic import planner_scope, synthetic_cluster, to_snapshot
from airflow_kafka_reassign.core.planner.topic import plan_topic
from airflow_kafka_reassign.core.planner.types import TopicParams


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def spread(values: list[int]) -> int:
    return max(values) - min(values) if values else 0


def run_full(replicas: int, goal: str, brokers: int, new: int, racks: int, seed: int) -> dict[str, float]:
    """plan_reassignment end to end on a pydantic snapshot (built without validation)."""
    if goal == "add-brokers":
        cluster = synthetic_cluster(brokers=brokers, racks=racks, new_brokers=new, replicas=replicas, seed=seed)
        request = PlanRequest(goal="add-brokers")
    else:
        cluster = synthetic_cluster(brokers=brokers, racks=racks, replicas=replicas, seed=seed)
        request = PlanRequest(goal="remove-brokers", brokers=tuple(range(brokers - new, brokers)))
    t0 = time.perf_counter()
    snapshot = to_snapshot(cluster, validate=False)
    t1 = time.perf_counter()
    result = plan_reassignment(snapshot, request)
    t2 = time.perf_counter()
    synthetic("replicas planned", result.before.replicas, replicas)
    expect("partitions planned", result.before.partitions, cluster.partition_count)
    return {
        "snapshot_s": t1 - t0,
        "plan_reassignment_s": t2 - t1,
        "moves": result.replica_moves,
        "lower_bound": result.lower_bound,
        "peak_rss_mb": peak_rss_mb(),
    }


def run(replicas: int, goal: str, brokers: int, new: int, racks: int, seed: int) -> dict[str, float]:
    t0 = time.perf_counter()
    if goal == "add-brokers":
        cluster = synthetic_cluster(brokers=brokers, racks=racks, new_brokers=new, replicas=replicas, seed=seed)
        removed: tuple[int, ...] = ()
    else:
        cluster = synthetic_cluster(brokers=brokers, racks=racks, replicas=replicas, seed=seed)
        removed = tuple(range(brokers - new, brokers))
    scope = planner_scope(cluster, removed=removed)
    t1 = time.perf_counter()
    synthetic("replicas generated", cluster.replica_count, replicas)
    expect("partitions in the planner's scope", sum(len(t.partitions) for t in scope.topics), cluster.partition_count)
    layout = scope.layout
    loads = [t.load(layout) for t in scope.topics]
    t2 = time.perf_counter()
    quotas = compute_quotas(loads, layout, scope.fixed_load)
    t3 = time.perf_counter()
    params = TopicParams()
    by_topic = [plan_topic(t, quotas.quotas[t.topic], layout, params) for t in scope.topics]
    t4 = time.perf_counter()
    by_topic = fix_leaders(scope.topics, by_topic, scope, 2)
    t5 = time.perf_counter()
    moves = [m for ms in by_topic for m in ms]
    after = final_counts(scope.topics, moves, layout.brokers)
    bound = replica_moves_lower_bound(scope.topics, layout, after, fixed_load=scope.fixed_load)
    leaders: dict[int, int] = {}
    for t in scope.topics:
        for reps in t.replicas:
            leaders[reps[0]] = leaders.get(reps[0], 0) + 1
    leader_bound = fewest_leader_changes(leaders, layout.brokers, layout.removed)
    t6 = time.perf_counter()

    totals = dict.fromkeys(layout.brokers, 0)
    for counts in after.values():
        for b, c in counts.items():
            totals[b] += c
    final_leaders = dict.fromkeys(layout.brokers, 0)
    moved = {(m.topic, m.partition): m.target_replicas for m in moves}
    for t in scope.topics:
        for p, reps in zip(t.partitions, t.replicas, strict=True):
            final_leaders[moved.get((t.topic, p), reps)[0]] += 1
    worst_topic = max(
        (spread([c.get(b, 0) for b in layout.brokers]) for c in after.values()), default=0
    )
    replica_moves = sum(m.replica_moves for m in moves)
    leader_changes = sum(1 for m in moves if m.leader_changes)
    return {
        "replicas": cluster.replica_count,
        "partitions": cluster.partition_count,
        "topics": len(scope.topics),
        "generate_s": t1 - t0,
        "aggregates_s": t2 - t1,
        "global_step_s": t3 - t2,
        "per_topic_s": t4 - t3,
        "leader_fixup_s": t5 - t4,
        "bound_s": t6 - t5,
        "peak_rss_mb": peak_rss_mb(),
        "moves": replica_moves,
        "lower_bound": bound.moves,
        "ratio": replica_moves / bound.moves if bound.moves else float("nan"),
        "leader_changes": leader_changes,
        "leader_bound": leader_bound,
        "replica_max_min": spread(list(totals.values())),
        "topic_max_min": worst_topic,
        "leader_max_min": spread(list(final_leaders.values())),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, default=[250_000, 500_000, 1_000_000])
    parser.add_argument("--goal", choices=["add-brokers", "remove-brokers"], default="add-brokers")
    parser.add_argument("--brokers", type=int, default=100)
    parser.add_argument("--new", type=int, default=10, help="brokers added (or removed)")
    parser.add_argument("--racks", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--full", action="store_true", help="also time plan_reassignment on a snapshot")
    args = parser.parse_args(argv)
    print(
        f"planner core, single-threaded: goal={args.goal}, {args.brokers} brokers in {args.racks} racks, "
        f"{'+' if args.goal == 'add-brokers' else '-'}{args.new}; python {sys.version.split()[0]}"
    )
    for size in args.sizes:
        r = run(size, args.goal, args.brokers, args.new, args.racks, args.seed)
        print(
            f"{r['replicas']:>9,} replicas {r['partitions']:>8,} partitions {r['topics']:>6,} topics | "
            f"generate {r['generate_s']:6.2f}s  aggregates {r['aggregates_s']:5.2f}s  "
            f"global {r['global_step_s']:5.2f}s  per-topic {r['per_topic_s']:6.2f}s  "
            f"leaders {r['leader_fixup_s']:5.2f}s  bound {r['bound_s']:5.2f}s | "
            f"peak RSS {r['peak_rss_mb']:7.0f} MB"
        )
        print(
            f"{'':>9} moves {r['moves']:,} / lower bound {r['lower_bound']:,} = {r['ratio']:.4f}; "
            f"leader changes {r['leader_changes']:,} / fewest {r['leader_bound']:,}; "
            f"max-min replicas {r['replica_max_min']}, worst topic {r['topic_max_min']}, "
            f"leaders {r['leader_max_min']}",
            flush=True,
        )
        if args.full:
            f = run_full(size, args.goal, args.brokers, args.new, args.racks, args.seed)
            print(
                f"{'':>9} plan_reassignment: snapshot build {f['snapshot_s']:.2f}s, plan {f['plan_reassignment_s']:.2f}s "
                f"(moves {f['moves']:,}, bound {f['lower_bound']:,}), peak RSS {f['peak_rss_mb']:.0f} MB",
                flush=True,
            )


if __name__ == "__main__":
    main()
