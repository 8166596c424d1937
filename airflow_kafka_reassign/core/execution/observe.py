"""Observe the cluster and classify every move of a plan (done, lagging, in flight, pending, stale, failed,
foreign), the plan errors, the health gate and the RF guard: the read-only half of a step, and pre-flight."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace

from airflow_kafka_reassign.core.execution import clock as waiting
from airflow_kafka_reassign.core.execution.config import SETTLE_RECHECK_S, SUMMARY_SAMPLE, ExecutionOptions
from airflow_kafka_reassign.core.execution.log_dirs import observe_log_dirs
from airflow_kafka_reassign.core.execution.status import ExecutionStatus, _names, _Observation
from airflow_kafka_reassign.core.guards.health import (
    BELOW_MIN_ISR_LAST,
    NORMAL,
    assess,
    below_min_isr,
    drained_brokers,
    urgency,
)
from airflow_kafka_reassign.core.guards.kafka_line import choose_rf_guard
from airflow_kafka_reassign.core.maintenance.cordon import cordon_refusal
from airflow_kafka_reassign.core.vocabulary.models import Move, PartitionState, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.vocabulary.move_state import MoveState, classify
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin, InFlightReassignment
from airflow_kafka_reassign.exceptions import ConfigurationError

_log = logging.getLogger(__name__)






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
    everything_read = tuple(snap.partitions)
    if everything:
        everything_read = with_eligible_leaders(admin, everything_read, min_isr)
        parts = {p.tp: p for p in everything_read if p.topic in wanted}
    ids = {t.name: t.topic_id for t in snap.topics if t.name in wanted and t.topic_id is not None}
    return _Observation(reassignments=reassignments, partitions=parts,
                        brokers=frozenset(b.id for b in snap.brokers), topics=present,
                        everything=everything_read, min_isr=min_isr, racks={b.id: b.rack for b in snap.brokers},
                        topic_ids=ids)


def with_eligible_leaders(admin: ClusterAdmin, partitions: tuple[PartitionState, ...],
                          min_isr: Mapping[str, int]) -> tuple[PartitionState, ...]:
    """``partitions`` with KIP-966's eligible leader replicas read for those below ``min.insync.replicas`` or
    offline, where the cluster has ELR on (one DescribeTopicPartitions per page of their topics: nothing when the
    cluster is healthy). A cluster that cannot tell (ELR off, an older broker, the request refused) leaves them
    unread (``elr=None``): the health gate then reports them as before."""
    degraded = [p.tp for p in partitions
                if p.leader is None or len(p.replicas) >= min_isr.get(p.topic, 1) > len(p.isr)]
    if not degraded:
        return partitions
    try:
        if not admin.capabilities().eligible_leader_replicas:
            return partitions
        found = admin.describe_eligible_leaders(degraded)
    except Exception as e:  # noqa: BLE001 (the gate still reports the partitions, without their ELR)
        _log.warning("KIP-966's eligible leader replicas could not be read (%s: %s): the partitions below min ISR "
                     "or offline are reported without them", type(e).__name__, e)
        return partitions
    if not found:
        return partitions
    return tuple(p.model_copy(update={"elr": found[p.tp].elr, "last_known_elr": found[p.tp].last_known_elr})
                 if p.tp in found else p for p in partitions)


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
            # somebody else's reassignment of this partition is in flight: the move waits for it to finish (the
            # session bounds how long, foreign_reassignment_wait_s), then it is judged again where the partition is
            if r is None:  # the snapshot saw it, the (earlier) listing did not
                r = InFlightReassignment(topic=tp.topic, partition=tp.partition, replicas=live.replicas,
                                         adding_replicas=live.adding_replicas,
                                         removing_replicas=live.removing_replicas)
                status.reassignments[tp] = r
            if tp not in status.foreign:
                status.foreign.append(tp)
            status.moves[tp] = m
            race = len(m.target_replicas) != len(r.target_replicas) and not m.allow_rf_change
            if tp in known_failed or race:  # KIP-860's race (a plan from the intermediate set): refused at once
                status.stale[tp] = (m.current_replicas or r.original_replicas, r.replicas)
                status.stale_why[tp] = _stale_in_flight(m, r) + (f" ({known_failed[tp]})" if tp in known_failed else "")
            else:
                status.waiting[tp] = (f"someone else's reassignment of it is in flight ({list(r.original_replicas)} -> "
                                      f"{list(r.target_replicas)}): the move waits for it to finish, then is judged "
                                      "again")
                status.waiting_for[tp] = f"the reassignment of {tp}"
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
    """What the cluster did under the plan, judged move by move: ``(plan errors, {move: why it is refused})``.

    A change of the cluster touches the moves it touches, never the whole plan (``status.events`` says each, in one
    line an operator reads):

    * a topic **deleted** (``missing``, the topic gone): its moves are dropped (``status.gone``), not failed;
    * a topic **re-created** under the same name (its id, KIP-516, differs from ``plan.topic_ids``): every move of it
      is dropped; a goal's next round plans its new partitions;
    * a topic that **grew** (same id, more partitions than ``plan.partition_counts``): its moves continue (the new
      partitions are the cordon's business, or the drain rounds');
    * a pending move whose target replicas name a broker the cluster does not list as **alive** but that partitions
      still list among their replicas (fenced, or its process restarting: a rolling restart): it waits
      (``status.waiting``) while the others go on; the session bounds the wait (``broker_restart_wait_s``). With
      ``options.allow_offline_brokers`` it is sent and waits for the broker.

    Plan errors are left where the plan itself is wrong: a partition its topic (the same topic) never had, a broker
    the cluster does not know at all (no partition lists it, it is not alive).
    """
    problems: list[str] = []
    refused: dict[TopicPartition, str] = {}
    then = plan.topic_ids or {}
    topics = sorted({m.topic for m in plan.moves})
    recreated = {t for t in topics if t in then and obs.topic_ids.get(t) not in (None, then[t])}
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in missing:
        by_topic.setdefault(tp.topic, []).append(tp)
    for topic, tps in sorted(by_topic.items()):
        if obs.topics.get(topic) is None:
            why = f"topic {topic} was deleted: move dropped"
            status.events.append(f"topic {topic} deleted: dropped {len(tps)} move(s) ({_sample(tps)})")
            status.gone.update(dict.fromkeys(tps, why))
        elif topic not in recreated:  # the same topic (or no id to tell): the plan names a partition it never had
            have = obs.topics[topic]
            problems.append(f"partition(s) {_sample(tps)} do not exist: topic {topic} has {have} partition(s)")
            for tp in tps:
                refused[tp] = f"refused: partition {tp} does not exist: topic {topic} has {have} partition(s); plan again"
    for topic in sorted(recreated):
        tps = [m.tp for m in plan.moves if m.topic == topic and m.tp not in status.gone]
        status.gone.update(dict.fromkeys(tps, f"topic {topic} was deleted and re-created (a new topic id): the "
                                              "planned partition is not the one in the cluster: move dropped"))
        status.events.append(f"topic {topic} re-created (new topic id): dropped {len(tps)} move(s) "
                             f"({_sample(tps)})")
    if status.gone:
        _drop(status, status.gone)
    counts = plan.partition_counts or {}
    for topic in topics:
        want, now = counts.get(topic), obs.topics.get(topic)
        if topic not in recreated and want is not None and now is not None and now > want:
            status.events.append(f"topic {topic} grew from {want} to {now} partitions: its moves continue")
    if not options.allow_offline_brokers:
        absent: dict[int, list[TopicPartition]] = {}
        for tp in status.pending:
            if tp in refused:
                continue
            for b in status.moves[tp].target_replicas:
                if b not in obs.brokers:
                    absent.setdefault(b, []).append(tp)
                    break
        holders = {b for p in obs.partitions.values() for b in p.replicas} if absent else set()
        if absent and obs.everything:
            holders.update(b for p in obs.everything for b in p.replicas)
        live = _ids(obs.brokers)
        for b, tps in sorted(absent.items()):
            if b in holders:  # a broker of the cluster that is down for now: weather, its moves wait
                for tp in tps:
                    status.waiting[tp] = (f"target replicas {list(status.moves[tp].target_replicas)} name broker {b}, "
                                          f"which is not alive now (live: {live}): waits for it")
                    status.waiting_for[tp] = f"broker {b}"
                continue
            targets = ", ".join(f"{tp} -> {list(status.moves[tp].target_replicas)}" for tp in sorted(tps)[:3])
            problems.append(f"broker {b} does not exist in the cluster (no partition lists it, it is not alive; "
                            f"live brokers: {live}); the target replicas of {len(tps)} pending move(s) name it "
                            f"({targets}{' ...' if len(tps) > 3 else ''})")
            for tp in tps:
                refused.setdefault(tp, f"refused: target replicas {list(status.moves[tp].target_replicas)} name "
                                       f"broker {b}, which is not a broker of the cluster (live: {live}); plan again")
        if status.waiting:
            held = set(status.waiting)
            status.pending = [tp for tp in status.pending if tp not in held]
    return problems, refused


def _drop(status: ExecutionStatus, tps: Collection[TopicPartition]) -> None:
    """Take ``tps`` out of every other state of ``status`` (they are gone)."""
    gone = set(tps)
    for name in ("done", "in_flight", "pending", "lagging"):
        setattr(status, name, [tp for tp in getattr(status, name) if tp not in gone])
    for mapping in (status.stale, status.stale_why, status.failed, status.waiting, status.waiting_for):
        for tp in gone & set(mapping):
            del mapping[tp]


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


_RF_GUARD_UNSUPPORTED = (
    "the brokers ({line}) do not support KIP-860's AllowReplicationFactorChange (AlterPartitionReassignments v1, "
    "Apache Kafka 4.1+), so the replication-factor guard cannot be enforced by the broker; nothing was "
    "sent. Upgrade the brokers, or pass rf_guard=\"client\" to compare replica counts with the "
    "controller's replica sets just before sending (racy: a change made in between is not seen)"
)


def with_rf_guard(admin: ClusterAdmin, options: ExecutionOptions) -> tuple[ExecutionOptions, str | None]:
    """``options`` with ``rf_guard="auto"`` replaced by the guard the provider chooses for this cluster
    (:func:`~airflow_kafka_reassign.core.guards.kafka_line.choose_rf_guard`), and the line that says why when it
    chose the client-side guard; unchanged for a guard the user chose."""
    if options.rf_guard != "auto":
        return options, None
    guard, why = choose_rf_guard("auto", supported=admin.supports_rf_guard(), caps=admin.capabilities())
    return replace(options, rf_guard=guard), why


_RF_GUARD_CLIENT_LIMITS = (
    "rf_guard='client': the replication-factor guard is checked client-side against the controller's "
    "replica sets just before each submission. Its limits: a reassignment started by someone else "
    "between the check and the request is not seen, and describe can lag the controller; the broker "
    "does not refuse an RF change for you"
)


def _check_health(plan: ReassignmentPlan, obs: _Observation, status: ExecutionStatus, options: ExecutionOptions,
                  log: logging.Logger) -> None:
    """Read the cluster's health into ``status`` (core/guards/health.py): ``paused`` when trouble that
    the run does not explain stops new submissions; pending moves below min ISR counted (and
    refused with ``below_min_isr="refuse"``); each pending move's urgency (``status.urgency``: the moves that
    restore redundancy go first, those below min ISR last)."""
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
    # redundancy first, below min ISR last: the order every batch starts from (core/guards/health.py)
    urgent: dict[TopicPartition, int] = {}
    for tp in status.pending:
        u = urgency(status.moves[tp], obs.partitions.get(tp), obs.min_isr.get(tp.topic, 1), obs.brokers)
        if u != NORMAL:
            urgent[tp] = u
    for tp in status.below_min_isr:
        urgent[tp] = BELOW_MIN_ISR_LAST
    status.urgency = urgent
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
    planned = set(plan.partitions)
    # the headroom throttle measures the traffic of every partition on the plan's brokers: every topic is read
    gate = options.health.gate or options.throttle_headroom is not None
    obs = _observe(admin, topics, everything=gate)
    status = _classify(plan, obs, options, known_failed or {})
    suspects = [tp for tp in status.stale if tp not in status.reassignments]
    if suspects and settle_s >= 0:
        (sleep or waiting.sleep)(settle_s)
        obs = _observe(admin, topics, everything=gate)
        status = _classify(plan, obs, options, known_failed or {})
    status.observation = obs
    _check_health(plan, obs, status, options, log)

    if status.plan_errors and (options.on_plan_error == "refuse" or options.strict):
        status.blocked = plan_refusal(status.plan_errors, options)
    elif (unplanned := [tp for tp in status.foreign if tp not in planned]) \
            and not options.allow_concurrent_reassignments:
        status.blocked = (
            f"{len(unplanned)} reassignment(s) are in flight that this plan did not start "
            f"({', '.join(_names(unplanned, 10))}); wait for them to finish, cancel them "
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
        options, _ = with_rf_guard(admin, options)
        supported = admin.supports_rf_guard()
        if supported is False and options.rf_guard == "broker":
            status.blocked = _RF_GUARD_UNSUPPORTED.format(line=admin.capabilities().line_name())
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
    not allowed, moves below min ISR, the health gate, and the RF guard the brokers support; for a plan
    that pins log dirs, where its replicas are (``status.log_dirs``: one DescribeLogDirs, as each step
    observes them; a move that only pins dirs keeps its replicas, so it is "done" as a reassignment from
    the start). The approval step (operators/approval.py) shows it to the person before asking;
    :func:`refusal` says whether execution would refuse the whole plan.
    """
    status = _assess(admin, plan, options, known_failed=None, settle_s=settle_s, sleep=sleep, log=log or _log,
                     rf_guard_check=True)[0]
    observe_log_dirs(admin, plan, status, log=log or _log)  # None, and no request, when the plan pins no dir
    if status.blocked is None and status.pending:
        status.blocked = cordon_refusal(admin, [status.moves[tp] for tp in status.pending])
    return status


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

