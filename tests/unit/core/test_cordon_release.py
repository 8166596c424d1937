"""The cordons of a plan never executed go back exactly; once its moves were sent the execution keeps them
(core/execution/cordon_release.py), on the fake cluster (Kafka 4.4 by default)."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession
from airflow_kafka_reassign.core.execution.cordon_release import release_unexecuted_cordons, sent_in_journal
from airflow_kafka_reassign.core.maintenance.cordon import (
    CORDON_BACKUP_FILE,
    CORDONED_LOG_DIRS,
    apply_cordons,
    decommission_cordons,
)
from airflow_kafka_reassign.core.records.journal import journal, read_journal
from airflow_kafka_reassign.core.records.lease import LeaseHeldError
from airflow_kafka_reassign.core.records.store import MemoryStore
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.testing import FakeClusterAdmin

DRAIN = ReassignmentPlan(moves=(Move(topic="t", partition=0, current_replicas=(1, 5), target_replicas=(1, 4)),
                                Move(topic="t", partition=1, current_replicas=(5, 2), target_replicas=(3, 2))))


def cordoned_cluster() -> tuple[FakeClusterAdmin, MemoryStore, dict]:
    """Brokers 5 and 6 drained by a plan that cordoned them (5 had a cordon of someone else's on one dir)."""
    admin = FakeClusterAdmin.build({1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}, {"t": [[1, 5], [5, 2]]})
    admin.broker_configs[5][CORDONED_LOG_DIRS] = "/kafka/5/data-1"  # restored exactly
    before = {b: dict(c) for b, c in admin.broker_configs.items()}
    state = MemoryStore()
    apply_cordons(admin, decommission_cordons([5, 6]), state_dir=state)
    assert admin.broker_configs[5][CORDONED_LOG_DIRS] == "*" and admin.broker_configs[6][CORDONED_LOG_DIRS] == "*"
    return admin, state, before


def test_a_plan_never_executed_gets_its_cordons_back_exactly_and_journalled():
    admin, state, before = cordoned_cluster()
    done = release_unexecuted_cordons(admin, state, DRAIN)
    assert done.outcome == "restored" and done.brokers == (5, 6) and "none of the plan's moves was sent" in done.why
    assert admin.broker_configs == before
    assert state.read(CORDON_BACKUP_FILE) is None
    assert [e["event"] for e in read_journal(state)] == ["cordoned", "cordons-restored"]
    assert admin.alter_requests == []
    again = release_unexecuted_cordons(admin, state, DRAIN)  # a retry: nothing left to do
    assert again.outcome == "none" and admin.broker_configs == before


def test_a_plan_task_that_failed_after_cordoning_gets_its_cordons_back():
    admin, state, before = cordoned_cluster()
    done = release_unexecuted_cordons(admin, state, None)
    assert done.outcome == "restored" and "wrote no plan" in done.why and admin.broker_configs == before


def test_once_the_execution_sent_a_move_it_owns_the_cordons():
    admin, state, _ = cordoned_cluster()
    session = ExecutionSession(admin, DRAIN, ExecutionConfig(), state_dir=state, settle_s=0)
    assert session.tick().status.submitted  # journalled 'submitted'
    admin.complete()
    done = release_unexecuted_cordons(admin, state, DRAIN)
    assert done.outcome == "kept" and "journal records 2 move(s) submitted" in done.why
    assert admin.broker_configs[5][CORDONED_LOG_DIRS] == "*" and state.read(CORDON_BACKUP_FILE) is not None


def test_a_move_in_flight_that_the_journal_missed_keeps_the_cordons():
    """The process died between the submission and its journal entry: the cluster tells."""
    admin, state, _ = cordoned_cluster()
    admin.alter_reassignments({TopicPartition("t", 0): (1, 4)})
    done = release_unexecuted_cordons(admin, state, DRAIN)
    assert done.outcome == "kept" and "the cluster shows 1 of the plan's move(s) done or in flight (t-0)" in done.why
    assert admin.broker_configs[5][CORDONED_LOG_DIRS] == "*"


def test_a_submission_kafka_refused_entirely_sent_nothing():
    admin, state, before = cordoned_cluster()
    journal(state, {"event": "submitted", "submitted": [], "refused": {"t-0": "INVALID_REPLICA_ASSIGNMENT"}})
    assert sent_in_journal(read_journal(state)) is None
    assert release_unexecuted_cordons(admin, state, DRAIN).outcome == "restored"
    assert admin.broker_configs == before


def test_a_plan_that_moves_nothing_keeps_the_cordons_like_a_finished_drain():
    admin, state, _ = cordoned_cluster()
    done = release_unexecuted_cordons(admin, state, ReassignmentPlan(moves=()))
    assert done.outcome == "kept" and "moves nothing" in done.why
    assert admin.broker_configs[5][CORDONED_LOG_DIRS] == "*"


def test_nothing_cordoned_is_nothing_to_do():
    admin = FakeClusterAdmin.build({1: "a", 2: "b"}, {"t": [[1, 2]]})
    assert release_unexecuted_cordons(admin, MemoryStore(), DRAIN).outcome == "none"
    assert all(CORDONED_LOG_DIRS not in c for c in admin.broker_configs.values())


def test_the_lease_is_taken_before_anything_changes_and_a_refusal_changes_nothing():
    admin, state, _ = cordoned_cluster()
    calls: list[str] = []

    def held_elsewhere() -> None:
        calls.append("lease")
        raise LeaseHeldError("another run drives this plan")

    with pytest.raises(LeaseHeldError):
        release_unexecuted_cordons(admin, state, DRAIN, before_restore=held_elsewhere)
    assert calls == ["lease"] and admin.broker_configs[5][CORDONED_LOG_DIRS] == "*"
    assert state.read(CORDON_BACKUP_FILE) is not None  # the backup stays for the next try


def test_a_disk_removal_never_executed_gets_its_dir_cordon_back_and_one_under_way_keeps_it():
    """Its moves keep their replicas (they only pin log dirs): "done" as reassignments from the start, so the
    replicas' dirs tell whether anything was sent (DescribeLogDirs), not the reassignments."""
    from airflow_kafka_reassign.core.maintenance.disk_removal import cordon_for_removal
    from airflow_kafka_reassign.core.planner.goals import PlanRequest
    from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable, plan_log_dirs
    from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica as R

    d1, d2 = "/kafka/1/data-1", "/kafka/1/data-2"

    def removal() -> tuple[FakeClusterAdmin, MemoryStore, ReassignmentPlan]:
        admin = FakeClusterAdmin.build({1: "a", 2: "b", 3: "c"}, {"t": [[1, 2], [2, 1]]}, log_dirs=2)
        for p in (0, 1):
            admin.replica_dirs[R("t", p, 1)] = d2
        state = MemoryStore()
        request = PlanRequest(goal="remove-disks", log_dirs=[f"1:{d2}"])
        assert cordon_for_removal(admin, request, state_dir=state) == {1: d2}
        plan = plan_log_dirs(admin.snapshot(), LogDirTable.of(admin.log_dirs(None)), request).plan
        assert all(m.current_replicas == m.target_replicas for m in plan.moves)
        return admin, state, plan

    admin, state, plan = removal()  # rejected, or refused by execute: nothing was sent
    done = release_unexecuted_cordons(admin, state, plan)
    assert done.outcome == "restored" and CORDONED_LOG_DIRS not in admin.broker_configs[1]

    admin, state, plan = removal()  # a move between log dirs sent, its journal entry never written
    admin.alter_replica_log_dirs({R("t", 0, 1): d1})
    done = release_unexecuted_cordons(admin, state, plan)
    assert done.outcome == "kept" and "(t-0)" in done.why and admin.broker_configs[1][CORDONED_LOG_DIRS] == d2
    admin.complete_log_dir_moves()  # ... and finished
    assert release_unexecuted_cordons(admin, state, plan).outcome == "kept"
