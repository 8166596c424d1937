"""Where a plan stands: :class:`ExecutionStatus`, derived from the cluster and the plan only, and what one step read."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_kafka_reassign.core.execution.config import SUMMARY_SAMPLE
from airflow_kafka_reassign.core.guards.health import NORMAL, HealthReport
from airflow_kafka_reassign.core.vocabulary.models import Move, PartitionState, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import InFlightReassignment, LogDir, TopicPartitionReplica

_log = logging.getLogger(__name__)


def _names(tps: Iterable[TopicPartition], limit: int = SUMMARY_SAMPLE) -> list[str]:
    return [str(tp) for tp in sorted(tps)[:limit]]


@dataclass
class LogDirStatus:
    """Where the plan's moves between log dirs stand (one per pinned replica), from one DescribeLogDirs."""

    total: int = 0
    done: list[TopicPartitionReplica] = field(default_factory=list)
    #: the future replica's offset lag, by replica
    in_flight: dict[TopicPartitionReplica, int] = field(default_factory=dict)
    pending: list[TopicPartitionReplica] = field(default_factory=list)
    #: the reassignment that adds the replica to its broker is not done yet (or the broker did not answer)
    waiting: list[TopicPartitionReplica] = field(default_factory=list)
    failed: dict[TopicPartitionReplica, str] = field(default_factory=dict)
    submitted: list[TopicPartitionReplica] = field(default_factory=list)
    #: pending moves the disk guard held this step (why, per replica)
    held: dict[TopicPartitionReplica, str] = field(default_factory=dict)
    #: why nothing new is sent: a log dir of a broker with moves left is offline
    stopped: str | None = None
    #: each pinned replica's log dir now, the pinned one, and its size (bytes)
    source: dict[TopicPartitionReplica, str] = field(default_factory=dict)
    target: dict[TopicPartitionReplica, str] = field(default_factory=dict)
    size: dict[TopicPartitionReplica, int] = field(default_factory=dict)
    #: what DescribeLogDirs said (each answering broker's log dirs)
    dirs: dict[int, tuple[LogDir, ...]] = field(default_factory=dict, repr=False)

    @property
    def complete(self) -> bool:
        return not (self.pending or self.in_flight or self.waiting)

    @property
    def brokers(self) -> set[int]:
        """The brokers with a move left (pending, in flight or waiting)."""
        return {r.broker for r in (*self.pending, *self.in_flight, *self.waiting)}

    def line(self) -> str:
        out = f"log dirs: {len(self.done)}/{self.total} replicas moved, {len(self.in_flight)} in flight, " \
              f"{len(self.pending)} pending"
        for items, what in ((self.waiting, "waiting for their reassignment"), (self.failed, "failed"),
                            (self.held, "wait for disk space")):
            if items:
                out += f", {len(items)} {what}"
        if self.submitted:
            out += f"; submitted {len(self.submitted)} now"
        if self.stopped:
            out += "; STOPPED (a log dir is offline)"
        return out

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"moves": self.total, "done": len(self.done), "in_flight": len(self.in_flight),
                               "pending": len(self.pending), "waiting": len(self.waiting), "failed": len(self.failed),
                               "submitted": len(self.submitted), "held": len(self.held), "stopped": self.stopped}
        if self.failed:
            out["failed_replicas"] = {str(r): why for r, why in sorted(self.failed.items())[:SUMMARY_SAMPLE]}
        return out


@dataclass
class ExecutionStatus:
    """Where a plan stands, derived from the cluster and the plan only (plus the throttle backup).

    Every move of the plan is in exactly one of ``done``, ``lagging``, ``in_flight``, ``pending``, ``waiting``
    (held unsent for a while: a broker it needs is restarting, someone else is reassigning its partition),
    ``stale``, ``failed`` and ``gone`` (its topic was deleted or re-created: dropped). ``foreign`` lists
    reassignments this plan did not start. ``submitted`` are the moves this call submitted (also in ``in_flight``
    or, if instant, ``done``).
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
    #: moves dropped because their partition is gone: the topic deleted, or re-created (a new topic id), with why
    gone: dict[TopicPartition, str] = field(default_factory=dict)
    #: pending moves held unsent for now, with why (a broker they need is not alive, someone else's reassignment of
    #: the partition is in flight); the session bounds how long (``broker_restart_wait_s``, ...)
    waiting: dict[TopicPartition, str] = field(default_factory=dict)
    #: what holds each waiting move, as a key the session times: ``"broker 2"``, ``"reassignment of t-0"``
    waiting_for: dict[TopicPartition, str] = field(default_factory=dict)
    #: what the cluster did under the plan that this step saw, one line per topic (grown, deleted, re-created)
    events: list[str] = field(default_factory=list)
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
    #: pending moves that are not of normal urgency (core/guards/health.py's ``urgency``): those that restore redundancy
    #: (sent first) and those below min ISR (last)
    urgency: dict[TopicPartition, int] = field(default_factory=dict)
    #: the pending moves in the order the engine sends them (``None``: not ordered at this step)
    queue: list[TopicPartition] | None = field(default=None, repr=False)
    #: the plan's ETA in seconds, from the schedule of its copies under the limits (core/execution/schedule.py; ``None``:
    #: not computed, no sizes or no rate known yet)
    eta_s: float | None = None
    #: the copy in flight has not gained on its leaders for several polls (see core/guards/adaptive.py)
    stalled: bool = False
    #: pending moves the disk guard held this step: a broker they add lacks the free space (why, per move)
    disk_held: dict[TopicPartition, str] = field(default_factory=dict)
    #: what this step read (the plan's partitions, the live brokers): the progress line reuses it
    observation: _Observation | None = field(default=None, repr=False)
    #: the plan's replica sizes measured this poll (DescribeLogDirs), when a progress line wants them
    sizes: dict[TopicPartition, dict[int, int]] | None = field(default=None, repr=False)
    #: the plan's moves between log dirs (pinned ``log_dirs``; ``None``: it has none): core/execution/log_dirs.py.
    #: A partition whose log-dir move failed is in ``failed``, not ``done``.
    log_dirs: LogDirStatus | None = None
    observed_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    @property
    def complete(self) -> bool:
        """Nothing left that this plan will do: no move pending, in flight or lagging.

        Stale and failed moves are refused, not left: check :attr:`ok` for a clean finish. Moves between log dirs
        count too (:attr:`log_dirs`).
        """
        return not (self.pending or self.in_flight or self.lagging or self.waiting) and (
            self.log_dirs is None or self.log_dirs.complete)

    @property
    def ok(self) -> bool:
        """Complete, and nothing was refused or failed."""
        return self.complete and not self.stale and not self.failed and self.blocked is None

    @property
    def restoring(self) -> int:
        """Pending moves that restore redundancy (they go first)."""
        return sum(1 for u in self.urgency.values() if u < NORMAL)

    @property
    def remaining(self) -> list[TopicPartition]:
        return sorted([*self.in_flight, *self.pending, *self.lagging, *self.waiting])

    def progress_line(self) -> str:
        line = (
            f"{len(self.done)}/{self.total} moves done, {len(self.in_flight)} in flight, "
            f"{len(self.pending)} pending"
        )
        extras = [(self.lagging, "lagging (ISR short)"), (self.waiting, "waiting"), (self.stale, "stale (refused)"),
                  (self.failed, "failed"), (self.gone, "gone (dropped)"), (self.foreign, "foreign in flight")]
        for items, what in extras:
            if items:
                line += f", {len(items)} {what}"
        if self.submitted:
            line += f"; submitted {len(self.submitted)} now"
        restoring = self.restoring
        if restoring:
            line += f", {restoring} restore redundancy (first)"
        if self.below_min_isr:
            line += f", {len(self.below_min_isr)} below min ISR (last)"
        if self.stalled:
            line += "; copy STALLED"
        if self.paused:
            line += "; PAUSED (cluster unhealthy)"
        if self.disk_held:
            line += f", {len(self.disk_held)} wait for disk space"
        if self.log_dirs is not None:
            line += f"; {self.log_dirs.line()}"
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
            "gone": len(self.gone),
            "waiting": len(self.waiting),
            "foreign": len(self.foreign),
            "submitted": len(self.submitted),
            "complete": self.complete,
            "ok": self.ok,
            "blocked": self.blocked,
            "paused": self.paused,
            "below_min_isr": len(self.below_min_isr),
            "restoring": self.restoring,
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
        if self.gone:
            out["gone_partitions"] = {str(tp): self.gone[tp] for tp in sorted(self.gone)[:SUMMARY_SAMPLE]}
        if self.waiting:
            out["waiting_partitions"] = {str(tp): self.waiting[tp] for tp in sorted(self.waiting)[:SUMMARY_SAMPLE]}
        if self.events:
            out["cluster_events"] = self.events[:SUMMARY_SAMPLE]
        if self.plan_errors:
            out["plan_errors"] = self.plan_errors[:SUMMARY_SAMPLE]
        if self.foreign:
            out["foreign_partitions"] = _names(self.foreign)
        if self.remaining:
            out["remaining_partitions"] = _names(self.remaining)
        if self.would_submit:
            out["would_submit"] = len(self.would_submit)
        if self.log_dirs is not None:
            out["log_dirs"] = self.log_dirs.summary()
        return out


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
    #: every broker's rack (``None``: unset), as DescribeCluster gives it
    racks: dict[int, str | None] = field(default_factory=dict)
    #: the plan's topics' ids now (KIP-516), where the cluster gives them
    topic_ids: dict[str, str] = field(default_factory=dict)

