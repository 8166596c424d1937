"""The maintenance part of the Kafka adapter: cordons, the KRaft quorum, broker registrations, log dirs.

:class:`MaintenanceMixin` is a part of :class:`~airflow_kafka_reassign.kafka.admin.KafkaClusterAdmin`
(the port's maintenance methods), kept here so that each request's client and quirks sit in one place:

* capabilities: ApiVersions of the connected broker and the finalized ``metadata.version``
  (kafka-python's ``describe_features``): :func:`capabilities_from` turns them into the port's
  :class:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterCapabilities`, so no API key reaches the core;
* cordons (``cordoned.log.dirs``, KIP-1066): confluent-kafka's DescribeConfigs and
  IncrementalAlterConfigs, one broker resource per call, as the throttle rates;
* DescribeQuorum, DescribeCluster v2 with fenced brokers (KIP-1073), AlterReplicaLogDirs: kafka-python;
* UnregisterBroker (api key 64): neither client has it; its request class is in :mod:`.protocol`,
  sent through kafka-python's connection manager;
* DescribeTopicPartitions (api key 75) for KIP-966's eligible leader replicas: confluent-kafka 2.16 does not
  expose ELR (its ``TopicPartitionInfo`` has no such field); kafka-python 3.0 has the request class (its
  ``describe_topic_partitions`` sends one page at a time): every topic's pages are sent at once through its
  connection manager.

Verified against real 4.3.0, 4.3.1 and 4.4.0 clusters (``tests/integration/test_maintenance.py``,
docs/decommission.md for what each version does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from kafka import errors as kp_errors

from airflow_kafka_reassign.core.maintenance.cordon import CORDONED_LOG_DIRS
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import (
    CORDON_METADATA_LEVEL,
    JBOD_METADATA_LEVEL,
    BrokerResult,
    ClusterCapabilities,
    ClusterDescription,
    DirReplica,
    EligibleLeaders,
    LogDir,
    QuorumInfo,
    QuorumMember,
    RegisteredBroker,
    ReplicaDirResult,
    TopicPartitionReplica,
)
from airflow_kafka_reassign.exceptions import UnsupportedBrokerError
from airflow_kafka_reassign.kafka.acl import Refused
from airflow_kafka_reassign.kafka.protocol import DescribeTopicPartitionsRequest, UnregisterBrokerRequest

if TYPE_CHECKING:
    import contextlib

    from kafka.admin import KafkaAdminClient

    from airflow_kafka_reassign.core.vocabulary.ports import ThrottleBackup

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Kafka's api keys the capabilities are told from (ApiVersions).
ALTER_REPLICA_LOG_DIRS_KEY = 34
DESCRIBE_QUORUM_KEY = 55
DESCRIBE_CLUSTER_KEY = 60
UNREGISTER_BROKER_KEY = 64
DESCRIBE_TOPIC_PARTITIONS_KEY = 75
#: KIP-966's feature: eligible leader replicas are tracked by the controller at level 1 or more.
ELR_FEATURE = "eligible.leader.replicas.version"
#: Partitions per DescribeTopicPartitions response (the broker's own cap,
#: ``max.request.partition.size.limit``, is 2000 by default).
ELR_PAGE = 2000
#: DescribeCluster v2 carries IncludeFencedBrokers / IsFenced (KIP-1073).
FENCED_BROKERS_MIN_VERSION = 2


def capabilities_from(
    api_versions: Mapping[int, tuple[int, int]], features: Mapping[str, Mapping[str, Any]]
) -> ClusterCapabilities:
    """The capabilities from a broker's ApiVersions (``{api key: (min, max)}``) and features
    (kafka-python's ``describe_features()``: ``{name: {"supported": (min, max), "finalized": (min, max)}}``).

    Cordons need the FINALIZED metadata.version 4.3-IV0 (below it the brokers refuse to set
    ``cordoned.log.dirs``). Whether the controller also checks explicit assignments (KAFKA-20832, fixed in
    4.4) is told from the brokers' software: a 4.3 broker supports metadata.version up to 30, a 4.4.0 one
    up to 33."""
    elr = features.get(ELR_FEATURE, {}).get("finalized")
    mv = features.get("metadata.version", {})
    finalized = mv.get("finalized")
    supported = mv.get("supported")
    level = int(finalized[1]) if finalized else None
    top = int(supported[1]) if supported else None
    cordons = level is not None and level >= CORDON_METADATA_LEVEL
    return ClusterCapabilities(
        metadata_version=level,
        cordons=cordons,
        cordons_refuse_explicit_assignments=cordons and top is not None and top > CORDON_METADATA_LEVEL,
        describe_quorum=DESCRIBE_QUORUM_KEY in api_versions,
        fenced_brokers=api_versions.get(DESCRIBE_CLUSTER_KEY, (0, -1))[1] >= FENCED_BROKERS_MIN_VERSION,
        unregister_broker=UNREGISTER_BROKER_KEY in api_versions,
        jbod=ALTER_REPLICA_LOG_DIRS_KEY in api_versions and level is not None and level >= JBOD_METADATA_LEVEL,
        eligible_leader_replicas=bool(elr) and int(elr[1]) >= 1 and DESCRIBE_TOPIC_PARTITIONS_KEY in api_versions,
    )


def log_dirs_of(responses: list[dict[str, Any]], wanted: Mapping[str, set[int]] | None) -> dict[int, tuple[LogDir, ...]]:
    """Each broker's log dirs from kafka-python's DescribeLogDirs results, with the replicas of ``wanted``
    (``{topic: {partition}}``; ``None``: all) each holds, future replicas included."""
    out: dict[int, tuple[LogDir, ...]] = {}
    for broker in responses:
        dirs = []
        for d in broker["log_dirs"]:
            code = d.get("error_code") or 0
            replicas = tuple(
                DirReplica(topic=t["name"], partition=p["partition_index"], size=int(p["partition_size"]),
                           offset_lag=int(p.get("offset_lag") or 0), future=bool(p.get("is_future_key")))
                for t in d.get("topics", ()) for p in t.get("partitions", ())
                if wanted is None or p["partition_index"] in wanted.get(t["name"], ())
            )
            total, usable = d.get("total_bytes", -1), d.get("usable_bytes", -1)
            dirs.append(LogDir(
                path=d["log_dir"], offline=bool(code), error=kp_errors.for_code(code).message if code else None,
                total_bytes=int(total) if total is not None and total >= 0 else None,
                usable_bytes=int(usable) if usable is not None and usable >= 0 else None,
                cordoned=d.get("is_cordoned"), replicas=replicas,
            ))
        out[broker["broker"]] = tuple(dirs)
    return out


class MaintenanceMixin:
    """The port's maintenance methods; mixed into ``KafkaClusterAdmin``, whose clients, waits and error
    translation it uses."""

    _capabilities: ClusterCapabilities | None = None

    if TYPE_CHECKING:  # provided by KafkaClusterAdmin
        _bootstrap: str

        def _kafka_python(self) -> KafkaAdminClient: ...
        def _with_fresh_controller(self, call: Callable[[KafkaAdminClient], _T]) -> _T: ...
        def _authorized(self, refused: Any) -> contextlib.AbstractContextManager[None]: ...
        def _unreachable(self, e: BaseException) -> Exception: ...
        def describe_throttles(self, brokers: Collection[int], topics: Collection[str], *,
                               broker_keys: Collection[str] | None = None) -> ThrottleBackup: ...
        def _set_broker_configs(self, configs: Mapping[int, Mapping[str, str | None]], what: str) -> None: ...

    # -- capabilities -----------------------------------------------------------------------

    def capabilities(self) -> ClusterCapabilities:
        """What the cluster supports (read once per client: ApiVersions and the finalized features)."""
        if self._capabilities is None:

            with self._authorized(Refused.on_cluster("DESCRIBE", "ApiVersions")):
                features = self._with_fresh_controller(lambda kp: kp.describe_features())
                api = dict(self._kafka_python()._manager.broker_version_data.api_versions)
            self._capabilities = capabilities_from(api, features)
            log.info("cluster at %s: %s", self._bootstrap, self._capabilities)
        return self._capabilities

    def _require(self, supported: bool, what: str, needs: str) -> None:
        if not supported:
            raise UnsupportedBrokerError(
                f"the cluster at {self._bootstrap} does not support {what} (it needs {needs}); nothing was sent")

    # -- cordons ----------------------------------------------------------------------------

    def describe_cordons(self, brokers: Collection[int]) -> dict[int, str | None]:
        """Each broker's own dynamic ``cordoned.log.dirs`` (``None``: not set dynamically)."""
        backup = self.describe_throttles(brokers, (), broker_keys=(CORDONED_LOG_DIRS,))
        return {b: (values.get(CORDONED_LOG_DIRS) or None) for b, values in backup.brokers.items()}

    def set_cordons(self, values: Mapping[int, str | None]) -> None:
        """Set or delete each broker's dynamic ``cordoned.log.dirs`` (one request per broker)."""
        if not values:
            return
        self._require(self.capabilities().cordons, "cordoned log dirs (KIP-1066)",
                      f"metadata.version 4.3-IV0 (level {CORDON_METADATA_LEVEL}), Apache Kafka 4.3+; this cluster's is "
                      f"{self.capabilities().metadata_version}")
        self._set_broker_configs({b: {CORDONED_LOG_DIRS: v} for b, v in values.items()}, "cordoned.log.dirs")

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

    # -- the quorum and the registrations ---------------------------------------------------

    def describe_quorum(self) -> QuorumInfo:
        """The KRaft metadata quorum (DescribeQuorum of ``__cluster_metadata``)."""

        self._require(self.capabilities().describe_quorum, "DescribeQuorum", "a KRaft cluster")
        with self._authorized(Refused.on_cluster("DESCRIBE", "DescribeQuorum")):
            raw = self._with_fresh_controller(lambda kp: kp.describe_metadata_quorum())
        part = raw["topics"][0]["partitions"][0]
        if part.get("error"):
            raise kp_errors.KafkaError(f"DescribeQuorum: {part['error']}")

        def member(r: Mapping[str, Any]) -> QuorumMember:
            leo = r.get("log_end_offset")
            return QuorumMember(id=int(r["replica_id"]), log_end_offset=int(leo) if leo is not None and leo >= 0 else None,
                                directory_id=r.get("replica_directory_id") or None)

        leader = part.get("leader_id")
        return QuorumInfo(
            leader=int(leader) if leader is not None and leader >= 0 else None,
            leader_epoch=part.get("leader_epoch"), high_watermark=part.get("high_watermark"),
            voters=tuple(member(v) for v in part.get("current_voters") or ()),
            observers=tuple(member(o) for o in part.get("observers") or ()),
        )

    def describe_cluster(self, *, include_fenced: bool = True) -> ClusterDescription:
        """The registered brokers; fenced ones flagged (KIP-1073) when asked for and supported."""

        fenced_known = include_fenced and self.capabilities().fenced_brokers
        with self._authorized(Refused.on_cluster("DESCRIBE", "DescribeCluster")):
            # kafka-python asks for fenced brokers (v2) and falls back to Metadata on brokers without DescribeCluster
            raw = self._with_fresh_controller(lambda kp: kp.describe_cluster())
        brokers = tuple(sorted(
            (RegisteredBroker(id=int(b["broker_id"]), rack=b.get("rack") or None, fenced=bool(b.get("is_fenced")))
             for b in raw["brokers"] if include_fenced or not b.get("is_fenced")),
            key=lambda b: b.id))
        return ClusterDescription(cluster_id=raw.get("cluster_id"), brokers=brokers, includes_fenced=fenced_known)

    def unregister_broker(self, broker_id: int) -> BrokerResult:
        """UnregisterBroker (api key 64): the controller removes ``broker_id``'s registration."""

        self._require(self.capabilities().unregister_broker, "UnregisterBroker", "a KRaft cluster (Kafka 3.0+)")
        request = UnregisterBrokerRequest(broker_id=int(broker_id))
        try:
            with self._authorized(Refused.on_cluster("ALTER", "UnregisterBroker")):
                response = self._with_fresh_controller(
                    lambda kp: kp._manager.run(kp._send_request_to_controller, request))
        except kp_errors.KafkaTimeoutError as e:
            raise self._unreachable(e) from e
        err = kp_errors.for_code(response.error_code)
        if err is kp_errors.NoError:
            log.info("UnregisterBroker %s: the controller removed its registration", broker_id)
            return BrokerResult(broker=broker_id)
        return BrokerResult(broker=broker_id, error=response.error_message or err.description, error_code=err.message)

    # -- log dirs ---------------------------------------------------------------------------

    def alter_replica_log_dirs(self, targets: Mapping[TopicPartitionReplica, str]) -> tuple[ReplicaDirResult, ...]:
        """AlterReplicaLogDirs (KIP-113): each replica to its new log dir; one request per broker."""

        if not targets:
            return ()
        self._require(self.capabilities().jbod, "AlterReplicaLogDirs between log dirs (JBOD)",
                      f"AlterReplicaLogDirs and metadata.version 3.7-IV2 (level {JBOD_METADATA_LEVEL}) on KRaft")
        for replica, path in targets.items():
            if not path or not path.startswith("/"):
                raise ValueError(f"replica {TopicPartitionReplica(*replica)}: the target log dir must be an absolute "
                                 f"path of the broker's log.dirs, not {path!r}")
        try:
            with self._authorized(Refused.on_cluster("ALTER", "AlterReplicaLogDirs")):
                raw = self._kafka_python().alter_replica_log_dirs(
                    {(r[0], r[1], r[2]): path for r, path in targets.items()})
        except kp_errors.KafkaTimeoutError as e:
            raise self._unreachable(e) from e
        out = []
        for tpr, err in raw.items():
            ok = err is kp_errors.NoError
            out.append(ReplicaDirResult(topic=tpr.topic, partition=tpr.partition, broker=tpr.broker_id,
                                        error=None if ok else err.description, error_code=None if ok else err.message))
        return tuple(sorted(out, key=lambda r: (r.broker, r.topic, r.partition)))
