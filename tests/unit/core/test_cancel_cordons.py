"""A cancel of a drain with cordons in play (core/execution/cancel.py), on the fake, which refuses any reassignment
naming a fully cordoned broker as Kafka 4.4.0 does (a reorder of the replicas already there included; seen on the
sandbox) and reverts a cancel in the controller's order ([1, 2, 3] -> [5, 2, 3] cancelled comes back [2, 3, 1]).

Issue 36: a timeout with on_timeout='cancel' during a decommission of broker 1 left two partitions as [3, 1, 2]: the
reorder to [1, 2, 3] was sent while broker 1 was still cordoned, Kafka refused it, and the cordons came back a moment
later. The cancel of a whole run restores the cordons first, then reorders; a cancel of the session (on_deadline /
on_unhealthy "cancel") keeps the cordons (the drain goes on) and leaves the order to the cancel of the whole run."""

from __future__ import annotations

from execution_helpers import mv, plan_of, tp

from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession, cancel_then_roll_back
from airflow_kafka_reassign.core.execution.cancel import ORDER_HELD, read_held
from airflow_kafka_reassign.core.maintenance.cordon import CORDONED_LOG_DIRS, apply_cordons, decommission_cordons
from airflow_kafka_reassign.core.records.journal import read_journal
from airflow_kafka_reassign.core.records.store import MemoryStore
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.testing import FakeClusterAdmin

RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"}
ORIGINAL = [(1, 2, 3), (1, 3, 4), (2, 1, 3), (4, 5, 2)]
#: broker 1 drained: every one of its partitions comes back from Kafka's cancel in another order
DRAIN_1 = plan_of(mv("t", 0, (1, 2, 3), (5, 2, 3)), mv("t", 1, (1, 3, 4), (5, 3, 4)), mv("t", 2, (2, 1, 3), (2, 5, 3)))
REORDERED_BY_KAFKA = {tp("t", 0): (2, 3, 1), tp("t", 1): (3, 4, 1), tp("t", 2): (2, 3, 1)}
RATE = 1000


def cluster(**caps: bool) -> FakeClusterAdmin:
    admin = FakeClusterAdmin.build(brokers=RACKS, topics={"t": [list(r) for r in ORIGINAL]})
    if caps:
        admin.caps = admin.caps.model_copy(update=caps)
    return admin


def configs(admin: FakeClusterAdmin) -> tuple[dict, dict]:
    """Every broker and topic config (cordons, throttles), copied."""
    return ({b: dict(c) for b, c in admin.broker_configs.items()}, {t: dict(c) for t, c in admin.topic_configs.items()})


def drain_in_flight(admin: FakeClusterAdmin, state: MemoryStore) -> ExecutionSession:
    """Broker 1 cordoned (as the plan task does) and the drain's moves sent, throttled, still copying."""
    apply_cordons(admin, decommission_cordons([1]), state_dir=state)
    session = ExecutionSession(admin, DRAIN_1, ExecutionConfig(throttle_bytes_per_sec=RATE), state_dir=state,
                               settle_s=0, sleep=lambda s: None)
    assert sorted(session.tick().status.submitted) == sorted(DRAIN_1.partitions)
    assert admin.broker_configs[1][CORDONED_LOG_DIRS] == "*" and admin.inflight
    return session


def order(admin: FakeClusterAdmin) -> list[tuple[int, ...]]:
    return [admin.replicas[TopicPartition("t", p)] for p in range(len(ORIGINAL))]


def test_the_fake_refuses_a_reorder_naming_a_cordoned_broker_as_kafka_4_4_does():
    admin = cluster()
    apply_cordons(admin, decommission_cordons([1]), state_dir=MemoryStore())
    (refused,) = admin.alter_reassignments({tp("t", 0): (2, 3, 1)}).results
    assert not refused.ok and "broker 1, but all its log directories are cordoned" in (refused.error or "")
    assert order(admin) == ORIGINAL


def test_the_cancel_of_a_cordoned_drain_restores_the_cordons_then_every_partitions_order():
    """Fails on the order of before issue 36 (reorder, then cordons): the reorder named the cordoned broker 1."""
    admin = cluster()
    before = configs(admin)
    state = MemoryStore()
    drain_in_flight(admin, state)
    outcome = cancel_then_roll_back(admin, DRAIN_1, ExecutionConfig(), state_dir=state)
    result = outcome.cancel
    assert result.cancelled == sorted(DRAIN_1.partitions) and result.ok, result.summary()
    assert {p: left for p, (_, left) in result.reordered.items()} == REORDERED_BY_KAFKA
    assert order(admin) == ORIGINAL and not admin.inflight
    assert outcome.cordons_restored and result.cordons_restored and result.throttles_restored
    assert configs(admin) == before  # cordons and throttles exactly as before the run
    # the cordons went back before the reorder was sent (the fake refuses one naming cordoned broker 1): none held
    assert ORDER_HELD not in [e["event"] for e in read_journal(state)]


def test_the_sessions_cancel_keeps_the_cordons_and_the_cancel_of_the_whole_run_puts_the_order_back():
    """on_deadline="cancel": the drain goes on in a later run, so broker 1 stays cordoned and the partitions naming it
    keep Kafka's order (held, named, journalled); the cancel of the whole run then restores the cordons and reorders
    them, though nothing is in flight any more."""
    admin = cluster()
    before = configs(admin)
    state = MemoryStore()
    session = drain_in_flight(admin, state)
    held = session._cancel()
    assert held.cancelled == sorted(DRAIN_1.partitions)
    assert sorted(held.order_held) == sorted(REORDERED_BY_KAFKA) and not held.reordered
    assert "kept in Kafka's replica order because a broker they name is cordoned" in "; ".join(held.problems())
    assert held.summary()["order_held"] == ["t-0", "t-1", "t-2"]
    assert admin.broker_configs[1][CORDONED_LOG_DIRS] == "*"  # the drain's cordon stays
    assert order(admin)[:3] == list(REORDERED_BY_KAFKA.values())
    assert read_held(state) == {p: (ORIGINAL[p.partition], left) for p, left in REORDERED_BY_KAFKA.items()}
    session.finish()  # the run ends: its throttles go, its cordons stay

    outcome = cancel_then_roll_back(admin, DRAIN_1, ExecutionConfig(), state_dir=state)
    assert outcome.cancel.cancelled == [] and outcome.cancel.ok, outcome.cancel.summary()
    assert sorted(outcome.cancel.reordered) == sorted(REORDERED_BY_KAFKA)
    assert order(admin) == ORIGINAL and configs(admin) == before


def test_a_held_partition_moved_since_is_left_alone():
    admin = cluster()
    state = MemoryStore()
    session = drain_in_flight(admin, state)
    session._cancel()
    admin.broker_configs[1].pop(CORDONED_LOG_DIRS)  # someone uncordoned broker 1 and moved t-0 on
    admin.alter_reassignments({tp("t", 0): (4, 2, 3)}, allow_replication_factor_change=False)
    admin.complete()
    outcome = cancel_then_roll_back(admin, DRAIN_1, ExecutionConfig(), state_dir=state)
    assert tp("t", 0) not in outcome.cancel.reordered and admin.replicas[tp("t", 0)] == (4, 2, 3)
    assert order(admin)[1:3] == ORIGINAL[1:3]


def test_a_cordon_set_before_the_run_stays_and_the_order_it_blocks_is_named():
    """Broker 1 was cordoned by someone before the run: restored exactly (still "*"), its partitions' reorder is held
    and said, never forced."""
    admin = cluster()
    admin.broker_configs[1][CORDONED_LOG_DIRS] = "*"
    before = configs(admin)
    state = MemoryStore()
    drain_in_flight(admin, state)
    result = cancel_then_roll_back(admin, DRAIN_1, ExecutionConfig(), state_dir=state).cancel
    assert sorted(result.order_held) == sorted(REORDERED_BY_KAFKA) and not result.ok
    assert configs(admin) == before


def test_the_reorder_is_sent_again_while_the_controller_still_sees_a_restored_cordon():
    """The brokers show the restored cordon before the controller has learned it (seen on 4.4.0: the first reorder
    right after the uncordon was refused, the next one, 0.1 s later, accepted)."""

    class Lagging(FakeClusterAdmin):
        refusals = 1

        def alter_reassignments(self, targets, **kw):
            if self.refusals and all(set(r) == set(self.replicas[TopicPartition(*p)]) for p, r in targets.items()):
                self.refusals -= 1
                self.broker_configs[1][CORDONED_LOG_DIRS] = "*"
                try:
                    return super().alter_reassignments(targets, **kw)
                finally:
                    self.broker_configs[1].pop(CORDONED_LOG_DIRS)
            return super().alter_reassignments(targets, **kw)

    admin = Lagging.build(brokers=RACKS, topics={"t": [list(r) for r in ORIGINAL]})
    before = configs(admin)
    state = MemoryStore()
    drain_in_flight(admin, state)
    result = cancel_then_roll_back(admin, DRAIN_1, ExecutionConfig(), state_dir=state).cancel
    assert admin.refusals == 0 and result.ok and order(admin) == ORIGINAL and configs(admin) == before


def test_before_kafka_4_3_there_are_no_cordons_to_read_and_the_order_comes_back():
    admin = cluster(cordons=False, cordons_refuse_explicit_assignments=False)
    before = configs(admin)
    state = MemoryStore()
    session = ExecutionSession(admin, DRAIN_1, ExecutionConfig(throttle_bytes_per_sec=RATE), state_dir=state,
                               settle_s=0, sleep=lambda s: None)
    session.tick()
    calls: list[object] = []
    admin.describe_cordons = lambda brokers: calls.append(brokers) or {}  # type: ignore[method-assign]
    outcome = cancel_then_roll_back(admin, DRAIN_1, ExecutionConfig(), state_dir=state)
    assert outcome.cancel.ok and not outcome.cordons_restored and calls == []
    assert order(admin) == ORIGINAL and configs(admin) == before
