"""The disk step by groups of topics: the serial step's greedy (:mod:`.disk`), run by each group on
its own share of the goal, in rounds, with only per-broker figures crossing between the groups and
the driver.

The disk step's goals are sums over brokers: a broker's bytes, its replica count. Every partition
belongs to one group (a topic never spans two), so a broker's bytes are the sum of its bytes in
each group, and a move inside a group changes that sum only. Each round:

1. every group reports, per live broker, its bytes, the bytes that may still move, its replica
   count and its movable replicas (:class:`GroupFigures`: a few numbers per broker);
2. the driver adds them up, takes the goal's band and count window as the serial step would, and
   hands every group a share of each broker's band, cap and count window (:func:`split_goal`):
   a broker's excess above its band goes to the groups in proportion to the bytes each may move
   off it, its room and its deficit in proportion to the bytes each group sheds, its count
   window's moves and slack likewise (integers that add up);
3. every group runs the serial step (:func:`~.disk.balance_disk_input` with its
   :class:`~.disk.DiskPart`) on its own partitions, the other groups' bytes and counts fixed.

The shares add up to the goal's band and window, so groups that each end within their share end
within the goal together. A group that cannot (its share of a broker's excess sits in replicas too
large for its share of the room) leaves that broker outside its band: the next round hands out
what is left, from the groups' state then. The rack rule and replication factors are a
partition's own, so each group keeps them exactly; rack bands (racks that cannot reach the band)
are decided on the driver from the groups' rack limits, after the first round, as the serial step
decides them after its first passes. The bounds are added up from per-broker figures and from the
largest and smallest sizes of each broker's movable replicas the groups send once, at the start
(at most :data:`BOUND_SIZES` each: a valid bound, as tight as the serial step's where a broker's
excess is covered by its largest that many and its count excess is no more than that many).

What it gives up against the serial step: a group moves only its own replicas, so where the
serial step would send one large replica the groups may send several smaller ones (each within
its share; the driver's pass over the largest replicas, :func:`largest_first`, takes most of
that back), and a swap's small replica comes from the same group; the count windows' slack is
split between the groups; the plan depends on how the topics fall into groups. Measured
(docs/performance.md, "The disk step at scale"): the same deviation and counts at 1M, 2M and
10M replicas, bytes 1.0004x, 1.0013x and 1.0076x the bound (the serial step: 1.0009x, 1.0002x,
1.0002x), 3%, 2.5% and 7.7% more moves; each round rebuilds every group's tables, so the
groups use about twice the serial step's CPU, and on two cores the job is not faster. The
driver holds no cluster-wide arrays.

:class:`GroupRunner` runs a round's function over the groups: :class:`LocalGroups` in this
process; the Spark job over the place stage's cached results, one group per task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from airflow_kafka_reassign.core.planner.disk import (
    DiskBounds,
    DiskFlat,
    DiskGoal,
    DiskInput,
    DiskOutcome,
    DiskPart,
    balance_disk_input,
    bounds_of,
    broker_warnings,
    count_sheds,
    count_window,
    kept_in_racks,
    rack_bands,
    rack_limits,
)
from airflow_kafka_reassign.core.planner.disk_index import FlatRows, Ints, index_of, member, pair_keys
from airflow_kafka_reassign.core.planner.types import BrokerLayout

#: Rounds at most: the first does the work, the others hand out what groups could not do.
ROUNDS = 3
#: Sizes per broker and group at most in the bounds' lists (as the serial bound pools 4,096 per broker).
BOUND_SIZES = 4096

R = TypeVar("R")
A = TypeVar("A")


# -- one group (what a task keeps between rounds) ---------------------------------------------


@dataclass
class DiskGroup:
    """One group of topics' planned partitions: replicas after the count steps (``start``, the
    disk step's input), before the plan (``orig``) and after the rounds so far (``now``)."""

    gid: int
    topics: list[str]
    balance: list[bool]
    counts: list[int]
    partitions: npt.NDArray[np.int64]
    start: FlatRows
    orig: FlatRows
    sizes: npt.NDArray[np.int64]
    frozen: npt.NDArray[np.bool_]
    now: FlatRows
    moves: int = 0
    swaps: int = 0

    def disk_input(self) -> DiskInput:
        """The serial step's input: the group's partitions with their replicas now."""
        return DiskInput(counts=self.counts, balance=self.balance, replicas=(), original=(), sizes=(), frozen=(),
                         flat=DiskFlat(self.now, self.orig, self.sizes, self.frozen))

    def arrived(self) -> list[tuple[int, int]]:
        """(entry, broker) of the replicas earlier rounds placed (they move no more)."""
        now_e = np.repeat(np.arange(len(self.now.lens), dtype=np.int64), self.now.lens)
        start_e = np.repeat(np.arange(len(self.start.lens), dtype=np.int64), self.start.lens)
        new = ~member(pair_keys(now_e, self.now.flat), pair_keys(start_e, self.start.flat))
        return list(zip(now_e[new].tolist(), self.now.flat[new].tolist(), strict=True))

    def movable(self, offload: bool) -> npt.NDArray[np.bool_]:
        """Per partition: the step may move it (as :func:`~.disk_index.build_index` decides)."""
        counts = np.asarray(self.counts, dtype=np.int64)
        topic = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        balanced = np.ones(len(self.sizes), dtype=bool) if offload else np.asarray(self.balance, dtype=bool)[topic]
        return balanced & ~self.frozen & (self.sizes > 0)


# -- what crosses to the driver ----------------------------------------------------------------


@dataclass
class GroupFigures:
    """Per live broker (the layout's order), one group's bytes, bytes that may still move, replica
    count and movable replicas now; its rack limits (:func:`~.disk.rack_limits`, with its bytes
    that may not move) and the replicas it keeps per rack (:func:`~.disk.count_window`'s
    ``fewest``); its moves so far. The first round adds bytes and counts before the plan."""

    gid: int
    bytes: list[int]
    movable: list[int]
    count: list[int]
    movable_count: list[int]
    rack_lo: list[int]
    rack_hi: list[int]
    kept: list[int]
    moves: int = 0
    swaps: int = 0
    #: broker (any) -> bytes, replicas and movable bytes before the plan, and the sizes of its
    #: movable replicas then, the largest and the smallest :data:`BOUND_SIZES` (first round only:
    #: the bounds)
    before: dict[int, int] = field(default_factory=dict)
    count_before: dict[int, int] = field(default_factory=dict)
    movable_before: dict[int, int] = field(default_factory=dict)
    largest: dict[int, list[int]] = field(default_factory=dict)
    smallest: dict[int, list[int]] = field(default_factory=dict)
    #: topic -> partition -> replicas, of every partition the rounds changed so far (the balance rounds)
    changes: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)


def _per_live(layout: BrokerLayout, brokers: Ints, weights: Any) -> list[int]:
    live = np.asarray(layout.brokers, dtype=np.int64)
    out = np.zeros(len(live), dtype=np.int64)
    pos, found = index_of(live, brokers)  # layout.brokers is sorted
    np.add.at(out, pos[found], weights if np.isscalar(weights) else weights[found])
    return out.tolist()  # type: ignore[no-any-return]


def _per_id(brokers: Ints, weights: Ints | None) -> dict[int, int]:
    ids, inverse = np.unique(brokers, return_inverse=True)
    sums = np.bincount(inverse, weights=weights, minlength=len(ids)) if weights is not None else np.bincount(inverse)
    return dict(zip(ids.tolist(), sums.astype(np.int64).tolist(), strict=True))


def figures(group: DiskGroup, layout: BrokerLayout, goal: DiskGoal, first: bool = False) -> GroupFigures:
    """:class:`GroupFigures` of ``group`` now."""
    offload = goal.offload_threshold is not None
    now = group.now
    n = len(now.lens)
    rep_e = np.repeat(np.arange(n, dtype=np.int64), now.lens)
    rep_s = group.sizes[rep_e]
    movable = group.movable(offload)
    still = movable[rep_e]
    if len(rep_e):
        start_e = np.repeat(np.arange(len(group.start.lens), dtype=np.int64), group.start.lens)
        still &= member(pair_keys(rep_e, now.flat), pair_keys(start_e, group.start.flat))  # not placed by a round
    out = GroupFigures(
        gid=group.gid,
        bytes=_per_live(layout, now.flat, rep_s),
        movable=_per_live(layout, now.flat[still], rep_s[still]),
        count=_per_live(layout, now.flat, 1),
        movable_count=_per_live(layout, now.flat[still], 1),
        rack_lo=[], rack_hi=[], kept=[],
        moves=group.moves, swaps=group.swaps,
    )
    # the rack limits of the partitions that may move, plus what may not move (per rack)
    lo, hi = rack_limits(layout, now, movable, group.sizes)
    pinned_bytes = [x - m for x, m in zip(out.bytes, _per_live(layout, now.flat[movable[rep_e]], rep_s[movable[rep_e]]),
                                          strict=True)]
    pinned_count = [c - m for c, m in zip(out.count, _per_live(layout, now.flat[movable[rep_e]], 1), strict=True)]
    kept = kept_in_racks(layout, now, movable) if layout.n_racks > 1 else [0] * layout.n_racks
    for i, b in enumerate(layout.brokers):
        g = layout.rack_of.get(b, -1)
        if 0 <= g < layout.n_racks:
            lo[g] += pinned_bytes[i]
            hi[g] += pinned_bytes[i]
            kept[g] += pinned_count[i]
    out.rack_lo, out.rack_hi, out.kept = lo, hi, kept
    if first:
        orig = group.orig
        orig_e = np.repeat(np.arange(n, dtype=np.int64), orig.lens)
        orig_s = group.sizes[orig_e]
        out.before = _per_id(orig.flat, orig_s)
        out.count_before = _per_id(orig.flat, None)
        mv = _bound_movable(group, goal)[orig_e]
        out.movable_before = _per_id(orig.flat[mv], orig_s[mv])
        out.largest, out.smallest = _bound_sizes(orig.flat[mv], orig_s[mv])
    return out


def _bound_sizes(brokers: Ints, sizes: Ints) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Per broker, the largest :data:`BOUND_SIZES` of ``sizes`` (largest first) and the smallest
    (smallest first)."""
    order = np.lexsort((-sizes, brokers))
    mb, ms = brokers[order], sizes[order]
    cuts = np.flatnonzero(np.concatenate([[True], mb[1:] != mb[:-1]])) if len(mb) else np.zeros(0, dtype=np.int64)
    ends = np.append(cuts[1:], len(mb)) if len(mb) else cuts
    largest: dict[int, list[int]] = {}
    smallest: dict[int, list[int]] = {}
    for b, a, z in zip(mb[cuts].tolist(), cuts.tolist(), ends.tolist(), strict=True):
        largest[b] = ms[a:min(z, a + BOUND_SIZES)].tolist()
        smallest[b] = ms[max(a, z - BOUND_SIZES):z][::-1].tolist()
    return largest, smallest


def changes_of(group: DiskGroup) -> dict[str, dict[int, tuple[int, ...]]]:
    """Topic -> partition -> replicas now, of every partition whose replicas the rounds changed."""
    start, now = group.start, group.now
    changes: dict[str, dict[int, tuple[int, ...]]] = {}
    diff = np.zeros(len(now.lens), dtype=bool)
    if len(now.flat):
        rows = np.repeat(np.arange(len(now.lens), dtype=np.int64), now.lens)
        np.logical_or.at(diff, rows, now.flat != start.flat)
    if diff.any():
        topic_of = np.repeat(np.arange(len(group.counts), dtype=np.int64), group.counts)
        starts = now.starts()
        for e in np.flatnonzero(diff).tolist():
            r = int(starts[e])
            reps = tuple(now.flat[r:r + int(now.lens[e])].tolist())
            changes.setdefault(group.topics[int(topic_of[e])], {})[int(group.partitions[e])] = reps
    return changes


def _bound_movable(group: DiskGroup, goal: DiskGoal) -> npt.NDArray[np.bool_]:
    """Per partition: movable as :func:`~.disk.disk_bounds` counts it (not frozen, balanced)."""
    counts = np.asarray(group.counts, dtype=np.int64)
    topic = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    if goal.offload_threshold is not None:
        return ~group.frozen
    return ~group.frozen & np.asarray(group.balance, dtype=bool)[topic]  # type: ignore[no-any-return]


# -- the rounds (run where the groups are) ----------------------------------------------------


@dataclass(frozen=True)
class StartArgs:
    layout: BrokerLayout
    goal: DiskGoal


@dataclass(frozen=True)
class GroupTask:
    """One group's share of a round: its part of the goal, and the other groups' bytes and
    counts per live broker (fixed while it runs)."""

    part: DiskPart
    fixed_bytes: dict[int, int]
    fixed_counts: dict[int, int]


@dataclass(frozen=True)
class RoundArgs:
    layout: BrokerLayout
    goal: DiskGoal
    tasks: dict[int, GroupTask]
    #: the driver's moves to apply first (group -> entry -> replicas: :func:`largest_first`)
    changes: dict[int, dict[int, tuple[int, ...]]] = field(default_factory=dict)


def start_round(group: DiskGroup, args: StartArgs) -> tuple[DiskGroup, GroupFigures]:
    """The groups' figures before the step."""
    return group, figures(group, args.layout, args.goal, first=True)


def balance_round(group: DiskGroup, args: RoundArgs) -> tuple[DiskGroup, GroupFigures]:
    """The driver's moves of the group's replicas, then the serial step on ``group`` with its
    share of the goal; its figures after, with its changes so far."""
    _apply(group, args.changes.get(group.gid, {}))
    task = args.tasks.get(group.gid)
    if task is not None and _has_work(group, task, args.layout):
        outcome = balance_disk_input(group.disk_input(), args.layout, task.fixed_bytes, task.fixed_counts, args.goal,
                                     part=task.part, arrived=group.arrived())
        if outcome.changed:
            flat = group.now.flat.copy()
            starts = group.now.starts()
            topic_starts = np.concatenate([[0], np.cumsum(group.counts, dtype=np.int64)]).tolist()
            for (ti, pi), reps in outcome.changed.items():
                r = int(starts[topic_starts[ti] + pi])
                flat[r:r + len(reps)] = reps  # a move keeps the partition's replica count
            group.now = FlatRows(group.now.lens, flat)
        group.moves += outcome.moves
        group.swaps += outcome.swaps
    out = figures(group, args.layout, args.goal)
    out.changes = changes_of(group)
    return group, out


def _has_work(group: DiskGroup, task: GroupTask, layout: BrokerLayout) -> bool:
    """A broker outside the group's part of its band or count window (else the round leaves the
    group as it is, without building the serial step's tables)."""
    now = group.now
    rep_s = group.sizes[np.repeat(np.arange(len(now.lens), dtype=np.int64), now.lens)]
    own_bytes = _per_live(layout, now.flat, rep_s)
    own_count = _per_live(layout, now.flat, 1)
    part = task.part
    for j, b in enumerate(layout.brokers):
        x = task.fixed_bytes[b] + own_bytes[j]
        c = task.fixed_counts[b] + own_count[j]
        lo, hi = part.band[b]
        clo, chi = part.counts[b]
        if x > hi or x < lo or c > chi or c < clo:
            return True
    return False


@dataclass(frozen=True)
class PickArgs:
    layout: BrokerLayout
    goal: DiskGoal
    #: live broker -> the bytes above its band (a broker the driver's pass sheds from)
    excess: dict[int, float]
    #: live broker -> the size above which a replica is the driver's (smaller ones: the groups')
    larger: dict[int, float]


@dataclass
class Picked:
    """A group's largest movable replicas on the brokers above their band (:func:`pick_round`):
    their partitions, as the serial step's flat input, and where they are in the group."""

    gid: int
    entries: npt.NDArray[np.int64]
    now: FlatRows
    orig: FlatRows
    sizes: npt.NDArray[np.int64]


def pick_round(group: DiskGroup, args: PickArgs) -> tuple[DiskGroup, Picked]:
    """Per broker above its band, the group's movable replicas there no larger than its excess but
    larger than ``larger`` (what a group's part of the rooms would hardly take), largest first, until
    they add up to :data:`WHOLE` times the excess (at most :data:`PICKED` a broker): what the serial
    step's first choices are made of."""
    now = group.now
    rep_e = np.repeat(np.arange(len(now.lens), dtype=np.int64), now.lens)
    movable = group.movable(args.goal.offload_threshold is not None)[rep_e]
    chosen: list[npt.NDArray[np.int64]] = []
    for b, excess in args.excess.items():
        at = np.flatnonzero((now.flat == b) & movable)
        sizes = group.sizes[rep_e[at]]
        keep = (sizes <= excess) & (sizes > args.larger.get(b, 0.0))
        at, sizes = at[keep], sizes[keep]
        order = np.argsort(-sizes, kind="stable")
        k = int(np.searchsorted(np.cumsum(sizes[order]), WHOLE * excess)) + 1
        chosen.append(rep_e[at[order[:min(k, PICKED)]]])
    entries = np.unique(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
    return group, Picked(group.gid, entries, _rows(now, entries), _rows(group.orig, entries), group.sizes[entries])


def _rows(rows: FlatRows, entries: npt.NDArray[np.int64]) -> FlatRows:
    starts = rows.starts()
    lens = rows.lens[entries]
    if not len(entries):
        return FlatRows(lens.astype(np.int64), np.zeros(0, dtype=np.int64))
    at = np.repeat(starts[entries] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(int(lens.sum()))
    return FlatRows(lens.astype(np.int64), rows.flat[at].astype(np.int64))


def _apply(group: DiskGroup, changes: Mapping[int, tuple[int, ...]]) -> None:
    """Entry -> replicas, into the group's replicas now."""
    if changes:
        flat = group.now.flat.copy()
        starts = group.now.starts()
        for e, reps in changes.items():
            r = int(starts[e])
            flat[r:r + len(reps)] = reps
        group.now = FlatRows(group.now.lens, flat)


# -- the driver ---------------------------------------------------------------------------------


class GroupRunner(Protocol):
    """Runs a round's function over every group, where the groups are; its results in any order."""

    def run(self, step: Callable[[DiskGroup, A], tuple[DiskGroup, R]], arg: A) -> list[R]: ...


class LocalGroups:
    """The groups in this process."""

    def __init__(self, groups: Sequence[DiskGroup]) -> None:
        self.groups = list(groups)

    def run(self, step: Callable[[DiskGroup, A], tuple[DiskGroup, R]], arg: A) -> list[R]:
        out = []
        for i, g in enumerate(self.groups):
            self.groups[i], r = step(g, arg)
            out.append(r)
        return out


@dataclass
class GroupedDisk:
    """The disk step by groups' result: what :class:`~.staged.DiskDone` carries."""

    changes: dict[str, dict[int, tuple[int, ...]]]
    outcome: DiskOutcome
    bounds: DiskBounds
    rounds: int


def apportion(total: int, weights: npt.NDArray[np.float64], caps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``total`` as integers in proportion to ``weights``, each at most its cap (largest remainders
    first; where the weighted ones are full, the others with room, in proportion to their room)."""
    out = np.zeros(len(caps), dtype=np.int64)
    left = int(min(total, int(caps.sum())))
    w = np.asarray(weights, dtype=np.float64)
    while left > 0:
        room = caps - out
        active = (room > 0) & (w > 0)
        if not active.any():
            active = room > 0
            w = room.astype(np.float64)
        share = np.where(active, w, 0.0)
        share = share / share.sum() * left
        base = np.minimum(np.floor(share).astype(np.int64), room)
        if base.sum() == 0:  # fewer than one each: the largest remainders, one each
            order = np.argsort(-(share - base), kind="stable")
            for i in order[:left].tolist():
                if room[i] > 0 and share[i] > 0:
                    base[i] = 1
            if base.sum() == 0:
                break
        out += base
        left -= int(base.sum())
    return out


def count_targets(
    counts: npt.NDArray[np.int64], window: tuple[int, int], share: npt.NDArray[np.float64], balance: bool
) -> npt.NDArray[np.int64]:
    """Per live broker, the replica count the step aims at: inside ``window`` (the counts' total
    kept), as the serial count phase ends: brokers above it down to its top, below it up to its
    bottom; what that leaves over goes to the brokers with the least disk share first (and what
    it lacks comes from the brokers with the most replicas). ``balance`` off: the counts now."""
    if not balance:
        return np.array(counts, dtype=np.int64)
    lo, hi = window
    t = np.clip(counts, lo, hi)
    extra = int(counts.sum() - t.sum())
    if extra > 0:
        for i in sorted(range(len(t)), key=lambda i: (counts[i] >= lo, share[i])):
            add = min(extra, hi - int(t[i]))
            if add > 0:
                t[i] += add
                extra -= add
            if not extra:
                break
    elif extra < 0:
        for i in sorted(range(len(t)), key=lambda i: -int(t[i])):
            take = min(-extra, int(t[i]) - lo)
            if take > 0:
                t[i] -= take
                extra += take
            if not extra:
                break
    return t


#: A broker's excess goes to one group that may move at least this many times it off the broker;
#: the driver's pass over the largest replicas gets that many times each excess from every group.
WHOLE = 2.0
#: Replicas per broker and group at most in the driver's pass.
PICKED = 4096
#: The driver's pass takes the replicas larger than a group's part of the excess or of the largest
#: room divided by this: at 1M replicas (8 groups) it brought the groups' moves from 1.42x to 1.02x
#: the serial step's (docs/performance.md); the larger the cluster, the fewer replicas that is.
LARGER = 16.0


def shed_shares(
    excess: npt.NDArray[np.float64],
    m: npt.NDArray[np.float64],
    x: npt.NDArray[np.float64],
    tried: Mapping[int, set[int]] | None = None,
) -> npt.NDArray[np.float64]:
    """Per group and live broker, the share of the broker's ``excess`` the group sheds. Whole, to
    one group where one may move :data:`WHOLE` times the excess off it (the group that sheds least
    so far, largest excesses first): the serial step's choice (the largest replicas no larger than
    what must go) is then made over one group's replicas, not cut into shares that only smaller
    replicas fit. Else in proportion to the bytes each group may move off it (``m``; ``x``, the
    group's bytes, where none may). ``tried``: per broker (index), the groups that had its whole
    excess in an earlier round and left some: another group gets it (the later rounds: a group
    whose replicas there fit no receiver's room, or may not leave, would fail again)."""
    ng, nb = m.shape
    msum = m.sum(axis=0)
    fallback = np.where(x.sum(axis=0) > 0, x / np.maximum(x.sum(axis=0), 1.0), 1.0 / ng)
    out = np.where(msum > 0, m / np.maximum(msum, 1.0), fallback)
    load = np.zeros(ng)
    tried = tried or {}
    for j in sorted(np.flatnonzero(excess > 0).tolist(), key=lambda j: -excess[j]):
        able = np.array([g for g in np.flatnonzero(m[:, j] >= WHOLE * excess[j]).tolist() if g not in tried.get(j, ())],
                        dtype=np.int64)
        if len(able):
            g = int(able[np.argmin(load[able])])
            out[:, j] = 0.0
            out[g, j] = 1.0
        load += out[:, j] * excess[j]
    return out  # type: ignore[no-any-return]


#: The first round's receivers take their deficits and this many times their part of the
#: shedders' surplus over the deficits (not their whole room): a group's replicas are coarse against
#: its parts of the rooms, and a receiver it filled to the top of its part would leave another short
#: (pulled up later from a broker in its band: bytes the serial step does not move).
SURPLUS = 1.5
PER_RACK = False


def split_goal(
    layout: BrokerLayout,
    goal: DiskGoal,
    figs: Sequence[GroupFigures],
    fixed_bytes: Mapping[int, int],
    fixed_counts: Mapping[int, int],
    band: Mapping[int, tuple[float, float]],
    window: tuple[int, int],
    tight: bool = False,
    tried: dict[int, set[int]] | None = None,
) -> dict[int, GroupTask]:
    """Each group's share of every live broker's band, cap and count window (module docstring).

    Bytes: a broker above its band sheds its excess through the groups in proportion to the
    bytes each may move off it (whole, to one group, where one may: :func:`shed_shares`); every
    other broker's room and deficit go to the groups in proportion to what each sheds from the
    brokers of the broker's rack (its part of that rack's flow: most replicas keep their rack).
    ``tight``: the receivers' room only as far as the shedders need it (:data:`SURPLUS`).
    ``tried``: per broker (index), groups that had its whole excess before; the groups that get a
    broker's whole excess now are added to it. Counts: each broker's way to its
    target (:func:`count_targets`) through the groups in proportion to their movable replicas on
    it (replicas leaving), to what each group sends (replicas arriving: a group's replicas stay
    in the group); the window's slack around the target in proportion to the groups' byte shares."""
    live = layout.brokers
    nb, ng = len(live), len(figs)
    cap = goal.capacity
    x = np.array([f.bytes for f in figs], dtype=np.float64).reshape(ng, nb)
    m = np.array([f.movable for f in figs], dtype=np.float64).reshape(ng, nb)
    fixed_x = np.array([fixed_bytes.get(b, 0) for b in live], dtype=np.float64)
    xb = fixed_x + x.sum(axis=0)
    lo = np.array([band[b][0] for b in live], dtype=np.float64)
    hi = np.array([band[b][1] for b in live], dtype=np.float64)
    top = np.array([goal.cap * cap[b] for b in live], dtype=np.float64)
    excess = np.maximum(0.0, xb - hi)
    w_shed = shed_shares(excess, m, x, tried)
    if tried is not None:
        for j in np.flatnonzero(excess > 0).tolist():
            whole = np.flatnonzero(w_shed[:, j] == 1.0).tolist()
            if len(whole) == 1:
                tried.setdefault(j, set()).add(whole[0])
    flow = (excess * w_shed).sum(axis=1)
    if flow.sum() > 0:
        v = flow / flow.sum()
    elif m.sum() > 0:
        v = m.sum(axis=1) / m.sum()
    else:
        v = np.full(ng, 1.0 / ng)
    omega = np.where(excess > 0, w_shed, v[:, None])
    rack = np.array([layout.rack_of.get(b, -1) for b in live])
    for g in (set(rack.tolist()) if PER_RACK else ()):
        in_rack = rack == g
        f = (excess[in_rack] * w_shed[:, in_rack]).sum(axis=1)
        if f.sum() > 0:
            omega[:, in_rack & (excess <= 0)] = (f / f.sum())[:, None]
    others = xb - x
    band_lo = x - (xb - lo) * omega + others
    band_hi = x + (hi - xb) * omega + others
    if tight:
        recv = excess <= 0
        room = (hi - np.maximum(xb, lo))[recv].sum()
        surplus = max(0.0, excess.sum() - np.maximum(0.0, lo - xb).sum())
        sigma = min(1.0, SURPLUS * surplus / room) if room > 0 else 1.0
        floor = np.maximum(band_lo, x + others)
        band_hi[:, recv] = (floor + sigma * (band_hi - floor))[:, recv]
    cap_g = x + (top - xb) * omega + others

    c = np.array([f.count for f in figs], dtype=np.int64).reshape(ng, nb)
    k = np.array([f.movable_count for f in figs], dtype=np.int64).reshape(ng, nb)
    fixed_c = np.array([fixed_counts.get(b, 0) for b in live], dtype=np.int64)
    cb = fixed_c + c.sum(axis=0)
    balance = goal.balance_counts and goal.offload_threshold is None
    clo, chi = window
    target = count_targets(cb, window, xb / np.array([cap[b] for b in live], dtype=np.float64), balance)
    delta = target - cb
    shed = np.zeros((ng, nb), dtype=np.int64)
    gain = np.zeros((ng, nb), dtype=np.int64)
    for j in np.flatnonzero(delta < 0).tolist():
        shed[:, j] = apportion(int(-delta[j]), k[:, j].astype(np.float64), k[:, j])
    sends = shed.sum(axis=1)
    for j in sorted(np.flatnonzero(delta > 0).tolist(), key=lambda j: -int(delta[j])):
        gain[:, j] = apportion(int(delta[j]), sends.astype(np.float64), sends)
        sends = sends - gain[:, j]
    t = c - shed + gain
    down = np.zeros((ng, nb), dtype=np.int64)
    up = np.zeros((ng, nb), dtype=np.int64)
    for j in range(nb):
        slack_down, slack_up = max(0, int(target[j]) - clo), max(0, chi - int(target[j]))
        down[:, j] = apportion(slack_down, omega[:, j], np.full(ng, slack_down, dtype=np.int64))
        up[:, j] = apportion(slack_up, omega[:, j], np.full(ng, slack_up, dtype=np.int64))
    other_c = cb - c
    tasks = {}
    for i, f in enumerate(figs):
        part = DiskPart(
            band={b: (float(band_lo[i, j]), float(band_hi[i, j])) for j, b in enumerate(live)},
            cap={b: float(cap_g[i, j]) for j, b in enumerate(live)},
            counts={b: (int(t[i, j] - down[i, j] + other_c[i, j]), int(t[i, j] + up[i, j] + other_c[i, j]))
                    for j, b in enumerate(live)},
            weight={b: float(omega[i, j]) for j, b in enumerate(live)},
        )
        tasks[f.gid] = GroupTask(
            part=part,
            fixed_bytes={b: int(others[i, j]) for j, b in enumerate(live)},
            fixed_counts={b: int(other_c[i, j]) for j, b in enumerate(live)},
        )
    return tasks


def _outside(goal: DiskGoal, live: Sequence[int], xb: Mapping[int, int], band: Mapping[int, tuple[float, float]]) -> list[int]:
    """Live brokers above their band's top, or (rebalance goals) under its bottom."""
    offload = goal.offload_threshold is not None
    return [b for b in live if xb[b] > band[b][1] or (not offload and xb[b] < band[b][0])]


def _racks(
    layout: BrokerLayout,
    goal: DiskGoal,
    band: dict[int, tuple[float, float]],
    figs: Sequence[GroupFigures],
    fixed_bytes: Mapping[int, int],
    xb: Mapping[int, int],
    pinned_only: bool,
) -> list[str]:
    """:func:`~.disk.rack_bands` from the groups' rack limits and the bytes outside the step."""
    fewest = [sum(f.rack_lo[g] for f in figs) for g in range(layout.n_racks)]
    most = [sum(f.rack_hi[g] for f in figs) for g in range(layout.n_racks)]
    for b in layout.brokers:
        g = layout.rack_of.get(b, -1)
        if 0 <= g < layout.n_racks:
            fewest[g] += fixed_bytes.get(b, 0)
            most[g] += fixed_bytes.get(b, 0)
    return rack_bands(goal, layout, band, xb, fewest, most, pinned_only=pinned_only)


def largest_first(
    runner: GroupRunner,
    layout: BrokerLayout,
    goal: DiskGoal,
    band: Mapping[int, tuple[float, float]],
    figs: Sequence[GroupFigures],
    fixed_bytes: Mapping[int, int],
    fixed_counts: Mapping[int, int],
    xb: Mapping[int, int],
    cb: Mapping[int, int],
) -> Largest | None:
    """The serial step on the driver over the largest replicas of the brokers above their band
    (:func:`pick_round`), every other replica fixed: it sheds each such broker down to its band's
    top with them, as far as they go (never past it: what is left goes to the groups, with smaller
    replicas), into every receiver's whole room; counts are the groups' to even out after. Only
    replicas larger than a :data:`LARGER`-th of a group's part of the broker's excess or of the
    largest room: where groups would send several smaller ones, the serial step sends one. ``None`` when it moves nothing."""
    live = layout.brokers
    excess = {b: float(xb[b] - band[b][1]) for b in live if xb[b] > band[b][1]}
    if not excess:
        return None
    room = max((band[b][1] - xb[b] for b in live if b not in excess), default=0.0)
    larger = {b: min(e, room) / (LARGER * max(1, len(figs))) for b, e in excess.items()}
    picked = sorted(runner.run(pick_round, PickArgs(layout, goal, excess, larger)), key=lambda p: p.gid)
    n = sum(len(p.entries) for p in picked)
    if not n:
        return None
    now = FlatRows(np.concatenate([p.now.lens for p in picked]), np.concatenate([p.now.flat for p in picked]))
    orig = FlatRows(np.concatenate([p.orig.lens for p in picked]), np.concatenate([p.orig.flat for p in picked]))
    sizes = np.concatenate([p.sizes for p in picked])
    inp = DiskInput(counts=[1] * n, balance=[True] * n, replicas=(), original=(), sizes=(), frozen=(),
                    flat=DiskFlat(now, orig, sizes, np.zeros(n, dtype=bool)))
    rep_s = sizes[np.repeat(np.arange(n, dtype=np.int64), now.lens)]
    own_bytes = _per_live(layout, now.flat, rep_s)
    own_count = _per_live(layout, now.flat, 1)
    fixed_x = {b: xb[b] - own_bytes[j] for j, b in enumerate(live)}
    fixed_c = {b: cb[b] - own_count[j] for j, b in enumerate(live)}
    # a broker above its band sheds down to its top and no further
    part = DiskPart(
        band={b: ((band[b][1], band[b][1]) if b in excess else band[b]) for b in live},
        cap={b: goal.cap * goal.capacity[b] for b in live},
        counts={b: (-(1 << 40), 1 << 40) for b in live},
        weight=dict.fromkeys(live, 1.0),
    )
    step = replace(goal, balance_counts=False)
    outcome = balance_disk_input(inp, layout, fixed_x, fixed_c, step, part=part)
    if not outcome.changed:
        return None
    # the groups' figures after these moves, worked out here (the groups apply them with their next round)
    changes: dict[int, dict[int, tuple[int, ...]]] = {}
    after = {f.gid: replace(f, bytes=list(f.bytes), movable=list(f.movable), count=list(f.count),
                            movable_count=list(f.movable_count)) for f in figs}
    at = {b: j for j, b in enumerate(live)}
    where = [(p.gid, int(e)) for p in picked for e in p.entries.tolist()]
    starts = now.starts()
    for (i, _), reps in outcome.changed.items():
        gid, e = where[i]
        changes.setdefault(gid, {})[e] = reps
        old = now.flat[starts[i]:starts[i] + now.lens[i]].tolist()
        f, s = after[gid], int(sizes[i])
        for b in set(old) - set(reps):
            if b in at:
                j = at[b]
                f.bytes[j] -= s
                f.movable[j] -= s
                f.count[j] -= 1
                f.movable_count[j] -= 1
        for b in set(reps) - set(old):
            j = at[b]  # placed: it moves no more
            f.bytes[j] += s
            f.count[j] += 1
    return Largest(outcome.moves, [after[f.gid] for f in figs], changes)


@dataclass
class Largest:
    """:func:`largest_first`'s moves, the groups' figures after them, and the moves per group and
    entry (applied by the groups' next round)."""

    moves: int
    figs: list[GroupFigures]
    changes: dict[int, dict[int, tuple[int, ...]]]


def disk_by_groups(
    runner: GroupRunner,
    layout: BrokerLayout,
    goal: DiskGoal,
    fixed_bytes: Mapping[int, int],
    fixed_counts: Mapping[int, int],
    rounds: int = ROUNDS,
) -> GroupedDisk:
    """The disk step over every group ``runner`` holds: the groups' figures (:func:`start_round`),
    the driver's pass over the largest replicas (:func:`largest_first`), then rounds of
    :func:`split_goal` and :func:`balance_round` until every broker is within its band and count
    window (or ``rounds`` are done); the changes come with the last round's figures, the bounds
    from the first's."""
    live = layout.brokers
    offload = goal.offload_threshold is not None
    first = sorted(runner.run(start_round, StartArgs(layout, goal)), key=lambda f: f.gid)

    def totals(figs: Sequence[GroupFigures]) -> tuple[dict[int, int], dict[int, int]]:
        xb = {b: fixed_bytes.get(b, 0) + sum(f.bytes[j] for f in figs) for j, b in enumerate(live)}
        cb = {b: fixed_counts.get(b, 0) + sum(f.count[j] for f in figs) for j, b in enumerate(live)}
        return xb, cb

    xb, cb = totals(first)
    x0 = dict(xb)
    total = sum(xb.values())
    band = goal.band(total)
    if goal.balance_counts and not offload:
        fewest = [sum(f.kept[g] for f in first) for g in range(layout.n_racks)]
        for b in live:
            g = layout.rack_of.get(b, -1)
            if 0 <= g < layout.n_racks:
                fewest[g] += fixed_counts.get(b, 0)
        window = count_window(layout, goal.count_spread, sum(cb.values()), fewest)
    else:
        limit = max(goal.count_spread, max(cb.values(), default=0) - min(cb.values(), default=0))
        window = (min(cb.values(), default=0), min(cb.values(), default=0) + limit)
    warnings: list[str] = []
    figs = first
    done = 0
    moves = swaps = 0
    if not offload and layout.n_racks > 1:
        warnings.extend(_racks(layout, goal, band, first, fixed_bytes, xb, pinned_only=True))
    pending: dict[int, dict[int, tuple[int, ...]]] = {}
    if goal.topic_spread >= 10**9 or offload:
        # the largest replicas' moves on the driver, with every receiver's whole room (a group has
        # only its part of it): the serial step over the replicas it would choose first
        pass_ = largest_first(runner, layout, goal, band, first, fixed_bytes, fixed_counts, xb, cb)
        if pass_ is not None:
            moves, figs, pending = pass_.moves, pass_.figs, pass_.changes
            xb, cb = totals(figs)

    tried: dict[int, set[int]] = {}

    def round_(tight: bool) -> None:
        nonlocal figs, done, xb, cb, pending
        tasks = split_goal(layout, goal, figs, fixed_bytes, fixed_counts, band, window, tight=tight, tried=tried)
        figs = sorted(runner.run(balance_round, RoundArgs(layout, goal, tasks, pending)), key=lambda f: f.gid)
        pending = {}
        done += 1
        xb, cb = totals(figs)

    def balanced() -> bool:
        counts_ok = offload or all(window[0] <= cb[b] <= window[1] for b in live)
        return counts_ok and not _outside(goal, live, xb, band)

    for r in range(rounds):
        round_(tight=r == 0)
        if balanced():
            break
    if not balanced() and not offload and layout.n_racks > 1:
        # racks the rounds left outside the band (no replica that may leave found room): their
        # brokers are balanced with each other around the share the rack has, in one more round
        notes = _racks(layout, goal, band, figs, fixed_bytes, xb, pinned_only=False)
        if notes:
            warnings.extend(notes)
            round_(tight=False)
    # the bounds: per broker before and after, and the prefixes of its sizes they need
    before = dict(fixed_bytes)
    count_before = dict(fixed_counts)
    movable_before: dict[int, int] = {}
    for f in first:
        for into, add in ((before, f.before), (count_before, f.count_before), (movable_before, f.movable_before)):
            for b, v in add.items():
                into[b] = into.get(b, 0) + v
    after = {b: xb[b] for b in live}
    count_after = {b: cb[b] for b in live}
    sheds = count_sheds(count_before, count_after, live)
    live_set = set(live)
    changes: dict[str, dict[int, tuple[int, ...]]] = {}
    for f in figs:
        for topic, c in f.changes.items():
            changes.setdefault(topic, {}).update(c)
    largest: dict[int, list[int]] = {}
    smallest: dict[int, list[int]] = {}
    for f in first:
        for lists, more in ((largest, f.largest), (smallest, f.smallest)):
            for b, sizes in more.items():
                lists.setdefault(b, []).extend(sizes)
    largest = {b: sorted(v, reverse=True) for b, v in largest.items()}
    min_out = {b: sum(sorted(smallest.get(b, []))[:s]) for b, s in sheds.items() if b in live_set}
    for b in sheds:
        if b not in live_set and movable_before.get(b):
            min_out[b] = movable_before[b]  # a broker that is not live sheds every replica
    min_out = {b: v for b, v in min_out.items() if v}
    bounds = bounds_of(goal, live, before, after, count_before, count_after, largest, min_out)
    outcome = DiskOutcome(
        before=x0, after=after,
        moves=moves + sum(f.moves for f in figs), swaps=swaps + sum(f.swaps for f in figs),
        warnings=warnings + broker_warnings(goal, live, after, band, total),
        count_spread=max(count_after.values(), default=0) - min(count_after.values(), default=0),
    )
    return GroupedDisk(changes, outcome, bounds, done)
