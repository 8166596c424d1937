"""The health gate and dead brokers on the real sandbox (core/guards/health.py, core/execution.py).

An acks=all producer writes numbered records through each run; afterwards every acknowledged record is read
back. Broker 5 is never a controller (1, 2, 3 are) and never a move's destination here. Each test leaves
every broker running (the session cluster is shared).
"""

from __future__ import annotations

import logging
import threading

from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource
from kafka_helpers import Traffic, kill_broker, make_topic, throttles

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, preflight, run
from airflow_kafka_reassign.core.execution.throttle import LEADER_RATE, read_backup
from airflow_kafka_reassign.core.guards.health import RESTORES_MIN_ISR_ELR
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import produce
from airflow_kafka_reassign.sandbox import wait_until

DOWN = 5


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_broker_killed_mid_run_pauses_submissions_until_it_returns(sandbox, unique_topic, tmp_path):
    config = sandbox.client_config()
    moved, other = f"{unique_topic}-m", f"{unique_topic}-o"
    # the first move (2.5 MB, ~25 s at 100 kB/s) stays in flight through the kill and the pause; the two after it
    # (0.3 MB each) only need to be held back while paused and sent once the broker is back
    make_topic(config, moved, [[1, 2], [2, 1], [1, 2]], megabytes=0.3)
    produce(config, moved, partition=0, megabytes=2.2)
    make_topic(config, other, [[DOWN, 1, 2]])  # under-replicated once 5 dies: not this run's doing
    plan = ReassignmentPlan(moves=tuple(
        Move(topic=moved, partition=p, current_replicas=c, target_replicas=t)
        for p, c, t in [(0, (1, 2), (3, 4)), (1, (2, 1), (4, 3)), (2, (1, 2), (3, 4))]))
    log = logging.getLogger(f"akr.test.{unique_topic}")
    log.setLevel(logging.INFO)
    lines = Lines()
    log.addHandler(lines)
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        admin.set_throttles({1: {LEADER_RATE: "987654321"}}, {})  # someone else's value: kept exactly
        wait_until(lambda: admin.describe_throttles([1], []).brokers[1][LEADER_RATE] == "987654321",
                   "the dynamic config to show", timeout=30)
        before = throttles(admin, [moved, other])
        sent: list[int] = []
        alter = admin.alter_reassignments

        def recording(targets, **kw):
            sent.append(len(targets))
            return alter(targets, **kw)

        admin.alter_reassignments = recording  # type: ignore[method-assign]
        traffic = Traffic(config, moved, partitions=3).__enter__()
        paused_at: dict[str, int] = {}

        def chaos() -> None:
            wait_until(lambda: sent, "the first submission", timeout=120)
            kill_broker(sandbox, DOWN)
            wait_until(lambda: any(x.startswith("PAUSED") for x in lines.lines), "the pause", timeout=120)
            paused_at["sent"] = len(sent)
            n = len(lines.lines)
            wait_until(lambda: sum(x.startswith("PAUSED") for x in lines.lines[n:]) >= 2, "two more paused polls",
                       timeout=120)
            paused_at["after"] = len(sent)
            sandbox.start_broker(DOWN)

        helper = threading.Thread(target=chaos, daemon=True)
        helper.start()
        try:
            result = run(admin, plan, ExecutionLimits(max_moves=1, order="plan"),
                         ExecutionOptions(throttle_bytes_per_sec=100_000), state_dir=tmp_path, poll_interval_s=1.0,
                         log=log)
        finally:
            helper.join(300)
            if not sandbox.is_alive(DOWN):
                sandbox.start_broker(DOWN)
            traffic.__exit__(None, None, None)
        assert result.status.ok, result.summary()
        assert paused_at["after"] == paused_at["sent"] < 3  # nothing submitted while paused
        assert any(x.startswith("cluster healthy again after") for x in lines.lines)
        assert result.paused_s > 0 and result.unhealthy is None
        assert throttles(admin, [moved, other]) == before and read_backup(tmp_path) is None
        admin.set_throttles({1: {LEADER_RATE: None}}, {})
    traffic.check()  # nothing lost


def test_a_decommission_of_a_broker_already_down_completes_and_leaves_no_throttle(sandbox, unique_topic, tmp_path):
    config = sandbox.client_config()
    topic = f"{unique_topic}-d"
    make_topic(config, topic, [[DOWN, 1], [2, DOWN], [DOWN, 3]], megabytes=0.5)
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        before = throttles(admin, [topic])
    plan = ReassignmentPlan(moves=tuple(
        Move(topic=topic, partition=p, current_replicas=c, target_replicas=t)
        for p, c, t in [(0, (DOWN, 1), (4, 1)), (1, (2, DOWN), (2, 4)), (2, (DOWN, 3), (4, 3))]))
    traffic = Traffic(config, topic, partitions=3)
    try:
        # the admin has answered before the kill, as a run's has when a broker dies under it: a client created in
        # the seconds before the broker is fenced may be told the dead broker is the "controller" (KRaft names a
        # random unfenced broker) and, never answered, fails its first call ("Timed out waiting for controller")
        with KafkaClusterAdmin(config, timeout_s=20) as admin:
            assert DOWN in {b.id for b in admin.snapshot(topics=()).brokers}
            kill_broker(sandbox, DOWN)
            wait_until(lambda: DOWN not in {b.id for b in admin.snapshot(topics=()).brokers}, "broker 5 fenced",
                       timeout=60)
            traffic.__enter__()
            result = run(admin, plan, ExecutionLimits(), ExecutionOptions(throttle_bytes_per_sec=300_000),
                         state_dir=tmp_path, poll_interval_s=1.0)
            assert result.status.ok, result.summary()
            assert [p.replicas for p in admin.snapshot(topics=[topic]).partitions] == [(4, 1), (2, 4), (4, 3)]
    finally:
        if not sandbox.is_alive(DOWN):
            sandbox.start_broker(DOWN)
        traffic.__exit__(None, None, None)
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        left = throttles(admin, [topic])
    assert left == before and all(v is None for v in left["topics"][topic].values()), left
    assert read_backup(tmp_path) is None
    traffic.check()


def test_a_partition_below_min_isr_is_reported_with_its_eligible_leader_replicas(sandbox, unique_topic):
    """KIP-966 (on by default on the sandbox's Kafka 4.4): broker 5 stopped, a partition with min.insync.replicas=2
    on [4, 5] falls below min ISR with 5 as an eligible leader replica, and the gate says so; min ISR of a topic
    without its own value is the cluster-wide default (the controller keeps one under ELR)."""
    config = sandbox.client_config()
    strict, plain, other = f"{unique_topic}-s", f"{unique_topic}-p", f"{unique_topic}-o"
    make_topic(config, strict, [[4, DOWN]], configs={"min.insync.replicas": "2"})
    make_topic(config, plain, [[4, DOWN]])
    make_topic(config, other, [[1, 2]])
    s0, p0 = TopicPartition(strict, 0), TopicPartition(plain, 0)
    elsewhere = ReassignmentPlan(moves=(Move(topic=other, partition=0, current_replicas=(1, 2), target_replicas=(1, 3)),))
    repair = ReassignmentPlan(moves=(Move(topic=strict, partition=0, current_replicas=(4, DOWN), target_replicas=(4, 3)),))
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        assert admin.capabilities().eligible_leader_replicas  # eligible.leader.replicas.version finalized at 1
        ck, res = AdminClient(config), ConfigResource(ConfigResource.Type.TOPIC, plain)
        entry = ck.describe_configs([res])[res].result(20)["min.insync.replicas"]
        assert entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value  # the cluster-wide default
        assert admin.describe_eligible_leaders([s0])[s0].elr == ()
        sandbox.stop_broker(DOWN)
        try:
            wait_until(lambda: admin.snapshot(topics=[strict]).partitions[0].isr == (4,), "ISR [4]", timeout=30)
            watched = preflight(admin, elsewhere, ExecutionOptions())
            health = watched.health
            assert health.under_min_isr_elr[s0] == (DOWN,), health.trouble.get(s0)
            assert health.trouble[s0].startswith(
                f"under min ISR (1 < 2), eligible leader replicas [{DOWN}] (down: {DOWN}) (KIP-966: ")
            assert " with eligible leader replicas: committed records kept)" in watched.paused
            # min ISR 1 (the cluster-wide default): the same replicas are only under-replicated
            assert p0 not in health.under_min_isr and health.trouble[p0].startswith("replicas [4, 5], ISR [4]")
            # a move that replaces the stopped replica restores min ISR, after those without eligible leaders
            assert preflight(admin, repair, ExecutionOptions()).urgency == {s0: RESTORES_MIN_ISR_ELR}
        finally:
            sandbox.start_broker(DOWN)
        wait_until(lambda: set(admin.snapshot(topics=[strict]).partitions[0].isr) == {4, DOWN}, "5 back in the ISR",
                   timeout=60)
        assert admin.describe_eligible_leaders([s0])[s0].elr == ()
