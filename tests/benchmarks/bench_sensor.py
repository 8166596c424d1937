"""Poke latency of WaitForReassignmentSensor with many partitions in flight (issue 3). Prints numbers only.

    .venv/bin/python tests/benchmarks/bench_sensor.py [--partitions 10000] [--pokes 5] [--sandbox-dir DIR]

Starts its own 5-broker, 3-rack sandbox unless --sandbox-dir names a running one (it then stops and restarts
broker 5 of that sandbox, and leaves its topics behind). Every partition is placed on brokers 1-4 (optionally
with one record each), broker 5 is stopped, and every partition is reassigned to add broker 5: the controller
keeps all of them in flight (the adding replica cannot join the ISR) for as long as the benchmark needs. Then the
poke (``ReassignmentWatch.poke``: what the sensor and the trigger run every poke_interval) is timed, with its
requests counted, and so is the submit path (``core.execution.step`` + the poke). At the end every reassignment
is cancelled and broker 5 is started again. Before a poke's time is printed, the sizes are checked (sizes.py): the
plan has ``--partitions`` moves and the poke observed every one of them in flight; in submit mode, the step saw
every one in flight too (none pending, none submitted again).
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from sizes import expect, require

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, step
from airflow_kafka_reassign.core.execution.progress import ReassignmentWatch
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.config import to_confluent
from airflow_kafka_reassign.kafka.workload import create_topic
from airflow_kafka_reassign.sandbox import Sandbox

SOURCES = (1, 2, 3, 4)
OFFLINE = 5


class Counting:
    """The admin, counting calls per port method (each is a constant number of batched requests)."""

    def __init__(self, admin: KafkaClusterAdmin) -> None:
        self.admin = admin
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.admin, name)
        if not callable(attr):
            return attr

        def wrapped(*a: Any, **kw: Any) -> Any:
            self.calls[name] += 1
            return attr(*a, **kw)

        return wrapped


def node_status(sandbox: Sandbox, node_id: int) -> dict[str, Any]:
    return next(n for n in sandbox.status()["nodes"] if n["id"] == node_id)


def chunks(items: list[Any], n: int) -> list[list[Any]]:
    return [items[i:i + n] for i in range(0, len(items), n)]


def one_record_each(config: dict[str, str], moves: list[Move]) -> None:
    producer = Producer({**to_confluent(config, timeout_s=120), "linger.ms": 50})
    for m in moves:
        while True:
            try:
                producer.produce(m.topic, b"x" * 1000, partition=m.partition)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    require("every record of the workload flushed within 120 s", producer.flush(120) == 0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--per-topic", type=int, default=200)
    ap.add_argument("--pokes", type=int, default=5)
    ap.add_argument("--sandbox-dir", type=Path)
    ap.add_argument("--kill", action="store_true",
                    help="SIGKILL broker 5 instead of stopping it gracefully: it stays in the cluster's metadata "
                         "until its session times out (broker.session.timeout.ms), so the first pokes still see it "
                         "as alive and must not wait on it")
    ap.add_argument("--with-data", action="store_true",
                    help="one 1 kB record per partition first (slow on a loaded machine: 10,000 partitions in one "
                         "producer timed out there); not needed, the offline broker keeps every move in flight")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sensor-") as tmp:
        own = args.sandbox_dir is None
        sandbox = Sandbox(Path(tmp) / "sandbox") if own else Sandbox.load(args.sandbox_dir)
        t0 = time.monotonic()
        if own:
            sandbox.up(brokers=5, racks=3)
            print(f"sandbox up: {time.monotonic() - t0:.1f} s")
        stopped = False
        try:
            config = sandbox.client_config()
            prefix = f"bench-sensor-{int(time.time())}"
            n_topics = max(1, args.partitions // args.per_topic)
            moves: list[Move] = []
            t0 = time.monotonic()
            for t in range(n_topics):
                name = f"{prefix}-{t:03d}"
                assignment = []
                for p in range(args.per_topic):
                    a = SOURCES[(t + p) % 4]
                    b = SOURCES[(t + p + 1 + (p // 4) % 3) % 4]
                    assignment.append([a, b])
                    moves.append(Move(topic=name, partition=p, current_replicas=(a, b), target_replicas=(a, OFFLINE)))
                create_topic(config, name, assignment, timeout_s=120)
            print(f"created {n_topics} topics / {len(moves)} partitions on brokers 1-4 (RF 2): {time.monotonic() - t0:.1f} s")
            expect("partitions to reassign", len(moves), args.partitions)
            plan = ReassignmentPlan(moves=tuple(moves))
            topics = sorted({m.topic for m in moves})
            with KafkaClusterAdmin(config, timeout_s=120) as admin:
                # every broker must know every topic (on a loaded machine the metadata of 50 new topics takes a
                # while to reach all brokers): three complete snapshots in a row
                t0, good = time.monotonic(), 0
                while good < 3 and time.monotonic() - t0 < 600:
                    try:
                        good = good + 1 if len(admin.snapshot(topics=topics).partitions) == len(moves) else 0
                    except Exception:  # noqa: BLE001 - not there yet
                        good = 0
                    time.sleep(1)
                print(f"metadata of every topic on every broker: {time.monotonic() - t0:.1f} s")
                if args.with_data:
                    t0 = time.monotonic()
                    one_record_each(config, moves)
                    print(f"one 1 kB record into each partition: {time.monotonic() - t0:.1f} s")

                t0 = time.monotonic()
                if args.kill:
                    os.kill(node_status(sandbox, OFFLINE)["pid"], signal.SIGKILL)
                    while node_status(sandbox, OFFLINE)["alive"]:
                        time.sleep(0.1)
                else:
                    sandbox.stop_broker(OFFLINE)
                stopped = True
                print(f"broker {OFFLINE} {'killed' if args.kill else 'stopped'}: {time.monotonic() - t0:.1f} s")
                t0 = time.monotonic()
                failed = 0
                for batch in chunks(list(moves), 2000):
                    failed += len(admin.alter_reassignments({m.tp: m.target_replicas for m in batch}).failed)
                in_flight = len(admin.list_reassignments())
                print(f"submitted {len(moves)} reassignments ({failed} refused) in {time.monotonic() - t0:.1f} s; "
                      f"the controller lists {in_flight} in flight")
                expect("reassignments the controller lists in flight", in_flight, len(moves))

                counting = Counting(admin)
                watch = ReassignmentWatch(plan, started_at=time.time(), stuck_after_s=3600)
                times = []
                for i in range(args.pokes):
                    counting.calls.clear()
                    t0 = time.monotonic()
                    try:
                        progress = watch.poke(counting, now=time.time())
                    except Exception as e:  # noqa: BLE001 - reported, the benchmark goes on
                        print(f"poke #{i + 1} failed after {time.monotonic() - t0:.1f} s: {type(e).__name__}: {e}")
                        continue
                    elapsed = time.monotonic() - t0
                    o = progress.observation
                    # the poke's time is for every move of the plan observed, all of them in flight
                    expect("moves the poke observed", o.moves, len(moves))
                    expect("moves the poke saw in flight", o.in_flight, len(moves))
                    times.append(elapsed)
                    print(f"poke #{i + 1}: {times[-1]:.2f} s, {o.in_flight} in flight / {o.moves} moves, "
                          f"waiting on {dict(o.waiting_on) or 'no dead broker'}, requests: {dict(counting.calls)}")
                if times:
                    print(f"poke latency with {o.in_flight} partitions in flight: median "
                          f"{statistics.median(times):.2f} s, max {max(times):.2f} s")
                print(f"progress line: {progress.line()}")

                limits, options = ExecutionLimits(max_moves=20_000), ExecutionOptions(allow_concurrent_reassignments=True)
                stimes = []
                for i in range(min(3, args.pokes)):
                    counting.calls.clear()
                    t0 = time.monotonic()
                    try:
                        status = step(counting, plan, limits, options, state_dir=Path(tmp) / "run", submit=True)
                        progress = watch.poke(counting, now=time.time())
                    except Exception as e:  # noqa: BLE001 - reported, the benchmark goes on
                        print(f"submit-mode poke #{i + 1} failed: {type(e).__name__}: {e}")
                        continue
                    elapsed = time.monotonic() - t0
                    # the same size as the pokes above: the step classified every move of the plan, all in
                    # flight (nothing left to submit), and the poke after it observed every one in flight
                    expect("moves the step saw in flight", len(status.in_flight), len(moves))
                    expect("moves the step left pending or submitted", len(status.pending) + len(status.submitted), 0)
                    expect("moves the submit-mode poke observed", progress.observation.moves, len(moves))
                    expect("moves the submit-mode poke saw in flight", progress.observation.in_flight, len(moves))
                    stimes.append(elapsed)
                    print(f"submit-mode poke #{i + 1} (step + poke): {stimes[-1]:.2f} s, step saw "
                          f"{len(status.in_flight)} in flight, requests: {dict(counting.calls)}")
                if stimes:
                    print(f"submit-mode poke latency: median {statistics.median(stimes):.2f} s")

                t0 = time.monotonic()
                for batch in chunks(list(plan.partitions), 2000):
                    admin.cancel_reassignments(batch)
                print(f"cancelled every reassignment: {time.monotonic() - t0:.1f} s; "
                      f"{len(admin.list_reassignments())} left in flight")
            print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
        finally:
            if stopped:
                sandbox.start_broker(OFFLINE)
            if own:
                sandbox.down()


if __name__ == "__main__":
    main()
