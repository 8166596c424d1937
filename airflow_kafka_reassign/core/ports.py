"""What the core needs from a Kafka cluster: the :class:`ClusterAdmin` port.

The Kafka adapter (:mod:`airflow_kafka_reassign.kafka.admin`) implements it against a real
cluster; unit tests use the in-memory fake in ``airflow_kafka_reassign/testing.py``. Everything crossing the port
is a core model or a small result record defined here, so the planner, guards and
progress rules never see a Kafka client object.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field

from airflow_kafka_reassign.core.models import ClusterSnapshot, TopicPartition, _Frozen, original_of, target_of

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


@dataclass(frozen=True)
class LogDirs:
    """What DescribeLogDirs tells: replica sizes (``{partition: {broker: bytes}}``) and each broker's disk space
    (a plain dataclass: a million sizes are not validated one by one)."""

    sizes: dict[TopicPartition, dict[int, int]]
    space: dict[int, DiskSpace]
    #: live brokers that did not answer (their space is unknown; a broker older than Kafka 3.3 answers without
    #: space and is simply absent from ``space``)
    unanswered: tuple[int, ...] = ()


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


@runtime_checkable
class ClusterAdmin(Protocol):
    """The admin operations the provider needs, in core terms."""

    def snapshot(
        self, *, topics: Collection[str] | None = None, include_sizes: bool = False,
        settle_timeout_s: float | None = None,
    ) -> ClusterSnapshot:
        """Brokers with racks, topics (internal flag, configs that matter), partitions, and
        the controller's in-flight reassignments merged in (adding/removing replicas).
        ``include_sizes`` adds replica sizes from DescribeLogDirs.

        Complete or an error: every partition of every selected topic (``topics``; ``None``: all),
        with its topic's configs and (``include_sizes``) its replicas' sizes. While the cluster's
        views disagree it reads again for up to ``settle_timeout_s`` (``None``:
        :data:`~airflow_kafka_reassign.core.completeness.DEFAULT_SETTLE_S`), then raises
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

    def log_dirs(self, partitions: Collection[TopicPartition]) -> LogDirs:
        """:meth:`replica_sizes` of ``partitions`` and, from the same DescribeLogDirs requests, each
        answering broker's disk space (KIP-827's total and usable bytes, Kafka 3.3+; a broker that does
        not report them is absent from :attr:`LogDirs.space`). The disk guard reads it before a batch."""
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
        self, brokers: Collection[int], topics: Collection[str]
    ) -> ThrottleBackup:
        """The current dynamic throttle configs of these brokers and topics."""
        ...

    def set_throttles(
        self,
        broker_configs: Mapping[int, Mapping[str, str | None]],
        topic_configs: Mapping[str, Mapping[str, str | None]],
    ) -> None:
        """Set (value) or delete (``None``) dynamic throttle configs."""
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

    def close(self) -> None:
        ...
