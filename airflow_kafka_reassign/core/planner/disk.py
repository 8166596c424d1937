"""The disk step: balance bytes per broker as a share of its capacity, at the fewest bytes moved.

Runs after the per-topic steps (replica and per-topic counts already balanced) and before the
leader fix-up, on plain data, so the goals keep the priority the docs state:

1. hard: every partition over ``min(RF, racks)`` racks (never made worse), RF unchanged, removed
   brokers empty (the count steps did that), no broker above ``cap`` of its capacity;
2. disk usage balance: every broker within ``tolerance`` of the mean share (total bytes over
   total capacity) — ``goal="offload"`` instead only brings brokers above ``threshold`` down
   to it, and brokers below it receive but never send;
3. replica counts and per-topic counts: a move never takes a broker's replica count, or a
   topic's count on a broker, out of the window ``[min, min + spread]`` it started in; where a
   move would, a *swap* sends one of the smallest replicas of the receiver back (counts unchanged);
4. preferred leaders: balanced afterwards by the leader fix-up (no data moves).

The choice is greedy: a broker above its band sheds the largest replica no larger than what it
must shed (so it lands just inside the band), to the broker with the most room; brokers below
the band then pull the same way. Each moved replica's bytes leave one broker and arrive at one,
so ``max(sum of excess over the band, sum of deficit under it)`` is a lower bound on the bytes
any plan reaching the same balance moves (:func:`bytes_lower_bound`); the plan reports both.

No replica moves twice (another replica of the same partition may move, and a replica placed by
the step may go back out as the small half of a swap: the plan moves it once, from where it was to
where it ends); partitions frozen (in flight) or not balanced (left out) never move.
"""

from __future__ import annotations

import bisect
import gc
import itertools
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from airflow_kafka_reassign.core.planner.disk_index import (
    FlatRows,
    TopicCounts,
    build_index,
    distinct_per_row,
    index_of,
    member,
    rack_lookup,
    racks_of,
)
from airflow_kafka_reassign.core.planner.sorted_blocks import SortedBlocks
from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicPartitions

#: Candidates of one broker tried per move before giving up on it (bounds the work per move).
CANDIDATES = 64
#: Smallest replicas of a receiver tried to send back in a swap.
SWAP_CANDIDATES = 400
#: Receivers tried per candidate replica.
RECEIVERS = 24


@dataclass(frozen=True)
class DiskGoal:
    """What the disk step aims at."""

    #: Live broker -> disk capacity (bytes).
    capacity: Mapping[int, int]
    #: No broker above this share of its capacity after the plan (hard).
    cap: float = 0.85
    #: Band around the mean share every broker should end in (rebalance goals).
    tolerance: float = 0.02
    #: ``goal="offload"``: brokers above this share shed down to it; the others only receive.
    offload_threshold: float | None = None
    #: Replica-count and per-topic windows (max - min) the disk step keeps.
    count_spread: int = 2
    topic_spread: int = 2
    #: The disk step first brings the brokers' replica counts within ``count_spread`` itself
    #: (the count steps before it then balanced nothing), moving the smallest replicas.
    balance_counts: bool = False

    def band(self, total: int) -> dict[int, tuple[float, float]]:
        """Broker -> (lowest, highest) bytes the goal accepts for ``total`` bytes on the live brokers."""
        cap_total = sum(self.capacity.values())
        if self.offload_threshold is not None:
            top = min(self.offload_threshold, self.cap)
            return {b: (0.0, top * c) for b, c in self.capacity.items()}
        mean = total / cap_total if cap_total else 0.0
        hi = min(mean + self.tolerance, self.cap)
        lo = max(0.0, mean - self.tolerance)
        return {b: (lo * c, hi * c) for b, c in self.capacity.items()}


@dataclass
class DiskOutcome:
    """What the disk step changed and what it saw."""

    #: (topic index, partition index) -> new replicas, for every partition the step moved.
    changed: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    #: Bytes per live broker before and after the step.
    before: dict[int, int] = field(default_factory=dict)
    after: dict[int, int] = field(default_factory=dict)
    moves: int = 0
    swaps: int = 0
    warnings: list[str] = field(default_factory=list)
    #: Replica counts' max-min over the live brokers after the step.
    count_spread: int = 0

    def counts_missed(self, goal: DiskGoal, floor: int = 0) -> bool:
        """The step balanced the replica counts itself (``goal.balance_counts``) and left them further
        apart than ``goal.count_spread`` and than ``floor`` (the closest the racks let any plan
        bring them, :attr:`~.quotas.QuotaPlan.floor`): plan again with the count steps balancing them."""
        return goal.balance_counts and self.count_spread > max(goal.count_spread, floor)


@dataclass(frozen=True)
class DiskPart:
    """What one group of topics is asked to do in the disk step by groups (:mod:`.disk_groups`): per
    live broker, the band its bytes must end in, the most bytes it may hold (its share of the cap)
    and the window its replica count must end in, each counting the other groups' replicas as
    fixed where they were when the round started. The groups' bands add up to the goal's band,
    their windows to the goal's count window."""

    band: Mapping[int, tuple[float, float]]
    cap: Mapping[int, float]
    counts: Mapping[int, tuple[int, int]]
    #: the group's part of each broker's band (its share of the excess, the room or the deficit)
    weight: Mapping[int, float]


def bytes_per_broker(
    topics: Sequence[TopicPartitions], replicas: Sequence[Sequence[tuple[int, ...]]], fixed_bytes: Mapping[int, int]
) -> dict[int, int]:
    """Bytes per broker of ``replicas`` (one list per topic) plus the partitions left alone."""
    out = dict(fixed_bytes)
    for t, reps in zip(topics, replicas, strict=True):
        sizes = t.sizes or [0] * len(reps)
        for r, s in zip(reps, sizes, strict=True):
            for b in r:
                out[b] = out.get(b, 0) + s
    return out


def check_disk_goal(goal: DiskGoal, total: int, layout: BrokerLayout) -> None:
    """Raise :class:`ConfigurationError` when no plan can meet the cap (before planning)."""
    from airflow_kafka_reassign.exceptions import ConfigurationError

    allowed = sum(goal.capacity.get(b, 0) for b in layout.brokers) * goal.cap
    if total > allowed:
        cap_total = sum(goal.capacity.get(b, 0) for b in layout.brokers)
        raise ConfigurationError(
            f"no plan can keep every broker under {goal.cap:.0%} of its disk: the replicas hold {total:,} bytes "
            f"but the {len(layout.brokers)} live broker(s) may hold {int(allowed):,} ({goal.cap:.0%} of "
            f"{cap_total:,}); add brokers or capacity, delete data, or raise disk_cap"
        )


def bytes_lower_bound(
    before: Mapping[int, int],
    after: Mapping[int, int],
    goal: DiskGoal,
    live: Sequence[int],
    total: int,
    min_out: Mapping[int, int] | None = None,
) -> int:
    """Fewest bytes any plan moves to reach a balance at least as good as ``after``.

    Per live broker the goal's band, widened to include where ``after`` ends (a broker the plan
    could not bring into the band counts as reaching only that); brokers not live end empty.
    Bytes leave brokers above the band and arrive at brokers below it, one broker each way per
    moved replica: the bound is the larger of the two sums. ``min_out``: bytes that must leave a
    broker for another reason (its replica count above the plan's largest: at least its smallest
    replicas that many); per broker the larger of the two reasons counts.
    """
    min_out = min_out or {}
    band = goal.band(total)
    live_set = set(live)
    out = 0.0
    into = 0.0
    for b, x in before.items():
        if b not in live_set:
            out += max(0, x - after.get(b, 0), min_out.get(b, 0))
    for b in live:
        lo, hi = band[b]
        x = before.get(b, 0)
        y = after.get(b, 0)
        out += max(0.0, x - max(hi, y), min_out.get(b, 0))
        into += max(0.0, min(lo, y) - x)
    return int(max(out, into))


def replica_moves_lower_bound_disk(
    before: Mapping[int, int],
    after: Mapping[int, int],
    goal: DiskGoal,
    live: Sequence[int],
    total: int,
    largest: Mapping[int, Sequence[int]],
    counts: Mapping[int, int] | None = None,
    counts_after: Mapping[int, int] | None = None,
    pooled: Sequence[int] | None = None,
) -> int:
    """Fewest replica moves for the bytes above and below the band together with the replica
    counts (see :func:`bytes_lower_bound` for the band).

    Every move takes one replica out of one broker and into one, so the moves are both the sum of
    the brokers' outflows and the sum of their inflows. Per broker, ``k_out``: its largest movable
    replicas (``largest``, sizes descending) until they cover its bytes above the band, and
    ``k_in``: the largest replicas of all brokers until they cover its bytes below it. With
    ``counts`` and ``counts_after`` (replicas per broker before and after the plan; ``w`` the
    latter's max-min), every live broker ends in a window ``[t, t + w]``: it sends at least
    ``max(c - (t + w), k_out, k_in - (t + w - c))`` replicas (what it receives beyond its room in
    the window goes out again) and receives at least ``max(t - c, k_in, k_out - (c - t))`` (a
    broker at the window's bottom that sheds large replicas must take small ones back: the swaps).
    Removed brokers send all they hold. The bound is the smallest over ``t`` of the larger sum.
    ``pooled``: the largest replicas of all brokers, largest first (by default the first 4,096 of
    each broker's, sorted).
    """
    band = goal.band(total)
    live_set = set(live)
    if pooled is None:
        pooled = sorted((s for b, sizes in largest.items() for s in sizes[:4096]), reverse=True)

    def cover(sizes: Sequence[int], amount: float) -> int:
        acc = 0
        k = 0
        for s in sizes:
            if acc >= amount:
                break
            acc += s
            k += 1
        return k

    k_out: dict[int, int] = {}
    k_in: dict[int, int] = {}
    for b in live:
        lo, hi = band[b]
        x = before.get(b, 0)
        y = after.get(b, 0)
        excess = x - max(hi, y)
        if excess > 0:
            k_out[b] = cover(largest.get(b, ()), excess)
        deficit = min(lo, y) - x
        if deficit > 0:
            k_in[b] = cover(pooled, deficit)
    if counts is None or counts_after is None or not live:
        return sum(k_out.values())
    ends = [counts_after.get(b, 0) for b in live]
    w = max(1, max(ends) - min(ends))
    n_total = sum(ends)
    removed_out = sum(c for b, c in counts.items() if b not in live_set)
    nb = len(live)
    best: int | None = None
    for t in range(max(0, -(-n_total // nb) - w), n_total // nb + 1):
        outs = removed_out
        ins = 0
        for b in live:
            c = counts.get(b, 0)
            ko, ki = k_out.get(b, 0), k_in.get(b, 0)
            outs += max(0, c - (t + w), ko, ki - (t + w - c))
            ins += max(0, t - c, ki, ko - (c - t))
        cost = max(outs, ins)
        if best is None or cost < best:
            best = cost
    return best or 0


@dataclass
class DiskInput:
    """The partitions the disk step may look at, topic by topic, in flat lists (what the Spark job's
    driver builds from the per-topic stages' arrays; :func:`disk_input` from ``TopicPartitions``)."""

    #: Partitions per topic, and whether each topic is balanced (False: its partitions stay).
    counts: Sequence[int]
    balance: Sequence[bool]
    #: Per partition: replicas now (after the count steps), before the plan, bytes of one replica,
    #: and whether it is frozen (in flight: never moves).
    replicas: Sequence[Sequence[int]]
    original: Sequence[tuple[int, ...]]
    sizes: Sequence[int]
    frozen: Sequence[bool]
    #: The same as flat numpy arrays, when the caller has them (the Spark job's driver: no Python
    #: object per replica); else built from the lists above by :meth:`arrays`.
    flat: DiskFlat | None = None

    def arrays(self) -> DiskFlat:
        if self.flat is not None:
            return self.flat
        return DiskFlat(
            FlatRows.of(self.replicas), FlatRows.of(self.original),
            np.fromiter(self.sizes, dtype=np.int64, count=len(self.sizes)),
            np.fromiter(self.frozen, dtype=bool, count=len(self.frozen)),
        )


class DiskFlat(NamedTuple):
    """:class:`DiskInput`'s per-partition data as flat arrays: replicas now and before the plan,
    bytes of one replica, frozen."""

    now: FlatRows
    orig: FlatRows
    sizes: npt.NDArray[np.int64]
    frozen: npt.NDArray[np.bool_]


def disk_input(topics: Sequence[TopicPartitions], replicas: Sequence[Sequence[tuple[int, ...]]]) -> DiskInput:
    """:class:`DiskInput` of ``topics`` with ``replicas`` (one list per topic) as their replicas now."""
    return DiskInput(
        counts=[len(t.partitions) for t in topics],
        balance=[t.balance for t in topics],
        replicas=[r for reps in replicas for r in reps],
        original=[r for t in topics for r in t.replicas],
        sizes=[s for t in topics for s in (t.sizes or [0] * len(t.partitions))],
        frozen=[f for t in topics for f in (t.frozen or [False] * len(t.partitions))],
    )


@dataclass
class DiskBounds:
    """Bytes and replica counts per broker before and after a load-aware plan, and its bounds."""

    #: Broker -> bytes before (live and removed brokers) and after (live brokers).
    before: dict[int, int]
    after: dict[int, int]
    bytes_bound: int
    moves_bound: int


def disk_bounds(
    inp: DiskInput,
    final: Sequence[Sequence[int]] | FlatRows,
    goal: DiskGoal,
    live: Sequence[int],
    fixed_bytes: Mapping[int, int],
    fixed_counts: Mapping[int, int],
    extra_min_out: Mapping[int, int] | None = None,
) -> DiskBounds:
    """Per-broker bytes before and after, :func:`bytes_lower_bound` and
    :func:`replica_moves_lower_bound_disk` of a plan that ends with ``final`` (the replicas of
    every partition of ``inp``, in its order; or the same as :class:`FlatRows`); the partitions
    outside ``inp`` (``fixed_*``) stay. ``extra_min_out``: bytes that must leave a broker for
    another goal (bytes in), per broker. Added up with numpy over flat arrays (the brokers in
    the order a loop over the partitions would meet them)."""
    flat = inp.arrays()
    fin = final if isinstance(final, FlatRows) else FlatRows.of(final)
    n = len(flat.sizes)
    counts = np.asarray(inp.counts, dtype=np.int64)
    topic = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    balanced = np.ones(n, dtype=bool) if goal.offload_threshold is not None else (
        np.asarray(inp.balance, dtype=bool).reshape(-1)[topic])
    movable = ~flat.frozen & balanced
    orig_e = np.repeat(np.arange(n, dtype=np.int64), flat.orig.lens)
    orig_b, orig_s = flat.orig.flat, flat.sizes[orig_e]
    fin_e = np.repeat(np.arange(n, dtype=np.int64), fin.lens)
    fin_b, fin_s = fin.flat, flat.sizes[fin_e]
    fin_live = member(fin_b, np.asarray(live, dtype=np.int64))
    before = _added(dict(fixed_bytes), *_per_id(orig_b, orig_s))
    after = _added({b: fixed_bytes.get(b, 0) for b in live}, *_per_id(fin_b[fin_live], fin_s[fin_live]))
    count_before = _added(dict(fixed_counts), *_per_id(orig_b, None))
    count_after = _added({b: fixed_counts.get(b, 0) for b in live}, *_per_id(fin_b[fin_live], None))
    # per broker before the plan, the sizes of its movable replicas, largest first
    mv = movable[orig_e]
    mb, ms = _by_id_size_desc(orig_b[mv], orig_s[mv])
    cuts = np.flatnonzero(np.concatenate([[True], mb[1:] != mb[:-1]])) if len(mb) else np.zeros(0, dtype=np.int64)
    ends = np.append(cuts[1:], len(mb)).tolist() if len(mb) else []  # nothing movable: no broker sheds
    sizes_desc = ms.tolist()
    largest: dict[int, list[int]] = {
        b: sizes_desc[a:z] for b, a, z in zip(mb[cuts].tolist(), cuts.tolist(), ends, strict=True)
    }
    # the largest replicas of all brokers, largest first (replica_moves_lower_bound_disk's default):
    # the first 4,096 of each broker's, sorted as an array
    firsts = [ms[a:min(z, a + 4096)] for a, z in zip(cuts.tolist(), ends, strict=True)]
    pooled: list[int] = np.sort(np.concatenate(firsts))[::-1].tolist() if firsts else []
    min_out: dict[int, int] = {}
    for b, shed in count_sheds(count_before, count_after, live).items():
        sizes = largest.get(b, [])
        if sizes:
            min_out[b] = sum(sizes[len(sizes) - min(shed, len(sizes)):])
    return bounds_of(goal, live, before, after, count_before, count_after, largest, min_out, pooled=pooled,
                     extra_min_out=extra_min_out)


def _by_id_size_desc(
    ids: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The replicas' broker ids and sizes ordered by id, then size largest first (as by
    ``np.lexsort((-sizes, ids))``; sizes are values: equal ones are alike). A stable radix sort of
    the brokers' places among the few ids, then each broker's sizes sorted as plain ints: the
    lexsort of 10M replicas took 2 s."""
    distinct = np.unique(ids)
    if len(distinct) >= 1 << 15:
        order = np.lexsort((-sizes, ids))
        return ids[order], sizes[order]
    code = index_of(distinct, ids)[0].astype(np.int16)
    order = np.argsort(code, kind="stable")
    ids, sizes = ids[order], sizes[order]
    cuts = np.flatnonzero(np.diff(code[order])) + 1
    for a, z in zip([0, *cuts.tolist()], [*cuts.tolist(), len(ids)], strict=True):
        sizes[a:z] = np.sort(sizes[a:z])[::-1]
    return ids, sizes


def count_sheds(count_before: Mapping[int, int], count_after: Mapping[int, int], live: Sequence[int]) -> dict[int, int]:
    """Replicas a broker must shed for the counts: those above the plan's largest count on a live
    broker, all of them on another (any plan sheds at least its smallest that many)."""
    live_set = set(live)
    top = max(count_after.values(), default=0)
    sheds = {b: c - (top if b in live_set else 0) for b, c in count_before.items()}
    return {b: x for b, x in sheds.items() if x > 0}


def bounds_of(
    goal: DiskGoal,
    live: Sequence[int],
    before: dict[int, int],
    after: dict[int, int],
    count_before: Mapping[int, int],
    count_after: Mapping[int, int],
    largest: Mapping[int, Sequence[int]],
    min_out: dict[int, int],
    pooled: Sequence[int] | None = None,
    extra_min_out: Mapping[int, int] | None = None,
) -> DiskBounds:
    """:class:`DiskBounds` from the per-broker figures :func:`disk_bounds` adds up: bytes and counts
    before and after, the sizes of each broker's movable replicas largest first (at least a prefix
    that covers its bytes above the band) and ``min_out`` (:func:`count_sheds`' smallest bytes)."""
    for b, x in (extra_min_out or {}).items():
        min_out[b] = max(min_out.get(b, 0), x)
    total = sum(after.values())
    return DiskBounds(
        before=before,
        after=after,
        bytes_bound=bytes_lower_bound(before, after, goal, live, total, min_out),
        moves_bound=replica_moves_lower_bound_disk(
            before, after, goal, live, total, largest, counts=count_before, counts_after=count_after, pooled=pooled
        ),
    )


#: ids below this are added up in a slot each (:func:`_per_id`), larger ones by sorting
_DENSE_IDS = 1 << 22


def _per_id(ids: npt.NDArray[np.integer[Any]], weights: npt.NDArray[np.integer[Any]] | None) -> tuple[list[int], list[int]]:
    """The distinct ``ids`` in the order they first appear, with the sum of their ``weights``
    (``None``: how often each appears)."""
    if len(ids) == 0:
        return [], []
    top = int(ids.max())
    if int(ids.min()) >= 0 and top < _DENSE_IDS:
        # broker ids, small: a slot per id rather than sorting every replica (a second at 10M per call)
        at = ids.astype(np.intp, copy=False)
        first = np.full(top + 1, len(ids), dtype=np.int64)
        np.minimum.at(first, at, np.arange(len(ids), dtype=np.int64))
        present = np.flatnonzero(first < len(ids))
        present = present[np.argsort(first[present], kind="stable")]
        if weights is None:
            totals = np.bincount(at, minlength=top + 1)
        else:
            totals = np.zeros(top + 1, dtype=np.int64)
            np.add.at(totals, at, weights.astype(np.int64, copy=False))
        return present.tolist(), totals[present].tolist()
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    sums = np.diff(np.append(starts, len(ids))) if weights is None else np.add.reduceat(weights[order], starts)
    first = order[starts]  # a stable sort: the first appearance of each id
    seen = np.argsort(first, kind="stable")
    return ordered[starts][seen].tolist(), sums[seen].tolist()


def _added(into: dict[int, int], ids: list[int], sums: list[int]) -> dict[int, int]:
    for b, x in zip(ids, sums, strict=True):
        into[b] = into.get(b, 0) + x
    return into


def balance_disk(
    topics: Sequence[TopicPartitions],
    replicas: Sequence[Sequence[tuple[int, ...]]],
    layout: BrokerLayout,
    fixed_bytes: Mapping[int, int],
    fixed_counts: Mapping[int, int],
    goal: DiskGoal,
) -> DiskOutcome:
    """The disk step on ``replicas`` (one list per topic of ``topics``, after the count steps)."""
    return balance_disk_input(disk_input(topics, replicas), layout, fixed_bytes, fixed_counts, goal)


def balance_disk_input(
    inp: DiskInput,
    layout: BrokerLayout,
    fixed_bytes: Mapping[int, int],
    fixed_counts: Mapping[int, int],
    goal: DiskGoal,
    part: DiskPart | None = None,
    arrived: Iterable[tuple[int, int]] = (),
) -> DiskOutcome:
    """:func:`balance_disk` on flat input; :attr:`DiskOutcome.changed` keys are (topic index in
    ``inp``, partition index within the topic). ``part``: one group's share of the goal (the disk
    step by groups: no rack bands, no warnings, the group's windows instead of the goal's);
    ``arrived``: (entry, broker) replicas an earlier round of the step placed (they move no more)."""
    # hundreds of thousands of small lists and tuples, no reference cycles: the cyclic collector
    # would only walk them again and again (a fifth of the step at a million replicas)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _DiskStep(inp, layout, fixed_bytes, fixed_counts, goal, part, arrived).run()
    finally:
        if was_enabled:
            gc.enable()


class _Window:
    """Counts per broker, each kept within a window of its own (a group's share of the goal's count
    window, :class:`DiskPart`): a move may not take ``src`` under its window nor ``dst`` over it."""

    __slots__ = ("counts", "windows")

    def __init__(self, counts: dict[int, int], windows: Mapping[int, tuple[int, int]]) -> None:
        self.counts = counts
        self.windows = windows

    def allows(self, src: int, dst: int) -> bool:
        return self.counts.get(src, 0) > self.windows[src][0] and self.counts.get(dst, 0) < self.windows[dst][1]

    def move(self, src: int, dst: int) -> None:
        self.counts[src] = self.counts.get(src, 0) - 1
        self.counts[dst] = self.counts.get(dst, 0) + 1


class _Spread:
    """Counts per broker with their histogram: whether moving one from ``src`` to ``dst`` keeps
    max - min within ``limit`` (the larger of the wanted spread and the one it starts with).
    Both checks are O(1): only the two counts that change and the histogram's ends matter."""

    __slots__ = ("counts", "hist", "hi", "limit", "lo")

    def __init__(self, counts: dict[int, int], brokers: int, spread: int) -> None:
        self.counts = counts
        hist: dict[int, int] = {}
        for c in counts.values():
            hist[c] = hist.get(c, 0) + 1
        zeros = brokers - len(counts)
        if zeros > 0:
            hist[0] = hist.get(0, 0) + zeros
        self.hist = hist
        keys = [k for k, v in hist.items() if v]
        self.lo = min(keys) if keys else 0
        self.hi = max(keys) if keys else 0
        self.limit = max(spread, self.hi - self.lo)

    def _ends(self, src: int, dst: int) -> tuple[int, int]:
        """(min, max) of the counts once one moved from ``src`` to ``dst``."""
        a = self.counts.get(src, 0)
        c = self.counts.get(dst, 0)
        lo, hi = self.lo, self.hi
        # the max rises to c + 1, or drops by one when ``src`` was alone at it (a - 1 is then the max)
        new_hi = c + 1 if c + 1 > hi else (hi - 1 if a == hi and self.hist[hi] == 1 and c + 1 < hi else hi)
        new_lo = a - 1 if a - 1 < lo else (lo + 1 if c == lo and self.hist[lo] == 1 and a - 1 > lo else lo)
        return new_lo, new_hi

    def allows(self, src: int, dst: int) -> bool:
        lo, hi = self._ends(src, dst)
        return hi - lo <= self.limit

    def move(self, src: int, dst: int) -> None:
        lo, hi = self._ends(src, dst)
        a = self.counts.get(src, 0)
        c = self.counts.get(dst, 0)
        h = self.hist
        h[a] -= 1
        h[c] -= 1
        h[a - 1] = h.get(a - 1, 0) + 1
        h[c + 1] = h.get(c + 1, 0) + 1
        self.counts[src] = a - 1
        self.counts[dst] = c + 1
        self.lo, self.hi = lo, hi


_first = operator.itemgetter(0)
_second = operator.itemgetter(1)


class _RackOf(dict[int, int]):
    """Broker -> its rack index, ``-1`` without one (``rack_of.get(b, -1)`` as a look-up)."""

    __slots__ = ("rack_of",)

    def __init__(self, rack_of: Mapping[int, int], brokers: Iterable[int]) -> None:
        super().__init__((b, rack_of.get(b, -1)) for b in brokers)
        self.rack_of = rack_of

    def __missing__(self, b: int) -> int:
        return self.rack_of.get(b, -1)


class _PerCount(dict[int, bool]):
    """``allows(c)`` per count ``c``, each computed once (:meth:`_DiskStep.targets`)."""

    __slots__ = ("allows",)

    def __init__(self, allows: Any) -> None:
        super().__init__()
        self.allows = allows

    def __missing__(self, c: int) -> bool:
        ok: bool = self.allows(c)
        self[c] = ok
        return ok


class _DiskStep:
    def __init__(
        self,
        inp: DiskInput,
        layout: BrokerLayout,
        fixed_bytes: Mapping[int, int],
        fixed_counts: Mapping[int, int],
        goal: DiskGoal,
        part: DiskPart | None = None,
        arrived: Iterable[tuple[int, int]] = (),
    ) -> None:
        self.goal = goal
        self.part = part
        self.layout = layout
        self.live = tuple(layout.brokers)
        self.live_set = set(self.live)
        self.rack = layout.rack_of
        self.rack_or = _RackOf(self.rack, self.live)
        self.n_racks = layout.n_racks
        self.offload = goal.offload_threshold is not None
        self.check_topics = not self.offload and goal.topic_spread < max(inp.counts, default=0) * 4
        # the tables below are built with numpy over flat arrays (disk_index.py: no Python loop per replica)
        now, orig, sizes, frozen = inp.arrays()
        ix = build_index(
            counts=inp.counts, balance=inp.balance, now=now, orig=orig, sizes=sizes, frozen=frozen,
            live=self.live, rack_of=self.rack, n_racks=self.n_racks, fixed_bytes=fixed_bytes,
            fixed_counts=fixed_counts, offload=self.offload, with_topic_counts=self.check_topics,
            sizes_given=None if inp.flat is not None else list(inp.sizes),
            orig_given=None if inp.flat is not None else list(inp.original),
        )
        #: live broker -> its bytes and replica count now, and the bytes the step may not move
        #: (outside its scope, frozen, left out)
        self.bytes: dict[int, int] = ix.bytes
        self.pinned: dict[int, int] = ix.pinned
        self.count: dict[int, int] = ix.count
        # entries: one per partition the step may look at (those of ``inp``, in its order)
        self.reps: list[list[int]] = ix.reps
        self.size: list[int] = ix.size
        #: entry -> its replicas before the plan, where they are not the brokers it has now (the
        #: count steps or this step moved one; :meth:`apply` adds an entry before its first move): a
        #: move back to one of them costs no bytes. The other entries' are their replicas now
        self.orig_changed: dict[int, tuple[int, ...]] = ix.orig_changed
        self.topic: list[int] = ix.topic
        self.topic_starts: list[int] = ix.topic_starts
        self.movable: list[bool] = ix.movable
        #: the same as arrays, kept up to date by :meth:`apply`: the rack limits and the count window
        #: read every partition's replicas as flat rows (made from the lists, a second at 10M replicas)
        self.movable_mask = ix.movable_mask
        self.sizes_array = sizes
        self.flat_now = FlatRows(now.lens, now.flat.astype(np.int64, copy=True))
        self.row_starts = self.flat_now.starts()
        #: per topic, its replica count per live broker (made when the step first looks at the topic)
        self.tcount: TopicCounts | None = ix.tcount
        # the per-broker lists hold (size, entry) as one int, ``size << shift | entry`` (disk_index.pack:
        # ints order as the pairs), and the lists a move changes are kept in blocks (sorted_blocks.py:
        # at 10M replicas a list per broker holds 100,000 of them, and an insert into one Python list
        # moves half of them)
        self.shift = ix.shift
        self.mask = (1 << ix.shift) - 1
        #: broker -> its movable replicas as (size, entry), sorted
        self.on: dict[int, SortedBlocks] = {b: SortedBlocks(x) for b, x in ix.on.items()}
        #: broker -> the size of its smallest movable replica (``inf``: none), kept as moves change ``on``
        self.smallest: dict[int, float] = {b: self.smallest_of(b) for b in self.on}
        #: broker -> movable replicas the count steps put there (moving them on costs no bytes)
        self.added: dict[int, SortedBlocks] = {b: SortedBlocks(x) for b, x in ix.added.items()}
        #: broker -> movable partitions the count steps took off it (pulling one back saves bytes)
        self.taken: dict[int, list[int]] = ix.taken
        #: entries with one replica in each rack (RF = racks): none of their replicas changes racks
        self.locked: list[bool] = ix.locked
        #: locked entries whose racks are every rack of the layout: while the step has not moved them,
        #: the rack rule of their replica on ``b`` is "stay in the rack of ``b``" (:meth:`rack_test`
        #: without looking at the replicas: most replicas a walk meets fail on that alone)
        self.spread: list[bool] = ix.spread
        self.other_racks = [frozenset(range(layout.n_racks)) - {g} for g in range(layout.n_racks)]
        #: (broker, rack) -> the broker's movable replicas that may leave for that other rack (the
        #: rack rule, kept up to date as replicas of the partition change racks): what a swap across racks sends back
        self.cross_to: dict[tuple[int, int], SortedBlocks] = {k: SortedBlocks(x) for k, x in ix.cross_to.items()}
        del ix
        #: (receiver, sender) -> (moves made, size limit) of the last swap search that found nothing
        self.swap_failed: dict[tuple[int, int], tuple[int, float]] = {}
        #: partitions the step changed, and the replicas it placed ((partition, broker): a replica
        #: moves at most once; another replica of the same partition may still move)
        self.touched: set[int] = set()
        self.arrived: set[tuple[int, int]] = set(arrived)
        self.total = sum(self.bytes.values())
        self.bytes0 = dict(self.bytes)
        #: a group's part of each broker's band (:meth:`share`)
        self.weight = {b: (w if w > 1e-9 else 1.0) for b, w in part.weight.items()} if part is not None else {}
        cap = goal.capacity
        self.band = dict(part.band) if part is not None else goal.band(self.total)
        #: the most bytes a broker may hold (hard)
        self.cap_bytes = dict(part.cap) if part is not None else {b: goal.cap * cap[b] for b in self.live}
        n = len(self.live)
        self.count_spread: _Spread | _Window = (
            _Window(self.count, part.counts) if part is not None else _Spread(self.count, n, goal.count_spread))
        #: per-topic windows, only when the goal limits them (no topic has more replicas than that)
        #: topic -> its window (:meth:`topic_window`), made when first needed
        self.tspread: dict[int, _Spread] = {}
        self.out = DiskOutcome(before=dict(self.bytes))
        #: the serial step's :meth:`share` of every live broker, kept as moves change its bytes: the
        #: step sorts brokers by it at every move (a dict look-up as the key, not a method call)
        self.shares: dict[int, float] = {b: self.bytes[b] / cap[b] for b in self.live} if part is None else {}
        #: :meth:`try_move`'s receivers filtered by the rack rule, per (rack, racks kept), for the
        #: receivers list it was last given (lists of receivers are never changed once made)
        self.rack_filtered: tuple[object, dict[tuple[int, frozenset[int]], Any], list[int]] = (None, {}, [])
        #: :meth:`target_stats` of the receivers list it was last given
        self.stats: tuple[object, tuple[float, bool, float]] = (None, (0.0, False, 0.0))

    def smallest_of(self, b: int) -> float:
        lst = self.on[b]
        return float(lst.first() >> self.shift) if lst else math.inf

    def upto(self, limit: float) -> float:
        """The largest key (``size << shift | entry``) of a replica no larger than ``limit``: a
        walk's bound."""
        if limit == math.inf:
            return limit
        return math.floor(limit) << self.shift | self.mask

    # -- constraints -------------------------------------------------------------------------
    def gone(self, e: int, b: int) -> bool:
        """The replica of ``e`` on ``b`` may not move: it left ``b`` already, or this step put it there."""
        return b not in self.reps[e] or (e, b) in self.arrived

    def share(self, b: int) -> float:
        """The broker's disk share, what the step orders brokers by. A group's (``part``): the share
        the broker would have if every group moved its bytes as this one does, in proportion to its
        part of the broker's band (``part.weight``): a group that fills its part of a receiver's room
        sees the receiver rise as the serial step would, not by its own bytes alone."""
        if self.part is None:
            return self.bytes[b] / self.goal.capacity[b]
        x0 = self.bytes0[b]
        return (x0 + (self.bytes[b] - x0) / self.weight[b]) / self.goal.capacity[b]

    def racks_ok(self, reps: Sequence[int], old: int, new: int) -> bool:
        rack = self.rack
        if rack.get(new, -1) == rack.get(old, -1):
            return True
        before = {rack.get(b, -1) for b in reps}
        after = {rack.get(b, -1) for b in reps if b != old}
        after.add(rack.get(new, -1))
        need = min(len(reps), self.n_racks)
        return len(after) >= min(need, len(before))

    def topic_ok(self, e: int, src: int, dst: int) -> bool:
        if not self.check_topics:
            return True
        return self.topic_window(self.topic[e]).allows(src, dst)

    def topic_window(self, ti: int) -> _Spread:
        """The replica counts of topic ``ti`` per broker, kept within the goal's ``topic_spread``
        (made from the topic's counts at the start the first time: no move of the topic before)."""
        w = self.tspread.get(ti)
        if w is None:
            assert self.tcount is not None
            w = self.tspread[ti] = _Spread(self.tcount.of(ti), len(self.live), self.goal.topic_spread)
        return w

    def can_place(self, e: int, src: int, dst: int) -> bool:
        reps = self.reps[e]
        return dst not in reps and self.racks_ok(reps, src, dst) and self.topic_ok(e, src, dst)

    def counts_allow(self, src: int, dst: int) -> bool:
        if self.offload:
            return True
        return self.count_spread.allows(src, dst)

    # -- applying ----------------------------------------------------------------------------
    def apply(self, e: int, src: int, dst: int) -> None:
        reps = self.reps[e]
        rack = self.rack
        # the partition's racks change: which other racks each of its replicas may go to changes too
        across = not self.locked[e] and rack.get(src, -1) != rack.get(dst, -1)
        was = {b: self.cross_keys(e, b) for b in reps if b in self.live_set} if across else None
        src_keys = (was[src] if was is not None else self.cross_keys(e, src)) if not self.locked[e] else []
        if e not in self.orig_changed:
            self.orig_changed[e] = tuple(reps)  # its first move: the same brokers as before the plan
        at = reps.index(src)
        reps[at] = dst
        self.flat_now.flat[self.row_starts[e] + at] = dst
        s = self.size[e]
        self.bytes[src] -= s
        self.bytes[dst] += s
        if self.part is None:
            cap = self.goal.capacity
            self.shares[src] = self.bytes[src] / cap[src]
            self.shares[dst] = self.bytes[dst] / cap[dst]
        self.count_spread.move(src, dst)
        if self.check_topics:
            self.topic_window(self.topic[e]).move(src, dst)
        self.touched.add(e)
        self.arrived.add((e, dst))
        self.out.moves += 1
        # out of ``src``'s sorted lists (a replica that left is never a candidate there again: left
        # in, every later walk over the list would step past it); the replica may go back out of
        # ``dst`` as the small half of a swap (it moves from where it was before the plan to where
        # it ends, the same bytes): into ``dst``'s sorted lists
        entry = s << self.shift | e
        self.on[src].discard(entry)
        self.added[src].discard(entry)
        for key in src_keys:
            self.cross_to[key].discard(entry)
        self.on[dst].add(entry)
        self.smallest[src] = self.smallest_of(src)
        self.smallest[dst] = self.smallest_of(dst)
        if self.locked[e]:
            return
        for key in self.cross_keys(e, dst):
            self.cross_to[key].add(entry)
        if was is None:
            return
        for b, keys in was.items():
            if b == src:
                continue
            now = self.cross_keys(e, b)
            for key in keys:
                if key not in now:
                    self.cross_to[key].discard(entry)
            for key in now:
                if key not in keys:
                    self.cross_to[key].add(entry)

    def cross_keys(self, e: int, b: int) -> list[tuple[int, int]]:
        """(``b``, rack) for every other rack that ``e``'s replica on ``b`` may move to."""
        r_src, kept = self.rack_test(self.reps[e], b)
        return [(b, g) for g in range(self.n_racks) if g != r_src and (kept is None or g not in kept)]

    def swap_back(self, dst: int, src: int, limit: float) -> int | None:
        """One of the smallest replicas on ``dst`` that may go to ``src`` (size < ``limit``): from
        all its replicas within a rack, from those that may change racks across racks. A search
        that found nothing is not repeated with a smaller limit until a move is made."""
        failed = self.swap_failed.get((dst, src))
        if failed is not None and failed[0] == self.out.moves and limit <= failed[1]:
            return None
        g = self.rack.get(src, -1)
        across = self.rack.get(dst, -1) != g
        if across:
            lst = self.cross_to.get((dst, g))
            if lst is None:
                return None
        else:
            lst = self.on[dst]
        # every entry is a replica ``dst`` holds now (a replica that leaves is taken out of the lists)
        shift, mask = self.shift, self.mask
        for key in itertools.islice(lst, SWAP_CANDIDATES):
            if key >> shift >= limit:
                break
            q = key & mask
            if self.can_place(q, dst, src):
                return q
        self.swap_failed[(dst, src)] = (self.out.moves, limit)
        return None

    def rack_test(self, reps: Sequence[int], src: int) -> tuple[int, set[int] | None]:
        """Which racks may take ``src``'s replica of a partition on ``reps`` (the rule of
        :meth:`racks_ok`, once per replica rather than per receiver): ``(rack of src, None)``: any
        rack; ``(rack of src, kept)``: the rack of ``src``, or a rack not in ``kept`` (the racks
        the partition keeps without it, one short of what it must span)."""
        rack = self.rack_or  # rack_of.get(b, -1), by subscript
        r_src = rack[src]
        kept = {rack[b] for b in reps if b != src}
        # the partition must span min(len(reps), racks, len(kept | {r_src})) racks: short of that
        # without src only where src's rack is not among the kept ones
        if r_src in kept or len(kept) >= min(len(reps), self.n_racks):
            return r_src, None
        return r_src, kept

    def targets(self, src: int, receivers: Sequence[int], room: Mapping[int, float]) -> list[tuple[int, float, bool, float]]:
        """Per receiver, what decides whether it can take a replica of ``src`` of size ``s``
        without looking at the replica: ``(broker, room, counts allow a plain move, size of its
        smallest replica that could come back in a swap)``; a swap needs ``s`` above 16 times it."""
        rs = [dst for dst in receivers if dst != src]
        if not rs:
            return []
        spread = self.count_spread
        if self.offload:
            allow = [True] * len(rs)
        elif isinstance(spread, _Window):
            allow = [spread.allows(src, dst) for dst in rs]
        else:
            counts = spread.counts
            a = counts.get(src, 0)
            lo, hi, limit = spread.lo, spread.hi, spread.limit
            alone_hi = a == hi and spread.hist[hi] == 1
            alone_lo = spread.hist[lo] == 1

            def allows(c: int) -> bool:  # Spread.allows with src fixed, for a receiver with c replicas
                new_hi = c + 1 if c + 1 > hi else (hi - 1 if alone_hi and c + 1 < hi else hi)
                new_lo = a - 1 if a - 1 < lo else (lo + 1 if c == lo and alone_lo and a - 1 > lo else lo)
                return new_hi - new_lo <= limit

            # the answer depends on the receiver's count only: once per count met
            allow = list(map(_PerCount(allows).__getitem__, map(counts.get, rs, itertools.repeat(0))))
        rooms = [room[dst] for dst in rs]
        smallest = self.smallest
        smalls = [0.0 if ok else smallest[dst] for dst, ok in zip(rs, allow, strict=True)]
        out = list(zip(rs, rooms, allow, smalls, strict=True))
        # what first_moved needs of them (target_stats); 16 * x is exact: the least of 16 * x is 16 * the least
        floor = min([x for x, ok in zip(smalls, allow, strict=True) if not ok], default=math.inf)
        self.stats = (out, (max(rooms), any(allow), 16 * floor))
        return out

    def target_stats(self, targets: Sequence[tuple[int, float, bool, float]]) -> tuple[float, bool, float]:
        """Of :meth:`targets` (not empty): the most room, whether any takes a plain move, and the
        smallest swap floor (16 times a receiver's smallest replica, where counts need a swap).
        Computed once per list (a search walks it up to three times)."""
        memo = self.stats
        if memo[0] is targets:
            return memo[1]
        stats = (max(t[1] for t in targets), any(t[2] for t in targets),
                 min((16 * t[3] for t in targets if not t[2]), default=math.inf))
        self.stats = (targets, stats)
        return stats

    def rack_filter(
        self, targets: Sequence[tuple[int, float, bool, float]], r_src: int, kept: frozenset[int] | set[int]
    ) -> tuple[list[tuple[int, float, bool, float]], float | None]:
        """Of ``targets``, those a replica in rack ``r_src`` may go to when its partition keeps the
        racks ``kept`` without it (:meth:`rack_test`), and their most room (``None``: none). The same
        few (rack, racks kept) recur for every candidate of one search: filtered once per list."""
        cache = self.rack_filtered
        if cache[0] is not targets:
            cache = self.rack_filtered = (targets, {}, list(map(self.rack_or.__getitem__, map(_first, targets))))
        key = (r_src, frozenset(kept))
        hit: tuple[list[tuple[int, float, bool, float]], float | None] | None = cache[1].get(key)
        if hit is None:
            ok = {g: g == r_src or g not in kept for g in set(cache[2])}  # by rack: a look-up per receiver
            order_ok = list(itertools.compress(targets, map(ok.__getitem__, cache[2])))
            hit = cache[1][key] = (order_ok, max(map(_second, order_ok), default=None))
        return hit

    def spread_room(self, src: int, targets: Sequence[tuple[int, float, bool, float]]) -> float | None:
        """The most room among ``targets`` for the replica on ``src`` of a partition the step has not
        moved that has one replica in every rack (``spread``: it may only stay in its rack).
        :meth:`try_move` of such a replica larger than this (or with ``None``) moves nothing: the
        walks skip it without the call."""
        r_src = self.rack.get(src)
        if r_src is None or not 0 <= r_src < self.n_racks:
            return None  # no spread partition has a replica here
        return self.rack_filter(targets, r_src, self.other_racks[r_src])[1]

    def try_move(self, e: int, src: int, targets: Sequence[tuple[int, float, bool, float]]) -> bool:
        """Move ``e``'s replica on ``src`` to the first of ``targets`` (see :meth:`targets`) that
        takes it, a broker that held it before the count steps first (moving it back costs no
        bytes); as a swap with one of the receiver's smallest replicas where counts need it."""
        s = self.size[e]
        reps = self.reps[e]
        if src not in reps or (e, src) in self.arrived:  # self.gone(e, src)
            return False
        rack = self.rack
        kept: frozenset[int] | set[int] | None
        if self.spread[e] and e not in self.touched:
            r_src = rack[src]
            kept = self.other_racks[r_src]
        else:
            r_src, kept = self.rack_test(reps, src)
        if kept is not None and len(targets) > RECEIVERS:
            # most partitions may only stay in their rack (RF >= racks): skip the others' receivers
            order_ok, most_room = self.rack_filter(targets, r_src, kept)
            if most_room is None or not most_room >= s:
                return False
            targets = order_ok
        orig = self.orig_changed.get(e, ())  # none: the same brokers as now, none to go back to
        order: Sequence[tuple[int, float, bool, float]] = targets
        for b in orig:  # any(b not in reps and b != src for b in orig): a broker it may go back to first
            if b != src and b not in reps:
                order = [t for t in targets if t[0] in orig] + [t for t in targets if t[0] not in orig]
                break
        tried = 0
        rack_or = self.rack_or
        for dst, room, allow, small in order:
            if room < s or (not allow and small * 16 >= s) or dst in reps:
                continue
            if kept is not None and rack_or[dst] != r_src and rack_or[dst] in kept:
                continue
            if not self.topic_ok(e, src, dst):
                continue
            tried += 1
            if tried > RECEIVERS:
                break
            if allow:
                self.apply(e, src, dst)
                return True
            q = self.swap_back(dst, src, s / 16)
            if q is None:
                continue
            self.apply(e, src, dst)
            self.apply(q, dst, src)
            self.out.swaps += 1
            return True
        return False

    def receivers(self, exclude: int) -> list[int]:
        """Brokers by most room under their band's top (as a share of capacity)."""
        hi = self.band
        rs = [b for b in self.live if b != exclude]
        if self.offload:
            rs = [b for b in rs if self.bytes[b] <= hi[b][1]]
        if self.part is not None:
            # a group's part of each receiver's deficit first: its replicas are coarse against its
            # parts of the rooms, and a receiver it filled past its part would leave another short
            band = self.band
            rs.sort(key=lambda b: (self.bytes[b] >= band[b][0], self.share(b)))
        else:
            rs.sort(key=self.shares.__getitem__)
        return rs

    # -- the two passes ----------------------------------------------------------------------
    def shed(self, src: int, need: float, most: float) -> None:
        """Move replicas off ``src`` until ``need`` bytes left it, never more than ``most``."""
        while need > 0:
            receivers = self.receivers(src)
            if not receivers:
                return
            room = {b: self.band[b][1] - self.bytes[b] for b in receivers}
            s = self.shed_one(src, need, most, receivers, room)
            if s is None and self.bytes[src] > self.cap_bytes[src]:
                # the cap is hard, the band is not: a broker above its cap may send a replica
                # larger than any receiver's room in the band, to a receiver that stays under its cap
                room = {b: self.cap_bytes[b] - self.bytes[b] for b in receivers}
                s = self.shed_one(src, need, most, receivers, room)
            if s is None:
                return
            need -= s
            most -= s

    def shed_one(
        self, src: int, need: float, most: float, receivers: Sequence[int], room: dict[int, float]
    ) -> int | None:
        """Move one replica off ``src`` to a receiver with ``room`` for it; its size, or ``None``."""
        best_room = max(room.values())
        if best_room <= 0:
            return None
        limit = min(need, best_room)
        # replicas the count steps put on ``src`` first (moving them on costs no more bytes), then
        # the largest replicas no larger than what must go (and than any receiver's room), then
        # the smallest larger one, if shedding it stays within ``most``
        targets = self.targets(src, receivers, room)
        s = self.first_moved(src, self.added[src], limit, True, targets, float("inf"))
        if s is not None:
            return s
        s = self.first_moved(src, self.on[src], limit, True, targets, float("inf"))
        if s is None:
            s = self.first_moved(src, self.on[src], limit, False, targets, min(most, best_room))
        return s

    def first_moved(
        self,
        src: int,
        lst: SortedBlocks,
        limit: float,
        descending: bool,
        targets: Sequence[tuple[int, float, bool, float]],
        largest: float,
    ) -> int | None:
        """Move the first replica of ``src`` in ``lst`` (its sorted list of replicas, or of those
        the count steps added) that one of ``targets`` (:meth:`targets`) takes, walking down from
        the largest no larger than ``limit`` (``descending``) or up from the smallest larger one,
        sizes up to ``largest``; its size, or ``None``."""
        if not targets:
            return None
        # a replica no receiver could take whatever its partition: larger than every room, or
        # (counts needing a swap everywhere) too small to be worth one
        best_room, any_plain, swap_floor = self.target_stats(targets)
        # ascending: start above the swap floor (bisect) rather than walking up to it
        order = lst.down_from(self.upto(limit)) if descending else lst.up_from(
            self.upto(limit if any_plain else max(limit, swap_floor)))
        shift, mask = self.shift, self.mask
        reps, arrived = self.reps, self.arrived
        spread, touched = self.spread, self.touched
        spread_room = self.spread_room(src, targets)
        tried = 0
        for key in order:
            if tried >= CANDIDATES:
                return None
            s, e = key >> shift, key & mask
            if s > largest:
                return None
            if s > best_room:
                if descending:
                    continue
                return None  # the rest are larger still
            if not any_plain and s <= swap_floor:
                if descending:
                    return None  # the rest are smaller still
                continue
            if src not in reps[e] or (e, src) in arrived:  # self.gone(e, src)
                continue
            tried += 1
            if spread[e] and e not in touched and not (spread_room is not None and spread_room >= s):
                continue  # try_move would find no receiver in its rack with room
            if self.try_move(e, src, targets):
                return s
        return None

    def fill(self, dst: int, need: float, most: float) -> None:
        """Pull replicas onto ``dst`` until ``need`` bytes arrived, never more than ``most``."""
        while need > 0:
            got = self.pull_back(dst, min(need, most))
            if got is not None:
                need -= got
                most -= got
                continue
            donors = [b for b in self.live if b != dst and self.bytes[b] > self.band[b][0]]
            if self.part is None:
                donors.sort(key=self.shares.__getitem__, reverse=True)  # stable too: as by -share
            else:
                donors.sort(key=lambda b: -self.share(b))
            got = None
            for src in donors[:RECEIVERS]:
                spare = self.bytes[src] - self.band[src][0]
                got = self.first_moved(src, self.on[src], min(need, spare, most), True,
                                       self.targets(src, [dst], {dst: most}), float("inf"))
                if got is not None:
                    break
            if got is None:
                # every replica larger than what is missing: the smallest larger one that leaves
                # ``dst`` under its band's top and the donor above its bottom
                for src in donors[:RECEIVERS]:
                    spare = self.bytes[src] - self.band[src][0]
                    targets = self.targets(src, [dst], {dst: most})
                    got = self.first_moved(src, self.on[src], min(need, spare, most), False, targets, min(spare, most))
                    if got is not None:
                        break
            if got is None:
                return
            need -= got
            most -= got

    def pull_back(self, dst: int, limit: float) -> int | None:
        """Move back onto ``dst`` the largest partition (no larger than ``limit``) the count steps
        took off it, from a holder the count steps put it on that stays above its band's bottom
        (the move saves the bytes of one replica); its size, or ``None``."""
        lst = self.taken[dst]
        cut = bisect.bisect_right(lst, self.upto(limit))
        tried = 0
        for i in range(cut - 1, -1, -1):
            if tried >= CANDIDATES:
                return None
            s, e = lst[i] >> self.shift, lst[i] & self.mask
            reps = self.reps[e]
            if dst in reps:
                continue
            tried += 1
            for src in reps:
                if src in self.orig_changed[e] or src not in self.live_set or self.bytes[src] - s < self.band[src][0]:
                    continue
                if (e, src) in self.arrived:
                    continue
                if self.can_place(e, src, dst) and self.counts_allow(src, dst):
                    self.apply(e, src, dst)
                    return s
        return None

    def passes(self) -> None:
        band = self.band
        for _ in range(3):
            progress = self.out.moves
            over = [b for b in self.live if self.bytes[b] > band[b][1]]
            if self.part is None:
                over.sort(key=self.shares.__getitem__, reverse=True)  # stable too: as by -share
            else:
                over.sort(key=lambda b: -self.share(b))
            for b in over:
                self.shed(b, self.bytes[b] - band[b][1], self.bytes[b] - band[b][0])
            if not self.offload:
                under = sorted((b for b in self.live if self.bytes[b] < band[b][0]), key=self.share)
                for b in under:
                    self.fill(b, band[b][0] - self.bytes[b], band[b][1] - self.bytes[b])
            if self.out.moves == progress:
                break

    def rack_limits(self) -> tuple[list[int], list[int]]:
        """:func:`rack_limits` of the replicas now."""
        pinned = [0] * self.n_racks
        for b in self.live:
            g = self.rack.get(b, -1)
            if 0 <= g < self.n_racks:
                pinned[g] += self.pinned[b]
        lo, hi = rack_limits(self.layout, self.flat_now, self.movable_mask, self.sizes_array)
        return [a + p for a, p in zip(lo, pinned, strict=True)], [a + p for a, p in zip(hi, pinned, strict=True)]

    def rack_bands(self) -> list[str]:
        """:func:`rack_bands` over the bytes now."""
        fewest, most = self.rack_limits()
        return rack_bands(self.goal, self.layout, self.band, self.bytes, fewest, most)

    def count_window(self) -> tuple[int, int]:
        """:func:`count_window` of the counts now."""
        fewest = [0] * self.n_racks
        for b in self.live:
            g = self.rack.get(b, -1)
            if 0 <= g < self.n_racks:
                fewest[g] += self.count[b] - len(self.on[b])  # replicas that may not move
        if self.n_racks > 1:
            fewest = [a + b for a, b in zip(fewest, kept_in_racks(self.layout, self.flat_now, self.movable_mask), strict=True)]
        return count_window(self.layout, self.goal.count_spread, sum(self.count.values()), fewest)

    def balance_counts(self) -> None:
        """Bring every live broker's replica count into :meth:`count_window` by moving the
        smallest replicas: off brokers above it to brokers below it first, then to brokers with
        the most disk room; brokers below it then pull from brokers above its bottom. The disk
        passes after it move the bytes (a receiver's disk does not limit these small replicas)."""
        if self.part is not None:
            lo_at = {b: w[0] for b, w in self.part.counts.items()}
            hi_at = {b: w[1] for b, w in self.part.counts.items()}
        else:
            lo, hi = self.count_window()
            lo_at = dict.fromkeys(self.live, lo)
            hi_at = dict.fromkeys(self.live, hi)
        count = self.count
        unlimited = float("inf")

        def targets(src: int, pull: int | None) -> list[tuple[int, float, bool, float]]:
            rs = [pull] if pull is not None else [b for b in self.live if b != src and count[b] < hi_at[b]]
            if self.part is None:
                # by (count not below its window, share): by share, then those below their window first
                rs.sort(key=self.shares.__getitem__)
                rs = [b for b in rs if count[b] < lo_at[b]] + [b for b in rs if count[b] >= lo_at[b]]
            else:
                rs.sort(key=lambda b: (count[b] >= lo_at[b], self.share(b)))
            return [(b, unlimited, True, 0.0) for b in rs]

        def shed_smallest(src: int, pull: int | None, until: int) -> None:
            """Move ``src``'s smallest replicas off it (to ``pull`` only, when given) until its count
            is ``until`` or no receiver is left, in one walk up its replicas."""
            ts = targets(src, pull)
            # every replica of ``src`` if need be: where racks pin most of them (RF >= racks) only
            # a few may leave for another rack, and count moves are few
            mask = self.mask
            spread, touched = self.spread, self.touched
            blocked = self.spread_room(src, ts) is None  # no receiver in src's rack: see first_moved
            for key in list(self.on[src]):  # a copy: a move takes the replica out of the list
                e = key & mask
                if count[src] <= until or not ts:
                    return
                if blocked and spread[e] and e not in touched:
                    continue
                if self.try_move(e, src, ts):  # False where self.gone(e, src)
                    ts = [t for t in targets(src, pull) if pull is None or count[t[0]] < lo_at[t[0]]]
                    blocked = self.spread_room(src, ts) is None

        for src in sorted(self.live, key=lambda b: hi_at[b] - count[b]):
            if count[src] > hi_at[src]:
                shed_smallest(src, None, hi_at[src])
        for dst in sorted(self.live, key=lambda b: count[b] - lo_at[b]):
            donors = sorted((b for b in self.live if b != dst), key=lambda b: lo_at[b] - count[b])
            for src in donors:
                if count[dst] >= lo_at[dst]:
                    break
                if count[src] > lo_at[src]:
                    shed_smallest(src, dst, max(lo_at[src], count[src] - (lo_at[dst] - count[dst])))
        # a broker still above the window holds only replicas that must stay in its rack (RF >=
        # racks): a broker of its rack passes one of its own to another rack, then takes one
        for src in sorted(self.live, key=lambda b: hi_at[b] - count[b]):
            while count[src] > hi_at[src]:
                mates = sorted((m for m in self.live if m != src and self.rack.get(m) == self.rack.get(src)),
                               key=lambda m: count[m] - hi_at[m])
                for m in mates:
                    had = count[m]
                    if had >= hi_at[m]:
                        shed_smallest(m, None, had - 1)
                    if count[m] < hi_at[m]:
                        left = count[src]
                        shed_smallest(src, m, left - 1)
                        if count[src] < left:
                            break
                else:
                    break
        if self.part is not None:
            # where a window could not be reached, the count it ends at: never further from it
            self.count_spread = _Window(count, {b: (min(lo_at[b], count[b]), max(hi_at[b], count[b])) for b in self.live})
        else:
            self.count_spread = _Spread(count, len(self.live), self.goal.count_spread)

    def run(self) -> DiskOutcome:
        if self.goal.balance_counts and not self.offload:
            self.balance_counts()
        self.passes()
        if self.part is None and not self.offload and self.n_racks > 1:
            notes = self.rack_bands()
            if notes:
                self.out.warnings.extend(notes)
                self.passes()
        starts = self.topic_starts
        for e in self.touched:
            ti = self.topic[e]
            self.out.changed[(ti, e - starts[ti])] = tuple(self.reps[e])
        self.out.after = dict(self.bytes)
        self.out.count_spread = max(self.count.values(), default=0) - min(self.count.values(), default=0)
        if self.part is None:
            self.out.warnings.extend(broker_warnings(self.goal, self.live, self.bytes, self.band, self.total))
        return self.out


def rack_limits(
    layout: BrokerLayout, rows: FlatRows, movable: npt.NDArray[np.bool_], sizes: npt.NDArray[np.int64]
) -> tuple[list[int], list[int]]:
    """Per rack index, the fewest and the most bytes of the ``movable`` partitions of ``rows`` its
    brokers can hold under the rack rule: a partition keeps ``min(RF, racks, racks it spans now)``
    racks, so a rack keeps at least one replica of a partition with RF >= racks that it holds,
    and at most RF minus one per other rack the partition must keep (the bytes that may not move
    are the caller's to add). With numpy per replica count (disk_index.py)."""
    n = layout.n_racks
    lo = [0] * n
    hi = [0] * n
    per_rack = layout.rack_sizes()
    lookup = rack_lookup(layout.rack_of)
    live = np.asarray(layout.brokers, dtype=np.int64)
    for k, idx, table in rows.groups():
        take = movable[idx]
        if not k or not take.any():
            continue
        table, s = table[take], sizes[idx[take]]
        racks = racks_of(lookup, table)
        on_live = member(table.ravel(), live).reshape(table.shape)
        keep = np.minimum(min(k, n), distinct_per_row(racks, on_live))
        for g in range(n):
            if k >= n:
                lo[g] += int(s[((racks == g) & on_live).any(axis=1)].sum())
            hi[g] += int((s * np.minimum(per_rack[g], k - (keep - 1))).sum())
    return lo, hi


def rack_bands(
    goal: DiskGoal,
    layout: BrokerLayout,
    band: dict[int, tuple[float, float]],
    bytes_now: Mapping[int, int],
    fewest: Sequence[int],
    most: Sequence[int],
    pinned_only: bool = False,
) -> list[str]:
    """Where a rack as a whole cannot reach the band (replicas that must keep a copy in each
    rack, RF >= racks, pin each rack's bytes: ``fewest``/``most`` per rack, :func:`rack_limits`
    with the bytes that may not move), aim its brokers at the nearest share the rack can reach
    instead. Where it could but the passes left it outside (no replica that may leave it found
    room elsewhere), at the share it has: its brokers are then balanced with each other rather
    than one of them left far from the rest (not with ``pinned_only``). Changes ``band`` in place;
    a note per such rack."""
    cap = goal.capacity
    tol = goal.tolerance
    notes = []
    for g in range(layout.n_racks):
        members = [b for b in layout.brokers if layout.rack_of.get(b, -1) == g]
        if len(members) < 2:
            continue
        rack_cap = sum(cap[b] for b in members)
        lo_g, hi_g = band[members[0]][0] / cap[members[0]], band[members[0]][1] / cap[members[0]]
        share = sum(bytes_now[b] for b in members) / rack_cap
        if lo_g <= share <= hi_g:
            continue
        # the nearest share the rack can reach; where it can reach the band, its brokers keep it
        pinned = True
        if fewest[g] / rack_cap > hi_g:
            share = fewest[g] / rack_cap
        elif most[g] / rack_cap < lo_g:
            share = most[g] / rack_cap
        elif pinned_only:
            continue
        else:
            pinned = False
        lo = max(0.0, min(share - tol, lo_g))
        hi = min(max(share + tol, hi_g), goal.cap)
        for b in members:
            band[b] = (lo * cap[b], hi * cap[b])
        name = layout.rack_names[g] if g < len(layout.rack_names) else g
        if pinned:
            notes.append(
                f"rack {name} can hold no {'less' if share > hi_g else 'more'} than {share:.1%} of its disk, not the "
                "mean share: replicas that must keep a copy in each rack (RF >= racks) or may not move fix its "
                "bytes; its brokers are balanced around that share"
            )
        else:
            notes.append(
                f"rack {name} ends at {share:.1%} of its disk, not the mean share: none of the replicas that may "
                "leave it found room in another rack (rack spread, replica counts, sizes); its brokers are balanced "
                "around that share"
            )
    return notes


def kept_in_racks(layout: BrokerLayout, rows: FlatRows, movable: npt.NDArray[np.bool_]) -> list[int]:
    """Per rack index, the ``movable`` partitions of ``rows`` with RF >= racks that have a replica
    on a live broker of the rack (each keeps one there)."""
    n = layout.n_racks
    out = [0] * n
    lookup = rack_lookup(layout.rack_of)
    live = np.asarray(layout.brokers, dtype=np.int64)
    for k, idx, table in rows.groups():
        take = movable[idx]
        if k < n or not take.any():
            continue
        table = table[take]
        racks = racks_of(lookup, table)
        on_live = member(table.ravel(), live).reshape(table.shape)
        for g in range(n):
            out[g] += int(((racks == g) & on_live).any(axis=1).sum())
    return out


def count_window(layout: BrokerLayout, spread: int, total: int, fewest: Sequence[int]) -> tuple[int, int]:
    """The replica counts every live broker should end within: ``spread`` wide, around the mean
    of ``total`` replicas, or higher where a rack must hold more than its share (racks of unequal
    size: a partition with RF >= racks keeps one replica in each, so the brokers of a small rack
    hold at least those replicas between them). ``fewest``: per rack index, the replicas its
    brokers keep (those that may not move, and one per partition of :func:`kept_in_racks`)."""
    n = len(layout.brokers)
    hi = max(0, -(-total // n) - (spread + 1) // 2) + spread
    if layout.n_racks > 1:
        size = [0] * layout.n_racks
        for b in layout.brokers:
            g = layout.rack_of.get(b, -1)
            if 0 <= g < layout.n_racks:
                size[g] += 1
        hi = max([hi] + [-(-fewest[g] // size[g]) for g in range(layout.n_racks) if size[g]])
    return max(0, hi - spread), hi


def broker_warnings(
    goal: DiskGoal, live: Sequence[int], after: Mapping[int, int], band: Mapping[int, tuple[float, float]], total: int
) -> list[str]:
    """A warning per live broker that ends above the cap or outside its ``band``."""
    cap = goal.capacity
    offload = goal.offload_threshold is not None
    out = []
    for b in live:
        lo, hi = band[b]
        x = after.get(b, 0)
        share = x / cap[b]
        if x > goal.cap * cap[b]:
            out.append(
                f"broker {b} stays at {share:.1%} of its disk, above the cap {goal.cap:.0%}: the replicas "
                "there may not move (in flight, left out, racks) or no broker has room"
            )
        elif not offload and (x > hi + cap[b] / 1000 or x < lo - cap[b] / 1000):
            mean = total / sum(cap.values())
            out.append(
                f"broker {b} ends at {share:.1%} of its disk, outside {mean:.1%} +- {goal.tolerance:.0%}: "
                "its replicas are too large or too few to move within the rack and count limits"
            )
    return out
