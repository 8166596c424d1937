"""Which Kafka lines the provider runs on, and what it chooses where a line lacks a feature (docs/kafka-lines.md).

* The floor: Apache Kafka 3.0. Older brokers are refused before anything is sent, naming their line
  (:func:`check_kafka_line`; the adapter and the in-memory fake call it when they read the capabilities, which every
  execution session, plan and maintenance task does before it changes anything).
* The replication-factor guard: ``rf_guard="auto"`` (the default) is ``"broker"`` wherever the brokers enforce KIP-860
  (Kafka 4.1+), and ``"client"`` on a ZooKeeper-mode cluster, which can never have it (KIP-860 came to the broker in
  4.1, after ZooKeeper mode was removed in 4.0): :func:`choose_rf_guard` says so in one line. A KRaft cluster older
  than 4.1 stays with ``"broker"`` (refused, naming the line: upgrade, or choose ``"client"`` explicitly). A guard the
  user forced is kept as it is.

Pure: imports no Airflow, no Kafka client, no PySpark.
"""

from __future__ import annotations

from typing import Literal

from airflow_kafka_reassign.core.vocabulary.ports import ClusterCapabilities, RfGuard
from airflow_kafka_reassign.exceptions import UnsupportedBrokerError

#: The oldest Apache Kafka line the provider runs on (ZooKeeper mode; KRaft from 3.9, the sandbox's oldest).
MIN_KAFKA_LINE: tuple[int, int] = (3, 0)

#: What a task may ask for: a guard (``"broker"``, ``"client"``), or ``"auto"``, the provider's choice.
RfGuardChoice = Literal["auto", "broker", "client"]


def line_tuple(line: str | None) -> tuple[int, ...] | None:
    """``"3.9"`` as ``(3, 9)``; ``None`` for an unknown line."""
    if not line:
        return None
    try:
        return tuple(int(part) for part in line.split("."))
    except ValueError:
        return None


def check_kafka_line(caps: ClusterCapabilities, *, where: str = "the cluster") -> None:
    """Refuse (:class:`UnsupportedBrokerError`, before anything is sent) a cluster older than :data:`MIN_KAFKA_LINE`,
    naming its line. An unknown line passes (the features the run needs are checked one by one where used)."""
    found = line_tuple(caps.kafka_line)
    if found is not None and found < MIN_KAFKA_LINE:
        floor = ".".join(map(str, MIN_KAFKA_LINE))
        raise UnsupportedBrokerError(
            f"{where} runs {caps.line_name()} (from its ApiVersions): airflow-kafka-reassign needs Apache Kafka "
            f"{floor} or newer (docs/kafka-lines.md). Nothing was sent. Upgrade the brokers to {floor}+ first")


def choose_rf_guard(requested: RfGuardChoice, *, supported: bool | None,
                    caps: ClusterCapabilities) -> tuple[RfGuard, str | None]:
    """The guard a run uses, and the line that says why when the provider chose it for a cluster without KIP-860
    (``None`` otherwise). ``supported``: whether the brokers enforce KIP-860 (``None``: cannot tell)."""
    if requested != "auto":
        return requested, None
    if supported is not False or not caps.zookeeper_mode:
        return "broker", None
    return "client", (
        f"rf_guard='auto' chose 'client': this cluster runs {caps.line_name()}, whose brokers cannot enforce KIP-860 "
        "(AllowReplicationFactorChange, Apache Kafka 4.1+, KRaft only), so each move's replica count is compared with "
        "the controller's replica sets just before it is sent (racy: a change made in between is not seen); "
        "rf_guard='broker' refuses to run here instead")
