"""The quota step per group of topics against the step over all topics: prints numbers, asserts nothing about time.

:func:`~airflow_kafka_reassign.core.planner.quotas.compute_quotas` settles the quotas per
group of consecutive topics (``group_replicas`` each; the plan job runs the groups as Spark
tasks) from two groups' worth of replicas on: the driver computes the brokers' targets and
splits each broker's room between the groups in proportion to their extras; each group hands
out its extras alone (:func:`~airflow_kafka_reassign.core.planner.quotas.solve_quota_group`).
This measures what that costs in plan quality and where the time goes, on five 1M-replica
scenarios: per group size, the moves relative to the step over all topics at once (the
per-topic step run on the quotas), the brokers' max-min after the plan, the worst topic's
max-min, how many groups ran (0: the step fell back to all topics at once), and the time on
the driver and in the slowest group.

    .venv/bin/python tests/benchmarks/bench_grouped_quotas.py                      # 1M; 4, 8, 16, 32 groups
    .venv/bin/python tests/benchmarks/bench_grouped_quotas.py 250000 4 16

Before printing, each scenario is checked (sizes.py): the cluster holds the replicas asked for
(up to RF - 1 more), the quota step's input holds all of them, and every topic gets quotas.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence

from sizes import expect, synthetic

from airflow_kafka_reassign.core.planner.goals import Scope
from airflow_kafka_reassign.core.planner.quotas import QuotaGroup, compute_quotas, solve_quota_group
from airflow_kafka_reassign.core.planner.synthetic import planner_scope, synthetic_cluster
from airflow_kafka_reassign.core.planner.topic import plan_topic
from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicParams

SCENARIOS = {
    "scale-out 100+10": (dict(brokers=100, racks=3, new_brokers=10), ()),
    "decommission 10 of 100": (dict(brokers=100, racks=3), tuple(range(90, 100))),
    "skewed rebalance": (dict(brokers=100, racks=3, skew=0.6), ()),
    "scale-out, one rack": (dict(brokers=100, racks=1, new_brokers=10), ()),
    "scale-out, RF 1-4": (dict(brokers=100, racks=3, new_brokers=10, rf=(1, 2, 3, 4)), ()),
}


def evaluate(scope: Scope, quotas: Mapping[str, Sequence[int]]) -> tuple[int, int, int]:
    """(replica moves of the per-topic step on ``quotas``, brokers' max-min after, worst topic's max-min)."""
    layout = scope.layout
    moves = sum(m.replica_moves for t in scope.topics for m in plan_topic(t, quotas[t.topic], layout, TopicParams()))
    totals = [scope.fixed_load.get(b, 0) for b in layout.brokers]
    for q in quotas.values():
        totals = [a + b for a, b in zip(totals, q, strict=True)]
    return moves, max(totals) - min(totals), max(max(q) - min(q) for q in quotas.values())


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    counts = [int(x) for x in sys.argv[2:]] or [4, 8, 16, 32]
    print(f"quota step, all topics at once vs per group of topics; {n:,} replicas per scenario, 3 racks unless said",
          flush=True)
    for name, (kw, removed) in SCENARIOS.items():
        cluster = synthetic_cluster(replicas=n, seed=7, **kw)
        synthetic("replicas generated", cluster.replica_count, n, max(kw.get("rf", (2, 3))))  # type: ignore[arg-type]
        scope = planner_scope(cluster, removed=removed)
        layout = scope.layout
        loads = [t.load(layout) for t in scope.topics]
        expect("replicas in the quota step's input", sum(ld.replicas for ld in loads), cluster.replica_count)
        t0 = time.perf_counter()
        whole = compute_quotas(loads, layout, scope.fixed_load, group_replicas=0)
        whole_s = time.perf_counter() - t0
        expect("topics with quotas (all at once)", len(whole.quotas), len(loads))
        moves, spread, worst = evaluate(scope, whole.quotas)
        print(f"{name}: {len(loads):,} topics; all at once {whole_s:.2f}s -> moves {moves:,}, "
              f"brokers max-min {spread}, worst topic {worst}", flush=True)
        for count in counts:
            group_s: list[float] = []

            def timed(groups: Sequence[QuotaGroup], layout: BrokerLayout) -> list[list[tuple[int, ...]] | None]:
                out = []
                for g in groups:
                    t1 = time.perf_counter()
                    out.append(solve_quota_group(g, layout))
                    group_s.append(time.perf_counter() - t1)  # noqa: B023 (read right after the call)
                return out

            t0 = time.perf_counter()
            plan = compute_quotas(loads, layout, scope.fixed_load, group_replicas=max(1, n // count), map_groups=timed)
            total_s = time.perf_counter() - t0
            expect(f"topics with quotas ({count} groups asked)", len(plan.quotas), len(loads))
            g_moves, g_spread, g_worst = evaluate(scope, plan.quotas)
            print(f"  {plan.groups:>3} groups: moves {g_moves:,} ({g_moves / moves:.4f}x), brokers max-min {g_spread}, "
                  f"worst topic {g_worst}; driver {total_s - sum(group_s):.2f}s, slowest group "
                  f"{max(group_s, default=0.0):.2f}s", flush=True)


if __name__ == "__main__":
    main()
