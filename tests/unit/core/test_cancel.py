"""Cancel and roll back (core/execution/cancel.py) against the in-memory FakeClusterAdmin, which reverts a cancel in the
order of the controller's merged list, as Kafka does ([1, 2, 3] -> [5, 4, 3] cancelled comes back [3, 1, 2])."""

from __future__ import annotations

import logging

import pytest
from execution_helpers import RACKS, fake, mv, plan_of, tp

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, ExecutionStatus, step
from airflow_kafka_reassign.core.execution.cancel import cancel, cancel_plan, live_rollback, rebase_rollback
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.testing import FakeClusterAdmin


def quiet_step(admin, plan) -> ExecutionStatus:
    return step(admin, plan, ExecutionLimits(), ExecutionOptions(), settle_s=0, sleep=lambda s: None)


def leader(f: FakeClusterAdmin, partition: TopicPartition) -> int | None:
    return {p.tp: p.leader for p in f.snapshot(topics=[partition.topic]).partitions}[partition]


# -- the order after a cancel ---------------------------------------------------------------------------------


def test_the_fake_reverts_a_cancel_in_the_controllers_order_as_kafka_does():
    """Seen on Kafka 4.3.1 (tests/integration/test_cancel_order.py): [1, 2, 3] -> [5, 4, 3] cancelled is
    [3, 1, 2], leader 1 throughout; a reorder to the same replicas completes at once."""
    f = fake(t=[[1, 2, 3]])
    f.alter_reassignments({tp("t", 0): [5, 4, 3]})
    assert leader(f, tp("t", 0)) == 1
    f.cancel_reassignments([tp("t", 0)])
    assert f.replicas[tp("t", 0)] == (3, 1, 2) and leader(f, tp("t", 0)) == 1
    f.alter_reassignments({tp("t", 0): [1, 2, 3]})
    assert f.replicas[tp("t", 0)] == (1, 2, 3) and not f.inflight


def test_a_cancelled_move_ends_on_its_original_replicas_in_their_original_order_and_leader(caplog):
    f = fake(t=[[1, 2, 3], [2, 3, 4], [1, 2]])
    plan = plan_of(mv("t", 0, (1, 2, 3), (5, 4, 3)), mv("t", 1, (2, 3, 4), (2, 3, 5)), mv("t", 2, (1, 2), (4, 5)))
    quiet_step(f, plan)
    with caplog.at_level(logging.INFO):
        res = cancel(f, plan, sleep=lambda s: None)
    assert res.cancelled == [tp("t", 0), tp("t", 1), tp("t", 2)] and res.ok
    assert [f.replicas[tp("t", p)] for p in range(3)] == [(1, 2, 3), (2, 3, 4), (1, 2)]
    assert [leader(f, tp("t", p)) for p in range(3)] == [1, 2, 1]
    # t-0 came back [3, 1, 2] and t-1 [2, 3, 4] (already in order); t-2 [1, 2]
    assert res.reordered == {tp("t", 0): ((1, 2, 3), (3, 1, 2))}
    assert res.order_changed == {} and res.leader_changed == {}
    assert f.alter_requests[-1] == ({tp("t", 0): (1, 2, 3)}, False)  # the reorder: the same replicas, no RF change
    assert "putting them back in their original order (same replicas, no data copied): t-0 [3, 1, 2]->[1, 2, 3]" \
        in caplog.text
    assert res.summary()["reordered"] == {"t-0": {"before": [1, 2, 3], "after": [3, 1, 2]}}


def test_a_reorder_that_is_refused_or_does_not_finish_is_reported_with_the_order_and_the_leader():
    class NoReorder(FakeClusterAdmin):
        def alter_reassignments(self, targets, **kw):
            out = super().alter_reassignments(targets, **kw)
            if self.inflight == {} and tp("t", 0) in targets:  # the reorder "went through" but nothing changed
                self.replicas[tp("t", 0)] = (3, 1, 2)
                self.leaders[tp("t", 0)] = 3
            return out

    f = NoReorder.build(brokers=RACKS, topics={"t": [[1, 2, 3]]})
    plan = plan_of(mv("t", 0, (1, 2, 3), (5, 4, 3)))
    quiet_step(f, plan)
    t = iter(range(1000))
    res = cancel(f, plan, sleep=lambda s: None, clock=lambda: next(t), settle_timeout_s=3)
    assert res.order_changed == {tp("t", 0): ((1, 2, 3), (3, 1, 2))} and res.reordered == {}
    assert res.leader_changed == {tp("t", 0): (1, 3)} and not res.ok
    [problem] = res.problems()
    assert "1 partition(s) left in another replica order (another preferred leader): t-0 [1, 2, 3] -> [3, 1, 2]" \
        in problem and "no data is copied" in problem
    assert res.problems(placement=False) == []


def test_without_the_order_in_the_plan_the_controllers_order_is_kept_and_said():
    f = fake(t=[[1, 2, 3]])
    plan = plan_of(mv("t", 0, None, (5, 4, 3)))
    quiet_step(f, plan)
    res = cancel(f, plan, sleep=lambda s: None)
    assert res.order_unknown == [tp("t", 0)] and res.reordered == {} and res.order_changed == {}
    assert f.replicas[tp("t", 0)] == (3, 1, 2) and res.summary()["order_unknown"] == 1


def test_restore_order_false_only_reports():
    f = fake(t=[[1, 2, 3]])
    plan = plan_of(mv("t", 0, (1, 2, 3), (5, 4, 3)))
    quiet_step(f, plan)
    res = cancel(f, plan, sleep=lambda s: None, restore_order=False)
    assert res.order_changed == {tp("t", 0): ((1, 2, 3), (3, 1, 2))} and f.replicas[tp("t", 0)] == (3, 1, 2)


def test_cancel_plan_restores_the_throttles_after_the_cancel(tmp_path):
    f = fake(t=[[1, 2, 3]])
    plan = plan_of(mv("t", 0, (1, 2, 3), (5, 4, 3)))
    step(f, plan, ExecutionLimits(), ExecutionOptions(throttle_bytes_per_sec=1000), state_dir=tmp_path, settle_s=0)
    assert f.broker_configs[5]
    res = cancel_plan(f, plan, state_dir=tmp_path, sleep=lambda s: None)
    assert res.throttles_restored and res.ok and f.broker_configs == {b: {} for b in RACKS}
    assert res.summary()["throttles_restored"] == "yes"


def test_live_rollback_starts_from_the_order_a_cancel_left():
    """The path the timeout message recommends: on_timeout="rollback" then which="rollback" must not refuse
    partitions a cancel left reordered (issue 15: 'bulk-0 (stale: replicas are [3, 1, 2] ...')."""
    f = fake(t=[[1, 2, 3], [1, 2, 3]])
    plan = plan_of(mv("t", 0, (1, 2, 3), (5, 4, 3)), mv("t", 1, (1, 2, 3), (4, 5, 6)))
    quiet_step(f, plan)
    f.complete([tp("t", 1)])
    cancel(f, plan, sleep=lambda s: None, restore_order=False)  # t-0 left as [3, 1, 2]
    rollback = live_rollback(f, plan.rollback(), plan)
    status = quiet_step(f, rollback)
    assert status.stale == {} and status.failed == {}
    assert status.submitted == [tp("t", 0), tp("t", 1)]
    f.complete()
    assert f.replicas == {tp("t", 0): (1, 2, 3), tp("t", 1): (1, 2, 3)}
    assert quiet_step(f, rollback).ok


def test_cancel_touches_only_the_plans_moves_unless_cancel_all():
    f = fake(t=[[1, 2], [2, 3]], other=[[3, 4]])
    plan = plan_of(mv("t", 0, (1, 2), (3, 4)), mv("t", 1, (2, 3), (4, 5)))
    quiet_step(f, plan)
    f.complete([tp("t", 1)])
    f.alter_reassignments({tp("other", 0): [4, 5]})
    res = cancel(f, plan, sleep=lambda s: None)
    assert res.cancelled == [tp("t", 0)] and res.rf_changed == {}
    assert f.replicas[tp("t", 0)] == (1, 2) and tp("other", 0) in f.inflight
    res = cancel(f, None, cancel_all=True, sleep=lambda s: None)
    assert res.cancelled == [tp("other", 0)] and not f.inflight
    with pytest.raises(ConfigurationError):
        cancel(f, None)


def test_cancel_reports_partitions_left_with_a_changed_rf():
    """KIP-455: a cancel stops a move; replicas that had joined may stay (RF higher than before)."""

    class HalfRevert(FakeClusterAdmin):
        def cancel_reassignments(self, partitions):
            out = super().cancel_reassignments(partitions)
            self.replicas[tp("t", 0)] = (1, 2, 3)  # 3 had joined the ISR and stayed
            return out

    f = HalfRevert.build(brokers=RACKS, topics={"t": [[1, 2]]})
    plan = plan_of(mv("t", 0, (1, 2), (3, 4)))
    quiet_step(f, plan)
    t = iter(range(100))
    res = cancel(f, plan, sleep=lambda s: None, clock=lambda: next(t), settle_timeout_s=3)
    assert res.rf_changed == {tp("t", 0): ((1, 2), (1, 2, 3))}
    assert res.summary()["rf_changed"] == {"t-0": {"before": [1, 2], "after": [1, 2, 3]}}


def test_cancel_dry_run_cancels_nothing(caplog):
    f = fake(t=[[1, 2]])
    plan = plan_of(mv("t", 0, (1, 2), (3, 4)))
    quiet_step(f, plan)
    with caplog.at_level(logging.INFO):
        res = cancel(f, plan, dry_run=True)
    assert res.cancelled == [tp("t", 0)] and tp("t", 0) in f.inflight
    assert "DRY RUN: would cancel 1" in caplog.text


# -- rollback after a cancel ------------------------------------------------------------------------


def test_rebase_rollback_starts_each_move_from_where_the_cancel_left_it():

    def mv(p, cur, tgt, **kw):
        return Move(topic="t", partition=p, current_replicas=cur, target_replicas=tgt, **kw)

    plan = ReassignmentPlan(moves=(mv(0, (1, 2), (3, 2)), mv(1, (2, 3), (4, 5)), mv(2, (1, 2), (4, 2)),
                                   mv(3, (1, 2), (3, 2)), mv(4, (1, 2), (3, 4))))
    live = {
        tp("t", 0): (2, 1),      # cancelled: original set, the controller's order (another preferred leader)
        tp("t", 1): (4, 5),      # finished: on the plan's target
        tp("t", 2): (1, 2),      # cancelled: exactly as before
        tp("t", 3): (3, 2, 1),   # cancelled after broker 3 joined: RF 3 (KIP-455)
        tp("t", 4): (5, 1),      # someone else moved it
    }
    out = {m.partition: m for m in rebase_rollback(plan.rollback(), plan, live).moves}
    assert set(out) == {0, 1, 2, 3, 4}
    assert out[2].current_replicas == out[2].target_replicas == (1, 2)  # already back: done, nothing sent
    assert (out[0].current_replicas, out[0].target_replicas, out[0].allow_rf_change) == ((2, 1), (1, 2), False)
    assert (out[1].current_replicas, out[1].target_replicas) == ((4, 5), (2, 3))
    assert (out[3].current_replicas, out[3].target_replicas, out[3].allow_rf_change) == ((3, 2, 1), (1, 2), True)
    assert out[4].current_replicas == (3, 4)  # expected as planned: the execution refuses it as stale


def test_rebase_rollback_keeps_the_log_dirs_a_rollback_pins_its_replicas_back_in():
    """A disk removal's replica sent to another broker and cancelled back in the controller's order: the rebased
    rollback move still pins broker 1's replica back in the log dir it left."""
    d2 = "/kafka/1/data-2"
    plan = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 2),
                                        current_log_dirs=(d2, "any")),))
    rolled = rebase_rollback(plan.rollback(), plan, {tp("t", 0): (2, 1)}).moves[0]
    assert (rolled.current_replicas, rolled.target_replicas, rolled.log_dirs) == ((2, 1), (1, 2), (d2, "any"))
