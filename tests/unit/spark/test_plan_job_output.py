"""How the Spark plan job's driver puts the ``finish`` tasks' moves into the plan files,
without Spark: each task sends its topics' JSON fragments as bytes per file, and the files
come out in topic order whatever the tasks' order (the job itself runs in
tests/integration/test_plan_job_readers.py)."""

from __future__ import annotations

import json

from airflow_kafka_reassign.core.planner.staged import move_fragments
from airflow_kafka_reassign.core.planner.types import TopicMove
from airflow_kafka_reassign.core.records.plan_io import (
    file_parts,
    plan_file_parts,
    plan_partition_counts,
    plan_topic_ids,
    write_plan_fragments,
)
from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan, TopicState


def moves(topic: str, n: int) -> tuple[str, list[tuple[str, str, str, str]]]:
    return topic, [move_fragments(TopicMove(topic, p, (1, 2), (2, 3), 0)) for p in range(n)]


def plan_order(path) -> list[tuple[str, int]]:
    return [(m["topic"], m["partition"]) for m in json.loads(path.read_text(encoding="utf-8"))["moves"]]


def test_tasks_in_any_order_give_the_files_in_topic_order(tmp_path):
    # task order reversed, as a collect may give them; "é" checks the offsets count bytes
    tasks = [file_parts([moves("c", 1), moves("d", 2)]), file_parts([moves("a", 2), moves("bé", 3)])]
    moved, parts = plan_file_parts(tasks)
    assert moved == 8
    assert len(parts) == 2  # ranges apart: each task's bytes whole
    write_plan_fragments(parts, tmp_path)
    expected = [("a", 0), ("a", 1), ("bé", 0), ("bé", 1), ("bé", 2), ("c", 0), ("d", 0), ("d", 1)]
    assert plan_order(tmp_path / "plan.json") == expected
    assert plan_order(tmp_path / "rollback.json") == expected
    kafka = json.loads((tmp_path / "reassignment.json").read_text(encoding="utf-8"))["partitions"]
    assert [(p["topic"], p["partition"], p["replicas"]) for p in kafka][:2] == [("a", 0, [2, 3]), ("a", 1, [2, 3])]


def test_interleaved_tasks_are_cut_topic_by_topic(tmp_path):
    # a shuffled input: each task holds topics from all over the name range
    tasks = [file_parts([moves("a", 1), moves("c", 2)]), file_parts([moves("b", 2), moves("d", 1)]), file_parts([])]
    moved, parts = plan_file_parts(tasks)
    assert moved == 6
    assert len(parts) == 4
    write_plan_fragments(parts, tmp_path)
    assert plan_order(tmp_path / "plan.json") == [("a", 0), ("b", 0), ("b", 1), ("c", 0), ("c", 1), ("d", 0)]
    assert json.loads((tmp_path / "rollback-kafka.json").read_text(encoding="utf-8"))["partitions"][0]["replicas"] == [1, 2]


def test_no_moves_give_empty_files(tmp_path):
    assert plan_file_parts([]) == (0, [])
    write_plan_fragments([], tmp_path, partition_counts=plan_partition_counts([]))
    assert json.loads((tmp_path / "plan.json").read_text(encoding="utf-8")) == {
        "version": 1, "moves": [], "partition_counts": {}}


def test_the_partition_counts_of_the_moved_topics_go_into_plan_and_rollback(tmp_path):
    # each task knows the partition count of the topics it moves (every row of the topic)
    tasks = [file_parts([moves("c", 1), moves("d", 2)], [6, 2]), file_parts([moves("a", 2)], [12])]
    moved, parts = plan_file_parts(tasks)
    counts = plan_partition_counts(tasks)
    assert counts == {"a": 12, "c": 6, "d": 2} and list(counts) == ["a", "c", "d"]
    write_plan_fragments(parts, tmp_path, partition_counts=counts)
    for name in ("plan.json", "rollback.json"):
        plan = ReassignmentPlan.model_validate_json((tmp_path / name).read_bytes())
        assert plan.partition_counts == {"a": 12, "c": 6, "d": 2}
        assert (tmp_path / name).read_text(encoding="utf-8") == plan.model_dump_json()  # pydantic's own bytes
    assert "partition_counts" not in (tmp_path / "reassignment.json").read_text(encoding="utf-8")  # Kafka's format


def test_the_topic_ids_of_the_moved_topics_go_into_plan_and_rollback(tmp_path):
    # as partition_counts: the ids (KIP-516) of the topics with moves, from topics.parquet, sorted by topic
    tasks = [file_parts([moves("c", 1), moves("d", 2)], [6, 2]), file_parts([moves("a", 2)], [12])]
    topics = [TopicState(name=n, topic_id=i, partition_count=12, replication_factor=2)
              for n, i in (("d", "ZGRkZGRkZGRkZGRkZGRkZA"), ("a", "YWFhYWFhYWFhYWFhYWFhYQ"),
                           ("b", "YmJiYmJiYmJiYmJiYmJiYg"), ("c", "Y2NjY2NjY2NjY2NjY2NjYw"))]
    ids = plan_topic_ids(tasks, topics)
    assert ids == {"a": "YWFhYWFhYWFhYWFhYWFhYQ", "c": "Y2NjY2NjY2NjY2NjY2NjYw", "d": "ZGRkZGRkZGRkZGRkZGRkZA"}
    assert list(ids) == ["a", "c", "d"]  # b has no move
    write_plan_fragments(plan_file_parts(tasks)[1], tmp_path, partition_counts=plan_partition_counts(tasks),
                         topic_ids=ids)
    for name in ("plan.json", "rollback.json"):
        plan = ReassignmentPlan.model_validate_json((tmp_path / name).read_bytes())
        assert plan.topic_ids == ids and plan.partition_counts == {"a": 12, "c": 6, "d": 2}
        assert (tmp_path / name).read_text(encoding="utf-8") == plan.model_dump_json()  # pydantic's own bytes
    assert "topic_ids" not in (tmp_path / "reassignment.json").read_text(encoding="utf-8")  # Kafka's format


def test_a_snapshot_without_topic_ids_gives_a_plan_without_them(tmp_path):
    tasks = [file_parts([moves("a", 1)], [3])]
    assert plan_topic_ids(tasks, [TopicState(name="a", partition_count=3, replication_factor=2)]) is None
    write_plan_fragments(plan_file_parts(tasks)[1], tmp_path, partition_counts={"a": 3}, topic_ids=None)
    text = (tmp_path / "plan.json").read_text(encoding="utf-8")
    assert "topic_ids" not in text and text == ReassignmentPlan.model_validate_json(text).model_dump_json()


def test_a_task_without_counts_gives_a_plan_without_counts(tmp_path):
    tasks = [file_parts([moves("a", 1)])]
    assert plan_partition_counts(tasks) is None
    write_plan_fragments(plan_file_parts(tasks)[1], tmp_path, partition_counts=None)
    assert ReassignmentPlan.model_validate_json((tmp_path / "plan.json").read_bytes()).partition_counts is None
