"""The librdkafka config of a ``kafka`` connection: validation and both translations."""

from __future__ import annotations

import inspect
import math

import pytest

from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.kafka.config import (
    REDACTED,
    SUPPORTED_SASL_MECHANISMS,
    SUPPORTED_SECURITY_PROTOCOLS,
    redact,
    to_confluent,
    to_kafka_python,
    validate_client_config,
)

BOOT = {"bootstrap.servers": "b1:9092,b2:9092"}
SASL = {
    **BOOT,
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "ops",
    "sasl.password": "hunter2-secret",
}


# -- validate_client_config ---------------------------------------------------------------


def test_minimal_config_is_returned_as_strings():
    cfg = validate_client_config(
        {**BOOT, "socket.keepalive.enable": True, "message.max.bytes": 1000000, "x": 1.5}
    )
    assert cfg == {
        **BOOT,
        "socket.keepalive.enable": "true",
        "message.max.bytes": "1000000",
        "x": "1.5",
    }


@pytest.mark.parametrize(
    "config",
    [{}, {"bootstrap.servers": ""}, {"bootstrap.servers": "   "}, {"group.id": "g"}],
    ids=["empty", "empty-string", "blank", "other-keys-only"],
)
def test_missing_bootstrap_servers_names_the_extra_field_and_the_fix(config):
    with pytest.raises(ConfigurationError) as e:
        validate_client_config(config, conn_id="kafka_prod")
    msg = str(e.value)
    assert "'kafka_prod'" in msg
    assert "bootstrap.servers" in msg
    assert "extra" in msg
    assert "broker1:9092" in msg  # an example of the fix


def test_metadata_broker_list_alone_is_explained():
    with pytest.raises(ConfigurationError, match="metadata.broker.list"):
        validate_client_config({"metadata.broker.list": "b1:9092"})


def test_bootstrap_servers_is_stripped():
    assert validate_client_config({"bootstrap.servers": " b1:9092 "})["bootstrap.servers"] == "b1:9092"


@pytest.mark.parametrize("protocol", SUPPORTED_SECURITY_PROTOCOLS)
def test_supported_protocols_in_any_case_are_upper_cased(protocol):
    extra = (
        {"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"}
        if protocol.startswith("SASL")
        else {}
    )
    cfg = validate_client_config({**BOOT, "security.protocol": protocol.lower(), **extra})
    assert cfg["security.protocol"] == protocol


@pytest.mark.parametrize("protocol", ["SASL", "TLS", "https", ""])
def test_unsupported_protocol_lists_the_supported_ones(protocol):
    with pytest.raises(ConfigurationError) as e:
        validate_client_config({**BOOT, "security.protocol": protocol})
    assert "security.protocol" in str(e.value)
    for p in SUPPORTED_SECURITY_PROTOCOLS:
        assert p in str(e.value)


@pytest.mark.parametrize("mechanism", SUPPORTED_SASL_MECHANISMS)
@pytest.mark.parametrize("key", ["sasl.mechanism", "sasl.mechanisms"])
def test_supported_mechanisms_under_either_alias(key, mechanism):
    cfg = {**SASL}
    del cfg["sasl.mechanism"]
    cfg[key] = mechanism.lower()
    assert validate_client_config(cfg)[key] == mechanism


@pytest.mark.parametrize("mechanism", ["GSSAPI", "OAUTHBEARER", "AWS_MSK_IAM", "SCRAM-SHA-1"])
def test_unsupported_mechanism_lists_the_supported_ones(mechanism):
    with pytest.raises(ConfigurationError) as e:
        validate_client_config({**SASL, "sasl.mechanism": mechanism})
    assert mechanism in str(e.value)
    for m in SUPPORTED_SASL_MECHANISMS:
        assert m in str(e.value)


def test_sasl_protocol_without_mechanism_is_refused_not_defaulted_to_gssapi():
    cfg = {**SASL}
    del cfg["sasl.mechanism"]
    with pytest.raises(ConfigurationError, match="GSSAPI.*sasl.mechanism"):
        validate_client_config(cfg)


@pytest.mark.parametrize("missing", ["sasl.username", "sasl.password"])
def test_sasl_without_credentials_names_the_missing_key(missing):
    cfg = {k: v for k, v in SASL.items() if k != missing}
    with pytest.raises(ConfigurationError, match=missing):
        validate_client_config(cfg)


def test_conflicting_mechanism_aliases_are_refused():
    with pytest.raises(ConfigurationError, match="aliases"):
        validate_client_config({**SASL, "sasl.mechanisms": "PLAIN"})


def test_callbacks_are_dropped_and_oauth_cb_refused():
    cfg = validate_client_config({**BOOT, "error_cb": "my.module.cb", "stats_cb": "x.y"})
    assert cfg == BOOT
    with pytest.raises(ConfigurationError, match="OAUTHBEARER"):
        validate_client_config({**BOOT, "oauth_cb": "my.module.token"})


@pytest.mark.parametrize("value", [None, ["b1:9092"], {"a": 1}])
def test_non_scalar_values_are_refused_naming_the_key(value):
    with pytest.raises(ConfigurationError, match="client.id"):
        validate_client_config({**BOOT, "client.id": value})


def test_error_about_a_secret_value_does_not_show_it():
    with pytest.raises(ConfigurationError) as e:
        validate_client_config({**SASL, "sasl.password": ["hunter2-secret"]})
    assert "hunter2-secret" not in str(e.value)


def test_not_a_mapping_is_refused():
    with pytest.raises(ConfigurationError, match="JSON object"):
        validate_client_config(["bootstrap.servers"])  # type: ignore[arg-type]


def test_input_is_not_mutated():
    cfg = {**SASL, "security.protocol": "sasl_ssl", "error_cb": "a.b"}
    before = dict(cfg)
    validate_client_config(cfg)
    to_kafka_python(cfg, timeout_s=5)
    to_confluent(cfg, timeout_s=5)
    assert cfg == before


# -- to_kafka_python ----------------------------------------------------------------------


def _admin_client_parameters() -> set[str]:
    kafka_admin = pytest.importorskip("kafka.admin")
    return set(kafka_admin.KafkaAdminClient.DEFAULT_CONFIG)


def test_plaintext_translation_and_timeouts():
    kw = to_kafka_python({**BOOT, "client.id": "reassigner"}, timeout_s=7.5)
    assert kw == {
        "bootstrap_servers": ["b1:9092", "b2:9092"],
        "client_id": "reassigner",
        "security_protocol": "PLAINTEXT",
        "request_timeout_ms": 7500,
        "bootstrap_timeout_ms": 7500,
        "ssl_check_hostname": True,
    }


def test_sasl_ssl_translation():
    cfg = {
        **SASL,
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "ssl.certificate.location": "/etc/kafka/client.pem",
        "ssl.key.location": "/etc/kafka/client.key",
        "ssl.key.password": "keypass-secret",
        "ssl.crl.location": "/etc/kafka/crl.pem",
        "ssl.endpoint.identification.algorithm": "none",
    }
    kw = to_kafka_python(cfg, timeout_s=10)
    assert kw["security_protocol"] == "SASL_SSL"
    assert kw["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kw["sasl_plain_username"] == "ops"
    assert kw["sasl_plain_password"] == "hunter2-secret"
    assert kw["ssl_cafile"] == "/etc/kafka/ca.pem"
    assert kw["ssl_certfile"] == "/etc/kafka/client.pem"
    assert kw["ssl_keyfile"] == "/etc/kafka/client.key"
    assert kw["ssl_password"] == "keypass-secret"
    assert kw["ssl_crlfile"] == "/etc/kafka/crl.pem"
    assert kw["ssl_check_hostname"] is False


def test_every_translated_key_is_a_kafka_admin_client_argument():
    """KafkaAdminClient rejects unknown kwargs: only its own parameter names may come out."""
    cfg = {
        **SASL,
        "client.id": "x",
        "client.dns.lookup": "resolve_canonical_bootstrap_servers_only",
        "ssl.ca.location": "/ca.pem",
        "ssl.certificate.location": "/c.pem",
        "ssl.key.location": "/k.pem",
        "ssl.key.password": "k",
        "ssl.crl.location": "/crl.pem",
        "ssl.endpoint.identification.algorithm": "https",
        "enable.ssl.certificate.verification": "true",
        "socket.timeout.ms": "20000",
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 2000,
        "retry.backoff.ms": 200,
        "metadata.max.age.ms": 60000,
        "connections.max.idle.ms": 60000,
        "max.in.flight.requests.per.connection": 5,
        "receive.message.max.bytes": 200000000,
        "socket.send.buffer.bytes": 131072,
        "socket.receive.buffer.bytes": 65536,
        # ignored: not security-related, no kafka-python equivalent
        "socket.keepalive.enable": "true",
        "api.version.request": "true",
        "statistics.interval.ms": 0,
        "group.id": "g",
    }
    kw = to_kafka_python(cfg, timeout_s=5)
    assert set(kw) <= _admin_client_parameters()
    assert kw["request_timeout_ms"] == 20000  # the user's socket.timeout.ms wins
    assert kw["bootstrap_timeout_ms"] == 5000
    assert kw["client_dns_lookup"] == "resolve_canonical_bootstrap_servers_only"
    assert kw["send_buffer_bytes"] == 131072


def test_zero_socket_buffers_mean_the_system_default():
    kw = to_kafka_python({**BOOT, "socket.receive.buffer.bytes": 0}, timeout_s=5)
    assert "receive_buffer_bytes" not in kw


def test_ssl_ca_location_probe_means_the_system_store():
    kw = to_kafka_python({**BOOT, "security.protocol": "SSL", "ssl.ca.location": "probe"}, timeout_s=5)
    assert "ssl_cafile" not in kw


def test_sasl_credentials_are_not_passed_without_a_sasl_protocol():
    kw = to_kafka_python({**BOOT, "sasl.username": "u", "sasl.password": "p"}, timeout_s=5)
    assert not {"sasl_mechanism", "sasl_plain_username", "sasl_plain_password"} & set(kw)


@pytest.mark.parametrize(
    ("protocol", "key", "value"),
    [
        ("SSL", "ssl.ca.pem", "-----BEGIN CERTIFICATE-----"),
        ("SSL", "ssl.certificate.pem", "-----BEGIN CERTIFICATE-----"),
        ("SSL", "ssl.key.pem", "-----BEGIN PRIVATE KEY-----"),
        ("SSL", "ssl.keystore.location", "/etc/kafka/client.p12"),
        ("SSL", "ssl.cipher.suites", "ECDHE-RSA-AES256-GCM-SHA384"),
        ("SSL", "ssl.curves.list", "prime256v1"),
        ("SASL_SSL", "ssl.providers", "legacy"),
        ("SASL_SSL", "sasl.kerberos.service.name", "kafka"),
        ("SASL_PLAINTEXT", "sasl.oauthbearer.client.id", "app"),
        ("SASL_PLAINTEXT", "enable.sasl.oauthbearer.unsecure.jwt", "true"),
    ],
)
def test_untranslatable_security_options_fail_closed(protocol, key, value):
    cfg = {**SASL, "security.protocol": protocol, key: value}
    with pytest.raises(ConfigurationError) as e:
        to_kafka_python(cfg, timeout_s=5)
    msg = str(e.value)
    assert key in msg
    assert "kafka-python" in msg
    assert "-----BEGIN" not in msg  # never echo key material


def test_security_options_librdkafka_ignores_for_the_protocol_are_ignored_too():
    # PLAINTEXT: librdkafka does not use ssl.* or sasl.*, so neither does the translation.
    kw = to_kafka_python({**BOOT, "ssl.cipher.suites": "X", "sasl.kerberos.service.name": "k"}, timeout_s=5)
    assert kw["security_protocol"] == "PLAINTEXT"


def test_disabling_certificate_verification_is_refused_with_the_fix():
    cfg = {**BOOT, "security.protocol": "SSL", "enable.ssl.certificate.verification": False}
    with pytest.raises(ConfigurationError, match="ssl.ca.location"):
        to_kafka_python(cfg, timeout_s=5)


def test_unknown_endpoint_identification_algorithm_is_refused():
    cfg = {**BOOT, "security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"}
    with pytest.raises(ConfigurationError, match="https"):
        to_kafka_python(cfg, timeout_s=5)


def test_key_without_certificate_is_refused():
    cfg = {**BOOT, "security.protocol": "SSL", "ssl.key.location": "/k.pem"}
    with pytest.raises(ConfigurationError, match="ssl.certificate.location"):
        to_kafka_python(cfg, timeout_s=5)


def test_non_integer_numeric_option_names_the_key():
    with pytest.raises(ConfigurationError, match="retry.backoff.ms"):
        to_kafka_python({**BOOT, "retry.backoff.ms": "soon"}, timeout_s=5)


@pytest.mark.parametrize("timeout", [0, -1, math.inf, math.nan, True, "10"])
@pytest.mark.parametrize("translate", [to_kafka_python, to_confluent])
def test_bad_timeouts_are_refused(translate, timeout):
    with pytest.raises(ConfigurationError, match="timeout_s"):
        translate(BOOT, timeout_s=timeout)


def test_kafka_python_admin_client_accepts_the_translation():
    """The real constructor takes every translated kwarg and gets as far as bootstrapping: nothing listens on
    port 1, so the only error is kafka-python's own "no bootstrap" (the one the adapter turns into
    ClusterUnreachableError); any other (a rejected or mistyped option) fails the test."""
    from kafka.errors import KafkaConfigurationError, KafkaConnectionError, KafkaTimeoutError

    from airflow_kafka_reassign.kafka.admin import SafeKafkaAdminClient  # stops its IO thread on failure

    kw = to_kafka_python({"bootstrap.servers": "127.0.0.1:1", "client.id": "t"}, timeout_s=0.5)
    try:
        SafeKafkaAdminClient(**kw).close()
    except KafkaConfigurationError as e:  # pragma: no cover - the assertion of this test
        pytest.fail(f"kafka-python rejected the translated config: {e}")
    except (KafkaConnectionError, KafkaTimeoutError) as e:  # kafka-python 3.0's "no bootstrap"
        assert "127.0.0.1:1" in str(e), e
    else:  # pragma: no cover
        pytest.fail("a client bootstrapped from 127.0.0.1:1, where nothing listens")


# -- to_confluent -------------------------------------------------------------------------


def test_confluent_gets_timeouts_only_where_unset():
    out = to_confluent({**BOOT, "socket.timeout.ms": "45000"}, timeout_s=5)
    assert out["socket.timeout.ms"] == "45000"
    assert out["socket.connection.setup.timeout.ms"] == "5000"
    assert out["api.version.request.timeout.ms"] == "5000"
    assert out["bootstrap.servers"] == BOOT["bootstrap.servers"]


def test_confluent_timeouts_are_clamped_to_librdkafka_ranges():
    short = to_confluent(BOOT, timeout_s=0.2)
    assert short["socket.connection.setup.timeout.ms"] == "1000"  # librdkafka minimum
    assert short["socket.timeout.ms"] == "200"
    long = to_confluent(BOOT, timeout_s=3600)
    assert long["socket.timeout.ms"] == "300000"  # librdkafka maximum
    assert long["api.version.request.timeout.ms"] == "300000"


def test_confluent_drops_consumer_only_options_and_keeps_security():
    out = to_confluent({**SASL, "group.id": "g", "auto.offset.reset": "earliest"}, timeout_s=5)
    assert "group.id" not in out and "auto.offset.reset" not in out
    assert out["sasl.password"] == "hunter2-secret"
    assert out["security.protocol"] == "SASL_SSL"


def test_confluent_admin_client_accepts_the_translation():
    """librdkafka validates the whole config in the constructor, without connecting."""
    admin = pytest.importorskip("confluent_kafka.admin")
    cfg = to_confluent(
        {
            **SASL,
            "bootstrap.servers": "127.0.0.1:1",
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "plain",
            "group.id": "g",
        },
        timeout_s=0.2,
    )
    admin.AdminClient(cfg)


# -- redact -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "sasl.oauthbearer.client.secret",
        "ssl.key.pem",
        "sasl.oauthbearer.config",
        "sasl_plain_password",
        "ssl_password",
        "My.Custom.Password",
        "some.secret.thing",
        "access_token",
    ],
)
def test_redact_hides_secret_values(key):
    out = redact({**BOOT, key: "s3cr3t"})
    assert out[key] == REDACTED
    assert out["bootstrap.servers"] == BOOT["bootstrap.servers"]


def test_redact_keeps_everything_else_and_does_not_mutate():
    cfg = dict(SASL)
    out = redact(cfg)
    assert out == {**SASL, "sasl.password": REDACTED}
    assert cfg == SASL
    assert "hunter2-secret" not in repr(redact(to_kafka_python(SASL, timeout_s=5)))


def test_public_translators_take_timeout_as_keyword_only():
    for fn in (to_kafka_python, to_confluent):
        assert inspect.signature(fn).parameters["timeout_s"].kind is inspect.Parameter.KEYWORD_ONLY
