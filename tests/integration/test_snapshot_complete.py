"""Complete snapshots or none, on the real sandbox: 3,000 partitions created in one bulk request and
snapshotted at once (the issue's case: a snapshot taken a few seconds after the topics were created
held 2,000 of 3,000 partitions and succeeded).

Right after CreateTopics returns, the brokers have not all applied the new topics yet (on this
2-core machine one was seen minutes behind): the snapshot must then wait for them, or fail naming
what is missing, and never succeed with fewer partitions than were created."""

from __future__ import annotations

import secrets
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kafka_reassign.core.records.snapshot_io import read_snapshot, write_snapshot
from airflow_kafka_reassign.exceptions import IncompleteSnapshotError
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.config import to_confluent

TOPICS, PARTITIONS = 300, 10


@pytest.fixture
def bulk_topics(sandbox):
    """Names of 300 topics x 10 partitions (RF 2), created in one CreateTopics request; deleted after."""
    prefix = f"t-bulk-{secrets.token_hex(3)}"
    names = [f"{prefix}-{i:03d}" for i in range(TOPICS)]
    client = AdminClient(to_confluent(sandbox.client_config(), timeout_s=120))
    try:
        yield client, names
    finally:
        existing = [n for n in client.list_topics(timeout=60).topics if n.startswith(prefix)]
        if existing:
            for future in client.delete_topics(existing, operation_timeout=120).values():
                future.result(180)


@pytest.mark.timeout(600)
def test_a_snapshot_right_after_3000_partitions_are_created_is_complete_or_names_what_is_missing(
        sandbox, bulk_topics, tmp_path):
    client, names = bulk_topics
    created = client.create_topics([NewTopic(n, PARTITIONS, 2) for n in names], request_timeout=120,
                                   operation_timeout=120)
    for future in created.values():
        future.result(180)
    started = time.monotonic()
    with KafkaClusterAdmin(sandbox.client_config(), timeout_s=30) as admin:
        try:
            snap = admin.snapshot(settle_timeout_s=120)  # the whole cluster, as the CLI and the plan task take it
        except IncompleteSnapshotError as e:
            # allowed, never a partial success: the error says what is missing (topics, or brokers behind)
            assert e.missing, str(e)
            assert any(t in names for t in e.missing) or "had not yet applied" in str(e), str(e)
            pytest.fail(f"the cluster did not settle within 120 s (an allowed outcome, reported as a failure so it "
                        f"is seen): {str(e)[:600]}")
        mine = [p for p in snap.partitions if p.topic in set(names)]
        assert len(mine) == TOPICS * PARTITIONS, (len(mine), snap.check)
        assert {n: snap.check.partition_counts.get(n) for n in names} == dict.fromkeys(names, PARTITIONS)
        assert snap.check.source == "cluster" and snap.check.partitions == len(snap.partitions)
        print(f"\nsnapshot complete after {snap.check.attempts} read(s), {time.monotonic() - started:.1f} s after "
              f"the topics were created")
        # the snapshot written and read back is checked against its record
        back = read_snapshot(write_snapshot(snap, tmp_path / "snap"))
        assert back.check.same_counts(snap.check)
        # the topics by name, as execution and the sensor take them
        named = admin.snapshot(topics=names[:50], settle_timeout_s=60)
        assert len(named.partitions) == 50 * PARTITIONS
