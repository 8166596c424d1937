"""The planner as a standalone ``spark-submit`` application.

Usage (what PlanReassignmentOperator and ``airflow-kafka-reassign plan`` submit)::

    spark-submit --master 'local[*]' airflow_kafka_reassign/spark/plan_job.py \\
        --snapshot SNAPSHOT_DIR --out PLAN_DIR --request REQUEST.json

``SNAPSHOT_DIR``: a snapshot directory (docs/formats.md): a path, an object-storage URI
(``s3://``, ``gs://``, ``abfs://``: read by the driver with pyarrow, see spark/job_storage.py) or
a URI Spark's own file systems read (``hdfs://``, ``s3a://`` with the Hadoop AWS jars);
``PLAN_DIR``: where the plan directory is written (core/records/plan_io.py): a path on the driver's
machine, or an object-storage URI (uploaded by the driver, ``metrics.json`` last);
``REQUEST.json``: a :class:`~airflow_kafka_reassign.core.planner.PlanRequest` as JSON
(``--request-json '{...}'`` passes it inline). Exit code 0 with a plan, 2 when the input
cannot give a sound plan (the reason on stderr and in ``PLAN_DIR/error.txt``), 1 on any
other failure.

The snapshot's files are first checked against the counts its snapshot.json records
(core/guards/completeness.py: per topic, the partition count and ids 0 to count - 1 in
partitions.parquet and topics.parquet; the topics, partitions and replicas in all): a snapshot
that does not hold what it recorded (a partial copy, files from two snapshots) is refused with
exit code 2, naming the topic and the counts; for a local folder (or one fetched from object
storage) before Spark starts. A snapshot without the record (written by an older version) is
planned with a warning. metrics.json's ``job.snapshot_check`` says which it was.

How the work is spread (see core/planner/staged.py for the steps):

* the partitions are read in parallel splits of whole topics: a snapshot written by this
  package keeps every topic whole in one Parquet row group (core/records/snapshot_io.py), so each task
  reads a run of row groups with pyarrow (on a ``local[...]`` master from the file; on a
  cluster, or for a URI, from the file's bytes, read once by the driver and broadcast, so the
  executors need no access to the snapshot): no shuffle and no JVM row conversion. A file
  without whole-topic row groups is read through Spark's DataFrame reader and, when a topic
  turns out to span splits, shuffled once by topic (``repartition(topic)`` +
  ``sortWithinPartitions``, cached);
* ``prepare`` runs per topic on the executors (checks, planner input, aggregates); the
  driver gets one small :class:`~airflow_kafka_reassign.core.planner.types.TopicLoad` per topic
  and computes the brokers' targets; from two groups' worth of replicas (the request's
  ``quota_group_replicas``) it only splits each broker's room between groups of topics, and
  the executors settle each group's quotas (``quotas``; else the driver does it all);
* ``place`` runs the per-topic placement on the executors with the quotas broadcast; the
  driver gets the final replica sets it needs to balance preferred leaders globally;
* load-aware goals: the disk step on the driver over every planned partition (the place tasks
  send their :class:`DiskArrays`), or with ``--disk-step groups`` by the place tasks' groups of
  topics on the executors, in rounds, the driver seeing per-broker figures only
  (:class:`SparkGroups`, core/planner/disk_groups.py);
* ``finish`` applies the leader changes, serialises the moves into the plan files' JSON and
  adds up the before/after metrics on the executors; the driver concatenates the JSON.

The job logs one line per stage with its duration, and ``metrics.json`` records them under
``job`` (the planning stage is measured from the moment the Spark session is up).

This file is the job's own flow: arguments, session, the stages as Spark tasks, the plan written.
What it reads of the snapshot (the small tables, the counts check, partitions.parquet's row
groups and their splits) is spark/snapshot_reader.py; the object-storage copies are
spark/job_storage.py; the ``finish`` tasks' plan-file parts and their writing are
core/records/plan_io.py (:data:`~airflow_kafka_reassign.core.records.plan_io.FileParts`).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# The application file is shipped on its own by spark-submit: make the package importable
# when it is installed (the normal case) and when run from a source checkout.
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pyarrow as pa  # noqa: E402

from airflow_kafka_reassign.core.planner.disk_groups import DiskGroup  # noqa: E402
from airflow_kafka_reassign.core.planner.goals import (  # noqa: E402
    LOG_DIR_GOALS,
    PartitionRow,
    PlanRequest,
    PrepareContext,
    merge_named,
    plan_context,
)
from airflow_kafka_reassign.core.planner.lower_bound import BoundPart, TopicFacts, bound_parts  # noqa: E402
from airflow_kafka_reassign.core.planner.quotas import QuotaGroup, solve_quota_group  # noqa: E402
from airflow_kafka_reassign.core.planner.staged import (  # noqa: E402
    DiskArrays,
    LeaderInput,
    LeaderView,
    MoveTotals,
    Placed,
    PlainRows,
    Prepared,
    QuotaStep,
    apply_disk_changes,
    counts_in_place,
    driver_disk,
    driver_disk_groups,
    driver_leaders,
    driver_quotas,
    driver_result,
    leader_counts,
    merge_changes,
    new_bound,
    new_metrics,
    place_grouped,
    plain_topic,
    quotas_at_once,
    stage_finish,
    stage_place,
    stage_prepare,
)
from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicParams  # noqa: E402
from airflow_kafka_reassign.core.records.plan_io import (  # noqa: E402
    ERROR_FILE,
    FileParts,
    file_parts,
    plan_file_parts,
    plan_partition_counts,
    plan_topic_ids,
    write_metrics,
    write_plan_fragments,
)
from airflow_kafka_reassign.exceptions import ConfigurationError  # noqa: E402
from airflow_kafka_reassign.spark.job_storage import (  # noqa: E402
    JobStorageError,
    check_local_snapshot,
    is_remote,
    publish,
    read_file,
    stage_snapshot,
)
from airflow_kafka_reassign.spark.snapshot_reader import (  # noqa: E402
    ROW_COLUMNS,
    GroupSplit,
    RowGroups,
    check_snapshot_files,
    check_snapshot_on_spark,
    fetch_partitions_file,
    group_splits,
    local_partitions_file,
    read_local_file,
    read_row_groups,
    read_small_tables,
    row_group_index,
    row_group_splits,
    topic_inputs,
    topics_between,
)

PAYLOAD_SCHEMA = "kind string, topic string, payload binary"
EXIT_BAD_INPUT = 2


def _dump(obj: object) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _batch(kinds: list[str], topics: list[str], payloads: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(kinds, pa.string()), pa.array(topics, pa.string()), pa.array(payloads, pa.binary())],
        names=["kind", "topic", "payload"],
    )


Out = tuple[str, str, bytes]
"""What every stage yields: (kind, topic, pickled payload)."""

PlaceRows = list[PartitionRow] | PlainRows | str
"""A topic's rows as ``place`` reads them (:func:`topic_inputs`): its rows, a plain topic's columns, or an error."""


def prepare_topics(ctx: PrepareContext, groups: Iterable[tuple[str, list[PartitionRow] | str]]) -> Iterator[Out]:
    """Stage 1 over one task's topics: a :class:`Prepared` per topic, all in one record (one
    pickle: the classes and field names once, not per topic). Which partition first names each
    broker is merged over the task's topics and sent once, with its last topic (the driver only
    needs the minimum per broker: half the bytes otherwise)."""
    outs = [Prepared(topic, invalid=rows) if isinstance(rows, str) else stage_prepare(ctx, topic, rows)
            for topic, rows in groups]
    named = merge_named(x.named for x in outs)
    for i, x in enumerate(outs):
        x.named = named if i == len(outs) - 1 else {}
    if outs:
        yield "prepared", outs[0].topic, _dump(outs)


def place_topics(ctx: PrepareContext, step: Any, groups: Iterable[tuple[str, PlaceRows]]) -> Iterator[Out]:
    """Stage 3 over one task's topics, with the quotas in ``step``: see :func:`emit_placed`."""
    return emit_placed(ctx, (stage_place(ctx, step, topic, _valid(rows), defer_bound=True) for topic, rows in groups))


def place_grouped_topics(
    ctx: PrepareContext, params: TopicParams, quota_groups: list[QuotaGroup],
    groups: Iterable[tuple[str, PlaceRows]],
) -> Iterator[Out]:
    """Stage 3 over one task's topics when the quota step left their groups to it
    (:func:`~airflow_kafka_reassign.core.planner.staged.place_grouped`): see :func:`emit_placed`;
    a single ``("miss", "", b"")`` if one of the groups cannot meet its share."""
    placed = place_grouped(ctx, params, quota_groups, ((topic, _valid(rows)) for topic, rows in groups), defer_bound=True)
    if placed is None:
        yield "miss", "", b""
        return
    yield from emit_placed(ctx, placed)


def _valid(rows: PlaceRows) -> list[PartitionRow] | PlainRows:
    assert not isinstance(rows, str)  # prepare raised already
    return rows


def emit_placed(ctx: PrepareContext, placed: Iterable[Placed]) -> Iterator[Out]:
    """Per topic its :class:`Placed` (stays on the executors), then for the driver one
    :class:`LeaderInput` of all the task's topics, the task's share of the lower bound and, for
    load-aware goals (a capacity document), the :class:`DiskArrays` of its topics."""
    bound = new_bound(ctx)
    facts: list[tuple[TopicFacts, dict[int, int] | None]] = []
    views: list[LeaderView] = []
    disk_views: list[Placed] | None = [] if ctx.request.capacity is not None else None
    for x in placed:
        if x.bound is not None:
            bound.merge(x.bound)
            x.bound = None
        if x.facts is not None:  # the task's topics' shares of the bound at once, below
            facts.append(x.facts)
            x.facts = None
        yield "placed", x.topic, _dump(x)
        views.append(LeaderInput.view(x))
        if disk_views is not None:
            disk_views.append(DiskArrays.view(x))
    yield "leaders", "", _dump(LeaderInput.of_views(views))
    bound.merge(bound_parts(facts, ctx.layout, balance_brokers=ctx.balance))
    yield "bound", "", _dump(bound)
    if disk_views is not None:
        yield "disk", "", _dump(DiskArrays.of_views(disk_views))


def finish_topics(
    ctx: PrepareContext, changes: dict[str, dict[int, tuple[int, ...]]], placed: Iterable[tuple[str, bytes]]
) -> Iterator[Out]:
    """Stage 5 over one task's placed topics: their moves as parts of the plan files
    (:data:`FileParts`), then the task's metrics."""
    metrics = new_metrics(ctx)
    totals = MoveTotals()
    originals: dict[int, int] = {}
    moved: list[tuple[str, list[tuple[str, str, str, str]]]] = []
    counts: list[int] = []
    for topic, payload in placed:
        x = pickle.loads(payload)
        moves, fragments = stage_finish(ctx, x, changes.get(topic, {}), metrics)
        totals.add(moves)
        for b, c in leader_counts(x.rows).items():
            originals[b] = originals.get(b, 0) + c
        if fragments:
            moved.append((topic, fragments))
            counts.append(len(x.rows))  # every partition of the topic in the snapshot
    if moved:
        yield "fragments", moved[0][0], _dump(file_parts(moved, counts))
    yield "metrics", "", _dump((metrics, totals, originals))


# -- adapters: the stages over Arrow batches (DataFrame.mapInArrow) or row-group splits (RDD) ----


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off for a block; reference counting still frees what
    the planner allocates (it makes no reference cycles). A stage builds hundreds of thousands
    of small lists, tuples and dicts, and each full collection walks every live one again: at
    1M replicas that was 0.3 s (local[2]) to 0.8 s (local[1]) of the plan job."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _topics(stage: Any, values: list[Any], batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, Any]]:
    """Each topic's rows as ``stage`` (with ``values[0]``, its context) reads them, a plain topic's
    as its columns (:func:`topic_inputs`): ``prepare`` checks them (a plain topic must also be one
    the snapshot names); ``place`` reads the same rows again, checked by then."""
    ctx: PrepareContext = values[0]
    if stage is prepare_topics:
        return topic_inputs(batches, lambda topic: plain_topic(ctx, topic) and (not ctx.topic_rf or topic in ctx.topic_rf),
                            check=True, max_rf=ctx.nb)
    return topic_inputs(batches, lambda topic: plain_topic(ctx, topic), max_rf=ctx.nb)


def _on_batches(stage: Any, *broadcasts: Any):  # noqa: ANN202 (a closure over broadcasts)
    """``stage(*values, groups)`` as a mapInArrow function over batches sorted by topic."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with no_cyclic_gc():
            values = [b.value for b in broadcasts]
            out = list(stage(*values, _topics(stage, values, batches)))
        if out:
            kinds, topics, payloads = zip(*out, strict=True)
            yield _batch(list(kinds), list(topics), list(payloads))

    return run


def _on_splits(stage: Any, data_b: Any, *broadcasts: Any):  # noqa: ANN202
    """``stage(*values, groups)`` as an RDD function over (file, row groups) splits read with
    pyarrow, from the file or (``data_b``: a broadcast of its bytes) from memory."""

    def run(splits: Iterator[tuple[str, list[int]]]) -> Iterator[Out]:
        with no_cyclic_gc():
            values = [b.value for b in broadcasts]
            data = data_b.value if data_b is not None else None
            for path, row_groups in splits:
                yield from stage(*values, _topics(stage, values, read_row_groups(path, row_groups, data)))

    return run


def _quota_groups_on(sc: Any, n_parts: int):  # noqa: ANN202 (a closure over the SparkContext)
    """The quota step's groups of topics (:func:`~airflow_kafka_reassign.core.planner.quotas.solve_quota_group`)
    as tasks, results in group order: the driver keeps only the split of the brokers' room."""

    def run(groups: list[QuotaGroup], layout: BrokerLayout) -> list[list[tuple[int, ...]] | None]:
        return sc.parallelize(groups, min(len(groups), n_parts)).map(lambda g: _solve_group(g, layout)).collect()

    return run


def _solve_group(group: QuotaGroup, layout: BrokerLayout) -> list[tuple[int, ...]] | None:
    with no_cyclic_gc():
        return solve_quota_group(group, layout)


def _on_group_splits(ctx_b: Any, data_b: Any, params: TopicParams):  # noqa: ANN202
    """:func:`place_grouped_topics` as an RDD function over :data:`GroupSplit` tasks."""

    def run(splits: Iterator[GroupSplit]) -> Iterator[Out]:
        with no_cyclic_gc():
            ctx = ctx_b.value
            data = data_b.value if data_b is not None else None
            for path, row_groups, lo, hi, quota_groups in splits:
                batches = topics_between(read_row_groups(path, row_groups, data), lo, hi)
                yield from place_grouped_topics(ctx, params, quota_groups, _topics(place_topics, [ctx], batches))

    return run


def _finish_on_records(ctx_b: Any, changes_b: Any):  # noqa: ANN202
    def run(records: Iterator[Out]) -> Iterator[Out]:
        with no_cyclic_gc():
            yield from finish_topics(ctx_b.value, changes_b.value, ((t, p) for _, t, p in records))

    return run


#: ``--disk-step``: the disk step on the driver over every partition, or by the place tasks' groups
#: of topics on the executors (core/planner/disk_groups.py).
DISK_STEPS = ("serial", "groups")


class SparkGroups:
    """The disk step's groups of topics where the place stage left them: one group per place task
    (its :class:`DiskArrays` record, never collected), each round a stage over the groups cached
    from the round before (:class:`~airflow_kafka_reassign.core.planner.disk_groups.GroupRunner`).
    Only the rounds' small results reach the driver."""

    def __init__(self, sc: Any, placed: Any) -> None:
        self.sc = sc
        self.source = placed.filter(lambda r: r[0] == "disk").mapPartitionsWithIndex(_disk_groups)
        self.pairs: Any = None

    def run(self, step: Any, arg: Any) -> list[Any]:
        started = time.perf_counter()
        arg_b = self.sc.broadcast(arg)
        groups = self.source if self.pairs is None else self.pairs.map(lambda x: x[0])
        pairs = groups.map(lambda g: _round(step, g, arg_b.value)).cache()
        results = pairs.map(lambda x: x[1]).collect()
        if self.pairs is not None:
            self.pairs.unpersist()
        self.pairs = pairs
        print(f"[plan_job]   disk {step.__name__:<13} {time.perf_counter() - started:7.2f}s", file=sys.stderr, flush=True)
        return results

    def close(self) -> None:
        if self.pairs is not None:
            self.pairs.unpersist()
            self.pairs = None


def _disk_groups(index: int, records: Iterator[Out]) -> Iterator[DiskGroup]:
    """The place task's disk records as one group of the disk step (its index: the group's id)."""
    for _, _, payload in records:
        yield pickle.loads(payload).group(index)


def _round(step: Any, group: DiskGroup, arg: Any) -> tuple[DiskGroup, Any]:
    with no_cyclic_gc():
        return step(group, arg)  # type: ignore[no-any-return]


def split_topics(prepared: Iterable[Prepared]) -> list[str]:
    """Topics that came out of ``prepare`` more than once: their rows were not together in one
    split (the partitions file was not written topic by topic)."""
    seen: set[str] = set()
    twice: set[str] = set()
    for x in prepared:
        (twice if x.topic in seen else seen).add(x.topic)
    return sorted(twice)


def _prepared(records: Iterable[Out]) -> list[Prepared]:
    """The :class:`Prepared` of every topic from ``prepare``'s records (a list per task)."""
    return [x for _, _, payload in records for x in pickle.loads(payload)]


class _Clock:
    def __init__(self) -> None:
        self.t0 = self.last = time.perf_counter()
        self.cpu = time.process_time()
        self.stages: dict[str, float] = {}

    def lap(self, name: str) -> None:
        """A stage's wall seconds, printed with the Python driver's CPU seconds in it (a stage on
        the driver that takes more wall than CPU waited for a core)."""
        now, cpu = time.perf_counter(), time.process_time()
        self.stages[name] = round(now - self.last, 3)
        print(f"[plan_job] {name:<9} {self.stages[name]:7.2f}s (driver CPU {cpu - self.cpu:.2f}s)", file=sys.stderr,
              flush=True)
        self.last, self.cpu = now, cpu

    @property
    def total(self) -> float:
        return round(time.perf_counter() - self.t0, 3)


def run(
    spark: Any, snapshot: str, out: str | Path, request: PlanRequest, *, partitions: int | None = None,
    reader: str = "auto", snapshot_name: str | None = None, snapshot_check: str | None = None,
    disk_step: str = "serial",
) -> dict[str, Any]:
    """Plan on ``spark``; writes the plan directory at ``out``; returns metrics.json's content.

    ``snapshot_check``: what :func:`check_snapshot_files` said of the snapshot already (``None``:
    the snapshot's counts are checked here first).

    ``reader``: ``auto`` (executors read the row groups with pyarrow: on a ``local[...]``
    master from the snapshot's file, otherwise from its bytes, read whole by the driver, from
    the local file or through Spark for a URI, and broadcast), ``broadcast`` (the latter, on any
    master) or ``spark`` (Spark's DataFrame reader). ``snapshot_name``: what metrics.json names
    as the snapshot (its URI when ``snapshot`` is a local copy of it). ``disk_step``: one of
    :data:`DISK_STEPS`.
    """
    if request.capacity is not None and request.capacity.gives_network_in():
        return plan_bytes_in_on_driver(snapshot, out, request, snapshot_name or snapshot)
    if request.goal in LOG_DIR_GOALS:
        return plan_log_dirs_on_driver(snapshot, out, request, snapshot_name or snapshot)
    with no_cyclic_gc():
        return _run(spark, snapshot, out, request, partitions=partitions, reader=reader,
                    snapshot_name=snapshot_name or snapshot, snapshot_check=snapshot_check, disk_step=disk_step)


def plan_bytes_in_on_driver(snapshot: str, out: str | Path, request: PlanRequest, name: str) -> dict[str, Any]:
    """A plan whose capacity document gives ``network_in`` (the bytes-in goal): the bytes-in step needs
    every partition's rate at once and is not staged yet, so this runs the pure planner on the driver
    (the disk step included); the load-aware plan without ``network_in`` runs staged."""
    from airflow_kafka_reassign.core.planner import plan_reassignment
    from airflow_kafka_reassign.core.records.plan_io import read_metrics, write_plan_dir
    from airflow_kafka_reassign.core.records.snapshot_io import read_snapshot

    if is_remote(snapshot):
        raise ConfigurationError(
            f"bytes-in planning (network_in in the capacity document) reads the snapshot on the driver; {snapshot} "
            "is not a local folder: give a local or object-storage snapshot (staged by the job), not hdfs:// or s3a://"
        )
    started = time.perf_counter()
    with no_cyclic_gc():
        result = plan_reassignment(read_snapshot(snapshot), request)
    write_plan_dir(result, out, snapshot=name)
    print(f"[plan_job] bytes-in planning on the driver {time.perf_counter() - started:.2f}s", file=sys.stderr)
    return read_metrics(Path(out))


def plan_log_dirs_on_driver(snapshot: str, out: str | Path, request: PlanRequest, name: str) -> dict[str, Any]:
    """A goal on log dirs (remove-disks, rebalance-disks): the pure planner on the driver, from the snapshot and the
    brokers' log dirs beside it (``log_dirs.json``); it touches only the partitions in the dirs concerned."""
    from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable, plan_log_dirs
    from airflow_kafka_reassign.core.records.plan_io import read_metrics, write_plan_dir
    from airflow_kafka_reassign.core.records.snapshot_io import read_snapshot

    if is_remote(snapshot):
        raise ConfigurationError(
            f"goal {request.goal} is planned on the driver from a local or object-storage snapshot (staged by the "
            f"job); {snapshot} is not one: give the snapshot folder PlanReassignmentOperator wrote")
    started = time.perf_counter()
    result = plan_log_dirs(read_snapshot(snapshot), LogDirTable.read(snapshot), request)
    write_plan_dir(result, out, snapshot=name)
    print(f"[plan_job] {request.goal} planned on the driver in {time.perf_counter() - started:.2f}s", file=sys.stderr)
    return read_metrics(Path(out))


def _run(
    spark: Any, snapshot: str, out: str | Path, request: PlanRequest, *, partitions: int | None, reader: str,
    snapshot_name: str, snapshot_check: str | None, disk_step: str = "serial",
) -> dict[str, Any]:
    clock = _Clock()
    sc = spark.sparkContext
    base = snapshot.rstrip("/")
    brokers, topics = read_small_tables(spark, base)
    if snapshot_check is None:
        local = base.startswith("file://") or "://" not in base
        snapshot_check = check_snapshot_files(base) if local else check_snapshot_on_spark(spark, base, topics)
    ids = [b.id for b in brokers]
    dupes = sorted({b for b in ids if ids.count(b) > 1})
    if dupes:
        raise ValueError(f"snapshot: broker {dupes[0]} is listed twice")
    n_parts = partitions or max(2, 4 * sc.defaultParallelism)
    index: RowGroups | None = None
    data: bytes | None = None
    if reader in ("auto", "broadcast"):
        local = local_partitions_file(base)
        if reader == "auto" and local is not None and str(sc.master).startswith("local"):
            index = row_group_index(base)  # the tasks open the driver's own file
        else:
            # a cluster (its executors may not see the driver's files) or a URI: the driver reads
            # the file whole (2 MB per million replicas) and broadcasts its bytes
            data = read_local_file(local) if local is not None else fetch_partitions_file(spark, base)
            if data is not None:
                index = row_group_index(base, data)
    splits = row_group_splits(index, n_parts) if index is not None else None
    # the checks that need every replica's broker, and whether sizes are known, come back
    # with the first per-topic stage (check_named in driver_quotas)
    ctx = plan_context(brokers, topics, None, request, any_sizes=False)
    clock.lap("read")

    ctx_b = sc.broadcast(ctx)
    df: Any = None
    source: Any = None
    prepared: list[Prepared] = []
    if splits is not None:
        # executors read their row groups with pyarrow: no JVM row conversion, no shuffle
        data_b = sc.broadcast(data) if data is not None else None
        source = sc.parallelize(splits, len(splits))
        input_layout = "row-groups" if data is None else "row-groups-broadcast"
        prepared = _prepared(source.mapPartitions(_on_splits(prepare_topics, data_b, ctx_b)).collect())
        if split_topics(prepared):
            source = None
    if source is None:
        # through Spark's reader (any URI Spark reads), in splits of the file (not one task per 128 MB)
        spark.conf.set("spark.sql.files.minPartitionNum", str(n_parts))
        spark.conf.set("spark.sql.files.openCostInBytes", "8192")
        df, input_layout = spark.read.parquet(f"{base}/partitions.parquet").select(*ROW_COLUMNS), "splits"
        prepared = _prepared(df.mapInArrow(_on_batches(prepare_topics, ctx_b), PAYLOAD_SCHEMA).collect())
        split = split_topics(prepared)
        if split:
            print(f"[plan_job] {len(split)} topic(s) span splits of partitions.parquet (first: {split[0]!r}): "
                  "shuffling by topic", file=sys.stderr, flush=True)
            df = df.repartition(n_parts, "topic").sortWithinPartitions("topic", "partition").cache()
            input_layout = "shuffled"
            prepared = _prepared(df.mapInArrow(_on_batches(prepare_topics, ctx_b), PAYLOAD_SCHEMA).collect())
    clock.lap("prepare")
    # completes ctx: broadcast it again. Reading row groups, the quota groups (if any) are
    # settled by the place stage's tasks, each before placing its groups' topics
    step = driver_quotas(ctx, prepared, _quota_groups_on(sc, n_parts), defer_groups=source is not None)
    del prepared
    ctx_b = sc.broadcast(ctx)
    clock.lap("quotas")

    by_groups = disk_step == "groups"
    # the disk step by groups leaves the place tasks' disk records where they are
    leave = ("placed", "disk") if by_groups else ("placed",)

    def keep(r: Out) -> bool:
        return r[0] not in leave

    def disk_of(placed: Any, step: QuotaStep, disk_inputs: list[DiskArrays]) -> Any:
        if not by_groups:
            return driver_disk(ctx, step, disk_inputs)
        groups = SparkGroups(sc, placed)
        try:
            return driver_disk_groups(ctx, step, groups)
        finally:
            groups.close()

    def place(step: QuotaStep) -> tuple[Any, list[Out], QuotaStep, bool]:
        """The place stage (cached on the executors) and what its tasks sent the driver."""
        placed: Any = None
        groups_in_place = bool(step.pending)
        if step.pending:
            assert index is not None
            tasks = group_splits(index, step.pending, n_parts)
            placed = sc.parallelize(tasks, len(tasks)).mapPartitions(_on_group_splits(ctx_b, data_b, step.params)).cache()
            side = placed.filter(keep).collect()
            if any(kind == "miss" for kind, _, _ in side):
                print("[plan_job] a group of topics could not meet its share of the brokers' room: "
                      "quotas over every topic at once", file=sys.stderr, flush=True)
                placed.unpersist()
                placed, groups_in_place = None, False
                step = quotas_at_once(ctx, step)
        if placed is None:
            quotas_b = sc.broadcast((step.quotas, step.params))
            if source is not None:
                placed = source.mapPartitions(_on_splits(place_topics, data_b, ctx_b, quotas_b))
            else:  # the few rows per topic as (kind, topic, payload) records, like the splits' stages give
                placed = df.mapInArrow(_on_batches(place_topics, ctx_b, quotas_b), PAYLOAD_SCHEMA).rdd.map(tuple)
            placed = placed.cache()  # the Placed payloads stay on the executors for finish
            side = placed.filter(keep).collect()
        return placed, side, step, groups_in_place

    def received(side: list[Out]) -> tuple[list[LeaderInput], BoundPart, list[DiskArrays]]:
        inputs, bound, disk_inputs = [], new_bound(ctx), []
        for kind, _, payload in side:
            if kind == "leaders":
                inputs.append(pickle.loads(payload))
            elif kind == "disk":
                disk_inputs.append(pickle.loads(payload))
            else:
                bound.merge(pickle.loads(payload))
        return inputs, bound, disk_inputs

    placed, side, step, groups_in_place = place(step)
    inputs, bound, disk_inputs = received(side)
    clock.lap("place")
    # load-aware goals: the disk step over every planned partition, on the driver or by groups
    disk = disk_of(placed, step, disk_inputs)
    if disk is not None and disk.counts_missed:
        # racks kept the disk step from evening out the replica counts: place again, with the
        # per-topic steps balancing them (what the pure planner does too)
        print("[plan_job] the disk step left the replica counts apart (racks): placing again with the "
              "per-topic steps balancing them", file=sys.stderr, flush=True)
        placed.unpersist()
        placed, side, step, groups_in_place = place(counts_in_place(step))
        inputs, bound, disk_inputs = received(side)
        clock.lap("place again")
        disk = disk_of(placed, step, disk_inputs)
    if df is not None:
        df.unpersist()
    del disk_inputs, side
    if disk is not None:
        apply_disk_changes(inputs, disk.changes)
        clock.lap("disk")
    changes = merge_changes(disk, driver_leaders(ctx, step, inputs))
    clock.lap("leaders")

    changes_b = sc.broadcast(changes)
    finished = placed.filter(lambda r: r[0] == "placed").mapPartitions(_finish_on_records(ctx_b, changes_b)).collect()
    parts: list[FileParts] = []
    metrics = new_metrics(ctx)
    totals = MoveTotals()
    originals: dict[int, int] = {}
    for kind, _, payload in finished:
        if kind == "fragments":
            parts.append(pickle.loads(payload))
        else:
            m, t, o = pickle.loads(payload)
            metrics.merge(m)
            totals.merge(t)
            for k, v in o.items():
                originals[k] = originals.get(k, 0) + v
    placed.unpersist()
    clock.lap("finish")

    result = driver_result(ctx, step, bound, totals, *metrics.result(), originals, disk)
    moved, chunks = plan_file_parts(parts)
    job = {
        "master": sc.master,
        "default_parallelism": sc.defaultParallelism,
        "partitions": n_parts,
        "input": input_layout,
        "snapshot_check": snapshot_check,
        "quota_groups": step.quota_groups,
        "quota_groups_in_place": groups_in_place,
        "stages_s": clock.stages,
        "disk_step": disk_step if disk is not None else None,
        "disk_rounds": disk.rounds if disk is not None and by_groups else None,
    }
    # a task's joined fragments are a fragment of the file
    write_plan_fragments(chunks, out, partition_counts=plan_partition_counts(parts),
                         topic_ids=plan_topic_ids(parts, topics))
    clock.lap("write")
    job["planning_s"] = clock.total
    doc = write_metrics(result, out, partitions_moved=moved, snapshot=snapshot_name, job=job)
    print(f"[plan_job] planning {clock.total:.2f}s (from the Spark session up to the plan written)", file=sys.stderr)
    return doc


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="plan_job.py", description="Plan Kafka partition reassignments on Spark.")
    ap.add_argument("--snapshot", required=True, help="snapshot directory (path or URI Spark reads)")
    ap.add_argument("--out", required=True,
                    help="plan folder to write: a path on the driver, or an object-storage URI (s3://, gs://, abfs://)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--request", help="PlanRequest as a JSON file (a path or an object-storage URI)")
    group.add_argument("--request-json", help="PlanRequest as inline JSON")
    ap.add_argument("--partitions", type=int, help="tasks of the per-topic stages (default 4 x parallelism)")
    ap.add_argument("--reader", choices=("auto", "broadcast", "spark"), default="auto",
                    help="auto: executors read the row groups with pyarrow (from the file on a local master, "
                         "else from its bytes broadcast by the driver); broadcast: the latter always; "
                         "spark: Spark's DataFrame reader")
    ap.add_argument("--disk-step", choices=DISK_STEPS, default="serial",
                    help="load-aware goals: serial: the disk step on the driver over every partition; groups: by the "
                         "place tasks' groups of topics on the executors, in rounds (docs/performance.md)")
    ap.add_argument("--app-name", default="airflow-kafka-reassign-plan")
    return ap.parse_args(argv)


def load_request(args: argparse.Namespace) -> PlanRequest:
    if args.request and is_remote(args.request):
        return PlanRequest.model_validate_json(read_file(args.request))
    if args.request:
        return PlanRequest.model_validate_json(Path(args.request).read_text(encoding="utf-8"))
    if args.request_json:
        return PlanRequest.model_validate_json(args.request_json)
    return PlanRequest()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        request = load_request(args)
    except (OSError, ValueError) as e:
        print(f"plan_job: the request is not valid: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with tempfile.TemporaryDirectory(prefix="akr-plan-job-") as tmp:
        return _main(args, request, Path(tmp))


def _main(args: argparse.Namespace, request: PlanRequest, tmp: Path) -> int:
    """Plan; a snapshot or plan folder on object storage goes through ``tmp`` (job_storage.py)."""
    remote_out = is_remote(args.out)
    out = tmp / "plan" if remote_out else Path(args.out)
    snapshot = args.snapshot
    spark: Any = None
    try:
        # the input checked (and fetched from object storage) before Spark starts: bad input fails in a second
        if is_remote(snapshot) and not snapshot.startswith(("hdfs://", "s3a://", "viewfs://")):
            snapshot = str(stage_snapshot(snapshot, tmp / "snapshot"))
            print(f"[plan_job] snapshot read from {args.snapshot}", file=sys.stderr, flush=True)
        elif not is_remote(snapshot):
            check_local_snapshot(snapshot)
        # the files against the counts snapshot.json records (Spark's own file systems: in run)
        counts = None if is_remote(snapshot) else check_snapshot_files(snapshot)
        if request.goal not in LOG_DIR_GOALS:  # those are planned on the driver alone: no Spark session
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.appName(args.app_name).getOrCreate()
            spark.sparkContext.setLogLevel(os.environ.get("AKR_SPARK_LOG_LEVEL", "WARN"))
        doc = run(spark, snapshot, out, request, partitions=args.partitions, reader=args.reader,
                  snapshot_name=args.snapshot, snapshot_check=counts, disk_step=args.disk_step)
        if remote_out:
            publish(out, args.out)
    except (ConfigurationError, ValueError) as e:
        out.mkdir(parents=True, exist_ok=True)
        (out / ERROR_FILE).write_text(f"{e}\n", encoding="utf-8")
        if remote_out:
            with contextlib.suppress(JobStorageError):
                publish(out, args.out)  # error.txt only: no plan file was written
        print(f"plan_job: no plan: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        if spark is not None:
            spark.stop()
    summary = doc["summary"]
    print(
        f"[plan_job] {summary['partitions_moved']} partitions to move, {summary['replica_moves']} replica moves "
        f"(lower bound {summary['lower_bound']}), {summary['leader_changes']} leader changes -> {args.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
