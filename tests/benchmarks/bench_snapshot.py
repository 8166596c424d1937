"""Snapshot time for 10,000 partitions on the sandbox (issue: platform). Prints numbers only.

    .venv/bin/python tests/benchmarks/bench_snapshot.py [--partitions 10000] [--sandbox-dir DIR]

Starts its own 5-broker, 3-rack sandbox unless --sandbox-dir names a running one.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from airflow_kafka_reassign.core.snapshot_io import read_snapshot, write_snapshot
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import create_topics
from airflow_kafka_reassign.sandbox import Sandbox


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--per-topic", type=int, default=200)
    ap.add_argument("--sandbox-dir", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-snapshot-") as tmp:
        sandbox = Sandbox(args.sandbox_dir or Path(tmp) / "sandbox")
        own = args.sandbox_dir is None
        t0 = time.monotonic()
        if own:
            sandbox.up(brokers=5, racks=3)
            print(f"sandbox up: {time.monotonic() - t0:.1f} s")
        try:
            config = sandbox.client_config()
            topics = {f"bench-{i:04d}": args.per_topic for i in range(args.partitions // args.per_topic)}
            t0 = time.monotonic()
            create_topics(config, topics, replication_factor=2)
            print(f"created {len(topics)} topics / {sum(topics.values())} partitions (RF 2): "
                  f"{time.monotonic() - t0:.1f} s")
            with KafkaClusterAdmin(config, timeout_s=120) as admin:
                deadline = time.monotonic() + 120
                while not set(topics) <= set(admin.list_topic_names()) and time.monotonic() < deadline:
                    time.sleep(0.5)
                for i in range(3):
                    t0 = time.monotonic()
                    snap = admin.snapshot()
                    print(f"snapshot #{i + 1}: {len(snap.partitions)} partitions, {len(snap.topics)} topics "
                          f"in {time.monotonic() - t0:.2f} s")
            t0 = time.monotonic()
            path = write_snapshot(snap, Path(tmp) / "snap")
            t1 = time.monotonic()
            read_snapshot(path)
            t2 = time.monotonic()
            size = sum(f.stat().st_size for f in path.iterdir())
            print(f"write_snapshot {t1 - t0:.2f} s ({size / 1e3:.0f} kB), read_snapshot {t2 - t1:.2f} s")
            print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
        finally:
            if own:
                sandbox.down()


if __name__ == "__main__":
    main()
