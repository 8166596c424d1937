"""The pure planner: minimal-movement, rack-aware balancing of replicas and preferred leaders.

No Airflow, Kafka client or PySpark import. Structured so a Spark job can distribute it:

(a) :func:`compute_quotas` (global, on aggregates): how many replicas of each topic each
    broker should hold so that topics *and* brokers' totals are balanced, within racks;
(b) :func:`plan_topic` (per topic, a pure function of that topic's partitions and quotas):
    the fewest replica moves that meet the quotas and the rack spread, keeping leaders;
(c) :func:`balance_leaders` (global): reorder replica lists to balance preferred leaders
    with the fewest leader changes (no data moves);

plus :func:`replica_moves_lower_bound` / :func:`fewest_leader_changes` (what any plan needs)
and :func:`compute_metrics`. :func:`plan_reassignment` runs them all in one process.
"""

from __future__ import annotations

from airflow_kafka_reassign.core.planner.goals import Goal, PlanRequest, PlanResult, Scope, prepare
from airflow_kafka_reassign.core.planner.leaders import balance_leaders, fewest_leader_changes
from airflow_kafka_reassign.core.planner.lower_bound import LowerBound, replica_moves_lower_bound
from airflow_kafka_reassign.core.planner.metrics import BalanceMetrics, assignment_metrics, compute_metrics
from airflow_kafka_reassign.core.planner.pipeline import plan_reassignment, plan_topics
from airflow_kafka_reassign.core.planner.quotas import QuotaPlan, compute_quotas
from airflow_kafka_reassign.core.planner.topic import plan_topic
from airflow_kafka_reassign.core.planner.types import (
    BrokerLayout,
    TopicLoad,
    TopicMove,
    TopicParams,
    TopicPartitions,
)

__all__ = [
    "BalanceMetrics",
    "BrokerLayout",
    "Goal",
    "LowerBound",
    "PlanRequest",
    "PlanResult",
    "QuotaPlan",
    "Scope",
    "TopicLoad",
    "TopicMove",
    "TopicParams",
    "TopicPartitions",
    "assignment_metrics",
    "balance_leaders",
    "compute_metrics",
    "compute_quotas",
    "fewest_leader_changes",
    "plan_reassignment",
    "plan_topic",
    "plan_topics",
    "prepare",
    "replica_moves_lower_bound",
]
