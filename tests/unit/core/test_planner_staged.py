"""The staged planner (what the Spark job runs) gives exactly the single-process plan.

Every parameterless test of the planner's goal and input suites runs again with
``plan_reassignment`` replaced by :func:`plan_staged`, and synthetic scenarios compare the
whole results; the plan files' JSON fragments are checked byte for byte against pydantic.
"""

from __future__ import annotations

import importlib
import inspect
import random
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from airflow_kafka_reassign.core.planner import PlanRequest, balance_leaders, plan_reassignment
from airflow_kafka_reassign.core.planner.staged import LeaderInput, Placed, driver_leaders, move_fragments, plan_staged
from airflow_kafka_reassign.core.planner.synthetic import synthetic_cluster, to_snapshot
from airflow_kafka_reassign.core.planner.types import TopicMove
from airflow_kafka_reassign.core.records.plan_io import partition_counts_json
from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan

SUITES = ("test_planner_goals", "test_planner_inputs", "test_planner_disk")


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
    # racks left uneven (rack-1 keeps broker 1 alone): topics give way to the racks
    (dict(brokers=6, racks=3, rf=(2, 3)), PlanRequest(goal="remove-brokers", brokers=(4,))),
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


# load-aware goals: a capacity document (heterogeneous disks, 60% full) with these request fields
DISK_SCENARIOS = [
    (dict(brokers=9, skew=0.5), {}),
    (dict(brokers=9, in_flight=4), {"disk_tolerance": 0.05}),
    (dict(brokers=8), {"goal": "remove-brokers", "brokers": (3,)}),
    (dict(brokers=9), {"disk_topic_spread": 2}),
    (dict(brokers=9, skew=0.5), {"goal": "offload", "offload_threshold": 0.7}),
    # racks of unequal size (5, 5, 4): the disk step cannot even out the counts itself, so both
    # planners place again with the per-topic steps balancing them
    (dict(brokers=12, new_brokers=2, skew=0.4, seed=3, replicas=6000), {"goal": "add-brokers", "brokers": (12, 13)}),
]


@pytest.mark.parametrize(("cluster", "fields"), DISK_SCENARIOS)
def test_same_load_aware_result_as_plan_reassignment(cluster: dict, fields: dict) -> None:
    # the staged planner runs the disk step on the driver over the place stage's flat arrays
    from airflow_kafka_reassign.core.planner.synthetic import synthetic_capacities
    from airflow_kafka_reassign.core.vocabulary.capacity import BrokerCapacity, CapacityDocument

    synthetic = synthetic_cluster(**{"replicas": 3000, "seed": 11, "racks": 3, "sizes": "skewed", **cluster})
    snapshot = to_snapshot(synthetic)
    caps = synthetic_capacities(synthetic, fill=0.6)
    request_ = PlanRequest(capacity=CapacityDocument(brokers={b: BrokerCapacity(disk=v) for b, v in caps.items()}), **fields)
    a = plan_reassignment(snapshot, request_)
    b = plan_staged(snapshot, request_)
    assert a.plan.model_dump_json() == b.plan.model_dump_json()
    assert a.model_dump(exclude={"plan"}) == b.model_dump(exclude={"plan"})
    assert len(a.plan) > 0 and a.disk is not None and a.bytes_lower_bound
    if fields.get("goal") != "offload":
        assert a.after.replica_max_min <= max(2, a.replica_max_min_floor)


def test_fragments_are_the_pydantic_json() -> None:
    moves = [
        TopicMove("orders", 3, (1, 2, 3), (4, 2, 3), 10),
        TopicMove('we"ird\\tøpic', 0, (1, 2), (1, 2, 3)),
        TopicMove("a", 7, (5, 6, 7), (6, 5)),
    ]
    counts = {"a": 8, "orders": 4, 'we"ird\\tøpic': 1}
    plan = ReassignmentPlan.model_construct(moves=tuple(m.to_move() for m in moves), partition_counts=counts)
    frags = [move_fragments(m) for m in moves]
    tail = '],"partition_counts":' + partition_counts_json(counts).decode() + "}"
    assert '{"version":1,"moves":[' + ",".join(f[0] for f in frags) + tail == plan.model_dump_json()
    assert '{"version":1,"moves":[' + ",".join(f[1] for f in frags) + tail == plan.rollback().model_dump_json()
    unknown = plan.model_copy(update={"partition_counts": None})  # a plan without counts: null, as pydantic writes
    assert unknown.model_dump_json().endswith('],"partition_counts":' + partition_counts_json(None).decode() + "}")
    assert '{"version":1,"partitions":[' + ",".join(f[2] for f in frags) + "]}" == plan.to_kafka_json()
    assert '{"version":1,"partitions":[' + ",".join(f[3] for f in frags) + "]}" == plan.rollback().to_kafka_json()


def _placed_topics(seed: int, topics: int = 12) -> list[Placed]:
    """Placed topics as ``place`` leaves them: some partitions' leaders already changed, a
    dead broker (99) in some lists, frozen partitions, a topic not balanced."""
    rng = random.Random(seed)
    out = []
    for k in range(topics):
        x = Placed(f"t{k:02d}", rows=[])
        x.balance = k != 3
        n = rng.randint(0, 40)
        x.partitions = list(range(n))
        x.final = [tuple(rng.sample([0, 1, 2, 3, 4, 5, 99], rng.choice((1, 2, 3)))) for _ in range(n)]
        x.final = [(0, *[b for b in r if b != 0][:2]) if rng.random() < 0.5 else r for r in x.final]  # skewed to 0
        x.current = [(r[0],) if rng.random() < 0.7 else (rng.randrange(6),) for r in x.final]
        x.frozen = [rng.random() < 0.1 for _ in range(n)]
        out.append(x)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_driver_leaders_does_not_depend_on_how_topics_are_split_between_tasks(seed: int) -> None:
    """``leaders`` takes partitions topic by topic in name order whatever the tasks sent,
    one input per task, per topic, or in any order; it gives the list-based fix-up's result."""
    placed = _placed_topics(seed)
    ctx = SimpleNamespace(request=PlanRequest(), balance=True, layout=SimpleNamespace(brokers=list(range(6))))
    step = SimpleNamespace(fixed_leaders={0: 2, 5: 1})
    whole = driver_leaders(ctx, step, [LeaderInput.of(placed)])  # type: ignore[arg-type]
    per_topic = [LeaderInput.of([x]) for x in placed]
    random.Random(seed).shuffle(per_topic)
    assert driver_leaders(ctx, step, per_topic) == whole  # type: ignore[arg-type]
    shuffled = placed[:]
    random.Random(seed + 1).shuffle(shuffled)  # inputs whose topics are not in name order
    assert driver_leaders(ctx, step, [LeaderInput.of(shuffled[:5]), LeaderInput.of(shuffled[5:])]) == whole  # type: ignore[arg-type]
    # the same as balance_leaders over Python lists, with the unbalanced topic's leaders fixed
    fixed = dict(step.fixed_leaders)
    replicas, original, movable, where = [], [], [], []
    for x in placed:
        if not x.balance:
            for r in x.final:
                fixed[r[0]] = fixed.get(r[0], 0) + 1
            continue
        replicas += x.final
        original += [c[0] for c in x.current]
        movable += [not f for f in x.frozen]
        where += [(x.topic, p) for p in x.partitions]
    expected: dict[str, dict[int, tuple[int, ...]]] = {}
    for i, reps in balance_leaders(replicas, original, range(6), fixed, movable).items():
        expected.setdefault(where[i][0], {})[where[i][1]] = reps
    assert whole == expected
    assert whole  # something to balance


def test_balance_leaders_with_large_broker_ids() -> None:
    """Broker ids far apart (no lookup table) give the same reordering as small ones."""
    rng = random.Random(5)
    small = [tuple(rng.sample(range(5), 3)) for _ in range(80)]
    small = [(0, *[b for b in r if b != 0][:2]) if i % 3 else r for i, r in enumerate(small)]
    big = [tuple(10**9 + 7 * b for b in r) for r in small]
    a = balance_leaders(small, [r[0] for r in small], range(5))
    b = balance_leaders(big, [r[0] for r in big], [10**9 + 7 * x for x in range(5)])
    assert a
    assert {i: tuple((x - 10**9) // 7 for x in r) for i, r in b.items()} == a
