"""The execution settings: :class:`ExecutionConfig` (what the operators and the sensor take, each setting declared once)
and the engine's views of it, :class:`ExecutionLimits` (how many moves at once, in which order) and
:class:`ExecutionOptions` (what execution may do beyond the safe default)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from airflow_kafka_reassign.core.guards.adaptive import AdaptiveBounds
from airflow_kafka_reassign.core.guards.disk import DEFAULT_RESERVE, DiskReserve
from airflow_kafka_reassign.core.guards.headroom import (
    DEFAULT_CONSUMER_READ_RATIO,
    DEFAULT_FLOOR,
    DEFAULT_MARGIN,
    BrokerRates,
    HeadroomPolicy,
)
from airflow_kafka_reassign.core.guards.health import BelowMinIsr, HealthPolicy, OnUnhealthy
from airflow_kafka_reassign.core.guards.kafka_line import RfGuardChoice
from airflow_kafka_reassign.exceptions import ConfigurationError

_log = logging.getLogger(__name__)


Order = Literal["balanced", "plan", "smallest-first", "largest-first"]
#: The orders, as ``order`` takes them.
ORDERS: tuple[str, ...] = ("balanced", "smallest-first", "largest-first", "plan")


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


@dataclass(frozen=True)
class ExecutionLimits:
    """How many moves may run at once, and in which order pending moves go out.

    Both limits count every reassignment the controller lists, including foreign ones (allowed
    with ``allow_concurrent_reassignments``). A move *touches* the brokers that gain or lose a
    replica (its adding and removing replicas); a move that only reorders replicas touches none.

    :param max_moves: concurrent reassignments in the cluster (``None``: no limit).
    :param max_moves_per_broker: concurrent reassignments touching any one broker.
    :param order: ``"balanced"`` (the moves of the brokers with the most bytes to move first, largest first among
        them), ``"smallest-first"`` or ``"largest-first"`` (by bytes to copy: partition size x adding replicas,
        from DescribeLogDirs), or ``"plan"`` (the plan's order); moves of unknown size go last, in plan order. Whatever
        the order, the moves that restore redundancy go first and those below min ISR last (core/guards/health.py).
    :param max_moves_per_dir: concurrent moves between log dirs (AlterReplicaLogDirs) out of or into any one log
        dir, foreign ones seen in DescribeLogDirs included (``None``: no limit).
    """

    max_moves: int | None = None
    max_moves_per_broker: int | None = None
    order: Order = "balanced"
    max_moves_per_dir: int | None = 1

    def __post_init__(self) -> None:
        for name in ("max_moves", "max_moves_per_broker", "max_moves_per_dir"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigurationError(f"{name} must be a positive integer or None, not {value!r}")
        if self.order not in ORDERS:
            raise ConfigurationError(f"order must be one of {', '.join(map(repr, ORDERS))}, not {self.order!r}")

    @property
    def limited(self) -> bool:
        return self.max_moves is not None or self.max_moves_per_broker is not None


@dataclass(frozen=True)
class ExecutionOptions:
    """What execution may do beyond the safe default (each flag allows one named thing).

    :param allow_replication_factor_change: send the moves the plan marks ``allow_rf_change``
        with KIP-860's AllowReplicationFactorChange=true; without it they are refused.
    :param rf_guard: ``"broker"`` (Kafka 4.1+ enforces KIP-860; older brokers: refused, nothing
        sent), ``"client"`` (older brokers: replica counts compared with the controller's
        view just before sending; racy) or ``"auto"`` (``"broker"``, or ``"client"`` on a ZooKeeper-mode cluster,
        said in the log: core/guards/kafka_line.py); the session replaces ``"auto"`` by its choice.
    :param allow_concurrent_reassignments: proceed while reassignments this plan did not start
        are in flight (they count against the limits; partitions they move are refused as stale).
    :param on_plan_error: what a *plan error* does: a pending move whose target replicas name a
        broker the cluster does not know at all, or a partition its topic never had. ``"refuse"``
        (default): the whole plan is refused before anything is sent (no throttle, no reassignment).
        ``"skip"``: those moves are refused by name and the other moves run. A topic deleted,
        re-created or grown, and a broker restarting, are not plan errors (core/execution/observe.py).
    :param allow_offline_brokers: target replicas may name a broker that the cluster does not list
        as alive (a registered broker that is down): such moves are sent and wait for the broker
        (the controller refuses a broker id it has never registered, per move); offline brokers
        get no throttle (setting one would wait for them). Without it they are plan errors.
    :param strict: refuse the whole plan when any move is refused, stale ones included (implies
        ``on_plan_error="refuse"``; combining it with ``"skip"`` is a configuration error).
    :param throttle_bytes_per_sec: replication throttle on the brokers and replicas involved.
    :param elect_leaders: elect the preferred leader of each moved partition once it is done.
    :param dry_run: validate everything, log the exact requests, change nothing.
    :param health: the health gate (core/guards/health.py): before each batch the cluster's
        under-replicated, under-min-ISR and offline partitions are read; trouble the run does not
        explain pauses submission (the default), cancels or fails the run.
    :param disk_reserve: the disk guard (core/guards/disk.py): before each batch each broker's free
        disk space is read (DescribeLogDirs, Kafka 3.3+) and a move is submitted only if every broker it
        adds keeps this much free after it and the moves in flight: a share (``"1%"``, the default), a
        size (``"20GiB"``, bytes), or ``None``/``"off"``. A move that does not fit waits; when nothing
        is in flight and nothing fits, the run is refused naming the broker and the numbers. A move between
        log dirs is checked against its target dir's volume the same way.
    :param log_dir_throttle_bytes_per_sec: ``replica.alter.log.dirs.io.max.bytes.per.second`` on the brokers
        moving replicas between their log dirs, backed up with the replication throttles and restored with them.
    :param throttle_headroom: the headroom throttle (core/guards/headroom.py): each involved broker's leader and
        follower rate is its network capacity x (1 - margin) less the client traffic it carries now, measured at
        every step, within ``throttle_bytes_per_sec`` (the cap; without one each broker's capacity x (1 - margin)).
    :param broker_restart_wait_s: how long moves that need a broker the cluster does not list as alive (a rolling
        restart) wait for it, while the others go on; past it they are refused naming the broker.
    :param foreign_reassignment_wait_s: how long a planned partition that someone else is reassigning waits for
        that reassignment to finish before its move is refused; after it finishes the move is judged again.
    :param broker_throttles: the per-broker rates of this step (set by the run's governor under
        ``throttle_headroom``, not a setting); ``None``: ``throttle_bytes_per_sec`` for every broker.
    """

    allow_replication_factor_change: bool = False
    rf_guard: RfGuardChoice = "auto"
    allow_concurrent_reassignments: bool = False
    on_plan_error: OnPlanError = "refuse"
    allow_offline_brokers: bool = False
    strict: bool = False
    throttle_bytes_per_sec: int | None = None
    elect_leaders: bool = False
    dry_run: bool = False
    health: HealthPolicy = field(default_factory=HealthPolicy)
    disk_reserve: DiskReserve | str | int | None = DEFAULT_RESERVE
    log_dir_throttle_bytes_per_sec: int | None = None
    throttle_headroom: HeadroomPolicy | None = None
    broker_throttles: BrokerRates | None = None
    broker_restart_wait_s: float = 300.0
    foreign_reassignment_wait_s: float = 600.0

    @property
    def throttled(self) -> bool:
        """Whether replication is throttled (one rate, or per broker from the headroom)."""
        return bool(self.throttle_bytes_per_sec) or self.throttle_headroom is not None

    @property
    def replication_rate(self) -> int | BrokerRates | None:
        """What :func:`~airflow_kafka_reassign.core.execution.throttle.sync_throttles` sets this step: the per-broker rates
        under the headroom throttle, else the one rate."""
        if self.throttle_headroom is not None:
            return self.broker_throttles or BrokerRates(default=self.throttle_headroom.start_rate(
                self.throttle_bytes_per_sec))
        return self.throttle_bytes_per_sec

    def __post_init__(self) -> None:
        if not isinstance(self.disk_reserve, DiskReserve):  # parsed once: "5%", "20GiB", bytes, None/"off"
            object.__setattr__(self, "disk_reserve", DiskReserve.parse(self.disk_reserve))
        if self.rf_guard not in ("auto", "broker", "client"):
            raise ConfigurationError(f"rf_guard must be 'auto', 'broker' or 'client', not {self.rf_guard!r}")
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
        for name in ("throttle_bytes_per_sec", "log_dir_throttle_bytes_per_sec"):
            rate = getattr(self, name)
            if rate is not None and (not isinstance(rate, int) or isinstance(rate, bool) or rate <= 0):
                raise ConfigurationError(f"{name} must be a positive integer (bytes/s) or None, not {rate!r}")



_OPTIONAL = ("max_moves", "max_moves_per_broker", "throttle_bytes_per_sec", "max_pause_s", "disk_reserve",
             "adaptive_limits", "log_dir_throttle_bytes_per_sec", "take_over_from", "throttle_headroom")
_BOOLS = ("allow_replication_factor_change", "allow_concurrent_reassignments", "allow_offline_brokers", "strict",
          "elect_leaders", "dry_run", "health_gate")


class ExecutionConfig(BaseModel):
    """Every execution setting, declared once: what ExecuteReassignment, WaitForReassignment (``submit_pending``),
    CancelReassignment (its rollback) and the trigger take, each as a keyword argument of the task or together as
    ``execution={...}`` (or an ``ExecutionConfig``). Rendered templates arrive as text and are read here once:
    ``"4"`` is 4, ``"false"`` is False, ``""`` or ``"None"`` is no value; anything else wrong is named.

    Example::

        >>> cfg = ExecutionConfig(max_moves_per_broker="2", throttle_bytes_per_sec=50_000_000, dry_run="false")
        >>> cfg.limits().max_moves_per_broker, cfg.options(default_disk_reserve="1%").throttle_bytes_per_sec
        (2, 50000000)
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    max_moves: int | None = None
    """Concurrent reassignments in the cluster, ours and foreign alike (``None``: no limit)."""
    max_moves_per_broker: int | None = None
    """Concurrent reassignments touching any one broker: adding or removing a replica on it (a move that only
    reorders replicas touches none)."""
    order: Order = "balanced"
    """Which pending moves go out first, after the moves that restore redundancy (a replica out of the ISR or on a
    broker that is down replaced, min ISR restored: always first) and before those below min ISR (always last):
    ``"balanced"`` (default: the moves of the brokers with the most bytes to move first, largest first among them,
    so the busiest brokers' slots never wait and the small moves fill the end: the plan ends soonest under the
    per-broker limits), ``"smallest-first"`` or ``"largest-first"`` by bytes to copy (partition size x adding
    replicas, from DescribeLogDirs), or ``"plan"``. Moves of unknown size go last, in plan order."""
    throttle_bytes_per_sec: int | None = None
    """Replication throttle (bytes/s) on the brokers and replicas of the moves in flight; the values that were
    there before are backed up on the run state first and restored exactly at the end (after success, failure,
    cancel or a killed task)."""
    allow_replication_factor_change: bool = False
    """Send the moves the plan marks ``allow_rf_change`` with KIP-860's AllowReplicationFactorChange=true;
    without it they are refused."""
    rf_guard: RfGuardChoice = "auto"
    """``"broker"``: Kafka 4.1+ enforces KIP-860 (older brokers: refused, nothing sent, naming their line).
    ``"client"``: older brokers get replica counts compared with the controller's view just before sending (racy).
    ``"auto"`` (default): ``"broker"``, except on a ZooKeeper-mode cluster (Kafka 3.x), which can never have KIP-860:
    ``"client"`` there, said in the log and the run's summary (docs/kafka-lines.md)."""
    allow_concurrent_reassignments: bool = False
    """Proceed while reassignments this plan did not start are in flight (they count against the limits;
    partitions they move are refused as stale)."""
    on_plan_error: OnPlanError = "refuse"
    """A *plan error* is a plan that is wrong in itself: a move naming a broker the cluster does not know at all, or
    a partition its topic (the same topic id) never had. ``"refuse"``: the whole plan is refused before anything is
    sent. ``"skip"``: those moves are refused by name and the others run. What the cluster does under a plan is not
    a plan error (docs/execute.md, "When the cluster changes under a run"): a deleted or re-created topic's moves are
    dropped, a grown topic's continue, a broker that restarts pauses only its moves."""
    allow_offline_brokers: bool = False
    """Target replicas may name a registered broker that is down: those moves are sent and wait for it (no
    throttle is set on it). Without it they wait unsent for the broker, up to ``broker_restart_wait_s``."""
    broker_restart_wait_s: float = Field(default=300.0, ge=0)
    """A broker the cluster does not list as alive (fenced, or its process restarting: a rolling restart) pauses
    the moves whose target replicas name it, for up to this many seconds, while the moves that do not involve it go
    on; when it is back they resume. Gone for longer, its moves are refused naming it (the goal's next round, or
    ``allow_offline_brokers``, deals with them)."""
    foreign_reassignment_wait_s: float = Field(default=600.0, ge=0)
    """A planned partition that someone else is reassigning waits up to this many seconds for that reassignment to
    finish; then its move is judged again against where the partition is (stale: a goal-driven run plans it again,
    a hand-written plan refuses it by name). Past the bound the move is refused naming the reassignment."""
    strict: bool = False
    """Refuse the whole plan when any move is refused, stale ones included (cannot be combined with
    ``on_plan_error="skip"``)."""
    elect_leaders: bool = False
    """Elect the preferred leader of each moved partition once it is done."""
    dry_run: bool = False
    """Validate everything, log the exact requests, change nothing."""
    health_gate: bool = True
    """Read the cluster's under-replicated, under-min-ISR and offline partitions before each batch; trouble the
    run's own moves do not explain is acted on by ``on_unhealthy``."""
    on_unhealthy: OnUnhealthy = "pause"
    """On trouble: ``"pause"`` (submit nothing new, one line per poll saying why, resume when healthy),
    ``"cancel"`` (cancel the moves in flight and stop) or ``"fail"`` (stop at once; moves in flight keep
    running with their throttles)."""
    max_pause_s: float | None = 1800.0
    """A pause longer than this stops the run as ``"fail"`` would (``None``: no bound)."""
    below_min_isr: BelowMinIsr = "last"
    """Pending moves whose target keeps fewer in-sync replicas than ``min.insync.replicas`` go ``"last"`` or are
    ``"refuse"``-d."""
    disk_reserve: str | int | None = None
    """The disk guard: before each batch every broker's free space is read (DescribeLogDirs, Kafka 3.3+) and a
    move is sent only if each broker it adds keeps this much free after it and the copies under way: a share
    (``"15%"``), a size (``"50GiB"``, bytes) or ``"off"``. ``None``: the deployment's default
    (``AKR_DISK_RESERVE``, else 1%). A move that does not fit waits; nothing in flight and nothing fitting
    refuses the run, naming the broker and the numbers."""
    max_moves_per_dir: int | None = 1
    """Moves between log dirs (AlterReplicaLogDirs, a plan's pinned ``log_dirs``) in flight out of or into any one
    log dir (``None``: no limit). Each copies a replica within its broker's disks: one per dir keeps the disks'
    other work going."""
    log_dir_throttle_bytes_per_sec: int | None = None
    """``replica.alter.log.dirs.io.max.bytes.per.second`` (bytes/s) on the brokers moving replicas between their log
    dirs while they do; the values before are backed up on the run state (with the replication throttles) and
    restored exactly at the end, and on a broker as soon as it has nothing left to move."""
    take_over_from: str | None = None
    """The DAG run id of a dead run whose lease on this plan this run takes over at once, instead of waiting until it
    expires (``lease_ttl_s``). A run refused because another run holds the plan's lease is told, in one line, that
    run's id and when the lease expires. Give that id here only after confirming the run is dead: its task is not
    running on any worker and no retry is to come (a worker lost with a task that had no retries left). Only that
    run's lease is taken; another holder is still refused. The throttles it set stay backed up on the run state and
    are restored exactly by whichever run finishes the plan (docs/storage.md)."""
    throttle_headroom: int | str | dict[str, Any] | None = None
    """Opt-in: a throttle that uses each broker's headroom (docs/execute.md, "A throttle that uses the headroom").
    Each broker's network capacity: bytes/s or a size (``"100MiB"``) for every broker, a mapping of broker ids
    (and ``"default"``) to a size or ``{"network_in": ..., "network_out": ...}``, or a capacity document (its
    ``default``/``racks``/``brokers`` entries' ``network_in``/``network_out``; a mapping, or its JSON/YAML file). At
    every step each involved broker's follower rate becomes its ``network_in`` x (1 - ``headroom_margin``) less the
    client bytes it takes in now, its leader rate its ``network_out`` x (1 - margin) less what it sends (measured
    from the replicas' sizes between two steps; recovery traffic that is not the run's counts too), never above
    ``throttle_bytes_per_sec`` (the cap; without it, capacity x (1 - margin)), never below ``headroom_floor``.
    Restored exactly at the end like any throttle. ``None``: one rate for every broker (as before)."""
    headroom_margin: float = DEFAULT_MARGIN
    """The share of each broker's capacity the headroom throttle leaves unused, in [0, 1) (0.2: 20%): bursts
    between two measurements and what sizes cannot see."""
    headroom_floor: int | str = DEFAULT_FLOOR
    """The slowest rate (bytes/s or a size) the headroom throttle sets, so a copy never stops on a broker without
    headroom (a warning names it); never above the cap."""
    consumer_read_ratio: float = DEFAULT_CONSUMER_READ_RATIO
    """The headroom throttle's estimate of consumer reads, which replica sizes cannot show: bytes read per byte
    produced on each leader (1.0: each byte is read once; 0: ignore consumers)."""
    adaptive_limits: dict[str, Any] | None = None
    """AIMD bounds (core/guards/adaptive.py), e.g. ``{"max_moves": 8, "min_throttle": 10_000_000, "max_throttle":
    100_000_000}``: concurrency starts at ``min_moves`` and the throttle at ``throttle_bytes_per_sec``; both grow
    while healthy and progressing and shrink on trouble (concurrency also on a stalled copy)."""

    @field_validator(*_OPTIONAL, mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        """A rendered template of an unset Param: ``""`` or ``"None"`` means no value."""
        return None if isinstance(value, str) and value.strip() in ("", "None", "none", "null") else value

    @field_validator(*_BOOLS, mode="before")
    @classmethod
    def _text_bool(cls, value: Any) -> Any:
        """``"False"`` (a rendered template) must not mean True."""
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> ExecutionConfig:
        self.limits()
        self.options(default_disk_reserve=DEFAULT_RESERVE)
        self.adaptive()
        return self

    @classmethod
    def parse(cls, value: ExecutionConfig | Mapping[str, Any] | None = None, /, **settings: Any) -> ExecutionConfig:
        """The config from an ``ExecutionConfig``, a dict of settings, or keyword settings (merged; a setting given
        twice is an error); every problem becomes one :class:`ConfigurationError` naming each setting and value."""
        base = value.model_dump() if isinstance(value, ExecutionConfig) else dict(value or {})
        twice = sorted(set(base) & set(settings))
        if twice:
            raise ConfigurationError(f"execution setting(s) {', '.join(twice)} given twice (in execution= and as an "
                                     "argument of the task): give each once")
        try:
            return cls.model_validate({**base, **settings})
        except ValidationError as e:
            raise ConfigurationError(_explain(e)) from None

    def limits(self) -> ExecutionLimits:
        """How many moves at once and in which order (the adaptive limits replace ``max_moves`` as they move)."""
        return ExecutionLimits(max_moves=self.max_moves, max_moves_per_broker=self.max_moves_per_broker,
                               order=self.order, max_moves_per_dir=self.max_moves_per_dir)

    def options(self, *, default_disk_reserve: str = DEFAULT_RESERVE) -> ExecutionOptions:
        """What execution may do; ``default_disk_reserve`` stands in for ``disk_reserve=None`` (the operators pass
        the deployment's, from ``AKR_DISK_RESERVE``)."""
        return ExecutionOptions(
            allow_replication_factor_change=self.allow_replication_factor_change, rf_guard=self.rf_guard,
            allow_concurrent_reassignments=self.allow_concurrent_reassignments, on_plan_error=self.on_plan_error,
            allow_offline_brokers=self.allow_offline_brokers, strict=self.strict,
            throttle_bytes_per_sec=self.throttle_bytes_per_sec, elect_leaders=self.elect_leaders,
            dry_run=self.dry_run,
            health=HealthPolicy(gate=self.health_gate, on_unhealthy=self.on_unhealthy, max_pause_s=self.max_pause_s,
                                below_min_isr=self.below_min_isr),
            disk_reserve=default_disk_reserve if self.disk_reserve is None else self.disk_reserve,
            log_dir_throttle_bytes_per_sec=self.log_dir_throttle_bytes_per_sec,
            throttle_headroom=HeadroomPolicy.parse(self.throttle_headroom, margin=self.headroom_margin,
                                                   floor=self.headroom_floor,
                                                   consumer_read_ratio=self.consumer_read_ratio),
            broker_restart_wait_s=self.broker_restart_wait_s,
            foreign_reassignment_wait_s=self.foreign_reassignment_wait_s,
        )

    def adaptive(self) -> AdaptiveBounds | None:
        """The AIMD bounds (``None``: fixed limits); their ``max_moves`` defaults to the task's."""
        return AdaptiveBounds.parse(self.adaptive_limits, max_moves=self.max_moves)

    def to_json(self) -> dict[str, Any]:
        """The settings as JSON (a trigger's kwargs carry them; :meth:`parse` reads them back)."""
        return self.model_dump(mode="json")


#: The names of every execution setting (the operators take each as a keyword argument).
EXECUTION_SETTINGS: frozenset[str] = frozenset(ExecutionConfig.model_fields)


def _explain(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        where = ".".join(str(p) for p in err["loc"]) or "execution"
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if where == "execution" or msg.startswith(where):
            parts.append(msg)
        else:
            parts.append(f"{where}: {msg}, not {err.get('input')!r}")
    return "invalid execution settings: " + "; ".join(parts)
