"""What the cluster watch observes at one poll, and the conditions it finds there.

One poll costs a constant number of requests whatever the size of the cluster (:func:`observe`):

* DescribeCluster with fenced brokers (KIP-1073, Kafka 4.0+): the controller's view of which registered brokers
  are fenced (shut down, or not heartbeating), not whether the watch itself can reach them;
* DescribeLogDirs asking for NO partition (``Topics=[]``), one per live broker: each log dir, offline or not,
  with its total and usable bytes (KIP-827) and KIP-1066's cordon flag; a few hundred bytes per broker;
* one Metadata request of every partition (replicas, ISR, leader), folded at once into a few numbers per broker
  (:func:`fold_partitions`), with each topic's ``min.insync.replicas`` read rarely and kept (the adapter's
  :meth:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterAdmin.partition_health`). Only when a watched kind
  needs it: ``broker_down`` alone on Kafka 4.0+ does not send it.

:func:`conditions_of` turns an observation into :class:`Condition` s, one per subject (a broker, a log dir, or the
cluster), and says what it could NOT see (:class:`Seen`): a broker's log dirs while it does not answer, a kind whose
request was not sent. A condition the watch cannot see is neither cleared nor fired
(:func:`~airflow_kafka_reassign.core.healing.watch.advance`): a full disk on a broker that then stops answering is
not taken as fixed.

The conditions (docs/self-healing-watch.md has them with their dwell and recovery times):

``broker_down``
    a registered broker that DescribeCluster lists fenced; on a cluster without KIP-1073 (older than 4.0, where a
    fenced broker is simply not listed), a broker that holds replicas but is not listed.
``log_dir_offline``
    a log dir its broker reports with an error (``KAFKA_STORAGE_ERROR``: a failed disk).
``log_dir_full``
    a log dir whose volume is used at or above ``log_dir_full_ratio`` (``1 - usable / total``).
``under_min_isr``
    partitions whose ISR is smaller than their ``min.insync.replicas`` (one condition for the cluster; the incident
    names the brokers out of their ISR).
``empty_broker``
    a registered, unfenced broker that holds no replica while others do, and is not cordoned on every log dir
    (a broker being drained for its decommission is cordoned, KIP-1066): a scale-out waiting for its share.
``imbalance``
    among the unfenced brokers that hold replicas and are not fully cordoned: a broker whose replica count is
    further than ``imbalance_band`` of the mean from it (and more than :data:`IMBALANCE_MIN_REPLICAS`), or whose
    disk usage (used share of its volumes) is further than ``imbalance_band`` of the mean usage from it (when the
    mean is at least :data:`IMBALANCE_MIN_DISK_RATIO`). One condition for the cluster; the incident names those
    brokers.

Pure: imports no Airflow, no Kafka client, no PySpark.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_kafka_reassign.core.healing.incident import IncidentKind, LogDirRef
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import ClusterDescription, DiskSpace, LogDirs, PartitionHealth

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.healing.settings import WatchSettings
    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin

#: Partitions under min ISR named in a :class:`PartitionHealth` (and an incident's detail).
UNDER_MIN_ISR_SAMPLE = 20
#: A broker's replica count is out of the band only when it is also this many replicas from the mean: a small
#: cluster (a few dozen partitions) is never "imbalanced" by one or two replicas.
IMBALANCE_MIN_REPLICAS = 5
#: Disk usage is compared only when the brokers' mean used share is at least this (an empty cluster's disks
#: differ by what the operating system keeps there, not by Kafka's data).
IMBALANCE_MIN_DISK_RATIO = 0.05
#: The kinds whose subject is a log dir.
LOG_DIR_KINDS = frozenset({"log_dir_offline", "log_dir_full"})
#: The kinds that need the Metadata of every partition.
PARTITION_KINDS = frozenset({"under_min_isr", "empty_broker", "imbalance"})
#: The kinds that need DescribeLogDirs (``empty_broker`` and ``imbalance`` for the cordon flags and the disks).
DIR_KINDS = LOG_DIR_KINDS | {"empty_broker", "imbalance"}


def fold_partitions(
    rows: Iterable[tuple[str, int, Sequence[int], Sequence[int], int]], min_isr: Mapping[str, int], *,
    min_isr_unknown: Collection[str] = (), sample: int = UNDER_MIN_ISR_SAMPLE,
) -> PartitionHealth:
    """:class:`PartitionHealth` from every partition's ``(topic, partition, replicas, isr, leader)`` (a leader below
    0: none) and each topic's ``min.insync.replicas`` (a topic not in ``min_isr``: 1). One pass, a few dict updates
    per partition: about 0.1 s for 100,000 partitions (tests/benchmarks/bench_cluster_watch.py)."""
    replicas: dict[int, int] = {}
    leaders: dict[int, int] = {}
    out_of_isr: dict[int, int] = {}
    under: list[TopicPartition] = []
    count = offline = above_rf = 0
    for topic, partition, reps, isr, leader in rows:
        count += 1
        for b in reps:
            replicas[b] = replicas.get(b, 0) + 1
        if leader is not None and leader >= 0:
            leaders[leader] = leaders.get(leader, 0) + 1
        else:
            offline += 1
        need = min_isr.get(topic, 1)
        if len(isr) >= need:
            continue
        if len(reps) < need:
            above_rf += 1
            continue
        under.append(TopicPartition(topic, partition))
        in_isr = set(isr)
        for b in reps:
            if b not in in_isr:
                out_of_isr[b] = out_of_isr.get(b, 0) + 1
    return PartitionHealth(
        partitions=count, replicas=replicas, leaders=leaders, under_min_isr=len(under),
        under_min_isr_sample=tuple(sorted(under)[:sample]), out_of_isr=out_of_isr, offline=offline,
        min_isr_above_rf=above_rf, min_isr_unknown=tuple(sorted(min_isr_unknown)),
    )


@dataclass(frozen=True)
class WatchObservation:
    """What one poll read (``None``: not asked, as no watched kind needs it)."""

    cluster: ClusterDescription
    log_dirs: LogDirs | None = None
    partitions: PartitionHealth | None = None


def observe(admin: ClusterAdmin, settings: WatchSettings) -> WatchObservation:
    """One poll's requests, only those the watched kinds need (see the module docstring)."""
    kinds = set(settings.kinds)
    cluster = admin.describe_cluster(include_fenced=True)
    dirs = admin.log_dirs(()) if kinds & DIR_KINDS else None
    # without KIP-1073 a fenced broker is not listed at all: it is found as a holder of replicas that is not listed
    need_parts = bool(kinds & PARTITION_KINDS) or ("broker_down" in kinds and not cluster.includes_fenced)
    parts = admin.partition_health() if need_parts else None
    return WatchObservation(cluster=cluster, log_dirs=dirs, partitions=parts)


@dataclass(frozen=True)
class Condition:
    """One condition seen at one poll: its kind, its subject (``b5``, ``d5:/data/1``, ``cluster``), the brokers or
    log dirs an incident would name, and small facts for the incident's detail."""

    kind: IncidentKind
    subject: str
    brokers: tuple[int, ...] = ()
    dirs: tuple[LogDirRef, ...] = ()
    detail: Mapping[str, int | float | str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """``<kind>/<subject>``: what the watch state keeps it under (one occurrence at a time per key)."""
        return f"{self.kind}/{self.subject}"


@dataclass(frozen=True)
class Seen:
    """The conditions of one observation, and what it could not see: whole kinds (``blind_kinds``) and the log
    dirs of some registered brokers (``blind_brokers``: fenced, or not answering DescribeLogDirs)."""

    conditions: tuple[Condition, ...]
    blind_kinds: frozenset[str] = frozenset()
    blind_brokers: frozenset[int] = frozenset()

    def is_blind(self, kind: str, dirs: Iterable[LogDirRef]) -> bool:
        """Whether a condition of ``kind`` about ``dirs`` could not be seen (so it is neither cleared nor fired)."""
        if kind in self.blind_kinds:
            return True
        brokers = {d.broker for d in dirs}
        return kind in LOG_DIR_KINDS and bool(brokers) and brokers <= self.blind_brokers


def _fully_cordoned(dirs: Sequence[object]) -> bool:
    flags = [getattr(d, "cordoned", None) for d in dirs]
    return bool(flags) and all(f is True for f in flags)


def _ratio(x: float) -> float:
    return round(x, 4)


def conditions_of(obs: WatchObservation, settings: WatchSettings) -> Seen:
    """The conditions of the watched kinds in ``obs`` (see the module docstring for each)."""
    kinds = set(settings.kinds)
    found: list[Condition] = []
    blind_kinds: set[str] = set()
    registered = {b.id: b for b in obs.cluster.brokers}
    fenced = {b for b, r in registered.items() if r.fenced}
    parts = obs.partitions
    dirs = obs.log_dirs

    if "broker_down" in kinds:
        for b in sorted(fenced):
            held = parts.replicas.get(b, 0) if parts else None
            found.append(Condition("broker_down", f"b{b}", brokers=(b,),
                                   detail={"fenced": 1, **({"replicas": held} if held is not None else {})}))
        if not obs.cluster.includes_fenced:
            if parts is None:
                blind_kinds.add("broker_down")
            else:  # a holder of replicas the controller does not list (Kafka < 4.0: a fenced broker is not listed)
                for b in sorted(set(parts.replicas) - set(registered)):
                    found.append(Condition("broker_down", f"b{b}", brokers=(b,),
                                           detail={"fenced": 0, "replicas": parts.replicas[b]}))

    blind_brokers: set[int] = set()
    if dirs is None:
        blind_kinds.update(kinds & LOG_DIR_KINDS)
    else:
        blind_brokers = (set(registered) - set(dirs.dirs)) | set(dirs.unanswered)
        for b in sorted(dirs.dirs):
            for d in dirs.dirs[b]:
                ref = LogDirRef(broker=b, path=d.path)
                if d.offline and "log_dir_offline" in kinds:
                    found.append(Condition("log_dir_offline", f"d{ref}", dirs=(ref,),
                                           detail={"error": d.error or "offline"}))
                if (not d.offline and "log_dir_full" in kinds and d.total_bytes and d.usable_bytes is not None):
                    used = 1 - d.usable_bytes / d.total_bytes
                    if used >= settings.log_dir_full_ratio:
                        found.append(Condition("log_dir_full", f"d{ref}", dirs=(ref,), detail={
                            "used_ratio": _ratio(used), "threshold": settings.log_dir_full_ratio,
                            "usable_bytes": d.usable_bytes, "total_bytes": d.total_bytes}))

    if parts is None:
        blind_kinds.update(kinds & PARTITION_KINDS)
    else:
        if "under_min_isr" in kinds and parts.under_min_isr:
            out = tuple(sorted(parts.out_of_isr))
            found.append(Condition("under_min_isr", "cluster", brokers=out, detail={
                "partitions": parts.under_min_isr,
                "sample": ",".join(f"{tp.topic}-{tp.partition}" for tp in parts.under_min_isr_sample[:5]),
                "offline": parts.offline}))
        cordoned = {b for b, ds in (dirs.dirs.items() if dirs else ()) if _fully_cordoned(ds)}
        up = [b for b in sorted(registered) if b not in fenced and b not in cordoned]
        if "empty_broker" in kinds and sum(parts.replicas.values()) > 0:
            for b in up:
                if not parts.replicas.get(b):
                    found.append(Condition("empty_broker", f"b{b}", brokers=(b,),
                                           detail={"cluster_replicas": sum(parts.replicas.values())}))
        if "imbalance" in kinds:
            imbalance = _imbalance([b for b in up if parts.replicas.get(b)], parts, dirs, settings.imbalance_band)
            if imbalance is not None:
                found.append(imbalance)
    return Seen(conditions=tuple(found), blind_kinds=frozenset(blind_kinds), blind_brokers=frozenset(blind_brokers))


def _imbalance(brokers: Sequence[int], parts: PartitionHealth, dirs: LogDirs | None, band: float) -> Condition | None:
    if len(brokers) < 2:
        return None
    out: set[int] = set()
    detail: dict[str, int | float | str] = {"band": band}
    counts = {b: parts.replicas.get(b, 0) for b in brokers}
    mean = sum(counts.values()) / len(counts)
    slack = max(band * mean, IMBALANCE_MIN_REPLICAS)
    far = {b for b, n in counts.items() if abs(n - mean) > slack}
    if far:
        out |= far
        detail.update(replicas_min=min(counts.values()), replicas_max=max(counts.values()),
                      replicas_mean=round(mean, 1))
    if dirs is not None:
        usage = {}
        for b in brokers:
            space = dirs.space.get(b) or (DiskSpace.of_dirs(
                (d.total_bytes, d.usable_bytes) for d in dirs.dirs.get(b, ())
                if not d.offline and d.total_bytes and d.usable_bytes is not None) if b in dirs.dirs else None)
            if space is not None and space.total_bytes:
                usage[b] = 1 - space.usable_bytes / space.total_bytes
        if len(usage) >= 2:
            mean_usage = sum(usage.values()) / len(usage)
            if mean_usage >= IMBALANCE_MIN_DISK_RATIO:
                far_disk = {b for b, u in usage.items() if abs(u - mean_usage) > band * mean_usage}
                if far_disk:
                    out |= far_disk
                    detail.update(disk_used_min=_ratio(min(usage.values())), disk_used_max=_ratio(max(usage.values())),
                                  disk_used_mean=_ratio(mean_usage))
    if not out:
        return None
    detail["by"] = "+".join(k for k in ("replicas", "disk") if f"{k}_min" in detail or f"{k}_used_min" in detail)
    return Condition("imbalance", "cluster", brokers=tuple(sorted(out)), detail=detail)
