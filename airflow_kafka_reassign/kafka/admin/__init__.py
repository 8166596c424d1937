"""The Kafka adapter: :class:`KafkaClusterAdmin` implements the core's ``ClusterAdmin`` port.

confluent-kafka (librdkafka) is the main client: cluster and topic description, configs,
CreatePartitions, leader election. It has no partition-reassignment calls, so those go
through kafka-python's ``KafkaAdminClient`` (AlterPartitionReassignments,
ListPartitionReassignments, DescribeLogDirs), configured from the same librdkafka dict.

One module per protocol area, as Kafka's own Admin client groups its calls; each is a mixin over
:class:`~airflow_kafka_reassign.kafka.admin.client.AdminClients` (the two clients, the waits on their
answers and the translation of their errors), and :class:`KafkaClusterAdmin` is all of them:

* :mod:`.client`: the clients, timeouts, the retry on a fresh "controller", error translation;
* :mod:`.cluster`: DescribeCluster, ApiVersions and features (capabilities), DescribeQuorum,
  UnregisterBroker, the metadata barrier;
* :mod:`.reassignments`: List/AlterPartitionReassignments (KIP-860's guard), cancel, CreatePartitions,
  ElectLeaders, eligible leader replicas (KIP-966);
* :mod:`.configs`: throttles and cordons (DescribeConfigs, IncrementalAlterConfigs);
* :mod:`.log_dirs`: DescribeLogDirs (sizes, disk space, log dirs), AlterReplicaLogDirs;
* :mod:`.snapshot`: the complete snapshot, from the areas above.

Mixins rather than composition: every area shares one pair of clients, one timeout and one error
translation, and the port is one object; composition would re-declare each of the port's methods in
the facade to delegate it. A new protocol call goes in its area's module (a new area: a module and a
mixin listed here).

Example::

    with KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9092"}) as admin:
        snap = admin.snapshot()
        result = admin.alter_reassignments({TopicPartition("orders", 0): [2, 3, 4]})
        assert result.request_version == 1
"""

from __future__ import annotations

from airflow_kafka_reassign.kafka.admin.client import (
    ACCESS_PROBE_S,
    FRESH_CONTROLLER_ATTEMPTS,
    LIBRDKAFKA_LOGGER,
    AdminClients,
    SafeKafkaAdminClient,
)
from airflow_kafka_reassign.kafka.admin.cluster import (
    BARRIER_TIMEOUT_S,
    ClusterMixin,
    capabilities_from,
    metadata_lag,
)
from airflow_kafka_reassign.kafka.admin.configs import ConfigsMixin
from airflow_kafka_reassign.kafka.admin.log_dirs import LogDirsMixin, log_dirs_of
from airflow_kafka_reassign.kafka.admin.reassignments import (
    ALTER_PARTITION_REASSIGNMENTS_KEY,
    RF_GUARD_MIN_VERSION,
    ReassignmentsMixin,
    check_rf_guard_support,
)
from airflow_kafka_reassign.kafka.admin.snapshot import (
    NAMED_TOPIC_RETRIES,
    NAMED_TOPIC_RETRY_S,
    SNAPSHOT_TOPIC_CONFIGS,
    SnapshotMixin,
)


class KafkaClusterAdmin(SnapshotMixin, ReassignmentsMixin, ConfigsMixin, LogDirsMixin, ClusterMixin, AdminClients):
    """A ``ClusterAdmin`` over a real cluster, from one librdkafka config dict: every protocol area's
    calls (see the module's docstring for which module holds which).

    ``timeout_s`` bounds every request; an unreachable cluster raises
    :class:`~airflow_kafka_reassign.exceptions.ClusterUnreachableError` naming the
    bootstrap servers within about that time, never hangs.
    """


__all__ = [
    "ACCESS_PROBE_S",
    "ALTER_PARTITION_REASSIGNMENTS_KEY",
    "BARRIER_TIMEOUT_S",
    "FRESH_CONTROLLER_ATTEMPTS",
    "LIBRDKAFKA_LOGGER",
    "NAMED_TOPIC_RETRIES",
    "NAMED_TOPIC_RETRY_S",
    "RF_GUARD_MIN_VERSION",
    "SNAPSHOT_TOPIC_CONFIGS",
    "AdminClients",
    "ClusterMixin",
    "ConfigsMixin",
    "KafkaClusterAdmin",
    "LogDirsMixin",
    "ReassignmentsMixin",
    "SafeKafkaAdminClient",
    "SnapshotMixin",
    "capabilities_from",
    "check_rf_guard_support",
    "log_dirs_of",
    "metadata_lag",
]
