"""The report's HTML: one self-contained page (inline CSS, no script, no network asset).

The markup is in the Jinja2 templates of ``templates/`` (``report.html.j2``, its macros in
``macros.html.j2``, the style in ``report.css``), rendered with autoescape: every value that comes
from the cluster or the request (topic names, rack names, warnings, paths) is escaped by the
template engine. This module gathers what the page says as plain data, and the filters that
format numbers (sizes through :func:`~airflow_kafka_reassign.core.vocabulary.units.format_bytes`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from airflow_kafka_reassign.core.vocabulary.units import format_bytes
from airflow_kafka_reassign.report.view import PlanView, rack_label

DASH = "\u2014"


def num(value: int | float | None) -> str:
    """``1,234``; a float with three decimals; ``None`` as an em dash."""
    if value is None:
        return DASH
    if isinstance(value, float):
        return f"{value:,.3f}"
    return f"{value:,}"


def size(value: float | None) -> str:
    """Bytes as :func:`format_bytes` prints them; ``None`` as an em dash."""
    return DASH if value is None else format_bytes(value)


def dash(value: object) -> object:
    """``None`` as an em dash, anything else as it is."""
    return DASH if value is None else value


def ratio(value: int, bound: int) -> str:
    if bound == 0:
        return "1.000x" if value == 0 else "above a bound of 0"
    return f"{value / bound:.3f}x"


ENV = Environment(
    loader=PackageLoader("airflow_kafka_reassign.report", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
ENV.filters.update(num=num, size=size, dash=dash, fmt=format)
ENV.globals.update(ratio=ratio, rack_label=rack_label)


def render(**context: Any) -> str:
    """The page: ``templates/report.html.j2`` with ``context`` (what :mod:`.write` gathers)."""
    return ENV.get_template("report.html.j2").render(**context)


def guard_facts(metrics: Mapping[str, Any], view: PlanView, *, snapshot_mismatch: str | None) -> dict[str, Any]:
    """What the planner refused, allowed and left alone: the numbers the guard decisions are told with."""
    request = metrics.get("request") or {}
    before = metrics.get("before") or {}
    after = metrics.get("after") or {}
    requested = {**request.get("rf_changes", {}), **request.get("heal_targets", {})}
    return {
        "snapshot_mismatch": snapshot_mismatch,
        "unknown": view.unknown_partitions,
        "rf_changes": len(view.rf_changes),
        "rf_allowed": sum(1 for c in view.rf_changes if c.allowed),
        "rf_unmarked": sum(1 for c in view.rf_changes if not c.allowed),
        "rf_requested": json.dumps(requested, sort_keys=True)[:500],
        "excluded": list(metrics.get("excluded_in_flight") or []),
        "removed": list(view.removed),
        "removed_now": sum(view.replicas_before[b] for b in view.removed),
        "removed_left": sum(view.replicas_after[b] for b in view.removed),
        "added": list(view.added),
        "added_gain": sum(view.replicas_after[b] - view.replicas_before[b] for b in view.added),
        "include_internal": bool(request.get("include_internal", False)),
        "rack_violations": (before.get("rack_violations"), after.get("rack_violations")),
        "rack_aware": bool(request.get("rack_aware", True)),
        "balance": balance_decision(metrics.get("summary") or {}, after.get("replica_max_min")),
        "warnings": list(metrics.get("warnings") or []),
    }


def balance_decision(summary: Mapping[str, Any], spread: int | None) -> tuple[str, str, str] | None:
    """The replica balance reached against the best the constraints allow (``replica_max_min_floor``),
    with what bounded it (racks, replicas the plan may not move, per-topic spread) and how many topics
    were left uneven because the racks force it; ``None`` for plans without these fields."""
    floor = summary.get("replica_max_min_floor")
    if floor is None or spread is None:
        return None
    by = list(summary.get("replica_balance_bounded_by") or [])
    uneven = int(summary.get("topics_uneven_for_racks") or 0)
    text = f"replicas per broker end at max-min {num(spread)}; the best any plan can reach here is {num(floor)}"
    if by:
        text += f" (bounded by: {', '.join(by)})"
    if uneven:
        text += (f"; {num(uneven)} topic(s) are left uneven across brokers where the racks force it, so that the "
                 "brokers as a whole stay balanced")
    return ("ok" if spread <= max(1, floor) + 1 else "warn"), "balance", text


METRIC_ROWS = (
    ("replica_max_min", "replicas per broker, max-min"),
    ("leader_max_min", "preferred leaders per broker, max-min"),
    ("topic_replica_max_min", "worst topic's replicas per broker, max-min"),
    ("worst_topic", "worst topic"),
    ("rack_violations", "partitions over fewer than min(RF, racks) racks"),
    ("rf_changes", "partitions with a changed replication factor"),
    ("replicas_on_removed_brokers", "replicas on removed brokers"),
    ("bytes_max_min", "bytes per broker, max-min"),
    ("brokers", "live brokers (not being removed)"),
    ("partitions", "partitions"),
    ("replicas", "replicas"),
)


def balance_rows(metrics: Mapping[str, Any]) -> list[tuple[str, str, Any, Any]]:
    """``(label, kind, before, after)`` of each metric the plan reports; kind ``size``, ``text`` or ``number``."""
    before, after = metrics.get("before") or {}, metrics.get("after") or {}
    rows = []
    for key, label in METRIC_ROWS:
        b, a = before.get(key), after.get(key)
        if b is None and a is None:
            continue
        kind = "size" if key == "bytes_max_min" else ("text" if isinstance(b, str) or isinstance(a, str) else "number")
        rows.append((label, kind, b, a))
    return rows


def disk_facts(disk: Mapping[str, Any], order: Sequence[int]) -> dict[str, Any]:
    """Per broker: disk capacity and bytes before and after the plan (the ``disk`` report of
    ``metrics.json``), with the cap and the goal the plan aimed at."""
    capacity = {int(b): int(c) for b, c in disk["capacity"].items()}
    before = {int(b): int(v) for b, v in disk.get("bytes_before", {}).items()}
    after = {int(b): int(v) for b, v in disk.get("bytes_after", {}).items()}
    mean = float(disk.get("mean_share", 0.0))
    goal = (f"offload: brokers above {float(disk['offload_threshold']):.0%} shed down to it"
            if disk.get("offload_threshold") is not None
            else f"every broker within {float(disk.get('tolerance', 0.0)):.0%} of the mean share {mean:.1%}")
    brokers = [b for b in order if b in capacity] + sorted(set(capacity) - set(order))
    return {
        "rows": [{"broker": b, "capacity": capacity[b], "before": before.get(b, 0), "after": after.get(b, 0)}
                 for b in brokers],
        "cap": float(disk["disk_cap"]),
        "goal": goal,
    }


def ingress_facts(ingress: Mapping[str, Any], order: Sequence[int]) -> dict[str, Any]:
    """Per broker: estimated bytes in per second before and after the plan, and the broker's
    ``network_in`` capacity when the capacity document gives one (the ``ingress`` report of
    ``metrics.json``), with the goal and the brokers left outside the band and why."""
    capacity = {int(b): int(c) for b, c in ingress.get("capacity", {}).items()}
    before = {int(b): float(v) for b, v in ingress.get("rate_before", {}).items()}
    after = {int(b): float(v) for b, v in ingress.get("rate_after", {}).items()}
    brokers = [b for b in order if b in before or b in after] + sorted((set(before) | set(after)) - set(order))
    window = ingress.get("window_s")
    if ingress.get("balanced"):
        cap_total = sum(capacity.values())
        mean = sum(after.values()) / cap_total if cap_total else 0.0
        goal = (f"every broker within {float(ingress.get('tolerance', 0.0)):.0%} of the mean share {mean:.1%} of its "
                f"network_in ({int(ingress.get('moves', 0))} replica moves, {int(ingress.get('swaps', 0))} swaps, "
                "after disk balance)")
    else:
        goal = "not balanced (the capacity document gives no network_in, or the goal is not a rebalance)"
    by_reason: dict[str, list[int]] = {}
    for b, reason in sorted((int(b), str(r)) for b, r in (ingress.get("stopped_by") or {}).items()):
        by_reason.setdefault(reason, []).append(b)
    return {
        "rows": [{"broker": b, "before": before.get(b, 0.0), "after": after.get(b, 0.0), "capacity": capacity.get(b)}
                 for b in brokers],
        "has_capacity": bool(capacity),
        "how": f" sampled over {float(window):.0f} s" if window else "",
        "goal": goal,
        "stopped": [(reason, ", ".join(map(str, bs))) for reason, bs in by_reason.items()],
    }


def request_rows(metrics: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The plan request's parameters, one row each (values as compact JSON)."""
    request = metrics.get("request") or {}
    return [(k, json.dumps(v, sort_keys=True)) for k, v in sorted(request.items())]
