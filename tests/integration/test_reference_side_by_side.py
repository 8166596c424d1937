"""Our planner side by side with Apache Kafka's ``kafka-reassign-partitions --generate`` (issue 6).

A scale-out on the session sandbox (brokers 1-5 on racks r1 r2 r3 r1 r2): the test's topics live on brokers
1-3 only, brokers 4 and 5 are the new ones. Both tools plan from the same assignment, restricted to the
test's own topics (``--topics-to-move-json-file`` for the reference tool, a snapshot of just those topics
and ``topic_include`` for ours). ``tests/benchmarks/bench_reference.py`` prints the full comparison.
"""

from __future__ import annotations

import re
import time

from airflow_kafka_reassign.core.planner import PlanRequest, compute_metrics, plan_reassignment
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import create_topic, produce
from airflow_kafka_reassign.sandbox.reference import generate

#: (partitions, replication factor) per topic: 60 partitions, RF 2 and 3
TOPICS = ((24, 3), (18, 2), (18, 3))
OLD = (1, 2, 3)  # racks r1 r2 r3
ALL = (1, 2, 3, 4, 5)


def on_old_brokers(partitions: int, rf: int, shift: int) -> list[list[int]]:
    return [[OLD[(p + shift + i) % 3] for i in range(rf)] for p in range(partitions)]


def test_scale_out_moves_no_more_than_the_reference_tool_for_the_same_balance(sandbox, tmp_path, unique_topic):
    config = sandbox.client_config()
    names = []
    for i, (partitions, rf) in enumerate(TOPICS):
        name = f"{unique_topic}-{i}"
        create_topic(config, name, on_old_brokers(partitions, rf, i))
        names.append(name)
    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        deadline = time.monotonic() + 120
        while not set(names) <= set(admin.list_topic_names()):
            assert time.monotonic() < deadline, "the new topics never showed up in the metadata"
            time.sleep(0.5)
        for name in names:
            produce(config, name, partition=0, megabytes=0.05)
        snapshot = admin.snapshot(topics=names)
    assert len(snapshot.partitions) == sum(p for p, _ in TOPICS)

    reference = generate(sandbox, names, ALL, workdir=tmp_path)
    ours = plan_reassignment(
        snapshot, PlanRequest(goal="add-brokers", brokers=(4, 5), topic_include=(f"{re.escape(unique_topic)}-.*",))
    )

    # the same starting point, every partition of the topics proposed by the reference tool
    assert reference.current == {p.tp: p.replicas for p in snapshot.partitions}
    assert set(reference.plan.partitions) == set(reference.current)
    assert {m.topic for m in ours.plan.moves} <= set(names)
    # minimal movement: never more than the reference, within 5% of our lower bound
    assert ours.lower_bound > 0
    assert ours.replica_moves <= 1.05 * ours.lower_bound
    # the balance both reach, measured the same way
    ours_after = compute_metrics(snapshot, ours.plan, topics=names)
    reference_after = compute_metrics(snapshot, reference.plan, topics=names)
    # The reference tool starts its round robin at a random broker, so its moves vary from run to
    # run (51 to 67 in 12 runs of this scenario, against our 56 = our lower bound). A run that moves
    # fewer than ours leaves the brokers and the topics less even (max-min 28-31 and 13-14 in those
    # runs, against our 21 and 12; one CI run later matched our 12 on the topics, at 29 on the brokers): it does not
    # reach the goal ours does with fewer moves.
    if reference.replica_moves < ours.replica_moves:
        assert reference_after.replica_max_min > ours_after.replica_max_min, (reference_after, ours_after)
        assert reference_after.topic_replica_max_min >= ours_after.topic_replica_max_min, (reference_after, ours_after)
    assert ours_after.rack_violations == 0 and ours.after.rack_violations == 0
    assert ours_after.rf_changes == 0
    assert ours_after.replicas_per_broker == ours.after.replicas_per_broker
    assert reference_after.replicas == ours_after.replicas == sum(len(p.replicas) for p in snapshot.partitions)
