"""Table-driven planner tests on small hand-made clusters whose answers can be checked by hand.

Each JSON fixture in ``fixtures/`` carries the cluster, the request and the expected numbers,
with the reasoning in its ``description``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.synthetic import apply_plan, snapshot_from_assignment
from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.json"))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_fixture(path: Path) -> None:
    case = load(path)
    brokers = {b["id"]: b.get("rack") for b in case["brokers"]}
    snapshot = snapshot_from_assignment(brokers, case["topics"])
    result = plan_reassignment(snapshot, PlanRequest(**case["request"]))
    expect = case["expect"]

    assert result.replica_moves == expect["replica_moves"]
    assert result.lower_bound == expect["lower_bound"]
    if "leader_changes" in expect:
        assert result.leader_changes == expect["leader_changes"]
    if "leader_changes_lower_bound" in expect:
        assert result.leader_changes_lower_bound == expect["leader_changes_lower_bound"]
    if "partitions_moved" in expect:
        assert len(result.plan) == expect["partitions_moved"]
    for key, value in expect.get("after", {}).items():
        assert getattr(result.after, key) == value, key

    # recount from the plan itself, not from the planner's own metrics
    after = apply_plan(snapshot, result.plan)
    counts = Counter(b for p in after.partitions for b in p.replicas)
    removed = set(result.request.brokers) if result.request.goal == "remove-brokers" else set()
    if "replicas_per_broker" in expect:
        assert {str(b): counts[b] for b in brokers if b not in removed} == expect["replicas_per_broker"]
    assert not any(counts[b] for b in removed)
    for key, target in expect.get("targets", {}).items():
        assert list(result.plan.by_partition()[_tp(key)].target_replicas) == target
    rf_changed = sorted(str(m.tp) for m in result.plan.moves if m.allow_rf_change)
    assert rf_changed == expect.get("rf_change_partitions", [])

    # the plan is valid in the strict models (moves were built without re-validation)
    ReassignmentPlan.model_validate_json(result.plan.model_dump_json())


def _tp(key: str):  # "orders-1" -> TopicPartition
    from airflow_kafka_reassign.core.planner.goals import parse_partition

    return parse_partition(key)


def test_fixtures_exist() -> None:
    assert len(FIXTURES) >= 4
