"""Leadership off given brokers without moving data, and back again (issue 15).

Before a broker or a whole rack is restarted, patched or drained of traffic, its partitions'
leadership should be elsewhere: clients then fail over nothing while it is down. Kafka has no
call that moves a leader to a chosen replica; what it has is the *preferred* leader (the first
replica) and a preferred-leader election (ElectLeaders). So an evacuation:

1. reorders each affected partition's replicas so that the first one is an in-sync replica on a
   broker that stays (a reassignment to the same replicas in another order: nothing is copied,
   the controller completes it at once; KIP-860's guard sees the same replication factor);
2. elects the preferred leaders of those partitions, and of those whose preferred leader already
   stays but whose current leader is on an evacuated broker;
3. keeps a :class:`LeadershipRecord` of every partition's replica order before it changed, written
   before the first request, so that :func:`restore_plan` can put each order back afterwards and
   elect the previous preferred leaders again.

Reordering rather than only electing matters: with ``auto.leader.rebalance.enable`` (Kafka's
default) the controller moves leadership back to the preferred leader within minutes; with the
order changed, it stays off the evacuated brokers until the record is restored.

Safety rules: only an *in-sync* replica becomes the new preferred leader (never a lagging one:
electing it would fail, or lose data with unclean election); a partition with no in-sync replica
outside the evacuated brokers is refused by name, not forced; a partition with a reassignment in
flight is left alone (reordering it would replace the reassignment); a restore puts back only an
order whose replica *set* is unchanged since the record (anything else was moved by someone since,
and is reported stale). The choice of the new preferred leader balances leadership: the eligible
replica whose broker leads the fewest partitions so far.

Pure core: the decisions here; :func:`apply_leadership` drives them through the
:class:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterAdmin` port in batches.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from pydantic import Field

from airflow_kafka_reassign.core.records.store import Store
from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot, PartitionState, TopicPartition, _Frozen
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin
from airflow_kafka_reassign.exceptions import ConfigurationError

log = logging.getLogger(__name__)

#: The record's file name in its folder.
RECORD_FILE = "leadership.json"
#: Election errors that clear once the preferred replica is back in the ISR: retried until the deadline.
RETRIABLE_ELECTION_ERRORS = frozenset({"PREFERRED_LEADER_NOT_AVAILABLE", "NOT_CONTROLLER", "REQUEST_TIMED_OUT"})


class LeadershipChange(_Frozen):
    """One partition: its replica order now (``before``) and the order to set (``after``)."""

    topic: str
    partition: int = Field(ge=0)
    before: tuple[int, ...]
    after: tuple[int, ...]

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def reorder(self) -> bool:
        """Whether the replica order changes (else only an election is needed)."""
        return self.before != self.after


class LeadershipPlan(_Frozen):
    """What an evacuation or a restore will do, and what it refuses (``{"topic-p": reason}``)."""

    action: Literal["evacuate", "restore"]
    #: The brokers leadership leaves (evacuate) or returns to (restore).
    brokers: tuple[int, ...]
    changes: tuple[LeadershipChange, ...] = ()
    refused: dict[str, str] = Field(default_factory=dict)

    @property
    def reorders(self) -> int:
        return sum(c.reorder for c in self.changes)


class RecordEntry(_Frozen):
    topic: str
    partition: int = Field(ge=0)
    #: The partition's replica order before the evacuation changed it.
    replicas: tuple[int, ...]


class LeadershipRecord(_Frozen):
    """The replica order of every partition an evacuation changed, written before it changed them."""

    format_version: Literal[1] = 1
    cluster_id: str | None = None
    brokers: tuple[int, ...]
    created_at: str
    partitions: tuple[RecordEntry, ...] = ()

    def merged(self, changes: Iterable[LeadershipChange]) -> LeadershipRecord:
        """This record with the ``before`` order of ``changes`` it does not hold yet: a retried evacuation
        never overwrites an original order with the evacuated one it reads back."""
        have = {(p.topic, p.partition) for p in self.partitions}
        new = [RecordEntry(topic=c.topic, partition=c.partition, replicas=c.before)
               for c in changes if (c.topic, c.partition) not in have]
        return self.model_copy(update={"partitions": self.partitions + tuple(new)}) if new else self


def brokers_to_evacuate(snapshot: ClusterSnapshot, brokers: Collection[int] = (),
                        racks: Collection[str] = ()) -> tuple[int, ...]:
    """The broker ids named by ``brokers`` and ``racks``; an unknown id or rack is refused by name."""
    known = snapshot.racks
    unknown = sorted(set(brokers) - set(known))
    if unknown:
        raise ConfigurationError(f"broker(s) {unknown} are not in the cluster (brokers: {sorted(known)}): fix `brokers`")
    by_rack = {r for r in known.values() if r is not None}
    bad_racks = sorted(set(racks) - by_rack)
    if bad_racks:
        raise ConfigurationError(f"rack(s) {bad_racks} are not in the cluster (racks: {sorted(by_rack)}): fix `racks`")
    chosen = set(brokers) | {b for b, r in known.items() if r in set(racks)}
    if not chosen:
        raise ConfigurationError("name the brokers or racks to take leadership off (`brokers` or `racks`)")
    if chosen >= set(known):
        raise ConfigurationError(f"brokers {sorted(chosen)} are every broker of the cluster: leadership has "
                                 "nowhere to go")
    return tuple(sorted(chosen))


def topic_filter(patterns: Sequence[str] | None) -> Callable[[str], bool]:
    """Whether a topic matches one of ``patterns`` (full match); a bad pattern is refused by name."""
    if patterns is None:
        return lambda _: True
    compiled = []
    for pat in patterns:
        try:
            compiled.append(re.compile(pat))
        except re.error as e:
            raise ConfigurationError(f"topics: {pat!r} is not a regular expression ({e})") from None
    return lambda name: any(c.fullmatch(name) for c in compiled)


def _name(p: PartitionState | LeadershipChange | RecordEntry) -> str:
    return f"{p.topic}-{p.partition}"


def evacuation_plan(snapshot: ClusterSnapshot, brokers: Collection[int],
                    topics: Sequence[str] | None = None) -> LeadershipPlan:
    """Take preferred and actual leadership off ``brokers`` (see the module's rules), for the partitions
    of the topics matching ``topics`` (regular expressions, full match; ``None``: every topic)."""
    away = set(brokers)
    wanted = topic_filter(topics)
    leaders: Counter[int] = Counter(p.replicas[0] for p in snapshot.partitions if p.replicas and p.replicas[0] not in away)
    changes: list[LeadershipChange] = []
    refused: dict[str, str] = {}
    for p in snapshot.partitions:
        if not p.replicas or not wanted(p.topic):
            continue
        preferred_away = p.replicas[0] in away
        leader_away = p.leader is not None and p.leader in away
        if not preferred_away and not leader_away:
            continue
        if p.reassigning:
            refused[_name(p)] = (f"a reassignment is in flight (replicas {list(p.replicas)}): wait for it or cancel "
                                 "it, then evacuate again")
            continue
        if not preferred_away and p.replicas[0] in p.isr:  # the order is right: an election moves the leader
            changes.append(LeadershipChange(topic=p.topic, partition=p.partition, before=p.replicas, after=p.replicas))
            continue
        eligible = [b for b in p.replicas if b not in away and b in p.isr]
        if not eligible:
            stays = [b for b in p.replicas if b not in away]
            refused[_name(p)] = (f"no in-sync replica outside brokers {sorted(away)} (replicas {list(p.replicas)}, "
                                 f"ISR {list(p.isr)}" + (f"; {stays} not in sync" if stays else "; every replica is on "
                                                         "them") + "): its leader cannot move without data loss")
            continue
        new = min(eligible, key=lambda b: (leaders[b], p.replicas.index(b)))
        leaders[new] += 1
        after = (new, *(b for b in p.replicas if b != new))
        changes.append(LeadershipChange(topic=p.topic, partition=p.partition, before=p.replicas, after=after))
    return LeadershipPlan(action="evacuate", brokers=tuple(sorted(away)), changes=tuple(changes), refused=refused)


def restore_plan(snapshot: ClusterSnapshot, record: LeadershipRecord) -> LeadershipPlan:
    """Put back the replica order ``record`` kept, and elect those preferred leaders again."""
    parts = snapshot.partition_map()
    changes: list[LeadershipChange] = []
    refused: dict[str, str] = {}
    for entry in record.partitions:
        p = parts.get(TopicPartition(entry.topic, entry.partition))
        if p is None:
            refused[_name(entry)] = "no longer in the cluster (topic deleted?)"
        elif p.reassigning:
            refused[_name(entry)] = f"a reassignment is in flight (replicas {list(p.replicas)}): restore it later"
        elif set(p.replicas) != set(entry.replicas):
            refused[_name(entry)] = (f"stale: its replicas are {list(p.replicas)} now, the record kept "
                                     f"{list(entry.replicas)}; someone moved it since, its order is theirs")
        elif p.replicas != entry.replicas or p.leader != entry.replicas[0]:
            changes.append(LeadershipChange(topic=p.topic, partition=p.partition, before=p.replicas,
                                            after=entry.replicas))
    return LeadershipPlan(action="restore", brokers=record.brokers, changes=tuple(changes), refused=refused)


# -- the record on the plan storage --------------------------------------------------------------------------


def read_record(store: Store) -> tuple[LeadershipRecord | None, str | None]:
    """The record in ``store`` and its version (``(None, None)`` when there is none)."""
    got = store.read_versioned(RECORD_FILE)
    if got is None:
        return None, None
    data, version = got
    try:
        return LeadershipRecord.model_validate_json(data), version
    except ValueError as e:
        raise ConfigurationError(f"{store.uri}/{RECORD_FILE} is not a leadership record ({e}); "
                                 "point record_uri at the folder an evacuation wrote") from e


def save_record(store: Store, plan: LeadershipPlan, *, cluster_id: str | None, attempts: int = 5) -> LeadershipRecord:
    """Add ``plan``'s original orders to the record in ``store`` (compare-and-set: concurrent writers lose
    nothing), before any of them changes. A record for other brokers is refused: restore it first."""
    for _ in range(attempts):
        record, version = read_record(store)
        if record is None:
            record = LeadershipRecord(cluster_id=cluster_id, brokers=plan.brokers,
                                      created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        elif record.brokers != plan.brokers or (record.cluster_id and cluster_id and record.cluster_id != cluster_id):
            raise ConfigurationError(
                f"{store.uri}/{RECORD_FILE} holds the evacuation of brokers {list(record.brokers)} of cluster "
                f"{record.cluster_id}; this one is of brokers {list(plan.brokers)} of {cluster_id}: restore that one "
                "first, or give this evacuation its own record_uri")
        merged = record.merged(c for c in plan.changes if c.reorder)
        if merged is record and version is not None:
            return record
        data = json.dumps(merged.model_dump(mode="json"), indent=1).encode()
        if store.write_if(RECORD_FILE, data, version):
            return merged
    raise ConfigurationError(f"{store.uri}/{RECORD_FILE} changed {attempts} times while this task wrote it: "
                             "is another evacuation writing the same record?")


# -- applying a plan -----------------------------------------------------------------------------------------


@dataclass
class LeadershipResult:
    """What :func:`apply_leadership` did. Partition names are ``topic-p``."""

    action: str
    brokers: tuple[int, ...]
    reordered: int = 0
    elected: int = 0
    refused: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    #: evacuate: partitions still led by an evacuated broker at the end; restore: not led by the recorded leader.
    not_moved: dict[str, int | None] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.refused or self.failed or self.not_moved)

    def summary(self, limit: int = 20) -> dict[str, object]:
        def first(d: dict[str, object]) -> dict[str, object]:
            return dict(sorted(d.items())[:limit])

        return {"action": self.action, "brokers": list(self.brokers), "reordered": self.reordered,
                "elected": self.elected, "refused": len(self.refused), "failed": len(self.failed),
                "not_moved": len(self.not_moved), "refused_partitions": first(dict(self.refused)),
                "failed_partitions": first(dict(self.failed)), "not_moved_partitions": first(dict(self.not_moved))}

    def problems(self, limit: int = 10) -> str:
        """One line naming what did not go as planned (empty when :attr:`ok`)."""
        out = []
        for what, d in (("refused", self.refused), ("failed", self.failed)):
            if d:
                items = sorted(d.items())
                out.append(f"{len(d)} {what}: " + "; ".join(f"{k} ({v})" for k, v in items[:limit])
                           + (f" and {len(d) - limit} more" if len(d) > limit else ""))
        if self.not_moved:
            led = sorted(self.not_moved.items())
            where = "still led by an evacuated broker" if self.action == "evacuate" else "not led by the recorded leader"
            out.append(f"{len(led)} {where}: " + ", ".join(f"{k} (leader {v})" for k, v in led[:limit])
                       + (f" and {len(led) - limit} more" if len(led) > limit else ""))
        return "; ".join(out)


def apply_leadership(
    admin: ClusterAdmin,
    plan: LeadershipPlan,
    *,
    batch_size: int = 1000,
    timeout_s: float = 300.0,
    poll_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> LeadershipResult:
    """Reorder and elect ``plan``'s partitions, ``batch_size`` at a time, then check every leader.

    Before each batch the batch's partitions are read again: a partition whose replicas or ISR changed
    since the plan is planned again from that fresh view (evacuate) or refused (restore), so a reorder
    never makes a replica preferred that is no longer in sync. A restore whose preferred replica is
    not in sync yet (a broker just back from maintenance, catching up) waits for it before its reorder,
    and elections that fail for the same reason are retried, both until ``timeout_s``; past it the
    partition is named (``failed``: the broker not back in the ISR) and its order left as it is.
    """
    if batch_size < 1:
        raise ConfigurationError(f"batch_size must be at least 1, not {batch_size}")
    deadline = clock() + timeout_s
    result = LeadershipResult(action=plan.action, brokers=plan.brokers, refused=dict(plan.refused))
    changes = list(plan.changes)
    for i in range(0, len(changes), batch_size):
        batch = _recheck(admin, plan, changes[i:i + batch_size], result, deadline, poll_s, sleep, clock)
        reorder = {c.tp: c.after for c in batch if c.reorder}
        if reorder:
            alter = admin.alter_reassignments(reorder)
            for r in alter.failed:
                result.failed[f"{r.topic}-{r.partition}"] = f"reorder refused: {r.error_code}: {r.error}"
            result.reordered += len(alter.succeeded)
            _wait_reordered(admin, [r.tp for r in alter.succeeded], deadline, poll_s, sleep, clock)
        elect = [c.tp for c in batch if f"{c.topic}-{c.partition}" not in result.failed]
        result.elected += _elect(admin, elect, result, deadline, poll_s, sleep, clock)
    _verify(admin, plan, changes, result)
    return result


def _recheck(admin: ClusterAdmin, plan: LeadershipPlan, batch: Sequence[LeadershipChange],
             result: LeadershipResult, deadline: float, poll_s: float, sleep: Callable[[float], None],
             clock: Callable[[], float]) -> list[LeadershipChange]:
    """The batch read again. A restore whose preferred replica is not in sync yet (a broker back from maintenance,
    still catching up) waits for it, until ``deadline``; past it the partition is named as failed, its order left."""
    keep: list[LeadershipChange] = []
    while True:
        fresh = admin.snapshot(topics=sorted({c.topic for c in batch}))
        catching_up = _sort(plan, batch, fresh, result, keep)
        if not catching_up:
            return keep
        if clock() >= deadline:
            for c, p in catching_up:
                result.failed[_name(c)] = (f"broker {c.after[0]} is not back in the ISR (ISR {list(p.isr)}) within "
                                           "the timeout: its order is left; run the restore again once it is in sync")
            return keep
        sleep(poll_s)
        batch = [c for c, _ in catching_up]


def _sort(plan: LeadershipPlan, batch: Sequence[LeadershipChange], fresh: ClusterSnapshot,
          result: LeadershipResult, keep: list[LeadershipChange]) -> list[tuple[LeadershipChange, PartitionState]]:
    """Sort the batch by what the fresh read says: to do now (into ``keep``), refused, or (a restore) waiting for its
    preferred replica to be in sync again (returned)."""
    parts = fresh.partition_map()
    waiting: list[tuple[LeadershipChange, PartitionState]] = []
    for c in batch:
        p = parts.get(c.tp)
        if p is None:
            result.refused[_name(c)] = "no longer in the cluster (topic deleted?)"
        elif p.replicas == c.before and (not c.reorder or c.after[0] in p.isr):
            keep.append(c)
        elif plan.action == "restore" and p.replicas == c.before and not p.reassigning:
            waiting.append((c, p))
        elif plan.action == "evacuate":
            again = evacuation_plan(fresh.model_copy(update={"partitions": (p,)}), plan.brokers, None)
            keep.extend(again.changes)
            result.refused.update(again.refused)
        else:
            result.refused[_name(c)] = (f"changed since the restore was planned: replicas {list(p.replicas)}, "
                                        f"ISR {list(p.isr)}; run the restore again")
    return waiting


def _wait_reordered(admin: ClusterAdmin, tps: Sequence[TopicPartition], deadline: float, poll_s: float,
                    sleep: Callable[[float], None], clock: Callable[[], float]) -> None:
    """Until the controller lists none of ``tps`` (a reorder copies nothing: it completes at once)."""
    while tps and admin.list_reassignments(tps):
        if clock() >= deadline:
            return  # _verify reports what did not move
        sleep(poll_s)


def _elect(admin: ClusterAdmin, tps: list[TopicPartition], result: LeadershipResult, deadline: float,
           poll_s: float, sleep: Callable[[float], None], clock: Callable[[], float]) -> int:
    elected = 0
    while tps:
        retry = []
        for r in admin.elect_preferred_leaders(tps):
            if r.ok:
                elected += 1
                result.failed.pop(f"{r.topic}-{r.partition}", None)
            else:
                result.failed[f"{r.topic}-{r.partition}"] = f"election failed: {r.error_code}: {r.error}"
                if r.error_code in RETRIABLE_ELECTION_ERRORS:
                    retry.append(r.tp)
        if not retry or clock() >= deadline:
            break
        sleep(poll_s)
        tps = retry
    return elected


def _verify(admin: ClusterAdmin, plan: LeadershipPlan, changes: Sequence[LeadershipChange],
            result: LeadershipResult) -> None:
    """Record the partitions whose leader is not where the plan puts it (read once more, at the end)."""
    if not changes:
        return
    parts = admin.snapshot(topics=sorted({c.topic for c in changes})).partition_map()
    away = set(plan.brokers)
    for c in changes:
        p = parts.get(c.tp)
        if p is None or _name(c) in result.refused:
            continue
        wrong = (p.leader is None or p.leader in away) if plan.action == "evacuate" else p.leader != c.after[0]
        if wrong:
            result.not_moved[_name(c)] = p.leader
