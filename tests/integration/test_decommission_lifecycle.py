"""The whole decommission, through the example DAG, on a cluster of its own (the last step unregisters a broker):
cordon -> plan -> drain (while a topic is created and another grown, placed by the controller) -> verify ->
the broker process is stopped -> wait for the shutdown -> unregister.

4 nodes: 1-3 combined broker+controller voters, 4 a broker only (drained). Kafka 4.3+ (cordons): the sandbox's
default version, or ``AKR_MAINTENANCE_KAFKA_VERSION``. No fixed sleeps: every wait polls with a bound.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from dagrun import run_dag_file
from kafka_helpers import cordon_capable_cluster, make_topic
from observers import admin_client, cordons

from airflow_kafka_reassign.core.execution.throttle import FOLLOWER_RATE, LEADER_RATE
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.sandbox import Sandbox, wait_until

DRAINED = 4
KEPT = (1, 2, 3)
EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with cordon_capable_cluster(tmp_path_factory.mktemp("lifecycle-sandbox")) as sandbox:
        yield sandbox


def test_cordon_drain_shut_down_and_unregister_a_broker_while_the_cluster_lives_on(cluster, airflow_home, tmp_path):
    config = cluster.client_config()
    make_topic(config, "orders", [[DRAINED, 1], [DRAINED, 2], [3, DRAINED], [1, DRAINED], [2, 3]], megabytes=2)
    make_topic(config, "grown", [[1, 2]])
    env = {**airflow_home, "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": config}),
           "AKR_OUTPUT_DIR": str(tmp_path / "out")}
    dags = Path(env["AIRFLOW__CORE__DAGS_FOLDER"])
    dag_file = dags / "kafka_decommission_brokers.py"
    dag_file.write_text((EXAMPLES / "kafka_decommission_brokers.py").read_text())  # the example, unchanged

    seen: dict[str, object] = {}
    stop = threading.Event()

    def operator_at_work() -> None:
        """What happens outside the DAG: the cluster lives on while the moves run, and, once the broker is
        empty and its throttles are gone, the operator stops its process (the DAG waits for that)."""
        client = AdminClient({"bootstrap.servers": config["bootstrap.servers"]})
        with KafkaClusterAdmin(config, timeout_s=20) as admin:
            wait_until(lambda: stop.is_set() or admin.list_reassignments(), "the drain's first moves", timeout=400)
            if stop.is_set():
                return
            seen["cordon_during"] = admin.describe_cordons([DRAINED])[DRAINED]
            seen["cordon_during_observed"] = cordons(admin_client(config), [DRAINED])[DRAINED]  # a second observer
            for f in client.create_topics([NewTopic("created", num_partitions=12, replication_factor=2)]).values():
                f.result()
            for f in client.create_partitions([NewPartitions("grown", 11)]).values():
                f.result()
            def placed() -> list:
                try:
                    parts = [p for t in ("created", "grown") for p in admin.snapshot(topics=[t]).partitions]
                except Exception:  # noqa: BLE001 (the answering broker may not know the new topic yet)
                    return []
                return parts if len(parts) == 12 + 11 and all(p.leader is not None for p in parts) else []
            new = wait_until(placed, "the new partitions to have leaders", timeout=60)
            seen["new_on_drained"] = [str(p.tp) for p in new if DRAINED in p.replicas]

            def empty_and_released() -> bool:
                if stop.is_set():
                    return True
                snap = admin.snapshot()
                configs = admin.describe_throttles([DRAINED], []).brokers.get(DRAINED, {})
                return not any(DRAINED in p.replicas for p in snap.partitions) and not admin.list_reassignments() \
                    and not any(configs.get(k) for k in (LEADER_RATE, FOLLOWER_RATE))
            wait_until(empty_and_released, "broker 4 drained and its throttles restored", timeout=600, every=1.0)
            if stop.is_set():
                return
            seen["cordon_at_end"] = admin.describe_cordons([DRAINED])[DRAINED]
            seen["cordon_at_end_observed"] = cordons(admin_client(config), [DRAINED])[DRAINED]
        cluster.stop_broker(DRAINED)
        seen["stopped"] = True

    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        before = admin.describe_throttles(list(KEPT), ["orders", "grown"]).model_dump()
    worker = threading.Thread(target=operator_at_work, daemon=True)
    worker.start()
    try:
        result = run_dag_file(env, dag_file, {
            "broker_ids": [DRAINED], "dry_run": False, "require_approval": False, "throttle_bytes_per_sec": 300_000,
            "max_moves": 2, "max_moves_per_broker": 1, "unregister": True,
        }, timeout=900, plan_in_process=True)
    finally:
        stop.set()
        worker.join(timeout=60)
    assert result["state"] == "success", result["log"][-8000:]
    for task in ("plan", "execute", "wait", "verify_drained", "wait_for_shutdown", "unregister"):
        assert result["tis"].get(task) == "success", (task, result["tis"])
    assert "cordoned.log.dirs set" in result["log"]
    assert seen.get("cordon_during") == "*" and seen.get("cordon_at_end") == "*" and seen.get("stopped")
    assert seen.get("cordon_during_observed") == "*" and seen.get("cordon_at_end_observed") == "*"
    assert seen["new_on_drained"] == []  # cordoned: the controller placed none of the 22 new partitions there
    assert result["xcom"]["unregister.return_value"]["unregistered"] == [DRAINED]
    assert result["xcom"]["restore_cordons.return_value"]["outcome"] == "kept"  # the drain ran: it owns the cordon
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        assert DRAINED not in {b.id for b in admin.describe_cluster(include_fenced=True).brokers}
        parts = [p for t in ("orders", "grown", "created") for p in admin.snapshot(topics=[t]).partitions]
        assert len(parts) == 5 + 11 + 12
        assert all(DRAINED not in p.replicas and set(p.isr) == set(p.replicas) for p in parts)
        assert [len(p.replicas) for p in parts] == [2] * len(parts)  # RF unchanged
        assert admin.describe_throttles(list(KEPT), ["orders", "grown"]).model_dump() == before
