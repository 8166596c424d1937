"""The order pending moves go out in (core/execution/batch.py ``ordered``, core/guards/health.py ``urgency``): the moves
that restore redundancy first, then the order chosen; "balanced" ends a skewed plan soonest under per-broker limits."""

from __future__ import annotations

import pytest
from execution_helpers import RACKS, mv, plan_of, tp

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, run, step
from airflow_kafka_reassign.core.execution.batch import ordered
from airflow_kafka_reassign.core.execution.schedule import Copy, Rates, simulate
from airflow_kafka_reassign.core.guards.health import (
    BELOW_MIN_ISR_LAST,
    NORMAL,
    RESTORES_MIN_ISR,
    RESTORES_MIN_ISR_ELR,
    RESTORES_REPLICA,
    below_min_isr,
    urgency,
)
from airflow_kafka_reassign.core.vocabulary.models import PartitionState
from airflow_kafka_reassign.testing import FakeClusterAdmin

SAFE = ExecutionOptions()


def quiet(f, plan, limits, options=SAFE):
    return step(f, plan, limits, options, settle_s=0, sleep=lambda s: None)


def state(replicas, isr, topic="t", p=0) -> PartitionState:
    return PartitionState(topic=topic, partition=p, replicas=tuple(replicas), isr=tuple(isr),
                          leader=isr[0] if isr else None)


# -- urgency --------------------------------------------------------------------------------------------


def test_a_move_restores_redundancy_when_it_replaces_a_missing_replica_or_adds_one():
    degraded = state((1, 2, 3), (1, 2))  # 3 out of the ISR
    assert urgency(mv("t", 0, (1, 2, 3), (1, 2, 4)), degraded, 2) == RESTORES_REPLICA
    assert urgency(mv("t", 0, (1, 2, 3), (4, 2, 3)), degraded, 2) == NORMAL  # moves an in-sync replica, keeps 3
    assert urgency(mv("t", 0, (1, 2, 3), (1, 2, 4)), state((1, 2, 3), (1, 2, 3)), 2) == NORMAL  # healthy
    # a replica on a broker that is down (the metadata may still list it in the ISR a moment)
    assert urgency(mv("t", 0, (1, 2, 3), (1, 2, 4)), state((1, 2, 3), (1, 2, 3)), 2, live_brokers={1, 2, 4}) \
        == RESTORES_REPLICA
    # below min ISR: acks=all writes are refused now
    assert urgency(mv("t", 0, (1, 2, 3), (1, 4, 5)), state((1, 2, 3), (1,)), 2) == RESTORES_MIN_ISR
    # ... with eligible leader replicas (KIP-966) still holding every committed record: after those without
    kept = state((1, 2, 3), (1,)).model_copy(update={"elr": (2,)})
    assert urgency(mv("t", 0, (1, 2, 3), (1, 4, 5)), kept, 2) == RESTORES_MIN_ISR_ELR > RESTORES_MIN_ISR
    # a partition created under-replicated (KIP-409) healed: an RF increase
    assert urgency(mv("t", 0, (1, 2), (1, 2, 3), allow_rf_change=True), state((1, 2), (1, 2)), 2) == RESTORES_REPLICA


def test_a_repair_that_removes_no_in_sync_replica_is_not_below_min_isr():
    moves = [mv("t", 0, (1, 2, 3), (1, 4, 5)), mv("t", 1, (1, 2, 3), (1, 4, 5))]
    isr = {tp("t", 0): (1,), tp("t", 1): (1, 2, 3)}
    # t-0 replaces 2 and 3, both out of the ISR: nothing in sync is taken; t-1 takes 2 and 3 from the ISR
    assert below_min_isr(moves, isr, {"t": 2}) == [tp("t", 1)]


def test_order_pending_puts_urgency_first_then_the_order_and_unknown_sizes_last():
    moves = [mv("t", i, (1, 2), (1, 3 + i % 3)) for i in range(5)]
    sizes = {tp("t", i): {1: s, 2: s} for i, s in enumerate([50, 10, 30, 40])}  # t-4: unknown
    index = {m.tp: i for i, m in enumerate(moves)}
    urgent = {tp("t", 3): RESTORES_REPLICA, tp("t", 0): BELOW_MIN_ISR_LAST}

    def names(order):
        return [m.partition for m in ordered(moves, ExecutionLimits(order=order), sizes, index, urgency=urgent)[0]]

    assert names("smallest-first") == [3, 1, 2, 4, 0]
    assert names("largest-first") == [3, 2, 1, 4, 0]
    assert names("plan") == [3, 1, 2, 4, 0]
    # balanced: broker 3 (t-0, t-3) is busiest but its moves are urgent/last; 4 has t-1 (10) and t-4 (?); 5 has t-2
    assert names("balanced") == [3, 2, 1, 4, 0]


# -- in the engine: redundancy first -------------------------------------------------------------------


def test_under_replicated_partitions_go_first_below_min_isr_before_the_others():
    f = FakeClusterAdmin.build(brokers=RACKS, topics={"big": [[1, 2]], "short": [[1, 6]], "under": [[2, 3, 6]]})
    f.topic_configs["short"] = {"min.insync.replicas": "2"}
    f.sizes = {tp("big", 0): {1: 10**9, 2: 10**9}, tp("short", 0): {1: 10, 6: 10}, tp("under", 0): {2: 20, 3: 20, 6: 20}}
    f.down.add(6)  # broker 6 died: short-0 is below min ISR, under-0 under-replicated; the plan drains 6
    plan = plan_of(mv("big", 0, (1, 2), (3, 4)), mv("under", 0, (2, 3, 6), (2, 3, 5)), mv("short", 0, (1, 6), (1, 4)))
    limits = ExecutionLimits(max_moves=1, order="largest-first")  # by size big-0 would go first
    s = quiet(f, plan, limits)
    assert s.paused is None and s.submitted == [tp("short", 0)]  # not "below min ISR (last)": it repairs
    assert s.urgency == {tp("short", 0): RESTORES_MIN_ISR, tp("under", 0): RESTORES_REPLICA}
    assert "2 restore redundancy (first)" in s.progress_line() and s.summary()["restoring"] == 2
    f.complete()
    assert quiet(f, plan, limits).submitted == [tp("under", 0)]
    f.complete()
    assert quiet(f, plan, limits).submitted == [tp("big", 0)]


# -- balanced: the plan ends soonest under the per-broker limits ---------------------------------------


def skewed() -> tuple[FakeClusterAdmin, list]:
    """Broker 1 receives four moves, brokers 2-5 one each, every move 10 bytes from its own source broker (11-18):
    the plan order has the small brokers first."""
    f = FakeClusterAdmin.build(brokers={b: None for b in [1, 2, 3, 4, 5, *range(11, 19)]},
                               topics={**{f"b{j}": [[10 + j]] for j in range(2, 6)},
                                       **{f"a{i}": [[15 + i]] for i in range(4)}})
    moves = [mv(f"b{j}", 0, (10 + j,), (j,)) for j in range(2, 6)] + [mv(f"a{i}", 0, (15 + i,), (1,)) for i in range(4)]
    f.sizes = {m.tp: {m.current_replicas[0]: 10} for m in moves}
    return f, moves


def test_balanced_ends_a_skewed_plan_in_fewer_simulated_rounds_than_plan_order():
    # max 2 moves at once, 1 per broker, each broker copies 1 byte/s: one move is one 10 s round. Plan order: b2 b3,
    # b4 b5, then a0 a1 a2 a3 one at a time (broker 1 takes one): 6 rounds. Balanced: broker 1's moves first, one
    # per round, each beside a small one: 4 rounds, broker 1 never idle (its 40 bytes are the lower bound)
    f, moves = skewed()
    index = {m.tp: i for i, m in enumerate(moves)}

    def end(order: str) -> float:
        in_order = ordered(moves, ExecutionLimits(order=order), f.sizes, index)[0]
        copies = [Copy(m.tp, 10, adding=m.adding_replicas, touched=(*m.adding_replicas, *m.removing_replicas))
                  for m in in_order]
        s = simulate(copies, Rates(default_in=1.0), max_moves=2, max_moves_per_broker=1)
        assert s is not None and s.exact
        return s.end_s

    assert end("plan") == pytest.approx(60.0) and end("largest-first") == pytest.approx(60.0)
    assert end("balanced") == pytest.approx(40.0)


@pytest.mark.parametrize(("order", "batches"), [("plan", [2, 2, 1, 1, 1, 1]), ("balanced", [2, 2, 2, 2])])
def test_the_engine_runs_the_skewed_plan_in_as_many_rounds(order, batches):
    # the same plan through run() on the fake: at each poll every move in flight completes (one round)
    f, moves = skewed()
    result = run(f, plan_of(*moves), ExecutionLimits(max_moves=2, max_moves_per_broker=1, order=order),
                 ExecutionOptions(), state_dir=None, sleep=lambda s: f.complete(), settle_s=0)
    assert result.status.ok and [len(targets) for targets, _ in f.alter_requests] == batches
