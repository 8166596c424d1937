"""The disk step's starting tables, built with numpy over flat arrays (no Python loop per replica).

:class:`~.disk._DiskStep` looks replicas up per broker, in lists sorted by size; building them
replica by replica in Python took a third of the step at 2M replicas (5-6 s). Here the same
tables come from flat arrays: one sort of every replica by (broker, size, partition) and
boolean masks, then one slice per broker. The result is exactly what the per-replica loop gave
(``tests/unit/core/planner/test_disk_index.py`` compares both on random inputs).

Arrays are flat per partition ("entries", the disk step's order): ``lens`` replicas each, one
after the other in ``flat``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.integer[Any]]  # int64, or int32 for entry and broker positions

_PAD = np.iinfo(np.int64).min  # no broker or rack has this id


@dataclass
class FlatRows:
    """Rows of broker ids (one per entry) as lengths and their values one after the other."""

    lens: Ints
    flat: Ints

    @classmethod
    def of(cls, rows: Sequence[Sequence[int]]) -> FlatRows:
        # map and chain iterate in C: no Python frame per row or per value
        lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        return cls(lens, np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lens.sum())))

    def starts(self) -> Ints:
        out = np.zeros(len(self.lens), dtype=np.int64)
        np.cumsum(self.lens[:-1], out=out[1:])
        return out

    def groups(self) -> list[tuple[int, Ints, Ints]]:
        """Per row length ``n`` (ascending): the rows of that length and their values as an
        ``(rows, n)`` table."""
        starts = self.starts()
        out: list[tuple[int, Ints, Ints]] = []
        for n in (np.flatnonzero(np.bincount(self.lens)).tolist() if len(self.lens) else []):
            idx = np.flatnonzero(self.lens == n)
            table = self.flat[starts[idx][:, None] + np.arange(n)] if n else np.zeros((len(idx), 0), dtype=np.int64)
            out.append((int(n), idx, table))
        return out

    def lists(self) -> list[list[int]]:
        """The rows as Python lists (one C-level ``tolist`` per row length)."""
        groups = self.groups()
        if len(groups) == 1 and groups[0][0]:
            return groups[0][2].tolist()  # type: ignore[no-any-return]
        out: list[Any] = [None] * len(self.lens)
        for n, idx, table in groups:
            rows = table.tolist() if n else [[] for _ in range(len(idx))]
            for i, r in zip(idx.tolist(), rows, strict=True):
                out[i] = r
        return out

    def tuples(self) -> list[tuple[int, ...]]:
        return list(map(tuple, self.lists()))


def rack_lookup(rack_of: Mapping[int, int]) -> tuple[Ints, Ints]:
    """Sorted broker ids and their racks, for :func:`racks_of`."""
    ids = np.fromiter(rack_of.keys(), dtype=np.int64, count=len(rack_of))
    racks = np.fromiter(rack_of.values(), dtype=np.int64, count=len(rack_of))
    order = np.argsort(ids, kind="stable")
    return ids[order], racks[order]


#: ids below this are looked up in a table of one slot per id (:func:`index_of`, :func:`member`)
DENSE_IDS = 1 << 22
#: fewer values than this are looked up by bisection (a table is not worth making)
_FEW = 4096


def _dense(ids: Ints, values: Ints) -> bool:
    """Whether ``values`` are looked up in a table over ``ids`` (sorted): broker ids, small and
    not negative, and many values. Bisecting 10M values into 100 ids took a third of a second."""
    return values.size >= _FEW and values.dtype.kind in "iu" and int(ids[0]) >= 0 and int(ids[-1]) < DENSE_IDS


def index_of(ids: Ints, values: Ints) -> tuple[Ints, npt.NDArray[np.bool_]]:
    """Position of each of ``values`` in the sorted ``ids``, and whether it is there (where it is
    not: where it would go, at most the last position)."""
    if len(ids) == 0:
        return np.zeros(values.shape, dtype=np.int64), np.zeros(values.shape, dtype=bool)
    if _dense(ids, values):
        top = int(ids[-1])
        table = np.full(top + 2, -1, dtype=np.int64)  # the last slot: every value outside [0, top]
        table[ids[::-1]] = np.arange(len(ids) - 1, -1, -1, dtype=np.int64)  # an id listed twice: its first
        inside = int(values.min()) >= 0 and int(values.max()) <= top
        pos = table[values if inside else np.where((values >= 0) & (values <= top), values, top + 1)]
        found = pos >= 0
        if not found.all():
            miss = ~found
            pos[miss] = np.minimum(np.searchsorted(ids, values[miss]), len(ids) - 1)
        return pos, found
    pos = np.searchsorted(ids, values)
    pos = np.minimum(pos, len(ids) - 1)
    return pos, ids[pos] == values


def racks_of(lookup: tuple[Ints, Ints], brokers: Ints) -> Ints:
    """``rack_of.get(b, -1)`` for every broker of ``brokers`` (any shape)."""
    ids, racks = lookup
    pos, found = index_of(ids, brokers)
    out = np.full(brokers.shape, -1, dtype=np.int64)
    if len(ids):
        out[found] = racks[pos[found]]
    return out


def distinct_per_row(table: Ints, keep: npt.NDArray[np.bool_] | None = None) -> Ints:
    """How many distinct values each row of ``table`` holds (only where ``keep``)."""
    if table.shape[1] == 0:
        return np.zeros(table.shape[0], dtype=np.int64)
    t = table if keep is None else np.where(keep, table, _PAD)
    t = np.sort(t, axis=1)
    first = t[:, :1] != _PAD
    rest = (t[:, 1:] != t[:, :-1]) & (t[:, 1:] != _PAD)
    return first.sum(axis=1) + rest.sum(axis=1)  # type: ignore[no-any-return]


def member(values: Ints, of: Ints) -> npt.NDArray[np.bool_]:
    """``np.isin(values, of)`` by sorting (numpy's hash-based isin took seconds on millions)."""
    if len(of) == 0:
        return np.zeros(len(values), dtype=bool)
    ordered = np.sort(of)
    if _dense(ordered, values):
        return index_of(ordered, values)[1]
    pos = np.minimum(np.searchsorted(ordered, values), len(ordered) - 1)
    return ordered[pos] == values  # type: ignore[no-any-return]


def in_rows(a: FlatRows, b: FlatRows) -> npt.NDArray[np.bool_]:
    """Per value of ``a`` (in ``a.flat``'s order): whether its row of ``b`` (the same row index)
    holds it too. ``member(pair_keys(...), pair_keys(...))`` of the two, row by row: rows of one
    length pair compared as tables, no sort and no search over every replica."""
    out = np.zeros(len(a.flat), dtype=bool)
    if len(a.flat) == 0 or len(b.flat) == 0:
        return out
    if len(a.lens) and np.array_equal(a.lens, b.lens) and int(a.lens.min()) == int(a.lens.max()):
        # every row of one length in both (no RF change): the rows are tables already, no gather
        k = int(a.lens[0])
        rows_a, rows_b = a.flat.reshape(-1, k), b.flat.reshape(-1, k)
        return (rows_a[:, :, None] == rows_b[:, None, :]).any(axis=2).ravel()  # type: ignore[no-any-return]
    a_starts, b_starts = a.starts(), b.starts()
    width = int(b.lens.max()) + 1
    combo = a.lens.astype(np.int64) * width + b.lens
    kinds = np.flatnonzero(np.bincount(combo)).tolist()
    if len(kinds) > 8:  # many length pairs: group the rows by one sort, not one pass per pair
        order = np.argsort(combo, kind="stable")
        cuts = np.searchsorted(combo[order], kinds + [int(combo.max()) + 1]).tolist()
        groups = [(c, order[cuts[i]:cuts[i + 1]]) for i, c in enumerate(kinds)]
    else:
        groups = [(c, np.flatnonzero(combo == c)) for c in kinds]
    for c, idx in groups:
        ka, kb = divmod(c, width)
        if ka == 0 or kb == 0:
            continue
        at = a_starts[idx][:, None] + np.arange(ka)
        table_b = b.flat[b_starts[idx][:, None] + np.arange(kb)]
        out[at] = (a.flat[at][:, :, None] == table_b[:, None, :]).any(axis=2)
    return out


def pair_keys(entries: Ints, brokers: Ints) -> Ints:
    """One int64 per (entry, broker) pair (broker ids are 32-bit in Kafka)."""
    return entries.astype(np.int64) * (1 << 33) + (brokers + (1 << 32))


def key_shift(n_entries: int) -> int:
    """Bits for an entry in a :func:`pack` key: every entry of ``n_entries`` fits."""
    return max(1, n_entries.bit_length())


def pack(sizes: Ints, entries: Ints, shift: int) -> list[int]:
    """(size, entry) pairs as one int each, ``size << shift | entry``: ints order as the pairs do
    (sizes >= 0, entries below ``1 << shift``). One int per replica instead of a tuple and two
    ints: a third of the memory, and made from the arrays in one go (at 10M replicas the tuples
    took 8 s to make)."""
    if len(sizes) == 0:
        return []
    if int(sizes.max()) < 1 << (62 - shift):
        return (sizes.astype(np.int64) << shift | entries.astype(np.int64)).tolist()  # type: ignore[no-any-return]
    return [size << shift | e for size, e in zip(sizes.tolist(), entries.tolist(), strict=True)]


@dataclass
class DiskIndex:
    """The disk step's starting tables (see ``_DiskStep.__init__`` for what each means). The
    per-broker lists hold (size, entry) pairs as :func:`pack` keys, with ``shift``."""

    reps: list[list[int]]
    size: list[int]
    #: the replicas before the plan of every entry whose replicas now are not the same brokers
    #: (the count steps moved some): the others' are their replicas now (no tuple per entry)
    orig_changed: dict[int, tuple[int, ...]]
    topic: list[int]
    topic_starts: list[int]
    movable: list[bool]
    #: ``movable`` as an array
    movable_mask: npt.NDArray[np.bool_]
    bytes: dict[int, int]
    pinned: dict[int, int]
    count: dict[int, int]
    tcount: TopicCounts | None
    on: dict[int, list[int]]
    added: dict[int, list[int]]
    taken: dict[int, list[int]]
    locked: list[bool]
    #: locked, and every replica on a broker with a rack: one replica in each rack of the layout
    spread: list[bool]
    cross_to: dict[tuple[int, int], list[int]]
    shift: int


def _per_broker(n_live: int, where: Ints, pairs: list[int]) -> list[list[int]]:
    """``pairs`` (sorted by broker position ``where``) cut into one list per live broker."""
    cuts = np.searchsorted(where, np.arange(n_live + 1)).tolist()
    return [pairs[cuts[i]:cuts[i + 1]] for i in range(n_live)]


def by_broker_size_entry(bpos: Ints, sizes: Ints, entries: Ints, shift: int) -> Ints:
    """The order of ``np.lexsort((entries, sizes, bpos))`` (broker position, then size, then
    entry), faster: one sort of the :func:`pack` keys, then a stable sort of the broker positions
    (small ints: a radix sort). Where two replicas have the same three (a broker listed twice in
    a row), the lexsort itself."""
    n = len(bpos)
    if n == 0 or int(sizes.max()) >= 1 << (62 - shift) or int(bpos.min()) < 0 or int(bpos.max()) >= 1 << 15:
        return np.lexsort((entries, sizes, bpos))
    bits = max(1, n.bit_length())
    if int(sizes.max()) < 1 << (62 - bits) and bool((entries[1:] >= entries[:-1]).all()):
        # entries in ascending order (the replicas in the flat order): among one broker's replicas of
        # one size, the entries' order is their index's (the lexsort is stable where entries tie).
        # The brokers apart first (a radix sort), then each broker's (size, index) keys sorted
        # as plain ints: no argsort of every replica
        by_broker = np.argsort(bpos.astype(np.int16), kind="stable")
        keys = (sizes.astype(np.int64) << bits | np.arange(n, dtype=np.int64))[by_broker]
        cuts = np.flatnonzero(np.diff(bpos[by_broker])) + 1
        for a, z in zip([0, *cuts.tolist()], [*cuts.tolist(), n], strict=True):
            keys[a:z].sort()
        return keys & ((1 << bits) - 1)
    keys = sizes.astype(np.int64) << shift | entries.astype(np.int64)
    order = np.argsort(keys)
    order = order[np.argsort(bpos[order].astype(np.int16), kind="stable")]
    k, p = keys[order], bpos[order]
    if ((k[1:] == k[:-1]) & (p[1:] == p[:-1])).any():
        return np.lexsort((entries, sizes, bpos))  # ties: the lexsort's order among them
    return order


def _sorted_pairs(bpos: Ints, sizes: Ints, entries: Ints, shift: int) -> tuple[Ints, Ints, Ints]:
    """(broker position, size, entry) sorted by the three, in that order."""
    order = by_broker_size_entry(bpos, sizes, entries, shift)
    return bpos[order], sizes[order], entries[order]


class TopicCounts:
    """Per topic, its replica count on each live broker that holds some (``{broker: count}``, the
    brokers in the live brokers' order), made when asked for: the disk step looks at the topics
    of the replicas it tries, not at every topic (at 10M replicas, 92,000 topics: making every
    dict took seconds)."""

    __slots__ = ("_counts", "_cuts", "_live", "_n_live", "_pos")

    def __init__(self, n_topics: int, live: Sequence[int], topic: Ints, bpos: Ints) -> None:
        """``topic`` and ``bpos``: per replica on a live broker, its topic index and the broker's
        position in ``live``."""
        self._live = list(live)
        self._n_live = max(1, len(live))
        keys = np.sort(topic.astype(np.int64) * self._n_live + bpos)
        first = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]])) if len(keys) else keys
        uniq = keys[first]
        self._counts = np.diff(np.append(first, len(keys)))
        self._pos = uniq % self._n_live
        self._cuts = np.searchsorted(uniq, np.arange(n_topics + 1, dtype=np.int64) * self._n_live).tolist()

    def __len__(self) -> int:
        return len(self._cuts) - 1

    def of(self, ti: int) -> dict[int, int]:
        a, z = self._cuts[ti], self._cuts[ti + 1]
        return dict(zip(map(self._live.__getitem__, self._pos[a:z].tolist()), self._counts[a:z].tolist(), strict=True))


def build_index(
    *,
    counts: Sequence[int],
    balance: Sequence[bool],
    now: FlatRows,
    orig: FlatRows,
    sizes: Ints,
    frozen: npt.NDArray[np.bool_],
    live: Sequence[int],
    rack_of: Mapping[int, int],
    n_racks: int,
    fixed_bytes: Mapping[int, int],
    fixed_counts: Mapping[int, int],
    offload: bool,
    with_topic_counts: bool,
    sizes_given: list[int] | None = None,
    orig_given: list[tuple[int, ...]] | None = None,
) -> DiskIndex:
    """Every table of the disk step's start from flat arrays, in one pass of numpy operations.
    ``sizes_given`` and ``orig_given``: the same sizes and original replicas as Python objects when
    the caller holds them already (the pure planner): used as they are, not built again."""
    n_entries = len(now.lens)
    size_list: list[int] = sizes_given if sizes_given is not None else sizes.tolist()
    shift = key_shift(n_entries)
    n_live = len(live)
    counts_a = np.asarray(counts, dtype=np.int64)
    topic = np.repeat(np.arange(len(counts_a), dtype=np.int64), counts_a)
    balanced = np.ones(n_entries, dtype=bool) if offload else np.asarray(balance, dtype=bool).reshape(-1)[topic]
    movable = balanced & ~frozen & (sizes > 0)

    live_arr = np.asarray(live, dtype=np.int64)
    live_order = np.argsort(live_arr, kind="stable")
    live_sorted = live_arr[live_order]

    def live_pos(brokers: Ints) -> tuple[Ints, npt.NDArray[np.bool_]]:
        pos, found = index_of(live_sorted, brokers)
        return (live_order[pos] if len(live_sorted) else pos).astype(np.int32), found

    # every replica now: its entry, broker, size
    rep_e = np.repeat(np.arange(n_entries, dtype=np.int32), now.lens)  # int32: half the memory of the big arrays
    rep_b = now.flat
    rep_s = sizes[rep_e]
    rep_mv = movable[rep_e]
    rep_pos, rep_live = live_pos(rep_b)
    orig_e = np.repeat(np.arange(n_entries, dtype=np.int32), orig.lens)
    orig_b = orig.flat
    in_orig = in_rows(now, orig)
    orig_in_now = in_rows(orig, now)
    changed = np.zeros(n_entries, dtype=bool)
    changed[rep_e[~in_orig]] = True
    changed[orig_e[~orig_in_now]] = True
    changed_at = np.flatnonzero(changed)
    if orig_given is not None:
        orig_changed = {e: orig_given[e] for e in changed_at.tolist()}
    else:
        o_starts = orig.starts()
        o_lens = orig.lens[changed_at]
        # the changed entries' rows: each row's start, minus where it starts among them, plus 0, 1, ...
        o_at = np.repeat(o_starts[changed_at] - (np.cumsum(o_lens) - o_lens), o_lens) + np.arange(int(o_lens.sum()))
        orig_changed = dict(zip(changed_at.tolist(), FlatRows(o_lens, orig.flat[o_at]).tuples(), strict=True))
    del changed, changed_at

    def sums(pos: Ints, mask: npt.NDArray[np.bool_], weights: Ints | None) -> list[int]:
        out = np.zeros(n_live, dtype=np.int64)
        np.add.at(out, pos[mask], 1 if weights is None else weights[mask])
        totals: list[int] = out.tolist()  # numpy's stubs type tolist() as Any when checked for Python 3.10
        return totals

    live_now = rep_live
    added_bytes = sums(rep_pos, live_now, rep_s)
    pinned_bytes = sums(rep_pos, live_now & ~rep_mv, rep_s)
    added_count = sums(rep_pos, live_now, None)
    bytes_ = {b: fixed_bytes.get(b, 0) + added_bytes[i] for i, b in enumerate(live)}
    pinned = {b: fixed_bytes.get(b, 0) + pinned_bytes[i] for i, b in enumerate(live)}
    count = {b: fixed_counts.get(b, 0) + added_count[i] for i, b in enumerate(live)}

    tcount = TopicCounts(len(counts_a), live, topic[rep_e[live_now]], rep_pos[live_now]) if with_topic_counts else None

    # replicas that may move, per broker sorted by (size, entry): one sort; the keys are shared
    # by every table that lists a replica (on, added, cross_to)
    mv = live_now & rep_mv
    at = np.flatnonzero(mv)
    rep_index = at[by_broker_size_entry(rep_pos[at], rep_s[at], rep_e[at], shift)]  # flat positions, in on[b]'s order
    del at
    on_pos, on_e = rep_pos[rep_index], rep_e[rep_index]
    on_pairs = pack(rep_s[rep_index], on_e, shift)
    on_lists = _per_broker(n_live, on_pos, on_pairs)
    on = {b: on_lists[i] for i, b in enumerate(live)}

    sel = np.flatnonzero(~in_orig[rep_index])
    added_lists = _per_broker(n_live, on_pos[sel], [on_pairs[i] for i in sel.tolist()])
    added = {b: added_lists[i] for i, b in enumerate(live)}
    del in_orig

    o_pos, o_live = live_pos(orig_b)
    tk = o_live & movable[orig_e] & ~orig_in_now
    t_pos, _, t_e = _sorted_pairs(o_pos[tk], sizes[orig_e[tk]], orig_e[tk], shift)
    taken_lists = _per_broker(n_live, t_pos, pack(sizes[t_e], t_e, shift))
    taken = {b: taken_lists[i] for i, b in enumerate(live)}

    # racks: which entries span every rack with one replica each (locked), and per replica now
    # which other racks it may move to (the rule of _DiskStep.rack_test)
    lookup = rack_lookup(rack_of)
    locked = np.zeros(n_entries, dtype=bool)
    spread = np.zeros(n_entries, dtype=bool)
    starts = now.starts()
    allowed = np.zeros((len(rep_b), max(1, n_racks)), dtype=bool)  # per replica now, in flat order
    for n, idx, table in now.groups():
        if n == 0:
            continue
        racks = racks_of(lookup, table)
        if n == n_racks:
            locked[idx] = distinct_per_row(racks) == n_racks
            spread[idx] = locked[idx] & (racks >= 0).all(axis=1)
        for j in range(n):
            others = np.ones(n, dtype=bool)
            others[j] = False
            other_racks = racks[:, others]
            kept_n = distinct_per_row(other_racks)
            r_src = racks[:, j]
            with_src = distinct_per_row(np.concatenate([other_racks, r_src[:, None]], axis=1))
            need = np.minimum(np.minimum(n, n_racks), with_src)
            anywhere = kept_n >= need
            flat_at = starts[idx] + j
            for g in range(n_racks):
                in_kept = (other_racks == g).any(axis=1)
                allowed[flat_at, g] = (r_src != g) & (anywhere | ~in_kept)
    # cross_to[(b, g)]: b's movable replicas (in on[b]'s order) that may leave for rack g
    unlocked = ~locked[on_e]
    cross_to: dict[tuple[int, int], list[int]] = {}
    per_g: list[list[list[int]]] = []
    for g in range(n_racks):
        sel = np.flatnonzero(unlocked & allowed[rep_index, g])
        pairs = [on_pairs[i] for i in sel.tolist()]
        per_g.append(_per_broker(n_live, on_pos[sel], pairs))
    for i, b in enumerate(live):
        rb = rack_of.get(b, -1)
        for g in range(n_racks):
            if g != rb:
                cross_to[(b, g)] = per_g[g][i]

    # the arrays go before the rows become Python lists: not both at once
    del rep_e, rep_s, rep_mv, rep_pos, rep_live, live_now, orig_e, orig_b, o_pos, o_live, allowed, rep_index
    del on_pos, on_e, on_pairs
    return DiskIndex(
        reps=now.lists(),
        size=size_list,
        orig_changed=orig_changed,
        topic=topic.tolist(),
        topic_starts=np.concatenate([[0], np.cumsum(counts_a)]).astype(np.int64).tolist(),
        movable=movable.tolist(),
        movable_mask=movable,
        bytes=bytes_,
        pinned=pinned,
        count=count,
        tcount=tcount,
        on=on,
        added=added,
        taken=taken,
        locked=locked.tolist(),
        spread=spread.tolist(),
        cross_to=cross_to,
        shift=shift,
    )
