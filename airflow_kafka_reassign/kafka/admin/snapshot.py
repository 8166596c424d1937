"""The snapshot: brokers, topics and partitions, with the controller's in-flight reassignments and, when
asked, every replica's size, complete and consistent (or an error naming what is missing), at a constant
number of batched requests whatever the number of partitions: one Metadata request, DescribeConfigs of the
topics, ListPartitionReassignments, and DescribeLogDirs per broker, behind the metadata barrier
(:class:`~airflow_kafka_reassign.kafka.admin.cluster._MetadataBarrier`).

The Metadata request is kafka-python's (:meth:`SnapshotMixin._read_metadata`; ids from v10), not confluent-kafka's
``list_topics``: librdkafka reads each topic's id (KIP-516) but does not expose it in ``list_topics``, and the
response that carries every partition's replicas, ISR and leader also carries the topic's id and Kafka's
internal flag, so ids cost no request and internal topics no DescribeTopicPartitions (docs/performance.md,
"Snapshots", has both measured). A whole-cluster snapshot asks for every topic; a snapshot of named topics
asks for those only.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicCollection as CKTopicCollection
from confluent_kafka.admin import ConfigResource
from kafka import errors as kp_errors
from kafka.admin import KafkaAdminClient
from kafka.protocol.metadata import MetadataRequest

from airflow_kafka_reassign.core.execution.throttle import TOPIC_THROTTLE_KEYS
from airflow_kafka_reassign.core.guards.completeness import (
    DEFAULT_SETTLE_S,
    BrokerView,
    Gaps,
    TopicMetadata,
    find_gaps,
    settle,
    views_disagree,
)
from airflow_kafka_reassign.core.healing.observation import fold_partitions
from airflow_kafka_reassign.core.vocabulary.models import (
    Broker,
    ClusterSnapshot,
    PartitionState,
    SnapshotCheck,
    TopicPartition,
    TopicState,
)
from airflow_kafka_reassign.core.vocabulary.ports import InFlightReassignment, PartitionHealth
from airflow_kafka_reassign.exceptions import ConfigurationError, IncompleteSnapshotError
from airflow_kafka_reassign.kafka.acl import Refused
from airflow_kafka_reassign.kafka.admin.client import _error_name
from airflow_kafka_reassign.kafka.admin.cluster import BARRIER_TIMEOUT_S, _MetadataBarrier
from airflow_kafka_reassign.kafka.admin.log_dirs import LogDirsMixin
from airflow_kafka_reassign.kafka.admin.reassignments import ReassignmentsMixin

log = logging.getLogger(__name__)

#: Named topics missing from the metadata are looked for again for this many times this long
#: (3 s; within the snapshot's time budget) before :meth:`KafkaClusterAdmin.snapshot` refuses them
#: (a topic just created may not have reached the broker that answers yet).
NAMED_TOPIC_RETRIES = 3
NAMED_TOPIC_RETRY_S = 1.0

#: Metadata errors of a named topic that mean it is not there for this client: it does not exist, or it is hidden
#: from the principal (a whole-cluster Metadata request leaves such topics out instead), or its name is not valid.
_ABSENT = (kp_errors.UnknownTopicOrPartitionError.errno, kp_errors.TopicAuthorizationFailedError.errno,
           kp_errors.InvalidTopicError.errno)


def kafka_topic_id(topic_id: uuid.UUID | None) -> str | None:
    """A topic id (KIP-516) as Kafka prints it (``kafka-topics --describe``'s ``TopicId:``, Kafka's ``Uuid.toString``):
    the UUID's 16 bytes in URL-safe base64 without padding, 22 characters. ``None`` for none or Kafka's zero id
    (a topic without one). librdkafka prints the same bytes in standard base64 (``/`` and ``+`` where Kafka has
    ``_`` and ``-``)."""
    if topic_id is None or topic_id.int == 0:
        return None
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class _Partition:
    replicas: tuple[int, ...]
    isrs: tuple[int, ...]
    leader: int


@dataclass(frozen=True, slots=True)
class _Topic:
    """One topic of a Metadata response: its error's name (``None``: none), id (:func:`kafka_topic_id`), Kafka's
    internal flag and partitions by id."""

    error: str | None
    topic_id: str | None
    internal: bool
    partitions: dict[int, _Partition]


#: The cluster watch reads each topic's min.insync.replicas again after this long (seconds), new topics at once.
MIN_ISR_MAX_AGE_S = 3600.0
#: Topics per DescribeConfigs request when the watch reads min.insync.replicas.
MIN_ISR_BATCH = 1000

#: Topic configs a snapshot keeps (guards and throttles read them).
#: ``remote.storage.enable``: tiered topics (KIP-405) cost only their local bytes to move.
SNAPSHOT_TOPIC_CONFIGS = ("min.insync.replicas", "cleanup.policy", "remote.storage.enable", *TOPIC_THROTTLE_KEYS)


class SnapshotMixin(ReassignmentsMixin, LogDirsMixin):
    """The port's snapshot: it reads the in-flight reassignments and the replica sizes through those areas."""

    def snapshot(
        self, *, topics: Collection[str] | None = None, include_sizes: bool = False,
        settle_timeout_s: float | None = None,
    ) -> ClusterSnapshot:
        """:meth:`_snapshot_once`, read again once on a new client when librdkafka's "controller"
        (in KRaft a broker it picked from the metadata) stopped: a broker killed mid-run."""
        return self._on_fresh_controller(
            lambda: self._snapshot_once(topics=topics, include_sizes=include_sizes, settle_timeout_s=settle_timeout_s))

    def _snapshot_once(
        self, *, topics: Collection[str] | None = None, include_sizes: bool = False,
        settle_timeout_s: float | None = None,
    ) -> ClusterSnapshot:
        """Brokers, topics and partitions, with the controller's in-flight reassignments: complete, or an error.

        Every partition of every selected topic (``topics``; ``None``: all) is in the snapshot, with
        its replicas, ISR and leader, its topic's configs and, with ``include_sizes``, the size of
        every replica on a live broker, all consistent with each other
        (:func:`~airflow_kafka_reassign.core.guards.completeness.find_gaps`). While they are not (the
        cluster's metadata settling after topics were created or grown: a topic whose configs the
        answering broker does not know yet), it reads again, backing off, for up to
        ``settle_timeout_s`` (default
        :data:`~airflow_kafka_reassign.core.guards.completeness.DEFAULT_SETTLE_S`), then raises
        :class:`~airflow_kafka_reassign.exceptions.IncompleteSnapshotError` naming what is missing
        per topic. Before reading it waits (within the same budget) until every live broker has
        applied the cluster's metadata as it was when the snapshot began (:class:`_MetadataBarrier`:
        each broker's applied offset from ApiVersions, against the metadata log's committed offset
        from DescribeQuorum), so no broker answers with a view older than the snapshot: a topic
        created before it is never missed because the answering broker had not applied it yet.
        A named topic that does not exist raises ``ConfigurationError`` (once it has been missing
        for :data:`NAMED_TOPIC_RETRIES` x :data:`NAMED_TOPIC_RETRY_S` seconds).

        Costs a constant number of batched requests per read, not one per partition: until the
        brokers have caught up, one DescribeQuorum and one ApiVersions per broker; then one
        Metadata request for every partition's replicas, ISR and leader and each topic's id (KIP-516,
        :func:`kafka_topic_id`) and internal flag (:meth:`_read_metadata`); DescribeConfigs for the
        topics whose configs it lacks (sent first, awaited last); ListPartitionReassignments; and with
        ``include_sizes`` one DescribeLogDirs per broker. The snapshot's ``check`` records the
        counts, the reads it took and the seconds they spanned.
        """
        budget = DEFAULT_SETTLE_S if settle_timeout_s is None else max(0.0, float(settle_timeout_s))
        cluster_id, brokers = self._describe_cluster_brokers()
        live = {b.id for b in brokers}
        ck = self._confluent()
        named = None if topics is None else set(topics)
        if named is not None and not named:
            return ClusterSnapshot(cluster_id=cluster_id, brokers=tuple(brokers), check=SnapshotCheck(
                source="cluster", topics=0, partitions=0, replicas=0, attempts=1, settle_s=0.0))
        barrier = self._snapshot_barrier(live, named)
        configs: dict[str, dict[str, str]] = {}
        missing: list[str] = []
        missing_since: float | None = None

        def unknown(names: Sequence[str]) -> ConfigurationError:
            hidden = self._unauthorized_topics(names)
            absent = [n for n in names if n not in hidden]
            if hidden:  # Kafka leaves a topic the principal may not DESCRIBE out of the metadata: not "missing"
                shown = f"{', '.join(hidden[:10])}{' ...' if len(hidden) > 10 else ''}"
                also = f"; topic(s) {', '.join(absent)} do not exist" if absent else ""
                return self._access_error(
                    "authorization", f"topic(s) {shown} do not exist or are hidden from this principal (Kafka does "
                    f"not tell which to a principal without DESCRIBE on them: check the name, then the ACLs){also}",
                    Refused.on_topic("DESCRIBE", hidden[0], "Metadata"))
            return ConfigurationError(f"topic(s) {', '.join(names)} do not exist in the cluster at {self._bootstrap}")

        def attempt() -> tuple[ClusterSnapshot | None, Gaps]:
            nonlocal missing, missing_since
            behind = barrier.lagging()
            if behind:
                return None, Gaps(cluster=[behind])
            md = self._read_metadata(named)
            missing = sorted(named - set(md)) if named is not None else []
            if missing:
                # a topic created a moment ago may not be in this broker's metadata yet: read again
                # for a while (NAMED_TOPIC_RETRIES x NAMED_TOPIC_RETRY_S), then it does not exist
                now = time.monotonic()
                missing_since = now if missing_since is None else missing_since
                if now - missing_since >= NAMED_TOPIC_RETRIES * NAMED_TOPIC_RETRY_S:
                    raise unknown(missing)
                return None, Gaps(cluster=[f"topic(s) {', '.join(missing)} not in the metadata"])
            missing_since = None
            names = sorted(named if named is not None else md)
            unread = [n for n in names if n not in configs and md[n].error is None]
            config_futures = ck.describe_configs(
                [ConfigResource(ConfigResource.Type.TOPIC, n) for n in unread], request_timeout=self._timeout_s
            ) if unread else {}
            inflight = self.list_reassignments()
            sizes = self._replica_sizes(live) if include_sizes else None
            configs.update(self._collect_configs(config_futures))
            view = {
                n: TopicMetadata(
                    {pid: (inflight[tp].replicas if (tp := TopicPartition(n, pid)) in inflight else p.replicas)
                     for pid, p in md[n].partitions.items()},
                    md[n].error,
                )
                for n in names
            }
            gaps = find_gaps(view, configs=configs, sizes=sizes, brokers=live, reassigning=inflight)
            if gaps:
                return None, gaps
            return self._build_snapshot(cluster_id, brokers, md, names, configs, inflight, sizes), gaps

        what = f"the cluster at {self._bootstrap}" + (f" (topics {', '.join(sorted(named)[:5])}"
                                                        f"{', ...' if len(named) > 5 else ''})" if named else "")
        try:
            snap, attempts, spent = settle(attempt, budget_s=budget, what=what)
        except IncompleteSnapshotError:
            if missing:  # still unknown when the budget ran out: it does not exist (as callers expect)
                raise unknown(missing) from None
            raise
        check = SnapshotCheck.of(snap, source="cluster", attempts=attempts, settle_s=round(spent, 3))
        return snap.model_copy(update={"check": check})

    def _build_snapshot(
        self, cluster_id: str | None, brokers: Sequence[Broker], md: Mapping[str, _Topic], names: Sequence[str],
        configs: Mapping[str, dict[str, str]],
        inflight: Mapping[TopicPartition, InFlightReassignment], sizes: Mapping[TopicPartition, dict[int, int]] | None,
    ) -> ClusterSnapshot:
        """The snapshot of ``names`` from views :func:`find_gaps` found complete."""
        topic_states: list[TopicState] = []
        partitions: list[PartitionState] = []
        for name in names:
            topic = md[name]
            parts = topic.partitions
            rfs = [len(p.replicas) for p in parts.values()]
            topic_states.append(TopicState(
                name=name,
                topic_id=topic.topic_id,
                internal=topic.internal,
                partition_count=len(parts),
                replication_factor=max(set(rfs), key=rfs.count) if rfs else 0,
                configs=configs[name],
            ))
            for pid in sorted(parts):
                p = parts[pid]
                tp = TopicPartition(name, pid)
                r = inflight.get(tp)
                # Trusted data from the cluster: built without re-validation (a 10k-partition
                # snapshot would spend most of its time there); the controller's view wins
                # for a reassigning partition.
                partitions.append(PartitionState.model_construct(
                    topic=name,
                    partition=pid,
                    replicas=r.replicas if r else p.replicas,
                    isr=p.isrs,
                    leader=p.leader if p.leader >= 0 else None,
                    adding_replicas=r.adding_replicas if r else (),
                    removing_replicas=r.removing_replicas if r else (),
                    replica_sizes=sizes.get(tp) if sizes is not None else None,
                ))
        return ClusterSnapshot.model_construct(
            cluster_id=cluster_id,
            brokers=tuple(brokers),
            topics=tuple(topic_states),
            partitions=tuple(partitions),
        )

    def _snapshot_barrier(self, live: Collection[int], named: Collection[str] | None) -> _MetadataBarrier | _AgreementBarrier:
        """The snapshot's metadata barrier: KRaft's (:class:`_MetadataBarrier`, every broker has applied the metadata
        log as far as it was committed), or in ZooKeeper mode :class:`_AgreementBarrier` (every live broker's Metadata
        agrees on the topics read)."""
        if self.capabilities().zookeeper_mode:
            return _AgreementBarrier(self, live, named)
        return _MetadataBarrier(self, live)

    def _broker_view(self, broker: int, names: Collection[str] | None) -> BrokerView | None:
        """What ``broker`` itself answers to Metadata of ``names`` (``None``: all): each topic's id and every
        partition's replicas; ``None`` when it does not answer within the barrier's timeout."""
        try:
            md = self._read_metadata(names, node_id=broker)
        except (kp_errors.KafkaError, OSError) as e:
            log.debug("Metadata from broker %s failed: %s: %s", broker, type(e).__name__, e)
            return None
        return {n: (t.topic_id, {pid: p.replicas for pid, p in t.partitions.items()}) for n, t in md.items()}

    def _read_metadata(self, names: Collection[str] | None, *, node_id: int | None = None) -> dict[str, _Topic]:
        """One Metadata request (kafka-python's, the highest version both sides know: v12 or v13 on Kafka 4.x), for
        ``names`` or, with ``None``, every topic the principal may describe: each topic's error, id (KIP-516, from
        v10; ``None`` from an older broker), internal flag, and every partition's replicas, ISR and leader. A named
        topic that does not exist or is hidden from the principal is left out, as a whole-cluster request leaves
        out hidden topics. Never creates a topic (``allow_auto_topic_creation`` false). Sent to the least loaded
        broker (``node_id``: to that broker, within :data:`BARRIER_TIMEOUT_S`, as ZooKeeper mode's barrier asks each); a
        broker gone meanwhile is left for another on a fresh client (:meth:`_with_fresh_controller`).
        kafka-python's errors leave the public methods translated (:meth:`_translate`)."""
        request = MetadataRequest(
            topics=None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in sorted(names)],
            allow_auto_topic_creation=False)
        timeout_ms = int((self._timeout_s if node_id is None else min(self._timeout_s, BARRIER_TIMEOUT_S)) * 1000)
        to = {} if node_id is None else {"node_id": node_id}

        def ask(kp: KafkaAdminClient) -> Any:
            manager = kp._manager

            async def send() -> Any:
                return await manager.wait_for(manager.send(request, request_timeout_ms=timeout_ms, **to), timeout_ms)

            return manager.run(send)

        response = self._with_fresh_controller(ask) if node_id is None else ask(self._kafka_python())
        top = getattr(response, "error_code", 0)  # v13: an error for the whole request (KIP-1102)
        if top:
            raise kp_errors.for_code(top)(f"Metadata: {getattr(response, 'error_message', None) or ''}".rstrip(": "))
        out: dict[str, _Topic] = {}
        for t in response.topics:
            if t.error_code in _ABSENT or t.name is None:
                continue
            out[t.name] = _Topic(
                error=None if not t.error_code else _error_name(kp_errors.for_code(t.error_code)),
                topic_id=kafka_topic_id(getattr(t, "topic_id", None)),
                internal=bool(t.is_internal),
                partitions={p.partition_index: _Partition(tuple(p.replica_nodes), tuple(p.isr_nodes), p.leader_id)
                            for p in t.partitions},
            )
        return out

    # -- the cluster watch ---------------------------------------------------------------------

    _min_isr: dict[str, int] | None = None
    _min_isr_unknown: set[str]
    _min_isr_read_at = 0.0

    def partition_health(self, *, min_isr_max_age_s: float = MIN_ISR_MAX_AGE_S) -> PartitionHealth:
        """ONE Metadata request of every partition (:meth:`_read_metadata`), folded at once into
        :class:`~airflow_kafka_reassign.core.vocabulary.ports.PartitionHealth`
        (:func:`~airflow_kafka_reassign.core.healing.observation.fold_partitions`). Each topic's
        ``min.insync.replicas`` (DescribeConfigs gives the effective value: the topic's, else the cluster's) is
        read for topics not seen before, and for every topic again once ``min_isr_max_age_s`` has passed; a topic
        whose configs cannot be read (no DESCRIBE_CONFIGS on it) is taken as 1 and named in ``min_isr_unknown``."""
        md = self._read_metadata(None)
        now = time.monotonic()
        if self._min_isr is None or now - self._min_isr_read_at >= min_isr_max_age_s:
            self._min_isr, self._min_isr_unknown, self._min_isr_read_at = {}, set(), now
        names = [n for n, t in md.items() if t.error is None]
        unread = [n for n in names if n not in self._min_isr and n not in self._min_isr_unknown]
        if unread:
            self._read_min_isr(unread)
        alive = set(md)
        self._min_isr = {n: v for n, v in self._min_isr.items() if n in alive}  # deleted topics forgotten
        self._min_isr_unknown &= alive
        rows = ((n, pid, p.replicas, p.isrs, p.leader) for n in names for pid, p in md[n].partitions.items())
        return fold_partitions(rows, self._min_isr, min_isr_unknown=self._min_isr_unknown)

    def _read_min_isr(self, names: Sequence[str]) -> None:
        """``min.insync.replicas`` of ``names`` into the cache (DescribeConfigs, :data:`MIN_ISR_BATCH` topics per
        request, all in flight at once)."""
        assert self._min_isr is not None
        ck = self._confluent()
        futures: dict[Any, Future[Any]] = {}
        for i in range(0, len(names), MIN_ISR_BATCH):
            futures.update(ck.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, n)
                                                for n in names[i:i + MIN_ISR_BATCH]], request_timeout=self._timeout_s))
        for res, fut in futures.items():
            try:
                entries = self._answer(fut)
                value = entries.get("min.insync.replicas")
                self._min_isr[res.name] = int(value.value) if value is not None and value.value else 1
            except Exception as e:  # noqa: BLE001 (the watch goes on without it; said once per topic)
                self._min_isr_unknown.add(res.name)
                log.warning("min.insync.replicas of topic %s could not be read (%s: %s): the cluster watch takes it "
                            "as 1 (never under it) until it can", res.name, type(e).__name__, e)

    def _unauthorized_topics(self, names: Sequence[str]) -> list[str]:
        """Which of ``names`` (absent from the metadata) exist but are hidden from this principal: Kafka answers
        TOPIC_AUTHORIZATION_FAILED for them when asked by name (DescribeTopicPartitions; never creates a topic),
        UNKNOWN_TOPIC_OR_PARTITION for topics that do not exist."""
        futures = self._confluent().describe_topics(CKTopicCollection(list(names)), request_timeout=self._timeout_s)
        out = []
        for name, fut in futures.items():
            try:
                fut.result(self._timeout_s)
            except KafkaException as e:
                if e.args and getattr(e.args[0], "code", lambda: None)() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    out.append(name)
            except Exception:  # noqa: BLE001 (a probe for a better message: "does not exist" stays the default)
                continue
        return sorted(out)

    def _collect_configs(self, futures: Mapping[Any, Future[Any]]) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for res, fut in futures.items():
            try:
                needs = Refused.on_topic("DESCRIBE_CONFIGS", res.name, "DescribeConfigs")
                entries = self._answer(fut, needs=needs)
            except KafkaException as e:
                if e.args and isinstance(e.args[0], KafkaError) and (
                    e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                ):
                    continue  # deleted since the metadata was read: find_gaps sees it
                raise self._translate(e, needs=needs, resource=f"topic {res.name}") from e
            out[res.name] = {
                k: e.value for k, e in entries.items()
                if k in SNAPSHOT_TOPIC_CONFIGS and e.value is not None and e.value != ""
            }
        return out


class _AgreementBarrier:
    """The snapshot's barrier in ZooKeeper mode: no metadata log, so no offset to catch up with; metadata reaches each
    broker by the controller's UpdateMetadata. It holds until every live broker's own Metadata of the topics read
    (each topic's id, partitions and replicas) agrees (:func:`~airflow_kafka_reassign.core.guards.completeness.views_disagree`):
    a topic created or grown before the snapshot is then seen alike whichever broker answers. A broker that does not
    answer within :data:`BARRIER_TIMEOUT_S` is not waited for (a warning, once per broker and client). One Metadata
    request per live broker at each call, until they agree."""

    def __init__(self, admin: SnapshotMixin, brokers: Collection[int], topics: Collection[str] | None) -> None:
        self._admin = admin
        self._brokers = sorted(brokers)
        self._topics = None if topics is None else sorted(topics)
        self._done = False

    def lagging(self) -> str:
        """``""`` once the live brokers agree, else which disagree and on which topics."""
        if self._done or len(self._brokers) < 2:
            return ""
        views = {b: self._admin._broker_view(b, self._topics) for b in self._brokers}
        silent = sorted({b for b, v in views.items() if v is None} - self._admin._barrier_warned)
        if silent:
            log.warning("broker(s) %s did not answer Metadata within %g s: snapshots do not wait for them to agree "
                        "with the other brokers (ZooKeeper mode)", silent, BARRIER_TIMEOUT_S)
            self._admin._barrier_warned.update(silent)
        behind = views_disagree(views)
        self._done = not behind
        return behind
