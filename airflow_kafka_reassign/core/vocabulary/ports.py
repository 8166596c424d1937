"""What the core needs from a Kafka cluster: the :class:`ClusterAdmin` port.

The Kafka adapter (:mod:`airflow_kafka_reassign.kafka.admin`) implements it against a real
cluster; unit tests use the in-memory fake in ``airflow_kafka_reassign/testing.py``. Everything crossing the port
is a core model or a small result record defined here, so the planner, guards and
progress rules never see a Kafka client object.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from pydantic import Field

from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot, TopicPartition, _Frozen, original_of, target_of

#: How the KIP-860 replication-factor guard is enforced: ``"broker"`` sends
#: AlterPartitionReassignments v1 with AllowReplicationFactorChange=false (needs Kafka 4.1+);
#: ``"client"`` compares against the controller's replica sets before sending (racy, for
#: older brokers, chosen explicitly).
RfGuard = Literal["broker", "client"]



#: Log dirs whose total bytes are equal and whose usable bytes differ by at most this share of it are taken as one
#: volume: Kafka reads each log dir's filesystem separately, so two on one busy filesystem differ by what was
#: written in between.
SAME_VOLUME = 0.001


@dataclass(frozen=True)
class DiskSpace:
    """One broker's log dirs as DescribeLogDirs reports them: ``(total, usable)`` bytes per volume."""

    dirs: tuple[tuple[int, int], ...]
    #: log dirs taken as sharing a volume with another (:meth:`of_dirs`): counted once, the least usable kept
    merged: int = 0

    @classmethod
    def of_dirs(cls, dirs: Iterable[tuple[int, int]]) -> DiskSpace:
        """From every log dir's ``(total, usable)``. KIP-827 reports each log dir's *filesystem*: dirs with the
        same total and usable bytes within :data:`SAME_VOLUME` of it are taken as one volume (the least usable
        kept: the guard errs on the safe side; identical empty JBOD disks are then under-counted, which
        :attr:`merged` lets callers say)."""
        volumes: list[tuple[int, int]] = []
        merged = 0
        for total, usable in sorted(dirs):
            if volumes and volumes[-1][0] == total and usable - volumes[-1][1] <= SAME_VOLUME * total:
                merged += 1
                continue  # sorted: the one kept is the least usable
            volumes.append((total, usable))
        return cls(dirs=tuple(volumes), merged=merged)

    @classmethod
    def one(cls, total: int, usable: int) -> DiskSpace:
        return cls(dirs=((total, usable),))

    @property
    def total_bytes(self) -> int:
        return sum(t for t, _ in self.dirs)

    @property
    def usable_bytes(self) -> int:
        return sum(u for _, u in self.dirs)


class TopicPartitionReplica(NamedTuple):
    """One replica: partition ``topic-partition`` on broker ``broker`` (Kafka's ``TopicPartitionReplica``)."""

    topic: str
    partition: int
    broker: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}@{self.broker}"


@dataclass(frozen=True)
class DirReplica:
    """A replica a log dir holds (DescribeLogDirs): ``future`` is the copy an intra-broker move
    (AlterReplicaLogDirs, KIP-113) is writing into this dir, which replaces the current one once it has
    caught up; ``offset_lag`` is how far it is behind (the current replica's: behind the high watermark)."""

    topic: str
    partition: int
    size: int
    offset_lag: int = 0
    future: bool = False

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class LogDir:
    """One log dir of one broker as DescribeLogDirs reports it.

    ``offline``: the broker reports an error for it (``error``: Kafka's name, ``KAFKA_STORAGE_ERROR`` for a
    failed disk); ``total_bytes``/``usable_bytes``: its volume (KIP-827, Kafka 3.3+; ``None`` when not
    reported); ``cordoned``: KIP-1066's flag (DescribeLogDirs v5, Kafka 4.3+; ``None`` when the broker does
    not report it); ``replicas``: the replicas of the partitions asked for that it holds, future ones
    included."""

    path: str
    offline: bool = False
    error: str | None = None
    total_bytes: int | None = None
    usable_bytes: int | None = None
    cordoned: bool | None = None
    replicas: tuple[DirReplica, ...] = ()


@dataclass(frozen=True)
class LogDirs:
    """What DescribeLogDirs tells: replica sizes (``{partition: {broker: bytes}}``), each broker's disk space,
    and each broker's log dirs with the replicas they hold (a plain dataclass: a million sizes are not
    validated one by one)."""

    sizes: dict[TopicPartition, dict[int, int]]
    space: dict[int, DiskSpace]
    #: live brokers that did not answer (their space is unknown; a broker older than Kafka 3.3 answers without
    #: space and is simply absent from ``space``)
    unanswered: tuple[int, ...] = ()
    #: every answering broker's log dirs in the broker's order (the first holds the KRaft metadata log unless
    #: ``metadata.log.dir`` says otherwise), with the replicas of the partitions asked for
    dirs: dict[int, tuple[LogDir, ...]] = field(default_factory=dict)

    def dir_of(self, replica: TopicPartitionReplica) -> str | None:
        """The log dir holding the current (not future) copy of ``replica``, or ``None``."""
        return next((d.path for d in self.dirs.get(replica.broker, ()) for r in d.replicas
                     if not r.future and r.topic == replica.topic and r.partition == replica.partition), None)

    def future_of(self, replica: TopicPartitionReplica) -> tuple[str, DirReplica] | None:
        """Where an intra-broker move of ``replica`` is copying it to, and the future replica, or ``None``."""
        return next(((d.path, r) for d in self.dirs.get(replica.broker, ()) for r in d.replicas
                     if r.future and r.topic == replica.topic and r.partition == replica.partition), None)


@dataclass(frozen=True)
class PartitionHealth:
    """Every partition's replicas and ISR folded into what the cluster watch needs, from ONE Metadata request
    (:meth:`ClusterAdmin.partition_health`; folded by
    :func:`~airflow_kafka_reassign.core.healing.observation.fold_partitions`): a few numbers per broker, never
    a list of 100k partitions (a plain dataclass: it is rebuilt at every poll)."""

    #: partitions in the cluster (every topic the principal may describe)
    partitions: int
    #: replicas each broker holds by the replica lists (a reassignment's adding replicas included); a broker
    #: that holds none is absent
    replicas: dict[int, int]
    #: partitions each broker leads
    leaders: dict[int, int]
    #: partitions whose ISR is smaller than their topic's ``min.insync.replicas`` (acks=all producers fail)
    under_min_isr: int = 0
    #: the first of them (sorted), for the log and the incident's detail
    under_min_isr_sample: tuple[TopicPartition, ...] = ()
    #: for the partitions under min ISR: how many of them each broker is a replica of but out of the ISR
    out_of_isr: dict[int, int] = field(default_factory=dict)
    #: partitions without a leader (offline)
    offline: int = 0
    #: partitions whose replication factor is below their min.insync.replicas: always under it by configuration,
    #: which no reassignment heals (counted here, not in :attr:`under_min_isr`)
    min_isr_above_rf: int = 0
    #: topics whose ``min.insync.replicas`` could not be read (taken as 1: never under it)
    min_isr_unknown: tuple[str, ...] = ()


class PartitionResult(_Frozen):
    """The outcome for one partition of a batched request; ``error`` is ``None`` on success."""

    topic: str
    partition: int
    error: str | None = None
    #: Kafka's error name, for example ``INVALID_REPLICATION_FACTOR``.
    error_code: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class AlterResult(_Frozen):
    """Per-partition results of one AlterPartitionReassignments request."""

    results: tuple[PartitionResult, ...]
    #: The AlterPartitionReassignments request version that went out (1 carries KIP-860's flag).
    request_version: int | None = None
    rf_guard: RfGuard | None = None

    @property
    def failed(self) -> tuple[PartitionResult, ...]:
        return tuple(r for r in self.results if not r.ok)

    @property
    def succeeded(self) -> tuple[PartitionResult, ...]:
        return tuple(r for r in self.results if r.ok)

    def by_partition(self) -> dict[TopicPartition, PartitionResult]:
        return {r.tp: r for r in self.results}


class InFlightReassignment(_Frozen):
    """A reassignment the controller lists (ListPartitionReassignments)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return target_of(self.replicas, self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        return original_of(self.replicas, self.adding_replicas)


class NewPartitions(_Frozen):
    """Grow ``topic`` to ``total_count`` partitions; ``assignment`` places the new ones."""

    topic: str
    total_count: int = Field(ge=1)
    #: One replica list per NEW partition, in partition order; ``None`` lets the broker place.
    assignment: tuple[tuple[int, ...], ...] | None = None


class TopicResult(_Frozen):
    topic: str
    error: str | None = None
    error_code: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class ThrottleBackup(_Frozen):
    """The dynamic config values that existed before a throttle was applied.

    ``None`` means the key was not set (restoring deletes it). Restoring a backup puts every
    key back exactly as it was, including values someone else had set.
    """

    brokers: dict[int, dict[str, str | None]] = Field(default_factory=dict)
    topics: dict[str, dict[str, str | None]] = Field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.brokers and not self.topics


#: ``metadata.version`` feature levels that turn a maintenance feature on (Kafka's ``MetadataVersion``):
#: 3.7-IV2 assigns replicas to log dirs in the metadata (JBOD on KRaft, KIP-858); 4.3-IV0 cordons (KIP-1066).
JBOD_METADATA_LEVEL = 17
CORDON_METADATA_LEVEL = 30


class ClusterCapabilities(_Frozen):
    """Which maintenance primitives the cluster supports, as the adapter found them (ApiVersions and the
    finalized ``metadata.version``). Core code asks these, never API keys or client methods."""

    #: the finalized ``metadata.version`` feature level (KRaft), ``None`` when the cluster reports none
    metadata_version: int | None = None
    #: ``cordoned.log.dirs`` is in force (KIP-1066): metadata.version 4.3-IV0 (30) or newer
    cordons: bool = False
    #: the controller also refuses EXPLICIT assignments (CreateTopics, CreatePartitions,
    #: AlterPartitionReassignments) onto a broker whose every log dir is cordoned. Kafka 4.3.0 and 4.3.1
    #: accept them (KAFKA-20832); 4.4.0 refuses them (INVALID_REPLICA_ASSIGNMENT). Told from the highest
    #: metadata.version the brokers' software supports (4.3: 30; 4.4: 33), so False when unsure: check
    #: explicit assignments client-side (:func:`~airflow_kafka_reassign.core.maintenance.cordon.cordon_violations`).
    cordons_refuse_explicit_assignments: bool = False
    #: DescribeQuorum (KIP-595/853): the KRaft voters and observers
    describe_quorum: bool = False
    #: DescribeCluster v2 lists fenced brokers (KIP-1073, Kafka 4.0+)
    fenced_brokers: bool = False
    #: UnregisterBroker (api key 64, KRaft)
    unregister_broker: bool = False
    #: AlterReplicaLogDirs between a broker's log dirs (KIP-113) with dir assignment in KRaft
    #: (metadata.version 3.7-IV2, KIP-858)
    jbod: bool = False
    #: KIP-966's eligible leader replicas are in force: the finalized feature ``eligible.leader.replicas.version``
    #: is 1 or more (opt-in on Kafka 4.0, on by default for clusters created on 4.1+); the ELR of a partition is
    #: read with DescribeTopicPartitions (:meth:`ClusterAdmin.describe_eligible_leaders`)
    eligible_leader_replicas: bool = False
    #: the brokers run in ZooKeeper mode (Kafka 3.x and older): no controller quorum (DescribeQuorum), no finalized
    #: ``metadata.version``; a stopped broker leaves the cluster (its registration is an ephemeral znode), so there is
    #: nothing to unregister; metadata reaches the brokers by UpdateMetadata from the controller, not a metadata log
    zookeeper_mode: bool = False
    #: the newest Apache Kafka line whose ApiVersions the answering broker matches (``"3.9"``, ``"4.3"``), ``None``
    #: when unknown: the line a refusal names (docs/kafka-lines.md)
    kafka_line: str | None = None

    def line_name(self) -> str:
        """``"Kafka 3.9, ZooKeeper mode"``, ``"Kafka 4.3"``, or ``"Kafka of an unknown line"``: what a refusal names."""
        line = f"Kafka {self.kafka_line}" if self.kafka_line else "Kafka of an unknown line"
        return f"{line}, ZooKeeper mode" if self.zookeeper_mode else line


class EligibleLeaders(_Frozen):
    """KIP-966's view of one partition beside its ISR (DescribeTopicPartitions)."""

    topic: str
    partition: int
    #: eligible leader replicas: out of the ISR, but holding every committed record
    elr: tuple[int, ...] = ()
    #: former eligible replicas that shut down uncleanly
    last_known_elr: tuple[int, ...] = ()

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class QuorumMember(_Frozen):
    """A node of the KRaft quorum as DescribeQuorum reports it."""

    id: int
    #: the metadata log's end offset on it (``None``/-1: unknown)
    log_end_offset: int | None = None
    #: its metadata log dir's id (KIP-853's dynamic quorum; ``None`` for a static ``controller.quorum.voters``)
    directory_id: str | None = None


class QuorumInfo(_Frozen):
    """The KRaft metadata quorum (DescribeQuorum of ``__cluster_metadata``): its voters (the controllers that
    vote), observers (brokers and non-voting controllers that follow the log) and leader (the active
    controller)."""

    leader: int | None
    leader_epoch: int | None = None
    high_watermark: int | None = None
    voters: tuple[QuorumMember, ...]
    observers: tuple[QuorumMember, ...] = ()

    @property
    def voter_ids(self) -> tuple[int, ...]:
        return tuple(sorted(v.id for v in self.voters))

    @property
    def observer_ids(self) -> tuple[int, ...]:
        return tuple(sorted(o.id for o in self.observers))


class RegisteredBroker(_Frozen):
    """A broker registered with the controller (DescribeCluster; ``fenced`` with KIP-1073's fenced brokers:
    registered but not heartbeating, as once it is shut down)."""

    id: int
    rack: str | None = None
    fenced: bool = False


class ClusterDescription(_Frozen):
    """DescribeCluster: the registered brokers (fenced ones only when asked for and supported)."""

    cluster_id: str | None = None
    brokers: tuple[RegisteredBroker, ...]
    #: whether fenced brokers were asked for AND the cluster could list them (DescribeCluster v2)
    includes_fenced: bool = False

    def broker(self, broker_id: int) -> RegisteredBroker | None:
        return next((b for b in self.brokers if b.id == broker_id), None)


class BrokerResult(_Frozen):
    """The outcome of a request about one broker; ``error`` is ``None`` on success."""

    broker: int
    error: str | None = None
    #: Kafka's error name, for example ``BROKER_ID_NOT_REGISTERED``
    error_code: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class ReplicaDirResult(PartitionResult):
    """The outcome of AlterReplicaLogDirs for one replica (of ``partition`` on ``broker``); ``error`` is ``None``
    when the broker accepted it."""

    broker: int

    @property
    def replica(self) -> TopicPartitionReplica:
        return TopicPartitionReplica(self.topic, self.partition, self.broker)


@runtime_checkable
class ClusterAdmin(Protocol):
    """The admin operations the provider needs, in core terms."""

    def snapshot(
        self, *, topics: Collection[str] | None = None, include_sizes: bool = False,
        settle_timeout_s: float | None = None,
    ) -> ClusterSnapshot:
        """Brokers with racks, topics (id as Kafka prints it (KIP-516), internal flag, configs that matter),
        partitions, and the controller's in-flight reassignments merged in (adding/removing replicas).
        ``include_sizes`` adds replica sizes from DescribeLogDirs.

        Complete or an error: every partition of every selected topic (``topics``; ``None``: all),
        with its topic's configs and (``include_sizes``) its replicas' sizes. While the cluster's
        views disagree it reads again for up to ``settle_timeout_s`` (``None``:
        :data:`~airflow_kafka_reassign.core.guards.completeness.DEFAULT_SETTLE_S`), then raises
        :class:`~airflow_kafka_reassign.exceptions.IncompleteSnapshotError` naming what is missing;
        a named topic that does not exist raises ``ConfigurationError``. The snapshot's ``check``
        records its counts."""
        ...

    def list_reassignments(
        self, partitions: Collection[TopicPartition] | None = None
    ) -> dict[TopicPartition, InFlightReassignment]:
        """The controller's view of in-flight reassignments (all, or of ``partitions``)."""
        ...

    def replica_sizes(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, dict[int, int]]:
        """Bytes on disk of each replica of ``partitions``, by broker id (DescribeLogDirs).

        At most one request per broker, whatever the number of partitions; a broker that does
        not answer is left out (its replicas are simply missing from the result), so progress
        can still be reported while a broker is down. Partitions no broker reports are absent.
        """
        ...

    def log_dirs(self, partitions: Collection[TopicPartition] | None) -> LogDirs:
        """:meth:`replica_sizes` of ``partitions`` and, from the same DescribeLogDirs requests, each
        answering broker's disk space (KIP-827's total and usable bytes, Kafka 3.3+; a broker that does
        not report them is absent from :attr:`LogDirs.space`). The disk guard reads it before a batch.

        :attr:`LogDirs.dirs` lists every answering broker's log dirs (offline or not, cordoned or not)
        with the replicas of ``partitions`` each holds, future replicas of intra-broker moves included;
        ``None`` asks for every partition (a disk removal: what is on that disk).

        An EMPTY collection asks for no partition at all (DescribeLogDirs with ``Topics=[]``): each live
        broker's log dirs and their space only, whatever the number of partitions (the cluster watch, each
        poll)."""
        ...

    def partition_health(self, *, min_isr_max_age_s: float = 3600.0) -> PartitionHealth:
        """Every partition's replicas, ISR and leader from ONE Metadata request, folded into
        :class:`PartitionHealth` (replicas and leaders per broker, partitions under their min ISR). Each topic's
        ``min.insync.replicas`` (its effective value: the topic's, else the cluster's) is read with DescribeConfigs
        for a topic not seen before and again for all once ``min_isr_max_age_s`` has passed; kept in between."""
        ...

    def alter_reassignments(
        self,
        targets: Mapping[TopicPartition, Sequence[int]],
        *,
        allow_replication_factor_change: bool = False,
        rf_guard: RfGuard = "broker",
    ) -> AlterResult:
        """Submit reassignments in one request; per-partition results, never swallowed."""
        ...

    def cancel_reassignments(self, partitions: Collection[TopicPartition]) -> AlterResult:
        """Cancel in-flight reassignments (KIP-455: back to the original replicas)."""
        ...

    def create_partitions(
        self, requests: Sequence[NewPartitions], *, validate_only: bool = False
    ) -> dict[str, TopicResult]:
        ...

    def describe_throttles(
        self, brokers: Collection[int], topics: Collection[str], *,
        broker_keys: Collection[str] | None = None,
    ) -> ThrottleBackup:
        """The current dynamic throttle configs of these brokers and topics. ``broker_keys``: which broker
        configs (default the replication rates,
        :data:`~airflow_kafka_reassign.core.execution.throttle.BROKER_THROTTLE_KEYS`; add
        :data:`~airflow_kafka_reassign.core.execution.throttle.LOG_DIR_RATE` for intra-broker moves). Brokers that
        do not answer their own request (killed, still listed alive) are named in one
        :class:`~airflow_kafka_reassign.exceptions.BrokerUnreachableError`, after the others were waited for."""
        ...

    def set_throttles(
        self,
        broker_configs: Mapping[int, Mapping[str, str | None]],
        topic_configs: Mapping[str, Mapping[str, str | None]],
    ) -> None:
        """Set (value) or delete (``None``) dynamic throttle configs; brokers that do not answer their own request:
        :class:`~airflow_kafka_reassign.exceptions.BrokerUnreachableError` naming them."""
        ...

    def elect_preferred_leaders(
        self, partitions: Collection[TopicPartition]
    ) -> tuple[PartitionResult, ...]:
        ...

    def supports_rf_guard(self) -> bool | None:
        """Whether the brokers enforce KIP-860's AllowReplicationFactorChange (AlterPartitionReassignments v1, Apache
        Kafka 4.1+): what the adapter learned from ApiVersions. ``None``: it cannot tell (it refuses again before
        sending anyway)."""
        ...

    # -- maintenance: cordons, the quorum, registrations, log dirs ----------------------------

    def capabilities(self) -> ClusterCapabilities:
        """Which maintenance primitives the cluster supports (read once per client and kept)."""
        ...

    def describe_eligible_leaders(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, EligibleLeaders]:
        """KIP-966's eligible leader replicas (and last known ELR) of ``partitions`` (DescribeTopicPartitions, Kafka
        3.7+; meaningful where ``capabilities().eligible_leader_replicas``); a partition the cluster does not know is
        left out. Raises :class:`~airflow_kafka_reassign.exceptions.UnsupportedBrokerError` where ELR is off."""
        ...

    def describe_cordons(self, brokers: Collection[int]) -> dict[int, str | None]:
        """Each broker's own DYNAMIC ``cordoned.log.dirs`` (``"*"``: every dir; a comma-separated list of
        log dir paths; ``None``: not set dynamically), what :meth:`set_cordons` changes and a backup restores.
        A value set a moment ago may read as before for a moment (the broker applies it from the metadata
        log). Which dirs are cordoned in fact (static configs included): :attr:`LogDir.cordoned`."""
        ...

    def set_cordons(self, values: Mapping[int, str | None]) -> None:
        """Set (a value) or delete (``None``) each broker's dynamic ``cordoned.log.dirs``, one
        IncrementalAlterConfigs per broker. Needs :attr:`ClusterCapabilities.cordons`; a path that is not
        one of the broker's ``log.dirs`` is refused by the broker (``INVALID_REQUEST``)."""
        ...

    def describe_quorum(self) -> QuorumInfo:
        """The KRaft metadata quorum: voters, observers, leader (DescribeQuorum)."""
        ...

    def describe_cluster(self, *, include_fenced: bool = True) -> ClusterDescription:
        """The registered brokers; with ``include_fenced`` (and :attr:`ClusterCapabilities.fenced_brokers`)
        the fenced ones too, flagged (KIP-1073)."""
        ...

    def metadata_barrier(self) -> Callable[[], str]:
        """A check, called again until it returns ``""``, that every live broker has applied the cluster's metadata
        as committed at its first call (KRaft: each broker's applied offset against the metadata log's committed
        one); otherwise it names what lags. After a change the controller committed (an unregistration), every
        broker's answers show it once the check passes, not only the answering broker's."""
        ...

    def unregister_broker(self, broker_id: int) -> BrokerResult:
        """Remove ``broker_id``'s registration (UnregisterBroker, KRaft). Kafka accepts it for a LIVE broker
        too (4.3.1: the broker keeps running, its heartbeats fail with STALE_BROKER_EPOCH): call it only for a
        broker DescribeCluster lists fenced (:mod:`airflow_kafka_reassign.core.maintenance.lifecycle`). A broker not
        registered: ``BROKER_ID_NOT_REGISTERED``."""
        ...

    def alter_replica_log_dirs(self, targets: Mapping[TopicPartitionReplica, str]) -> tuple[ReplicaDirResult, ...]:
        """Move each replica to the log dir (an absolute path of that broker's ``log.dirs``) named for it
        (AlterReplicaLogDirs, KIP-113): one request per broker; per-replica results, never swallowed."""
        ...

    def close(self) -> None:
        ...
