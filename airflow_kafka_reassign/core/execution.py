"""The execution engine: submit a plan's moves safely, in batches, under throttles; cancel them.

Pure (no Airflow, no Kafka client): it works on the
:class:`~airflow_kafka_reassign.core.ports.ClusterAdmin` port, so the operators, the sensor,
the trigger and a CLI share it, and unit tests drive it with the in-memory fake.

One call of :func:`step` is one retry-safe iteration. It derives everything from the cluster
and the plan (nothing from memory of earlier calls):

* the controller's in-flight reassignments (ListPartitionReassignments: the authority on what
  is moving, unlike describe, which shows KIP-860's intermediate replica sets) and the live
  replicas of the plan's partitions classify every move as

  - **done**: replicas equal the target, nothing in flight, the ISR holds every target replica;
  - **lagging**: replicas equal the target but the ISR misses a target replica;
  - **in flight**: the controller lists a reassignment to exactly the move's target (ours,
    whoever submitted it: this task, a killed earlier try, or the sensor);
  - **pending**: the partition is still on the move's expected current replicas;
  - **stale**: the partition is on other replicas than the plan expected (refused, with a diff);
  - **failed**: refused by a guard (an RF change not allowed) or by the broker;

  and every other listed reassignment is **foreign** (this plan did not start it);
* throttles are brought to exactly what the moves in flight need (set on their brokers and
  topic replicas only; removed as partitions finish), from a backup of the values that existed
  before, written to ``state_dir`` before the first throttle is set;
* then, if allowed, the next pending moves that fit the batch limits are submitted, with
  KIP-860's AllowReplicationFactorChange=false unless a move is a deliberate RF change.

:func:`run` loops :func:`step` until the plan is complete or a deadline passes, then
:func:`finish` restores the throttles exactly (and optionally elects preferred leaders).
:func:`cancel` cancels in-flight moves (KIP-455) and reports partitions left with another RF.

Example (with the in-memory fake; the operators pass a real ``KafkaClusterAdmin``)::

    >>> from airflow_kafka_reassign.testing import FakeClusterAdmin
    >>> fake = FakeClusterAdmin.build(brokers={1: "a", 2: "b", 3: "c"}, topics={"t": [[1, 2]]})
    >>> plan = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 2),
    ...                                     target_replicas=(2, 3)),))
    >>> status = step(fake, plan, ExecutionLimits(), ExecutionOptions())
    >>> [str(tp) for tp in status.submitted], status.complete
    (['t-0'], False)
    >>> fake.complete()
    >>> step(fake, plan, ExecutionLimits(), ExecutionOptions()).complete
    True
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from airflow_kafka_reassign.core.lease import LeaseKeeper, LeaseLostError
from airflow_kafka_reassign.core.models import Move, PartitionState, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.plan_io import KAFKA_ROLLBACK_FILE, ROLLBACK_FILE
from airflow_kafka_reassign.core.ports import ClusterAdmin, InFlightReassignment, ThrottleBackup
from airflow_kafka_reassign.core.store import Store, as_store
from airflow_kafka_reassign.core.throttle import (
    BROKER_THROTTLE_KEYS,
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    TOPIC_THROTTLE_KEYS,
    brokers_involved,
    merge_replica_list,
    throttled_replicas,
)
from airflow_kafka_reassign.exceptions import ConfigurationError

Order = Literal["plan", "smallest-first", "largest-first"]
OnDeadline = Literal["finish", "cancel"]
OnPlanError = Literal["refuse", "skip"]

#: The run-state folder inside a plan directory (the default ``state_dir``).
RUN_DIR = "run"
#: The throttle backup in ``state_dir``: the values that existed before this plan throttled.
THROTTLE_BACKUP_FILE = "throttle-backup.json"
#: The run's journal in ``state_dir``: one object per step that changed something (what it
#: submitted, what was refused, the throttles it set), named so that they list in time order.
JOURNAL_DIR = "journal"
#: Where the run state lives: a :class:`~airflow_kafka_reassign.core.store.Store` (a local
#: directory, object storage) or a local path.
StateLocation = Store | Path
#: A move that looks stale is observed once more after this delay before it is refused:
#: describe (metadata) can lag the controller for a moment after a reassignment completes.
SETTLE_RECHECK_S = 1.0
#: Partitions named per category in a summary (XCom stays small).
SUMMARY_SAMPLE = 20
#: Kafka's api key of AlterPartitionReassignments, and the version carrying KIP-860's flag.
_ALTER_REASSIGNMENTS_KEY = 45
_RF_GUARD_MIN_VERSION = 1

_log = logging.getLogger(__name__)
_JOURNAL_SEQ = itertools.count()


def _sleep(seconds: float) -> None:
    """The engine's wait between two polls (tests replace it)."""
    time.sleep(seconds)


# -- parameters ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutionLimits:
    """How many moves may run at once, and in which order pending moves go out.

    Both limits count every reassignment the controller lists, including foreign ones (allowed
    with ``allow_concurrent_reassignments``). A move *touches* the brokers that gain or lose a
    replica (its adding and removing replicas); a move that only reorders replicas touches none.

    :param max_moves: concurrent reassignments in the cluster (``None``: no limit).
    :param max_moves_per_broker: concurrent reassignments touching any one broker.
    :param order: ``"plan"`` (the plan's order), ``"smallest-first"`` or ``"largest-first"``
        (by bytes to copy: partition size x adding replicas, from DescribeLogDirs; moves of
        unknown size go last, in plan order).
    """

    max_moves: int | None = None
    max_moves_per_broker: int | None = None
    order: Order = "smallest-first"

    def __post_init__(self) -> None:
        for name in ("max_moves", "max_moves_per_broker"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigurationError(f"{name} must be a positive integer or None, not {value!r}")
        if self.order not in ("plan", "smallest-first", "largest-first"):
            raise ConfigurationError(
                f"order must be 'plan', 'smallest-first' or 'largest-first', not {self.order!r}"
            )

    @property
    def limited(self) -> bool:
        return self.max_moves is not None or self.max_moves_per_broker is not None


@dataclass(frozen=True)
class ExecutionOptions:
    """What execution may do beyond the safe default (each flag allows one named thing).

    :param allow_replication_factor_change: send the moves the plan marks ``allow_rf_change``
        with KIP-860's AllowReplicationFactorChange=true; without it they are refused.
    :param rf_guard: ``"broker"`` (Kafka 4.1+ enforces KIP-860; older brokers: refused, nothing
        sent) or ``"client"`` (older brokers: replica counts compared with the controller's
        view just before sending; racy, chosen explicitly).
    :param allow_concurrent_reassignments: proceed while reassignments this plan did not start
        are in flight (they count against the limits; partitions they move are refused as stale).
    :param on_plan_error: what a *plan error* does: a pending move whose target replicas name a
        broker that is not a live broker of the cluster, a move of a topic or partition that no
        longer exists, or of a topic whose partition count differs from the plan's snapshot
        (``ReassignmentPlan.partition_counts``). ``"refuse"`` (default): the whole plan is
        refused before anything is sent (no throttle, no reassignment). ``"skip"``: those moves
        are refused by name and the other moves run.
    :param allow_offline_brokers: target replicas may name a broker that the cluster does not list
        as alive (a registered broker that is down): such moves are sent and wait for the broker
        (the controller refuses a broker id it has never registered, per move); offline brokers
        get no throttle (setting one would wait for them). Without it they are plan errors.
    :param strict: refuse the whole plan when any move is refused, stale ones included (implies
        ``on_plan_error="refuse"``; combining it with ``"skip"`` is a configuration error).
    :param throttle_bytes_per_sec: replication throttle on the brokers and replicas involved.
    :param elect_leaders: elect the preferred leader of each moved partition once it is done.
    :param dry_run: validate everything, log the exact requests, change nothing.
    """

    allow_replication_factor_change: bool = False
    rf_guard: Literal["broker", "client"] = "broker"
    allow_concurrent_reassignments: bool = False
    on_plan_error: OnPlanError = "refuse"
    allow_offline_brokers: bool = False
    strict: bool = False
    throttle_bytes_per_sec: int | None = None
    elect_leaders: bool = False
    dry_run: bool = False

    def __post_init__(self) -> None:
        if self.rf_guard not in ("broker", "client"):
            raise ConfigurationError(f"rf_guard must be 'broker' or 'client', not {self.rf_guard!r}")
        if self.on_plan_error not in ("refuse", "skip"):
            raise ConfigurationError(
                f"on_plan_error must be 'refuse' (the whole plan, before anything is sent) or 'skip' (only the "
                f"moves in error; the others run), not {self.on_plan_error!r}"
            )
        if self.strict and self.on_plan_error == "skip":
            raise ConfigurationError(
                "strict=True refuses the whole plan when any move is refused, on_plan_error='skip' runs the other "
                "moves: choose one (strict=True already refuses the plan on a plan error)"
            )
        rate = self.throttle_bytes_per_sec
        if rate is not None and (not isinstance(rate, int) or isinstance(rate, bool) or rate <= 0):
            raise ConfigurationError(
                f"throttle_bytes_per_sec must be a positive integer (bytes/s) or None, not {rate!r}"
            )


# -- status -------------------------------------------------------------------------------------


def _names(tps: Iterable[TopicPartition], limit: int = SUMMARY_SAMPLE) -> list[str]:
    return [str(tp) for tp in sorted(tps)[:limit]]


@dataclass
class ExecutionStatus:
    """Where a plan stands, derived from the cluster and the plan only (plus the throttle backup).

    Every move of the plan is in exactly one of ``done``, ``lagging``, ``in_flight``,
    ``pending``, ``stale`` and ``failed``. ``foreign`` lists reassignments this plan did not
    start (a plan partition moved elsewhere by someone else is also ``stale``). ``submitted``
    are the moves this call submitted (also in ``in_flight`` or, if instant, ``done``).
    """

    total: int = 0
    done: list[TopicPartition] = field(default_factory=list)
    in_flight: list[TopicPartition] = field(default_factory=list)
    pending: list[TopicPartition] = field(default_factory=list)
    #: expected current replicas vs the actual ones
    stale: dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    foreign: list[TopicPartition] = field(default_factory=list)
    submitted: list[TopicPartition] = field(default_factory=list)
    #: partition -> why it was refused (a guard) or failed (the broker's error)
    failed: dict[TopicPartition, str] = field(default_factory=dict)
    #: replicas equal the target but the ISR misses a target replica
    lagging: list[TopicPartition] = field(default_factory=list)
    #: dry run: what would have been submitted now
    would_submit: list[TopicPartition] = field(default_factory=list)
    #: plan errors, one line per problem (a broker, a topic): what each names and how many moves
    #: it concerns; their moves are in ``failed`` (see ``ExecutionOptions.on_plan_error``)
    plan_errors: list[str] = field(default_factory=list)
    #: why no new move may be submitted (plan errors, foreign moves, strict, an RF guard the brokers lack)
    blocked: str | None = None
    #: preferred-leader elections run by this call (partition -> error, None when elected)
    elections: dict[TopicPartition, str | None] = field(default_factory=dict)
    #: the controller's listing: every in-flight reassignment (ours and foreign)
    reassignments: dict[TopicPartition, InFlightReassignment] = field(default_factory=dict)
    #: each classified move as it really is: current_replicas = the live (or original) replicas
    moves: dict[TopicPartition, Move] = field(default_factory=dict)
    observed_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def complete(self) -> bool:
        """Nothing left that this plan will do: no move pending, in flight or lagging.

        Stale and failed moves are refused, not left: check :attr:`ok` for a clean finish.
        """
        return not (self.pending or self.in_flight or self.lagging)

    @property
    def ok(self) -> bool:
        """Complete, and nothing was refused or failed."""
        return self.complete and not self.stale and not self.failed and self.blocked is None

    @property
    def remaining(self) -> list[TopicPartition]:
        return sorted([*self.in_flight, *self.pending, *self.lagging])

    def progress_line(self) -> str:
        line = (
            f"{len(self.done)}/{self.total} moves done, {len(self.in_flight)} in flight, "
            f"{len(self.pending)} pending"
        )
        extras = [(self.lagging, "lagging (ISR short)"), (self.stale, "stale (refused)"),
                  (self.failed, "failed"), (self.foreign, "foreign in flight")]
        for items, what in extras:
            if items:
                line += f", {len(items)} {what}"
        if self.submitted:
            line += f"; submitted {len(self.submitted)} now"
        if self.blocked:
            line += "; BLOCKED (see the warning)"
        return line

    def summary(self) -> dict[str, Any]:
        """A small JSON-able dict for XCom and logs (at most a few partitions named per kind)."""
        out: dict[str, Any] = {
            "moves": self.total,
            "done": len(self.done),
            "in_flight": len(self.in_flight),
            "pending": len(self.pending),
            "lagging": len(self.lagging),
            "stale": len(self.stale),
            "failed": len(self.failed),
            "foreign": len(self.foreign),
            "submitted": len(self.submitted),
            "complete": self.complete,
            "ok": self.ok,
            "blocked": self.blocked,
        }
        if self.stale:
            out["stale_partitions"] = {
                str(tp): {"expected": list(self.stale[tp][0]), "actual": list(self.stale[tp][1])}
                for tp in sorted(self.stale)[:SUMMARY_SAMPLE]
            }
        if self.failed:
            out["failed_partitions"] = {str(tp): self.failed[tp] for tp in sorted(self.failed)[:SUMMARY_SAMPLE]}
        if self.plan_errors:
            out["plan_errors"] = self.plan_errors[:SUMMARY_SAMPLE]
        if self.foreign:
            out["foreign_partitions"] = _names(self.foreign)
        if self.remaining:
            out["remaining_partitions"] = _names(self.remaining)
        if self.would_submit:
            out["would_submit"] = len(self.would_submit)
        return out


# -- observing the cluster ----------------------------------------------------------------------


@dataclass
class _Observation:
    reassignments: dict[TopicPartition, InFlightReassignment]
    partitions: dict[TopicPartition, PartitionState]
    #: the brokers the cluster lists as alive (DescribeCluster)
    brokers: frozenset[int] = frozenset()
    #: the plan's topics that exist, with their partition count now
    topics: dict[str, int] = field(default_factory=dict)


def _observe(admin: ClusterAdmin, topics: Collection[str]) -> _Observation:
    """The controller's in-flight reassignments (all of them), the live brokers and the live
    state of ``topics``."""
    reassignments = admin.list_reassignments()
    try:
        snap = admin.snapshot(topics=sorted(topics))
    except ConfigurationError:
        # a plan topic was deleted: read every topic, the missing ones' moves then fail by name
        snap = admin.snapshot()
    wanted = set(topics)
    parts = {p.tp: p for p in snap.partitions if p.topic in wanted}
    counts = Counter(tp.topic for tp in parts)
    present = {t.name: t.partition_count or counts[t.name] for t in snap.topics if t.name in wanted}
    for topic, n in counts.items():  # a snapshot without topic records still shows the partitions
        present.setdefault(topic, n)
    return _Observation(reassignments=reassignments, partitions=parts,
                        brokers=frozenset(b.id for b in snap.brokers), topics=present)


def _moved(m: Move, current: Sequence[int]) -> Move:
    """``m`` with ``current_replicas`` set to what the cluster has.

    ``m`` itself when nothing differs (the usual case: no copy per move per step); otherwise
    built without re-validation, since both lists are sound already (the plan's target was
    validated when the plan was read, the live replicas come from the cluster)."""
    cur = tuple(current)
    rf_change = len(cur) != len(m.target_replicas)
    if cur == m.current_replicas and rf_change == m.allow_rf_change:
        return m
    return Move.model_construct(topic=m.topic, partition=m.partition, target_replicas=m.target_replicas,
                                current_replicas=cur, allow_rf_change=rf_change)


def rf_refusal(m: Move, live_rf: int, options: ExecutionOptions) -> str | None:
    """Why a move from a partition with ``live_rf`` replicas may not go out, or ``None``.

    KIP-860: only moves the plan marks ``allow_rf_change``, and only with
    ``allow_replication_factor_change=True``, may change a partition's replication factor.
    """
    if live_rf == len(m.target_replicas):
        return None
    change = f"{live_rf} to {len(m.target_replicas)}"
    if not m.allow_rf_change:
        return (
            f"refused: the move would change the replication factor from {change} and the plan does not mark "
            "it as an RF change (KIP-860; a plan computed from an intermediate replica set looks like this). "
            "Plan again from the current cluster, or mark the move allow_rf_change in the plan"
        )
    if not options.allow_replication_factor_change:
        return (
            f"refused: the plan marks this move as a replication-factor change ({change}); pass "
            "allow_replication_factor_change=True to allow it"
        )
    return None


def _classify(
    plan: ReassignmentPlan,
    obs: _Observation,
    options: ExecutionOptions,
    known_failed: Mapping[TopicPartition, str],
) -> ExecutionStatus:
    status = ExecutionStatus(total=len(plan), reassignments=dict(obs.reassignments))
    plan_moves = plan.by_partition()
    missing: list[TopicPartition] = []
    for tp, listed in obs.reassignments.items():
        planned = plan_moves.get(tp)
        if planned is None or listed.target_replicas != planned.target_replicas:
            status.foreign.append(tp)
    for m in plan.moves:
        tp = m.tp
        r = obs.reassignments.get(tp)
        if r is not None:
            if r.target_replicas == m.target_replicas:
                status.in_flight.append(tp)
                status.moves[tp] = _moved(m, r.original_replicas)
            else:
                status.stale[tp] = (m.current_replicas or r.original_replicas, r.replicas)
            continue
        live = obs.partitions.get(tp)
        if live is None:
            missing.append(tp)
            continue
        replicas = live.replicas
        if replicas == m.target_replicas:
            status.moves[tp] = _moved(m, replicas)
            if set(m.target_replicas) <= set(live.isr):
                status.done.append(tp)
            else:
                status.lagging.append(tp)
        elif m.current_replicas is None or replicas == m.current_replicas:
            status.moves[tp] = _moved(m, replicas)
            reason = rf_refusal(m, len(replicas), options) or known_failed.get(tp)
            if reason:
                status.failed[tp] = reason
            else:
                status.pending.append(tp)
        else:
            status.stale[tp] = (m.current_replicas, replicas)
    status.plan_errors, refused = check_plan(plan, obs, status, missing, options)
    if refused:
        status.failed.update(refused)
        status.pending = [tp for tp in status.pending if tp not in refused]
    for items in (status.done, status.in_flight, status.pending, status.lagging, status.foreign):
        items.sort()
    return status


def _sample(tps: Sequence[TopicPartition], limit: int = 5) -> str:
    shown = ", ".join(str(tp) for tp in sorted(tps)[:limit])
    return shown + (f" and {len(tps) - limit} more" if len(tps) > limit else "")


def _ids(brokers: Iterable[int]) -> str:
    return ", ".join(str(b) for b in sorted(brokers)) or "none"


def check_plan(
    plan: ReassignmentPlan,
    obs: _Observation,
    status: ExecutionStatus,
    missing: Sequence[TopicPartition],
    options: ExecutionOptions,
) -> tuple[list[str], dict[TopicPartition, str]]:
    """The plan errors: ``(one line per problem, {move: why it is refused})``.

    Checked on every step, so they are found before anything is sent: moves of a topic or a
    partition that does not exist (``missing``); pending moves of a topic whose partition count
    differs from ``plan.partition_counts`` (the plan's snapshot); pending moves whose target
    replicas name a broker that the cluster does not list as alive (unless
    ``options.allow_offline_brokers``). Moves done or in flight are not plan errors: nothing
    more is sent for them. Each line names the topic with both counts, or the broker with the
    live ones, a sample of the moves, and the fix.
    """
    problems: list[str] = []
    refused: dict[TopicPartition, str] = {}
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in missing:
        by_topic.setdefault(tp.topic, []).append(tp)
    for topic, tps in sorted(by_topic.items()):
        have = obs.topics.get(topic)
        if have is None:
            why = f"topic {topic} does not exist in the cluster (deleted since planning?)"
            problems.append(f"{why}: {len(tps)} move(s) name it ({_sample(tps)})")
            refused.update(dict.fromkeys(tps, f"refused: {why}; plan again"))
        else:
            problems.append(f"partition(s) {_sample(tps)} do not exist: topic {topic} has {have} partition(s)")
            for tp in tps:
                refused[tp] = f"refused: partition {tp} does not exist: topic {topic} has {have} partition(s); plan again"
    counts = plan.partition_counts or {}
    pending = [tp for tp in status.pending if tp not in refused]
    if counts:
        grown: dict[str, list[TopicPartition]] = {}
        for tp in pending:
            want, have = counts.get(tp.topic), obs.topics.get(tp.topic)
            if want is not None and have is not None and want != have:
                grown.setdefault(tp.topic, []).append(tp)
        for topic, tps in sorted(grown.items()):
            why = (f"topic {topic} has {obs.topics[topic]} partitions in the cluster, the plan's snapshot had "
                   f"{counts[topic]} (partitions were added, or the topic was re-created, since planning)")
            problems.append(f"{why}: {len(tps)} pending move(s) of it ({_sample(tps)})")
            refused.update(dict.fromkeys(tps, f"refused: {why}; plan again"))
    if not options.allow_offline_brokers:
        absent: dict[int, list[TopicPartition]] = {}
        for tp in pending:
            if tp in refused:
                continue
            for b in status.moves[tp].target_replicas:
                if b not in obs.brokers:
                    absent.setdefault(b, []).append(tp)
        holders = {b for p in obs.partitions.values() for b in p.replicas} if absent else set()
        live = _ids(obs.brokers)
        for b, tps in sorted(absent.items()):
            state = ("is down: partitions list it among their replicas, but the cluster does not list it as alive"
                     if b in holders else "does not exist in the cluster (or is down)")
            targets = ", ".join(f"{tp} -> {list(status.moves[tp].target_replicas)}" for tp in sorted(tps)[:3])
            problems.append(f"broker {b} {state} (live brokers: {live}); the target replicas of "
                            f"{len(tps)} pending move(s) name it ({targets}{' ...' if len(tps) > 3 else ''})")
            for tp in tps:
                refused.setdefault(tp, f"refused: target replicas {list(status.moves[tp].target_replicas)} name "
                                       f"broker {b}, which is not a live broker of the cluster (live: {live}); "
                                       "plan again")
    return problems, refused


def plan_refusal(problems: Sequence[str], options: ExecutionOptions) -> str:
    """The one message that refuses a whole plan for its plan errors: each named, and the fixes."""
    shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
    offline = any(p.startswith("broker ") for p in problems) and not options.allow_offline_brokers
    return (
        f"the whole plan is refused, nothing more is sent for it: {len(problems)} plan error(s): {shown}. "
        "Plan again from the current cluster (a new snapshot and plan); on_plan_error='skip' runs the other moves"
        + ("; if a broker is only down, allow_offline_brokers=True sends the moves onto it to wait for it"
           if offline else "")
    )


def _touched(adding: Iterable[int], removing: Iterable[int]) -> set[int]:
    return set(adding) | set(removing)


def rf_guard_supported(admin: ClusterAdmin) -> bool | None:
    """Whether the brokers accept KIP-860's AllowReplicationFactorChange (``None``: unknown).

    Asks the adapter's ApiVersions (``broker_api_version``) when it has one (the fake's
    ``rf_guard_supported`` flag otherwise); the adapter refuses again before sending anyway.
    """
    probe = getattr(admin, "broker_api_version", None)
    if callable(probe):
        version = probe(_ALTER_REASSIGNMENTS_KEY)
        return version is not None and int(version) >= _RF_GUARD_MIN_VERSION
    flag = getattr(admin, "rf_guard_supported", None)
    return flag if isinstance(flag, bool) else None


_RF_GUARD_UNSUPPORTED = (
    "the brokers do not support KIP-860's AllowReplicationFactorChange (AlterPartitionReassignments v1, "
    "Apache Kafka 4.1+), so the replication-factor guard cannot be enforced by the broker; nothing was "
    "sent. Upgrade the brokers, or pass rf_guard=\"client\" to compare replica counts with the "
    "controller's replica sets just before sending (racy: a change made in between is not seen)"
)

_RF_GUARD_CLIENT_LIMITS = (
    "rf_guard='client': the replication-factor guard is checked client-side against the controller's "
    "replica sets just before each submission. Its limits: a reassignment started by someone else "
    "between the check and the request is not seen, and describe can lag the controller; the broker "
    "does not refuse an RF change for you"
)


# -- throttles ----------------------------------------------------------------------------------


def backup_path(state_dir: StateLocation) -> str:
    """Where the throttle backup of a run is (a path or URI, for messages)."""
    return f"{as_store(state_dir).uri.rstrip('/')}/{THROTTLE_BACKUP_FILE}"


def read_backup(state_dir: StateLocation | None) -> ThrottleBackup | None:
    """The throttle backup of a run (``None`` when there is none)."""
    if state_dir is None:
        return None
    data = as_store(state_dir).read(THROTTLE_BACKUP_FILE)
    return None if data is None else ThrottleBackup.model_validate_json(data)


def _write_backup(state_dir: StateLocation, backup: ThrottleBackup) -> None:
    as_store(state_dir).write(THROTTLE_BACKUP_FILE, backup.model_dump_json(indent=1).encode())


def journal(state_dir: StateLocation | None, event: dict[str, Any], *, log: logging.Logger | None = None) -> None:
    """Add one entry to the run's journal (``<state>/journal/``); a failure to write it is a warning.

    The journal is the run's record (what each try submitted and decided, for people and the report);
    the cluster stays the authority on what is done and in flight, so a journal write that fails
    never stops a run that holds its lease."""
    if state_dir is None:
        return
    at = datetime.now(UTC)
    name = f"{JOURNAL_DIR}/{at.strftime('%Y%m%dT%H%M%S.%fZ')}-{os.getpid()}-{next(_JOURNAL_SEQ):06d}.json"
    try:
        as_store(state_dir).write(name, json.dumps({"at": at.isoformat(), **event}, sort_keys=True).encode())
    except Exception as e:  # noqa: BLE001 (the record is best effort; see above)
        (log or _log).warning("could not write the run journal entry %s: %s", name, e)


def read_journal(state_dir: StateLocation) -> list[dict[str, Any]]:
    """The run's journal entries, oldest first."""
    store = as_store(state_dir)
    out = []
    for name in store.list(JOURNAL_DIR):
        data = store.read(name)
        if data is not None:
            out.append(json.loads(data))
    return out


def desired_throttles(
    backup: ThrottleBackup, moving: Iterable[Move], rate: int | None
) -> tuple[dict[int, dict[str, str | None]], dict[str, dict[str, str | None]]]:
    """Every config the backup covers, as the ``moving`` moves need it now.

    Brokers a moving replica is copied from or to get ``rate``; topic replica lists are the
    backed-up value plus the moving entries. Everything else goes back to its backed-up value.
    """
    active = [m for m in moving if m.adding_replicas] if rate else []
    involved = brokers_involved(active)
    entries = throttled_replicas(active)
    brokers: dict[int, dict[str, str | None]] = {}
    for b, before in backup.brokers.items():
        brokers[b] = {k: str(int(rate)) for k in BROKER_THROTTLE_KEYS} if rate and b in involved else dict(before)
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


def sync_throttles(
    admin: ClusterAdmin,
    moving: Iterable[Move],
    rate: int | None,
    *,
    state_dir: StateLocation | None,
    dry_run: bool = False,
    log: logging.Logger | None = None,
    live_brokers: Collection[int] | None = None,
) -> bool:
    """Bring the throttle configs to exactly what ``moving`` needs; returns whether any changed.

    The values of brokers and topics not yet covered by the backup are read and written to
    ``state_dir`` BEFORE anything is set, so a later run restores them even if this process
    dies right after. Only differing keys are written. With ``live_brokers``, a broker outside
    it (down: moves onto it wait, see ``allow_offline_brokers``) gets no throttle: a config
    request to it would only wait for it.
    """
    log = log or _log
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
    if new_brokers or new_topics:
        fresh = admin.describe_throttles(sorted(new_brokers), sorted(new_topics))
        backup = ThrottleBackup(brokers={**backup.brokers, **fresh.brokers}, topics={**backup.topics, **fresh.topics})
        if not dry_run:
            assert state_dir is not None
            _write_backup(state_dir, backup)
    brokers, topics = desired_throttles(backup, active, rate)
    current = admin.describe_throttles(sorted(backup.brokers), sorted(backup.topics))
    db, dt = _diff(current, brokers, topics)
    if not db and not dt:
        return False
    if dry_run:
        log.info("DRY RUN: would set throttle configs (None = delete): brokers %s topics %s",
                 json.dumps({str(b): v for b, v in sorted(db.items())}, sort_keys=True),
                 json.dumps(dt, sort_keys=True))
        return False
    admin.set_throttles(db, dt)
    log.info("throttle configs set (None = deleted): brokers %s topics %s",
             json.dumps({str(b): v for b, v in sorted(db.items())}, sort_keys=True), json.dumps(dt, sort_keys=True))
    return True


def restore_throttles(admin: ClusterAdmin, state_dir: StateLocation | None, *, log: logging.Logger | None = None) -> bool:
    """Put every throttle config this run touched back to its value before the run, exactly,
    check it, and delete the backup. Returns whether there was anything to restore."""
    log = log or _log
    backup = read_backup(state_dir)
    if backup is None:
        return False
    assert state_dir is not None
    for attempt in (1, 2):
        admin.set_throttles(backup.brokers, backup.topics)
        current = admin.describe_throttles(sorted(backup.brokers), sorted(backup.topics))
        db, dt = _diff(current, backup.brokers, backup.topics)
        if not db and not dt:
            break
        if attempt == 2:
            raise RuntimeError(
                f"throttle configs differ from the backup after restoring twice: brokers {db} topics {dt}; "
                f"the backup stays in {backup_path(state_dir)} for the next run (or the cancel operator) to restore"
            )
    as_store(state_dir).delete(THROTTLE_BACKUP_FILE)
    journal(state_dir, {"event": "throttles-restored", "brokers": sorted(backup.brokers),
                        "topics": sorted(backup.topics)}, log=log)
    log.info("throttle configs restored exactly as before on brokers %s and topics %s",
             sorted(backup.brokers), sorted(backup.topics))
    return True


# -- submitting ---------------------------------------------------------------------------------


def _order(moves: list[Move], limits: ExecutionLimits, sizes: Mapping[TopicPartition, Mapping[int, int]],
           plan_index: Mapping[TopicPartition, int]) -> list[Move]:
    if limits.order == "plan":
        return sorted(moves, key=lambda m: plan_index[m.tp])

    def cost(m: Move) -> int | None:
        s = sizes.get(m.tp)
        return max(s.values()) * max(1, len(m.adding_replicas)) if s else None

    sign = 1 if limits.order == "smallest-first" else -1
    return sorted(moves, key=lambda m: (cost(m) is None, sign * (cost(m) or 0), plan_index[m.tp]))


def select_batch(
    pending: Sequence[Move],
    reassignments: Mapping[TopicPartition, InFlightReassignment],
    limits: ExecutionLimits,
) -> list[Move]:
    """The moves of ``pending`` (already ordered) that fit the limits next to what is in flight."""
    in_cluster = len(reassignments)
    per_broker: Counter[int] = Counter()
    for r in reassignments.values():
        per_broker.update(_touched(r.adding_replicas, r.removing_replicas))
    batch: list[Move] = []
    for m in pending:
        if limits.max_moves is not None and in_cluster >= limits.max_moves:
            break
        touched = _touched(m.adding_replicas, m.removing_replicas)
        if limits.max_moves_per_broker is not None and any(
            per_broker[b] >= limits.max_moves_per_broker for b in touched
        ):
            continue
        batch.append(m)
        in_cluster += 1
        per_broker.update(touched)
    return batch


def _request_json(moves: Sequence[Move]) -> str:
    return ReassignmentPlan.model_construct(moves=tuple(moves)).to_kafka_json()  # sound moves: no re-validation


def _submit(
    admin: ClusterAdmin,
    batch: Sequence[Move],
    options: ExecutionOptions,
    status: ExecutionStatus,
    log: logging.Logger,
) -> None:
    groups = (
        (False, [m for m in batch if not m.changes_rf]),
        (True, [m for m in batch if m.changes_rf]),
    )
    for allow, moves in groups:
        if not moves:
            continue
        targets = {m.tp: m.target_replicas for m in moves}
        log.info("submitting %d move(s) (AllowReplicationFactorChange=%s, rf_guard=%s): %s",
                 len(moves), str(allow).lower(), options.rf_guard, _request_json(moves))
        result = admin.alter_reassignments(targets, allow_replication_factor_change=allow,
                                           rf_guard=options.rf_guard)
        by = result.by_partition()
        for m in moves:
            r = by.get(m.tp)
            if r is None:
                status.failed[m.tp] = "the controller's response did not mention this partition"
            elif r.ok:
                status.submitted.append(m.tp)
            else:
                why = f"{r.error_code}: {r.error}"
                if r.error_code == "INVALID_REPLICATION_FACTOR":
                    why = f"refused by the replication-factor guard (KIP-860): {why}"
                status.failed[m.tp] = why
                log.error("move %s -> %s refused: %s", m.tp, list(m.target_replicas), why)


# -- one iteration ------------------------------------------------------------------------------


def step(
    admin: ClusterAdmin,
    plan: ReassignmentPlan,
    limits: ExecutionLimits,
    options: ExecutionOptions,
    *,
    state_dir: StateLocation | None = None,
    submit: bool = True,
    log: logging.Logger | None = None,
    known_failed: Mapping[TopicPartition, str] | None = None,
    settle_s: float = SETTLE_RECHECK_S,
    sleep: Callable[[float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    lease: LeaseKeeper | None = None,
) -> ExecutionStatus:
    """One retry-safe iteration: observe, reconcile throttles, submit what fits.

    Safe to call at any moment, from any process, any number of times: a move in flight is
    recognised from the controller's listing and never submitted again, a killed earlier call
    leaves nothing that this one does not reconcile. With ``submit=False`` (or when the run is
    blocked) nothing new goes out, but finished partitions still lose their throttles.

    :param state_dir: where the throttle backup lives (required with a throttle; the operators
        use ``<plan dir>/run``).
    :param known_failed: moves refused earlier in this run (``status.failed``), not sent again.
    :param settle_s: a move that looks stale is observed again after this delay before it is
        refused (describe can lag the controller right after a reassignment completes).
    :param should_stop: asked right before anything is written; ``True`` (a kill arrived while
        observing) submits nothing and leaves the throttles as they are.
    :param lease: the plan's lease (core/lease.py), confirmed (and renewed) right before anything
        is written; :class:`~airflow_kafka_reassign.core.lease.LeaseLostError` when another run
        took it over, and then nothing is written.
    """
    log = log or _log
    if options.throttle_bytes_per_sec and state_dir is None and not options.dry_run:
        raise ConfigurationError(
            "a throttle needs a state_dir to keep the backup of the previous throttle values in; "
            "pass state_dir (the operators use <plan dir>/run)"
        )
    topics = {m.topic for m in plan.moves}
    obs = _observe(admin, topics)
    status = _classify(plan, obs, options, known_failed or {})
    suspects = [tp for tp in status.stale if tp not in status.reassignments]
    if suspects and settle_s >= 0:
        (sleep or _sleep)(settle_s)
        obs = _observe(admin, topics)
        status = _classify(plan, obs, options, known_failed or {})

    if status.plan_errors and (options.on_plan_error == "refuse" or options.strict):
        status.blocked = plan_refusal(status.plan_errors, options)
    elif status.foreign and not options.allow_concurrent_reassignments:
        status.blocked = (
            f"{len(status.foreign)} reassignment(s) are in flight that this plan did not start "
            f"({', '.join(_names(status.foreign, 10))}); wait for them to finish, cancel them "
            "(CancelReassignmentOperator with cancel_all=True), or pass allow_concurrent_reassignments=True"
        )
    elif options.strict and (status.stale or status.failed):
        status.blocked = (
            f"strict=True: the whole plan is refused because {len(status.stale)} move(s) are stale and "
            f"{len(status.failed)} refused ({', '.join(_names([*status.stale, *status.failed], 10))}); "
            "plan again from the current cluster, or pass strict=False to run the other moves"
        )
    needs_guard = [status.moves[tp] for tp in status.pending if not status.moves[tp].changes_rf]
    if status.blocked is None and submit and needs_guard:
        supported = rf_guard_supported(admin)
        if supported is False and options.rf_guard == "broker":
            status.blocked = _RF_GUARD_UNSUPPORTED
        elif supported is False:
            log.warning(_RF_GUARD_CLIENT_LIMITS)

    batch: list[Move] = []
    if submit and status.blocked is None and status.pending:
        pending = [status.moves[tp] for tp in status.pending]
        sizes: Mapping[TopicPartition, Mapping[int, int]] = {}
        if limits.order != "plan" and limits.limited and len(pending) > 1:
            sizes = admin.replica_sizes([m.tp for m in pending])
        plan_index = {m.tp: i for i, m in enumerate(plan.moves)}
        batch = select_batch(_order(pending, limits, sizes, plan_index), status.reassignments, limits)

    rate = options.throttle_bytes_per_sec
    in_flight = [status.moves[tp] for tp in status.in_flight]
    if options.dry_run:
        sync_throttles(admin, [*in_flight, *batch], rate, state_dir=state_dir, dry_run=True, log=log,
                       live_brokers=obs.brokers)
        if batch:
            status.would_submit = [m.tp for m in batch]
            for allow in (False, True):
                group = [m for m in batch if m.changes_rf == allow]
                if group:
                    log.info("DRY RUN: would send AlterPartitionReassignments (AllowReplicationFactorChange=%s, "
                             "rf_guard=%s): %s", str(allow).lower(), options.rf_guard, _request_json(group))
        return status

    if should_stop is not None and should_stop():
        return status
    if lease is not None:
        lease.confirm()
    sync_throttles(admin, [*in_flight, *batch], rate, state_dir=state_dir, log=log, live_brokers=obs.brokers)
    if batch:
        _submit(admin, batch, options, status, log)
        # sets, not the status's lists: every lookup below is O(1), so a step is linear in the moves
        sent = set(status.submitted)
        in_batch = {m.tp for m in batch}
        ok = [m for m in batch if m.tp in sent]
        journal(state_dir, {
            "event": "submitted",
            "holder": lease.lease.holder if lease is not None else None,
            "submitted": [[m.topic, m.partition, list(m.target_replicas)] for m in ok],
            "refused": {str(tp): why for tp, why in status.failed.items() if tp in in_batch},
            "throttle_bytes_per_sec": rate,
        }, log=log)
        refused = [m for m in batch if m.tp in status.failed]
        status.pending = [tp for tp in status.pending if tp not in in_batch]
        status.in_flight.extend(m.tp for m in ok)
        status.in_flight.sort()
        if refused and rate:
            sync_throttles(admin, [*in_flight, *ok], rate, state_dir=state_dir, log=log, live_brokers=obs.brokers)
    if options.elect_leaders:
        _elect(admin, [tp for tp in status.done if obs.partitions[tp].leader != status.moves[tp].target_replicas[0]],
               status, log)
    log.info("%s", status.progress_line())
    return status


def _elect(admin: ClusterAdmin, partitions: Sequence[TopicPartition], status: ExecutionStatus,
           log: logging.Logger) -> None:
    if not partitions:
        return
    for r in admin.elect_preferred_leaders(partitions):
        status.elections[r.tp] = r.error
        if r.error:
            log.warning("preferred-leader election of %s failed: %s %s", r.tp, r.error_code, r.error)
    log.info("preferred leaders elected for %d moved partition(s)", sum(1 for e in status.elections.values() if e is None))


def report_preflight(status: ExecutionStatus, log: logging.Logger | None = None) -> None:
    """Log what pre-flight found: stale moves with their diff, refusals, foreign reassignments."""
    log = log or _log
    for tp, (expected, actual) in sorted(status.stale.items())[:SUMMARY_SAMPLE]:
        r = status.reassignments.get(tp)
        extra = f" (being reassigned to {list(r.target_replicas)} by someone else)" if r else ""
        log.warning("stale move %s refused: the plan expects replicas %s, the cluster has %s%s",
                    tp, list(expected), list(actual), extra)
    if len(status.stale) > SUMMARY_SAMPLE:
        log.warning("... and %d more stale move(s)", len(status.stale) - SUMMARY_SAMPLE)
    for problem in status.plan_errors:
        log.warning("plan error: %s", problem)
    for tp, why in sorted(status.failed.items())[:SUMMARY_SAMPLE]:
        log.warning("move %s %s", tp, why)
    if len(status.failed) > SUMMARY_SAMPLE:
        log.warning("... and %d more refused move(s)", len(status.failed) - SUMMARY_SAMPLE)
    for tp in status.foreign:
        r = status.reassignments[tp]
        log.warning("foreign reassignment in flight: %s %s -> %s", tp, list(r.original_replicas),
                    list(r.target_replicas))
    if status.blocked:
        log.error("%s", status.blocked)
    log.info("pre-flight: %s", status.progress_line())


# -- finishing ----------------------------------------------------------------------------------


#: ``throttles_restored`` values: restored now / none was set (nothing to restore) / left in place.
RESTORED, NONE_SET, NOT_RESTORED = "yes", "none-set", "no"


def finish(
    admin: ClusterAdmin,
    plan: ReassignmentPlan,
    options: ExecutionOptions,
    *,
    state_dir: StateLocation | None,
    elect: bool | None = None,
    log: logging.Logger | None = None,
    lease: LeaseKeeper | None = None,
) -> dict[str, Any]:
    """Restore the throttles exactly as they were before the run; elect preferred leaders.

    ``elect`` defaults to ``options.elect_leaders``; it elects the preferred leader of every
    done move whose leader is not its first target replica. Returns a small summary. With
    ``lease``, it is confirmed first (a run that lost it restores nothing).
    """
    log = log or _log
    out: dict[str, Any] = {"throttles_restored": NONE_SET}
    if options.dry_run:
        return out
    if lease is not None:
        lease.confirm()
    out["throttles_restored"] = RESTORED if restore_throttles(admin, state_dir, log=log) else NONE_SET
    if elect if elect is not None else options.elect_leaders:
        obs = _observe(admin, {m.topic for m in plan.moves})
        status = _classify(plan, obs, options, {})
        status.elections.clear()
        _elect(admin, [tp for tp in status.done if obs.partitions[tp].leader != status.moves[tp].target_replicas[0]],
               status, log)
        out["elected"] = sum(1 for e in status.elections.values() if e is None)
        out["election_failed"] = {str(tp): e for tp, e in status.elections.items() if e}
    return out


# -- cancelling ---------------------------------------------------------------------------------


@dataclass
class CancelResult:
    """What a cancel did. ``rf_changed``: partitions whose replica count after the cancel differs
    from the one before their reassignment (KIP-455: a cancel stops a move, it does not revert
    replicas that had joined; the controller may leave a higher RF)."""

    cancelled: list[TopicPartition] = field(default_factory=list)
    #: finished (or never started) before the cancel arrived
    not_in_flight: list[TopicPartition] = field(default_factory=list)
    failed: dict[TopicPartition, str] = field(default_factory=dict)
    #: partition -> (replicas before the reassignment, replicas after the cancel)
    rf_changed: dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    #: partition -> (replicas before the reassignment, replicas after the cancel): same RF, other brokers
    not_reverted: dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "cancelled": len(self.cancelled),
            "not_in_flight": len(self.not_in_flight),
            "failed": {str(tp): e for tp, e in sorted(self.failed.items())[:SUMMARY_SAMPLE]},
            "rf_changed": {str(tp): {"before": list(a), "after": list(b)}
                           for tp, (a, b) in sorted(self.rf_changed.items())[:SUMMARY_SAMPLE]},
            "not_reverted": {str(tp): {"before": list(a), "after": list(b)}
                             for tp, (a, b) in sorted(self.not_reverted.items())[:SUMMARY_SAMPLE]},
            "cancelled_partitions": _names(self.cancelled),
        }


def cancel(
    admin: ClusterAdmin,
    plan: ReassignmentPlan | None,
    *,
    cancel_all: bool = False,
    dry_run: bool = False,
    settle_timeout_s: float = 15.0,
    sleep: Callable[[float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    log: logging.Logger | None = None,
) -> CancelResult:
    """Cancel the plan's in-flight moves (or, with ``cancel_all=True``, every reassignment).

    Only reassignments heading to exactly a plan move's target are the plan's: others are left
    alone unless ``cancel_all``. After the cancel, the partitions' replicas are compared with
    the replicas before their reassignment (waiting up to ``settle_timeout_s`` for metadata to
    settle); partitions left with a changed replica count are reported (KIP-455).
    """
    log = log or _log
    if plan is None and not cancel_all:
        raise ConfigurationError("cancel needs a plan, or cancel_all=True to cancel every reassignment")
    inflight = admin.list_reassignments()
    if cancel_all:
        targets = dict(inflight)
    else:
        assert plan is not None
        targets = {m.tp: inflight[m.tp] for m in plan.moves
                   if m.tp in inflight and inflight[m.tp].target_replicas == m.target_replicas}
    result = CancelResult()
    if not targets:
        log.info("nothing to cancel: no %sreassignment is in flight", "" if cancel_all else "move of the plan ")
        return result
    listing = ", ".join(f"{tp} {list(r.original_replicas)}->{list(r.target_replicas)}" for tp, r in sorted(targets.items()))
    if dry_run:
        log.info("DRY RUN: would cancel %d reassignment(s): %s", len(targets), listing)
        result.cancelled = sorted(targets)
        return result
    log.info("cancelling %d reassignment(s): %s", len(targets), listing)
    for r in admin.cancel_reassignments(sorted(targets)).results:
        if r.ok:
            result.cancelled.append(r.tp)
        elif r.error_code == "NO_REASSIGNMENT_IN_PROGRESS":
            result.not_in_flight.append(r.tp)
        else:
            result.failed[r.tp] = f"{r.error_code}: {r.error}"
    result.cancelled.sort()
    result.not_in_flight.sort()
    if result.cancelled:
        topics = sorted({tp.topic for tp in result.cancelled})
        deadline = clock() + settle_timeout_s
        while True:
            still = admin.list_reassignments(result.cancelled)
            parts = {p.tp: p for p in admin.snapshot(topics=topics).partitions}
            rf_changed, moved = {}, {}
            for tp in result.cancelled:
                before = targets[tp].original_replicas
                after = parts[tp].replicas if tp in parts else ()
                if tp in still or len(after) != len(before):
                    rf_changed[tp] = (before, after)
                elif set(after) != set(before):
                    moved[tp] = (before, after)
            if (not rf_changed and not moved) or clock() >= deadline:
                break
            (sleep or _sleep)(0.5)
        result.rf_changed, result.not_reverted = rf_changed, moved
        for tp, (before, after) in sorted(rf_changed.items()):
            log.warning("partition %s was left with replication factor %d after the cancel (%s; before the "
                        "reassignment %s); run a reassignment to restore the RF (KIP-455)",
                        tp, len(after), list(after), list(before))
    log.info("cancelled %d, %d had already finished, %d failed", len(result.cancelled),
             len(result.not_in_flight), len(result.failed))
    return result


def rebase_rollback(
    rollback: ReassignmentPlan,
    plan: ReassignmentPlan | None,
    live: Mapping[TopicPartition, Sequence[int]],
) -> ReassignmentPlan:
    """The rollback's moves, starting from where a cancel (or a finished move) left each partition.

    ``rollback`` puts every partition of ``plan`` back on the replicas it had before (its moves
    expect the plan's targets); ``live``: the partitions' replicas now. A finished move is on the
    plan's target: its rollback move stays as it is. A cancelled one is back on its original
    replicas but possibly in another order (the controller rebuilds them from the adding replicas,
    so the preferred leader may differ) or with adding replicas that had joined (KIP-455: a higher
    RF). Such a move then starts from the live replicas: a reorder, or an RF change marked
    ``allow_rf_change`` (the execution still refuses it unless the task allows RF changes); a
    partition already exactly on its original replicas is then done at once (nothing is sent). A
    partition on replicas outside the plan move's before and after (someone else moved it) keeps
    its expected replicas, and the execution refuses it as stale.
    """
    planned = {m.tp: m for m in plan.moves} if plan is not None else {}
    moves: list[Move] = []
    for m in rollback.moves:
        now = tuple(live.get(m.tp, ()))
        forward = planned.get(m.tp)
        if not now or now == m.current_replicas or forward is None:
            moves.append(m)
            continue
        known = set(forward.target_replicas) | set(forward.current_replicas or ())
        if not set(now) <= known:
            moves.append(m)  # moved by someone else: stale
            continue
        moves.append(Move(topic=m.topic, partition=m.partition, current_replicas=now,
                          target_replicas=m.target_replicas, allow_rf_change=len(now) != len(m.target_replicas)))
    return ReassignmentPlan(moves=tuple(moves), partition_counts=rollback.partition_counts)


# -- the whole loop -----------------------------------------------------------------------------


@dataclass
class RunResult:
    """How a :func:`run` ended: the last status and what happened on the way."""

    status: ExecutionStatus
    #: moves this call submitted, over all its steps (``status.submitted`` is the last step's only)
    submitted: list[TopicPartition] = field(default_factory=list)
    #: distinct moves of the plan submitted by any run so far (this one, earlier tries, the sensor), from the journal
    submitted_total: int | None = None
    deadline_reached: bool = False
    stopped: bool = False
    cancel: CancelResult | None = None
    finish: dict[str, Any] = field(default_factory=dict)
    steps: int = 0
    elapsed_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        out = self.status.summary()
        out.update(deadline_reached=self.deadline_reached, stopped=self.stopped, steps=self.steps,
                   elapsed_s=round(self.elapsed_s, 1), **self.finish)
        out["submitted"] = len(self.submitted)
        out["submitted_total"] = self.submitted_total if self.submitted_total is not None else len(self.submitted)
        # "yes" restored now, "none-set" nothing to restore, "no" left in place (wait_for_completion=False: the
        # sensor restores them when the moves are done)
        out.setdefault("throttles_restored", NOT_RESTORED)
        if self.cancel is not None:
            out["cancel"] = self.cancel.summary()
        return out


def run(
    admin: ClusterAdmin,
    plan: ReassignmentPlan,
    limits: ExecutionLimits,
    options: ExecutionOptions,
    *,
    state_dir: StateLocation | None,
    deadline: datetime | None = None,
    on_deadline: OnDeadline = "finish",
    poll_interval_s: float = 5.0,
    before_first_submit: Callable[[ExecutionStatus], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    finish_at_end: bool = True,
    wait: bool = True,
    log: logging.Logger | None = None,
    sleep: Callable[[float], None] | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    settle_s: float = SETTLE_RECHECK_S,
    lease: LeaseKeeper | None = None,
    progress: Callable[[ExecutionStatus], None] | None = None,
) -> RunResult:
    """Execute ``plan`` to the end (or the deadline): pre-flight, then :func:`step` until done.

    1. Pre-flight: one :func:`step` that submits nothing; its findings are logged
       (:func:`report_preflight`). A blocked run stops here, before anything changed.
    2. ``before_first_submit(status)`` (the operator writes the rollback plan there).
    3. :func:`step` every ``poll_interval_s`` until the plan is complete. After ``deadline`` no
       move is submitted; in-flight moves finish (``on_deadline="finish"``) or are cancelled
       (``"cancel"``), and the remaining moves are reported: the next run resumes them.
    4. :func:`finish` (throttles restored exactly, leaders elected) unless ``finish_at_end`` is
       False; on an exception or ``should_stop()`` the throttles are restored all the same.

    With ``wait=False`` it returns after the first submission (a sensor keeps stepping); pass
    ``finish_at_end=False`` with it so that the throttles stay for the moves in flight.

    With ``lease`` (core/lease.py) every step confirms the plan's lease before it writes; a run
    whose lease was taken over stops at once and restores nothing (the new holder drives the
    plan and its throttles): :class:`~airflow_kafka_reassign.core.lease.LeaseLostError`.

    With ``options.dry_run`` it stops after the pre-flight and one dry step that logs the exact
    requests of the first batch.

    ``progress(status)`` is called after each step that leaves moves in flight (the operator logs the
    bytes / rate / ETA line there, the sensor's line).
    """
    log = log or _log
    started = time.monotonic()
    known: dict[TopicPartition, str] = {}
    result = RunResult(status=ExecutionStatus(total=len(plan)))
    done_cleanly = False
    lost = False
    try:
        if deadline is not None and deadline.tzinfo is None:
            raise ConfigurationError(f"deadline {deadline.isoformat()} has no time zone; give an aware datetime")
        status = step(admin, plan, limits, options, state_dir=state_dir, submit=False, log=log, settle_s=settle_s,
                      sleep=sleep)
        result.steps, result.status = 1, status
        report_preflight(status, log)
        if options.dry_run:
            result.status = step(admin, plan, limits, options, state_dir=state_dir, log=log, settle_s=settle_s,
                                 sleep=sleep)
            result.steps += 1
            done_cleanly = True
            return result
        if status.blocked is None and status.pending and before_first_submit is not None:
            before_first_submit(status)
        while True:
            if should_stop():
                result.stopped = True
                log.warning("stop requested: no further move is submitted; %d remain", len(status.remaining))
                break
            past = deadline is not None and now() >= deadline
            if past and not result.deadline_reached:
                result.deadline_reached = True
                log.warning("deadline %s reached: no new move is submitted; %d in flight, %d pending",
                            deadline.isoformat() if deadline else "", len(status.in_flight), len(status.pending))
                if on_deadline == "cancel" and status.in_flight:
                    result.cancel = cancel(admin, plan, log=log, sleep=sleep)
            status = step(admin, plan, limits, options, state_dir=state_dir, submit=not past, log=log,
                          known_failed=known, settle_s=settle_s, sleep=sleep, should_stop=should_stop, lease=lease)
            result.steps += 1
            result.status = status
            result.submitted.extend(status.submitted)
            known.update(status.failed)
            if progress is not None and status.in_flight and not status.complete:
                progress(status)
            if status.complete or not wait:
                break
            if not status.in_flight and (past or (status.blocked and not status.lagging)):
                break
            (sleep or _sleep)(poll_interval_s)
        done_cleanly = True
    except LeaseLostError:
        lost = True
        raise
    finally:
        result.elapsed_s = time.monotonic() - started
        if not lost and (finish_at_end or not done_cleanly or result.stopped):
            try:
                elect = done_cleanly and not result.stopped and options.elect_leaders
                result.finish = finish(admin, plan, options, state_dir=state_dir, elect=elect, log=log, lease=lease)
            except Exception:
                if done_cleanly:
                    raise
                log.exception("restoring the throttles failed; the next run (or CancelReassignmentOperator) "
                              "restores them from %s", backup_path(state_dir) if state_dir else "the backup")
    if result.status.blocked:
        log.error("%s", result.status.blocked)
    result.submitted_total = submitted_total(state_dir, result.submitted)
    return result


def submitted_total(state_dir: StateLocation | None, this_run: Iterable[TopicPartition] = ()) -> int:
    """Distinct moves submitted for this plan by any run so far: the journal's ``submitted`` entries (and ``this_run``)."""
    seen = {(tp.topic, tp.partition) for tp in this_run}
    if state_dir is not None:
        try:
            entries = read_journal(state_dir)
        except Exception:  # noqa: BLE001 (the journal is a best-effort record)
            entries = []
        for entry in entries:
            if entry.get("event") == "submitted":
                seen.update((str(t), int(p)) for t, p, *_ in entry.get("submitted", []))
    return len(seen)


# -- the rollback plan --------------------------------------------------------------------------


def write_rollback_if_missing(plan_dir: StateLocation, plan: ReassignmentPlan, status: ExecutionStatus,
                              *, log: logging.Logger | None = None) -> str | None:
    """Write ``rollback.json`` (and Kafka's ``rollback-kafka.json``) into ``plan_dir`` unless present.

    Every move goes back to its expected current replicas, or, for a move read from a plain
    Kafka file (no ``current_replicas``), to the replicas the cluster has now, before anything
    is submitted. Returns where it was written, or ``None`` when a rollback plan already existed.
    """
    log = log or _log
    store = as_store(plan_dir)
    if store.read(ROLLBACK_FILE) is not None:
        return None
    moves = []
    for m in plan.moves:
        current = m.current_replicas
        if current is None and m.tp in status.moves:
            current = status.moves[m.tp].current_replicas
        if current is None:
            log.warning("rollback plan: %s is left out (its current replicas are unknown)", m.tp)
            continue
        moves.append(Move(topic=m.topic, partition=m.partition, target_replicas=current,
                          current_replicas=m.target_replicas,
                          allow_rf_change=len(current) != len(m.target_replicas)))
    rollback = ReassignmentPlan(moves=tuple(moves), partition_counts=plan.partition_counts)
    store.write(KAFKA_ROLLBACK_FILE, rollback.to_kafka_json().encode())
    store.write(ROLLBACK_FILE, rollback.model_dump_json().encode())
    where = f"{store.uri.rstrip('/')}/{ROLLBACK_FILE}"
    log.info("rollback plan written to %s (%d moves)", where, len(moves))
    return where
