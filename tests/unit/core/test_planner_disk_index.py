"""The disk step's starting tables built with numpy (core/planner/disk_index.py) against the
per-replica loop they replace (kept here as the reference), and the bounds over flat arrays
against the same loop, on random inputs: RF 1-4, replicas on removed or unknown brokers,
brokers without a rack, frozen and unbalanced partitions, offload."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from airflow_kafka_reassign.core.planner import disk, disk_index
from airflow_kafka_reassign.core.planner.disk import (
    DiskGoal,
    DiskInput,
    bytes_lower_bound,
    disk_bounds,
    replica_moves_lower_bound_disk,
)
from airflow_kafka_reassign.core.planner.disk_index import (
    FlatRows,
    build_index,
    by_broker_size_entry,
    in_rows,
    index_of,
    key_shift,
    member,
    pack,
    pair_keys,
)


def reference_index(inp: DiskInput, live: tuple[int, ...], rack: dict[int, int], n_racks: int,
                    fixed_bytes: dict[int, int], fixed_counts: dict[int, int], offload: bool) -> dict[str, Any]:
    """The loop _DiskStep.__init__ ran before disk_index.py (the rack rule of _DiskStep.rack_test)."""
    live_set = set(live)
    bytes_ = {b: fixed_bytes.get(b, 0) for b in live}
    pinned = dict(bytes_)
    count = {b: fixed_counts.get(b, 0) for b in live}
    reps = [list(r) for r in inp.replicas]
    size = list(inp.sizes)
    orig = list(inp.original)
    topic = [ti for ti, n in enumerate(inp.counts) for _ in range(n)]
    movable = [(offload or inp.balance[ti]) and not f and sz > 0 for ti, f, sz in zip(topic, inp.frozen, size, strict=True)]
    tcount: list[dict[int, int]] = [{} for _ in inp.counts]
    on: dict[int, list[tuple[int, int]]] = {b: [] for b in live}
    added: dict[int, list[tuple[int, int]]] = {b: [] for b in live}
    taken: dict[int, list[tuple[int, int]]] = {b: [] for b in live}
    for e, (r, o, s, mv, ti) in enumerate(zip(reps, orig, size, movable, topic, strict=True)):
        tc = tcount[ti]
        for b in r:
            if b in live_set:
                bytes_[b] += s
                count[b] += 1
                tc[b] = tc.get(b, 0) + 1
                if mv:
                    on[b].append((s, e))
                    if b not in o:
                        added[b].append((s, e))
                else:
                    pinned[b] += s
        if mv and tuple(r) != o:
            for b in o:
                if b in live_set and b not in r:
                    taken[b].append((s, e))
    for b in live:
        on[b].sort()
        added[b].sort()
        taken[b].sort()
    locked = [len(r) == n_racks and len({rack.get(x, -1) for x in r}) == n_racks for r in reps]

    def cross_keys(e: int, b: int) -> list[tuple[int, int]]:
        r_src = rack.get(b, -1)
        kept = {rack.get(x, -1) for x in reps[e] if x != b}
        need = min(len(reps[e]), n_racks, len(kept | {r_src}))
        ok = None if len(kept) >= need else kept
        return [(b, g) for g in range(n_racks) if g != r_src and (ok is None or g not in ok)]

    cross_to: dict[tuple[int, int], list[tuple[int, int]]] = {
        (b, g): [] for b in live for g in range(n_racks) if g != rack.get(b, -1)
    }
    for b in live:
        for entry in on[b]:
            if not locked[entry[1]]:
                for key in cross_keys(entry[1], b):
                    cross_to[key].append(entry)
    return {"reps": reps, "reps_start": [list(r) for r in reps], "orig": orig,
            "topic": topic, "movable": movable, "bytes": bytes_, "pinned": pinned,
            "count": count, "tcount": tcount, "on": on, "added": added, "taken": taken,
            "locked": locked, "cross_to": cross_to}


def random_input(rng: random.Random, brokers: list[int], n_topics: int) -> DiskInput:
    counts, balance, now, orig, sizes, frozen = [], [], [], [], [], []
    for _ in range(n_topics):
        n = rng.randint(0, 6)
        rf = rng.choice([1, 2, 2, 3, 3, 4])
        counts.append(n)
        balance.append(rng.random() < 0.85)
        for _ in range(n):
            o = tuple(rng.sample(brokers, rf))
            r = list(o)
            for k in range(rf):  # the count steps moved some replicas
                if rng.random() < 0.3:
                    choice = rng.choice(brokers)
                    if choice not in r:
                        r[k] = choice
            now.append(tuple(r))
            orig.append(o)
            sizes.append(rng.choice([0, 1, 5, 5, 100, rng.randint(1, 10**12)]))
            frozen.append(rng.random() < 0.05)
    return DiskInput(counts=counts, balance=balance, replicas=now, original=orig, sizes=sizes, frozen=frozen)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("lookup", ["table", "bisect", "large ids"])
def test_build_index_matches_the_per_replica_loop(seed: int, lookup: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # broker ids looked up in a table of one slot per id (above disk_index._FEW values), or bisected
    monkeypatch.setattr(disk_index, "_FEW", 0 if lookup == "table" else 10**9)
    rng = random.Random(seed)
    n_racks = rng.choice([1, 2, 3, 4])
    base = disk_index.DENSE_IDS + 100 if lookup == "large ids" else 100
    live = tuple(rng.sample(range(base, base + 30), rng.randint(3, 12)))
    removed = [7, 8]  # replicas on brokers that are not live (one of them without a rack)
    rack = {b: rng.randrange(n_racks) for b in live} | {7: 0}
    inp = random_input(rng, [*live, *removed], rng.randint(1, 40))
    fixed_bytes = {live[0]: 123, 7: 5}
    fixed_counts = {live[0]: 2}
    offload = seed % 4 == 3
    want = reference_index(inp, live, rack, n_racks, fixed_bytes, fixed_counts, offload)
    now, orig, sizes, frozen = inp.arrays()
    got = build_index(counts=inp.counts, balance=inp.balance, now=now, orig=orig, sizes=sizes, frozen=frozen,
                      live=live, rack_of=rack, n_racks=n_racks, fixed_bytes=fixed_bytes, fixed_counts=fixed_counts,
                      offload=offload, with_topic_counts=True,
                      # the pure planner's way: sizes and original replicas given as Python objects
                      sizes_given=list(inp.sizes) if seed % 2 else None,
                      orig_given=list(inp.original) if seed % 2 else None)
    # the per-broker lists hold (size, entry) as one int (disk_index.pack)
    for name in ("on", "added", "taken", "cross_to"):
        want[name] = {k: [size << got.shift | e for size, e in pairs] for k, pairs in want[name].items()}
    # the replicas before the plan, of the entries whose brokers the count steps changed
    want["orig_changed"] = {e: o for e, (r, o) in enumerate(zip(want.pop("reps_start"), want.pop("orig"), strict=True))
                            if set(r) != set(o)}
    assert got.tcount is not None
    got.tcount = [got.tcount.of(ti) for ti in range(len(inp.counts))]  # type: ignore[assignment]
    for name, value in want.items():
        mine = getattr(got, name)
        assert mine == value, name
        if isinstance(value, dict):
            assert list(mine) == list(value), f"{name}: key order"


@pytest.mark.parametrize("seed", range(6))
def test_index_of_by_table_matches_the_bisection(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(0, 300, rng.integers(1, 60)))
    if seed == 5:
        ids = np.array([0], dtype=np.int64)
    values = rng.integers(-5, 320, (rng.integers(0, 200), 3))
    values[:, 0] = rng.choice(ids, len(values))  # most values found, some not (negative, above, between)
    monkeypatch.setattr(disk_index, "_FEW", 10**9)
    want = index_of(ids, values), member(values.ravel(), ids)
    monkeypatch.setattr(disk_index, "_FEW", 0)
    got = index_of(ids, values), member(values.ravel(), ids)
    np.testing.assert_array_equal(got[0][0], want[0][0])
    np.testing.assert_array_equal(got[0][1], want[0][1])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[0][1].any() and got[0][0].dtype == want[0][0].dtype


@pytest.mark.parametrize("seed", range(8))
def test_in_rows_matches_the_pair_keys(seed: int) -> None:
    # rows of different lengths (RF changes), empty rows, a broker listed twice; many length pairs
    # (grouped by a sort) or few (a pass per pair)
    rng = random.Random(seed)
    top_len = 12 if seed % 2 else 3
    uniform = seed % 4 == 2  # every row of both three long: compared as tables without a gather
    a_rows, b_rows = [], []
    for _ in range(rng.randint(1, 300)):
        a = [rng.randrange(20) for _ in range(3 if uniform else rng.randint(0, top_len))]
        b = ([rng.randrange(20) for _ in range(3 if uniform else rng.randint(0, top_len))] if rng.random() < 0.5
             else list(a))
        a_rows.append(a)
        b_rows.append(b)
    a, b = FlatRows.of(a_rows), FlatRows.of(b_rows)
    a_e = np.repeat(np.arange(len(a_rows)), a.lens)
    b_e = np.repeat(np.arange(len(b_rows)), b.lens)
    want = member(pair_keys(a_e, a.flat), pair_keys(b_e, b.flat))
    np.testing.assert_array_equal(in_rows(a, b), want)
    assert in_rows(a, b).tolist() == [x in br for ar, br in zip(a_rows, b_rows, strict=True) for x in ar]


@pytest.mark.parametrize("seed", range(9))
def test_broker_size_entry_order_matches_the_lexsort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    if seed >= 6:
        # entries in ascending order with repeats (a partition's replicas one after the other, as
        # build_index gives them; seed 8: a broker listed twice in a row): sorted per broker by
        # (size, index), which is the lexsort's order
        n = int(rng.integers(1, 400))
        entries = np.sort(rng.integers(0, n, n)).astype(np.int32)
        bpos = rng.integers(0, 7, n).astype(np.int32)
        sizes = rng.choice([0, 1, 5, 10**12], len(set(entries.tolist())))[np.unique(entries, return_inverse=True)[1]]
        if seed == 8:
            bpos[1:][entries[1:] == entries[:-1]] = bpos[:-1][entries[1:] == entries[:-1]]
        got = by_broker_size_entry(bpos, sizes, entries, key_shift(n))
        np.testing.assert_array_equal(got, np.lexsort((entries, sizes, bpos)))
        return
    n = int(rng.integers(0, 400))
    bpos = rng.integers(0, 7, n).astype(np.int32)
    sizes = rng.choice([0, 1, 5, 10**12, 2**40 + 3], n) if seed != 4 else rng.integers(0, 2**62, n)
    # entries: each once (no two replicas alike: the sorts' order), or drawn with ties
    entries = (rng.permutation(n) if seed < 4 else rng.integers(0, 50, n)).astype(np.int32)
    if seed == 3 and n:  # the same (broker, size, entry) twice: the lexsort's order among them
        bpos[-1], sizes[-1], entries[-1] = bpos[0], sizes[0], entries[0]
    got = by_broker_size_entry(bpos, sizes, entries, key_shift(max(50, n)))
    np.testing.assert_array_equal(got, np.lexsort((entries, sizes, bpos)))


@pytest.mark.parametrize("top", [10**12, 2**61])
def test_packed_pairs_order_as_the_pairs(top: int) -> None:
    rng = random.Random(top)
    pairs = [(rng.choice([0, 1, top, rng.randint(0, top)]), rng.randrange(1000)) for _ in range(300)]
    shift = key_shift(1000)
    keys = pack(np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=np.int32), shift)
    assert [divmod(k, 1 << shift) for k in keys] == pairs
    assert sorted(range(300), key=keys.__getitem__) == sorted(range(300), key=pairs.__getitem__)


def test_flat_rows_give_back_the_rows() -> None:
    rows = [(1, 2), (), (3,), (4, 5, 6), (7, 8)]
    flat = FlatRows.of(rows)
    assert flat.tuples() == rows
    assert flat.lists() == [list(r) for r in rows]
    assert FlatRows.of([(1, 2), (3, 4)]).lists() == [[1, 2], [3, 4]]
    assert FlatRows.of([]).lists() == []


def reference_bounds(inp: DiskInput, final: list[tuple[int, ...]], goal: DiskGoal, live: tuple[int, ...],
                     fixed_bytes: dict[int, int], fixed_counts: dict[int, int]) -> tuple[Any, ...]:
    """disk_bounds as a loop over the partitions (what it was before the flat arrays)."""
    live_set = set(live)
    before: dict[int, int] = dict(fixed_bytes)
    after: dict[int, int] = {b: fixed_bytes.get(b, 0) for b in live}
    count_before: dict[int, int] = dict(fixed_counts)
    count_after: dict[int, int] = {b: fixed_counts.get(b, 0) for b in live}
    largest: dict[int, list[int]] = {}
    topic_of = [ti for ti, n in enumerate(inp.counts) for _ in range(n)]
    for o, fin, size, frozen, ti in zip(inp.original, final, inp.sizes, inp.frozen, topic_of, strict=True):
        movable = not frozen and (inp.balance[ti] or goal.offload_threshold is not None)
        for b in o:
            before[b] = before.get(b, 0) + size
            count_before[b] = count_before.get(b, 0) + 1
            if movable:
                largest.setdefault(b, []).append(size)
        for b in fin:
            if b in live_set:
                after[b] += size
                count_after[b] += 1
    for sizes in largest.values():
        sizes.sort(reverse=True)
    total = sum(after.values())
    top = max(count_after.values(), default=0)
    min_out: dict[int, int] = {}
    for b, c in count_before.items():
        shed = c - (top if b in live_set else 0)
        sizes = largest.get(b, [])
        if shed > 0 and sizes:
            min_out[b] = sum(sizes[len(sizes) - min(shed, len(sizes)):])
    return (before, after, bytes_lower_bound(before, after, goal, live, total, min_out),
            replica_moves_lower_bound_disk(before, after, goal, live, total, largest, counts=count_before,
                                           counts_after=count_after))


@pytest.mark.parametrize("seed", range(8))
def test_disk_bounds_over_flat_arrays_match_the_loop(seed: int) -> None:
    rng = random.Random(100 + seed)
    live = tuple(rng.sample(range(100, 130), rng.randint(3, 12)))
    inp = random_input(rng, [*live, 7, 8], rng.randint(1, 40))
    capacity = {b: 10**13 for b in live}
    goal = DiskGoal(capacity=capacity, offload_threshold=0.5 if seed % 3 == 2 else None)
    final = [tuple(r) for r in inp.replicas]
    fixed_bytes, fixed_counts = {live[-1]: 10**9, 8: 3}, {live[-1]: 4}
    before, after, bytes_bound, moves_bound = reference_bounds(inp, final, goal, live, fixed_bytes, fixed_counts)
    for given in (final, FlatRows.of(final)):
        got = disk_bounds(inp, given, goal, live, fixed_bytes, fixed_counts)
        assert got.before == before and list(got.before) == list(before)
        assert got.after == after and list(got.after) == list(after)
        assert (got.bytes_bound, got.moves_bound) == (bytes_bound, moves_bound)
    assert np.asarray(FlatRows.of(final).flat).dtype == np.int64


def reference_rack_limits(step: Any) -> tuple[list[int], list[int]]:
    """_DiskStep.rack_limits as the loop over the partitions it was."""
    n = step.n_racks
    lo, hi = [0] * n, [0] * n
    per_rack = step.layout.rack_sizes()
    for b in step.live:
        g = step.rack.get(b, -1)
        if 0 <= g < n:
            lo[g] += step.pinned[b]
            hi[g] += step.pinned[b]
    for e, reps in enumerate(step.reps):
        if not step.movable[e]:
            continue
        s = step.size[e]
        racks = [step.rack.get(b, -1) for b in reps if b in step.live_set]
        keep = min(len(reps), n, len(set(racks)))
        for g in range(n):
            if len(reps) >= n and g in racks:
                lo[g] += s
            hi[g] += s * min(per_rack[g], len(reps) - (keep - 1))
    return lo, hi


@pytest.mark.parametrize("seed", range(6))
def test_rack_test_matches_the_rule(seed: int) -> None:
    """_DiskStep.rack_test against the rule as it was written first (racks_ok once per replica),
    replicas on removed brokers with and without a rack among them."""
    from airflow_kafka_reassign.core.planner.disk import _DiskStep
    from airflow_kafka_reassign.core.planner.types import BrokerLayout

    rng = random.Random(300 + seed)
    n_racks = rng.choice([2, 3, 4])
    live = tuple(range(1, rng.randint(n_racks + 2, 12)))
    rack = {b: i % n_racks for i, b in enumerate(live)} | {98: 1}  # 99: removed, no rack
    step = _DiskStep(random_input(rng, [*live, 98, 99], 5), BrokerLayout(brokers=live, rack_of=rack), {}, {},
                     DiskGoal(capacity={b: 10**13 for b in live}))

    def rule(reps: list[int], src: int) -> tuple[int, set[int] | None]:
        r_src = rack.get(src, -1)
        kept = {rack.get(b, -1) for b in reps if b != src}
        need = min(len(reps), n_racks, len(kept | {r_src}))
        return r_src, (None if len(kept) >= need else kept)

    for _ in range(400):
        reps = rng.sample([*live, 98, 99], rng.randint(1, min(5, len(live))))
        src = rng.choice(reps)
        assert step.rack_test(reps, src) == rule(reps, src), (reps, src)


@pytest.mark.parametrize("seed", range(8))
def test_rack_limits_match_the_loop(seed: int) -> None:
    from airflow_kafka_reassign.core.planner.disk import _DiskStep
    from airflow_kafka_reassign.core.planner.types import BrokerLayout

    rng = random.Random(200 + seed)
    n_racks = rng.choice([2, 3, 4])
    live = tuple(range(1, rng.randint(n_racks + 4, 14)))
    rack = {b: i % n_racks for i, b in enumerate(live)} | {99: 0}
    layout = BrokerLayout(brokers=live, rack_of=rack)
    inp = random_input(rng, [*live, 99], rng.randint(1, 40))
    goal = DiskGoal(capacity={b: 10**13 for b in live})
    step = _DiskStep(inp, layout, {}, {}, goal)
    assert step.rack_limits() == reference_rack_limits(step)
    # after the step's moves: its flat rows kept up to date with its lists of replicas
    out = step.run()
    assert out.moves or seed == 0  # the other seeds move replicas
    assert step.flat_now.lists() == step.reps
    # every entry the step moved or the count steps changed: its replicas before the plan (the
    # brokers a move back to costs no bytes); the others' are the brokers they have now
    for e, (r, o) in enumerate(zip(step.reps, inp.original, strict=True)):
        if e in step.touched or set(inp.replicas[e]) != set(o):
            assert set(step.orig_changed[e]) == set(o)
        else:
            assert e not in step.orig_changed and set(r) == set(o)
    assert step.rack_limits() == reference_rack_limits(step)


@pytest.mark.parametrize("seed", range(6))
def test_per_broker_sums_by_slot_match_the_sort(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """disk_bounds' per-broker sums: a slot per id (small ids) and a sort (any ids) give the same
    ids in the order they first appear, and the same sums."""
    rng = np.random.default_rng(seed)
    for _ in range(30):
        n = int(rng.integers(0, 2000))
        ids = rng.integers(0, int(rng.choice([3, 100, 5000])), n).astype(rng.choice([np.int32, np.int64]))
        weights = rng.integers(0, 10**12, n) if rng.random() < 0.7 else None
        by_slot = disk._per_id(ids, weights)
        monkeypatch.setattr(disk, "_DENSE_IDS", 0)
        assert disk._per_id(ids, weights) == by_slot
        monkeypatch.undo()
