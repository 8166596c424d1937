"""The staged planner (what the Spark job runs) gives exactly the single-process plan.

Every parameterless test of the planner's goal and input suites runs again with
``plan_reassignment`` replaced by :func:`plan_staged`, and synthetic scenarios compare the
whole results; the plan files' JSON fragments are checked byte for byte against pydantic.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import pytest

from airflow_kafka_reassign.core.models import ReassignmentPlan
from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.staged import move_fragments, plan_staged
from airflow_kafka_reassign.core.planner.types import TopicMove
from airflow_kafka_reassign.core.synthetic import synthetic_cluster, to_snapshot

SUITES = ("test_planner_goals", "test_planner_inputs")


def _suite_tests() -> list[tuple[str, str]]:
    out = []
    for name in SUITES:
        module = importlib.import_module(name)
        for fname, fn in inspect.getmembers(module, inspect.isfunction):
            if fname.startswith("test_") and fn.__module__ == name and not inspect.signature(fn).parameters:
                out.append((name, fname))
    return out


@pytest.mark.parametrize(("module_name", "test_name"), _suite_tests())
def test_suite_passes_with_the_staged_planner(module_name: str, test_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(module_name)
    monkeypatch.setattr(module, "plan_reassignment", plan_staged)
    test: Callable[[], None] = getattr(module, test_name)
    test()


SCENARIOS = [
    (dict(brokers=6, racks=3, new_brokers=2, rf=(2, 3)), PlanRequest(goal="add-brokers")),
    (dict(brokers=8, racks=3, rf=(2, 3)), PlanRequest(goal="remove-brokers", brokers=(3,))),
    (dict(brokers=8, racks=1, rf=(2, 3), skew=0.8), PlanRequest()),
    (dict(brokers=7, racks=3, rf=(3,), in_flight=5, internal_topic=True), PlanRequest(goal="add-brokers", brokers=(6,))),
    (dict(brokers=6, racks=3, sizes=True), PlanRequest(use_sizes=True)),
]


@pytest.mark.parametrize(("cluster", "request_"), SCENARIOS)
def test_same_result_as_plan_reassignment(cluster: dict, request_: PlanRequest) -> None:
    kwargs = {k: v for k, v in cluster.items() if k in inspect.signature(synthetic_cluster).parameters}
    snapshot = to_snapshot(synthetic_cluster(replicas=1500, seed=11, **kwargs))
    a = plan_reassignment(snapshot, request_)
    b = plan_staged(snapshot, request_)
    assert a.plan.model_dump_json() == b.plan.model_dump_json()
    assert a.model_dump(exclude={"plan"}) == b.model_dump(exclude={"plan"})
    assert len(a.plan) > 0


def test_fragments_are_the_pydantic_json() -> None:
    moves = [
        TopicMove("orders", 3, (1, 2, 3), (4, 2, 3), 10),
        TopicMove('we"ird\\tøpic', 0, (1, 2), (1, 2, 3)),
        TopicMove("a", 7, (5, 6, 7), (6, 5)),
    ]
    plan = ReassignmentPlan.model_construct(moves=tuple(m.to_move() for m in moves))
    frags = [move_fragments(m) for m in moves]
    assert '{"version":1,"moves":[' + ",".join(f[0] for f in frags) + "]}" == plan.model_dump_json()
    assert '{"version":1,"moves":[' + ",".join(f[1] for f in frags) + "]}" == plan.rollback().model_dump_json()
    assert '{"version":1,"partitions":[' + ",".join(f[2] for f in frags) + "]}" == plan.to_kafka_json()
    assert '{"version":1,"partitions":[' + ",".join(f[3] for f in frags) + "]}" == plan.rollback().to_kafka_json()
