"""The disk step by groups of topics (core/planner/disk_groups.py) against the serial step.

The plans are judged here from the snapshot and the plan's moves alone (bytes per broker and disk,
racks, replication factors, bytes moved), not from the step's own outcome; the load-aware suite
(test_planner_disk) runs again with the staged planner's disk step by groups.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from airflow_kafka_reassign.core.planner import PlanRequest
from airflow_kafka_reassign.core.planner.disk import DiskGoal
from airflow_kafka_reassign.core.planner.disk_groups import GroupFigures, apportion, count_targets, split_goal
from airflow_kafka_reassign.core.planner.staged import plan_staged
from airflow_kafka_reassign.core.planner.synthetic import synthetic_capacities, synthetic_cluster, to_snapshot
from airflow_kafka_reassign.core.planner.types import BrokerLayout
from airflow_kafka_reassign.core.vocabulary.capacity import BrokerCapacity, CapacityDocument


def _suite_tests() -> list[str]:
    module = importlib.import_module("test_planner_disk")
    return [name for name, fn in inspect.getmembers(module, inspect.isfunction)
            if name.startswith("test_") and fn.__module__ == "test_planner_disk" and not inspect.signature(fn).parameters]


@pytest.mark.parametrize("test_name", _suite_tests())
def test_load_aware_suite_passes_with_the_disk_step_by_groups(test_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("test_planner_disk")
    monkeypatch.setattr(module, "plan_reassignment", functools.partial(plan_staged, disk_groups=3))
    test: Callable[[], None] = getattr(module, test_name)
    test()


def judge(snapshot: Any, result: Any, caps: dict[int, int]) -> dict[str, Any]:
    """The plan's quality recounted from the snapshot and its moves."""
    moved = {(m.topic, m.partition): tuple(m.target_replicas) for m in result.plan.moves}
    racks = {b.id: b.rack for b in snapshot.brokers}
    n_racks = len(set(racks.values()))
    after: dict[int, int] = dict.fromkeys(caps, 0)
    count: dict[int, int] = dict.fromkeys(caps, 0)
    bytes_moved = rack_violations = rf_changes = 0
    for p in snapshot.partitions:
        size = max(p.replica_sizes.values())
        final = moved.get((p.topic, p.partition), tuple(p.replicas))
        bytes_moved += size * len(set(final) - set(p.replicas))
        rf_changes += len(final) != len(p.replicas)
        need = min(len(final), n_racks, len({racks[b] for b in p.replicas}))
        rack_violations += len({racks[b] for b in final}) < need
        for b in final:
            after[b] += size
            count[b] += 1
    mean = sum(after.values()) / sum(caps.values())
    return {
        "bytes_moved": bytes_moved,
        "deviation": max(abs(after[b] / caps[b] - mean) for b in caps),
        "over_cap": [b for b in caps if after[b] > 0.85 * caps[b]],
        "count_spread": max(count.values()) - min(count.values()),
        "rack_violations": rack_violations,
        "rf_changes": rf_changes,
    }


@pytest.mark.parametrize(("seed", "skew"), [(1, 0.0), (2, 0.0), (3, 0.5)])
def test_the_groups_plan_as_well_as_the_serial_step_on_the_same_input(seed: int, skew: float) -> None:
    cluster = synthetic_cluster(brokers=30, racks=3, replicas=20_000, sizes="skewed", skew=skew, seed=seed)
    snapshot = to_snapshot(cluster)
    caps = synthetic_capacities(cluster, fill=0.6)
    request = PlanRequest(capacity=CapacityDocument(brokers={b: BrokerCapacity(disk=v) for b, v in caps.items()}))
    serial = plan_staged(snapshot, request)
    groups = plan_staged(snapshot, request, disk_groups=4)
    s, g = judge(snapshot, serial, caps), judge(snapshot, groups, caps)
    assert s["bytes_moved"] == serial.bytes_to_move and g["bytes_moved"] == groups.bytes_to_move
    for judged, result in ((s, serial), (g, groups)):
        assert judged["rack_violations"] == 0 and judged["rf_changes"] == 0
        assert judged["over_cap"] == []
        assert judged["count_spread"] <= 2
        assert judged["deviation"] <= 0.02 + 0.001 or result.warnings
        assert result.bytes_lower_bound is not None
        assert judged["bytes_moved"] <= 1.05 * result.bytes_lower_bound
    # as balanced as the serial step's plan, at no more than 5% more bytes
    assert g["deviation"] <= max(s["deviation"], 0.02) + 0.001
    assert g["bytes_moved"] <= 1.05 * s["bytes_moved"]


def test_apportion_adds_up_within_the_caps() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 9))
        caps = rng.integers(0, 20, n)
        weights = rng.random(n) * (rng.random(n) > 0.3)
        total = int(rng.integers(0, 60))
        out = apportion(total, weights, caps)
        assert out.sum() == min(total, caps.sum())
        assert (out >= 0).all() and (out <= caps).all()


def test_count_targets_stay_in_the_window_and_keep_the_total() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        counts = rng.integers(80, 120, 12).astype(np.int64)
        mean = int(counts.sum() // 12)
        window = (mean - 1, mean + 1)
        t = count_targets(counts, window, rng.random(12), balance=True)
        assert t.sum() == counts.sum()
        assert (t >= window[0]).all() and (t <= window[1] + 1).all()


def test_the_groups_parts_add_up_to_the_band_cap_and_count_window() -> None:
    layout = BrokerLayout(brokers=(0, 1, 2, 3), rack_of={0: 0, 1: 1, 2: 0, 3: 1}, rack_names=("a", "b"))
    caps = {0: 1000, 1: 1000, 2: 2000, 3: 1000}
    goal = DiskGoal(capacity=caps, tolerance=0.02, balance_counts=True)
    figs = [
        GroupFigures(0, bytes=[400, 100, 300, 500], movable=[300, 50, 200, 400], count=[40, 10, 30, 50],
                     movable_count=[30, 5, 20, 40], rack_lo=[0, 0], rack_hi=[0, 0], kept=[0, 0]),
        GroupFigures(1, bytes=[300, 50, 200, 100], movable=[300, 50, 100, 100], count=[30, 5, 20, 10],
                     movable_count=[30, 5, 10, 10], rack_lo=[0, 0], rack_hi=[0, 0], kept=[0, 0]),
    ]
    fixed_bytes = {0: 10, 1: 0, 2: 0, 3: 40}
    fixed_counts = {0: 1, 1: 0, 2: 0, 3: 4}
    total = sum(sum(f.bytes) for f in figs) + sum(fixed_bytes.values())
    band = goal.band(total)
    window = (48, 50)
    tasks = split_goal(layout, goal, figs, fixed_bytes, fixed_counts, band, window)
    for j, b in enumerate(layout.brokers):
        own = [t.part.band[b][0] - t.fixed_bytes[b] for t in tasks.values()], [
            t.part.band[b][1] - t.fixed_bytes[b] for t in tasks.values()]
        base = fixed_bytes[b]
        assert sum(own[0]) + base == pytest.approx(band[b][0])
        assert sum(own[1]) + base == pytest.approx(band[b][1])
        assert sum(t.part.cap[b] - t.fixed_bytes[b] for t in tasks.values()) + base == pytest.approx(0.85 * caps[b])
        lows = sum(t.part.counts[b][0] - t.fixed_counts[b] for t in tasks.values()) + fixed_counts[b]
        highs = sum(t.part.counts[b][1] - t.fixed_counts[b] for t in tasks.values()) + fixed_counts[b]
        assert (lows, highs) == window, b
        # the other groups' bytes are what the group counts as fixed
        for f in figs:
            others = fixed_bytes[b] + sum(g.bytes[j] for g in figs if g.gid != f.gid)
            assert tasks[f.gid].fixed_bytes[b] == others
