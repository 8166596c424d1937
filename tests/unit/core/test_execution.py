"""The execution engine (core/execution.py) against the in-memory FakeClusterAdmin: every rule."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from execution_helpers import RACKS, fake, mv, plan_of, tp

from airflow_kafka_reassign.core.execution import (
    THROTTLE_BACKUP_FILE,
    ExecutionLimits,
    ExecutionOptions,
    ExecutionStatus,
    finish,
    run,
    select_batch,
    step,
    write_rollback_if_missing,
)
from airflow_kafka_reassign.core.execution.cancel import cancel
from airflow_kafka_reassign.core.execution.session import MAX_UNREACHABLE_POLLS
from airflow_kafka_reassign.core.execution.throttle import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    desired_throttles,
    read_backup,
)
from airflow_kafka_reassign.core.guards.health import HealthPolicy
from airflow_kafka_reassign.core.records.plan_io import KAFKA_ROLLBACK_FILE, ROLLBACK_FILE
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin, InFlightReassignment, PartitionResult, ThrottleBackup
from airflow_kafka_reassign.exceptions import ClusterUnreachableError, ConfigurationError, UnsupportedBrokerError
from airflow_kafka_reassign.testing import FakeClusterAdmin

NO_LIMITS = ExecutionLimits()
SAFE = ExecutionOptions()


def submitted(f: FakeClusterAdmin) -> list[TopicPartition]:
    """Every partition sent in an alter request, in order (duplicates kept)."""
    return [t for targets, _ in f.alter_requests for t in targets]


def quiet_step(admin, plan, limits=NO_LIMITS, options=SAFE, **kw) -> ExecutionStatus:
    kw.setdefault("settle_s", 0)
    kw.setdefault("sleep", lambda s: None)
    return step(admin, plan, limits, options, **kw)


# -- the parameters ------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{"max_moves": 0}, {"max_moves_per_broker": -1}, {"order": "random"},
                                    {"max_moves": True}])
def test_limits_are_validated(kwargs):
    with pytest.raises(ConfigurationError):
        ExecutionLimits(**kwargs)


@pytest.mark.parametrize("kwargs", [{"rf_guard": "none"}, {"throttle_bytes_per_sec": 0},
                                    {"throttle_bytes_per_sec": 1.5}])
def test_options_are_validated(kwargs):
    with pytest.raises(ConfigurationError):
        ExecutionOptions(**kwargs)


def test_a_throttle_without_a_state_dir_is_refused_before_anything_is_read():
    f = fake(t=[[1, 2]])
    with pytest.raises(ConfigurationError, match="state_dir"):
        quiet_step(f, plan_of(mv("t", 0, (1, 2), (3, 4))), options=ExecutionOptions(throttle_bytes_per_sec=1000))
    assert f.alter_requests == []


# -- classification ------------------------------------------------------------------------------


def test_every_move_is_classified_from_the_cluster_and_the_plan():
    f = fake(t=[[1, 2], [2, 3], [3, 4], [4, 5], [5, 1]])
    f.alter_reassignments({tp("t", 1): [4, 5]})        # ours, in flight
    f.alter_reassignments({tp("t", 4): [2, 3]})        # foreign: the plan wants [1, 6]
    f.replicas[tp("t", 2)] = (3, 6)                    # moved by hand: stale
    plan = plan_of(
        mv("t", 0, (1, 2), (1, 2)),     # already done
        mv("t", 1, (2, 3), (4, 5)),
        mv("t", 2, (3, 4), (5, 6)),
        mv("t", 3, (4, 5), (1, 2)),
        mv("t", 4, (5, 1), (1, 6)),
    )
    s = quiet_step(f, plan, submit=False, options=ExecutionOptions(allow_concurrent_reassignments=True))
    assert s.done == [tp("t", 0)]
    assert s.in_flight == [tp("t", 1)]
    assert s.pending == [tp("t", 3)]
    assert s.stale == {tp("t", 2): ((3, 4), (3, 6))}
    # someone else's reassignment of a planned partition: its move waits for it (bounded), then is judged again
    assert list(s.waiting) == [tp("t", 4)] and s.waiting_for == {tp("t", 4): "the reassignment of t-4"}
    assert s.foreign == [tp("t", 4)]
    assert s.submitted == [] and not s.complete
    assert s.moves[tp("t", 1)].current_replicas == (2, 3)
    json.dumps(s.summary())


def test_a_done_partition_whose_isr_misses_a_target_replica_is_lagging_not_done():
    f = fake(t=[[1, 2]])
    f.down.add(2)
    s = quiet_step(f, plan_of(mv("t", 0, (1, 2), (1, 2))))
    assert s.lagging == [tp("t", 0)] and s.done == [] and not s.complete


def test_a_partition_that_does_not_exist_fails_by_name():
    f = fake(t=[[1, 2]])
    s = quiet_step(f, plan_of(mv("t", 7, (1, 2), (2, 3))))
    assert "partition t-7 does not exist: topic t has 1 partition(s)" in s.failed[tp("t", 7)]
    assert s.complete and not s.ok and f.alter_requests == []


def deleting(f: FakeClusterAdmin, monkeypatch, name: str = "gone") -> None:
    """``name`` is absent from the cluster as the adapter reports it: a snapshot naming it is refused."""
    real = f.snapshot

    def snapshot(*, topics=None, include_sizes=False):
        if topics is not None and name in topics:
            raise ConfigurationError(f"topic(s) {name} do not exist in the cluster")
        return real(topics=topics, include_sizes=include_sizes)

    monkeypatch.setattr(f, "snapshot", snapshot)


def test_a_plan_topic_deleted_since_planning_drops_its_moves_by_name_and_the_others_go_on(monkeypatch):
    f = fake(t=[[1, 2]])
    deleting(f, monkeypatch)
    s = quiet_step(f, plan_of(mv("t", 0, (1, 2), (2, 3)), mv("gone", 0, (1, 2), (2, 3))))
    assert s.gone == {tp("gone", 0): "topic gone was deleted: move dropped"} and s.failed == {}
    assert s.events == ["topic gone deleted: dropped 1 move(s) (gone-0)"] and s.blocked is None
    assert s.submitted == [tp("t", 0)]


# -- pre-flight: plan errors refuse the whole plan before anything is sent -----------------------------


def untouched(f: FakeClusterAdmin, state: Path | None = None) -> None:
    """Nothing was sent: no reassignment, no throttle config, no throttle backup."""
    assert f.alter_requests == [] and f.inflight == {}
    assert f.broker_configs == {b: {} for b in RACKS}
    assert all(not any(k.endswith("throttled.replicas") for k in c) for c in f.topic_configs.values())
    assert state is None or not (state / THROTTLE_BACKUP_FILE).exists()


def test_a_target_broker_the_cluster_does_not_have_refuses_the_whole_plan_before_anything_is_sent(tmp_path, caplog):
    f = fake(t=[[1, 2], [2, 3], [3, 4]])
    plan = plan_of(mv("t", 0, (1, 2), (1, 3)), mv("t", 1, (2, 3), (2, 99)), mv("t", 2, (3, 4), (99, 4)))
    with caplog.at_level(logging.WARNING):
        result = run(f, plan, NO_LIMITS, ExecutionOptions(throttle_bytes_per_sec=1000), state_dir=tmp_path,
                     sleep=lambda s: None, settle_s=0)
    untouched(f, tmp_path)
    s = result.status
    assert s.blocked.startswith("the whole plan is refused") and "broker 99 does not exist in the cluster" in s.blocked
    assert "live brokers: 1, 2, 3, 4, 5, 6" in s.blocked and "t-1 -> [2, 99]" in s.blocked
    assert "Plan again from the current cluster" in s.blocked and "on_plan_error='skip'" in s.blocked
    assert "unreachable" not in s.blocked
    assert set(s.failed) == {tp("t", 1), tp("t", 2)} and "name broker 99" in s.failed[tp("t", 1)]
    assert s.pending == [tp("t", 0)] and not s.ok and result.steps == 2
    assert "plan error: broker 99" in caplog.text
    assert result.summary()["plan_errors"] == s.plan_errors and len(s.plan_errors) == 1


def test_a_topic_grown_since_planning_keeps_its_moves_and_says_so(tmp_path):
    f = fake(t=[[1, 2], [2, 3], [3, 4]], u=[[1, 2]])  # t has 3 partitions now; the plan saw 2
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 2), (1, 3)), mv("u", 0, (1, 2), (2, 3))),
                            partition_counts={"t": 2, "u": 1}, topic_ids={"t": f.topic_ids["t"], "u": f.topic_ids["u"]})
    result = run(f, plan, NO_LIMITS, ExecutionOptions(throttle_bytes_per_sec=1000), state_dir=tmp_path,
                 sleep=lambda s: f.complete(), settle_s=0)
    s = result.status
    assert s.ok and s.blocked is None and s.failed == {} and s.gone == {}
    assert f.replicas[tp("t", 0)] == (1, 3) and f.replicas[tp("u", 0)] == (2, 3)
    assert "topic t grew from 2 to 3 partitions: its moves continue" in result.summary()["cluster_events"]


def test_a_deleted_topic_is_dropped_and_the_run_finishes_the_rest_and_restores_the_throttles(tmp_path, monkeypatch):
    f = fake(t=[[1, 2]])
    deleting(f, monkeypatch)
    plan = plan_of(mv("t", 0, (1, 2), (2, 3)), mv("gone", 0, (1, 2), (2, 3)), mv("gone", 1, (2, 3), (3, 4)))
    result = run(f, plan, NO_LIMITS, ExecutionOptions(throttle_bytes_per_sec=1000), state_dir=tmp_path,
                 sleep=lambda s: f.complete(), settle_s=0)
    s = result.status
    assert s.ok and s.blocked is None and set(s.gone) == {tp("gone", 0), tp("gone", 1)}
    assert submitted(f) == [tp("t", 0)] and result.summary()["gone"] == 2
    assert result.summary()["throttles_restored"] == "yes"
    untouched_configs = f.broker_configs == {b: {} for b in RACKS}
    assert untouched_configs and not (tmp_path / THROTTLE_BACKUP_FILE).exists()


def test_on_plan_error_skip_refuses_only_the_moves_in_error_and_runs_the_others():
    f = fake(t=[[1, 2], [2, 3], [3, 4]], u=[[1, 2]])
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 2), (1, 3)), mv("u", 0, (1, 2), (2, 99))),
                            partition_counts={"t": 2, "u": 1})
    result = run(f, plan, NO_LIMITS, ExecutionOptions(on_plan_error="skip"), state_dir=None,
                 sleep=lambda s: f.complete(), settle_s=0)
    s = result.status
    assert submitted(f) == [tp("t", 0)] and s.blocked is None  # t grew (it goes on) and u names broker 99: refused
    assert set(s.failed) == {tp("u", 0)} and "name broker 99, which is not a broker of the cluster" in s.failed[tp("u", 0)]
    f2 = fake(t=[[1, 2], [2, 3]], u=[[1, 2]])
    result = run(f2, plan, NO_LIMITS, ExecutionOptions(on_plan_error="skip"), state_dir=None,
                 sleep=lambda s: f2.complete(), settle_s=0)
    assert submitted(f2) == [tp("t", 0)] and f2.replicas[tp("t", 0)] == (1, 3)
    assert result.status.complete and not result.status.ok and set(result.status.failed) == {tp("u", 0)}


def test_strict_still_refuses_the_whole_plan_and_cannot_be_combined_with_skip():
    f = fake(t=[[1, 2], [2, 3]])
    plan = plan_of(mv("t", 0, (1, 2), (1, 3)), mv("t", 1, (2, 3), (2, 99)))
    s = quiet_step(f, plan, options=ExecutionOptions(strict=True))
    assert "broker 99" in s.blocked and f.alter_requests == []
    with pytest.raises(ConfigurationError, match="strict=True .* on_plan_error='skip'"):
        ExecutionOptions(strict=True, on_plan_error="skip")
    with pytest.raises(ConfigurationError, match="on_plan_error must be 'refuse'"):
        ExecutionOptions(on_plan_error="ignore")  # type: ignore[arg-type]


def test_a_broker_that_is_down_holds_its_moves_unsent_unless_moves_onto_it_may_wait(tmp_path, caplog):
    f = fake(t=[[1, 2], [6, 3]])
    f.down.add(6)
    plan = plan_of(mv("t", 0, (1, 2), (1, 6)))
    s = quiet_step(f, plan, state_dir=tmp_path, options=ExecutionOptions(throttle_bytes_per_sec=1000))
    assert s.blocked is None and s.pending == [] and "name broker 6, which is not alive now" in s.waiting[tp("t", 0)]
    assert s.waiting_for == {tp("t", 0): "broker 6"} and not s.complete
    untouched(f, tmp_path)
    # t-1 is under-replicated while 6 is down: the health gate would pause (tested in test_health.py)
    options = ExecutionOptions(throttle_bytes_per_sec=1000, allow_offline_brokers=True,
                               health=HealthPolicy(gate=False))
    with caplog.at_level(logging.WARNING):
        s = quiet_step(f, plan, state_dir=tmp_path, options=options)
    assert s.submitted == [tp("t", 0)] and s.blocked is None
    assert f.broker_configs[6] == {} and f.broker_configs[1][FOLLOWER_RATE] == "1000"  # none on the offline broker
    assert "broker(s) [6] are not alive: no throttle is set on them" in caplog.text


def test_moves_done_or_in_flight_are_not_plan_errors():
    f = fake(t=[[1, 6], [2, 3]])
    f.alter_reassignments({tp("t", 1): [2, 6]})
    f.down.add(6)  # after the moves onto it were done or submitted: nothing more is sent for them
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 2), (1, 6)), mv("t", 1, (2, 3), (2, 6))),
                            partition_counts={"t": 2})
    s = quiet_step(f, plan, submit=False)
    assert s.plan_errors == [] and s.blocked is None
    assert s.lagging == [tp("t", 0)] and s.in_flight == [tp("t", 1)]


def test_a_plan_without_partition_counts_is_not_checked_for_them():
    f = fake(t=[[1, 2], [2, 3], [3, 4]])
    s = quiet_step(f, plan_of(mv("t", 0, (1, 2), (1, 3))))  # a plan from Kafka's format, or an older version
    assert s.submitted == [tp("t", 0)] and s.plan_errors == []


def test_the_rollback_plan_keeps_the_partition_counts(tmp_path):
    f = fake(t=[[1, 2], [2, 3]])
    plan = ReassignmentPlan(moves=(mv("t", 0, (1, 2), (1, 3)),), partition_counts={"t": 2})
    status = quiet_step(f, plan, submit=False)
    write_rollback_if_missing(tmp_path, plan, status)
    rollback = ReassignmentPlan.model_validate_json((tmp_path / ROLLBACK_FILE).read_bytes())
    assert rollback.partition_counts == {"t": 2}


# -- scale: a step is linear in the moves --------------------------------------------------------------


def test_one_step_submits_100k_moves_on_the_fake():
    # no timing here (tests/benchmarks/bench_step.py measures it): every move goes out, exactly once
    n = 100_000
    topics = {f"t{i:03d}": [[1 + p % 3, 4 + p % 3] for p in range(1000)] for i in range(n // 1000)}
    f = FakeClusterAdmin.build(brokers=RACKS, topics=topics)
    plan = ReassignmentPlan.model_construct(moves=tuple(
        Move.model_construct(topic=t, partition=p, current_replicas=tuple(r), target_replicas=(r[0], 1 + (p + 1) % 3))
        for t, parts in topics.items() for p, r in enumerate(parts)), partition_counts={t: 1000 for t in topics})
    s = quiet_step(f, plan)
    assert len(s.submitted) == n and len(set(s.submitted)) == n and len(f.inflight) == n
    assert s.pending == [] and len(s.in_flight) == n and s.plan_errors == []
    assert len(f.alter_requests) == 1 and len(f.alter_requests[0][0]) == n


# -- pre-flight: stale, strict, foreign ---------------------------------------------------------------


def test_stale_moves_are_refused_with_a_diff_and_the_others_proceed(caplog):
    f = fake(t=[[1, 2], [2, 3]])
    f.replicas[tp("t", 0)] = (1, 5)
    plan = plan_of(mv("t", 0, (1, 2), (3, 4)), mv("t", 1, (2, 3), (4, 5)))
    with caplog.at_level(logging.WARNING):
        result = run(f, plan, NO_LIMITS, SAFE, state_dir=None, sleep=lambda s: f.complete(), settle_s=0)
    assert submitted(f) == [tp("t", 1)]
    assert result.status.stale == {tp("t", 0): ((1, 2), (1, 5))}
    assert result.status.complete and not result.status.ok
    assert "expects replicas [1, 2], the cluster has [1, 5]" in caplog.text
    assert result.summary()["stale_partitions"] == {"t-0": {"expected": [1, 2], "actual": [1, 5]}}


def test_strict_refuses_the_whole_plan_when_one_move_is_stale():
    f = fake(t=[[1, 2], [2, 3]])
    f.replicas[tp("t", 0)] = (1, 5)
    plan = plan_of(mv("t", 0, (1, 2), (3, 4)), mv("t", 1, (2, 3), (4, 5)))
    result = run(f, plan, NO_LIMITS, ExecutionOptions(strict=True), state_dir=None, sleep=lambda s: None, settle_s=0)
    assert f.alter_requests == []
    assert "strict=True" in result.status.blocked and "t-0" in result.status.blocked
    assert result.status.pending == [tp("t", 1)]


def test_a_foreign_reassignment_blocks_the_run_before_anything_changes(tmp_path):
    f = fake(t=[[1, 2]], other=[[3, 4]])
    f.alter_reassignments({tp("other", 0): [4, 5]})
    f.alter_requests.clear()
    options = ExecutionOptions(throttle_bytes_per_sec=1000)
    result = run(f, plan_of(mv("t", 0, (1, 2), (2, 3))), NO_LIMITS, options, state_dir=tmp_path,
                 sleep=lambda s: None, settle_s=0)
    assert f.alter_requests == []
    assert "allow_concurrent_reassignments=True" in result.status.blocked and "other-0" in result.status.blocked
    assert f.broker_configs == {b: {} for b in RACKS} and not (tmp_path / THROTTLE_BACKUP_FILE).exists()


def test_foreign_reassignments_allowed_count_against_the_limits():
    f = fake(t=[[1, 2], [1, 3]], other=[[3, 4]])
    f.alter_reassignments({tp("other", 0): [4, 5]})
    f.alter_requests.clear()
    options = ExecutionOptions(allow_concurrent_reassignments=True)
    plan = plan_of(mv("t", 0, (1, 2), (1, 6)), mv("t", 1, (1, 3), (1, 4)))
    s = quiet_step(f, plan, ExecutionLimits(max_moves=2, order="plan"), options)
    assert s.submitted == [tp("t", 0)]  # one slot: the foreign move holds the other
    s = quiet_step(f, plan, ExecutionLimits(max_moves_per_broker=1, order="plan"), options)
    assert s.submitted == []  # t-1 adds a replica on 4, which the foreign move touches


def test_a_plan_partition_moved_elsewhere_by_someone_else_is_stale_and_foreign():
    f = fake(t=[[1, 2]])
    f.alter_reassignments({tp("t", 0): [1, 5]})
    s = quiet_step(f, plan_of(mv("t", 0, (1, 2), (1, 3))))
    # it waits for that reassignment (not a block of the whole plan: it is a planned partition), then is judged again
    assert s.foreign == [tp("t", 0)] and tp("t", 0) in s.waiting and s.submitted == [] and s.blocked is None
    f.complete()
    s = quiet_step(f, plan_of(mv("t", 0, (1, 2), (1, 3))))
    assert s.stale == {tp("t", 0): ((1, 2), (1, 5))} and s.waiting == {} and s.submitted == []


def test_a_just_finished_move_whose_metadata_lags_is_in_flight_not_stale():
    """describe can lag the controller just after a move completes: the intermediate replica set with nothing
    listed is a move finishing (the progress watch's vocabulary), not a stale one, and nothing is resubmitted."""
    f = fake(t=[[1, 2]])
    f.replicas[tp("t", 0)] = (1, 2, 3)  # what a lagging describe shows right after [1,2] -> [1,3]
    sleeps: list[float] = []
    s = step(f, plan_of(mv("t", 0, (1, 2), (1, 3))), NO_LIMITS, SAFE, sleep=sleeps.append, settle_s=0.5)
    assert s.in_flight == [tp("t", 0)] and s.stale == {} and s.submitted == [] and sleeps == []
    f.replicas[tp("t", 0)] = (1, 3)
    s = step(f, plan_of(mv("t", 0, (1, 2), (1, 3))), NO_LIMITS, SAFE, sleep=sleeps.append, settle_s=0.5)
    assert s.done == [tp("t", 0)] and s.ok


def test_a_stale_looking_move_is_observed_again_before_it_is_refused(monkeypatch):
    """A partition seen elsewhere for a moment is observed once more before the move is refused as stale."""
    f = fake(t=[[1, 2]])
    f.replicas[tp("t", 0)] = (2, 1)  # a transient view: neither the plan's current nor its target replicas
    sleeps = []

    def settle(s):
        sleeps.append(s)
        f.replicas[tp("t", 0)] = (1, 3)

    s = step(f, plan_of(mv("t", 0, (1, 2), (1, 3))), NO_LIMITS, SAFE, sleep=settle, settle_s=0.5)
    assert sleeps == [0.5] and s.done == [tp("t", 0)] and s.stale == {}


# -- the replication-factor guard (KIP-860) ---------------------------------------------------------


def test_kip860_race_a_plan_from_the_intermediate_replica_set_is_stale_and_nothing_is_sent():
    """[1,2,3] moving to [4,5,6]: describe showed [1..6]; a plan "preserving" RF 6 must not go out."""
    f = fake(t=[[1, 2, 3]])
    f.alter_reassignments({tp("t", 0): [4, 5, 6]})
    f.complete()
    f.alter_requests.clear()
    plan = plan_of(mv("t", 0, (1, 2, 3, 4, 5, 6), (6, 5, 4, 3, 2, 1)))
    s = quiet_step(f, plan)
    assert s.stale == {tp("t", 0): ((1, 2, 3, 4, 5, 6), (4, 5, 6))}
    assert f.alter_requests == [] and f.replicas[tp("t", 0)] == (4, 5, 6)


def test_kip860_race_in_flight_the_refusal_names_the_target_the_rf_change_and_the_option(caplog):
    """Issue 15: this read 'the plan expects replicas [4, 5, 6, 1, 2, 3], the cluster has [4, 5, 6, 1, 2, 3]'."""
    f = fake(t=[[1, 2, 3]])
    f.alter_reassignments({tp("t", 0): [4, 5, 6]})
    f.alter_requests.clear()
    plan = plan_of(mv("t", 0, (4, 5, 6, 1, 2, 3), (6, 5, 4, 3, 2, 1)))
    with caplog.at_level(logging.WARNING):
        s = run(f, plan, NO_LIMITS, ExecutionOptions(allow_concurrent_reassignments=True), state_dir=None,
                sleep=lambda x: None, settle_s=0)
    why = s.status.stale_why[tp("t", 0)]
    assert why == (
        "the cluster is reassigning it from [1, 2, 3] to [4, 5, 6] (describe shows the intermediate replica set "
        "[4, 5, 6, 1, 2, 3] meanwhile); the plan expected [4, 5, 6, 1, 2, 3]; the plan's move to "
        "[6, 5, 4, 3, 2, 1] would change the replication factor 3 -> 6 (a plan computed from the intermediate "
        "replica set: KIP-860's race). Wait for the reassignment to finish and plan again from the cluster; a "
        "deliberate RF change needs the move marked allow_rf_change in the plan and "
        "allow_replication_factor_change=True (KIP-860)")
    assert f"stale move t-0 refused: {why}" in caplog.text
    assert s.status.summary()["stale_partitions"]["t-0"]["why"] == why
    assert f.alter_requests == []
    # the same RF: the move waits for the reassignment in flight, naming it
    other = plan_of(mv("t", 0, (1, 2, 3), (3, 2, 1)))
    waiting = quiet_step(f, other, options=ExecutionOptions(allow_concurrent_reassignments=True)).waiting
    assert waiting == {tp("t", 0): "someone else's reassignment of it is in flight ([1, 2, 3] -> [4, 5, 6]): the move "
                                   "waits for it to finish, then is judged again"}


def test_kip860_race_a_kafka_file_without_current_replicas_is_refused_client_side():
    f = fake(t=[[4, 5, 6]])
    s = quiet_step(f, plan_of(mv("t", 0, None, (1, 2, 3, 4, 5, 6))))
    assert "replication factor from 3 to 6" in s.failed[tp("t", 0)]
    assert f.alter_requests == []


def test_kip860_the_broker_guard_refuses_what_changed_between_the_check_and_the_request(monkeypatch):
    f = fake(t=[[1, 2], [2, 3]])
    plan = plan_of(mv("t", 0, None, (3, 4)), mv("t", 1, (2, 3), (4, 5)))
    real = f.alter_reassignments

    def racing(targets, **kw):  # someone grows t-0 to RF 3 just before our request arrives
        f.replicas[tp("t", 0)] = (1, 2, 5)
        return real(targets, **kw)

    monkeypatch.setattr(f, "alter_reassignments", racing)
    s = quiet_step(f, plan)
    assert f.alter_requests[0][1] is False  # AllowReplicationFactorChange=false
    assert "KIP-860" in s.failed[tp("t", 0)] and "INVALID_REPLICATION_FACTOR" in s.failed[tp("t", 0)]
    assert s.in_flight == [tp("t", 1)] and tp("t", 0) not in s.in_flight


def test_an_rf_change_needs_the_plan_mark_and_the_option():
    f = fake(t=[[1, 2], [2, 3]])
    plan = plan_of(mv("t", 0, (1, 2), (1, 2, 3), allow_rf_change=True), mv("t", 1, (2, 3), (3, 4)))
    s = quiet_step(f, plan)
    assert "allow_replication_factor_change=True" in s.failed[tp("t", 0)]
    assert [list(t) for t, _ in f.alter_requests] == [[tp("t", 1)]]
    f.complete()
    f.alter_requests.clear()
    s = quiet_step(f, plan, options=ExecutionOptions(allow_replication_factor_change=True))
    assert f.alter_requests == [({tp("t", 0): (1, 2, 3)}, True)]  # sent alone, with the flag true
    assert s.submitted == [tp("t", 0)]


def test_brokers_without_kip860_fail_closed_and_nothing_changes(tmp_path):
    f = FakeClusterAdmin.build(brokers=RACKS, topics={"t": [[1, 2]]}, rf_guard_supported=False)
    options = ExecutionOptions(throttle_bytes_per_sec=1000)
    result = run(f, plan_of(mv("t", 0, (1, 2), (2, 3))), NO_LIMITS, options, state_dir=tmp_path,
                 sleep=lambda s: None, settle_s=0)
    assert "rf_guard=\"client\"" in result.status.blocked and "4.1" in result.status.blocked
    assert f.alter_requests == [] and f.broker_configs == {b: {} for b in RACKS}


def test_rf_guard_client_proceeds_on_old_brokers_and_logs_its_limits(caplog):
    f = FakeClusterAdmin.build(brokers=RACKS, topics={"t": [[1, 2]]}, rf_guard_supported=False)
    with caplog.at_level(logging.WARNING):
        s = quiet_step(f, plan_of(mv("t", 0, (1, 2), (2, 3))), options=ExecutionOptions(rf_guard="client"))
    assert s.submitted == [tp("t", 0)]
    assert "is not seen" in caplog.text


def test_an_unsupported_broker_error_from_the_adapter_restores_the_throttles(tmp_path, monkeypatch):
    """If the guard check cannot tell, the adapter refuses; the run must not leave a throttle."""
    f = fake(t=[[1, 2]])
    monkeypatch.setattr(f, "rf_guard_supported", None)

    def refuse(targets, **kw):
        raise UnsupportedBrokerError("v0 only; nothing was sent")

    monkeypatch.setattr(f, "alter_reassignments", refuse)
    with pytest.raises(UnsupportedBrokerError):
        run(f, plan_of(mv("t", 0, (1, 2), (2, 3))), NO_LIMITS, ExecutionOptions(throttle_bytes_per_sec=5),
            state_dir=tmp_path, sleep=lambda s: None, settle_s=0)
    assert f.broker_configs == {b: {} for b in RACKS}
    assert all(not v for v in f.topic_configs.values())
    assert not (tmp_path / THROTTLE_BACKUP_FILE).exists()


# -- batching --------------------------------------------------------------------------------------


def _inflight_counts(f: FakeClusterAdmin) -> tuple[int, int]:
    per_broker: dict[int, int] = {}
    listing = f.list_reassignments()
    for r in listing.values():
        for b in set(r.adding_replicas) | set(r.removing_replicas):
            per_broker[b] = per_broker.get(b, 0) + 1
    return len(listing), max(per_broker.values(), default=0)


@pytest.mark.parametrize("limits", [ExecutionLimits(max_moves=3), ExecutionLimits(max_moves_per_broker=1),
                                    ExecutionLimits(max_moves=2, max_moves_per_broker=2, order="largest-first")])
def test_batch_limits_hold_at_every_step_and_the_plan_completes(limits):
    topics = {f"t{i}": [[1 + i % 6, 1 + (i + 1) % 6]] for i in range(12)}
    f = fake(**topics)
    plan = plan_of(*(mv(f"t{i}", 0, (1 + i % 6, 1 + (i + 1) % 6), (1 + (i + 2) % 6, 1 + (i + 3) % 6))
                     for i in range(12)))
    seen = []

    def tick(_):
        seen.append(_inflight_counts(f))
        first = sorted(f.inflight)[:1]  # one move finishes per poll
        f.complete(first)

    result = run(f, plan, limits, SAFE, state_dir=None, sleep=tick, settle_s=0)
    assert result.status.ok and len(result.status.done) == 12
    assert max(n for n, _ in seen) <= (limits.max_moves or 99)
    assert max(b for _, b in seen) <= (limits.max_moves_per_broker or 99)
    assert sorted(submitted(f)) == sorted(plan.partitions)  # each exactly once


def test_smallest_first_orders_by_bytes_to_copy_and_unknown_sizes_go_last():
    f = fake(a=[[1, 2]], b=[[1, 2]], c=[[1, 2]], d=[[1, 2]])
    f.sizes = {tp("a", 0): {1: 500, 2: 500}, tp("b", 0): {1: 100, 2: 100}, tp("c", 0): {1: 300, 2: 300}}
    plan = plan_of(*(mv(t, 0, (1, 2), (3, 4)) for t in "abcd"))
    s = quiet_step(f, plan, ExecutionLimits(max_moves=3, order="smallest-first"))
    assert s.submitted == [tp("b", 0), tp("c", 0), tp("a", 0)]
    f2 = fake(a=[[1, 2]], b=[[1, 2]], c=[[1, 2]], d=[[1, 2]])
    f2.sizes = dict(f.sizes)
    s = quiet_step(f2, plan, ExecutionLimits(max_moves=1, order="largest-first"))
    assert s.submitted == [tp("a", 0)]


def test_sizes_are_read_only_when_order_matters():
    f = fake(a=[[1, 2]], b=[[1, 2]])
    plan = plan_of(mv("a", 0, (1, 2), (3, 4)), mv("b", 0, (1, 2), (3, 4)))
    quiet_step(f, plan, ExecutionLimits(order="smallest-first"), ExecutionOptions(disk_reserve=None))  # no limit
    assert f.calls.get("replica_sizes", 0) == 0
    quiet_step(fake(a=[[1, 2]], b=[[1, 2]]), plan, ExecutionLimits(max_moves=1, order="smallest-first"))
    g = fake(a=[[1, 2]], b=[[1, 2]])
    quiet_step(g, plan, ExecutionLimits(max_moves=1, order="smallest-first"))  # ordered, and the disk guard
    assert g.calls["replica_sizes"] == 1  # one DescribeLogDirs for both


def test_a_move_touching_no_broker_counts_only_against_max_moves():
    listing = {tp("x", 0): InFlightReassignment(topic="x", partition=0, replicas=(1, 2, 3),
                                                 adding_replicas=(3,), removing_replicas=(1,))}
    reorder = mv("t", 0, (1, 3), (3, 1))
    copy = mv("t", 1, (1, 2), (1, 3))
    assert select_batch([reorder, copy], listing, ExecutionLimits(max_moves_per_broker=1)) == [reorder]
    assert select_batch([reorder, copy], listing, ExecutionLimits(max_moves=2)) == [reorder]


# -- retry safety ------------------------------------------------------------------------------------


def test_repeated_steps_never_submit_a_move_twice():
    f = fake(t=[[1, 2], [2, 3], [3, 4]])
    plan = plan_of(mv("t", 0, (1, 2), (5, 6)), mv("t", 1, (2, 3), (4, 5)), mv("t", 2, (3, 4), (1, 6)))
    for _ in range(3):
        quiet_step(f, plan, ExecutionLimits(max_moves=2, order="plan"))
    assert submitted(f) == [tp("t", 0), tp("t", 1)]


def test_a_killed_run_is_resumed_by_the_next_one_without_submitting_anything_twice(tmp_path):
    f = fake(t=[[1, 2], [2, 3], [3, 4], [4, 5]])
    plan = plan_of(*(mv("t", i, r, (6, r[1])) for i, r in enumerate([(1, 2), (2, 3), (3, 4), (4, 5)])))
    options = ExecutionOptions(throttle_bytes_per_sec=7000)
    limits = ExecutionLimits(max_moves=2, order="plan")
    quiet_step(f, plan, limits, options, state_dir=tmp_path)  # the first try submits 2, then dies (SIGKILL)
    assert f.broker_configs[6][LEADER_RATE] == "7000"
    f.complete([tp("t", 0)])
    result = run(f, plan, limits, options, state_dir=tmp_path, sleep=lambda s: f.complete(), settle_s=0)
    assert result.status.ok
    assert sorted(submitted(f)) == sorted(plan.partitions)
    assert f.broker_configs == {b: {} for b in RACKS}


def test_moves_refused_by_the_broker_are_not_resent_within_a_run():
    f = fake(t=[[1, 2]])
    real = f.alter_reassignments
    calls = []

    def flaky(targets, **kw):
        calls.append(dict(targets))
        res = real(targets, **kw)
        f.inflight.clear()
        return type(res)(results=tuple(PartitionResult(topic=r.topic, partition=r.partition,
                                                        error_code="INVALID_REPLICA_ASSIGNMENT", error="no")
                                        for r in res.results))

    f.alter_reassignments = flaky  # type: ignore[method-assign]
    result = run(f, plan_of(mv("t", 0, (1, 2), (2, 3))), NO_LIMITS, SAFE, state_dir=None,
                 sleep=lambda s: None, settle_s=0)
    assert len(calls) == 1
    assert "INVALID_REPLICA_ASSIGNMENT" in result.status.failed[tp("t", 0)]


# -- throttles ------------------------------------------------------------------------------------


def _preexisting(f: FakeClusterAdmin) -> None:
    f.broker_configs[1][LEADER_RATE] = "999"
    f.broker_configs[5][FOLLOWER_RATE] = "12345"  # not involved: must never change
    f.topic_configs["t"][LEADER_REPLICAS] = "7:1"


def test_throttles_touch_only_involved_brokers_and_replicas_and_come_back_exactly(tmp_path):
    f = fake(t=[[1, 2], [2, 3]] + [[1, 2]] * 6, u=[[2, 3]])
    _preexisting(f)
    before = (json.dumps(f.broker_configs, sort_keys=True), json.dumps(f.topic_configs, sort_keys=True))
    plan = plan_of(mv("t", 0, (1, 2), (1, 4)), mv("t", 1, (2, 3), (2, 4)))
    options = ExecutionOptions(throttle_bytes_per_sec=5000)
    observed = {}
    real_set = f.set_throttles

    def spy(brokers, topics):
        observed.setdefault("backup_existed", (tmp_path / THROTTLE_BACKUP_FILE).exists())
        real_set(brokers, topics)

    f.set_throttles = spy  # type: ignore[method-assign]
    s = quiet_step(f, plan, options=options, state_dir=tmp_path)
    assert observed["backup_existed"]  # the backup was on disk before the first throttle
    assert s.submitted == [tp("t", 0), tp("t", 1)]
    assert {b for b, c in f.broker_configs.items() if c.get(FOLLOWER_RATE) == "5000"} == {1, 2, 3, 4}
    assert f.broker_configs[5] == {FOLLOWER_RATE: "12345"}
    assert f.topic_configs["t"][LEADER_REPLICAS] == "0:1,0:2,1:2,1:3,7:1"
    assert f.topic_configs["t"][FOLLOWER_REPLICAS] == "0:4,1:4"
    assert "u" not in read_backup(tmp_path).topics

    f.complete([tp("t", 0)])  # t-0 finishes: its entries and broker 1's rate go, t-1 keeps its own
    quiet_step(f, plan, options=options, state_dir=tmp_path)
    assert f.broker_configs[1] == {LEADER_RATE: "999"}
    assert f.topic_configs["t"][LEADER_REPLICAS] == "1:2,1:3,7:1"
    assert f.topic_configs["t"][FOLLOWER_REPLICAS] == "1:4"

    f.complete()
    s = quiet_step(f, plan, options=options, state_dir=tmp_path)
    assert s.ok
    finish(f, plan, options, state_dir=tmp_path)
    assert (json.dumps(f.broker_configs, sort_keys=True), json.dumps(f.topic_configs, sort_keys=True)) == before
    assert not (tmp_path / THROTTLE_BACKUP_FILE).exists()


def test_a_star_replica_list_is_kept_as_it_was():
    backup = ThrottleBackup(brokers={1: {LEADER_RATE: None, FOLLOWER_RATE: None}},
                            topics={"t": {LEADER_REPLICAS: "*", FOLLOWER_REPLICAS: None}})
    _, topics = desired_throttles(backup, [mv("t", 0, (1, 2), (1, 3))], 10)
    assert topics["t"] == {LEADER_REPLICAS: "*", FOLLOWER_REPLICAS: "0:3"}


@pytest.mark.parametrize("how", ["success", "failure", "stop", "cancel"])
def test_no_throttle_is_left_behind(tmp_path, how):
    f = fake(t=[[1, 2], [2, 3], [3, 4]])
    _preexisting(f)
    before = (json.dumps(f.broker_configs, sort_keys=True), json.dumps(f.topic_configs, sort_keys=True))
    plan = plan_of(mv("t", 0, (1, 2), (5, 6)), mv("t", 1, (2, 3), (4, 5)), mv("t", 2, (3, 4), (1, 6)))
    options = ExecutionOptions(throttle_bytes_per_sec=5000)
    polls = []

    def tick(_):
        polls.append(1)
        if how == "failure" and len(polls) == 2:
            raise RuntimeError("the cluster went away")
        if how == "cancel" and len(polls) == 2:
            cancel(f, plan, sleep=lambda s: None)
        if how == "success":
            f.complete()

    # the cancel operator cancels, then the execute task is stopped (on_kill) or sees nothing left
    kwargs = {"should_stop": lambda: len(polls) >= 2} if how in ("stop", "cancel") else {}
    try:
        run(f, plan, ExecutionLimits(max_moves=1, order="plan"), options, state_dir=tmp_path, sleep=tick,
            settle_s=0, **kwargs)
    except RuntimeError:
        assert how == "failure"
    if how == "cancel":
        finish(f, plan, options, state_dir=tmp_path)
    assert (json.dumps(f.broker_configs, sort_keys=True), json.dumps(f.topic_configs, sort_keys=True)) == before
    assert not (tmp_path / THROTTLE_BACKUP_FILE).exists()


def test_a_leftover_backup_is_restored_by_a_run_without_a_throttle(tmp_path):
    f = fake(t=[[1, 2]])
    plan = plan_of(mv("t", 0, (1, 2), (3, 4)))
    quiet_step(f, plan, options=ExecutionOptions(throttle_bytes_per_sec=100), state_dir=tmp_path)  # killed
    assert f.broker_configs[3]
    f.complete()
    result = run(f, plan, NO_LIMITS, SAFE, state_dir=tmp_path, sleep=lambda s: None, settle_s=0)
    assert result.status.ok and result.finish["throttles_restored"] == "yes"
    assert f.broker_configs == {b: {} for b in RACKS} and f.topic_configs["t"] == {}


def test_restore_fails_loudly_if_the_configs_do_not_come_back(tmp_path):
    f = fake(t=[[1, 2]])
    plan = plan_of(mv("t", 0, (1, 2), (3, 4)))
    quiet_step(f, plan, options=ExecutionOptions(throttle_bytes_per_sec=100), state_dir=tmp_path)
    f.set_throttles = lambda b, t: None  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="differ from the backup"):
        finish(f, plan, SAFE, state_dir=tmp_path)
    assert (tmp_path / THROTTLE_BACKUP_FILE).exists()  # kept for the next run


# -- dry run ----------------------------------------------------------------------------------------


def test_dry_run_changes_nothing_and_logs_the_exact_requests(tmp_path, caplog):
    f = fake(t=[[1, 2], [2, 3]])
    plan = plan_of(mv("t", 0, (1, 2), (3, 4)), mv("t", 1, (2, 3), (3, 4)))
    options = ExecutionOptions(throttle_bytes_per_sec=5000, dry_run=True)
    with caplog.at_level(logging.INFO):
        result = run(f, plan, ExecutionLimits(max_moves_per_broker=1, order="plan"), options, state_dir=tmp_path,
                     sleep=lambda s: None, settle_s=0, before_first_submit=lambda s: pytest.fail("no rollback"))
    assert f.alter_requests == [] and f.broker_configs == {b: {} for b in RACKS}
    assert list(tmp_path.iterdir()) == []
    assert result.status.would_submit == [tp("t", 0)]
    assert '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[3,4]}]}' in caplog.text
    assert "DRY RUN: would set throttle configs" in caplog.text and '"follower.replication.throttled.rate": "5000"' in caplog.text


# -- deadline --------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 11, 22, 2, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.t


@pytest.mark.parametrize("on_deadline", ["finish", "cancel"])
def test_a_deadline_stops_new_submissions_and_the_next_run_resumes_exactly(tmp_path, on_deadline):
    f = fake(t=[[1, 2]] * 6)
    plan = plan_of(*(mv("t", i, (1, 2), (3 + i % 3, 6)) for i in range(6)))
    clock = Clock()
    deadline = clock.t + timedelta(minutes=10)
    polls = []

    def tick(_):
        polls.append(1)
        clock.t += timedelta(minutes=4)
        if len(polls) in (1, 4):  # the second batch is still copying when the deadline passes
            f.complete()

    options = ExecutionOptions(throttle_bytes_per_sec=100)
    first = run(f, plan, ExecutionLimits(max_moves=2, order="plan"), options, state_dir=tmp_path, sleep=tick,
                now=clock, deadline=deadline, on_deadline=on_deadline, settle_s=0)
    assert first.deadline_reached and not first.status.complete
    assert submitted(f) == [tp("t", i) for i in range(4)]
    if on_deadline == "cancel":
        assert first.cancel is not None and len(first.cancel.cancelled) == 2
        assert first.status.in_flight == [] and len(first.status.pending) == 4
    else:
        assert first.cancel is None and len(first.status.pending) == 2 and first.status.in_flight == []
    assert f.broker_configs == {b: {} for b in RACKS}
    remaining = set(first.status.pending)

    f.alter_requests.clear()
    second = run(f, plan, ExecutionLimits(max_moves=2, order="plan"), options, state_dir=tmp_path,
                 sleep=lambda s: f.complete(), settle_s=0)
    assert second.status.ok
    assert set(submitted(f)) == remaining and len(submitted(f)) == len(remaining)


def test_a_deadline_already_passed_submits_nothing():
    f = fake(t=[[1, 2]])
    clock = Clock()
    result = run(f, plan_of(mv("t", 0, (1, 2), (3, 4))), NO_LIMITS, SAFE, state_dir=None, now=clock,
                 deadline=clock.t, sleep=lambda s: None, settle_s=0)
    assert result.deadline_reached and f.alter_requests == [] and result.status.pending == [tp("t", 0)]


def test_a_naive_deadline_is_refused():
    f = fake(t=[[1, 2]])
    with pytest.raises(ConfigurationError, match="time zone"):
        run(f, plan_of(mv("t", 0, (1, 2), (3, 4))), NO_LIMITS, SAFE, state_dir=None,
            deadline=datetime(2026, 1, 1), sleep=lambda s: None)


# -- leaders, rollback, cancel ----------------------------------------------------------------------


class LeaderFake(FakeClusterAdmin):
    """Reports partition leaders as set in ``leaders`` (the base fake makes the first replica lead)."""

    leaders: dict[TopicPartition, int]
    elected: list[list[TopicPartition]]

    def snapshot(self, *, topics=None, include_sizes=False):
        snap = super().snapshot(topics=topics, include_sizes=include_sizes)
        parts = tuple(p.model_copy(update={"leader": self.leaders.get(p.tp, p.leader)}) for p in snap.partitions)
        return snap.model_copy(update={"partitions": parts})

    def elect_preferred_leaders(self, partitions):
        self.elected.append(sorted(partitions))
        for x in partitions:
            self.leaders.pop(x, None)
        return super().elect_preferred_leaders(partitions)


def test_preferred_leaders_are_elected_for_moved_partitions_once_done():
    f = LeaderFake.build(brokers=RACKS, topics={"t": [[1, 2], [2, 3]]})
    f.leaders, f.elected = {tp("t", 0): 2, tp("t", 1): 3}, []
    plan = plan_of(mv("t", 0, (1, 2), (3, 2)), mv("t", 1, (2, 3), (4, 3)))
    result = run(f, plan, NO_LIMITS, ExecutionOptions(elect_leaders=True), state_dir=None,
                 sleep=lambda s: f.complete(), settle_s=0)
    assert result.status.ok
    assert f.elected == [[tp("t", 0), tp("t", 1)]]
    assert result.status.elections == {tp("t", 0): None, tp("t", 1): None}


def test_the_rollback_plan_is_written_before_the_first_submission(tmp_path):
    f = fake(t=[[1, 2], [2, 3]])
    plan = plan_of(mv("t", 0, (1, 2), (3, 4)), mv("t", 1, None, (4, 5)))
    order = []
    real = f.alter_reassignments

    def spy(targets, **kw):
        order.append(("alter", (tmp_path / ROLLBACK_FILE).exists()))
        return real(targets, **kw)

    f.alter_reassignments = spy  # type: ignore[method-assign]
    run(f, plan, NO_LIMITS, SAFE, state_dir=None, sleep=lambda s: f.complete(), settle_s=0,
        before_first_submit=lambda s: write_rollback_if_missing(tmp_path, plan, s))
    assert order == [("alter", True)]
    rollback = ReassignmentPlan.model_validate_json((tmp_path / ROLLBACK_FILE).read_text())
    assert [(m.tp, m.target_replicas, m.current_replicas) for m in rollback.moves] == [
        (tp("t", 0), (1, 2), (3, 4)), (tp("t", 1), (2, 3), (4, 5))]
    assert json.loads((tmp_path / KAFKA_ROLLBACK_FILE).read_text())["partitions"][1]["replicas"] == [2, 3]
    (tmp_path / ROLLBACK_FILE).write_text("kept")
    assert write_rollback_if_missing(tmp_path, plan, ExecutionStatus()) is None
    assert (tmp_path / ROLLBACK_FILE).read_text() == "kept"


# -- the summary ----------------------------------------------------------------------------------


def test_the_summary_is_small_json_even_for_a_huge_plan():
    s = ExecutionStatus(total=50_000, pending=[tp("t", i) for i in range(50_000)],
                        stale={tp("s", i): ((1, 2), (2, 3)) for i in range(5000)})
    text = json.dumps(s.summary())
    assert len(text) < 4000 and s.summary()["pending"] == 50_000


def test_the_fake_satisfies_the_port():
    assert isinstance(fake(t=[[1, 2]]), ClusterAdmin)


def test_state_dir_default_is_not_guessed(tmp_path: Path):
    """The engine never invents a state dir: the caller decides (operators use <plan dir>/run)."""
    f = fake(t=[[1, 2]])
    quiet_step(f, plan_of(mv("t", 0, (1, 2), (3, 4))))
    assert list(tmp_path.iterdir()) == []


def test_a_stop_requested_while_observing_submits_nothing_and_writes_nothing(tmp_path):
    f = fake(t=[[1, 2]])
    s = quiet_step(f, plan_of(mv("t", 0, (1, 2), (3, 4))), options=ExecutionOptions(throttle_bytes_per_sec=10),
                   state_dir=tmp_path, should_stop=lambda: True)
    assert s.pending == [tp("t", 0)] and s.submitted == []
    assert f.alter_requests == [] and f.broker_configs == {b: {} for b in RACKS} and list(tmp_path.iterdir()) == []


# -- the read-only pre-flight (the approval form shows it) ------------------------------------------------


def test_preflight_finds_what_the_first_step_finds_and_writes_nothing(tmp_path):
    from airflow_kafka_reassign.core.execution import preflight, preflight_findings, refusal

    plan = plan_of(mv("t", 0, [1, 2], [4, 2]), mv("t", 1, [2, 1], [5, 3]))  # t-1 is on [2, 3]: stale
    options = ExecutionOptions(throttle_bytes_per_sec=1_000_000)
    f = fake(t=[[1, 2], [2, 3], [3, 1]])
    f.broker_configs[1][LEADER_RATE] = "7"  # an operator's own throttle
    configs = json.dumps([f.broker_configs, f.topic_configs], sort_keys=True)
    status = preflight(f, plan, options, settle_s=0, sleep=lambda s: None)
    assert json.dumps([f.broker_configs, f.topic_configs], sort_keys=True) == configs and f.alter_requests == []
    first = quiet_step(fake(t=[[1, 2], [2, 3], [3, 1]]), plan, options=options, submit=False,
                       state_dir=tmp_path / "run")
    assert (status.pending, status.stale, status.blocked) == (first.pending, first.stale, first.blocked)
    assert refusal(status) is None
    assert [line for _, line in preflight_findings(status)] == [
        "stale move t-1 refused: the plan expects replicas [2, 1], the cluster has [2, 3]"]


def test_refusal_names_why_no_move_would_run():
    from airflow_kafka_reassign.core.execution import preflight, refusal

    f = fake(t=[[1, 2]])
    stale_only = plan_of(mv("t", 0, [3, 4], [4, 5]))
    why = refusal(preflight(f, stale_only, SAFE, settle_s=0, sleep=lambda s: None))
    assert why is not None and why.startswith("none of the plan's 1 move(s) can run: 1 stale and 0 refused (t-0)")
    done = plan_of(mv("t", 0, [3, 4], [1, 2]))  # already where the plan wants it: nothing to refuse
    assert refusal(preflight(f, done, SAFE, settle_s=0, sleep=lambda s: None)) is None


@pytest.mark.parametrize("failures", [MAX_UNREACHABLE_POLLS - 1, MAX_UNREACHABLE_POLLS])
def test_polls_that_cannot_reach_the_cluster_are_asked_again_up_to_the_limit(tmp_path, monkeypatch, caplog, failures):
    """A broker restart or a controller move can make one poll's request time out: the run asks again after a
    poll interval (a tick is safe to repeat), and gives up only after MAX_UNREACHABLE_POLLS in a row."""
    f = fake(t=[[1, 2], [2, 3]])
    plan = plan_of(mv("t", 0, (1, 2), (3, 4)), mv("t", 1, (2, 3), (4, 5)))
    snapshot, calls, sleeps = f.snapshot, [], []

    def flaky(**kw):
        calls.append(1)
        if 2 <= len(calls) < 2 + failures:  # the pre-flight reads once, then the first polls fail
            raise ClusterUnreachableError("did not answer within 20 s")
        return snapshot(**kw)

    monkeypatch.setattr(f, "snapshot", flaky)

    def sleep(s):
        sleeps.append(s)
        f.complete()

    with caplog.at_level(logging.WARNING):
        if failures >= MAX_UNREACHABLE_POLLS:
            with pytest.raises(ClusterUnreachableError):
                run(f, plan, NO_LIMITS, ExecutionOptions(throttle_bytes_per_sec=1000), state_dir=tmp_path,
                    sleep=sleep, settle_s=0, poll_interval_s=7.0)
            assert not (tmp_path / THROTTLE_BACKUP_FILE).exists()  # the run's end restored the throttles
            assert all(not c for c in f.broker_configs.values())
            return
        result = run(f, plan, NO_LIMITS, ExecutionOptions(throttle_bytes_per_sec=1000), state_dir=tmp_path,
                     sleep=sleep, settle_s=0, poll_interval_s=7.0)
    assert result.status.ok and sorted(p.replicas for p in f.snapshot(topics=["t"]).partitions) == [(3, 4), (4, 5)]
    assert sleeps[:failures] == [7.0] * failures
    assert [r.getMessage()[:14] for r in caplog.records if "could not reach" in r.getMessage()] == [
        f"poll {n}/{MAX_UNREACHABLE_POLLS} could" for n in range(1, failures + 1)]
    assert sorted(tp for request, _ in f.alter_requests for tp in request) == [tp("t", 0), tp("t", 1)]  # once each
