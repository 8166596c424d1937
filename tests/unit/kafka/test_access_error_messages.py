"""The adapter's errors that name the cause (no cluster: the sandbox tests are in tests/integration/test_access_errors.py)."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError

from airflow_kafka_reassign.exceptions import ClusterAccessError, ConfigurationError
from airflow_kafka_reassign.kafka.admin import LIBRDKAFKA_LOGGER, KafkaClusterAdmin

CONFIG = {"bootstrap.servers": "b1:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
          "sasl.username": "ops", "sasl.password": "hunter2-secret"}


def test_an_authentication_failure_names_the_user_and_mechanism_and_never_the_secret():
    admin = KafkaClusterAdmin(CONFIG)
    admin._ck_errors.append(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: hunter2-secret"))
    e = admin._refused()
    assert isinstance(e, ClusterAccessError) and isinstance(e, ConfigurationError) and e.cause == "authentication"
    assert str(e).startswith("authentication failed for user 'ops' with mechanism SCRAM-SHA-512 at "
                             "bootstrap.servers=b1:9093 (SASL_SSL)")
    assert "hunter2-secret" not in str(e) and "sasl.password" in str(e)


def test_authorization_and_tls_failures_are_told_apart():
    admin = KafkaClusterAdmin(CONFIG)
    admin._ck_errors.append(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed"))
    assert admin._refused().cause == "authorization"
    tls = KafkaClusterAdmin({**CONFIG, "security.protocol": "SSL"})
    tls._ck_errors.append(KafkaError(KafkaError._SSL, "certificate verify failed"))
    e = tls._refused()
    assert e.cause == "tls" and "ssl.ca.location" in str(e)
    plain = KafkaClusterAdmin(CONFIG)
    plain._ck_errors.append(KafkaError(KafkaError._TRANSPORT, "Connection refused"))
    assert plain._refused() is None  # unreachable, not refused


def test_the_clients_connection_errors_go_to_debug(caplog):
    with caplog.at_level(logging.INFO):
        LIBRDKAFKA_LOGGER.log(logging.ERROR, "FAIL [%s] Connect to ipv4#127.0.0.1:1 failed: Connection refused", "x")
        LIBRDKAFKA_LOGGER.log(logging.WARNING, "CONFWARN something")
        logging.getLogger("kafka.net.manager").error("Connection failed: KafkaConnectionError: 111 ECONNREFUSED")
    assert "Connection refused" not in caplog.text and "ECONNREFUSED" not in caplog.text
    assert "CONFWARN something" in caplog.text


def test_an_authorization_failure_names_the_acl_refused_and_the_grant():
    from airflow_kafka_reassign.kafka.acl import Refused

    admin = KafkaClusterAdmin(CONFIG)
    e = admin._access_error("authorization", "Cluster authorization failed.",
                            Refused.on_cluster("ALTER_CONFIGS", "IncrementalAlterConfigs of broker 1's throttle rates"))
    assert str(e).startswith("authorization failed for user 'ops' at bootstrap.servers=b1:9093: ALTER_CONFIGS on "
                             "the cluster was refused (IncrementalAlterConfigs of broker 1's throttle rates: Cluster "
                             "authorization failed); this request changed nothing (a run restores the throttles it "
                             "set before it from its backup; CancelReassignmentOperator does so too). Grant it: "
                             "kafka-acls.sh --add --allow-principal User:ops --operation AlterConfigs --cluster")
    topic = admin._access_error("authorization", "TOPIC_AUTHORIZATION_FAILED", Refused.on_topic("ALTER", "t1", "x"))
    assert "ALTER on topic 't1' was refused" in str(topic) and "--operation Alter --topic t1" in str(topic)
    assert "hunter2-secret" not in str(e) + str(topic)


def test_a_tls_failure_says_handshake_failed_and_why():
    tls = KafkaClusterAdmin({"bootstrap.servers": "b1:9093", "security.protocol": "SSL"})
    e = tls._access_error("tls", "ssl://b1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
                                 "certificate verify failed: broker certificate could not be verified")
    assert str(e).startswith("TLS handshake failed with bootstrap.servers=b1:9093 over SSL (certificate verify "
                             "failed): ssl://b1:9093/bootstrap")
