"""A second observer of disks and broker configs, for the tests of the JBOD, disk-removal and cordon guarantees.

It shares no code with the product (no import of ``airflow_kafka_reassign``; tests/unit/test_architecture.py keeps it
so): a parsing mistake in the project's adapter (``KafkaClusterAdmin.log_dirs``, ``describe_cordons``,
``describe_throttles``) would be made by the code and its test alike if the test read the cluster through that adapter
only. A test reads the same fact through both and compares.

* Log dirs, from the brokers' directories on disk: the sandbox keeps broker N's log dirs at ``DIR/node-N/data`` (one
  dir) or ``DIR/node-N/data-1`` .. ``data-K`` (``--log-dirs K``); a replica is the directory ``<topic>-<partition>``,
  an intra-broker move in flight is ``<topic>-<partition>.<id>-future`` in its target dir, a replica being deleted
  ``<topic>-<partition>.<id>-delete`` (Kafka's ``UnifiedLog`` names).
* Broker configs (``cordoned.log.dirs``, the throttle rates), with a confluent-kafka ``AdminClient`` of the test's
  own: the value each broker reports as set dynamically for itself (``DYNAMIC_BROKER_CONFIG``), ``None`` otherwise.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

#: A replica's directory: ``<topic>-<partition>`` (a topic name may hold dots and dashes).
REPLICA_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
#: A replica being copied into this dir by an intra-broker move (AlterReplicaLogDirs): ``<topic>-<p>.<id>-future``.
FUTURE_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.[0-9a-f]+-future$")

CORDONED_LOG_DIRS = "cordoned.log.dirs"
LOG_DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
BROKER_THROTTLE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate", LOG_DIR_RATE)
TOPIC_THROTTLE_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")

Replica = tuple[str, int]


# -- disks -------------------------------------------------------------------------------------------------------

def broker_dirs(sandbox_dir: str | os.PathLike[str], broker: int) -> list[str]:
    """Broker ``broker``'s log dirs as they are on disk under the sandbox's directory (``node-N/data*``), sorted."""
    node = Path(sandbox_dir) / f"node-{broker}"
    return sorted(str(p) for p in node.glob("data*") if p.is_dir())


def on_disk(path: str) -> tuple[set[Replica], set[Replica]]:
    """``(replicas, future replicas)`` in the log dir ``path``, from its listing alone: ``{(topic, partition)}``."""
    replicas: set[Replica] = set()
    futures: set[Replica] = set()
    for entry in os.scandir(path):
        if not entry.is_dir():
            continue
        if m := FUTURE_DIR.match(entry.name):
            futures.add((m["topic"], int(m["partition"])))
        elif m := REPLICA_DIR.match(entry.name):  # not a -delete or -stray dir: those end in a letter
            replicas.add((m["topic"], int(m["partition"])))
    return replicas, futures


def sample(paths: Iterable[str]) -> dict[str, tuple[set[Replica], set[Replica]]]:
    """:func:`on_disk` of each dir; a directory renamed between the listing and its stat (a future replica swapped in,
    a replica deleted) is listed again."""
    while True:
        try:
            return {p: on_disk(p) for p in paths}
        except FileNotFoundError:
            continue


def replicas_by_dir(paths: Iterable[str], topics: Collection[str]) -> dict[str, set[Replica]]:
    """The (current, not future) replicas of ``topics`` in each dir of ``paths``."""
    wanted = set(topics)
    return {p: {r for r in current if r[0] in wanted} for p, (current, _) in sample(paths).items()}


def futures_by_dir(paths: Iterable[str], topics: Collection[str]) -> dict[str, set[Replica]]:
    """The future replicas (intra-broker moves in flight) of ``topics`` in each dir of ``paths``."""
    wanted = set(topics)
    return {p: {r for r in futures if r[0] in wanted} for p, (_, futures) in sample(paths).items()}


def dir_of(paths: Iterable[str], topic: str, partition: int) -> str | None:
    """The dir of ``paths`` holding the replica ``topic``-``partition`` (``None``: none holds it)."""
    held = [p for p, (current, _) in sample(paths).items() if (topic, partition) in current]
    assert len(held) <= 1, f"{topic}-{partition} is in two log dirs at once: {held}"
    return held[0] if held else None


# -- broker configs ----------------------------------------------------------------------------------------------

def admin_client(config: Mapping[str, Any]) -> AdminClient:
    """The test's own confluent-kafka ``AdminClient`` (librdkafka's config dict, as the sandbox gives it)."""
    return AdminClient(dict(config))


def broker_configs(client: AdminClient, brokers: Collection[int],
                   keys: Collection[str]) -> dict[int, dict[str, str | None]]:
    """Each broker's own dynamic value of ``keys`` (``DYNAMIC_BROKER_CONFIG``; ``None``: not set for that broker), as
    the broker reports it (one DescribeConfigs per broker: librdkafka sends a broker's to that broker)."""
    out: dict[int, dict[str, str | None]] = {}
    for b in sorted(set(brokers)):
        resource = ConfigResource(ConfigResource.Type.BROKER, str(b))
        entries = client.describe_configs([resource], request_timeout=30)[resource].result(60)
        out[b] = {k: entries[k].value if k in entries and entries[k].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
                  else None for k in keys}
    return out


def cordons(client: AdminClient, brokers: Collection[int]) -> dict[int, str | None]:
    """Each broker's own dynamic ``cordoned.log.dirs`` (``None``: not set for it)."""
    return {b: values[CORDONED_LOG_DIRS] or None
            for b, values in broker_configs(client, brokers, [CORDONED_LOG_DIRS]).items()}


def log_dir_rate(client: AdminClient, broker: int) -> str | None:
    """Broker ``broker``'s own dynamic log-dir throttle (``replica.alter.log.dirs.io.max.bytes.per.second``)."""
    return broker_configs(client, [broker], [LOG_DIR_RATE])[broker][LOG_DIR_RATE]


def throttle_configs(client: AdminClient, brokers: Collection[int], topics: Collection[str]) -> dict[str, dict]:
    """Every throttle config of ``brokers`` and ``topics`` (value and source), as the brokers report them."""
    calls = [[ConfigResource(ConfigResource.Type.BROKER, str(b))] for b in brokers]  # one broker per call (librdkafka)
    calls.append([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics])
    futures = {r: f for call in calls for r, f in client.describe_configs(call, request_timeout=30).items()}
    out: dict[str, dict] = {}
    for resource, future in futures.items():
        keys = BROKER_THROTTLE_KEYS if resource.restype == ConfigResource.Type.BROKER else TOPIC_THROTTLE_KEYS
        entries = future.result(60)
        out[f"{resource.restype.name.lower()} {resource.name}"] = {
            k: (entries[k].value, str(entries[k].source)) if k in entries else None for k in keys}
    return out
