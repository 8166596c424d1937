"""A small plan, start to finish: Kafka's own tool against our engine's poll (issue 15). Prints numbers only.

    .venv/bin/python tests/benchmarks/bench_small_plan.py [--partitions 39] [--kb 1000] [--throttle 10000000]
        [--verify-every 1] [--runs 1] [--sandbox-dir DIR]

Starts its own 5-broker, 3-rack sandbox in a temporary directory (stopped on any exit) unless ``--sandbox-dir``
names a running one (its topic is then left behind). One topic of ``--partitions`` RF-2 partitions on brokers
1-3 with ``--kb`` kB of real records each (39 x 1 MB: the issue's 39-move, 39 MB plan), and one plan moving one
replica of every partition onto broker 4 or 5. The same plan is executed, from the same assignment, by:

* **reference**: ``kafka-reassign-partitions --execute --throttle T``, then ``--verify`` every ``--verify-every``
  seconds (a new one starts that long after the previous one started, or at once if it took longer) until
  nothing is in progress; the last ``--verify`` also clears the throttles;
* **ours**: ``core.execution.run`` in this process (what ExecuteReassignment runs: pre-flight, throttle backup,
  submission, polls, throttles restored exactly), with the same throttle, at ``poll_interval=5`` (the
  operator's default) in three ways: a fixed 5 s poll (``min_poll_interval=5``, the engine before issue 15),
  the adaptive poll (``min_poll_interval=0.5``, the default: half the ETA of the first move in flight, between
  0.5 and 5 s), and a fixed 1 s poll.

Between two executions the plan's rollback runs (not timed) and the cluster settles. Each time is from the start
of the execution to the end of the tool's last ``--verify`` / the return of ``run``. Before a time is printed
it checks (sizes.py) that the plan moves ``--partitions`` partitions and that every one is on its target, in
sync, after that execution (ours also reports every move done); the throttle configs are checked to be as before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from bench_execute import bench_sandbox, on_target, reference, settled, size_args, throttles
from bench_reference import fill, wait_until
from sizes import expect

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, run
from airflow_kafka_reassign.core.guards.health import HealthPolicy
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import create_topic

BROKERS = [1, 2, 3, 4, 5]
#: (label, poll_interval, min_poll_interval) of our executions
OURS = (("ours, fixed 5 s poll (before)", 5.0, 5.0), ("ours, adaptive poll 0.5-5 s (now)", 5.0, 0.5),
        ("ours, fixed 1 s poll", 1.0, 1.0))


def setup(config: dict[str, str], partitions: int, kb: float) -> tuple[str, ReassignmentPlan]:
    topic = f"bench-small-{int(time.time())}"
    assignment = [[1 + p % 3, 1 + (p + 1) % 3] for p in range(partitions)]
    create_topic(config, topic, assignment)
    moves = [Move(topic=topic, partition=p, current_replicas=tuple(c), target_replicas=(c[0], 4 + p % 2))
             for p, c in enumerate(assignment)]
    with KafkaClusterAdmin(config) as admin:
        wait_until(lambda: len(s := admin.snapshot(topics=[topic]).partitions) == partitions
                   and all(p.leader is not None for p in s), "leaders of the new topic")
    expect("moves in the plan", len(moves), partitions)
    fill(config, [m.tp for m in moves], kb)
    return topic, ReassignmentPlan(moves=tuple(moves))


def roll_back(admin: KafkaClusterAdmin, plan: ReassignmentPlan, topic: str, work: Path) -> None:
    back = plan.rollback()
    run(admin, back, ExecutionLimits(), ExecutionOptions(health=HealthPolicy(gate=False)), state_dir=work / "rb",
        poll_interval_s=0.5)
    wait_until(lambda: settled(admin, [topic], {m.tp: m.current_replicas for m in plan.moves}), "the rollback")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size_args(ap, partitions=39, kb=1000.0, throttle=10_000_000)
    ap.add_argument("--verify-every", type=float, default=1.0, help="seconds between two --verify starts")
    ap.add_argument("--runs", type=int, default=1, help="executions of each kind (the median is printed)")
    ap.add_argument("--sandbox-dir", type=Path)
    args = ap.parse_args()
    with bench_sandbox(args.sandbox_dir, "bench-small-") as (sandbox, tmp):
        config = sandbox.client_config()
        topic, plan = setup(config, args.partitions, args.kb)
        after = {m.tp: m.target_replicas for m in plan.moves}
        print(f"setup: {len(plan)} RF-2 partitions on brokers 1-3, {args.kb:g} kB each "
              f"({len(plan) * args.kb / 1000:.0f} MB), one replica of each to broker 4 or 5; "
              f"throttle {args.throttle} B/s; load average {os.getloadavg()[0]:.1f}", flush=True)
        with KafkaClusterAdmin(config, timeout_s=60) as admin:
            clean = throttles(admin, BROKERS, [topic])
            times: dict[str, list[float]] = {}
            notes: dict[str, list[str]] = {}
            for r in range(args.runs):
                secs, verifies = reference(sandbox, plan, args.throttle, tmp, every=args.verify_every)
                wait_until(lambda: settled(admin, [topic], after), "the reference execution to settle")
                expect("partitions on their targets after the reference", on_target(admin, [topic], after),
                       len(plan))
                label = f"reference --execute + --verify every {args.verify_every:g} s"
                times.setdefault(label, []).append(secs)
                notes.setdefault(label, []).append(f"{verifies} --verify runs, throttles as before: "
                                                   f"{throttles(admin, BROKERS, [topic]) == clean}")
                roll_back(admin, plan, topic, tmp / f"ref-{r}")
                for label, poll, floor in OURS:
                    state = tmp / f"ours-{r}-{floor}"
                    t0 = time.monotonic()
                    result = run(admin, plan, ExecutionLimits(), ExecutionOptions(throttle_bytes_per_sec=args.throttle),
                                 state_dir=state, poll_interval_s=poll, min_poll_interval_s=floor)
                    secs = time.monotonic() - t0
                    expect("moves our run reports done", len(result.status.done), len(plan))
                    expect("partitions on their targets after ours", on_target(admin, [topic], after), len(plan))
                    times.setdefault(label, []).append(secs)
                    notes.setdefault(label, []).append(
                        f"{result.steps} steps, throttles as before: {throttles(admin, BROKERS, [topic]) == clean}")
                    roll_back(admin, plan, topic, tmp / f"rb-{r}-{floor}")
        print(f"\n| execution of {len(plan)} moves, {len(plan) * args.kb / 1000:.0f} MB | seconds "
              f"(median of {args.runs}) | runs | notes (last run) |")
        print("| --- | --- | --- | --- |")
        for label, values in times.items():
            print(f"| {label} | {statistics.median(values):.1f} | {', '.join(f'{v:.1f}' for v in values)} | "
                  f"{notes[label][-1]} |")
        print(f"\nload average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
