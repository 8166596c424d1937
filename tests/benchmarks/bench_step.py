"""Cost of the execution engine's step and of the sensor's poke, per move, on the in-memory fake (issue 18).

    .venv/bin/python tests/benchmarks/bench_step.py [--moves 10000 50000 100000] [--pokes 10000 50000]
        [--select 10000 100000] [--eta 10000 100000]

Prints numbers only; asserts nothing about time. Before printing a figure it checks that it measured what the figure
says (sizes.py: a mismatch stops it naming both counts, under ``python -O`` too): every move submitted by the one
step (and in flight on the fake, sent in one request), every partition of the poke observed in flight.

* **step**: one :func:`~airflow_kafka_reassign.core.execution.step` of a plan of N pending moves, no limits (the
  operator's default: everything at once): observe, classify, pre-flight (plan errors), order, submit. One replica
  of every RF-2 partition moves; topics of 1,000 partitions; 6 brokers in 3 racks.
* **select**: the batch selection of one step with N moves pending (``ordered`` then ``select_batch``, as the step
  calls them): every order, 50 brokers, RF 3 (one replica moves to a broker it was not on), Pareto-distributed
  sizes, at most 2 moves per broker and 50 in the cluster: what every step of a 100k-move plan pays before it submits.
* **eta**: the plan's ETA of one tick with N moves pending and 50 in flight (``copies_of`` then ``plan_eta``: the
  schedule under the same limits at a 20 MB/s throttle, the first 1,000 pending moves simulated, the rest
  extrapolated), and, for the record, the same schedule simulated move by move to the end (``--eta-exact``).
* **poke**: one :meth:`~airflow_kafka_reassign.core.execution.progress.ReassignmentWatch.poke` (what the sensor and the trigger
  run every poke_interval) with N partitions in flight, sizes measured (bytes, throughput, ETA).

CPU seconds of this process (``time.process_time``), best of ``--repeat``; "in the fake" is the part spent inside
the fake's port methods (building its snapshot: validated pydantic partitions, unlike the Kafka adapter's), so
"core" is what the engine itself costs. A cost linear in the moves shows as a flat µs per move across the sizes.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

from sizes import SizeMismatch, expect, require

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, step
from airflow_kafka_reassign.core.execution.batch import ordered, select_batch
from airflow_kafka_reassign.core.execution.progress import ReassignmentWatch
from airflow_kafka_reassign.core.execution.schedule import broker_rates, copies_of, plan_eta, simulate
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.testing import FakeClusterAdmin

RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2", 6: "r3"}
PER_TOPIC = 1000


class Timed:
    """The fake, with the CPU time spent in its port methods summed up."""

    def __init__(self, fake: FakeClusterAdmin) -> None:
        self.fake = fake
        self.spent = 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.fake, name)
        if not callable(attr):
            return attr

        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.process_time()
            try:
                return attr(*a, **kw)
            finally:
                self.spent += time.process_time() - t0

        return timed


def cluster(n: int) -> tuple[FakeClusterAdmin, ReassignmentPlan]:
    """N RF-2 partitions on brokers 1-3 (topics of PER_TOPIC), and a plan moving each one's follower to 4-6."""
    topics: dict[str, list[list[int]]] = {}
    moves: list[Move] = []
    for t in range((n + PER_TOPIC - 1) // PER_TOPIC):
        name = f"bench-{t:04d}"
        count = min(PER_TOPIC, n - t * PER_TOPIC)
        topics[name] = [[1 + p % 3, 1 + (p + 1) % 3] for p in range(count)]
        moves.extend(Move.model_construct(topic=name, partition=p, current_replicas=tuple(r),
                                          target_replicas=(r[0], 4 + p % 3), allow_rf_change=False)
                     for p, r in enumerate(topics[name]))
    counts = {name: len(parts) for name, parts in topics.items()}
    plan = ReassignmentPlan.model_construct(moves=tuple(moves), partition_counts=counts)
    return FakeClusterAdmin.build(brokers=RACKS, topics=topics), plan


def best(repeat: int, make: Callable[[], tuple[Timed, Callable[[Timed], Any]]],
         check: Callable[[Timed, Any], None]) -> tuple[float, float]:
    """(total, in the fake) CPU seconds of the fastest of ``repeat`` runs, each on a fresh cluster, each checked."""
    runs = []
    for _ in range(repeat):
        admin, call = make()
        t0 = time.process_time()
        out = call(admin)
        total = time.process_time() - t0
        check(admin, out)
        runs.append((total, admin.spent))
    return min(runs)


def bench_step(n: int, repeat: int) -> None:
    def make() -> tuple[Timed, Callable[[Timed], Any]]:
        fake, plan = cluster(n)
        return Timed(fake), lambda admin: step(admin, plan, ExecutionLimits(), ExecutionOptions(), settle_s=0)  # type: ignore[arg-type]

    def check(admin: Timed, status: Any) -> None:
        # it measured what it says: n moves submitted, once each, in one request, all in flight now
        if status.blocked is not None:
            raise SizeMismatch(f"benchmark: the step submitted nothing ({status.blocked}): no figure printed")
        expect("plan errors", len(status.plan_errors), 0)
        expect("moves submitted", len(status.submitted), n)
        expect("distinct moves submitted", len(set(status.submitted)), n)
        expect("reassignments in flight on the fake", len(admin.fake.inflight), n)
        expect("AlterPartitionReassignments requests", len(admin.fake.alter_requests), 1)
        expect("moves in that request", len(admin.fake.alter_requests[0][0]), n)
        expect("moves left pending", len(status.pending), 0)

    total, fake = best(repeat, make, check)
    print(f"step   {n:>7,} moves submitted: {total:6.2f} s CPU, {total / n * 1e6:5.1f} µs/move "
          f"(core {(total - fake) / n * 1e6:5.1f} µs/move, in the fake {fake / n * 1e6:5.1f})", flush=True)


def pending_moves(n: int, brokers: int = 50, seed: int = 7) -> tuple[list[Move], dict[TopicPartition, dict[int, int]]]:
    """N pending moves of RF-3 partitions over ``brokers`` brokers, one replica each to a broker it was not on, with
    Pareto-distributed sizes (a few large partitions, many small)."""
    rnd = random.Random(seed)
    moves, sizes = [], {}
    for i in range(n):
        cur = rnd.sample(range(1, brokers + 1), 3)
        new = rnd.choice([b for b in range(1, brokers + 1) if b not in cur])
        m = Move.model_construct(topic=f"bench-{i // PER_TOPIC:04d}", partition=i % PER_TOPIC,
                                 current_replicas=tuple(cur), target_replicas=(cur[0], cur[1], new),
                                 allow_rf_change=False)
        moves.append(m)
        sizes[m.tp] = dict.fromkeys(cur, int(rnd.paretovariate(1.2) * 10_000_000))
    return moves, sizes


def bench_select(n: int, repeat: int) -> None:
    moves, sizes = pending_moves(n)
    index = {m.tp: i for i, m in enumerate(moves)}
    tps = [m.tp for m in moves]  # the step has them (status.pending)
    for order in ("balanced", "smallest-first", "largest-first", "plan"):
        limits = ExecutionLimits(max_moves=50, max_moves_per_broker=2, order=order)  # type: ignore[arg-type]
        runs = []
        for _ in range(repeat):
            t0 = time.process_time()
            in_order, touched = ordered(moves, limits, sizes, index, tps=tps)
            batch = select_batch(in_order, {}, limits, touched=touched)
            runs.append(time.process_time() - t0)
        per_broker: dict[int, int] = {}
        for m in batch:
            for b in {*m.adding_replicas, *m.removing_replicas}:
                per_broker[b] = per_broker.get(b, 0) + 1
        require(f"a batch of 1-50 moves, at most 2 per broker (got {len(batch)}, {per_broker})",  # what it measured
                0 < len(batch) <= 50 and max(per_broker.values()) <= 2)
        print(f"select {n:>7,} pending, {order:<14}: {min(runs) * 1000:7.1f} ms CPU ({min(runs) / n * 1e6:4.1f} "
              f"µs/move), {len(batch)} in the batch", flush=True)


def bench_eta(n: int, repeat: int, exact: bool) -> None:
    moves, sizes = pending_moves(n)
    limits = ExecutionLimits(max_moves=50, max_moves_per_broker=2, order="balanced")
    in_order, touched = ordered(moves, limits, sizes, {m.tp: i for i, m in enumerate(moves)})
    running = select_batch(in_order, {}, limits, touched=touched)
    sent = [m.tp for m in running]
    taken = set(sent)
    queue = [m.tp for m in in_order if m.tp not in taken]
    by_tp = {m.tp: m for m in moves}  # the step has them (status.moves, status.in_flight, status.queue)
    rates = broker_rates(throttle=20_000_000)
    runs, eta = [], None
    for _ in range(repeat):
        t0 = time.process_time()
        copies = copies_of(by_tp, sent, queue, sizes)
        if copies is None:
            raise SizeMismatch("benchmark: the moves could not be sized: no figure printed")
        expect("moves sized", len(copies), n)  # what it measured: every move, sized
        eta = plan_eta(copies, rates, max_moves=50, max_moves_per_broker=2)
        runs.append(time.process_time() - t0)
    if eta is None or eta <= 0:
        raise SizeMismatch(f"benchmark: an ETA above 0 expected, got {eta}: no figure printed")
    line = f"eta    {n:>7,} moves (50 in flight, balanced): {min(runs) * 1000:7.1f} ms CPU, ETA {eta / 3600:.2f} h"
    if exact:
        t0 = time.process_time()
        full = simulate(copies_of(by_tp, sent, queue, sizes) or [], rates, max_moves=50, max_moves_per_broker=2,
                        exact_pending=n)
        if full is None:
            raise SizeMismatch("benchmark: the simulation returned nothing: no figure printed")
        line += f"; simulated to the end: {time.process_time() - t0:6.1f} s CPU, ETA {full.end_s / 3600:.2f} h"
    print(line, flush=True)


def bench_poke(n: int, repeat: int) -> None:
    def make() -> tuple[Timed, Callable[[Timed], Any]]:
        fake, plan = cluster(n)
        fake.alter_reassignments({m.tp: m.target_replicas for m in plan.moves})
        for m in plan.moves:
            fake.sizes[TopicPartition(m.topic, m.partition)] = {b: 1_000_000 for b in m.current_replicas or ()}
        watch = ReassignmentWatch(plan, started_at=0.0, stuck_after_s=600, settle_s=0)
        return Timed(fake), lambda admin: watch.poke(admin, now=1.0)  # type: ignore[arg-type]

    def check(admin: Timed, progress: Any) -> None:
        obs = progress.observation
        expect("moves the poke observed", obs.moves, n)
        expect("moves the poke saw in flight", obs.in_flight, n)
        expect("reassignments in flight on the fake", len(admin.fake.inflight), n)
        # every partition's sizes were read (None: none was)
        expect("bytes the poke counted", obs.bytes_total if obs.bytes_total is not None else -1, n * 1_000_000)

    total, fake = best(repeat, make, check)
    print(f"poke   {n:>7,} partitions in flight: {total:6.2f} s CPU, {total / n * 1e6:5.1f} µs/partition "
          f"(core {(total - fake) / n * 1e6:5.1f} µs/partition, in the fake {fake / n * 1e6:5.1f})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moves", type=int, nargs="*", default=[10_000, 50_000, 100_000])
    ap.add_argument("--pokes", type=int, nargs="*", default=[10_000, 50_000])
    ap.add_argument("--select", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--eta", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--eta-exact", action="store_true", help="also simulate every move (slow: O(n) events)")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    for n in args.moves:
        bench_step(n, args.repeat)
    for n in args.select:
        bench_select(n, args.repeat)
    for n in args.eta:
        bench_eta(n, args.repeat, args.eta_exact)
    for n in args.pokes:
        bench_poke(n, args.repeat)


if __name__ == "__main__":
    main()
