"""The whole planner on one machine: prepare, global step, per-topic steps, leader fix-up.

The Spark job runs the same functions, distributing :func:`plan_topic` over topics; this
module is the single-process reference (CLI ``metrics``, tests, small clusters).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from airflow_kafka_reassign.core.planner.disk import (
    DiskBounds,
    DiskGoal,
    DiskInput,
    DiskOutcome,
    balance_disk_input,
    check_disk_goal,
    disk_bounds,
    disk_input,
)
from airflow_kafka_reassign.core.planner.goals import (
    BALANCE_GOALS,
    LOG_DIR_GOALS,
    DiskReport,
    PlanRequest,
    PlanResult,
    Scope,
    prepare,
)
from airflow_kafka_reassign.core.planner.ingress import (
    IngressGoal,
    IngressOutcome,
    IngressReport,
    IngressStep,
    ingress_goal,
    ingress_min_out,
    rate_per_broker,
    tiered_report,
)
from airflow_kafka_reassign.core.planner.leaders import balance_leaders, fewest_leader_changes
from airflow_kafka_reassign.core.planner.lower_bound import replica_moves_lower_bound
from airflow_kafka_reassign.core.planner.metrics import BalanceMetrics, assignment_metrics, partition_size, target_of
from airflow_kafka_reassign.core.planner.quotas import GROUP_REPLICAS, QuotaPlan, compute_quotas
from airflow_kafka_reassign.core.planner.topic import plan_topic
from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicMove, TopicParams, TopicPartitions
from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot, ReassignmentPlan


def plan_topics(
    scope: Scope,
    *,
    use_sizes: bool = False,
    max_leader_spread: int = 2,
    max_topic_spread: int = 2,
    leaders: bool = True,
    group_replicas: int = GROUP_REPLICAS,
    disk: DiskGoal | None = None,
    disk_outcome: list[DiskRun] | None = None,
    ingress: tuple[IngressGoal, ClusterSnapshot] | None = None,
    ingress_outcome: list[IngressOutcome] | None = None,
) -> tuple[list[TopicMove], list[str], QuotaPlan]:
    """Global step, every per-topic step, the disk step (with ``disk``), the bytes-in step (with
    ``ingress``: its goal and the snapshot whose rates it balances), then the leader fix-up, on plain
    data: the moves, the global step's warnings and its :class:`~.quotas.QuotaPlan` (quotas, balance
    floor). The disk step's :class:`DiskRun` and the bytes-in step's outcome are appended to
    ``disk_outcome`` / ``ingress_outcome`` when given."""
    layout = scope.layout
    if disk is not None:
        use_sizes = True
    loads = [t.load(layout) for t in scope.topics]
    quota_plan = compute_quotas(
        loads, layout, scope.fixed_load, max_topic_spread=max_topic_spread, group_replicas=group_replicas
    )
    warnings = list(quota_plan.warnings)
    # per-topic balance ranks below disk balance: where the disk step may spread topics freely,
    # the count steps only fix racks and empty removed brokers, and the disk step balances counts
    counts_in_disk = disk is not None and disk.balance_counts

    def per_topic(balance: bool) -> list[list[TopicMove]]:
        return [
            plan_topic(t, quota_plan.quotas[t.topic], layout,
                       TopicParams(balance=t.balance and balance, fix_racks=t.balance, use_sizes=use_sizes))
            for t in scope.topics
        ]

    by_topic = per_topic(not counts_in_disk)
    if disk is not None:
        run = disk_step(scope, by_topic, disk)
        if run.outcome.counts_missed(disk, quota_plan.floor):
            # racks kept the disk step from evening out the counts: the per-topic steps balance them
            disk = replace(disk, balance_counts=False)
            by_topic = per_topic(True)
            run = disk_step(scope, by_topic, disk)
        warnings.extend(run.outcome.warnings)
        if disk_outcome is not None:
            disk_outcome.append(run)
    if ingress is not None:
        flow = ingress_step(scope, by_topic, *ingress)
        warnings.extend(flow.warnings)
        if ingress_outcome is not None:
            ingress_outcome.append(flow)
    if scope.balance and leaders:
        by_topic = fix_leaders(scope.topics, by_topic, scope, max_leader_spread)
    return [m for moves in by_topic for m in moves], warnings, quota_plan


@dataclass
class DiskRun:
    """The disk step's input (the count steps' result), what it changed, and the count steps'
    replicas per broker of each balanced topic (the replica-moves bound's counts)."""

    input: DiskInput
    outcome: DiskOutcome
    count_finals: dict[str, dict[int, int]]


def disk_step(scope: Scope, by_topic: list[list[TopicMove]], disk: DiskGoal) -> DiskRun:
    """Apply :func:`~.disk.balance_disk` to the per-topic results (``by_topic`` updated in place)."""
    current: list[list[tuple[int, ...]]] = []
    for t, moves in zip(scope.topics, by_topic, strict=True):
        moved = {m.partition: m.target_replicas for m in moves}
        current.append([moved.get(p, reps) for p, reps in zip(t.partitions, t.replicas, strict=True)])
    counts = final_counts(scope.topics, [m for moves in by_topic for m in moves], scope.layout.brokers)
    inp = disk_input(scope.topics, current)
    outcome = balance_disk_input(inp, scope.layout, scope.fixed_bytes, scope.fixed_load, disk)
    apply_changes(scope, by_topic, outcome.changed)
    return DiskRun(inp, outcome, counts)


def ingress_step(scope: Scope, by_topic: list[list[TopicMove]], goal: IngressGoal,
                 snapshot: ClusterSnapshot) -> IngressOutcome:
    """Apply :class:`~.ingress.IngressStep` to the results so far (``by_topic`` updated in place),
    with the rates of ``snapshot``'s partitions; partitions the plan leaves alone count as fixed load."""
    rate = {(p.topic, p.partition): p.bytes_in_per_s or 0.0 for p in snapshot.partitions}
    current: list[list[tuple[int, ...]]] = []
    rates: list[list[float]] = []
    planned: set[tuple[str, int]] = set()
    for t, moves in zip(scope.topics, by_topic, strict=True):
        moved = {m.partition: m.target_replicas for m in moves}
        current.append([moved.get(p, reps) for p, reps in zip(t.partitions, t.replicas, strict=True)])
        rates.append([rate[(t.topic, p)] for p in t.partitions])
        planned.update((t.topic, p) for p in t.partitions)
    live = set(scope.layout.brokers)
    fixed: dict[int, float] = {}
    for p in snapshot.partitions:
        if p.bytes_in_per_s and (p.topic, p.partition) not in planned:
            for b in target_of(p):
                if b in live:
                    fixed[b] = fixed.get(b, 0.0) + p.bytes_in_per_s
    outcome = IngressStep(scope.topics, current, rates, scope.layout, scope.fixed_bytes, scope.fixed_load,
                          fixed, goal).run()
    apply_changes(scope, by_topic, outcome.changed)
    return outcome


def apply_changes(scope: Scope, by_topic: list[list[TopicMove]], changed: dict[tuple[int, int], tuple[int, ...]]) -> None:
    """Set the new replicas of ``changed`` ((topic index, partition index) -> replicas) in ``by_topic``."""
    by_ti: dict[int, dict[int, tuple[int, ...]]] = {}
    for (ti, pi), reps in changed.items():
        by_ti.setdefault(ti, {})[pi] = reps
    for ti, changes in by_ti.items():
        t = scope.topics[ti]
        moves = by_topic[ti]
        index = {m.partition: k for k, m in enumerate(moves)}
        for pi, reps in changes.items():
            p = t.partitions[pi]
            k = index.get(p)
            if k is not None:
                moves[k] = moves[k]._replace(target_replicas=reps)
            else:
                size = t.sizes[pi] if t.sizes else 0
                moves.append(TopicMove(t.topic, p, t.replicas[pi], reps, size))
        moves[:] = [m for m in moves if m.target_replicas != m.current_replicas]
        moves.sort(key=lambda m: m.partition)


def disk_goal(snapshot: ClusterSnapshot, request: PlanRequest, scope: Scope) -> DiskGoal | None:
    """The :class:`~.disk.DiskGoal` of ``request`` (``None`` without a capacity document); raises
    :class:`~airflow_kafka_reassign.exceptions.ConfigurationError` naming the broker or the
    numbers when the document does not fit the cluster or no plan can meet the cap."""
    total = sum((partition_size(p.replica_sizes) or 0) * len(target_of(p)) for p in snapshot.partitions)
    has_sizes = any(p.replica_sizes for p in snapshot.partitions)
    return make_disk_goal(request, {b.id: b.rack for b in snapshot.brokers}, scope.layout, total, has_sizes)


def make_disk_goal(
    request: PlanRequest, racks: Mapping[int, str | None], layout: BrokerLayout, total: int, has_sizes: bool
) -> DiskGoal | None:
    """:func:`disk_goal` from the brokers' racks (names), the replicas' total bytes and whether
    the snapshot has sizes (what the Spark job's driver knows after its first stage)."""
    if request.capacity is None:
        return None
    from airflow_kafka_reassign.exceptions import ConfigurationError

    caps = request.capacity.resolve(racks)
    if not has_sizes:
        raise ConfigurationError(
            "a capacity document needs replica sizes in the snapshot; take it with sizes "
            "(use_sizes=True, or snapshot --sizes)"
        )
    counts_in_disk = request.disk_topic_spread is None and request.goal != "offload"
    goal = DiskGoal(
        capacity={b: caps[b].disk for b in layout.brokers},
        cap=request.disk_cap,
        tolerance=request.disk_tolerance,
        offload_threshold=(request.offload_threshold or request.disk_cap) if request.goal == "offload" else None,
        count_spread=2,
        topic_spread=request.disk_topic_spread if request.disk_topic_spread is not None else 10**9,
        balance_counts=counts_in_disk,
    )
    check_disk_goal(goal, total, layout)
    return goal


def fix_leaders(
    topics: Sequence[TopicPartitions], by_topic: Sequence[list[TopicMove]], scope: Scope, spread: int
) -> list[list[TopicMove]]:
    """Apply :func:`balance_leaders` to the per-topic results; returns moves per topic."""
    replicas: list[tuple[int, ...]] = []
    original: list[int] = []
    movable: list[bool] = []
    where: list[tuple[int, int]] = []
    fixed = dict(scope.fixed_leaders)
    for ti, (t, moves) in enumerate(zip(topics, by_topic, strict=True)):
        moved = {m.partition: m.target_replicas for m in moves}
        frozen = t.frozen or [False] * len(t.partitions)
        for pi, (p, reps) in enumerate(zip(t.partitions, t.replicas, strict=True)):
            final = moved.get(p, reps)
            if not t.balance:
                fixed[final[0]] = fixed.get(final[0], 0) + 1
                continue
            replicas.append(final)
            original.append(reps[0])
            movable.append(not frozen[pi])
            where.append((ti, pi))
    changes = balance_leaders(replicas, original, scope.layout.brokers, fixed, movable, spread=spread)
    out = [list(m) for m in by_topic]
    index = [{m.partition: k for k, m in enumerate(moves)} for moves in out]
    for i, reps in sorted(changes.items()):
        ti, pi = where[i]
        t = topics[ti]
        p = t.partitions[pi]
        k = index[ti].get(p)
        if k is not None:
            out[ti][k] = out[ti][k]._replace(target_replicas=reps)
        else:
            size = t.sizes[pi] if t.sizes else 0
            out[ti].append(TopicMove(t.topic, p, t.replicas[pi], reps, size))
    for moves in out:
        moves.sort(key=lambda m: m.partition)
    return out


def _rows(
    snapshot: ClusterSnapshot, moved: dict[tuple[str, int], tuple[int, ...]] | None
) -> Iterable[tuple[str, Sequence[int], int, int | None]]:
    for p in snapshot.partitions:
        target = target_of(p)
        reps = moved.get((p.topic, p.partition), target) if moved else target
        yield p.topic, reps, len(target), partition_size(p.replica_sizes)


def final_counts(
    topics: Sequence[TopicPartitions], moves: Sequence[TopicMove], brokers: Sequence[int]
) -> dict[str, dict[int, int]]:
    """Replicas per live broker of each balanced topic once ``moves`` are done."""
    live = set(brokers)
    moved = {(m.topic, m.partition): m.target_replicas for m in moves}
    out: dict[str, dict[int, int]] = {}
    for t in topics:
        if not t.balance:
            continue
        counts: dict[int, int] = {}
        for p, reps in zip(t.partitions, t.replicas, strict=True):
            for b in moved.get((t.topic, p), reps):
                if b in live:
                    counts[b] = counts.get(b, 0) + 1
        out[t.topic] = counts
    return out


def plan_reassignment(snapshot: ClusterSnapshot, request: PlanRequest | None = None) -> PlanResult:
    """Plan ``request`` (default: rebalance) for ``snapshot``; see :class:`PlanRequest`.

    Raises :class:`~airflow_kafka_reassign.exceptions.ConfigurationError` on input that cannot
    give a sound plan, before planning anything.
    """
    request = request or PlanRequest()
    if request.goal in LOG_DIR_GOALS:
        from airflow_kafka_reassign.exceptions import ConfigurationError

        raise ConfigurationError(f"goal {request.goal} plans from the brokers' log dirs too: call "
                                 "core.planner.log_dirs.plan_log_dirs(snapshot, LogDirTable, request)")
    scope = prepare(snapshot, request)
    layout = scope.layout
    disk = disk_goal(snapshot, request, scope)
    outcomes: list[DiskRun] = []
    flow_goal, flow_notes = ingress_of(snapshot, request, scope, disk)
    flows: list[IngressOutcome] = []
    moves, warnings, quota_plan = plan_topics(
        scope,
        use_sizes=request.use_sizes,
        max_leader_spread=request.max_leader_spread,
        max_topic_spread=request.max_topic_spread,
        leaders=request.balance_leaders,
        group_replicas=request.quota_group_replicas,
        disk=disk,
        disk_outcome=outcomes,
        ingress=(flow_goal, snapshot) if flow_goal is not None else None,
        ingress_outcome=flows,
    )
    warnings = [*flow_notes, *warnings]
    moves.sort(key=lambda m: (m.topic, m.partition))
    moved_topics = {m.topic for m in moves}
    plan = ReassignmentPlan.model_construct(moves=tuple(m.to_move() for m in moves),
                                            partition_counts=snapshot.partition_counts(moved_topics),
                                            topic_ids=snapshot.topic_ids(moved_topics))

    rack_of = scope.broker_racks
    balanced = {t.topic for t in scope.topics if t.balance}
    before = assignment_metrics(_rows(snapshot, None), layout.brokers, rack_of, topics=balanced)
    after = assignment_metrics(
        _rows(snapshot, {(m.topic, m.partition): m.target_replicas for m in moves}),
        layout.brokers,
        rack_of,
        topics=balanced,
    )
    # the count part of the bound for the balance the count steps reached (the disk step's own
    # count window is in the disk part): what the Spark job's per-topic stages can compute
    counts_after = outcomes[0].count_finals if outcomes else final_counts(scope.topics, moves, layout.brokers)
    bound = replica_moves_lower_bound(
        scope.topics,
        layout,
        counts_after,
        balance_brokers=scope.balance,
        fixed_load=scope.fixed_load,
        fix_racks=scope.balance,
    )
    original_leaders: dict[int, int] = {}
    for p in snapshot.partitions:
        b = target_of(p)[0]
        original_leaders[b] = original_leaders.get(b, 0) + 1
    leader_bound = leader_changes_bound(original_leaders, layout, request, balance=scope.balance)
    replica_moves = sum(m.replica_moves for m in moves)
    has_sizes = any(t.sizes is not None for t in scope.topics)
    parts = bound.as_dict()
    moves_bound = bound.moves
    bytes_bound: int | None = None
    report: DiskReport | None = None
    moved = {(m.topic, m.partition): m.target_replicas for m in moves}
    flow = ingress_report(snapshot, moved, layout.brokers, request, flow_goal, flows)
    tiered = tiered_report(snapshot, moves)
    if disk is not None:
        extra = None
        if flow_goal is not None and flow is not None:
            extra = ingress_min_out(snapshot, flow.rate_before, flow.rate_after, flow_goal,
                                    include_in_flight=request.include_in_flight)
        report, bytes_bound, disk_moves = disk_report(scope, outcomes[0], moves, disk, request, extra)
        if tiered is not None:
            report = report.model_copy(update={"tiered_topics": tiered.topics})
        parts["disk"] = disk_moves
        moves_bound = max(moves_bound, disk_moves)
    warnings = [*scope.warnings, *warnings, *balance_warnings(after, request, balance=scope.balance)]
    return PlanResult(
        request=request,
        plan=plan,
        lower_bound=moves_bound,
        lower_bound_parts=parts,
        replica_moves=replica_moves,
        bytes_to_move=sum(m.size * m.replica_moves for m in moves) if has_sizes else None,
        leader_changes=sum(1 for m in moves if m.leader_changes),
        leader_changes_lower_bound=leader_bound,
        before=before,
        after=after,
        excluded_in_flight=tuple(scope.excluded_in_flight),
        warnings=tuple(warnings),
        replica_max_min_floor=quota_plan.floor,
        replica_balance_bounded_by=quota_plan.bounded_by,
        topics_uneven_for_racks=quota_plan.relaxed_topics,
        bytes_lower_bound=bytes_bound,
        disk=report,
        ingress=flow,
        tiered=tiered,
    )


def leader_changes_bound(original_leaders: Mapping[int, int], layout: BrokerLayout, request: PlanRequest, *,
                         balance: bool) -> int:
    """The fewest preferred-leader changes the plan could make (0 when it does not balance leaders): the
    in-memory planner and the Spark driver state it the same way."""
    if not (balance and request.balance_leaders):
        return 0
    return fewest_leader_changes(dict(original_leaders), layout.brokers, layout.removed, request.max_leader_spread)


def balance_warnings(after: BalanceMetrics, request: PlanRequest, *, balance: bool) -> list[str]:
    """What the plan leaves unbalanced, in words: racks spread too thin, preferred leaders too far apart."""
    out = []
    if after.rack_violations and balance:
        out.append(f"{after.rack_violations} partition(s) stay spread over fewer than min(RF, racks) racks")
    if balance and request.balance_leaders and after.leader_max_min > request.max_leader_spread:
        out.append(
            f"preferred leaders stay {after.leader_max_min} apart (max-min), more than {request.max_leader_spread}: "
            "partitions left alone or replica sets leave no better order"
        )
    return out


def disk_report(
    scope: Scope, run: DiskRun, moves: Sequence[TopicMove], disk: DiskGoal, request: PlanRequest,
    extra_min_out: Mapping[int, int] | None = None,
) -> tuple[DiskReport, int, int]:
    """The disk report, the bytes lower bound and the disk part of the replica-moves bound.
    ``extra_min_out``: bytes that must leave a broker for another goal (bytes in), per broker."""
    moved = {(m.topic, m.partition): m.target_replicas for m in moves}
    final = [moved.get((t.topic, p), reps) for t in scope.topics for p, reps in zip(t.partitions, t.replicas, strict=True)]
    bounds = disk_bounds(run.input, final, disk, scope.layout.brokers, scope.fixed_bytes, scope.fixed_load,
                         extra_min_out)
    return disk_report_of(bounds, disk, request), bounds.bytes_bound, bounds.moves_bound


def disk_report_of(bounds: DiskBounds, disk: DiskGoal, request: PlanRequest) -> DiskReport:
    """The :class:`~.goals.DiskReport` of :func:`~.disk.disk_bounds`' result."""
    return DiskReport(
        goal=request.goal,
        capacity=dict(disk.capacity),
        bytes_before=bounds.before,
        bytes_after=bounds.after,
        disk_cap=disk.cap,
        tolerance=disk.tolerance,
        offload_threshold=disk.offload_threshold,
        mean_share=sum(bounds.after.values()) / sum(disk.capacity.values()),
    )


def ingress_of(
    snapshot: ClusterSnapshot, request: PlanRequest, scope: Scope, disk: DiskGoal | None
) -> tuple[IngressGoal | None, list[str]]:
    """The bytes-in goal (``None``: the step does not run) and why not, when a user may expect it."""
    if disk is None or request.capacity is None or request.goal not in BALANCE_GOALS:
        return None, []
    caps = request.capacity.resolve({b.id: b.rack for b in snapshot.brokers})
    goal = ingress_goal({b: c.network_in for b, c in caps.items()}, scope.layout, disk, request.ingress_tolerance)
    if goal is None:
        return None, []
    if not any(p.bytes_in_per_s is not None for p in snapshot.partitions):
        return None, ["bytes in not balanced: the capacity document gives network_in but the snapshot has no "
                      "bytes-in rates (take it with sample_window_s > 0, or snapshot --sample-window-s)"]
    return goal, []


def ingress_report(
    snapshot: ClusterSnapshot, moved: Mapping[tuple[str, int], tuple[int, ...]], live: Sequence[int],
    request: PlanRequest, goal: IngressGoal | None, flows: Sequence[IngressOutcome],
) -> IngressReport | None:
    """Bytes in per broker before and after the plan, when the snapshot has rates (``None`` otherwise)."""
    if snapshot.bytes_in is None and not any(p.bytes_in_per_s is not None for p in snapshot.partitions):
        return None
    return IngressReport(
        capacity=dict(goal.capacity) if goal is not None else {},
        rate_before=rate_per_broker(snapshot),
        rate_after=rate_per_broker(snapshot, moved, live),
        tolerance=request.ingress_tolerance,
        balanced=goal is not None,
        moves=sum(f.moves for f in flows),
        swaps=sum(f.swaps for f in flows),
        stopped_by={b: k for f in flows for b, k in f.stopped_by.items()},
        window_s=snapshot.bytes_in.window_s if snapshot.bytes_in is not None else None,
    )
