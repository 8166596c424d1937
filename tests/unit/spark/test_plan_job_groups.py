"""The place stage settling the quota groups itself, without Spark: group-aligned tasks over
the row groups, each solving its groups before placing its topics, give what the driver-side
quota step gives; a group that misses its share sends the job back to quotas over all topics."""

from __future__ import annotations

import pickle
from dataclasses import replace

from airflow_kafka_reassign.core.planner import PlanRequest
from airflow_kafka_reassign.core.planner.goals import plan_context
from airflow_kafka_reassign.core.planner.staged import driver_quotas, quotas_at_once, stage_place, stage_prepare
from airflow_kafka_reassign.core.planner.synthetic import synthetic_cluster, to_snapshot
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot
from airflow_kafka_reassign.spark.plan_job import _prepared, place_grouped_topics, prepare_topics
from airflow_kafka_reassign.spark.snapshot_reader import (
    group_splits,
    read_row_groups,
    row_group_index,
    row_group_splits,
    topic_groups,
    topics_between,
)

REQUEST = PlanRequest(goal="add-brokers", quota_group_replicas=2_000)


def _setup(tmp_path):
    snap = to_snapshot(synthetic_cluster(brokers=10, racks=3, new_brokers=2, replicas=12_000, seed=11))
    write_snapshot(snap, tmp_path)
    index = row_group_index(str(tmp_path))
    assert index is not None
    rows = dict(topic_groups(read_row_groups(index.path, list(range(len(index.rows))))))
    ctx = plan_context(snap.brokers, snap.topics, None, REQUEST, any_sizes=False)
    prepared = [stage_prepare(ctx, t, r) for t, r in rows.items()]
    return ctx, prepared, index, rows


def _run_tasks(ctx, step, index, n_parts):
    out = []
    for path, row_groups, lo, hi, groups in group_splits(index, step.pending, n_parts):
        batches = topics_between(read_row_groups(path, row_groups), lo, hi)
        out.append(list(place_grouped_topics(ctx, step.params, groups, topic_groups(batches))))
    return out


def test_group_tasks_place_every_topic_once_with_the_driver_side_quotas(tmp_path):
    ctx, prepared, index, rows = _setup(tmp_path)
    step = driver_quotas(ctx, prepared, defer_groups=True)
    assert len(step.pending) >= 5 and step.quotas == {}
    reference = driver_quotas(ctx, prepared)  # the groups solved on the driver's side
    assert reference.quota_groups == len(step.pending)
    for n_parts in (1, 3, 4, 100):
        tasks = _run_tasks(ctx, step, index, n_parts)
        placed = [pickle.loads(p) for task in tasks for kind, _, p in task if kind == "placed"]
        assert [x.topic for x in placed] == sorted(rows)  # each topic once, in name order
        expected = {t: stage_place(ctx, reference, t, r) for t, r in rows.items()}
        for x in placed:
            want = expected[x.topic]
            want.bound = None
            assert x == want
        assert all(task[-2][0] == "leaders" and task[-1][0] == "bound" for task in tasks)


def test_a_group_that_misses_its_share_sends_back_to_quotas_over_all_topics(tmp_path):
    ctx, prepared, index, _ = _setup(tmp_path)
    step = driver_quotas(ctx, prepared, defer_groups=True)
    first = step.pending[0]
    broken = replace(first, capacity=tuple(c + 1 for c in first.capacity))  # more room than its extras fill
    tasks = _run_tasks(ctx, replace(step, pending=(broken, *step.pending[1:])), index, 4)
    assert tasks[0] == [("miss", "", b"")]
    assert all(kind != "miss" for task in tasks[1:] for kind, _, _ in task)
    at_once = quotas_at_once(ctx, step)
    no_groups = driver_quotas(replace(ctx, request=REQUEST.model_copy(update={"quota_group_replicas": 0})), prepared)
    assert at_once.quotas == no_groups.quotas and at_once.quota_groups == 0 and not at_once.pending


def test_a_prepare_task_sends_its_topics_in_one_record_and_the_driver_gets_the_same_quotas(tmp_path):
    ctx, prepared, index, rows = _setup(tmp_path)
    records = []
    splits = row_group_splits(index, 3)
    for path, row_groups in splits:
        records += list(prepare_topics(ctx, topic_groups(read_row_groups(path, row_groups))))
    assert [kind for kind, _, _ in records] == ["prepared"] * len(splits)
    received = _prepared(records)
    assert [x.topic for x in received] == sorted(rows)
    assert any(x.prep is None for x in received)  # topics with nothing to merge send no TopicPrep
    assert driver_quotas(ctx, received) == driver_quotas(ctx, prepared)
