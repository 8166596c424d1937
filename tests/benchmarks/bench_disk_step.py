"""Benchmark of the disk step alone, replayed in one process on the input the plan job's driver gets.

The load-aware benchmark's cluster (bench_load_aware.py: skewed sizes, 100 brokers in 3 racks,
heterogeneous disks 60% full, seed 1) is planned in this process up to the disk step with the
staged planner (prepare, quotas, place: what the Spark job's tasks compute); the disk step's input
(the layout, the goal, the place stage's arrays) is cached under ``$AKR_BENCH_DIR`` and replayed:
wall and CPU seconds of :func:`~airflow_kafka_reassign.core.planner.staged.driver_disk`, peak RSS,
and the plan's quality (bytes against the bound, disk share deviation, replica count spread).
``--profile FILE`` writes a cProfile of the step; ``--phases`` prints the CPU seconds of its
phases (the tables, the count phase, the byte passes, the rack bands, the bounds). Prints numbers,
asserts nothing about time.

    .venv/bin/python tests/benchmarks/bench_disk_step.py 1000000
    .venv/bin/python tests/benchmarks/bench_disk_step.py 1000000 --profile /tmp/disk-1m.prof
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import os
import pickle
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
from sizes import expect, require, synthetic

from airflow_kafka_reassign.core.planner.disk_groups import LocalGroups
from airflow_kafka_reassign.core.planner.goals import PlanRequest, plan_context
from airflow_kafka_reassign.core.planner.staged import (
    DiskArrays,
    driver_disk,
    driver_disk_groups,
    driver_quotas,
    stage_place,
    stage_prepare,
)
from airflow_kafka_reassign.core.planner.synthetic import synthetic_capacities, synthetic_cluster, to_snapshot
from airflow_kafka_reassign.core.vocabulary.capacity import BrokerCapacity, CapacityDocument

ROOT = Path(os.environ.get("AKR_BENCH_DIR", "/tmp/akr-bench"))


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def disk_input(n: int, seed: int, brokers: int) -> tuple[Any, Any, list[DiskArrays]]:
    """(context, quota step, the place stage's disk arrays) of the load-aware plan, cached."""
    path = ROOT / f"disk-input-{n}-s{seed}-b{brokers}.pickle"
    if path.is_file():
        with path.open("rb") as f:
            return pickle.load(f)  # type: ignore[no-any-return]
    t0 = time.perf_counter()
    cluster = synthetic_cluster(brokers=brokers, racks=3, replicas=n, sizes="skewed", seed=seed)
    synthetic("replicas in the cluster", cluster.replica_count, n)
    caps = synthetic_capacities(cluster, fill=0.6)
    expect("brokers with a capacity", len(caps), brokers)
    doc = CapacityDocument(brokers={b: BrokerCapacity(disk=v) for b, v in caps.items()})
    snapshot = to_snapshot(cluster, validate=False)
    del cluster
    request = PlanRequest(capacity=doc)
    ctx = plan_context(snapshot.brokers, snapshot.topics, None, request, any_sizes=False)
    by_topic: dict[str, list[Any]] = {}
    for p in snapshot.partitions:
        by_topic.setdefault(p.topic, []).append(p)
    del snapshot
    groups = {t: sorted(rows, key=lambda p: p.partition) for t, rows in sorted(by_topic.items())}
    del by_topic
    step = driver_quotas(ctx, [stage_prepare(ctx, t, rows) for t, rows in groups.items()])
    arrays = [DiskArrays.of(stage_place(ctx, step, t, rows) for t, rows in groups.items())]
    ROOT.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        pickle.dump((ctx, step, arrays), f, protocol=pickle.HIGHEST_PROTOCOL)
    print(f"  (placed {n:,} replicas in {time.perf_counter() - t0:.1f}s, cached as {path.name})", flush=True)
    return ctx, step, arrays


def quality(ctx: Any, step: Any, arrays: list[DiskArrays], done: Any) -> dict[str, Any]:
    """The plan's quality, recounted here from the input arrays and the step's changes (not from
    the step's own outcome): bytes moved against the step's bound, each broker's disk share
    against the mean, replica counts' max-min, partitions over fewer racks than they must span, RF
    changes, brokers over the cap, and a digest of the changes (the same plan gives the same)."""
    rack_of = ctx.layout.rack_of
    n_racks = ctx.layout.n_racks
    goal = step.disk
    live = set(ctx.layout.brokers)
    bytes_after = {b: step.fixed_bytes.get(b, 0) for b in live}
    count_after = {b: step.fixed_load.get(b, 0) for b in live}
    moved = violations = rf_changes = 0
    digest = hashlib.sha256()
    for a in arrays:
        now = np.split(a.now, np.cumsum(a.now_lens)[:-1])
        orig = np.split(a.orig, np.cumsum(a.orig_lens)[:-1])
        starts = np.concatenate([[0], np.cumsum(a.counts)]).tolist()
        for j, topic in enumerate(a.topics):
            changed = done.changes.get(topic, {})
            for i in range(starts[j], starts[j + 1]):
                p = int(a.partitions[i])
                before, placed = tuple(orig[i].tolist()), tuple(now[i].tolist())
                final = changed.get(p, placed)
                if p in changed:
                    digest.update(f"{topic}:{p}:{final}".encode())
                s = int(a.sizes[i])
                moved += s * len(set(final) - set(before))
                rf_changes += len(final) != len(before)
                need = min(len(final), n_racks, len({rack_of.get(b, -1) for b in before}))
                violations += len({rack_of.get(b, -1) for b in final}) < need
                for b in final:
                    if b in live:
                        bytes_after[b] += s
                        count_after[b] += 1
    cap = goal.capacity
    mean = sum(bytes_after.values()) / sum(cap[b] for b in live)
    return {
        "bytes_moved": moved,
        "bytes_bound": done.bounds.bytes_bound,
        "max_deviation": max(abs(bytes_after[b] / cap[b] - mean) for b in live),
        "count_spread": max(count_after.values()) - min(count_after.values()),
        "rack_violations": violations,
        "rf_changes": rf_changes,
        "over_cap": sum(bytes_after[b] > goal.cap * cap[b] for b in live),
        "digest": digest.hexdigest()[:12],
    }


class Phases:
    """CPU seconds of the disk step's phases, by wrapping the functions and methods that run them
    (``--phases``): the tables (``build_index``, then the rest of ``_DiskStep.__init__``), the count
    phase (``balance_counts``), the byte passes (``passes``, both rounds), the rack bands (their
    limits), and around the step on the driver the bounds (``disk_bounds``) and the rest."""

    def __init__(self) -> None:
        from airflow_kafka_reassign.core.planner import disk, staged

        self.spent: dict[str, float] = {}
        self.undo: list[tuple[Any, str, Any]] = []
        self.wrap(disk, "build_index", "index")
        self.wrap(disk._DiskStep, "__init__", "tables")
        self.wrap(disk._DiskStep, "balance_counts", "count phase")
        self.wrap(disk._DiskStep, "passes", "passes")
        self.wrap(disk._DiskStep, "rack_bands", "rack bands")
        self.wrap(disk._DiskStep, "run", "step")
        self.wrap(staged, "disk_bounds", "bounds")

    def wrap(self, owner: Any, name: str, label: str) -> None:
        fn = getattr(owner, name)
        spent = self.spent

        def timed(*a: Any, **k: Any) -> Any:
            c0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - c0

        self.undo.append((owner, name, fn))
        setattr(owner, name, timed)

    def close(self) -> None:
        for owner, name, fn in reversed(self.undo):
            setattr(owner, name, fn)

    def line(self, total: float) -> str:
        s = self.spent
        parts = {
            "tables": s.get("tables", 0.0),
            "of which build_index": s.get("index", 0.0),
            "count phase": s.get("count phase", 0.0),
            "passes": s.get("passes", 0.0),
            "rack bands": s.get("rack bands", 0.0),
            "bounds": s.get("bounds", 0.0),
        }
        known = parts["tables"] + s.get("step", 0.0) + parts["bounds"]
        parts["rest"] = total - known
        return ", ".join(f"{k} {v:.1f}s" for k, v in parts.items())


class TimedGroups(LocalGroups):
    """The groups in this process, each round's CPU seconds per group recorded: what the round would
    take with the groups spread over ``workers`` cores (longest first onto the least busy)."""

    def __init__(self, groups: list[Any]) -> None:
        super().__init__(groups)
        self.rounds: list[list[float]] = []

    def run(self, step: Any, arg: Any) -> list[Any]:
        out, times = [], []
        for i, g in enumerate(self.groups):
            c0 = time.process_time()
            self.groups[i], r = step(g, arg)
            times.append(time.process_time() - c0)
            out.append(r)
        self.rounds.append(times)
        return out

    def spread(self, workers: int) -> float:
        total = 0.0
        for times in self.rounds:
            busy = [0.0] * workers
            for t in sorted(times, reverse=True):
                busy[busy.index(min(busy))] += t
            total += max(busy)
        return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("replicas", type=int, nargs="*", default=[1_000_000])
    ap.add_argument("--brokers", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", help="write a cProfile of the step to this file (one size)")
    ap.add_argument("--groups", type=int, default=0, help="the disk step by this many groups of topics (0: serial)")
    ap.add_argument("--phases", action="store_true", help="print the CPU seconds of the step's phases")
    ap.add_argument("--workers", type=int, default=2, help="with --groups: the cores the groups' rounds are spread on")
    args = ap.parse_args()
    for n in args.replicas:
        ctx, step, arrays = disk_input(n, args.seed, args.brokers)
        synthetic("replicas in the disk step's input", int(sum(int(a.now_lens.sum()) for a in arrays)), n)
        gc.collect()
        prof = cProfile.Profile(time.process_time) if args.profile else None  # CPU: the machine is shared
        phases = Phases() if args.phases else None
        t0, c0 = time.perf_counter(), time.process_time()
        if prof is not None:
            prof.enable()
        runner = None
        if args.groups:
            runner = TimedGroups([x.group(i) for i, x in enumerate(arrays[0].split(args.groups))])
            done = driver_disk_groups(ctx, step, runner)
        else:
            done = driver_disk(ctx, step, arrays)
        if prof is not None:
            prof.disable()
            prof.dump_stats(args.profile)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if phases is not None:
            phases.close()
            print(f"  phases (CPU): {phases.line(cpu)}", flush=True)
        require("a disk step (the request has a capacity document)", done is not None)
        o = done.outcome
        q = quality(ctx, step, arrays, done)
        how = "serial"
        if runner is not None:
            group_cpu = sum(sum(t) for t in runner.rounds)
            how = (f"{args.groups} groups, {done.rounds} round(s): groups' CPU {group_cpu:.1f}s, on {args.workers} cores "
                   f"{runner.spread(args.workers):.1f}s + driver {cpu - group_cpu:.1f}s")
        print(f"{n:>11,} replicas disk step ({how}): {wall:6.1f}s ({cpu:.1f}s CPU), peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB, replica moves {o.moves:,} "
              f"(swaps {o.swaps:,}), bytes {q['bytes_moved'] / q['bytes_bound']:.4f}x the bound, disk share max "
              f"deviation {q['max_deviation']:.2%}, count max-min {q['count_spread']}, rack violations "
              f"{q['rack_violations']}, RF changes {q['rf_changes']}, over cap {q['over_cap']}, warnings "
              f"{len(o.warnings)}, digest {q['digest']}; {load()}", flush=True)


if __name__ == "__main__":
    main()
