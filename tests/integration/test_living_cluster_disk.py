"""A disk removal while the cluster lives on (issue 36): the ``kafka_remove_disk`` example DAG, unchanged, as a real
Airflow run (``dag.test()``; the plan task's planner in process, dagrun.py: the subject is the run) on a JBOD sandbox
of our own (3 KRaft nodes, 2 log dirs each, Kafka 4.3+: cordons), emptying broker 2's second log dir, while a test
thread changes the cluster under it:

* a planned topic is **deleted** once one of its moves between log dirs is in flight (its ``-future`` dir on disk);
* another planned topic **grows** (CreatePartitions, controller-placed) once one of its moves is in flight;
* acks=all traffic runs on the planned topics that stay, throughout.

Every verdict comes from a second observer that shares no code with the product: the broker's directories on disk
(the sandbox keeps broker N's dirs at DIR/node-N/data-1 and data-2; a partition is the directory
``<topic>-<partition>``, a move between log dirs in flight is ``<topic>-<partition>.<id>-future`` in its target dir),
sampled while the run goes (never more future replicas in a dir than ``max_moves_per_dir``); the throttle configs
read with confluent-kafka's own AdminClient (``describe_configs``) before and after; the records read back by a
consumer of the test's own (the disk and config readers: observers.py). The perturbations wait for what they need to
see on disk, never for a fixed time.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions
from dagrun import copy_migrated_db, run_dag_file
from kafka_helpers import Traffic, cordon_capable_cluster, delete_topics
from observers import CORDONED_LOG_DIRS, cordons, on_disk, throttle_configs

from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import create_topic, produce
from airflow_kafka_reassign.sandbox import Sandbox, wait_until

BROKER = 2
MAX_MOVES_PER_DIR = 1
RATE = 500_000  # bytes/s of the log-dir throttle: a 0.7 MB replica takes over a second to copy: seen on disk
EXAMPLE = Path(__file__).resolve().parents[2] / "example_dags" / "kafka_remove_disk.py"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with cordon_capable_cluster(tmp_path_factory.mktemp("living-disk-sandbox"), brokers=3, log_dirs=2) as sandbox:
        yield sandbox


class DiskWatch:
    """A thread sampling a broker's log dirs on disk (every 50 ms); ``when(condition, action)`` runs ``action`` once,
    from the watch thread, the first time ``condition(sample)`` holds (a sample: ``{dir: (partitions, futures)}``)."""

    def __init__(self, dirs: list[str]) -> None:
        self.dirs = dirs
        self.samples = 0
        self.max_futures: dict[str, int] = dict.fromkeys(dirs, 0)
        self.seen_futures: set[tuple[str, int]] = set()
        self.done: list[tuple[str, float]] = []
        self.errors: list[BaseException] = []
        self._pending: list[tuple[str, Callable[[dict], bool], Callable[[], None]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-watch", daemon=True)

    def when(self, name: str, condition: Callable[[dict], bool], action: Callable[[], None]) -> None:
        self._pending.append((name, condition, action))

    def __enter__(self) -> DiskWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.wait(0.05):
            try:
                sample = {d: on_disk(d) for d in self.dirs}
            except FileNotFoundError:  # a directory renamed between the listing and its stat: sample again
                continue
            self.samples += 1
            for d, (_, futures) in sample.items():
                self.max_futures[d] = max(self.max_futures[d], len(futures))
                self.seen_futures |= futures
            for item in list(self._pending):
                name, condition, action = item
                if condition(sample):
                    self._pending.remove(item)
                    try:
                        action()
                        self.done.append((name, round(time.monotonic() - start, 1)))
                    except BaseException as exc:  # noqa: BLE001 (reported by the test)
                        self.errors.append(exc)


def future_of(topic: str, target: str) -> Callable[[dict], bool]:
    return lambda sample: any(t == topic for t, _ in sample[target][1])


def test_a_disk_removal_goes_on_while_topics_are_deleted_and_grown(cluster, tmp_path, migrated_airflow_db):
    started = time.monotonic()
    config = cluster.client_config()
    client = AdminClient(dict(config))
    first, second = cluster.log_dirs(BROKER)
    tag = secrets.token_hex(3)
    # smallest first (the engine's default order between log dirs): doomed's moves go first, then grows', then keep's
    doomed, grows, keep = f"doomed-{tag}", f"grows-{tag}", f"keep-{tag}"
    layout = {doomed: ([[2, 3], [3, 2]], 0.7), grows: ([[2, 1], [1, 2]], 1.1), keep: ([[2, 1], [3, 2], [2, 3]], 1.5)}
    home = tmp_path / "airflow"
    (home / "dags").mkdir(parents=True)
    shutil.copyfile(EXAMPLE, home / "dags" / EXAMPLE.name)
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AKR_OUTPUT_DIR": str(home / "kafka_reassign"),
           "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": config})}
    # someone else's throttle value on the broker whose dir is emptied: it must be there, exactly, at the end
    mine = ConfigResource(ConfigResource.Type.BROKER, str(BROKER), incremental_configs=[ConfigEntry(
        "follower.replication.throttled.rate", "77000000", incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([mine])[mine].result(60)
    try:
        copy_migrated_db(migrated_airflow_db, home)
        for topic, (assignment, _) in layout.items():
            create_topic(config, topic, assignment)
        # broker 2's replicas of every topic into its second dir (at once, unthrottled), then the data
        everything = {(t, p) for t, (a, _) in layout.items() for p, r in enumerate(a) if BROKER in r}
        wait_until(lambda: everything <= on_disk(first)[0] | on_disk(second)[0], "the replicas on disk", timeout=60)
        with KafkaClusterAdmin(config, timeout_s=30) as setup:  # setting up only: every verdict is read apart
            assert all(r.ok for r in setup.alter_replica_log_dirs(
                {TopicPartitionReplica(t, p, BROKER): second for t, p in everything}))
        wait_until(lambda: on_disk(second)[0] >= everything and not on_disk(second)[1], f"the replicas in {second}",
                   timeout=60)
        for topic, (assignment, megabytes) in layout.items():
            for p in range(len(assignment)):
                produce(config, topic, partition=p, megabytes=megabytes)
        before = throttle_configs(client, [1, 2, 3], [grows, keep])
        assert before[f"broker {BROKER}"]["follower.replication.throttled.rate"][0] == "77000000"

        def delete_doomed() -> None:
            for fut in client.delete_topics([doomed], operation_timeout=30).values():  # the test's client: alive
                fut.result(60)

        def grow() -> None:  # controller-placed: the cordon keeps the new replicas out of the dir being emptied
            for fut in client.create_partitions([NewPartitions(grows, 4)]).values():
                fut.result(60)

        with Traffic(config, keep, partitions=3) as keep_traffic, Traffic(config, grows, partitions=2) as grows_traffic, \
                DiskWatch([first, second]) as watch:
            watch.when("doomed deleted", future_of(doomed, first), delete_doomed)
            watch.when("grows grown", future_of(grows, first), grow)
            result = run_dag_file(env, home / "dags" / EXAMPLE.name,
                                  {"log_dirs": [f"{BROKER}:{second}"], "log_dir_throttle_bytes_per_sec": RATE,
                                   "max_moves_per_dir": MAX_MOVES_PER_DIR,
                                   "disk_cap": 0.99},  # the sandbox's dirs are on the host's disk, however full
                                  plan_in_process=True)  # the subject is the run, not the Spark job
        keep_traffic.check()
        grows_traffic.check()  # every acknowledged record read back

        summary = result["xcom"].get("execute.return_value") or {}
        print(f"\nwall {time.monotonic() - started:.0f} s; perturbations {watch.done}; {watch.samples} disk samples, "
              f"max future replicas per dir {watch.max_futures}; futures seen {sorted(watch.seen_futures)}; "
              f"execute: gone {summary.get('gone')}, events {summary.get('cluster_events')}; grows' new partitions "
              f"on broker {BROKER}: {sorted(p for t, p in on_disk(first)[0] if t == grows and p >= 2)}")
        assert not watch.errors, watch.errors
        assert [name for name, _ in watch.done] == ["doomed deleted", "grows grown"], watch.done
        assert result["state"] == "success", result["log"][-8000:]
        assert result["tis"] == {"plan": "success", "execute": "success", "verify_emptied": "success",
                                 "restore_cordons": "success"}, result["tis"]
        assert summary["gone"] >= 1 and not summary["failed"], summary  # doomed's moves dropped, none failed
        # the disk: the emptied dir holds no partition and no move in flight, every replica of broker 2 is in the
        # first dir (grows' new partitions too), doomed is gone from both
        left, moving = on_disk(second)
        assert not left and not moving, f"{second} still holds {sorted(left)} / in flight {sorted(moving)}"
        held, moving = on_disk(first)
        assert not moving and not {t for t, _ in held} & {doomed}
        assert {(t, p) for t, p in everything if t != doomed} <= held
        assert max(watch.max_futures.values()) <= MAX_MOVES_PER_DIR, watch.max_futures
        assert {(doomed, p) for p in (0, 1)} & watch.seen_futures  # the deletion hit a move in flight
        assert len(client.list_topics(grows, timeout=30).topics[grows].partitions) == 4
        assert throttle_configs(client, [1, 2, 3], [grows, keep]) == before  # every throttle config as before
    finally:  # the sandbox is this module's own (stopped at its end): only the topics go
        delete_topics(config, [t for t in (grows, keep) if t in client.list_topics(timeout=30).topics])


def test_a_replica_created_in_the_dir_being_emptied_without_a_cordon_is_moved_off_by_a_round(cluster, tmp_path):
    """Issue 36, the disk removal's rounds on a real cluster: no cordon on the dir being emptied (``cordon=False``, or a
    cluster before Kafka 4.3), a topic created while the removal runs gets its replica on broker 2 in that dir (the
    broker puts a new replica in its dir with the fewest partitions: the test fills the other dir first), and the same
    run moves it off in a round (core/maintenance/rounds.py: DiskRemovalGoal). Judged on disk."""
    from airflow_kafka_reassign.core.execution import ExecutionConfig, run
    from airflow_kafka_reassign.core.maintenance.rounds import DiskRemovalGoal, DiskRemovalSpec
    from airflow_kafka_reassign.core.planner.goals import PlanRequest
    from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable, plan_log_dirs

    config = cluster.client_config()
    client = AdminClient(dict(config))
    first, second = cluster.log_dirs(BROKER)
    tag = secrets.token_hex(3)
    filler, planned, created = f"filler-{tag}", f"planned-{tag}", f"created-{tag}"
    create_topic(config, filler, [[2, 1]] * 12)  # 12 replicas on broker 2 kept in the first dir
    create_topic(config, planned, [[2, 3], [3, 2]])
    mine = {(filler, p) for p in range(12)}
    moving = {(planned, 0), (planned, 1)}
    try:
        # a finished removal keeps its dir cordoned (the module's first test): this test is the one without a cordon
        uncordon = ConfigResource(ConfigResource.Type.BROKER, str(BROKER), incremental_configs=[ConfigEntry(
            CORDONED_LOG_DIRS, "", incremental_operation=AlterConfigOpType.DELETE)])
        client.incremental_alter_configs([uncordon])[uncordon].result(60)
        wait_until(lambda: cordons(client, [BROKER])[BROKER] is None, f"broker {BROKER}'s dirs uncordoned", timeout=30)
        wait_until(lambda: mine | moving <= on_disk(first)[0] | on_disk(second)[0], "the replicas on disk", timeout=60)
        with KafkaClusterAdmin(config, timeout_s=30) as setup:  # setting up only; refused while the broker still
            # applies the uncordon: sent again until every replica is accepted
            wait_until(lambda: not [r for r in setup.alter_replica_log_dirs(
                {**{TopicPartitionReplica(t, p, BROKER): first for t, p in mine},
                 **{TopicPartitionReplica(t, p, BROKER): second for t, p in moving}}) if r.error],
                "AlterReplicaLogDirs accepted for every replica of the set-up", timeout=30)
        wait_until(lambda: mine <= on_disk(first)[0] and moving <= on_disk(second)[0] and not on_disk(second)[1]
                   and not on_disk(first)[1], "the filler in the first dir, the planned topic in the second", timeout=60)
        for p in range(2):
            produce(config, planned, partition=p, megabytes=3.0)
        before = throttle_configs(client, [1, 2, 3], [planned])
        request = PlanRequest(goal="remove-disks", log_dirs=(f"{BROKER}:{second}",), disk_cap=0.99)
        landed: list[set] = []

        with KafkaClusterAdmin(config, timeout_s=30) as admin:
            plan = plan_log_dirs(admin.snapshot(include_sizes=True), LogDirTable.of(admin.log_dirs(None)), request).plan
            assert {(m.topic, m.partition) for m in plan.moves} == moving, plan.moves

            def the_cluster_lives_on(status) -> None:
                """At the run's first progress line (its first move sent, 3 MB at 0.5 MB/s): a topic created, its
                replicas on broker 2."""
                if landed:
                    return
                create_topic(config, created, [[2, 1], [2, 3]])
                wait_until(lambda: {(created, 0), (created, 1)} <= on_disk(first)[0] | on_disk(second)[0],
                           f"{created} on broker 2's disk", timeout=60)
                landed.append({(t, p) for t, p in on_disk(second)[0] if t == created})

            result = run(admin, plan, ExecutionConfig(log_dir_throttle_bytes_per_sec=RATE, max_moves_per_dir=1),
                         state_dir=tmp_path / "run", poll_interval_s=0.5, progress=the_cluster_lives_on,
                         goal=DiskRemovalGoal(DiskRemovalSpec(request=request)))
        assert landed, "the plan's moves finished before the topic could be created: make them slower"
        assert landed[0], f"the broker put {created}'s replicas in {first}: the test must make {second} the emptiest"
        assert result.status.ok and result.drain_short is None, result.summary()
        assert {(tp.topic, tp.partition) for tp in result.drained_later} >= landed[0], result.cluster_events
        left, in_flight = on_disk(second)
        assert not left and not in_flight, f"{second} still holds {sorted(left)} / in flight {sorted(in_flight)}"
        assert moving | landed[0] <= on_disk(first)[0]
        assert throttle_configs(client, [1, 2, 3], [planned]) == before
    finally:
        delete_topics(config, [t for t in (filler, planned, created) if t in client.list_topics(timeout=30).topics])
