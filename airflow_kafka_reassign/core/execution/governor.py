"""What carries over from one step to the next: the health gate's pause clock, the adaptive limits (AIMD)
and the copy watch (stall, rate, ETA)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow_kafka_reassign.core.execution.config import ADAPTED, ExecutionLimits, ExecutionOptions
from airflow_kafka_reassign.core.execution.observe import _sample
from airflow_kafka_reassign.core.execution.schedule import ObservedRates, broker_rates, copies_of, plan_eta
from airflow_kafka_reassign.core.execution.status import ExecutionStatus
from airflow_kafka_reassign.core.execution.throttle import brokers_involved
from airflow_kafka_reassign.core.guards.adaptive import (
    AdaptiveBounds,
    CopyWatch,
    Limits,
    adapt,
    bytes_left,
    soonest_eta_s,
    stall_window_s,
)
from airflow_kafka_reassign.core.guards.headroom import HEADROOM_EVENT, HeadroomPolicy, HeadroomWatch
from airflow_kafka_reassign.core.guards.health import HealthPolicy
from airflow_kafka_reassign.core.records.journal import StateLocation, journal
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin

_log = logging.getLogger(__name__)

#: The plan's schedule is made again once this many times its own cost has passed since the last one.
ETA_EVERY_COST = 10.0


class RunGovernor:
    """What carries over from one step of a run to the next: the health gate's pause clock and policy,
    the adaptive limits (AIMD) and the copy watch (stall, rate, ETA).

    One object, two drivers: :func:`run` (ExecuteReassignment) and the sensor's submitter
    (``WaitForReassignmentSensor(submit_pending=True)``, ``wait.WaitSpec.submitter``), so both
    pause, give up after ``max_pause_s``, cancel or fail, and adapt their limits the same way. Per step::

        limits, options = governor.for_step(limits, options)
        status = step(admin, plan, limits, options, ...)
        stop = governor.health(status, at=clock(), submitting=True, log=log)   # the policy's verdict
        eta = governor.adapt(admin, status, done_before, at=clock(), options=options, state_dir=..., log=log)
    """

    def __init__(self, policy: HealthPolicy, adaptive: AdaptiveBounds | None = None,
                 throttle: int | None = None, *, holder: str | None = None,
                 headroom: HeadroomPolicy | None = None) -> None:
        self.policy = policy
        self.adaptive = adaptive
        #: names the task try in the journal's ``adapted`` events (the sensor rebuilds its governor from them)
        self.holder = holder
        #: the limits in force (``None``: not adaptive, the task's own limits apply)
        self.current: Limits | None = adaptive.start(throttle) if adaptive is not None else None
        self.watch = CopyWatch(adaptive.stall_polls if adaptive is not None else 3)
        #: the bytes per second each broker took into its adding replicas over the last polls (the plan's ETA)
        self.inbound = ObservedRates()
        #: the last schedule's ETA, when it was made (clock seconds) and its CPU cost (seconds)
        self._eta: tuple[float | None, float, float] | None = None
        self.unhealthy_since: float | None = None
        self.paused_s = 0.0
        self.adaptations: list[str] = []
        self.stalled_polls = 0
        #: the headroom throttle (``None``: off): the per-broker rates, moved at each step from the traffic measured
        self.headroom = HeadroomWatch(headroom) if headroom is not None else None
        #: the per-broker rate changes of the run, one line each (``"broker 3: leader ..."``)
        self.headroom_changes: list[str] = []

    def for_step(self, limits: ExecutionLimits, options: ExecutionOptions) -> tuple[ExecutionLimits, ExecutionOptions]:
        """The limits and options of the next step: the adaptive ones in place of the task's, when adaptive; the
        per-broker rates of the headroom throttle (within the cap of the step), when on."""
        if self.current is not None:
            limits = replace(limits, max_moves=self.current.moves)
            options = replace(options, throttle_bytes_per_sec=self.current.throttle)
        if self.headroom is not None:
            options = replace(options, broker_throttles=self.headroom.rates(options.throttle_bytes_per_sec))
        return limits, options

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
                          stall_s=self.adaptive.stall_s if self.adaptive is not None else None, inbound=self.inbound,
                          headroom=self._measure_headroom(at, options, state_dir, log) if self.headroom else None)
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

    def _measure_headroom(self, at: float, options: ExecutionOptions, state_dir: StateLocation | None,
                          log: logging.Logger) -> Callable[[ExecutionStatus, Mapping[TopicPartition, Mapping[int, int]]],
                                                           None]:
        """What :func:`_watch_copy` calls with the sizes of the partitions on the plan's brokers (this step's read):
        the headroom watch measures the traffic since the last step and moves the per-broker rates, each change
        logged (one line naming the brokers and rates) and journalled; a broker without headroom is warned."""
        watch = self.headroom
        assert watch is not None

        def measured(status: ExecutionStatus, sizes: Mapping[TopicPartition, Mapping[int, int]]) -> None:
            obs = status.observation
            if obs is None:
                return
            plan_brokers = brokers_involved(status.moves.values()) & obs.brokers
            ours = {tp: status.moves[tp].adding_replicas for tp in status.in_flight}
            floored_before = set(watch.floored)
            changes = watch.update(at, sizes, obs.everything, ours, {b: obs.racks.get(b) for b in plan_brokers},
                                   options.throttle_bytes_per_sec)
            if changes:
                self.headroom_changes.extend(changes)
                log.info("headroom throttle: %s", "; ".join(changes))
                journal(state_dir, {"event": HEADROOM_EVENT, "rates": {str(b): list(r) for b, r in
                                                                       sorted(watch.held.items())},
                                    "changes": changes, **({"holder": self.holder} if self.holder else {})}, log=log)
            if watch.floored and watch.floored != floored_before:
                log.warning("headroom throttle: broker(s) %s have no headroom left (their client traffic takes their "
                            "capacity x (1 - margin)): their copies go at the floor, %d B/s", sorted(watch.floored),
                            watch.policy.start_rate(options.throttle_bytes_per_sec))

        return measured

    @staticmethod
    def headroom_partitions(status: ExecutionStatus) -> list[TopicPartition]:
        """The partitions with a replica on a broker the plan copies from or to (their traffic is that broker's)."""
        obs = status.observation
        if obs is None:
            return []
        brokers = brokers_involved(status.moves.values())
        return [p.tp for p in obs.everything if not brokers.isdisjoint(p.replicas)]

    def export(self) -> dict[str, Any]:
        """What a rebuilt governor of the same task try goes on from (JSON; see :meth:`restore`)."""
        current = self.current
        return {"current": [current.moves, current.throttle] if current is not None else None,
                "unhealthy_since": self.unhealthy_since, "paused_s": self.paused_s,
                "stalled_polls": self.stalled_polls, "watch": self.watch.export(), "inbound": self.inbound.export(),
                **({"headroom": self.headroom.export()} if self.headroom is not None else {})}

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
        if data.get("inbound"):
            self.inbound.restore(data["inbound"])
        if data.get("headroom") and self.headroom is not None:
            self.headroom.restore(data["headroom"])

    def plan_eta(self, status: ExecutionStatus, limits: ExecutionLimits, options: ExecutionOptions, *,
                 at: float) -> float | None:
        """The plan's ETA (seconds) from the schedule of its copies (core/execution/schedule.py): the moves in flight, then
        the pending ones in the order the engine sends them, within the limits, each broker at the rate it took in
        over the last polls (never above the throttle), else at the throttle; ``None`` without sizes or rates.

        A schedule costs about 1.5 s of CPU at 100,000 moves: it is made again once ten times its cost has passed
        since the last one (at most a tenth of the run's time), and in between the last ETA counts down from it."""
        last = self._eta
        if last is not None and last[0] is not None and at - last[1] < ETA_EVERY_COST * last[2]:
            return max(0.0, last[0] - (at - last[1]))
        started = time.process_time()
        eta = self._plan_eta(status, limits, options)
        self._eta = (eta, at, time.process_time() - started)
        return eta

    def _plan_eta(self, status: ExecutionStatus, limits: ExecutionLimits, options: ExecutionOptions) -> float | None:
        if status.sizes is None or status.observation is None:
            return None
        parts = status.observation.partitions
        queue = status.queue if status.queue is not None else status.pending
        copies = copies_of(status.moves, status.in_flight, queue, status.sizes, {tp: p.leader for tp, p in parts.items()})
        if copies is None:
            return None
        moving = {b for tp in status.in_flight for b in status.moves[tp].adding_replicas}
        rates = broker_rates(throttle=options.throttle_bytes_per_sec, observed=self.inbound.rates,
                             net_rate=self.watch.rate, brokers=moving)
        return plan_eta(copies, rates, max_moves=limits.max_moves, max_moves_per_broker=limits.max_moves_per_broker)

    def close(self, at: float) -> None:
        """End of the run: a pause still running counts into ``paused_s``."""
        if self.unhealthy_since is not None:
            self.paused_s += at - self.unhealthy_since
            self.unhealthy_since = None


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
                measure: Sequence[TopicPartition] | None = None, stall_s: float | None = None,
                inbound: ObservedRates | None = None,
                headroom: Callable[[ExecutionStatus, Mapping[TopicPartition, Mapping[int, int]]], None] | None = None,
                ) -> float | None:
    """Measure the copy in flight (DescribeLogDirs of its partitions): the net rate, a stall
    (``status.stalled``, warned), and the ETA of the first move to finish (``None``: unknown).

    ``measure`` (the plan's partitions, for the progress line) widens that one DescribeLogDirs;
    the sizes are then kept in ``status.sizes``. When the step already read them (``status.sizes``: it
    orders a bounded batch by size), nothing is read again.

    ``headroom`` (the headroom throttle) widens the same read to every partition on the plan's brokers and is
    called with it; when the step read the plan's sizes already, only the other partitions are read."""
    moving = {tp: status.moves[tp] for tp in status.in_flight if status.moves[tp].adding_replicas}
    wider = RunGovernor.headroom_partitions(status) if headroom is not None else []
    if status.sizes is not None:  # the step read the plan's sizes to order its batch, moments ago: no second read
        sizes: Mapping[TopicPartition, Mapping[int, int]] = status.sizes
        rest = [tp for tp in wider if tp not in sizes]
        everything: Mapping[TopicPartition, Mapping[int, int]] = {**sizes, **admin.replica_sizes(rest)} \
            if rest else sizes
    elif measure is not None:
        everything = admin.replica_sizes(sorted({*measure, *wider})) if wider else admin.replica_sizes(measure)
        sizes = status.sizes = everything if not wider else {tp: everything[tp] for tp in measure if tp in everything}
    else:
        everything = admin.replica_sizes(sorted({*moving, *wider})) if moving or wider else {}
        sizes = everything
    if headroom is not None:
        headroom(status, everything)
    left = bytes_left(moving, sizes) if moving else {}
    if inbound is not None:
        inbound.update(at_s, {(tp, b): sizes.get(tp, {}).get(b, 0) for tp, m in moving.items() if tp in sizes
                              for b in m.adding_replicas})
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

