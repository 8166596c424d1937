"""The provider's errors. No Airflow import: operators map these to Airflow's exceptions.

Every message says what was refused, why, and the parameter that would allow it.
"""

from __future__ import annotations

from collections.abc import Iterable


class KafkaReassignError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigurationError(KafkaReassignError, ValueError):
    """A connection, parameter or input file is wrong; retrying cannot fix it."""


class ClusterUnreachableError(KafkaReassignError):
    """The cluster did not answer within the configured timeout. ``broker_lost``: the client library said the broker
    it had routed the request to is gone (its connection failed, or it never came up as the "controller"), which
    the adapter answers by routing the request to a live broker, not by giving up."""

    def __init__(self, message: str, *, broker_lost: bool = False) -> None:
        super().__init__(message)
        self.broker_lost = broker_lost


class BrokerUnreachableError(ClusterUnreachableError):
    """Brokers did not answer a request addressed to each of them (a broker's own configs: DescribeConfigs and
    IncrementalAlterConfigs of a broker resource go to that broker, not to the controller): ``brokers``, their ids.
    A broker killed is still listed alive until the cluster notices (ZooKeeper's session timeout, KRaft's
    ``broker.session.timeout.ms``), and such a request only waits for it: a caller can leave those brokers out and
    go on with the others, as it does for a broker the cluster lists as down. Routing it elsewhere cannot help."""

    def __init__(self, message: str, *, brokers: Iterable[int]) -> None:
        super().__init__(message)
        self.brokers = tuple(sorted(set(brokers)))


class ClusterAccessError(ConfigurationError):
    """The cluster answered but refused this client: its SASL credentials (``cause="authentication"``), its
    ACLs (``"authorization"``) or the TLS handshake (``"tls"``). The same connection fails again: the
    operators and the sensor fail at once, without retries. The message never contains a secret."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class ClusterOperationError(KafkaReassignError):
    """A Kafka call the adapter made failed for a resource of the cluster: the message names the call, the
    resource (a topic, a broker, a partition) and Kafka's error code. The adapter raises this (or a subclass),
    never a client library's own exception; ``code`` is Kafka's error name (``UNKNOWN_TOPIC_OR_PARTITION``),
    ``resource`` what it failed on (``"topic a"``, ``"broker 2"``), ``retriable`` whether asking again can help."""

    def __init__(self, message: str, *, code: str = "", resource: str = "", retriable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.resource = resource
        self.retriable = retriable


class TopicNotFoundError(ClusterOperationError):
    """Topics a call named no longer exist in the cluster (deleted while a run used them): ``topics`` names them.
    A run drops what it had for them (their moves, their throttled-replica lists) instead of failing."""

    def __init__(self, message: str, *, topics: tuple[str, ...] | list[str], code: str = "UNKNOWN_TOPIC_OR_PARTITION"
                 ) -> None:
        self.topics: tuple[str, ...] = tuple(sorted(set(topics)))
        super().__init__(message, code=code, resource="topic " + ", ".join(self.topics), retriable=False)


class GuardRefusedError(KafkaReassignError):
    """A safety guard refused an operation; retrying cannot fix it (fail closed)."""


class UnsupportedBrokerError(GuardRefusedError):
    """The brokers lack a feature a guard relies on (for example KIP-860 needs Kafka 4.1+)."""


class IncompleteSnapshotError(KafkaReassignError):
    """The cluster did not give a complete snapshot within the time budget (its metadata had not
    settled: topics created or changed a moment ago not yet visible everywhere). Nothing was
    written and no plan was made; retrying later can fix it.

    ``missing`` maps each topic to what was missing of it (``""``: the whole cluster, for
    example brokers whose metadata lagged behind the controller)."""

    def __init__(self, message: str, missing: dict[str, tuple[str, ...]] | None = None) -> None:
        super().__init__(message)
        self.missing: dict[str, tuple[str, ...]] = dict(missing or {})
