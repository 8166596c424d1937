"""A held admin client fails over to the live brokers when a broker is killed under it (issue 38, item 5).

librdkafka routes DescribeCluster, DescribeConfigs and IncrementalAlterConfigs (and more) to the broker it keeps as
"controller": in KRaft a random live broker named by the last Metadata answer. kafka-python does the same for its
controller requests (List/AlterPartitionReassignments, DescribeQuorum). When that broker is SIGKILLed, the client
keeps it: a request in flight failed with "Broker transport failure" and the next ones waited for it ("waiting for
controller") until they timed out, while four brokers answered (test_health_gate.py's decommission of a broker
already down failed so, 1 run in 131). The adapter (kafka/admin/client.py) routes such a request again to a broker
that accepts connections.

The proof: one KafkaClusterAdmin, answered before, held through twenty SIGKILLs of broker 5 (never a controller
voter). Each round makes the worst moment happen rather than wait for it: both of the client's libraries route their
controller requests to broker 5 (librdkafka's metadata read until it names 5; kafka-python's controller id set to
5), broker 5 is frozen (SIGSTOP), a snapshot is sent, and broker 5 is killed once the request is seen waiting in its
socket (the kernel's receive queue, /proc/net/tcp): the request is in flight when its broker dies. The snapshot must
answer; then, polling until the cluster fences the broker and after, every call a run makes (the snapshot,
DescribeCluster, List/AlterPartitionReassignments, the throttle and cordon configs, DescribeLogDirs, the quorum);
the broker is restarted between rounds. No retry of the test and no sleep: each call must answer, and its answer is
checked. Its cost is mostly the fencing (9 s) and the restarts: printed at the end.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from kafka_helpers import kill_broker, make_topic, node_status

from airflow_kafka_reassign.core.execution.throttle import LEADER_RATE
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.sandbox import wait_until

DOWN = 5  # never a controller voter (1, 2, 3 are)
ROUNDS = 20
LIVE = [1, 2, 3, 4]
TOPIC_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def waiting_in_socket(port: int) -> bool:
    """Whether bytes wait unread in an established connection to ``port`` (a request the broker has not read)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if int(local.rsplit(":", 1)[1], 16) == port and state == "01" and int(queues.split(":")[1], 16) > 0:
                return True
    return False


def route_to(admin: KafkaClusterAdmin, broker: int) -> None:
    """Both of ``admin``'s clients route their controller requests to ``broker``: librdkafka's metadata is read until
    it names ``broker`` (each answer names a random live broker), kafka-python's controller id is set to it."""
    ck = admin._confluent()  # noqa: SLF001 (the test makes the worst routing happen)
    wait_until(lambda: ck.list_topics(timeout=20).controller_id == broker, f"librdkafka's controller to be {broker}",
               timeout=120)
    admin.describe_cluster_brokers()  # answered by ``broker``: librdkafka's connection to it is up
    admin._kafka_python()._controller_id = broker  # noqa: SLF001


def kill_with_a_request_in_flight(sandbox, admin: KafkaClusterAdmin, topic: str) -> None:
    """Broker :data:`DOWN` frozen, a snapshot sent to it, and the broker killed once the request waits in its socket:
    the snapshot must still answer (through a live broker)."""
    pid, port = node_status(sandbox, DOWN)["pid"], node_status(sandbox, DOWN)["port"]
    os.kill(pid, signal.SIGSTOP)
    answer: dict = {}

    def snapshot() -> None:
        try:
            answer["snapshot"] = admin.snapshot(topics=[topic])
        except Exception as e:  # noqa: BLE001 (the test reports it)
            answer["error"] = e

    asking = threading.Thread(target=snapshot, daemon=True)
    asking.start()
    try:
        wait_until(lambda: waiting_in_socket(port) or "error" in answer, f"a request waiting in broker {DOWN}'s socket",
                   timeout=60)
    finally:
        kill_broker(sandbox, DOWN)
    asking.join(120)
    assert "error" not in answer, f"a request in flight when its broker died failed: {answer['error']!r}"
    assert [p.partition for p in answer["snapshot"].partitions] == [0, 1]


def test_a_held_client_fails_over_to_the_live_brokers_after_each_of_twenty_kills(sandbox, unique_topic):
    config = sandbox.client_config()
    topic = unique_topic
    make_topic(config, topic, [[1, 2], [2, 3]])
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    rounds: list[tuple[float, float]] = []
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        try:
            for n in range(ROUNDS):
                assert DOWN in {b.id for b in admin.snapshot(topics=()).brokers}  # answered, with broker 5 registered
                route_to(admin, DOWN)
                started = time.monotonic()
                kill_with_a_request_in_flight(sandbox, admin, topic)
                wait_until(lambda: DOWN not in {b.id for b in admin.snapshot(topics=()).brokers},
                           f"broker {DOWN} fenced", timeout=120)
                snap = admin.snapshot(topics=[topic])
                assert [p.partition for p in snap.partitions] == [0, 1], snap.partitions
                assert set(LIVE) == {b.id for b in admin.describe_cluster_brokers()[1]}
                assert set(LIVE) <= {b.id for b in admin.describe_cluster().brokers}
                assert admin.list_reassignments([tp0, tp1]).keys() <= {tp0, tp1}
                target = (1, 3) if n % 2 == 0 else (1, 2)  # a small move each round, to and fro
                result = admin.alter_reassignments({tp0: list(target)})
                assert not result.failed, result
                assert admin.describe_throttles(LIVE, [topic]).topics[topic] == dict.fromkeys(TOPIC_THROTTLES)
                admin.set_throttles({1: {LEADER_RATE: None}}, {topic: dict.fromkeys(TOPIC_THROTTLES)})
                assert admin.describe_cordons(LIVE) == dict.fromkeys(LIVE)
                dirs = admin.log_dirs([tp0, tp1])
                assert set(dirs.dirs) >= {1, 2, 3}, dirs.unanswered
                assert admin.describe_quorum().leader in (1, 2, 3)
                rounds.append((time.monotonic() - started, 0.0))
                back = time.monotonic()
                sandbox.start_broker(DOWN)
                rounds[-1] = (rounds[-1][0], time.monotonic() - back)
                wait_until(lambda: tp0 not in admin.list_reassignments([tp0]), "the move to finish", timeout=60)
        finally:
            if not sandbox.is_alive(DOWN):
                sandbox.start_broker(DOWN)
    calls = [c for c, _ in rounds]
    print(f"\n{len(rounds)} kills under one held client, a request in flight at each: every call answered; a round "
          f"from the kill to its last call took {min(calls):.1f}-{max(calls):.1f} s (sum {sum(calls):.0f} s), the "
          f"restarts {sum(r for _, r in rounds):.0f} s")
    assert len(rounds) == ROUNDS
