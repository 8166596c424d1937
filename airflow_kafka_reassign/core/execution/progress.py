"""Progress of a reassignment plan: done / in flight / pending, bytes copied, throughput, ETA, stuck.

Pure (no Airflow, no Kafka client): :class:`~airflow_kafka_reassign.sensors.reassignment.WaitForReassignmentSensor`
and its trigger feed it what the :class:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterAdmin` port reports, and log the
one line it formats per poke.

**Completion rule** (per move): the partition's replicas equal the move's target replicas (same order), the ISR
contains every target replica, and the controller lists no reassignment for it.

**States** of a move: :class:`~airflow_kafka_reassign.core.vocabulary.move_state.MoveState`, the one vocabulary the
execution engine uses too (done, lagging, in flight, pending, stale, foreign, failed; see
:mod:`~airflow_kafka_reassign.core.vocabulary.move_state`).
Stale and failed moves are *blocked*: waiting cannot complete them; a gone move (its topic deleted or re-created, or,
in a drain, a stale move whose partition holds no replica on the drained brokers any more) is dropped, and counts as
finished.

**Bytes** (from DescribeLogDirs sizes, see :meth:`ClusterAdmin.replica_sizes`): a move copies its partition once to
every adding replica. Its *bytes to copy* are the size of its largest source replica times the number of adding
replicas; its *bytes copied* are what the adding replicas hold (an adding replica already in the ISR counts as fully
copied). Pending moves count their bytes to copy too, so the ETA covers the whole plan.

**Throughput and ETA**: the bytes *remaining* (to copy minus copied, over unfinished moves) are sampled on every
poke; the throughput is minus the least-squares slope of the remaining bytes over a sliding window (default five
minutes). Using the remaining bytes (not the bytes copied) makes data still being produced into a moving partition
count against it, as it does in reality, and the regression over a window smooths the one-megabyte steps in which
followers fetch. The ETA is not remaining / throughput: it is when the last copy ends in the schedule of the plan's
copies (:func:`~airflow_kafka_reassign.core.execution.schedule.plan_eta`, one place for every path). The execution engine
computes it with its limits and each broker's rate (the rate it took in over the last polls, else the throttle) and
passes it in :attr:`Observation.eta_s`; a watch that does not submit knows no limits and gives each broker with a copy
in flight an equal share of the measured throughput, so the ETA is the busiest broker's bytes over its share (on a
plan spread evenly, remaining / throughput). Without sizes the same is done with the number of unfinished moves.

**Stuck**: the plan makes progress when a move finishes or the remaining bytes reach a new minimum. No progress for
``stuck_after_s``: the in-flight moves (or, when nothing is in flight, the pending ones) are *stuck*, and a warning
names them (repeated at most once per ``stuck_after_s``).

All tracker state is a small JSON document (:class:`TrackerState`), so a deferred trigger or a rescheduled sensor
resumes with its start time and last progress time.

Example::

    >>> from airflow_kafka_reassign.core.vocabulary.models import Move
    >>> from airflow_kafka_reassign.testing import FakeClusterAdmin
    >>> fake = FakeClusterAdmin.build(brokers={1: None, 2: None, 3: None}, topics={"orders": [[1, 2]]})
    >>> plan = ReassignmentPlan(moves=(Move(topic="orders", partition=0, current_replicas=(1, 2),
    ...                                     target_replicas=(3, 2)),))
    >>> watch = ReassignmentWatch(plan, started_at=0.0, stuck_after_s=600)
    >>> watch.poke(fake, now=1.0).observation.counts["pending"]
    1
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from airflow_kafka_reassign.core.execution.schedule import UNKNOWN_BROKER, Copy, broker_rates, plan_eta
from airflow_kafka_reassign.core.vocabulary.models import (
    ClusterSnapshot,
    PartitionState,
    ReassignmentPlan,
    TopicPartition,
    _Frozen,
)
from airflow_kafka_reassign.core.vocabulary.move_state import (
    BLOCKED_STATES,
    UNFINISHED_STATES,
    MoveState,
    PartitionProgress,
    _construct,
    classify,
)
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin, LogDirs, TopicPartitionReplica
from airflow_kafka_reassign.core.vocabulary.units import format_bytes
from airflow_kafka_reassign.exceptions import ConfigurationError

#: Default sliding window of the throughput estimate, in seconds.
DEFAULT_WINDOW_S = 300.0
#: Samples kept in the window (older ones are thinned out beyond this).
MAX_SAMPLES = 64
#: Partitions named in a warning or an XCom summary before "and N more".
MAX_NAMED = 20
#: Before concluding "blocked", the plan is observed once more after this delay (metadata lag).
SETTLE_S = 1.0
#: Width of the text bar.
BAR_WIDTH = 20
#: Moves whose data is being copied (a lagging move's last replica is catching up).
COPYING_STATES = (MoveState.IN_FLIGHT, MoveState.LAGGING)

WaitStatus = Literal["running", "complete", "blocked", "timeout", "deadline"]


@dataclass(frozen=True)
class Observation:
    """Every move of a plan as observed at one time (``at``, seconds since the epoch)."""

    at: float
    partitions: tuple[PartitionProgress, ...]
    #: ``(broker, moves)``: brokers that unfinished moves need (a target replica) but that are not alive in the
    #: cluster (not in its metadata: stopped, crashed or fenced), with how many moves wait for each.
    waiting_on: tuple[tuple[int, int], ...] = ()
    #: The plan's ETA the execution engine computed from the schedule of its copies under its limits (seconds at
    #: ``at``; core/execution/schedule.py); ``None``: the watch computes one itself (:meth:`ReassignmentWatch.record`).
    eta_s: float | None = None
    counts: dict[str, int] = field(init=False)
    #: Bytes to copy and copied over every move that is not blocked; ``None`` when some unfinished move's
    #: sizes are unknown.
    bytes_total: int | None = field(init=False)
    bytes_copied: int | None = field(init=False)
    #: Remaining bytes of the unfinished moves (``None`` as above).
    bytes_remaining: int | None = field(init=False)

    def __post_init__(self) -> None:
        counts = {s.value: 0 for s in MoveState}
        total = copied = remaining = 0
        known = True
        for p in self.partitions:
            counts[p.state.value] += 1
            if p.state in BLOCKED_STATES or p.state is MoveState.GONE:
                continue
            if p.bytes_total is None:
                if p.state is not MoveState.DONE:
                    known = False
                continue
            total += p.bytes_total
            copied += p.bytes_copied or 0
            if p.state is not MoveState.DONE:
                remaining += max(0, p.bytes_total - (p.bytes_copied or 0))
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "bytes_total", total if known else None)
        object.__setattr__(self, "bytes_copied", copied if known else None)
        object.__setattr__(self, "bytes_remaining", remaining if known else None)

    @property
    def moves(self) -> int:
        return len(self.partitions)

    @property
    def done(self) -> int:
        return self.counts[MoveState.DONE]

    @property
    def in_flight(self) -> int:
        """Moves in flight (as ExecuteReassignment counts them: lagging moves apart)."""
        return self.counts[MoveState.IN_FLIGHT]

    @property
    def copying(self) -> int:
        """Moves whose data is being copied: in flight, or lagging (their last replicas catching up)."""
        return self.counts[MoveState.IN_FLIGHT] + self.counts[MoveState.LAGGING]

    @property
    def lagging(self) -> int:
        return self.counts[MoveState.LAGGING]

    @property
    def pending(self) -> int:
        return self.counts[MoveState.PENDING]

    @property
    def blocked(self) -> int:
        return sum(self.counts[s] for s in BLOCKED_STATES)

    @property
    def unfinished(self) -> int:
        """Moves still to come: copying, pending, or waiting for someone else's reassignment of their partition."""
        return self.copying + self.pending + self.counts[MoveState.FOREIGN]

    @property
    def gone(self) -> int:
        """Moves dropped because their partition is gone (topic deleted, or re-created: a new topic id), or, in a drain,
        because it went stale off the drained brokers (nothing left to do for the drain)."""
        return self.counts[MoveState.GONE]

    @property
    def complete(self) -> bool:
        """Nothing left to do: every move done, or dropped because its partition is gone."""
        return self.done + self.gone == self.moves

    def in_state(self, *states: MoveState) -> tuple[PartitionProgress, ...]:
        return tuple(p for p in self.partitions if p.state in states)

    @property
    def fraction(self) -> float:
        """Progress in [0, 1]: by bytes when known (and non-zero), else by moves done (blocked moves excluded)."""
        if self.bytes_total:
            return min(1.0, (self.bytes_copied or 0) / self.bytes_total)
        countable = self.moves - self.blocked - self.gone
        return 1.0 if countable == 0 else self.done / countable


def assess(
    plan: ReassignmentPlan,
    snapshot: ClusterSnapshot,
    sizes: Mapping[TopicPartition, Mapping[int, int]] | None = None,
    *,
    at: float,
    refused: Mapping[TopicPartition, str] | None = None,
) -> Observation:
    """Classify every move of ``plan`` against ``snapshot`` (and ``sizes``, when measured).

    ``refused`` names moves whose submission the cluster or a guard refused (with the reason): a pending move
    that was refused is reported blocked (``stale``) instead of pending forever.
    """
    return assess_parts(plan, snapshot.partition_map(), {b.id for b in snapshot.brokers}, sizes, at=at,
                        refused=refused)


def assess_parts(
    plan: ReassignmentPlan,
    parts: Mapping[TopicPartition, PartitionState],
    live: Collection[int],
    sizes: Mapping[TopicPartition, Mapping[int, int]] | None = None,
    *,
    at: float,
    refused: Mapping[TopicPartition, str] | None = None,
    submitted: Collection[TopicPartition] = (),
    gone: Mapping[TopicPartition, str] | None = None,
    waiting: Mapping[TopicPartition, str] | None = None,
) -> Observation:
    """:func:`assess` from partitions already read (``parts``) and the live brokers' ids (``live``): the execution
    engine's step has read them, so its progress line costs no request of its own. ``submitted``: pending moves
    the step submitted after it read them, in flight now. ``gone``: moves the engine dropped (their topic deleted
    or re-created, why); ``waiting``: moves it holds unsent for a while (a broker restarting, someone else's
    reassignment of the partition), pending with that reason."""
    waiting_on: Counter[int] = Counter()
    out = []
    for m in plan.moves:
        tp = m.tp
        p = classify(m, parts.get(tp), None if sizes is None else sizes.get(tp, {}))
        if gone and tp in gone and p.state is not MoveState.DONE:
            p = _construct(topic=p.topic, partition=p.partition, state=MoveState.GONE, detail=gone[tp])
        elif waiting and tp in waiting and p.state in (MoveState.PENDING, MoveState.FOREIGN, MoveState.STALE):
            p = _construct(topic=p.topic, partition=p.partition, state=MoveState.PENDING, bytes_total=p.bytes_total,
                           bytes_copied=p.bytes_copied, lagging=p.lagging, detail=waiting[tp])
        elif refused and tp in refused and p.state is MoveState.PENDING:
            p = _construct(topic=p.topic, partition=p.partition, state=MoveState.FAILED,
                           detail=f"submission refused: {refused[tp]}")
        elif p.state is MoveState.PENDING and tp in submitted:
            p = _construct(topic=p.topic, partition=p.partition, state=MoveState.IN_FLIGHT, listed=True,
                           bytes_total=p.bytes_total, bytes_copied=p.bytes_copied, lagging=p.lagging,
                           detail="submitted")
        if live and p.state in UNFINISHED_STATES:
            waiting_on.update(b for b in m.target_replicas if b not in live)
        out.append(p)
    return Observation(at=at, partitions=tuple(out), waiting_on=tuple(sorted(waiting_on.items())))


# -- tracking over time -------------------------------------------------------------------------------------


class TrackerState(_Frozen):
    """The small JSON state of a :class:`ProgressTracker` (trigger kwargs, task state store)."""

    started_at: float
    last_progress_at: float
    best_done: int = 0
    #: The smallest remaining amount seen (bytes, or moves when ``unit == "moves"``).
    best_remaining: float | None = None
    unit: Literal["bytes", "moves"] | None = None
    #: (time, remaining) samples of the throughput window.
    samples: tuple[tuple[float, float], ...] = ()
    warned_at: float | None = None
    submitted: int = Field(default=0, ge=0)


def slope(samples: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(t, y)`` samples; ``None`` with fewer than two distinct times."""
    n = len(samples)
    if n < 2:
        return None
    mt = sum(t for t, _ in samples) / n
    my = sum(y for _, y in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var <= 0:
        return None
    return sum((t - mt) * (y - my) for t, y in samples) / var


class ProgressTracker:
    """Follows a plan's observations over time: throughput, ETA, stall detection.

    ``window_s`` is the sliding window of the throughput estimate; ``stuck_after_s`` the time without progress
    after which the unfinished moves are reported stuck.
    """

    def __init__(
        self,
        *,
        started_at: float,
        stuck_after_s: float,
        window_s: float = DEFAULT_WINDOW_S,
        state: TrackerState | None = None,
    ) -> None:
        if stuck_after_s <= 0:
            raise ConfigurationError(f"stuck_after must be a positive duration, not {stuck_after_s!r} s")
        if window_s <= 0:
            raise ConfigurationError(f"the throughput window must be positive, not {window_s!r} s")
        self.stuck_after_s = float(stuck_after_s)
        self.window_s = float(window_s)
        self.state = state or TrackerState(started_at=started_at, last_progress_at=started_at)
        self._in_flight_key: int | None = None

    def update(self, obs: Observation, *, submitted: int = 0,
               copies: Callable[[], Sequence[Copy] | None] | None = None) -> Progress:
        """Record ``obs`` and return what to report for it. The ETA is ``obs.eta_s`` (the engine's schedule), else
        the schedule of ``copies()`` (the plan's copies with their brokers, bytes left, in flight or not) at the
        throughput shared by the brokers, else of the whole remainder as one copy at the throughput."""
        s = self.state
        now = obs.at
        if obs.bytes_remaining is not None and obs.bytes_total:
            unit: Literal["bytes", "moves"] = "bytes"
            remaining: float = obs.bytes_remaining
        else:
            unit, remaining = "moves", float(obs.unfinished)
        if unit != s.unit:  # first observation, or the unit flipped (sizes became (un)known): restart the window
            s = s.model_copy(update={"unit": unit, "samples": (), "best_remaining": remaining})
        in_flight_key = hash(frozenset(p.tp for p in obs.partitions if p.state in COPYING_STATES))
        progressed = (
            obs.done > s.best_done
            or (s.best_remaining is not None and remaining < s.best_remaining)
            or submitted > 0
            or (unit == "moves" and self._in_flight_key is not None and in_flight_key != self._in_flight_key)
        )
        self._in_flight_key = in_flight_key
        samples = [x for x in s.samples if now - x[0] <= self.window_s and x[0] < now] + [(now, remaining)]
        if len(samples) > MAX_SAMPLES:  # thin the older half
            half = len(samples) // 2
            samples = samples[:half:2] + samples[half:]
        s = s.model_copy(update={
            "best_done": max(s.best_done, obs.done),
            "best_remaining": remaining if s.best_remaining is None else min(s.best_remaining, remaining),
            "last_progress_at": now if progressed else s.last_progress_at,
            "samples": tuple(samples),
            "submitted": s.submitted + submitted,
        })
        k = slope(samples)
        rate = None if k is None else max(0.0, -k)
        if obs.unfinished == 0 or remaining <= 0:
            eta: float | None = 0.0
        elif obs.eta_s is not None:
            eta = obs.eta_s
        else:
            plan = copies() if copies is not None and unit == "bytes" else None
            if not plan:  # the brokers are unknown: the remainder as one copy, at the throughput
                plan = [Copy("plan", int(math.ceil(remaining)), adding=(UNKNOWN_BROKER,), running=True)]
            moving = {b for c in plan if c.running for b in c.adding} or {b for c in plan for b in c.adding}
            eta = plan_eta(plan, broker_rates(throttle=None, net_rate=rate, brokers=moving))
        stalled_for = max(0.0, now - s.last_progress_at)
        stuck: tuple[PartitionProgress, ...] = ()
        warn = False
        if obs.unfinished and stalled_for >= self.stuck_after_s:
            stuck = obs.in_state(*COPYING_STATES) or obs.in_state(MoveState.PENDING)
            if s.warned_at is None or now - s.warned_at >= self.stuck_after_s or s.warned_at < s.last_progress_at:
                warn = True
                s = s.model_copy(update={"warned_at": now})
        self.state = s
        return Progress(
            observation=obs,
            unit=unit,
            rate=rate,
            eta_s=eta,
            elapsed_s=max(0.0, now - s.started_at),
            stalled_for_s=stalled_for,
            stuck=stuck,
            warn=warn,
            submitted=submitted,
            submitted_total=s.submitted,
        )


@dataclass(frozen=True)
class Progress:
    """What one poke reports: the observation plus throughput, ETA and stall information."""

    observation: Observation
    unit: Literal["bytes", "moves"]
    #: Throughput in ``unit`` per second (``None``: not enough samples yet).
    rate: float | None
    eta_s: float | None
    elapsed_s: float
    stalled_for_s: float
    stuck: tuple[PartitionProgress, ...]
    #: True when this poke should log the stuck warning.
    warn: bool
    submitted: int = 0
    #: Moves submitted since the wait started (by the submitter of this wait).
    submitted_total: int = 0
    status: WaitStatus = "running"

    def with_status(self, status: WaitStatus) -> Progress:
        return Progress(**{**self.__dict__, "status": status})

    def line(self) -> str:
        """The one progress line of a poke, for example::

        [#########-----------]  45% | moves 3/10 done, 2 in flight, 5 pending | 4.5 MB of 10.0 MB copied | 15.0 KB/s | ETA 6m 06s
        """
        o = self.observation
        frac = o.fraction
        filled = min(BAR_WIDTH, int(frac * BAR_WIDTH))
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        lagging = f", {o.lagging} lagging" if o.lagging else ""
        text = (f"[{bar}] {int(frac * 100):3d}% | moves {o.done}/{o.moves} done, {o.in_flight} in flight{lagging}, "
                f"{o.pending} pending")
        if o.blocked:
            text += f", {o.blocked} blocked"
        if o.gone:
            text += f", {o.gone} gone (dropped: topic deleted or re-created, or off the drained brokers)"
        if o.bytes_total is not None:
            text += f" | {format_bytes(o.bytes_copied or 0)} of {format_bytes(o.bytes_total)} copied"
        if self.rate is None:
            text += " | rate --"
        elif self.unit == "bytes":
            text += f" | {format_bytes(self.rate)}/s"
        else:
            text += f" | {self.rate * 60:.1f} moves/min"
        if o.complete:
            text += f" | done in {format_duration(self.elapsed_s)}"
        elif self.eta_s is None:
            text += " | ETA --"
        elif self.eta_s < 1:
            text += " | ETA finishing"
        else:
            text += f" | ETA {format_duration(self.eta_s)}"
        if self.submitted:
            text += f" | +{self.submitted} submitted"
        if o.waiting_on:
            text += " | " + waiting_line(o.waiting_on)
        return text

    def stuck_message(self) -> str:
        """The warning naming the stuck moves (empty when nothing is stuck)."""
        if not self.stuck:
            return ""
        what = "in-flight" if self.stuck[0].state in COPYING_STATES else "pending"
        msg = (f"no progress for {format_duration(self.stalled_for_s)}: {len(self.stuck)} {what} move(s) stuck: "
               f"{name_list(self.stuck)}")
        if what == "pending":
            msg += ("; nothing is in flight and nobody submits them: is ExecuteReassignment running? "
                    "(WaitForReassignmentSensor(submit_pending=True) submits them itself)")
        else:
            msg += ("; check that the adding replicas' brokers are up, the throttle rate, and the brokers' logs "
                    "for replica fetcher errors")
        return msg

    def summary(self, **extra: Any) -> dict[str, Any]:
        """A small JSON summary for XCom (names at most :data:`MAX_NAMED` partitions per list)."""
        o = self.observation
        blocked = o.in_state(*BLOCKED_STATES)
        return {
            "status": self.status,
            "moves": o.moves,
            "done": o.done,
            "in_flight": o.in_flight,
            "pending": o.pending,
            "lagging": o.lagging,
            "stale": o.counts[MoveState.STALE],
            "foreign": o.counts[MoveState.FOREIGN],
            "failed": o.counts[MoveState.FAILED],
            "gone": o.gone,
            "blocked": o.blocked,
            "blocked_partitions": [p.describe() for p in blocked[:MAX_NAMED]],
            "stuck_partitions": [f"{p.topic}-{p.partition}" for p in self.stuck[:MAX_NAMED]],
            "bytes_total": o.bytes_total,
            "bytes_copied": o.bytes_copied,
            "elapsed_s": round(self.elapsed_s, 1),
            "rate": None if self.rate is None else round(self.rate, 3),
            "rate_unit": f"{self.unit}/s",
            "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
            "submitted": self.submitted_total,
            "waiting_on_brokers": {str(b): n for b, n in o.waiting_on},
            **extra,
        }


def waiting_line(waiting_on: Sequence[tuple[int, int]]) -> str:
    """``broker 5 not alive: 4000 move(s) wait for it`` (brokers an unfinished move needs, down)."""
    brokers = ", ".join(str(b) for b, _ in waiting_on)
    moves = ", ".join(f"{n} for broker {b}" for b, n in waiting_on) if len(waiting_on) > 1 else f"{waiting_on[0][1]}"
    return f"broker{'s' if len(waiting_on) > 1 else ''} {brokers} not alive: {moves} move(s) wait for " \
           f"{'them' if len(waiting_on) > 1 else 'it'}"


def name_list(parts: Sequence[PartitionProgress], limit: int = 10) -> str:
    shown = ", ".join(p.describe() for p in parts[:limit])
    return shown + (f" and {len(parts) - limit} more" if len(parts) > limit else "")


# -- one poke of the wait loop ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmitOutcome:
    """What a submitter did during a poke: moves it submitted and moves refused (``{partition: reason}``)."""

    submitted: int = 0
    refused: Mapping[TopicPartition, str] = field(default_factory=dict)
    #: Why nothing may be submitted now (for example foreign reassignments in flight), or ``None``.
    blocked: str | None = None
    #: Lines worth a place in the task log beside the progress line (an adaptive limit changed).
    notes: tuple[str, ...] = ()
    #: The submission deadline has passed: nothing more will be submitted (the wait ends "deadline" once the moves
    #: in flight are done, leaving the pending ones for the next run).
    closed: bool = False
    #: The plan as the submitter's step observed it (``observed(at, refused)``), sizes included: the poke then
    #: reads the cluster no second time. ``None``: the poke observes the plan itself.
    observed: Callable[[float, Mapping[TopicPartition, str]], Observation] | None = None
    #: The plan as the submitter runs it now (a drain round adds the partitions that arrived on the drained brokers):
    #: the watch follows it. ``None``: the plan the watch was built with.
    plan: ReassignmentPlan | None = None
    #: When to poke next (seconds): when the first move in flight is predicted to finish (bytes left at the rate
    #: observed for it), within the session's bounds. ``None``: no prediction (the driver's own interval).
    next_poll_s: float | None = None
    #: The session's verdicts that the cluster alone does not show: moves dropped (``gone``: a topic deleted or
    #: re-created, a drain's stale move off the drained brokers) and moves held unsent (``waiting``), with why. A poke
    #: that observes the plan itself (no ``observed``: nothing measured at the end, or the settle re-check) keeps them.
    gone: Mapping[TopicPartition, str] = field(default_factory=dict)
    waiting: Mapping[TopicPartition, str] = field(default_factory=dict)


#: Submits a plan's pending moves within limits (for example around ``core.execution.step``).
Submitter = Callable[[ClusterAdmin], SubmitOutcome]


def observe(admin: ClusterAdmin, plan: ReassignmentPlan, *, at: float, measure_bytes: bool = True,
            refused: Mapping[TopicPartition, str] | None = None, retry_s: float = 1.0,
            gone: Mapping[TopicPartition, str] | None = None,
            waiting: Mapping[TopicPartition, str] | None = None) -> Observation:
    """Observe ``plan`` on the cluster with a constant number of batched requests (``gone``, ``waiting``: the
    execution session's verdicts, as :func:`assess_parts` takes them).

    One :meth:`ClusterAdmin.snapshot` of the plan's topics (cluster, metadata, configs and the controller's
    ListPartitionReassignments: a handful of requests whatever the plan's size) and, with ``measure_bytes``, one
    :meth:`ClusterAdmin.replica_sizes` (one DescribeLogDirs per broker).
    """
    topics = sorted({m.topic for m in plan.moves})
    try:
        snap = admin.snapshot(topics=topics)
    except ConfigurationError:
        # A plan topic is unknown to the broker that answered: its metadata may lag a moment behind (seen with
        # new topics on a loaded cluster), so ask once more; still unknown, the topic was deleted: observe every
        # topic, the deleted topic's moves are then reported "gone" (dropped, not failed).
        time.sleep(retry_s)
        try:
            snap = admin.snapshot(topics=topics)
        except ConfigurationError:
            snap = admin.snapshot()
    sizes = admin.replica_sizes(plan.partitions) if measure_bytes and plan.moves else None
    obs = assess_parts(plan, snap.partition_map(), {b.id for b in snap.brokers}, sizes, at=at, refused=refused,
                       gone=gone, waiting=waiting)
    pinned = [m.tp for m in plan.moves if m.log_dirs is not None]
    return with_log_dirs(obs, pinned_states(plan, admin.log_dirs(pinned))) if pinned else obs


def pinned_states(plan: ReassignmentPlan, dirs: LogDirs) -> dict[TopicPartition, MoveState]:
    """The moves whose pinned log dirs (``Move.log_dirs``) are not reached yet, from DescribeLogDirs: in flight
    while a future replica is copied into a pinned dir (AlterReplicaLogDirs), pending otherwise."""
    out: dict[TopicPartition, MoveState] = {}
    for m in plan.moves:
        for b, d in m.pinned_dirs.items():
            r = TopicPartitionReplica(m.topic, m.partition, b)
            if dirs.dir_of(r) == d:
                continue
            future = dirs.future_of(r)
            copying = future is not None and future[0] == d
            if copying or m.tp not in out:
                out[m.tp] = MoveState.IN_FLIGHT if copying else MoveState.PENDING
    return out


def with_log_dirs(obs: Observation, states: Mapping[TopicPartition, MoveState]) -> Observation:
    """``obs`` with each move whose replicas are in place but whose pinned log dirs are not in the state ``states``
    gives (in flight, pending, failed) instead of done: a wait ends when the moves between log dirs are done too."""
    if not states:
        return obs
    parts = tuple(
        _construct(topic=p.topic, partition=p.partition, state=states[p.tp], bytes_total=p.bytes_total,
                   bytes_copied=p.bytes_copied, detail="moving between log dirs" if states[p.tp] is not MoveState.FAILED
                   else "a move between log dirs was refused")
        if p.state is MoveState.DONE and p.tp in states else p for p in obs.partitions)
    return Observation(at=obs.at, partitions=parts, waiting_on=obs.waiting_on, eta_s=obs.eta_s)


class ReassignmentWatch:
    """The wait loop of one plan, shared by the sensor (poke and reschedule modes) and the trigger.

    Every :meth:`poke` submits pending moves (when a ``submitter`` is given), observes the plan, updates the
    tracker and decides the status: ``complete`` (every move done), ``blocked`` (nothing left in flight or pending
    but some moves cannot complete), ``timeout`` (``timeout_s`` after ``started_at``), ``deadline`` (the
    submitter's deadline passed and nothing is in flight: the pending moves are left for the next run) or
    ``running``.
    """

    def __init__(
        self,
        plan: ReassignmentPlan,
        *,
        started_at: float,
        stuck_after_s: float,
        timeout_s: float | None = None,
        measure_bytes: bool = True,
        window_s: float = DEFAULT_WINDOW_S,
        state: TrackerState | None = None,
        submitter: Submitter | None = None,
        settle_s: float = SETTLE_S,
    ) -> None:
        if not plan.moves:
            raise ConfigurationError("the plan has no moves: there is nothing to wait for")
        self.plan = plan
        self.timeout_s = timeout_s
        self.measure_bytes = measure_bytes
        self.submitter = submitter
        self.settle_s = settle_s
        self.tracker = ProgressTracker(started_at=started_at, stuck_after_s=stuck_after_s, window_s=window_s,
                                       state=state)
        self.refused: dict[TopicPartition, str] = {}
        #: The submitter's latest reason for submitting nothing (logged by the caller when it changes).
        self.blocked: str | None = None
        #: The submitter's notes of the latest poke (logged by the caller).
        self.notes: tuple[str, ...] = ()
        #: The submitter's deadline has passed (:attr:`SubmitOutcome.closed`).
        self.closed = False
        #: When the submitter's session predicts the next poke is worth making (:attr:`SubmitOutcome.next_poll_s`).
        self.next_poll_s: float | None = None
        #: The submitter's latest verdicts (:attr:`SubmitOutcome.gone`, ``waiting``), for a poke that observes itself.
        self.gone: Mapping[TopicPartition, str] = {}
        self.waiting: Mapping[TopicPartition, str] = {}

    @property
    def state(self) -> TrackerState:
        return self.tracker.state

    def poke(self, admin: ClusterAdmin, *, now: float) -> Progress:
        submitted = 0
        observed = None
        if self.submitter is not None:
            outcome = self.submitter(admin)
            if outcome.plan is not None:
                self.plan = outcome.plan
            self.next_poll_s = outcome.next_poll_s
            observed = outcome.observed
            submitted = outcome.submitted
            self.refused.update(outcome.refused)
            self.blocked = outcome.blocked
            self.notes = outcome.notes
            self.closed = outcome.closed
            self.gone, self.waiting = outcome.gone, outcome.waiting
        if observed is not None:  # what the submitter's step read this poke: no second snapshot or DescribeLogDirs
            obs = observed(now, self.refused)
        else:  # the session's verdicts kept: a dropped move is not judged stale again by the replicas alone
            obs = observe(admin, self.plan, at=now, measure_bytes=self.measure_bytes, refused=self.refused,
                          gone=self.gone, waiting=self.waiting)
        if obs.unfinished == 0 and not obs.complete and self.settle_s > 0:
            # "blocked" ends the wait: make sure it is not a broker's metadata lagging a moment behind the
            # controller (a new topic not known yet, a finished move still showing its old replicas)
            time.sleep(self.settle_s)
            obs = observe(admin, self.plan, at=now + self.settle_s, measure_bytes=self.measure_bytes,
                          refused=self.refused, gone=self.gone, waiting=self.waiting)
        return self.record(obs, now=now, submitted=submitted)

    def record(self, obs: Observation, *, now: float, submitted: int = 0) -> Progress:
        """Track ``obs`` (observed by someone else: the execution engine's step) and decide the status."""
        progress = self.tracker.update(obs, submitted=submitted, copies=lambda: plan_copies(self.plan, obs))
        if obs.complete:
            return progress.with_status("complete")
        if obs.unfinished == 0:
            return progress.with_status("blocked")
        if self.closed and obs.copying == 0:  # nothing more will be submitted, nothing left to wait for
            return progress.with_status("blocked" if obs.blocked else "deadline")
        if self.timeout_s is not None and now - self.state.started_at >= self.timeout_s:
            stuck = progress.stuck or obs.in_state(*COPYING_STATES) or obs.in_state(MoveState.PENDING)
            return Progress(**{**progress.__dict__, "stuck": stuck, "status": "timeout"})
        return progress


def plan_copies(plan: ReassignmentPlan, obs: Observation) -> list[Copy] | None:
    """The schedule's copies of ``plan`` as ``obs`` saw it (a watch that does not submit): every unfinished move with
    its bytes left per adding replica, in flight or pending (in plan order); ``None`` when a size is unknown. Moves
    whose current replicas the plan does not record share one broker, :data:`UNKNOWN_BROKER`."""
    moves = plan.by_partition()
    out: list[Copy] = []
    for p in obs.partitions:
        if p.state not in (*COPYING_STATES, MoveState.PENDING):
            continue
        left = p.bytes_remaining
        if left is None:
            return None
        m = moves.get(p.tp)
        adding = (m.adding_replicas if m is not None and m.current_replicas is not None else ()) or (UNKNOWN_BROKER,)
        out.append(Copy(p.tp, -(-left // len(adding)), adding=adding, running=p.state is not MoveState.PENDING))
    return out


def final_message(progress: Progress) -> str:
    """The message a wait ends with when not complete (blocked, timed out, deadline), naming the partitions."""
    o = progress.observation
    if progress.status == "blocked":
        return (f"{o.blocked} of {o.moves} move(s) cannot complete ({o.done} done): "
                f"{name_list(o.in_state(*BLOCKED_STATES))}. Look at each partition's current replicas, plan again "
                "from a fresh snapshot, and run the new plan")
    if progress.status == "deadline":
        return (f"the submission deadline passed with {o.done}/{o.moves} move(s) done and {o.pending} not submitted "
                f"({name_list(o.in_state(MoveState.PENDING))}); run the plan again (a new run resumes them) or "
                "plan again from the cluster")
    if progress.status == "timeout":
        why = f" ({waiting_line(o.waiting_on)})" if o.waiting_on else ""
        return (f"timed out after {format_duration(progress.elapsed_s)} with {o.done}/{o.moves} move(s) done, "
                f"{o.copying} in flight, {o.pending} pending{why}; unfinished: {name_list(progress.stuck)}")
    return progress.line()


# -- timeout policies ----------------------------------------------------------------------------------------

TimeoutPolicy = Literal["leave", "cancel", "rollback"]
TIMEOUT_POLICIES: tuple[str, ...] = ("leave", "cancel", "rollback")


def check_timeout_policy(policy: str) -> TimeoutPolicy:
    if policy not in TIMEOUT_POLICIES:
        raise ConfigurationError(
            f"on_timeout={policy!r} is not a timeout policy; choose one of {', '.join(TIMEOUT_POLICIES)} "
            "(leave: in-flight moves continue; cancel: cancel the plan's in-flight moves; rollback: cancel them and "
            "move the finished ones back with the plan's rollback.json)"
        )
    return policy  # type: ignore[return-value]


def format_duration(seconds: float) -> str:
    """``45s``, ``6m 05s``, ``2h 03m``, ``3d 04h``."""
    if seconds is None or math.isinf(seconds) or math.isnan(seconds):
        return "--"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m {s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h {m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d {h:02d}h"


def parse_names(partitions: Collection[str]) -> list[TopicPartition]:
    """``["orders-3"]`` -> ``[TopicPartition("orders", 3)]`` (the topic may contain dashes)."""
    out = []
    for name in partitions:
        topic, _, part = name.rpartition("-")
        out.append(TopicPartition(topic, int(part)))
    return out
