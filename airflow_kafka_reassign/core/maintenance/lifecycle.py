"""The end of a broker's life in KRaft: wait until it is shut down, then unregister it, and check that.

A broker that was stopped stays REGISTERED (fenced) with the controller; until it is unregistered
(UnregisterBroker), KIP-1073 notes, the controller may still assign new partitions to it. So a decommission
ends with: the broker is shut down (:func:`is_shut_down`: DescribeCluster with fenced brokers lists it
fenced, or not at all), then :func:`unregister` removes its registration and checks that DescribeCluster
with fenced brokers no longer lists it.

UnregisterBroker is refused here for a broker that is still running: Kafka itself accepts it (seen on 4.3.1:
the broker keeps running, unlisted, its heartbeats failing with STALE_BROKER_EPOCH), which would leave a
broker serving replicas that the cluster no longer knows.

Pure: imports no Airflow, no Kafka client, no PySpark; the waits take a clock and a sleep (tests pass fakes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import Literal

from airflow_kafka_reassign.core.records.journal import StateLocation, journal
from airflow_kafka_reassign.core.vocabulary.models import _Frozen
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin, ClusterDescription
from airflow_kafka_reassign.exceptions import GuardRefusedError, KafkaReassignError, UnsupportedBrokerError

_log = logging.getLogger(__name__)

BrokerState = Literal["running", "fenced", "unregistered"]

#: How long :func:`unregister` waits for DescribeCluster to stop listing the broker.
UNREGISTER_CHECK_S = 30.0
POLL_S = 0.5


class BrokerStillRunningError(GuardRefusedError):
    """A broker to unregister is still running (DescribeCluster lists it unfenced)."""


class LifecycleTimeoutError(KafkaReassignError):
    """A broker did not reach the expected state in time (shut down, or no longer registered)."""


def broker_state(description: ClusterDescription, broker: int) -> BrokerState:
    """``running`` (listed unfenced), ``fenced`` (listed fenced: registered, shut down) or ``unregistered``
    (not listed; without fenced brokers in the description, a fenced broker is not listed either)."""
    found = description.broker(broker)
    if found is None:
        return "unregistered"
    return "fenced" if found.fenced else "running"


def is_shut_down(description: ClusterDescription, broker: int) -> bool:
    """Whether ``broker`` is shut down: DescribeCluster (with fenced brokers) lists it fenced, or not at all."""
    return broker_state(description, broker) != "running"


def wait_for_shutdown(
    admin: ClusterAdmin,
    brokers: Collection[int],
    *,
    timeout_s: float,
    poll_s: float = POLL_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> ClusterDescription:
    """Poll DescribeCluster (with fenced brokers) until every one of ``brokers`` is shut down; raises
    :class:`LifecycleTimeoutError` naming the ones still running after ``timeout_s``."""
    deadline = clock() + timeout_s
    while True:
        description = admin.describe_cluster(include_fenced=True)
        running = sorted(b for b in brokers if not is_shut_down(description, b))
        if not running:
            return description
        if clock() >= deadline:
            raise LifecycleTimeoutError(
                f"broker(s) {running} are still running {timeout_s:g} s later (DescribeCluster lists them unfenced); "
                "stop them (a controlled shutdown), then run this step again")
        sleep(min(poll_s, max(0.0, deadline - clock())))


def _left_with_zookeeper(admin: ClusterAdmin, broker: int, line: str, log: logging.Logger) -> UnregisterOutcome:
    """ZooKeeper mode: nothing to unregister, once the broker is stopped (it is then not listed)."""
    if broker_state(admin.describe_cluster(include_fenced=False), broker) == "running":
        raise BrokerStillRunningError(
            f"refused to take broker {broker} off the cluster: it is still running (DescribeCluster lists it). This "
            f"cluster runs {line}: a broker leaves it when it stops. Nothing was sent. Stop the broker first")
    log.info("unregister skipped for broker %s: this cluster runs %s, where a stopped broker leaves the cluster by "
             "itself (its registration is an ephemeral znode in ZooKeeper; no UnregisterBroker there), and broker %s "
             "is no longer listed", broker, line, broker)
    return UnregisterOutcome(broker=broker, outcome="already", before="unregistered")


class UnregisterOutcome(_Frozen):
    """What :func:`unregister` did for one broker: ``unregistered`` now, or ``already`` not registered."""

    broker: int
    outcome: Literal["unregistered", "already"]
    #: the broker's state before: ``fenced``, or ``unregistered``
    before: BrokerState


def unregister(
    admin: ClusterAdmin,
    broker: int,
    *,
    state_dir: StateLocation | None = None,
    check_s: float = UNREGISTER_CHECK_S,
    poll_s: float = POLL_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    log: logging.Logger | None = None,
) -> UnregisterOutcome:
    """Unregister a shut-down ``broker`` and check that DescribeCluster with fenced brokers no longer lists it, on
    every broker: once the answering broker no longer lists it, until every live broker has applied the metadata
    the controller committed (:meth:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterAdmin.metadata_barrier`).

    Refused (:class:`BrokerStillRunningError`, nothing sent) while the broker is running. A broker no longer
    registered is ``already`` done (the step is idempotent: a retry after a crash is fine). Needs
    UnregisterBroker and DescribeCluster with fenced brokers (KIP-1073, Kafka 4.0+): without the latter a
    fenced broker cannot be told from an unregistered one."""
    log = log or _log
    caps = admin.capabilities()
    if caps.zookeeper_mode:
        return _left_with_zookeeper(admin, broker, caps.line_name(), log)
    if not caps.unregister_broker or not caps.fenced_brokers:
        missing = [n for n, ok in (("UnregisterBroker", caps.unregister_broker),
                                   ("DescribeCluster with fenced brokers (KIP-1073, Kafka 4.0+)", caps.fenced_brokers))
                   if not ok]
        raise UnsupportedBrokerError(f"cannot unregister broker {broker}: the cluster lacks {' and '.join(missing)}; "
                                     "nothing was sent")
    before = broker_state(admin.describe_cluster(include_fenced=True), broker)
    if before == "running":
        raise BrokerStillRunningError(
            f"refused to unregister broker {broker}: it is still running (DescribeCluster lists it unfenced). Kafka "
            "would accept it and leave the running broker unregistered (its heartbeats then fail with "
            "STALE_BROKER_EPOCH) while it still holds replicas. Nothing was sent. Stop the broker first and wait "
            "until it is fenced (wait_for_shutdown)")
    if before == "unregistered":
        log.info("broker %s is not registered: nothing to unregister", broker)
        return UnregisterOutcome(broker=broker, outcome="already", before=before)
    result = admin.unregister_broker(broker)
    if not result.ok and result.error_code != "BROKER_ID_NOT_REGISTERED":
        raise KafkaReassignError(f"UnregisterBroker {broker} failed: {result.error_code}: {result.error}")
    deadline = clock() + check_s
    while broker_state(admin.describe_cluster(include_fenced=True), broker) != "unregistered":
        if clock() >= deadline:
            raise LifecycleTimeoutError(
                f"broker {broker} is still listed by DescribeCluster {check_s:g} s after UnregisterBroker was "
                "accepted; run this step again")
        sleep(min(poll_s, max(0.0, deadline - clock())))
    # the broker that answered no longer lists it; the others once they have applied the metadata committed now
    caught_up = admin.metadata_barrier()
    while lag := caught_up():
        if clock() >= deadline:
            raise LifecycleTimeoutError(
                f"broker {broker} is unregistered, but not every broker has applied it {check_s:g} s after "
                f"UnregisterBroker was accepted ({lag}): some may still list it; run this step again")
        sleep(min(poll_s, max(0.0, deadline - clock())))
    journal(state_dir, {"event": "broker-unregistered", "broker": broker}, log=log)
    log.info("broker %s unregistered: DescribeCluster with fenced brokers no longer lists it", broker)
    return UnregisterOutcome(broker=broker, outcome="unregistered", before=before)
