"""Heal partitions created under-replicated: restore their intended replication factor.

``GuardedCreatePartitionsOperator(allow_under_replicated=True, heal_targets_path=...)`` (partition
growth while a broker is down, KIP-409 semantics) records every partition it created short of
replicas, with its intended replication factor, in a heal-targets file. This DAG, every hour:

1. ``plan_heal`` reads the file, snapshots the cluster and classifies every target: healed,
   catching up (the replicas are there, the ISR is filling), waiting for a broker that is still
   down (the task fails; the next run retries), or short of replicas. It plans moves for the short
   ones only, each an explicitly allowed replication-factor change for exactly that partition
   (KIP-860), and prunes healed partitions from the file. Nothing to move: the run stops here
   (the downstream tasks are skipped);
2. ``execute`` with ``allow_replication_factor_change=True``: only the moves the heal plan marks
   as RF changes may change an RF; any other RF change is still refused;
3. ``wait`` until the new replicas are in sync.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
from airflow_kafka_reassign.operators.partitions import PlanHealOperator
from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

KAFKA_CONN_ID = "kafka_default"
#: Where GuardedCreatePartitionsOperator(heal_targets_path=...) records the partitions to heal:
#: storage every worker sees (the same value in the growth task).
HEAL_TARGETS_PATH = os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "kafka_reassign", "heal-targets.json"
)
PLAN_URI = "{{ ti.xcom_pull(task_ids='plan_heal')['plan_dir'] }}"

# [START heal]
with DAG(
    dag_id="kafka_heal_under_replicated",
    description="Restore the intended replication factor of partitions created under-replicated",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=2),
    default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
    params={
        "heal_targets_path": Param(HEAL_TARGETS_PATH, type="string", minLength=1),
        "throttle_bytes_per_sec": Param(50_000_000, type="integer", minimum=100_000, maximum=1_000_000_000),
    },
    render_template_as_native_obj=True,
    tags=["kafka", "partitions", "reassignment"],
) as dag:
    plan_heal = PlanHealOperator(
        task_id="plan_heal",
        kafka_config_id=KAFKA_CONN_ID,
        heal_targets_path="{{ params.heal_targets_path }}",
        plan_dir="{{ params.heal_targets_path }}.plans/{{ run_id | replace(':', '-') | replace('+', '-') }}",
        execution_timeout=timedelta(minutes=10),
    )

    execute = ExecuteReassignmentOperator(
        task_id="execute",
        kafka_config_id=KAFKA_CONN_ID,
        plan_uri=PLAN_URI,
        allow_replication_factor_change=True,  # only the heal plan's marked moves may change an RF
        throttle_bytes_per_sec="{{ params.throttle_bytes_per_sec }}",
        execution_timeout=timedelta(hours=1),
    )

    wait = WaitForReassignmentSensor(
        task_id="wait",
        kafka_config_id=KAFKA_CONN_ID,
        plan_uri=PLAN_URI,
        poke_interval=15,
        timeout=timedelta(minutes=45),
        stuck_after=timedelta(minutes=10),
    )

    plan_heal >> execute >> wait
# [END heal]
