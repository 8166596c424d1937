"""A decommission that finishes while the cluster lives on (issue 36's acceptance), on the session sandbox.

The ``kafka_decommission_brokers`` example DAG, copied unchanged, drains broker 5 (cordoned by its plan task, Kafka
4.3+) of this test's topics under a low throttle, through a real Airflow run (``dag.test()``, the wait deferred to
the in-process triggerer). While the drain is in flight, a thread of the test changes the cluster under it, each
step started by what it sees, never by a timer:

* once the controller lists a move of topic ``del`` in flight: topic ``grow`` gets more partitions, ``del`` is
  deleted, and ``recreate`` (a move of it still to come) is deleted and created again under the same name;
* then, with moves still left: broker 4 (not drained, not a KRaft voter: nodes 1-3 are) is stopped; once the run's
  own log says it saw the broker gone, it is started again.

acks=all traffic runs on ``live`` and ``grow`` throughout. Asserted with clients of the test's own (confluent-kafka
metadata and describe_configs, kafka-python's ListPartitionReassignments), not the project's adapter: the run
succeeded at its first try of every task, broker 5 holds no replica of the test's topics, every partition has its
replication factor, every acknowledged record is read back, and every throttle config of the brokers and the
surviving topics is as it was before (the re-created topic has none).
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions, NewTopic
from dagrun import run_dag_file
from kafka.admin import KafkaAdminClient
from kafka_helpers import Traffic, delete_topics, make_topic, replicas_of, skip_unless_kafka

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
DRAINED = 5
RESTARTED = 4  # not drained, and not a KRaft voter (the sandbox's nodes 1-3 are)
BROKERS = [1, 2, 3, 4, 5]
THROTTLE = 200_000  # bytes/s per broker: 2 MB per partition keeps each move copying for about 10-20 s
MB_PER_PARTITION = 2
BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                    "replica.alter.log.dirs.io.max.bytes.per.second")
TOPIC_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
#: every topic's replicas; broker 5 in each partition (the drain moves them all)
TOPICS = {
    "live": [[5, 1, 2], [1, 5, 3], [2, 3, 5], [5, 4, 1]],
    "grow": [[5, 1], [2, 5], [5, 3]],
    "del": [[5, 2], [3, 5], [5, 1]],
    "recreate": [[5, 3], [1, 5], [5, 2]],
}
GROWN_TO = 6
#: how long the thread waits for each condition before it gives up (the drain is then faster than the test expects)
WAIT_S = 300


def configs_of(config: dict[str, Any], kind: ConfigResource.Type, names: list[str], keys: tuple[str, ...]
               ) -> dict[str, dict[str, str | None]]:
    """The dynamic configs ``keys`` of each broker or topic, as Kafka reports them (one request each)."""
    dynamic = {ConfigSource.DYNAMIC_BROKER_CONFIG.value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
               ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    client = AdminClient(dict(config))
    out = {}
    for name in names:
        res = ConfigResource(kind, name)
        entries = client.describe_configs([res], request_timeout=30)[res].result(60)
        out[name] = {k: e.value for k, e in entries.items()
                     if k in keys and getattr(e.source, "value", e.source) in dynamic}
    return out


class Perturbations:
    """The thread that changes the cluster under the drain; every step waits for a condition it observes."""

    def __init__(self, sandbox: Any, names: dict[str, str], log_file: Path) -> None:
        self.sandbox, self.names, self.log_file = sandbox, names, log_file
        self.config = sandbox.client_config()
        self.done: list[str] = []
        self.error: BaseException | None = None
        self.broker_down = False
        self.trace: list[str] = []  # what each wait saw last (a failure names it)
        self._listing: KafkaAdminClient | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="living-cluster", daemon=True)

    def __enter__(self) -> Perturbations:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        if self._listing is not None:
            self._listing.close()
        if self.broker_down:  # never leave the shared sandbox a broker short
            self.sandbox.start_broker(RESTARTED)
            self.broker_down = False

    def _until(self, check: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not self._stop.is_set():
            try:
                found = check()
            except Exception as e:  # noqa: BLE001 (a broker restarting, a topic being deleted: ask again)
                found = None
                self.trace.append(f"{time.strftime('%X')} {what}: {type(e).__name__}: {e}")
            if found:
                return found
            time.sleep(0.2)
        why = "the run ended" if self._stop.is_set() else f"{WAIT_S} s"
        raise AssertionError(f"the thread gave up waiting for {what} ({why}); last seen: {self.trace[-5:]}")

    def _in_flight(self) -> set[tuple[str, int]]:
        """The test's partitions the controller lists as being reassigned (kafka-python, the test's own client)."""
        if self._listing is None:
            self._listing = KafkaAdminClient(bootstrap_servers=self.config["bootstrap.servers"],
                                             request_timeout_ms=10_000)
        listed = self._listing.list_partition_reassignments(timeout_ms=5_000)
        ours = set(self.names.values())
        found = {(tp.topic, tp.partition) for tp in listed if tp.topic in ours}
        self.trace.append(f"{time.strftime('%X')} in flight: {sorted(p for _, p in found)} of "
                          f"{sorted({t.rsplit('-', 1)[-1] for t, _ in found})}")
        return found

    def _on_drained(self, topic: str) -> list[int]:
        return [p for p, r in replicas_of(self.config, topic).items() if DRAINED in r]

    def _run(self) -> None:
        try:
            self._perturb()
        except BaseException as e:  # noqa: BLE001 (raised in the test's thread by check())
            self.error = e

    def _perturb(self) -> None:
        """Broker 4 stops while a move of ``del`` is in flight and stays down through the topic changes (the moves
        that need it wait, and the run cannot end before it is back: CI saw a run end before a restart that came
        last), then starts again."""
        n = self.names
        self._until(lambda: any(t == n["del"] for t, _ in self._in_flight()),
                    f"a move of {n['del']} in flight (the controller's listing)")
        offset = self.log_file.stat().st_size
        self.sandbox.stop_broker(RESTARTED)
        self.broker_down = True
        self.done.append("broker stopped")

        def seen() -> bool:  # the run's own log, after the stop: its progress line or its event names the broker
            text = self.log_file.read_text(errors="replace")[offset:]
            return bool(re.search(rf"broker {RESTARTED}\b[^\n]*not alive|PAUSED", text))

        self._until(seen, f"the run to see broker {RESTARTED} gone (its log)")
        client = AdminClient(dict(self.config))
        for f in client.create_partitions([NewPartitions(n["grow"], GROWN_TO)]).values():
            f.result(60)
        self.done.append("grown")
        delete_topics(self.config, [n["del"]])
        self.done.append("deleted")
        left = self._on_drained(n["recreate"])
        assert left, f"every move of {n['recreate']} was done before it could be re-created: make the moves slower"
        delete_topics(self.config, [n["recreate"]])

        def created() -> bool:  # the name is taken until the deletion is complete
            for f in client.create_topics([NewTopic(n["recreate"], num_partitions=len(TOPICS["recreate"]),
                                                    replication_factor=2)]).values():
                f.result(60)
            return True

        self._until(created, f"{n['recreate']} created again")
        self._until(lambda: len(replicas_of(self.config, n["recreate"])) == len(TOPICS["recreate"]),
                    f"{n['recreate']} re-created with {len(TOPICS['recreate'])} partitions")
        self.done.append(f"re-created (moves of partitions {left} still to come)")
        self.sandbox.start_broker(RESTARTED)
        self.broker_down = False
        self.done.append("broker started")

    def check(self) -> None:
        if self.error is not None:
            raise self.error
        assert self.done == ["broker stopped", "grown", "deleted", self.done[3], "broker started"], self.done


def test_a_decommission_ends_with_the_broker_empty_while_topics_change_and_a_broker_restarts(
        sandbox, idle_admin, airflow_home, unique_topic, tmp_path):
    config = sandbox.client_config()
    skip_unless_kafka(sandbox.kafka_version, (4, 3), f"the drain's cordon keeps the new partitions off broker {DRAINED}")
    names = {suffix: f"{unique_topic}-{suffix}" for suffix in TOPICS}
    for suffix, assignment in TOPICS.items():
        make_topic(config, names[suffix], assignment, megabytes=MB_PER_PARTITION)
    rf = {names[s]: len(a[0]) for s, a in TOPICS.items()}
    kept = [names["live"], names["grow"]]
    brokers_before = configs_of(config, ConfigResource.Type.BROKER, [str(b) for b in BROKERS], BROKER_THROTTLES)
    topics_before = configs_of(config, ConfigResource.Type.TOPIC, kept, TOPIC_THROTTLES)
    dag_file = Path(airflow_home["AIRFLOW__CORE__DAGS_FOLDER"]) / "kafka_decommission_brokers.py"
    shutil.copyfile(EXAMPLES / dag_file.name, dag_file)
    log_file = tmp_path / "dagrun.log"
    log_file.touch()
    conf = {
        "broker_ids": [DRAINED],
        "dry_run": False,
        "require_approval": False,  # nobody answers in dag.test()
        "throttle_bytes_per_sec": THROTTLE,
        "max_moves": 4,
        "max_moves_per_broker": 2,
        "topic_include": [re.escape(unique_topic) + "-.*"],
        "partial_drain": True,  # the shared sandbox: other tests' topics stay on broker 5
    }

    started = time.monotonic()
    with Traffic(config, names["live"], partitions=len(TOPICS["live"])) as live, \
            Traffic(config, names["grow"], partitions=len(TOPICS["grow"])) as grow, \
            Perturbations(sandbox, names, log_file) as perturbations:
        result = run_dag_file(airflow_home, dag_file, conf, plan_in_process=True, log_file=log_file, timeout=900)
    print(f"the decommission run and its perturbations took {time.monotonic() - started:.0f} s")
    perturbations.check()
    live.check()
    grow.check()

    assert result["state"] == "success", result["log"][-8000:]
    for task in ("check_request", "plan", "execute", "wait", "verify_drained"):
        assert result["tis"].get(task) == "success", (task, result["tis"], result["log"][-8000:])
        assert result["tries"].get(task) == 1, (task, result["tries"])  # no retry, no re-trigger
    assert result["xcom"]["verify_drained.return_value"]["drained"] == [DRAINED]
    # the run saw what the cluster did, and said what it did about it (one line each in the wait's log)
    wait_summary = result["xcom"]["wait.return_value"]
    assert wait_summary["status"] == "complete" and wait_summary["blocked"] == 0, wait_summary
    assert f"topic {names['del']} deleted: dropped" in result["log"]
    assert f"topic {names['grow']} grew from {len(TOPICS['grow'])} to {GROWN_TO} partitions: its moves continue" \
        in result["log"]

    # the test's own client: every topic off broker 5, every partition with its replication factor, in sync
    after = {t: replicas_of(config, t) for t in (*kept, names["recreate"])}
    assert names["del"] not in AdminClient(dict(config)).list_topics(timeout=30).topics
    assert len(after[names["grow"]]) == GROWN_TO
    for topic, parts in after.items():
        assert parts, topic
        for p, replicas in parts.items():
            assert DRAINED not in replicas, (topic, p, replicas)
            assert len(replicas) == rf[topic], (topic, p, replicas)
    client = KafkaAdminClient(bootstrap_servers=config["bootstrap.servers"], request_timeout_ms=10_000)
    try:
        assert not client.list_partition_reassignments(), "a reassignment was left in flight"
    finally:
        client.close()
    # every throttle config as before, read from the brokers (the re-created topic never had one)
    assert configs_of(config, ConfigResource.Type.BROKER, [str(b) for b in BROKERS], BROKER_THROTTLES) == \
        brokers_before
    assert configs_of(config, ConfigResource.Type.TOPIC, kept, TOPIC_THROTTLES) == topics_before
    assert configs_of(config, ConfigResource.Type.TOPIC, [names["recreate"]], TOPIC_THROTTLES) == \
        {names["recreate"]: {}}
