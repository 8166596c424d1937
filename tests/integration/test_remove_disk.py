"""Remove a disk (goal remove-disks) on a real KRaft cluster of our own: 3 combined broker+controller nodes with 2 log
dirs each (``--log-dirs 2``), Kafka 4.3+ (the sandbox's default version, or ``AKR_MAINTENANCE_KAFKA_VERSION``).

What the planning task does (core/maintenance/disk_removal.py: checked, then cordoned; the snapshot and the log dirs; the
planner), then the one execution engine (``run``), as ExecuteReassignment runs it; with an acks=all producer
writing to the partitions while they move, every acknowledged record read back at the end. While it moves, a
second client samples DescribeLogDirs (the future replicas per log dir) and the log-dir throttle. No fixed sleeps.

Every verdict on disks, cordons and the log-dir throttle is read twice: through the project's adapter, and through a
second observer sharing no code with it (observers.py: the brokers' directories on disk, DescribeConfigs with a client
of the test's own), so a parsing mistake in the adapter cannot pass for the truth.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagrun import copy_migrated_db, run_dag_file
from kafka_helpers import Traffic, cordon_capable_cluster, delete_topics
from observers import admin_client, broker_dirs, cordons, dir_of, futures_by_dir, log_dir_rate, replicas_by_dir

from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession, run
from airflow_kafka_reassign.core.execution.log_dirs import cancel_log_dir_moves
from airflow_kafka_reassign.core.execution.throttle import LOG_DIR_RATE
from airflow_kafka_reassign.core.execution.throttle import read_backup as read_throttle_backup
from airflow_kafka_reassign.core.maintenance.cordon import read_backup as read_cordon_backup
from airflow_kafka_reassign.core.maintenance.disk_removal import cordon_for_removal
from airflow_kafka_reassign.core.planner.goals import PlanRequest
from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable, plan_log_dirs
from airflow_kafka_reassign.core.records.store import LocalStore
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import create_topic, produce
from airflow_kafka_reassign.sandbox import Sandbox, wait_until

BROKER = 1
RATE = 500_000  # bytes/s: a 1.5 MB replica takes about 3 s to copy, long enough to be sampled
EXAMPLE = Path(__file__).resolve().parents[2] / "example_dags" / "kafka_remove_disk.py"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with cordon_capable_cluster(tmp_path_factory.mktemp("remove-disk-sandbox"), brokers=3, log_dirs=2) as sandbox:
        yield sandbox


@pytest.fixture
def admin(cluster: Sandbox) -> Iterator[KafkaClusterAdmin]:
    with KafkaClusterAdmin(cluster.client_config(), timeout_s=30) as a:
        yield a


def in_dir(admin: KafkaClusterAdmin, topic: str, partitions: int, path: str) -> bool:
    dirs = admin.log_dirs([TopicPartition(topic, p) for p in range(partitions)])
    replicas = [TopicPartitionReplica(topic, p, BROKER) for p in range(partitions)]
    return all(dirs.dir_of(r) == path and dirs.future_of(r) is None for r in replicas)


def on_disk_in(cluster: Sandbox, broker: int, topic: str) -> dict[str, set[tuple[str, int]]]:
    """The second observer's view: ``topic``'s replicas in each of ``broker``'s log dirs, from the directories."""
    return replicas_by_dir(broker_dirs(cluster.dir, broker), [topic])


def adapter_in(admin: KafkaClusterAdmin, broker: int, topic: str) -> dict[str, set[tuple[str, int]]]:
    """The adapter's view of the same (DescribeLogDirs, current replicas only)."""
    return {d.path: {(r.topic, r.partition) for r in d.replicas if r.topic == topic and not r.future}
            for d in admin.log_dirs(None).dirs[broker]}


def test_bad_input_is_refused_by_name_before_anything_is_sent(cluster, admin, tmp_path):
    first, second = cluster.log_dirs(BROKER)
    other = cluster.log_dirs(2)[1]
    topic = f"disk-everywhere-{secrets.token_hex(3)}"
    everyone = sorted(cluster.broker_ids)
    create_topic(cluster.client_config(), topic, [everyone])  # every broker holds it: nowhere else to go
    state = LocalStore(tmp_path / "run")
    before = admin.describe_cordons(everyone)
    try:
        wait_until(lambda: admin.log_dirs([TopicPartition(topic, 0)]).dir_of(TopicPartitionReplica(topic, 0, 1)),
                   f"{topic} in a log dir of broker 1", timeout=30)
        for log_dirs, message in (
            ([f"9:{second}"], rf"broker 9 is not in the cluster \(its brokers: \[{', '.join(map(str, everyone))}\]\)"),
            ([f"1:{second}-nope"], r"broker 1 has no such log dir \(its log dirs: \["),
            ([f"1:{other}"], f'it is a log dir of broker 2: write "2:{other}"'),
            ([f"1:{first}", f"1:{second}"], rf"{topic}-0 .* have nowhere to go: they are in the broker's last usable "
                                            "log dir, and no other broker can take them"),
        ):
            with pytest.raises(ConfigurationError, match=f"{message}.*Nothing was sent"):
                cordon_for_removal(admin, PlanRequest(goal="remove-disks", log_dirs=log_dirs), state_dir=state)
        assert admin.describe_cordons(everyone) == before and read_cordon_backup(state) is None
        assert cordons(admin_client(cluster.client_config()), everyone) == before  # second observer
    finally:
        delete_topics(cluster.client_config(), [topic])


def test_remove_a_disk_with_traffic_on_it(cluster, admin, tmp_path):
    config = cluster.client_config()
    first, second = cluster.log_dirs(BROKER)
    assert broker_dirs(cluster.dir, BROKER) == [first, second]  # the dirs on disk
    observer = admin_client(config)
    topic, partitions = f"disk-{secrets.token_hex(3)}", 3
    create_topic(config, topic, [[1, 2], [2, 1], [1, 3]])
    state = LocalStore(tmp_path / "plan" / "run")
    try:
        # every replica of broker 1 in its second log dir, while still empty (at once, unthrottled)
        wait_until(lambda: all(admin.log_dirs([TopicPartition(topic, p)]).dir_of(TopicPartitionReplica(topic, p, 1))
                               for p in range(partitions)), f"{topic} in the log dirs", timeout=30)
        results = admin.alter_replica_log_dirs({TopicPartitionReplica(topic, p, BROKER): second
                                                for p in range(partitions)})
        assert all(r.ok for r in results), results
        wait_until(lambda: in_dir(admin, topic, partitions, second), f"{topic} in {second}", timeout=30)
        everything = {(topic, p) for p in range(partitions)}
        wait_until(lambda: on_disk_in(cluster, BROKER, topic) == {first: set(), second: everything},
                   f"{topic} in {second}, on disk", timeout=30)
        for p in range(partitions):
            produce(config, topic, partition=p, megabytes=1.5)

        samples: list[tuple[dict[str, int], str | None]] = []
        disk: list[tuple[dict[str, int], str | None]] = []  # the second observer's samples: directories, DescribeConfigs
        stop = threading.Event()

        def sample() -> None:  # a second client: what DescribeLogDirs and DescribeConfigs show while it moves
            with KafkaClusterAdmin(config, timeout_s=30) as watcher:
                while not stop.wait(0.2):
                    futures = {d.path: sum(1 for r in d.replicas if r.future)
                               for d in watcher.log_dirs(None).dirs[BROKER]}
                    rate = watcher.describe_throttles([BROKER], [], broker_keys=[LOG_DIR_RATE]).brokers[BROKER]
                    samples.append((futures, rate.get(LOG_DIR_RATE)))
                    disk.append(({d: len(f) for d, f in futures_by_dir([first, second], [topic]).items()},
                                 log_dir_rate(observer, BROKER)))

        with Traffic(config, topic, partitions=partitions) as traffic:
            # what PlanReassignmentOperator does: check and cordon, then the snapshot and the log dirs, then plan
            request = PlanRequest(goal="remove-disks", log_dirs=[f"{BROKER}:{second}"],
                                  disk_cap=0.99)  # the sandbox's dirs are on the host's disk, however full it is
            assert cordon_for_removal(admin, request, state_dir=state) == {BROKER: second}
            result = plan_log_dirs(admin.snapshot(include_sizes=True), LogDirTable.of(admin.log_dirs(None)), request)
            assert result.log_dirs.intra_moves == partitions and result.replica_moves == 0
            assert {m.pinned_dirs[BROKER] for m in result.plan.moves} == {first}
            watcher = threading.Thread(target=sample, daemon=True)
            watcher.start()
            try:
                outcome = run(admin, result.plan, ExecutionConfig(log_dir_throttle_bytes_per_sec=RATE), state_dir=state,
                              poll_interval_s=1.0)
            finally:
                stop.set()
                watcher.join(30)
        traffic.check()  # every acknowledged record read back

        assert outcome.status.ok, outcome.status.progress_line()
        assert outcome.finish["throttles_restored"] == "yes" and read_throttle_backup(state) is None
        moving = [(futures, rate) for futures, rate in samples if any(futures.values())]
        print(f"run {outcome.elapsed_s:.1f} s, {outcome.steps} ticks; {len(samples)} samples, {len(moving)} with a "
              "future replica; max per dir "
              f"{max((max(f.values()) for f, _ in samples), default=0)}; rates seen while moving "
              f"{sorted({str(r) for _, r in moving})}")
        assert moving, "no sample saw a replica being moved"
        assert all(max(futures.values()) <= 1 for futures, _ in samples)  # max_moves_per_dir=1, sampled
        assert any(rate == str(RATE) for _, rate in moving)  # throttled while moving ...
        assert admin.describe_throttles([BROKER], [], broker_keys=[LOG_DIR_RATE]).brokers[BROKER] == {
            LOG_DIR_RATE: None}  # ... and restored after
        # the second observer saw the same: a future replica on disk, one per dir at most, throttled meanwhile
        on_disk_moving = [(futures, rate) for futures, rate in disk if any(futures.values())]
        print(f"on disk: {len(disk)} samples, {len(on_disk_moving)} with a -future dir; rates seen meanwhile "
              f"{sorted({str(r) for _, r in on_disk_moving})}")
        assert on_disk_moving and all(max(futures.values()) <= 1 for futures, _ in disk)
        assert any(rate == str(RATE) for _, rate in on_disk_moving) and log_dir_rate(observer, BROKER) is None
        dirs = {d.path: d for d in admin.log_dirs(None).dirs[BROKER]}
        assert not dirs[second].replicas, f"{second} still holds {dirs[second].replicas}"  # empty
        assert in_dir(admin, topic, partitions, first)
        # on disk: every replica in the first dir (its old log renamed for deletion just after the swap: waited for)
        wait_until(lambda: on_disk_in(cluster, BROKER, topic) == {first: everything, second: set()},
                   f"{second} empty on disk", timeout=30)
        assert adapter_in(admin, BROKER, topic) == on_disk_in(cluster, BROKER, topic)
        assert dirs[second].cordoned and admin.describe_cordons([BROKER])[BROKER] == second  # still cordoned
        assert cordons(observer, [BROKER]) == {BROKER: second}
        assert read_cordon_backup(state).brokers == {BROKER: None}  # for a cancel or rollback to restore
    finally:
        admin.set_cordons({BROKER: None})
        admin.set_throttles({BROKER: {LOG_DIR_RATE: None}}, {})
        delete_topics(config, [topic])


def test_a_move_between_log_dirs_in_flight_is_cancelled(cluster, admin, tmp_path):
    """What a cancel of the plan can call (core/execution/log_dirs.py): the future replica is dropped, the replica
    stays where it was; the log-dir throttle is restored."""
    config = cluster.client_config()
    first, second = cluster.log_dirs(3)
    topic = f"disk-cancel-{secrets.token_hex(3)}"
    create_topic(config, topic, [[3]])
    replica = TopicPartitionReplica(topic, 0, 3)
    state = LocalStore(tmp_path / "run")
    try:
        src = wait_until(lambda: admin.log_dirs([replica.tp]).dir_of(replica), f"{replica} in a log dir", timeout=30)
        assert dir_of([first, second], topic, 0) == src  # on disk too
        dst = first if src == second else second
        produce(config, topic, partition=0, megabytes=1)
        plan = pin(replica, dst)
        session = ExecutionSession(admin, plan, ExecutionConfig(log_dir_throttle_bytes_per_sec=20_000), state_dir=state)
        session.tick()
        wait_until(lambda: admin.log_dirs([replica.tp]).future_of(replica), "the future replica", timeout=30)
        assert futures_by_dir([dst], [topic]) == {dst: {(topic, 0)}}  # its -future dir on disk, in the target dir
        assert cancel_log_dir_moves(admin, plan) == {replica: None}
        wait_until(lambda: (ld := admin.log_dirs([replica.tp])).future_of(replica) is None and ld.dir_of(replica) == src,
                   "the future replica to be dropped", timeout=30)
        # the second observer: the -future dir gone from disk, the replica where it was
        wait_until(lambda: futures_by_dir([first, second], [topic]) == {first: set(), second: set()},
                   "the -future dir gone from disk", timeout=30)
        assert dir_of([first, second], topic, 0) == src
        assert session.finish()["throttles_restored"] == "yes"
        assert admin.describe_throttles([3], [], broker_keys=[LOG_DIR_RATE]).brokers[3] == {LOG_DIR_RATE: None}
        assert log_dir_rate(admin_client(config), 3) is None
    finally:
        admin.set_throttles({3: {LOG_DIR_RATE: None}}, {})
        delete_topics(config, [topic])


def pin(replica: TopicPartitionReplica, path: str) -> ReassignmentPlan:
    """A plan of one move: ``replica`` to log dir ``path`` of its broker."""
    return ReassignmentPlan(moves=(Move(topic=replica.topic, partition=replica.partition, current_replicas=(3,),
                                        target_replicas=(3,), log_dirs=(path,)),))


def test_the_example_dag_removes_a_disk(cluster, admin, tmp_path, migrated_airflow_db):
    """docs/decommission.md's example, unchanged, as a real Airflow run (``dag.test()``) against this sandbox:
    plan (through spark-submit: the plan job's driver plans this goal, no Spark session), execute, verify; the
    clean-up task (restore_cordons, all_done) keeps the cordon of a removal that moved replicas."""
    config = cluster.client_config()
    first, second = cluster.log_dirs(2)
    topic = f"disk-dag-{secrets.token_hex(3)}"
    create_topic(config, topic, [[2, 1], [3, 2]])
    home = tmp_path / "airflow"
    (home / "dags").mkdir(parents=True)
    shutil.copyfile(EXAMPLE, home / "dags" / EXAMPLE.name)
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AKR_OUTPUT_DIR": str(home / "kafka_reassign"),
           "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": config})}
    try:
        copy_migrated_db(migrated_airflow_db, home)
        wait_until(lambda: all(admin.log_dirs([TopicPartition(topic, p)]).dir_of(TopicPartitionReplica(topic, p, 2))
                               for p in (0, 1)), f"{topic} in the log dirs", timeout=30)
        assert all(r.ok for r in admin.alter_replica_log_dirs({TopicPartitionReplica(topic, p, 2): second
                                                               for p in (0, 1)}))
        wait_until(lambda: all(admin.log_dirs([TopicPartition(topic, p)]).dir_of(TopicPartitionReplica(topic, p, 2))
                               == second for p in (0, 1)), f"{topic} in {second}", timeout=30)
        for p in (0, 1):
            produce(config, topic, partition=p, megabytes=0.5)
        result = run_dag_file(env, home / "dags" / EXAMPLE.name,
                              {"log_dirs": [f"2:{second}"], "log_dir_throttle_bytes_per_sec": 1_000_000,
                                   # the sandbox's dirs are on the host's disk, however full it is (86% on CI)
                                   "disk_cap": 0.99}, unpatched=True)
        assert result["state"] == "success", result["log"][-6000:]
        assert result["tis"] == {"plan": "success", "execute": "success", "verify_emptied": "success",
                                 "restore_cordons": "success"}
        assert result["xcom"]["plan.return_value"]["log_dirs"]["intra_moves"] >= 2
        kept = result["xcom"]["restore_cordons.return_value"]
        assert kept["outcome"] == "kept" and kept["brokers"] == [2], kept  # moves were sent: the removal keeps it
        dirs = {d.path: d for d in admin.log_dirs(None).dirs[2]}
        assert not dirs[second].replicas and dirs[second].cordoned and dirs[first].replicas  # emptied, still cordoned
        assert admin.describe_cordons([2])[2] == second
        assert admin.describe_throttles([2], [], broker_keys=[LOG_DIR_RATE]).brokers[2] == {LOG_DIR_RATE: None}
        # the second observer: the dir empty on disk (old logs renamed for deletion after the swap: waited for), the
        # cordon and the throttle as the broker reports them to a client of the test's own
        wait_until(lambda: on_disk_in(cluster, 2, topic) == {first: {(topic, 0), (topic, 1)}, second: set()},
                   f"{topic} out of {second}, on disk", timeout=30)
        observer = admin_client(config)
        assert cordons(observer, [2]) == {2: second} and log_dir_rate(observer, 2) is None
    finally:
        admin.set_cordons({2: None})
        delete_topics(config, [topic])
