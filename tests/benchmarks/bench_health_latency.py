"""acks=all produce latency during a decommission: static settings against the health gate + adaptive limits
(issue 15). Prints numbers only.

    .venv/bin/python tests/benchmarks/bench_health_latency.py [--partitions 30] [--mb 2] [--throttle 5000000]
        [--max-moves 4] [--rate 200] [--value-bytes 1000] [--baseline-s 5] [--sandbox-dir DIR]

Starts its own 5-broker, 3-rack sandbox in a temporary directory (stopped on any exit) unless ``--sandbox-dir``
names a running one (its topics are then left behind). Two topics with the same layout and data (``--partitions``
RF-3 partitions spread over brokers 1-5, ``--mb`` MB of records each), one per execution; for each, our planner's
decommission of broker 5 (goal ``remove-brokers [5]``) is executed by ``core.execution.run`` (what
ExecuteReassignment runs) while a producer (acks=all, idempotent) writes ``--rate`` records/s of ``--value-bytes``
into that topic's partitions at a fixed pace:

* **static** (today's defaults but the gate): ``max_moves=--max-moves``, ``throttle_bytes_per_sec=--throttle``,
  ``health_gate=False``, no adaptive limits;
* **gate + adaptive**: the health gate on (``on_unhealthy="pause"``) and ``adaptive_limits={"max_moves":
  --max-moves, "min_throttle": --throttle / 4, "max_throttle": --throttle}`` (concurrency starts at 1, the
  throttle at ``--throttle``).

Each record's latency is librdkafka's own (``Message.latency()``: from ``produce()`` to its acknowledgement);
records sent before the producer's first acknowledgement (its idempotent producer id) are not counted.
Printed per execution: p50 / p99 / max latency of the records sent while ``run`` ran, the records acknowledged
and failed, and the wall time of ``run`` (pre-flight to throttles restored); a ``--baseline-s`` window with
nothing moving comes first. Before printing, sizes.py checks the topics hold ``--partitions`` partitions, the
plan moves every partition with a replica on broker 5, each execution left all of them done, and every record
sent was acknowledged.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench_execute import bench_sandbox, throttles
from bench_reference import fill, spread, wait_until
from confluent_kafka import Producer
from sizes import expect

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, RunResult, run
from airflow_kafka_reassign.core.guards.adaptive import AdaptiveBounds
from airflow_kafka_reassign.core.guards.health import HealthPolicy
from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import create_topic

BROKERS = (1, 2, 3, 4, 5)
LEAVING = 5


class FixedRateProducer:
    """Sends ``rate`` records/s (round robin over the partitions) at a fixed pace, acks=all; keeps each latency."""

    def __init__(self, config: dict[str, str], topic: str, partitions: int, rate: float, value_bytes: int) -> None:
        self.config, self.topic, self.partitions = config, topic, partitions
        self.rate, self.value = rate, b"x" * value_bytes
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.sent = 0
        self.warmup = 0
        #: the first acknowledgement (the idempotent producer has its id): records sent before are not counted
        self.ready = threading.Event()
        self._ready_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        producer = Producer({**self.config, "acks": "all", "enable.idempotence": True, "linger.ms": 0})

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            elif self._ready_at is None:
                self._ready_at = time.monotonic()
                self.ready.set()
            elif time.monotonic() - msg.latency() >= self._ready_at:  # sent after the warm-up
                self.latencies.append(msg.latency())
            else:
                self.warmup += 1

        t0 = time.monotonic()
        while not self._stop.is_set():
            producer.produce(self.topic, self.value, partition=self.sent % self.partitions, on_delivery=delivered)
            self.sent += 1
            producer.poll(max(0.0, t0 + self.sent / self.rate - time.monotonic()))
        left = producer.flush(120)
        if left:
            self.errors.append(f"{left} record(s) not acknowledged within 120 s of the end")

    def __enter__(self) -> FixedRateProducer:
        self._thread.start()
        if not self.ready.wait(120):
            raise TimeoutError(f"the producer had no record acknowledged in 120 s: {self.errors[:3]}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(180)


def make_topic(config: dict[str, str], name: str, partitions: int, mb: float) -> None:
    create_topic(config, name, [spread(BROKERS, 3, p) for p in range(partitions)])
    with KafkaClusterAdmin(config) as admin:
        wait_until(lambda: len(s := admin.snapshot(topics=[name]).partitions) == partitions
                   and all(p.leader is not None for p in s), f"leaders of {name}")
    if mb:
        fill(config, [p.tp for p in KafkaClusterAdmin(config).snapshot(topics=[name]).partitions], mb * 1000)


def decommission_plan(admin: KafkaClusterAdmin, topic: str, partitions: int) -> ReassignmentPlan:
    snapshot = admin.snapshot(topics=[topic])
    expect("partitions of the topic", len(snapshot.partitions), partitions)
    result = plan_reassignment(snapshot, PlanRequest(goal="remove-brokers", brokers=(LEAVING,),
                                                     topic_include=(topic,)))
    on_leaving = sum(1 for p in snapshot.partitions if LEAVING in p.replicas)
    expect("plan moves off the leaving broker", sum(1 for m in result.plan.moves if LEAVING in m.current_replicas),
           on_leaving)
    return result.plan


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(label: str, latencies: list[float], errors: list[str], wall: float | None, extra: str = "") -> str:
    ms = [x * 1000 for x in latencies]
    return (f"| {label} | {len(latencies)} | {len(errors)} | {statistics.median(ms):.1f} | {pct(ms, 0.99):.1f} | "
            f"{max(ms):.1f} | {'' if wall is None else f'{wall:.1f}'} | {extra} |")


def execute(admin: KafkaClusterAdmin, config: dict[str, str], topic: str, args: argparse.Namespace, plan: ReassignmentPlan,
            gated: bool, state: Path) -> tuple[RunResult, float, FixedRateProducer]:
    options = ExecutionOptions(throttle_bytes_per_sec=args.throttle, health=HealthPolicy(gate=gated))
    bounds = AdaptiveBounds(max_moves=args.max_moves, min_throttle=args.throttle // 4,
                            max_throttle=args.throttle) if gated else None
    with FixedRateProducer(config, topic, args.partitions, args.rate, args.value_bytes) as producer:
        t0 = time.monotonic()
        result = run(admin, plan, ExecutionLimits(max_moves=args.max_moves), options, state_dir=state,
                     adaptive=bounds)
        wall = time.monotonic() - t0
    expect("moves done", len(result.status.done), len(plan))
    expect("records acknowledged", len(producer.latencies) + producer.warmup + 1, producer.sent)
    return result, wall, producer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=30)
    ap.add_argument("--mb", type=float, default=2.0, help="MB of records per partition")
    ap.add_argument("--throttle", type=int, default=5_000_000, help="bytes/s (adaptive: its maximum)")
    ap.add_argument("--max-moves", type=int, default=4)
    ap.add_argument("--rate", type=float, default=200.0, help="records/s of the acks=all producer")
    ap.add_argument("--value-bytes", type=int, default=1000)
    ap.add_argument("--baseline-s", type=float, default=5.0, help="seconds of latency with nothing moving")
    ap.add_argument("--sandbox-dir", type=Path)
    args = ap.parse_args()
    with bench_sandbox(args.sandbox_dir, "bench-health-") as (sandbox, tmp):
        config = sandbox.client_config()
        prefix = f"bench-latency-{int(time.time())}"
        topics = {"static": f"{prefix}-static", "gated": f"{prefix}-gated"}
        t0 = time.monotonic()
        for name in topics.values():
            make_topic(config, name, args.partitions, args.mb)
        print(f"setup: 2 topics x {args.partitions} RF-3 partitions over brokers 1-5, {args.mb:g} MB each "
              f"({time.monotonic() - t0:.0f} s); producer {args.rate:g} records/s x {args.value_bytes} B, acks=all; "
              f"throttle {args.throttle} B/s, max_moves {args.max_moves}", flush=True)
        rows = []
        with KafkaClusterAdmin(config, timeout_s=60) as admin:
            with FixedRateProducer(config, topics["static"], args.partitions, args.rate, args.value_bytes) as base:
                time.sleep(args.baseline_s)
            expect("baseline records acknowledged", len(base.latencies) + base.warmup + 1, base.sent)
            rows.append(row(f"baseline, nothing moving ({args.baseline_s:g} s)", base.latencies, base.errors, None))
            loads = []
            for key, gated, label in (("static", False, "static: gate off, adaptive off"),
                                      ("gated", True, "health gate + adaptive limits")):
                topic = topics[key]
                plan = decommission_plan(admin, topic, args.partitions)
                clean = throttles(admin, list(BROKERS), [topic])
                loads.append(os.getloadavg()[0])
                result, wall, producer = execute(admin, config, topic, args, plan, gated, tmp / key)
                loads.append(os.getloadavg()[0])
                same = throttles(admin, list(BROKERS), [topic]) == clean
                rows.append(row(f"{label} ({len(plan)} moves)", producer.latencies, producer.errors, wall,
                                f"{result.steps} steps, {len(result.adaptations)} adaptations, paused "
                                f"{result.paused_s:.0f} s, stalled polls {result.stalled_polls}, throttles as "
                                f"before: {same}"))
                print(f"{label}: done in {wall:.1f} s", flush=True)
        print("\n| execution | records | failed | p50 ms | p99 ms | max ms | wall s | notes |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for line in rows:
            print(line)
        print(f"\nload average (1 min) before/after each execution: {', '.join(f'{x:.1f}' for x in loads)}; "
              f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
