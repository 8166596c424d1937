"""Our planner side by side with Apache Kafka's ``kafka-reassign-partitions --generate`` (issue 6).

A scale-out on the session sandbox (brokers 1-5 on racks r1 r2 r3 r1 r2): the test's topics live on brokers
1-3 only, brokers 4 and 5 are the new ones. Both tools plan from the same assignment, restricted to the
test's own topics (``--topics-to-move-json-file`` for the reference tool, a snapshot of just those topics
and ``topic_include`` for ours). ``tests/benchmarks/bench_reference.py`` prints the full comparison.
"""

from __future__ import annotations

import re
import time
from collections import Counter

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
    # The balance both reach, measured the same way. Ours is at least as even as the reference's in every run
    # (on brokers and per topic): fewer moves never buy a worse balance.
    ours_after = compute_metrics(snapshot, ours.plan, topics=names)
    reference_after = compute_metrics(snapshot, reference.plan, topics=names)
    assert ours_after.replica_max_min <= reference_after.replica_max_min, (reference_after, ours_after)
    assert ours_after.topic_replica_max_min <= reference_after.topic_replica_max_min, (reference_after, ours_after)
    # Minimal movement, against a floor computed here from the cluster alone: every RF-3 partition keeps a replica
    # on each of the 3 racks, so the only broker of its rack (3, on r3) holds one of each; a plan whose brokers end
    # within ours' max-min of each other leaves each new broker (4, 5: empty before) at least that count minus the
    # max-min. No plan reaching our balance moves fewer replicas; ours within 5% of it, and our reported lower bound
    # (which the 5% below is judged against) between that floor and what we move.
    racks = {b.id: b.rack for b in snapshot.brokers if b.id in ALL}
    alone = [b for b in ALL if list(racks.values()).count(racks[b]) == 1]
    spanning = sum(1 for p in snapshot.partitions if len(p.replicas) == len(set(racks.values())))
    assert alone == [3] and spanning == sum(p for p, rf in TOPICS if rf == 3)
    floor = len(ALL[len(OLD):]) * max(0, spanning - ours_after.replica_max_min)
    assert floor > 0 and ours.replica_moves <= 1.05 * floor, (floor, ours.replica_moves)
    assert floor <= ours.lower_bound <= ours.replica_moves, (floor, ours.lower_bound, ours.replica_moves)
    assert ours.replica_moves <= 1.05 * ours.lower_bound
    # The reference tool starts its round robin at a random broker, so its moves vary from run to run (51 to 69 in
    # the runs seen, against our 60 = our lower bound = the floor). A run that moves fewer than ours leaves the
    # brokers less even (max-min 28-32 in those runs, against our 12; some matched ours on the topics, none on the
    # brokers): it does not reach the goal ours does with fewer moves.
    print(f"\nmoves: ours {ours.replica_moves} (floor {floor}, our bound {ours.lower_bound}), the reference's "
          f"{reference.replica_moves}; brokers max-min {ours_after.replica_max_min} vs {reference_after.replica_max_min}, "
          f"topics {ours_after.topic_replica_max_min} vs {reference_after.topic_replica_max_min}")
    assert (ours.replica_moves <= reference.replica_moves
            or reference_after.replica_max_min > ours_after.replica_max_min), (reference_after, ours_after)
    assert ours_after.rack_violations == 0 and ours.after.rack_violations == 0
    assert ours_after.rf_changes == 0
    # what the planner reports as its result is the plan's: replicas per broker counted here from its moves
    moved = {m.tp: m.target_replicas for m in ours.plan.moves}
    placed = Counter(b for p in snapshot.partitions for b in moved.get(p.tp, p.replicas))
    assert ours.after.replicas_per_broker == {b: placed[b] for b in ALL}, (ours.after.replicas_per_broker, placed)
    assert reference_after.replicas == ours_after.replicas == sum(len(p.replicas) for p in snapshot.partitions)
