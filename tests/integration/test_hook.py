"""KafkaReassignHook against the sandbox, through its SASL (SCRAM-SHA-512) listener."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_reassign.exceptions import ClusterAccessError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook


def _connection(monkeypatch, conn_id: str, extra: dict) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kafka", "extra": extra}))


def test_hook_connects_through_sasl_scram_with_credentials_from_the_connection(sandbox, monkeypatch, caplog):
    config = sandbox.client_config(sasl=True)
    assert config["security.protocol"] == "SASL_PLAINTEXT"
    _connection(monkeypatch, "kafka_sasl", config)
    hook = KafkaReassignHook(kafka_config_id="kafka_sasl", timeout_s=15)
    ok, message = hook.test_connection()
    assert ok, message
    assert config["sasl.password"] not in message
    with hook.get_admin() as admin:
        snap = admin.snapshot()
        assert len(snap.brokers) == len(sandbox.broker_ids)
        # the reassignment calls go through the second client (kafka-python), also over SASL
        assert admin.list_reassignments() == {}
    assert config["sasl.password"] not in caplog.text


@pytest.mark.timeout(90)
def test_wrong_password_fails_naming_authentication_without_leaking_it(sandbox, monkeypatch):
    config = {**sandbox.client_config(sasl=True), "sasl.password": "not-the-password"}
    _connection(monkeypatch, "kafka_bad", config)
    hook = KafkaReassignHook(kafka_config_id="kafka_bad", timeout_s=5)
    ok, message = hook.test_connection()
    assert not ok
    assert "not-the-password" not in message
    with pytest.raises(ClusterAccessError) as e, hook.get_admin() as admin:
        admin.snapshot()
    assert "authentication failed for user 'sandbox-admin' with mechanism SCRAM-SHA-512" in str(e.value)
    assert e.value.cause == "authentication" and "not-the-password" not in str(e.value)
    with pytest.raises(ClusterAccessError, match="authentication failed"), hook.get_admin() as admin:
        admin.list_reassignments()  # kafka-python's side: it sees closed connections; the adapter names the cause


def test_connection_without_bootstrap_servers_names_the_connection(monkeypatch):
    from airflow_kafka_reassign.exceptions import ConfigurationError

    _connection(monkeypatch, "kafka_empty", {"security.protocol": "PLAINTEXT"})
    with pytest.raises(ConfigurationError, match="kafka_empty") as e:
        KafkaReassignHook(kafka_config_id="kafka_empty").get_admin()
    assert "bootstrap.servers" in str(e.value)
