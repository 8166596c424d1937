"""Leadership evacuation of a rack and its restore, in a real DAG run with traffic on (issue 15).

The session sandbox's rack r1 is brokers 1 and 4. Two topics of RF 3, one replica per rack: one with an
acks=all producer writing through the whole run (every acknowledged record must be read back), one idle with
2 MB per partition (its bytes on every broker must not change: an evacuation copies nothing). The DAG
evacuates r1, reads the leaders from a task in between (what a maintenance task would see), then restores.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from dagrun import run_dag_file
from kafka_helpers import Traffic, delete_topics, make_topic

from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

RACK_R1 = {1, 4}
# one replica per rack (r1: 1, 4; r2: 2, 5; r3: 3); partitions 0, 1, 4 and 5 have their preferred leader on r1
ASSIGNMENT = [[1, 2, 3], [4, 5, 3], [2, 4, 3], [3, 1, 5], [4, 3, 2], [1, 3, 5]]

DAG_TEXT = '''
from datetime import datetime
from airflow.sdk import DAG, task
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators.leadership import EvacuateLeadershipOperator, RestoreLeadershipOperator

with DAG("leadership_rack", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    evacuate = EvacuateLeadershipOperator(task_id="evacuate", racks=["r1"], record_uri={record!r}, batch_size=3,
                                          topics=[{prefix!r}])

    @task
    def observe():
        admin = KafkaReassignHook(kafka_config_id="kafka_default").get_admin()
        try:
            parts = admin.snapshot(topics={topics!r}).partitions
        finally:
            admin.close()
        return {{p.topic + "/" + str(p.partition): [list(p.replicas), p.leader] for p in parts}}

    restore = RestoreLeadershipOperator(task_id="restore", record_uri={record!r})
    evacuate >> observe() >> restore
'''


def test_a_rack_loses_every_leader_with_no_data_copied_and_gets_them_back(sandbox, airflow_home, unique_topic,
                                                                          tmp_path):
    config = sandbox.client_config()
    busy, idle = f"{unique_topic}-busy", f"{unique_topic}-idle"
    make_topic(config, busy, ASSIGNMENT)
    make_topic(config, idle, ASSIGNMENT, megabytes=2)
    record = tmp_path / "record"
    dag_file = Path(airflow_home["AIRFLOW__CORE__DAGS_FOLDER"]) / "leadership_rack.py"
    dag_file.write_text(textwrap.dedent(DAG_TEXT.format(record=str(record), topics=[busy, idle],
                                                       prefix=f"{unique_topic}-.*")))
    try:
        with KafkaClusterAdmin(config) as admin:
            before = {p.tp: p for p in admin.snapshot(topics=[busy, idle]).partitions}
            idle_bytes = admin.replica_sizes([tp for tp in before if tp.topic == idle])
        with Traffic(config, busy, partitions=len(ASSIGNMENT)) as traffic:
            result = run_dag_file(airflow_home, dag_file)
        assert result["state"] == "success", result["log"][-6000:]
        traffic.check()
        acked = len(traffic.acked)

        evacuated = result["xcom"]["evacuate.return_value"]
        assert evacuated["reordered"] == 8 and evacuated["elected"] == 8 and evacuated["refused"] == 0
        assert not evacuated["failed"] and not evacuated["not_moved"]
        during = {tuple(k.rsplit("/", 1)): v for k, v in result["xcom"]["observe.return_value"].items()}
        for (topic, p), (replicas, leader) in during.items():
            was = before[next(tp for tp in before if tp.topic == topic and tp.partition == int(p))]
            assert leader not in RACK_R1 and replicas[0] not in RACK_R1, (topic, p, replicas, leader)
            assert sorted(replicas) == sorted(was.replicas)  # the same brokers: only the order changed
        moved = {(t, int(p)) for (t, p), (r, _) in during.items()
                 if tuple(r) != before[next(tp for tp in before if tp.topic == t and tp.partition == int(p))].replicas}
        assert {p for _, p in moved} == {0, 1, 4, 5}

        restored = result["xcom"]["restore.return_value"]
        assert restored["reordered"] == 8 and restored["elected"] == 8
        with KafkaClusterAdmin(config) as admin:
            after = {p.tp: p for p in admin.snapshot(topics=[busy, idle]).partitions}
            assert admin.replica_sizes(list(idle_bytes)) == idle_bytes  # nothing copied, nothing dropped
        for tp, p in before.items():
            assert after[tp].replicas == p.replicas and after[tp].leader == p.replicas[0], (tp, after[tp])
        assert (record / "leadership.json.restored").exists() and not (record / "leadership.json").exists()
        kept = json.loads((record / "leadership.json.restored").read_text())
        ours = {(e["topic"], e["partition"]): tuple(e["replicas"]) for e in kept["partitions"]}
        assert ours == {(tp.topic, tp.partition): p.replicas for tp, p in before.items() if p.replicas[0] in RACK_R1}
        print(f"\n{acked} records acknowledged and read back while 8 partitions changed leader twice")
    finally:
        delete_topics(config, [busy, idle])
