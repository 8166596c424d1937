"""KafkaReassignHook: a ``kafka`` connection (from ``AIRFLOW_CONN_*``) to a cluster admin."""

from __future__ import annotations

import json
import sys
import time
import types
from typing import Any

import pytest

from airflow_kafka_reassign.core.vocabulary.models import Broker
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook

PASSWORD = "pw-hunter2-do-not-log"
SASL_EXTRA = {
    "bootstrap.servers": "b1:9092,b2:9092",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-256",
    "sasl.username": "reassigner",
    "sasl.password": PASSWORD,
    "group.id": "shared-with-consumers",
}


def set_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: Any, conn_type: str = "kafka") -> None:
    """Define an Airflow connection the way deployments do: ``AIRFLOW_CONN_<ID>`` as JSON."""
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": conn_type, "extra": extra})
    )


class FakeAdmin:
    """Stands in for KafkaClusterAdmin (same constructor); records what the hook passed."""

    instances: list[FakeAdmin] = []
    describe_result: Any = ("cluster-abc", [Broker(id=1, rack="a"), Broker(id=2), Broker(id=3)])
    error: Exception | None = None

    def __init__(self, config: Any, *, timeout_s: float = 30.0) -> None:
        self.config = dict(config)
        self.timeout_s = timeout_s
        self.closed = False
        FakeAdmin.instances.append(self)

    def __enter__(self) -> FakeAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe_cluster_brokers(self) -> Any:
        if FakeAdmin.error is not None:
            raise FakeAdmin.error
        return FakeAdmin.describe_result

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_admin(monkeypatch: pytest.MonkeyPatch) -> type[FakeAdmin]:
    module = types.ModuleType("airflow_kafka_reassign.kafka.admin")
    module.KafkaClusterAdmin = FakeAdmin  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "airflow_kafka_reassign.kafka.admin", module)
    monkeypatch.setattr(FakeAdmin, "instances", [])
    monkeypatch.setattr(FakeAdmin, "error", None)
    return FakeAdmin


# -- construction -------------------------------------------------------------------------


def test_class_attributes_reuse_the_apache_kafka_connection_type():
    from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

    assert KafkaReassignHook.conn_type == KafkaBaseHook.conn_type == "kafka"
    assert KafkaReassignHook.conn_name_attr == KafkaBaseHook.conn_name_attr == "kafka_config_id"
    assert KafkaReassignHook.default_conn_name == KafkaBaseHook.default_conn_name == "kafka_default"
    assert KafkaReassignHook.hook_name


def test_is_an_airflow_sdk_hook():
    from airflow.providers.common.compat.sdk import BaseHook

    assert issubclass(KafkaReassignHook, BaseHook)


def test_init_only_stores_arguments():
    # No connection named "missing" exists: constructing must not look it up.
    hook = KafkaReassignHook(kafka_config_id="missing", timeout_s=4.5)
    assert hook.kafka_config_id == "missing"
    assert hook.timeout_s == 4.5
    assert KafkaReassignHook().kafka_config_id == "kafka_default"
    assert KafkaReassignHook().timeout_s == 30.0


def test_init_is_keyword_only():
    with pytest.raises(TypeError):
        KafkaReassignHook("kafka_default")  # type: ignore[misc]


# -- get_client_config --------------------------------------------------------------------


def test_get_client_config_reads_the_extra(monkeypatch):
    set_conn(monkeypatch, "kafka_prod", SASL_EXTRA)
    cfg = KafkaReassignHook(kafka_config_id="kafka_prod").get_client_config()
    assert cfg == SASL_EXTRA  # validated: all strings already, nothing lost


def test_default_connection_is_kafka_default(monkeypatch):
    set_conn(monkeypatch, "kafka_default", {"bootstrap.servers": "localhost:9092"})
    assert KafkaReassignHook().get_client_config() == {"bootstrap.servers": "localhost:9092"}


def test_connection_changes_are_seen(monkeypatch):
    hook = KafkaReassignHook(kafka_config_id="kafka_moving")
    set_conn(monkeypatch, "kafka_moving", {"bootstrap.servers": "old:9092"})
    assert hook.get_client_config()["bootstrap.servers"] == "old:9092"
    set_conn(monkeypatch, "kafka_moving", {"bootstrap.servers": "new:9092"})
    assert hook.get_client_config()["bootstrap.servers"] == "new:9092"


def test_extra_as_json_string_like_the_ui_stores_it(monkeypatch):
    extra = json.dumps({"bootstrap.servers": "b1:9092", "security.protocol": "ssl"})
    set_conn(monkeypatch, "kafka_str", extra)
    cfg = KafkaReassignHook(kafka_config_id="kafka_str").get_client_config()
    assert cfg == {"bootstrap.servers": "b1:9092", "security.protocol": "SSL"}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("not json at all", "not valid JSON"),
        ("[1, 2]", "JSON list, not an object"),
        ('"b1:9092"', "JSON str, not an object"),
        ({"group.id": "g"}, "bootstrap.servers"),
        (None, "bootstrap.servers"),
    ],
    ids=["invalid-json", "json-list", "json-string", "no-bootstrap", "no-extra"],
)
def test_bad_extra_raises_configuration_error_naming_the_connection(monkeypatch, extra, expected):
    from airflow.providers.common.compat.sdk import AirflowNotFoundException

    set_conn(monkeypatch, "kafka_broken", extra)
    with pytest.raises((ConfigurationError, AirflowNotFoundException)) as e:
        KafkaReassignHook(kafka_config_id="kafka_broken").get_client_config()
    if e.type is AirflowNotFoundException:
        # Airflow < 3.2: the connection backend itself refuses an extra that is not a JSON object
        import airflow
        assert tuple(map(int, airflow.__version__.split(".")[:2])) < (3, 2) and not isinstance(extra, dict | None)
        return
    assert "'kafka_broken'" in str(e.value)
    assert expected in str(e.value)
    assert "bootstrap.servers" in str(e.value)  # every message shows the fix


def test_unsupported_security_is_refused_naming_the_connection(monkeypatch):
    set_conn(monkeypatch, "kafka_gssapi", {**SASL_EXTRA, "sasl.mechanism": "GSSAPI"})
    with pytest.raises(ConfigurationError, match="'kafka_gssapi'.*GSSAPI"):
        KafkaReassignHook(kafka_config_id="kafka_gssapi").get_client_config()


def test_missing_connection_raises_airflow_not_found():
    from airflow.providers.common.compat.sdk import AirflowNotFoundException

    with pytest.raises(AirflowNotFoundException):
        KafkaReassignHook(kafka_config_id="no_such_kafka_conn").get_client_config()


# -- get_admin ----------------------------------------------------------------------------


def test_get_admin_builds_the_cluster_admin_from_the_connection(monkeypatch, fake_admin):
    set_conn(monkeypatch, "kafka_prod", SASL_EXTRA)
    admin = KafkaReassignHook(kafka_config_id="kafka_prod", timeout_s=12).get_admin()
    assert isinstance(admin, fake_admin)
    assert admin.config == SASL_EXTRA
    assert admin.timeout_s == 12


def test_get_admin_never_logs_secrets(monkeypatch, fake_admin, caplog, capsys):
    set_conn(monkeypatch, "kafka_prod", SASL_EXTRA)
    caplog.set_level("DEBUG")
    hook = KafkaReassignHook(kafka_config_id="kafka_prod")
    hook.get_admin()
    hook.test_connection()
    out = capsys.readouterr()
    logged = caplog.text + out.out + out.err
    assert "b1:9092" in logged  # it did log the connection ...
    assert PASSWORD not in logged  # ... but not the password


def test_get_admin_returns_the_real_adapter(monkeypatch):
    import airflow_kafka_reassign.kafka.admin as admin_module  # the project's own: an import error fails
    set_conn(monkeypatch, "kafka_local", {"bootstrap.servers": "127.0.0.1:1"})
    with KafkaReassignHook(kafka_config_id="kafka_local", timeout_s=2).get_admin() as admin:
        assert isinstance(admin, admin_module.KafkaClusterAdmin)


# -- test_connection ----------------------------------------------------------------------


def test_test_connection_reports_cluster_id_and_brokers(monkeypatch, fake_admin):
    set_conn(monkeypatch, "kafka_prod", SASL_EXTRA)
    ok, message = KafkaReassignHook(kafka_config_id="kafka_prod").test_connection()
    assert ok is True
    assert "cluster-abc" in message
    assert "3 broker(s)" in message
    assert fake_admin.instances[-1].closed


def test_test_connection_accepts_a_plain_broker_list(monkeypatch, fake_admin):
    monkeypatch.setattr(fake_admin, "describe_result", [Broker(id=7)])
    set_conn(monkeypatch, "kafka_prod", SASL_EXTRA)
    ok, message = KafkaReassignHook(kafka_config_id="kafka_prod").test_connection()
    assert ok is True
    assert "1 broker(s) [7]" in message


def test_test_connection_failure_is_reported_without_secrets(monkeypatch, fake_admin):
    monkeypatch.setattr(fake_admin, "error", RuntimeError(f"auth failed for reassigner:{PASSWORD}"))
    set_conn(monkeypatch, "kafka_prod", SASL_EXTRA)
    ok, message = KafkaReassignHook(kafka_config_id="kafka_prod").test_connection()
    assert ok is False
    assert "auth failed" in message
    assert PASSWORD not in message
    assert fake_admin.instances[-1].closed


@pytest.mark.parametrize("extra", ["{not json", {"security.protocol": "SSL"}])
def test_test_connection_never_raises_on_bad_config(monkeypatch, extra):
    set_conn(monkeypatch, "kafka_broken", extra)
    ok, message = KafkaReassignHook(kafka_config_id="kafka_broken").test_connection()
    assert ok is False
    assert "kafka_broken" in message


def test_test_connection_never_raises_on_missing_connection():
    ok, message = KafkaReassignHook(kafka_config_id="no_such_kafka_conn").test_connection()
    assert ok is False
    assert "no_such_kafka_conn" in message


def test_test_connection_to_an_unreachable_cluster_fails_within_the_timeout(monkeypatch):
    """The real adapter against a closed loopback port: a clear failure, bounded by the connection's timeout:
    one DescribeCluster, which librdkafka itself ends after ``timeout_s``, and an error naming the servers and
    that bound (the elapsed time is printed, not asserted: it is the machine's)."""
    import airflow_kafka_reassign.kafka.admin.client as admin_module  # where the clients are made
    set_conn(monkeypatch, "kafka_down", {"bootstrap.servers": "127.0.0.1:1"})
    requests: list[dict[str, Any]] = []
    describe_cluster = admin_module.AdminClient.describe_cluster

    def recorded(self: Any, **kwargs: Any) -> Any:
        requests.append(kwargs)
        return describe_cluster(self, **kwargs)

    monkeypatch.setattr(admin_module.AdminClient, "describe_cluster", recorded)
    started = time.monotonic()
    ok, message = KafkaReassignHook(kafka_config_id="kafka_down", timeout_s=2).test_connection()
    print(f"failed after {time.monotonic() - started:.1f} s with timeout_s=2: {message}")
    assert ok is False
    assert "127.0.0.1:1" in message and "did not answer within 2 s" in message, message
    assert requests == [{"request_timeout": 2}]
