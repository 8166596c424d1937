"""The report's HTML: one self-contained page (inline CSS, no script, no network asset).

Everything that comes from the cluster or the request (topic names, rack names, warnings,
paths) is escaped with :func:`html.escape`; numbers are formatted here. The page is built from
small functions, one per section, each returning a string.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

from airflow_kafka_reassign.core.units import format_bytes
from airflow_kafka_reassign.report.view import PlanView, rack_label, rack_loads

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:24px auto;max-width:1500px;
 padding:0 20px;color:#1b1b1b;line-height:1.4}
h1{font-size:1.6em;margin-bottom:4px}h2{margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#555;font-size:.9em}.meta code{font-size:.95em}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:16px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:10px 14px;min-width:170px;background:#fafafa}
.card .v{font-size:1.5em;font-weight:600}.card .l{color:#555;font-size:.85em}
.card.warn{border-color:#e0a800;background:#fff8e1}.card.bad{border-color:#d62728;background:#fdecea}
.card.ok{border-color:#2ca02c;background:#eef8ee}
table{border-collapse:collapse;margin:8px 0 16px;font-size:.9em}
th,td{border:1px solid #ddd;padding:3px 8px}th{background:#f2f2f2;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.up{color:#b35900}.down{color:#1f6fb4}.removed{color:#d62728;font-weight:600}
ul.decisions li{margin:4px 0}.tag{display:inline-block;border-radius:3px;padding:0 6px;font-size:.8em;font-weight:600}
.tag.ok{background:#dff0d8;color:#2b6b2b}.tag.warn{background:#fff0c2;color:#7a5a00}.tag.bad{background:#f8d7d4;color:#a4161a}
figure{margin:12px 0 24px}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{color:#555;font-size:.85em;margin-top:4px}
pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:.85em}
.scroll{max-height:480px;overflow:auto;display:inline-block}
"""


def e(value: object) -> str:
    """Escaped text of any value (``None`` as an em dash)."""
    return "\u2014" if value is None else escape(str(value), quote=True)


def num(value: int | float | None) -> str:
    if value is None:
        return "\u2014"
    if isinstance(value, float):
        return f"{value:,.3f}"
    return f"{value:,}"


def delta(before: int | None, after: int | None, *, as_bytes: bool = False) -> str:
    if before is None or after is None:
        return ""
    d = after - before
    if d == 0:
        return "0"
    text = (("+" if d > 0 else "-") + format_bytes(abs(d))) if as_bytes else f"{d:+,}"
    return f'<span class="{"up" if d > 0 else "down"}">{e(text)}</span>'


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, numeric: Sequence[bool] | None = None,
          scroll: bool = False) -> str:
    """An HTML table; cells are already-escaped HTML (use :func:`e`)."""
    numeric = numeric or [False] * len(headers)
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{c}</td>' if numeric[i] else f"<td>{c}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    out = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="scroll">{out}</div>' if scroll else out


def card(value: str, label: str, kind: str = "") -> str:
    return f'<div class="card {kind}"><div class="v">{value}</div><div class="l">{label}</div></div>'


def figure(src: str, alt: str, caption: str) -> str:
    return f'<figure><img src="{e(src)}" alt="{e(alt)}"><figcaption>{caption}</figcaption></figure>'


def listed(items: Sequence[str], limit: int) -> str:
    shown = ", ".join(f"<code>{e(x)}</code>" for x in items[:limit])
    more = f" and {len(items) - limit:,} more" if len(items) > limit else ""
    return shown + more


def ratio(value: int, bound: int) -> str:
    if bound == 0:
        return "1.000x" if value == 0 else "above a bound of 0"
    return f"{value / bound:.3f}x"


def header(metrics: Mapping[str, Any], view: PlanView, *, plan_dir: str, snapshot_label: str,
           cluster_id: str | None, taken_at: datetime | None) -> str:
    goal = metrics.get("request", {}).get("goal", "?")
    taken = taken_at.isoformat(timespec="seconds") if taken_at else "unknown"
    now = datetime.now(UTC).isoformat(timespec="seconds")
    return (
        f"<h1>Reassignment plan: {e(goal)}</h1>"
        f'<p class="meta">cluster <code>{e(cluster_id)}</code> \u00b7 snapshot taken {e(taken)} '
        f"(<code>{e(snapshot_label)}</code>) \u00b7 {num(len(view.brokers))} brokers \u00b7 plan "
        f"<code>{e(plan_dir)}</code> \u00b7 report written {e(now)}</p>"
    )


def summary_cards(metrics: Mapping[str, Any], view: PlanView) -> str:
    s = metrics.get("summary", {})
    bound = int(s.get("lower_bound", 0))
    moves = view.replica_moves
    lbound = int(s.get("leader_changes_lower_bound", 0))
    excluded = metrics.get("excluded_in_flight") or []
    warnings = metrics.get("warnings") or []
    cards = [
        card(num(view.partitions_moved), "partitions moved"),
        card(f"{num(moves)} / {num(bound)}", f"replica moves / lower bound ({e(ratio(moves, bound))})",
             "ok" if moves <= bound * 1.05 or moves == 0 else "warn"),
        card(f"{num(view.leader_changes)} / {num(lbound)}",
             f"leader changes / fewest needed ({e(ratio(view.leader_changes, lbound))})"),
        card(e(format_bytes(view.bytes_to_move)) if view.bytes_to_move is not None else "unknown",
             "bytes to copy" + ("" if view.bytes_to_move is not None else " (no replica sizes in the snapshot)")),
        card(num(len(view.rf_changes)), "replication-factor changes",
             "bad" if any(not c.allowed for c in view.rf_changes) else ("warn" if view.rf_changes else "ok")),
        card(num(len(excluded)), "in-flight partitions left alone", "warn" if excluded else ""),
        card(num(len(warnings)), "warnings", "warn" if warnings else "ok"),
    ]
    return f'<div class="cards">{"".join(cards)}</div>'


def guard_decisions(metrics: Mapping[str, Any], view: PlanView, *, limit: int, snapshot_mismatch: str | None) -> str:
    """What the planner refused, allowed and left alone, and why, in the words of its parameters."""
    request = metrics.get("request", {})
    before = metrics.get("before", {})
    after = metrics.get("after", {})
    items: list[str] = []

    def item(kind: str, tag: str, text: str) -> None:
        items.append(f'<li><span class="tag {kind}">{e(tag)}</span> {text}</li>')

    if snapshot_mismatch:
        item("bad", "snapshot", snapshot_mismatch)
    if view.unknown_partitions:
        item("bad", "stale", f"{num(len(view.unknown_partitions))} move(s) name partitions the snapshot does not have "
             f"({listed(view.unknown_partitions, 10)}): execution will refuse them as stale; plan again")
    allowed = [c for c in view.rf_changes if c.allowed]
    unmarked = [c for c in view.rf_changes if not c.allowed]
    requested = {**request.get("rf_changes", {}), **request.get("heal_targets", {})}
    if view.rf_changes:
        item("warn" if not unmarked else "bad", "RF change",
             f"{num(len(allowed))} partition(s) change their replication factor with <code>allow_rf_change=true</code>, "
             f"as requested by <code>rf_changes</code>/<code>heal_targets</code> "
             f"(<code>{e(json.dumps(requested, sort_keys=True)[:500])}</code>); the KIP-860 guard lets exactly these "
             "through" + (f"; {num(len(unmarked))} move(s) change it WITHOUT the mark and will be refused" if unmarked else ""))
    else:
        item("ok", "RF kept", "no partition changes its replication factor (the KIP-860 guard refuses any RF change "
             "a plan does not mark; <code>rf_changes</code> or <code>heal_targets</code> would request one)")
    excluded = list(metrics.get("excluded_in_flight") or [])
    if excluded:
        item("warn", "in flight", f"{num(len(excluded))} partition(s) with an in-flight reassignment are left alone: "
             f"{listed(excluded, limit)} (<code>include_in_flight=True</code> plans them from their target replicas)")
    else:
        item("ok", "in flight", "no partition had a reassignment in flight when the snapshot was taken")
    if view.removed:
        left = sum(view.replicas_after[b] for b in view.removed)
        item("ok" if left == 0 else "bad", "removed brokers",
             f"brokers {e(list(view.removed))} hold {num(sum(view.replicas_before[b] for b in view.removed))} replicas "
             f"now and {num(left)} after the plan")
    if view.added:
        item("ok", "added brokers", f"brokers {e(list(view.added))} receive "
             f"{num(sum(view.replicas_after[b] - view.replicas_before[b] for b in view.added))} replicas")
    if not request.get("include_internal", False):
        item("ok", "internal topics", "internal topics (<code>__consumer_offsets</code>, <code>__transaction_state</code>, "
             "...) are not balanced (<code>include_internal=True</code> would plan them); only their replicas on "
             "removed brokers move")
    else:
        item("warn", "internal topics", "internal topics are planned like any other (<code>include_internal=True</code>)")
    rv_b, rv_a = before.get("rack_violations"), after.get("rack_violations")
    if rv_b is not None:
        item("ok" if not rv_a else "warn", "racks",
             f"partitions over fewer than min(RF, racks) racks: {num(rv_b)} before, {num(rv_a)} after"
             + ("" if request.get("rack_aware", True) else " (planned with <code>rack_aware=False</code>)"))
    balance = balance_decision(metrics.get("summary", {}), after.get("replica_max_min"))
    if balance:
        item(*balance)
    for text in metrics.get("warnings") or []:
        item("warn", "warning", e(text))
    return f'<ul class="decisions">{"".join(items)}</ul>'


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
        text += f" (bounded by: {e(', '.join(by))})"
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


def balance_table(metrics: Mapping[str, Any]) -> str:
    before, after = metrics.get("before", {}), metrics.get("after", {})
    rows = []
    for key, label in METRIC_ROWS:
        b, a = before.get(key), after.get(key)
        if b is None and a is None:
            continue
        if key == "bytes_max_min":
            rows.append([e(label), e(format_bytes(b)) if b is not None else "\u2014",
                         e(format_bytes(a)) if a is not None else "\u2014"])
        elif isinstance(b, str) or isinstance(a, str):
            rows.append([e(label), f"<code>{e(b)}</code>", f"<code>{e(a)}</code>"])
        else:
            rows.append([e(label), num(b), num(a)])
    return table(["", "before", "after"], rows, numeric=[False, True, True])


def lower_bound_table(metrics: Mapping[str, Any]) -> str:
    parts = metrics.get("lower_bound_parts") or {}
    if not parts:
        return ""
    rows = [[f"<code>{e(k)}</code>", num(v)] for k, v in sorted(parts.items())]
    return (
        "<p>The lower bound is the largest of these bounds on the replica moves any plan reaching the same "
        "balance needs (<code>moves</code> is the one reported):</p>"
        + table(["bound", "replicas"], rows, numeric=[False, True])
    )


def racks_table(view: PlanView) -> str:
    rows = []
    for r in rack_loads(view):
        row = [e(r["rack"]), num(r["brokers"])]
        for k in ("replicas", "leaders"):
            row += [num(r[f"{k}_before"]), num(r[f"{k}_after"]), delta(r[f"{k}_before"], r[f"{k}_after"])]
        if view.bytes_before is not None:
            row += [e(format_bytes(r["bytes_before"])), e(format_bytes(r["bytes_after"])),
                    delta(r["bytes_before"], r["bytes_after"], as_bytes=True)]
        rows.append(row)
    headers = ["rack", "brokers", "replicas before", "after", "\u0394", "leaders before", "after", "\u0394"]
    if view.bytes_before is not None:
        headers += ["bytes before", "after", "\u0394"]
    return table(headers, rows, numeric=[False] + [True] * (len(headers) - 1))


def brokers_table(view: PlanView, order: Sequence[int]) -> str:
    has_bytes = view.bytes_before is not None and view.bytes_after is not None
    rows = []
    for b in order:
        status = view.broker_status(b)
        name = f'<span class="removed">{b} (removed)</span>' if status == "removed" else (
            f"{b} ({e(status)})" if status else str(b))
        row = [name, e(rack_label(view.racks.get(b)) if b in view.racks else "(not registered)")]
        for before, after in ((view.replicas_before, view.replicas_after), (view.leaders_before, view.leaders_after)):
            row += [num(before[b]), num(after[b]), delta(before[b], after[b])]
        if has_bytes:
            assert view.bytes_before is not None and view.bytes_after is not None
            row += [e(format_bytes(view.bytes_before[b])), e(format_bytes(view.bytes_after[b])),
                    delta(view.bytes_before[b], view.bytes_after[b], as_bytes=True)]
        rows.append(row)
    headers = ["broker", "rack", "replicas before", "after", "\u0394", "leaders before", "after", "\u0394"]
    if has_bytes:
        headers += ["bytes before", "after", "\u0394"]
    return table(headers, rows, numeric=[False, False] + [True] * (len(headers) - 2), scroll=len(rows) > 30)


def disk_table(disk: Mapping[str, Any], order: Sequence[int]) -> str:
    """Per broker: disk capacity, bytes and share of capacity before and after the plan (the
    ``disk`` report of ``metrics.json``); a broker above the cap after the plan is marked."""
    capacity = {int(b): int(c) for b, c in disk["capacity"].items()}
    before = {int(b): int(v) for b, v in disk.get("bytes_before", {}).items()}
    after = {int(b): int(v) for b, v in disk.get("bytes_after", {}).items()}
    cap = float(disk["disk_cap"])
    rows = []
    for b in [b for b in order if b in capacity] + sorted(set(capacity) - set(order)):
        c = capacity[b]
        x, y = before.get(b, 0), after.get(b, 0)
        over = y > cap * c
        share = f"{y / c:.1%}"
        rows.append([str(b), e(format_bytes(c)), e(format_bytes(x)), f"{x / c:.1%}", e(format_bytes(y)),
                     f'<span class="removed">{share} (over the cap)</span>' if over else share,
                     delta(x, y, as_bytes=True)])
    mean = float(disk.get("mean_share", 0.0))
    goal = (f"offload: brokers above {float(disk['offload_threshold']):.0%} shed down to it"
            if disk.get("offload_threshold") is not None
            else f"every broker within {float(disk.get('tolerance', 0.0)):.0%} of the mean share {mean:.1%}")
    return (
        f"<p>Disk used against capacity (cap {cap:.0%}; goal: {e(goal)}).</p>"
        + table(["broker", "capacity", "bytes before", "share", "bytes after", "share", "\u0394"], rows,
                numeric=[False] + [True] * 6, scroll=len(rows) > 30)
    )


def ingress_table(ingress: Mapping[str, Any], order: Sequence[int], tiered: Mapping[str, Any] | None = None) -> str:
    """Per broker: estimated bytes in per second before and after the plan, and its share of the
    broker's ``network_in`` capacity when the capacity document gives one (the ``ingress`` report of
    ``metrics.json``); with ``tiered``, a line on the tiered topics counted at their local bytes."""
    capacity = {int(b): int(c) for b, c in ingress.get("capacity", {}).items()}
    before = {int(b): float(v) for b, v in ingress.get("rate_before", {}).items()}
    after = {int(b): float(v) for b, v in ingress.get("rate_after", {}).items()}
    brokers = [b for b in order if b in before or b in after] + sorted((set(before) | set(after)) - set(order))
    rows = []
    for b in brokers:
        x, y = before.get(b, 0.0), after.get(b, 0.0)
        row = [str(b), e(format_bytes(x)) + "/s", e(format_bytes(y)) + "/s"]
        if capacity:
            c = capacity.get(b)
            row += [e(format_bytes(c)) + "/s" if c else "", f"{x / c:.1%}" if c else "", f"{y / c:.1%}" if c else ""]
        rows.append(row)
    window = ingress.get("window_s")
    how = f" sampled over {float(window):.0f} s" if window else ""
    if ingress.get("balanced"):
        cap_total = sum(capacity.values())
        mean = sum(after.values()) / cap_total if cap_total else 0.0
        goal = (f"every broker within {float(ingress.get('tolerance', 0.0)):.0%} of the mean share {mean:.1%} of its "
                f"network_in ({int(ingress.get('moves', 0))} replica moves, {int(ingress.get('swaps', 0))} swaps, "
                "after disk balance)")
    else:
        goal = "not balanced (the capacity document gives no network_in, or the goal is not a rebalance)"
    headers = ["broker", "bytes in before", "after"] + (["network_in", "share before", "share after"] if capacity else [])
    note = ""
    stopped = ingress.get("stopped_by") or {}
    if stopped:
        by_reason: dict[str, list[int]] = {}
        for b, reason in sorted((int(b), str(r)) for b, r in stopped.items()):
            by_reason.setdefault(reason, []).append(b)
        note += ("<p>Outside the bytes-in band after the plan, and what stopped them: "
                 + "; ".join(f"{e(reason)}: broker(s) {e(', '.join(map(str, bs)))}" for reason, bs in by_reason.items())
                 + ".</p>")
    if tiered:
        note += (f"<p>Tiered topics (remote.storage.enable): {num(int(tiered['topics']))} topic(s), "
                f"{num(int(tiered['partitions']))} partition(s), counted at their local bytes: "
                f"{e(format_bytes(int(tiered['local_bytes'])))} of {e(format_bytes(int(tiered['total_bytes'])))} on the "
                f"brokers' disks; {e(format_bytes(int(tiered.get('bytes_to_move', 0))))} of them move.</p>")
    return (
        f"<p>Bytes in per broker (estimated{e(how)}; goal: {e(goal)}).</p>"
        + table(headers, rows, numeric=[False] + [True] * (len(headers) - 1), scroll=len(rows) > 30)
        + note
    )


def topics_table(view: PlanView, limit: int) -> str:
    top = view.topic_moves.most_common(limit)
    if not top:
        return "<p>No replica moves.</p>"
    rows = [[f"<code>{e(t)}</code>", num(n)] for t, n in top]
    note = (f"<p>The {len(top)} topics with the most replica moves, of {num(len(view.topic_moves))} topics that move.</p>"
            if len(view.topic_moves) > len(top) else "")
    return note + table(["topic", "replica moves"], rows, numeric=[False, True])


def rf_table(view: PlanView, limit: int) -> str:
    if not view.rf_changes:
        return ""
    rows = [
        [f"<code>{e(c.partition)}</code>", e(list(c.replicas_before)), e(list(c.replicas_after)),
         f"{len(c.replicas_before)} \u2192 {len(c.replicas_after)}",
         '<span class="tag ok">allow_rf_change</span>' if c.allowed else '<span class="tag bad">not marked: refused</span>']
        for c in view.rf_changes[:limit]
    ]
    more = f"<p>and {len(view.rf_changes) - limit:,} more (see plan.json)</p>" if len(view.rf_changes) > limit else ""
    return "<h3>Replication-factor changes</h3>" + table(["partition", "replicas now", "after", "RF", "guard"], rows,
                                                          scroll=True) + more


def files_list(files: Sequence[tuple[str, str, str]]) -> str:
    """Links to the plan's files: (name, relative href, what it is)."""
    items = "".join(f'<li><a href="{e(href)}"><code>{e(name)}</code></a>: {e(what)}</li>' for name, href, what in files)
    return f"<ul>{items}</ul>"


def request_block(metrics: Mapping[str, Any]) -> str:
    """The plan request's parameters, one row each (values as compact JSON)."""
    request = metrics.get("request") or {}
    rows = [[f"<code>{e(k)}</code>", f"<code>{e(json.dumps(v, sort_keys=True))}</code>"] for k, v in sorted(request.items())]
    return table(["parameter", "value"], rows)


def page(title: str, body: Sequence[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{e(title)}</title><style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
