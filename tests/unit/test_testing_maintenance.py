"""The in-memory fake's maintenance primitives behave as the real cluster did (testing.py): log dirs with
intra-broker moves that show a future replica until they complete, fenced brokers, UnregisterBroker."""

from __future__ import annotations

from airflow_kafka_reassign.core.maintenance.cordon import CORDONED_LOG_DIRS
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica as R
from airflow_kafka_reassign.testing import FakeClusterAdmin


def fake() -> FakeClusterAdmin:
    f = FakeClusterAdmin.build({1: None, 2: None, 3: None, 4: None}, {"t": [[1, 2], [2, 3]]}, log_dirs=2)
    f.sizes = {TopicPartition("t", 0): {1: 100, 2: 100}}
    return f


def test_a_log_dir_move_shows_the_future_replica_until_it_completes():
    f = fake()
    ld = f.log_dirs([TopicPartition("t", 0)])
    assert ld.dir_of(R("t", 0, 1)) == "/kafka/1/data-1" and ld.future_of(R("t", 0, 1)) is None
    assert all(r.ok for r in f.alter_replica_log_dirs({R("t", 0, 1): "/kafka/1/data-2"}))
    ld = f.log_dirs(None)
    path, future = ld.future_of(R("t", 0, 1))
    assert path == "/kafka/1/data-2" and future.future and future.offset_lag == 100
    assert ld.dir_of(R("t", 0, 1)) == "/kafka/1/data-1"
    f.complete_log_dir_moves()
    ld = f.log_dirs(None)
    assert ld.dir_of(R("t", 0, 1)) == "/kafka/1/data-2" and ld.future_of(R("t", 0, 1)) is None


def test_log_dir_move_errors_as_kafka_answers_them():
    f = fake()
    f.broker_configs[1][CORDONED_LOG_DIRS] = "/kafka/1/data-2"
    results = {r.replica: r.error_code for r in f.alter_replica_log_dirs({
        R("t", 0, 1): "/kafka/1/data-2", R("t", 0, 2): "/nope", R("t", 0, 4): "/kafka/4/data-2"})}
    assert results == {R("t", 0, 1): "INVALID_REPLICATION_ASSIGNMENT", R("t", 0, 2): "LOG_DIR_NOT_FOUND",
                       R("t", 0, 4): "REPLICA_NOT_AVAILABLE"}
    assert f.log_dirs(None).dirs[1][1].cordoned


def test_fenced_then_unregistered():
    f = fake()
    f.down.add(4)
    assert f.describe_cluster().broker(4).fenced
    assert f.describe_cluster(include_fenced=False).broker(4) is None
    assert f.unregister_broker(4).ok and f.describe_cluster().broker(4) is None
    assert f.unregister_broker(4).error_code == "BROKER_ID_NOT_REGISTERED"
