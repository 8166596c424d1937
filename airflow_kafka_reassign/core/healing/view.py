"""The live cluster as a healing decision reads it: one :class:`ClusterView`, from a few cheap requests.

:func:`cluster_view` asks the :class:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterAdmin` port for:

* DescribeCluster with fenced brokers (KIP-1073): which brokers are registered, which are fenced (the controller's
  view of "down", not whether this worker can connect);
* one snapshot (Metadata): each broker's replica count, partitions under min ISR, and the reassignments the
  controller lists in flight (merged in by the snapshot);
* DescribeConfigs of ``cordoned.log.dirs`` on the live brokers (KIP-1066, Kafka 4.3+), to see cordons;
* DescribeLogDirs of every partition only when the batch holds a log-dir incident or some broker has cordoned single
  dirs (which replicas each dir holds, whether it is offline, how full).

Pure: imports no Airflow, no Kafka client, no PySpark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from airflow_kafka_reassign.core.maintenance.cordon import ALL_DIRS, parse_cordon
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin, LogDir


@dataclass(frozen=True)
class ClusterView:
    """What a healing decision knows of the cluster (see the module docstring)."""

    #: registered brokers: id -> fenced
    registered: Mapping[int, bool]
    #: replicas each broker holds (target replicas of every partition; a broker no longer registered too)
    replica_counts: Mapping[int, int]
    #: reassignments the controller lists in flight
    in_flight: tuple[TopicPartition, ...] = ()
    #: each live broker's dynamic ``cordoned.log.dirs`` (``None``: not set); empty on a cluster without cordons
    cordons: Mapping[int, str | None] = field(default_factory=dict)
    #: each answering broker's log dirs (DescribeLogDirs), when read
    dirs: Mapping[int, tuple[LogDir, ...]] | None = None
    #: partitions whose ISR is below their topic's min.insync.replicas
    under_min_isr: int = 0

    @property
    def alive(self) -> frozenset[int]:
        return frozenset(b for b, fenced in self.registered.items() if not fenced)

    @property
    def down(self) -> frozenset[int]:
        """Brokers fenced, or named by replicas and no longer registered."""
        gone = {b for b, n in self.replica_counts.items() if n and b not in self.registered}
        return frozenset({b for b, fenced in self.registered.items() if fenced} | gone)

    def holds(self, broker: int) -> int:
        return self.replica_counts.get(broker, 0)

    def log_dir(self, broker: int, path: str) -> LogDir | None:
        return next((d for d in (self.dirs or {}).get(broker, ()) if d.path.rstrip("/") == path.rstrip("/")), None)

    def cordoned_brokers(self) -> frozenset[int]:
        return frozenset(b for b, v in self.cordons.items() if parse_cordon(v) == ALL_DIRS)

    def cordoned_dirs(self) -> frozenset[tuple[int, str]]:
        out: set[tuple[int, str]] = set()
        for b, value in self.cordons.items():
            cordon = parse_cordon(value)
            if cordon != ALL_DIRS:
                out.update((b, p) for p in cordon)
        for b, ds in (self.dirs or {}).items():  # static cordons too, as DescribeLogDirs v5 reports them
            out.update((b, d.path) for d in ds if d.cordoned and b not in self.cordoned_brokers())
        return frozenset(out)

    def far_from_mean(self, band: float, min_replicas: int) -> frozenset[int]:
        """The live brokers holding replicas whose count is further from the mean than ``band`` of it (and than
        ``min_replicas``): the watch's imbalance rule (core/healing/observation.py), on replica counts."""
        counts = {b: self.holds(b) for b in self.alive if self.holds(b)}
        if len(counts) < 2:
            return frozenset()
        mean = sum(counts.values()) / len(counts)
        return frozenset(b for b, n in counts.items() if abs(n - mean) > max(band * mean, min_replicas))


def cluster_view(admin: ClusterAdmin, *, with_dirs: bool = False) -> ClusterView:
    """Read the :class:`ClusterView` (see the module docstring); ``with_dirs``: DescribeLogDirs of every partition."""
    description = admin.describe_cluster(include_fenced=True)
    registered = {b.id: b.fenced for b in description.brokers}
    snapshot = admin.snapshot()
    counts: dict[int, int] = {b: 0 for b in registered}
    min_isr = {t.name: t.min_insync_replicas for t in snapshot.topics}
    under = 0
    for p in snapshot.partitions:
        for b in p.target_replicas:
            counts[b] = counts.get(b, 0) + 1
        need = min_isr.get(p.topic)
        if need is not None and len(p.isr) < need:
            under += 1
    alive = sorted(b for b, fenced in registered.items() if not fenced)
    cordons = admin.describe_cordons(alive) if alive and admin.capabilities().cordons else {}
    lists = any(v and parse_cordon(v) != ALL_DIRS for v in cordons.values())
    dirs = admin.log_dirs(None).dirs if with_dirs or lists else None
    return ClusterView(registered=registered, replica_counts=counts,
                       in_flight=tuple(p.tp for p in snapshot.reassigning()), cordons=cordons, dirs=dirs,
                       under_min_isr=under)
