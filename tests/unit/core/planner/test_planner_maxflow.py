"""The quota step's max flow (core/planner/maxflow.py) against a brute force on small random graphs."""

from __future__ import annotations

import itertools
import random

from airflow_kafka_reassign.core.planner.maxflow import FlowGraph


def min_cut(n: int, edges: list[tuple[int, int, int]], s: int, t: int) -> int:
    """Max flow = min cut: the cheapest set of nodes holding s and not t (2^(n-2) sets)."""
    inner = [v for v in range(n) if v not in (s, t)]
    best = None
    for k in range(len(inner) + 1):
        for side in itertools.combinations(inner, k):
            cut_side = {s, *side}
            cost = sum(c for u, v, c in edges if u in cut_side and v not in cut_side)
            best = cost if best is None else min(best, cost)
    return best or 0


def test_max_flow_equals_the_min_cut_on_random_graphs():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(2, 7)
        edges = [(u, v, rng.randint(0, 9)) for u in range(n) for v in range(n) if u != v and rng.random() < 0.4]
        g = FlowGraph(n)
        for u, v, c in edges:
            g.add(u, v, c)
        assert g.max_flow(0, n - 1) == min_cut(n, edges, 0, n - 1), edges
