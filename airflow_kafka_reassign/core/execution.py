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
:func:`airflow_kafka_reassign.core.cancel.cancel` cancels in-flight moves (KIP-455), puts them back in
their original replica order and reports what differs (core/cancel.py: cancel and rollback).

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

import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from airflow_kafka_reassign.core.adaptive import (
    DEFAULT_MIN_POLL_S,
    AdaptiveBounds,
    CopyWatch,
    Limits,
    adapt,
    bytes_left,
    next_poll_s,
    soonest_eta_s,
    stall_window_s,
)
from airflow_kafka_reassign.core.disk_guard import DEFAULT_RESERVE, DiskFit, DiskReserve, DiskRoom
from airflow_kafka_reassign.core.disk_guard import refusal as disk_refusal
from airflow_kafka_reassign.core.health import HealthPolicy, HealthReport, assess, below_min_isr, drained_brokers
from airflow_kafka_reassign.core.journal import JOURNAL_DIR, StateLocation, journal, read_journal  # noqa: F401
from airflow_kafka_reassign.core.lease import LeaseKeeper, LeaseLostError
from airflow_kafka_reassign.core.models import Move, PartitionState, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.move_state import MoveState, classify
from airflow_kafka_reassign.core.plan_io import KAFKA_ROLLBACK_FILE, ROLLBACK_FILE
from airflow_kafka_reassign.core.ports import ClusterAdmin, InFlightReassignment
from airflow_kafka_reassign.core.progress import Observation, assess_parts
from airflow_kafka_reassign.core.store import as_store

# the journal and the run's throttles live in core/journal.py and core/throttle.py; importable from here too
from airflow_kafka_reassign.core.throttle import (  # noqa: F401 (re-exported)  # noqa: F401
    NONE_SET,
    NOT_RESTORED,
    RESTORED,
    THROTTLE_BACKUP_FILE,
    backup_path,
    desired_throttles,
    read_backup,
    restore_throttles,
    sync_throttles,
)
from airflow_kafka_reassign.exceptions import ConfigurationError

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.cancel import CancelResult

Order = Literal["plan", "smallest-first", "largest-first"]
#: The journal event of a change of the adaptive limits.
ADAPTED = "adapted"
OnDeadline = Literal["finish", "cancel"]
OnPlanError = Literal["refuse", "skip"]

#: The run-state folder inside a plan directory (the default ``state_dir``).
RUN_DIR = "run"
#: A move that looks stale is observed once more after this delay before it is refused:
#: describe (metadata) can lag the controller for a moment after a reassignment completes.
SETTLE_RECHECK_S = 1.0
#: Partitions named per category in a summary (XCom stays small).
SUMMARY_SAMPLE = 20
#: Kafka's api key of AlterPartitionReassignments, and the version carrying KIP-860's flag.
_ALTER_REASSIGNMENTS_KEY = 45
_RF_GUARD_MIN_VERSION = 1

_log = logging.getLogger(__name__)


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
    :param health: the health gate (core/health.py): before each batch the cluster's
        under-replicated, under-min-ISR and offline partitions are read; trouble the run does not
        explain pauses submission (the default), cancels or fails the run.
    :param disk_reserve: the disk guard (core/disk_guard.py): before each batch each broker's free
        disk space is read (DescribeLogDirs, Kafka 3.3+) and a move is submitted only if every broker it
        adds keeps this much free after it and the moves in flight: a share (``"1%"``, the default), a
        size (``"20GiB"``, bytes), or ``None``/``"off"``. A move that does not fit waits; when nothing
        is in flight and nothing fits, the run is refused naming the broker and the numbers.
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
    health: HealthPolicy = field(default_factory=HealthPolicy)
    disk_reserve: DiskReserve | str | int | None = DEFAULT_RESERVE

    def __post_init__(self) -> None:
        if not isinstance(self.disk_reserve, DiskReserve):  # parsed once: "5%", "20GiB", bytes, None/"off"
            object.__setattr__(self, "disk_reserve", DiskReserve.parse(self.disk_reserve))
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
    #: why a stale move is refused, when a list diff does not say it (a reassignment to elsewhere in flight)
    stale_why: dict[TopicPartition, str] = field(default_factory=dict)
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
    #: the health gate's reading (``None``: the gate is off)
    health: HealthReport | None = None
    #: why nothing new was submitted although the run may: the cluster is unhealthy (one line)
    paused: str | None = None
    #: pending moves whose target keeps fewer in-sync replicas than min.insync.replicas (ordered last or refused)
    below_min_isr: list[TopicPartition] = field(default_factory=list)
    #: the copy in flight has not gained on its leaders for several polls (see core/adaptive.py)
    stalled: bool = False
    #: pending moves the disk guard held this step: a broker they add lacks the free space (why, per move)
    disk_held: dict[TopicPartition, str] = field(default_factory=dict)
    #: what this step read (the plan's partitions, the live brokers): the progress line reuses it
    observation: _Observation | None = field(default=None, repr=False)
    #: the plan's replica sizes measured this poll (DescribeLogDirs), when a progress line wants them
    sizes: dict[TopicPartition, dict[int, int]] | None = field(default=None, repr=False)
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
        if self.below_min_isr:
            line += f", {len(self.below_min_isr)} below min ISR (last)"
        if self.stalled:
            line += "; copy STALLED"
        if self.paused:
            line += "; PAUSED (cluster unhealthy)"
        if self.disk_held:
            line += f", {len(self.disk_held)} wait for disk space"
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
            "paused": self.paused,
            "below_min_isr": len(self.below_min_isr),
            "stalled": self.stalled,
            "disk_held": len(self.disk_held),
        }
        if self.disk_held:
            out["disk_held_partitions"] = {str(tp): why for tp, why in sorted(self.disk_held.items())[:SUMMARY_SAMPLE]}
        if self.health is not None:
            out["health"] = self.health.summary()
        if self.stale:
            out["stale_partitions"] = {
                str(tp): {"expected": list(self.stale[tp][0]), "actual": list(self.stale[tp][1]),
                          **({"why": self.stale_why[tp]} if tp in self.stale_why else {})}
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
    #: every partition read (all topics when the health gate is on), and min.insync.replicas per topic
    everything: tuple[PartitionState, ...] = ()
    min_isr: dict[str, int] = field(default_factory=dict)


def _observe(admin: ClusterAdmin, topics: Collection[str], *, everything: bool = False) -> _Observation:
    """The controller's in-flight reassignments (all of them), the live brokers and the live
    state of ``topics`` (of every topic with ``everything``, for the health gate).

    A snapshot merges the controller's listing into its partitions, so a snapshot of every topic
    needs no listing of its own; one of the plan's topics is completed by one ListPartitionReassignments."""
    try:
        snap = admin.snapshot() if everything else admin.snapshot(topics=sorted(topics))
    except ConfigurationError:
        # a plan topic was deleted: read every topic, the missing ones' moves then fail by name
        snap = admin.snapshot()
        everything = True
    if everything:
        reassignments = {
            p.tp: InFlightReassignment(topic=p.topic, partition=p.partition, replicas=p.replicas,
                                       adding_replicas=p.adding_replicas, removing_replicas=p.removing_replicas)
            for p in snap.partitions if p.reassigning
        }
    else:
        reassignments = admin.list_reassignments()
    wanted = set(topics)
    parts = {p.tp: p for p in snap.partitions if p.topic in wanted}
    counts = Counter(tp.topic for tp in parts)
    present = {t.name: t.partition_count or counts[t.name] for t in snap.topics if t.name in wanted}
    for topic, n in counts.items():  # a snapshot without topic records still shows the partitions
        present.setdefault(topic, n)
    min_isr = {t.name: max(1, t.min_insync_replicas or 1) for t in snap.topics}
    return _Observation(reassignments=reassignments, partitions=parts,
                        brokers=frozenset(b.id for b in snap.brokers), topics=present,
                        everything=tuple(snap.partitions), min_isr=min_isr)


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


def _stale_in_flight(m: Move, r: InFlightReassignment) -> str:
    """Why move ``m`` is refused while the controller reassigns its partition elsewhere (``r``): the
    reassignment in flight, what the plan expected, and, in KIP-860's race (a plan computed from the
    intermediate replica set that describe shows), the replication-factor change the move would make."""
    text = (f"the cluster is reassigning it from {list(r.original_replicas)} to {list(r.target_replicas)} "
            f"(describe shows the intermediate replica set {list(r.replicas)} meanwhile)")
    if m.current_replicas is not None and m.current_replicas != r.original_replicas:
        text += f"; the plan expected {list(m.current_replicas)}"
    rf, planned = len(r.target_replicas), len(m.target_replicas)
    if planned == rf:
        return text + ". Wait for that reassignment to finish (or cancel it) and plan again"
    text += f"; the plan's move to {list(m.target_replicas)} would change the replication factor {rf} -> {planned}"
    if m.current_replicas is not None and set(m.current_replicas) == set(r.replicas):
        text += " (a plan computed from the intermediate replica set: KIP-860's race)"
    return (text + ". Wait for the reassignment to finish and plan again from the cluster; a deliberate RF change "
            "needs the move marked allow_rf_change in the plan and allow_replication_factor_change=True (KIP-860)")


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
        live = obs.partitions.get(tp)
        if live is None:
            missing.append(tp)  # refused by check_plan, naming the topic or partition
            continue
        state = classify(m, live).state  # the one vocabulary the progress watch uses too
        r = obs.reassignments.get(tp)
        if state in (MoveState.DONE, MoveState.LAGGING):
            status.moves[tp] = _moved(m, live.replicas)
            (status.done if state is MoveState.DONE else status.lagging).append(tp)
        elif state is MoveState.IN_FLIGHT:
            status.in_flight.append(tp)
            # the controller's listing keeps the original order; metadata that still shows a just-finished
            # move's intermediate set (nothing listed) keeps the plan's move as it is
            original = r.original_replicas if r is not None else live.original_replicas if live.reassigning else None
            status.moves[tp] = _moved(m, original) if original is not None else m
        elif state is MoveState.PENDING:
            status.moves[tp] = _moved(m, live.replicas)
            reason = rf_refusal(m, len(live.replicas), options) or known_failed.get(tp)
            if reason:
                status.failed[tp] = reason
            else:
                status.pending.append(tp)
        elif state is MoveState.FOREIGN:
            # somebody else's reassignment of this partition is in flight: refused, and listed as foreign
            if r is None:  # the snapshot saw it, the (earlier) listing did not
                r = InFlightReassignment(topic=tp.topic, partition=tp.partition, replicas=live.replicas,
                                         adding_replicas=live.adding_replicas,
                                         removing_replicas=live.removing_replicas)
                status.reassignments[tp] = r
            if tp not in status.foreign:
                status.foreign.append(tp)
            status.stale[tp] = (m.current_replicas or r.original_replicas, r.replicas)
            status.stale_why[tp] = _stale_in_flight(m, r)
        else:  # STALE: the partition is neither where the plan found it nor where it sends it
            status.stale[tp] = (m.current_replicas or live.replicas, live.replicas)
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


# -- the health gate ----------------------------------------------------------------------------


def _check_health(plan: ReassignmentPlan, obs: _Observation, status: ExecutionStatus, options: ExecutionOptions,
                  log: logging.Logger) -> None:
    """Read the cluster's health into ``status`` (core/health.py): ``paused`` when trouble that
    the run does not explain stops new submissions; pending moves below min ISR counted (and
    refused with ``below_min_isr="refuse"``)."""
    policy = options.health
    isr = {tp: p.isr for tp, p in obs.partitions.items()}
    risky = below_min_isr([status.moves[tp] for tp in status.pending], isr, obs.min_isr)
    if risky and policy.below_min_isr == "refuse":
        for tp in risky:
            status.failed[tp] = (
                f"refused: its target replicas {list(status.moves[tp].target_replicas)} keep fewer in-sync replicas "
                f"(ISR now {list(isr.get(tp, ()))}) than min.insync.replicas={obs.min_isr.get(tp.topic, 1)}; "
                "below_min_isr='last' sends it after the other moves instead")
        gone = set(risky)
        status.pending = [tp for tp in status.pending if tp not in gone]
    else:
        status.below_min_isr = risky
    if not policy.gate:
        return
    active = [status.moves[tp] for tp in [*status.pending, *status.in_flight]]
    ours = {tp: status.moves[tp].adding_replicas for tp in [*status.in_flight, *status.lagging, *status.done]}
    status.health = assess(obs.everything, obs.min_isr, moving=ours, drained=drained_brokers(active),
                           live_brokers=obs.brokers)
    if not status.health.healthy:
        status.paused = status.health.line()
        if status.pending and status.blocked is None:
            log.warning("PAUSED, nothing new is submitted (%d pending, %d in flight): %s", len(status.pending),
                        len(status.in_flight), status.paused)


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
    room: DiskRoom | None = None,
    held: dict[TopicPartition, str] | None = None,
) -> list[Move]:
    """The moves of ``pending`` (already ordered) that fit the limits next to what is in flight and, with
    the disk guard's ``room``, the brokers' disks: a move that does not fit is put in ``held`` with why,
    and the next one gets its slot."""
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
        if room is not None:
            why = room.take(m)
            if why is not None:
                if held is not None:
                    held[m.tp] = why
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


def _assess(
    admin: ClusterAdmin,
    plan: ReassignmentPlan,
    options: ExecutionOptions,
    *,
    known_failed: Mapping[TopicPartition, str] | None,
    settle_s: float,
    sleep: Callable[[float], None] | None,
    log: logging.Logger,
    rf_guard_check: bool,
) -> tuple[ExecutionStatus, _Observation]:
    """Observe and classify, read-only: every move's state, the plan errors, the health gate, and
    ``status.blocked`` when nothing may be submitted (``rf_guard_check``: also when the brokers lack
    KIP-860's flag and a pending move needs it)."""
    topics = {m.topic for m in plan.moves}
    gate = options.health.gate
    obs = _observe(admin, topics, everything=gate)
    status = _classify(plan, obs, options, known_failed or {})
    suspects = [tp for tp in status.stale if tp not in status.reassignments]
    if suspects and settle_s >= 0:
        (sleep or _sleep)(settle_s)
        obs = _observe(admin, topics, everything=gate)
        status = _classify(plan, obs, options, known_failed or {})
    status.observation = obs
    _check_health(plan, obs, status, options, log)

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
    if status.blocked is None and rf_guard_check and needs_guard:
        supported = rf_guard_supported(admin)
        if supported is False and options.rf_guard == "broker":
            status.blocked = _RF_GUARD_UNSUPPORTED
        elif supported is False:
            log.warning(_RF_GUARD_CLIENT_LIMITS)
    return status, obs


def preflight(
    admin: ClusterAdmin,
    plan: ReassignmentPlan,
    options: ExecutionOptions,
    *,
    settle_s: float = SETTLE_RECHECK_S,
    sleep: Callable[[float], None] | None = None,
    log: logging.Logger | None = None,
) -> ExecutionStatus:
    """What execution would find now, without changing anything (no throttle, no submission).

    The same checks as the first :func:`step` of :func:`run`: stale moves, reassignments in flight that
    the plan did not start, plan errors (brokers, topics or partitions missing), KIP-860 RF changes
    not allowed, moves below min ISR, the health gate, and the RF guard the brokers support. The
    approval step (operators/approval.py) shows it to the person before asking;
    :func:`refusal` says whether execution would refuse the whole plan.
    """
    return _assess(admin, plan, options, known_failed=None, settle_s=settle_s, sleep=sleep, log=log or _log,
                   rf_guard_check=True)[0]


def refusal(status: ExecutionStatus) -> str | None:
    """Why execution would run none of the plan's moves (``None``: some would run, or every move is done).

    ``status.blocked`` (the plan refused as a whole), or every move not done is stale or refused."""
    if status.blocked:
        return status.blocked
    if not status.remaining and (status.stale or status.failed):
        return (f"none of the plan's {status.total} move(s) can run: {len(status.stale)} stale and "
                f"{len(status.failed)} refused ({', '.join(_names([*status.stale, *status.failed], 10))}); "
                "plan again from the current cluster")
    return None


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
    status, obs = _assess(admin, plan, options, known_failed=known_failed, settle_s=settle_s, sleep=sleep, log=log,
                          rf_guard_check=submit)
    batch: list[Move] = []
    if submit and status.blocked is None and status.paused is None and status.pending:
        pending = [status.moves[tp] for tp in status.pending]
        sizes: Mapping[TopicPartition, Mapping[int, int]] = {}
        guard = options.disk_reserve if isinstance(options.disk_reserve, DiskReserve) else None
        room = None
        # every partition of the plan, once: the copy watch and the progress line of this poll reuse it
        if guard is not None:
            sizes, room = _disk_room(admin, plan, status, guard)
        elif limits.order != "plan" and limits.limited and len(pending) > 1:
            sizes = status.sizes = admin.replica_sizes(list(plan.partitions))
        plan_index = {m.tp: i for i, m in enumerate(plan.moves)}
        ordered = _order(pending, limits, sizes, plan_index)
        if status.below_min_isr:  # safest last (core/health.py)
            risky = set(status.below_min_isr)
            ordered = [m for m in ordered if m.tp not in risky] + [m for m in ordered if m.tp in risky]
        held: dict[TopicPartition, str] = {}
        batch = select_batch(ordered, status.reassignments, limits, room, held)
        if room is not None and guard is not None:
            _disk_verdict(room, held, batch, status, guard, log)

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


def _disk_room(admin: ClusterAdmin, plan: ReassignmentPlan, status: ExecutionStatus,
               guard: DiskReserve) -> tuple[Mapping[TopicPartition, Mapping[int, int]], DiskRoom]:
    """The plan's sizes (kept in ``status.sizes``) and each broker's room, from one DescribeLogDirs that also
    measures the reassignments in flight the plan did not start: the copies under way (every reassignment in
    flight, and the plan's moves still catching up) count against the room."""
    foreign = [tp for tp in status.reassignments if tp not in status.moves]
    dirs = admin.log_dirs([*plan.partitions, *foreign])
    status.sizes = dirs.sizes if not foreign else {tp: s for tp, s in dirs.sizes.items() if tp in status.moves}
    by_tp = plan.by_partition() if status.lagging else {}
    copies = [(tp, r.adding_replicas) for tp, r in status.reassignments.items()] + \
             [(tp, by_tp[tp].adding_replicas) for tp in status.lagging if tp in by_tp]
    return dirs.sizes, DiskRoom(copies, dirs.sizes, dirs.space, guard, dirs.unanswered)


def _disk_verdict(room: DiskRoom, held: dict[TopicPartition, str], batch: list[Move], status: ExecutionStatus,
                  guard: DiskReserve, log: logging.Logger) -> None:
    """What the disk guard did this step, in the status and the log: the moves held, and the run blocked
    (refused, naming the brokers and the numbers) when nothing is in flight and no pending move fits."""
    if room.unguarded:  # the adapter warns once per broker
        log.info("disk guard: broker(s) %s report no free space (DescribeLogDirs v4, Kafka 3.3+): the moves onto "
                 "them are not checked", sorted(room.unguarded))
    if room.unsized:
        log.info("disk guard: %d move(s) not checked, no broker reports their size (%s)", len(room.unsized),
                 ", ".join(map(str, room.unsized[:3])))
    if not held:
        return
    status.disk_held = held
    fit = DiskFit(fits=batch, held=held)
    # nothing under way would free space, and no held move merely waits for a broker to answer
    if not batch and not status.reassignments and not status.lagging and not (room.waiting & held.keys()):
        status.blocked = disk_refusal(fit, guard)
    else:
        log.warning("disk guard: %s", fit.line())


def _elect(admin: ClusterAdmin, partitions: Sequence[TopicPartition], status: ExecutionStatus,
           log: logging.Logger) -> None:
    if not partitions:
        return
    for r in admin.elect_preferred_leaders(partitions):
        status.elections[r.tp] = r.error
        if r.error:
            log.warning("preferred-leader election of %s failed: %s %s", r.tp, r.error_code, r.error)
    log.info("preferred leaders elected for %d moved partition(s)", sum(1 for e in status.elections.values() if e is None))


def preflight_findings(status: ExecutionStatus, limit: int = SUMMARY_SAMPLE) -> list[tuple[int, str]]:
    """What pre-flight found, one ``(logging level, line)`` each: stale moves with their diff, plan
    errors, refused moves, foreign reassignments, the health gate's pause, and why the plan is blocked
    (last). At most ``limit`` moves are named per kind. :func:`report_preflight` logs them; the approval
    form lists them."""
    out: list[tuple[int, str]] = []
    for tp, (expected, actual) in sorted(status.stale.items())[:limit]:
        if tp in status.stale_why:
            out.append((logging.WARNING, f"stale move {tp} refused: {status.stale_why[tp]}"))
            continue
        r = status.reassignments.get(tp)
        extra = f" (being reassigned to {list(r.target_replicas)} by someone else)" if r else ""
        out.append((logging.WARNING, f"stale move {tp} refused: the plan expects replicas {list(expected)}, "
                                     f"the cluster has {list(actual)}{extra}"))
    if len(status.stale) > limit:
        out.append((logging.WARNING, f"... and {len(status.stale) - limit} more stale move(s)"))
    out += [(logging.WARNING, f"plan error: {problem}") for problem in status.plan_errors]
    out += [(logging.WARNING, f"move {tp} {why}") for tp, why in sorted(status.failed.items())[:limit]]
    if len(status.failed) > limit:
        out.append((logging.WARNING, f"... and {len(status.failed) - limit} more refused move(s)"))
    for tp in status.foreign[:limit]:
        r = status.reassignments[tp]
        out.append((logging.WARNING, f"foreign reassignment in flight: {tp} {list(r.original_replicas)} -> "
                                     f"{list(r.target_replicas)}"))
    if len(status.foreign) > limit:
        out.append((logging.WARNING, f"... and {len(status.foreign) - limit} more foreign reassignment(s)"))
    if status.paused:
        out.append((logging.WARNING, f"cluster unhealthy now, submissions would pause: {status.paused}"))
    if status.blocked:
        out.append((logging.ERROR, status.blocked))
    return out


def report_preflight(status: ExecutionStatus, log: logging.Logger | None = None) -> None:
    """Log what pre-flight found (:func:`preflight_findings`), then its counts."""
    log = log or _log
    for level, line in preflight_findings(status):
        if not line.startswith("cluster unhealthy now"):  # step() already logged the pause
            log.log(level, "%s", line)
    log.info("pre-flight: %s", status.progress_line())


# -- finishing ----------------------------------------------------------------------------------


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


# -- the whole loop -----------------------------------------------------------------------------


class RunGovernor:
    """What carries over from one step of a run to the next: the health gate's pause clock and policy,
    the adaptive limits (AIMD) and the copy watch (stall, rate, ETA).

    One object, two drivers: :func:`run` (ExecuteReassignment) and the sensor's submitter
    (``WaitForReassignmentSensor(submit_pending=True)``, ``plan_access.WaitSpec.submitter``), so both
    pause, give up after ``max_pause_s``, cancel or fail, and adapt their limits the same way. Per step::

        limits, options = governor.for_step(limits, options)
        status = step(admin, plan, limits, options, ...)
        stop = governor.health(status, at=clock(), submitting=True, log=log)   # the policy's verdict
        eta = governor.adapt(admin, status, done_before, at=clock(), options=options, state_dir=..., log=log)
    """

    def __init__(self, policy: HealthPolicy, adaptive: AdaptiveBounds | None = None,
                 throttle: int | None = None, *, holder: str | None = None) -> None:
        self.policy = policy
        self.adaptive = adaptive
        #: names the task try in the journal's ``adapted`` events (the sensor rebuilds its governor from them)
        self.holder = holder
        #: the limits in force (``None``: not adaptive, the task's own limits apply)
        self.current: Limits | None = adaptive.start(throttle) if adaptive is not None else None
        self.watch = CopyWatch(adaptive.stall_polls if adaptive is not None else 3)
        self.unhealthy_since: float | None = None
        self.paused_s = 0.0
        self.adaptations: list[str] = []
        self.stalled_polls = 0

    def for_step(self, limits: ExecutionLimits, options: ExecutionOptions) -> tuple[ExecutionLimits, ExecutionOptions]:
        """The limits and options of the next step: the adaptive ones in place of the task's, when adaptive."""
        if self.current is None:
            return limits, options
        return (replace(limits, max_moves=self.current.moves),
                replace(options, throttle_bytes_per_sec=self.current.throttle))

    def health(self, status: ExecutionStatus, *, at: float, submitting: bool, log: logging.Logger) -> str | None:
        """Keep the pause clock: why the health policy stops the run now (``None``: it goes on).

        ``submitting``: the run may still submit (not past its deadline); a pause only counts then."""
        if status.paused and status.pending and submitting:
            self.unhealthy_since = at if self.unhealthy_since is None else self.unhealthy_since
            return _unhealthy_stop(self.policy, at - self.unhealthy_since, status)
        if self.unhealthy_since is not None:
            self.paused_s += at - self.unhealthy_since
            log.info("cluster healthy again after %.1f s: resuming submissions", at - self.unhealthy_since)
            self.unhealthy_since = None
        return None

    def adapt(self, admin: ClusterAdmin, status: ExecutionStatus, done_before: int, *, at: float,
              options: ExecutionOptions, state_dir: StateLocation | None, log: logging.Logger,
              measure: Sequence[TopicPartition] | None = None) -> float | None:
        """Measure the copy in flight (a stall is warned and counted; ``measure`` widens that one DescribeLogDirs
        to the plan's partitions for the progress line), move the adaptive limits (each change logged and
        journalled); returns the ETA of the first move in flight to finish (``None``: unknown)."""
        eta = _watch_copy(admin, status, self.watch, done_before, at, options, log, measure=measure,
                          stall_s=self.adaptive.stall_s if self.adaptive is not None else None)
        self.stalled_polls += status.stalled
        if self.current is not None and self.adaptive is not None:
            self.current, why = adapt(self.current, self.adaptive, healthy=status.paused is None,
                                      progressing=self.watch.progressing or len(status.done) > done_before,
                                      stalled=status.stalled)
            if why:
                self.adaptations.append(why)
                log.info("adaptive limits: %s", why)
                journal(state_dir, {"event": ADAPTED, "why": why, "max_moves": self.current.moves,
                                    "throttle_bytes_per_sec": self.current.throttle,
                                    **({"holder": self.holder} if self.holder else {})}, log=log)
        return eta

    def export(self) -> dict[str, Any]:
        """What a rebuilt governor of the same task try goes on from (JSON; see :meth:`restore`)."""
        current = self.current
        return {"current": [current.moves, current.throttle] if current is not None else None,
                "unhealthy_since": self.unhealthy_since, "paused_s": self.paused_s,
                "stalled_polls": self.stalled_polls, "watch": self.watch.export()}

    def restore(self, data: Mapping[str, Any]) -> None:
        """Carry on from :meth:`export` of a governor of the same task try (the sensor's, rebuilt at each
        reschedule poke, at the deferral and when the triggerer restarts; times on the wall clock): the
        adaptive limits, a pause still running (so ``max_pause_s`` holds however often the sensor is
        rescheduled) and the copy watch (so the copy rate, "progressing" and a stall are seen across pokes)."""
        current = data.get("current")
        if current is not None and self.current is not None and self.adaptive is not None:
            moves, throttle = current
            self.current = Limits(moves=max(1, int(moves)), throttle=int(throttle) if throttle else None)
        since = data.get("unhealthy_since")
        self.unhealthy_since = float(since) if since is not None else None
        self.paused_s = float(data.get("paused_s") or 0.0)
        self.stalled_polls = int(data.get("stalled_polls") or 0)
        if data.get("watch"):
            self.watch.restore(data["watch"])

    def close(self, at: float) -> None:
        """End of the run: a pause still running counts into ``paused_s``."""
        if self.unhealthy_since is not None:
            self.paused_s += at - self.unhealthy_since
            self.unhealthy_since = None


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
    #: the health policy stopped the run (``on_unhealthy`` "cancel"/"fail", or a pause longer than its bound)
    unhealthy: str | None = None
    #: seconds spent paused by the health gate
    paused_s: float = 0.0
    #: the adaptive limits' changes, one line each (``adaptive``)
    adaptations: list[str] = field(default_factory=list)
    #: polls at which the copy in flight was stalled (not gaining on its leaders; see core/adaptive.py)
    stalled_polls: int = 0

    def summary(self) -> dict[str, Any]:
        out = self.status.summary()
        out.update(deadline_reached=self.deadline_reached, stopped=self.stopped, steps=self.steps,
                   elapsed_s=round(self.elapsed_s, 1), unhealthy=self.unhealthy, paused_s=round(self.paused_s, 1),
                   adaptations=len(self.adaptations), stalled_polls=self.stalled_polls, **self.finish)
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
    adaptive: AdaptiveBounds | None = None,
    min_poll_interval_s: float = DEFAULT_MIN_POLL_S,
    clock: Callable[[], float] = time.monotonic,
    progress: Callable[[ExecutionStatus], None] | None = None,
) -> RunResult:
    """Execute ``plan`` to the end (or the deadline): pre-flight, then :func:`step` until done.

    1. Pre-flight: one :func:`step` that submits nothing; its findings are logged
       (:func:`report_preflight`). A blocked run stops here, before anything changed.
    2. ``before_first_submit(status)`` (the operator writes the rollback plan there).
    3. :func:`step` until the plan is complete, polling between ``min_poll_interval_s`` and
       ``poll_interval_s``: soon when a move in flight is about to finish (its bytes left at the
       measured rate), rarely when far (core/adaptive.py). After ``deadline`` no
       move is submitted; in-flight moves finish (``on_deadline="finish"``) or are cancelled
       (``"cancel"``), and the remaining moves are reported: the next run resumes them.
       While the health gate (``options.health``) pauses, nothing new is submitted; its policy
       cancels or fails the run instead, or gives up after ``max_pause_s``: then the moves in
       flight keep their throttles (a new run on the plan, or the cancel operator, restores them).
       With ``adaptive`` bounds, the concurrent moves (and the throttle, with throttle bounds)
       follow AIMD from one poll to the next, each change logged; a copy that stops gaining on
       its leaders (a throttle below a hot partition's ingest rate) is reported as stalled.
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
    keep_throttles = False
    policy = options.health
    governor = RunGovernor(policy, adaptive, options.throttle_bytes_per_sec)
    poll: float | None = None
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
                    from airflow_kafka_reassign.core.cancel import cancel  # it builds on this module

                    result.cancel = cancel(admin, plan, rf_guard=options.rf_guard, log=log, sleep=sleep)
            done_before = len(status.done)
            run_limits, run_options = governor.for_step(limits, options)
            status = step(admin, plan, run_limits, run_options, state_dir=state_dir, submit=not past, log=log,
                          known_failed=known, settle_s=settle_s, sleep=sleep, should_stop=should_stop, lease=lease)
            result.steps += 1
            result.status = status
            result.submitted.extend(status.submitted)
            known.update(status.failed)
            if status.complete or not wait:
                break
            if not status.in_flight and (past or (status.blocked and not status.lagging)):
                break
            stop = governor.health(status, at=clock(), submitting=not past, log=log)
            if stop is not None:
                result.unhealthy = stop
                status.blocked = stop
                if policy.on_unhealthy == "cancel" and status.in_flight:
                    from airflow_kafka_reassign.core.cancel import cancel  # it builds on this module

                    result.cancel = cancel(admin, plan, rf_guard=options.rf_guard, log=log, sleep=sleep)
                elif status.in_flight:
                    keep_throttles = True
                break
            eta = governor.adapt(admin, status, done_before, at=clock(), options=run_options, state_dir=state_dir,
                                 log=log, measure=plan.partitions if progress is not None else None)
            if progress is not None and status.in_flight:
                progress(status)
            poll = next_poll_s(eta, previous_s=poll, floor_s=min(min_poll_interval_s, poll_interval_s),
                               ceiling_s=poll_interval_s, progressed=len(status.done) > done_before)
            (sleep or _sleep)(poll)
        done_cleanly = True
    except LeaseLostError:
        lost = True
        raise
    finally:
        result.elapsed_s = time.monotonic() - started
        governor.close(clock())
        result.paused_s, result.adaptations = governor.paused_s, governor.adaptations
        result.stalled_polls = governor.stalled_polls
        if keep_throttles:
            log.warning("%d move(s) still in flight keep their throttles; a new run on this plan (or "
                        "CancelReassignmentOperator) restores them from %s", len(result.status.in_flight),
                        backup_path(state_dir) if state_dir else "the backup")
        elif not lost and (finish_at_end or not done_cleanly or result.stopped):
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


def _unhealthy_stop(policy: HealthPolicy, paused_s: float, status: ExecutionStatus) -> str | None:
    """Why the health policy stops the run now (``None``: it keeps pausing)."""
    if policy.on_unhealthy == "pause" and (policy.max_pause_s is None or paused_s <= policy.max_pause_s):
        return None
    if policy.on_unhealthy == "pause":
        what = f"gave up after pausing {paused_s:.0f} s (max_pause_s={policy.max_pause_s})"
    else:
        what = f"on_unhealthy={policy.on_unhealthy!r}"
    then = ("the moves in flight were cancelled" if policy.on_unhealthy == "cancel"
            else "the moves in flight continue")
    return (f"stopped by the health gate, {what}: {status.paused}; {len(status.pending)} move(s) not submitted, "
            f"{then}. Run the task again on the same plan once the cluster is healthy (it resumes), or raise "
            "max_pause_s")


def _watch_copy(admin: ClusterAdmin, status: ExecutionStatus, watch: CopyWatch, done_before: int, at_s: float,
                options: ExecutionOptions, log: logging.Logger,
                measure: Sequence[TopicPartition] | None = None, stall_s: float | None = None) -> float | None:
    """Measure the copy in flight (DescribeLogDirs of its partitions): the net rate, a stall
    (``status.stalled``, warned), and the ETA of the first move to finish (``None``: unknown).

    ``measure`` (the plan's partitions, for the progress line) widens that one DescribeLogDirs;
    the sizes are then kept in ``status.sizes``. When the step already read them (``status.sizes``: it
    orders a bounded batch by size), nothing is read again."""
    moving = {tp: status.moves[tp] for tp in status.in_flight if status.moves[tp].adding_replicas}
    if status.sizes is not None:  # the step read the plan's sizes to order its batch, moments ago: no second read
        left = bytes_left(moving, status.sizes) if moving else {}
    elif measure is not None:
        status.sizes = admin.replica_sizes(measure)
        left = bytes_left(moving, status.sizes) if moving else {}
    else:
        left = bytes_left(moving, admin.replica_sizes(sorted(moving))) if moving else {}
    status.stalled = watch.update(at_s, sum(left.values()) if left else None,
                                  finished=len(status.done) - done_before, key=frozenset(left),
                                  window_s=stall_window_s(options.throttle_bytes_per_sec) if stall_s is None
                                  else stall_s)
    if status.stalled:
        rate = options.throttle_bytes_per_sec
        log.warning("copy STALLED: %d move(s) in flight (%s) have not gained on their leaders for %d polls "
                    "(%.0f s), %d bytes left; %s", len(moving), _sample(list(moving)), watch.flat_polls,
                    watch.flat_s, sum(left.values()),
                    f"the throttle ({rate} B/s) is likely below these partitions' ingest rate: raise it "
                    "(throttle_bytes_per_sec, or max_throttle with adaptive limits)" if rate else
                    "check the brokers of these moves")
    return soonest_eta_s(left, watch.rate)


def progress_observation(plan: ReassignmentPlan, status: ExecutionStatus, *, at: float,
                         refused: Mapping[TopicPartition, str] | None = None) -> Observation:
    """The progress watch's :class:`~airflow_kafka_reassign.core.progress.Observation` of ``plan`` from what
    the step that made ``status`` read (its partitions, the live brokers, the sizes measured for the line):
    the execute task's progress line, and the sensor's poke that submitted, cost no request of their own.
    ``refused``: the moves refused so far (default: this step's ``status.failed``)."""
    obs = status.observation
    if obs is None:
        raise ValueError("this status was not made by step(): it has no observation to report progress from")
    return assess_parts(plan, obs.partitions, obs.brokers, status.sizes, at=at,
                        refused=status.failed if refused is None else refused, submitted=set(status.submitted))


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
