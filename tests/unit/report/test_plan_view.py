"""report.view: the report's numbers agree with the planner's metrics, from either source."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from report_scenarios import decommission_snapshot

from airflow_kafka_reassign.core.planner import PlanRequest, compute_metrics, plan_reassignment
from airflow_kafka_reassign.core.planner.synthetic import snapshot_from_assignment, synthetic_snapshot
from airflow_kafka_reassign.core.records.plan_io import write_plan_dir
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.report import view as pv


def same_assignment(a: pv.Assignment, b: pv.Assignment) -> None:
    assert a.racks == b.racks
    assert a.topics == b.topics
    assert a.partitions.tolist() == b.partitions.tolist()
    assert a.offsets.tolist() == b.offsets.tolist()
    assert a.replicas.tolist() == b.replicas.tolist()
    assert a.sizes.tolist() == b.sizes.tolist()
    assert a.cluster_id == b.cluster_id


@pytest.mark.parametrize(
    "snapshot",
    [
        decommission_snapshot(),
        synthetic_snapshot(brokers=7, racks=3, topics=12, sizes=True, in_flight=6, seed=3),
        synthetic_snapshot(brokers=5, racks=1, topics=5, sizes=False, in_flight=2, seed=4),
        snapshot_from_assignment({1: None, 2: None}, {"a": [[1, 2], [2, 1]], "b": [[1]]}, sizes={"a": [5, 0]}),
    ],
    ids=["decommission", "synthetic-sizes-in-flight", "synthetic-no-sizes", "partly-sized"],
)
def test_columns_read_from_a_snapshot_directory_equal_the_in_memory_snapshot(snapshot, tmp_path):
    from_dir = pv.read_assignment(write_snapshot(snapshot, tmp_path / "snap"))
    by_tp = tuple(sorted(snapshot.partitions, key=lambda p: (p.topic, p.partition)))  # the file's order
    same_assignment(from_dir, pv.assignment_from_snapshot(snapshot.model_copy(update={"partitions": by_tp})))
    # in-flight partitions count at their target replicas, never the intermediate set
    for p in snapshot.partitions:
        if p.reassigning:
            i = next(i for i, k in enumerate(zip(from_dir.topics, from_dir.partitions.tolist(), strict=True))
                     if k == (p.topic, p.partition))
            assert tuple(from_dir.replicas[from_dir.offsets[i]:from_dir.offsets[i + 1]].tolist()) == p.target_replicas


def test_an_empty_snapshot_directory_reads_as_no_partitions(tmp_path):
    snap = snapshot_from_assignment({1: "a"}, {})
    a = pv.read_assignment(write_snapshot(snap, tmp_path / "s"))
    assert a.partition_count == 0 and a.brokers() == [1] and not a.has_sizes


def test_a_directory_without_snapshot_json_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not a snapshot directory"):
        pv.read_assignment(tmp_path)


SCENARIOS = {
    "scale-out": (dict(brokers=6, racks=3, new_brokers=2, topics=15, sizes=True, in_flight=3, seed=1),
                  PlanRequest(goal="add-brokers")),
    "decommission": (dict(brokers=8, racks=3, topics=15, sizes=True, seed=2),
                     PlanRequest(goal="remove-brokers", brokers=(7,))),
    "skewed": (dict(brokers=6, racks=1, topics=20, skew=0.6, seed=5), PlanRequest()),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_loads_after_the_plan_equal_the_planner_metrics(name):
    kwargs, request = SCENARIOS[name]
    snapshot = synthetic_snapshot(**kwargs)
    result = plan_reassignment(snapshot, request)
    assignment = pv.assignment_from_snapshot(snapshot)
    before, _, _ = assignment.loads()
    removed, added = pv.request_brokers(request.model_dump(mode="json"), assignment.brokers(), before)
    view = pv.plan_view(assignment, pv.moves_of(result.plan), removed=removed, added=added)

    after = compute_metrics(snapshot, result.plan, removed=removed)
    for b, n in after.replicas_per_broker.items():
        assert view.replicas_after[b] == n
    for b, n in after.leaders_per_broker.items():
        assert view.leaders_after[b] == n
    if after.bytes_per_broker is not None:
        assert view.bytes_after is not None
        for b, n in after.bytes_per_broker.items():
            assert view.bytes_after[b] == n
    assert all(view.replicas_after[b] == 0 for b in removed)
    assert view.replica_moves == result.replica_moves
    assert view.leader_changes == result.leader_changes
    assert view.bytes_to_move == result.bytes_to_move
    assert view.partitions_moved == len(result.plan)
    # every replica that leaves a broker arrives at one: row and column sums of the matrix
    assert sum(view.matrix.values()) == result.replica_moves
    sent = Counter()
    received = Counter()
    for (src, dst), n in view.matrix.items():
        sent[src] += n
        received[dst] += n
    for b in view.brokers:
        assert view.replicas_after[b] - view.replicas_before[b] == received[b] - sent[b]
    if request.goal == "add-brokers":
        assert set(view.added) == {6, 7}


def test_rf_changes_are_listed_with_their_mark_and_new_replicas_come_from_nowhere():
    snapshot = snapshot_from_assignment({1: "a", 2: "b", 3: "c"}, {"t": [[1, 2], [2, 3]], "u": [[1, 2, 3]]})
    plan = ReassignmentPlan(moves=(
        Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(1, 2, 3), allow_rf_change=True),
        Move(topic="u", partition=0, current_replicas=(1, 2, 3), target_replicas=(3, 1), allow_rf_change=True),
        Move(topic="t", partition=1, target_replicas=(3, 1)),  # no current replicas: the snapshot's are used
    ))
    view = pv.plan_view(pv.assignment_from_snapshot(snapshot), pv.moves_of(plan))
    assert view.matrix == Counter({(pv.NEW_REPLICA, 3): 1, (2, pv.DROPPED_REPLICA): 1, (2, 1): 1})
    assert [(c.partition, c.allowed) for c in view.rf_changes] == [("t-0", True), ("u-0", True)]
    assert view.leader_changes == 2  # u-0: 1 -> 3; t-1: 2 -> 3
    assert view.replicas_after == Counter({1: 3, 2: 1, 3: 3})


def test_moves_naming_partitions_the_snapshot_lacks_are_reported_not_counted():
    snapshot = snapshot_from_assignment([1, 2], {"t": [[1]]})
    moves = [pv.PlannedMove("t", 0, (1,), (2,)), pv.PlannedMove("gone", 4, (1,), (2,))]
    view = pv.plan_view(pv.assignment_from_snapshot(snapshot), moves)
    assert view.unknown_partitions == ["gone-4"]
    assert view.partitions_moved == 1 and view.replica_moves == 1


def test_plan_json_is_read_as_written(tmp_path):
    snapshot = decommission_snapshot()
    result = plan_reassignment(snapshot, PlanRequest(goal="remove-brokers", brokers=(6,), rf_changes={"clicks": 3}))
    plan_dir = write_plan_dir(result, tmp_path / "plan")
    assert pv.read_plan_moves(plan_dir / "plan.json") == pv.moves_of(result.plan)


@pytest.mark.parametrize(
    ("moves", "problem"),
    [
        ({"nope": []}, 'no "moves" list'),
        ({"moves": [{"topic": "t", "partition": 0}]}, r"moves\[0\] is not a move"),
        ({"moves": [{"topic": "t", "partition": "0", "target_replicas": [1]}]}, r"moves\[0\]"),
        ({"moves": [{"topic": "t", "partition": 1, "target_replicas": []}]}, r"moves\[0\]"),
        ({"moves": [{"topic": "t", "partition": 1, "target_replicas": [1], "current_replicas": ["2"]}]}, r"moves\[0\]"),
    ],
)
def test_a_file_that_is_not_a_plan_fails_with_the_entry_named(tmp_path, moves, problem):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(moves))
    with pytest.raises(ValueError, match=problem):
        pv.read_plan_moves(path)


def test_request_brokers_follow_the_goal():
    before = Counter({1: 3, 2: 3})
    assert pv.request_brokers({"goal": "remove-brokers", "brokers": [2]}, [1, 2, 3], before) == ((2,), ())
    assert pv.request_brokers({"goal": "add-brokers", "brokers": []}, [1, 2, 3], before) == ((), (3,))
    assert pv.request_brokers({"goal": "add-brokers", "brokers": [2, 3]}, [1, 2, 3], before) == ((), (2, 3))
    assert pv.request_brokers({"goal": "rebalance"}, [1, 2, 3], before) == ((), ())


def big_view() -> pv.PlanView:
    snapshot = synthetic_snapshot(brokers=60, racks=3, new_brokers=6, topics=60, seed=9)
    result = plan_reassignment(snapshot, PlanRequest(goal="add-brokers"))
    return pv.plan_view(pv.assignment_from_snapshot(snapshot), pv.moves_of(result.plan))


def test_a_large_broker_matrix_keeps_the_busiest_senders_and_receivers_and_every_replica():
    view = big_view()
    table = pv.broker_matrix(view, max_brokers=20)
    assert len(table.rows) <= 20 and len(table.columns) <= 20
    assert table.total == sum(view.matrix.values())
    # a scale-out: the new brokers are the receivers the columns keep
    assert {str(b) for b in range(60, 66)} <= set(table.columns)
    assert table.rows[-1] == pv.OTHER_LABEL and table.columns[-1] == pv.OTHER_LABEL
    full = pv.broker_matrix(view, max_brokers=100)
    assert full.rows == full.columns == [str(b) for b in view.brokers]
    assert full.total == table.total


def test_the_rack_matrix_keeps_every_replica_and_every_rack():
    view = big_view()
    table = pv.rack_matrix(view)
    assert table.rows == table.columns == ["rack-0", "rack-1", "rack-2"]
    assert table.total == sum(view.matrix.values())
    counts = np.array(table.counts)
    assert counts.sum() == table.total
    rack_rows = {r["rack"]: r for r in pv.rack_loads(view)}
    assert sum(r["replicas_after"] for r in rack_rows.values()) == sum(view.replicas_after.values())
    assert sum(r["brokers"] for r in rack_rows.values()) == len(view.brokers)


def test_aggregate_matrix_adds_new_and_dropped_only_when_used():
    table = pv.aggregate_matrix({(1, 2): 3}, str, ["1", "2"], title="t")
    assert table.rows == ["1", "2"] and table.columns == ["1", "2"]
    table = pv.aggregate_matrix({(pv.NEW_REPLICA, 2): 1, (1, pv.DROPPED_REPLICA): 2}, str, ["1", "2"], title="t")
    assert table.rows == ["1", "2", pv.NEW_LABEL] and table.columns == ["1", "2", pv.DROPPED_LABEL]
    assert table.counts == [[0, 0, 2], [0, 0, 0], [0, 1, 0]]


def test_the_broker_table_prints_each_brokers_load_and_the_spread():
    snapshot = snapshot_from_assignment({1: "a", 2: "b", 3: None}, {"t": [[1, 2], [2, 1], [1, 2]]},
                                        sizes={"t": [1_500, 2_000_000, 0]})
    lines = pv.broker_table(snapshot, title="before").splitlines()
    assert lines[0] == "before" and lines[1].split() == ["broker", "rack", "replicas", "leaders", "bytes"]
    assert lines[2].split() == ["1", "a", "3", "2", "2.0", "MB"]
    assert lines[4].split() == ["3", "-", "0", "0", "0", "B"]
    assert lines[5].split() == ["max-min", "3", "2"]
