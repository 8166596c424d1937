"""The report's PNG charts (matplotlib, Agg backend: no display, no network, thread-safe enough
for one report at a time).

Every chart's size depends on the number of brokers or racks, never on the number of
partitions, so a million-replica plan draws as fast as a small one. Text that comes from the
cluster (rack names) goes through :func:`plain`, so matplotlib never reads it as mathtext.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
import numpy as np  # noqa: E402
from matplotlib.colors import LinearSegmentedColormap, LogNorm, Normalize  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from airflow_kafka_reassign.core.vocabulary.units import byte_unit, format_bytes  # noqa: E402
from airflow_kafka_reassign.report.view import MatrixTable, PlanView, rack_label  # noqa: E402

DPI = 100
#: Rack colours (tab10 without grey); brokers without a rack are grey.
RACK_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
BEFORE_COLOUR = "#c8c8c8"
REMOVED_COLOUR = "#d62728"
HEAT = LinearSegmentedColormap.from_list("moves", ["#eef4fb", "#08306b"])


def plain(text: object, limit: int = 40) -> str:
    """``text`` from the cluster for a label: at most ``limit`` characters, drawn as typed
    (``$`` escaped: an even number of them would start mathtext, a bad one would fail)."""
    value = str(text)
    if len(value) > limit:
        value = value[: limit - 1] + "\u2026"
    return value.replace("$", r"\$")


def _margins(fig: Figure, *, left: float, right: float, bottom: float, top: float) -> None:
    """Margins in inches (a fixed layout: constrained layout doubles the drawing time)."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h)


def rack_colours(view: PlanView) -> dict[str | None, str]:
    out: dict[str | None, str] = {}
    for i, rack in enumerate(r for r in view.rack_names() if r is not None):
        out[rack] = RACK_COLOURS[i % len(RACK_COLOURS)]
    out[None] = "#7f7f7f"
    return out


def broker_order(view: PlanView) -> list[int]:
    """Brokers grouped by rack (rack order), by id inside a rack."""
    rank = {r: i for i, r in enumerate(view.rack_names())}
    return sorted(view.brokers, key=lambda b: (rank.get(view.racks.get(b), len(rank)), b))


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, format="png", metadata={"Software": None})
    plt.close(fig)
    return path


def broker_load_chart(
    view: PlanView,
    before: Mapping[int, float],
    after: Mapping[int, float],
    *,
    title: str,
    ylabel: str,
    path: Path,
    as_bytes: bool = False,
    lines: Sequence[tuple[float, str, str]] | None = None,
) -> Path:
    """Bars per broker: before (wide, grey) behind after (narrow, the rack's colour).

    Brokers are grouped by rack; removed brokers are labelled in red; the dashed line is the
    mean after the plan over the brokers that hold replicas (the balanced level), or, with
    ``lines``, one horizontal line per ``(value, colour, label)`` instead.
    """
    order = broker_order(view)
    n = len(order)
    colours = rack_colours(view)
    x = np.arange(n)
    b = np.array([before.get(k, 0) for k in order], dtype=float)
    a = np.array([after.get(k, 0) for k in order], dtype=float)
    scale, unit = (1.0, "")
    if as_bytes:
        factor, unit = byte_unit(max(float(b.max(initial=0)), float(a.max(initial=0)), 1.0))
        scale = float(factor)
        b, a = b / scale, a / scale
    width = min(22.0, max(8.0, 3.0 + 0.13 * n))
    fig, ax = plt.subplots(figsize=(width, 4.4))
    _margins(fig, left=0.9, right=0.2, bottom=0.95 if n > 40 else 0.7, top=0.75)
    ax.bar(x, b, width=0.86, color=BEFORE_COLOUR, label="before", zorder=2)
    ax.bar(x, a, width=0.5, color=[colours.get(view.racks.get(k), colours[None]) for k in order], label="after", zorder=3)
    live_after = [v for k, v in zip(order, a, strict=True) if k not in view.removed]
    line_handles = []
    if lines is not None:
        for value, colour, label in lines:
            line = ax.axhline(value, color=colour, linestyle="--", linewidth=1, zorder=4, label=label)
            if not label.startswith("_"):
                line_handles.append(line)
    elif live_after:
        ax.axhline(float(np.mean(live_after)), color="#333333", linestyle="--", linewidth=1, zorder=4)
    # rack bands and names
    multi_rack = len({view.racks.get(k) for k in order}) > 1
    start = 0
    for i in range(1, n + 1):
        if i == n or view.racks.get(order[i]) != view.racks.get(order[start]):
            if multi_rack:
                ax.axvspan(start - 0.5, i - 0.5, color=colours.get(view.racks.get(order[start]), "#7f7f7f"),
                           alpha=0.06, zorder=1, linewidth=0)
                ax.text((start + i - 1) / 2, 0.98, plain(rack_label(view.racks.get(order[start])), 24),
                        transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=9, zorder=5,
                        bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1})
            start = i
    step = max(1, int(np.ceil(n / 60)))
    ax.set_xticks(x[::step])
    ax.set_xticklabels([str(k) for k in order][::step], fontsize=8 if n <= 40 else 7, rotation=0 if n <= 40 else 90)
    for label, k in zip(ax.get_xticklabels(), order[::step], strict=True):
        if k in view.removed:
            label.set_color(REMOVED_COLOUR)
            label.set_fontweight("bold")
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_xlabel("broker (grouped by rack; removed brokers in red)")
    ax.set_ylabel(f"{ylabel} ({unit})" if unit else ylabel)
    ax.set_title(title, loc="left", fontsize=10, pad=22)
    ax.grid(axis="y", color="#e5e5e5", zorder=0)
    handles = [Patch(color=BEFORE_COLOUR, label="before")]
    handles += [Patch(color=colours[r], label=f"after, {plain(rack_label(r))}") for r in view.rack_names() if r in colours]
    handles += line_handles
    if len(handles) > 6:  # two legend rows above the plot: lift the title over them
        ax.set_title(title, loc="left", fontsize=10, pad=36)
    top_line = max((v for v, _, _ in lines or ()), default=0.0)
    ax.set_ylim(0, max(float(b.max(initial=0)), float(a.max(initial=0)), top_line, 1.0) * 1.12)
    ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, ncols=min(len(handles), 6),
              frameon=False, borderaxespad=0.2)
    return _save(fig, path)


def matrix_chart(table: MatrixTable, *, path: Path) -> Path:
    """A heatmap of replicas moved (rows: from, columns: to), counts written in the cells when
    the matrix is small enough to read them."""
    counts = np.array(table.counts, dtype=float)
    rows, cols = len(table.rows), len(table.columns)
    cell = 0.26 if max(rows, cols) > 20 else 0.55
    left_in = 0.3 + 0.065 * max((len(plain(x, 24)) for x in table.rows), default=4)
    bottom_in = 0.3 + 0.065 * max((len(plain(x, 24)) for x in table.columns), default=4)
    fig_w = max(5.5, left_in + 1.6 + cell * cols)
    fig_h = max(3.5, bottom_in + 0.7 + cell * rows)
    title = textwrap.wrap(table.title, width=max(30, int((fig_w - left_in - 1.7) / 0.085)))
    fig_h += 0.18 * (len(title) - 1)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    _margins(fig, left=left_in + 0.3, right=1.4, bottom=bottom_in + 0.3, top=0.3 + 0.18 * len(title))
    shown = np.ma.masked_where(counts == 0, counts)
    cmap = HEAT.with_extremes(bad="white")
    nonzero = counts[counts > 0]
    # a log scale when a few cells dwarf the rest (a scale-out: everything flows to the new brokers)
    norm: Normalize = (
        LogNorm(vmin=float(nonzero.min()), vmax=float(nonzero.max()))
        if len(nonzero) and nonzero.max() >= 30 * nonzero.min()
        else Normalize(vmin=0, vmax=float(nonzero.max()) if len(nonzero) else 1.0)
    )
    im = ax.imshow(shown, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(cols))
    ax.set_xticklabels([plain(c, 24) for c in table.columns], rotation=90, fontsize=8)
    ax.set_yticks(range(rows))
    ax.set_yticklabels([plain(r, 24) for r in table.rows], fontsize=8)
    ax.set_xlabel("to")
    ax.set_ylabel("from")
    ax.set_title("\n".join(title), loc="left", fontsize=10)
    ax.set_xticks(np.arange(cols + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(rows + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="#dddddd", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    if rows * cols <= 400:
        for i in range(rows):
            for j in range(cols):
                v = counts[i, j]
                if v:
                    ax.text(j, i, f"{int(v)}", ha="center", va="center", fontsize=7 if max(rows, cols) > 12 else 9,
                            color="white" if float(norm(v)) > 0.55 else "#111111")
    if counts.any():
        fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02,
                     label="replicas (log scale)" if isinstance(norm, LogNorm) else "replicas")
    return _save(fig, path)


def cost_chart(
    *,
    replica_moves: int,
    lower_bound: int,
    leader_changes: int,
    leader_lower_bound: int,
    path: Path,
) -> Path:
    """What the plan costs next to what any plan must cost: replica moves vs the lower bound,
    leader changes vs the fewest that leader balance needs."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 2.4))
    _margins(fig, left=1.2, right=0.3, bottom=0.35, top=0.4)
    fig.subplots_adjust(wspace=0.45)
    pairs: Sequence[tuple[str, int, str, int]] = (
        ("replica moves", replica_moves, "lower bound", lower_bound),
        ("leader changes", leader_changes, "fewest needed", leader_lower_bound),
    )
    for ax, (name, value, bound_name, bound) in zip(axes, pairs, strict=True):
        ax.barh([1, 0], [value, bound], color=["#1f77b4", "#9ecae1"], height=0.6)
        ax.set_yticks([1, 0])
        ax.set_yticklabels([f"{name}", bound_name])
        top = max(value, bound, 1)
        for y, v in ((1, value), (0, bound)):
            ax.text(v + top * 0.01, y, f"{v:,}", va="center", fontsize=9)
        ratio = f"{value / bound:.3f}x" if bound else ("1.000x" if value == 0 else "n/a")
        ax.set_title(f"{name}: {ratio} the {bound_name}", loc="left", fontsize=10)
        ax.set_xlim(0, top * 1.18)
        ax.grid(axis="x", color="#e5e5e5")
        ax.set_axisbelow(True)
    return _save(fig, path)


def bytes_label(n: int | None) -> str:
    return "unknown" if n is None else format_bytes(n)


def disk_share_chart(view: PlanView, disk: Mapping[str, Any], *, path: Path) -> Path:
    """Disk used per broker as a share of its capacity (percent), before and after the plan, with
    the cap and the mean share (and, for a rebalance, the band around it) as lines. ``disk``:
    the ``disk`` report of ``metrics.json``."""
    capacity = {int(b): int(c) for b, c in disk["capacity"].items()}
    before = {int(b): int(v) for b, v in disk.get("bytes_before", {}).items()}
    after = {int(b): int(v) for b, v in disk.get("bytes_after", {}).items()}
    share_before = {b: 100.0 * before.get(b, 0) / c for b, c in capacity.items()}
    share_after = {b: 100.0 * after.get(b, 0) / c for b, c in capacity.items()}
    mean = 100.0 * float(disk.get("mean_share", 0.0))
    lines = [(100.0 * float(disk["disk_cap"]), REMOVED_COLOUR, f"cap {100.0 * float(disk['disk_cap']):.0f}%")]
    threshold = disk.get("offload_threshold")
    if threshold is not None:
        lines.append((100.0 * float(threshold), "#7a5a00", f"offload threshold {100.0 * float(threshold):.0f}%"))
    else:
        tol = 100.0 * float(disk.get("tolerance", 0.0))
        lines += [(mean, "#333333", f"mean {mean:.1f}%"), (mean - tol, "#999999", f"mean \u00b1 {tol:.0f} points"),
                  (mean + tol, "#999999", "_")]
    return broker_load_chart(view, share_before, share_after, title="disk used per broker, share of its capacity",
                             ylabel="disk used (% of capacity)", path=path, lines=lines)
