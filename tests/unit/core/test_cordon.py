"""core/maintenance/cordon.py on the in-memory fake: what to cordon, the backup before the change, the exact restore,
and the check of targets that land on a cordoned broker or log dir."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_reassign.core.maintenance.cordon import (
    CORDON_BACKUP_FILE,
    CORDONED_LOG_DIRS,
    CordonRefusedError,
    CordonView,
    apply_cordons,
    check_cordons,
    cordon_violations,
    decommission_cordons,
    disk_removal_cordons,
    merge_cordon,
    parse_cordon,
    read_backup,
    restore_cordons,
)
from airflow_kafka_reassign.core.records.journal import read_journal
from airflow_kafka_reassign.core.records.store import MemoryStore
from airflow_kafka_reassign.core.vocabulary.models import Move, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import ClusterCapabilities, NewPartitions, TopicPartitionReplica
from airflow_kafka_reassign.exceptions import ConfigurationError, UnsupportedBrokerError
from airflow_kafka_reassign.testing import FakeClusterAdmin


def fake(**kwargs) -> FakeClusterAdmin:
    return FakeClusterAdmin.build({1: "a", 2: "b", 3: "c", 4: "a"}, {"orders": [[1, 2], [2, 3], [3, 1]]},
                                  log_dirs=2, **kwargs)


def test_values_parse_render_and_merge():
    assert parse_cordon(None) == frozenset() and parse_cordon(" * ") == "*"
    assert parse_cordon("/a, /b,") == frozenset({"/a", "/b"})
    assert merge_cordon("/b", frozenset({"/a"})) == "/a,/b"
    assert merge_cordon("/b", "*") == "*" and merge_cordon("*", frozenset({"/a"})) == "*"
    assert merge_cordon(None, frozenset()) is None


def test_what_a_decommission_and_a_disk_removal_cordon():
    assert decommission_cordons([4, 2, 4]) == {2: "*", 4: "*"}
    assert disk_removal_cordons([(3, "/kafka/3/data-2/"), (3, "/kafka/3/data-1"), (1, "/x")]) == {
        1: frozenset({"/x"}), 3: frozenset({"/kafka/3/data-1", "/kafka/3/data-2"})}
    with pytest.raises(ConfigurationError, match="absolute path"):
        disk_removal_cordons([(3, "data-2")])  # KAFKA-20901: a relative path is not enforced


def test_the_backup_is_written_before_the_change_and_the_restore_is_exact():
    f = fake()
    f.broker_configs[3][CORDONED_LOG_DIRS] = "/kafka/3/data-1"  # someone else's cordon
    store = MemoryStore()
    seen_backup = []
    set_cordons = f.set_cordons
    f.set_cordons = lambda values: (seen_backup.append(read_backup(store)), set_cordons(values))  # type: ignore[method-assign]
    changed = apply_cordons(f, {4: "*", 3: frozenset({"/kafka/3/data-2"})}, state_dir=store)
    assert changed == {3: "/kafka/3/data-1,/kafka/3/data-2", 4: "*"}
    assert seen_backup[0] is not None and seen_backup[0].brokers == {3: "/kafka/3/data-1", 4: None}
    assert f.describe_cordons([3, 4]) == {3: "/kafka/3/data-1,/kafka/3/data-2", 4: "*"}
    assert json.loads(store.read(CORDON_BACKUP_FILE))["brokers"] == {"3": "/kafka/3/data-1", "4": None}
    # a second apply (a retry) keeps the first backup: the values before the run, not ours
    apply_cordons(f, {4: "*", 2: "*"}, state_dir=store)
    assert read_backup(store).brokers == {2: None, 3: "/kafka/3/data-1", 4: None}
    assert restore_cordons(f, store, sleep=lambda s: None)
    assert f.describe_cordons([2, 3, 4]) == {2: None, 3: "/kafka/3/data-1", 4: None}
    assert store.read(CORDON_BACKUP_FILE) is None
    assert [e["event"] for e in read_journal(store)] == ["cordoned", "cordoned", "cordons-restored"]
    assert not restore_cordons(f, store)  # nothing left to restore


def test_restore_waits_for_a_broker_that_shows_the_old_value_for_a_moment():
    f = fake()
    store = MemoryStore()
    apply_cordons(f, {4: "*"}, state_dir=store)
    reads = {"n": 0}
    describe = f.describe_cordons

    def lagging(brokers):
        reads["n"] += 1
        return {4: "*"} if reads["n"] < 3 else describe(brokers)  # the broker applies it a moment later
    f.describe_cordons = lagging  # type: ignore[method-assign]
    clock = {"t": 0.0}
    assert restore_cordons(f, store, sleep=lambda s: clock.__setitem__("t", clock["t"] + s), clock=lambda: clock["t"])
    assert reads["n"] == 3 and f.broker_configs[4].get(CORDONED_LOG_DIRS) is None


def test_restore_that_never_shows_raises_and_keeps_the_backup():
    f = fake()
    store = MemoryStore()
    apply_cordons(f, {4: "*"}, state_dir=store)
    f.describe_cordons = lambda brokers: {4: "*"}  # type: ignore[method-assign]
    clock = {"t": 0.0}
    with pytest.raises(RuntimeError, match=r"still differs .* brokers \[4\]"):
        restore_cordons(f, store, check_s=2, sleep=lambda s: clock.__setitem__("t", clock["t"] + s),
                        clock=lambda: clock["t"])
    assert read_backup(store) is not None


def test_a_broker_that_is_down_keeps_its_backup_entry():
    f = fake()
    store = MemoryStore()
    apply_cordons(f, {4: "*", 3: "*"}, state_dir=store)
    f.down.add(4)
    assert restore_cordons(f, store, sleep=lambda s: None)
    assert f.broker_configs[3].get(CORDONED_LOG_DIRS) is None
    assert read_backup(store).brokers == {4: None}


def test_a_cluster_without_cordons_is_refused_before_anything_is_read():
    f = fake(capabilities=ClusterCapabilities(metadata_version=27))
    store = MemoryStore()
    with pytest.raises(UnsupportedBrokerError, match=r"4\.3\+.*level is 27.*Nothing was changed"):
        apply_cordons(f, {4: "*"}, state_dir=store)
    assert store.objects == {}


def test_a_path_that_is_not_a_log_dir_is_refused_by_the_broker():
    with pytest.raises(ValueError, match="must be present in log.dirs"):
        fake().set_cordons({3: "/nope"})


def test_the_controller_places_no_new_replica_on_a_cordoned_broker_or_dir():
    f = fake()
    apply_cordons(f, {4: "*", 3: frozenset({"/kafka/3/data-1"})}, state_dir=MemoryStore())
    assert f.create_partitions([NewPartitions(topic="orders", total_count=12)])["orders"].ok
    new = [f.replicas[TopicPartition("orders", p)] for p in range(3, 12)]
    assert all(4 not in r for r in new) and any(3 in r for r in new)
    dirs = f.log_dirs(None).dirs
    assert not [r for d in dirs[3] if d.path == "/kafka/3/data-1" for r in d.replicas if r.partition >= 3]
    view = CordonView.from_log_dirs(dirs)
    assert view.whole == {4} and view.dirs[3] == {"/kafka/3/data-1"}


@pytest.mark.parametrize("refuses, accepted", [(True, False), (False, True)], ids=["4.4", "4.3.1"])
def test_explicit_assignments_onto_a_cordoned_broker_as_each_kafka_line(refuses, accepted):
    f = fake(capabilities=ClusterCapabilities(metadata_version=30, cordons=True, jbod=True,
                                              cordons_refuse_explicit_assignments=refuses))
    f.set_cordons({4: "*"})
    grow = f.create_partitions([NewPartitions(topic="orders", total_count=4, assignment=((4, 1),))])["orders"]
    move = f.alter_reassignments({TopicPartition("orders", 0): [4, 2]}).results[0]
    assert grow.ok is accepted and move.ok is accepted
    if not accepted:
        assert grow.error_code == move.error_code == "INVALID_REPLICA_ASSIGNMENT"


def test_the_check_finds_every_new_replica_on_a_cordoned_broker_or_dir():
    view = CordonView.from_configs({4: "*", 3: "/d/3/b", 2: None}, broker_dirs={3: ["/d/3/a", "/d/3/b"]})
    assert view.whole == {4}
    moves = [Move(topic="t", partition=0, current_replicas=(4, 1), target_replicas=(4, 2)),  # 4 stays: not new
             Move(topic="t", partition=1, current_replicas=(1, 2), target_replicas=(4, 2))]
    found = cordon_violations(view, moves=moves, assignments={TopicPartition("u", 0): [3, 4]},
                              log_dir_moves={TopicPartitionReplica("t", 2, 3): "/d/3/b",
                                             TopicPartitionReplica("t", 3, 3): "/d/3/a"})
    assert [str(v) for v in found] == ["t-1 -> broker 4 (move)", "t-2 -> log dir /d/3/b of broker 3 (log-dir)",
                                       "u-0 -> broker 4 (assignment)"]
    with pytest.raises(CordonRefusedError, match=r"3 new replica\(s\).*KAFKA-20832.*allow_cordoned_targets=True"):
        check_cordons(view, moves=moves, assignments={TopicPartition("u", 0): [3, 4]},
                      log_dir_moves={TopicPartitionReplica("t", 2, 3): "/d/3/b"})
    assert len(check_cordons(view, moves=moves, allow_cordoned_targets=True)) == 1
    # every dir of a broker listed by path cordons it whole, once its dirs are known
    assert CordonView.from_configs({3: "/d/3/a,/d/3/b"}, {3: ["/d/3/a", "/d/3/b"]}).whole == {3}
