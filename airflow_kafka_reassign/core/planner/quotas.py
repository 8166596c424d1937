"""The global step: per-topic, per-broker replica quotas that also balance the brokers' totals.

This is the piece that coordinates the otherwise independent per-topic steps. It only needs
aggregates (replicas of each topic per broker, partitions per target RF, fixed load per
broker), so a Spark job computes its input with one ``groupBy`` and runs it on the driver.

Algorithm (``n`` = a topic's replicas after the plan, ``B`` live brokers, ``K`` racks):

1. **Rack levels.** A partition of RF ``r`` must span ``min(r, K)`` racks, so a rack holds at
   most ``min(rack size, r - min(r, K) + 1)`` of its replicas and, when ``r >= K``, at least
   one. Summed over the topic's partitions that bounds each rack's share ``[lo_g, hi_g]``.
   The rack shares are water-filled: rack ``g`` gets ``clamp(lam * size_g, lo_g, hi_g)`` with
   ``lam`` chosen so they add up to ``n``. Without binding bounds (the usual case) every
   broker's ideal is ``n / B`` and the quotas below are the familiar ``floor``/``ceil``.
2. **Base and extras.** Broker ``b`` in rack ``g`` gets ``m_g = floor(rack share / size_g)``
   replicas of the topic (its base) plus at most one *extra*; the topic has
   ``e = n - sum(bases)`` extras to hand out, within each rack's share bounds. Quotas are
   therefore ``m`` or ``m + 1``: per-topic max-min <= 1 wherever racks allow it.
3. **Broker targets.** Rack totals are water-filled over what width-1 quotas can give each
   rack (plus fixed load of partitions the plan leaves alone), then levelled within each
   rack: how many extras each broker takes over all topics (its capacity).
4. **Extras assignment.** An extra *saves a move* on a broker that already holds more than
   its base (it keeps a replica it would otherwise pass on). As many saving extras as the
   capacities allow are placed by a maximum b-matching (Dinic's max flow, warm-started
   greedily) over "topic -> broker where an extra saves a move", plus "topic -> broker that
   cannot fill its capacity with saving extras" (new brokers: they must be filled from
   somewhere, and the flow would otherwise leave extras nobody can take). Two greedy passes
   follow: extras that save a move in a rack that can still take a forced replica (one
   leaving a removed broker, or added by an RF increase), then the rest by remaining
   capacity. On the synthetic scale-outs this lands within 0.2% of the optimum of the
   quota problem (its Lagrangian bound, see :mod:`.lower_bound`).
5. **Exchanges.** What capacity could not absorb is repaired by moving one unit of a topic's
   quota from an overloaded to an underloaded broker, never breaking its rack bounds; those
   that save a move first, then free ones, then those costing one. Only if width-1 quotas
   leave the brokers' totals more than 1 apart (fixed load, racks of unequal size), and
   letting topics spread to ``max_topic_spread`` (2: the "otherwise <= 2" of the goal)
   brings them to 1, are the wider quotas used.
6. **Racks before per-topic evenness.** Racks of unequal size can force a rack's share: RF 3
   on 3 racks puts one replica of every partition in each rack, so the only broker of a rack
   holds them all. What the brokers can reach at best is the *floor* (:class:`RackBand`:
   the smallest max-min of brokers' totals whose rack totals fit the rack spread and the
   fixed load). If the quotas above stay further from it, the topics that can (RF 2 on 3
   racks, say) give up evenness across racks, as little as needed: each starts from its own
   level rack shares, and the racks' surpluses flow to the racks' deficits through the topics
   (:func:`_shift_shares`, a max flow that keeps replicas where they are first and spreads
   the shift over the topics in proportion to what each can take); those topics' rack shares
   are then fixed, still level within each rack, and steps 3 to 5 run again towards the
   water-filled rack totals. Used when it brings the brokers closer (and ``max_topic_spread``
   is above 1: 1 keeps every topic even whatever the racks). :attr:`QuotaPlan.bounded_by`
   and the warnings say what bounded the balance: the racks, the fixed load, or the per-topic
   limit.

**Per group of topics.** Steps 4 and 5 are most of the work (2.5 s of 2.7 s at a million
replicas). From two groups' worth of replicas (``GROUP_REPLICAS``, 65,536 by default) they run
per group of consecutive topics (by name, about equal replicas: fixed by the data, so plans
never depend on how many tasks run them; as many groups as fit, rounded up to a power of two
so that they share out evenly over the usual 2, 4, 8... cores): each broker's room above the bases is split between
the groups in proportion to their extras, rounded so that every group's and every broker's
total stays exact (:func:`split_capacity`), and each group hands out its extras on its own
(:func:`solve_quota_group`; the Spark job settles them in the tasks that place their topics). Measured on five 1M
scenarios (``tests/benchmarks/bench_grouped_quotas.py``): moves within 0.999-1.002x of the
step over all topics at once, brokers max-min 1, no group missing its share. If the brokers'
targets are more than 1 apart (racks of unequal size, fixed load: where wider quotas may be
needed) or a group cannot meet its share, every topic is handled at once as above.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import accumulate

from airflow_kafka_reassign.core.planner.maxflow import FlowGraph
from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicLoad

#: Replicas per group of topics when steps 4 and 5 run per group (about 0.15 s of work each):
#: a constant, so that plans never depend on how many tasks run the groups.
GROUP_REPLICAS = 65_536


@dataclass(frozen=True)
class RackShares:
    """One topic's per-rack bounds and base levels (step 1)."""

    #: Lowest / highest replicas of the topic each rack may hold (rack constraint).
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    #: Base quota of each broker of rack ``g``.
    base: tuple[int, ...]
    #: Extras rack ``g`` must / may take (each broker takes at most one).
    extra_min: tuple[int, ...]
    extra_max: tuple[int, ...]
    #: Extras the topic hands out.
    extras: int


@dataclass(frozen=True)
class QuotaPlan:
    """Quotas per topic (aligned with ``brokers``) and the brokers' total targets."""

    brokers: tuple[int, ...]
    quotas: dict[str, tuple[int, ...]]
    #: Replicas each broker should hold after the plan, fixed load included.
    broker_targets: dict[int, int]
    #: Replicas each broker holds if every topic meets its quota (== targets when feasible).
    broker_loads: dict[int, int]
    warnings: tuple[str, ...] = ()
    #: Groups of topics whose extras were handed out on their own (0: all topics at once).
    groups: int = 0
    #: With ``compute_quotas(defer_groups=True)``: the groups whose extras the caller still has
    #: to hand out, :func:`solve_quota_group` each, before placing their topics (which have no
    #: entry in ``quotas``). If any returns ``None``, ``compute_quotas(group_replicas=0)`` gives
    #: the quotas instead (every topic at once, as when a group misses here).
    pending: tuple[QuotaGroup, ...] = ()
    #: The smallest max-min of the brokers' totals the rack spread and the fixed load allow
    #: (:class:`RackBand`): what any plan reaching the goal's racks can do at best.
    floor: int = 0
    #: What kept the brokers' totals more than 1 apart: ``"racks"`` (racks of unequal size
    #: force a rack's share), ``"fixed load"`` (replicas the plan may not move), ``"topic
    #: spread"`` (the quotas stayed short of the floor with topics within ``max_topic_spread``);
    #: empty when the totals are within 1.
    bounded_by: tuple[str, ...] = ()
    #: Topics whose rack shares gave way to reach the floor (step 6).
    relaxed_topics: int = 0

    def quota_map(self, topic: str) -> dict[int, int]:
        return dict(zip(self.brokers, self.quotas[topic], strict=True))

    def spread(self, topic: str) -> int:
        q = self.quotas[topic]
        return max(q) - min(q) if q else 0


def rack_bounds(rf_counts: Mapping[int, int], rack_sizes: Sequence[int], n: int) -> tuple[list[int], list[int]]:
    """Per rack, the fewest and most replicas of a topic the rack constraint allows."""
    k_racks = len(rack_sizes)
    if k_racks <= 1:
        return [n], [n]
    must = sum(c for r, c in rf_counts.items() if r >= k_racks)
    lo = [must] * k_racks
    hi = [
        sum(c * min(size, r - min(r, k_racks) + 1) for r, c in rf_counts.items())
        for size in rack_sizes
    ]
    return lo, hi


def level_shares(n: int, lo: Sequence[int], hi: Sequence[int], sizes: Sequence[int]) -> list[Fraction]:
    """Water-fill ``n`` over groups of ``sizes``: group ``g`` gets ``clamp(lam * size_g, lo_g, hi_g)``
    with ``lam`` such that the shares add up to ``n`` (exact rational arithmetic)."""
    k = len(sizes)
    total = sum(sizes)
    if sum(lo) > n or sum(hi) < n:
        raise ValueError(f"no shares between {list(lo)} and {list(hi)} add up to {n}")
    if all(lo[g] * total <= n * sizes[g] <= hi[g] * total for g in range(k)):
        return [Fraction(n * s, total) for s in sizes]
    # f(lam) = sum(clamp(lam * size, lo, hi)) is piecewise linear and increasing: find the
    # segment between breakpoints where it reaches n, then solve it exactly.
    points = sorted({Fraction(lo[g], sizes[g]) for g in range(k)} | {Fraction(hi[g], sizes[g]) for g in range(k)})

    def clamp(lam: Fraction, g: int) -> Fraction:
        return min(max(lam * sizes[g], Fraction(lo[g])), Fraction(hi[g]))

    def f(lam: Fraction) -> Fraction:
        return sum((clamp(lam, g) for g in range(k)), Fraction(0))

    lam = prev = points[0]
    if f(prev) < n:
        for p in points[1:]:
            if f(p) >= n:
                slope = sum(sizes[g] for g in range(k) if lo[g] <= prev * sizes[g] and p * sizes[g] <= hi[g])
                lam = prev + (n - f(prev)) / slope if slope else p
                break
            prev = p
    return [clamp(lam, g) for g in range(k)]


def rack_shares(n: int, lo: Sequence[int], hi: Sequence[int], sizes: Sequence[int]) -> RackShares:
    """Step 1 and 2 for one topic: water-fill the rack shares, then bases and extras."""
    k_racks = len(sizes)
    total = sum(sizes)
    if all(lo[g] * total <= n * sizes[g] <= hi[g] * total for g in range(k_racks)):
        base = [n // total] * k_racks  # the usual case: every broker's ideal is n / B
    elif list(lo) == list(hi):
        base = [lo[g] // sizes[g] for g in range(k_racks)]  # racks fix every rack's share
    else:
        shares = level_shares(n, lo, hi, sizes)
        base = [int(shares[g] / sizes[g]) for g in range(k_racks)]  # floor: shares are >= 0
    a = [max(lo[g], sizes[g] * base[g]) for g in range(k_racks)]
    b = [min(hi[g], sizes[g] * (base[g] + 1)) for g in range(k_racks)]
    extras = n - sum(sizes[g] * base[g] for g in range(k_racks))
    return RackShares(
        lo=tuple(lo),
        hi=tuple(hi),
        base=tuple(base),
        extra_min=tuple(a[g] - sizes[g] * base[g] for g in range(k_racks)),
        extra_max=tuple(b[g] - sizes[g] * base[g] for g in range(k_racks)),
        extras=extras,
    )


def integer_shares(n: int, lo: Sequence[int], hi: Sequence[int], sizes: Sequence[int]) -> list[int]:
    """:func:`level_shares` rounded: floors, then the largest remainders take the rest."""
    shares = level_shares(n, lo, hi, sizes)
    out = [int(s) for s in shares]
    rest = n - sum(out)
    for g in sorted(range(len(sizes)), key=lambda g: (-(shares[g] - out[g]), g)):
        if rest <= 0:
            break
        if out[g] < hi[g]:
            out[g] += 1
            rest -= 1
    return out


def _level_targets(fixed: Sequence[int], total: int, current: Sequence[int]) -> list[int]:
    """Targets adding up to ``total``, as level as possible but never below a broker's fixed
    load; the brokers holding most now take the odd units (fewer moves)."""
    if not fixed:
        return []
    lo_t, hi_t = 0, max(max(fixed), total)

    def filled(t: int) -> int:
        return sum(max(t, f) for f in fixed)

    while lo_t < hi_t:  # the largest t with filled(t) <= total
        mid = (lo_t + hi_t + 1) // 2
        if filled(mid) <= total:
            lo_t = mid
        else:
            hi_t = mid - 1
    targets = [max(lo_t, f) for f in fixed]
    rest = total - sum(targets)
    room = sorted((i for i in range(len(fixed)) if targets[i] == lo_t), key=lambda i: (-current[i], i))
    for i in room[: max(0, rest)]:
        targets[i] += 1
    return targets


class RackBand:
    """Which bands of brokers' totals the racks and the fixed load allow.

    A band ``[t, t + w]`` can hold every live broker's total only if some rack totals ``R_g``
    fit together: ``R_g`` within the rack's bounds ``[rack_lo_g, rack_hi_g]`` (every partition
    spanning ``min(RF, racks)`` racks; fixed load included), within what the band lets the
    rack's brokers hold (each at least ``max(t, its fixed load)``, at most ``t + w``), and
    adding up to ``total``. Without fixed load that is also enough: inside a rack, replicas
    can be dealt out to any level totals (a partition never has more replicas in a rack than
    the rack has brokers). Each condition is monotone in ``t``, so the starts ``t`` that work
    form an interval (:meth:`starts`), and a band that works still works wider (:meth:`floor`).
    """

    def __init__(
        self,
        total: int,
        rack_lo: Sequence[int],
        rack_hi: Sequence[int],
        fixed_by_rack: Sequence[Sequence[int]],
    ) -> None:
        self.total = total
        self.lo = list(rack_lo)
        self.hi = list(rack_hi)
        self.sizes = [len(f) for f in fixed_by_rack]
        self.fixed = [sorted(f) for f in fixed_by_rack]
        self.prefix = [[0, *accumulate(f)] for f in self.fixed]
        self.fmax = max((f[-1] for f in self.fixed if f), default=0)

    def _least(self, g: int, t: int) -> int:
        """Fewest replicas rack ``g`` holds with every broker at ``max(t, fixed)``."""
        f = self.fixed[g]
        k = bisect_right(f, t)
        return k * t + self.prefix[g][-1] - self.prefix[g][k]

    def starts(self, w: int) -> tuple[int, int] | None:
        """The starts ``t`` of the bands ``[t, t + w]`` that work (an interval), or ``None``."""
        k = len(self.sizes)
        total = self.total
        # conditions that get easier as t grows: the smallest t meeting them
        t_lo = max(0, self.fmax - w, *(_ceil_div(self.lo[g], self.sizes[g]) - w for g in range(k)))

        def room(t: int) -> int:
            return sum(min(self.hi[g], self.sizes[g] * (t + w)) for g in range(k))

        if room(max(t_lo, total)) < total:
            return None
        a, b = t_lo, max(t_lo, total)
        while a < b:
            mid = (a + b) // 2
            if room(mid) >= total:
                b = mid
            else:
                a = mid + 1
        t_lo = a

        # conditions that get harder as t grows: the largest t meeting them
        def fits(t: int) -> bool:
            least = [self._least(g, t) for g in range(k)]
            return all(least[g] <= self.hi[g] for g in range(k)) and sum(
                max(self.lo[g], least[g]) for g in range(k)
            ) <= total

        if not fits(t_lo):
            return None
        a, b = t_lo, max(t_lo, total)
        while a < b:
            mid = (a + b + 1) // 2
            if fits(mid):
                a = mid
            else:
                b = mid - 1
        return t_lo, a

    def broker_ranges(self, w: int) -> list[tuple[int, int]] | None:
        """Per rack, the fewest and most replicas one of its brokers can hold in a band of
        width ``w`` that works (``None``: none works). For a band start ``t``, besides the band
        itself: the broker's rack must reach its least total with the rack's other brokers at
        the band's top, the other racks holding at most what they can leaves the broker the
        rest of ``total`` (and symmetrically for the most). Over the starts that work: exactly
        (one start after the other) up to 4,096 of them, else from the interval's ends (the
        band's edges grow with ``t``, the rest shrinks).
        """
        found = self.starts(w)
        if found is None:
            return None
        t_lo, t_hi = found
        k = len(self.sizes)

        def limits(t: int) -> tuple[list[int], list[int]]:
            """Per rack, what the rest leaves a broker at least / at most (both fall as t grows)."""
            most = [min(self.hi[g], self.sizes[g] * (t + w)) for g in range(k)]
            least = [max(self.lo[g], self._least(g, t)) for g in range(k)]
            sum_most, sum_least = sum(most), sum(least)
            low, high = [], []
            for g in range(k):
                others = self.sizes[g] - 1
                low.append(max(self.lo[g] - others * (t + w), self.total - others * (t + w) - (sum_most - most[g])))
                high.append(min(self.hi[g] - others * t, self.total - others * t - (sum_least - least[g])))
            return low, high

        if t_hi - t_lo > 4096:
            low_end, _ = limits(t_hi)
            _, high_end = limits(t_lo)
            return [(max(t_lo, low_end[g]), min(t_hi + w, high_end[g])) for g in range(k)]
        lows = [1 << 62] * k
        highs = [-1] * k
        for t in range(t_lo, t_hi + 1):
            low, high = limits(t)
            for g in range(k):
                lows[g] = min(lows[g], max(t, low[g]))
                highs[g] = max(highs[g], min(t + w, high[g]))
        return [(max(0, lows[g]), highs[g]) for g in range(k)]

    def floor(self) -> int:
        """The smallest max-min of the brokers' totals the racks and the fixed load allow
        (0 if even that is impossible: inconsistent input, nothing to report)."""
        if self.starts(self.total) is None:
            return 0
        a, b = 0, self.total
        while a < b:
            mid = (a + b) // 2
            if self.starts(mid) is not None:
                b = mid
            else:
                a = mid + 1
        return a


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _shift_shares(
    loads: Sequence[TopicLoad],
    shares: Sequence[RackShares],
    rack_total: Sequence[int],
    rack_fixed: Sequence[int],
    brokers: Sequence[int],
    rk: Sequence[int],
    sizes: Sequence[int],
) -> tuple[list[RackShares], int]:
    """Topics' rack shares shifted between racks so that the racks' totals reach
    ``rack_total``: what evenness per topic gives up where the racks force a broker's share
    (step 6 of the module doc). Returns the shares (fixed per rack for the topics that shift,
    the others as they were) and how many topics shift.

    Each topic starts at its own level shares; the racks above their total pass units to the
    racks below, through topics that may hold fewer replicas in the one and more in the other
    (a max flow: source -> rack above -> topic -> rack below -> sink, chains through other
    racks allowed). Units that keep replicas where they are go first (a topic's share lowered
    towards what the rack holds now, raised towards it), then the rest; within each tier every
    topic first takes its proportional part, so the shift spreads over the topics that can
    take it instead of piling on the first ones.
    """
    k_racks = len(sizes)
    index = {b: i for i, b in enumerate(brokers)}
    start: list[list[int]] = []
    now: list[list[int]] = []
    totals = list(rack_fixed)
    for ld, sh in zip(loads, shares, strict=True):
        s = list(sh.lo) if sh.lo == sh.hi else integer_shares(ld.replicas, sh.lo, sh.hi, sizes)
        start.append(s)
        for g in range(k_racks):
            totals[g] += s[g]
        c = [0] * k_racks
        for b, n in ld.counts.items():
            i = index.get(b)
            if i is not None:
                c[rk[i]] += n
        now.append(c)
    surplus = [totals[g] - rack_total[g] for g in range(k_racks)]
    need = sum(d for d in surplus if d > 0)
    if need == 0:
        return list(shares), 0
    rack0 = 2
    topic0 = rack0 + k_racks
    graph = FlowGraph(topic0)
    for g in range(k_racks):
        if surplus[g] > 0:
            graph.add(0, rack0 + g, surplus[g])
        elif surplus[g] < 0:
            graph.add(rack0 + g, 1, -surplus[g])
    # (edge, topic, rack, gives: the topic's share in the rack goes down), its capacity per tier
    edges: list[tuple[int, int, int, bool]] = []
    tiers: list[tuple[int, int, int]] = []
    for t, sh in enumerate(shares):
        if sh.lo == sh.hi:
            continue
        s, c = start[t], now[t]
        node = len(graph.adj)
        graph.adj.append([])
        for g in range(k_racks):
            down, up = s[g] - sh.lo[g], sh.hi[g] - s[g]
            if down > 0:
                free = max(0, min(down, s[g] - c[g]))
                edges.append((graph.add(rack0 + g, node, 0), t, g, True))
                tiers.append((free, free, down))
            if up > 0:
                free = max(0, min(up, c[g] - s[g]))
                edges.append((graph.add(node, rack0 + g, 0), t, g, False))
                tiers.append((free, up, up))
    cap = graph.cap
    given = [0] * len(edges)
    flow = 0
    for tier in range(3):
        want = [caps[tier] for caps in tiers]
        # proportional part first: a rack above (below) its total lets each topic give (take)
        # its share of the surplus (deficit) in proportion to what it can
        room_out = [0] * k_racks
        room_in = [0] * k_racks
        for (_, _, g, gives), w in zip(edges, want, strict=True):
            if gives:
                room_out[g] += w
            else:
                room_in[g] += w
        scaled = []
        for (_, _, g, gives), w in zip(edges, want, strict=True):
            part, room = (surplus[g], room_out[g]) if gives else (-surplus[g], room_in[g])
            scaled.append(min(w, _ceil_div(w * part, room)) if 0 < part < room else w)
        for caps in (scaled, want):
            for j, (e, _, _, _) in enumerate(edges):
                if caps[j] > given[j]:
                    cap[e] += caps[j] - given[j]
                    given[j] = caps[j]
            flow += graph.max_flow(0, 1)
            if flow >= need:
                break
        if flow >= need:
            break
    out = list(shares)
    moved: dict[int, list[int]] = {}
    for e, t, g, gives in edges:
        f = cap[e ^ 1]
        if f:
            s = moved.setdefault(t, list(start[t]))
            s[g] += -f if gives else f
    shifted = 0
    for t, s in moved.items():
        if s != start[t]:
            out[t] = rack_shares(loads[t].replicas, s, s, sizes)
            shifted += 1
    return out, shifted


def compute_quotas(
    loads: Sequence[TopicLoad],
    layout: BrokerLayout,
    fixed_load: Mapping[int, int] | None = None,
    *,
    max_topic_spread: int = 2,
    group_replicas: int = GROUP_REPLICAS,
    map_groups: MapGroups | None = None,
    defer_groups: bool = False,
) -> QuotaPlan:
    """The global step: quotas of every topic on every live broker (see the module doc).

    ``fixed_load``: replicas per broker of partitions the plan does not move (topics not
    selected, internal topics); they count towards the brokers' totals.

    With at least two groups' worth of replicas (``group_replicas`` each, 0: never), steps 4
    and 5 run per group of topics (:func:`solve_quota_group`), through ``map_groups`` (the
    Spark job runs them as tasks; default: one after the other, here). The result does not
    depend on how they are run; if a group cannot meet its share exactly, or the brokers'
    targets are more than 1 apart, every topic is handled at once instead. ``defer_groups``:
    the groups are returned unsolved in :attr:`QuotaPlan.pending` (the Spark job solves each
    in the task that places its topics).
    """
    brokers = layout.brokers
    nb = len(brokers)
    if nb == 0:
        raise ValueError("no brokers to place replicas on")
    sizes = layout.rack_sizes()
    k_racks = len(sizes)
    rk = [layout.rack_of[b] for b in brokers]
    fixed = [int((fixed_load or {}).get(b, 0)) for b in brokers]
    warnings: list[str] = []

    # 1-2: rack shares, bases and extras per topic.
    shares: list[RackShares] = []
    base_rack = [0] * k_racks
    extras_total = 0
    for ld in loads:
        lo, hi = rack_bounds(ld.rf_counts, sizes, ld.replicas)
        sh = rack_shares(ld.replicas, lo, hi, sizes)
        shares.append(sh)
        for g in range(k_racks):
            base_rack[g] += sh.base[g]
        extras_total += sh.extras

    # 3-5 with the rack totals width-1 quotas can reach; only if that leaves the brokers'
    # totals more than 1 apart, and widening topics to max_topic_spread brings them to <= 1,
    # the wider quotas are used (racks of unequal size, fixed load).
    current = _current_totals(loads, brokers, fixed)
    base_b = [fixed[i] + base_rack[rk[i]] for i in range(nb)]
    total = sum(base_b) + extras_total
    rack_fixed = [0] * k_racks
    for i in range(nb):
        rack_fixed[rk[i]] += fixed[i]
    tight_lo = [rack_fixed[g] + sum(sizes[g] * sh.base[g] + sh.extra_min[g] for sh in shares) for g in range(k_racks)]
    tight_hi = [rack_fixed[g] + sum(sizes[g] * sh.base[g] + sh.extra_max[g] for sh in shares) for g in range(k_racks)]
    ctx = _Context(loads, shares, brokers, rk, fixed, base_b, current, sizes)
    rack_total = integer_shares(total, tight_lo, tight_hi, sizes)
    wide_lo = [rack_fixed[g] + sum(sh.lo[g] for sh in shares) for g in range(k_racks)]
    wide_hi = [rack_fixed[g] + sum(sh.hi[g] for sh in shares) for g in range(k_racks)]
    floor = RackBand(total, wide_lo, wide_hi, [[fixed[i] for i in m] for m in _by_rack(rk, k_racks)]).floor()
    made = _quota_groups(ctx, rack_total, group_replicas)
    if made is not None and defer_groups:
        groups, _, targets = made
        return QuotaPlan(
            brokers=tuple(brokers),
            quotas={},
            broker_targets=dict(zip(brokers, targets, strict=True)),
            broker_loads=dict(zip(brokers, targets, strict=True)),  # once every group meets its share
            groups=len(groups),
            pending=tuple(groups),
            floor=floor,
        )
    grouped = _grouped_quotas(loads, layout, made, map_groups or _map_here) if made is not None else None
    if grouped is not None:
        group_quotas, targets, n_groups = grouped
        return QuotaPlan(
            brokers=tuple(brokers),
            quotas={ld.topic: group_quotas[t] for t, ld in enumerate(loads)},
            broker_targets=dict(zip(brokers, targets, strict=True)),
            broker_loads=dict(zip(brokers, targets, strict=True)),  # every group met its share
            groups=n_groups,
            floor=floor,
        )
    quotas, targets, loads_b = ctx.assign(rack_total, 1)
    relaxed = 0
    if _spread(loads_b) > 1 and max_topic_spread > 1:
        wide_total = integer_shares(total, wide_lo, wide_hi, sizes)
        w_quotas, w_targets, w_loads = ctx.assign(wide_total, max_topic_spread)
        if _spread(w_loads) <= 1:
            quotas, targets, loads_b = w_quotas, w_targets, w_loads
        elif k_racks > 1 and _spread(loads_b) > max(1, floor):
            # 6: the racks force some brokers' shares: topics give up evenness where needed
            r_shares, shifted = _shift_shares(loads, shares, wide_total, rack_fixed, brokers, rk, sizes)
            if shifted:
                r_rack = [sum(sh.base[g] for sh in r_shares) for g in range(k_racks)]
                r_base = [fixed[i] + r_rack[rk[i]] for i in range(nb)]
                r_ctx = _Context(loads, r_shares, brokers, rk, fixed, r_base, current, sizes)
                r_quotas, r_targets, r_loads = r_ctx.assign(wide_total, 1)
                if _spread(r_loads) < _spread(loads_b):
                    quotas, targets, loads_b, relaxed = r_quotas, r_targets, r_loads, shifted
    spread = _spread(loads_b)
    floor_free = RackBand(total, [total], [total], [fixed]).floor() if k_racks > 1 else floor
    bounded_by: list[str] = []
    if spread > 1:
        if floor > max(1, floor_free):
            bounded_by.append("racks")
        if floor_free > 1:
            bounded_by.append("fixed load")
        if spread > max(1, floor) + (1 if bounded_by else 0):
            bounded_by.append("topic spread")
    warnings.extend(
        _balance_warnings(
            spread, floor, bounded_by, relaxed, max_topic_spread, sizes, wide_lo, wide_hi, total,
            layout.rack_names, any(fixed),
        )
    )
    return QuotaPlan(
        brokers=tuple(brokers),
        quotas={ld.topic: tuple(quotas[t]) for t, ld in enumerate(loads)},
        broker_targets=dict(zip(brokers, targets, strict=True)),
        broker_loads=dict(zip(brokers, loads_b, strict=True)),
        warnings=tuple(warnings),
        floor=floor,
        bounded_by=tuple(bounded_by),
        relaxed_topics=relaxed,
    )


def _spread(values: Sequence[int]) -> int:
    return max(values) - min(values) if values else 0


def _balance_warnings(
    spread: int,
    floor: int,
    bounded_by: Sequence[str],
    relaxed: int,
    max_topic_spread: int,
    sizes: Sequence[int],
    rack_lo: Sequence[int],
    rack_hi: Sequence[int],
    total: int,
    rack_names: Sequence[str | None],
    has_fixed: bool,
) -> list[str]:
    """What bounded the brokers' balance, in words (see :attr:`QuotaPlan.bounded_by`)."""
    nb = sum(sizes)
    unequal = f"racks of unequal size ({', '.join(str(x) for x in sizes)} brokers)"
    if spread <= 1:
        if not relaxed:
            return []
        return [
            f"{unequal} force some brokers' shares: {relaxed} topic(s) spread unevenly over the racks "
            "(per-topic evenness gives way) so that brokers' replica counts end within max-min 1"
        ]
    if "racks" not in bounded_by and "fixed load" not in bounded_by:
        causes = []
        if len(set(sizes)) > 1:
            causes.append(unequal)
        if has_fixed:
            causes.append("replicas the plan may not move (topics left out, in-flight reassignments)")
        return [
            f"brokers' replica counts stay {spread} apart (max-min): "
            f"{' and '.join(causes) or 'the topics sizes'} leave no better balance with every topic's "
            f"replicas within max-min {max_topic_spread} per broker"
        ]
    why = []
    if "racks" in bounded_by:
        least, most = [], []
        for g, size in enumerate(sizes):
            name = f"rack {rack_names[g]!r}" if g < len(rack_names) and rack_names[g] is not None else f"rack {g}"
            brokers = f"{size} broker{'s' if size > 1 else ''}"
            if rack_lo[g] * nb > total * size:
                least.append(f"{name} ({brokers}) must hold at least {rack_lo[g]} replicas")
            elif rack_hi[g] * nb < total * size:
                most.append(f"{name} ({brokers}) can hold at most {rack_hi[g]} replicas")
        bound = least or most  # the racks above their share explain it; those below follow
        why.append(
            f"the rack spread (every partition over min(RF, racks) racks) on {unequal}"
            + (f": {', '.join(bound)}" if bound else "")
        )
    if "fixed load" in bounded_by:
        why.append("replicas the plan may not move (topics left out, in-flight reassignments)")
    text = (
        f"brokers' replica counts stay {spread} apart (max-min), bounded by {' and '.join(why)}; "
        f"the best any plan can reach is {floor}"
    )
    if relaxed:
        text += f"; {relaxed} topic(s) spread unevenly over the racks to get there (per-topic evenness gives way)"
    if "topic spread" in bounded_by:
        text += f"; with every topic's replicas within max-min {max_topic_spread} per broker the plan reaches only {spread}"
    return [text]


@dataclass
class _Context:
    loads: Sequence[TopicLoad]
    shares: Sequence[RackShares]
    brokers: Sequence[int]
    rk: Sequence[int]
    fixed: Sequence[int]
    base_b: Sequence[int]
    current: Sequence[int]
    sizes: Sequence[int]

    def targets(self, rack_total: Sequence[int]) -> list[int]:
        """Step 3: every broker's total after the plan, for given rack totals."""
        targets = [0] * len(self.brokers)
        for g, members in enumerate(_by_rack(self.rk, len(self.sizes))):
            level = _level_targets([self.fixed[i] for i in members], rack_total[g], [self.current[i] for i in members])
            for i, t in zip(members, level, strict=True):
                targets[i] = t
        return targets

    def assign(self, rack_total: Sequence[int], spread: int) -> tuple[list[list[int]], list[int], list[int]]:
        """Steps 3 to 5 for given rack totals: (quotas per topic, targets, loads per broker)."""
        targets = self.targets(rack_total)
        remaining = [t - b for t, b in zip(targets, self.base_b, strict=True)]
        quotas: list[list[int]] = [[sh.base[g] for g in self.rk] for sh in self.shares]
        loads_b = _hand_out_extras(self.loads, self.shares, quotas, remaining, targets, self.brokers, self.rk, self.sizes, spread)
        return quotas, targets, loads_b


def _by_rack(rk: Sequence[int], k_racks: int) -> list[list[int]]:
    by_rack: list[list[int]] = [[] for _ in range(k_racks)]
    for i, g in enumerate(rk):
        by_rack[g].append(i)
    return by_rack


def _hand_out_extras(
    loads: Sequence[TopicLoad],
    shares: Sequence[RackShares],
    quotas: list[list[int]],
    remaining: list[int],
    targets: Sequence[int],
    brokers: Sequence[int],
    rk: Sequence[int],
    sizes: Sequence[int],
    spread: int,
) -> list[int]:
    """Steps 4 and 5 in place, within the brokers' ``remaining`` capacity: the loads per broker."""
    by_rack = _by_rack(rk, len(sizes))
    order = sorted(range(len(loads)), key=lambda t: (-shares[t].extras, loads[t].topic))
    _max_saving_extras(loads, shares, quotas, remaining, brokers, rk, sizes)
    for saving_only in (True, False):
        for t in order:
            if shares[t].extras:
                _assign_extras(loads[t], shares[t], quotas[t], remaining, brokers, rk, by_rack, saving_only=saving_only)
    loads_b = [t - r for t, r in zip(targets, remaining, strict=True)]
    if loads_b != targets:
        _exchange(loads, shares, quotas, loads_b, targets, rk, brokers, spread)
    return loads_b


# -- steps 4 and 5 per group of topics ------------------------------------------------------

@dataclass(frozen=True)
class QuotaGroup:
    """Consecutive topics (by name) whose extras steps 4 and 5 hand out on their own, within
    ``capacity``: the group's share of every broker's room above the bases."""

    loads: tuple[TopicLoad, ...]
    shares: tuple[RackShares, ...]
    capacity: tuple[int, ...]


MapGroups = Callable[[Sequence[QuotaGroup], BrokerLayout], Sequence["list[tuple[int, ...]] | None"]]
"""Runs :func:`solve_quota_group` over groups, results in order (a Spark job, or a loop)."""


def solve_quota_group(group: QuotaGroup, layout: BrokerLayout) -> list[tuple[int, ...]] | None:
    """Steps 4 and 5 for one group: its topics' quotas, or ``None`` if the group cannot fill
    its capacity exactly (the caller then handles every topic at once)."""
    brokers = layout.brokers
    rk = [layout.rack_of[b] for b in brokers]
    quotas = [[sh.base[g] for g in rk] for sh in group.shares]
    base = [sum(col) for col in zip(*quotas, strict=True)] if quotas else [0] * len(brokers)  # per broker, over the topics
    targets = [b + c for b, c in zip(base, group.capacity, strict=True)]
    remaining = list(group.capacity)
    loads_b = _hand_out_extras(group.loads, group.shares, quotas, remaining, targets, brokers, rk, layout.rack_sizes(), 1)
    if loads_b != targets:
        return None
    return [tuple(q) for q in quotas]


def _map_here(groups: Sequence[QuotaGroup], layout: BrokerLayout) -> list[list[tuple[int, ...]] | None]:
    return [solve_quota_group(g, layout) for g in groups]


def split_capacity(remaining: Sequence[int], extras: Sequence[int]) -> list[list[int]]:
    """``cap[g][i]``: broker ``i``'s room given to group ``g``, in proportion to the groups'
    extras, with every group's row adding up to its ``extras`` and every broker's column to its
    ``remaining`` (floors, then the remainders by a max flow over unit edges, which always
    finds them: the fractional parts of a row or a column add up to whole numbers)."""
    ng, nb = len(extras), len(remaining)
    total = sum(extras)
    cap = [[remaining[i] * extras[g] // total for i in range(nb)] for g in range(ng)]
    graph = FlowGraph(2 + ng + nb)
    for g in range(ng):
        graph.add(0, 2 + g, extras[g] - sum(cap[g]))
    edges = {
        (g, i): graph.add(2 + g, 2 + ng + i, 1)
        for g in range(ng)
        for i in range(nb)
        if remaining[i] * extras[g] % total
    }
    for i in range(nb):
        graph.add(2 + ng + i, 1, remaining[i] - sum(cap[g][i] for g in range(ng)))
    graph.max_flow(0, 1)
    for (g, i), e in edges.items():
        cap[g][i] += 1 - graph.cap[e]
    return cap


def _quota_groups(
    ctx: _Context, rack_total: Sequence[int], group_replicas: int
) -> tuple[list[QuotaGroup], list[list[int]], list[int]] | None:
    """Steps 3 to 5 per group of topics, up to handing out the extras: (the groups, their
    topics as indices into ``ctx.loads``, the brokers' targets), or ``None`` where the step
    must see every topic at once (too few replicas, targets more than 1 apart)."""
    loads = ctx.loads
    total = sum(ld.replicas for ld in loads)
    n_groups = total // group_replicas if group_replicas > 0 else 0
    if n_groups < 2:
        return None
    n_groups = 1 << (n_groups - 1).bit_length()  # a power of two: groups share out evenly over 2, 4, 8... cores
    targets = ctx.targets(rack_total)
    remaining = [t - b for t, b in zip(targets, ctx.base_b, strict=True)]
    if max(targets) - min(targets) > 1 or min(remaining) < 0:
        return None
    members: list[list[int]] = [[]]
    acc = 0
    order = sorted(range(len(loads)), key=lambda t: loads[t].topic)
    for k, t in enumerate(order):
        members[-1].append(t)
        acc += loads[t].replicas
        if acc * n_groups >= total * len(members) and k < len(order) - 1:
            members.append([])
    extras = [sum(ctx.shares[t].extras for t in m) for m in members]
    if sum(extras) != sum(remaining) or not any(extras):
        return None
    cap = split_capacity(remaining, extras)
    groups = [
        QuotaGroup(tuple(loads[t] for t in m), tuple(ctx.shares[t] for t in m), tuple(cap[g]))
        for g, m in enumerate(members)
    ]
    return groups, members, targets


def _grouped_quotas(
    loads: Sequence[TopicLoad],
    layout: BrokerLayout,
    made: tuple[list[QuotaGroup], list[list[int]], list[int]],
    map_groups: MapGroups,
) -> tuple[list[tuple[int, ...]], list[int], int] | None:
    """The groups of :func:`_quota_groups` solved: (quotas aligned with ``loads``, the brokers'
    targets, the number of groups), or ``None`` if a group cannot meet its share."""
    groups, members, targets = made
    results = map_groups(groups, layout)
    out: list[tuple[int, ...]] = [()] * len(loads)
    for m, result in zip(members, results, strict=True):
        if result is None:
            return None
        for t, q in zip(m, result, strict=True):
            out[t] = q
    return out, targets, len(groups)


def _assign_extras(
    ld: TopicLoad,
    sh: RackShares,
    q: list[int],
    remaining: list[int],
    brokers: Sequence[int],
    rk: Sequence[int],
    by_rack: Sequence[Sequence[int]],
    *,
    saving_only: bool,
) -> None:
    """Step 4 for one topic, in place: hand (some of) its extras to distinct brokers.

    An extra *saves a move* at a broker that already holds more than its base (it keeps a
    replica it would otherwise pass on), or in a rack that can still take one of the topic's
    forced replicas (those leaving removed brokers or added by an RF increase) that would
    otherwise need a second hop. With ``saving_only`` only such brokers with remaining
    capacity are picked (first pass over all topics); otherwise the rest of the extras go
    to the brokers with the most remaining capacity (second pass). Brokers are sorted once
    per rack; each pick compares the racks' heads (racks are few).
    """
    k_racks = len(by_rack)
    # the extras handed out already: every broker's quota above its rack's base (a topic often
    # has none left: the first pass gave them all), before any per-broker list is built
    if sh.extras - (sum(q) - sum(sh.base[g] * len(by_rack[g]) for g in range(k_racks))) <= 0:
        return
    counts = ld.counts
    cur = [counts.get(b, 0) for b in brokers]
    base = [sh.base[rk[i]] for i in range(len(brokers))]
    taken = [0] * k_racks
    for i in range(len(brokers)):
        taken[rk[i]] += q[i] - base[i]
    left = sh.extras - sum(taken)
    lists = [
        sorted(
            (i for i in members if q[i] == base[i] and (not saving_only or remaining[i] > 0)),
            key=lambda i: (remaining[i] <= 0, cur[i] <= q[i], -remaining[i], i),
        )
        for members in by_rack
    ]
    ptr = [0] * k_racks
    slots = ld.slots
    compat = [ld.slot_racks.get(g, 0) for g in range(k_racks)]
    need = [0] * k_racks
    if slots:
        for i in range(len(brokers)):
            need[rk[i]] += max(0, q[i] - cur[i])
    absorbed = sum(min(compat[g], need[g]) for g in range(k_racks))

    def saves(i: int, g: int) -> bool:
        return cur[i] > q[i] or (slots > absorbed and need[g] < compat[g])

    def pick(g: int, i: int) -> None:
        nonlocal absorbed, left
        taken[g] += 1
        left -= 1
        if slots and cur[i] <= q[i]:
            need[g] += 1
            if need[g] <= compat[g]:
                absorbed += 1
        q[i] += 1
        remaining[i] -= 1

    def head(g: int) -> int | None:
        lst = lists[g]
        while ptr[g] < len(lst) and q[lst[ptr[g]]] != base[lst[ptr[g]]]:
            ptr[g] += 1
        return lst[ptr[g]] if ptr[g] < len(lst) else None

    for g in range(k_racks):  # racks that must take extras (rack constraint) first
        while taken[g] < sh.extra_min[g]:
            first = head(g)
            if first is None or (saving_only and not saves(first, g)):
                break
            ptr[g] += 1
            pick(g, first)
    while left > 0:
        best_g, best_i, best_key = -1, -1, None
        for g in range(k_racks):
            if taken[g] >= sh.extra_max[g]:
                continue
            h = head(g)
            if h is None:
                continue
            sv = saves(h, g)
            if saving_only and not sv:
                continue
            key = (remaining[h] > 0, sv, remaining[h], -h)
            if best_key is None or key > best_key:
                best_g, best_i, best_key = g, h, key
        if best_g < 0:
            break
        ptr[best_g] += 1
        pick(best_g, best_i)


def _max_saving_extras(
    loads: Sequence[TopicLoad],
    shares: Sequence[RackShares],
    quotas: list[list[int]],
    remaining: list[int],
    brokers: Sequence[int],
    rk: Sequence[int],
    sizes: Sequence[int],
) -> None:
    """Give as many extras as possible where they save a move (a broker holding more than
    its base keeps a replica), within the brokers' remaining capacity, the topics' extras and
    the racks' extra limits: a maximum b-matching, solved as a max flow. In place."""
    nb = len(brokers)
    index = {b: i for i, b in enumerate(brokers)}
    k_racks = len(sizes)
    n_topics = len(loads)
    # nodes: 0 source, 1 sink, brokers, topics, then (topic, rack) nodes where racks limit
    broker0 = 2
    topic0 = broker0 + nb
    graph = FlowGraph(topic0 + n_topics)
    saving_of: list[list[int]] = []
    options = [0] * nb  # topics where an extra on the broker would save a move
    index_get = index.get
    for t, (ld, sh) in enumerate(zip(loads, shares, strict=True)):
        q = quotas[t]
        saving: list[int] = []
        if sh.extras:
            base = sh.base
            for b, c in ld.counts.items():
                i = index_get(b)
                if i is not None and c > q[i] and q[i] == base[rk[i]]:
                    saving.append(i)
            saving.sort()
        saving_of.append(saving)
        for i in saving:
            options[i] += 1
    # brokers that cannot fill their capacity with saving extras (new brokers, typically)
    # take any topic's extra: without them the flow would leave extras nobody can take
    poor = [i for i in range(nb) if remaining[i] > options[i]]
    if len(poor) * 2 > nb:
        poor = []  # nearly every broker is short of saving extras: the greedy passes do it
    pairs: list[tuple[int, int, int]] = []  # (edge, topic, broker index)
    paths: list[tuple[int, int, int, int]] = []  # (source edge, rack edge or -1, edge, broker)
    g_to, g_cap, g_adj = graph.to, graph.cap, graph.adj  # the unit edges below: FlowGraph.add inlined
    for t, sh in enumerate(shares):
        saving = saving_of[t]
        if sh.extras == 0 or not (saving or poor):
            continue
        q = quotas[t]
        node = topic0 + t
        src_edge = graph.add(0, node, sh.extras)
        limited = k_racks > 1 and any(sh.extra_max[g] < sizes[g] for g in range(k_racks))
        rack_nodes: dict[int, tuple[int, int]] = {}
        chosen = set(saving)
        # saving brokers first, the roomiest first: the order of the greedy warm start
        for i in sorted(chosen | {i for i in poor if q[i] == sh.base[rk[i]]}, key=lambda i: (i not in chosen, -remaining[i], i)):
            if remaining[i] <= 0:
                continue
            src, rack_edge = node, -1
            if limited:
                g = rk[i]
                if sh.extra_max[g] == 0:
                    continue
                if g not in rack_nodes:
                    rack_node = len(graph.adj)
                    graph.adj.append([])
                    rack_nodes[g] = (rack_node, graph.add(node, rack_node, sh.extra_max[g]))
                src, rack_edge = rack_nodes[g]
            e = len(g_to)  # graph.add(src, broker0 + i, 1)
            g_to += (broker0 + i, src)
            g_cap += (1, 0)
            g_adj[src].append(e)
            g_adj[broker0 + i].append(e + 1)
            pairs.append((e, t, i))
            paths.append((src_edge, rack_edge, e, i))
    if not pairs:
        return
    sink_edge = [-1] * nb
    for i in range(nb):
        if remaining[i] > 0:
            sink_edge[i] = graph.add(broker0 + i, 1, remaining[i])
    # greedy warm start (what the extras greedy would do), then augmenting paths
    cap = graph.cap
    for src_edge, rack_edge, e, i in paths:
        se = sink_edge[i]
        if cap[src_edge] and cap[e] and cap[se] and (rack_edge < 0 or cap[rack_edge]):
            for x in (src_edge, e, se) if rack_edge < 0 else (src_edge, rack_edge, e, se):
                cap[x] -= 1
                cap[x ^ 1] += 1
    graph.max_flow(0, 1)
    for e, t, i in pairs:
        if graph.cap[e] == 0:
            quotas[t][i] += 1
            remaining[i] -= 1


def _current_totals(loads: Sequence[TopicLoad], brokers: Sequence[int], fixed: Sequence[int]) -> list[int]:
    index = {b: i for i, b in enumerate(brokers)}
    out = list(fixed)
    for ld in loads:
        for b, c in ld.counts.items():
            i = index.get(b)
            if i is not None:
                out[i] += c
    return out


def _exchange(
    loads: Sequence[TopicLoad],
    shares: Sequence[RackShares],
    quotas: list[list[int]],
    loads_b: list[int],
    targets: Sequence[int],
    rk: Sequence[int],
    brokers: Sequence[int],
    max_topic_spread: int,
) -> None:
    """Step 5: move units of topic quota from overloaded to underloaded brokers, in place.

    Passes keep each topic's spread at 1, then (if allowed) at ``max_topic_spread``; within a
    pass, exchanges that save a move come first, then free ones, then those costing one.
    """
    nb = len(brokers)
    k_racks = max(rk) + 1 if rk else 1
    passes = [(1, 0), (1, 1)] + ([(max_topic_spread, 0), (max_topic_spread, 1)] if max_topic_spread > 1 else [])
    over = [i for i in range(nb) if loads_b[i] > targets[i]]
    under = [i for i in range(nb) if loads_b[i] < targets[i]]
    for limit, max_cost in passes:
        for t, ld in enumerate(loads):
            if not over or not under:
                return
            q = quotas[t]
            qmin, qmax = min(q), max(q)
            width = max(limit, qmax - qmin)
            givers = [i for i in over if q[i] - 1 >= qmax - width and q[i] > 0]
            if not givers:
                continue
            takers = [i for i in under if q[i] + 1 <= qmin + width]
            if not takers:
                continue
            sh = shares[t]
            counts = ld.counts
            rack_load = [0] * k_racks
            rmin = [1 << 30] * k_racks
            rmax = [-1] * k_racks
            for i in range(nb):
                g = rk[i]
                rack_load[g] += q[i]
                rmin[g] = min(rmin[g], q[i])
                rmax[g] = max(rmax[g], q[i])
            # within each rack too (racks that fix a topic's shares give it per-rack levels)
            rwidth = [max(limit, rmax[g] - rmin[g]) for g in range(k_racks)]
            moved = False
            while givers and takers:
                # gain: o had an inflow pending (one saved); free: u keeps a replica it holds
                best: tuple[int, int, int] | None = None
                for o in givers:
                    go = rk[o]
                    gain = 1 if counts.get(brokers[o], 0) < q[o] else 0
                    for u in takers:
                        cost = (0 if counts.get(brokers[u], 0) > q[u] else 1) - gain
                        if cost > max_cost or (best is not None and cost >= best[0]):
                            continue
                        if max(qmax, q[u] + 1) - min(qmin, q[o] - 1) > width:
                            continue
                        gu = rk[u]
                        if go == gu:
                            if max(rmax[go], q[u] + 1) - min(rmin[go], q[o] - 1) > rwidth[go]:
                                continue
                        elif (
                            rack_load[go] - 1 < sh.lo[go]
                            or rack_load[gu] + 1 > sh.hi[gu]
                            or rmax[go] - min(rmin[go], q[o] - 1) > rwidth[go]
                            or max(rmax[gu], q[u] + 1) - rmin[gu] > rwidth[gu]
                        ):
                            continue
                        best = (cost, o, u)
                        if cost <= -1:
                            break
                    if best is not None and best[0] <= -1:
                        break
                if best is None:
                    break
                _, o, u = best
                q[o] -= 1
                q[u] += 1
                rack_load[rk[o]] -= 1
                rack_load[rk[u]] += 1
                rmin[rk[o]] = min(rmin[rk[o]], q[o])
                rmax[rk[u]] = max(rmax[rk[u]], q[u])
                loads_b[o] -= 1
                loads_b[u] += 1
                moved = True
                givers.remove(o)
                takers.remove(u)
                qmin, qmax = min(qmin, q[o]), max(qmax, q[u])
                givers = [i for i in givers if q[i] - 1 >= qmax - width and loads_b[i] > targets[i]]
                takers = [i for i in takers if q[i] + 1 <= qmin + width and loads_b[i] < targets[i]]
            if moved:
                over = [i for i in over if loads_b[i] > targets[i]]
                under = [i for i in under if loads_b[i] < targets[i]]
