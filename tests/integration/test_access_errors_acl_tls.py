"""Authorization and TLS failures on the real sandbox (``--acls``: StandardAuthorizer; ``--tls``: an SSL listener).

* ``sandbox-limited`` may describe the cluster, the topics and their configs, nothing more: the execution
  engine fails on its first write, naming the user, the ACL refused (ALTER_CONFIGS on the cluster for the
  throttles, ALTER on the cluster for AlterPartitionReassignments) and the ``kafka-acls`` grant; nothing is
  submitted, no throttle changes, no retry.
* ``sandbox-nobody`` has no ACL: the plan's snapshot fails naming DESCRIBE on the cluster.
* A client that does not trust the sandbox's CA fails its first request with "TLS handshake failed ...
  (certificate verify failed)" and the fix (ssl.ca.location), not an unreachable cluster; with the CA, a snapshot
  works over TLS, through both clients (librdkafka and kafka-python).

The same failures in real Airflow task runs, with the secrets scan, are in test_access_errors.py.
"""

from __future__ import annotations

import logging

import pytest
from kafka_helpers import make_topic, replicas, throttles

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, run
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.exceptions import ClusterAccessError, ClusterUnreachableError, ConfigurationError
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.sandbox import Sandbox
from airflow_kafka_reassign.sandbox.nodes import LIMITED_USERNAME, NO_ACL_USERNAME
from airflow_kafka_reassign.sandbox.tls import new_ca


@pytest.fixture(scope="module")
def secured(sandbox: Sandbox) -> Sandbox:
    if not (sandbox.acls and sandbox.tls_ca_path):
        pytest.skip("this sandbox was started without --acls --tls (python -m airflow_kafka_reassign.sandbox up "
                    "--sasl --tls --acls); the session's own sandbox has both")
    return sandbox


@pytest.fixture(scope="module")
def topic(secured: Sandbox) -> str:
    name = "t-access-acl-tls"
    with KafkaClusterAdmin(secured.client_config(), timeout_s=30) as admin:
        if name not in admin.list_topic_names():
            make_topic(secured.client_config(), name, [[1, 2], [2, 3]])
    return name


def _secrets(sandbox: Sandbox) -> list[str]:
    return [sandbox.state["sasl_password"], *sandbox.state["acl_users"].values()]


@pytest.mark.parametrize(("throttle", "refused", "grant"), [
    (1_000_000, "ALTER_CONFIGS on the cluster was refused (IncrementalAlterConfigs of broker",
     "--operation AlterConfigs --cluster"),
    (None, "ALTER on the cluster was refused (AlterPartitionReassignments", "--operation Alter --cluster"),
], ids=["throttled", "unthrottled"])
def test_the_limited_user_fails_at_the_first_write_naming_the_acl_and_changes_nothing(
        secured, topic, tmp_path, caplog, throttle, refused, grant):
    plan = ReassignmentPlan(moves=(Move(topic=topic, partition=0, current_replicas=(1, 2), target_replicas=(3, 2)),))
    with KafkaClusterAdmin(secured.client_config(), timeout_s=30) as admin:
        before = (replicas(admin, topic), throttles(admin, [topic]))
    with KafkaClusterAdmin(secured.client_config(user=LIMITED_USERNAME), timeout_s=30) as limited:
        calls = {"set_throttles": 0, "alter_reassignments": 0}
        for name in calls:  # count the writes: each is tried once, not retried
            method = getattr(limited, name)

            def counted(*a, _m=method, _n=name, **kw):
                calls[_n] += 1
                return _m(*a, **kw)

            setattr(limited, name, counted)
        with caplog.at_level(logging.DEBUG), pytest.raises(ClusterAccessError) as info:
            run(limited, plan, ExecutionLimits(), ExecutionOptions(throttle_bytes_per_sec=throttle),
                state_dir=tmp_path, poll_interval_s=0.2)
    message = str(info.value)
    print(message)
    assert info.value.cause == "authorization"
    assert message.startswith(f"authorization failed for user '{LIMITED_USERNAME}' at bootstrap.servers="), message
    assert refused in message and f"--allow-principal User:{LIMITED_USERNAME} {grant}" in message, message
    assert calls["alter_reassignments"] <= 1 and (throttle is None or calls["alter_reassignments"] == 0), calls
    with KafkaClusterAdmin(secured.client_config(), timeout_s=30) as admin:
        assert not admin.list_reassignments()
        assert (replicas(admin, topic), throttles(admin, [topic])) == before
    assert "restoring the throttles failed" not in caplog.text  # nothing was set: nothing to restore, no 2nd error
    assert not any(s in caplog.text or s in message for s in _secrets(secured))


def test_a_user_without_any_acl_fails_the_snapshot_naming_describe_on_the_cluster(secured):
    with KafkaClusterAdmin(secured.client_config(user=NO_ACL_USERNAME), timeout_s=30) as nobody, \
            pytest.raises(ClusterAccessError) as info:
        nobody.snapshot()
    message = str(info.value)
    assert f"authorization failed for user '{NO_ACL_USERNAME}'" in message
    assert "DESCRIBE on the cluster was refused (ListPartitionReassignments" in message
    assert f"--allow-principal User:{NO_ACL_USERNAME} --operation Describe --cluster" in message


def test_a_topic_hidden_from_the_user_is_named_as_an_authorization_failure_not_as_missing(secured):
    """Kafka leaves a topic the principal may not DESCRIBE out of the metadata: a plan naming it must not be
    refused as "does not exist" (the user would re-create it, or give up) but name the ACL to grant."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    from airflow_kafka_reassign.kafka.config import to_confluent

    name = "t-access-hidden"
    with KafkaClusterAdmin(secured.client_config(), timeout_s=30) as admin:
        if name not in admin.list_topic_names():
            make_topic(secured.client_config(), name, [[1, 2]])
    deny = AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, f"User:{LIMITED_USERNAME}", "*",
                      AclOperation.DESCRIBE, AclPermissionType.DENY)  # this topic only: other tests unaffected
    superuser = AdminClient(to_confluent(secured.client_config(), timeout_s=30))
    for future in superuser.create_acls([deny]).values():
        future.result(30)
    with KafkaClusterAdmin(secured.client_config(user=LIMITED_USERNAME), timeout_s=30) as limited:
        with pytest.raises(ClusterAccessError) as info:
            limited.snapshot(topics=[name])
        message = str(info.value)
        assert f"DESCRIBE on topic '{name}' was refused" in message
        assert f"{name} do not exist or are hidden from this principal" in message
        assert f"--allow-principal User:{LIMITED_USERNAME} --operation Describe --topic {name}" in message
        with pytest.raises(ConfigurationError, match="t-access-never-created do not exist") as missing:
            limited.snapshot(topics=["t-access-never-created"])  # a topic that is not there stays "missing"
        assert not isinstance(missing.value, ClusterAccessError)


def test_an_untrusted_ca_fails_the_tls_handshake_at_once_and_the_right_ca_works(secured, topic, tmp_path):
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(new_ca("not the sandbox's CA")[0])
    untrusting = {**secured.client_config(tls=True), "ssl.ca.location": str(other_ca)}
    for call in ("snapshot", "list_reassignments"):  # librdkafka's request first / kafka-python's first
        with KafkaClusterAdmin(untrusting, timeout_s=30) as admin:
            try:
                getattr(admin, call)()
            except ClusterUnreachableError as e:  # what it said before: "did not answer within 30 s"
                pytest.fail(f"{call}: a refused TLS handshake was taken for an unreachable cluster: {e}")
            except ClusterAccessError as e:
                message = str(e)
                assert e.cause == "tls", message
                assert message.startswith("TLS handshake failed with bootstrap.servers="), message
                assert "(certificate verify failed)" in message and "ssl.ca.location" in message, message
            else:
                pytest.fail(f"{call}: the brokers' certificate was accepted from a CA that did not sign it")
    with KafkaClusterAdmin(secured.client_config(tls=True), timeout_s=30) as admin:
        assert [p.partition for p in admin.snapshot(topics=[topic]).partitions] == [0, 1]
        assert admin.list_reassignments() == {}  # kafka-python over TLS with ssl_cafile
