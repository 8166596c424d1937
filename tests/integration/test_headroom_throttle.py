"""The headroom throttle on the real sandbox (issue 27, item 3).

A hot partition led by broker 1 takes about 150 kB/s of acks=all writes (replicated to broker 2) while the plan
copies a cold partition out of broker 1 and another out of broker 4, under ``throttle_headroom`` (600 kB/s per
broker, 20% margin) capped at 400 kB/s. Broker 1 sends the hot partition to its follower and (the assumed) consumers:
its leader rate must come out well below the idle broker 4's (the cap) and below the cap; rates are set per broker;
at the end every throttle config is exactly as before and every partition is at its target.

Nothing waits on a clock: the producer's traffic is awaited by condition, and the run ends when the plan is done.
"""

from __future__ import annotations

import logging

from kafka_helpers import Traffic, make_topic, throttles

from airflow_kafka_reassign.core.execution import ExecutionConfig, run
from airflow_kafka_reassign.core.execution.throttle import FOLLOWER_RATE, LEADER_RATE, read_backup
from airflow_kafka_reassign.core.records.journal import read_journal
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.sandbox import wait_until

CAP = 400_000  # B/s
RECORDS_PER_S, RECORD_PAD = 150, 1_000  # about 150 kB/s into the hot partition


def test_the_headroom_throttle_gives_a_busy_broker_a_lower_rate_and_restores_everything(
        sandbox, unique_topic, tmp_path):
    config = sandbox.client_config()
    cold, hot = f"{unique_topic}-cold", f"{unique_topic}-hot"
    make_topic(config, hot, [[1, 2]])
    make_topic(config, cold, [[1, 2], [4, 5]], megabytes=1.5)
    plan = ReassignmentPlan(moves=(
        Move(topic=cold, partition=0, current_replicas=(1, 2), target_replicas=(1, 3)),  # broker 1 sends
        Move(topic=cold, partition=1, current_replicas=(4, 5), target_replicas=(4, 3)),  # broker 4 sends
    ))
    log = logging.getLogger(f"akr.test.{unique_topic}")
    log.setLevel(logging.INFO)
    settings = ExecutionConfig(throttle_headroom="600KB", headroom_margin=0.2, headroom_floor="50KB",
                               throttle_bytes_per_sec=CAP, disk_reserve="64MiB")
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        before = throttles(admin, [cold, hot])
        written: list[dict[int, dict[str, str | None]]] = []
        real_set = admin.set_throttles

        def spy(brokers, topics):
            written.append({b: dict(v) for b, v in brokers.items()})
            return real_set(brokers, topics)

        admin.set_throttles = spy  # type: ignore[method-assign]
        hot_tp = TopicPartition(hot, 0)
        with Traffic(config, hot, partitions=1, per_second=RECORDS_PER_S, pad_bytes=RECORD_PAD) as traffic:
            # the traffic is flowing (on the leader and its follower) before the run's first read
            wait_until(lambda: min(admin.replica_sizes([hot_tp]).get(hot_tp, {1: 0, 2: 0}).values()) > 200_000,
                       "the hot partition to take writes", timeout=30)
            result = run(admin, plan, settings, state_dir=tmp_path, poll_interval_s=1.0, log=log)
            traffic.stop()
        assert result.status.ok and result.status.complete, result.summary()

        # the rates were set per broker: broker 1 (busy) below the cap and below the idle broker 4's. The restore's
        # writes put back what was there before (another test's value on a shared sandbox may be above the cap)
        def ours(b: int, key: str, value: str | None) -> bool:
            return bool(value) and value != before["brokers"].get(b, {}).get(key)

        leader_rates = {b: int(v[LEADER_RATE]) for w in written for b, v in w.items() if ours(b, LEADER_RATE,
                                                                                                v.get(LEADER_RATE))}
        journaled = [e["rates"] for e in read_journal(tmp_path) if e.get("event") == "headroom-throttle"]
        assert journaled, "no per-broker rate was computed"
        busy = [r for r in journaled if "1" in r and "4" in r]
        assert busy and all(r["1"][0] < r["4"][0] for r in busy), journaled
        assert busy[-1]["1"][0] < CAP and busy[-1]["4"][0] == CAP
        assert any(int(w[1].get(LEADER_RATE) or CAP) < CAP for w in written if 1 in w and w[1].get(LEADER_RATE)), \
            written
        assert all(r <= CAP for r in leader_rates.values())
        assert all(int(v[FOLLOWER_RATE]) <= CAP for w in written for b, v in w.items()
                   if ours(b, FOLLOWER_RATE, v.get(FOLLOWER_RATE)))

        # the throttles are exactly as before, every partition at its target
        assert throttles(admin, [cold, hot]) == before and read_backup(tmp_path) is None
        assert [p.replicas for p in admin.snapshot(topics=[cold]).partitions] == [(1, 3), (4, 3)]
    traffic.check()
