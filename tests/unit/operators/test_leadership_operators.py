"""EvacuateLeadershipOperator and RestoreLeadershipOperator with the fake cluster behind the hook
(the real cluster, traffic and a DAG run: tests/integration/test_leadership_rack.py)."""

from __future__ import annotations

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators.leadership import EvacuateLeadershipOperator, RestoreLeadershipOperator
from airflow_kafka_reassign.testing import FakeClusterAdmin

RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r1"}


class TI:
    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value


@pytest.fixture
def cluster(monkeypatch) -> FakeClusterAdmin:
    admin = FakeClusterAdmin.build(RACKS, {"t": [[1, 2, 3], [2, 1, 3], [4, 3]], "solo": [[1]]}, auto_complete=True)
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    return admin


def test_evacuate_then_restore_through_the_operators(cluster, tmp_path):
    before = dict(cluster.replicas)
    record = tmp_path / "record"
    out = EvacuateLeadershipOperator(task_id="evacuate", racks=["r1"], topics=["t"], record_uri=str(record)
                                     ).execute({"ti": TI()})
    assert out["reordered"] == 2 and out["refused"] == 0 and (record / "leadership.json").exists()
    assert cluster.replicas[TopicPartition("t", 0)][0] not in (1, 4)
    out = RestoreLeadershipOperator(task_id="restore", record_uri=str(record)).execute({"ti": TI()})
    assert out["reordered"] == 2 and cluster.replicas == before
    assert (record / "leadership.json.restored").exists() and not (record / "leadership.json").exists()


def test_a_partition_that_cannot_move_fails_the_task_naming_it_unless_partial_is_allowed(cluster, tmp_path):
    ti = TI()
    with pytest.raises(AirflowFailException, match="1 refused: solo-0 \\(no in-sync replica outside brokers"):
        EvacuateLeadershipOperator(task_id="evacuate", brokers=[1], record_uri=str(tmp_path / "r")).execute({"ti": ti})
    assert ti.pushed["summary"]["refused"] == 1
    out = EvacuateLeadershipOperator(task_id="evacuate", brokers=[1], record_uri=str(tmp_path / "r"),
                                     allow_partial=True).execute({"ti": TI()})
    assert out["refused"] == 1


def test_restore_without_a_record_is_refused_with_the_fix(cluster, tmp_path):
    with pytest.raises(AirflowFailException, match="no leadership record at .*: give the record_uri"):
        RestoreLeadershipOperator(task_id="restore", record_uri=str(tmp_path / "none")).execute({"ti": TI()})
