"""Provable lower bounds on the replica moves (and leader changes) a goal needs.

A *replica move* is a replica added to a broker that did not hold it (a copy), so any plan's
moves equal the replicas flowing *into* brokers, and also the replicas flowing *out* of
brokers minus the replicas an RF decrease simply drops.

The bound is stated for the balance a plan reaches: every live broker's total within a band
of width ``w_G`` (1 for "max-min <= 1"), every balanced topic's per-broker counts within a band
of width ``w_T`` (1 wherever the arithmetic allows, 2 where the planner had to widen it, more
where racks of unequal size force it), removed brokers at zero, every partition spread over
``min(RF, racks)`` racks. The widths are those the plan reaches, at least 1 (the goal's own
"max-min <= 1"), so the bound never rewards a plan for balancing less. Any plan reaching that
balance needs at least the largest of:

* **Per partition.** A partition with ``S`` replicas on live brokers and target RF ``r`` needs
  ``max(r - |S|, min(r, racks) - racks(S))`` added replicas: the missing replicas, and one
  added replica per missing rack (an added replica brings at most one new rack).
* **Per topic** (summed over topics; moves of different topics are different moves). With
  ``n`` replicas on ``B`` brokers and width ``w``, the counts lie in ``[t, t + w]`` for some
  ``t`` with ``t*B <= n <= (t+w)*B``. For a given ``t``, the fewest inflows are
  ``sum(max(0, t - c_b)) + max(0, n - sum(clamp(c_b, t, t+w)))`` (raise every broker to ``t``;
  clamping the rest costs nothing; whatever is still missing must come in, one move per
  replica), and symmetrically the fewest outflows; the topic needs the minimum over ``t`` of
  the larger, and at least its partitions' bound.
* **Per topic and rack.** Replicas that must leave removed brokers (and replicas an RF
  increase adds) can only land in racks that keep their partition's spread; a rack that must
  end with ``F_g >= max(lo_g, size_g * t)`` replicas of the topic, holds ``C_g`` now and can
  receive at most ``compat_g`` of those forced replicas needs ``F_g - C_g - compat_g`` more,
  each one a move of a replica from a live broker on top of the forced ones (and
  symmetrically for racks that must shed). Where the racks fix every rack's share (RF >=
  racks on racks of unequal size) the per-topic band is taken within each rack instead.
* **Per broker** (summed over brokers). Broker ``b`` ends with a total in ``[Gmin, Gmax]``
  and, of each topic, a count in that topic's union of bands ``[ceil(n/B) - w, floor(n/B) + w]``.
  Its inflow is at least ``sum_T max(0, lo_T - c_Tb) + max(0, Gmin - fixed_b - sum_T clamp(c_Tb))``
  and its outflow at least ``sum_T max(0, c_Tb - hi_T) + max(0, fixed_b + sum_T clamp(c_Tb) - Gmax)``
  (everything on a removed broker flows out). This is what catches a scale-out: a new broker
  must receive its whole share, which per-topic counting alone spreads over topics that
  could each keep their extras elsewhere. ``[Gmin, Gmax]`` is taken per rack, from the bands
  of width ``w_G`` whose rack totals the racks allow (:meth:`.quotas.RackBand.broker_ranges`:
  every rack's total between the fewest and most replicas the rack spread lets it hold, the
  partitions the plan leaves alone where they are, all adding up): the only broker of a rack
  holds a replica of every partition that spans all racks, and the brokers of the other
  racks share what is left. This is what catches a decommission that leaves racks uneven:
  that broker must shed the replicas of other partitions to reach its band.
* **Per rack** (all topics together). The same forced-replica argument on the racks' totals:
  rack ``g`` ends with at least ``size_g * Gmin`` replicas (and what the rack spread forces
  into it, at most ``size_g * Gmax`` and what it allows); beyond what it holds now and the
  forced replicas that may land in it, every replica must come from a live broker: one more
  move each. A decommission whose removed broker shared racks unevenly with its partners
  needs these moves whatever the per-topic quotas are.
* **Per topic and broker together** (a Lagrangian bound). Where every topic's counts end as
  ``base`` or ``base + 1`` (width 1; ``base`` is forced: ``floor(n/B)``, or the rack's level
  where racks fix the shares), a plan's moves are at least
  ``sum(max(0, base - c))`` plus the number of *extras* (the ``+1``) placed on brokers that
  do not already hold more than ``base``. Choosing the extras is a transportation problem:
  topics hand out ``e_T`` extras to distinct brokers, each broker takes between ``x_lo``
  and ``x_hi`` of them (its band of totals). For any broker prices ``pi``, weak duality gives
  ``sum_T (e_T smallest of cost_Tb - pi_b) + sum_b min(pi_b * x_lo, pi_b * x_hi)`` as a
  lower bound on that number. With 0/1 costs, prices in {0, 1} suffice in practice; they
  are found by a local search from "price the brokers that cannot fill their band with
  saving extras" (new brokers). This catches what the per-topic and per-broker parts each
  relax away: new brokers must be filled from topics that would rather keep their extras.
  It is used only when every balanced topic ends at ``base`` or ``base + 1``.

Each part relaxes the problem differently (the per-topic part ignores the brokers' totals,
the per-broker part ignores that a topic's extras are limited), so their maximum is still a
lower bound. All sums run over sparse counts: cost is linear in the (topic, broker) pairs.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain

import numpy as np

from airflow_kafka_reassign.core.planner.quotas import RackBand, rack_bounds, rack_shares
from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicPartitions


@dataclass(frozen=True)
class LowerBound:
    moves: int
    per_partition: int
    per_topic: int
    per_broker: int
    per_rack: int = 0
    joint: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "moves": self.moves,
            "per_partition": self.per_partition,
            "per_topic": self.per_topic,
            "per_broker": self.per_broker,
            "per_rack": self.per_rack,
            "joint": self.joint,
        }


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def partition_bound(topic: TopicPartitions, layout: BrokerLayout, *, fix_racks: bool = True) -> int:
    """Replicas the topic's partitions must add: missing replicas and missing racks."""
    return _facts(topic, layout, layout.live, fix_racks).partition_need


def band_bound(
    counts: Mapping[int, int],
    n: int,
    brokers: Sequence[int],
    width: int,
    removals: int = 0,
    on_removed: int = 0,
    side: str = "both",
) -> int:
    """Fewest moves for the counts of ``brokers`` to fit a band of ``width`` holding ``n``.

    ``counts`` may hold other brokers (ignored); ``on_removed``: replicas that must leave
    brokers outside ``brokers`` towards them; ``removals``: replicas an RF decrease drops.
    ``side``: ``"in"`` / ``"out"`` bound only the inflows / outflows of ``brokers``.
    """
    inflow, outflow, both = _band_costs(counts, n, brokers, width, removals, on_removed)
    return inflow if side == "in" else outflow if side == "out" else both


def _band_costs(
    counts: Mapping[int, int], n: int, brokers: Sequence[int], width: int, removals: int = 0, on_removed: int = 0,
    members: frozenset[int] | None = None,
) -> tuple[int, int, int]:
    """:func:`band_bound` for its three sides at once, in one pass over the band's bottoms:
    (fewest inflows, fewest outflows, fewest moves). ``members``: ``brokers`` as a set (faster)."""
    nb = len(brokers)
    if nb == 0:
        return 0, 0, 0
    if members is not None:  # the same brokers as a set: the counts' own items, not a look-up per broker
        on = sorted(c for b, c in counts.items() if c > 0 and b in members)
    else:
        get = counts.get
        on = sorted(c for c in (get(b, 0) for b in brokers) if c > 0)
    zeros = nb - len(on)
    # sums over the counts below t, within [t, t + width] and above it, from prefix sums of the sorted counts
    prefix = [0, *accumulate(on)]
    m = len(on)
    best_in = best_out = best = None
    for t in range(max(0, _ceil_div(n, nb) - width), n // nb + 1):
        hi = t + width
        i = bisect_left(on, t)  # counts below t
        j = bisect_right(on, hi, i)  # counts up to hi
        below = t * i - prefix[i]
        over = prefix[m] - prefix[j] - hi * (m - j)
        clamped = zeros * t + t * i + prefix[j] - prefix[i] + hi * (m - j)
        inflow = zeros * t + below + max(0, n - clamped)
        outflow = on_removed + over + max(0, clamped - n)
        cost = max(inflow, outflow - removals)
        if best is None or cost < best:
            best = cost
        if best_in is None or inflow < best_in:
            best_in = inflow
        if best_out is None or outflow < best_out:
            best_out = outflow
    return best_in or 0, best_out or 0, best or 0


@dataclass
class TopicFacts:
    """What the bound needs from one topic (one pass over its partitions: :func:`topic_facts`).

    Picklable: the Spark job computes these next to the per-topic step and sends them to the
    driver instead of the partitions.
    """

    topic: str
    #: The topic is balanced by the plan (False: only its partitions' needs count).
    balance: bool
    counts: dict[int, int]
    n: int
    removals: int
    on_removed: int
    rack_lo: list[int]
    rack_hi: list[int]
    forced: bool
    #: replicas the partitions must add (missing replicas and racks; see partition_bound)
    partition_need: int
    #: forced replicas (leaving removed brokers, RF increases) and where they may land
    slots: int
    compat: list[int]
    #: fewest / most replicas of the topic each rack can hold once the plan is done: the rack
    #: spread for partitions the plan may move, where they are for those it leaves alone
    rack_min: list[int] = field(default_factory=list)
    rack_max: list[int] = field(default_factory=list)


def topic_facts(t: TopicPartitions, layout: BrokerLayout, *, fix_racks: bool = True) -> TopicFacts:
    """Everything the bound needs from one topic, in one pass over its partitions."""
    return _facts(t, layout, layout.live, fix_racks and t.balance)


def _facts(
    t: TopicPartitions, layout: BrokerLayout, live_set: frozenset[int] | set[int], fix_racks: bool = True, *,
    shortcut: bool = True,
) -> TopicFacts:
    """:func:`topic_facts`; ``shortcut=False``: every partition through the general loop (tests)."""
    rack = layout.rack_of
    k_racks = layout.n_racks
    sizes = layout._rack_sizes
    counts: dict[int, int] = {}
    rf_counts: dict[int, int] = {}
    removals = need_total = slots_total = 0
    compat = [0] * k_racks
    rack_min = [0] * k_racks  # frozen partitions here, the others from their RF below
    rack_max = [0] * k_racks
    frozen_rf: dict[int, int] = {}
    frozen = t.frozen
    replicas = t.replicas
    if shortcut and (frozen is None or not any(frozen)) and list(map(len, replicas)) == t.target_rf:
        # the usual topic: nothing frozen, no RF change. If every replica is on a live broker, each
        # partition only needs its missing racks: the loop below, without its per-replica steps
        counts = dict(Counter(chain.from_iterable(replicas)))  # the same counts, in the same order
        if live_set.issuperset(counts):
            rf_counts = dict(Counter(t.target_rf))
            if fix_racks and k_racks > 1:
                rack_get = rack.__getitem__
                need_total = sum(
                    need for need in (min(len(reps), k_racks) - len(set(map(rack_get, reps))) for reps in replicas)
                    if need > 0
                )
            replicas = []  # done
        else:
            counts = {}
    for p, reps in enumerate(replicas):
        r = t.target_rf[p]
        rf_counts[r] = rf_counts.get(r, 0) + 1
        for b in reps:
            counts[b] = counts.get(b, 0) + 1
        if len(reps) > r:
            removals += len(reps) - r
        if frozen is not None and frozen[p]:
            frozen_rf[r] = frozen_rf.get(r, 0) + 1
            for b in reps:
                g = rack.get(b, -1)
                if b in live_set and g >= 0:
                    rack_min[g] += 1
                    rack_max[g] += 1
            continue
        present = [b for b in reps if b in live_set]
        need = r - len(present)
        if fix_racks and k_racks > 1:
            need = max(need, min(r, k_racks) - len({rack[b] for b in present}))
        if need > 0:
            need_total += need
        slots = r - min(len(present), r)
        if slots > 0 and k_racks > 1:
            slots_total += slots
            per_rack_max = r - min(r, k_racks) + 1
            in_rack = [0] * k_racks
            for b in present[:r]:
                in_rack[rack[b]] += 1
            for g in range(k_racks):
                compat[g] += max(0, min(slots, per_rack_max - in_rack[g], sizes[g] - in_rack[g]))
    n = sum(t.target_rf)
    lo, hi = rack_bounds(rf_counts, sizes, n)
    spread_racks = fix_racks and k_racks > 1
    for r, c in rf_counts.items():
        c -= frozen_rf.get(r, 0)  # the partitions the plan may move: the rack spread (or anywhere)
        per_rack = r - min(r, k_racks) + 1 if spread_racks else r
        for g in range(k_racks):
            if spread_racks and r >= k_racks:
                rack_min[g] += c
            rack_max[g] += c * min(sizes[g], per_rack)
    return TopicFacts(
        topic=t.topic,
        balance=t.balance,
        counts=counts,
        n=n,
        removals=removals,
        on_removed=sum(c for b, c in counts.items() if b not in live_set),
        rack_lo=lo,
        rack_hi=hi,
        forced=len(sizes) > 1 and lo == hi,
        partition_need=need_total,
        slots=slots_total,
        compat=compat,
        rack_min=rack_min,
        rack_max=rack_max,
    )


def rack_slot_bound(facts: TopicFacts, layout: BrokerLayout, width: int) -> int:
    """The per-topic-and-rack part (see the module doc)."""
    k_racks = layout.n_racks
    if k_racks <= 1:
        return 0
    live = layout.live
    rack = layout.rack_of
    sizes = layout._rack_sizes
    nb = len(layout.brokers)
    current = [0] * k_racks
    for b, c in facts.counts.items():
        if b in live:
            current[rack[b]] += c
    forced_slots = facts.slots
    compat = facts.compat
    best: int | None = None
    n = facts.n
    for tt in range(max(0, _ceil_div(n, nb) - width), n // nb + 1):
        f_min = [max(facts.rack_lo[g], sizes[g] * tt) for g in range(k_racks)]
        f_max = [min(facts.rack_hi[g], sizes[g] * (tt + width)) for g in range(k_racks)]
        extra_in = sum(max(0, f_min[g] - current[g] - compat[g]) for g in range(k_racks))
        extra_out = sum(max(0, current[g] - f_max[g]) for g in range(k_racks)) - facts.removals
        cost = forced_slots + max(extra_in, extra_out, 0)
        if best is None or cost < best:
            best = cost
    return best or 0


def _spread(values: Sequence[int]) -> int:
    return max(values) - min(values) if values else 0


def replica_moves_lower_bound(
    topics: Sequence[TopicPartitions],
    layout: BrokerLayout,
    after: Mapping[str, Mapping[int, int]],
    *,
    balance_brokers: bool = True,
    fixed_load: Mapping[int, int] | None = None,
    fix_racks: bool = True,
) -> LowerBound:
    """The lower bound for plans reaching the balance of ``after`` (see the module doc).

    ``after[topic]``: replicas per live broker of each *balanced* topic once the plan is done
    (topics not in it are not balanced: only their partitions' needs count); the band widths
    are taken from it (at least 1, the goal). ``balance_brokers``: the goal balances the
    brokers' totals (every goal but heal).
    """
    facts = [topic_facts(t, layout, fix_racks=fix_racks) for t in topics]
    return lower_bound_from_facts(facts, layout, after, balance_brokers=balance_brokers, fixed_load=fixed_load)


@dataclass
class BoundPart:
    """One or more topics' additive share of the lower bound (:func:`bound_part`): computed
    next to the topics (Spark executors), added up with :meth:`merge`, finished on the driver
    by :func:`combine_bound_parts`."""

    k_racks: int
    per_partition: int = 0
    per_topic: int = 0
    removals: int = 0
    on_removed: int = 0
    forced: int = 0
    rack_lo: list[int] = field(default_factory=list)
    rack_hi: list[int] = field(default_factory=list)
    rack_now: list[int] = field(default_factory=list)
    rack_compat: list[int] = field(default_factory=list)
    sum_lo: list[int] = field(default_factory=list)
    #: fewest / most replicas each rack can hold (:attr:`TopicFacts.rack_min`), summed
    rack_min: list[int] = field(default_factory=list)
    rack_max: list[int] = field(default_factory=list)
    clamp_extra: dict[int, int] = field(default_factory=dict)
    lo_cover: dict[int, int] = field(default_factory=dict)
    over_hi: dict[int, int] = field(default_factory=dict)
    totals_after: dict[int, int] = field(default_factory=dict)
    #: the joint (Lagrangian) bound's entries, (topic, (extras, saving broker indices, inflow))
    dual: list[tuple[str, tuple[int, list[int], int]]] = field(default_factory=list)
    #: False once a topic cannot enter the joint bound (then it is not computed)
    dual_ok: bool = True
    base_sum: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("rack_lo", "rack_hi", "rack_now", "rack_compat", "sum_lo", "rack_min", "rack_max"):
            if not getattr(self, name):
                setattr(self, name, [0] * self.k_racks)

    def merge(self, other: BoundPart) -> None:
        self.per_partition += other.per_partition
        self.per_topic += other.per_topic
        self.removals += other.removals
        self.on_removed += other.on_removed
        self.forced += other.forced
        for name in ("rack_lo", "rack_hi", "rack_now", "rack_compat", "sum_lo", "rack_min", "rack_max"):
            mine, theirs = getattr(self, name), getattr(other, name)
            for g in range(self.k_racks):
                mine[g] += theirs[g]
        for name in ("clamp_extra", "lo_cover", "over_hi", "totals_after", "base_sum"):
            mine_d, theirs_d = getattr(self, name), getattr(other, name)
            for b, c in theirs_d.items():
                mine_d[b] = mine_d.get(b, 0) + c
        self.dual.extend(other.dual)
        self.dual_ok = self.dual_ok and other.dual_ok


def _add(d: dict[int, int], b: int, c: int) -> None:
    if c:
        d[b] = d.get(b, 0) + c


def bound_part(
    facts: TopicFacts, layout: BrokerLayout, final: Mapping[int, int] | None, *, balance_brokers: bool = True
) -> BoundPart:
    """One topic's :class:`BoundPart` (``final``: its replicas per live broker after the plan,
    ``None`` when the topic is not balanced)."""
    live = layout.brokers
    nb = len(live)
    live_set = layout.live
    k_racks = layout.n_racks
    sizes = layout._rack_sizes
    rack = layout.rack_of
    out = BoundPart(k_racks)
    part = facts.partition_need
    out.per_partition = part
    out.removals = facts.removals
    out.on_removed = facts.on_removed
    out.rack_lo = list(facts.rack_lo)
    out.rack_hi = list(facts.rack_hi)
    if facts.rack_min:
        out.rack_min = list(facts.rack_min)
        out.rack_max = list(facts.rack_max)
    if k_racks > 1:
        for b, c in facts.counts.items():
            if b in live_set:
                out.rack_now[rack[b]] += c
        out.forced = facts.slots
        out.rack_compat = list(facts.compat)
    if final is None or not facts.balance:
        out.per_topic = part
        for b, c in facts.counts.items():  # not balanced: its count is free, clamp = c
            if b in live_set:
                _add(out.clamp_extra, b, c)
                _add(out.totals_after, b, c)
        out.dual_ok = False
        return out
    # the final counts of live brokers, as a per-broker loop over every live broker would add them
    out.totals_after = {b: c for b, c in final.items() if c and b in live_set}
    if balance_brokers:
        entry = _dual_part(facts, layout, final)
        if entry is None:
            out.dual_ok = False
        else:
            out.dual.append((facts.topic, entry[0]))
            out.base_sum = entry[1]
    width = max(1, _spread([final.get(b, 0) for b in live]))
    topic_bound = max(
        part,
        _band_costs(facts.counts, facts.n, live, width, facts.removals, facts.on_removed, live_set)[2],
        rack_slot_bound(facts, layout, width),
    )
    if facts.forced:
        members = layout.rack_members
        widths = [max(1, _spread([final.get(b, 0) for b in members[g]])) for g in range(k_racks)]
        # moves >= sum of each rack's fewest inflows (and outflows), racks being disjoint
        sets = layout.rack_member_sets
        costs = [_band_costs(facts.counts, facts.rack_lo[g], members[g], widths[g], members=sets[g]) for g in range(k_racks)]
        inflow = sum(c[0] for c in costs)
        outflow = sum(c[1] for c in costs)
        topic_bound = max(topic_bound, inflow, outflow + facts.on_removed - facts.removals)
        ranges = [
            (max(0, _ceil_div(facts.rack_lo[g], sizes[g]) - widths[g]), facts.rack_lo[g] // sizes[g] + widths[g])
            for g in range(k_racks)
        ]
    else:
        lo_t = max(0, _ceil_div(facts.n, nb) - width)
        ranges = [(lo_t, facts.n // nb + width)] * k_racks
    out.per_topic = topic_bound
    for g in range(k_racks):
        out.sum_lo[g] += ranges[g][0]
    clamp_extra, lo_cover, over_hi = out.clamp_extra, out.lo_cover, out.over_hi
    for b, c in facts.counts.items():
        if b not in live_set:
            continue
        lo, hi = ranges[rack[b]]
        if c > lo and hi > lo:  # (c clamped to [lo, hi]) - lo, when not 0
            clamp_extra[b] = (c if c < hi else hi) - lo
        if c and lo:
            lo_cover[b] = c if c < lo else lo
        if c > hi:
            over_hi[b] = c - hi
    return out


def bound_parts(
    items: Sequence[tuple[TopicFacts, Mapping[int, int] | None]], layout: BrokerLayout, *, balance_brokers: bool = True
) -> BoundPart:
    """Many topics' :class:`BoundPart` (``items``: each topic's facts and final counts, as
    :func:`bound_part` takes them), merged: the same sums as merging :func:`bound_part` of each
    (the per-broker maps may list their brokers in another order). The balanced topics' steps over
    every live broker (the band costs, the per-rack widths and bands, the joint bound's entries,
    the clamped counts) are taken over all of them at once, in arrays of topics x live brokers:
    what a Spark task does for its topics, instead of loops per topic and broker."""
    out = BoundPart(layout.n_racks)
    balanced: list[tuple[TopicFacts, Mapping[int, int]]] = []
    for facts, final in items:
        if final is None or not facts.balance or not layout.brokers:
            out.merge(bound_part(facts, layout, final, balance_brokers=balance_brokers))
        else:
            balanced.append((facts, final))
    if balanced:
        _balanced_parts(out, balanced, layout, balance_brokers)
    return out


_BIG = np.iinfo(np.int64).max


def _by_broker(maps: Sequence[Mapping[int, int]], live: np.ndarray) -> np.ndarray:
    """``maps`` (broker -> count) as a matrix of maps x live brokers (``live`` sorted); other brokers left out."""
    lens = np.fromiter(map(len, maps), dtype=np.int64, count=len(maps))
    total = int(lens.sum())
    keys = np.fromiter(chain.from_iterable(maps), dtype=np.int64, count=total)
    values = np.fromiter(chain.from_iterable(m.values() for m in maps), dtype=np.int64, count=total)
    rows = np.repeat(np.arange(len(maps)), lens)
    cols = np.searchsorted(live, keys)
    ok = cols < len(live)
    ok[ok] = live[cols[ok]] == keys[ok]
    out = np.zeros((len(maps), len(live)), dtype=np.int64)
    out[rows[ok], cols[ok]] = values[ok]
    return out


def _band_rows(
    c: np.ndarray, n: np.ndarray, nb: int, width: np.ndarray, removals: np.ndarray | int = 0,
    on_removed: np.ndarray | int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_band_costs` of every row of ``c`` (a topic's counts on ``nb`` brokers) at once:
    (fewest inflows, fewest outflows, fewest moves) per row."""
    t0 = np.maximum(0, -(-n // nb) - width)
    t1 = n // nb
    best_in = np.full(len(n), _BIG)
    best_out = np.full(len(n), _BIG)
    best = np.full(len(n), _BIG)
    for k in range(int((t1 - t0).max()) + 1 if len(n) else 0):
        t = t0 + k
        valid = t <= t1
        hi = t + width
        below = np.maximum(0, t[:, None] - c).sum(1)
        over = np.maximum(0, c - hi[:, None]).sum(1)
        clamped = np.clip(c, t[:, None], hi[:, None]).sum(1)
        inflow = below + np.maximum(0, n - clamped)
        outflow = on_removed + over + np.maximum(0, clamped - n)
        cost = np.maximum(inflow, outflow - removals)
        best_in = np.where(valid, np.minimum(best_in, inflow), best_in)
        best_out = np.where(valid, np.minimum(best_out, outflow), best_out)
        best = np.where(valid, np.minimum(best, cost), best)
    return best_in, best_out, best


def _add_counts(d: dict[int, int], brokers: Sequence[int], values: np.ndarray) -> None:
    for b, c in zip(brokers, values.tolist(), strict=True):
        if c:
            d[b] = d.get(b, 0) + c


def _balanced_parts(
    out: BoundPart, items: Sequence[tuple[TopicFacts, Mapping[int, int]]], layout: BrokerLayout, balance_brokers: bool
) -> None:
    """:func:`bound_parts` of balanced topics (each with its final counts), added to ``out``."""
    live = layout.brokers
    nb = len(live)
    k_racks = layout.n_racks
    sizes = layout._rack_sizes
    rk = np.asarray(layout.live_racks, dtype=np.int64)
    facts = [f for f, _ in items]
    for f in facts:  # the topics' own figures: sums
        out.per_partition += f.partition_need
        out.removals += f.removals
        out.on_removed += f.on_removed
        for g in range(k_racks):
            out.rack_lo[g] += f.rack_lo[g]
            out.rack_hi[g] += f.rack_hi[g]
        if f.rack_min:
            for g in range(k_racks):
                out.rack_min[g] += f.rack_min[g]
                out.rack_max[g] += f.rack_max[g]
        if k_racks > 1:
            out.forced += f.slots
            for g in range(k_racks):
                out.rack_compat[g] += f.compat[g]
    live_arr = np.asarray(live, dtype=np.int64)
    c = _by_broker([f.counts for f in facts], live_arr)
    final = _by_broker([m for _, m in items], live_arr)
    n = np.fromiter((f.n for f in facts), dtype=np.int64, count=len(facts))
    removals = np.fromiter((f.removals for f in facts), dtype=np.int64, count=len(facts))
    on_removed = np.fromiter((f.on_removed for f in facts), dtype=np.int64, count=len(facts))
    part = np.fromiter((f.partition_need for f in facts), dtype=np.int64, count=len(facts))
    members = [rk == g for g in range(k_racks)]
    current = np.stack([c[:, m].sum(1) for m in members], axis=1)  # per topic and rack
    if k_racks > 1:
        for g in range(k_racks):
            out.rack_now[g] += int(current[:, g].sum())
    _add_counts(out.totals_after, live, final.sum(0))
    width = np.maximum(1, final.max(1) - final.min(1))
    topic_bound = np.maximum(part, _band_rows(c, n, nb, width, removals, on_removed)[2])
    rack_lo = np.array([f.rack_lo for f in facts], dtype=np.int64).reshape(len(facts), k_racks)
    rack_hi = np.array([f.rack_hi for f in facts], dtype=np.int64).reshape(len(facts), k_racks)
    if k_racks > 1:  # rack_slot_bound
        compat = np.array([f.compat for f in facts], dtype=np.int64).reshape(len(facts), k_racks)
        slots = np.fromiter((f.slots for f in facts), dtype=np.int64, count=len(facts))
        size_row = np.asarray(sizes, dtype=np.int64)[None, :]
        t0 = np.maximum(0, -(-n // nb) - width)
        t1 = n // nb
        best = np.full(len(facts), _BIG)
        for k in range(int((t1 - t0).max()) + 1):
            tt = t0 + k
            f_min = np.maximum(rack_lo, size_row * tt[:, None])
            f_max = np.minimum(rack_hi, size_row * (tt + width)[:, None])
            extra_in = np.maximum(0, f_min - current - compat).sum(1)
            extra_out = np.maximum(0, current - f_max).sum(1) - removals
            cost = slots + np.maximum(np.maximum(extra_in, extra_out), 0)
            best = np.where(tt <= t1, np.minimum(best, cost), best)
        topic_bound = np.maximum(topic_bound, best)
    lo_t = np.maximum(0, -(-n // nb) - width)
    range_lo = np.repeat(lo_t[:, None], k_racks, axis=1)
    range_hi = np.repeat((n // nb + width)[:, None], k_racks, axis=1)
    forced = np.fromiter((f.forced for f in facts), dtype=bool, count=len(facts))
    if forced.any():  # per rack: its own band (racks fix every rack's share)
        inflow = np.zeros(int(forced.sum()), dtype=np.int64)
        outflow = np.zeros_like(inflow)
        for g in range(k_racks):
            cg, fg, lo_g = c[forced][:, members[g]], final[forced][:, members[g]], rack_lo[forced, g]
            wg = np.maximum(1, fg.max(1) - fg.min(1))
            i_g, o_g, _ = _band_rows(cg, lo_g, sizes[g], wg)
            inflow += i_g
            outflow += o_g
            range_lo[forced, g] = np.maximum(0, -(-lo_g // sizes[g]) - wg)
            range_hi[forced, g] = lo_g // sizes[g] + wg
        topic_bound[forced] = np.maximum.reduce(
            [topic_bound[forced], inflow, outflow + on_removed[forced] - removals[forced]])
    out.per_topic += int(topic_bound.sum())
    for g in range(k_racks):
        out.sum_lo[g] += int(range_lo[:, g].sum())
    lo, hi = range_lo[:, rk], range_hi[:, rk]  # per topic and live broker
    _add_counts(out.clamp_extra, live, np.where((c > lo) & (hi > lo), np.minimum(c, hi) - lo, 0).sum(0))
    _add_counts(out.lo_cover, live, np.where((c > 0) & (lo > 0), np.minimum(c, lo), 0).sum(0))
    _add_counts(out.over_hi, live, np.where(c > hi, c - hi, 0).sum(0))
    if not balance_brokers:
        return
    # the joint bound's entries (_dual_entry): each topic's base per broker, from its rack shares
    bases = np.zeros((len(facts), k_racks), dtype=np.int64)
    extras: list[int | None] = []
    for i, f in enumerate(facts):
        uniform = all(lo_ * nb <= f.n * s <= hi_ * nb for lo_, hi_, s in zip(f.rack_lo, f.rack_hi, sizes, strict=True))
        if not uniform and not f.forced:
            extras.append(None)
            continue
        sh = rack_shares(f.n, f.rack_lo, f.rack_hi, list(sizes))
        bases[i] = sh.base
        extras.append(sh.extras)
    base = bases[:, rk]
    ok = np.array([e is not None for e in extras], dtype=bool) & ((final >= base) & (final <= base + 1)).all(1)
    if not ok.all():
        out.dual_ok = False
    if not ok.any():
        return
    saving = c > base
    inflows = np.where(saving, 0, base - c).sum(1).tolist()
    for i in np.flatnonzero(ok).tolist():
        entry = (extras[i], np.flatnonzero(saving[i]).tolist(), inflows[i])
        out.dual.append((facts[i].topic, entry))
    base_sum = base[ok].sum(0).tolist()
    for i, v in enumerate(base_sum):
        if v:
            out.base_sum[i] = out.base_sum.get(i, 0) + v


def lower_bound_from_facts(
    topics: Sequence[TopicFacts],
    layout: BrokerLayout,
    after: Mapping[str, Mapping[int, int]],
    *,
    balance_brokers: bool = True,
    fixed_load: Mapping[int, int] | None = None,
) -> LowerBound:
    """:func:`replica_moves_lower_bound` from per-topic :class:`TopicFacts`."""
    total = BoundPart(layout.n_racks)
    for facts in topics:
        total.merge(bound_part(facts, layout, after.get(facts.topic), balance_brokers=balance_brokers))
    return combine_bound_parts(total, layout, balance_brokers=balance_brokers, fixed_load=fixed_load)


def combine_bound_parts(
    parts: BoundPart,
    layout: BrokerLayout,
    *,
    balance_brokers: bool = True,
    fixed_load: Mapping[int, int] | None = None,
) -> LowerBound:
    """The lower bound from every topic's :class:`BoundPart`, merged (the driver's step)."""
    live = layout.brokers
    nb = len(live)
    k_racks = layout.n_racks
    sizes = layout.rack_sizes()
    rack = layout.rack_of
    members = [[b for b in live if rack[b] == g] for g in range(k_racks)]
    fixed = fixed_load or {}
    rack_lo_all = list(parts.rack_lo)
    rack_hi_all = list(parts.rack_hi)
    rack_now = list(parts.rack_now)
    for b in live:
        rack_lo_all[rack[b]] += fixed.get(b, 0)
        rack_hi_all[rack[b]] += fixed.get(b, 0)
        rack_now[rack[b]] += fixed.get(b, 0)
    totals_after = {b: fixed.get(b, 0) + parts.totals_after.get(b, 0) for b in live}
    sum_lo = parts.sum_lo
    per_partition, per_topic = parts.per_partition, parts.per_topic
    removals_total, removed_out = parts.removals, parts.on_removed
    per_broker = 0
    g_ranges: list[tuple[int, int]] = []
    if balance_brokers and nb:
        total = sum(totals_after.values())
        if k_racks > 1 and rack_lo_all == rack_hi_all:
            # the racks fix every rack's total: balance within each rack
            for g in range(k_racks):
                w = max(1, _spread([totals_after[b] for b in members[g]]))
                r_total = rack_lo_all[g]
                g_ranges.append((max(0, _ceil_div(r_total, sizes[g]) - w), r_total // sizes[g] + w))
        else:
            w = max(1, _spread(list(totals_after.values())))
            g_ranges = _band_ranges(parts, layout, members, fixed, total, w)
        inflow = outflow = 0
        for b in live:
            g = rack[b]
            gmin, gmax = g_ranges[g]
            clamped = sum_lo[g] + parts.clamp_extra.get(b, 0)
            f = fixed.get(b, 0)
            inflow += (sum_lo[g] - parts.lo_cover.get(b, 0)) + max(0, gmin - f - clamped)
            outflow += parts.over_hi.get(b, 0) + max(0, f + clamped - gmax)
        per_broker = max(inflow, outflow + removed_out - removals_total)
    per_rack = 0
    if balance_brokers and k_racks > 1:
        r_min = [sizes[g] * g_ranges[g][0] for g in range(k_racks)]
        r_max = [sizes[g] * g_ranges[g][1] for g in range(k_racks)]
        if parts.rack_min:
            for g in range(k_racks):
                f = sum(fixed.get(b, 0) for b in members[g])
                r_min[g] = max(r_min[g], parts.rack_min[g] + f)
                r_max[g] = min(r_max[g], parts.rack_max[g] + f)
        extra_in = sum(max(0, r_min[g] - rack_now[g] - parts.rack_compat[g]) for g in range(k_racks))
        extra_out = sum(max(0, rack_now[g] - r_max[g]) for g in range(k_racks)) - removals_total
        per_rack = parts.forced + max(extra_in, extra_out, 0)
    joint = 0
    if parts.dual_ok and parts.dual and balance_brokers and nb:
        index = {b: i for i, b in enumerate(live)}
        x_lo = [g_ranges[rack[b]][0] - fixed.get(b, 0) - parts.base_sum.get(index[b], 0) for b in live]
        joint = _joint_bound([entry for _, entry in sorted(parts.dual, key=lambda x: x[0])], x_lo)
    return LowerBound(
        moves=max(per_partition, per_topic, per_broker, per_rack, joint),
        per_partition=per_partition,
        per_topic=per_topic,
        per_broker=per_broker,
        per_rack=per_rack,
        joint=joint,
    )


def _band_ranges(
    parts: BoundPart,
    layout: BrokerLayout,
    members: Sequence[Sequence[int]],
    fixed: Mapping[int, int],
    total: int,
    w: int,
) -> list[tuple[int, int]]:
    """Per rack, the totals a broker of the rack can end with when every broker's total lies
    in a band of width ``w`` that the racks allow (:meth:`~.quotas.RackBand.broker_ranges`:
    each rack's total within what the rack spread lets it hold, all adding up to ``total``):
    a rack that must hold more than its share (the only broker of a rack, say, holding a
    replica of every partition spanning all racks) puts its brokers above the band's bottom,
    and the others below its top."""
    nb = len(layout.brokers)
    plain = [(max(0, _ceil_div(total, nb) - w), total // nb + w)] * len(members)
    if not parts.rack_min:
        return plain
    fixed_by_rack = [[fixed.get(b, 0) for b in m] for m in members]
    lo = [parts.rack_min[g] + sum(f) for g, f in enumerate(fixed_by_rack)]
    hi = [parts.rack_max[g] + sum(f) for g, f in enumerate(fixed_by_rack)]
    ranges = RackBand(total, lo, hi, fixed_by_rack).broker_ranges(w)
    if ranges is None:  # the plan itself is outside every such band (it cannot fix some racks)
        return plain
    return ranges


def _dual_part(
    facts: TopicFacts, layout: BrokerLayout, final: Mapping[int, int]
) -> tuple[tuple[int, list[int], int], dict[int, int]] | None:
    """A topic's entry in the joint bound and its bases per broker index, or ``None`` if the
    topic's base is not forced or its final counts are not base / base + 1."""
    base_sum: list[int] = [0] * len(layout.brokers)
    dual: list[tuple[int, list[int], int]] = []
    if _dual_entry(dual, facts.topic, facts, layout, final, base_sum) is None:
        return None
    return dual[0], {i: c for i, c in enumerate(base_sum) if c}


def _dual_entry(
    dual: list[tuple[int, list[int], int]],
    topic: str,
    facts: TopicFacts,
    layout: BrokerLayout,
    final: Mapping[int, int],
    base_sum: list[int],
) -> list[tuple[int, list[int], int]] | None:
    """Add a topic to the joint bound, or give it up (``None``) if the topic's base is not
    forced or its final counts are not base / base + 1."""
    live = layout.brokers
    sizes = layout.rack_sizes()
    n, nb = facts.n, len(live)
    uniform = all(lo * nb <= n * s <= hi * nb for lo, hi, s in zip(facts.rack_lo, facts.rack_hi, sizes, strict=True))
    if not uniform and not facts.forced:
        return None
    sh = rack_shares(n, facts.rack_lo, facts.rack_hi, sizes)
    bases = [sh.base[g] for g in layout.live_racks]  # per live broker, its rack's base
    saving: list[int] = []
    inflow = 0
    final_get, counts_get = final.get, facts.counts.get
    for i, b in enumerate(live):
        base = bases[i]
        f = final_get(b, 0)
        if not base <= f <= base + 1:
            return None
        c = counts_get(b, 0)
        if c > base:
            saving.append(i)
        else:
            inflow += base - c
        base_sum[i] += base
    dual.append((sh.extras, saving, inflow))
    return dual


def _joint_bound(dual: Sequence[tuple[int, list[int], int]], x_lo: Sequence[int]) -> int:
    """max over prices pi in {0,1}^brokers of the Lagrangian bound (see the module doc).

    For a priced set ``P``, a topic with ``e`` extras and saving brokers ``S`` picks its ``e``
    cheapest of: -1 (saving, priced), 0 (saving unpriced, or not saving priced), +1 (rest):
    ``-min(e, a) + max(0, k - |P|)`` with ``a = |S & P|`` and ``k = e - |S| + a``; plus
    ``sum(x_lo[b] for b in P)``. A local search flips one broker in or out of ``P`` while
    that raises the bound. A flip changes ``a`` (and ``k``) by one only for the topics the
    broker saves for, and ``|P|`` by one for all: for those topics ``k - |P|`` stays, so
    their term changes by ``min(e, a) - min(e, a + step)``; for the others only the
    ``max(0, k - |P|)`` term moves (counted with a histogram of ``k``). Each flip's change
    is a few numpy reductions over the broker's topics (this runs on the driver over every
    topic: at 1M replicas, about 850,000 (topic, broker) pairs).
    """
    nb = len(x_lo)
    n_topics = len(dual)
    inflow = sum(d[2] for d in dual)
    extras = np.fromiter((d[0] for d in dual), dtype=np.int64, count=n_topics)
    sizes = np.fromiter((len(d[1]) for d in dual), dtype=np.int64, count=n_topics)
    total = int(sizes.sum())
    topic_of = np.repeat(np.arange(n_topics, dtype=np.int64), sizes)
    broker_of = np.fromiter(chain.from_iterable(d[1] for d in dual), dtype=np.int64, count=total)
    # per broker, the topics it saves for
    by_broker = np.argsort(broker_of, kind="stable")
    cuts = np.searchsorted(broker_of[by_broker], np.arange(nb + 1)).tolist()
    members = [topic_of[by_broker[cuts[i]:cuts[i + 1]]] for i in range(nb)]
    x = np.asarray(x_lo, dtype=np.int64)
    priced = x > np.diff(np.asarray(cuts, dtype=np.int64))
    overlap = np.bincount(topic_of[priced[broker_of]], minlength=n_topics).astype(np.int64)
    n_priced = int(priced.sum())
    # k_t = e - |S| + a ranges over [-nb, nb + max(e)]
    offset = nb + 1
    span = 2 * nb + 2 + int(extras.max(initial=0))
    ks = extras - sizes + overlap
    hist = np.bincount(ks + offset, minlength=span + 1)

    def above(p: int) -> int:  # topics with k > p
        lo = p + 1 + offset
        return int(hist[max(0, lo):].sum()) if lo <= span else 0

    best = int((np.maximum(ks - n_priced, 0) - np.minimum(extras, overlap)).sum()) + int(x[priced].sum())
    improved = True
    rounds = 0
    while improved and rounds < 6:
        improved = False
        rounds += 1
        for i in range(nb):
            mine = members[i]
            if priced[i]:  # unprice: |P| - 1
                p = n_priced - 1
                delta = -int(x[i]) + above(p) - int((ks[mine] > p).sum())
                delta += int((overlap[mine] <= extras[mine]).sum())
                step = -1
            else:
                p = n_priced
                delta = int(x[i]) - above(p) + int((ks[mine] > p).sum())
                delta -= int((overlap[mine] < extras[mine]).sum())
                step = 1
            if delta > 0:
                priced[i] = not priced[i]
                n_priced += step
                hist -= np.bincount(ks[mine] + offset, minlength=span + 1)
                overlap[mine] += step
                ks[mine] += step
                hist += np.bincount(ks[mine] + offset, minlength=span + 1)
                best += delta
                improved = True
    return inflow + max(0, best)
