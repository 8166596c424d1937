"""The planner as a standalone ``spark-submit`` application.

Usage (what PlanReassignmentOperator and ``airflow-kafka-reassign plan`` submit)::

    spark-submit --master 'local[*]' airflow_kafka_reassign/spark/plan_job.py \\
        --snapshot SNAPSHOT_DIR --out PLAN_DIR --request REQUEST.json

``SNAPSHOT_DIR``: a snapshot directory (docs/formats.md) at any path or URI Spark reads
(local, ``file://``, ``hdfs://``, ``s3a://`` with the Hadoop AWS jars); ``PLAN_DIR``: a local
directory on the driver's machine where the plan directory is written (core/plan_io.py);
``REQUEST.json``: a :class:`~airflow_kafka_reassign.core.planner.PlanRequest` as JSON
(``--request-json '{...}'`` passes it inline). Exit code 0 with a plan, 2 when the input
cannot give a sound plan (the reason on stderr and in ``PLAN_DIR/error.txt``), 1 on any
other failure.

How the work is spread (see core/planner/staged.py for the steps):

* the partitions are read as columns and shuffled once so every topic is in one task, sorted
  by partition (``repartition(topic)`` + ``sortWithinPartitions``), and cached;
* ``prepare`` runs per topic on the executors (checks, planner input, aggregates); the
  driver gets one small :class:`~airflow_kafka_reassign.core.planner.types.TopicLoad` per topic
  and runs the global quota step;
* ``place`` runs the per-topic placement on the executors with the quotas broadcast; the
  driver gets the final replica sets it needs to balance preferred leaders globally;
* ``finish`` applies the leader changes, serialises the moves into the plan files' JSON and
  adds up the before/after metrics on the executors; the driver concatenates the JSON.

The job logs one line per stage with its duration, and ``metrics.json`` records them under
``job`` (the planning stage is measured from the moment the Spark session is up).
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# The application file is shipped on its own by spark-submit: make the package importable
# when it is installed (the normal case) and when run from a source checkout.
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pyarrow as pa  # noqa: E402

from airflow_kafka_reassign.core.models import Broker, TopicState  # noqa: E402
from airflow_kafka_reassign.core.plan_io import ERROR_FILE, write_metrics, write_plan_fragments  # noqa: E402
from airflow_kafka_reassign.core.planner.goals import (  # noqa: E402
    PartitionRow,
    PlanRequest,
    PrepareContext,
    check_partition_row,
    plan_context,
)
from airflow_kafka_reassign.core.planner.staged import (  # noqa: E402
    LeaderInput,
    MoveTotals,
    Prepared,
    driver_leaders,
    driver_quotas,
    driver_result,
    leader_counts,
    new_accumulators,
    new_bound,
    stage_finish,
    stage_place,
    stage_prepare,
)
from airflow_kafka_reassign.exceptions import ConfigurationError  # noqa: E402

PAYLOAD_SCHEMA = "kind string, topic string, payload binary"
EXIT_BAD_INPUT = 2


def _dump(obj: object) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _batch(kinds: list[str], topics: list[str], payloads: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(kinds, pa.string()), pa.array(topics, pa.string()), pa.array(payloads, pa.binary())],
        names=["kind", "topic", "payload"],
    )


def topic_groups(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, list[PartitionRow] | str]]:
    """(topic, its sorted rows) from Arrow batches sorted by (topic, partition); a topic may
    span batches. A row that fails the model's checks gives (topic, error message)."""
    current: str | None = None
    rows: list[PartitionRow] = []
    error: str | None = None
    for batch in batches:
        cols = batch.to_pydict()
        sizes_col = cols["replica_sizes"]
        for i, topic in enumerate(cols["topic"]):
            if topic != current:
                if current is not None:
                    yield current, error if error is not None else rows
                current, rows, error = topic, [], None
            if error is not None:
                continue
            replicas = tuple(cols["replicas"][i] or ())
            sizes = sizes_col[i]
            try:
                if sizes is not None and len(sizes) != len(replicas):
                    raise ValueError(
                        f"partition {topic}-{cols['partition'][i]}: replica_sizes has {len(sizes)} entries "
                        f"for {len(replicas)} replicas"
                    )
                rows.append(check_partition_row(PartitionRow(
                    topic=topic,
                    partition=cols["partition"][i],
                    replicas=replicas,
                    adding_replicas=tuple(cols["adding_replicas"][i] or ()),
                    removing_replicas=tuple(cols["removing_replicas"][i] or ()),
                    replica_sizes=None if sizes is None else dict(zip(replicas, sizes, strict=True)),
                )))
            except ValueError as e:
                error = str(e)
    if current is not None:
        yield current, error if error is not None else rows


def _prepare_fn(ctx_b: Any):  # noqa: ANN202 (a closure over a broadcast)
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx: PrepareContext = ctx_b.value
        kinds, topics, payloads = [], [], []
        for topic, rows in topic_groups(batches):
            out = Prepared(topic, invalid=rows) if isinstance(rows, str) else stage_prepare(ctx, topic, rows)
            kinds.append("prepared")
            topics.append(topic)
            payloads.append(_dump(out))
        if topics:
            yield _batch(kinds, topics, payloads)

    return run


def _place_fn(ctx_b: Any, quotas_b: Any):  # noqa: ANN202
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx: PrepareContext = ctx_b.value
        step = quotas_b.value
        kinds, topics, payloads = [], [], []
        bound = new_bound(ctx)
        for topic, rows in topic_groups(batches):
            assert not isinstance(rows, str)  # prepare raised already
            placed = stage_place(ctx, step, topic, rows)
            if placed.bound is not None:
                bound.merge(placed.bound)
                placed.bound = None
            kinds += ["placed", "leaders"]
            topics += [topic, topic]
            payloads += [_dump(placed), _dump(LeaderInput.of(placed))]
        kinds.append("bound")
        topics.append("")
        payloads.append(_dump(bound))
        yield _batch(kinds, topics, payloads)

    return run


def _finish_fn(ctx_b: Any, changes_b: Any):  # noqa: ANN202
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx: PrepareContext = ctx_b.value
        changes = changes_b.value
        before, after = new_accumulators(ctx)
        totals = MoveTotals()
        originals: dict[int, int] = {}
        kinds, topics, payloads = [], [], []
        for batch in batches:
            for topic, payload in zip(batch.column(1).to_pylist(), batch.column(2).to_pylist(), strict=True):
                placed = pickle.loads(payload)
                moves, fragments = stage_finish(ctx, placed, changes.get(topic, {}), before, after)
                totals.add(moves)
                for b, c in leader_counts(placed.rows).items():
                    originals[b] = originals.get(b, 0) + c
                if fragments:
                    kinds.append("fragments")
                    topics.append(topic)
                    payloads.append(_dump(fragments))
        kinds.append("metrics")
        topics.append("")
        payloads.append(_dump((before, after, totals, originals)))
        yield _batch(kinds, topics, payloads)

    return run


class _Clock:
    def __init__(self) -> None:
        self.t0 = self.last = time.perf_counter()
        self.stages: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.stages[name] = round(now - self.last, 3)
        self.last = now
        print(f"[plan_job] {name:<9} {self.stages[name]:7.2f}s", file=sys.stderr, flush=True)

    @property
    def total(self) -> float:
        return round(time.perf_counter() - self.t0, 3)


def read_small_tables(spark: Any, base: str) -> tuple[list[Broker], list[TopicState]]:
    """brokers.parquet and topics.parquet: with pyarrow on the driver when local (no Spark job
    for a few thousand rows), else through Spark (any URI Spark reads)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    local = base.startswith("file://") or "://" not in base
    for name in ("brokers", "topics"):
        if local:
            import pyarrow.parquet as pq

            path = base.removeprefix("file://") + f"/{name}.parquet"
            rows[name] = pq.ParquetFile(path).read().to_pylist()
        else:
            rows[name] = [r.asDict(recursive=True) for r in spark.read.parquet(f"{base}/{name}.parquet").collect()]
    brokers = [Broker(id=r["id"], rack=r["rack"]) for r in rows["brokers"]]
    topics = [
        TopicState(
            name=r["name"], internal=r["internal"], partition_count=r["partition_count"],
            replication_factor=r["replication_factor"], configs=dict(r["configs"] or {}),
        )
        for r in rows["topics"]
    ]
    return brokers, topics


def run(spark: Any, snapshot: str, out: str | Path, request: PlanRequest, *, partitions: int | None = None) -> dict[str, Any]:
    """Plan on ``spark``; writes the plan directory at ``out``; returns metrics.json's content."""
    from pyspark.sql import functions as F  # noqa: N812

    clock = _Clock()
    sc = spark.sparkContext
    base = snapshot.rstrip("/")
    brokers, topics = read_small_tables(spark, base)
    ids = [b.id for b in brokers]
    dupes = sorted({b for b in ids if ids.count(b) > 1})
    if dupes:
        raise ValueError(f"snapshot: broker {dupes[0]} is listed twice")
    df = spark.read.parquet(f"{base}/partitions.parquet")
    # the checks that need every replica's broker, and whether sizes are known, come back
    # with the first per-topic stage (check_named in driver_quotas)
    ctx = plan_context(brokers, topics, None, request, any_sizes=False)
    clock.lap("read")

    n_parts = partitions or max(2, 4 * sc.defaultParallelism)
    grouped = df.repartition(n_parts, "topic").sortWithinPartitions("topic", "partition").cache()
    ctx_b = sc.broadcast(ctx)
    prepared = [pickle.loads(r["payload"]) for r in grouped.mapInArrow(_prepare_fn(ctx_b), PAYLOAD_SCHEMA).collect()]
    clock.lap("prepare")
    step = driver_quotas(ctx, prepared)  # completes ctx: broadcast it again
    del prepared
    ctx_b = sc.broadcast(ctx)
    clock.lap("quotas")

    quotas_b = sc.broadcast((step.quotas, step.params))
    placed = grouped.mapInArrow(_place_fn(ctx_b, quotas_b), PAYLOAD_SCHEMA).cache()
    inputs, bound = [], new_bound(ctx)
    for r in placed.where(F.col("kind") != "placed").collect():
        if r["kind"] == "leaders":
            inputs.append(pickle.loads(r["payload"]))
        else:
            bound.merge(pickle.loads(r["payload"]))
    grouped.unpersist()
    clock.lap("place")
    changes = driver_leaders(ctx, step, inputs)
    clock.lap("leaders")

    changes_b = sc.broadcast(changes)
    finished = placed.where(F.col("kind") == "placed").mapInArrow(_finish_fn(ctx_b, changes_b), PAYLOAD_SCHEMA).collect()
    fragments_by_topic: list[tuple[str, list[tuple[str, str, str, str]]]] = []
    before, after = new_accumulators(ctx)
    totals = MoveTotals()
    originals: dict[int, int] = {}
    for r in finished:
        if r["kind"] == "fragments":
            fragments_by_topic.append((r["topic"], pickle.loads(r["payload"])))
        else:
            b, a, t, o = pickle.loads(r["payload"])
            before.merge(b)
            after.merge(a)
            totals.merge(t)
            for k, v in o.items():
                originals[k] = originals.get(k, 0) + v
    placed.unpersist()
    clock.lap("finish")

    result = driver_result(ctx, step, bound, totals, before.result(), after.result(), originals)
    fragments_by_topic.sort(key=lambda x: x[0])
    fragments = [f for _, frags in fragments_by_topic for f in frags]
    job = {
        "master": sc.master,
        "default_parallelism": sc.defaultParallelism,
        "partitions": n_parts,
        "stages_s": clock.stages,
    }
    write_plan_fragments(fragments, out)
    clock.lap("write")
    job["planning_s"] = clock.total
    doc = write_metrics(result, out, partitions_moved=len(fragments), snapshot=snapshot, job=job)
    print(f"[plan_job] planning {clock.total:.2f}s (from the Spark session up to the plan written)", file=sys.stderr)
    return doc


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="plan_job.py", description="Plan Kafka partition reassignments on Spark.")
    ap.add_argument("--snapshot", required=True, help="snapshot directory (path or URI Spark reads)")
    ap.add_argument("--out", required=True, help="local plan directory to write")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--request", help="PlanRequest as a JSON file")
    group.add_argument("--request-json", help="PlanRequest as inline JSON")
    ap.add_argument("--partitions", type=int, help="Spark partitions of the topic shuffle (default 4 x parallelism)")
    ap.add_argument("--app-name", default="airflow-kafka-reassign-plan")
    return ap.parse_args(argv)


def load_request(args: argparse.Namespace) -> PlanRequest:
    if args.request:
        return PlanRequest.model_validate_json(Path(args.request).read_text(encoding="utf-8"))
    if args.request_json:
        return PlanRequest.model_validate_json(args.request_json)
    return PlanRequest()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    try:
        request = load_request(args)
    except (OSError, ValueError) as e:
        print(f"plan_job: the request is not valid: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(args.app_name).getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("AKR_SPARK_LOG_LEVEL", "WARN"))
    try:
        doc = run(spark, args.snapshot, out, request, partitions=args.partitions)
    except (ConfigurationError, ValueError) as e:
        out.mkdir(parents=True, exist_ok=True)
        (out / ERROR_FILE).write_text(f"{e}\n", encoding="utf-8")
        print(f"plan_job: no plan: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        spark.stop()
    summary = doc["summary"]
    print(
        f"[plan_job] {summary['partitions_moved']} partitions to move, {summary['replica_moves']} replica moves "
        f"(lower bound {summary['lower_bound']}), {summary['leader_changes']} leader changes -> {out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
