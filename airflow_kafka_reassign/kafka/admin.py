"""The Kafka adapter: :class:`KafkaClusterAdmin` implements the core's ``ClusterAdmin`` port.

confluent-kafka (librdkafka) is the main client: cluster and topic description, configs,
CreatePartitions, leader election. It has no partition-reassignment calls, so those go
through kafka-python's ``KafkaAdminClient`` (AlterPartitionReassignments,
ListPartitionReassignments, DescribeLogDirs), configured from the same librdkafka dict.

KIP-860 (the replication-factor guard): kafka-python's public
``alter_partition_reassignments`` has no ``allow_replication_factor_change`` argument, and it
silently downgrades to request v0, which DROPS the flag (seen on brokers older than 4.1: the RF
changed from 2 to 3). So this module builds the v1 request itself with ``min_version=1`` and
checks the broker's ApiVersions for key 45 first; a broker that only knows v0 gets a clear
refusal before anything is sent, unless the caller explicitly chose ``rf_guard="client"``.
That uses kafka-python's request classes and its controller routing, which are not part of
its documented API; ``tests/integration/test_admin_adapter.py`` pins the behaviour.

Example::

    with KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9092"}) as admin:
        snap = admin.snapshot()
        result = admin.alter_reassignments({TopicPartition("orders", 0): [2, 3, 4]})
        assert result.request_version == 1
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any, TypeVar

from confluent_kafka import ElectionType, KafkaError, KafkaException
from confluent_kafka import TopicCollection as CKTopicCollection
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin import NewPartitions as CKNewPartitions
from kafka import TopicPartition as KPTopicPartition
from kafka import errors as kp_errors
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterPartitionReassignmentsRequest
from kafka.protocol.metadata import ApiVersionsRequest
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_incrementing

from airflow_kafka_reassign.core.execution.throttle import BROKER_THROTTLE_KEYS, TOPIC_THROTTLE_KEYS
from airflow_kafka_reassign.core.guards.completeness import DEFAULT_SETTLE_S, Gaps, TopicMetadata, find_gaps, settle
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
    DiskSpace,
    InFlightReassignment,
    LogDirs,
    NewPartitions,
    PartitionResult,
    RfGuard,
    ThrottleBackup,
    TopicResult,
)
from airflow_kafka_reassign.exceptions import (
    ClusterAccessError,
    ClusterUnreachableError,
    ConfigurationError,
    IncompleteSnapshotError,
    UnsupportedBrokerError,
)
from airflow_kafka_reassign.kafka.acl import Refused
from airflow_kafka_reassign.kafka.config import is_secret_key, to_confluent, to_kafka_python, validate_client_config
from airflow_kafka_reassign.kafka.maintenance import MaintenanceMixin, log_dirs_of

#: Named topics missing from the metadata are looked for again for this many times this long
#: (3 s; within the snapshot's time budget) before :meth:`KafkaClusterAdmin.snapshot` refuses them
#: (a topic just created may not have reached the broker that answers yet).
NAMED_TOPIC_RETRIES = 3
NAMED_TOPIC_RETRY_S = 1.0

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_K = TypeVar("_K")
_STALE_NODE_ERRORS = (kp_errors.UnknownBrokerIdError, kp_errors.NodeNotReadyError, kp_errors.KafkaConnectionError)
#: Tries of a call routed to kafka-python's "controller" with a fresh client each (about 5 s in all).
FRESH_CONTROLLER_ATTEMPTS = 5


class _NoClientConfigRecords(logging.Filter):
    """kafka-python logs its whole configuration, SASL password included, at DEBUG when an
    admin client starts: that record is dropped so no secret reaches a log, at any level."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Starting KafkaAdminClient with configuration")


logging.getLogger("kafka.admin.client").addFilter(_NoClientConfigRecords())

# kafka-python logs every connection, SASL handshake, metadata refresh and disconnect at INFO: some thirty
# lines per client in every task log. Its warnings and errors still show; a user who configures the "kafka"
# logger's level explicitly keeps that level.
if logging.getLogger("kafka").level == logging.NOTSET:
    logging.getLogger("kafka").setLevel(logging.WARNING)

class _DemotedLogger(logging.Logger):
    """A Python logger for a client library's own lines that lowers their errors (and, with ``warnings``,
    warnings) to DEBUG: a refused connection is logged by librdkafka and kafka-python once per broker and
    retry, hundreds of lines for an unreachable cluster, while the adapter raises ONE error that names the
    cause (the bootstrap servers, the user and mechanism) and the fix. ``logging.getLogger(name).setLevel
    (logging.DEBUG)`` shows them."""

    def __init__(self, name: str, *, warnings: bool = False) -> None:
        super().__init__(name)
        self._floor = logging.WARNING if warnings else logging.ERROR

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        super().log(logging.DEBUG if level >= self._floor else level, msg, *args, **kwargs)


#: librdkafka's log lines (confluent-kafka's ``logger``), served when the adapter polls the client: its
#: errors (a refused connection, a failed handshake, per broker and retry) at DEBUG, the rest as they come.
LIBRDKAFKA_LOGGER = _DemotedLogger(f"{__name__}.librdkafka")
LIBRDKAFKA_LOGGER.parent = log


class _DemoteConnectionRecords(logging.Filter):
    """kafka-python logs every failed connection attempt at WARNING and ERROR (``Connection failed``,
    ``Connection lost``, ``Bootstrap connection ... failed``), per broker and retry: those records go to
    DEBUG (dropped unless the ``kafka`` logger is at DEBUG); the adapter's error says what failed."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger("kafka").isEnabledFor(logging.DEBUG)
        return True


class _OnlyOnce(logging.Filter):
    """The first record of each message passes; its repeats go to DEBUG (kafka-python warns "Exchanging
    credentials in the clear" on every SASL_PLAINTEXT connection attempt: once is enough)."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg) not in self._seen:
            self._seen.add(str(record.msg))
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger("kafka").isEnabledFor(logging.DEBUG)


for _name in ("kafka.net.connection", "kafka.net.manager", "kafka.net.transport", "kafka.conn", "kafka.client_async"):
    logging.getLogger(_name).addFilter(_DemoteConnectionRecords())
for _name in ("kafka.net.sasl.scram", "kafka.net.sasl.plain"):
    logging.getLogger(_name).addFilter(_OnlyOnce())

#: How long a look at the cluster through librdkafka may take when it is only asked whether the cluster
#: refuses this client (authentication, authorization, TLS): a refusal shows within about a second.
ACCESS_PROBE_S = 3.0

#: librdkafka's error codes that mean the cluster answered and refused this client, by cause.
_ACCESS_CODES = {
    KafkaError._AUTHENTICATION: "authentication",
    KafkaError.SASL_AUTHENTICATION_FAILED: "authentication",
    KafkaError._SSL: "tls",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "authorization",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "authorization",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "authorization",
}



#: Kafka's api key of AlterPartitionReassignments.
ALTER_PARTITION_REASSIGNMENTS_KEY = 45
#: The first AlterPartitionReassignments version that carries AllowReplicationFactorChange.
RF_GUARD_MIN_VERSION = 1

#: Topic configs a snapshot keeps (guards and throttles read them).
#: ``remote.storage.enable``: tiered topics (KIP-405) cost only their local bytes to move.
SNAPSHOT_TOPIC_CONFIGS = ("min.insync.replicas", "cleanup.policy", "remote.storage.enable", *TOPIC_THROTTLE_KEYS)


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


def _error_name(err: Any) -> str:
    if isinstance(err, KafkaError):
        return err.name()
    if isinstance(err, type) and issubclass(err, kp_errors.KafkaError):
        return getattr(err, "message", err.__name__)
    return type(err).__name__


class SafeKafkaAdminClient(KafkaAdminClient):  # type: ignore[misc]
    """kafka-python's admin client, minus a leak: its constructor starts the IO thread before
    it bootstraps and leaves it running (retrying the connection and logging every failure,
    for the life of the process) when the bootstrap fails. This one stops it and re-raises."""

    def __init__(self, **configs: Any) -> None:
        try:
            super().__init__(**configs)
        except BaseException:
            # what close() does, for the parts the constructor got to (a missing one: AttributeError)
            for part, method in (("_metrics", "close"), ("_client", "close"), ("_net", "stop")):
                with contextlib.suppress(Exception):
                    getattr(getattr(self, part), method)()
            raise


class KafkaClusterAdmin(MaintenanceMixin):
    """A ``ClusterAdmin`` over a real cluster, from one librdkafka config dict.

    The maintenance methods (cordons, the quorum, registrations, log-dir moves) are in
    :class:`~airflow_kafka_reassign.kafka.maintenance.MaintenanceMixin`.

    ``timeout_s`` bounds every request; an unreachable cluster raises
    :class:`~airflow_kafka_reassign.exceptions.ClusterUnreachableError` naming the
    bootstrap servers within about that time, never hangs.
    """

    def __init__(self, config: Mapping[str, Any], *, timeout_s: float = 30.0) -> None:
        self._config = validate_client_config(config)
        self._timeout_s = float(timeout_s)
        self._bootstrap = self._config["bootstrap.servers"]
        self._ck: AdminClient | None = None
        #: a request of this client was answered once: a later "waiting for controller" is a broker that stopped
        self._answered = False
        self._kp: KafkaAdminClient | None = None
        self._kp_lock = threading.Lock()
        self._last_alter_version: int | None = None
        self._sizes_warned: set[int] = set()
        self._sizes_skipped: set[int] = set()
        self._no_space_warned: set[int] = set()
        self._quorum_warned = False
        self._barrier_warned: set[int] = set()
        #: errors librdkafka reported through ``error_cb`` (served by ``poll``): an authentication or TLS
        #: failure shows here within a second, long before any request times out
        self._ck_errors: list[KafkaError] = []
        self._access_probed = False

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> KafkaClusterAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._kp_lock:
            kp, self._kp = self._kp, None
        if kp is not None:
            kp.close()
        self._ck = None

    @property
    def bootstrap_servers(self) -> str:
        return self._bootstrap

    def _confluent(self) -> AdminClient:
        if self._ck is None:
            conf: dict[str, Any] = {**to_confluent(self._config, timeout_s=self._timeout_s),
                                    "error_cb": self._ck_errors.append}
            self._ck = AdminClient(conf, logger=LIBRDKAFKA_LOGGER)
        return self._ck

    def _access_error(self, cause: str, detail: str, refused: Refused | None = None) -> ClusterAccessError:
        """The one error for a client the cluster refused: what failed, for whom, and the fix; no secret.
        ``refused``: the ACL an authorization failure lacked (operation, resource, request, grant)."""
        for key, value in self._config.items():  # the brokers' text should hold none; make sure
            if is_secret_key(key) and value:
                detail = detail.replace(value, "***")
        where = f"bootstrap.servers={self._bootstrap}"
        protocol = self._config.get("security.protocol", "PLAINTEXT")
        if cause == "authentication":
            user = self._config.get("sasl.username", "(none)")
            mechanism = self._config.get("sasl.mechanism") or self._config.get("sasl.mechanisms") or "(none)"
            return ClusterAccessError(
                f"authentication failed for user {user!r} with mechanism {mechanism} at {where} ({protocol}): "
                f"{detail}. Check sasl.username and sasl.password (and sasl.mechanism) in the connection's extra; "
                "retrying with the same credentials cannot succeed", cause)
        if cause == "authorization":
            name = self._config.get("sasl.username")
            user = f"user {name!r}" if name else "the client's principal"
            detail = detail.rstrip(". ")
            needs = ("the provider needs DESCRIBE and ALTER on the cluster, DESCRIBE and DESCRIBE_CONFIGS on the "
                     "topics, ALTER_CONFIGS on the cluster and the topics for throttles")
            if refused is None:
                return ClusterAccessError(
                    f"authorization failed for {user} at {where}: {detail}. Grant the principal the ACLs the "
                    f"provider needs ({needs.removeprefix('the provider needs ')}) or use a connection whose user "
                    "has them", cause)
            principal = f"User:{name}" if name else "<the client's principal>"
            return ClusterAccessError(
                f"authorization failed for {user} at {where}: {refused.operation} on {refused.resource} was "
                f"refused ({refused.request}: {detail}); this request changed nothing (a run restores the "
                f"throttles it set before it from its backup; CancelReassignmentOperator does so too). Grant it: "
                f"kafka-acls.sh --add --allow-principal {principal} {refused.grant} (or use a connection whose "
                f"user has it; {needs})", cause)
        reason = next((r for r in ("certificate verify failed", "wrong version number", "unexpected eof",
                                   "handshake failure") if r in detail.lower()), "")
        return ClusterAccessError(
            f"TLS handshake failed with {where} over {protocol}{f' ({reason})' if reason else ''}: {detail}. "
            "Check ssl.ca.location (the CA that signed the brokers' certificates), the client certificate and "
            "key, and that the listener speaks TLS", cause)

    def _refused(self) -> ClusterAccessError | None:
        """An authentication, authorization or TLS failure librdkafka reported (after serving its queue)."""
        if self._ck is not None:
            self._ck.poll(0)
        for err in self._ck_errors:
            cause = _ACCESS_CODES.get(err.code())
            if cause is not None:
                return self._access_error(cause, err.str())
        return None

    def _diagnose(self, e: BaseException) -> ClusterAccessError | ClusterUnreachableError:
        """Why kafka-python could not bootstrap. kafka-python sees a broker that refuses the SASL
        credentials as a closed connection; librdkafka names the cause: ask it with a short request."""
        if isinstance(e, kp_errors.SaslAuthenticationFailedError):
            return self._access_error("authentication", str(e))
        if isinstance(e, kp_errors.AuthorizationError):
            return self._access_error("authorization", str(e))
        return self._probe_access() or self._unreachable(e)

    def _probe_access(self) -> ClusterAccessError | None:
        """Whether librdkafka sees the cluster refuse this client, from one short DescribeCluster
        (a refusal shows within a second; an unreachable cluster costs :data:`ACCESS_PROBE_S`)."""
        budget = min(self._timeout_s, ACCESS_PROBE_S)
        try:
            self._wait(self._confluent().describe_cluster(request_timeout=budget), timeout_s=budget)
        except ClusterAccessError as refused:
            return refused
        except Exception:  # noqa: BLE001 (not a refusal: the caller's own error says what happened)
            return None
        return None

    def _kafka_python(self) -> KafkaAdminClient:
        with self._kp_lock:  # two threads must not both create one (the loser's IO thread would leak)
            if self._kp is None:
                if self._config.get("security.protocol", "PLAINTEXT") != "PLAINTEXT" and not self._access_probed:
                    # kafka-python sees refused SASL credentials only as closed connections, until its bootstrap
                    # times out: ask librdkafka first, which names the cause within a second
                    self._access_probed = True
                    refused = self._probe_access()
                    if refused is not None:
                        raise refused
                try:
                    self._kp = SafeKafkaAdminClient(**to_kafka_python(self._config, timeout_s=self._timeout_s))
                except (kp_errors.KafkaConnectionError, kp_errors.KafkaTimeoutError,  # 3.0: no bootstrap
                        kp_errors.SaslAuthenticationFailedError, kp_errors.AuthorizationError) as e:
                    raise self._diagnose(e) from None
            return self._kp

    def _with_fresh_controller(self, call: Callable[[KafkaAdminClient], _T]) -> _T:
        """``call(kafka-python client)``, tried again on a new client when the broker it routes
        to is gone. kafka-python keeps the "controller" id it learned first (in KRaft a broker
        that forwards to the quorum); when that broker stops (a rolling restart, a decommission)
        every later request fails with UnknownBrokerIdError. The calls wrapped here (list, alter
        to the same targets, cancel) are safe to repeat.

        In KRaft the metadata names a random live broker as "controller": one that was just killed
        stays listed until its session times out, so a fresh client may pick it again. Up to
        :data:`FRESH_CONTROLLER_ATTEMPTS` tries, 0, 0.5, 1, 1.5 s apart, reach another one; the
        last try's error is raised as it is."""
        tried: list[KafkaAdminClient] = []

        def attempt() -> _T:
            tried.append(client := self._kafka_python())
            return call(client)

        def drop_client(state: RetryCallState) -> None:
            e = state.outcome.exception() if state.outcome is not None else None
            log.info("broker routing of the admin client is stale (%s: %s); retrying with fresh metadata",
                     type(e).__name__, e)
            client = tried[-1]
            with self._kp_lock:
                if self._kp is client:  # not one another thread has made fresh meanwhile
                    self._kp = None
            with contextlib.suppress(Exception):  # closing a client whose broker is gone
                client.close()

        retrying = Retrying(
            retry=retry_if_exception_type(_STALE_NODE_ERRORS),
            stop=stop_after_attempt(FRESH_CONTROLLER_ATTEMPTS),
            wait=wait_incrementing(start=0, increment=0.5),
            before_sleep=drop_client,
            reraise=True,
        )
        return retrying(attempt)

    @contextlib.contextmanager
    def _authorized(self, refused: Refused) -> Iterator[None]:
        """kafka-python's authorization errors (the broker's answer to a request the principal has no ACL
        for) as :class:`ClusterAccessError` naming the ACL ``refused``: no retry can fix them."""
        try:
            yield
        except kp_errors.AuthorizationError as e:
            raise self._access_error("authorization", getattr(e, "message", None) or type(e).__name__,
                                     refused) from None

    def _unreachable(self, e: BaseException) -> ClusterUnreachableError:
        last = next((err.str() for err in reversed(self._ck_errors)), None)
        seen = f"; last error: {last}" if last else ""
        return ClusterUnreachableError(
            f"Kafka cluster at bootstrap.servers={self._bootstrap} did not answer within "
            f"{self._timeout_s:g} s ({type(e).__name__}: {e}{seen}); check the address (host:port of the "
            "brokers' listener), the listener's security.protocol, and that the brokers are up"
        )

    def _wait(self, future: Future[Any], *, timeout_s: float | None = None, needs: Refused | None = None) -> Any:
        """A confluent-kafka future's result. While waiting, librdkafka's queue is served (its log lines
        and errors): an authentication, authorization or TLS failure raises
        :class:`~airflow_kafka_reassign.exceptions.ClusterAccessError` at once, naming the cause; no answer
        within the timeout raises :class:`ClusterUnreachableError` naming the bootstrap servers. ``needs``
        names the ACL the request needs, for an authorization failure's message."""
        deadline = time.monotonic() + (self._timeout_s + 5 if timeout_s is None else timeout_s)
        try:
            while True:
                refused = self._refused()
                if refused is not None:
                    future.cancel()
                    raise refused
                try:
                    result = future.result(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
                    self._answered = True
                    return result
                except FutureTimeoutError:  # not the built-in TimeoutError on Python 3.10 (an alias since 3.11)
                    if time.monotonic() >= deadline:
                        raise
        except FutureTimeoutError as e:
            raise self._unreachable(e) from None
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if isinstance(err, KafkaError) and err.code() in _ACCESS_CODES:
                raise self._refused() or self._access_error(_ACCESS_CODES[err.code()], err.str(), needs) from None
            if isinstance(err, KafkaError) and err.code() in (
                KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
            ):
                raise self._refused() or self._unreachable(e) from None
            raise

    def _wait_each(self, futures: Mapping[_K, tuple[Future[Any], Refused]]) -> dict[_K, Any]:
        """The results of requests sent together (one per broker: librdkafka takes a single broker resource per
        config request), waited for under one deadline: N brokers cost one round trip, not N. Every future is
        waited for before the first failure is raised, so none is left in flight unseen."""
        deadline = time.monotonic() + self._timeout_s + 5
        results: dict[_K, Any] = {}
        failure: BaseException | None = None
        for key, (future, needs) in futures.items():
            try:
                results[key] = self._wait(future, timeout_s=max(0.0, deadline - time.monotonic()), needs=needs)
            except Exception as e:  # noqa: BLE001 (raised below, after the others were waited for)
                failure = failure or e
        if failure is not None:
            raise failure
        return results

    # -- describe -------------------------------------------------------------------------

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

    def supports_rf_guard(self) -> bool | None:
        """KIP-860 enforced by the brokers: AlterPartitionReassignments v1 or newer (ApiVersions)."""
        version = self.broker_api_version(ALTER_PARTITION_REASSIGNMENTS_KEY)
        return version is not None and version >= 1

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

    def snapshot(
        self, *, topics: Collection[str] | None = None, include_sizes: bool = False,
        settle_timeout_s: float | None = None,
    ) -> ClusterSnapshot:
        """:meth:`_snapshot_once`, read again once on a new client when librdkafka's "controller"
        (in KRaft a broker it picked from the metadata) stopped: a broker killed mid-run."""
        return self._on_fresh_controller(
            lambda: self._snapshot_once(topics=topics, include_sizes=include_sizes, settle_timeout_s=settle_timeout_s))

    def _on_fresh_controller(self, call: Callable[[], _T]) -> _T:
        """``call()``, made once more on a new confluent-kafka client when librdkafka's "controller" (in
        KRaft a broker it picked from the metadata, to which it sends config and topic requests) has
        stopped: a broker killed mid-run. The calls given here are idempotent."""
        try:
            return call()
        except ClusterUnreachableError as e:
            # only a cluster that answered this client before: one never reached fails once, within its timeout
            if "waiting for controller" not in str(e) or not self._answered:
                raise
            log.info("the broker the admin client routed to as controller is gone; asking again with fresh metadata")
            self._ck = None
            return call()

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
        Metadata request for every partition's replicas, ISR and leader; DescribeConfigs for the
        topics whose configs it lacks (sent first, awaited last); DescribeTopicPartitions only for
        ``__``-prefixed topics, to read Kafka's internal flag; ListPartitionReassignments; and with
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
        barrier = _MetadataBarrier(self, live)
        configs: dict[str, dict[str, str]] = {}
        internal: dict[str, bool] = {}
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
            md = ck.list_topics(timeout=self._timeout_s)
            missing = sorted(named - set(md.topics)) if named is not None else []
            if missing:
                # a topic created a moment ago may not be in this broker's metadata yet: read again
                # for a while (NAMED_TOPIC_RETRIES x NAMED_TOPIC_RETRY_S), then it does not exist
                now = time.monotonic()
                missing_since = now if missing_since is None else missing_since
                if now - missing_since >= NAMED_TOPIC_RETRIES * NAMED_TOPIC_RETRY_S:
                    raise unknown(missing)
                return None, Gaps(cluster=[f"topic(s) {', '.join(missing)} not in the metadata"])
            missing_since = None
            names = sorted(named if named is not None else md.topics)
            unread = [n for n in names if n not in configs and md.topics[n].error is None]
            config_futures = ck.describe_configs(
                [ConfigResource(ConfigResource.Type.TOPIC, n) for n in unread], request_timeout=self._timeout_s
            ) if unread else {}
            internal.update(self._internal_topics([n for n in names if n.startswith("__") and n not in internal]))
            inflight = self.list_reassignments()
            sizes = self._replica_sizes(live) if include_sizes else None
            configs.update(self._collect_configs(config_futures))
            view = {
                n: TopicMetadata(
                    {pid: (inflight[tp].replicas if (tp := TopicPartition(n, pid)) in inflight else p.replicas)
                     for pid, p in md.topics[n].partitions.items()},
                    None if md.topics[n].error is None else _error_name(md.topics[n].error),
                )
                for n in names
            }
            gaps = find_gaps(view, configs=configs, sizes=sizes, brokers=live, reassigning=inflight)
            if gaps:
                return None, gaps
            return self._build_snapshot(cluster_id, brokers, md, names, configs, internal, inflight, sizes), gaps

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
        self, cluster_id: str | None, brokers: Sequence[Broker], md: Any, names: Sequence[str],
        configs: Mapping[str, dict[str, str]], internal: Mapping[str, bool],
        inflight: Mapping[TopicPartition, InFlightReassignment], sizes: Mapping[TopicPartition, dict[int, int]] | None,
    ) -> ClusterSnapshot:
        """The snapshot of ``names`` from views :func:`find_gaps` found complete."""
        topic_states: list[TopicState] = []
        partitions: list[PartitionState] = []
        for name in names:
            parts = md.topics[name].partitions
            rfs = [len(p.replicas) for p in parts.values()]
            topic_states.append(TopicState(
                name=name,
                internal=internal.get(name, False),
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
                    replicas=r.replicas if r else tuple(p.replicas),
                    isr=tuple(p.isrs),
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

    def _internal_topics(self, names: Sequence[str]) -> dict[str, bool]:
        """Whether Kafka flags each of ``names`` internal (DescribeTopicPartitions)."""
        if not names:
            return {}
        futures = self._confluent().describe_topics(CKTopicCollection(list(names)), request_timeout=self._timeout_s)
        out = {}
        for name, fut in futures.items():
            try:
                out[name] = bool(self._wait(fut).is_internal)
            except KafkaException:
                log.warning("could not describe topic %s; treating it as internal", name)
                out[name] = True  # fail closed: guards refuse more, never less
        return out

    def _collect_configs(self, futures: Mapping[Any, Future[Any]]) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for res, fut in futures.items():
            try:
                entries = self._wait(fut, needs=Refused.on_topic("DESCRIBE_CONFIGS", res.name, "DescribeConfigs"))
            except KafkaException as e:
                if e.args and isinstance(e.args[0], KafkaError) and (
                    e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                ):
                    continue
                raise
            out[res.name] = {
                k: e.value for k, e in entries.items()
                if k in SNAPSHOT_TOPIC_CONFIGS and e.value is not None and e.value != ""
            }
        return out

    def _replica_sizes(self, live: Collection[int]) -> dict[TopicPartition, dict[int, int]]:
        """Every replica's size on the live brokers (DescribeLogDirs to each; none to a broker that is down)."""
        with self._authorized(Refused.on_cluster("DESCRIBE", "DescribeLogDirs")):
            return _sizes_from_log_dirs(self._kafka_python().describe_log_dirs(brokers=sorted(live)))

    def replica_sizes(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, dict[int, int]]:
        """Bytes on disk of each replica of ``partitions``, by broker id.

        One DescribeLogDirs request per live broker, naming exactly these partitions (so no
        data about other topics). A broker the cluster does not list as alive (DescribeCluster)
        is skipped, with one line naming it; one that fails to answer is logged and left out,
        so a caller can keep reporting while a broker is down.
        """
        return self._log_dirs(partitions)[0] if partitions else {}

    def log_dirs(self, partitions: Collection[TopicPartition] | None) -> LogDirs:
        """:meth:`replica_sizes` and each answering broker's disk space and log dirs, from the same requests
        (``partitions=None``: every partition)."""
        sizes, space, unanswered, responses = self._log_dirs(partitions, with_space=True)
        asked = None if partitions is None else {t: set(ps) for t, ps in _by_topic(partitions).items()}
        return LogDirs(sizes=sizes, space=space, unanswered=tuple(unanswered), dirs=log_dirs_of(responses, asked))

    def _log_dirs(self, partitions: Collection[TopicPartition] | None, with_space: bool = False,
                  ) -> tuple[dict[TopicPartition, dict[int, int]], dict[int, DiskSpace], list[int], list[dict[str, Any]]]:
        """One DescribeLogDirs per live broker naming ``partitions`` (``None``: all): their sizes, each broker's
        space, the live brokers that did not answer, and the answers."""
        wanted = _by_topic(partitions) if partitions is not None else None
        if wanted is not None and not wanted:  # never an empty request: kafka-python would send "every topic"
            return {}, {}, [], []
        kp = self._kafka_python()
        request = None if wanted is None else {t: sorted(set(ps)) for t, ps in sorted(wanted.items())}
        responses: list[dict[str, Any]] = []
        live = {b.id for b in self.describe_cluster_brokers()[1]}
        known = {b.node_id for b in kp._manager.cluster.brokers()}
        skipped = sorted(known - live)
        if skipped and set(skipped) != self._sizes_skipped:
            log.warning("DescribeLogDirs skips broker(s) %s: the cluster does not list them as alive; their "
                        "replica sizes are unknown until they are back", skipped)
        self._sizes_skipped = set(skipped)
        unanswered = sorted(live - known)  # alive for the controller, unknown to this client yet
        for node in sorted(known & live):
            try:
                if request is None:  # Topics null: every partition the broker holds, in one request
                    responses.extend(kp._manager.run(kp._async_describe_log_dirs, None, [node]))
                else:
                    responses.extend(kp.describe_log_dirs(topic_partitions=request, brokers=[node]))
            except (kp_errors.KafkaError, OSError) as e:
                unanswered.append(node)
                # warned once per broker and client: a broker that is down would repeat it on every poll
                (log.debug if node in self._sizes_warned else log.warning)(
                    "DescribeLogDirs to broker %s failed (%s: %s); its replica sizes are unknown",
                    node, type(e).__name__, e)
                self._sizes_warned.add(node)
        sizes = _sizes_from_log_dirs(responses)
        space = self._space_from_log_dirs(responses) if with_space else {}
        if request is None:
            return sizes, space, sorted(unanswered), responses
        asked = {t: set(ps) for t, ps in request.items()}  # sets: a million partitions are filtered in linear time
        return ({tp: s for tp, s in sizes.items() if tp.partition in asked.get(tp.topic, ())}, space,
                sorted(unanswered), responses)

    def _space_from_log_dirs(self, responses: Sequence[Mapping[str, Any]]) -> dict[int, DiskSpace]:
        """Each broker's disk space (KIP-827, DescribeLogDirs v4+): the log dirs that answer without error, log
        dirs of one volume (the same total and usable bytes) counted once. A broker that reports none (-1:
        older than Kafka 3.3) is left out, and said once per broker."""
        out: dict[int, DiskSpace] = {}
        for broker in responses:
            dirs = [(int(d.get("total_bytes", -1)), int(d.get("usable_bytes", -1)))
                    for d in broker["log_dirs"] if not d.get("error_code")]
            if dirs and all(t >= 0 and u >= 0 for t, u in dirs):
                out[broker["broker"]] = DiskSpace.of_dirs(dirs)
            elif broker["broker"] not in self._no_space_warned:
                self._no_space_warned.add(broker["broker"])
                log.warning("broker %s reports no free disk space in DescribeLogDirs (v4, Kafka 3.3+): the disk guard "
                            "cannot check the moves onto it", broker["broker"])
        return out

    # -- reassignments --------------------------------------------------------------------

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
            for p in self._wait(f).partitions:
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
                self._wait(fut, needs=Refused.on_topic("ALTER", topic, "CreatePartitions"))
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

    # -- throttles ------------------------------------------------------------------------

    def describe_throttles(self, brokers: Collection[int], topics: Collection[str], *,
                           broker_keys: Collection[str] | None = None) -> ThrottleBackup:
        """The per-broker and per-topic DYNAMIC values of the throttle configs (``None``: unset);
        ``broker_keys``: the broker configs to read (default :data:`BROKER_THROTTLE_KEYS`).

        Static values from a broker's properties file and cluster-wide dynamic defaults are
        not ours to change and are not reported.
        """
        keys = tuple(BROKER_THROTTLE_KEYS if broker_keys is None else broker_keys)
        return self._on_fresh_controller(lambda: self._describe_throttles(brokers, topics, keys))

    def _describe_throttles(self, brokers: Collection[int], topics: Collection[str],
                            broker_keys: Sequence[str] = BROKER_THROTTLE_KEYS) -> ThrottleBackup:
        ck = self._confluent()
        sent = {}
        for b in sorted(set(brokers)):
            res = ConfigResource(ConfigResource.Type.BROKER, str(b))
            sent[b] = (ck.describe_configs([res], request_timeout=self._timeout_s)[res],
                       Refused.on_cluster("DESCRIBE_CONFIGS", f"DescribeConfigs of broker {b}"))
        broker_vals: dict[int, dict[str, str | None]] = {
            b: {k: (entries[k].value if k in entries
                    and entries[k].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value else None)
                for k in broker_keys}
            for b, entries in self._wait_each(sent).items()
        }
        topic_vals: dict[str, dict[str, str | None]] = {}
        names = sorted(set(topics))
        if names:
            resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in names]
            for res, fut in ck.describe_configs(resources, request_timeout=self._timeout_s).items():
                entries = self._wait(fut, needs=Refused.on_topic("DESCRIBE_CONFIGS", res.name, "DescribeConfigs"))
                topic_vals[res.name] = {
                    k: (entries[k].value if k in entries and entries[k].source
                        == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and entries[k].value else None)
                    for k in TOPIC_THROTTLE_KEYS
                }
        return ThrottleBackup(brokers=broker_vals, topics=topic_vals)

    def set_throttles(
        self,
        broker_configs: Mapping[int, Mapping[str, str | None]],
        topic_configs: Mapping[str, Mapping[str, str | None]],
    ) -> None:
        """Set (a value) or delete (``None``) dynamic configs; one call per broker, since
        librdkafka accepts a single broker resource per IncrementalAlterConfigs."""
        self._on_fresh_controller(lambda: self._set_throttles(broker_configs, topic_configs))

    def _set_broker_configs(self, configs: Mapping[int, Mapping[str, str | None]], what: str) -> None:
        """Set or delete dynamic broker configs, one IncrementalAlterConfigs per broker (librdkafka accepts a
        single broker resource per request); ``what`` names them in an authorization failure."""
        self._on_fresh_controller(lambda: self._set_broker_configs_once(configs, what))

    def _set_broker_configs_once(self, configs: Mapping[int, Mapping[str, str | None]], what: str) -> None:
        ck = self._confluent()
        sent = {}
        for b, values in sorted(configs.items()):
            if values:
                res = ConfigResource(ConfigResource.Type.BROKER, str(b),
                                     incremental_configs=_config_entries(values))
                sent[b] = (ck.incremental_alter_configs([res], request_timeout=self._timeout_s)[res],
                           Refused.on_cluster("ALTER_CONFIGS", f"IncrementalAlterConfigs of broker {b}'s {what}"))
        self._wait_each(sent)

    def _set_throttles(
        self,
        broker_configs: Mapping[int, Mapping[str, str | None]],
        topic_configs: Mapping[str, Mapping[str, str | None]],
    ) -> None:
        ck = self._confluent()
        entries = _config_entries
        self._set_broker_configs_once(broker_configs, "throttle rates")
        resources = [
            ConfigResource(ConfigResource.Type.TOPIC, t, incremental_configs=entries(values))
            for t, values in sorted(topic_configs.items()) if values
        ]
        if resources:
            for res, fut in ck.incremental_alter_configs(resources, request_timeout=self._timeout_s).items():
                self._wait(fut, needs=Refused.on_topic("ALTER_CONFIGS", res.name,
                                                         "IncrementalAlterConfigs of its throttled replicas"))


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

    def __init__(self, admin: KafkaClusterAdmin, brokers: Collection[int]) -> None:
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


def _config_entries(values: Mapping[str, str | None]) -> list[ConfigEntry]:
    """IncrementalAlterConfigs entries: SET a value, DELETE a ``None``."""
    return [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) if v is not None
        else ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
        for k, v in sorted(values.items())
    ]


def _by_topic(partitions: Collection[TopicPartition]) -> dict[str, list[int]]:
    wanted: dict[str, list[int]] = defaultdict(list)
    for t, p in partitions:
        wanted[t].append(p)
    return wanted


def _sizes_from_log_dirs(responses: Sequence[Mapping[str, Any]]) -> dict[TopicPartition, dict[int, int]]:
    """``{partition: {broker: bytes}}`` from kafka-python's DescribeLogDirs results (future
    replicas of intra-broker moves and log dirs that report an error are skipped)."""
    sizes: dict[TopicPartition, dict[int, int]] = defaultdict(dict)
    for broker in responses:
        for log_dir in broker["log_dirs"]:
            if log_dir.get("error_code"):
                continue
            for topic in log_dir.get("topics", ()):
                for part in topic.get("partitions", ()):
                    if part.get("is_future_key"):
                        continue
                    tp = TopicPartition(topic["name"], part["partition_index"])
                    sizes[tp][broker["broker"]] = int(part["partition_size"])
    return dict(sizes)
