"""The cluster, its quorum and its registrations: DescribeCluster, ApiVersions (the capabilities, KIP-860's
AlterPartitionReassignments v1), the finalized features, DescribeQuorum (KRaft), UnregisterBroker, and the
metadata barrier a snapshot waits behind.

* DescribeCluster: confluent-kafka for the live brokers and racks a snapshot needs; kafka-python's (v2, with
  fenced brokers, KIP-1073) for :meth:`ClusterMixin.describe_cluster`;
* ApiVersions and features (kafka-python's ``describe_features``): :func:`capabilities_from` turns them into
  the port's :class:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterCapabilities`, so no API key
  reaches the core;
* UnregisterBroker (api key 64): neither client has it; its request class is in
  :mod:`airflow_kafka_reassign.kafka.protocol`, sent through kafka-python's connection manager.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from kafka import errors as kp_errors
from kafka.protocol.metadata import ApiVersionsRequest

from airflow_kafka_reassign.core.guards.kafka_line import check_kafka_line
from airflow_kafka_reassign.core.vocabulary.models import Broker
from airflow_kafka_reassign.core.vocabulary.ports import (
    CORDON_METADATA_LEVEL,
    JBOD_METADATA_LEVEL,
    BrokerResult,
    ClusterCapabilities,
    ClusterDescription,
    QuorumInfo,
    QuorumMember,
    RegisteredBroker,
)
from airflow_kafka_reassign.exceptions import ClusterOperationError, UnsupportedBrokerError
from airflow_kafka_reassign.kafka.acl import Refused
from airflow_kafka_reassign.kafka.admin.client import AdminClients
from airflow_kafka_reassign.kafka.protocol import UnregisterBrokerRequest

log = logging.getLogger(__name__)

#: Kafka's api keys the capabilities are told from (ApiVersions).
ALTER_REPLICA_LOG_DIRS_KEY = 34
DESCRIBE_QUORUM_KEY = 55
DESCRIBE_CLUSTER_KEY = 60
UNREGISTER_BROKER_KEY = 64
DESCRIBE_TOPIC_PARTITIONS_KEY = 75
#: KIP-966's feature: eligible leader replicas are tracked by the controller at level 1 or more.
ELR_FEATURE = "eligible.leader.replicas.version"
#: DescribeCluster v2 carries IncludeFencedBrokers / IsFenced (KIP-1073).
FENCED_BROKERS_MIN_VERSION = 2


def capabilities_from(
    api_versions: Mapping[int, tuple[int, int]], features: Mapping[str, Mapping[str, Any]],
    broker_version: Sequence[int] | None = None,
) -> ClusterCapabilities:
    """The capabilities from a broker's ApiVersions (``{api key: (min, max)}``) and features
    (kafka-python's ``describe_features()``: ``{name: {"supported": (min, max), "finalized": (min, max)}}``), and the
    Kafka line kafka-python infers from the ApiVersions (``broker_version``: ``(3, 9)``).

    ZooKeeper mode: the brokers answer no DescribeQuorum and report no ``metadata.version`` (a KRaft 3.9 broker does
    both; seen on the sandbox's 3.9.1 in either mode).

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
    quorum = DESCRIBE_QUORUM_KEY in api_versions
    return ClusterCapabilities(
        metadata_version=level,
        cordons=cordons,
        cordons_refuse_explicit_assignments=cordons and top is not None and top > CORDON_METADATA_LEVEL,
        describe_quorum=quorum,
        fenced_brokers=api_versions.get(DESCRIBE_CLUSTER_KEY, (0, -1))[1] >= FENCED_BROKERS_MIN_VERSION,
        unregister_broker=UNREGISTER_BROKER_KEY in api_versions,
        # JBOD: ZooKeeper mode has had it since Kafka 1.1 (KIP-112/113); KRaft from metadata.version 3.7-IV2 (KIP-858)
        jbod=ALTER_REPLICA_LOG_DIRS_KEY in api_versions and (
            (level is not None and level >= JBOD_METADATA_LEVEL) or (not quorum and level is None)),
        eligible_leader_replicas=bool(elr) and int(elr[1]) >= 1 and DESCRIBE_TOPIC_PARTITIONS_KEY in api_versions,
        zookeeper_mode=not quorum and level is None,
        kafka_line=".".join(map(str, broker_version[:2])) if broker_version else None,
    )



class ClusterMixin(AdminClients):
    """The port's cluster calls: brokers, capabilities, the quorum, registrations, the metadata barrier."""

    _capabilities: ClusterCapabilities | None = None

    def describe_cluster_brokers(self) -> tuple[str | None, list[Broker]]:
        """The cluster id and the registered brokers with their racks (asked again on fresh metadata when
        librdkafka's "controller" was a broker that stopped)."""
        return self._on_fresh_controller(self._describe_cluster_brokers)

    def _describe_cluster_brokers(self) -> tuple[str | None, list[Broker]]:
        desc = self._wait(self._confluent().describe_cluster(request_timeout=self._timeout_s))
        brokers = sorted((Broker(id=n.id, rack=n.rack or None) for n in desc.nodes), key=lambda b: b.id)
        return desc.cluster_id, brokers

    def metadata_barrier(self) -> Callable[[], str]:
        """The port's check that every live broker applied the metadata committed at its first call
        (:class:`_MetadataBarrier`: DescribeQuorum once, then ApiVersions per broker at each call)."""
        _, brokers = self._describe_cluster_brokers()
        return _MetadataBarrier(self, {b.id for b in brokers}).lagging

    def list_topic_names(self) -> list[str]:
        md = self._confluent().list_topics(timeout=self._timeout_s)
        return sorted(md.topics)

    def broker_api_version(self, api_key: int) -> int | None:
        """The highest version of ``api_key`` the connected broker supports (ApiVersions)."""
        data = self._kafka_python()._manager.broker_version_data
        versions = data.api_versions.get(api_key)
        return None if versions is None else int(versions[1])

    def _applied_metadata_offsets(self, brokers: Sequence[int]) -> dict[int, int | None]:
        """Each broker's applied metadata offset, from ApiVersions (v3+: ``FinalizedFeaturesEpoch``,
        which KRaft brokers set to the offset of the metadata image they serve); ``None`` for a
        broker that did not answer within :data:`BARRIER_TIMEOUT_S` (or reports none)."""
        kp = self._kafka_python()
        manager = kp._manager
        timeout_ms = int(min(self._timeout_s, BARRIER_TIMEOUT_S) * 1000)

        async def ask() -> dict[int, int | None]:
            futures = {}
            out: dict[int, int | None] = {}
            for b in brokers:
                request = ApiVersionsRequest(client_software_name=manager.config["client_software_name"],
                                             client_software_version=manager.config["client_software_version"],
                                             min_version=3)
                try:
                    futures[b] = manager.send(request, node_id=b, request_timeout_ms=timeout_ms)
                except kp_errors.KafkaError as e:  # a broker back a moment ago, not in this client's metadata yet
                    log.debug("ApiVersions to broker %s not sent: %s: %s", b, type(e).__name__, e)
                    out[b] = None
            for b, future in futures.items():
                try:
                    epoch = (await manager.wait_for(future, timeout_ms)).finalized_features_epoch
                    out[b] = int(epoch) if epoch is not None and epoch >= 0 else None
                except kp_errors.KafkaError as e:
                    log.debug("ApiVersions to broker %s failed: %s: %s", b, type(e).__name__, e)
                    out[b] = None
            return out

        result: dict[int, int | None] = manager.run(ask)
        return result

    def _metadata_high_watermark(self) -> int | None:
        """The metadata log's high watermark (KRaft's DescribeQuorum), or ``None`` (a warning, once)
        when the cluster does not answer it (no DESCRIBE on the cluster)."""
        try:
            quorum = self._kafka_python().describe_metadata_quorum()
            part = quorum["topics"][0]["partitions"][0]
            if part.get("error"):
                raise kp_errors.KafkaError(part["error"])
            return int(part["high_watermark"])
        except (kp_errors.KafkaError, LookupError, TypeError, ValueError) as e:
            if not self._quorum_warned:
                log.warning("DescribeQuorum failed (%s: %s): a snapshot waits only until every broker has caught "
                            "up with the most advanced one, not with the controller", type(e).__name__, e)
                self._quorum_warned = True
            return None

    # -- capabilities -----------------------------------------------------------------------

    def capabilities(self) -> ClusterCapabilities:
        """What the cluster supports (read once per client: ApiVersions and the finalized features). A cluster older
        than the provider's floor (Kafka 3.0) is refused here, naming its line
        (:func:`~airflow_kafka_reassign.core.guards.kafka_line.check_kafka_line`)."""
        if self._capabilities is None:

            with self._authorized(Refused.on_cluster("DESCRIBE", "ApiVersions")):
                features = self._with_fresh_controller(lambda kp: kp.describe_features())
                data = self._kafka_python()._manager.broker_version_data
                api = dict(data.api_versions)
            caps = capabilities_from(api, features, getattr(data, "broker_version", None))
            log.info("cluster at %s: %s", self._bootstrap, caps)
            check_kafka_line(caps, where=f"the cluster at {self._bootstrap}")
            self._capabilities = caps
        return self._capabilities

    def _require(self, supported: bool, what: str, needs: str) -> None:
        if not supported:
            raise UnsupportedBrokerError(
                f"the cluster at {self._bootstrap} does not support {what} (it needs {needs}); nothing was sent")

    # -- the quorum and the registrations ---------------------------------------------------

    def describe_quorum(self) -> QuorumInfo:
        """The KRaft metadata quorum (DescribeQuorum of ``__cluster_metadata``)."""

        self._require(self.capabilities().describe_quorum, "DescribeQuorum", "a KRaft cluster")
        with self._authorized(Refused.on_cluster("DESCRIBE", "DescribeQuorum")):
            raw = self._with_fresh_controller(lambda kp: kp.describe_metadata_quorum())
        part = raw["topics"][0]["partitions"][0]
        if part.get("error"):
            raise ClusterOperationError(
                f"DescribeQuorum failed for the metadata quorum at bootstrap.servers={self._bootstrap}: "
                f"{part['error']}", code=str(part["error"]), resource="the metadata quorum")

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



class _MetadataBarrier:
    """Whether every live broker has applied the cluster's metadata as it was when the snapshot
    began, so that a topic created (or grown, or deleted) before the snapshot is seen as such by
    whichever broker answers: no broker's view is older than the snapshot.

    The target is the last committed offset of the metadata log then (KRaft's DescribeQuorum:
    its high watermark, less one), or, when the cluster does not answer DescribeQuorum (no
    DESCRIBE on the cluster), the most advanced broker's applied offset then. Each broker's applied
    offset is what it reports in ApiVersions (``FinalizedFeaturesEpoch``, which KRaft brokers set
    to the offset of the metadata image they serve). A broker that does not answer within
    :data:`BARRIER_TIMEOUT_S` is not waited for (a warning: it answers no other request either)."""

    def __init__(self, admin: ClusterMixin, brokers: Collection[int]) -> None:
        self._admin = admin
        self._brokers = sorted(brokers)
        self._target: int | None = None
        self._done = False

    def lagging(self) -> str:
        """``""`` once every live broker has caught up (or when it cannot be told), else what lags."""
        if self._done or not self._brokers:
            return ""
        committed = self._admin._metadata_high_watermark() if self._target is None else None  # before the brokers'
        offsets = self._admin._applied_metadata_offsets(self._brokers)
        silent = sorted({b for b, o in offsets.items() if o is None} - self._admin._barrier_warned)
        if silent:  # warned once per broker and client: a broker that is down would repeat it on every poll
            log.warning("broker(s) %s did not answer ApiVersions within %g s (or report no metadata offset): "
                        "snapshots do not wait for them to catch up with the cluster's metadata",
                        silent, BARRIER_TIMEOUT_S)
            self._admin._barrier_warned.update(silent)
        if self._target is None:
            answered = [o for o in offsets.values() if o is not None]
            self._target = committed - 1 if committed is not None else max(answered, default=None)
            if self._target is None or self._target < 0:  # no KRaft offsets at all: nothing to wait for
                self._done = True
                return ""
        behind = metadata_lag(offsets, self._target)
        self._done = not behind
        return behind


#: How long the snapshot waits for one broker's ApiVersions answer (its applied metadata offset).
BARRIER_TIMEOUT_S = 10.0


def metadata_lag(offsets: Mapping[int, int | None], target: int) -> str:
    """What lags behind offset ``target`` of the metadata log, from each broker's applied offset
    (``None``: it did not answer, and is not waited for): ``""`` when every broker has applied it."""
    behind = {b: o for b, o in sorted(offsets.items()) if o is not None and o < target}
    if not behind:
        return ""
    where = ", ".join(f"{b} at {o}" for b, o in behind.items())
    return (f"broker(s) {', '.join(map(str, behind))} had not yet applied the cluster's metadata up to offset "
            f"{target}, where it was when the snapshot began ({where})")
