"""The healing tasks with the fake cluster behind the hook: the decision's cordons reach the claim that the record
task writes, and a later decision reads them back (the real cluster and a DAG run: tests/integration/
test_self_healing.py)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from airflow_kafka_reassign.core.healing.incident import Incident, LogDirRef
from airflow_kafka_reassign.core.healing.policy import HealingPolicy, KindPolicy
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators.healing import HealingDecisionOperator, HealingOutcomeOperator
from airflow_kafka_reassign.testing import FakeClusterAdmin

DATA1, DATA2 = "/kafka/2/data-1", "/kafka/2/data-2"
POLICY = HealingPolicy(kinds={"log_dir_full": KindPolicy(mode="act")})


class TI:
    def __init__(self, pulled: object = None) -> None:
        self.pushed: dict[str, object] = {}
        self.pulled = pulled

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value

    def xcom_pull(self, task_ids: str) -> object:
        return self.pulled


@pytest.fixture
def cluster(monkeypatch) -> FakeClusterAdmin:
    admin = FakeClusterAdmin.build({1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"},
                                   {"t": [[1, 2, 3], [2, 3, 4], [3, 5, 1], [4, 5, 2]]})
    admin.broker_dirs[2].append(DATA2)
    admin.dir_total[DATA1] = 1000
    admin.sizes = {TopicPartition("t", 0): {2: 900}}
    admin.close = lambda: None  # one fake for every task
    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: admin)
    return admin


def context(run_id: str, incidents: list[Incident], ti: TI) -> dict:
    return {"run_id": run_id, "ti": ti, "dag_run": SimpleNamespace(conf={"incidents": [i.to_payload() for i in incidents]})}


def test_the_record_task_keeps_the_cordon_the_run_leaves_and_the_next_decision_reads_it(cluster, tmp_path):
    seen = datetime.now(timezone.utc) - timedelta(minutes=20)
    full = Incident.of("log_dir_full", cluster="kafka_default", dirs=[LogDirRef(broker=2, path=DATA1)],
                       first_seen=seen, last_seen=seen, detail={"threshold": 0.85})
    decide = HealingDecisionOperator(task_id="decide", kinds=["log_dir_full"], policy=POLICY, state_uri=str(tmp_path))
    decision = decide.poke(context("r1", [full], TI())).xcom_value
    assert decision["action"] == "remove_disks" and decision["cordons"] == {"2": DATA1}
    cluster.set_cordons({2: DATA1})  # the plan cordons the dir, the moves empty it
    on_2 = [TopicPartitionReplica(tp.topic, tp.partition, 2) for tp, r in cluster.replicas.items() if 2 in r]
    cluster.replica_dirs.update(dict.fromkeys(on_2, DATA2))
    record = HealingOutcomeOperator(task_id="record", decision=decision, done_task_id="execute",
                                    state_uri=str(tmp_path))
    assert record.execute(context("r1", [full], TI(pulled={"done": True})))["status"] == "done"
    # the second observer: the claim's file on the ledger's folder
    [claim_file] = (tmp_path / "healing" / "kafka_default" / "claims").rglob("*.json")
    assert json.loads(claim_file.read_text())["runs"][-1]["cordons"] == {"2": DATA1}

    # healing's own cordon is no writer; the same cordon set again over a dir that holds replicas again is
    cluster.down.add(3)
    down = Incident.of("broker_down", cluster="kafka_default", brokers=[3], first_seen=seen, last_seen=seen)
    drain = HealingDecisionOperator(task_id="decide", kinds=["broker_down"], state_uri=str(tmp_path))
    cluster.replica_dirs.update(dict.fromkeys(on_2, DATA1))
    assert drain.poke(context("r2", [down], TI())) is False  # waits
    cluster.replica_dirs.update(dict.fromkeys(on_2, DATA2))
    assert drain.poke(context("r2", [down], TI())).xcom_value["action"] == "drain"
