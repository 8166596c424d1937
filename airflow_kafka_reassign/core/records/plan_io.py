"""The plan directory: what the planner writes and what execution, cancel and the report read.

Layout (``format_version`` 1; see docs/formats.md)::

    PLAN_DIR/
      plan.json             the plan: every move with its expected current replicas, its
                            target replicas and allow_rf_change, and each moved topic's
                            partition count in the snapshot (ReassignmentPlan JSON);
                            the file ExecuteReassignment reads
      rollback.json         the rollback plan (every moved partition back to its current
                            replicas), same format
      reassignment.json     plan.json in Kafka's own format, for
                            ``kafka-reassign-partitions --execute --reassignment-json-file``
      rollback-kafka.json   rollback.json in Kafka's own format
      metrics.json          {"format_version", "summary", "request", "lower_bound_parts",
                             "before", "after", "warnings", "excluded_in_flight", "snapshot",
                             "job" (Spark job: master, stage durations; absent otherwise)}
      error.txt             instead of the above, when the input cannot give a sound plan

``plan.json`` and ``rollback.json`` are written last-but-one and ``metrics.json`` last, each
through a temporary file and a rename, so a reader that finds ``metrics.json`` finds a whole
plan. The writers work on a local directory (the planner's driver); the readers take a local
path or any :class:`~airflow_kafka_reassign.core.records.store.Store` (object storage, through
``airflow_kafka_reassign.plan_storage``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_kafka_reassign.core.planner.goals import PlanResult
from airflow_kafka_reassign.core.records.store import Store, as_store
from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan, TopicState

FORMAT_VERSION = 1
PLAN_FILE = "plan.json"
ROLLBACK_FILE = "rollback.json"
KAFKA_PLAN_FILE = "reassignment.json"
KAFKA_ROLLBACK_FILE = "rollback-kafka.json"
METRICS_FILE = "metrics.json"
#: Written instead of a plan when the input cannot give a sound plan (the reason).
ERROR_FILE = "error.txt"


def _write(path: Path, text: str) -> None:
    _write_bytes(path, [text.encode()])


def _write_bytes(path: Path, chunks: Sequence[bytes]) -> None:
    """``chunks`` one after the other into ``path``, through a temporary file and a rename."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.writelines(chunks)
    os.replace(tmp, path)


def metrics_document(result: PlanResult, *, snapshot: str | None = None) -> dict[str, Any]:
    """The JSON document of ``metrics.json`` (everything about the plan but its moves)."""
    return {
        "format_version": FORMAT_VERSION,
        "summary": result.summary(),
        "moves_ratio": None if result.moves_ratio == float("inf") else round(result.moves_ratio, 4),
        "request": result.request.model_dump(mode="json"),
        "lower_bound_parts": result.lower_bound_parts,
        "before": result.before.model_dump(mode="json"),
        "after": result.after.model_dump(mode="json"),
        "warnings": list(result.warnings),
        "excluded_in_flight": [f"{tp.topic}-{tp.partition}" for tp in result.excluded_in_flight],
        "snapshot": snapshot,
        **({"disk": result.disk.model_dump(mode="json"), "bytes_ratio": _ratio(result.bytes_ratio)} if result.disk else {}),
        **({"ingress": result.ingress.model_dump(mode="json")} if result.ingress else {}),
        **({"tiered": result.tiered.model_dump(mode="json")} if result.tiered else {}),
        **({"log_dirs": result.log_dirs.model_dump(mode="json")} if result.log_dirs else {}),
    }


def _ratio(x: float | None) -> float | None:
    return None if x is None or x == float("inf") else round(x, 4)


def write_plan_dir(result: PlanResult, out: str | Path, *, snapshot: str | None = None) -> Path:
    """Write ``result`` as a plan directory at ``out`` (created if missing); returns the path."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    (d / METRICS_FILE).unlink(missing_ok=True)
    (d / ERROR_FILE).unlink(missing_ok=True)
    plan = result.plan
    rollback = plan.rollback()
    _write(d / KAFKA_PLAN_FILE, plan.to_kafka_json())
    _write(d / KAFKA_ROLLBACK_FILE, rollback.to_kafka_json())
    _write(d / PLAN_FILE, plan.model_dump_json())
    _write(d / ROLLBACK_FILE, rollback.model_dump_json())
    _write(d / METRICS_FILE, json.dumps(metrics_document(result, snapshot=snapshot), indent=1, sort_keys=True))
    return d


def partition_counts_json(counts: Mapping[str, int] | None) -> bytes:
    """``partition_counts`` as ``ReassignmentPlan.model_dump_json`` writes it (topics in the
    mapping's order; ``null`` when not recorded)."""
    if counts is None:
        return b"null"
    return json.dumps({t: int(n) for t, n in counts.items()}, separators=(",", ":"), ensure_ascii=False).encode()


def topic_ids_json(ids: Mapping[str, str] | None) -> bytes:
    """``topic_ids`` as ``ReassignmentPlan.model_dump_json`` writes it, with the key before it
    (``,"topic_ids":{...}``; topics in the mapping's order), or nothing when not recorded (the
    model leaves the key out then)."""
    if ids is None:
        return b""
    return b',"topic_ids":' + json.dumps({t: str(i) for t, i in ids.items()}, separators=(",", ":"),
                                          ensure_ascii=False).encode()


def write_plan_fragments(
    fragments: Sequence[tuple[bytes, bytes, bytes, bytes]],
    out: str | Path,
    *,
    partition_counts: Mapping[str, int] | None = None,
    topic_ids: Mapping[str, str] | None = None,
) -> Path:
    """The four plan files from each move's JSON fragments as UTF-8 (plan, rollback, Kafka
    plan, Kafka rollback: :func:`~airflow_kafka_reassign.core.planner.staged.move_fragments`),
    in plan order. What the Spark job's driver does, so a million replicas' moves never become
    pydantic objects (or even strings) on one machine; :func:`write_metrics` completes the
    directory.

    ``partition_counts`` (every moved topic's partition count in the snapshot, sorted by topic)
    goes into ``plan.json`` and ``rollback.json``, as :class:`ReassignmentPlan` writes it, and so
    does ``topic_ids`` (every moved topic's id in the snapshot, KIP-516, sorted by topic: execution
    drops the moves of a topic re-created since); Kafka's own files carry only the moves.

    A "fragment" may also be several moves' fragments joined with ``,`` (the Spark job sends
    one per task: :data:`FileParts`, put in plan order by :func:`plan_file_parts`): the files are
    the same. Empty fragments are skipped."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    (d / METRICS_FILE).unlink(missing_ok=True)
    (d / ERROR_FILE).unlink(missing_ok=True)
    heads = (b'{"version":1,"moves":[', b'{"version":1,"moves":[', b'{"version":1,"partitions":[',
             b'{"version":1,"partitions":[')
    ours = b'],"partition_counts":' + partition_counts_json(partition_counts) + topic_ids_json(topic_ids) + b"}"
    tails = (ours, ours, b"]}", b"]}")
    names = (PLAN_FILE, ROLLBACK_FILE, KAFKA_PLAN_FILE, KAFKA_ROLLBACK_FILE)
    for k in (2, 3, 0, 1):
        _write_bytes(d / names[k], [heads[k], b",".join(f[k] for f in fragments if f[k]), tails[k]])
    return d


# -- the Spark job's finish tasks send their moves as parts of the four files (see write_plan_fragments) --


FileParts = tuple[list[str], int, tuple[bytes, bytes, bytes, bytes], tuple[list[int], ...], list[int]]
"""One ``finish`` task's moves as parts of the four plan files: its topics with moves (in the
task's order), the partitions it moves, and per file the UTF-8 of the topics' JSON
fragments joined with ``,`` (a fragment of the file itself, see :func:`write_plan_fragments`)
with, per topic, the offset where its part ends; last, each topic's partition count in the
snapshot (plan.json's ``partition_counts``). The driver writes the bytes as they come:
no decoding, joining or encoding of 40 MB of JSON per million replicas on one core."""


def file_parts(topics: list[tuple[str, list[tuple[str, str, str, str]]]],
               counts: list[int] | None = None) -> FileParts:
    """:data:`FileParts` of ``(topic, its moves' fragments)`` in the task's order, with the
    topics' partition counts (``counts``, in the same order; default: unknown, ``-1``)."""
    blobs: list[bytes] = []
    ends: list[list[int]] = []
    for k in range(4):
        parts = [",".join(f[k] for f in fragments).encode() for _, fragments in topics]
        offsets, end = [], -1
        for part in parts:
            end += len(part) + 1
            offsets.append(end)
        blobs.append(b",".join(parts))
        ends.append(offsets)
    sizes = list(counts) if counts is not None else [-1] * len(topics)
    if len(sizes) != len(topics):
        raise ValueError(f"file_parts: {len(topics)} topic(s) but {len(sizes)} partition count(s)")
    return ([t for t, _ in topics], sum(len(f) for _, f in topics), (blobs[0], blobs[1], blobs[2], blobs[3]),
            tuple(ends), sizes)


def plan_partition_counts(tasks: list[FileParts]) -> dict[str, int] | None:
    """plan.json's ``partition_counts`` (sorted by topic) from the ``finish`` tasks'
    :data:`FileParts`; ``None`` when a task did not know a count."""
    counts = {t: n for task in tasks for t, n in zip(task[0], task[4], strict=True)}
    if any(n < 1 for n in counts.values()):
        return None
    return dict(sorted(counts.items()))


def plan_topic_ids(tasks: list[FileParts], topics: Iterable[TopicState]) -> dict[str, str] | None:
    """plan.json's ``topic_ids`` (sorted by topic): the id (KIP-516) of each topic the ``finish``
    tasks moved (:data:`FileParts`), from the snapshot's ``topics`` (topics.parquet); ``None`` when
    the snapshot knows none of them (an older snapshot: execution then takes the ids it sees first)."""
    moved = {t for task in tasks for t in task[0]}
    ids = {t.name: t.topic_id for t in topics if t.name in moved and t.topic_id is not None}
    return dict(sorted(ids.items())) or None


def plan_file_parts(tasks: list[FileParts]) -> tuple[int, list[tuple[bytes, bytes, bytes, bytes]]]:
    """The partitions moved and the plan files' parts in plan order (topics by name) from the
    ``finish`` tasks' :data:`FileParts`: the tasks' bytes whole when each task's topics are
    ascending and the tasks' ranges do not interleave (row groups read in order: the usual
    case), else cut topic by topic and sorted."""
    tasks = sorted((t for t in tasks if t[0]), key=lambda t: t[0][0])
    moved = sum(t[1] for t in tasks)
    names = [name for t in tasks for name in t[0]]
    if all(a < b for a, b in zip(names, names[1:], strict=False)):
        return moved, [t[2] for t in tasks]
    cut: list[tuple[str, tuple[bytes, bytes, bytes, bytes]]] = []
    for topics, _, blobs, ends, _ in tasks:
        starts = [[0, *(e + 1 for e in ends[k][:-1])] for k in range(4)]
        for j, topic in enumerate(topics):
            four = tuple(blobs[k][starts[k][j]:ends[k][j]] for k in range(4))
            cut.append((topic, four))  # type: ignore[arg-type]
    cut.sort(key=lambda x: x[0])
    return moved, [four for _, four in cut]


def write_metrics(
    result: PlanResult,
    out: str | Path,
    *,
    partitions_moved: int,
    snapshot: str | None = None,
    job: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``metrics.json`` (written last: it marks the directory complete); returns its content."""
    doc = metrics_document(result, snapshot=snapshot)
    doc["summary"]["partitions_moved"] = partitions_moved
    if job is not None:
        doc["job"] = job
    _write(Path(out) / METRICS_FILE, json.dumps(doc, indent=1, sort_keys=True))
    return doc


PlanLocation = Store | str | Path


def _require(location: PlanLocation, name: str) -> bytes:
    store = as_store(location)
    data = store.read(name)
    if data is None:
        base = store.uri.rstrip("/")
        raise FileNotFoundError(
            f"{base}/{name} does not exist: {base} is not a complete plan directory (it needs {PLAN_FILE}, "
            f"{ROLLBACK_FILE} and {METRICS_FILE}); give the plan_uri that PlanReassignment pushed to XCom, or run "
            "PlanReassignment or `airflow-kafka-reassign plan` again"
        )
    return data


def read_plan(plan_dir: PlanLocation) -> ReassignmentPlan:
    """The plan of a plan directory (``plan.json``), validated (a hand-edited file fails with the partition named).

    ``plan_dir`` is a local path or any :class:`~airflow_kafka_reassign.core.records.store.Store` (object storage)."""
    _require(plan_dir, METRICS_FILE)
    return ReassignmentPlan.model_validate_json(_require(plan_dir, PLAN_FILE))


def plan_digest(data: bytes) -> str:
    """The content hash of a plan: ``sha256:`` and the hex SHA-256 of its ``plan.json`` bytes.

    An approval names it; execution refuses a plan whose hash differs (edited after approval)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read_plan_with_digest(plan_dir: PlanLocation) -> tuple[ReassignmentPlan, str]:
    """:func:`read_plan` and the :func:`plan_digest` of the very bytes it parsed."""
    _require(plan_dir, METRICS_FILE)
    data = _require(plan_dir, PLAN_FILE)
    return ReassignmentPlan.model_validate_json(data), plan_digest(data)


def read_rollback(plan_dir: PlanLocation) -> ReassignmentPlan:
    return ReassignmentPlan.model_validate_json(_require(plan_dir, ROLLBACK_FILE))


def read_metrics(plan_dir: PlanLocation) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_require(plan_dir, METRICS_FILE))
    if data.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{as_store(plan_dir).uri.rstrip('/')}/{METRICS_FILE} has format_version {data.get('format_version')!r}; "
            f"this version reads {FORMAT_VERSION}: plan again with this version"
        )
    return data
