"""Configs and throttles: DescribeConfigs and IncrementalAlterConfigs of brokers and topics, for the
replication throttles (the rates on brokers, the throttled-replica lists on topics) and the cordons
(``cordoned.log.dirs``, KIP-1066), through confluent-kafka.

librdkafka accepts a single broker resource per IncrementalAlterConfigs (``_CONFLICT`` otherwise): broker
configs go out as one request per broker, all sent before the first answer is awaited.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from airflow_kafka_reassign.core.execution.throttle import BROKER_THROTTLE_KEYS, TOPIC_THROTTLE_KEYS
from airflow_kafka_reassign.core.maintenance.cordon import CORDONED_LOG_DIRS
from airflow_kafka_reassign.core.vocabulary.ports import CORDON_METADATA_LEVEL, ThrottleBackup
from airflow_kafka_reassign.kafka.acl import Refused
from airflow_kafka_reassign.kafka.admin.cluster import ClusterMixin


class ConfigsMixin(ClusterMixin):
    """The port's config calls: throttles and cordons."""

    def describe_throttles(self, brokers: Collection[int], topics: Collection[str], *,
                           broker_keys: Collection[str] | None = None) -> ThrottleBackup:
        """The per-broker and per-topic DYNAMIC values of the throttle configs (``None``: unset);
        ``broker_keys``: the broker configs to read (default :data:`BROKER_THROTTLE_KEYS`).

        Static values from a broker's properties file and cluster-wide dynamic defaults are
        not ours to change and are not reported. Topics that no longer exist raise
        :class:`~airflow_kafka_reassign.exceptions.TopicNotFoundError` naming them all.
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
            for b, entries in self._wait_each(sent, kind="broker").items()
        }
        topic_vals: dict[str, dict[str, str | None]] = {}
        names = sorted(set(topics))
        if names:
            resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in names]
            asked = {res.name: (fut, Refused.on_topic("DESCRIBE_CONFIGS", res.name, "DescribeConfigs"))
                     for res, fut in ck.describe_configs(resources, request_timeout=self._timeout_s).items()}
            for name, entries in self._wait_each(asked, kind="topic").items():  # a deleted topic: TopicNotFoundError
                topic_vals[name] = {
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
        librdkafka accepts a single broker resource per IncrementalAlterConfigs. Topics that no longer exist
        raise :class:`~airflow_kafka_reassign.exceptions.TopicNotFoundError` naming them all, after the
        brokers' and the other topics' configs were set."""
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
        self._wait_each(sent, kind="broker")

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
        if resources:  # every topic's answer is awaited: the others are set when some were deleted meanwhile
            sent = {res.name: (fut, Refused.on_topic("ALTER_CONFIGS", res.name,
                                                     "IncrementalAlterConfigs of its throttled replicas"))
                    for res, fut in ck.incremental_alter_configs(resources, request_timeout=self._timeout_s).items()}
            self._wait_each(sent, kind="topic")


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



def _config_entries(values: Mapping[str, str | None]) -> list[ConfigEntry]:
    """IncrementalAlterConfigs entries: SET a value, DELETE a ``None``."""
    return [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) if v is not None
        else ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
        for k, v in sorted(values.items())
    ]
