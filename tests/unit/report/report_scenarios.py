"""Small plans for the report tests: a decommission with an RF change, hostile names, sizes."""

from __future__ import annotations

from pathlib import Path

from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.synthetic import snapshot_from_assignment
from airflow_kafka_reassign.core.records.plan_io import write_plan_dir
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot
from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot, PartitionState

#: A topic name no real cluster allows, but a hand-edited snapshot file can hold: the report
#: must show it as text, never as markup.
HOSTILE_TOPIC = '<script>alert("x")</script>&\'"'
HOSTILE_RACK = "<b>r$1$</b>"


def decommission_snapshot() -> ClusterSnapshot:
    """6 brokers in 3 racks (one named with markup), broker 6 to be removed, replica sizes,
    one partition with an in-flight reassignment."""
    racks = {1: "r1", 2: "r2", 3: HOSTILE_RACK, 4: "r1", 5: "r2", 6: HOSTILE_RACK}
    topics = {
        "orders": [[1, 2, 3], [2, 3, 6], [3, 6, 1], [6, 1, 2], [1, 2, 6], [2, 6, 4]],
        "clicks": [[6, 1], [1, 6], [2, 6], [6, 3], [3, 1], [4, 5]],
        HOSTILE_TOPIC: [[1, 2], [2, 3], [3, 1], [1, 6]],
        "payments": [[4, 5], [5, 4]],
    }
    sizes = {name: [1_000_000 * (i + 1) for i in range(len(reps))] for name, reps in topics.items()}
    snap = snapshot_from_assignment(racks, topics, sizes=sizes)
    parts = list(snap.partitions)
    # payments-1 is moving from [5, 4] to [5, 1]: adding 1, removing 4
    for i, p in enumerate(parts):
        if p.topic == "payments" and p.partition == 1:
            parts[i] = PartitionState(topic="payments", partition=1, replicas=(5, 4, 1), isr=(5, 4), leader=5,
                                      adding_replicas=(1,), removing_replicas=(4,),
                                      replica_sizes={5: 2_000_000, 4: 2_000_000, 1: 0})
    return snap.model_copy(update={"partitions": tuple(parts)})


def write_decommission(root: Path) -> tuple[Path, Path, ClusterSnapshot]:
    """The decommission of broker 6 with ``clicks`` going from RF 2 to RF 3: plan and snapshot dirs."""
    snapshot = decommission_snapshot()
    result = plan_reassignment(
        snapshot, PlanRequest(goal="remove-brokers", brokers=(6,), rf_changes={"clicks": 3})
    )
    snap_dir = write_snapshot(snapshot, root / "snapshot")
    plan_dir = write_plan_dir(result, root / "plan", snapshot=str(snap_dir))
    return plan_dir, snap_dir, snapshot
