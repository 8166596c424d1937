"""Airflow connection -> cluster admin: :class:`KafkaReassignHook`.

The hook reuses the ``kafka`` connection type of apache-airflow-providers-apache-kafka: the
connection's extra is a librdkafka config dict (``bootstrap.servers`` required). The hook
validates it (:func:`~airflow_kafka_reassign.kafka.config.validate_client_config`) and builds
a :class:`~airflow_kafka_reassign.kafka.admin.KafkaClusterAdmin`, which talks to the cluster
through confluent-kafka and kafka-python configured from that one dict.

Example::

    hook = KafkaReassignHook(kafka_config_id="kafka_prod", timeout_s=20)
    with hook.get_admin() as admin:
        snapshot = admin.snapshot(topics=["orders"])

Secrets never reach the logs: configs are logged through
:func:`~airflow_kafka_reassign.kafka.config.redact` and secret values are registered with
Airflow's secrets masker.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseHook

from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.kafka.config import is_secret_key, redact, validate_client_config

if TYPE_CHECKING:
    from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

_EXTRA_EXAMPLE = '{"bootstrap.servers": "broker1:9092,broker2:9092"}'


class KafkaReassignHook(BaseHook):
    """Builds a cluster admin for partition reassignments from a ``kafka`` connection.

    :param kafka_config_id: the ``kafka`` connection whose extra holds the librdkafka config
        dict (the same connections apache-airflow-providers-apache-kafka uses).
    :param timeout_s: bound on every request to the cluster, in seconds; an unreachable
        cluster fails within about this time.

    Example::

        hook = KafkaReassignHook(kafka_config_id="kafka_default")
        ok, message = hook.test_connection()   # (True, "Connected to Kafka cluster ...")
    """

    conn_name_attr = "kafka_config_id"
    default_conn_name = "kafka_default"
    conn_type = "kafka"
    hook_name = "Apache Kafka (partition reassignment)"

    def __init__(
        self, *, kafka_config_id: str = default_conn_name, timeout_s: float = 30.0
    ) -> None:
        super().__init__()
        self.kafka_config_id = kafka_config_id
        self.timeout_s = timeout_s

    def get_client_config(self) -> dict[str, str]:
        """The validated librdkafka config dict from the connection's extra.

        Raises :class:`ConfigurationError` naming the connection when the extra is not a JSON
        object or lacks ``bootstrap.servers`` (and for the other problems
        :func:`validate_client_config` finds); Airflow's ``AirflowNotFoundException`` when
        the connection does not exist.
        """
        conn_id = self.kafka_config_id
        conn = self.get_connection(conn_id)
        extra: Any = conn.extra_dejson
        if not extra and (conn.extra or "").strip():
            # extra_dejson gives {} for an extra it cannot parse (and logs why): say where it breaks
            try:
                json.loads(conn.extra)
            except json.JSONDecodeError as e:
                raise ConfigurationError(
                    f"Kafka connection {conn_id!r}: its extra is not valid JSON ({e.msg} at "
                    f"line {e.lineno} column {e.colno}); set the extra to a JSON object with "
                    f"the librdkafka config, for example {_EXTRA_EXAMPLE}"
                ) from None
        if not isinstance(extra, dict):
            raise ConfigurationError(
                f"Kafka connection {conn_id!r}: its extra is a JSON {type(extra).__name__}, "
                f"not an object; set it to the librdkafka config dict, for example "
                f"{_EXTRA_EXAMPLE}"
            )
        self._mask_secrets(extra)
        return validate_client_config(extra, conn_id=conn_id)

    @staticmethod
    def _mask_secrets(extra: dict[str, Any]) -> None:
        """Register secret values with Airflow's masker, so no log line can show them."""
        try:
            from airflow.sdk.log import mask_secret
        except ImportError:  # pragma: no cover - the task SDK always has it
            return
        for key, value in extra.items():
            if isinstance(key, str) and is_secret_key(key) and value not in (None, ""):
                mask_secret(str(value), key)

    def get_admin(self) -> KafkaClusterAdmin:
        """A :class:`KafkaClusterAdmin` for the connection's cluster; close it when done.

        It connects lazily, on its first request. Use it as a context manager::

            with KafkaReassignHook(kafka_config_id="kafka_prod").get_admin() as admin:
                cluster_id, brokers = admin.describe_cluster_brokers()
        """
        from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

        config = self.get_client_config()
        self.log.info(
            "Kafka connection %r: bootstrap.servers=%s security.protocol=%s timeout=%ss",
            self.kafka_config_id,
            config["bootstrap.servers"],
            config.get("security.protocol", "PLAINTEXT"),
            self.timeout_s,
        )
        self.log.debug("Kafka client config (redacted): %s", redact(config))
        return KafkaClusterAdmin(config, timeout_s=self.timeout_s)

    def get_conn(self) -> KafkaClusterAdmin:
        """Airflow's conventional name for :meth:`get_admin` (a new admin on every call)."""
        return self.get_admin()

    def test_connection(self) -> tuple[bool, str]:
        """Connect and describe the cluster: ``(True, "Connected ...")`` or ``(False, reason)``.

        Never raises and never puts a secret in the message (it is scrubbed of every secret
        value of the connection's config).
        """
        secrets: list[str] = []
        try:
            config = self.get_client_config()
            secrets = [v for k, v in config.items() if is_secret_key(k) and v]
            with self.get_admin() as admin:
                described = admin.describe_cluster_brokers()
            if isinstance(described, tuple) and len(described) == 2:
                cluster_id, brokers = described
            else:  # a plain list of brokers
                cluster_id, brokers = None, described
            brokers = list(brokers)
            ids = ", ".join(str(b.id) for b in brokers)
            return True, (
                f"Connected to Kafka cluster {cluster_id or '(id unknown)'} at "
                f"{config['bootstrap.servers']}: {len(brokers)} broker(s) [{ids}]"
            )
        except Exception as e:  # noqa: BLE001 - a connection test reports, never raises
            message = f"{type(e).__name__}: {e}"
            for secret in sorted(secrets, key=len, reverse=True):
                message = message.replace(secret, "***")
            return False, message
