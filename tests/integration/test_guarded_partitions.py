"""GuardedCreatePartitionsOperator against the session sandbox (5 brokers, racks r1 r2 r3 r1 r2, SASL).

The batch case runs as a real Airflow task run (``dag.test()`` in a subprocess, with the
session's migrated metadata database: the ``airflow_home`` fixture); the others call the
operator in-process through the real hook. Nothing here grows an internal topic of the shared
cluster: the override is exercised with ``validate_only=True`` (a real growth of
``__consumer_offsets`` runs on the separate small sandbox of
test_guarded_partitions_under_replicated.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagrun import run_dag_file
from kafka_helpers import TI, delete_topics, make_coordinator_topics_exist, replicas_of, wait_until

from airflow_kafka_reassign.core.vocabulary.loads import broker_loads
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import create_topic
from airflow_kafka_reassign.operators.partitions import GuardedCreatePartitionsOperator

CONN_ID = "kafka_sandbox"
RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"}


@pytest.fixture(scope="module")
def config(sandbox) -> dict[str, str]:
    return sandbox.client_config()


@pytest.fixture
def connection(sandbox, monkeypatch) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}",
                       json.dumps({"conn_type": "kafka", "extra": sandbox.client_config(sasl=True)}))


@pytest.fixture
def topics(config) -> Iterator[list[str]]:
    """Topics the test creates; deleted at the end so the shared cluster's balance stays as it was."""
    created: list[str] = []
    yield created
    delete_topics(config, created)



def new_topic(config, topics: list[str], name: str, assignment, configs=None) -> str:
    create_topic(config, name, assignment, configs=configs)
    topics.append(name)
    wait_until(lambda: len(replicas_of(config, name)) == len(assignment), what=f"topic {name}")
    return name


def grow(**kwargs):
    return GuardedCreatePartitionsOperator(task_id="grow", kafka_config_id=CONN_ID, **kwargs)


# -- a real Airflow task run -----------------------------------------------------------------------

DAG_FILE = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_kafka_reassign.operators.partitions import GuardedCreatePartitionsOperator

with DAG("guarded_growth_batch", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    GuardedCreatePartitionsOperator(
        task_id="grow",
        kafka_config_id="kafka_default",
        new_total_partitions="{{ dag_run.conf['targets'] | tojson }}",
    )
"""


def test_batch_with_internal_topics_in_a_real_task_run(config, topics, airflow_home):
    make_coordinator_topics_exist(config)
    offsets_before = replicas_of(config, "__consumer_offsets")
    txn_before = replicas_of(config, "__transaction_state")
    normal = new_topic(config, topics, f"t-batch-{uuid.uuid4().hex[:8]}", [[1, 2], [3, 4]])
    targets = {normal: 4, "__consumer_offsets": len(offsets_before) + 2, "__transaction_state": len(txn_before) + 1}

    dag_file = Path(airflow_home["AIRFLOW__CORE__DAGS_FOLDER"]) / "guarded_growth_batch.py"
    dag_file.write_text(DAG_FILE)
    result = run_dag_file(airflow_home, dag_file, {"targets": targets})

    assert result["state"] == "failed" and result["tis"] == {"grow": "failed"}, result["log"][-3000:]
    out = result["xcom"]["grow.return_value"]
    assert out["topics"][normal]["status"] == "created" and out["topics"][normal]["partitions_after"] == 4
    for name in ("__consumer_offsets", "__transaction_state"):
        assert out["topics"][name]["status"] == "refused" and out["topics"][name]["refusal"] == "internal-topic"
        assert "KAFKA-20029" in out["topics"][name]["reason"]
    assert out["counts"] == {"created": 1, "validated": 0, "no-op": 0, "refused": 2, "failed": 0}
    assert "2 topic(s) refused, 0 failed" in result["log"]
    assert len(replicas_of(config, normal)) == 4
    assert replicas_of(config, "__consumer_offsets") == offsets_before
    assert replicas_of(config, "__transaction_state") == txn_before


# -- in-process operator, real hook and cluster ------------------------------------------------------


def test_override_on_validate_only_logs_the_warning_and_changes_nothing(config, connection, capsys):
    make_coordinator_topics_exist(config)
    before = replicas_of(config, "__consumer_offsets")
    result = grow(new_total_partitions={"__consumer_offsets": len(before) + 1},
                  allow_internal_topic_partition_increase=True, validate_only=True).execute({"ti": TI()})
    t = result["topics"]["__consumer_offsets"]
    assert t["status"] == "validated" and len(t["new_partitions"]) == 1
    out = capsys.readouterr().out
    assert f"GROWING INTERNAL TOPIC __consumer_offsets from {len(before)} to {len(before) + 1}" in out
    assert replicas_of(config, "__consumer_offsets") == before


def test_compacted_refused_shrink_refused_and_a_repeat_is_a_no_op(config, connection, topics):
    from airflow.providers.common.compat.sdk import AirflowFailException

    compacted = new_topic(config, topics, f"t-compact-{uuid.uuid4().hex[:8]}", [[1, 2]],
                          configs={"cleanup.policy": "compact"})
    plain = new_topic(config, topics, f"t-plain-{uuid.uuid4().hex[:8]}", [[1, 2], [2, 3], [3, 4]])
    ti = TI()
    with pytest.raises(AirflowFailException, match="refused"):
        grow(new_total_partitions={compacted: 3, plain: 2}).execute({"ti": ti})
    out = ti.pushed["return_value"]["topics"]
    assert out[compacted]["refusal"] == "compacted-topic" and "allow_compacted=True" in out[compacted]["reason"]
    assert out[plain]["refusal"] == "shrink"
    assert len(replicas_of(config, compacted)) == 1 and len(replicas_of(config, plain)) == 3

    first = grow(new_total_partitions={plain: 5}).execute({"ti": TI()})
    after = wait_until(lambda: (r := replicas_of(config, plain)) and len(r) == 5 and r, what="growth")
    again = grow(new_total_partitions={plain: 5}).execute({"ti": TI()})
    assert first["topics"][plain]["status"] == "created" and again["topics"][plain]["status"] == "no-op"
    assert replicas_of(config, plain) == after


def test_new_partitions_go_to_the_least_loaded_brokers_rack_aware_with_the_topics_rf(config, connection, topics):
    # ballast makes brokers 1 and 2 the most loaded by far; the topic itself is even over all 5.
    # The cluster is shared with other tests, so the ballast is sized from the loads as they are now.
    with KafkaClusterAdmin(config) as admin:
        before = broker_loads(admin.snapshot())
    gap = max(before[b]["replicas"] for b in (3, 4, 5)) - min(before[b]["replicas"] for b in (1, 2))
    ballast = max(0, gap) + 40  # each [1, 2] partition adds one replica to broker 1 and one to broker 2
    new_topic(config, topics, f"t-ballast-{uuid.uuid4().hex[:8]}", [[1, 2], [2, 1]] * (ballast // 2))
    topic = new_topic(config, topics, f"t-place-{uuid.uuid4().hex[:8]}", [[1, 2], [2, 3], [3, 4], [4, 5], [5, 1]])
    with KafkaClusterAdmin(config) as admin:
        loads = broker_loads(admin.snapshot())
    assert min(loads[b]["replicas"] for b in (1, 2)) >= max(loads[b]["replicas"] for b in (3, 4, 5)) + 20, loads

    result = grow(new_total_partitions={topic: 7}).execute({"ti": TI()})

    live = wait_until(lambda: (r := replicas_of(config, topic)) and len(r) == 7 and r, what="growth")
    new = [live[5], live[6]]
    assert result["topics"][topic]["new_partitions"] == {"5": list(new[0]), "6": list(new[1])}
    assert all(len(r) == 2 for r in new)  # the topic's RF
    assert not {b for r in new for b in r} & {1, 2}  # not on the loaded brokers
    assert all(len({RACKS[b] for b in r}) == 2 for r in new)  # over two racks each
    assert new[0][0] != new[1][0]  # preferred leaders spread
