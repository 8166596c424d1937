"""Bytes-in rates from the admin API alone on the sandbox cluster: a topic being produced to gets a
non-zero rate, an idle one 0 (two DescribeLogDirs reads a short window apart; core/vocabulary/rates.py)."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Producer
from kafka_helpers import make_topic

from airflow_kafka_reassign.core.vocabulary.rates import snapshot_bytes_in
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

pytestmark = pytest.mark.integration

WINDOW_S = 3.0


def test_a_producing_topic_gets_a_rate_and_an_idle_one_none(sandbox, unique_topic):
    config = sandbox.client_config()
    busy, idle = f"{unique_topic}-busy", f"{unique_topic}-idle"
    make_topic(config, busy, [[1, 2], [3, 4]])
    make_topic(config, idle, [[2, 3]], megabytes=0.1)
    stop = threading.Event()
    sent = [0]

    def produce() -> None:  # 1 KB records to partition 0 of busy only, until stopped
        producer = Producer({**config, "linger.ms": 20})
        while not stop.is_set():
            producer.produce(busy, b"x" * 1024, partition=0)
            sent[0] += 1
            producer.poll(0.005)
        producer.flush(30)

    thread = threading.Thread(target=produce, daemon=True)
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        snapshot = admin.snapshot(topics=[busy, idle], include_sizes=True)
        thread.start()
        try:
            sampled = snapshot_bytes_in(admin.replica_sizes, snapshot, WINDOW_S)
        finally:
            stop.set()
            thread.join(60)
    rates = {str(p.tp): p.bytes_in_per_s for p in sampled.partitions}
    assert sent[0] > 0 and sampled.bytes_in is not None and sampled.bytes_in.window_s > 0
    assert rates[f"{busy}-0"] > 1024, rates  # at least one KB record per second reached the log
    assert rates[f"{busy}-1"] == 0.0 and rates[f"{idle}-0"] == 0.0, rates
    # the snapshot reads the topic config that marks tiered topics (none here: the sandbox has no remote storage)
    assert {t.name: t.is_tiered for t in snapshot.topics} == {busy: False, idle: False}
    assert all(t.configs.get("remote.storage.enable") == "false" for t in snapshot.topics)
