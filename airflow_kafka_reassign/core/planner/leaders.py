"""The global leader fix-up: balance preferred leaders by reordering replica lists only.

After the per-topic steps every partition keeps its preferred leader (the first replica)
unless that replica moved. This step makes the brokers' preferred-leader counts fall in a band
``[lo, lo + spread]`` (``spread`` = 2 by default) with the fewest leader changes, without
moving any data: it swaps a follower to the front of a replica list.

The band is the one, among those containing the average, that needs the fewest changes from
the original leaders (:func:`fewest_leader_changes`): leaders the per-topic steps already
changed can be redirected at no cost, so the original counts are what the changes are paid
against. Transfers go from a broker above the band
to a broker below it that is a replica of the same partition. Partitions whose leader already
changed (their leader replica moved) are used first, and a transfer back to the original
leader first of all: those cost no additional leader change. Only then are untouched
partitions reordered, one change each. When no direct transfer exists the step relaxes to
"above the band -> any broker with room" and "any broker above the floor -> below the band".

Scanning is amortised: the set of brokers below the band only shrinks, so a partition that
offers no receiver now never will, and each broker's list is walked once per pass.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LeaderBand:
    lo: int
    hi: int
    changes: int


def leader_band(counts: Mapping[int, int], brokers: Sequence[int], removed_leaders: int = 0, spread: int = 2) -> LeaderBand:
    """The band ``[lo, lo + spread]`` containing the average that needs the fewest changes.

    ``counts``: preferred leaders per live broker; ``removed_leaders``: leaders on brokers
    that must lose all of them. A change moves one leadership from one broker to another, so
    a band needs at least ``max(excess above it, deficit below it)`` changes; removed brokers'
    leaders are all excess.
    """
    nb = len(brokers)
    total = sum(counts.get(b, 0) for b in brokers) + removed_leaders
    best: LeaderBand | None = None
    for lo in range(max(0, -(-total // nb) - spread), total // nb + 1):
        hi = lo + spread
        if not (lo * nb <= total <= hi * nb):
            continue
        excess = removed_leaders + sum(max(0, counts.get(b, 0) - hi) for b in brokers)
        deficit = sum(max(0, lo - counts.get(b, 0)) for b in brokers)
        cand = LeaderBand(lo, hi, max(excess, deficit))
        if best is None or cand.changes < best.changes:
            best = cand
    assert best is not None
    return best


def fewest_leader_changes(
    leaders: Mapping[int, int], brokers: Sequence[int], removed: Sequence[int] = (), spread: int = 2
) -> int:
    """Lower bound on the leader changes any plan needs for leader max-min <= ``spread``.

    Each change takes one preferred leadership from one broker and gives it to another, so it
    lowers the excess above a band by at most one and the deficit below it by at most one;
    whichever is larger is needed, for the best band (removed brokers' leaderships are
    excess). Leaderships that cannot move (partitions left alone) only make more necessary.
    It does not count leader changes that replica moves force (a preferred leader's replica
    that has to move because no follower of that broker may go where replicas are needed),
    so a plan that also rebalances replicas may need more.
    """
    removed_leaders = sum(leaders.get(b, 0) for b in removed)
    return leader_band(leaders, brokers, removed_leaders, spread).changes


def _max_flow(supply: dict[int, int], demand: dict[int, int], cap: dict[int, dict[int, int]]) -> dict[tuple[int, int], int]:
    """Max flow from suppliers to demanders over capacitated edges (Edmonds-Karp on a tiny
    broker graph); returns the flow per edge (a, b)."""
    src, dst = -1, -2
    res: dict[int, dict[int, int]] = {src: {}, dst: {}}

    def add(u: int, v: int, c: int) -> None:
        res.setdefault(u, {})
        res.setdefault(v, {})
        res[u][v] = res[u].get(v, 0) + c
        res[v].setdefault(u, 0)

    for a in sorted(supply):
        add(src, a, supply[a])
    for b in sorted(demand):
        add(-3 - b, dst, demand[b])
    for a in sorted(cap):
        for b in sorted(cap[a]):
            if cap[a][b] > 0:
                add(a, -3 - b, cap[a][b])
    while True:
        parent: dict[int, int] = {src: src}
        queue = deque([src])
        while queue and dst not in parent:
            u = queue.popleft()
            for v, c in res[u].items():
                if c > 0 and v not in parent:
                    parent[v] = u
                    queue.append(v)
        if dst not in parent:
            break
        bottleneck = None
        v = dst
        while v != src:
            u = parent[v]
            bottleneck = res[u][v] if bottleneck is None else min(bottleneck, res[u][v])
            v = u
        assert bottleneck is not None
        v = dst
        while v != src:
            u = parent[v]
            res[u][v] -= bottleneck
            res[v][u] += bottleneck
            v = u
    flow: dict[tuple[int, int], int] = {}
    for a in cap:
        for b, c in cap[a].items():
            used = c - res.get(a, {}).get(-3 - b, c) if c > 0 else 0
            if used > 0:
                flow[(a, b)] = used
    return flow


def _planned_transfers(
    replicas: Sequence[Sequence[int]],
    order: dict[int, list[int]],
    original_leaders: Sequence[int],
    counts: dict[int, int],
    led: dict[int, list[int]],
    lo: int,
    hi: int,
    live: set[int],
    transfer: Callable[[int, int, int], None],
) -> None:
    """Direct transfers from brokers above the band to brokers below it, planned as a max
    flow over "partitions led by a with a replica on b" so that a broker only some brokers
    can serve is not starved by a greedy order: first over partitions whose leader already
    changed (free), then over all."""
    # a partition counts on several edges (one per follower), so a flow may not be fully
    # realisable: recompute on what is left until nothing moves
    rounds = [True] * 5 + [False] * 5
    stuck: set[bool] = set()  # a round that changed nothing: the next one of its kind would not either
    for free_only in rounds:
        if free_only in stuck:
            continue
        supply = {a: counts[a] - hi for a in counts if counts[a] > hi}
        demand = {b: lo - counts[b] for b in counts if counts[b] < lo}
        if not supply or not demand:
            return
        buckets: dict[int, dict[int, list[int]]] = {}
        for a in supply:
            per_b: dict[int, list[int]] = {}
            for i in led[a]:
                reps = order.get(i, replicas[i])
                if reps[0] != a or (free_only and original_leaders[i] == a):
                    continue
                for b in reps[1:]:
                    if b in demand:
                        per_b.setdefault(b, []).append(i)
            buckets[a] = per_b
        cap = {a: {b: len(lst) for b, lst in per_b.items()} for a, per_b in buckets.items()}
        flow = _max_flow(supply, demand, cap)
        before = dict(counts)
        for (a, b), f in sorted(flow.items()):
            for i in buckets[a][b]:
                if f == 0 or counts[a] <= hi or counts[b] >= lo:
                    break
                reps = order.get(i, replicas[i])
                if reps[0] == a and b in reps and b in live:
                    transfer(i, a, b)
                    f -= 1
        if counts == before:
            stuck.add(free_only)


def balance_leaders(
    replicas: Sequence[Sequence[int]],
    original_leaders: Sequence[int],
    brokers: Sequence[int],
    fixed_leaders: Mapping[int, int] | None = None,
    movable: Sequence[bool] | None = None,
    *,
    spread: int = 2,
    max_rounds: int = 100,
) -> dict[int, tuple[int, ...]]:
    """Reorder replica lists so preferred leaders are balanced; returns {index: new replicas}.

    ``replicas``: every planned partition's replicas after the per-topic steps;
    ``original_leaders``: their preferred leaders before the plan; ``fixed_leaders``: leaders
    per broker of partitions that must not change (other topics, in-flight reassignments);
    ``movable[i]`` False freezes partition ``i``.
    """
    live = set(brokers)
    counts: dict[int, int] = {b: int((fixed_leaders or {}).get(b, 0)) for b in brokers}
    led: dict[int, list[int]] = {b: [] for b in brokers}
    for i, reps in enumerate(replicas):
        b = reps[0]
        if b in counts:
            counts[b] += 1
            if movable is None or movable[i]:
                led[b].append(i)
    # the band that needs the fewest changes from the ORIGINAL leaders: changes the
    # per-topic steps already made can be redirected for free
    original_counts: dict[int, int] = {b: int((fixed_leaders or {}).get(b, 0)) for b in brokers}
    gone = 0
    for b in original_leaders:
        if b in original_counts:
            original_counts[b] += 1
        else:
            gone += 1
    band = leader_band(original_counts, brokers, gone, spread)
    lo, hi = band.lo, band.hi
    order: dict[int, list[int]] = {}

    def get(i: int) -> list[int]:
        if i not in order:
            order[i] = list(replicas[i])
        return order[i]

    def transfer(i: int, a: int, b: int) -> None:
        reps = get(i)
        j = reps.index(b)
        reps[0], reps[j] = b, a
        counts[a] -= 1
        counts[b] += 1
        led[b].append(i)

    def run(src_ok: object, dst_ok: object, free_only: bool) -> None:
        for a in sorted(brokers, key=lambda b: (-counts[b], b)):
            if not src_ok(a):  # type: ignore[operator]
                continue
            if not any(dst_ok(b) for b in brokers):  # type: ignore[operator]
                return  # no broker can take a leadership: nothing further in this pass moves
            lst = led[a]
            k = 0
            while k < len(lst) and src_ok(a):  # type: ignore[operator]
                i = lst[k]
                k += 1
                reps = order.get(i, replicas[i])
                if reps[0] != a:
                    continue
                changed = original_leaders[i] != a
                if free_only and not changed and original_leaders[i] not in reps[1:]:
                    continue
                best = None
                for b in reps[1:]:
                    if b not in live or not dst_ok(b):  # type: ignore[operator]
                        continue
                    # back to the original leader first, then free, then the most-needing broker
                    key = (b != original_leaders[i], counts[b], b)
                    if best is None or key < best[0]:
                        best = (key, b)
                if best is None:
                    continue
                b = best[1]
                if free_only and not changed and b != original_leaders[i]:
                    continue
                transfer(i, a, b)

    def above(b: int) -> bool:
        return counts[b] > hi

    def below(b: int) -> bool:
        return counts[b] < lo

    def room(b: int) -> bool:
        return counts[b] < hi

    def spare(b: int) -> bool:
        return counts[b] > lo

    _planned_transfers(replicas, order, original_leaders, counts, led, lo, hi, live, transfer)
    run(above, below, True)
    run(above, below, False)
    # two hops where no partition joins an over and an under broker (racks of one broker
    # each side, for example): above -> room, then spare -> below, until nothing moves
    for _ in range(max_rounds):
        if not any(counts[b] > hi or counts[b] < lo for b in brokers):
            break
        before = dict(counts)
        run(above, room, True)
        run(above, room, False)
        run(spare, below, True)
        run(spare, below, False)
        run(above, below, False)
        if counts == before:
            break
    return {i: tuple(reps) for i, reps in order.items() if tuple(reps) != tuple(replicas[i])}
