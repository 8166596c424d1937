"""Maximum flow (Dinic's algorithm) on flat arrays: the quota step's exchanges of extra replicas are a flow
problem (core/planner/quotas.py). Hand-written because no dependency of the project has one (networkx and SciPy are
not installed, and the plan job must run in the workers' environment as it is); it is small, iterative (no
recursion limit at a million edges) and tested on its own.

Example::

    >>> g = FlowGraph(4)
    >>> _ = g.add(0, 1, 3); _ = g.add(0, 2, 2); _ = g.add(1, 3, 2); _ = g.add(2, 3, 3); _ = g.add(1, 2, 1)
    >>> g.max_flow(0, 3)
    5
"""

from __future__ import annotations


class FlowGraph:
    """Dinic's max flow on flat arrays (edge ``e`` and its reverse ``e ^ 1``)."""

    def __init__(self, n: int) -> None:
        self.adj: list[list[int]] = [[] for _ in range(n)]
        self.to: list[int] = []
        self.cap: list[int] = []

    def add(self, u: int, v: int, c: int) -> int:
        e = len(self.to)
        self.to += (v, u)
        self.cap += (c, 0)
        self.adj[u].append(e)
        self.adj[v].append(e + 1)
        return e

    def max_flow(self, s: int, t: int) -> int:
        adj, to, cap = self.adj, self.to, self.cap
        n = len(adj)
        total = 0
        while True:
            level = [-1] * n
            level[s] = 0
            frontier = [s]
            while frontier and level[t] < 0:
                nxt = []
                for u in frontier:
                    for e in adj[u]:
                        v = to[e]
                        if cap[e] > 0 and level[v] < 0:
                            level[v] = level[u] + 1
                            nxt.append(v)
                frontier = nxt
            if level[t] < 0:
                return total
            it = [0] * n
            while True:  # blocking flow: iterative DFS, unit-ish augmentations
                path: list[int] = []
                u = s
                while u != t:
                    edges = adj[u]
                    i = it[u]
                    while i < len(edges):
                        e = edges[i]
                        v = to[e]
                        if cap[e] > 0 and level[v] == level[u] + 1:
                            break
                        i += 1
                    it[u] = i
                    if i == len(edges):
                        if u == s:
                            break
                        level[u] = -1  # dead end
                        e = path.pop()
                        u = to[e ^ 1]
                        it[u] += 1
                        continue
                    path.append(edges[i])
                    u = to[edges[i]]
                if u != t:
                    break
                f = min(cap[e] for e in path)
                for e in path:
                    cap[e] -= f
                    cap[e ^ 1] += f
                total += f
