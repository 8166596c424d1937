"""One poll of the cluster watch on a synthetic 100-broker / 100,000-partition cluster (issue 37). Prints numbers,
asserts nothing about time.

    .venv/bin/python tests/benchmarks/bench_cluster_watch.py [--brokers 100] [--partitions 100000] [--dirs 4]
        [--repeat 5]

No cluster: the answers a real cluster would give are made and encoded here (Metadata v12 with every partition's
replicas and ISR, RF 3; DescribeLogDirs v4 of every broker) and decoded by kafka-python as in the adapter. Timed,
each ``--repeat`` times (median, min-max):

* the Metadata answer decoded and read (``_read_metadata``) and folded (``fold_partitions``): what
  ``partition_health`` costs per poll once min.insync.replicas is cached;
* ``fold_partitions`` alone;
* conditions and the state machine (``conditions_of`` + ``advance``, 3 brokers down, every kind watched) and the
  state's JSON;
* the DescribeLogDirs answers decoded: with ``Topics=[]`` (what the watch asks) against every partition (what
  ``log_dirs(None)`` asks), with their sizes on the wire.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from kafka.protocol.admin import DescribeLogDirsResponse
from kafka.protocol.metadata import MetadataResponse
from sizes import expect

from airflow_kafka_reassign.core.healing.observation import WatchObservation, conditions_of, fold_partitions
from airflow_kafka_reassign.core.healing.watch import WatchSettings, WatchState, advance
from airflow_kafka_reassign.core.vocabulary.ports import (
    ClusterDescription,
    DiskSpace,
    LogDirs,
    RegisteredBroker,
)
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin, log_dirs_of

MT = MetadataResponse.MetadataResponseTopic
MP = MT.MetadataResponsePartition


def timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, str]:
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return out, (f"{statistics.median(walls):.3f} s wall ({min(walls):.3f}-{max(walls):.3f}), "
                 f"{statistics.median(cpus):.3f} s CPU")


def metadata_answer(brokers: int, partitions: int, per_topic: int, down: set[int]) -> bytes:
    topics = []
    for t in range(partitions // per_topic):
        parts = []
        for p in range(per_topic):
            i = t * per_topic + p
            reps = [1 + (i + k * 7) % brokers for k in range(3)]
            isr = [b for b in reps if b not in down]
            parts.append(MP(error_code=0, partition_index=p, leader_id=isr[0] if isr else -1, leader_epoch=0,
                            replica_nodes=reps, isr_nodes=isr, offline_replicas=[]))
        topics.append(MT(error_code=0, name=f"topic-{t:05d}", topic_id=uuid.uuid4(), is_internal=False,
                         authorized_operations=None, partitions=parts))
    return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=1, topics=topics,
                            error_code=0).encode(version=12)


def log_dirs_answer(broker: int, dirs: int, with_partitions: list[tuple[str, int]]) -> bytes:
    R = DescribeLogDirsResponse.DescribeLogDirsResult
    T = R.DescribeLogDirsTopic
    P = T.DescribeLogDirsPartition
    by_dir: dict[int, dict[str, list[Any]]] = {}
    for k, (topic, p) in enumerate(with_partitions):
        by_dir.setdefault(k % dirs, {}).setdefault(topic, []).append(
            P(partition_index=p, partition_size=10**9, offset_lag=0, is_future_key=False))
    results = [R(error_code=0, log_dir=f"/data/{d}", total_bytes=4 * 10**12, usable_bytes=10**12 + broker,
                 topics=[T(name=t, partitions=ps) for t, ps in by_dir.get(d, {}).items()])
               for d in range(dirs)]
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results).encode(version=4)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--per-topic", type=int, default=50)
    ap.add_argument("--dirs", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    down = {7, 14, 60}  # 7 and 14 share partitions: some are under min ISR 2
    data = metadata_answer(args.brokers, args.partitions, args.per_topic, down)
    print(f"synthetic cluster: {args.brokers} brokers, {args.partitions:,} partitions (RF 3, {args.per_topic} per "
          f"topic), brokers {sorted(down)} down; Metadata v12 answer {len(data) / 1e6:.1f} MB")

    admin = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"}, timeout_s=5)

    class Manager:
        def send(self, request: Any, **_kw: Any) -> Any:
            return MetadataResponse.decode(data, version=12)

        async def wait_for(self, response: Any, _timeout_ms: int) -> Any:
            return response

        def run(self, coro: Any) -> Any:
            try:
                coro().send(None)
            except StopIteration as done:
                return done.value
            raise AssertionError("awaited something else")

    admin._with_fresh_controller = lambda call: call(type("KP", (), {"_manager": Manager()})())  # type: ignore[method-assign]
    min_isr = {f"topic-{t:05d}": 2 for t in range(args.partitions // args.per_topic)}

    def health() -> Any:
        md = admin._read_metadata(None)
        rows = ((n, pid, p.replicas, p.isrs, p.leader) for n, t in md.items() for pid, p in t.partitions.items())
        return fold_partitions(rows, min_isr)

    parts, took = timed(health, args.repeat)
    expect("partitions folded", parts.partitions, args.partitions)
    expect("replicas folded", sum(parts.replicas.values()), 3 * args.partitions)
    print(f"partition_health (Metadata decoded + read + folded): {took}")
    md = admin._read_metadata(None)
    rows = [(n, pid, p.replicas, p.isrs, p.leader) for n, t in md.items() for pid, p in t.partitions.items()]
    _, took = timed(lambda: fold_partitions(rows, min_isr), args.repeat)
    print(f"  of which fold_partitions: {took}; under min ISR: {parts.under_min_isr:,}")

    empty = {b: log_dirs_answer(b, args.dirs, []) for b in range(1, args.brokers + 1)}
    held: dict[int, list[tuple[str, int]]] = {}
    for n, pid, reps, _, _ in rows:
        for b in reps:
            held.setdefault(b, []).append((n, pid))
    full = {b: log_dirs_answer(b, args.dirs, held.get(b, [])) for b in range(1, args.brokers + 1)}

    def decode(answers: dict[int, bytes]) -> Any:
        responses = [{"broker": b, "log_dirs": [r.to_dict() for r in DescribeLogDirsResponse.decode(a, version=4).results]}
                     for b, a in answers.items()]
        return log_dirs_of(responses, {})

    dirs, took_empty = timed(lambda: decode(empty), args.repeat)
    _, took_full = timed(lambda: decode(full), max(1, args.repeat // 2))
    expect("log dirs decoded", sum(len(d) for d in dirs.values()), args.brokers * args.dirs)
    print(f"DescribeLogDirs, {args.brokers} answers: Topics=[] {sum(map(len, empty.values())) / 1e3:.1f} kB, decoded in "
          f"{took_empty}; every partition {sum(map(len, full.values())) / 1e6:.1f} MB, decoded in {took_full}")

    settings = WatchSettings(cluster="bench")
    cluster = ClusterDescription(brokers=tuple(RegisteredBroker(id=b, fenced=b in down)
                                               for b in range(1, args.brokers + 1)), includes_fenced=True)
    space = {b: DiskSpace.of_dirs((d.total_bytes or 0, d.usable_bytes or 0) for d in ds) for b, ds in dirs.items()}
    obs = WatchObservation(cluster=cluster, log_dirs=LogDirs(sizes={}, space=space, dirs=dirs), partitions=parts)
    now = datetime(2026, 12, 3, tzinfo=timezone.utc)

    def decide() -> Any:
        return advance(WatchState(cluster="bench"), conditions_of(obs, settings), now=now, settings=settings)

    step, took = timed(decide, args.repeat)
    expect("conditions tracked (3 brokers down, partitions under min ISR)", len(step.state.conditions), 4)
    print(f"conditions + state machine: {took}; state JSON {len(step.state.to_json())} bytes")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
