"""Snapshot time for 10,000 partitions on the sandbox (issue 18). Prints numbers, asserts nothing about time.

    .venv/bin/python tests/benchmarks/bench_snapshot.py [--partitions 10000] [--per-topic 200] [--sizes]
        [--sandbox-dir DIR]

Starts its own 5-broker, 3-rack sandbox unless --sandbox-dir names a running one (its benchmark
topics are then deleted at the end). Creates the topics (RF 2) in bulk, then takes whole-cluster
snapshots as the CLI and the plan task do (``KafkaClusterAdmin.snapshot()``): the first at once,
while the brokers are still applying the new topics (it waits for them: its reads and seconds
are printed), then ``--repeat`` more on the settled cluster; with ``--sizes`` also snapshots with
replica sizes (DescribeLogDirs). Then ``write_snapshot`` / ``read_snapshot`` of the last one.

Every figure is checked first (sizes.py): the snapshot holds exactly the partitions and topics
created, each topic with its id (it once timed 2,000 of its 10,000 partitions and printed the figure as 10,000's).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient
from sizes import expect

from airflow_kafka_reassign.core.records.snapshot_io import read_snapshot, write_snapshot
from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.config import to_confluent
from airflow_kafka_reassign.kafka.workload import create_topics
from airflow_kafka_reassign.sandbox import Sandbox


def checked(snap: ClusterSnapshot, topics: dict[str, int], *, sizes: bool = False) -> ClusterSnapshot:
    """``snap`` after checking it holds every partition created (and, with ``sizes``, their sizes)."""
    mine = [p for p in snap.partitions if p.topic in topics]
    expect("benchmark partitions in the snapshot", len(mine), sum(topics.values()))
    expect("benchmark topics in the snapshot", len({p.topic for p in mine}), len(topics))
    expect("partitions the snapshot's check records", snap.check.partitions if snap.check else -1, len(snap.partitions))
    expect("benchmark topics with a topic id (KIP-516)", sum(1 for t in snap.topics if t.name in topics and t.topic_id),
           len(topics))
    if sizes:
        expect("benchmark partitions with replica sizes", sum(1 for p in mine if p.replica_sizes), len(mine))
    return snap


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--per-topic", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3, help="snapshots of the settled cluster")
    ap.add_argument("--sizes", action="store_true", help="also time snapshots with replica sizes")
    ap.add_argument("--settle-timeout", type=float, default=300.0, help="settle_timeout_s of the first snapshot")
    ap.add_argument("--sandbox-dir", type=Path)
    args = ap.parse_args()
    if args.partitions % args.per_topic:
        ap.error("--partitions must be a multiple of --per-topic")
    with tempfile.TemporaryDirectory(prefix="bench-snapshot-") as tmp:
        own = args.sandbox_dir is None
        sandbox = Sandbox(Path(tmp) / "sandbox") if own else Sandbox.load(args.sandbox_dir)
        t0 = time.monotonic()
        if own:
            sandbox.up(brokers=5, racks=3)
            print(f"sandbox up: {time.monotonic() - t0:.1f} s")
        config = sandbox.client_config()
        prefix = f"bench-snap-{int(time.time())}"
        topics = {f"{prefix}-{i:04d}": args.per_topic for i in range(args.partitions // args.per_topic)}
        try:
            t0 = time.monotonic()
            create_topics(config, topics, replication_factor=2)
            print(f"created {len(topics)} topics / {sum(topics.values())} partitions (RF 2): "
                  f"{time.monotonic() - t0:.1f} s", flush=True)
            with KafkaClusterAdmin(config, timeout_s=120) as admin:
                t0 = time.monotonic()
                snap = checked(admin.snapshot(settle_timeout_s=args.settle_timeout), topics)
                print(f"snapshot at once after creating them: {len(snap.partitions)} partitions, {len(snap.topics)} "
                      f"topics in {time.monotonic() - t0:.2f} s ({snap.check.attempts} reads: the brokers were still "
                      f"applying the new topics)", flush=True)
                # the brokers go on applying leader and ISR changes of the new partitions for a while: wait
                # until a snapshot needs a single read before timing the settled cluster
                t0 = time.monotonic()
                while admin.snapshot(settle_timeout_s=args.settle_timeout).check.attempts > 1:
                    if time.monotonic() - t0 > args.settle_timeout:
                        raise SystemExit(f"the cluster did not settle in {args.settle_timeout:g} s: no figure")
                print(f"settled (a snapshot in one read) {time.monotonic() - t0:.1f} s later", flush=True)
                for i in range(args.repeat):
                    t0 = time.monotonic()
                    snap = checked(admin.snapshot(settle_timeout_s=args.settle_timeout), topics)
                    print(f"snapshot #{i + 1} of the settled cluster: {len(snap.partitions)} partitions, "
                          f"{len(snap.topics)} topics in {time.monotonic() - t0:.2f} s ({snap.check.attempts} read(s))",
                          flush=True)
                for i in range(args.repeat if args.sizes else 0):
                    t0 = time.monotonic()
                    sized = checked(admin.snapshot(include_sizes=True, settle_timeout_s=args.settle_timeout), topics,
                                    sizes=True)
                    print(f"snapshot with sizes #{i + 1}: {len(sized.partitions)} partitions in "
                          f"{time.monotonic() - t0:.2f} s ({sized.check.attempts} read(s))", flush=True)
            t0 = time.monotonic()
            path = write_snapshot(snap, Path(tmp) / "snap")
            t1 = time.monotonic()
            back = read_snapshot(path)
            t2 = time.monotonic()
            expect("partitions read back", len(back.partitions), len(snap.partitions))
            size = sum(f.stat().st_size for f in path.iterdir())
            print(f"write_snapshot {t1 - t0:.2f} s ({size / 1e3:.0f} kB), read_snapshot {t2 - t1:.2f} s "
                  f"({len(back.partitions)} partitions, counts checked)")
            print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
        finally:
            if own:
                sandbox.down()
            else:  # leave the shared sandbox as it was
                client = AdminClient(to_confluent(config, timeout_s=120))
                names = [n for n in client.list_topics(timeout=60).topics if n.startswith(prefix)]
                for future in (client.delete_topics(names, operation_timeout=120).values() if names else ()):
                    future.result(180)


if __name__ == "__main__":
    main()
