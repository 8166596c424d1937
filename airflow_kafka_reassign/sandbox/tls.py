"""Self-signed certificates for the sandbox's TLS listener (``up --tls``), made with ``cryptography``.

Layout of ``DIR/tls`` (made once per sandbox directory, reused when the sandbox is replaced)::

    ca.pem                 the sandbox's CA certificate: what clients put in ``ssl.ca.location``
    broker-keystore.pem    mode 600: the brokers' private key (PKCS#8) then their certificate chain,
                           a PEM keystore as Kafka reads it (``ssl.keystore.type=PEM``, KIP-651)

Every broker listens on 127.0.0.1, so one broker certificate (subject alternative names
``IP:127.0.0.1`` and ``DNS:localhost``) serves them all and passes librdkafka's and Python's
hostname verification. Keys are EC P-256: generating both takes milliseconds (a keytool JVM
per file would take seconds). The CA's own key is not kept: nothing else is ever signed.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

CA_FILE = "ca.pem"
KEYSTORE_FILE = "broker-keystore.pem"
#: long enough for any test session, short enough to be obviously a test certificate
VALID_DAYS = 365


@dataclass(frozen=True)
class TlsFiles:
    """Paths of a sandbox's TLS material."""

    ca: Path
    keystore: Path


def _name(common_name: str):  # type: ignore[no-untyped-def]
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "airflow-kafka-reassign sandbox"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def new_ca(common_name: str = "sandbox CA") -> tuple[bytes, object]:
    """A fresh self-signed CA: ``(certificate PEM, private key)``. Tests use one to stand for a CA
    that did not sign the brokers' certificates."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), key


def ensure_certificates(tls_dir: Path) -> TlsFiles:
    """The CA and the brokers' PEM keystore in ``tls_dir``, made unless both are already there."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    files = TlsFiles(ca=tls_dir / CA_FILE, keystore=tls_dir / KEYSTORE_FILE)
    if files.ca.is_file() and files.keystore.is_file():
        return files
    tls_dir.mkdir(parents=True, exist_ok=True)
    ca_pem, ca_key = new_ca()
    ca_cert = x509.load_pem_x509_certificate(ca_pem)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    _write(files.keystore, key_pem + cert.public_bytes(serialization.Encoding.PEM) + ca_pem, mode=0o600)
    _write(files.ca, ca_pem)
    return files
