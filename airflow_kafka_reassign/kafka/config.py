"""One Kafka connection, two clients: validate and translate a librdkafka config dict.

Users already keep a librdkafka config dict in the extra of their ``kafka`` connections
(the connection type of apache-airflow-providers-apache-kafka). This module checks that
dict and translates it for both clients the adapter uses:

* :func:`to_confluent` - confluent-kafka (librdkafka) ``AdminClient(conf)``;
* :func:`to_kafka_python` - kafka-python 3.0's ``KafkaAdminClient(**kwargs)``.

Both add timeouts derived from one ``timeout_s`` so an unreachable cluster fails within it.
The translation fails closed: a security setting (``ssl.*``, ``sasl.*``, OAuth) that
kafka-python cannot honour raises :class:`~airflow_kafka_reassign.exceptions.ConfigurationError`
instead of being dropped, so the second client never connects with weaker security than
the first. :func:`redact` hides secrets wherever a config is logged or shown.

Pure: no Kafka client import. Example::

    >>> cfg = {"bootstrap.servers": "b1:9092,b2:9092", "security.protocol": "sasl_ssl",
    ...        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "ops",
    ...        "sasl.password": "hunter2"}
    >>> kw = to_kafka_python(cfg, timeout_s=10)
    >>> kw["bootstrap_servers"], kw["security_protocol"], kw["bootstrap_timeout_ms"]
    (['b1:9092', 'b2:9092'], 'SASL_SSL', 10000)
    >>> redact(cfg)["sasl.password"]
    '***'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from airflow_kafka_reassign.exceptions import ConfigurationError

#: ``security.protocol`` values this provider supports (librdkafka accepts any case).
SUPPORTED_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: SASL mechanisms both clients support with a username and password.
SUPPORTED_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: What a secret value is replaced with by :func:`redact`.
REDACTED = "***"

#: Keys whose values are secrets, besides any key containing one of :data:`_SECRET_WORDS`.
SECRET_KEYS = frozenset(
    {
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "sasl.oauthbearer.client.secret",
        # These carry secrets inside a larger value: a private key, client credentials.
        "ssl.key.pem",
        "ssl_key",
        "sasl.oauthbearer.config",
        "sasl.jaas.config",
    }
)
_SECRET_WORDS = ("password", "secret", "token", "credential")

#: confluent-kafka callback options. The apache-kafka provider resolves dotted-path strings
#: for them against an allow-list; this provider builds its own clients and does not.
CALLBACK_KEYS = ("error_cb", "throttle_cb", "stats_cb", "log_cb", "oauth_cb", "on_commit")

#: Consumer/producer-only properties often found in a shared ``kafka`` connection (the
#: provider's own placeholder shows ``group.id``). An admin client only warns about them
#: (``CONFWARN``), so :func:`to_confluent` leaves them out.
CLIENT_ROLE_ONLY_KEYS = frozenset(
    {
        "group.id",
        "group.instance.id",
        "group.protocol",
        "group.remote.assignor",
        "auto.offset.reset",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "isolation.level",
        "partition.assignment.strategy",
        "fetch.min.bytes",
        "fetch.max.bytes",
        "fetch.wait.max.ms",
        "max.partition.fetch.bytes",
        "check.crcs",
    }
)

_BOOTSTRAP = "bootstrap.servers"
_EXTRA_EXAMPLE = '{"bootstrap.servers": "broker1:9092,broker2:9092"}'

# librdkafka -> kafka-python, integer options copied as they are.
_KP_INT_OPTIONS = {
    "reconnect.backoff.ms": "reconnect_backoff_ms",
    "reconnect.backoff.max.ms": "reconnect_backoff_max_ms",
    "retry.backoff.ms": "retry_backoff_ms",
    "metadata.max.age.ms": "metadata_max_age_ms",
    "connections.max.idle.ms": "connections_max_idle_ms",
    "max.in.flight.requests.per.connection": "max_in_flight_requests_per_connection",
    "max.in.flight": "max_in_flight_requests_per_connection",
    "receive.message.max.bytes": "receive_message_max_bytes",
    "socket.send.buffer.bytes": "send_buffer_bytes",
    "socket.receive.buffer.bytes": "receive_buffer_bytes",
}
# librdkafka -> kafka-python, string options copied as they are.
_KP_STR_OPTIONS = {
    "client.id": "client_id",
    "client.dns.lookup": "client_dns_lookup",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
}
# Handled specially by to_kafka_python.
_KP_SPECIAL = frozenset(
    {
        _BOOTSTRAP,
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "ssl.ca.location",
        "ssl.endpoint.identification.algorithm",
        "enable.ssl.certificate.verification",
        "socket.timeout.ms",
    }
)
_SECURITY_WORDS = ("ssl", "sasl", "oauth", "kerberos")


def is_secret_key(key: str) -> bool:
    """Whether the value of config key ``key`` is a secret (see :func:`redact`)."""
    k = key.lower()
    return k in SECRET_KEYS or any(word in k for word in _SECRET_WORDS)


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with every secret value replaced by ``***``.

    Works on librdkafka dicts and kafka-python kwargs alike; use it wherever a config is
    logged, shown or put in an error message. Example::

        >>> redact({"bootstrap.servers": "b1:9092", "sasl.password": "hunter2",
        ...         "sasl_plain_password": "hunter2"})
        {'bootstrap.servers': 'b1:9092', 'sasl.password': '***', 'sasl_plain_password': '***'}
    """
    return {k: (REDACTED if is_secret_key(str(k)) else v) for k, v in config.items()}


def _where(conn_id: str | None) -> str:
    return f"Kafka connection {conn_id!r}" if conn_id else "Kafka client config"


def _as_str(key: str, value: Any, where: str) -> str:
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    shown = REDACTED if is_secret_key(key) else repr(value)
    raise ConfigurationError(
        f"{where}: {key!r} has the value {shown} ({type(value).__name__}); librdkafka "
        "options are strings, numbers or booleans. Set it to a plain value (for lists, a "
        "comma-separated string) or remove it from the connection's extra"
    )


def validate_client_config(
    config: Mapping[str, Any], *, conn_id: str | None = None
) -> dict[str, str]:
    """Check the librdkafka config dict of a ``kafka`` connection; return it with string values.

    ``security.protocol`` and the SASL mechanism are upper-cased (librdkafka reads the
    protocol in any case but the mechanism only in upper case); booleans become
    ``"true"``/``"false"`` and numbers strings. Callback options (``error_cb`` ...) are left
    out: this provider builds its own clients and does not resolve them, and ``oauth_cb``
    (OAUTHBEARER) is refused. ``conn_id`` only names the connection in error messages.

    Raises :class:`ConfigurationError` naming the problem and the fix. Example::

        >>> validate_client_config({"bootstrap.servers": "b1:9092", "security.protocol": "ssl"})
        {'bootstrap.servers': 'b1:9092', 'security.protocol': 'SSL'}
        >>> validate_client_config({"security.protocol": "SSL"}, conn_id="kafka_prod")
        Traceback (most recent call last):
        ...
        airflow_kafka_reassign.exceptions.ConfigurationError: Kafka connection 'kafka_prod' has ...
    """
    where = _where(conn_id)
    if not isinstance(config, Mapping):
        raise ConfigurationError(
            f"{where}: the config must be a JSON object (librdkafka config dict) such as "
            f"{_EXTRA_EXAMPLE}; got {type(config).__name__}"
        )

    out: dict[str, str] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise ConfigurationError(f"{where}: config keys must be strings; got {key!r}")
        if key == "oauth_cb":
            raise ConfigurationError(
                f"{where}: 'oauth_cb' (SASL/OAUTHBEARER) is not supported by this provider; "
                f"use sasl.mechanism {' / '.join(SUPPORTED_SASL_MECHANISMS)} with "
                "sasl.username and sasl.password"
            )
        if key in CALLBACK_KEYS:
            continue
        if value is None:
            raise ConfigurationError(
                f"{where}: {key!r} is null; give it a value or remove it from the "
                "connection's extra"
            )
        out[key] = _as_str(key, value, where)

    if not out.get(_BOOTSTRAP, "").strip():
        hint = (
            " (metadata.broker.list is set, but this provider reads only bootstrap.servers)"
            if out.get("metadata.broker.list")
            else ""
        )
        raise ConfigurationError(
            f"{where} has no {_BOOTSTRAP}{hint}: set \"{_BOOTSTRAP}\" in the connection's "
            f"extra (its librdkafka config dict) to a comma-separated host:port list, for "
            f"example {_EXTRA_EXAMPLE}"
        )
    out[_BOOTSTRAP] = out[_BOOTSTRAP].strip()

    protocol = out.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SUPPORTED_SECURITY_PROTOCOLS:
        raise ConfigurationError(
            f"{where}: security.protocol {out['security.protocol']!r} is not supported; set "
            f"it to one of {', '.join(SUPPORTED_SECURITY_PROTOCOLS)}"
        )
    if "security.protocol" in out:
        out["security.protocol"] = protocol

    mechanism_keys = [k for k in ("sasl.mechanism", "sasl.mechanisms") if k in out]
    mechanisms = {out[k].strip().upper() for k in mechanism_keys}
    if len(mechanisms) > 1:
        raise ConfigurationError(
            f"{where}: sasl.mechanism ({out['sasl.mechanism']!r}) and sasl.mechanisms "
            f"({out['sasl.mechanisms']!r}) disagree; they are aliases: keep one"
        )
    mechanism = mechanisms.pop() if mechanisms else None
    if mechanism is not None and mechanism not in SUPPORTED_SASL_MECHANISMS:
        raise ConfigurationError(
            f"{where}: SASL mechanism {mechanism!r} is not supported by this provider; set "
            f"sasl.mechanism to one of {', '.join(SUPPORTED_SASL_MECHANISMS)} (with "
            "sasl.username and sasl.password)"
        )
    for k in mechanism_keys:
        out[k] = mechanism or ""
    if protocol.startswith("SASL_"):
        if mechanism is None:
            raise ConfigurationError(
                f"{where}: security.protocol is {protocol} but no sasl.mechanism is set "
                "(librdkafka would default to GSSAPI, which this provider does not support); "
                f"set sasl.mechanism to one of {', '.join(SUPPORTED_SASL_MECHANISMS)}"
            )
        missing = [k for k in ("sasl.username", "sasl.password") if not out.get(k)]
        if missing:
            raise ConfigurationError(
                f"{where}: SASL {mechanism} needs {' and '.join(missing)}; set "
                f"{' and '.join(missing)} in the connection's extra"
            )
    return out


def _timeout_ms(timeout_s: float) -> int:
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not math.isfinite(timeout_s)
        or timeout_s <= 0
    ):
        raise ConfigurationError(
            f"timeout_s must be a positive number of seconds; got {timeout_s!r}"
        )
    return max(1, int(round(timeout_s * 1000)))


def _int_option(cfg: Mapping[str, str], key: str, where: str) -> int:
    try:
        return int(cfg[key].strip())
    except ValueError:
        raise ConfigurationError(
            f"{where}: {key} must be an integer; got {cfg[key]!r}"
        ) from None


def _is_security_key(key: str) -> bool:
    k = key.lower()
    return any(word in k for word in _SECURITY_WORDS)


def _in_effect(key: str, protocol: str) -> bool:
    """Whether librdkafka uses security option ``key`` under ``protocol``.

    ``ssl``-options matter with SSL/SASL_SSL, SASL (and OAuth, Kerberos) options with
    SASL_*; librdkafka ignores the others, so the translation may too.
    """
    k = key.lower()
    if "ssl" in k and protocol in ("SSL", "SASL_SSL"):
        return True
    return protocol.startswith("SASL_") and any(w in k for w in ("sasl", "oauth", "kerberos"))


def to_kafka_python(
    config: Mapping[str, Any], *, timeout_s: float, conn_id: str | None = None
) -> dict[str, Any]:
    """Keyword arguments for kafka-python 3.0's ``KafkaAdminClient(**kwargs)``.

    Translated: ``bootstrap.servers``, ``client.id``, ``client.dns.lookup``,
    ``security.protocol``, ``sasl.mechanism(s)``/``sasl.username``/``sasl.password``,
    ``ssl.ca.location`` (``probe`` = the system's CAs), ``ssl.certificate.location``,
    ``ssl.key.location``, ``ssl.key.password``, ``ssl.crl.location``,
    ``ssl.endpoint.identification.algorithm`` (``none`` turns hostname checking off), and a
    few socket/backoff numbers. ``bootstrap_timeout_ms`` (the first metadata fetch, made in
    the constructor) and ``request_timeout_ms`` come from ``timeout_s``; a
    ``socket.timeout.ms`` in the config wins for ``request_timeout_ms``.

    Other options are ignored, except security ones that are in effect for the protocol
    (keys mentioning ssl with SSL/SASL_SSL; sasl, oauth or kerberos with SASL_*: inline PEM,
    keystores, cipher lists, ``enable.ssl.certificate.verification=false`` ...), which raise
    :class:`ConfigurationError` rather than connecting differently from librdkafka.
    kafka-python 3.0's admin client has no ``api_version_auto_timeout_ms`` or
    ``socket_connection_setup_timeout_ms`` argument (it rejects unknown kwargs): the
    bootstrap timeout bounds both. Example::

        >>> kw = to_kafka_python({"bootstrap.servers": "b1:9093", "security.protocol": "SSL",
        ...                       "ssl.ca.location": "/etc/kafka/ca.pem"}, timeout_s=5)
        >>> kw["ssl_cafile"], kw["ssl_check_hostname"], kw["request_timeout_ms"]
        ('/etc/kafka/ca.pem', True, 5000)
    """
    where = _where(conn_id)
    timeout_ms = _timeout_ms(timeout_s)
    cfg = validate_client_config(config, conn_id=conn_id)
    protocol = cfg.get("security.protocol", "PLAINTEXT")
    uses_ssl = protocol in ("SSL", "SASL_SSL")

    kwargs: dict[str, Any] = {
        "bootstrap_servers": [h.strip() for h in cfg[_BOOTSTRAP].split(",") if h.strip()],
        "security_protocol": protocol,
        "request_timeout_ms": timeout_ms,
        "bootstrap_timeout_ms": timeout_ms,
        "ssl_check_hostname": True,
    }
    if "socket.timeout.ms" in cfg:
        kwargs["request_timeout_ms"] = _int_option(cfg, "socket.timeout.ms", where)
    if protocol.startswith("SASL_"):
        kwargs["sasl_mechanism"] = cfg.get("sasl.mechanism") or cfg["sasl.mechanisms"]

    untranslatable: list[str] = []
    for key, value in cfg.items():
        if key in _KP_STR_OPTIONS:
            if key.startswith("sasl.") and not protocol.startswith("SASL_"):
                continue  # librdkafka ignores SASL credentials without a SASL protocol
            kwargs[_KP_STR_OPTIONS[key]] = value
        elif key in _KP_INT_OPTIONS:
            number = _int_option(cfg, key, where)
            if key.startswith("socket.") and key.endswith(".buffer.bytes") and number == 0:
                continue  # librdkafka: 0 = the system default, which is kafka-python's None
            kwargs[_KP_INT_OPTIONS[key]] = number
        elif key == "ssl.ca.location":
            if value.strip().lower() != "probe":  # probe: the system's CA store
                kwargs["ssl_cafile"] = value
        elif key == "ssl.endpoint.identification.algorithm":
            algorithm = value.strip().lower()
            if algorithm not in ("none", "https"):
                raise ConfigurationError(
                    f"{where}: ssl.endpoint.identification.algorithm {value!r} is not "
                    "supported; use \"https\" (check the broker's hostname, the default) or "
                    "\"none\""
                )
            kwargs["ssl_check_hostname"] = algorithm == "https"
        elif key == "enable.ssl.certificate.verification":
            if uses_ssl and value.strip().lower() in ("false", "0", "f", "no", "n", "off"):
                raise ConfigurationError(
                    f"{where}: enable.ssl.certificate.verification=false cannot be carried over "
                    "to the second Kafka client (kafka-python), which always verifies the "
                    "broker's certificate; set ssl.ca.location to the CA that signed the "
                    "brokers' certificates and remove enable.ssl.certificate.verification"
                )
        elif key in _KP_SPECIAL:
            continue
        elif _is_security_key(key) and _in_effect(key, protocol):
            untranslatable.append(key)
    if untranslatable:
        raise ConfigurationError(
            f"{where}: security option(s) {', '.join(sorted(untranslatable))} cannot be "
            "translated for kafka-python, which this provider needs for partition "
            "reassignments; refusing to connect without them. Supported: "
            f"{', '.join(sorted(k for k in _KP_STR_OPTIONS if _is_security_key(k)))}, "
            "ssl.ca.location, ssl.endpoint.identification.algorithm, sasl.mechanism. Use file "
            "locations instead of inline PEM/keystores, or remove the option(s)"
        )
    if "ssl_keyfile" in kwargs and "ssl_certfile" not in kwargs and uses_ssl:
        raise ConfigurationError(
            f"{where}: ssl.key.location is set without ssl.certificate.location; set "
            "ssl.certificate.location to the client certificate that goes with the key"
        )
    return kwargs


def to_confluent(
    config: Mapping[str, Any], *, timeout_s: float, conn_id: str | None = None
) -> dict[str, str]:
    """The librdkafka config for confluent-kafka's ``AdminClient``, with timeouts added.

    ``socket.timeout.ms``, ``socket.connection.setup.timeout.ms`` and
    ``api.version.request.timeout.ms`` are set from ``timeout_s`` (clamped to librdkafka's
    allowed ranges) unless the config already sets them. Consumer-only options such as
    ``group.id`` (:data:`CLIENT_ROLE_ONLY_KEYS`) are left out. Example::

        >>> conf = to_confluent({"bootstrap.servers": "b1:9092", "group.id": "g"}, timeout_s=5)
        >>> "group.id" in conf, conf["socket.timeout.ms"], conf["socket.connection.setup.timeout.ms"]
        (False, '5000', '5000')
    """
    timeout_ms = _timeout_ms(timeout_s)
    cfg = validate_client_config(config, conn_id=conn_id)
    out = {k: v for k, v in cfg.items() if k not in CLIENT_ROLE_ONLY_KEYS}
    clamp: dict[str, Callable[[int], int]] = {
        "socket.timeout.ms": lambda ms: min(max(ms, 10), 300_000),
        "socket.connection.setup.timeout.ms": lambda ms: max(ms, 1000),
        "api.version.request.timeout.ms": lambda ms: min(max(ms, 1), 300_000),
    }
    for key, fit in clamp.items():
        out.setdefault(key, str(fit(timeout_ms)))
    return out
