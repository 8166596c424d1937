"""``make demo``: the main job end to end on the embedded default (a local sandbox cluster).

Starts a 5-broker, 3-rack sandbox Kafka cluster, creates a deliberately skewed set of topics
with real data (every replica on brokers 1-3, brokers 4 and 5 empty), prints the snapshot as
a per-broker table, and stops the cluster. Exits non-zero if any step failed.

    python -m airflow_kafka_reassign.demo [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from airflow_kafka_reassign.core.report import broker_table
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import create_topic, produce
from airflow_kafka_reassign.sandbox import Sandbox

#: topic -> (partitions, RF, MB per partition); all placed on brokers 1-3 only.
SKEWED_TOPICS = {"orders": (12, 3, 2.0), "payments": (6, 2, 1.0), "clicks": (18, 2, 0.5)}


def step(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def skewed_assignment(partitions: int, rf: int, crowded: tuple[int, ...] = (1, 2, 3)) -> list[list[int]]:
    n = len(crowded)
    return [[crowded[(p + k) % n] for k in range(rf)] for p in range(partitions)]


def run(workdir: Path, keep: bool) -> int:
    sandbox = Sandbox(workdir / "sandbox")
    started = time.monotonic()
    step("starting a 5-broker, 3-rack Kafka sandbox (first run downloads Kafka from Maven Central)")
    info = sandbox.up(brokers=5, racks=3)
    print(f"    Kafka {info['kafka_version']} at {info['bootstrap_servers']} "
          f"(up in {time.monotonic() - started:.1f} s)")
    try:
        config = sandbox.client_config()
        step("creating skewed topics with real data: every replica on brokers 1-3")
        for name, (partitions, rf, mb) in SKEWED_TOPICS.items():
            create_topic(config, name, skewed_assignment(partitions, rf))
            for p in range(partitions):
                produce(config, name, partition=p, megabytes=mb)
            print(f"    {name}: {partitions} partitions, RF {rf}, {mb * partitions:.0f} MB")
        with KafkaClusterAdmin(config) as admin:
            snap = admin.snapshot(include_sizes=True)
        step("per-broker load (brokers 4 and 5 are empty: the next steps rebalance onto them)")
        print(broker_table(snap.model_copy(update={"partitions": tuple(
            p for p in snap.partitions if p.topic in SKEWED_TOPICS)})))
    finally:
        if keep:
            step(f"leaving the sandbox running: python -m airflow_kafka_reassign.sandbox down --dir {sandbox.dir}")
        else:
            step("stopping the sandbox")
            sandbox.down()
    step(f"demo finished in {time.monotonic() - started:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_kafka_reassign.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path("demo-output"), help="work directory (default: demo-output)")
    parser.add_argument("--keep", action="store_true", help="leave the sandbox running at the end")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    try:
        return run(args.dir.resolve(), args.keep)
    except Exception as e:  # the demo's contract: a clear message and a non-zero exit
        print(f"demo FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
