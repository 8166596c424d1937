"""The adapter's clients and their error translation, shared by every protocol area of
:class:`~airflow_kafka_reassign.kafka.admin.KafkaClusterAdmin`.

:class:`AdminClients` holds the two clients made from one librdkafka config dict: confluent-kafka's
``AdminClient`` (librdkafka) and kafka-python's ``KafkaAdminClient`` (the calls librdkafka lacks), each
made when first needed; the waits on their answers under the adapter's timeout; the fail-over to a
live broker when the one they routed a request to as "controller" stopped (a broker killed under a held
client: :meth:`AdminClients._on_fresh_controller`); and the translation of their
errors into the project's own (:mod:`airflow_kafka_reassign.exceptions`). It also quiets the two
libraries' logs (one error that names the cause instead of a line per broker and retry; no secret).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from kafka import errors as kp_errors
from kafka.admin import KafkaAdminClient
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_incrementing

from airflow_kafka_reassign.exceptions import (
    BrokerUnreachableError,
    ClusterAccessError,
    ClusterOperationError,
    ClusterUnreachableError,
    KafkaReassignError,
    TopicNotFoundError,
    UnsupportedBrokerError,
)
from airflow_kafka_reassign.kafka.acl import Refused
from airflow_kafka_reassign.kafka.config import is_secret_key, to_confluent, to_kafka_python, validate_client_config

#: The adapter's logger; every protocol area logs to a child of it (``...kafka.admin.<area>``).
ADAPTER_LOGGER_NAME = "airflow_kafka_reassign.kafka.admin"
log = logging.getLogger(__name__)
_T = TypeVar("_T")
_K = TypeVar("_K")
_Self = TypeVar("_Self", bound="AdminClients")
_STALE_NODE_ERRORS = (kp_errors.UnknownBrokerIdError, kp_errors.NodeNotReadyError, kp_errors.KafkaConnectionError)
#: Tries of a call routed to kafka-python's "controller" with a fresh client each (about 5 s in all).
FRESH_CONTROLLER_ATTEMPTS = 5
#: How long the broker a client names as its "controller" may take to accept a TCP connection before the adapter
#: asks the cluster for another one (:meth:`AdminClients._live_controller`): a killed broker refuses at once.
CONTROLLER_PROBE_S = 1.0
#: Pause between two metadata reads while every broker named as "controller" was found gone.
CONTROLLER_RELEARN_S = 0.2
#: How long a request waiting for an answer may spend re-learning a live "controller" after a broker connection
#: failed (:meth:`AdminClients._answer`).
CONTROLLER_REROUTE_S = 5.0
#: A request unanswered this long makes the adapter check that librdkafka's "controller" is a live broker (a
#: killed one is named by the metadata until the cluster fences it), and again as often while it waits.
CONTROLLER_CHECK_S = 3.0


class _NoClientConfigRecords(logging.Filter):
    """kafka-python logs its whole configuration, SASL password included, at DEBUG when an
    admin client starts: that record is dropped so no secret reaches a log, at any level."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Starting KafkaAdminClient with configuration")


logging.getLogger("kafka.admin.client").addFilter(_NoClientConfigRecords())

# kafka-python logs every connection, SASL handshake, metadata refresh and disconnect at INFO: some thirty
# lines per client in every task log. Its warnings and errors still show; a user who configures the "kafka"
# logger's level explicitly keeps that level.
if logging.getLogger("kafka").level == logging.NOTSET:
    logging.getLogger("kafka").setLevel(logging.WARNING)

class _DemotedLogger(logging.Logger):
    """A Python logger for a client library's own lines that lowers their errors (and, with ``warnings``,
    warnings) to DEBUG: a refused connection is logged by librdkafka and kafka-python once per broker and
    retry, hundreds of lines for an unreachable cluster, while the adapter raises ONE error that names the
    cause (the bootstrap servers, the user and mechanism) and the fix. ``logging.getLogger(name).setLevel
    (logging.DEBUG)`` shows them."""

    def __init__(self, name: str, *, warnings: bool = False) -> None:
        super().__init__(name)
        self._floor = logging.WARNING if warnings else logging.ERROR

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        super().log(logging.DEBUG if level >= self._floor else level, msg, *args, **kwargs)


#: librdkafka's log lines (confluent-kafka's ``logger``), served when the adapter polls the client: its
#: errors (a refused connection, a failed handshake, per broker and retry) at DEBUG, the rest as they come.
LIBRDKAFKA_LOGGER = _DemotedLogger(f"{ADAPTER_LOGGER_NAME}.librdkafka")
LIBRDKAFKA_LOGGER.parent = logging.getLogger(ADAPTER_LOGGER_NAME)


class _DemoteConnectionRecords(logging.Filter):
    """kafka-python logs every failed connection attempt at WARNING and ERROR (``Connection failed``,
    ``Connection lost``, ``Bootstrap connection ... failed``), per broker and retry: those records go to
    DEBUG (dropped unless the ``kafka`` logger is at DEBUG); the adapter's error says what failed."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger("kafka").isEnabledFor(logging.DEBUG)
        return True


class _OnlyOnce(logging.Filter):
    """The first record of each message passes; its repeats go to DEBUG (kafka-python warns "Exchanging
    credentials in the clear" on every SASL_PLAINTEXT connection attempt: once is enough)."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg) not in self._seen:
            self._seen.add(str(record.msg))
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger("kafka").isEnabledFor(logging.DEBUG)


for _name in ("kafka.net.connection", "kafka.net.manager", "kafka.net.transport", "kafka.conn", "kafka.client_async"):
    logging.getLogger(_name).addFilter(_DemoteConnectionRecords())
for _name in ("kafka.net.sasl.scram", "kafka.net.sasl.plain"):
    logging.getLogger(_name).addFilter(_OnlyOnce())

#: How long a look at the cluster through librdkafka may take when it is only asked whether the cluster
#: refuses this client (authentication, authorization, TLS): a refusal shows within about a second.
ACCESS_PROBE_S = 3.0

#: librdkafka's error codes that mean the cluster answered and refused this client, by cause.
_ACCESS_CODES = {
    KafkaError._AUTHENTICATION: "authentication",
    KafkaError.SASL_AUTHENTICATION_FAILED: "authentication",
    KafkaError._SSL: "tls",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "authorization",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "authorization",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "authorization",
}



def accepts_connections(host: str, port: int, timeout_s: float = CONTROLLER_PROBE_S) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout_s`` (closed at once, nothing sent): a broker
    killed or stopped refuses, a live one's kernel accepts even while its JVM is busy."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _broker_lost(e: BaseException) -> bool:
    """librdkafka's two ways of saying the broker it routed a request to is gone: the request failed on that
    broker's connection (``_TRANSPORT``, "Broker transport failure"), or it timed out "waiting for controller"
    (the broker it keeps as "controller" never came up again)."""
    err = e.args[0] if isinstance(e, KafkaException) and e.args else None
    return isinstance(err, KafkaError) and (err.code() == KafkaError._TRANSPORT
                                             or "waiting for controller" in err.str())


def _error_name(err: Any) -> str:
    if isinstance(err, KafkaError):
        return err.name()
    if isinstance(err, type) and issubclass(err, kp_errors.KafkaError):
        return getattr(err, "message", err.__name__)
    return type(err).__name__


#: librdkafka's error codes that mean the cluster did not answer (the adapter raises ClusterUnreachableError).
_UNREACHABLE_CODES = (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN)
#: kafka-python's errors that mean the cluster (or the broker a request went to) did not answer.
_UNREACHABLE_KP = (kp_errors.KafkaTimeoutError, kp_errors.KafkaConnectionError, kp_errors.NodeNotReadyError,
                   kp_errors.UnknownBrokerIdError, kp_errors.MetadataEmptyBrokerList)
#: librdkafka's names that are not Kafka's own (the adapter's errors carry Kafka's, as the brokers send them).
_KAFKA_NAMES = {"UNKNOWN_TOPIC_OR_PART": "UNKNOWN_TOPIC_OR_PARTITION"}
#: The client libraries' exceptions, which never leave the adapter as they are.
CLIENT_ERRORS = (KafkaException, kp_errors.KafkaError)


def _translating(method: Callable[..., _T]) -> Callable[..., _T]:
    """``method`` with any client error that escapes it translated (:meth:`AdminClients._translate`)."""

    @functools.wraps(method)
    def translated(self: AdminClients, *args: Any, **kwargs: Any) -> _T:
        try:
            return method(self, *args, **kwargs)
        except CLIENT_ERRORS as e:
            raise self._translate(e, call=method.__name__) from e

    translated.__translated__ = True  # type: ignore[attr-defined]
    return translated


class SafeKafkaAdminClient(KafkaAdminClient):  # type: ignore[misc]
    """kafka-python's admin client, minus a leak: its constructor starts the IO thread before
    it bootstraps and leaves it running (retrying the connection and logging every failure,
    for the life of the process) when the bootstrap fails. This one stops it and re-raises."""

    def __init__(self, **configs: Any) -> None:
        try:
            super().__init__(**configs)
        except BaseException:
            # what close() does, for the parts the constructor got to (a missing one: AttributeError)
            for part, method in (("_metrics", "close"), ("_client", "close"), ("_net", "stop")):
                with contextlib.suppress(Exception):
                    getattr(getattr(self, part), method)()
            raise


class AdminClients:
    """The clients of one :class:`~airflow_kafka_reassign.kafka.admin.KafkaClusterAdmin`, the waits on
    their answers and the translation of their errors; each protocol area is a mixin over it.

    ``timeout_s`` bounds every request; an unreachable cluster raises
    :class:`~airflow_kafka_reassign.exceptions.ClusterUnreachableError` naming the
    bootstrap servers within about that time, never hangs.
    """

    def __init__(self, config: Mapping[str, Any], *, timeout_s: float = 30.0) -> None:
        self._config = validate_client_config(config)
        self._timeout_s = float(timeout_s)
        self._bootstrap = self._config["bootstrap.servers"]
        self._ck: AdminClient | None = None
        #: a request of this client was answered once: a later "waiting for controller" is a broker that stopped
        self._answered = False
        self._kp: KafkaAdminClient | None = None
        self._kp_lock = threading.Lock()
        self._last_alter_version: int | None = None
        self._sizes_warned: set[int] = set()
        self._sizes_skipped: set[int] = set()
        self._no_space_warned: set[int] = set()
        self._quorum_warned = False
        self._barrier_warned: set[int] = set()
        #: errors librdkafka reported through ``error_cb`` (served by ``poll``): an authentication or TLS
        #: failure shows here within a second, long before any request times out
        self._ck_errors: list[KafkaError] = []
        self._access_probed = False

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._kp_lock:
            kp, self._kp = self._kp, None
        if kp is not None:
            kp.close()
        self._ck = None

    @property
    def bootstrap_servers(self) -> str:
        return self._bootstrap

    def _confluent(self) -> AdminClient:
        if self._ck is None:
            conf: dict[str, Any] = {**to_confluent(self._config, timeout_s=self._timeout_s),
                                    "error_cb": self._ck_errors.append}
            self._ck = AdminClient(conf, logger=LIBRDKAFKA_LOGGER)
        return self._ck

    def _access_error(self, cause: str, detail: str, refused: Refused | None = None) -> ClusterAccessError:
        """The one error for a client the cluster refused: what failed, for whom, and the fix; no secret.
        ``refused``: the ACL an authorization failure lacked (operation, resource, request, grant)."""
        for key, value in self._config.items():  # the brokers' text should hold none; make sure
            if is_secret_key(key) and value:
                detail = detail.replace(value, "***")
        where = f"bootstrap.servers={self._bootstrap}"
        protocol = self._config.get("security.protocol", "PLAINTEXT")
        if cause == "authentication":
            user = self._config.get("sasl.username", "(none)")
            mechanism = self._config.get("sasl.mechanism") or self._config.get("sasl.mechanisms") or "(none)"
            return ClusterAccessError(
                f"authentication failed for user {user!r} with mechanism {mechanism} at {where} ({protocol}): "
                f"{detail}. Check sasl.username and sasl.password (and sasl.mechanism) in the connection's extra; "
                "retrying with the same credentials cannot succeed", cause)
        if cause == "authorization":
            name = self._config.get("sasl.username")
            user = f"user {name!r}" if name else "the client's principal"
            detail = detail.rstrip(". ")
            needs = ("the provider needs DESCRIBE and ALTER on the cluster, DESCRIBE and DESCRIBE_CONFIGS on the "
                     "topics, ALTER_CONFIGS on the cluster and the topics for throttles")
            if refused is None:
                return ClusterAccessError(
                    f"authorization failed for {user} at {where}: {detail}. Grant the principal the ACLs the "
                    f"provider needs ({needs.removeprefix('the provider needs ')}) or use a connection whose user "
                    "has them", cause)
            principal = f"User:{name}" if name else "<the client's principal>"
            return ClusterAccessError(
                f"authorization failed for {user} at {where}: {refused.operation} on {refused.resource} was "
                f"refused ({refused.request}: {detail}); this request changed nothing (a run restores the "
                f"throttles it set before it from its backup; CancelReassignmentOperator does so too). Grant it: "
                f"kafka-acls.sh --add --allow-principal {principal} {refused.grant} (or use a connection whose "
                f"user has it; {needs})", cause)
        reason = next((r for r in ("certificate verify failed", "wrong version number", "unexpected eof",
                                   "handshake failure") if r in detail.lower()), "")
        return ClusterAccessError(
            f"TLS handshake failed with {where} over {protocol}{f' ({reason})' if reason else ''}: {detail}. "
            "Check ssl.ca.location (the CA that signed the brokers' certificates), the client certificate and "
            "key, and that the listener speaks TLS", cause)

    def _refused(self) -> ClusterAccessError | None:
        """An authentication, authorization or TLS failure librdkafka reported (after serving its queue)."""
        if self._ck is not None:
            self._ck.poll(0)
        for err in self._ck_errors:
            cause = _ACCESS_CODES.get(err.code())
            if cause is not None:
                return self._access_error(cause, err.str())
        return None

    def _diagnose(self, e: BaseException) -> ClusterAccessError | ClusterUnreachableError:
        """Why kafka-python could not bootstrap. kafka-python sees a broker that refuses the SASL
        credentials as a closed connection; librdkafka names the cause: ask it with a short request."""
        if isinstance(e, kp_errors.SaslAuthenticationFailedError):
            return self._access_error("authentication", str(e))
        if isinstance(e, kp_errors.AuthorizationError):
            return self._access_error("authorization", str(e))
        return self._probe_access() or self._unreachable(e)

    def _probe_access(self) -> ClusterAccessError | None:
        """Whether librdkafka sees the cluster refuse this client, from one short DescribeCluster
        (a refusal shows within a second; an unreachable cluster costs :data:`ACCESS_PROBE_S`)."""
        budget = min(self._timeout_s, ACCESS_PROBE_S)
        try:
            self._wait(self._confluent().describe_cluster(request_timeout=budget), timeout_s=budget)
        except ClusterAccessError as refused:
            return refused
        except Exception:  # noqa: BLE001 (not a refusal: the caller's own error says what happened)
            return None
        return None

    def _kafka_python(self) -> KafkaAdminClient:
        with self._kp_lock:  # two threads must not both create one (the loser's IO thread would leak)
            if self._kp is None:
                if self._config.get("security.protocol", "PLAINTEXT") != "PLAINTEXT" and not self._access_probed:
                    # kafka-python sees refused SASL credentials only as closed connections, until its bootstrap
                    # times out: ask librdkafka first, which names the cause within a second
                    self._access_probed = True
                    refused = self._probe_access()
                    if refused is not None:
                        raise refused
                try:
                    self._kp = SafeKafkaAdminClient(**to_kafka_python(self._config, timeout_s=self._timeout_s))
                except (kp_errors.KafkaConnectionError, kp_errors.KafkaTimeoutError,  # 3.0: no bootstrap
                        kp_errors.SaslAuthenticationFailedError, kp_errors.AuthorizationError) as e:
                    raise self._diagnose(e) from None
            return self._kp

    def _with_fresh_controller(self, call: Callable[[KafkaAdminClient], _T]) -> _T:
        """``call(kafka-python client)``, tried again on a new client when the broker it routes
        to is gone. kafka-python keeps the "controller" id it learned first (in KRaft a broker
        that forwards to the quorum); when that broker stops (a rolling restart, a decommission)
        every later request fails with UnknownBrokerIdError. The calls wrapped here (list, alter
        to the same targets, cancel) are safe to repeat.

        In KRaft the metadata names a random live broker as "controller": one that was just killed
        stays listed until its session times out, so a fresh client may pick it again. Up to
        :data:`FRESH_CONTROLLER_ATTEMPTS` tries, 0, 0.5, 1, 1.5 s apart, reach another one, each fresh client
        routed to a "controller" that accepts connections (:meth:`_pin_live_controller`); the last try's error is
        raised as it is."""
        tried: list[KafkaAdminClient] = []

        def attempt() -> _T:
            retry = bool(tried)
            tried.append(client := self._kafka_python())
            if retry:
                self._pin_live_controller(client)
            return call(client)

        def drop_client(state: RetryCallState) -> None:
            e = state.outcome.exception() if state.outcome is not None else None
            log.info("broker routing of the admin client is stale (%s: %s); retrying with fresh metadata",
                     type(e).__name__, e)
            client = tried[-1]
            with self._kp_lock:
                if self._kp is client:  # not one another thread has made fresh meanwhile
                    self._kp = None
            with contextlib.suppress(Exception):  # closing a client whose broker is gone
                client.close()

        retrying = Retrying(
            retry=retry_if_exception_type(_STALE_NODE_ERRORS),
            stop=stop_after_attempt(FRESH_CONTROLLER_ATTEMPTS),
            wait=wait_incrementing(start=0, increment=0.5),
            before_sleep=drop_client,
            reraise=True,
        )
        return retrying(attempt)

    def _pin_live_controller(self, kp: KafkaAdminClient) -> None:
        """kafka-python's "controller" of the fresh client ``kp`` (which it would learn from the first Metadata
        answer: in KRaft a random live broker, possibly one just killed and not fenced yet), asked again until the
        broker named accepts a TCP connection (:func:`accepts_connections`), up to
        :data:`FRESH_CONTROLLER_ATTEMPTS` times; the last one named is kept either way."""
        timeout_ms = int(self._timeout_s * 1000)
        for n in range(FRESH_CONTROLLER_ATTEMPTS):
            controller = kp._manager.run(kp._refresh_controller_id, timeout_ms)
            kp._controller_id = controller
            broker = kp._manager.cluster.broker_metadata(controller)
            if broker is not None and accepts_connections(broker.host, broker.port):
                return
            if n + 1 < FRESH_CONTROLLER_ATTEMPTS:
                time.sleep(CONTROLLER_RELEARN_S)

    @contextlib.contextmanager
    def _authorized(self, refused: Refused) -> Iterator[None]:
        """kafka-python's authorization errors (the broker's answer to a request the principal has no ACL
        for) as :class:`ClusterAccessError` naming the ACL ``refused``: no retry can fix them."""
        try:
            yield
        except kp_errors.AuthorizationError as e:
            raise self._access_error("authorization", getattr(e, "message", None) or type(e).__name__,
                                     refused) from None

    def _unreachable(self, e: BaseException) -> ClusterUnreachableError:
        last = next((err.str() for err in reversed(self._ck_errors)), None)
        seen = f"; last error: {last}" if last else ""
        return ClusterUnreachableError(
            f"Kafka cluster at bootstrap.servers={self._bootstrap} did not answer within "
            f"{self._timeout_s:g} s ({type(e).__name__}: {e}{seen}); check the address (host:port of the "
            "brokers' listener), the listener's security.protocol, and that the brokers are up",
            broker_lost=_broker_lost(e),
        )

    def _answer(self, future: Future[Any], *, timeout_s: float | None = None, needs: Refused | None = None) -> Any:
        """A confluent-kafka future's result, or its per-resource error as librdkafka's ``KafkaException``,
        for the calls that report such errors as results (CreatePartitions per topic). While waiting,
        librdkafka's queue is served (its log lines and errors): an authentication, authorization or TLS
        failure raises :class:`~airflow_kafka_reassign.exceptions.ClusterAccessError` at once, naming the
        cause; no answer within the timeout raises :class:`ClusterUnreachableError` naming the bootstrap
        servers (both through :meth:`_translate`). ``needs`` names the ACL the request needs, for an
        authorization failure's message.

        The broker librdkafka waits for as "controller" may be dead (killed, and still named by the metadata
        until the cluster fences it): on a client the cluster answered before, when a broker connection fails
        meanwhile (librdkafka's ``error_cb``: "Connect to ... failed"), and every :data:`CONTROLLER_CHECK_S` of
        waiting, the metadata is read again until it names a live broker (:meth:`_live_controller`), which wakes
        a request waiting for its controller towards that one, instead of waiting for the dead broker until it
        times out. A request already sent is not touched."""
        deadline = time.monotonic() + (self._timeout_s + 5 if timeout_s is None else timeout_s)
        seen = len(self._ck_errors)
        check_at = time.monotonic() + CONTROLLER_CHECK_S
        try:
            while True:
                refused = self._refused()
                if refused is not None:
                    future.cancel()
                    raise refused
                try:
                    result = future.result(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
                    self._answered = True
                    return result
                except FutureTimeoutError:  # not the built-in TimeoutError on Python 3.10 (an alias since 3.11)
                    if time.monotonic() >= deadline:
                        raise
                failed = [e for e in self._ck_errors[seen:] if e.code() == KafkaError._TRANSPORT]
                seen = len(self._ck_errors)
                if self._answered and (failed or time.monotonic() >= check_at):
                    if failed:
                        log.info("a broker connection failed while waiting (%s); making sure requests are routed to "
                                 "a live broker", failed[-1].str())
                    with contextlib.suppress(KafkaException):  # the request's own answer or timeout says the rest
                        self._live_controller(min(deadline, time.monotonic() + CONTROLLER_REROUTE_S))
                    check_at = time.monotonic() + CONTROLLER_CHECK_S
        except FutureTimeoutError as e:
            raise self._unreachable(e) from None
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if isinstance(err, KafkaError) and (err.code() in _ACCESS_CODES or err.code() in _UNREACHABLE_CODES):
                raise self._translate(e, needs=needs) from None
            raise

    def _wait(self, future: Future[Any], *, timeout_s: float | None = None, needs: Refused | None = None,
              resource: str = "") -> Any:
        """A confluent-kafka future's result (:meth:`_answer`); any error as the project's own, naming
        ``resource`` (``"topic orders"``, ``"broker 2"``; a vanished topic: :class:`TopicNotFoundError`)."""
        try:
            return self._answer(future, timeout_s=timeout_s, needs=needs)
        except KafkaException as e:
            raise self._translate(e, needs=needs, resource=resource) from e

    def _wait_each(self, futures: Mapping[_K, tuple[Future[Any], Refused]], *, kind: str = "") -> dict[_K, Any]:
        """The results of requests sent together (one per broker: librdkafka takes a single broker resource per
        config request; or one per topic), waited for under one deadline: N brokers cost one round trip, not N.
        Every future is waited for before the first failure is raised, so none is left in flight unseen;
        ``kind``: what the keys are (``"broker"``, ``"topic"``), to name the resource that failed. Topics that no
        longer exist are named together in one :class:`TopicNotFoundError` (raised when nothing else failed); brokers
        that did not answer a request of their own (``kind="broker"``) in one :class:`BrokerUnreachableError`."""
        deadline = time.monotonic() + self._timeout_s + 5
        results: dict[_K, Any] = {}
        failure: BaseException | None = None
        vanished: list[TopicNotFoundError] = []
        silent: list[tuple[int, ClusterUnreachableError]] = []
        for key, (future, needs) in futures.items():
            try:
                results[key] = self._wait(future, timeout_s=max(0.0, deadline - time.monotonic()), needs=needs,
                                          resource=f"{kind} {key}" if kind else "")
            except TopicNotFoundError as e:
                vanished.append(e)
            except ClusterUnreachableError as e:
                if kind == "broker" and isinstance(key, int):
                    silent.append((key, e))
                else:
                    failure = failure or e
            except Exception as e:  # noqa: BLE001 (raised below, after the others were waited for)
                failure = failure or e
        if failure is not None:
            raise failure
        if silent:
            ids = sorted(b for b, _ in silent)
            raise BrokerUnreachableError(
                f"broker(s) {ids} did not answer a request of their own within {self._timeout_s:g} s (down, or not "
                f"reachable from here; a broker killed stays listed alive until the cluster notices): {silent[0][1]}",
                brokers=ids)
        if vanished:
            raise vanished[0] if len(vanished) == 1 else self._topics_not_found(
                [t for e in vanished for t in e.topics], call=vanished[0].call, detail=vanished[0].detail)
        return results

    # -- the one translation of the clients' errors ----------------------------------------

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every public method of every protocol area goes through :meth:`_translate`: whatever client error
        escapes it leaves as the project's own (a new method of an area is covered without a decorator)."""
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if not name.startswith("_") and inspect.isfunction(value) and not hasattr(value, "__translated__"):
                setattr(cls, name, _translating(value))

    def _translate(self, e: BaseException, *, call: str = "", needs: Refused | None = None,
                   resource: str = "") -> KafkaReassignError:
        """THE translation of a client library's error (confluent-kafka's ``KafkaException``, kafka-python's
        ``KafkaError``) into the project's own: a refused client as :class:`ClusterAccessError`, an unreachable
        cluster or broker as :class:`ClusterUnreachableError`, a broker without the request as
        :class:`UnsupportedBrokerError`, a topic that no longer exists (``resource`` ``"topic NAME"``) as
        :class:`TopicNotFoundError` naming it, anything else as :class:`ClusterOperationError` naming the call,
        the resource and Kafka's error code. ``call``: the request or method that failed (default: the
        request ``needs`` names)."""
        if isinstance(e, KafkaReassignError):
            return e
        call = call or (needs.request if needs is not None else "a request")
        if isinstance(e, FutureTimeoutError):
            return self._unreachable(e)
        if isinstance(e, KafkaException):
            err = e.args[0] if e.args else None
            if not isinstance(err, KafkaError):
                code, detail, retriable = "UNKNOWN", str(e), False
            elif err.code() in _ACCESS_CODES:
                return self._refused() or self._access_error(_ACCESS_CODES[err.code()], err.str(), needs)
            elif err.code() in _UNREACHABLE_CODES:
                return self._refused() or self._unreachable(e)
            else:
                code, detail, retriable = _KAFKA_NAMES.get(err.name(), err.name()), err.str(), bool(err.retriable())
        elif isinstance(e, kp_errors.KafkaError):
            if isinstance(e, kp_errors.SaslAuthenticationFailedError):
                return self._access_error("authentication", str(e))
            if isinstance(e, kp_errors.AuthorizationError):
                return self._access_error("authorization", getattr(e, "message", None) or type(e).__name__, needs)
            if isinstance(e, _UNREACHABLE_KP):
                return self._unreachable(e)
            if isinstance(e, kp_errors.IncompatibleBrokerVersion):
                return UnsupportedBrokerError(f"the cluster at {self._bootstrap} does not support {call} ({e}); "
                                              "nothing was sent")
            broker_error = isinstance(e, kp_errors.BrokerResponseError)
            code = str(getattr(e, "message", "")) if broker_error else type(e).__name__
            detail = str(e) or str(getattr(e, "description", "")) or code
            retriable = bool(getattr(e, "retriable", False))
        else:  # not a client error: the caller's own
            return ClusterOperationError(f"{call} failed at bootstrap.servers={self._bootstrap}: "
                                         f"{type(e).__name__}: {e}", resource=resource)
        if code == "UNKNOWN_TOPIC_OR_PARTITION" and resource.startswith("topic "):
            return self._topics_not_found([resource.removeprefix("topic ")], call=call, detail=detail)
        where = resource or "the cluster"
        return ClusterOperationError(
            f"{call} failed for {where} at bootstrap.servers={self._bootstrap}: {detail} ({code}); "
            + ("a transient error: retrying can succeed" if retriable else
               "Kafka refused it: retrying the same request cannot succeed"),
            code=code, resource=resource, retriable=retriable)

    def _topics_not_found(self, topics: Collection[str], *, call: str, detail: str) -> TopicNotFoundError:
        names = sorted(set(topics))
        error = TopicNotFoundError(
            f"topic(s) {', '.join(names)} no longer exist in the cluster at bootstrap.servers={self._bootstrap} "
            f"({call}: {detail}): deleted while the run used them. Leave them out (their moves, their throttled "
            "replicas) or plan again from the current cluster", topics=names)
        error.call, error.detail = call, detail  # type: ignore[attr-defined]
        return error

    def _on_fresh_controller(self, call: Callable[[], _T]) -> _T:
        """``call()``, made again on the same client, routed to a live broker, when librdkafka says the broker it
        routed a request to is gone (:attr:`ClusterUnreachableError.broker_lost`): a broker killed or stopped under
        a held client. The calls given here are idempotent.

        librdkafka sends DescribeCluster, DescribeConfigs, IncrementalAlterConfigs, CreatePartitions and
        ElectLeaders to the broker it keeps as "controller", learnt from the last Metadata response (in KRaft a
        random live broker each broker names). When that broker dies, librdkafka keeps it: a request in flight fails
        with "Broker transport failure", the next ones wait for it until they time out ("waiting for controller"),
        and it learns another only from a new Metadata response. So the adapter reads the metadata again until it
        names a broker that accepts connections (:meth:`_live_controller`; a dead broker is named until the
        cluster fences it, ``broker.session.timeout.ms``) and asks again, for up to ``timeout_s`` after the first
        such failure (a try begun before then may take its own timeout). A client that never had an answer fails
        at once: the cluster was never reached."""
        deadline: float | None = None
        while True:
            try:
                return call()
            except ClusterUnreachableError as e:
                if not e.broker_lost or not self._answered:
                    raise
                deadline = deadline or time.monotonic() + self._timeout_s
                if time.monotonic() >= deadline:
                    raise
                log.info("the broker the admin client routed a request to is gone; asking again through a live one")
                if self._live_controller(deadline) is None:
                    raise

    def _live_controller(self, deadline: float) -> int | None:
        """The broker librdkafka routes controller requests to once it is live: the metadata is read again (each
        answer names a random live broker; librdkafka takes it and wakes the requests waiting for a controller)
        until the broker it names accepts a TCP connection (:func:`accepts_connections`), or ``deadline`` passes
        (``None``)."""
        ck = self._confluent()
        while True:
            md = ck.list_topics(timeout=max(1.0, min(self._timeout_s, deadline - time.monotonic())))
            broker = md.brokers.get(md.controller_id)
            if broker is not None and accepts_connections(broker.host, broker.port):
                return int(md.controller_id)
            if time.monotonic() >= deadline:
                return None
            time.sleep(CONTROLLER_RELEARN_S)
