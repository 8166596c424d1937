"""GuardedCreatePartitionsOperator and PlanHealOperator, with the in-memory fake behind the hook."""

from __future__ import annotations

import json

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

from airflow_kafka_reassign.core.maintenance.growth import read_heal_targets, update_heal_targets
from airflow_kafka_reassign.core.records.plan_io import read_plan
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators.partitions import (
    GuardedCreatePartitionsOperator,
    PartitionGrowthFailedError,
    PlanHealOperator,
    parse_targets,
)
from airflow_kafka_reassign.testing import FakeClusterAdmin


class TI:
    def __init__(self):
        self.pushed = {}

    def xcom_push(self, key, value):
        json.dumps(value)  # XCom takes JSON only
        self.pushed[key] = value


@pytest.fixture
def fake(monkeypatch):
    admin = FakeClusterAdmin.build(
        {1: "r1", 2: "r2", 3: "r3"},
        {"orders": [[1, 2], [2, 3]], "__consumer_offsets": [[1, 2, 3]] * 3, "users": [[1, 2]]},
    )
    admin.topic_configs["users"] = {"cleanup.policy": "compact"}
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    return admin


def grow(**kwargs):
    return GuardedCreatePartitionsOperator(task_id="grow", **kwargs)


def test_template_fields_cover_the_mapping_the_connection_and_the_file():
    assert {"new_total_partitions", "kafka_config_id", "heal_targets_path"} <= set(
        GuardedCreatePartitionsOperator.template_fields)
    assert {"heal_targets_path", "plan_dir", "kafka_config_id"} <= set(PlanHealOperator.template_fields)


def test_init_only_stores_arguments():
    op = grow(new_total_partitions="{{ params.x }}", kafka_config_id="nowhere")
    assert op.new_total_partitions == "{{ params.x }}" and op.kafka_config_id == "nowhere"


def test_batch_grows_the_valid_topic_then_fails_reporting_every_topic(fake):
    ti = TI()
    op = grow(new_total_partitions={"orders": 4, "__consumer_offsets": 6, "users": 2})
    with pytest.raises(AirflowFailException) as e:
        op.execute({"ti": ti})
    assert "__consumer_offsets: refused" in str(e.value) and "users: refused" in str(e.value)
    assert sum(1 for tp in fake.replicas if tp.topic == "orders") == 4
    result = ti.pushed["return_value"]
    assert result["counts"] == {"created": 1, "validated": 0, "no-op": 0, "refused": 2, "failed": 0}
    assert result["topics"]["orders"]["status"] == "created"
    assert result["topics"]["__consumer_offsets"]["refusal"] == "internal-topic"
    assert result["topics"]["users"]["refusal"] == "compacted-topic"


def test_fail_on_refused_false_succeeds_and_returns_the_summary(fake):
    ti = TI()
    result = grow(new_total_partitions={"orders": 3, "__consumer_offsets": 6}, fail_on_refused=False).execute({"ti": ti})
    assert result["counts"]["created"] == 1 and result["counts"]["refused"] == 1
    assert ti.pushed == {}  # returned, so Airflow pushes it as return_value


def test_the_override_logs_the_warning(fake, capsys):
    op = grow(new_total_partitions={"__consumer_offsets": 4}, allow_internal_topic_partition_increase=True)
    result = op.execute({"ti": TI()})
    assert result["topics"]["__consumer_offsets"]["status"] == "created"
    warned = [line for line in capsys.readouterr().out.splitlines() if "GROWING INTERNAL TOPIC" in line]
    assert len(warned) == 1 and "warning" in warned[0].lower() and "from 3 to 4" in warned[0]


def test_a_kafka_error_fails_the_task_retryably(fake, monkeypatch):
    from airflow_kafka_reassign.core.vocabulary.ports import TopicResult

    monkeypatch.setattr(fake, "create_partitions", lambda requests, validate_only=False: {
        r.topic: TopicResult(topic=r.topic, error="boom", error_code="POLICY_VIOLATION") for r in requests})
    ti = TI()
    with pytest.raises(PartitionGrowthFailedError, match="POLICY_VIOLATION"):
        grow(new_total_partitions={"orders": 3}, fail_on_refused=False).execute({"ti": ti})
    assert ti.pushed["return_value"]["topics"]["orders"]["status"] == "failed"


def test_validate_only_creates_nothing(fake):
    result = grow(new_total_partitions={"orders": 5}, validate_only=True).execute({"ti": TI()})
    assert result["topics"]["orders"]["status"] == "validated"
    assert sum(1 for tp in fake.replicas if tp.topic == "orders") == 2


@pytest.mark.parametrize(
    ("value", "expected"),
    [('{"orders": 4}', {"orders": 4}), ({"orders": "4"}, {"orders": 4}), ({"orders": 4}, {"orders": 4})],
)
def test_the_mapping_may_be_rendered_json_or_digit_strings(value, expected):
    assert parse_targets(value) == expected


@pytest.mark.parametrize("value", ["not json", "[1]", {"orders": "four"}, {"orders": 0}])
def test_invalid_mappings_fail_without_retry(fake, value):
    with pytest.raises(AirflowFailException, match="new_total_partitions|targets"):
        grow(new_total_partitions=value).execute({"ti": TI()})


def test_under_replicated_growth_records_the_file_and_needs_its_path(fake, tmp_path):
    fake.down = {3}
    with pytest.raises(AirflowFailException, match="heal_targets_path"):
        grow(new_total_partitions={"__consumer_offsets": 4}, allow_internal_topic_partition_increase=True,
             allow_under_replicated=True).execute({"ti": TI()})
    path = tmp_path / "heal.json"
    result = grow(new_total_partitions={"__consumer_offsets": 4}, allow_internal_topic_partition_increase=True,
                  allow_under_replicated=True, heal_targets_path=str(path)).execute({"ti": TI()})
    assert result["heal_targets"] == {"__consumer_offsets-3": 3} == read_heal_targets(path)
    assert result["heal_targets_path"] == str(path)


# -- PlanHealOperator ----------------------------------------------------------------------------


def test_heal_writes_a_plan_dir_for_the_short_partitions_and_prunes_healed_ones(fake, tmp_path):
    from airflow_kafka_reassign.core.vocabulary.models import TopicPartition

    fake.replicas[TopicPartition("orders", 1)] = (2,)  # short of its intended RF 2
    path = tmp_path / "heal.json"
    update_heal_targets(path, add={"orders-0": 2, "orders-1": 2, "deleted-0": 3})
    result = PlanHealOperator(task_id="heal", heal_targets_path=str(path), plan_dir=str(tmp_path / "plan")).execute(
        {"ti": TI()})
    assert result["moves"] == 1 and result["states"]["short"] == 1 and result["pruned"] == 2
    plan = read_plan(tmp_path / "plan")
    (move,) = plan.moves
    assert move.tp == TopicPartition("orders", 1) and move.allow_rf_change and len(move.target_replicas) == 2
    assert read_heal_targets(path) == {"orders-1": 2}


def test_heal_places_nothing_on_a_cordoned_broker(fake, tmp_path):
    from airflow_kafka_reassign.core.maintenance.cordon import CORDONED_LOG_DIRS
    from airflow_kafka_reassign.core.vocabulary.models import TopicPartition

    fake.replicas[TopicPartition("orders", 1)] = (2,)  # short: without the cordon, the heal adds broker 1
    fake.broker_configs[1][CORDONED_LOG_DIRS] = "*"
    path = tmp_path / "heal.json"
    update_heal_targets(path, add={"orders-1": 2})
    PlanHealOperator(task_id="heal", heal_targets_path=str(path), plan_dir=str(tmp_path / "plan")).execute({"ti": TI()})
    (move,) = read_plan(tmp_path / "plan").moves
    assert move.target_replicas in ((2, 3), (3, 2))


def test_heal_with_nothing_to_move_is_skipped(fake, tmp_path):
    path = tmp_path / "heal.json"
    ti = TI()
    with pytest.raises(AirflowSkipException, match="no partition"):
        PlanHealOperator(task_id="heal", heal_targets_path=str(path), plan_dir=str(tmp_path / "p")).execute({"ti": ti})
    update_heal_targets(path, add={"orders-0": 2})
    with pytest.raises(AirflowSkipException, match="nothing to move"):
        PlanHealOperator(task_id="heal", heal_targets_path=str(path), plan_dir=str(tmp_path / "p")).execute({"ti": ti})
    assert ti.pushed["return_value"]["states"]["healed"] == 1 and not (tmp_path / "p").exists()
    assert read_heal_targets(path) == {}


def test_heal_while_a_broker_is_still_down_fails_naming_it(fake, tmp_path):
    from airflow_kafka_reassign.exceptions import ConfigurationError

    fake.down = {3}
    path = tmp_path / "heal.json"
    update_heal_targets(path, add={"orders-1": 2})
    with pytest.raises(ConfigurationError, match=r"broker\(s\) \[3\]"):
        PlanHealOperator(task_id="heal", heal_targets_path=str(path), plan_dir=str(tmp_path / "p")).execute(
            {"ti": TI()})


# -- the docs' examples run ----------------------------------------------------------------------


def doc_blocks():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "partitions.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("block", doc_blocks(), ids=lambda b: b.splitlines()[-1].strip()[:40])
def test_docs_python_examples_run(block, tmp_path, fake):
    namespace: dict = {}
    exec(compile(block, "docs/partitions.md", "exec"), namespace)
    if "dag" in namespace:
        assert namespace["dag"].task_ids
    if "heal_plan" in namespace:
        from airflow_kafka_reassign.core.vocabulary.models import TopicPartition

        fake.replicas[TopicPartition("orders", 1)] = (2,)
        path = tmp_path / "heal.json"
        update_heal_targets(path, add={"orders-1": 2})
        result = namespace["heal_plan"](fake.snapshot(), str(path))
        assert [str(m.tp) for m in result.plan.moves] == ["orders-1"]
    if "execute_heal_plan" in namespace:
        assert callable(namespace["execute_heal_plan"])
