"""A balancing plan owns its end state too (issue 36, goal rounds for rebalance / add-brokers / offload): a move the
cluster invalidated under the run (a topic re-created, a partition moved by someone else) is planned again toward the
same balance in the same run, not refused by name; a plan whose moves all went as planned takes no round. On the
in-memory fake."""

from __future__ import annotations

from collections import Counter

import pytest
from execution_helpers import fake

from airflow_kafka_reassign.core.execution import ExecutionConfig, run
from airflow_kafka_reassign.core.maintenance.rounds import (
    BALANCE_FILE,
    BalanceGoal,
    BalanceSpec,
    goal_spec,
    read_goal,
)
from airflow_kafka_reassign.core.planner.goals import PlanRequest
from airflow_kafka_reassign.core.planner.pipeline import plan_reassignment
from airflow_kafka_reassign.core.records.store import MemoryStore
from airflow_kafka_reassign.exceptions import ConfigurationError

CONFIG = ExecutionConfig(health_gate=False)
REQUEST = PlanRequest(goal="rebalance")


def skewed():
    """Six brokers (racks r1-r3), three topics of four partitions, all on brokers 1-3: a rebalance moves half."""
    layout = [[1, 2], [2, 3], [3, 1], [1, 2]]
    return fake(a=layout, b=[list(r) for r in layout], c=[list(r) for r in layout])


def counts(f) -> Counter:
    return Counter(b for replicas in f.replicas.values() for b in replicas)


def balanced(f) -> bool:
    per = counts(f)
    return max(per[b] for b in range(1, 7)) - min(per[b] for b in range(1, 7)) <= 1


def goal() -> BalanceGoal:
    return BalanceGoal(BalanceSpec(request=REQUEST))


def test_a_partition_moved_by_someone_else_is_planned_again_and_the_cluster_ends_balanced():
    f = skewed()
    plan = plan_reassignment(f.snapshot(), REQUEST).plan
    assert plan.moves and not balanced(f)
    victim = plan.moves[0].tp
    # someone else moves the partition first, onto the brokers the plan was filling (finished before the run)
    f.alter_reassignments({victim: [4, 5]})
    f.complete()
    f.alter_requests.clear()
    result = run(f, plan, CONFIG, state_dir=MemoryStore(), sleep=lambda s: f.complete(), settle_s=0, goal=goal())
    assert result.status.ok, result.summary()
    assert balanced(f) and all(len(r) == 2 for r in f.replicas.values())
    assert [e for e in result.cluster_events if e.startswith("round 1 of at most 5")]
    assert victim in result.drained_later


def test_the_same_stale_move_without_a_goal_is_refused_by_name():
    f = skewed()
    plan = plan_reassignment(f.snapshot(), REQUEST).plan
    victim = plan.moves[0].tp
    f.alter_reassignments({victim: [4, 5]})
    f.complete()
    result = run(f, plan, CONFIG, state_dir=MemoryStore(), sleep=lambda s: f.complete(), settle_s=0)
    assert victim in result.status.stale and not result.status.ok


def test_a_re_created_topic_is_balanced_again_in_a_round():
    f = skewed()
    plan = plan_reassignment(f.snapshot(), REQUEST).plan
    assert any(m.topic == "c" for m in plan.moves)
    f.delete_topic("c")
    f.create_topic("c", [[1, 2], [2, 3], [3, 1], [1, 2]])  # re-created where the old one was: the plan's moves are void
    result = run(f, plan, CONFIG, state_dir=MemoryStore(), sleep=lambda s: f.complete(), settle_s=0, goal=goal())
    assert result.status.ok, result.summary()
    assert any(e.startswith("topic c re-created") for e in result.cluster_events)
    assert {t.topic for t in result.drained_later} == {"c"}
    assert balanced(f)


def test_a_plan_whose_moves_all_went_as_planned_takes_no_round():
    f = skewed()
    plan = plan_reassignment(f.snapshot(), REQUEST).plan
    result = run(f, plan, CONFIG, state_dir=MemoryStore(), sleep=lambda s: f.complete(), settle_s=0, goal=goal())
    assert result.status.ok and result.drained_later == []
    assert not [e for e in result.cluster_events if e.startswith("round ")]


def test_a_deleted_topic_takes_no_round():
    f = skewed()
    plan = plan_reassignment(f.snapshot(), REQUEST).plan
    f.delete_topic("c")
    result = run(f, plan, CONFIG, state_dir=MemoryStore(), sleep=lambda s: f.complete(), settle_s=0, goal=goal())
    assert result.status.ok and result.drained_later == []
    assert {t.topic for t in result.gone} == {"c"}


def test_a_partition_the_new_plan_leaves_where_it_is_no_longer_fails_the_run():
    """Someone else did the plan's work on a partition, differently but as well: the round plans nothing for it and
    the stale move is settled (its partition needs nothing more), not refused."""
    f = skewed()
    plan = plan_reassignment(f.snapshot(), REQUEST).plan
    victim = plan.moves[0]
    f.alter_reassignments({victim.tp: list(reversed(victim.target_replicas))})  # the plan's brokers, another order
    f.complete()
    result = run(f, plan, CONFIG, state_dir=MemoryStore(), sleep=lambda s: f.complete(), settle_s=0, goal=goal())
    assert result.status.ok, result.summary()
    assert balanced(f) and victim not in result.status.stale


def test_the_plan_directory_says_a_balancing_goal_and_the_execution_reads_it():
    store = MemoryStore()
    name, text = goal_spec(REQUEST, 3)
    assert name == BALANCE_FILE
    store.write(name, text.encode())
    g = read_goal(store)
    assert isinstance(g, BalanceGoal) and g.max_rounds == 3 and g.spec.request == REQUEST
    assert goal_spec(PlanRequest(goal="add-brokers", brokers=(7,)), 5)[0] == BALANCE_FILE
    assert goal_spec(PlanRequest(goal="heal"), 5) is None


def test_a_balance_goal_refuses_a_goal_it_does_not_plan():
    with pytest.raises(ConfigurationError, match="not heal"):
        BalanceGoal(BalanceSpec(request=PlanRequest(goal="heal")))


def test_the_rounds_of_a_balancing_plan_are_bounded():
    """Something keeps moving the same partition away: the run stops at max_rounds naming it and what to do."""
    f = skewed()
    plan = plan_reassignment(f.snapshot(), REQUEST).plan
    victim = plan.moves[0].tp
    away = iter([[4, 5], [5, 6], [6, 4], [4, 5], [5, 6]] * 4)

    def sleep(_s):
        f.complete()
        f.alter_reassignments({victim: next(away)})  # another tool undoes every move of this partition
        f.complete()

    result = run(f, plan, CONFIG, state_dir=MemoryStore(), sleep=sleep, settle_s=0,
                 goal=BalanceGoal(BalanceSpec(request=REQUEST, max_rounds=2)))
    assert not result.status.ok
    assert result.drain_short and "after 2 rebalance round(s) (max_rounds=2)" in result.drain_short
    assert "another tool's reassignments" in result.drain_short
