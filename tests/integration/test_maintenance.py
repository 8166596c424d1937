"""The maintenance primitives on a real KRaft cluster of our own: 4 nodes (1..3 combined broker+controller
voters, 4 a broker only), 2 log dirs each (``--log-dirs 2``), Kafka 4.3+ (the sandbox's default version, or
``AKR_MAINTENANCE_KAFKA_VERSION``; checked on 4.3.0, 4.3.1 and 4.4.0).

The tests share the cluster and run in file order: the last one stops broker 4 and unregisters it.
No fixed sleeps: every wait polls with a bound. Log dirs, cordons and the log-dir throttle are judged through the
project's adapter and through a second observer sharing no code with it (observers.py: the brokers' directories on
disk, DescribeConfigs with a client of the test's own).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_helpers import cordon_capable_cluster, delete_topics, plan_tasks_in_process, replicas_of
from observers import admin_client, broker_dirs, cordons, dir_of, futures_by_dir, log_dir_rate, replicas_by_dir

from airflow_kafka_reassign.core.execution.throttle import LOG_DIR_RATE, restore_throttles, sync_log_dir_throttle
from airflow_kafka_reassign.core.execution.throttle import read_backup as read_throttle_backup
from airflow_kafka_reassign.core.maintenance.cordon import (
    CordonRefusedError,
    CordonView,
    apply_cordons,
    check_cordons,
    decommission_cordons,
    read_backup,
    restore_cordons,
)
from airflow_kafka_reassign.core.maintenance.lifecycle import (
    BrokerStillRunningError,
    broker_state,
    unregister,
    wait_for_shutdown,
)
from airflow_kafka_reassign.core.maintenance.quorum import VoterRemovalRefusedError, check_voters
from airflow_kafka_reassign.core.records.store import LocalStore
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import NewPartitions, TopicPartitionReplica
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import create_topic, create_topics, produce
from airflow_kafka_reassign.sandbox import Sandbox, wait_until
from airflow_kafka_reassign.sandbox.maven import parse_version

DECOMMISSIONED = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with cordon_capable_cluster(tmp_path_factory.mktemp("maintenance-sandbox"), log_dirs=2) as sandbox:
        yield sandbox


@pytest.fixture
def admin(cluster: Sandbox) -> Iterator[KafkaClusterAdmin]:
    with KafkaClusterAdmin(cluster.client_config(), timeout_s=30) as a:
        yield a


def name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def placed(config: dict[str, Any], topic: str) -> dict[int, tuple[int, ...]]:
    return wait_until(lambda: replicas_of(config, topic), f"{topic} in the metadata", timeout=30)


def test_the_cluster_has_two_log_dirs_per_broker_and_the_metadata_log_in_the_first(cluster, admin):
    dirs = admin.log_dirs(None).dirs
    assert {b: [d.path for d in ds] for b, ds in dirs.items()} == {b: cluster.log_dirs(b) for b in (1, 2, 3, 4)}
    assert {b: [d.path for d in ds] for b, ds in dirs.items()} == {b: broker_dirs(cluster.dir, b) for b in (1, 2, 3, 4)}
    for b in (1, 2, 3, 4):
        first, second = cluster.log_dirs(b)
        assert (os.path.isdir(os.path.join(first, "__cluster_metadata-0"))
                and not os.path.exists(os.path.join(second, "__cluster_metadata-0")))
        assert all(not d.offline and d.total_bytes and d.cordoned is False for d in dirs[b])


def test_capabilities(cluster, admin):
    caps = admin.capabilities()
    assert caps.cordons and caps.describe_quorum and caps.fenced_brokers and caps.unregister_broker and caps.jbod
    assert caps.metadata_version is not None and caps.metadata_version >= 30
    # KAFKA-20832: 4.3.0 and 4.3.1 do not check explicit assignments against cordons, 4.4.0 does
    assert caps.cordons_refuse_explicit_assignments == ((parse_version(cluster.kafka_version) or ()) >= (4, 4))


def test_describe_quorum_lists_the_combined_nodes_as_voters_and_refuses_their_decommission(admin):
    quorum = admin.describe_quorum()
    assert quorum.voter_ids == (1, 2, 3) and quorum.observer_ids == (4,) and quorum.leader in (1, 2, 3)
    assert check_voters([DECOMMISSIONED], quorum).ok
    with pytest.raises(VoterRemovalRefusedError, match=r"broker\(s\) 2: .*3 voter\(s\) \(1, 2, 3\).*needs 2"):
        check_voters([2], quorum)


def test_a_cordoned_broker_gets_no_new_replica_and_the_restore_is_exact(cluster, admin, tmp_path):
    config = cluster.client_config()
    store = LocalStore(tmp_path / "run")
    theirs = cluster.log_dirs(3)[1]  # someone else's cordon of broker 3's second dir, kept through our restore
    admin.set_cordons({3: theirs})
    wait_until(lambda: admin.describe_cordons([3])[3] == theirs, "broker 3 to show its cordon", timeout=30)
    before = admin.describe_cordons([1, 2, 3, 4])
    observer = admin_client(config)
    assert cordons(observer, [1, 2, 3, 4]) == before == {1: None, 2: None, 3: theirs, 4: None}
    grown, created = name("cordon-grown"), name("cordon-created")
    create_topic(config, grown, [[1, 2], [2, 3]])
    try:
        apply_cordons(admin, decommission_cordons([DECOMMISSIONED]), state_dir=store)
        assert read_backup(store).brokers == {DECOMMISSIONED: None}
        wait_until(lambda: all(d.cordoned for d in admin.log_dirs(None).dirs[DECOMMISSIONED]),
                   "broker 4's log dirs to report cordoned", timeout=30)
        assert cordons(observer, [1, 2, 3, 4]) == {**before, DECOMMISSIONED: "*"}

        # the controller learns the cordon from the broker's next heartbeat: probe until its placement avoids 4
        def placement_avoids_4() -> bool:
            probe = name("cordon-probe")
            create_topics(config, {probe: 8}, replication_factor=2)
            try:
                return all(DECOMMISSIONED not in r for r in placed(config, probe).values())
            finally:
                delete_topics(config, [probe])
        wait_until(placement_avoids_4, "the controller to place no replica on cordoned broker 4", timeout=30)

        create_topics(config, {created: 12}, replication_factor=2)  # no assignment: the controller places
        assert all(DECOMMISSIONED not in r for r in placed(config, created).values())
        assert admin.create_partitions([NewPartitions(topic=grown, total_count=12)])[grown].ok
        new = wait_until(lambda: (p := replicas_of(config, grown)) and len(p) == 12 and p, f"{grown} grown", timeout=30)
        assert all(DECOMMISSIONED not in r for r in new.values())
        # broker 3's cordoned dir got none of the new replicas either
        dirs3 = {d.path: d for d in admin.log_dirs([TopicPartition(created, p) for p in range(12)]).dirs[3]}
        assert not dirs3[theirs].replicas and dirs3[theirs].cordoned
        # the second observer, the directories on disk, sees the same placement in each of broker 3's dirs (a
        # replica's directory may be made a moment after the metadata names it: the two views are read until equal)
        def by_dir_on_both() -> dict[str, set[tuple[str, int]]] | None:
            adapter = {d.path: {(r.topic, r.partition) for r in d.replicas}
                       for d in admin.log_dirs([TopicPartition(created, p) for p in range(12)]).dirs[3]}
            on_disk = replicas_by_dir(broker_dirs(cluster.dir, 3), [created])
            return on_disk if adapter == on_disk else None
        assert not wait_until(by_dir_on_both, "DescribeLogDirs and the disk to agree on broker 3", timeout=30)[theirs]

        # an explicit assignment onto the cordoned broker: the project's own check refuses it before sending ...
        view = CordonView.from_log_dirs(admin.log_dirs(None).dirs)
        assert view.whole == {DECOMMISSIONED}
        explicit = {TopicPartition(grown, 12): [DECOMMISSIONED, 1]}
        with pytest.raises(CordonRefusedError, match="KAFKA-20832"):
            check_cordons(view, assignments=explicit)
        # ... and Kafka itself: 4.4 refuses, 4.3.0/4.3.1 accept (KAFKA-20832)
        result = admin.create_partitions([NewPartitions(topic=grown, total_count=13, assignment=((DECOMMISSIONED, 1),))])
        if admin.capabilities().cordons_refuse_explicit_assignments:
            assert result[grown].error_code == "INVALID_REPLICA_ASSIGNMENT" and "cordoned" in (result[grown].error or "")
        else:
            assert result[grown].ok
            assert wait_until(lambda: replicas_of(config, grown).get(12), "partition 12", timeout=30) == (
                DECOMMISSIONED, 1)

        assert restore_cordons(admin, store)
        assert admin.describe_cordons([1, 2, 3, 4]) == before  # exactly: broker 3's cordon kept, 4's unset
        assert cordons(observer, [1, 2, 3, 4]) == before
        assert read_backup(store) is None
        wait_until(lambda: not any(d.cordoned for d in admin.log_dirs(None).dirs[DECOMMISSIONED]),
                   "broker 4's log dirs to report uncordoned", timeout=30)
    finally:
        admin.set_cordons({3: None, DECOMMISSIONED: None})
        delete_topics(config, [t for t in (grown, created) if replicas_of(config, t)])


def test_a_plan_never_targets_a_broker_cordoned_by_someone_else(cluster, admin, tmp_path, monkeypatch):
    """PlanReassignmentOperator on this cluster (the planner in process): broker 4 is empty, so a rebalance sends it
    replicas; once someone has cordoned it, the plan sends it none and says so."""
    from airflow_kafka_reassign.core.records.plan_io import read_plan
    from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator

    class TI:
        def xcom_push(self, key: str, value: object) -> None:
            pass

    config = cluster.client_config()
    plan_tasks_in_process(monkeypatch, config)
    topic = name("cordon-rebalance")
    create_topic(config, topic, [[1, 2], [2, 3], [3, 1], [1, 2], [2, 3], [3, 1], [1, 3], [2, 1]])
    placed(config, topic)

    def targets(out: str) -> set[int]:
        return {b for m in read_plan(tmp_path / out / "plan").moves for b in m.adding_replicas}

    try:
        PlanReassignmentOperator(task_id="plan", goal="rebalance", topic_include=[topic],
                                 output_uri=str(tmp_path / "open")).execute({"ti": TI()})
        assert DECOMMISSIONED in targets("open")  # without a cordon, the empty broker takes its share
        admin.set_cordons({DECOMMISSIONED: "*"})  # another maintenance's cordon
        wait_until(lambda: admin.describe_cordons([DECOMMISSIONED])[DECOMMISSIONED] == "*", "broker 4's cordon",
                   timeout=30)
        out = PlanReassignmentOperator(task_id="plan", goal="rebalance", topic_include=[topic],
                                       output_uri=str(tmp_path / "cordoned")).execute({"ti": TI()})
        assert DECOMMISSIONED not in targets("cordoned")
        assert any("cordoned" in w for w in out["warnings"]), out["warnings"]
    finally:
        admin.set_cordons({DECOMMISSIONED: None})
        delete_topics(config, [topic])


def test_a_throttled_log_dir_move_shows_its_future_replica_and_the_throttle_is_restored(cluster, admin, tmp_path):
    config = cluster.client_config()
    store = LocalStore(tmp_path / "run")
    topic = name("log-dir-move")
    broker = 1
    create_topic(config, topic, [[broker]])
    try:
        produce(config, topic, partition=0, megabytes=2)
        replica = TopicPartitionReplica(topic, 0, broker)
        src = wait_until(lambda: admin.log_dirs([replica.tp]).dir_of(replica), f"{replica} in a log dir", timeout=30)
        disks = broker_dirs(cluster.dir, broker)
        assert dir_of(disks, topic, 0) == src  # the second observer: the directories on disk
        dst = next(d for d in cluster.log_dirs(broker) if d != src)
        observer = admin_client(config)
        # onto a cordoned dir: the broker refuses the intra-broker move
        admin.set_cordons({broker: dst})
        wait_until(lambda: any(d.path == dst and d.cordoned for d in admin.log_dirs(None).dirs[broker]),
                   "the target dir to report cordoned", timeout=30)
        assert cordons(observer, [broker]) == {broker: dst}
        (refused,) = admin.alter_replica_log_dirs({replica: dst})
        assert refused.error_code == "INVALID_REPLICATION_ASSIGNMENT"
        admin.set_cordons({broker: None})
        wait_until(lambda: not any(d.cordoned for d in admin.log_dirs(None).dirs[broker]), "uncordoned", timeout=30)

        assert sync_log_dir_throttle(admin, [broker], 20_000, state_dir=store)
        assert read_throttle_backup(store).brokers[broker][LOG_DIR_RATE] is None
        # a broker shows a dynamic config once it applied it from the metadata log: a moment later
        wait_until(lambda: admin.describe_throttles([broker], [], broker_keys=[LOG_DIR_RATE]).brokers[broker] == {
            LOG_DIR_RATE: "20000"}, "the log-dir throttle to show", timeout=30)
        assert log_dir_rate(observer, broker) == "20000"
        (accepted,) = admin.alter_replica_log_dirs({replica: dst})
        assert accepted.ok, accepted
        path, future = wait_until(lambda: admin.log_dirs([replica.tp]).future_of(replica),
                                  "the future replica to show", timeout=30)
        assert path == dst and future.future and admin.log_dirs([replica.tp]).dir_of(replica) == src
        assert futures_by_dir(disks, [topic]) == {src: set(), dst: {(topic, 0)}}  # its -future dir, on disk

        assert restore_throttles(admin, store)
        assert read_throttle_backup(store) is None
        wait_until(lambda: admin.describe_throttles([broker], [], broker_keys=[LOG_DIR_RATE]).brokers[broker] == {
            LOG_DIR_RATE: None}, "the log-dir throttle to be unset again", timeout=30)
        assert log_dir_rate(observer, broker) is None
        # the broker swaps the future log in for the current one in two steps (the future's entry goes, then the
        # current one is replaced): a DescribeLogDirs between them shows no future and the old dir for a moment
        # (CI, both cores busy). The end state is waited for; a move that was dropped never reaches it.
        wait_until(lambda: (ld := admin.log_dirs([replica.tp])).future_of(replica) is None and ld.dir_of(replica) == dst,
                   "the move to complete once unthrottled", timeout=60)
        # a second observer: the broker's directories on disk, the partition's log in the new dir only
        # (the old log is renamed for deletion just after the swap: waited for too)
        wait_until(lambda: (Path(dst) / f"{topic}-0").is_dir() and not (Path(src) / f"{topic}-0").exists(),
                   "the partition's log in the new dir only, on disk", timeout=30)
    finally:
        admin.set_throttles({broker: {LOG_DIR_RATE: None}}, {})
        delete_topics(config, [topic])


def test_a_stopped_broker_is_fenced_then_unregistered(cluster, admin):
    with pytest.raises(BrokerStillRunningError):
        unregister(admin, DECOMMISSIONED)
    assert broker_state(admin.describe_cluster(), DECOMMISSIONED) == "running"
    cluster.stop_broker(DECOMMISSIONED)
    description = wait_for_shutdown(admin, [DECOMMISSIONED], timeout_s=60)
    assert broker_state(description, DECOMMISSIONED) == "fenced"
    assert description.includes_fenced
    outcome = unregister(admin, DECOMMISSIONED)
    assert outcome.outcome == "unregistered" and outcome.before == "fenced"
    # unregister saw it gone on the broker that answered; each broker applies the metadata change at its own pace,
    # and DescribeCluster may ask another one (CI, both cores busy: broker 4 still listed a moment later)
    listed = wait_until(lambda: (d := admin.describe_cluster(include_fenced=True)) and DECOMMISSIONED not in {
        b.id for b in d.brokers} and d, f"DescribeCluster to stop listing broker {DECOMMISSIONED}", timeout=30)
    assert {b.id for b in listed.brokers} == {1, 2, 3}
    assert unregister(admin, DECOMMISSIONED).outcome == "already"
