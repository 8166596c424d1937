"""The provider's errors. No Airflow import: operators map these to Airflow's exceptions.

Every message says what was refused, why, and the parameter that would allow it.
"""

from __future__ import annotations


class KafkaReassignError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigurationError(KafkaReassignError, ValueError):
    """A connection, parameter or input file is wrong; retrying cannot fix it."""


class ClusterUnreachableError(KafkaReassignError):
    """The cluster did not answer within the configured timeout."""


class GuardRefusedError(KafkaReassignError):
    """A safety guard refused an operation; retrying cannot fix it (fail closed)."""


class UnsupportedBrokerError(GuardRefusedError):
    """The brokers lack a feature a guard relies on (for example KIP-860 needs Kafka 4.1+)."""
