"""Deterministic synthetic clusters for planner tests and benchmarks.

:func:`synthetic_cluster` builds plain data (brokers, topics, replica lists, sizes) from a seed;
:func:`synthetic_snapshot` wraps it into a validated :class:`ClusterSnapshot`. The same seed and
parameters give the same cluster on every machine (``random.Random`` with an integer seed).

The placement imitates Kafka's own rack-aware assignment: brokers are listed rack-alternated,
each topic starts at a random offset, partition ``p``'s preferred leader is the ``p``-th broker
after that offset and its followers come from the next racks. That gives a cluster that is
nearly balanced per topic, the usual starting point of a scale-out or decommission.
``skew`` instead places a share of the partitions on brokers drawn with uneven weights (a
cluster that grew unevenly and needs a rebalance); ``rack_violations`` places a share of the
followers ignoring racks.

Brokers ``0 .. brokers-1`` hold the replicas; ``new_brokers`` more (ids continuing from
``brokers``) are registered but empty, as after a scale-out. Broker ``b`` is in rack
``rack-{b % racks}``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_kafka_reassign.core.vocabulary.models import Broker, ClusterSnapshot, PartitionState, ReassignmentPlan, TopicState

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.planner.goals import Scope

#: Partition counts a synthetic topic draws from (uneven topic sizes, mean about 40).
TOPIC_PARTITION_COUNTS = (1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 30, 32, 40, 48, 50, 60, 64, 96, 100, 128, 200)


#: ``sizes="skewed"``: log of the median topic's bytes per partition, sigma of a topic's size,
#: sigma of its partitions around it.
SKEWED_SIZES = (17.0, 2.0, 0.7)

#: Hardware classes :func:`synthetic_capacities` cycles through (relative disk sizes).
CAPACITY_CLASSES = (1.0, 2.0, 1.0, 0.5, 1.5)

#: Network factors :func:`synthetic_network_in` cycles through: a broker's ``network_in`` is its
#: disk class (:data:`CAPACITY_CLASSES`) times one of these, in a cycle of another length, so
#: larger brokers have more network but not in the same proportion.
NETWORK_CLASSES = (1.0, 0.8, 1.25, 1.0)

#: :func:`synthetic_rates`: log of the median topic's retention in seconds (about 3 days), its
#: sigma, the sigma of a partition's rate around its topic's, the share of hot topics and how
#: many times faster they are written than their size says.
RATE_RETENTION = (12.5, 1.0, 0.5)
HOT_TOPICS = (0.05, 20.0)


def synthetic_capacities(
    cluster: SyntheticCluster, *, fill: float = 0.6, classes: Sequence[float] = CAPACITY_CLASSES
) -> dict[int, int]:
    """Heterogeneous disk capacities (bytes) for ``cluster``'s brokers: each rack's brokers cycle
    through ``classes`` (so every rack gets the same mix of hardware), scaled so that the
    cluster's bytes fill ``fill`` of the total capacity."""
    total = sum((t.sizes[p] if t.sizes else 0) * len(r) for t in cluster.topics for p, r in enumerate(t.replicas))
    seen: dict[str | None, int] = {}
    weight: dict[int, float] = {}
    for b, rack in cluster.brokers:
        i = seen.get(rack, 0)
        seen[rack] = i + 1
        weight[b] = classes[i % len(classes)]
    unit = total / fill / sum(weight.values()) if total else 1.0
    return {b: max(1, int(w * unit)) for b, w in weight.items()}


def synthetic_rates(cluster: SyntheticCluster, *, seed: int = 0) -> None:
    """Give every topic of ``cluster`` (with sizes) log-normal bytes-in rates per partition, in place.

    A partition's rate is its size over its topic's retention (log-normal around 3 days,
    :data:`RATE_RETENTION`), times a log-normal factor of its own; a share of the topics are hot
    (:data:`HOT_TOPICS`: written many times faster than their size says, short retention).
    Its own ``random.Random(seed)``: the cluster's placement and sizes stay those of its seed."""
    rng = random.Random(seed * 7919 + 17)
    mu, sigma_topic, sigma_part = RATE_RETENTION
    share, factor = HOT_TOPICS
    for t in cluster.topics:
        if t.sizes is None:
            continue
        retention = rng.lognormvariate(mu, sigma_topic)
        if rng.random() < share:
            retention /= factor
        t.rates = [s / retention * rng.lognormvariate(0, sigma_part) for s in t.sizes]


def synthetic_network_in(
    cluster: SyntheticCluster, *, fill: float = 0.5, classes: Sequence[float] = NETWORK_CLASSES,
    disk_classes: Sequence[float] | None = CAPACITY_CLASSES,
) -> dict[int, int]:
    """Heterogeneous ``network_in`` capacities (bytes/s) for ``cluster``'s brokers, like
    :func:`synthetic_capacities` (each rack's brokers cycle through ``classes``, times the broker's
    class in ``disk_classes``; ``None``: network independent of the disk), scaled so the brokers'
    bytes in (every replica's rate) fill ``fill`` of the total."""
    total = sum(r * len(reps) for t in cluster.topics if t.rates for r, reps in zip(t.rates, t.replicas, strict=True))
    seen: dict[str | None, int] = {}
    weight: dict[int, float] = {}
    for b, rack in cluster.brokers:
        i = seen.get(rack, 0)
        seen[rack] = i + 1
        weight[b] = classes[i % len(classes)] * (disk_classes[i % len(disk_classes)] if disk_classes else 1.0)
    unit = total / fill / sum(weight.values()) if total else 1.0
    return {b: max(1, int(w * unit)) for b, w in weight.items()}


@dataclass
class SyntheticTopic:
    name: str
    replication_factor: int
    #: Replica list of each partition, preferred leader first, partition ``i`` at index ``i``.
    replicas: list[tuple[int, ...]]
    #: Bytes of each partition (every replica of a partition has the same size), or ``None``.
    sizes: list[int] | None = None
    internal: bool = False
    #: Bytes-in rate of each partition (bytes/s, :func:`synthetic_rates`), or ``None``.
    rates: list[float] | None = None
    #: Partition index -> (adding replicas, removing replicas) of an in-flight reassignment;
    #: ``replicas`` then holds the reassignment's *target* replicas.
    in_flight: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)


@dataclass
class SyntheticCluster:
    #: (broker id, rack) of every broker, new ones included.
    brokers: list[tuple[int, str | None]]
    topics: list[SyntheticTopic]

    @property
    def replica_count(self) -> int:
        return sum(len(r) for t in self.topics for r in t.replicas)

    @property
    def partition_count(self) -> int:
        return sum(len(t.replicas) for t in self.topics)


def _rack_alternated(ids: Sequence[int], rack_of: dict[int, str | None]) -> list[int]:
    """Kafka's rack-alternated broker list: one broker of each rack in turn."""
    by_rack: dict[str | None, list[int]] = {}
    for b in ids:
        by_rack.setdefault(rack_of[b], []).append(b)
    racks = sorted(by_rack, key=lambda r: (r is None, r or ""))
    out: list[int] = []
    i = 0
    while len(out) < len(ids):
        for r in racks:
            if i < len(by_rack[r]):
                out.append(by_rack[r][i])
        i += 1
    return out


def synthetic_cluster(
    *,
    brokers: int,
    racks: int = 1,
    replicas: int | None = None,
    topics: int | None = None,
    rf: Sequence[int] = (2, 3),
    new_brokers: int = 0,
    skew: float = 0.0,
    rack_violations: float = 0.0,
    sizes: bool | str = False,
    in_flight: int = 0,
    internal_topic: bool = False,
    partition_counts: Sequence[int] = TOPIC_PARTITION_COUNTS,
    seed: int = 0,
) -> SyntheticCluster:
    """Plain-data cluster: stop adding topics at ``topics`` topics or ``replicas`` replicas.

    ``rf``: the replication factors topics draw from (uniformly). ``skew`` in [0, 1]: the share
    of partitions placed on brokers drawn with weights growing with the broker id (a skewed
    cluster). ``rack_violations``: the share of partitions whose followers ignore racks.
    ``in_flight``: that many partitions get an in-flight reassignment (one replica replaced).
    ``internal_topic`` adds a 12-partition ``__consumer_offsets`` (RF 3 or fewer).
    ``sizes``: ``True`` gives every partition a log-normal size; ``"skewed"`` draws a log-normal
    size per topic (topics orders of magnitude apart, median about 24 MB) and log-normal
    partition sizes around it (:data:`SKEWED_SIZES`).
    """
    if topics is None and replicas is None:
        raise ValueError("synthetic_cluster needs topics= or replicas=")
    if max(rf) > brokers:
        raise ValueError(f"replication factor {max(rf)} is larger than {brokers} brokers")
    rng = random.Random(seed)
    rack_of: dict[int, str | None] = {
        b: (f"rack-{b % racks}" if racks > 1 else None) for b in range(brokers + new_brokers)
    }
    ids = list(range(brokers))
    alt = _rack_alternated(ids, rack_of)
    n = len(alt)
    rack_names = sorted({rack_of[b] for b in ids}, key=lambda r: (r is None, r or ""))
    rack_index = {b: rack_names.index(rack_of[b]) for b in ids}
    n_racks = len(rack_names)
    by_rack = [[b for b in ids if rack_index[b] == g] for g in range(n_racks)]
    weights = [1.0 + 4.0 * (b / max(1, brokers - 1)) ** 2 for b in ids]
    cum = []
    acc = 0.0
    for w in weights:
        acc += w
        cum.append(acc)

    def weighted_broker() -> int:
        x = rng.random() * acc
        lo, hi = 0, len(cum) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if cum[mid] < x:
                lo = mid + 1
            else:
                hi = mid
        return ids[lo]

    out: list[SyntheticTopic] = []
    total = 0
    while True:
        if topics is not None and len(out) >= topics:
            break
        if replicas is not None and total >= replicas:
            break
        t_rf = rf[rng.randrange(len(rf))]
        count = partition_counts[rng.randrange(len(partition_counts))]
        if replicas is not None:
            count = max(1, min(count, math.ceil((replicas - total) / t_rf)))
        start = rng.randrange(n)
        # followers: the next racks after the leader's, round-robin inside each rack from a
        # random offset (an evenly spread topic, as Kafka's assignment of a new topic is)
        offsets = [rng.randrange(len(m)) for m in by_rack]
        turn = [0] * n_racks
        rack_shift = rng.randrange(max(1, n_racks - 1))  # which rack follows which (Kafka's replica shift)
        reps: list[tuple[int, ...]] = []
        for p in range(count):
            if skew and rng.random() < skew:
                leader = weighted_broker()
                chosen = [leader]
                used_racks = {rack_of[leader]}
                tries = 0
                while len(chosen) < t_rf:
                    b = weighted_broker()
                    tries += 1
                    if b in chosen:
                        continue
                    if racks > 1 and rack_of[b] in used_racks and len(used_racks) < racks and tries < 50:
                        continue
                    chosen.append(b)
                    used_racks.add(rack_of[b])
                reps.append(tuple(chosen))
                continue
            leader_pos = (start + p) % n
            chosen = [alt[leader_pos]]
            ignore_racks = racks > 1 and rack_violations > 0 and rng.random() < rack_violations
            if ignore_racks:
                same = [x for x in ids if rack_of[x] == rack_of[chosen[0]] and x not in chosen]
                while same and len(chosen) < t_rf:
                    chosen.append(same.pop(rng.randrange(len(same))))
            lr = rack_index[chosen[0]]
            j = 0
            while len(chosen) < t_rf:
                j += 1
                # the other racks in turn, starting at a per-topic shift; beyond RF = racks, any
                if n_racks > 1 and j < n_racks:
                    g = (lr + 1 + (j - 1 + rack_shift) % (n_racks - 1)) % n_racks
                else:
                    g = (lr + j) % n_racks
                members = by_rack[g]
                k = len(members)
                for step in range(k):
                    b = members[(turn[g] + offsets[g] + step) % k]
                    if b not in chosen:
                        chosen.append(b)
                        turn[g] += step + 1
                        break
            reps.append(tuple(chosen))
        t_sizes = None
        if sizes == "skewed":
            mu, sigma_topic, sigma_part = SKEWED_SIZES
            base = rng.lognormvariate(mu, sigma_topic)
            t_sizes = [max(1, int(base * rng.lognormvariate(0, sigma_part))) for _ in range(count)]
        elif sizes:
            t_sizes = [int(rng.lognormvariate(18, 1.5)) for _ in range(count)]
        out.append(SyntheticTopic(f"topic-{len(out):05d}", t_rf, reps, t_sizes))
        total += sum(len(r) for r in reps)

    if internal_topic:
        irf = min(3, brokers)
        reps = [tuple(alt[(p + i) % n] for i in range(irf)) for p in range(12)]
        out.append(SyntheticTopic("__consumer_offsets", irf, reps, None, internal=True))

    if in_flight:
        candidates = [(ti, pi) for ti, t in enumerate(out) if not t.internal for pi in range(len(t.replicas))]
        for ti, pi in sorted(rng.sample(candidates, min(in_flight, len(candidates)))):
            t = out[ti]
            original = t.replicas[pi]
            free = [b for b in ids if b not in original]
            if not free:
                continue
            new = free[rng.randrange(len(free))]
            target = (*original[:-1], new)
            t.replicas[pi] = target
            t.in_flight[pi] = ((new,), (original[-1],))
    return SyntheticCluster([(b, rack_of[b]) for b in range(brokers + new_brokers)], out)


def to_snapshot(cluster: SyntheticCluster, *, validate: bool = True) -> ClusterSnapshot:
    """The cluster as a :class:`ClusterSnapshot` (``validate=False`` skips pydantic validation,
    for benchmark-sized clusters)."""
    build_b = Broker if validate else Broker.model_construct
    build_t = TopicState if validate else TopicState.model_construct
    build_p = PartitionState if validate else PartitionState.model_construct
    topics = []
    parts = []
    for t in cluster.topics:
        topics.append(
            build_t(
                name=t.name,
                internal=t.internal,
                partition_count=len(t.replicas),
                replication_factor=t.replication_factor,
                configs={},
            )
        )
        for p, target in enumerate(t.replicas):
            adding, removing = t.in_flight.get(p, ((), ()))
            reps = (*target, *removing)
            sizes = {b: t.sizes[p] for b in reps} if t.sizes is not None else None
            parts.append(
                build_p(
                    topic=t.name,
                    partition=p,
                    replicas=reps,
                    isr=tuple(b for b in reps if b not in adding),
                    leader=reps[0],
                    adding_replicas=adding,
                    removing_replicas=removing,
                    replica_sizes=sizes,
                    bytes_in_per_s=t.rates[p] if t.rates is not None else None,
                )
            )
    brokers = tuple(build_b(id=b, rack=r) for b, r in cluster.brokers)
    if validate:
        return ClusterSnapshot(cluster_id="synthetic", brokers=brokers, topics=tuple(topics), partitions=tuple(parts))
    return ClusterSnapshot.model_construct(
        cluster_id="synthetic", brokers=brokers, topics=tuple(topics), partitions=tuple(parts)
    )


def synthetic_snapshot(*, validate: bool = True, **kwargs: object) -> ClusterSnapshot:
    """:func:`synthetic_cluster` as a :class:`ClusterSnapshot`; same keyword arguments."""
    return to_snapshot(synthetic_cluster(**kwargs), validate=validate)  # type: ignore[arg-type]


def planner_scope(cluster: SyntheticCluster, *, removed: Sequence[int] = ()) -> Scope:
    """Planner input straight from plain data (what the Spark job builds from columns),
    without a pydantic snapshot: every topic balanced, in-flight partitions frozen."""
    from airflow_kafka_reassign.core.planner.goals import Scope
    from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicPartitions

    gone = set(removed)
    names = sorted({r for _, r in cluster.brokers if r is not None})
    index = {name: i for i, name in enumerate(names)}
    rack_of = {b: (index[r] if r is not None else 0) for b, r in cluster.brokers}
    live = tuple(sorted(b for b, _ in cluster.brokers if b not in gone))
    layout = BrokerLayout(
        brokers=live, rack_of=rack_of, rack_names=tuple(names) or (None,), removed=tuple(sorted(gone))
    )
    topics = []
    for t in cluster.topics:
        if t.internal:
            continue
        n = len(t.replicas)
        topics.append(
            TopicPartitions(
                topic=t.name,
                partitions=list(range(n)),
                replicas=list(t.replicas),
                target_rf=[len(r) for r in t.replicas],
                frozen=[p in t.in_flight for p in range(n)] if t.in_flight else None,
                sizes=t.sizes,
            )
        )
    return Scope(layout=layout, topics=topics, broker_racks=dict(cluster.brokers))


def apply_plan(snapshot: ClusterSnapshot, plan: ReassignmentPlan) -> ClusterSnapshot:
    """The snapshot as it is once ``plan`` is done (replicas, leaders and ISR follow the moves;
    replica sizes carry over to the new replicas)."""
    moves = plan.by_partition()
    parts = []
    for p in snapshot.partitions:
        m = moves.get(p.tp)
        if m is None:
            parts.append(p)
            continue
        reps = m.target_replicas
        size = max(p.replica_sizes.values()) if p.replica_sizes else None
        parts.append(
            p.model_copy(
                update={
                    "replicas": reps,
                    "isr": reps,
                    "leader": reps[0],
                    "adding_replicas": (),
                    "removing_replicas": (),
                    "replica_sizes": {b: size for b in reps} if size is not None else None,
                }
            )
        )
    return snapshot.model_copy(update={"partitions": tuple(parts)})


def snapshot_from_assignment(
    brokers: Mapping[int, str | None] | Sequence[int],
    topics: Mapping[str, Sequence[Sequence[int]]],
    *,
    sizes: Mapping[str, Sequence[int]] | None = None,
    internal: Sequence[str] = (),
) -> ClusterSnapshot:
    """A validated snapshot from replica lists: ``{"orders": [[0, 1], [1, 2]]}`` gives
    partitions orders-0 and orders-1; ``brokers`` maps id -> rack (or lists ids, no racks)."""
    racks = dict(brokers) if isinstance(brokers, Mapping) else dict.fromkeys(brokers)
    parts = []
    states = []
    for name, replica_lists in topics.items():
        rf = len(replica_lists[0]) if replica_lists else 0
        states.append(
            TopicState(name=name, internal=name in internal, partition_count=len(replica_lists), replication_factor=rf)
        )
        for p, reps in enumerate(replica_lists):
            size = sizes[name][p] if sizes and name in sizes else None
            parts.append(
                PartitionState(
                    topic=name,
                    partition=p,
                    replicas=tuple(reps),
                    isr=tuple(reps),
                    leader=reps[0],
                    replica_sizes={b: size for b in reps} if size is not None else None,
                )
            )
    return ClusterSnapshot(
        cluster_id="hand-made",
        brokers=tuple(Broker(id=b, rack=r) for b, r in sorted(racks.items())),
        topics=tuple(states),
        partitions=tuple(parts),
    )
