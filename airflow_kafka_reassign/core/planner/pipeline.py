"""The whole planner on one machine: prepare, global step, per-topic steps, leader fix-up.

The Spark job runs the same functions, distributing :func:`plan_topic` over topics; this
module is the single-process reference (CLI ``metrics``, tests, small clusters).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from airflow_kafka_reassign.core.models import ClusterSnapshot, ReassignmentPlan
from airflow_kafka_reassign.core.planner.goals import PlanRequest, PlanResult, Scope, prepare
from airflow_kafka_reassign.core.planner.leaders import balance_leaders, fewest_leader_changes
from airflow_kafka_reassign.core.planner.lower_bound import replica_moves_lower_bound
from airflow_kafka_reassign.core.planner.metrics import assignment_metrics, partition_size, target_of
from airflow_kafka_reassign.core.planner.quotas import GROUP_REPLICAS, QuotaPlan, compute_quotas
from airflow_kafka_reassign.core.planner.topic import plan_topic
from airflow_kafka_reassign.core.planner.types import TopicMove, TopicParams, TopicPartitions


def plan_topics(
    scope: Scope,
    *,
    use_sizes: bool = False,
    max_leader_spread: int = 2,
    max_topic_spread: int = 2,
    leaders: bool = True,
    group_replicas: int = GROUP_REPLICAS,
) -> tuple[list[TopicMove], list[str], QuotaPlan]:
    """Global step, every per-topic step, then the leader fix-up, on plain data: the moves,
    the global step's warnings and its :class:`~.quotas.QuotaPlan` (quotas, balance floor)."""
    layout = scope.layout
    loads = [t.load(layout) for t in scope.topics]
    quota_plan = compute_quotas(
        loads, layout, scope.fixed_load, max_topic_spread=max_topic_spread, group_replicas=group_replicas
    )
    warnings = list(quota_plan.warnings)
    by_topic: list[list[TopicMove]] = []
    for t in scope.topics:
        params = TopicParams(balance=t.balance, fix_racks=t.balance, use_sizes=use_sizes)
        by_topic.append(plan_topic(t, quota_plan.quotas[t.topic], layout, params))
    if scope.balance and leaders:
        by_topic = fix_leaders(scope.topics, by_topic, scope, max_leader_spread)
    return [m for moves in by_topic for m in moves], warnings, quota_plan


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
    scope = prepare(snapshot, request)
    layout = scope.layout
    moves, warnings, quota_plan = plan_topics(
        scope,
        use_sizes=request.use_sizes,
        max_leader_spread=request.max_leader_spread,
        max_topic_spread=request.max_topic_spread,
        leaders=request.balance_leaders,
        group_replicas=request.quota_group_replicas,
    )
    moves.sort(key=lambda m: (m.topic, m.partition))
    plan = ReassignmentPlan.model_construct(moves=tuple(m.to_move() for m in moves),
                                            partition_counts=snapshot.partition_counts({m.topic for m in moves}))

    rack_of = scope.broker_racks
    balanced = {t.topic for t in scope.topics if t.balance}
    before = assignment_metrics(_rows(snapshot, None), layout.brokers, rack_of, topics=balanced)
    after = assignment_metrics(
        _rows(snapshot, {(m.topic, m.partition): m.target_replicas for m in moves}),
        layout.brokers,
        rack_of,
        topics=balanced,
    )
    bound = replica_moves_lower_bound(
        scope.topics,
        layout,
        final_counts(scope.topics, moves, layout.brokers),
        balance_brokers=scope.balance,
        fixed_load=scope.fixed_load,
        fix_racks=scope.balance,
    )
    original_leaders: dict[int, int] = {}
    for p in snapshot.partitions:
        b = target_of(p)[0]
        original_leaders[b] = original_leaders.get(b, 0) + 1
    leader_bound = (
        fewest_leader_changes(original_leaders, layout.brokers, layout.removed, request.max_leader_spread)
        if scope.balance and request.balance_leaders
        else 0
    )
    replica_moves = sum(m.replica_moves for m in moves)
    has_sizes = any(t.sizes is not None for t in scope.topics)
    warnings = [*scope.warnings, *warnings]
    if after.rack_violations and scope.balance:
        warnings.append(f"{after.rack_violations} partition(s) stay spread over fewer than min(RF, racks) racks")
    if scope.balance and request.balance_leaders and after.leader_max_min > request.max_leader_spread:
        warnings.append(
            f"preferred leaders stay {after.leader_max_min} apart (max-min), more than {request.max_leader_spread}: "
            "partitions left alone or replica sets leave no better order"
        )
    return PlanResult(
        request=request,
        plan=plan,
        lower_bound=bound.moves,
        lower_bound_parts=bound.as_dict(),
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
    )
