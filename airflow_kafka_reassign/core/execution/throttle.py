"""Replication throttles: which configs a reassignment sets, and how to put them back.

Kafka throttles reassignment traffic with two broker rates and two topic replica lists:

* ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` (bytes/s,
  dynamic per-broker configs) on every broker that sends or receives a moving replica;
* ``leader.replication.throttled.replicas`` (``partition:broker`` entries of the replicas
  that serve the copy: the current replicas) and ``follower.replication.throttled.replicas``
  (the adding replicas) on each moving topic.

Pure functions only: the adapter reads the previous values into a
:class:`~airflow_kafka_reassign.core.vocabulary.ports.ThrottleBackup`, these functions compute what to
set, and restoring writes the backup back verbatim, so values someone else had set survive.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TypeVar

from airflow_kafka_reassign.core.guards.headroom import BrokerRates
from airflow_kafka_reassign.core.records.journal import StateLocation, journal
from airflow_kafka_reassign.core.records.store import as_store
from airflow_kafka_reassign.core.vocabulary.models import Move
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin, ThrottleBackup
from airflow_kafka_reassign.exceptions import BrokerUnreachableError, ConfigurationError, TopicNotFoundError

LEADER_RATE = "leader.replication.throttled.rate"
#: The broker rate (bytes/s) of intra-broker moves between log dirs (AlterReplicaLogDirs, KIP-113): the
#: future replica's copy is limited to it on that broker. Not one of :data:`BROKER_THROTTLE_KEYS` (a
#: reassignment does not set it); read it with ``describe_throttles(..., broker_keys=...)``.
LOG_DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
BROKER_THROTTLE_KEYS = (LEADER_RATE, FOLLOWER_RATE)
TOPIC_THROTTLE_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

#: The throttle backup in ``state_dir``: the values that existed before this plan throttled.
THROTTLE_BACKUP_FILE = "throttle-backup.json"

_log = logging.getLogger(__name__)

BrokerConfigs = dict[int, dict[str, str | None]]
TopicConfigs = dict[str, dict[str, str | None]]


#: After a restore's write, how long (seconds) its check reads the configs again, every :data:`RESTORE_POLL_S`,
#: before it writes once more: a broker applies a committed config change a moment after the write is answered.
RESTORE_SETTLE_S = 5.0
RESTORE_POLL_S = 0.2


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _clock() -> float:
    return time.monotonic()


#: ``throttles_restored`` values: restored now / none was set (nothing to restore) / left in place.
RESTORED, NONE_SET, NOT_RESTORED = "yes", "none-set", "no"


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


# -- a run's throttles: the backup in the run state, synced every step, restored at the end --


def backup_path(state_dir: StateLocation) -> str:
    """Where the throttle backup of a run is (a path or URI, for messages)."""
    return f"{as_store(state_dir).uri.rstrip('/')}/{THROTTLE_BACKUP_FILE}"


def read_backup(state_dir: StateLocation | None) -> ThrottleBackup | None:
    """The throttle backup of a run (``None`` when there is none)."""
    if state_dir is None:
        return None
    data = as_store(state_dir).read(THROTTLE_BACKUP_FILE)
    return None if data is None else ThrottleBackup.model_validate_json(data)


def write_backup(state_dir: StateLocation, backup: ThrottleBackup) -> None:
    as_store(state_dir).write(THROTTLE_BACKUP_FILE, backup.model_dump_json(indent=1).encode())


#: A replication throttle: one rate (bytes/s) for every broker involved, or per-broker leader and follower
#: rates (:class:`~airflow_kafka_reassign.core.guards.headroom.BrokerRates`, the headroom throttle's).
Rate = int | BrokerRates


def _rate_configs(rate: Rate, broker: int) -> dict[str, str | None]:
    """The two rate configs of ``broker`` under ``rate``."""
    if isinstance(rate, BrokerRates):
        leader, follower = rate.of(broker)
        return {LEADER_RATE: str(int(leader)), FOLLOWER_RATE: str(int(follower))}
    return {k: str(int(rate)) for k in BROKER_THROTTLE_KEYS}


def desired_throttles(
    backup: ThrottleBackup, moving: Iterable[Move], rate: Rate | None
) -> tuple[dict[int, dict[str, str | None]], dict[str, dict[str, str | None]]]:
    """Every config the backup covers, as the ``moving`` moves need it now.

    Brokers a moving replica is copied from or to get ``rate`` (one rate for all, or each its own leader and
    follower rate from a :class:`~airflow_kafka_reassign.core.guards.headroom.BrokerRates`); topic replica lists are the
    backed-up value plus the moving entries. Everything else goes back to its backed-up value.
    """
    active = [m for m in moving if m.adding_replicas] if rate else []
    involved = brokers_involved(active)
    entries = throttled_replicas(active)
    brokers: dict[int, dict[str, str | None]] = {}
    for b, before in backup.brokers.items():
        # the replication rates only: a log-dir rate in the same backup is sync_log_dir_throttle's to set
        brokers[b] = (_rate_configs(rate, b) if rate and b in involved
                      else {k: v for k, v in before.items() if k in BROKER_THROTTLE_KEYS})
    topics: dict[str, dict[str, str | None]] = {}
    for t, before in backup.topics.items():
        if t in entries:
            leader, follower = entries[t]
            topics[t] = {LEADER_REPLICAS: merge_replica_list(before.get(LEADER_REPLICAS), leader),
                         FOLLOWER_REPLICAS: merge_replica_list(before.get(FOLLOWER_REPLICAS), follower)}
        else:
            topics[t] = dict(before)
    return brokers, topics


def _same(key: str, a: str | None, b: str | None) -> bool:
    if key in TOPIC_THROTTLE_KEYS:
        def norm(v: str | None) -> frozenset[str]:
            return frozenset(e.strip() for e in (v or "").split(",") if e.strip())
        return norm(a) == norm(b)
    return (a or None) == (b or None)


def _diff(
    current: ThrottleBackup,
    brokers: Mapping[int, Mapping[str, str | None]],
    topics: Mapping[str, Mapping[str, str | None]],
) -> tuple[dict[int, dict[str, str | None]], dict[str, dict[str, str | None]]]:
    db: dict[int, dict[str, str | None]] = {}
    for b, values in brokers.items():
        now = current.brokers.get(b, {})
        changed = {k: v for k, v in values.items() if not _same(k, now.get(k), v)}
        if changed:
            db[b] = changed
    dt: dict[str, dict[str, str | None]] = {}
    for t, values in topics.items():
        now = current.topics.get(t, {})
        changed = {k: v for k, v in values.items() if not _same(k, now.get(k), v)}
        if changed:
            dt[t] = changed
    return db, dt


#: How many times a throttle sync or restore drops topics that vanished under it and goes again.
_VANISHED_RETRIES = 3


def _without_topics(state_dir: StateLocation | None, topics: Collection[str], log: logging.Logger) -> None:
    """Topics deleted while the run throttled them: their configs went with them, so the backup forgets them (a
    restore would only fail on them); one line names them."""
    backup = read_backup(state_dir)
    log.warning("topic(s) %s no longer exist (deleted while the run throttled them): dropped from the throttles; "
                "their throttle configs went with them", ", ".join(sorted(topics)))
    if backup is None or state_dir is None or not set(topics) & set(backup.topics):
        return
    write_backup(state_dir, ThrottleBackup(brokers=backup.brokers,
                                           topics={t: v for t, v in backup.topics.items() if t not in set(topics)}))


def sync_throttles(
    admin: ClusterAdmin,
    moving: Iterable[Move],
    rate: Rate | None,
    *,
    state_dir: StateLocation | None,
    dry_run: bool = False,
    log: logging.Logger | None = None,
    live_brokers: Collection[int] | None = None,
) -> bool:
    """Bring the throttle configs to exactly what ``moving`` needs; returns whether any changed.

    See :func:`_sync_throttles`. A topic deleted under the run (the adapter's
    :class:`~airflow_kafka_reassign.exceptions.TopicNotFoundError`) is dropped from the throttle sets and the
    backup, its moves are left out, and the sync goes again: a vanished topic never stops the run's throttles."""
    log = log or _log
    moves = list(moving)
    return _past_vanished_topics(
        lambda gone: _sync_throttles(admin, [m for m in moves if m.topic not in gone], rate, state_dir, dry_run, log,
                                     live_brokers), state_dir, log, forget=not dry_run)


_T = TypeVar("_T")


def _past_vanished_topics(attempt: Callable[[frozenset[str]], _T], state_dir: StateLocation | None,
                          log: logging.Logger, *, forget: bool = True) -> _T:
    """``attempt(topics gone so far)``, again without the topics a :class:`TopicNotFoundError` names (forgotten by the
    backup with ``forget``), a few times at most."""
    gone: set[str] = set()
    for _ in range(_VANISHED_RETRIES):
        try:
            return attempt(frozenset(gone))
        except TopicNotFoundError as e:
            if not set(e.topics) - gone:
                raise
            gone.update(e.topics)
            if forget:
                _without_topics(state_dir, e.topics, log)
    return attempt(frozenset(gone))


def _past_silent_brokers(call: Callable[[frozenset[int]], _T], what: str, log: logging.Logger
                         ) -> tuple[_T, frozenset[int]]:
    """``call(brokers left out so far)``, again without the brokers a :class:`BrokerUnreachableError` names; returns
    its result and the brokers left out. A broker killed is listed alive until the cluster notices (ZooKeeper's
    session timeout, KRaft's ``broker.session.timeout.ms``): a request addressed to it (its own configs) only waits
    for it, so it is taken as down for this step, in one line naming it, as a broker the cluster lists as down."""
    out: frozenset[int] = frozenset()
    while True:
        try:
            return call(out), out
        except BrokerUnreachableError as e:
            more = set(e.brokers) - out
            if not more:
                raise
            out |= more
            log.warning("broker(s) %s did not answer %s (down, still listed alive until the cluster notices): taken "
                        "as down for this step; their throttle configs are set or restored once they answer",
                        sorted(more), what)


def _sync_throttles(admin: ClusterAdmin, moving: Iterable[Move], rate: Rate | None, state_dir: StateLocation | None,
                    dry_run: bool, log: logging.Logger, live_brokers: Collection[int] | None) -> bool:
    """:func:`sync_throttles` once.

    ``rate`` is one rate for every broker involved, or per-broker rates (a
    :class:`~airflow_kafka_reassign.core.guards.headroom.BrokerRates`: the headroom throttle); either way only the two
    rate configs of the brokers involved are written, so the backup covers everything written.

    The values of brokers and topics not yet covered by the backup are read and written to
    ``state_dir`` BEFORE anything is set, so a later run restores them even if this process
    dies right after. Only differing keys are written. With ``live_brokers``, a broker outside
    it (down: moves onto it wait, see ``allow_offline_brokers``) gets no throttle: a config
    request to it would only wait for it. A broker listed alive that does not answer its config requests (killed,
    the cluster has not noticed yet: :class:`BrokerUnreachableError`) is left out the same way for this step.
    """
    active = [m for m in moving if m.adding_replicas] if rate else []
    backup = read_backup(state_dir)
    if not active and backup is None:
        return False
    if active and state_dir is None:
        raise ConfigurationError(
            "a throttle needs a state_dir to keep the backup of the previous throttle values in; "
            "pass state_dir (the operators use <plan dir>/run)"
        )
    backup = backup or ThrottleBackup()
    new_brokers = brokers_involved(active) - set(backup.brokers)
    if live_brokers is not None and new_brokers - set(live_brokers):
        log.warning("broker(s) %s are not alive: no throttle is set on them (they copy nothing while down)",
                    sorted(new_brokers - set(live_brokers)))
        new_brokers &= set(live_brokers)
    new_topics = {m.topic for m in active} - set(backup.topics)
    fresh = ThrottleBackup()
    if new_brokers or new_topics:
        fresh, _ = _past_silent_brokers(
            lambda out: admin.describe_throttles(sorted(new_brokers - out), sorted(new_topics)),
            "the read of their throttle configs", log)
        backup = ThrottleBackup(brokers={**backup.brokers, **fresh.brokers}, topics={**backup.topics, **fresh.topics})
        if not dry_run:
            assert state_dir is not None
            write_backup(state_dir, backup)
    brokers, topics = desired_throttles(backup, active, rate)
    down = set(backup.brokers) - set(live_brokers) if live_brokers is not None else set()
    if down:
        log.warning("broker(s) %s are down: their throttle configs are left as they are until they are back "
                    "(a config request would only wait for them); the backup restores them then", sorted(down))
        brokers = {b: v for b, v in brokers.items() if b not in down}
    # what was just read for the backup is what is set now: read again only what an earlier step backed up
    again_b, again_t = sorted(set(brokers) - set(fresh.brokers)), sorted(set(backup.topics) - set(fresh.topics))
    read, silent = _past_silent_brokers(
        lambda out: admin.describe_throttles([b for b in again_b if b not in out], again_t)
        if again_b or again_t else ThrottleBackup(), "the read of their throttle configs", log)
    brokers = {b: v for b, v in brokers.items() if b not in silent}
    current = ThrottleBackup(brokers={**read.brokers, **fresh.brokers}, topics={**read.topics, **fresh.topics})
    db, dt = _diff(current, brokers, topics)
    if not db and not dt:
        return False
    if dry_run:
        log.info("DRY RUN: would set throttle configs (None = delete): brokers %s topics %s",
                 json.dumps({str(b): v for b, v in sorted(db.items())}, sort_keys=True),
                 json.dumps(dt, sort_keys=True))
        return False
    _, silent = _past_silent_brokers(
        lambda out: admin.set_throttles({b: v for b, v in db.items() if b not in out}, dt), "their throttle configs",
        log)
    db = {b: v for b, v in db.items() if b not in silent}
    log.info("throttle configs set (None = deleted): brokers %s topics %s",
             json.dumps({str(b): v for b, v in sorted(db.items())}, sort_keys=True), json.dumps(dt, sort_keys=True))
    return True


def restore_throttles(admin: ClusterAdmin, state_dir: StateLocation | None, *, log: logging.Logger | None = None) -> bool:
    """:func:`_restore_throttles`; a topic deleted under the run is dropped from the backup (its configs went with
    it) and the restore goes again."""
    log = log or _log
    return _past_vanished_topics(lambda _gone: _restore_throttles(admin, state_dir, log=log), state_dir, log)


def _restore_throttles(admin: ClusterAdmin, state_dir: StateLocation | None, *, log: logging.Logger | None = None
                       ) -> bool:
    """Put every throttle config this run touched back to its value before the run, exactly,
    check it, and delete the backup. Returns whether there was anything to restore. Only the configs
    that differ from the backup are written (none after a run whose first throttle write was refused).

    A broker of the backup that is down now (the cluster does not list it as alive) is skipped,
    with one line naming it: the backup then keeps only its entries, and the next run on the plan
    (or the cancel operator) restores them once it is back."""
    log = log or _log
    backup = read_backup(state_dir)
    if backup is None:
        return False
    assert state_dir is not None
    down: dict[int, dict[str, str | None]] = {}
    if backup.brokers:
        live = {b.id for b in admin.snapshot(topics=()).brokers}
        down = {b: v for b, v in backup.brokers.items() if b not in live}
    if down:
        log.warning("broker(s) %s are down: their throttle configs are restored when they are back (the next run on "
                    "this plan, or CancelReassignmentOperator, restores them from %s)", sorted(down),
                    backup_path(state_dir))
        backup = ThrottleBackup(brokers={b: v for b, v in backup.brokers.items() if b not in down},
                                topics=backup.topics)
    # only what differs from the backup is written: a run whose first throttle write was refused (a user
    # without ALTER_CONFIGS) changed nothing, and its restore needs no write either
    keys = _broker_keys(backup)
    silent: set[int] = set()  # listed alive, but not answering their config requests: restored later, as the down
    wanted: ThrottleBackup = backup

    def differing() -> tuple[dict[int, dict[str, str | None]], dict[str, dict[str, str | None]]]:
        current, out = _past_silent_brokers(
            lambda out: admin.describe_throttles(sorted(set(wanted.brokers) - silent - out), sorted(wanted.topics),
                                                 **({"broker_keys": keys} if keys else {})),
            "the read of their throttle configs", log)
        silent.update(out)
        return _diff(current, {b: v for b, v in wanted.brokers.items() if b not in silent}, wanted.topics)

    def write(db: dict[int, dict[str, str | None]], dt: dict[str, dict[str, str | None]]) -> None:
        _, out = _past_silent_brokers(lambda out: admin.set_throttles(
            {b: v for b, v in db.items() if b not in out}, dt), "the restore of their throttle configs", log)
        silent.update(out)

    db, dt = differing()
    for _ in range(2):
        if not db and not dt:
            break
        write(db, dt)
        # a write is answered once the controller committed it; the broker that answers the read applies it a
        # moment later (KRaft): read again for a while before writing again
        settled_by = _clock() + RESTORE_SETTLE_S
        db, dt = differing()
        while (db or dt) and _clock() < settled_by:
            _sleep(RESTORE_POLL_S)
            db, dt = differing()
    db = {b: v for b, v in db.items() if b not in silent}
    if db or dt:
        raise RuntimeError(
            f"throttle configs differ from the backup after restoring twice: brokers {db} topics {dt}; "
            f"the backup stays in {backup_path(state_dir)} for the next run (or the cancel operator) to restore"
        )
    if silent:
        log.warning("broker(s) %s did not answer: their throttle configs are restored when they are back (the next "
                    "run on this plan, or CancelReassignmentOperator, restores them from %s)", sorted(silent),
                    backup_path(state_dir))
        down.update({b: backup.brokers[b] for b in silent})
        backup = ThrottleBackup(brokers={b: v for b, v in backup.brokers.items() if b not in silent},
                                topics=backup.topics)
    if down:
        write_backup(state_dir, ThrottleBackup(brokers=down))
    else:
        as_store(state_dir).delete(THROTTLE_BACKUP_FILE)
    journal(state_dir, {"event": "throttles-restored", "brokers": sorted(backup.brokers),
                        "topics": sorted(backup.topics)}, log=log)
    log.info("throttle configs restored exactly as before on brokers %s and topics %s",
             sorted(backup.brokers), sorted(backup.topics))
    return True


# -- intra-broker moves: the log-dir rate, in the same backup ---------------------------------


def _broker_keys(backup: ThrottleBackup) -> tuple[str, ...] | None:
    """The broker configs a backup covers beyond the replication rates (``None``: none beyond them)."""
    keys = {k for values in backup.brokers.values() for k in values}
    return tuple(sorted(keys | set(BROKER_THROTTLE_KEYS))) if keys - set(BROKER_THROTTLE_KEYS) else None


def sync_log_dir_throttle(
    admin: ClusterAdmin,
    brokers: Collection[int],
    rate: int | None,
    *,
    state_dir: StateLocation,
    log: logging.Logger | None = None,
) -> bool:
    """Throttle intra-broker moves (AlterReplicaLogDirs) on ``brokers`` at ``rate`` bytes/s
    (:data:`LOG_DIR_RATE`), or put it back to its value before the run (``rate=None``); returns whether a
    config changed.

    Each broker's previous value is added to the run's throttle backup BEFORE anything is set (a broker new to
    the backup gets its replication rates read too, so the backup of a broker always covers them), and
    :func:`restore_throttles` restores it with the rest. While the engine also throttles reassignments on the
    same brokers, it writes only the replication rates: the two do not overwrite each other."""
    log = log or _log
    if rate is not None and rate <= 0:
        raise ValueError(f"the log-dir throttle must be a positive number of bytes/s, not {rate}")
    backup = read_backup(state_dir) or ThrottleBackup()
    new = sorted(set(brokers) - set(backup.brokers))
    lacking = sorted(b for b in set(brokers) & set(backup.brokers) if LOG_DIR_RATE not in backup.brokers[b])
    if new or lacking:
        read_new = admin.describe_throttles(new, (), broker_keys=(*BROKER_THROTTLE_KEYS, LOG_DIR_RATE)).brokers if new else {}
        read_rate = admin.describe_throttles(lacking, (), broker_keys=(LOG_DIR_RATE,)).brokers if lacking else {}
        merged = {b: dict(v) for b, v in backup.brokers.items()}
        for b, values in {**read_new, **read_rate}.items():
            merged.setdefault(b, {}).update(values)
        backup = ThrottleBackup(brokers=merged, topics=backup.topics)
        write_backup(state_dir, backup)
    wanted = {b: {LOG_DIR_RATE: str(int(rate)) if rate is not None else backup.brokers[b].get(LOG_DIR_RATE)}
              for b in sorted(brokers)}
    current = admin.describe_throttles(sorted(brokers), (), broker_keys=(LOG_DIR_RATE,))
    changed, _ = _diff(current, wanted, {})
    if not changed:
        return False
    admin.set_throttles(changed, {})
    journal(state_dir, {"event": "log-dir-throttle", "brokers": {str(b): v for b, v in changed.items()}}, log=log)
    log.info("log-dir throttle (%s) set (None = deleted): %s", LOG_DIR_RATE,
             json.dumps({str(b): v for b, v in changed.items()}, sort_keys=True))
    return True
