"""Helpers the engine's and the cancel's unit tests share (a module, not a test file)."""

from __future__ import annotations

from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.testing import FakeClusterAdmin

RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2", 6: "r3"}


def tp(topic: str, p: int) -> TopicPartition:
    return TopicPartition(topic, p)


def mv(topic: str, p: int, current, target, **kw) -> Move:
    return Move(topic=topic, partition=p, current_replicas=tuple(current) if current is not None else None,
                target_replicas=tuple(target), **kw)


def plan_of(*moves: Move) -> ReassignmentPlan:
    return ReassignmentPlan(moves=tuple(moves))


def fake(**topics) -> FakeClusterAdmin:
    return FakeClusterAdmin.build(brokers=RACKS, topics=topics)
