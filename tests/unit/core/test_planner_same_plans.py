"""The planner's faster per-topic loops (issue 40: the lower bound's parts, the band bound, the
metrics, the row checks) give the plans and figures they gave before: each scenario's plan and
result, fingerprinted, against the fingerprints the planner gave before those loops changed
(main at cbfdb09). The fingerprints cover the moves (their JSON), the lower bound and its parts,
the bytes and their bound, and the before/after metrics."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.staged import plan_staged
from airflow_kafka_reassign.core.planner.synthetic import synthetic_capacities, synthetic_cluster, to_snapshot
from airflow_kafka_reassign.core.vocabulary.capacity import BrokerCapacity, CapacityDocument

CASES: dict[str, tuple[dict[str, Any], dict[str, Any], bool]] = {
    # name: (synthetic_cluster's arguments, the request's fields, with a capacity document)
    "add-brokers racks": (dict(brokers=6, racks=3, new_brokers=2, rf=(2, 3)), {"goal": "add-brokers"}, False),
    "remove-broker racks": (dict(brokers=8, racks=3, rf=(2, 3)), {"goal": "remove-brokers", "brokers": (3,)}, False),
    "skewed one rack": (dict(brokers=8, racks=1, rf=(2, 3), skew=0.8), {}, False),
    "in flight, internal": (dict(brokers=7, racks=3, rf=(3,), in_flight=5, internal_topic=True),
                            {"goal": "add-brokers", "brokers": (6,)}, False),
    "uneven racks": (dict(brokers=6, racks=3, rf=(2, 3)), {"goal": "remove-brokers", "brokers": (4,)}, False),
    "load-aware": (dict(brokers=9, racks=3, skew=0.5, sizes="skewed"), {}, True),
    "load-aware remove": (dict(brokers=8, racks=3, sizes="skewed"), {"goal": "remove-brokers", "brokers": (3,)}, True),
    "load-aware uneven racks": (dict(brokers=12, racks=3, new_brokers=2, skew=0.4, sizes="skewed"),
                                {"goal": "add-brokers", "brokers": (12, 13)}, True),
}

#: the fingerprints main gave at cbfdb09 (before the loops changed)
BEFORE = {
    'add-brokers racks': 'c0f62e87eb55c567bb2a',
    'in flight, internal': '7502cdbef075b9f390d8',
    'load-aware': '806f52efced2b9797a10',
    'load-aware remove': '3e44fc4054399446de94',
    'load-aware uneven racks': 'eb94117be11fdd9ecc0d',
    'remove-broker racks': 'de743d4b6be0e82d26bb',
    'skewed one rack': 'a5187f680d214bff8962',
    'uneven racks': 'af48a4b4b9596f48ff34',
}


def fingerprint(name: str, staged: bool) -> str:
    cluster, fields, load_aware = CASES[name]
    synthetic = synthetic_cluster(replicas=3000, seed=11, **cluster)
    snapshot = to_snapshot(synthetic)
    if load_aware:
        caps = synthetic_capacities(synthetic, fill=0.6)
        fields = {**fields, "capacity": CapacityDocument(brokers={b: BrokerCapacity(disk=v) for b, v in caps.items()})}
    request = PlanRequest(**fields)
    r = (plan_staged if staged else plan_reassignment)(snapshot, request)
    figures = {
        "moves": hashlib.sha256(r.plan.model_dump_json().encode()).hexdigest(),
        "replica_moves": r.replica_moves, "lower_bound": r.lower_bound, "parts": r.lower_bound_parts,
        "bytes": r.bytes_to_move, "bytes_bound": r.bytes_lower_bound, "leader_changes": r.leader_changes,
        "leader_bound": r.leader_changes_lower_bound,
        "before": r.before.model_dump(mode="json"), "after": r.after.model_dump(mode="json"),
    }
    return hashlib.sha256(json.dumps(figures, sort_keys=True, default=str).encode()).hexdigest()[:20]


@pytest.mark.parametrize("staged", [False, True], ids=["pure", "staged"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_same_plan_and_figures_as_before(name: str, staged: bool) -> None:
    assert fingerprint(name, staged) == BEFORE[name]
