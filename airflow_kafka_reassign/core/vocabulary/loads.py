"""Per-broker load of a snapshot: replicas, leaders and bytes per broker (the growth guard weighs brokers by it;
the plan report's text table and the demo print it)."""

from __future__ import annotations

from collections import Counter

from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot


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

