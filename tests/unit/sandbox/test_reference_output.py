"""Reading ``kafka-reassign-partitions --generate`` output (sandbox.reference), without a cluster."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.sandbox.reference import parse_generate_output, topics_to_move_json

# verbatim from Kafka 4.3.1 on the sandbox (log_dirs shortened)
OUTPUT = (
    "Current partition replica assignment\n"
    '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1,2,3],"log_dirs":["/d/1","/d/2","/d/3"]},'
    '{"topic":"a","partition":1,"replicas":[2,3,1],"log_dirs":["/d/2","/d/3","/d/1"]}]}\n'
    "\n"
    "Proposed partition reassignment configuration\n"
    '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[6,4,5],"log_dirs":["any","any","any"]},'
    '{"topic":"a","partition":1,"replicas":[2,3,1],"log_dirs":["any","any","any"]}]}\n'
)


def test_both_documents_are_read_and_compare_with_the_current_assignment():
    current_json, proposed_json = parse_generate_output(OUTPUT)
    current = {m.tp: m.target_replicas for m in ReassignmentPlan.from_kafka_json(current_json, log_dirs="ignore").moves}
    assert current == {TopicPartition("a", 0): (1, 2, 3), TopicPartition("a", 1): (2, 3, 1)}
    plan = ReassignmentPlan.from_kafka_json(proposed_json, current, log_dirs="ignore")
    assert [m.replica_moves for m in plan.moves] == [3, 0]
    assert [m.leader_changes for m in plan.moves] == [True, False]


def test_output_without_a_proposal_is_refused_with_the_output():
    with pytest.raises(ValueError, match="Proposed partition reassignment configuration"):
        parse_generate_output(OUTPUT.split("\n\n")[0])


def test_topics_to_move_document():
    assert json.loads(topics_to_move_json(["b", "a"])) == {"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}]}
