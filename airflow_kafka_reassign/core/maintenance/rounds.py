"""A goal's rounds: what a goal-driven run plans again, in the same run, once its plan's moves are over.

A maintenance run exists for an end state: these brokers empty (a decommission's drain,
:mod:`~airflow_kafka_reassign.core.maintenance.drain`), these log dirs empty (a disk removal, :class:`DiskRemovalSpec`).
The cluster lives meanwhile: a topic is created with a replica on a drained broker (no cordon before Kafka 4.3), a
topic is deleted and re-created with a replica in a removed dir, someone moves a partition back. When the plan's
moves are over, the session (:meth:`ExecutionSession.tick <airflow_kafka_reassign.core.execution.session.ExecutionSession.tick>`)
asks the goal for a :class:`Round`: what still breaks the goal, read from a fresh look at the cluster, and the moves
that mend it, planned by the goal's own planner. The session records the round on the run state before its moves
go out, merges it into the plan and goes on under the same limits, throttles, health gate and journal: one
mechanism for every goal, bounded by the goal's ``max_rounds``.

Each goal is one small adapter here: :class:`DrainGoal` (brokers), :class:`DiskRemovalGoal` (log dirs) and
:class:`BalanceGoal` (a rebalance, a scale-out, an offload: the topics whose moves the cluster invalidated are planned
again with the plan's own request). A plan with no goal (a user's JSON) has no rounds: a stale move is refused by name,
since there is nothing to plan toward.

Pure: the cluster is read through the :class:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterAdmin` port.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Set
from typing import NamedTuple, Protocol

from pydantic import Field

from airflow_kafka_reassign.core.maintenance.cordon import cordoned_brokers
from airflow_kafka_reassign.core.maintenance.drain import DEFAULT_MAX_ROUNDS, DrainSpec, drain_moves, leftovers
from airflow_kafka_reassign.core.planner.goals import BALANCE_GOALS, PlanRequest
from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable, plan_log_dirs
from airflow_kafka_reassign.core.records.store import Store, as_store
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition, _Frozen
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin
from airflow_kafka_reassign.exceptions import ConfigurationError

#: The file a disk removal's plan directory holds beside plan.json: the request it was planned from.
DISK_REMOVAL_FILE = "disk-removal.json"
#: The file a balancing plan's directory holds beside plan.json: the request it was planned from.
BALANCE_FILE = "balance.json"
#: The goals a :class:`BalanceGoal` re-plans toward (a decommission's ``remove-brokers`` is a :class:`DrainGoal`).
ROUND_BALANCE_GOALS = tuple(g for g in BALANCE_GOALS if g != "remove-brokers") + ("offload",)


class Round(NamedTuple):
    """One look at the goal: what still breaks it, the moves planned for that now, and what cannot be planned."""

    left: list[TopicPartition]
    extra: ReassignmentPlan
    refused: dict[TopicPartition, str]


class GoalRounds(Protocol):
    """A goal a run plans rounds toward."""

    #: rounds planned after the plan's moves, at most
    max_rounds: int
    #: the kind of round, in words: "drain", "disk-removal"
    kind: str
    #: what keeps new replicas out while the run goes (one sentence, for the log of each round)
    keep_out: str
    #: the goal in words: "the drained broker(s) [5]", "the removed log dir(s) 2:/data/2"
    what: str
    #: what a partition left over does to the goal, after "N partition(s)": "still have a replica on the drained ..."
    breaks: str
    #: what an operator does when the rounds are spent (something keeps breaking the goal)
    advice: str

    def round(self, admin: ClusterAdmin, skip: Mapping[TopicPartition, str],
              touched: Set[TopicPartition] = frozenset()) -> Round:
        """What still breaks the goal in the cluster now, and the moves that mend it (none for ``skip``).
        ``touched``: the partitions whose planned moves the cluster invalidated during the run (dropped as gone,
        or stale: deleted and re-created, moved by someone else) and no round has planned since."""
        ...


class DrainGoal:
    """A decommission's drain: every partition of the covered topics off the drained brokers."""

    def __init__(self, spec: DrainSpec) -> None:
        self.spec = spec
        self.max_rounds = spec.max_rounds
        self.kind = "drain"
        self.keep_out = "Cordoning the brokers before the plan (Kafka 4.3+, KIP-1066) keeps new partitions off them"
        self.what = f"the drained broker(s) {list(spec.brokers)}"
        self.breaks = f"still have a replica on {self.what}"
        self.advice = ("Something keeps creating partitions there: cordon the brokers (Kafka 4.3+, KIP-1066), or stop "
                       "what creates topics, then run the drain again")

    def round(self, admin: ClusterAdmin, skip: Mapping[TopicPartition, str],
              touched: Set[TopicPartition] = frozenset()) -> Round:
        snap = admin.snapshot()
        left = [p.tp for p in leftovers(snap, self.spec)]
        if not left:
            return Round([], ReassignmentPlan(moves=()), {})
        extra, refused = drain_moves(snap, self.spec, cordoned=cordoned_brokers(admin, snap.broker_ids), skip=skip)
        return Round(left, extra, refused)


class DiskRemovalSpec(_Frozen):
    """What a disk removal empties, for the rounds after its plan: the request it was planned from (goal
    ``remove-disks``: the dirs, the disk cap, rack awareness), written to :data:`DISK_REMOVAL_FILE`."""

    request: PlanRequest
    max_rounds: int = Field(default=DEFAULT_MAX_ROUNDS, ge=0)


class DiskRemovalGoal:
    """A disk removal: no current replica left in the removed log dirs. A round reads every broker's log dirs and
    the partitions again, and plans the goal once more with the same request
    (:func:`~airflow_kafka_reassign.core.planner.log_dirs.plan_log_dirs`); the moves of the partitions still in the
    removed dirs are the round."""

    def __init__(self, spec: DiskRemovalSpec) -> None:
        if spec.request.goal != "remove-disks":
            raise ConfigurationError(f"a disk removal's rounds need goal remove-disks, not {spec.request.goal}")
        self.spec = spec
        self.max_rounds = spec.max_rounds
        self.kind = "disk-removal"
        self.keep_out = ("Cordoning the dirs before the plan (cordoned.log.dirs, Kafka 4.3+, KIP-1066) keeps new "
                         "replicas out of them")
        self.removals = tuple(spec.request.dir_removals())
        self.what = "the removed log dir(s) " + ", ".join(f"{b}:{d}" for b, d in self.removals)
        self.breaks = f"still have a replica in {self.what}"
        self.advice = ("Something keeps creating replicas there: cordon the dirs (cordoned.log.dirs, Kafka 4.3+, "
                       "KIP-1066), or stop what creates topics, then run the disk removal again")

    def round(self, admin: ClusterAdmin, skip: Mapping[TopicPartition, str],
              touched: Set[TopicPartition] = frozenset()) -> Round:
        table = LogDirTable.of(admin.log_dirs(None))
        left = sorted({TopicPartition(t, p) for b, path in self.removals
                       for d in [table.dir(b, path)] if d is not None for t, p, _ in d.replicas})
        if not left:
            return Round([], ReassignmentPlan(moves=()), {})
        snap = admin.snapshot(include_sizes=True)
        try:
            planned = plan_log_dirs(snap, table, self.spec.request).plan
        except ConfigurationError as e:
            return Round(left, ReassignmentPlan(moves=()), {tp: str(e) for tp in left})
        wanted = set(left) - set(skip)
        moves = tuple(m for m in planned.moves if m.tp in wanted)
        extra = planned.model_copy(update={"moves": moves})
        unplanned = {tp: "the planner moves nothing for it (no other dir of its broker has room?)"
                     for tp in wanted - {m.tp for m in moves}}
        return Round(left, extra, unplanned)


class BalanceSpec(_Frozen):
    """What a balancing plan aims at, for the rounds after its moves: the request it was planned from (goal
    ``rebalance``, ``add-brokers`` or ``offload``: the balance, the capacity, the cap, rack awareness), written to
    :data:`BALANCE_FILE`."""

    request: PlanRequest
    max_rounds: int = Field(default=DEFAULT_MAX_ROUNDS, ge=0)


class BalanceGoal:
    """A rebalance, a scale-out or an offload: the plan's request met on the cluster as it is now. A balancing plan
    meets its goal when its moves are done; the cluster breaks that only where it invalidated moves under the run: a
    topic deleted and re-created (its old moves dropped, its new partitions where the controller put them), a partition
    moved by someone else (its move stale). A round plans the topics of those partitions again with the plan's own
    request (:func:`~airflow_kafka_reassign.core.planner.pipeline.plan_reassignment`, ``topic_include`` narrowed to
    them; every other replica counts as it is), from a fresh snapshot with the cordons read again. A touched partition
    the new plan leaves where it is gets a move onto its current replicas (done at once): the goal needs nothing more
    of it, and its stale move no longer fails the run. Rounds never run on a plan whose moves all went as planned, so a
    balancing run does not chase its own tail (redpanda #15270): the planner judged that balance once."""

    def __init__(self, spec: BalanceSpec) -> None:
        if spec.request.goal not in ROUND_BALANCE_GOALS:
            raise ConfigurationError(f"a balancing plan's rounds need goal {' / '.join(ROUND_BALANCE_GOALS)}, not "
                                     f"{spec.request.goal}")
        self.spec = spec
        self.max_rounds = spec.max_rounds
        self.kind: str = spec.request.goal
        self.keep_out = ("Moves the cluster invalidates (a topic re-created, a partition moved by someone else) are "
                         "planned again toward the same balance")
        self.what = f"the {spec.request.goal} plan's balance"
        self.breaks = f"were changed under the run and still break {self.what}"
        self.advice = ("Something keeps changing these partitions while the run goes (another tool's reassignments, "
                       "topics re-created): stop it, then plan again from the current cluster")

    def round(self, admin: ClusterAdmin, skip: Mapping[TopicPartition, str],
              touched: Set[TopicPartition] = frozenset()) -> Round:
        from airflow_kafka_reassign.core.planner.pipeline import plan_reassignment  # the whole planner: on demand

        if not touched:
            return Round([], ReassignmentPlan(moves=()), {})
        request = self.spec.request
        snap = admin.snapshot(include_sizes=request.use_sizes or request.capacity is not None)
        present = {p.tp for p in snap.partitions}
        topics = sorted({tp.topic for tp in touched if tp in present})
        if not topics:  # deleted for good: nothing of them to balance
            return Round([], ReassignmentPlan(moves=()), {})
        # a scale-out's new brokers hold their share by now: what is left is the balance of these topics
        goal = {"goal": "rebalance", "brokers": ()} if request.goal == "add-brokers" else {}
        narrowed = request.model_copy(update={"topic_include": tuple(re.escape(t) for t in topics),
                                              "cordoned": tuple(sorted(cordoned_brokers(admin, snap.broker_ids))),
                                              **goal})
        try:
            planned = plan_reassignment(snap, narrowed).plan
        except ConfigurationError as e:
            return Round(sorted(touched & present), ReassignmentPlan(moves=()), {tp: str(e) for tp in touched
                                                                                  if tp in present})
        moves = [m for m in planned.moves if m.tp not in skip]
        moved = {m.tp for m in moves}
        replicas = {p.tp: p.replicas for p in snap.partitions}
        settled = [Move(topic=tp.topic, partition=tp.partition, current_replicas=replicas[tp],
                        target_replicas=replicas[tp])
                   for tp in sorted(touched) if tp in present and tp not in moved and tp not in skip]
        left = sorted(moved | {m.tp for m in settled})
        counts = {t.name: t.partition_count for t in snap.topics if t.name in topics and t.partition_count}
        extra = ReassignmentPlan(moves=tuple(moves) + tuple(settled), partition_counts=counts or None,
                                 topic_ids=snap.topic_ids(set(topics)))
        return Round(left, extra, {})


def read_disk_removal(plan_dir: Store | str) -> DiskRemovalSpec | None:
    """The disk removal a plan directory's ``disk-removal.json`` describes (``None``: not a disk removal's plan)."""
    data = as_store(plan_dir).read(DISK_REMOVAL_FILE)
    return DiskRemovalSpec.model_validate_json(data) if data is not None else None


def read_balance(plan_dir: Store | str) -> BalanceSpec | None:
    """The balancing request a plan directory's ``balance.json`` describes (``None``: not a balancing plan)."""
    data = as_store(plan_dir).read(BALANCE_FILE)
    return BalanceSpec.model_validate_json(data) if data is not None else None


def goal_spec(request: PlanRequest, max_rounds: int) -> tuple[str, str] | None:
    """What a goal-driven plan directory holds beside plan.json for its rounds, as ``(file name, JSON)``: a disk
    removal's or a balancing plan's request (a decommission's drain is written by
    :mod:`~airflow_kafka_reassign.core.maintenance.drain`); ``None`` for the other goals."""
    if request.goal == "remove-disks":
        return DISK_REMOVAL_FILE, DiskRemovalSpec(request=request, max_rounds=max_rounds).model_dump_json()
    if request.goal in ROUND_BALANCE_GOALS:
        return BALANCE_FILE, BalanceSpec(request=request, max_rounds=max_rounds).model_dump_json()
    return None


def read_goal(plan_dir: Store | str) -> GoalRounds | None:
    """The goal a plan directory's run plans rounds toward: its drain (``drain.json``), its disk removal
    (``disk-removal.json``) or its balance (``balance.json``); ``None`` for a plan with no goal."""
    from airflow_kafka_reassign.core.maintenance.drain import read_drain

    store = as_store(plan_dir)
    drain = read_drain(store)
    if drain is not None:
        return DrainGoal(drain)
    removal = read_disk_removal(store)
    if removal is not None:
        return DiskRemovalGoal(removal)
    balance = read_balance(store)
    return BalanceGoal(balance) if balance is not None else None
