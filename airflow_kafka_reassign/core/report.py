"""Human-readable views of a snapshot: the per-broker load table the demo and logs print."""

from __future__ import annotations

from collections import Counter

from airflow_kafka_reassign.core.models import ClusterSnapshot
from airflow_kafka_reassign.core.units import format_bytes

#: The name the operators and the report import (one formatter: core.units.format_bytes).
human_bytes = format_bytes


def broker_loads(snapshot: ClusterSnapshot) -> dict[int, dict[str, int]]:
    """Per broker: replicas, preferred leaders, current leaders and bytes (when sizes are known).

    In-flight reassignments count at their target replicas.
    """
    replicas: Counter[int] = Counter()
    preferred: Counter[int] = Counter()
    leaders: Counter[int] = Counter()
    size: Counter[int] = Counter()
    for p in snapshot.partitions:
        target = p.target_replicas
        replicas.update(target)
        preferred[target[0]] += 1
        if p.leader is not None:
            leaders[p.leader] += 1
        for b, n in (p.replica_sizes or {}).items():
            size[b] += n
    ids = sorted(set(snapshot.broker_ids) | set(replicas))
    return {
        b: {"replicas": replicas[b], "preferred_leaders": preferred[b], "leaders": leaders[b], "bytes": size[b]}
        for b in ids
    }


def broker_table(snapshot: ClusterSnapshot, *, title: str | None = None) -> str:
    """A fixed-width table: broker, rack, replicas, leaders, bytes, with a max-min line."""
    loads = broker_loads(snapshot)
    racks = snapshot.racks
    lines = [title] if title else []
    lines.append(f"{'broker':>6}  {'rack':<8} {'replicas':>8} {'leaders':>8} {'bytes':>10}")
    for b, load in loads.items():
        rack = racks.get(b) or ("-" if b in racks else "(gone)")
        lines.append(
            f"{b:>6}  {rack:<8} {load['replicas']:>8} {load['leaders']:>8} {human_bytes(load['bytes']):>10}"
        )
    if loads:
        spread = {k: max(v[k] for v in loads.values()) - min(v[k] for v in loads.values())
                  for k in ("replicas", "leaders")}
        lines.append(f"{'max-min':>6}  {'':<8} {spread['replicas']:>8} {spread['leaders']:>8}")
    return "\n".join(lines)
