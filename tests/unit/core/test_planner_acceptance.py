"""The acceptance quality targets of the planner issue, table-driven on synthetic clusters.

Scenarios: scale-out 6 -> 8 brokers, decommission 1 of 8 (from a balanced cluster), skewed
rebalance; RF 2, RF 3 and a mix; 1 and 3 racks; uneven topic sizes. Plus 6 -> 9 on 3 racks,
where racks stay of equal size and every target applies without exception.

Every balance number is recounted here from the snapshot with the plan applied, not taken
from the planner's own metrics. Where racks of unequal size make a target impossible
(RF 3 over 3 racks holds exactly one replica of each partition per rack, so a 2-broker rack
carries half of them per broker and a 3-broker rack a third), the test computes that floor
independently and holds the plan to it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from airflow_kafka_reassign.core.planner import PlanRequest, PlanResult, plan_reassignment
from airflow_kafka_reassign.core.planner.synthetic import apply_plan, synthetic_snapshot
from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot


@dataclass(frozen=True)
class Scenario:
    name: str
    racks: int
    rf: tuple[int, ...]

    @property
    def id(self) -> str:
        return f"{self.name}-racks{self.racks}-rf{'+'.join(map(str, self.rf))}"


def build(s: Scenario) -> tuple[ClusterSnapshot, PlanRequest]:
    common = {"racks": s.racks, "rf": s.rf, "topics": 30, "sizes": True}
    if s.name == "scale-out-6-to-8":
        return synthetic_snapshot(brokers=6, new_brokers=2, seed=11, **common), PlanRequest(goal="add-brokers")
    if s.name == "scale-out-6-to-9":
        return synthetic_snapshot(brokers=6, new_brokers=3, seed=12, **common), PlanRequest(goal="add-brokers")
    if s.name == "decommission-1-of-8":
        start = synthetic_snapshot(brokers=8, seed=13, **common)
        balanced = apply_plan(start, plan_reassignment(start, PlanRequest()).plan)
        return balanced, PlanRequest(goal="remove-brokers", brokers=(7,))
    if s.name == "skewed-rebalance":
        return synthetic_snapshot(brokers=6, skew=0.6, seed=14, **common), PlanRequest(goal="rebalance")
    raise AssertionError(s.name)


SCENARIOS = [
    Scenario(name, racks, rf)
    for name in ("scale-out-6-to-8", "decommission-1-of-8", "skewed-rebalance")
    for racks in (1, 3)
    for rf in ((2,), (3,))
] + [
    Scenario("scale-out-6-to-8", 1, (2, 3)),
    Scenario("decommission-1-of-8", 1, (2, 3)),
    Scenario("skewed-rebalance", 1, (2, 3)),
    Scenario("skewed-rebalance", 3, (2, 3)),
    Scenario("scale-out-6-to-9", 3, (2,)),
    Scenario("scale-out-6-to-9", 3, (3,)),
    Scenario("scale-out-6-to-9", 3, (2, 3)),
]


@dataclass
class Recount:
    live: list[int]
    rack_of: dict[int, str | None]
    per_broker: Counter[int]
    leaders: Counter[int]
    per_topic: dict[str, Counter[int]]
    partitions_per_topic: Counter[str]
    rack_violations: int
    rf_changes: int


def recount(before: ClusterSnapshot, result: PlanResult) -> Recount:
    removed = set(result.request.brokers) if result.request.goal == "remove-brokers" else set()
    live = [b for b in before.broker_ids if b not in removed]
    rack_of = {b.id: b.rack for b in before.brokers}
    k_racks = len({rack_of[b] for b in live})
    rf_before = {p.tp: len(p.target_replicas) for p in before.partitions}
    after = apply_plan(before, result.plan)
    per_broker: Counter[int] = Counter()
    leaders: Counter[int] = Counter()
    per_topic: dict[str, Counter[int]] = {}
    partitions: Counter[str] = Counter()
    violations = rf_changes = 0
    for p in after.partitions:
        reps = p.target_replicas
        per_broker.update(reps)
        leaders[reps[0]] += 1
        per_topic.setdefault(p.topic, Counter()).update(reps)
        partitions[p.topic] += 1
        if len({rack_of[b] for b in reps}) < min(len(reps), k_racks):
            violations += 1
        if len(reps) != rf_before[p.tp]:
            rf_changes += 1
    return Recount(live, rack_of, per_broker, leaders, per_topic, partitions, violations, rf_changes)


def spread(counts: Counter[int], brokers: list[int]) -> int:
    values = [counts[b] for b in brokers]
    return max(values) - min(values)


def rack_floor(count: int, rc: Recount) -> int:
    """Smallest max-min when each rack must hold ``count`` replicas (RF = racks): brokers of
    rack g hold floor or ceil of count / size_g."""
    sizes = Counter(rc.rack_of[b] for b in rc.live)
    return max(-(-count // s) for s in sizes.values()) - min(count // s for s in sizes.values())


@pytest.fixture(scope="module", params=SCENARIOS, ids=lambda s: s.id)
def planned(request: pytest.FixtureRequest) -> tuple[Scenario, ClusterSnapshot, PlanResult, Recount]:
    scenario: Scenario = request.param
    snapshot, req = build(scenario)
    result = plan_reassignment(snapshot, req)
    return scenario, snapshot, result, recount(snapshot, result)


def forced_by_racks(scenario: Scenario, rc: Recount) -> bool:
    """RF 3 on 3 racks of unequal size: each rack's share is fixed by the rack constraint."""
    sizes = Counter(rc.rack_of[b] for b in rc.live)
    return scenario.racks == 3 and 3 in scenario.rf and len(set(sizes.values())) > 1


def test_replica_moves_within_5_percent_of_the_lower_bound(planned) -> None:
    _, _, result, _ = planned
    assert result.lower_bound <= result.replica_moves <= 1.05 * result.lower_bound
    assert result.replica_moves == sum(m.replica_moves for m in result.plan.moves)


def test_global_replica_balance(planned) -> None:
    scenario, snapshot, result, rc = planned
    got = spread(rc.per_broker, rc.live)
    if not forced_by_racks(scenario, rc):
        assert got <= 1
    elif scenario.rf == (3,):
        assert got <= rack_floor(len(snapshot.partitions), rc)
    else:  # pragma: no cover - RF 2 + RF 3 on unequal racks: see test_mixed_rf_on_unequal_racks
        raise AssertionError("not in the table")


def test_per_topic_replica_balance(planned) -> None:
    scenario, _, _, rc = planned
    for topic, counts in rc.per_topic.items():
        got = spread(counts, rc.live)
        if forced_by_racks(scenario, rc) and _topic_rf(rc, topic) == 3:
            assert got <= max(1, rack_floor(rc.partitions_per_topic[topic], rc)), topic
        else:
            assert got <= 1, topic


def _topic_rf(rc: Recount, topic: str) -> int:
    return sum(rc.per_topic[topic].values()) // rc.partitions_per_topic[topic]


def test_leader_balance(planned) -> None:
    _, _, _, rc = planned
    assert spread(rc.leaders, rc.live) <= 2


def test_leader_changes_within_10_percent_of_the_fewest(planned) -> None:
    _, snapshot, result, _ = planned
    changed = sum(1 for m in result.plan.moves if m.current_replicas[0] != m.target_replicas[0])
    assert changed == result.leader_changes
    assert result.leader_changes <= 1.1 * result.leader_changes_lower_bound + 1


def test_no_rack_violation_and_no_unrequested_rf_change(planned) -> None:
    _, _, result, rc = planned
    assert rc.rack_violations == 0
    assert rc.rf_changes == 0
    assert not any(m.allow_rf_change or m.changes_rf for m in result.plan.moves)


def test_moves_name_their_current_replicas(planned) -> None:
    _, snapshot, result, _ = planned
    current = {p.tp: p.target_replicas for p in snapshot.partitions}
    for m in result.plan.moves:
        assert m.current_replicas == current[m.tp]
        assert m.target_replicas != m.current_replicas


def test_metrics_agree_with_the_recount(planned) -> None:
    _, _, result, rc = planned
    assert result.after.replica_max_min == spread(rc.per_broker, rc.live)
    assert result.after.leader_max_min == spread(rc.leaders, rc.live)
    assert result.after.rack_violations == rc.rack_violations
    assert result.after.replicas_per_broker == {b: rc.per_broker[b] for b in rc.live}
    if result.request.goal == "remove-brokers":
        assert result.after.replicas_on_removed_brokers == 0
        assert all(rc.per_broker[b] == 0 for b in result.request.brokers)


def test_bytes_to_move_add_up(planned) -> None:
    _, snapshot, result, _ = planned
    size = {p.tp: max(p.replica_sizes.values()) for p in snapshot.partitions if p.replica_sizes}
    assert result.bytes_to_move == sum(size[m.tp] * m.replica_moves for m in result.plan.moves)


def best_mixed_max_min(rc: Recount) -> int:
    """Smallest brokers' max-min of any rack-valid layout of RF-2 and RF-3 partitions on 3
    racks: each RF-3 partition has one replica in every rack, each RF-2 partition one in two
    different racks, so rack g holds ``P3 + x_g`` with ``x_g <= P2`` and ``sum(x) = 2 * P2``
    (any such ``x`` is some choice of racks), and its brokers floor or ceil of that over its
    size (a partition has at most one replica per rack, which any of its brokers can take)."""
    p3 = sum(n for t, n in rc.partitions_per_topic.items() if _topic_rf(rc, t) == 3)
    p2 = sum(n for t, n in rc.partitions_per_topic.items() if _topic_rf(rc, t) == 2)
    sizes = list(Counter(rc.rack_of[b] for b in rc.live).values())
    assert len(sizes) == 3
    best = None
    for x0 in range(p2 + 1):
        for x1 in range(max(0, p2 - x0), min(p2, 2 * p2 - x0) + 1):
            racks = [p3 + x0, p3 + x1, p3 + 2 * p2 - x0 - x1]
            got = max(-(-r // s) for r, s in zip(racks, sizes, strict=True)) - min(
                r // s for r, s in zip(racks, sizes, strict=True)
            )
            best = got if best is None else min(best, got)
    assert best is not None
    return best


@pytest.mark.parametrize("name", ["scale-out-6-to-8", "decommission-1-of-8"])
def test_mixed_rf_on_unequal_racks(name: str) -> None:
    """RF 2 and RF 3 together on racks of 3, 3 and 2 brokers (3, 2, 2 after the
    decommission): the RF-3 topics fix each rack's share, so only the RF-2 topics can level
    the brokers, by spreading unevenly over the racks. The brokers end within 1 of the best
    any rack-valid layout reaches (computed here), the RF-3 topics at their rack levels, the
    warning says the racks, not per-topic evenness, bounded it, and the moves stay within 5%
    of the bound."""
    scenario = Scenario(name, 3, (2, 3))
    snapshot, req = build(scenario)
    result = plan_reassignment(snapshot, req)
    rc = recount(snapshot, result)
    assert rc.rack_violations == 0 and rc.rf_changes == 0
    best = best_mixed_max_min(rc)
    assert spread(rc.per_broker, rc.live) <= max(1, best + 1)
    assert result.replica_max_min_floor == best
    for topic, counts in rc.per_topic.items():
        if _topic_rf(rc, topic) == 3:
            assert spread(counts, rc.live) <= max(1, rack_floor(rc.partitions_per_topic[topic], rc))
    assert spread(rc.leaders, rc.live) <= 2
    text = " ".join(result.warnings)
    assert "racks of unequal size" in text and "per-topic evenness gives way" in text
    if best > 1:
        assert result.replica_balance_bounded_by == ("racks",)
        assert f"the best any plan can reach is {best}" in text
    assert result.lower_bound <= result.replica_moves <= 1.05 * result.lower_bound
