"""Prototype study: the global quota step split into groups of topics. Prints numbers, asserts nothing.

Today the quota step (:func:`~airflow_kafka_reassign.core.planner.quotas.compute_quotas`)
runs on the Spark driver over every topic: 2.6 s of the plan job's 4 s of driver-only work
at 1M replicas (docs/performance.md). This study measures whether it can run per group of
topics, each group on its own (an executor task), without losing plan quality:

1. the driver computes the brokers' targets and each broker's *extra capacity* (what the
   width-1 bases leave) exactly as ``compute_quotas`` does;
2. it splits every broker's capacity between the groups in proportion to each group's
   extras, rounded so that each group's and each broker's totals stay exact (floors, then the
   remainders by a max flow of unit edges: always feasible);
3. each group hands out its extras alone, with the same steps as ``compute_quotas``
   (max-flow of saving extras, the greedy passes, the exchanges) against its capacity.

For each scenario it prints the global step's moves (the per-topic step run on its quotas)
and, per number of groups: the moves relative to the global step, the brokers' max-min after
the plan, the worst topic's max-min, the groups' summed miss of their targets (0 means the
global balance holds exactly) and the slowest group's time. Groups are consecutive topics in
name order with about equal replicas: fixed by the data, not by a task count.

    .venv/bin/python tests/benchmarks/bench_grouped_quotas.py                # 1M, 4/8/16/32 groups
    .venv/bin/python tests/benchmarks/bench_grouped_quotas.py 250000 4 16

It calls the quota step's private helpers: it is a measurement for a design decision, not
an implementation.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence

from airflow_kafka_reassign.core.planner import quotas as Q
from airflow_kafka_reassign.core.planner.goals import Scope
from airflow_kafka_reassign.core.planner.topic import plan_topic
from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicLoad, TopicParams
from airflow_kafka_reassign.core.synthetic import planner_scope, synthetic_cluster

SCENARIOS = {
    "scale-out 100+10": (dict(brokers=100, racks=3, new_brokers=10), ()),
    "decommission 10 of 100": (dict(brokers=100, racks=3), tuple(range(90, 100))),
    "skewed rebalance": (dict(brokers=100, racks=3, skew=0.6), ()),
    "scale-out, one rack": (dict(brokers=100, racks=1, new_brokers=10), ()),
    "scale-out, RF 1-4": (dict(brokers=100, racks=3, new_brokers=10, rf=(1, 2, 3, 4)), ()),
}


class Capacity:
    """Steps 1-3 of ``compute_quotas`` (width-1 quotas): shares, targets, extra capacity."""

    def __init__(self, loads: Sequence[TopicLoad], layout: BrokerLayout, fixed_load: Mapping[int, int]) -> None:
        brokers = layout.brokers
        nb = len(brokers)
        self.sizes = layout.rack_sizes()
        k = len(self.sizes)
        self.rk = [layout.rack_of[b] for b in brokers]
        fixed = [int(fixed_load.get(b, 0)) for b in brokers]
        self.shares = []
        base_rack = [0] * k
        for ld in loads:
            lo, hi = Q.rack_bounds(ld.rf_counts, self.sizes, ld.replicas)
            sh = Q.rack_shares(ld.replicas, lo, hi, self.sizes)
            self.shares.append(sh)
            for g in range(k):
                base_rack[g] += sh.base[g]
        current = Q._current_totals(loads, brokers, fixed)
        base_b = [fixed[i] + base_rack[self.rk[i]] for i in range(nb)]
        total = sum(base_b) + sum(sh.extras for sh in self.shares)
        rack_fixed = [sum(fixed[i] for i in range(nb) if self.rk[i] == g) for g in range(k)]
        tight_lo = [rack_fixed[g] + sum(self.sizes[g] * sh.base[g] + sh.extra_min[g] for sh in self.shares) for g in range(k)]
        tight_hi = [rack_fixed[g] + sum(self.sizes[g] * sh.base[g] + sh.extra_max[g] for sh in self.shares) for g in range(k)]
        rack_total = Q.integer_shares(total, tight_lo, tight_hi, self.sizes)
        self.by_rack = [[i for i in range(nb) if self.rk[i] == g] for g in range(k)]
        targets = [0] * nb
        for g, members in enumerate(self.by_rack):
            level = Q._level_targets([fixed[i] for i in members], rack_total[g], [current[i] for i in members])
            for i, t in zip(members, level, strict=True):
                targets[i] = t
        self.remaining = [targets[i] - base_b[i] for i in range(nb)]


def split(remaining: Sequence[int], extras: Sequence[int]) -> list[list[int]]:
    """``cap[G][i]``: broker ``i``'s capacity for group ``G``, rows adding up to ``extras``
    and columns to ``remaining`` (proportional, floors, remainders by a unit-edge max flow)."""
    ng, nb = len(extras), len(remaining)
    total = sum(extras)
    cap = [[remaining[i] * extras[g] // total for i in range(nb)] for g in range(ng)]
    graph = Q._FlowGraph(2 + ng + nb)
    for g in range(ng):
        graph.add(0, 2 + g, extras[g] - sum(cap[g]))
    edges = {(g, i): graph.add(2 + g, 2 + ng + i, 1) for g in range(ng) for i in range(nb)
             if remaining[i] * extras[g] % total}
    for i in range(nb):
        graph.add(2 + ng + i, 1, remaining[i] - sum(cap[g][i] for g in range(ng)))
    graph.max_flow(0, 1)
    for (g, i), e in edges.items():
        cap[g][i] += 1 - graph.cap[e]
    return cap


def group_quotas(
    loads: Sequence[TopicLoad], c: Capacity, members: Sequence[int], cap: list[int], layout: BrokerLayout
) -> tuple[dict[str, tuple[int, ...]], int]:
    """Step 4-5 of ``compute_quotas`` for one group against its capacity: (quotas, miss)."""
    brokers = layout.brokers
    nb = len(brokers)
    gl = [loads[t] for t in members]
    gs = [c.shares[t] for t in members]
    q = [[sh.base[c.rk[i]] for i in range(nb)] for sh in gs]
    left = list(cap)
    Q._max_saving_extras(gl, gs, q, left, brokers, c.rk, c.sizes)
    order = sorted(range(len(gl)), key=lambda t: (-gs[t].extras, gl[t].topic))
    for saving_only in (True, False):
        for t in order:
            if gs[t].extras:
                Q._assign_extras(gl[t], gs[t], q[t], left, brokers, c.rk, c.by_rack, saving_only=saving_only)
    base = [sum(sh.base[c.rk[i]] for sh in gs) for i in range(nb)]
    targets = [base[i] + cap[i] for i in range(nb)]
    loads_b = [targets[i] - left[i] for i in range(nb)]
    if loads_b != targets:
        Q._exchange(gl, gs, q, loads_b, targets, c.rk, brokers, 1)
    miss = sum(abs(loads_b[i] - targets[i]) for i in range(nb))
    return {ld.topic: tuple(q[t]) for t, ld in enumerate(gl)}, miss


def groups_of(loads: Sequence[TopicLoad], n_groups: int) -> list[list[int]]:
    total = sum(ld.replicas for ld in loads)
    groups: list[list[int]] = [[]]
    acc = 0
    for t, ld in enumerate(loads):
        groups[-1].append(t)
        acc += ld.replicas
        if acc >= total * len(groups) / n_groups and t < len(loads) - 1:
            groups.append([])
    return groups


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
    print(f"quota step, global vs per group of topics; {n:,} replicas per scenario, 3 racks unless said", flush=True)
    for name, (kw, removed) in SCENARIOS.items():
        scope = planner_scope(synthetic_cluster(replicas=n, seed=7, **kw), removed=removed)
        layout = scope.layout
        loads = [t.load(layout) for t in scope.topics]

        t0 = time.perf_counter()
        plan = Q.compute_quotas(loads, layout, scope.fixed_load)
        global_s = time.perf_counter() - t0
        moves, spread, worst = evaluate(scope, plan.quotas)
        print(f"{name}: {len(loads):,} topics; global step {global_s:.2f}s -> moves {moves:,}, "
              f"brokers max-min {spread}, worst topic {worst}", flush=True)
        for count in counts:
            t0 = time.perf_counter()
            c = Capacity(loads, layout, scope.fixed_load)
            groups = groups_of(loads, count)
            cap = split(c.remaining, [sum(c.shares[t].extras for t in g) for g in groups])
            driver_s = time.perf_counter() - t0
            quotas: dict[str, tuple[int, ...]] = {}
            miss, slowest = 0, 0.0
            for g, members in enumerate(groups):
                t1 = time.perf_counter()
                q, m = group_quotas(loads, c, members, cap[g], layout)
                slowest = max(slowest, time.perf_counter() - t1)
                quotas.update(q)
                miss += m
            g_moves, g_spread, g_worst = evaluate(scope, quotas)
            print(f"  {len(groups):>3} groups: moves {g_moves:,} ({g_moves / moves:.4f}x), brokers max-min {g_spread}, "
                  f"worst topic {g_worst}, targets missed {miss}; driver {driver_s:.2f}s, slowest group {slowest:.2f}s",
                  flush=True)


if __name__ == "__main__":
    main()
