"""Readiness checks of a Kafka cluster, with confluent-kafka's AdminClient.

Used by :mod:`airflow_kafka_reassign.sandbox` to decide when a freshly started cluster (or a
restarted broker) is usable, and by tests to look at a cluster (brokers and racks, topics).
Every function takes a librdkafka configuration dict (``{"bootstrap.servers": ...}`` plus any
security settings) and a bounded timeout.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

log = logging.getLogger(__name__)

READY_TOPIC = "_sandbox_ready"
_POLL_INTERVAL_S = 0.5


class ReadinessError(RuntimeError):
    """The cluster did not become ready in time; ``missing`` lists unregistered broker ids."""

    def __init__(self, message: str, missing: Iterable[int] = ()) -> None:
        super().__init__(message)
        self.missing: set[int] = set(missing)


class AuthenticationFailed(RuntimeError):
    """The cluster refused the client's SASL credentials."""


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker as DescribeCluster reports it."""

    id: int
    host: str
    port: int
    rack: str | None


class _DebugLogger(logging.Logger):
    """librdkafka logs every refused connection while brokers start: keep that at DEBUG."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        super().log(logging.DEBUG, msg, *args, **kwargs)


_LIBRDKAFKA_LOG = _DebugLogger(f"{__name__}.librdkafka")
_LIBRDKAFKA_LOG.parent = log


def _admin(config: Mapping[str, str | int], errors: list[KafkaError] | None = None) -> AdminClient:
    conf: dict[str, Any] = {"socket.connection.setup.timeout.ms": 5000, **config}
    if errors is not None:
        conf["error_cb"] = errors.append
    return AdminClient(cast(Any, conf), logger=_LIBRDKAFKA_LOG)


def describe_brokers(config: Mapping[str, str | int], timeout: float = 10.0) -> list[BrokerInfo]:
    """The live (unfenced) brokers with their racks, from DescribeCluster, sorted by id.

    Call it on a settled cluster: librdkafka 2.16.0 was seen aborting the whole process
    (``rd_kafka_admin_response_parse: Assertion `rko_result' failed``) on a DescribeCluster
    answer from a cluster still starting up; :func:`wait_for_brokers` uses Metadata instead.
    Raises ``KafkaException`` when the cluster cannot be reached within ``timeout``.
    """
    admin = _admin(config)
    result = admin.describe_cluster(request_timeout=timeout).result(timeout=timeout + 5)
    admin.poll(0)
    brokers = [BrokerInfo(n.id, n.host, n.port, n.rack or None) for n in result.nodes]
    return sorted(brokers, key=lambda b: b.id)


def live_broker_ids(config: Mapping[str, str | int], timeout: float = 10.0) -> set[int]:
    """Ids of the live (registered, unfenced) brokers, from a Metadata request."""
    admin = _admin(config)
    metadata = admin.list_topics(timeout=timeout)
    admin.poll(0)
    return set(metadata.brokers)


def wait_for_brokers(
    config: Mapping[str, str | int],
    expected_ids: Iterable[int],
    timeout: float,
    check: Callable[[], None] | None = None,
) -> list[int]:
    """Wait until every id in ``expected_ids`` is a live broker; return the live ids.

    Uses Metadata requests (safe while brokers start, unlike DescribeCluster: see
    :func:`describe_brokers`). ``check`` is called between attempts and may raise to abort
    (e.g. a broker process died). Raises :class:`ReadinessError` (with ``missing``) when
    ``timeout`` seconds pass.
    """
    expected = set(expected_ids)
    deadline = time.monotonic() + timeout
    admin = _admin(config)
    missing = set(expected)
    last_error = "no answer yet"
    while True:
        if check is not None:
            check()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ReadinessError(
                f"brokers {sorted(missing)} not registered after {timeout:.0f} s (last answer: {last_error})",
                missing,
            )
        try:
            live = set(admin.list_topics(timeout=max(1.0, min(5.0, remaining))).brokers)
            missing = expected - live
            if not missing:
                return sorted(live)
            last_error = f"live brokers {sorted(live)}"
        except KafkaException as exc:
            last_error = str(exc.args[0] if exc.args else exc)
        admin.poll(0)
        time.sleep(min(_POLL_INTERVAL_S, max(0.0, deadline - time.monotonic())))


def _future_error(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def create_and_delete_topic(
    config: Mapping[str, str | int],
    replication_factor: int,
    timeout: float,
    topic: str = READY_TOPIC,
    partitions: int = 1,
    check: Callable[[], None] | None = None,
) -> None:
    """Create ``topic`` with ``replication_factor`` replicas, then delete it, retrying until
    both succeed or ``timeout`` passes (:class:`ReadinessError`)."""
    deadline = time.monotonic() + timeout
    admin = _admin(config)
    created = False
    last_error = "no answer yet"
    while True:
        if check is not None:
            check()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ReadinessError(
                f"could not create and delete topic {topic!r} (RF {replication_factor}) within "
                f"{timeout:.0f} s (last error: {last_error})"
            )
        request_timeout = max(1.0, min(10.0, remaining))
        try:
            if not created:
                new = NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)
                future = admin.create_topics(
                    [new], operation_timeout=request_timeout, request_timeout=request_timeout
                )[topic]
                try:
                    future.result(timeout=request_timeout + 5)
                except KafkaException as exc:
                    err = _future_error(exc)
                    if err is None or err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
                created = True
            future = admin.delete_topics(
                [topic], operation_timeout=request_timeout, request_timeout=request_timeout
            )[topic]
            try:
                future.result(timeout=request_timeout + 5)
            except KafkaException as exc:
                err = _future_error(exc)
                if err is None or err.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
            return
        except KafkaException as exc:
            err = _future_error(exc)
            last_error = err.str() if err is not None else str(exc)
        admin.poll(0)
        time.sleep(min(_POLL_INTERVAL_S, max(0.0, deadline - time.monotonic())))


def wait_until_ready(
    config: Mapping[str, str | int],
    expected_ids: Iterable[int],
    replication_factor: int,
    timeout: float,
    check: Callable[[], None] | None = None,
) -> list[int]:
    """Wait until every expected broker is live and a topic can be created and deleted.

    Returns the live broker ids. Raises :class:`ReadinessError` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    brokers = wait_for_brokers(config, expected_ids, timeout, check)
    create_and_delete_topic(config, replication_factor, max(1.0, deadline - time.monotonic()), check=check)
    return brokers


def list_topic_names(config: Mapping[str, str | int], timeout: float = 10.0) -> list[str]:
    """Names of the cluster's topics (internal ones included), sorted.

    Raises :class:`AuthenticationFailed` as soon as the cluster refuses the SASL credentials
    and ``KafkaException`` when it cannot be reached within ``timeout``.
    """
    errors: list[KafkaError] = []
    admin = _admin(config, errors)
    deadline = time.monotonic() + timeout
    while True:
        admin.poll(0)
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        if auth:
            raise AuthenticationFailed(auth[0].str())
        remaining = deadline - time.monotonic()
        try:
            metadata = admin.list_topics(timeout=max(0.5, min(1.0, remaining)))
            return sorted(metadata.topics)
        except KafkaException as exc:
            err = _future_error(exc)
            if err is not None and err.code() == KafkaError._AUTHENTICATION:
                raise AuthenticationFailed(err.str()) from exc
            if remaining <= 1.0:
                raise


def upsert_scram_user(
    config: Mapping[str, str | int], username: str, password: str, timeout: float = 30.0
) -> None:
    """Create (or update) a SCRAM-SHA-512 user through AlterUserScramCredentials.

    Used instead of ``kafka-storage format --add-scram`` so the password never appears on a
    process command line. Waits until the credential is visible (DescribeUserScramCredentials).
    """
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = _admin(config)
    upsert = UserScramCredentialUpsertion(
        username, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    futures = admin.alter_user_scram_credentials([upsert], request_timeout=timeout)
    for fut in futures.values():
        fut.result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            described = admin.describe_user_scram_credentials([username], request_timeout=timeout)
            if isinstance(described, dict):
                described = {u: f.result(timeout) for u, f in described.items()}
            else:
                described = described.result(timeout)
            if described.get(username) is not None:
                return
        except Exception:  # not yet propagated
            pass
        time.sleep(0.2)
    raise ReadinessError(f"SCRAM user {username} was not visible within {timeout:g} s")


def allow_describe_only(config: Mapping[str, str | int], username: str, timeout: float = 30.0) -> None:
    """ACLs that let ``User:<username>`` describe the cluster (and its broker configs), every topic and
    their configs, and nothing more (no Alter, no AlterConfigs). Waits until the broker that answers
    DescribeAcls lists them."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    principal = f"User:{username}"
    bindings = [
        AclBinding(resource, name, ResourcePatternType.LITERAL, principal, "*", operation, AclPermissionType.ALLOW)
        for resource, name in ((ResourceType.BROKER, "kafka-cluster"), (ResourceType.TOPIC, "*"))
        for operation in (AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)
    ]
    admin = _admin(config)
    for fut in admin.create_acls(bindings, request_timeout=timeout).values():
        fut.result(timeout)
    wanted = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,
                              AclOperation.ANY, AclPermissionType.ANY)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(KafkaException):
            if len(admin.describe_acls(wanted, request_timeout=timeout).result(timeout)) >= len(bindings):
                return
        time.sleep(0.2)
    raise ReadinessError(f"the ACLs of {principal} were not visible within {timeout:g} s")
