"""Reassignments and partitions: ListPartitionReassignments, AlterPartitionReassignments (submit and cancel,
with KIP-860's replication-factor guard), CreatePartitions, ElectLeaders, and DescribeTopicPartitions for
KIP-966's eligible leader replicas.

confluent-kafka (librdkafka) 2.16 has no partition-reassignment calls: those go through kafka-python.

KIP-860 (the replication-factor guard): kafka-python's public ``alter_partition_reassignments`` has no
``allow_replication_factor_change`` argument, and it silently downgrades to request v0, which DROPS the flag
(seen on brokers older than 4.1: the RF changed from 2 to 3). So this module builds the v1 request itself
with ``min_version=1`` and checks the broker's ApiVersions for key 45 first; a broker that only knows v0 gets
a clear refusal before anything is sent, unless the caller explicitly chose ``rf_guard="client"``. That uses
kafka-python's request classes and its controller routing, which are not part of its documented API;
``tests/integration/test_admin_adapter.py`` pins the behaviour.

DescribeTopicPartitions (api key 75) for KIP-966's eligible leader replicas: confluent-kafka 2.16 does not
expose ELR (its ``TopicPartitionInfo`` has no such field); kafka-python 3.0 has the request class (its
``describe_topic_partitions`` sends one page at a time): every topic's pages are sent at once through its
connection manager.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException
from confluent_kafka import TopicCollection as CKTopicCollection
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import NewPartitions as CKNewPartitions
from kafka import TopicPartition as KPTopicPartition
from kafka import errors as kp_errors
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterPartitionReassignmentsRequest

from airflow_kafka_reassign.core.vocabulary.models import TopicPartition, check_replica_list
from airflow_kafka_reassign.core.vocabulary.ports import (
    AlterResult,
    EligibleLeaders,
    InFlightReassignment,
    NewPartitions,
    PartitionResult,
    RfGuard,
    TopicResult,
)
from airflow_kafka_reassign.exceptions import ConfigurationError, TopicNotFoundError, UnsupportedBrokerError
from airflow_kafka_reassign.kafka.acl import Refused
from airflow_kafka_reassign.kafka.admin.client import _error_name
from airflow_kafka_reassign.kafka.admin.cluster import ELR_FEATURE, ClusterMixin
from airflow_kafka_reassign.kafka.protocol import DescribeTopicPartitionsRequest

log = logging.getLogger(__name__)

#: Kafka's api key of AlterPartitionReassignments.
ALTER_PARTITION_REASSIGNMENTS_KEY = 45
#: The first AlterPartitionReassignments version that carries AllowReplicationFactorChange.
RF_GUARD_MIN_VERSION = 1

#: Partitions per DescribeTopicPartitions response (the broker's own cap,
#: ``max.request.partition.size.limit``, is 2000 by default).
ELR_PAGE = 2000


def check_rf_guard_support(max_version: int | None, *, bootstrap: str) -> None:
    """Refuse before sending when the broker cannot honour AllowReplicationFactorChange=false.

    KIP-860's client compatibility rule: a client that asks for the guard from a broker
    without AlterPartitionReassignments v1 must fail instead of silently dropping it.
    """
    if max_version is None or max_version < RF_GUARD_MIN_VERSION:
        have = "does not support AlterPartitionReassignments" if max_version is None else (
            f"supports AlterPartitionReassignments up to v{max_version}"
        )
        raise UnsupportedBrokerError(
            f"the cluster at {bootstrap} {have}; the replication-factor guard "
            "(allow_replication_factor_change=False, KIP-860) needs v1, which Apache Kafka 4.1+ "
            "brokers have. Nothing was sent. Upgrade the brokers, or choose rf_guard=\"client\" "
            "to compare target replica counts with the controller's replica sets before sending "
            "(racy: it cannot see a change made between the check and the request)."
        )



class ReassignmentsMixin(ClusterMixin):
    """The port's reassignment and partition calls."""

    def supports_rf_guard(self) -> bool | None:
        """KIP-860 enforced by the brokers: AlterPartitionReassignments v1 or newer (ApiVersions)."""
        version = self.broker_api_version(ALTER_PARTITION_REASSIGNMENTS_KEY)
        return version is not None and version >= 1

    def list_reassignments(
        self, partitions: Collection[TopicPartition] | None = None
    ) -> dict[TopicPartition, InFlightReassignment]:
        kp_tps = None if partitions is None else [KPTopicPartition(t, p) for t, p in partitions]
        if kp_tps == []:
            return {}
        try:
            with self._authorized(Refused.on_cluster("DESCRIBE", "ListPartitionReassignments")):
                raw = self._with_fresh_controller(
                    lambda kp: kp.list_partition_reassignments(kp_tps, timeout_ms=int(self._timeout_s * 1000))
                )
        except kp_errors.KafkaTimeoutError as e:
            raise self._unreachable(e) from e
        return {
            TopicPartition(tp.topic, tp.partition): InFlightReassignment(
                topic=tp.topic,
                partition=tp.partition,
                replicas=tuple(v["replicas"]),
                adding_replicas=tuple(v["adding_replicas"]),
                removing_replicas=tuple(v["removing_replicas"]),
            )
            for tp, v in raw.items()
        }

    def alter_reassignments(
        self,
        targets: Mapping[TopicPartition, Sequence[int]],
        *,
        allow_replication_factor_change: bool = False,
        rf_guard: RfGuard = "broker",
    ) -> AlterResult:
        """Submit reassignments in ONE request; returns every partition's result.

        With ``allow_replication_factor_change=False`` (the default) the request goes out as
        v1 with KIP-860's AllowReplicationFactorChange=false, so the broker refuses
        (``INVALID_REPLICATION_FACTOR``) any partition whose replica count would change,
        while the valid partitions of the same request proceed. Brokers without v1 are
        refused before sending unless ``rf_guard="client"``.
        """
        if rf_guard not in ("broker", "client"):
            raise ConfigurationError(f"rf_guard must be 'broker' or 'client', not {rf_guard!r}")
        for tp, replicas in targets.items():
            check_replica_list(replicas, what="target replicas", where=f"partition {tp[0]}-{tp[1]}")
        if not targets:
            return AlterResult(results=(), rf_guard=rf_guard)
        refused: list[PartitionResult] = []
        to_send = {TopicPartition(*tp): list(r) for tp, r in targets.items()}
        request_kwargs: dict[str, Any] = {}
        if not allow_replication_factor_change:
            max_v = self.broker_api_version(ALTER_PARTITION_REASSIGNMENTS_KEY)
            if rf_guard == "broker" or (max_v is not None and max_v >= RF_GUARD_MIN_VERSION):
                check_rf_guard_support(max_v, bootstrap=self._bootstrap)
                request_kwargs = {"allow_replication_factor_change": False,
                                  "min_version": RF_GUARD_MIN_VERSION}
            else:
                refused = self._client_side_rf_check(to_send)
                for r in refused:
                    to_send.pop(r.tp)
        results = refused + (self._send_alter(to_send, **request_kwargs) if to_send else [])
        version = self._last_alter_version if to_send else None
        return AlterResult(results=tuple(results), request_version=version, rf_guard=rf_guard)

    def _client_side_rf_check(self, targets: dict[TopicPartition, list[int]]) -> list[PartitionResult]:
        log.warning(
            "rf_guard='client': the brokers cannot enforce KIP-860, so target replica counts are "
            "compared with the controller's current replica sets before sending. This check is "
            "racy: a reassignment started between the check and the request is not seen."
        )
        inflight = self.list_reassignments(list(targets))
        topics = sorted({tp.topic for tp in targets})
        futures = self._confluent().describe_topics(
            CKTopicCollection(topics), request_timeout=self._timeout_s
        )
        current: dict[TopicPartition, tuple[int, ...]] = {}
        for name, f in futures.items():
            try:
                described = self._wait(f, resource=f"topic {name}")
            except TopicNotFoundError:  # deleted: the broker's answer names its partitions, each a result
                continue
            for p in described.partitions:
                current[TopicPartition(name, p.id)] = tuple(n.id for n in p.replicas)
        refused = []
        for tp, target in targets.items():
            rf_now = len(inflight[tp].target_replicas) if tp in inflight else len(current.get(tp, ()))
            if tp in current and rf_now != len(target):
                refused.append(PartitionResult(
                    topic=tp.topic, partition=tp.partition, error_code="INVALID_REPLICATION_FACTOR",
                    error=f"client-side RF guard: the move would change the replication factor "
                          f"from {rf_now} to {len(target)}; pass allow_replication_factor_change="
                          "True for a deliberate RF change",
                ))
        return refused

    def _send_alter(self, targets: Mapping[TopicPartition, Sequence[int] | None],
                    **request_kwargs: Any) -> list[PartitionResult]:
        topics = KafkaAdminClient._process_alter_partition_reassignments_input(
            {KPTopicPartition(t, p): r for (t, p), r in targets.items()}
        )
        request = AlterPartitionReassignmentsRequest(
            timeout_ms=int(self._timeout_s * 1000), topics=topics, **request_kwargs
        )

        def top_level_error(r: Any) -> Any:
            yield kp_errors.for_code(r.error_code)

        try:
            with self._authorized(Refused.on_cluster("ALTER", "AlterPartitionReassignments")):
                response = self._with_fresh_controller(
                    lambda kp: kp._manager.run(kp._send_request_to_controller, request, top_level_error)
                )
        except kp_errors.IncompatibleBrokerVersion as e:
            raise UnsupportedBrokerError(
                f"the cluster at {self._bootstrap} refused AlterPartitionReassignments "
                f"{request_kwargs and 'v1 ' or ''}({e}); nothing was sent"
            ) from e
        except kp_errors.KafkaTimeoutError as e:
            raise self._unreachable(e) from e
        self._last_alter_version = request.API_VERSION
        log.info("AlterPartitionReassignments v%s sent for %d partition(s)",
                 request.API_VERSION, len(targets))
        out: list[PartitionResult] = []
        for topic in response.responses:
            for part in topic.partitions:
                err = kp_errors.for_code(part.error_code)
                ok = err is kp_errors.NoError
                out.append(PartitionResult(
                    topic=topic.name,
                    partition=part.partition_index,
                    error=None if ok else (part.error_message or err.description),
                    error_code=None if ok else err.message,
                ))
        return out

    def cancel_reassignments(self, partitions: Collection[TopicPartition]) -> AlterResult:
        """Cancel in-flight reassignments: each partition goes back to its original replicas
        (KIP-455). A partition with nothing in flight reports NO_REASSIGNMENT_IN_PROGRESS."""
        if not partitions:
            return AlterResult(results=())
        results = self._send_alter({TopicPartition(*tp): None for tp in partitions})
        return AlterResult(results=tuple(results), request_version=self._last_alter_version)

    # -- partitions -----------------------------------------------------------------------

    def create_partitions(
        self, requests: Sequence[NewPartitions], *, validate_only: bool = False
    ) -> dict[str, TopicResult]:
        if not requests:
            return {}
        # confluent-kafka refuses an explicit replica_assignment=None: pass it only when set
        new = [
            CKNewPartitions(r.topic, r.total_count, replica_assignment=[list(a) for a in r.assignment])
            if r.assignment else CKNewPartitions(r.topic, r.total_count)
            for r in requests
        ]
        futures = self._confluent().create_partitions(
            new, validate_only=validate_only, request_timeout=self._timeout_s,
            operation_timeout=self._timeout_s,
        )
        out: dict[str, TopicResult] = {}
        for topic, fut in futures.items():
            try:
                self._answer(fut, needs=Refused.on_topic("ALTER", topic, "CreatePartitions"))  # errors: results
                out[topic] = TopicResult(topic=topic)
            except KafkaException as e:
                err = e.args[0]
                out[topic] = TopicResult(topic=topic, error=err.str(), error_code=_error_name(err))
        return out

    def elect_preferred_leaders(
        self, partitions: Collection[TopicPartition]
    ) -> tuple[PartitionResult, ...]:
        if not partitions:
            return ()
        return self._on_fresh_controller(lambda: self._elect_preferred_leaders(partitions))

    def _elect_preferred_leaders(self, partitions: Collection[TopicPartition]) -> tuple[PartitionResult, ...]:
        # confluent-kafka 2.16's elect_leaders fails on any timeout keyword (SystemError in its
        # argument parsing): call it bare; _wait still bounds the wait
        fut = self._confluent().elect_leaders(
            ElectionType.PREFERRED, [CKTopicPartition(t, p) for t, p in partitions]
        )
        results = self._wait(fut, needs=Refused.on_cluster("ALTER", "ElectLeaders"))
        out = []
        for tp, exc in results.items():
            err = exc.args[0] if isinstance(exc, KafkaException) else exc
            ok = err is None or err.code() == KafkaError.ELECTION_NOT_NEEDED
            out.append(PartitionResult(
                topic=tp.topic, partition=tp.partition,
                error=None if ok else err.str(), error_code=None if ok else err.name(),
            ))
        return tuple(sorted(out, key=lambda r: (r.topic, r.partition)))


    # -- KIP-966: eligible leader replicas ---------------------------------------------------

    def describe_eligible_leaders(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, EligibleLeaders]:
        """KIP-966's eligible leader replicas of ``partitions``: DescribeTopicPartitions (api key 75), which
        kafka-python sends and confluent-kafka does not expose (its ``TopicPartitionInfo`` has no ELR). One request
        per page of each topic, all topics at once, each starting at its first partition wanted (a cursor) and
        stopping after its last: a handful of requests for the few partitions below min ISR or offline."""
        if not partitions:
            return {}
        self._require(self.capabilities().eligible_leader_replicas, "KIP-966's eligible leader replicas",
                      f"the finalized feature {ELR_FEATURE} >= 1 (Kafka 4.0 opt-in, on by default for clusters "
                      "created on 4.1+)")
        wanted: dict[str, set[int]] = {}
        for tp in partitions:
            wanted.setdefault(tp.topic, set()).add(tp.partition)
        kp = self._kafka_python()
        manager = kp._manager

        def request(name: str, start: int) -> Any:
            return DescribeTopicPartitionsRequest(
                topics=[DescribeTopicPartitionsRequest.TopicRequest(name=name)], response_partition_limit=ELR_PAGE,
                cursor=DescribeTopicPartitionsRequest.Cursor(topic_name=name, partition_index=start))

        async def every() -> list[EligibleLeaders]:
            out: list[EligibleLeaders] = []
            todo = {name: min(parts) for name, parts in wanted.items()}  # topic -> the next page's first partition
            while todo:
                futures = {name: manager.send(request(name, start)) for name, start in todo.items()}
                after: dict[str, int] = {}
                for name, future in futures.items():
                    response = await future  # all pages of this round were sent before the first is awaited
                    parts, seen = wanted[name], -1
                    for t in response.topics:
                        if t.name != name or t.error_code:
                            continue
                        for p in t.partitions:
                            seen = max(seen, p.partition_index)
                            if p.partition_index in parts and not p.error_code:
                                out.append(EligibleLeaders(topic=name, partition=p.partition_index,
                                                           elr=tuple(p.eligible_leader_replicas or ()),
                                                           last_known_elr=tuple(p.last_known_elr or ())))
                    cursor = response.next_cursor
                    if seen < max(parts) and cursor is not None and cursor.topic_name == name \
                            and cursor.partition_index > todo[name]:
                        after[name] = cursor.partition_index
                todo = after
            return out

        try:
            with self._authorized(Refused.on_topic("DESCRIBE", sorted(wanted)[0], "DescribeTopicPartitions")):
                found: list[EligibleLeaders] = manager.run(every)
        except kp_errors.KafkaTimeoutError as e:
            raise self._unreachable(e) from e
        return {e.tp: e for e in found}
