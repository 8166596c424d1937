"""Replication throttles: which configs a reassignment sets, and how to put them back.

Kafka throttles reassignment traffic with two broker rates and two topic replica lists:

* ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` (bytes/s,
  dynamic per-broker configs) on every broker that sends or receives a moving replica;
* ``leader.replication.throttled.replicas`` (``partition:broker`` entries of the replicas
  that serve the copy: the current replicas) and ``follower.replication.throttled.replicas``
  (the adding replicas) on each moving topic.

Pure functions only: the adapter reads the previous values into a
:class:`~airflow_kafka_reassign.core.ports.ThrottleBackup`, these functions compute what to
set, and restoring writes the backup back verbatim, so values someone else had set survive.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from airflow_kafka_reassign.core.models import Move
from airflow_kafka_reassign.core.ports import ClusterAdmin, ThrottleBackup

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
BROKER_THROTTLE_KEYS = (LEADER_RATE, FOLLOWER_RATE)
TOPIC_THROTTLE_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

BrokerConfigs = dict[int, dict[str, str | None]]
TopicConfigs = dict[str, dict[str, str | None]]


def throttled_replicas(moves: Iterable[Move]) -> dict[str, tuple[set[str], set[str]]]:
    """Per topic: the leader-side entries (current replicas) and follower-side entries
    (adding replicas) of the moves, as ``"partition:broker"`` strings."""
    out: dict[str, tuple[set[str], set[str]]] = defaultdict(lambda: (set(), set()))
    for m in moves:
        leader, follower = out[m.topic]
        leader.update(f"{m.partition}:{b}" for b in (m.current_replicas or ()))
        follower.update(f"{m.partition}:{b}" for b in m.adding_replicas)
    return dict(out)


def _entries(value: str | None) -> set[str]:
    return {e.strip() for e in (value or "").split(",") if e.strip()}


def _sort_key(entry: str) -> tuple[int, int] | tuple[float, str]:
    p, _, b = entry.partition(":")
    return (int(p), int(b)) if p.isdigit() and b.isdigit() else (float("inf"), entry)


def merge_replica_list(existing: str | None, ours: Iterable[str]) -> str | None:
    """The union of an existing ``*.throttled.replicas`` value and our entries.

    ``*`` (every replica) already covers ours and is kept as is. Returns ``None`` when
    the result is empty (the key should be unset).
    """
    if existing is not None and existing.strip() == "*":
        return "*"
    merged = _entries(existing) | set(ours)
    return ",".join(sorted(merged, key=_sort_key)) or None


def subtract_replica_list(current: str | None, ours: Iterable[str], original: str | None) -> str | None:
    """Remove our entries from ``current`` but keep every entry the ``original`` value had."""
    if current is not None and current.strip() == "*":
        return current
    keep = _entries(original)
    drop = set(ours)  # once, not per entry: a replica list can hold 100k entries
    left = {e for e in _entries(current) if e not in drop or e in keep}
    return ",".join(sorted(left, key=_sort_key)) or None


def brokers_involved(moves: Iterable[Move]) -> set[int]:
    """Every broker that sends or receives a replica of a move."""
    out: set[int] = set()
    for m in moves:
        if m.adding_replicas:
            out.update(m.current_replicas or ())
            out.update(m.target_replicas)
    return out


def throttle_configs(
    moves: Iterable[Move],
    rate_bytes_per_s: int,
    previous_topics: TopicConfigs,
) -> tuple[BrokerConfigs, TopicConfigs]:
    """The broker and topic configs that throttle ``moves`` at ``rate_bytes_per_s``.

    Only the brokers and topic replicas involved are touched; existing replica lists are
    merged with ours, not overwritten.
    """
    if rate_bytes_per_s <= 0:
        raise ValueError(f"throttle rate must be a positive number of bytes/s, not {rate_bytes_per_s}")
    moving = [m for m in moves if m.adding_replicas]
    rate = str(int(rate_bytes_per_s))
    brokers: BrokerConfigs = {b: {LEADER_RATE: rate, FOLLOWER_RATE: rate} for b in sorted(brokers_involved(moving))}
    topics: TopicConfigs = {}
    for topic, (leader, follower) in sorted(throttled_replicas(moving).items()):
        before = previous_topics.get(topic, {})
        topics[topic] = {
            LEADER_REPLICAS: merge_replica_list(before.get(LEADER_REPLICAS), leader),
            FOLLOWER_REPLICAS: merge_replica_list(before.get(FOLLOWER_REPLICAS), follower),
        }
    return brokers, topics


def apply_throttle(admin: ClusterAdmin, moves: Iterable[Move], rate_bytes_per_s: int) -> ThrottleBackup:
    """Throttle ``moves`` through ``admin`` and return the backup that undoes it exactly.

    The backup is read before anything is written; keep it (a task persists it next to the
    plan) so that :func:`restore_throttle` can run even after the task was killed.
    """
    moving = [m for m in moves if m.adding_replicas]
    if not moving:
        return ThrottleBackup()
    backup = admin.describe_throttles(brokers_involved(moving), {m.topic for m in moving})
    brokers, topics = throttle_configs(moving, rate_bytes_per_s, backup.topics)
    admin.set_throttles(brokers, topics)
    return backup


def restore_throttle(admin: ClusterAdmin, backup: ThrottleBackup) -> None:
    """Put every throttle config the backup covers back to its previous value (or unset it)."""
    if not backup.empty:
        admin.set_throttles(backup.brokers, backup.topics)
