"""The one execution loop: an :class:`ExecutionSession` runs a plan one tick at a time, for every path.

A tick observes the cluster, applies the deadline, brings the throttles to what the moves in flight need, submits
what fits (:func:`~airflow_kafka_reassign.core.execution.iteration.step`), reads the health gate (pause, or the
policy's stop: cancel or fail), adapts the limits (AIMD) and measures the copy, journals what it did, and says when
to poll next. Every driver ticks the same session:

* :func:`run` (ExecuteReassignment, and the rollback of CancelReassignment and of the sensor's timeout policy):
  pre-flight, then ticks until the plan is complete, then :meth:`ExecutionSession.finish`;
* the sensor in poke and reschedule mode and its trigger in the triggerer (``submit_pending=True``): one tick per
  poke; what must outlive the process (the governor, the health policy's stop) is kept on the run state by
  :meth:`ExecutionSession.save` and read back by :meth:`ExecutionSession.resume`.

Example (with the in-memory fake)::

    >>> from airflow_kafka_reassign.testing import FakeClusterAdmin
    >>> from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
    >>> fake = FakeClusterAdmin.build(brokers={1: "a", 2: "b", 3: "c"}, topics={"t": [[1, 2]]})
    >>> plan = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(2, 3)),))
    >>> session = ExecutionSession(fake, plan, ExecutionConfig(), state_dir=None)
    >>> tick = session.tick()
    >>> [str(tp) for tp in tick.status.submitted], tick.status.complete
    (['t-0'], False)
    >>> fake.complete()
    >>> session.tick().status.complete
    True
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_kafka_reassign.core.execution import clock as waiting
from airflow_kafka_reassign.core.execution.config import (
    SETTLE_RECHECK_S,
    SUMMARY_SAMPLE,
    ExecutionConfig,
    ExecutionLimits,
    ExecutionOptions,
    OnDeadline,
)
from airflow_kafka_reassign.core.execution.finishing import finish, submitted_total
from airflow_kafka_reassign.core.execution.governor import RunGovernor
from airflow_kafka_reassign.core.execution.iteration import step
from airflow_kafka_reassign.core.execution.observe import report_preflight, with_rf_guard
from airflow_kafka_reassign.core.execution.progress import format_duration
from airflow_kafka_reassign.core.execution.run_state import (
    CLUSTER_CHANGED,
    DRAIN_ROUND,
    HEALTH_CANCELLED,
    HEALTH_STOPPED,
    cluster_events,
    read_drain_rounds,
    read_governor,
    read_topic_ids,
    try_events,
    write_drain_round,
    write_governor,
    write_topic_ids,
)
from airflow_kafka_reassign.core.execution.status import ExecutionStatus
from airflow_kafka_reassign.core.execution.throttle import NOT_RESTORED, backup_path
from airflow_kafka_reassign.core.guards.adaptive import DEFAULT_MIN_POLL_S, AdaptiveBounds, next_poll_s
from airflow_kafka_reassign.core.maintenance.cordon import cordon_refusal
from airflow_kafka_reassign.core.maintenance.drain import DrainSpec, merge
from airflow_kafka_reassign.core.maintenance.rounds import DrainGoal, GoalRounds
from airflow_kafka_reassign.core.records.journal import StateLocation, journal
from airflow_kafka_reassign.core.records.lease import LeaseKeeper, LeaseLostError
from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin
from airflow_kafka_reassign.exceptions import ClusterUnreachableError, ConfigurationError

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.execution.cancel import CancelResult

_log = logging.getLogger(__name__)

#: Polls in a row that may fail to reach the cluster (a broker or the controller restarting, a network blip)
#: before a run or a wait gives up; after each failure it waits one poll interval. Every tick is safe to repeat.
MAX_UNREACHABLE_POLLS = 3


def _tps(tps: Any, limit: int = 10) -> str:
    names = [str(tp) for tp in tps]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


@dataclass
class Tick:
    """What one :meth:`ExecutionSession.tick` saw and did."""

    status: ExecutionStatus
    #: the deadline has passed: nothing was submitted (the moves in flight go on, or were cancelled)
    past_deadline: bool = False
    #: why the health policy stopped the submissions (at this tick or an earlier one; ``None``: it did not)
    health_stop: str | None = None
    #: the cancel this tick made (``on_deadline="cancel"`` or ``on_unhealthy="cancel"``)
    cancel: CancelResult | None = None
    #: the adaptive limits' changes made at this tick, one line each
    adaptations: list[str] = field(default_factory=list)
    #: the ETA of the first move in flight to finish (seconds; ``None``: unknown)
    eta_s: float | None = None
    #: when to tick again: soon when a move in flight is about to finish, rarely when far (core/guards/adaptive.py)
    next_poll_s: float = 0.0
    #: a goal's round planned at this tick: the partitions that broke the goal meanwhile (core/maintenance/rounds.py)
    drained_later: list[TopicPartition] = field(default_factory=list)
    #: what the cluster did under the plan that this tick saw first, and what the run did about it (one line each)
    events: list[str] = field(default_factory=list)

    @property
    def over(self) -> bool:
        """Nothing more for a driver that waits for its own moves: complete, stopped by the health policy, or
        nothing in flight and nothing that may still go out (past the deadline, or blocked with none lagging)."""
        s = self.status
        if s.complete or self.health_stop is not None:
            return True
        copying = bool(s.in_flight) or (s.log_dirs is not None and bool(s.log_dirs.in_flight))
        return not copying and (self.past_deadline or (s.blocked is not None and not s.lagging))


class ExecutionSession:
    """Runs one plan, one :meth:`tick` at a time; every path of the provider drives this same object.

    :param admin: the cluster (the port; a driver may replace it between ticks: ``session.admin = ...``).
    :param config: the execution settings (or, for the engine's own callers, ``(limits, options, adaptive)``
        through :meth:`from_parts`).
    :param state_dir: the run state (throttle backup, journal, lease); required with a throttle.
    :param lease: the plan's lease, confirmed before anything is written; or a callable that takes it at the
        first tick that may write (the sensor takes it in the process that submits: worker or triggerer).
    :param holder: names the task try in the journal (the lease holder without host and pid).
    :param deadline: no move is submitted at or after it (aware datetime); ``on_deadline="cancel"`` cancels the
        moves in flight when it passes, ``"finish"`` lets them finish.
    :param measure: read the plan's sizes at each tick (the progress line's bytes; one DescribeLogDirs).
    :param goal: the end state the run is for (core/maintenance/rounds.py: a decommission's drain, a disk removal):
        once the plan's moves are done, what still breaks the goal (partitions that arrived on the drained brokers
        or in the removed dirs meanwhile, re-created topics, partitions moved back) is planned and moved in the same
        run, round after round (each round kept on the run state before its moves go out), until the goal is met or
        ``goal.max_rounds``.
    :param drain: a decommission's drain: the same as ``goal=DrainGoal(drain)``.
    """

    def __init__(self, admin: ClusterAdmin, plan: ReassignmentPlan, config: ExecutionConfig | None = None, *,
                 state_dir: StateLocation | None, lease: LeaseKeeper | Callable[[], LeaseKeeper | None] | None = None,
                 holder: str | None = None, deadline: datetime | None = None, on_deadline: OnDeadline = "finish",
                 poll_interval_s: float = 5.0, min_poll_interval_s: float = DEFAULT_MIN_POLL_S,
                 measure: bool = False, log: logging.Logger | None = None,
                 settle_s: float = SETTLE_RECHECK_S, sleep: Callable[[float], None] | None = None,
                 should_stop: Callable[[], bool] = lambda: False,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc), clock_s: Callable[[], float] | None = None,
                 default_disk_reserve: str | None = None, drain: DrainSpec | None = None,
                 goal: GoalRounds | None = None,
                 _parts: tuple[ExecutionLimits, ExecutionOptions, AdaptiveBounds | None] | None = None) -> None:
        if _parts is None:
            config = config or ExecutionConfig()
            reserve = {"default_disk_reserve": default_disk_reserve} if default_disk_reserve else {}
            _parts = (config.limits(), config.options(**reserve), config.adaptive())
        self.limits, self.options, adaptive = _parts
        if deadline is not None and deadline.tzinfo is None:
            raise ConfigurationError(f"deadline {deadline.isoformat()} has no time zone; give an aware datetime")
        if on_deadline not in ("finish", "cancel"):
            raise ConfigurationError(f"on_deadline must be 'finish' or 'cancel', not {on_deadline!r}")
        if self.options.throttled and state_dir is None and not self.options.dry_run:
            raise ConfigurationError(
                "a throttle needs a state_dir to keep the backup of the previous throttle values in; "
                "pass state_dir (the operators use <plan dir>/run)"
            )
        self.admin, self.plan, self.state_dir = admin, plan, state_dir
        self._lease = lease
        self.holder = holder
        self.deadline, self.on_deadline = deadline, on_deadline
        self.poll_interval_s, self.min_poll_interval_s = poll_interval_s, min_poll_interval_s
        self.measure = measure
        self.log = log or _log
        self.settle_s, self.sleep, self.should_stop = settle_s, sleep, should_stop
        self.now = now
        #: seconds on the wall clock by default: a resumed session (another process) goes on from them
        self.clock_s: Callable[[], float] = clock_s or (lambda: time.time())
        self.governor = RunGovernor(self.options.health, adaptive, self.options.throttle_bytes_per_sec, holder=holder,
                                    headroom=self.options.throttle_headroom)
        #: moves refused so far in this session (never sent again by it)
        self.known_failed: dict[TopicPartition, str] = {}
        #: every move this session submitted
        self.submitted: list[TopicPartition] = []
        #: why the health policy stopped the submissions (kept: the same task try never submits again)
        self.health_stop: str | None = None
        self.deadline_reached = False
        self.ticks = 0
        self.last: ExecutionStatus | None = None
        self._done_before: int | None = None
        self._poll: float | None = None
        self._saved: list[str] = []
        if goal is None and drain is not None:
            goal = DrainGoal(drain)
        self.goal = goal
        #: a decommission's drain (its stale moves off the drained brokers are dropped at each tick)
        self.drain = goal.spec if isinstance(goal, DrainGoal) else None
        #: the goal's rounds planned so far (this session's and, resumed, earlier processes'), and what each brought
        self.drain_rounds = 0
        self.drained_later: list[TopicPartition] = []
        #: why the run could not reach its goal (rounds spent, partitions that cannot be placed)
        self.drain_short: str | None = None
        self._last_round: list[TopicPartition] = []
        #: since when (``clock_s``) each thing that holds moves has held them: ``"broker 2"``, ``"the reassignment
        #: of t-0"`` (bounded by ``broker_restart_wait_s`` / ``foreign_reassignment_wait_s``)
        self.waiting_since: dict[str, float] = {}
        #: what the cluster did under the plan and what the run did about it, one line each, in order
        self.events: list[str] = []
        #: moves dropped because their topic was deleted or re-created, over the whole run (rounds included)
        self.gone: dict[TopicPartition, str] = {}
        self._ids_read = False
        #: why the provider chose the replication-factor guard (``rf_guard="auto"`` on a cluster without KIP-860)
        self.rf_guard_why: str | None = None
        self._line_read = False

    @classmethod
    def from_parts(cls, admin: ClusterAdmin, plan: ReassignmentPlan, limits: ExecutionLimits,
                   options: ExecutionOptions, *, adaptive: AdaptiveBounds | None = None,
                   **kwargs: Any) -> ExecutionSession:
        """A session from the engine's views directly (tests, benchmarks, the CLI)."""
        return cls(admin, plan, None, _parts=(limits, options, adaptive), **kwargs)

    # -- the lease -------------------------------------------------------------------------------

    @property
    def lease(self) -> LeaseKeeper | None:
        """The plan's lease (taken now when the session was given a way to take it)."""
        if callable(self._lease) and not isinstance(self._lease, LeaseKeeper):
            self._lease = self._lease()
        return self._lease

    # -- the cluster's line ----------------------------------------------------------------------

    def _read_the_cluster_line(self) -> None:
        """Once per session, before anything is sent: the cluster's capabilities (the adapter logs them in one line,
        and refuses a Kafka line older than the provider's floor, core/guards/kafka_line.py), and the
        replication-factor guard ``rf_guard="auto"`` stands for on it, said once when it is the client-side one."""
        if self._line_read:
            return
        self.admin.capabilities()
        self.options, self.rf_guard_why = with_rf_guard(self.admin, self.options)
        if self.rf_guard_why:
            self.log.warning("%s", self.rf_guard_why)
        self._line_read = True

    # -- one tick --------------------------------------------------------------------------------

    def preflight(self) -> ExecutionStatus:
        """One read-only step (nothing submitted, nothing written), its findings logged; a blocked plan stops
        here, before anything changed."""
        self._read_the_cluster_line()
        self._kept_topic_ids()
        status = step(self.admin, self.plan, self.limits, self.options, state_dir=self.state_dir, submit=False,
                      log=self.log, settle_s=self.settle_s, sleep=self.sleep)
        self.ticks += 1
        self.last = status
        self._take_topic_ids(status)
        self._note(status)
        if status.blocked is None and status.pending:
            cordoned = cordon_refusal(self.admin, [status.moves[tp] for tp in status.pending])
            if cordoned is not None:
                status.blocked = cordoned
        report_preflight(status, self.log)
        return status

    def tick(self, *, submit: bool = True) -> Tick:
        """Observe, deadline, step (throttles, submissions), health, adapt, journal; see the module docstring.

        Safe at any moment from any process: a move in flight is recognised from the controller's listing and
        never submitted again. ``submit=False`` only watches (finished partitions still lose their throttles)."""
        log = self.log
        self._read_the_cluster_line()
        past = self.deadline is not None and self.now() >= self.deadline
        cancelled: CancelResult | None = None
        if past and not self.deadline_reached:
            self.deadline_reached = True
            last = self.last
            log.warning("deadline %s passed: no new move is submitted%s", self.deadline.isoformat() if self.deadline
                        else "", f"; {len(last.in_flight)} in flight, {len(last.pending)} pending are left for the "
                                 "next run" if last is not None else "")
            if self.on_deadline == "cancel" and (last is None or last.in_flight):
                cancelled = self._cancel()
        done_before = self._done_before if self._done_before is not None else (
            len(self.last.done) if self.last is not None else None)
        limits, options = self.governor.for_step(self.limits, self.options)
        changes = len(self.governor.adaptations)
        self._kept_topic_ids()
        status = step(self.admin, self.plan, limits, options, state_dir=self.state_dir,
                      submit=submit and not past and self.health_stop is None, log=log,
                      known_failed=self.known_failed, settle_s=self.settle_s, sleep=self.sleep,
                      should_stop=self.should_stop, lease=None if options.dry_run else self.lease)
        self.ticks += 1
        self.submitted.extend(status.submitted)
        self.known_failed.update(status.failed)
        self._take_topic_ids(status)
        self._drop_what_the_drain_needs_no_more(status)
        new_events = self._note(status)
        self._time_waits(status)
        if status.complete and self.goal is not None and not past and submit and self.health_stop is None \
                and not options.dry_run and self._goal_round(status):
            again = self.tick(submit=submit)  # the round's first batch, at once
            again.drained_later = self.drained_later[-len(self._last_round):] if self._last_round else []
            again.events = new_events + again.events
            return again
        before = len(status.done) if done_before is None else done_before
        eta: float | None = None
        if not status.complete:
            stop = None
            if self.health_stop is None and status.blocked is None:  # a blocked plan submits nothing: no pause
                stop = self.governor.health(status, at=self.clock_s(), submitting=not past and submit, log=log)
            if stop is not None:
                self.health_stop = stop
                log.error("%s", stop)
                journal(self.state_dir, {"event": HEALTH_STOPPED, "holder": self.holder, "why": stop}, log=log)
                if options.health.on_unhealthy == "cancel" and status.in_flight:
                    cancelled = self._cancel()
                    log.warning("on_unhealthy=cancel: %s", cancelled.line())
                    journal(self.state_dir, {"event": HEALTH_CANCELLED, "holder": self.holder,
                                             "cancel": cancelled.summary()}, log=log)
            elif self.health_stop is None:
                eta = self.governor.adapt(self.admin, status, before, at=self.clock_s(), options=options,
                                          state_dir=self.state_dir, log=log,
                                          measure=self.plan.partitions if self.measure else None)
                status.eta_s = self.governor.plan_eta(status, limits, options, at=self.clock_s())
        if self.health_stop is not None:
            status.blocked = status.blocked or self.health_stop
            # never sent now (nor a cancelled move again): a driver that watches names them when it ends
            self.known_failed.update(dict.fromkeys(status.pending, f"not sent: {self.health_stop}"))
        self._poll = next_poll_s(eta, previous_s=self._poll, ceiling_s=self.poll_interval_s,
                                 floor_s=min(self.min_poll_interval_s, self.poll_interval_s),
                                 progressed=len(status.done) > before)
        self._done_before = len(status.done)
        self.last = status
        return Tick(status=status, past_deadline=past, health_stop=self.health_stop, cancel=cancelled,
                    adaptations=self.governor.adaptations[changes:], eta_s=eta, next_poll_s=self._poll,
                    events=new_events)

    # -- the cluster living under the plan -------------------------------------------------------

    def _kept_topic_ids(self) -> None:
        """Before a step: a plan that does not record its topics' ids takes those an earlier process of the run kept
        (:meth:`_take_topic_ids`), so a retry on any worker judges by the ids the run saw first."""
        if self.plan.topic_ids is None and self.state_dir is not None and not self._ids_read:
            self._ids_read = True
            ids = read_topic_ids(self.state_dir)
            if ids:
                self.plan = self.plan.model_copy(update={"topic_ids": ids})

    def _take_topic_ids(self, status: ExecutionStatus) -> None:
        """A plan that does not record its topics' ids (KIP-516) is judged by the ids the run saw first: kept on the
        run state at its first step (before anything is sent), so a retry on any worker tells a re-created topic from
        the planned one too."""
        if self.plan.topic_ids is not None or status.observation is None:
            return
        ids = dict(status.observation.topic_ids)
        if not ids:
            return
        if self.state_dir is not None and not self.options.dry_run:
            write_topic_ids(self.state_dir, ids)
        self.plan = self.plan.model_copy(update={"topic_ids": ids})

    def _drop_what_the_drain_needs_no_more(self, status: ExecutionStatus) -> None:
        """A drain's stale move whose partition holds no replica on the drained brokers any more is dropped (``gone``):
        the goal needs nothing more of it. Its partition was moved off by someone else, or its topic was deleted and
        re-created elsewhere where no topic id tells it (a cluster or adapter without KIP-516's ids): left stale, it
        would fail a run whose brokers are empty. A stale partition still on a drained broker stays stale, and the
        drain round after the plan's moves plans it again from the cluster; one with a reassignment in flight waits
        for it (its end is not known yet). Judged at every tick from what the tick read: a resumed session agrees."""
        spec, obs = self.drain, status.observation
        if spec is None or obs is None or not status.stale:
            return
        drained = set(spec.brokers)
        off = {tp: obs.partitions[tp].replicas for tp in status.stale
               if tp not in status.reassignments and tp in obs.partitions
               and not drained & set(obs.partitions[tp].replicas)}
        if not off:
            return
        for tp, replicas in off.items():
            expected = status.stale.pop(tp)[0]
            status.stale_why.pop(tp, None)
            status.gone[tp] = (f"stale (the plan expected replicas {list(expected)}, the cluster has {list(replicas)}), "
                               f"and no replica on the drained broker(s) {list(spec.brokers)}: the drain needs nothing "
                               "more of it: move dropped")
        status.events.append(f"{len(off)} stale move(s) dropped, their partitions hold no replica on the drained "
                             f"broker(s) {list(spec.brokers)} any more (moved elsewhere, or the topic re-created): "
                             f"{_tps(sorted(off), 5)}")

    def _event(self, line: str, out: list[str]) -> None:
        """Keep, journal and log ``line`` once per run (a resumed session knows the earlier processes' lines)."""
        if line not in self.events:
            self.events.append(line)
            out.append(line)
            self.log.warning("the cluster changed under the plan: %s", line)
            if self.state_dir is not None and not self.options.dry_run:
                journal(self.state_dir, {"event": CLUSTER_CHANGED, "holder": self.holder, "line": line}, log=self.log)

    def _note(self, status: ExecutionStatus) -> list[str]:
        """Keep this step's events (new ones logged once) and the moves it found gone; returns the new lines."""
        out: list[str] = []
        for line in status.events:
            self._event(line, out)
        self.gone.update(status.gone)
        return out

    def _time_waits(self, status: ExecutionStatus) -> None:
        """Bound the waits: moves held by a broker that is not alive, or by someone else's reassignment of their
        partition, wait while it lasts, up to ``broker_restart_wait_s`` / ``foreign_reassignment_wait_s``; past
        that they are refused naming what held them (never sent by this session)."""
        now = self.clock_s()
        held: dict[str, list[TopicPartition]] = {}
        for tp, key in status.waiting_for.items():
            held.setdefault(key, []).append(tp)
        out: list[str] = []
        for key in [k for k in self.waiting_since if k not in held]:
            lasted = format_duration(now - self.waiting_since.pop(key))
            self._event(f"{key} {'back' if key.startswith('broker ') else 'finished'} after {lasted}: the moves that "
                        "waited for it go on", out)
        for key, tps in sorted(held.items()):
            since = self.waiting_since.setdefault(key, now)
            broker = key.startswith("broker ")
            if since == now:
                self._event(f"{key} {'is not alive (restarting?)' if broker else 'is in flight (not ours)'}: "
                            f"{len(tps)} move(s) wait for it ({_tps(tps, 5)}), the others go on", out)
            bound = self.options.broker_restart_wait_s if broker else self.options.foreign_reassignment_wait_s
            if now - since < bound:
                continue
            setting = "broker_restart_wait_s" if broker else "foreign_reassignment_wait_s"
            why = (f"refused: {key} {'not alive' if broker else 'still in flight'} for {format_duration(now - since)}"
                   f", longer than {setting}={bound:g}; "
                   + ("start the broker (or plan again without it), or pass allow_offline_brokers=True to send "
                      "moves onto it" if broker else "wait for it or cancel it, then plan again"))
            for tp in tps:
                self.known_failed[tp] = why
                status.failed[tp] = why
                status.waiting.pop(tp, None)
                status.waiting_for.pop(tp, None)
            self._event(f"{key}: {len(tps)} move(s) refused after waiting {format_duration(now - since)} "
                        f"({setting}={bound:g})", out)

    def _goal_round(self, status: ExecutionStatus) -> bool:
        """Judge the goal again once the plan's moves are over (core/maintenance/rounds.py): what still breaks it
        (partitions that arrived on the drained brokers or in the removed dirs, re-created, moved back by someone
        else) is planned from a fresh look at the cluster as a new round, recorded on the run state before its moves
        go out (a drain's stale moves off its brokers were dropped at their tick:
        :meth:`_drop_what_the_drain_needs_no_more`). ``True``: a round was planned."""
        goal = self.goal
        assert goal is not None
        self._last_round = []
        # what the cluster invalidated under the run and no round has planned since (a balancing goal re-plans it)
        touched = (set(self.gone) - set(self.drained_later)) | set(status.stale)
        left, extra, refused = goal.round(self.admin, self.known_failed, touched)
        if not left:
            return False
        if self.drain_rounds >= goal.max_rounds:
            self.drain_short = (
                f"{len(left)} partition(s) {goal.breaks} after {self.drain_rounds} {goal.kind} "
                f"round(s) "
                f"(max_rounds={goal.max_rounds}): {_tps(left)}. {goal.advice}")
            self.log.error("%s", self.drain_short)
            return False
        skipped = {tp: self.known_failed[tp] for tp in left if tp in self.known_failed}
        if skipped and not extra.moves:
            self.drain_short = (f"{len(skipped)} partition(s) {goal.breaks} and their moves "
                                "were refused: " + "; ".join(f"{tp}: {why}" for tp, why in sorted(skipped.items())[:10]))
            self.log.error("%s", self.drain_short)
        if refused:
            self.drain_short = (f"the {goal.kind} round cannot plan {len(refused)} partition(s) toward {goal.what}: "
                                + "; ".join(f"{tp}: {why}" for tp, why in sorted(refused.items())[:10]))
            self.log.error("%s", self.drain_short)
        if not extra.moves:
            return False
        self.drain_rounds += 1
        if self.state_dir is not None:
            if self.lease is not None:
                self.lease.confirm()
            write_drain_round(self.state_dir, self.drain_rounds, extra.model_dump_json())
            journal(self.state_dir, {"event": DRAIN_ROUND, "holder": self.holder, "round": self.drain_rounds,
                                     "partitions": [str(m.tp) for m in extra.moves]}, log=self.log)
        self._last_round = [m.tp for m in extra.moves]
        self.drained_later.extend(self._last_round)
        self.plan = merge(self.plan, extra)
        self._event(f"round {self.drain_rounds} of at most {goal.max_rounds}: {len(extra.moves)} move(s) planned from "
                    f"a fresh snapshot ({_tps(self._last_round, 5)})", [])
        self.log.warning(
            "%d partition(s) %s once the plan's moves were over (%s: arrived meanwhile, re-created, or moved by "
            "someone else): planned again in this run, %s round %d of at most %d, within the same limits. %s",
            len(extra.moves), goal.breaks, _tps(self._last_round), goal.kind, self.drain_rounds, goal.max_rounds,
            goal.keep_out)
        return True

    def _cancel(self) -> CancelResult:
        """``on_deadline="cancel"`` / ``on_unhealthy="cancel"``: the moves in flight stop, the run's cordons stay (its
        drain goes on in a later run); a partition whose reorder names a cordoned broker keeps Kafka's order, recorded
        in the journal for the cancel of the whole run (core/execution/cancel.py)."""
        from airflow_kafka_reassign.core.execution.cancel import cancel  # it builds on this package

        self._read_the_cluster_line()
        return cancel(self.admin, self.plan, rf_guard=self.options.rf_guard, log=self.log, sleep=self.sleep,
                      state_dir=self.state_dir)

    # -- the end ---------------------------------------------------------------------------------

    def finish(self, *, elect: bool | None = None) -> dict[str, Any]:
        """Restore the throttles exactly as they were before the run; elect preferred leaders (``elect``, default
        the option); under the lease (a session that lost it restores nothing)."""
        return finish(self.admin, self.plan, self.options, state_dir=self.state_dir, elect=elect, log=self.log,
                      lease=self.lease)

    # -- across processes (the sensor's pokes, reschedules, deferral, triggerer restarts) ----------

    @classmethod
    def resume(cls, admin: ClusterAdmin, plan: ReassignmentPlan, config: ExecutionConfig, *, state_dir: Any,
               holder: str | None, **kwargs: Any) -> ExecutionSession:
        """A session for one task try that goes on from what an earlier process of the same try left on the run
        state: the health policy's stop (journalled), the governor (adaptive limits, pause clock, copy watch)
        and the count of moves done at its last tick."""
        session = cls(admin, plan, config, state_dir=state_dir, holder=holder, **kwargs)
        session.resume_drain()
        if state_dir is not None:
            session.events = cluster_events(state_dir)
        if holder is None or state_dir is None:
            return session
        stops = [e["why"] for e in try_events(state_dir, holder) if e.get("event") == HEALTH_STOPPED]
        session.health_stop = stops[0] if stops else None
        saved = read_governor(state_dir, holder, session.log)
        if saved:
            try:
                session.governor.restore(saved["governor"])
                session._done_before = saved.get("done")
            except (KeyError, TypeError, ValueError) as e:  # another provider version's shape: start afresh
                session.log.warning("could not restore the submitter's adaptive state (%s): starting afresh", e)
                session.governor = RunGovernor(session.options.health, session.governor.adaptive,
                                               session.options.throttle_bytes_per_sec, holder=holder,
                                               headroom=session.options.throttle_headroom)
        return session

    def resume_drain(self) -> None:
        """Take the goal's rounds an earlier process planned on this run state into the plan."""
        if self.goal is None or self.state_dir is None:
            return
        for text in read_drain_rounds(self.state_dir):
            extra = ReassignmentPlan.model_validate_json(text)
            self.plan = merge(self.plan, extra)
            self.drain_rounds += 1
            self.drained_later.extend(m.tp for m in extra.moves)

    def save(self) -> None:
        """Keep the governor for a later process of the same task try (best effort; written when it changed)."""
        if self.holder is None or self.state_dir is None:
            return
        write_governor(self.state_dir, self.holder, {"governor": self.governor.export(), "done": self._done_before},
                       self._saved, self.log)


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
    #: polls at which the copy in flight was stalled (not gaining on its leaders; see core/guards/adaptive.py)
    stalled_polls: int = 0
    #: partitions that arrived on the drained brokers during the run and were drained in it (core/maintenance/drain.py)
    drained_later: list[TopicPartition] = field(default_factory=list)
    #: why the drain could not empty the brokers (``None``: it did, or there was no drain)
    drain_short: str | None = None
    #: what the cluster did under the plan and what the run did about it, one line each (topics grown, deleted,
    #: re-created; brokers down and back; rounds)
    cluster_events: list[str] = field(default_factory=list)
    #: moves dropped over the whole run because their partition is gone or needs nothing more, with why
    gone: dict[TopicPartition, str] = field(default_factory=dict)
    #: the replication-factor guard the run used (``"broker"`` or ``"client"``), and why when the provider chose it
    rf_guard: str | None = None
    rf_guard_why: str | None = None

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
        if self.cluster_events:
            out["cluster_events"] = self.cluster_events[:SUMMARY_SAMPLE]
        if self.gone:
            out["gone"] = len(self.gone)
            out["gone_partitions"] = {str(tp): why for tp, why in sorted(self.gone.items())[:SUMMARY_SAMPLE]}
        if self.rf_guard is not None:
            out["rf_guard"] = self.rf_guard
        if self.rf_guard_why:
            out["rf_guard_why"] = self.rf_guard_why
        if self.drained_later or self.drain_short:
            out["drained_later"] = len(self.drained_later)
            out["drained_later_partitions"] = [str(tp) for tp in self.drained_later[:SUMMARY_SAMPLE]]
            out["drain_short"] = self.drain_short
        return out


def run(
    admin: ClusterAdmin,
    plan: ReassignmentPlan,
    limits: ExecutionLimits | ExecutionConfig,
    options: ExecutionOptions | None = None,
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
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    settle_s: float = SETTLE_RECHECK_S,
    lease: LeaseKeeper | None = None,
    adaptive: AdaptiveBounds | None = None,
    min_poll_interval_s: float = DEFAULT_MIN_POLL_S,
    clock: Callable[[], float] = time.monotonic,
    progress: Callable[[ExecutionStatus], None] | None = None,
    default_disk_reserve: str | None = None,
    holder: str | None = None,
    drain: DrainSpec | None = None,
    goal: GoalRounds | None = None,
) -> RunResult:
    """Execute ``plan`` to the end (or the deadline) by ticking one :class:`ExecutionSession`.

    ``limits`` is an :class:`ExecutionConfig` (then ``options`` and ``adaptive`` come from it) or the engine's
    :class:`ExecutionLimits` with ``options``.

    1. Pre-flight: a read-only tick whose findings are logged; a blocked run stops here, before anything changed.
    2. ``before_first_submit(status)`` (the operator writes the rollback plan there).
    3. Ticks until the plan is complete, each after the pause the last tick chose (between
       ``min_poll_interval_s`` and ``poll_interval_s``: soon when a move in flight is about to finish). After
       ``deadline`` nothing is submitted; in-flight moves finish (``on_deadline="finish"``) or are cancelled
       (``"cancel"``). The health policy pauses, or stops the run (cancelling with ``on_unhealthy="cancel"``;
       with ``"fail"`` or a pause past ``max_pause_s`` the moves in flight keep their throttles, for the next
       run or the cancel operator to restore).
    4. :meth:`ExecutionSession.finish` (throttles restored exactly, leaders elected) unless ``finish_at_end`` is
       False; after an exception or ``should_stop()`` the throttles are restored all the same.

    With ``wait=False`` it returns after the first submission (the sensor keeps ticking); pass
    ``finish_at_end=False`` with it so that the throttles stay for the moves in flight. With ``lease`` every tick
    confirms the plan's lease before it writes; a run whose lease was taken over stops at once and restores
    nothing (:class:`~airflow_kafka_reassign.core.records.lease.LeaseLostError`). With ``options.dry_run`` it stops after
    the pre-flight and one dry tick that logs the exact requests of the first batch. ``progress(status)`` is
    called after each tick that leaves moves in flight (reassignments or moves between log dirs).
    """
    if isinstance(limits, ExecutionConfig):
        reserve = {"default_disk_reserve": default_disk_reserve} if default_disk_reserve else {}
        parts = (limits.limits(), limits.options(**reserve), limits.adaptive())
    else:
        if options is None:
            raise ConfigurationError("run() needs options with ExecutionLimits (or pass an ExecutionConfig)")
        parts = (limits, options, adaptive)
    session = ExecutionSession(admin, plan, None, _parts=parts, state_dir=state_dir, lease=lease, holder=holder,
                               deadline=deadline, on_deadline=on_deadline, poll_interval_s=poll_interval_s,
                               min_poll_interval_s=min_poll_interval_s, measure=progress is not None, log=log,
                               settle_s=settle_s, sleep=sleep, should_stop=should_stop, now=now, clock_s=clock,
                               drain=drain, goal=goal)
    session.resume_drain()
    log = session.log
    options = session.options
    started = time.monotonic()
    result = RunResult(status=ExecutionStatus(total=len(plan)))
    done_cleanly = lost = keep_throttles = False
    unreachable = 0
    try:
        status = session.preflight()
        result.steps, result.status = 1, status
        if options.dry_run:
            result.status = session.tick().status
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
            try:
                tick = session.tick()
                unreachable = 0
            except ClusterUnreachableError as e:  # nothing is submitted twice: the next tick observes first
                unreachable += 1
                if unreachable >= MAX_UNREACHABLE_POLLS:
                    raise
                log.warning("poll %d/%d could not reach the cluster, asking again in %.0f s: %s", unreachable,
                            MAX_UNREACHABLE_POLLS, session.poll_interval_s, e)
                (sleep or waiting.sleep)(session.poll_interval_s)
                continue
            status = tick.status
            result.steps, result.status = session.ticks, status
            result.cancel = tick.cancel or result.cancel
            if tick.health_stop is not None:
                result.unhealthy = tick.health_stop
                keep_throttles = options.health.on_unhealthy != "cancel" and bool(status.in_flight)
            if not wait or tick.over:
                break
            if progress is not None and (status.in_flight or (status.log_dirs is not None and status.log_dirs.in_flight)):
                progress(status)
            (sleep or waiting.sleep)(tick.next_poll_s)
        done_cleanly = True
    except LeaseLostError:
        lost = True
        raise
    finally:
        result.elapsed_s = time.monotonic() - started
        result.deadline_reached = session.deadline_reached
        result.submitted = list(session.submitted)
        governor = session.governor
        governor.close(session.clock_s())
        result.paused_s, result.adaptations = governor.paused_s, governor.adaptations
        result.stalled_polls = governor.stalled_polls
        result.drained_later, result.drain_short = list(session.drained_later), session.drain_short
        result.cluster_events, result.gone = list(session.events), {**session.gone, **result.status.gone}
        if session._line_read:
            result.rf_guard, result.rf_guard_why = session.options.rf_guard, session.rf_guard_why
        if keep_throttles:
            log.warning("%d move(s) still in flight keep their throttles; a new run on this plan (or "
                        "CancelReassignmentOperator) restores them from %s", len(result.status.in_flight),
                        backup_path(state_dir) if state_dir else "the backup")
        elif not lost and (finish_at_end or not done_cleanly or result.stopped):
            try:
                elect = done_cleanly and not result.stopped and options.elect_leaders
                result.finish = session.finish(elect=elect)
            except Exception:
                if done_cleanly:
                    raise
                log.exception("restoring the throttles failed; the next run (or CancelReassignmentOperator) "
                              "restores them from %s", backup_path(state_dir) if state_dir else "the backup")
    if result.status.blocked:
        log.error("%s", result.status.blocked)
    result.submitted_total = submitted_total(state_dir, result.submitted)
    return result
