"""Self-healing on the real sandbox: a stopped broker's incident runs the healing DAG, which drains it.

Broker 5 is stopped while acks=all traffic runs into a topic with replicas on it; once the controller lists it fenced,
a hand-made ``broker_down`` incident (the payload the watch would fire; no triggerer here) is given to the example
DAG ``kafka_heal_broker_down`` in a real DAG run (``conf["incidents"]``). Then, read by a second observer (its own
confluent-kafka client's metadata, and the ledger's files on disk): no partition has a replica on broker 5, every
partition of the topic has its replication factor again, every acknowledged record is read back, the ledger holds
``act`` then ``done`` for the incident; a second run with the same incident does nothing (``handled``). Broker 5 is
started again at the end (it is not unregistered: healing never does).
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka.admin import AdminClient
from dagrun import run_dag_file
from kafka_helpers import Traffic, make_topic

from airflow_kafka_reassign.core.healing.incident import Incident
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.sandbox import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
DOWN = 5


def test_a_stopped_broker_is_drained_by_the_healing_dag_and_nothing_acknowledged_is_lost(sandbox, idle_admin,
                                                                                      airflow_home, unique_topic):
    config = sandbox.client_config()
    assignment = [[5, 1, 2], [1, 5, 3], [2, 3, 5], [3, 4, 1], [4, 5, 2], [5, 3, 4]]
    make_topic(config, unique_topic, assignment, megabytes=0.2, configs={"min.insync.replicas": "2"})
    dag_file = Path(airflow_home["AIRFLOW__CORE__DAGS_FOLDER"]) / "kafka_heal_broker_down.py"
    shutil.copyfile(EXAMPLES / dag_file.name, dag_file)
    ledger_dir = Path(airflow_home["AKR_OUTPUT_DIR"]) / "healing" / "kafka_default"
    try:
        with Traffic(config, unique_topic, partitions=len(assignment)) as traffic:
            first_seen = datetime.now(timezone.utc)
            sandbox.stop_broker(DOWN)
            with KafkaClusterAdmin(config) as admin:
                wait_until(lambda: any(b.id == DOWN and b.fenced for b in admin.describe_cluster().brokers),
                           what=f"broker {DOWN} fenced", timeout=120)
            incident = Incident.of("broker_down", cluster="kafka_default", brokers=[DOWN], first_seen=first_seen,
                                   last_seen=datetime.now(timezone.utc))
            result = run_dag_file(airflow_home, dag_file, {"incidents": [incident.to_payload()]}, plan_in_process=True,
                                  unpatched=True)
            assert result["state"] == "success", result["log"][-6000:]
            for task_id in ("decide", "plan", "budget", "execute", "wait", "verify_drained", "record"):
                assert result["tis"][task_id] == "success", (task_id, result["tis"], result["log"][-6000:])
            decision = result["xcom"]["decide.return_value"]
            assert decision["action"] == "drain" and decision["brokers"] == [DOWN] and decision["cordon"] is False
        traffic.check()  # every acknowledged record read back

        # the second observer: its own client's metadata
        topics = AdminClient(dict(config)).list_topics(unique_topic, timeout=30).topics
        partitions = topics[unique_topic].partitions
        assert len(partitions) == len(assignment)
        for p in partitions.values():
            assert DOWN not in p.replicas and len(p.replicas) == 3, (p.id, p.replicas)
        outcomes = [json.loads(f.read_text()) for f in sorted((ledger_dir / "outcomes").rglob("*.json"))]
        mine = [o["decision"] for o in outcomes if o["incident_id"] == incident.id]
        assert mine == ["act", "done"], outcomes

        again = run_dag_file(airflow_home, dag_file, {"incidents": [incident.to_payload()]}, plan_in_process=True)
        assert again["tis"]["decide"] == "skipped" and again["tis"]["plan"] == "skipped", again["tis"]
        outcomes = [json.loads(f.read_text()) for f in sorted((ledger_dir / "outcomes").rglob("*.json"))]
        assert [o["decision"] for o in outcomes if o["incident_id"] == incident.id][-1] == "handled"
    finally:
        sandbox.start_broker(DOWN)
