"""The sandbox's --tls and --acls options, without starting a cluster (the cluster tests are in
tests/integration/test_access_errors.py and test_access_errors_acl_tls.py)."""

from __future__ import annotations

import ipaddress
import stat

import pytest
from cryptography import x509

from airflow_kafka_reassign.sandbox import cluster, nodes
from airflow_kafka_reassign.sandbox.tls import ensure_certificates

NODE = {"id": 1, "roles": ["broker", "controller"], "rack": "r1", "port": 9092, "controller_port": 9093,
        "sasl_port": 9094, "ssl_port": 9095}


def test_the_tls_listener_and_the_authorizer_are_configured(tmp_path):
    props = nodes.node_properties(NODE, "1@127.0.0.1:9093", 5, tmp_path, True,
                                    keystore=tmp_path / "ks.pem", acls=True)
    assert "SSL://127.0.0.1:9095" in str(props["listeners"]) and "SSL://127.0.0.1:9095" in str(
        props["advertised.listeners"])
    assert props["listener.name.ssl.ssl.keystore.type"] == "PEM"
    assert props["authorizer.class.name"] == nodes.AUTHORIZER_CLASS
    # every listener without SASL is User:ANONYMOUS: a super user, so brokers, controllers and plain clients work
    assert props["super.users"] == "User:ANONYMOUS;User:sandbox-admin"
    plain = nodes.node_properties(NODE, "1@127.0.0.1:9093", 5, tmp_path, True)
    assert "SSL://" not in str(plain["listeners"]) and "authorizer.class.name" not in plain


def test_certificates_are_made_once_and_the_broker_certificate_is_signed_by_the_ca(tmp_path):
    files = ensure_certificates(tmp_path / "tls")
    assert stat.S_IMODE(files.keystore.stat().st_mode) == 0o600
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    text = files.keystore.read_bytes()
    assert text.startswith(b"-----BEGIN PRIVATE KEY-----")  # unencrypted PKCS#8, as Kafka's PEM keystore reads it
    broker = x509.load_pem_x509_certificates(text)[0]
    broker.verify_directly_issued_by(ca)
    sans = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    before = files.keystore.read_bytes()
    assert ensure_certificates(tmp_path / "tls") == files and files.keystore.read_bytes() == before


def test_acls_need_sasl_and_tls_is_not_combined_with_sasl(tmp_path):
    with pytest.raises(cluster.SandboxError, match="acls needs sasl"):
        cluster.Sandbox(tmp_path / "sb").up(sasl=False, acls=True)
    sandbox = cluster.Sandbox(tmp_path / "sb")
    sandbox._state = {"nodes": [{**NODE, "ssl_port": None}], "sasl": True, "sasl_username": "sandbox-admin",
                      "sasl_password": "x", "tls": False, "acl_users": {}}
    with pytest.raises(cluster.SandboxError, match="without --tls"):
        sandbox.client_config(tls=True)
    with pytest.raises(cluster.SandboxError, match="start it with --acls"):
        sandbox.client_config(user=nodes.LIMITED_USERNAME)
