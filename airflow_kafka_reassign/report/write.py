"""``write_report``: a plan directory and its snapshot -> ``report/report.html`` plus PNG charts."""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_kafka_reassign.core.records import plan_io
from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.report import charts, page
from airflow_kafka_reassign.report.view import (
    Assignment,
    PlanView,
    assignment_from_snapshot,
    broker_matrix,
    plan_view,
    rack_loads,
    rack_matrix,
    read_assignment,
    read_plan_moves,
    request_brokers,
)

#: Sub-directory of the plan directory the report is written to.
REPORT_DIR = "report"
REPORT_FILE = "report.html"


def _assignment(snapshot: ClusterSnapshot | str | Path | None, metrics: dict[str, Any]) -> tuple[Assignment, str]:
    if isinstance(snapshot, ClusterSnapshot):
        return assignment_from_snapshot(snapshot), "in memory"
    if snapshot is not None:
        return read_assignment(snapshot), str(snapshot)
    recorded = metrics.get("snapshot")
    if not recorded or "://" in str(recorded) or not Path(recorded).is_dir():
        raise ConfigurationError(
            f"the plan's metrics.json records snapshot {recorded!r}, which is not a local snapshot directory: "
            "pass the snapshot (a ClusterSnapshot or a snapshot directory) to write_report(plan_dir, snapshot)"
        )
    return read_assignment(recorded), str(recorded)


def _mismatch(metrics: dict[str, Any], assignment: Assignment) -> str | None:
    """Why the snapshot is not the one the plan was made from (``None``: consistent)."""
    before = metrics.get("before") or {}
    partitions, replicas = before.get("partitions"), before.get("replicas")
    have_p, have_r = assignment.partition_count, len(assignment.replicas)
    if partitions is None or (partitions == have_p and replicas == have_r):
        return None
    return (
        f"the snapshot has {have_p:,} partitions and {have_r:,} replicas, the plan was made from {partitions:,} and "
        f"{replicas:,}: this report compares the plan with another snapshot; pass the snapshot the plan names"
    )


def _img(path: Path, embed: bool) -> str:
    if not embed:
        return path.name
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def write_report(
    plan_dir: str | Path,
    snapshot: ClusterSnapshot | str | Path | None = None,
    *,
    out_dir: str | Path | None = None,
    embed_images: bool = True,
    max_matrix_brokers: int = 40,
    max_listed: int = 200,
) -> Path:
    """Write the plan report of ``plan_dir`` and return the path of its ``report.html``.

    ``snapshot``: the snapshot the plan was made from, as a :class:`ClusterSnapshot` or a
    snapshot directory (``core.records.snapshot_io`` format); ``None`` uses the directory the plan's
    ``metrics.json`` records. The report goes to ``out_dir`` (default ``PLAN_DIR/report/``):
    ``report.html`` and one PNG per chart. ``embed_images`` (default) also puts the charts in
    the page as data URIs, so ``report.html`` alone is complete (copy it anywhere, serve it
    from object storage); with ``False`` it refers to the PNG files next to it.
    ``max_matrix_brokers``: above that many brokers the broker-to-broker matrix shows the
    busiest brokers and folds the rest into one row and column (the rack matrix shows all).
    ``max_listed``: at most that many partitions are listed by name in each list.

    Raises ``FileNotFoundError`` for an incomplete plan directory and
    :class:`~airflow_kafka_reassign.exceptions.ConfigurationError` when no snapshot can be found.
    """
    plan_path = Path(plan_dir)
    metrics = plan_io.read_metrics(plan_path)
    plan_file = plan_path / plan_io.PLAN_FILE
    if not plan_file.is_file():
        raise FileNotFoundError(f"{plan_file} does not exist: {plan_path} is not a complete plan directory")
    moves = read_plan_moves(plan_file)
    assignment, snapshot_label = _assignment(snapshot, metrics)
    replicas_before, _, _ = assignment.loads()
    removed, added = request_brokers(metrics.get("request") or {}, assignment.brokers(), replicas_before)
    view = plan_view(assignment, moves, removed=removed, added=added)

    out = Path(out_dir) if out_dir is not None else plan_path / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    context = _context(metrics, view, assignment, out, plan_path, snapshot_label, embed_images,
                       max_matrix_brokers=max_matrix_brokers, limit=max_listed)
    target = out / REPORT_FILE
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(page.render(**context), encoding="utf-8")
    os.replace(tmp, target)
    return target


def _context(
    metrics: dict[str, Any],
    view: PlanView,
    assignment: Assignment,
    out: Path,
    plan_path: Path,
    snapshot_label: str,
    embed: bool,
    *,
    max_matrix_brokers: int,
    limit: int,
) -> dict[str, Any]:
    """What ``templates/report.html.j2`` shows, the charts drawn into ``out`` on the way."""
    summary = metrics.get("summary") or {}
    request = metrics.get("request") or {}
    figures: dict[str, Any] = {"cost": _img(charts.cost_chart(
        replica_moves=view.replica_moves,
        lower_bound=int(summary.get("lower_bound", 0)),
        leader_changes=view.leader_changes,
        leader_lower_bound=int(summary.get("leader_changes_lower_bound", 0)),
        path=out / "cost.png",
    ), embed)}
    order = charts.broker_order(view)
    loads = [
        ("replicas.png", "replicas per broker", "replicas", view.replicas_before, view.replicas_after, False),
        ("leaders.png", "preferred leaders per broker (first replica; what a preferred-leader election makes leaders)",
         "preferred leaders", view.leaders_before, view.leaders_after, False),
    ]
    if view.bytes_before is not None and view.bytes_after is not None:
        loads.append(("bytes.png", "bytes per broker", "bytes", view.bytes_before, view.bytes_after, True))
    figures["loads"] = [
        (_img(charts.broker_load_chart(view, before, after, title=title, ylabel=ylabel, path=out / name,
                                       as_bytes=as_bytes), embed), title)
        for name, title, ylabel, before, after, as_bytes in loads
    ]
    disk = metrics.get("disk")
    if disk:
        figures["disk"] = _img(charts.disk_share_chart(view, disk, path=out / "disk.png"), embed)
    figures["brokers_matrix"] = figures["racks_matrix"] = None
    if view.matrix:
        btable = broker_matrix(view, max_brokers=max_matrix_brokers)
        figures["brokers_matrix"] = {"src": _img(charts.matrix_chart(btable, path=out / "moves-brokers.png"), embed),
                                     "table": btable}
        if len(view.rack_names()) > 1:
            rtable = rack_matrix(view)
            figures["racks_matrix"] = {
                "src": _img(charts.matrix_chart(rtable, path=out / "moves-racks.png"), embed),
                "table": rtable,
                "inside": sum(rtable.counts[i][i] for i in range(min(len(rtable.rows), len(rtable.columns)))),
            }
    return {
        "title": f"Reassignment plan: {request.get('goal', 'plan')}",
        "header": {
            "goal": request.get("goal", "?"),
            "cluster_id": assignment.cluster_id,
            "taken": assignment.taken_at.isoformat(timespec="seconds") if assignment.taken_at else "unknown",
            "snapshot_label": snapshot_label,
            "plan_dir": str(plan_path),
            "now": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
        "view": view,
        "summary": {"lower_bound": int(summary.get("lower_bound", 0)),
                    "leader_changes_lower_bound": int(summary.get("leader_changes_lower_bound", 0))},
        "guards": page.guard_facts(metrics, view, snapshot_mismatch=_mismatch(metrics, assignment)),
        "limit": limit,
        "figures": figures,
        "lower_bound_parts": sorted((metrics.get("lower_bound_parts") or {}).items()),
        "balance": page.balance_rows(metrics),
        "disk": page.disk_facts(disk, order) if disk else None,
        "ingress": page.ingress_facts(metrics["ingress"], order) if metrics.get("ingress") else None,
        "tiered": metrics.get("tiered"),
        "racks": rack_loads(view),
        "order": order,
        "request": page.request_rows(metrics),
        "files": _files(plan_path, out),
    }


def _files(plan_path: Path, out: Path) -> list[tuple[str, str, str]]:
    described = (
        (plan_io.PLAN_FILE, "the plan execution reads (each move with its expected current replicas)"),
        (plan_io.KAFKA_PLAN_FILE, "the plan in Kafka's format, for kafka-reassign-partitions --execute"),
        (plan_io.ROLLBACK_FILE, "the rollback plan (every moved partition back to its current replicas)"),
        (plan_io.KAFKA_ROLLBACK_FILE, "the rollback plan in Kafka's format"),
        (plan_io.METRICS_FILE, "summary, request, before/after metrics, warnings"),
    )
    out_files = []
    for name, what in described:
        path = plan_path / name
        if path.is_file():
            out_files.append((name, os.path.relpath(path, out), what))
    return out_files


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m airflow_kafka_reassign.report") -> int:
    """``PLAN_DIR [--snapshot DIR] [--out DIR] [--no-embed]``: write the report, print its path.

    Returns the exit code (0, or 2 with the reason on stderr). ``prog`` names the command in
    ``--help`` (a CLI wiring this in as a subcommand passes its own).
    """
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write the HTML report (with PNG charts) of a plan directory.",
    )
    parser.add_argument("plan_dir", help="plan directory (plan.json, metrics.json, ...)")
    parser.add_argument("--snapshot", help="snapshot directory the plan was made from (default: the one metrics.json names)")
    parser.add_argument("--out", help="output directory (default: PLAN_DIR/report)")
    parser.add_argument("--no-embed", action="store_true", help="refer to the PNG files instead of embedding them")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        path = write_report(args.plan_dir, args.snapshot, out_dir=args.out, embed_images=not args.no_embed)
    except (FileNotFoundError, ValueError) as exc:  # ConfigurationError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{path} ({time.perf_counter() - started:.1f} s)")
    return 0
