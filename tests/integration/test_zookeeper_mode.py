"""The provider on ZooKeeper-mode Kafka 3.9 (issue 39): one sandbox of the module's own, ``up --zookeeper``
(Kafka 3.9.1, 5 brokers on 3 racks, 2 log dirs each (JBOD), a ZooKeeper server from the same classpath), started
once for the module.

The ``kafka_decommission_brokers`` example DAG, copied unchanged and run with its defaults (``rf_guard`` left to
``"auto"``), drains broker 5 through a real Airflow run on Airflow as installed (``dag.test()``, the wait deferred to
the in-process triggerer). ZooKeeper mode has no cordons, so while the drain is in flight a thread of the test creates
a topic with replicas on broker 5 (started by what the controller's listing shows, never by a timer); the run's drain
rounds must move it off too. acks=all traffic runs on the drained topic throughout.

Judged with clients of the test's own (confluent-kafka metadata and DescribeConfigs, kafka-python's
ListPartitionReassignments), not the project's adapter: the run succeeded at the first try of every task, broker 5
holds no replica of either topic, every partition kept its replication factor, every acknowledged record is read back,
no reassignment is left, and every throttle config of the brokers and topics is as it was before (a rate someone else
had set on broker 2 included). The run's log says what ZooKeeper mode lacks and what it did instead: the capability
line, the voter guard skipped, no cordon, the client-side replication-factor guard chosen by itself.

The other example DAGs on the same sandbox: the disk removal (``kafka_remove_disk``: a replica landing in the dir being
emptied moved off by the run's round, judged from the directories on disk), a broker SIGKILLed mid-move during a
decommission (nothing lost, the run finishes), the rebalance and the guarded growth. No fixed sleeps: every helper
thread acts on what a client of the test's own, or the disk, shows.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from dagrun import copy_migrated_db, run_dag_file
from kafka.admin import KafkaAdminClient
from kafka_helpers import Traffic, delete_topics, kill_broker, make_topic, replicas_of
from observers import (
    admin_client,
    broker_dirs,
    futures_by_dir,
    log_dir_rate,
    on_disk,
    replicas_by_dir,
    throttle_configs,
)

from airflow_kafka_reassign.kafka.workload import produce
from airflow_kafka_reassign.sandbox import Sandbox
from airflow_kafka_reassign.sandbox.waiting import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
KAFKA_VERSION = "3.9.1"
BROKERS = [1, 2, 3, 4, 5]
DRAINED = 5
THROTTLE = 300_000  # bytes/s per broker: 2 MB per partition keeps each move copying for several seconds
MB_PER_PARTITION = 2
LIVE = [[5, 1, 2], [1, 5, 3], [2, 3, 5], [5, 4, 1]]
#: created while the drain is in flight: nothing keeps it off broker 5 (no cordons before Kafka 4.3)
LATE = [[5, 1], [2, 5], [5, 3]]
#: someone else's replication throttle on broker 2, which the run must leave as it found it
FOREIGN_RATE = ("leader.replication.throttled.rate", "12345678")
WAIT_S = 300


@pytest.fixture(scope="module")
def zk_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    sandbox = Sandbox(tmp_path_factory.mktemp("zk-sandbox"))
    sandbox.up(brokers=5, racks=3, kafka_version=KAFKA_VERSION, zookeeper=True, log_dirs=2,
               timeout=float(os.environ.get("AKR_SANDBOX_TIMEOUT", "180")))
    try:
        yield sandbox
    finally:
        sandbox.down()


@pytest.fixture(autouse=True)
def _topics_of_the_test_deleted(zk_sandbox: Sandbox) -> Iterator[None]:
    """Each test's topics are deleted after it (Kafka's internal ones kept): a later drain or disk removal then moves
    its own test's partitions only, not every earlier test's too."""
    config = zk_sandbox.client_config()
    before = set(admin_client(config).list_topics(timeout=30).topics)
    yield
    delete_topics(config, sorted(t for t in set(admin_client(config).list_topics(timeout=30).topics) - before
                                 if not t.startswith("__")))


@pytest.fixture(scope="module")
def zk_airflow_home(tmp_path_factory: pytest.TempPathFactory, zk_sandbox: Sandbox,
                    migrated_airflow_db: Path) -> dict[str, str]:
    home = tmp_path_factory.mktemp("airflow-home-zk")
    (home / "dags").mkdir()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AKR_OUTPUT_DIR": str(home / "kafka_reassign"),
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": zk_sandbox.client_config()}),
    }
    copy_migrated_db(migrated_airflow_db, home)
    return env


def test_the_sandbox_runs_zookeeper_mode_brokers_on_racks(zk_sandbox):
    """The sandbox itself, read by the test's own client: every broker registered with its rack, no KRaft."""
    info = zk_sandbox.info
    assert info["mode"] == "zookeeper" and info["controllers"] == [] and info["zookeeper_connect"]
    assert zk_sandbox.status()["zookeeper"]["alive"]
    client = KafkaAdminClient(bootstrap_servers=zk_sandbox.bootstrap_servers, request_timeout_ms=10_000)
    try:
        described = client.describe_cluster()
        api = dict(client._manager.broker_version_data.api_versions)
    finally:
        client.close()
    assert {b["broker_id"]: b["rack"] for b in described["brokers"]} == {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"}
    assert 55 not in api and 4 in api  # no DescribeQuorum; LeaderAndIsr: ZooKeeper mode's controller requests
    for node in range(1, 6):
        props = Path(zk_sandbox.state["nodes"][node - 1]["properties"]).read_text()
        assert "zookeeper.connect=" in props and "process.roles" not in props


#: the disk removal: broker 1's second log dir emptied under a log-dir throttle, one move in flight per dir
DISK_BROKER = 1
DISK_RATE = 400_000  # bytes/s: the 2 MB replicas take about 5 s each, one after the other
DISK_ASSIGNMENT = [[1, 2], [2, 1], [1, 3], [4, 1]]
#: created while the removal's moves are in flight, broker 1's replicas in the dir being emptied
DISK_LATE = [[1, 2], [3, 1]]


_B = TypeVar("_B", bound="Background")


class Background:
    """A helper thread of a test, run as a ``with`` block: what it raises is kept, and raised in the test by
    :meth:`check`; leaving the block asks it to stop (``self._stop``) and waits for it."""

    def __init__(self, name: str) -> None:
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=name, daemon=True)

    def __enter__(self: _B) -> _B:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)

    def _guarded(self) -> None:
        try:
            self.work()
        except BaseException as e:  # noqa: BLE001 (raised in the test's thread by check())
            self.error = e

    def work(self) -> None:
        raise NotImplementedError

    def check(self) -> None:
        if self.error is not None:
            raise self.error


class ReplicaInTheEmptiedDir(Background):
    """The second observer of a disk removal, in a thread: broker 1's log dirs on disk (the ``-future`` dirs in each)
    and its log-dir throttle through the test's own client, sampled until the run ends. Once a move out of the removed
    dir is seen in flight (a ``-future`` dir of ``topic`` in the other dir: never a timer), it creates ``late`` with
    broker 1's replicas in the removed dir: the test's own AlterReplicaLogDirs before the topic exists (the broker keeps
    the dir for the replica it will create, as kafka-reassign-partitions does), where Kafka would put them by itself
    soon enough (a new replica goes to the dir with the fewest logs, the one being emptied): without cordons (Kafka
    4.3+) nothing keeps them out. They must be seen there on disk; the run's disk-removal round moves them off."""

    def __init__(self, sandbox: Sandbox, topic: str, late: str, removed: str, other: str) -> None:
        super().__init__("disk-watch")
        self.config, self.topic, self.late, self.removed, self.other = sandbox.client_config(), topic, late, removed, other
        self.samples: list[tuple[dict[str, int], str | None]] = []
        self.created_while: set[tuple[str, int]] = set()
        self.landed: set[tuple[str, int]] = set()

    def work(self) -> None:
        own = admin_client(self.config)
        while not self._stop.wait(0.2):
            futures = futures_by_dir([self.removed, self.other], [self.topic, self.late])
            self.samples.append(({d: len(f) for d, f in futures.items()}, log_dir_rate(own, DISK_BROKER)))
            if not self.created_while and futures[self.other]:
                self.created_while = futures[self.other]
                self._land_late_replicas()

    def _land_late_replicas(self) -> None:
        mine = {(self.late, p) for p, a in enumerate(DISK_LATE) if DISK_BROKER in a}
        client = KafkaAdminClient(bootstrap_servers=self.config["bootstrap.servers"], request_timeout_ms=10_000)
        try:  # answered NOT_LEADER_OR_FOLLOWER (no such replica yet); the broker keeps the dir for it
            client.alter_replica_log_dirs({(t, p, DISK_BROKER): self.removed for t, p in mine})
        finally:
            client.close()
        make_topic(self.config, self.late, DISK_LATE)
        self.landed = wait_until(lambda: mine & replicas_by_dir([self.removed], [self.late])[self.removed],
                                 f"{self.late}'s replicas on broker {DISK_BROKER} in {self.removed}, on disk", timeout=60)

    def check(self) -> None:
        super().check()
        assert self.created_while, "the late topic was not created during the removal's moves"
        assert self.landed, f"{self.late} never had a replica in {self.removed}"


def test_the_remove_disk_example_empties_a_log_dir_of_zookeeper_mode_kafka(zk_sandbox, zk_airflow_home):
    """``kafka_remove_disk`` (JBOD: ZooKeeper mode has had AlterReplicaLogDirs since Kafka 1.1) empties broker 1's
    second log dir, its defaults unchanged but the dirs, the log-dir throttle and the disk cap. No cordons: the plan
    task says so in one line and the run goes on; a topic created during the moves with replicas in that dir (see
    :class:`ReplicaInTheEmptiedDir`) is moved off by the run's disk-removal round. Judged from the directories on disk
    (observers.py) and the test's own clients: the dir holds no replica, broker 1 holds each partition it held, every
    acknowledged record of the acks=all traffic is read back, and every throttle config is as it was before (the
    log-dir rate seen in force while a move was in flight)."""
    config = zk_sandbox.client_config()
    removed_dir, kept_dir = zk_sandbox.log_dirs(DISK_BROKER)[1], zk_sandbox.log_dirs(DISK_BROKER)[0]
    assert broker_dirs(zk_sandbox.dir, DISK_BROKER) == [kept_dir, removed_dir]  # the dirs on disk
    topic, late = "zk-disk", "zk-disk-late"
    make_topic(config, topic, DISK_ASSIGNMENT)
    mine = {(topic, p) for p, a in enumerate(DISK_ASSIGNMENT) if DISK_BROKER in a}
    client = KafkaAdminClient(bootstrap_servers=config["bootstrap.servers"], request_timeout_ms=10_000)
    try:  # every replica of broker 1 into the dir to remove, while empty (at once, unthrottled)
        client.alter_replica_log_dirs({(t, p, DISK_BROKER): removed_dir for t, p in mine})
    finally:
        client.close()
    wait_until(lambda: mine <= replicas_by_dir([removed_dir], [topic])[removed_dir],
               f"broker {DISK_BROKER}'s replicas of {topic} in {removed_dir}, on disk", timeout=60)
    for p in range(len(DISK_ASSIGNMENT)):
        produce(config, topic, partition=p, megabytes=MB_PER_PARTITION)
    own = admin_client(config)
    throttles_before = throttle_configs(own, BROKERS, [topic])

    result = None
    with Traffic(config, topic, partitions=len(DISK_ASSIGNMENT)) as traffic, \
            ReplicaInTheEmptiedDir(zk_sandbox, topic, late, removed_dir, kept_dir) as watch:
        result = run_dag_file(zk_airflow_home, install(zk_airflow_home, "kafka_remove_disk.py"), {
            "log_dirs": [f"{DISK_BROKER}:{removed_dir}"], "log_dir_throttle_bytes_per_sec": DISK_RATE,
            "disk_cap": 0.99,  # the sandbox's dirs are on the host's disk, however full it is
        }, plan_in_process=True, unpatched=True, timeout=900)
    watch.check()
    log = result["log"]
    assert result["state"] == "success", log[-8000:]
    assert result["tis"] == {"plan": "success", "execute": "success", "verify_emptied": "success",
                             "restore_cordons": "success"}, result["tis"]
    # no cordons here: one line says so and what the run does instead, and the verdict does not claim one
    assert re.search(r"the cluster has no cordons .*this cluster runs Kafka 3\.9, ZooKeeper mode.*not cordoned.*"
                     r"which the run's rounds move off", log)
    assert f"log dir(s) ['{DISK_BROKER}:{removed_dir}'] are empty; this cluster has no cordons" in log
    assert result["xcom"]["restore_cordons.return_value"]["outcome"] == "none", result["xcom"]["restore_cordons.return_value"]
    assert result["xcom"]["plan.return_value"]["log_dirs"]["intra_moves"] >= len(mine)
    executed = result["xcom"]["execute.return_value"]
    late_parts = {f"{late}-{p}" for p, a in enumerate(DISK_LATE) if DISK_BROKER in a}
    assert late_parts <= set(executed.get("drained_later_partitions", [])), executed  # moved by the round

    # the second observer, the directories on disk: the dir empty (its old logs renamed for deletion after each swap:
    # waited for), broker 1 keeps every replica it had, in the other dir; at most one move in flight per dir
    every = mine | {(late, p) for p, a in enumerate(DISK_LATE) if DISK_BROKER in a}
    wait_until(lambda: on_disk(removed_dir) == (set(), set()), f"{removed_dir} empty on disk", timeout=60)
    assert every <= replicas_by_dir([kept_dir], [topic, late])[kept_dir]
    moving = [(futures, rate) for futures, rate in watch.samples if any(futures.values())]
    print(f"disk removal on ZooKeeper mode: {len(watch.samples)} samples on disk, {len(moving)} with a -future dir; "
          f"rates seen meanwhile {sorted({str(r) for _, r in moving})}; round: {executed.get('cluster_events')}")
    assert moving and all(max(futures.values()) <= 1 for futures, _ in watch.samples)
    assert any(rate == str(DISK_RATE) for _, rate in moving)
    # the test's own client: every throttle config as before, the log-dir rate included; the late topic has none
    assert throttle_configs(own, BROKERS, [topic]) == throttles_before
    assert throttle_configs(own, [], [late])[f"topic {late}"] == throttles_before[f"topic {topic}"]  # defaults
    traffic.check()


class LateTopic(Background):
    """Creates the topic ``LATE`` (replicas on broker 5) once the controller lists a move of ``live`` in flight; then,
    as an operator would, stops broker 5 once the test's own clients see it hold no replica, no move in flight and no
    throttle of the run on it (the DAG waits for that shutdown, then has nothing to unregister)."""

    def __init__(self, sandbox: Sandbox, live: str, late: str, throttles_of_5: dict) -> None:
        super().__init__("late-topic")
        self.sandbox, self.config, self.live, self.late = sandbox, sandbox.client_config(), live, late
        self.throttles_of_5 = throttles_of_5
        self.created_while: list[tuple[str, int]] = []
        self.stopped = False

    def work(self) -> None:
        listing = KafkaAdminClient(bootstrap_servers=self.config["bootstrap.servers"], request_timeout_ms=10_000)
        try:
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                moving = [(tp.topic, tp.partition) for tp in listing.list_partition_reassignments(timeout_ms=5_000)
                          if tp.topic == self.live]
                if moving:
                    make_topic(self.config, self.late, LATE, megabytes=0.2)
                    self.created_while = moving
                    break
                time.sleep(0.2)
            else:
                raise AssertionError(f"no move of {self.live} was ever seen in flight in {WAIT_S} s")
            own = admin_client(self.config)

            def empty_and_released() -> bool:
                on_5 = [t for t in (self.live, self.late) for r in replicas_of(self.config, t).values() if DRAINED in r]
                return not on_5 and not listing.list_partition_reassignments(timeout_ms=5_000) and \
                    throttle_configs(own, [DRAINED], [self.live])[f"broker {DRAINED}"] == self.throttles_of_5
            wait_until(empty_and_released, "broker 5 empty, nothing in flight, its throttles as before", timeout=WAIT_S,
                       every=1.0)
            self.sandbox.stop_broker(DRAINED)
            self.stopped = True
        finally:
            listing.close()

    def check(self) -> None:
        super().check()
        assert self.created_while, "the late topic was not created during the drain"
        assert self.stopped, "broker 5 was not stopped"


def test_the_decommission_example_drains_a_broker_of_zookeeper_mode_kafka(zk_sandbox, zk_airflow_home, tmp_path):
    config = zk_sandbox.client_config()
    live, late = "zk-live", "zk-late"
    make_topic(config, live, LIVE, megabytes=MB_PER_PARTITION)
    own = admin_client(config)
    rate = ConfigResource(ConfigResource.Type.BROKER, "2", incremental_configs=[
        ConfigEntry(FOREIGN_RATE[0], FOREIGN_RATE[1], incremental_operation=AlterConfigOpType.SET)])
    own.incremental_alter_configs([rate])[rate].result(60)

    def rate_shown() -> dict | None:  # a ZooKeeper-mode broker applies a dynamic config from its change notification
        seen = throttle_configs(own, BROKERS, [live])
        return seen if (seen["broker 2"][FOREIGN_RATE[0]] or ("",))[0] == FOREIGN_RATE[1] else None

    throttles_before = wait_until(rate_shown, f"broker 2 to show {FOREIGN_RATE[0]}", timeout=60)
    dag_file = Path(zk_airflow_home["AIRFLOW__CORE__DAGS_FOLDER"]) / "kafka_decommission_brokers.py"
    shutil.copyfile(EXAMPLES / dag_file.name, dag_file)
    log_file = tmp_path / "dagrun.log"
    conf = {
        "broker_ids": [DRAINED],
        "dry_run": False,
        "require_approval": False,  # nobody answers in dag.test()
        "throttle_bytes_per_sec": THROTTLE,
        "max_moves": 4,
        "max_moves_per_broker": 2,
        "unregister": True,  # wait until broker 5 is shut down (the test's thread stops it), then unregister
    }  # rf_guard: the DAG's default, "auto"

    started = time.monotonic()
    later = LateTopic(zk_sandbox, live, late, throttles_before[f"broker {DRAINED}"])
    try:
        with Traffic(config, live, partitions=len(LIVE)) as traffic, later:
            result = run_dag_file(zk_airflow_home, dag_file, conf, plan_in_process=True, log_file=log_file,
                                  timeout=900, unpatched=True)
    finally:
        if not zk_sandbox.is_alive(DRAINED):  # the module's other tests use five brokers
            zk_sandbox.start_broker(DRAINED)
    print(f"the decommission run on ZooKeeper-mode Kafka took {time.monotonic() - started:.0f} s")
    later.check()
    traffic.check()

    log = result["log"]
    assert result["state"] == "success", log[-8000:]
    for task in ("check_request", "plan", "execute", "wait", "verify_drained", "wait_for_shutdown", "unregister"):
        assert result["tis"].get(task) == "success", (task, result["tis"], log[-8000:])
        assert result["tries"].get(task) == 1, (task, result["tries"])
    # ZooKeeper mode: a stopped broker leaves the cluster, so the sensor saw it gone and there was nothing to send
    assert result["xcom"]["unregister.return_value"] == {"unregistered": [], "already": [DRAINED], "dry_run": False}
    assert "unregister skipped for broker 5: this cluster runs Kafka 3.9, ZooKeeper mode" in log
    # what ZooKeeper mode lacks, and what the run did instead, one line each
    assert "zookeeper_mode=True kafka_line='3.9'" in log
    assert "controller voter guard skipped: this cluster (Kafka 3.9, ZooKeeper mode) has no KRaft controller" in log
    assert re.search(r"brokers \[5\] are not cordoned: cordons need Kafka 4\.3\+ in KRaft.*drain rounds", log)
    assert "rf_guard='auto' chose 'client': this cluster runs Kafka 3.9, ZooKeeper mode" in log
    assert result["xcom"]["execute.return_value"]["rf_guard"] == "client"
    wait_summary = result["xcom"]["wait.return_value"]
    assert wait_summary["status"] == "complete" and wait_summary["blocked"] == 0, wait_summary
    assert result["xcom"]["verify_drained.return_value"] == {"drained": [DRAINED], "left_for_later": 0}
    # the late topic's partitions on broker 5 were moved by the run's drain rounds (no cordon kept them off)
    rounds = [e for e in wait_summary.get("cluster_events", []) if e.startswith("round ")]
    assert rounds and all(f"{late}-{p}" in " ".join(rounds) for p, a in enumerate(LATE) if DRAINED in a), rounds

    # the test's own client: both topics off broker 5, replication factors kept, nothing in flight
    for topic, assignment in ((live, LIVE), (late, LATE)):
        parts = replicas_of(config, topic)
        assert len(parts) == len(assignment), (topic, parts)
        for p, replicas in parts.items():
            assert DRAINED not in replicas, (topic, p, replicas)
            assert len(replicas) == len(assignment[p]), (topic, p, replicas)
    listing = KafkaAdminClient(bootstrap_servers=config["bootstrap.servers"], request_timeout_ms=10_000)
    try:
        assert not listing.list_partition_reassignments(), "a reassignment was left in flight"
    finally:
        listing.close()
    # every throttle as before, the foreign rate on broker 2 included; the late topic never had one
    assert throttle_configs(own, BROKERS, [live]) == throttles_before
    assert throttle_configs(own, [], [late])[f"topic {late}"] == throttles_before[f"topic {live}"]  # defaults


def errors_in(log: str) -> str:
    """The lines of a run's log that say why a task failed (its errors and their tracebacks' last lines)."""
    lines = log.splitlines()
    return "\n".join(line for i, line in enumerate(lines)
                     if "ERROR" in line or "Error:" in line or "Exception:" in line or "Traceback" in lines[i - 1])[-6000:]


def install(env: dict[str, str], name: str) -> Path:
    dag_file = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / name
    shutil.copyfile(EXAMPLES / name, dag_file)
    return dag_file


def test_the_rebalance_example_balances_skewed_topics_on_zookeeper_mode(zk_sandbox, zk_airflow_home):
    """``kafka_rebalance_maintenance_window`` on Airflow as installed: every replica of two topics on brokers 1 and 2
    ends spread over the brokers, replication factors kept, throttles as before (the test's own clients)."""
    config = zk_sandbox.client_config()
    skewed = {"zk-skew-a": [[1, 2], [2, 1], [1, 2], [2, 1], [1, 2], [2, 1]], "zk-skew-b": [[1, 2], [2, 1], [1, 2], [2, 1]]}
    for topic, assignment in skewed.items():
        make_topic(config, topic, assignment, megabytes=0.5)
    own = admin_client(config)
    throttles_before = throttle_configs(own, BROKERS, list(skewed))
    result = run_dag_file(zk_airflow_home, install(zk_airflow_home, "kafka_rebalance_maintenance_window.py"), {
        "topic_include": [re.escape(t) for t in skewed], "throttle_bytes_per_sec": THROTTLE,
        "max_moves_per_broker": 2, "window_minutes": 30, "require_approval": False,
    }, plan_in_process=True, unpatched=True, timeout=900)
    assert result["state"] == "success", result["log"][-8000:]
    assert result["xcom"]["wait.return_value"]["status"] == "complete"
    assert "rf_guard='auto' chose 'client'" in result["log"]
    after = {t: replicas_of(config, t) for t in skewed}
    assert all(len(r) == 2 for parts in after.values() for r in parts.values()), after
    # the empty brokers of racks r1 and r2 took their share (broker 3, rack r3 alone, holds a replica of every RF-3
    # partition of the cluster: the whole cluster's balance may give it none of these)
    assert {4, 5} <= {b for parts in after.values() for r in parts.values() for b in r}, after
    assert throttle_configs(own, BROKERS, list(skewed)) == throttles_before


def test_the_guarded_growth_example_grows_a_topic_on_zookeeper_mode(zk_sandbox, zk_airflow_home):
    """``kafka_grow_partitions``: a batch naming an internal topic refused whole, then the topic grown, its new
    partitions rack-aware at its replication factor (the test's own client)."""
    config = zk_sandbox.client_config()
    make_topic(config, "zk-grow", [[1, 2], [2, 3], [3, 1]])
    dag_file = install(zk_airflow_home, "kafka_grow_partitions.py")
    refused = run_dag_file(zk_airflow_home, dag_file, {"new_total_partitions": {"zk-grow": 6, "__consumer_offsets": 99}},
                           unpatched=True)
    assert refused["state"] == "failed" and refused["tis"]["check"] == "failed", refused["tis"]
    assert refused["xcom"]["check.return_value"]["topics"]["__consumer_offsets"]["refusal"] == "internal-topic"
    assert len(replicas_of(config, "zk-grow")) == 3
    grown = run_dag_file(zk_airflow_home, dag_file, {"new_total_partitions": {"zk-grow": 6}, "dry_run": False},
                         unpatched=True)
    assert grown["state"] == "success", grown["log"][-8000:]

    def six() -> dict | None:
        found = replicas_of(config, "zk-grow")
        return found if len(found) == 6 else None

    parts = wait_until(six, "6 partitions of zk-grow")
    racks = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"}
    assert all(len(parts[p]) == 2 and len({racks[b] for b in parts[p]}) == 2 for p in range(3, 6)), parts


#: the broker SIGKILLed mid-move: a decommission of broker 4, one move at a time so that some wait while it is down
KILL_DRAINED = 4
KILL_ASSIGNMENT = [[4, 2, 3], [2, 4, 5], [3, 5, 4], [4, 1, 2]]


class BrokerKilledMidMove(Background):
    """In a thread: SIGKILLs a broker that a move of ``topic`` is adding a replica to, as soon as the test's own
    ListPartitionReassignments shows one in flight (never a timer); starts it again once the test's own metadata no
    longer lists it (its ZooKeeper session expired: the controller took it out of the ISRs and elected other
    leaders, a new controller first when it was the controller). The move in flight to it waits meanwhile."""

    def __init__(self, sandbox: Sandbox, topic: str) -> None:
        super().__init__("broker-kill")
        self.sandbox, self.config, self.topic = sandbox, sandbox.client_config(), topic
        self.victim: int | None = None
        self.was_controller = False
        self.moving: list[tuple[int, list[int]]] = []

    def work(self) -> None:
        listing = KafkaAdminClient(bootstrap_servers=self.config["bootstrap.servers"], request_timeout_ms=10_000)
        own = admin_client(self.config)
        try:
            def adding() -> list[tuple[int, list[int]]] | None:
                found = [(tp.partition, sorted(r["adding_replicas"]))
                         for tp, r in listing.list_partition_reassignments(timeout_ms=5_000).items()
                         if tp.topic == self.topic and r["adding_replicas"]]
                return found or None

            def gone() -> bool:  # a metadata request sent to the broker as it died fails: asked again
                try:
                    return self.victim not in own.list_topics(timeout=15).brokers
                except KafkaException:
                    return False

            self.moving = wait_until(adding, f"a move of {self.topic} in flight", timeout=WAIT_S, every=0.2)
            self.victim = self.moving[0][1][0]
            self.was_controller = own.list_topics(timeout=15).controller_id == self.victim
            kill_broker(self.sandbox, self.victim)
            try:
                wait_until(gone, f"broker {self.victim} out of the cluster's metadata", timeout=120)
            finally:  # the run waits for it: started again whatever happened here
                self.sandbox.start_broker(self.victim)
        finally:
            listing.close()

    def check(self) -> None:
        super().check()
        assert self.victim is not None and self.sandbox.is_alive(self.victim), (self.victim, self.moving)


def test_a_broker_killed_mid_move_loses_nothing_on_zookeeper_mode(zk_sandbox, zk_airflow_home):
    """The decommission example drains broker 4 one move at a time; a broker a move is adding a replica to is
    SIGKILLed while that move copies, and started again once it is out of the cluster (see
    :class:`BrokerKilledMidMove`). The run finishes at the first try of every task: broker 4 empty, replication
    factors kept, nothing left in flight, every acknowledged record of the acks=all traffic read back, every throttle
    config as before (the test's own clients)."""
    config = zk_sandbox.client_config()
    topic = "zk-kill"
    make_topic(config, topic, KILL_ASSIGNMENT, megabytes=MB_PER_PARTITION)
    own = admin_client(config)
    throttles_before = throttle_configs(own, BROKERS, [topic])
    conf = {"broker_ids": [KILL_DRAINED], "dry_run": False, "require_approval": False, "unregister": False,
            "throttle_bytes_per_sec": THROTTLE, "max_moves": 1, "max_moves_per_broker": 1}
    killer = BrokerKilledMidMove(zk_sandbox, topic)
    try:
        with Traffic(config, topic, partitions=len(KILL_ASSIGNMENT)) as traffic, killer:
            result = run_dag_file(zk_airflow_home, install(zk_airflow_home, "kafka_decommission_brokers.py"), conf,
                                  plan_in_process=True, unpatched=True, timeout=900)
    finally:
        for broker in BROKERS:  # the module's other tests use five brokers
            if not zk_sandbox.is_alive(broker):
                zk_sandbox.start_broker(broker)
    killer.check()
    log = result["log"]
    wait_summary = result["xcom"].get("wait.return_value") or {}
    print(f"broker {killer.victim} (the controller: {killer.was_controller}) killed while {killer.moving} copied; "
          f"the wait: {wait_summary}")
    traffic.check()
    assert result["state"] == "success", log[-8000:]
    for task in ("check_request", "plan", "execute", "wait", "verify_drained"):
        assert result["tis"].get(task) == "success", (task, result["tis"], log[-8000:])
        assert result["tries"].get(task) == 1, (task, result["tries"], errors_in(log))
    assert wait_summary["status"] == "complete" and wait_summary["blocked"] == 0, wait_summary
    assert result["xcom"]["verify_drained.return_value"] == {"drained": [KILL_DRAINED], "left_for_later": 0}
    parts = replicas_of(config, topic)
    assert len(parts) == len(KILL_ASSIGNMENT), parts
    assert all(KILL_DRAINED not in r and len(r) == 3 for r in parts.values()), parts
    listing = KafkaAdminClient(bootstrap_servers=config["bootstrap.servers"], request_timeout_ms=10_000)
    try:
        assert not listing.list_partition_reassignments(), "a reassignment was left in flight"
    finally:
        listing.close()
    assert throttle_configs(own, BROKERS, [topic]) == throttles_before
