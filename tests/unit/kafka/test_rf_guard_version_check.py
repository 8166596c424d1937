"""KIP-860's client compatibility rule: a v0-only broker gets a clear refusal, nothing is sent."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.exceptions import UnsupportedBrokerError
from airflow_kafka_reassign.kafka.admin import (
    ALTER_PARTITION_REASSIGNMENTS_KEY,
    KafkaClusterAdmin,
    check_rf_guard_support,
)


@pytest.mark.parametrize("max_version", [None, 0])
def test_old_brokers_are_refused_with_the_option_named(max_version):
    with pytest.raises(UnsupportedBrokerError) as e:
        check_rf_guard_support(max_version, bootstrap="b1:9092")
    msg = str(e.value)
    assert "allow_replication_factor_change" in msg and "4.1" in msg and "rf_guard" in msg
    assert "b1:9092" in msg and "Nothing was sent" in msg


def test_v1_brokers_pass():
    check_rf_guard_support(1, bootstrap="b1:9092")


class V0Admin(KafkaClusterAdmin):
    """The adapter as it sees a broker that only supports AlterPartitionReassignments v0."""

    sent: list = []

    def broker_api_version(self, api_key):
        assert api_key == ALTER_PARTITION_REASSIGNMENTS_KEY
        return 0

    def _send_alter(self, targets, **kwargs):
        self.sent.append((dict(targets), kwargs))
        return []

    def _client_side_rf_check(self, targets):
        return []


def test_adapter_refuses_before_sending_to_a_v0_broker():
    admin = V0Admin({"bootstrap.servers": "old-broker:9092"})
    with pytest.raises(UnsupportedBrokerError, match="old-broker:9092"):
        admin.alter_reassignments({TopicPartition("t", 0): [1, 2]})
    assert admin.sent == []


def test_client_side_guard_is_an_explicit_choice_for_v0_brokers():
    V0Admin.sent = []
    admin = V0Admin({"bootstrap.servers": "old-broker:9092"})
    admin.alter_reassignments({TopicPartition("t", 0): [1, 2]}, rf_guard="client")
    (targets, kwargs), = admin.sent
    assert kwargs == {}  # v0 carries no flag: the client-side check ran instead


def test_an_allowed_rf_change_needs_no_v1():
    V0Admin.sent = []
    admin = V0Admin({"bootstrap.servers": "old-broker:9092"})
    admin.alter_reassignments({TopicPartition("t", 0): [1, 2, 3]}, allow_replication_factor_change=True)
    assert len(admin.sent) == 1


def test_kafka_python_config_records_never_reach_a_log(caplog):
    """kafka-python logs its whole configuration at DEBUG when an admin client starts: with its loggers at
    DEBUG (the adapter sets "kafka" to WARNING, where that record is never made), the password is in no record."""
    import logging

    from kafka.errors import KafkaConnectionError, KafkaTimeoutError

    from airflow_kafka_reassign.kafka.admin import SafeKafkaAdminClient  # kafka-python's, minus the thread leak

    caplog.set_level(logging.DEBUG, logger="kafka")
    with pytest.raises((KafkaConnectionError, KafkaTimeoutError), match="127.0.0.1:1"):  # started, then no bootstrap
        SafeKafkaAdminClient(bootstrap_servers="127.0.0.1:1", bootstrap_timeout_ms=200,
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="u", sasl_plain_password="hunter2-secret")
    # the check looked at something: kafka-python's own DEBUG records of that start were captured
    assert any(r.name.startswith("kafka.") and r.levelno == logging.DEBUG for r in caplog.records), caplog.text
    assert "hunter2-secret" not in caplog.text
