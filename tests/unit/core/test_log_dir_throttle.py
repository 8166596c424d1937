"""The log-dir throttle (replica.alter.log.dirs.io.max.bytes.per.second) through the throttle port methods,
backed up in the run's throttle backup before it is set, restored exactly with the rest."""

from __future__ import annotations

from airflow_kafka_reassign.core.execution.throttle import (
    FOLLOWER_RATE,
    LEADER_RATE,
    LOG_DIR_RATE,
    read_backup,
    restore_throttles,
    sync_log_dir_throttle,
    sync_throttles,
)
from airflow_kafka_reassign.core.records.store import MemoryStore
from airflow_kafka_reassign.core.vocabulary.models import Move
from airflow_kafka_reassign.testing import FakeClusterAdmin


def fake() -> FakeClusterAdmin:
    return FakeClusterAdmin.build({1: None, 2: None, 3: None}, {"t": [[1, 2]]}, log_dirs=2)


def test_set_backed_up_first_and_restored_exactly_with_someone_elses_value():
    f, store = fake(), MemoryStore()
    f.broker_configs[2][LOG_DIR_RATE] = "777"
    assert sync_log_dir_throttle(f, [1, 2], 1000, state_dir=store)
    assert read_backup(store).brokers == {1: {LEADER_RATE: None, FOLLOWER_RATE: None, LOG_DIR_RATE: None},
                                          2: {LEADER_RATE: None, FOLLOWER_RATE: None, LOG_DIR_RATE: "777"}}
    assert f.describe_throttles([1, 2], [], broker_keys=[LOG_DIR_RATE]).brokers == {
        1: {LOG_DIR_RATE: "1000"}, 2: {LOG_DIR_RATE: "1000"}}
    assert not sync_log_dir_throttle(f, [1, 2], 1000, state_dir=store)  # nothing differs
    assert restore_throttles(f, store)
    assert f.broker_configs[1].get(LOG_DIR_RATE) is None and f.broker_configs[2][LOG_DIR_RATE] == "777"
    assert read_backup(store) is None


def test_beside_a_reassignment_throttle_both_are_restored():
    f, store = fake(), MemoryStore()
    sync_throttles(f, [Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 2))], 5000,
                   state_dir=store)
    sync_log_dir_throttle(f, [1, 3], 2000, state_dir=store)
    backup = read_backup(store).brokers
    assert backup[1] == {LEADER_RATE: None, FOLLOWER_RATE: None, LOG_DIR_RATE: None}
    assert f.broker_configs[1] == {LEADER_RATE: "5000", FOLLOWER_RATE: "5000", LOG_DIR_RATE: "2000"}
    sync_log_dir_throttle(f, [1, 3], None, state_dir=store)  # the moves are done: back to before
    assert LOG_DIR_RATE not in f.broker_configs[1] and f.broker_configs[1][LEADER_RATE] == "5000"
    restore_throttles(f, store)
    assert all(not f.broker_configs[b] for b in (1, 2, 3))


def test_the_reassignment_throttle_leaves_a_log_dir_rate_set_meanwhile_alone():
    f, store = fake(), MemoryStore()
    f.broker_configs[3][LOG_DIR_RATE] = "777"  # someone else's, backed up below
    sync_log_dir_throttle(f, [3], 2000, state_dir=store)
    moves = [Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(1, 3))]
    sync_throttles(f, moves, 5000, state_dir=store)
    sync_throttles(f, [], 5000, state_dir=store)  # the move is done: its rates go back
    assert f.broker_configs[3] == {LOG_DIR_RATE: "2000"}
    restore_throttles(f, store)
    assert f.broker_configs[3] == {LOG_DIR_RATE: "777"}
