"""What the Spark plan job reads of a snapshot (docs/formats.md), and how it hands ``partitions.parquet`` to the
executors.

* On the driver: ``brokers.parquet`` and ``topics.parquet`` (:func:`read_small_tables`), and the files against the
  counts ``snapshot.json`` records (:func:`check_snapshot_files` with pyarrow, :func:`check_snapshot_on_spark` for
  a URI only Spark's file systems read; the rules are core/guards/completeness.py's).
* For the executors: ``partitions.parquet``'s row groups (:class:`RowGroups`, :func:`row_group_index`), cut into
  splits of whole topics (:func:`row_group_splits`, or :func:`group_splits` along the quota groups), read with
  pyarrow from the file or from its bytes broadcast by the driver (:func:`read_row_groups`,
  :func:`read_local_file`, :func:`fetch_partitions_file`), and grouped into each topic's checked rows
  (:func:`topic_groups`), or, for the usual topic (none of its partitions being reassigned, nothing in the
  request singling it out), its columns (:func:`topic_inputs`: what ``prepare`` and ``place`` read).

PySpark is imported only inside the functions that take a session; the executors import this module for
:func:`topic_inputs`, :func:`topic_groups`, :func:`read_row_groups` and :func:`topics_between`.
spark/plan_job.py runs the stages over what this module reads.
"""

from __future__ import annotations

import json
import sys
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_kafka_reassign.core.guards.completeness import PartitionIds, compare_counts, mismatch_message
from airflow_kafka_reassign.core.planner.goals import PartitionRow, check_partition_row
from airflow_kafka_reassign.core.planner.quotas import QuotaGroup
from airflow_kafka_reassign.core.planner.staged import PlainRows
from airflow_kafka_reassign.core.vocabulary.models import Broker, TopicState
from airflow_kafka_reassign.spark.job_storage import SNAPSHOT_META

# -- on the driver: the small tables and the counts check --------------------------------------------------


def _unchecked(where: str, why: str) -> str:
    print(f"[plan_job] warning: snapshot {where} {why}: its partition counts are not checked; take a new "
          "snapshot to have them checked", file=sys.stderr, flush=True)
    return "unchecked"


def check_snapshot_files(base: str) -> str:
    """A local snapshot folder (a path or ``file://``) against the counts its snapshot.json
    records, with pyarrow on the driver: ``"checked"``, or ``"unchecked"`` (a warning) for a
    snapshot that records none; ``ValueError`` naming the topic and the counts when they disagree."""
    from airflow_kafka_reassign.core.records.snapshot_io import check_files, read_meta  # the driver only: not in workers

    folder = Path(urlparse(base).path if base.startswith("file://") else base)
    if not (folder / SNAPSHOT_META).is_file():
        return _unchecked(base, f"has no {SNAPSHOT_META}")
    meta = read_meta(folder)
    if meta.get("check") is None:
        return _unchecked(base, "records no check (written by an older version)")
    check_files(folder, meta=meta)
    return "checked"


def check_snapshot_on_spark(spark: Any, base: str, topics: Sequence[TopicState]) -> str:
    """:func:`check_snapshot_files` for a snapshot that only Spark's file systems read (``hdfs://``,
    ``s3a://``): snapshot.json and the counts per topic read through Spark."""
    from pyspark.sql import functions as F  # noqa: N812

    from airflow_kafka_reassign.core.records.snapshot_io import recorded_check

    try:
        text = spark.read.text(f"{base}/{SNAPSHOT_META}", wholetext=True).head()[0]
    except Exception:  # noqa: BLE001 (Spark's AnalysisException: no such file)
        return _unchecked(base, f"has no {SNAPSHOT_META}")
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{base}/{SNAPSHOT_META} is not valid JSON ({e}); take a new snapshot") from None
    if meta.get("check") is None:
        return _unchecked(base, "records no check (written by an older version)")
    record = recorded_check(meta, base)
    assert record is not None
    df = spark.read.parquet(f"{base}/partitions.parquet")
    grouped = df.groupBy("topic").agg(F.count("*"), F.countDistinct("partition"), F.min("partition"),
                                      F.max("partition")).collect()
    totals = df.agg(F.sum(F.size("replicas")), F.sum(F.col("replica_sizes").isNull().cast("int"))).head()
    problems = compare_counts(
        record,
        topics={t.name: t.partition_count for t in topics},
        partitions={r[0]: PartitionIds(int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in grouped},
        replicas=int(totals[0] or 0),
        sizes_complete=not totals[1],
    )
    if problems:
        raise ValueError(mismatch_message(base, problems))
    return "checked"


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
            name=r["name"], topic_id=r.get("topic_id"), internal=r["internal"], partition_count=r["partition_count"],
            replication_factor=r["replication_factor"], configs=dict(r["configs"] or {}),
        )
        for r in rows["topics"]
    ]
    return brokers, topics


# -- partitions.parquet: each topic's rows ------------------------------------------------------------------


#: the columns of partitions.parquet the planner reads (PartitionRow's fields, in order)
ROW_COLUMNS = ("topic", "partition", "replicas", "adding_replicas", "removing_replicas", "replica_sizes")


_TUPLE_COLUMNS = ("replicas", "adding_replicas", "removing_replicas")


def _tuples(col: pa.Array) -> list[tuple[int, ...]]:
    """A list<int> column as tuples (null: empty), through its flat values (cheaper than to_pylist)."""
    n = len(col)
    if col.null_count:  # a null slot may cover values: the plain way
        return [tuple(x or ()) for x in col.to_pylist()]
    flat = col.flatten()
    if len(flat) == 0:
        return [()] * n
    values = flat.to_pylist()
    offsets = col.offsets.to_pylist()
    base = offsets[0]
    return [tuple(values[offsets[i] - base:offsets[i + 1] - base]) for i in range(n)]


def topic_groups(
    batches: Iterable[pa.RecordBatch], *, check: bool = True
) -> Iterator[tuple[str, list[PartitionRow] | str]]:
    """(topic, its rows sorted by partition) from Arrow batches where each topic's rows are
    together; a topic may span batches. A row that fails the model's checks gives (topic,
    error message). A topic whose rows are not together comes out twice (the driver checks).
    ``check=False``: the rows were checked already (the plan job's ``prepare`` read the same
    rows before ``place`` reads them again): no row is checked twice."""
    checked = check_partition_row if check else _as_is
    current: str | None = None
    rows: list[PartitionRow] = []
    error: str | None = None
    for batch in batches:
        cols = [
            _tuples(batch.column(name)) if name in _TUPLE_COLUMNS else batch.column(name).to_pylist()
            for name in ROW_COLUMNS
        ]
        for topic, partition, replicas, adding, removing, sizes in zip(*cols, strict=True):
            if topic != current:
                if current is not None:
                    yield current, error if error is not None else _by_partition(rows)
                current, rows, error = topic, [], None
            if error is not None:
                continue
            try:
                if sizes is not None and len(sizes) != len(replicas):
                    raise ValueError(
                        f"partition {topic}-{partition}: replica_sizes has {len(sizes)} entries "
                        f"for {len(replicas)} replicas"
                    )
                rows.append(checked(PartitionRow(
                    topic, partition, replicas, adding, removing,
                    None if sizes is None else dict(zip(replicas, sizes, strict=True)),
                )))
            except ValueError as e:
                error = str(e)
    if current is not None:
        yield current, error if error is not None else _by_partition(rows)


def _nonempty(col: pa.Array) -> np.ndarray:
    """Per row of a list<int> column: whether it has items (null: none)."""
    if col.null_count:
        return np.fromiter((bool(x) for x in col.to_pylist()), dtype=bool, count=len(col))
    return np.diff(col.offsets.to_numpy()) > 0


def _largest(col: pa.Array) -> list[int | None]:
    """Per row of a list<int> column: its largest item (null or empty: ``None``), as
    :func:`~airflow_kafka_reassign.core.planner.metrics.partition_size` gives it of the row's sizes."""
    n = len(col)
    if col.null_count == n:
        return [None] * n
    if col.null_count:  # a null slot may cover values: the plain way
        return [max(x) if x else None for x in col.to_pylist()]
    offsets = col.offsets.to_numpy()
    starts = offsets[:-1] - offsets[0]
    full = np.diff(offsets) > 0
    if not full.any():
        return [None] * n
    values = col.flatten().to_numpy()
    largest = np.maximum.reduceat(values, starts[full]).tolist()  # empty rows hold no values: skipped
    if full.all():
        return largest  # type: ignore[no-any-return]
    out: list[int | None] = [None] * n
    for i, v in zip(np.flatnonzero(full).tolist(), largest, strict=True):
        out[i] = v
    return out


def _unsound(batch: pa.RecordBatch, replicas: pa.Array) -> np.ndarray:
    """Per row: whether it might fail :func:`check_partition_row` (no topic, a negative or missing
    partition number, no replicas, a negative broker id, a broker listed twice). A row that passes
    here passes there (it has no adding or removing replicas: the caller sees to that)."""
    n = batch.num_rows
    topic = batch.column("topic")
    bad = pc.fill_null(pc.equal(topic, ""), True).to_numpy(zero_copy_only=False).copy()
    partition = batch.column("partition")
    bad |= pc.fill_null(pc.less(partition, 0), True).to_numpy(zero_copy_only=False)
    if replicas.null_count:
        return bad | np.ones(n, dtype=bool)  # the plain way for the whole batch (a null slot may cover values)
    offsets = replicas.offsets.to_numpy()
    lens = np.diff(offsets)
    bad |= lens == 0
    values = replicas.flatten().to_numpy()
    rows = np.repeat(np.arange(n), lens)
    bad[rows[values < 0]] = True
    order = np.lexsort((values, rows))  # a row's brokers in order: one listed twice is next to itself
    v, r = values[order], rows[order]
    bad[r[1:][(v[1:] == v[:-1]) & (r[1:] == r[:-1])]] = True
    return bad  # type: ignore[no-any-return]


def topic_inputs(
    batches: Iterable[pa.RecordBatch], plain: Callable[[str], bool], *, check: bool = False, max_rf: int | None = None,
) -> Iterator[tuple[str, list[PartitionRow] | PlainRows | str]]:
    """Each topic's rows, as :func:`topic_groups` gives them, or as columns: a topic for which
    ``plain(topic)`` holds (:func:`~airflow_kafka_reassign.core.planner.staged.plain_topic`), none of
    whose rows is being reassigned, with no partition listed twice and at most ``max_rf`` replicas
    per partition, comes as :class:`PlainRows` (its columns, each replica list once, the sizes as one
    replica's bytes: no :class:`PartitionRow` and no sizes dict per partition); any other topic as
    its rows (or error), exactly as :func:`topic_groups` gives them. ``check=True`` (``prepare``):
    a plain topic's rows pass :func:`check_partition_row` (:func:`_unsound`; a topic with a row that
    might not is read the checked way); ``check=False``: the rows were checked already (``place``)."""
    current: str | None = None
    parts: list[tuple[int, int, dict[str, Any]]] = []  # (first row, end, the batch's columns) of the topic

    def done() -> Iterator[tuple[str, list[PartitionRow] | PlainRows | str]]:
        assert current is not None
        if plain(current) and not any(cols["moving"][i:j].any() for i, j, cols in parts):
            partitions = [p for i, j, cols in parts for p in cols["partition"][i:j]]
            replicas = [r for i, j, cols in parts for r in cols["replicas"][i:j]]
            sizes = [s for i, j, cols in parts for s in cols["sizes"][i:j]]
            if any(a >= b for a, b in zip(partitions, partitions[1:], strict=False)):
                order = sorted(range(len(partitions)), key=partitions.__getitem__)
                partitions, replicas, sizes = ([xs[k] for k in order] for xs in (partitions, replicas, sizes))
            twice = any(a == b for a, b in zip(partitions, partitions[1:], strict=False))
            if not twice and (max_rf is None or max(map(len, replicas)) <= max_rf):
                yield current, PlainRows(partitions, replicas, sizes)
                return
        batches = [cols["batch"].slice(i, j - i) for i, j, cols in parts]
        yield from topic_groups(batches, check=check)

    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        replicas = batch.column("replicas")
        sizes = batch.column("replica_sizes")
        moving = _nonempty(batch.column("adding_replicas")) | _nonempty(batch.column("removing_replicas"))
        # rows whose sizes do not match their replicas go the way topic_groups reads them (which says so)
        counted = np.diff(sizes.offsets.to_numpy()) if not sizes.null_count else None
        if counted is not None and (counted != np.diff(replicas.offsets.to_numpy())).any():
            moving = np.ones(n, dtype=bool)
        elif counted is None and sizes.null_count != n:
            moving |= np.fromiter((x is not None and len(x) != len(r) for x, r in
                                   zip(sizes.to_pylist(), replicas.to_pylist(), strict=True)), dtype=bool, count=n)
        if check:
            moving |= _unsound(batch, replicas)
        cols = {"batch": batch, "moving": moving, "partition": batch.column("partition").to_pylist(),
                "replicas": _tuples(replicas), "sizes": _largest(sizes)}
        col = batch.column("topic")
        cuts = np.flatnonzero(pc.not_equal(col.slice(1), col.slice(0, n - 1)).to_numpy(zero_copy_only=False)) + 1
        starts = [0, *cuts.tolist()]
        for i, j, topic in zip(starts, [*starts[1:], n], col.take(pa.array(starts)).to_pylist(), strict=True):
            if topic != current:
                if current is not None:
                    yield from done()
                current, parts = topic, []
            parts.append((i, j, cols))
    if current is not None:
        yield from done()


def _as_is(row: PartitionRow) -> PartitionRow:
    return row


def _by_partition(rows: list[PartitionRow]) -> list[PartitionRow]:
    if any(a.partition > b.partition for a, b in zip(rows, rows[1:], strict=False)):
        rows.sort(key=lambda r: r.partition)
    return rows


# -- partitions.parquet's row groups, split for the executors -----------------------------------------------


def read_row_groups(path: str, row_groups: list[int], data: bytes | None = None) -> Iterator[pa.RecordBatch]:
    """The planner's columns of ``row_groups`` of a Parquet file: at ``path`` (local), or ``data``."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(pa.BufferReader(data) if data is not None else path)
    yield from f.iter_batches(batch_size=65536, row_groups=row_groups, columns=list(ROW_COLUMNS))


#: The largest partitions.parquet the driver reads and broadcasts (about 25M replicas).
MAX_BROADCAST_BYTES = 256 * 1024 * 1024


def local_partitions_file(base: str) -> str | None:
    """The path of the snapshot's partitions.parquet when ``base`` is a plain path, ``None`` for
    a URI (``file://`` included: a URI is read through Spark's file systems)."""
    if "://" in base:
        return None
    return str(Path(base, "partitions.parquet").resolve())


def read_local_file(path: str) -> bytes | None:
    """The bytes of a local file, or ``None`` when it is missing or over :data:`MAX_BROADCAST_BYTES`."""
    try:
        if Path(path).stat().st_size > MAX_BROADCAST_BYTES:
            return None
        return Path(path).read_bytes()
    except OSError:
        return None


def fetch_partitions_file(spark: Any, base: str) -> bytes | None:
    """partitions.parquet's bytes through Spark's file systems (any URI Spark reads, with its
    credentials: ``s3a://``, ``hdfs://``), or ``None`` when it is bigger than
    :data:`MAX_BROADCAST_BYTES` or cannot be read that way."""
    try:
        df = spark.read.format("binaryFile").load(f"{base}/partitions.parquet")
        head = df.select("length").head()  # the size first: the content is only read when it fits
        if head is None or head[0] > MAX_BROADCAST_BYTES:
            return None
        return bytes(df.select("content").head()[0])
    except Exception as e:  # noqa: BLE001 (any failure: Spark's reader takes over and reports it)
        print(f"[plan_job] reading partitions.parquet whole failed ({type(e).__name__}); using Spark's reader",
              file=sys.stderr, flush=True)
        return None


@dataclass(frozen=True)
class RowGroups:
    """``partitions.parquet``'s row groups as the executors read them: the file (``""``: its
    bytes are broadcast) and per row group its first and last topic and its rows."""

    path: str
    topics: list[tuple[str, str] | None]  # None: an empty row group
    rows: list[int]


def row_group_index(base: str, data: bytes | None = None) -> RowGroups | None:
    """:class:`RowGroups` of the snapshot (the local file, or ``data``: the file's bytes);
    ``None`` (read through Spark instead) when there is no such file, or its row-group
    statistics do not show topics in ascending order with none spanning two groups (a file
    written otherwise than by ``write_snapshot``)."""
    import pyarrow.parquet as pq

    path = "" if data is not None else local_partitions_file(base)
    if path is None:
        return None
    try:
        md = pq.ParquetFile(pa.BufferReader(data) if data is not None else path).metadata
        col = md.schema.names.index("topic")
    except (OSError, ValueError, pa.ArrowException):
        return None
    topics: list[tuple[str, str] | None] = []
    rows: list[int] = []
    last: str | None = None
    for i in range(md.num_row_groups):
        group = md.row_group(i)
        stats = group.column(col).statistics
        rows.append(group.num_rows)
        if group.num_rows == 0:
            topics.append(None)
            continue
        if stats is None or not stats.has_min_max or (last is not None and not stats.min > last):
            return None
        topics.append((stats.min, stats.max))
        last = stats.max
    if not rows:
        return None
    return RowGroups(path, topics, rows)


def _runs(sizes: Sequence[int], n_parts: int) -> list[list[int]]:
    """Indices of ``sizes`` cut into about ``n_parts`` consecutive runs of similar totals (an
    item goes to the run its middle falls in)."""
    total = sum(sizes)
    runs: list[list[int]] = []
    before = 0
    last = -1
    for i, n in enumerate(sizes):
        k = (2 * before + n) * n_parts // max(1, 2 * total)
        if k != last:
            runs.append([])
            last = k
        runs[-1].append(i)
        before += n
    return runs


def row_group_splits(index: RowGroups, n_parts: int) -> list[tuple[str, list[int]]]:
    """The row groups cut into about ``n_parts`` runs of similar row counts, for executors to
    read directly with pyarrow."""
    return [(index.path, run) for run in _runs(index.rows, n_parts)]


GroupSplit = tuple[str, list[int], "str | None", "str | None", list[QuotaGroup]]
"""A task of the place stage when it settles quota groups: (file, row groups, its topics from
(inclusive), to (exclusive; ``None``: no bound), its quota groups)."""


def group_splits(index: RowGroups, groups: Sequence[QuotaGroup], n_parts: int) -> list[GroupSplit]:
    """Consecutive quota groups packed into about ``n_parts`` tasks of similar replica counts,
    each with the row groups holding its range of topics. Ranges are cut where a task's first
    group starts, so every topic of the file (in a group or not) is in exactly one task."""
    runs = _runs([sum(ld.replicas for ld in g.loads) for g in groups], n_parts)
    starts = [min(ld.topic for ld in groups[run[0]].loads) for run in runs]
    out: list[GroupSplit] = []
    for k, run in enumerate(runs):
        lo = starts[k] if k else None
        hi = starts[k + 1] if k + 1 < len(runs) else None
        row_groups = [
            i for i, t in enumerate(index.topics)
            if t is not None and (lo is None or t[1] >= lo) and (hi is None or t[0] < hi)
        ]
        out.append((index.path, row_groups, lo, hi, [groups[g] for g in run]))
    return out


def topics_between(batches: Iterable[pa.RecordBatch], lo: str | None, hi: str | None) -> Iterator[pa.RecordBatch]:
    """The rows of ``batches`` (sorted by topic) whose topic is in ``[lo, hi)`` (``None``: no bound)."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        col = batch.column("topic")
        if (lo is None or col[0].as_py() >= lo) and (hi is None or col[batch.num_rows - 1].as_py() < hi):
            yield batch
            continue
        topics = col.to_pylist()
        i = bisect_left(topics, lo) if lo is not None else 0
        j = bisect_left(topics, hi) if hi is not None else len(topics)
        if i < j:
            yield batch.slice(i, j - i)
