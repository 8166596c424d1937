"""Cordons (KIP-1066, Kafka 4.3+): what to cordon, backing up and restoring ``cordoned.log.dirs``, and
checking that no move or explicit assignment places a new replica on a cordoned broker or log dir.

A cordoned log dir keeps serving its replicas but the controller places no NEW replica there; a broker
whose every log dir is cordoned (``cordoned.log.dirs=*``) gets no new replica at all. It is the first
step of a decommission (cordon the brokers, then drain them) and of a disk removal (cordon the dir,
then move its replicas to the broker's other dirs), so that topics created or grown meanwhile do not
land where replicas are being moved away from.

The controller checks its own placement (CreateTopics / CreatePartitions without an assignment). It
checks EXPLICIT assignments (and reassignments) only from Kafka 4.4 on: 4.3.0 and 4.3.1 accept them
onto a cordoned broker (KAFKA-20832, seen on the sandbox), so :func:`cordon_violations` checks every
target the project sends itself, whatever the version.

Backups work as the throttles' (core/execution/throttle.py): each broker's previous DYNAMIC ``cordoned.log.dirs``
(``None``: not set) is written to the run state BEFORE anything is changed, the cordons are merged with
what was there (someone else's cordon is kept), and :func:`restore_cordons` puts every value back
exactly, checks it, and deletes the backup.

Pure: imports no Airflow, no Kafka client, no PySpark.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from airflow_kafka_reassign.core.records.journal import StateLocation, journal
from airflow_kafka_reassign.core.records.store import as_store
from airflow_kafka_reassign.core.vocabulary.models import Move, TopicPartition, _Frozen
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin, LogDir, TopicPartitionReplica
from airflow_kafka_reassign.exceptions import ConfigurationError, GuardRefusedError, UnsupportedBrokerError

#: The broker config (dynamic, per broker): ``*`` (every log dir of the broker) or a comma-separated list
#: of log dir paths, each one of the broker's ``log.dirs``.
CORDONED_LOG_DIRS = "cordoned.log.dirs"
ALL_DIRS: Literal["*"] = "*"
#: The cordon backup in ``state_dir``: each broker's dynamic value before this run cordoned.
CORDON_BACKUP_FILE = "cordon-backup.json"
#: How long :func:`restore_cordons` waits for the brokers to show the restored values (a broker applies a
#: dynamic config from the metadata log: a read right after the write may show the old value).
RESTORE_CHECK_S = 15.0

_log = logging.getLogger(__name__)

Cordon = Literal["*"] | frozenset[str]


class CordonRefusedError(GuardRefusedError):
    """A move or an assignment would place a new replica on a cordoned broker or log dir."""


class CordonBackup(_Frozen):
    """Each broker's dynamic ``cordoned.log.dirs`` before the run changed it (``None``: it was not set)."""

    brokers: dict[int, str | None] = {}

    @property
    def empty(self) -> bool:
        return not self.brokers


# -- values --------------------------------------------------------------------------------


def parse_cordon(value: str | None) -> Cordon:
    """A ``cordoned.log.dirs`` value as ``"*"`` or the set of cordoned paths (empty: none)."""
    text = (value or "").strip()
    if text == ALL_DIRS:
        return ALL_DIRS
    return frozenset(p.strip() for p in text.split(",") if p.strip())


def render_cordon(cordon: Cordon) -> str | None:
    """The config value of a cordon (``None``: nothing cordoned, the key should be unset)."""
    if cordon == ALL_DIRS:
        return ALL_DIRS
    return ",".join(sorted(cordon)) or None


def merge_cordon(existing: str | None, ours: Cordon) -> str | None:
    """The union of a broker's existing value and ours; ``*`` covers every list."""
    before = parse_cordon(existing)
    if isinstance(before, str) or isinstance(ours, str):  # "*"
        return ALL_DIRS
    return render_cordon(before | ours)


def decommission_cordons(brokers: Collection[int]) -> dict[int, Cordon]:
    """What a decommission cordons: every log dir of each broker (``*``)."""
    out: dict[int, Cordon] = {b: ALL_DIRS for b in sorted(set(brokers))}
    return out


def disk_removal_cordons(dirs: Iterable[tuple[int, str]]) -> dict[int, Cordon]:
    """What a disk removal cordons: the given ``(broker, log dir path)`` pairs, by broker. A relative path is
    refused: Kafka compares the value with ``log.dirs`` literally and, on 4.3.1, silently does not enforce a
    relative one (KAFKA-20901); DescribeLogDirs reports absolute paths."""
    out: dict[int, set[str]] = {}
    for broker, path in dirs:
        if not path or not path.startswith("/"):
            raise ConfigurationError(f"broker {broker}: the log dir to cordon must be an absolute path as "
                                     f"DescribeLogDirs reports it, not {path!r}")
        out.setdefault(int(broker), set()).add(path.rstrip("/") or "/")
    return {b: frozenset(p) for b, p in sorted(out.items())}


# -- what is cordoned, and what would land there ----------------------------------------------


@dataclass(frozen=True)
class CordonView:
    """Which brokers and log dirs are cordoned: ``whole`` brokers (every dir: no new replica at all) and the
    cordoned ``dirs`` of each broker."""

    whole: frozenset[int] = frozenset()
    dirs: Mapping[int, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_log_dirs(cls, log_dirs: Mapping[int, Sequence[LogDir]]) -> CordonView:
        """From DescribeLogDirs (v5 tells each dir's cordon, static or dynamic: what is in force)."""
        whole, dirs = set(), {}
        for b, ds in log_dirs.items():
            cordoned = frozenset(d.path for d in ds if d.cordoned)
            if cordoned:
                dirs[b] = cordoned
            online = [d for d in ds if not d.offline]
            if online and all(d.cordoned for d in online):
                whole.add(b)
        return cls(frozenset(whole), dirs)

    @classmethod
    def from_configs(cls, values: Mapping[int, str | None],
                     broker_dirs: Mapping[int, Collection[str]] | None = None) -> CordonView:
        """From ``cordoned.log.dirs`` values; a list naming every one of the broker's ``broker_dirs`` (when
        known) cordons the whole broker."""
        whole, dirs = set(), {}
        for b, value in values.items():
            cordon = parse_cordon(value)
            known = frozenset((broker_dirs or {}).get(b, ()))
            if isinstance(cordon, str):  # "*"
                whole.add(b)
                if known:
                    dirs[b] = known
            elif cordon:
                dirs[b] = cordon
                if known and known <= cordon:
                    whole.add(b)
        return cls(frozenset(whole), dirs)

    def union(self, other: CordonView) -> CordonView:
        dirs = {b: self.dirs.get(b, frozenset()) | other.dirs.get(b, frozenset()) for b in {*self.dirs, *other.dirs}}
        return CordonView(self.whole | other.whole, dirs)

    def dir_cordoned(self, broker: int, path: str) -> bool:
        return broker in self.whole or path.rstrip("/") in {p.rstrip("/") for p in self.dirs.get(broker, ())}

    @property
    def empty(self) -> bool:
        return not self.whole and not any(self.dirs.values())


@dataclass(frozen=True, order=True)
class CordonViolation:
    """A new replica that would land on a cordoned broker (``log_dir`` ``None``) or log dir."""

    topic: str
    partition: int
    broker: int
    log_dir: str | None = None
    #: ``"move"`` (a reassignment's adding replica), ``"assignment"`` (an explicit placement of a new
    #: partition) or ``"log-dir"`` (an intra-broker move)
    kind: str = "move"

    def __str__(self) -> str:
        where = f"log dir {self.log_dir} of broker {self.broker}" if self.log_dir else f"broker {self.broker}"
        return f"{self.topic}-{self.partition} -> {where} ({self.kind})"


def cordon_violations(
    view: CordonView,
    *,
    moves: Iterable[Move] = (),
    assignments: Mapping[TopicPartition, Sequence[int]] | None = None,
    log_dir_moves: Mapping[TopicPartitionReplica, str] | None = None,
) -> tuple[CordonViolation, ...]:
    """Every new replica that would land on a cordoned broker or log dir.

    ``moves``: a reassignment's adding replicas (a replica that stays where it is is not new: cordons do not
    evict); ``assignments``: the explicit replicas of new partitions or topics, every one new;
    ``log_dir_moves``: intra-broker moves, ``{replica: target log dir}``. Kafka 4.3.0/4.3.1 do not refuse
    explicit targets themselves (KAFKA-20832): check before sending."""
    out: set[CordonViolation] = set()
    for m in moves:
        for b in m.adding_replicas:
            if b in view.whole:
                out.add(CordonViolation(m.topic, m.partition, b, kind="move"))
    for tp, replicas in (assignments or {}).items():
        for b in replicas:
            if b in view.whole:
                out.add(CordonViolation(tp[0], tp[1], b, kind="assignment"))
    for (topic, partition, broker), path in (log_dir_moves or {}).items():
        if view.dir_cordoned(broker, path):
            out.add(CordonViolation(topic, partition, broker, log_dir=path, kind="log-dir"))
    return tuple(sorted(out))


def check_cordons(
    view: CordonView,
    *,
    moves: Iterable[Move] = (),
    assignments: Mapping[TopicPartition, Sequence[int]] | None = None,
    log_dir_moves: Mapping[TopicPartitionReplica, str] | None = None,
    allow_cordoned_targets: bool = False,
) -> tuple[CordonViolation, ...]:
    """:func:`cordon_violations`, refused (:class:`CordonRefusedError`, before anything is sent) unless
    ``allow_cordoned_targets``; returns them (allowed ones too, to report)."""
    found = cordon_violations(view, moves=moves, assignments=assignments, log_dir_moves=log_dir_moves)
    if found and not allow_cordoned_targets:
        shown = ", ".join(map(str, found[:10])) + (f" and {len(found) - 10} more" if len(found) > 10 else "")
        raise CordonRefusedError(
            f"{len(found)} new replica(s) would land on a cordoned broker or log dir: {shown}. A cordon "
            "(cordoned.log.dirs, KIP-1066) marks where replicas are being moved away from; Kafka 4.3.0/4.3.1 "
            "would accept these explicit targets (KAFKA-20832). Nothing was sent. Choose other targets, uncordon "
            "first, or pass allow_cordoned_targets=True to place them there deliberately.")
    return found


# -- a run's cordons: the backup in the run state, restored exactly ----------------------------


def backup_path(state_dir: StateLocation) -> str:
    return f"{as_store(state_dir).uri.rstrip('/')}/{CORDON_BACKUP_FILE}"


def read_backup(state_dir: StateLocation | None) -> CordonBackup | None:
    """The cordon backup of a run (``None`` when there is none)."""
    if state_dir is None:
        return None
    data = as_store(state_dir).read(CORDON_BACKUP_FILE)
    return None if data is None else CordonBackup.model_validate_json(data)


def write_backup(state_dir: StateLocation, backup: CordonBackup) -> None:
    as_store(state_dir).write(CORDON_BACKUP_FILE, backup.model_dump_json(indent=1).encode())


def _same(a: str | None, b: str | None) -> bool:
    return parse_cordon(a) == parse_cordon(b)


def apply_cordons(
    admin: ClusterAdmin,
    cordons: Mapping[int, Cordon],
    *,
    state_dir: StateLocation,
    dry_run: bool = False,
    log: logging.Logger | None = None,
) -> dict[int, str | None]:
    """Cordon ``cordons`` (``{broker: "*" or paths}``), merged with each broker's value before the run; returns
    what was (or, ``dry_run``, would be) set.

    The values of brokers not yet in the run's backup are read and written to ``state_dir`` BEFORE anything
    is set, so :func:`restore_cordons` restores them even if this process dies right after. Refused before
    anything is read when the cluster has no cordons (Kafka older than 4.3, or metadata.version below 4.3-IV0:
    the brokers would refuse the config)."""
    log = log or _log
    if not cordons:
        return {}
    caps = admin.capabilities()
    if not caps.cordons:
        raise UnsupportedBrokerError(
            f"the cluster does not support cordons (cordoned.log.dirs, KIP-1066: Apache Kafka 4.3+ with "
            f"metadata.version 4.3-IV0 or newer; this cluster's metadata.version level is {caps.metadata_version}). "
            "Nothing was changed. Upgrade (and finalize metadata.version), or run without cordons: topics created "
            "meanwhile may then get replicas on the brokers or dirs being emptied")
    backup = read_backup(state_dir) or CordonBackup()
    fresh = sorted(set(cordons) - set(backup.brokers))
    if fresh:
        backup = CordonBackup(brokers={**backup.brokers, **admin.describe_cordons(fresh)})
        if not dry_run:
            write_backup(state_dir, backup)
    # merged with the value before the run (not with a read now: a broker may still show a value written a
    # moment ago as before), and written whole: setting a broker's cordon again is harmless
    changed = {b: merge_cordon(backup.brokers.get(b), c) for b, c in sorted(cordons.items())}
    if dry_run:
        log.info("DRY RUN: would set cordoned.log.dirs: %s", json.dumps({str(b): v for b, v in changed.items()}))
        return changed
    admin.set_cordons(changed)
    journal(state_dir, {"event": "cordoned", "brokers": {str(b): v for b, v in changed.items()}}, log=log)
    log.info("cordoned.log.dirs set: %s (the previous values are backed up in %s)",
             json.dumps({str(b): v for b, v in changed.items()}), backup_path(state_dir))
    return changed


def restore_cordons(
    admin: ClusterAdmin,
    state_dir: StateLocation | None,
    *,
    log: logging.Logger | None = None,
    check_s: float = RESTORE_CHECK_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Put every broker's ``cordoned.log.dirs`` back to its value before the run, exactly (someone else's value
    included), check it, and delete the backup. Returns whether there was anything to restore.

    Every backed-up value is written, not only those that read differently: a broker shows a dynamic config
    once it has applied it from the metadata log, so a read right after the cordon was set may still show the
    old value (seen on 4.3.0 and 4.3.1). Then it reads until every broker shows its value, for up to
    ``check_s``; still different after that raises (the backup stays for the next try). A broker that is not
    running is skipped with a warning; the backup keeps it."""
    log = log or _log
    backup = read_backup(state_dir)
    if backup is None:
        return False
    assert state_dir is not None
    live = {b.id for b in admin.describe_cluster(include_fenced=True).brokers if not b.fenced}
    down = {b: v for b, v in backup.brokers.items() if b not in live}
    todo = {b: v for b, v in backup.brokers.items() if b in live}
    if down:
        log.warning("broker(s) %s are not running: their cordoned.log.dirs is restored when they are back (the "
                    "backup stays in %s)", sorted(down), backup_path(state_dir))
    if todo:
        admin.set_cordons(todo)
        deadline = clock() + check_s
        while True:
            current = admin.describe_cordons(sorted(todo))
            differ = {b: current.get(b) for b, v in todo.items() if not _same(current.get(b), v)}
            if not differ:
                break
            if clock() >= deadline:
                raise RuntimeError(
                    f"cordoned.log.dirs still differs from the backup {check_s:g} s after restoring it: brokers "
                    f"{sorted(differ)} show {differ}, the backup has { {b: todo[b] for b in differ} }; the backup "
                    f"stays in {backup_path(state_dir)} for the next try")
            sleep(min(0.5, max(0.0, deadline - clock())))
    if down:
        write_backup(state_dir, CordonBackup(brokers=down))
    else:
        as_store(state_dir).delete(CORDON_BACKUP_FILE)
    journal(state_dir, {"event": "cordons-restored", "brokers": sorted(todo)}, log=log)
    log.info("cordoned.log.dirs restored exactly as before on brokers %s", sorted(todo))
    return True


def cordon_refusal(admin: ClusterAdmin, moves: Sequence[Move]) -> str | None:
    """Why these moves may not go out: a new replica would land on a cordoned broker or log dir (``None``: none
    would, or the cluster has no cordons). Reads the target brokers' ``cordoned.log.dirs`` (one DescribeConfigs):
    execution's pre-flight, because Kafka 4.3.0/4.3.1 would accept such a reassignment (KAFKA-20832)."""
    adding = sorted({b for m in moves for b in m.adding_replicas})
    if not adding or not admin.capabilities().cordons:
        return None
    view = CordonView.from_configs(admin.describe_cordons(adding))
    try:
        check_cordons(view, moves=moves)
    except CordonRefusedError as e:
        return str(e).replace("pass allow_cordoned_targets=True to place them there deliberately",
                              "plan again from the current cluster (a plan never targets a cordoned broker)")
    return None


def cordoned_brokers(admin: ClusterAdmin, brokers: Collection[int]) -> frozenset[int]:
    """The brokers of ``brokers`` whose every log dir is cordoned (``cordoned.log.dirs=*``); none on a cluster
    without cordons."""
    if not brokers or not admin.capabilities().cordons:
        return frozenset()
    return CordonView.from_configs(admin.describe_cordons(sorted(brokers))).whole
