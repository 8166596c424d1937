"""An in-memory :class:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterAdmin` for fast unit tests.

It mimics a KRaft controller closely enough for planning, guard and execution logic:
AlterPartitionReassignments with KIP-860's AllowReplicationFactorChange semantics
(including an already-reassigning partition compared by its target size), cancel back to the
original replicas (KIP-455) in the order of the controller's merged list as Kafka does (not
necessarily the order before), a reorder that completes at once, leaders that stay while alive,
dynamic throttle configs, CreatePartitions, and the maintenance primitives: cordons that the
controller's placement avoids (and, as Kafka 4.4 does, explicit assignments onto a cordoned broker refused: a
reassignment whose target names a fully cordoned broker at all, even one that only reorders replicas already there;
``cordons_refuse_explicit_assignments=False`` behaves as 4.3.0/4.3.1 and accepts them), a KRaft quorum
(``voters``), fenced brokers (``down``), UnregisterBroker, JBOD log dirs with intra-broker moves that stay
in flight (a future replica) until :meth:`FakeClusterAdmin.complete_log_dir_moves`. Reassignments stay
in flight until :meth:`FakeClusterAdmin.complete` is called (or at once with
``auto_complete=True``). Snapshots are complete or fail as the adapter's do: :meth:`FakeClusterAdmin.hide`
makes a topic's configs or partitions invisible for some reads, as while the cluster's metadata
settles, and the snapshot reads again on the fake's own clock (no real waiting).

It is a fake: nothing here proves that the real cluster behaves the same. The integration
tests in ``tests/integration`` do that against a real multi-broker Kafka.

Example::

    >>> fake = FakeClusterAdmin.build(brokers={1: "r1", 2: "r2", 3: "r3"},
    ...                               topics={"orders": [[1, 2], [2, 3]]})
    >>> fake.alter_reassignments({TopicPartition("orders", 0): [3, 2]}).failed
    ()
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from airflow_kafka_reassign.core.execution.throttle import BROKER_THROTTLE_KEYS, TOPIC_THROTTLE_KEYS
from airflow_kafka_reassign.core.guards.completeness import DEFAULT_SETTLE_S, Gaps, TopicMetadata, find_gaps, settle
from airflow_kafka_reassign.core.guards.kafka_line import check_kafka_line
from airflow_kafka_reassign.core.healing.observation import fold_partitions
from airflow_kafka_reassign.core.maintenance.cordon import ALL_DIRS, CORDONED_LOG_DIRS, parse_cordon
from airflow_kafka_reassign.core.vocabulary.models import (
    Broker,
    ClusterSnapshot,
    PartitionState,
    SnapshotCheck,
    TopicPartition,
    TopicState,
    check_replica_list,
)
from airflow_kafka_reassign.core.vocabulary.ports import (
    AlterResult,
    BrokerResult,
    ClusterCapabilities,
    ClusterDescription,
    DirReplica,
    DiskSpace,
    EligibleLeaders,
    InFlightReassignment,
    LogDir,
    LogDirs,
    NewPartitions,
    PartitionHealth,
    PartitionResult,
    QuorumInfo,
    QuorumMember,
    RegisteredBroker,
    ReplicaDirResult,
    RfGuard,
    ThrottleBackup,
    TopicPartitionReplica,
    TopicResult,
)
from airflow_kafka_reassign.exceptions import (
    BrokerUnreachableError,
    ConfigurationError,
    TopicNotFoundError,
    UnsupportedBrokerError,
)


class FakeClusterAdmin:
    """In-memory cluster state behind the ``ClusterAdmin`` port."""

    def __init__(
        self,
        brokers: Sequence[Broker],
        topics: Mapping[str, TopicState],
        replicas: Mapping[TopicPartition, Sequence[int]],
        *,
        rf_guard_supported: bool = True,
        auto_complete: bool = False,
        capabilities: ClusterCapabilities | None = None,
        log_dirs: int = 1,
    ) -> None:
        self.brokers = list(brokers)
        self.topics = dict(topics)
        self.replicas: dict[TopicPartition, tuple[int, ...]] = {tp: tuple(r) for tp, r in replicas.items()}
        self.inflight: dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self.broker_configs: dict[int, dict[str, str]] = {b.id: {} for b in self.brokers}
        self.topic_configs: dict[str, dict[str, str]] = {t: dict(s.configs) for t, s in self.topics.items()}
        self.down: set[int] = set()
        #: Brokers killed that the cluster still lists alive (before its session timeout): every read shows them,
        #: and a request addressed to one of them (its own configs) fails as the adapter reports it.
        self.silent: set[int] = set()
        #: While True, the adding replicas of a reassignment in flight are out of the ISR (still copying).
        self.catching_up = False
        #: Each partition's leader, when it is not its first live replica (as in Kafka, a leader stays while
        #: it is alive and a replica: through a reassignment and its cancel; an election makes the first lead).
        self.leaders: dict[TopicPartition, int] = {}
        self.rf_guard_supported = rf_guard_supported
        self.auto_complete = auto_complete
        #: Bytes on disk by partition and broker, as DescribeLogDirs would report them; tests
        #: set these to simulate a copy in progress (only brokers holding a replica are reported).
        self.sizes: dict[TopicPartition, dict[int, int]] = {}
        #: Each broker's disk (``{broker: total bytes}``, one log dir): usable = total minus the bytes of its
        #: replicas in :attr:`sizes`. A broker not listed has 1 TiB; ``None`` in place of a size: it reports no
        #: space (older than Kafka 3.3).
        self.disk_total: dict[int, int | None] = {}
        #: live brokers whose DescribeLogDirs fails (the disk guard holds the moves onto them)
        self.log_dirs_unanswered: set[int] = set()
        #: Calls of a :meth:`metadata_barrier` check that still lag (brokers replaying the controller's records).
        self.metadata_lag_polls = 0
        #: Number of calls per port method, for "constant RPCs per poke" assertions.
        self.calls: dict[str, int] = {}
        #: Every alter request as (targets, allow_replication_factor_change), for assertions.
        self.alter_requests: list[tuple[dict[TopicPartition, tuple[int, ...] | None], bool]] = []
        #: Topics whose metadata has not settled (:meth:`hide`): (configs unreadable, partitions absent, reads left).
        self.hidden: dict[str, tuple[bool, frozenset[int], int | None]] = {}
        #: The fake's clock in seconds (:meth:`sleep`), and the reads its snapshots made (several while unsettled).
        self.now = 0.0
        self.snapshot_reads = 0
        #: What the fake cluster supports: by default everything of Kafka 4.4 (metadata.version 33).
        self.caps = capabilities or ClusterCapabilities(
            metadata_version=33, cordons=True, cordons_refuse_explicit_assignments=True, describe_quorum=True,
            fenced_brokers=True, unregister_broker=True, jbod=True, eligible_leader_replicas=True, kafka_line="4.4")
        #: KIP-966: each partition's eligible leader replicas (and last known ELR), as tests set them: a replica left
        #: out of the ISR while the ISR was below min ISR (the fake does not track that order itself)
        self.elr: dict[TopicPartition, tuple[int, ...]] = {}
        self.last_known_elr: dict[TopicPartition, tuple[int, ...]] = {}
        #: The KRaft voters (as the sandbox: the first three brokers are combined broker+controller nodes).
        self.voters: list[int] = [b.id for b in self.brokers][:3]
        #: Each broker's log dirs (``/kafka/<broker>/data-<k>``); a replica is in its broker's first dir unless
        #: :attr:`replica_dirs` says otherwise.
        self.broker_dirs: dict[int, list[str]] = {b.id: [f"/kafka/{b.id}/data-{k}" for k in range(1, log_dirs + 1)]
                                                  for b in self.brokers}
        self.replica_dirs: dict[TopicPartitionReplica, str] = {}
        #: Intra-broker moves in flight: ``{replica: (target dir, offset lag)}``, until :meth:`complete_log_dir_moves`.
        self.log_dir_moves: dict[TopicPartitionReplica, tuple[str, int]] = {}
        #: Each log dir's volume in bytes (a dir not listed: 1 TiB); its usable bytes are that less the bytes of the
        #: replicas in it (:attr:`sizes`) and of the future replicas copied into it so far (size less offset lag).
        self.dir_total: dict[str, int] = {}
        #: Log dirs that failed (KAFKA_STORAGE_ERROR): listed offline, without replicas; no move into or out of them.
        self.offline_dirs: set[str] = set()
        #: Brokers whose registration was removed (UnregisterBroker): no longer listed anywhere.
        self.unregistered: set[int] = set()
        #: Each topic's id (KIP-516): a topic deleted and created again (:meth:`delete_topic`, :meth:`create_topic`)
        #: gets a new one; growing it (:meth:`grow_topic`) keeps it.
        self._ids_made = 0
        self.topic_ids: dict[str, str] = {}
        for name in self.topics:
            self._new_id(name)

    @classmethod
    def build(
        cls,
        brokers: Mapping[int, str | None],
        topics: Mapping[str, Sequence[Sequence[int]]],
        **kwargs: bool,
    ) -> FakeClusterAdmin:
        """A fake from ``{broker_id: rack}`` and ``{topic: [replicas of partition 0, ...]}``."""
        states = {
            name: TopicState(name=name, internal=name.startswith("__"), partition_count=len(parts),
                             replication_factor=len(parts[0]) if parts else 0)
            for name, parts in topics.items()
        }
        replicas = {
            TopicPartition(name, i): tuple(r) for name, parts in topics.items() for i, r in enumerate(parts)
        }
        return cls([Broker(id=b, rack=r) for b, r in sorted(brokers.items())], states, replicas, **kwargs)

    # -- test controls --------------------------------------------------------------------

    def _new_id(self, name: str) -> str:
        self._ids_made += 1
        self.topic_ids[name] = f"{name}-id-{self._ids_made}"
        return self.topic_ids[name]

    def delete_topic(self, name: str) -> None:
        """Delete topic ``name`` as Kafka does: its partitions, reassignments in flight and configs go with it."""
        del self.topics[name]
        self.topic_ids.pop(name, None)
        self.topic_configs.pop(name, None)
        for store in (self.replicas, self.inflight, self.sizes, self.leaders):
            for tp in [tp for tp in store if tp.topic == name]:
                del store[tp]  # type: ignore[attr-defined]
        for dirs in (self.replica_dirs, self.log_dir_moves):  # its logs, future ones (between log dirs) too
            for r in [r for r in dirs if r.topic == name]:
                del dirs[r]  # type: ignore[attr-defined]

    def create_topic(self, name: str, partitions: Sequence[Sequence[int]]) -> str:
        """Create topic ``name`` with these replicas per partition (a new topic id, returned)."""
        self.topics[name] = TopicState(name=name, partition_count=len(partitions),
                                       replication_factor=len(partitions[0]) if partitions else 0)
        self.topic_configs[name] = {}
        for i, r in enumerate(partitions):
            self.replicas[TopicPartition(name, i)] = tuple(r)
            for b in r:  # each new replica in a log dir its broker may place it in (not a cordoned one)
                self.replica_dirs[TopicPartitionReplica(name, i, b)] = self._place_dir(b)
        return self._new_id(name)

    def grow_topic(self, name: str, partitions: Sequence[Sequence[int]]) -> None:
        """Add partitions to topic ``name`` (CreatePartitions): the topic keeps its id and its partitions."""
        first = self.topics[name].partition_count
        for i, r in enumerate(partitions):
            self.replicas[TopicPartition(name, first + i)] = tuple(r)
            for b in r:
                self.replica_dirs[TopicPartitionReplica(name, first + i, b)] = self._place_dir(b)
        self.topics[name] = self.topics[name].model_copy(update={"partition_count": first + len(partitions)})

    def complete(self, partitions: Collection[TopicPartition] | None = None) -> None:
        """Finish in-flight reassignments (all, or the given ones)."""
        for tp in list(partitions if partitions is not None else self.inflight):
            if tp in self.inflight:
                original, target = self.inflight.pop(tp)
                self.replicas[tp] = target
                for b in set(target) - set(original):
                    self.replica_dirs[TopicPartitionReplica(tp.topic, tp.partition, b)] = self._place_dir(b)
                if self.leaders.get(tp) not in target:
                    self.leaders.pop(tp, None)

    def hide(self, topic: str, *, configs: bool = False, partitions: Collection[int] = (),
             reads: int | None = None) -> None:
        """Make the cluster's metadata unsettled for ``topic``, as right after it was created or grown:
        its configs unreadable (``configs``) and/or ``partitions`` absent from the metadata, for the
        next ``reads`` reads of a snapshot (``None``: until :meth:`reveal`). As on a real cluster,
        only a partition below the highest one visible can be told missing from the metadata alone:
        hide the last ones and the topic looks smaller (the adapter waits for every broker to catch
        up with the controller's metadata first, which this fake does not model)."""
        self.hidden[topic] = (configs, frozenset(partitions), reads)

    def reveal(self, topic: str | None = None) -> None:
        """Undo :meth:`hide` (for ``topic``, or every topic)."""
        if topic is None:
            self.hidden.clear()
        else:
            self.hidden.pop(topic, None)

    def complete_log_dir_moves(self, replicas: Collection[TopicPartitionReplica] | None = None) -> None:
        """Finish intra-broker moves (all, or the given replicas): the future replica replaces the current one."""
        for r in list(replicas if replicas is not None else self.log_dir_moves):
            if r in self.log_dir_moves:
                self.replica_dirs[TopicPartitionReplica(*r)] = self.log_dir_moves.pop(TopicPartitionReplica(*r))[0]

    def cordoned(self, broker: int) -> frozenset[str]:
        """The log dirs of ``broker`` its ``cordoned.log.dirs`` cordons."""
        cordon = parse_cordon(self.broker_configs.get(broker, {}).get(CORDONED_LOG_DIRS))
        return frozenset(self.broker_dirs.get(broker, ())) if cordon == ALL_DIRS else frozenset(cordon)

    def _fully_cordoned(self, broker: int) -> bool:
        dirs = set(self.broker_dirs.get(broker, ()))
        return self.caps.cordons and bool(dirs) and dirs <= self.cordoned(broker)

    def _place_dir(self, broker: int) -> str:
        """Where a new replica on ``broker`` goes: its first log dir that is not cordoned (Kafka picks one)."""
        dirs = self.broker_dirs.get(broker) or [f"/kafka/{broker}/data-1"]
        cordoned = self.cordoned(broker) if self.caps.cordons else frozenset()
        return next((d for d in dirs if d not in cordoned), dirs[0])

    def sleep(self, seconds: float) -> None:
        """The fake's clock: a snapshot's pauses between reads advance it, and take no time."""
        self.now += seconds

    # -- the port ---------------------------------------------------------------------------

    def snapshot(self, *, topics: Collection[str] | None = None, include_sizes: bool = False,
                 settle_timeout_s: float | None = None) -> ClusterSnapshot:
        """As the Kafka adapter: complete, or :class:`IncompleteSnapshotError` once
        ``settle_timeout_s`` (of the fake's clock) is spent with a topic still :meth:`hide` -den."""
        self.calls["snapshot"] = self.calls.get("snapshot", 0) + 1
        names = sorted(topics if topics is not None else self.topics)
        missing = [n for n in names if n not in self.topics]
        if missing:  # as the adapter does
            raise ConfigurationError(f"topic(s) {', '.join(missing)} do not exist in the cluster")
        budget = DEFAULT_SETTLE_S if settle_timeout_s is None else settle_timeout_s
        snap, attempts, spent = settle(lambda: self._read(names, include_sizes), budget_s=budget, what="the fake cluster",
                                       sleep=self.sleep, clock=lambda: self.now)
        check = SnapshotCheck.of(snap, source="cluster", attempts=attempts, settle_s=spent)
        return snap.model_copy(update={"check": check})

    def _read(self, names: Sequence[str], include_sizes: bool = False) -> tuple[ClusterSnapshot | None, Gaps]:
        """One read of the views a snapshot combines, checked as the adapter checks them."""
        self.snapshot_reads += 1
        unread: set[str] = set()
        absent: set[TopicPartition] = set()
        for topic, (configs, partitions, reads) in list(self.hidden.items()):
            if configs:
                unread.add(topic)
            absent.update(TopicPartition(topic, p) for p in partitions)
            if reads is not None:
                if reads <= 1:
                    del self.hidden[topic]
                else:
                    self.hidden[topic] = (configs, partitions, reads - 1)
        wanted = set(names)
        metadata: dict[str, dict[int, tuple[int, ...]]] = {n: {} for n in names}
        for tp in self.replicas:
            if tp.topic in wanted and tp not in absent:
                metadata[tp.topic][tp.partition] = self._replica_view(tp)[0]
        gaps = find_gaps({n: TopicMetadata(parts) for n, parts in metadata.items()},
                         configs=wanted - unread, reassigning=set(self.inflight))
        if gaps:
            return None, gaps
        parts = []
        for tp in sorted(self.replicas):
            if tp.topic not in wanted or tp in absent:
                continue
            replicas, adding, removing = self._replica_view(tp)
            live = tuple(b for b in replicas if b not in self.down and not (self.catching_up and b in adding))
            sizes = {b: n for b, n in self.sizes.get(tp, {}).items() if b in replicas} if include_sizes else None
            parts.append(PartitionState(
                topic=tp.topic, partition=tp.partition, replicas=replicas, isr=live,
                leader=self._leader(tp, live), adding_replicas=adding, removing_replicas=removing,
                **({"replica_sizes": sizes} if sizes else {}),
            ))
        topic_states = tuple(
            self.topics[n].model_copy(update={"configs": dict(self.topic_configs.get(n, {})),
                                              "partition_count": len(metadata[n]),
                                              "topic_id": self.topic_ids.get(n)})
            for n in names
        )
        live_brokers = tuple(b for b in self.brokers if b.id not in self.down)
        return ClusterSnapshot(cluster_id="fake", brokers=live_brokers, topics=topic_states,
                               partitions=tuple(parts)), gaps

    def _leader(self, tp: TopicPartition, live: Sequence[int]) -> int | None:
        kept = self.leaders.get(tp)
        if kept is not None and kept in live:
            return kept
        if tp in self.inflight:  # the leader of the replicas before the move leads until it completes
            first = next((b for b in self.inflight[tp][0] if b in live), None)
            if first is not None:
                self.leaders[tp] = first
                return first
        return live[0] if live else None

    def _replica_view(self, tp: TopicPartition) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        if tp not in self.inflight:
            return self.replicas[tp], (), ()
        original, target = self.inflight[tp]
        full = tuple(dict.fromkeys(target + original))
        return full, tuple(b for b in target if b not in original), tuple(b for b in original if b not in target)

    def list_reassignments(
        self, partitions: Collection[TopicPartition] | None = None
    ) -> dict[TopicPartition, InFlightReassignment]:
        self.calls["list_reassignments"] = self.calls.get("list_reassignments", 0) + 1
        out = {}
        for tp in self.inflight:
            if partitions is None or tp in partitions:
                full, adding, removing = self._replica_view(tp)
                out[tp] = InFlightReassignment(topic=tp.topic, partition=tp.partition, replicas=full,
                                               adding_replicas=adding, removing_replicas=removing)
        return out

    def replica_sizes(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, dict[int, int]]:
        self.calls["replica_sizes"] = self.calls.get("replica_sizes", 0) + 1
        out = {}
        for tp in partitions:
            if tp in self.sizes and tp in self.replicas:
                hosts = set(self._replica_view(tp)[0]) - self.down
                sizes = {b: n for b, n in self.sizes[tp].items() if b in hosts}
                if sizes:
                    out[tp] = sizes
        return out

    def log_dirs(self, partitions: Collection[TopicPartition] | None) -> LogDirs:
        wanted = set(self.replicas) if partitions is None else {TopicPartition(*tp) for tp in partitions}
        sizes = self.replica_sizes(wanted)  # one DescribeLogDirs per broker: counted as replica_sizes
        used: dict[int, int] = {b.id: 0 for b in self.brokers}
        for by_broker in self.sizes.values():
            for b, n in by_broker.items():
                if b in used:
                    used[b] += n
        space = {}
        for b in sorted({b.id for b in self.brokers} - self.down):
            total = self.disk_total.get(b, 2**40)
            if total is not None:
                space[b] = DiskSpace.one(total, max(0, total - used[b]))
        return LogDirs(sizes=sizes, space=space, unanswered=tuple(sorted(self.log_dirs_unanswered)),
                       dirs=self._dirs(wanted))

    def partition_health(self, *, min_isr_max_age_s: float = 3600.0) -> PartitionHealth:
        """As the adapter: every partition's replicas and ISR (a down broker out of it; adding replicas too while
        :attr:`catching_up`) folded with each topic's ``min.insync.replicas`` (its config, else 1)."""
        self.calls["partition_health"] = self.calls.get("partition_health", 0) + 1
        rows = []
        for tp in sorted(self.replicas):
            replicas, adding, _ = self._replica_view(tp)
            isr = tuple(b for b in replicas if b not in self.down and not (self.catching_up and b in adding))
            leader = self._leader(tp, isr)
            rows.append((tp.topic, tp.partition, replicas, isr, -1 if leader is None else leader))
        min_isr = {t: int(c["min.insync.replicas"]) for t, c in self.topic_configs.items() if "min.insync.replicas" in c}
        return fold_partitions(rows, min_isr)

    def _dirs(self, wanted: Collection[TopicPartition]) -> dict[int, tuple[LogDir, ...]]:
        held: dict[tuple[int, str], list[DirReplica]] = {}
        used: dict[str, int] = {}
        for tp in sorted(self.replicas):
            for b in self._replica_view(tp)[0]:
                r = TopicPartitionReplica(tp.topic, tp.partition, b)
                size = self.sizes.get(tp, {}).get(b, 0)
                where = self.replica_dirs.get(r) or self.broker_dirs.get(b, ["?"])[0]
                used[where] = used.get(where, 0) + size
                future = self.log_dir_moves.get(r)
                if future is not None:
                    used[future[0]] = used.get(future[0], 0) + max(0, size - future[1])
                if tp not in wanted:
                    continue
                held.setdefault((b, where), []).append(DirReplica(tp.topic, tp.partition, size))
                if future is not None:
                    held.setdefault((b, future[0]), []).append(
                        DirReplica(tp.topic, tp.partition, max(0, size - future[1]), future[1], future=True))
        out = {}
        for b in sorted({x.id for x in self.brokers} - self.down - self.log_dirs_unanswered):
            cordoned = self.cordoned(b) if self.caps.cordons else frozenset()
            dirs = []
            for d in self.broker_dirs.get(b, ()):
                total = self.dir_total.get(d, 2**40)
                if d in self.offline_dirs:
                    dirs.append(LogDir(path=d, offline=True, error="KAFKA_STORAGE_ERROR"))
                    continue
                dirs.append(LogDir(path=d, cordoned=(d in cordoned) if self.caps.cordons else None,
                                   total_bytes=total, usable_bytes=max(0, total - used.get(d, 0)),
                                   replicas=tuple(held.get((b, d), ()))))
            out[b] = tuple(dirs)
        return out

    def alter_reassignments(
        self,
        targets: Mapping[TopicPartition, Sequence[int]],
        *,
        allow_replication_factor_change: bool = False,
        rf_guard: RfGuard = "broker",
    ) -> AlterResult:
        if not allow_replication_factor_change and rf_guard == "broker" and not self.rf_guard_supported:
            raise UnsupportedBrokerError("fake broker: AlterPartitionReassignments v0 only; nothing was sent")
        self.alter_requests.append(({tp: tuple(r) for tp, r in targets.items()}, allow_replication_factor_change))
        results = []
        registered = {x.id for x in self.brokers}
        for tp, target in targets.items():
            tp = TopicPartition(*tp)
            target = check_replica_list(target, what="target replicas", where=f"partition {tp}")
            error = None
            if tp not in self.replicas:
                error = ("UNKNOWN_TOPIC_OR_PARTITION", f"partition {tp} does not exist")
            elif any(b not in registered for b in target):
                error = ("INVALID_REPLICA_ASSIGNMENT", f"unknown broker in {list(target)}")
            elif self.caps.cordons_refuse_explicit_assignments and (cordoned := [
                    b for b in target if self._fully_cordoned(b)]):  # 4.4.0: any broker the target names
                error = ("INVALID_REPLICA_ASSIGNMENT", f"The manual partition assignment includes broker "
                                                       f"{cordoned[0]}, but all its log directories are cordoned.")
            else:
                current_target = self.inflight[tp][1] if tp in self.inflight else self.replicas[tp]
                if not allow_replication_factor_change and len(current_target) != len(target):
                    error = ("INVALID_REPLICATION_FACTOR",
                             "The replication factor is changed from "
                             f"{len(current_target)} to {len(target)}")
            if error:
                results.append(PartitionResult(topic=tp.topic, partition=tp.partition,
                                               error_code=error[0], error=error[1]))
                continue
            original = self.inflight[tp][0] if tp in self.inflight else self.replicas[tp]
            if target == original:
                self.inflight.pop(tp, None)
            elif tp not in self.inflight and set(target) == set(original):
                self.replicas[tp] = target  # a reorder adds no replica: Kafka completes it at once
            else:
                self.inflight[tp] = (original, target)
            results.append(PartitionResult(topic=tp.topic, partition=tp.partition))
        if self.auto_complete:
            self.complete()
        version = 1 if self.rf_guard_supported else 0
        return AlterResult(results=tuple(results), request_version=version, rf_guard=rf_guard)

    def cancel_reassignments(self, partitions: Collection[TopicPartition]) -> AlterResult:
        results = []
        for tp in partitions:
            if tp in self.inflight:
                # as Kafka's controller: the replicas before the move, in the order of its merged list
                # (target first), which is not necessarily their order before: [1, 2, 3] -> [5, 4, 3]
                # cancelled comes back as [3, 1, 2]
                full, adding, _ = self._replica_view(tp)
                self.inflight.pop(tp)
                self.replicas[tp] = tuple(b for b in full if b not in adding)
                results.append(PartitionResult(topic=tp.topic, partition=tp.partition))
            else:
                results.append(PartitionResult(topic=tp.topic, partition=tp.partition,
                                               error_code="NO_REASSIGNMENT_IN_PROGRESS",
                                               error="no reassignment in progress"))
        return AlterResult(results=tuple(results), request_version=1)

    def create_partitions(self, requests: Sequence[NewPartitions], *, validate_only: bool = False) -> dict[str, TopicResult]:
        out = {}
        for r in requests:
            have = sorted(tp.partition for tp in self.replicas if tp.topic == r.topic)
            if r.topic not in self.topics:
                out[r.topic] = TopicResult(topic=r.topic, error_code="UNKNOWN_TOPIC_OR_PARTITION", error="no such topic")
                continue
            if r.total_count <= len(have):
                out[r.topic] = TopicResult(topic=r.topic, error_code="INVALID_PARTITIONS",
                                           error=f"topic already has {len(have)} partitions")
                continue
            cordoned = [b for a in (r.assignment or ()) for b in a if self._fully_cordoned(b)]
            if cordoned and self.caps.cordons_refuse_explicit_assignments:
                out[r.topic] = TopicResult(topic=r.topic, error_code="INVALID_REPLICA_ASSIGNMENT",
                                           error=f"The manual partition assignment includes broker {cordoned[0]}, "
                                                 "but all its log directories are cordoned.")
                continue
            if not validate_only:
                rf = self.topics[r.topic].replication_factor
                # the controller's placement skips fenced and fully cordoned brokers
                live = [b.id for b in self.brokers if b.id not in self.down and not self._fully_cordoned(b.id)]
                if not r.assignment and len(live) < rf:
                    out[r.topic] = TopicResult(topic=r.topic, error_code="INVALID_REPLICATION_FACTOR",
                                               error=f"unable to place {rf} replicas on {len(live)} usable brokers")
                    continue
                for i in range(len(have), r.total_count):
                    if r.assignment:
                        self.replicas[TopicPartition(r.topic, i)] = tuple(r.assignment[i - len(have)])
                    else:
                        self.replicas[TopicPartition(r.topic, i)] = tuple(live[(i + k) % len(live)] for k in range(rf))
                    for b in self.replicas[TopicPartition(r.topic, i)]:
                        self.replica_dirs[TopicPartitionReplica(r.topic, i, b)] = self._place_dir(b)
            out[r.topic] = TopicResult(topic=r.topic)
        return out

    def _reachable(self, brokers: Collection[int]) -> None:
        """A config request to a broker that is down waits for it and fails, as on a real cluster."""
        if set(brokers) & self.down:
            raise TimeoutError(f"fake: broker(s) {sorted(set(brokers) & self.down)} are down; the config request timed out")
        if set(brokers) & self.silent:
            raise BrokerUnreachableError(f"fake: broker(s) {sorted(set(brokers) & self.silent)} did not answer",
                                         brokers=set(brokers) & self.silent)

    def _topics_exist(self, topics: Collection[str]) -> None:
        """A config request naming a topic that does not exist fails as the adapter reports it (nothing written)."""
        gone = sorted(set(topics) - set(self.topics))
        if gone:
            raise TopicNotFoundError(f"fake: topic(s) {', '.join(gone)} do not exist (UNKNOWN_TOPIC_OR_PARTITION)",
                                     topics=gone)

    def describe_throttles(self, brokers: Collection[int], topics: Collection[str], *,
                           broker_keys: Collection[str] | None = None) -> ThrottleBackup:
        self._reachable(brokers)
        self._topics_exist(topics)
        keys = BROKER_THROTTLE_KEYS if broker_keys is None else tuple(broker_keys)
        return ThrottleBackup(
            brokers={b: {k: self.broker_configs.get(b, {}).get(k) for k in keys} for b in sorted(brokers)},
            topics={t: {k: self.topic_configs.get(t, {}).get(k) for k in TOPIC_THROTTLE_KEYS} for t in sorted(topics)},
        )

    def set_throttles(self, broker_configs: Mapping[int, Mapping[str, str | None]],
                      topic_configs: Mapping[str, Mapping[str, str | None]]) -> None:
        self._reachable(broker_configs)
        self._topics_exist(topic_configs)
        for target, updates in ((self.broker_configs, broker_configs), (self.topic_configs, topic_configs)):
            for key, values in updates.items():
                cfg = target.setdefault(key, {})  # type: ignore[arg-type]
                for k, v in values.items():
                    if v is None:
                        cfg.pop(k, None)
                    else:
                        cfg[k] = v

    def elect_preferred_leaders(self, partitions: Collection[TopicPartition]) -> tuple[PartitionResult, ...]:
        for tp in partitions:
            self.leaders.pop(TopicPartition(*tp), None)
        return tuple(PartitionResult(topic=tp.topic, partition=tp.partition) for tp in sorted(partitions))

    def supports_rf_guard(self) -> bool | None:
        """The ``rf_guard_supported`` flag the fake was built with (``None``: cannot tell)."""
        return self.rf_guard_supported

    # -- maintenance ------------------------------------------------------------------------

    def capabilities(self) -> ClusterCapabilities:
        """What the fake supports (``capabilities=``); a line older than the provider's floor is refused as the
        adapter refuses it (:func:`~airflow_kafka_reassign.core.guards.kafka_line.check_kafka_line`)."""
        check_kafka_line(self.caps, where="the fake cluster")
        return self.caps

    def describe_eligible_leaders(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, EligibleLeaders]:
        self.calls["describe_eligible_leaders"] = self.calls.get("describe_eligible_leaders", 0) + 1
        if not self.caps.eligible_leader_replicas:
            raise UnsupportedBrokerError("the fake cluster does not have KIP-966's eligible leader replicas on")
        return {tp: EligibleLeaders(topic=tp.topic, partition=tp.partition, elr=self.elr.get(tp, ()),
                                    last_known_elr=self.last_known_elr.get(tp, ()))
                for tp in partitions if tp in self.replicas}

    def describe_cordons(self, brokers: Collection[int]) -> dict[int, str | None]:
        self._reachable(brokers)
        return {b: self.broker_configs.get(b, {}).get(CORDONED_LOG_DIRS) for b in sorted(brokers)}

    def set_cordons(self, values: Mapping[int, str | None]) -> None:
        if values and not self.caps.cordons:
            raise UnsupportedBrokerError("fake broker: no cordons (metadata.version below 4.3-IV0); nothing was sent")
        for b, value in values.items():
            cordon = parse_cordon(value)
            missing = sorted(cordon - set(self.broker_dirs.get(b, ()))) if cordon != ALL_DIRS else []
            if missing:  # as Kafka's broker (INVALID_REQUEST)
                raise ValueError(f"requirement failed: All entries in cordoned.log.dirs must be present in log.dirs "
                                 f"or log.dir. Missing entries : {','.join(missing)}")
        self.set_throttles({b: {CORDONED_LOG_DIRS: v} for b, v in values.items()}, {})

    def describe_quorum(self) -> QuorumInfo:
        if not self.caps.describe_quorum:
            raise UnsupportedBrokerError("fake cluster: no DescribeQuorum")
        registered = [b.id for b in self.brokers]
        live_voters = [v for v in self.voters if v not in self.down]
        return QuorumInfo(leader=live_voters[0] if live_voters else None, leader_epoch=1,
                          voters=tuple(QuorumMember(id=v) for v in self.voters),
                          observers=tuple(QuorumMember(id=b) for b in registered if b not in self.voters))

    def describe_cluster(self, *, include_fenced: bool = True) -> ClusterDescription:
        fenced = include_fenced and self.caps.fenced_brokers
        return ClusterDescription(
            cluster_id="fake",
            brokers=tuple(RegisteredBroker(id=b.id, rack=b.rack, fenced=b.id in self.down)
                          for b in self.brokers if fenced or b.id not in self.down),
            includes_fenced=fenced)

    def metadata_barrier(self) -> Callable[[], str]:
        """Every broker has applied the metadata after ``metadata_lag_polls`` calls (0 by default: at once), as a
        cluster whose brokers replay the controller's records a moment after it committed them."""
        def lagging() -> str:
            if self.metadata_lag_polls <= 0:
                return ""
            self.metadata_lag_polls -= 1
            return "broker(s) [2] at metadata offset 9 of 10"
        return lagging

    def unregister_broker(self, broker_id: int) -> BrokerResult:
        """As Kafka's controller: any registered broker is unregistered, a LIVE one too (Kafka accepts it; the
        running broker's heartbeats then fail); it is no longer listed by DescribeCluster."""
        if not self.caps.unregister_broker:
            raise UnsupportedBrokerError("fake cluster: no UnregisterBroker")
        if broker_id not in {b.id for b in self.brokers}:
            return BrokerResult(broker=broker_id, error_code="BROKER_ID_NOT_REGISTERED",
                                error=f"Broker ID {broker_id} is not currently registered")
        self.brokers = [b for b in self.brokers if b.id != broker_id]
        self.unregistered.add(broker_id)
        return BrokerResult(broker=broker_id)

    def alter_replica_log_dirs(self, targets: Mapping[TopicPartitionReplica, str]) -> tuple[ReplicaDirResult, ...]:
        if targets and not self.caps.jbod:
            raise UnsupportedBrokerError("fake cluster: no AlterReplicaLogDirs")
        out = []
        for key, path in targets.items():
            r = TopicPartitionReplica(*key)
            error = None
            if r.broker in self.down or r.broker not in {b.id for b in self.brokers}:
                error = ("KAFKA_STORAGE_ERROR", f"broker {r.broker} is not available")
            elif path not in self.broker_dirs.get(r.broker, ()):
                error = ("LOG_DIR_NOT_FOUND", "The user-specified log directory is not found in the broker config.")
            elif path in self.offline_dirs or (self.replica_dirs.get(r) or self.broker_dirs[r.broker][0]) in self.offline_dirs:
                error = ("KAFKA_STORAGE_ERROR", "Disk error when trying to access log file on the disk.")
            elif path in (self.cordoned(r.broker) if self.caps.cordons else ()):
                error = ("INVALID_REPLICATION_ASSIGNMENT", "Replication assignment is invalid.")
            elif r.tp not in self.replicas or r.broker not in self._replica_view(r.tp)[0]:
                error = ("REPLICA_NOT_AVAILABLE", f"broker {r.broker} holds no replica of {r.tp}")
            if error:
                out.append(ReplicaDirResult(topic=r.topic, partition=r.partition, broker=r.broker,
                                            error_code=error[0], error=error[1]))
                continue
            current = self.replica_dirs.get(r) or self.broker_dirs[r.broker][0]
            if path == current:
                self.log_dir_moves.pop(r, None)
            else:
                self.log_dir_moves[r] = (path, max(1, self.sizes.get(r.tp, {}).get(r.broker, 1)))
            out.append(ReplicaDirResult(topic=r.topic, partition=r.partition, broker=r.broker))
        if self.auto_complete:
            self.complete_log_dir_moves()
        return tuple(sorted(out, key=lambda x: (x.broker, x.topic, x.partition)))

    def close(self) -> None:
        pass
