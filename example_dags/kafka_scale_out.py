"""Scale out: give brokers that just joined the cluster their share of the replicas.

After new brokers are started (with their ``broker.rack``), they hold nothing until partitions
are reassigned to them. This DAG, triggered by hand::

    airflow dags trigger kafka_scale_out --conf '{"new_broker_ids": [7, 8]}'

1. ``check_new_brokers``: the new brokers are registered (a typo or a broker that is not up yet
   fails the run here, before anything is planned);
2. ``plan``: the fewest moves that bring the new brokers to their share, keep every topic even
   over the brokers, keep replication factors, spread partitions over racks, and change as few
   leaders as the leader balance needs (Kafka's own ``--generate`` moves about 1.4x as many replicas
   and changes most leaders);
3. ``approve``: a person approves the plan (see kafka_decommission_brokers; ``require_approval``);
4. the deferrable split, the recommended shape for long moves: ``execute`` checks the approval and
   the guards and submits the first batch under the throttle, then returns (no worker slot held for
   hours); ``wait`` waits in the triggerer (``deferrable=True``), submits the next batches within
   the same limits as moves finish (``submit_pending=True``), logs one progress line per poke
   (bytes copied, rate, ETA) and restores the throttles exactly at the end.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk import DAG, Asset, Param, task

from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators.approval import PlanApprovalOperator
from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator
from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

KAFKA_CONN_ID = "kafka_default"
#: The approval is void when the plan's snapshot is older than this (re-plan).
MAX_SNAPSHOT_AGE = timedelta(hours=2)
PLAN_MADE = Asset(f"kafka_reassign.{KAFKA_CONN_ID}.plan_made")
MOVES_FINISHED = Asset(f"kafka_reassign.{KAFKA_CONN_ID}.moves_finished")
PLAN_URI = "{{ ti.xcom_pull(task_ids='plan')['plan_uri'] }}"
#: Where plans go. Distributed workers (Celery, Kubernetes) and the triggerer share no disk: set the
#: Airflow Variable ``akr_plan_storage`` to an object-storage prefix (``s3://kafka-plans/airflow``)
#: and ``akr_storage_conn_id`` to its connection (an ``aws`` connection); unset, plans stay on the
#: worker's disk under $AIRFLOW_HOME (one machine only). See docs/storage.md.
PLAN_STORAGE = (
    "{% set base = var.value.get('akr_plan_storage', '') %}"
    "{{ (base.rstrip('/') ~ '/' ~ dag.dag_id ~ '/' ~ run_id) if base else '' }}"
)
STORAGE_CONN_ID = "{{ var.value.get('akr_storage_conn_id', '') }}"

# [START scale_out]
with DAG(
    dag_id="kafka_scale_out",
    description="Move the new brokers' share of replicas onto them after a scale-out",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=12),
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    render_template_as_native_obj=True,
    params={
        "new_broker_ids": Param(
            type="array", items={"type": "integer", "minimum": 0}, minItems=1, uniqueItems=True,
            title="New brokers", description="ids of the brokers that joined and should receive replicas",
        ),
        "throttle_bytes_per_sec": Param(50_000_000, type="integer", minimum=100_000, maximum=1_000_000_000),
        "max_moves_per_broker": Param(2, type="integer", minimum=1, maximum=100),
        "topic_include": Param([".*"], type="array", items={"type": "string", "minLength": 1}, minItems=1),
        "require_approval": Param(True, type="boolean", description="pause after the plan until a person approves it"),
    },
    tags=["kafka", "reassignment"],
) as dag:

    @task(retries=0)
    def check_new_brokers(params: dict | None = None) -> list[int]:
        """The new brokers are registered in the cluster (up and unfenced)."""
        admin = KafkaReassignHook(kafka_config_id=KAFKA_CONN_ID).get_admin()
        try:
            brokers = admin.snapshot(topics=[]).broker_ids
        finally:
            admin.close()
        missing = sorted(set(params["new_broker_ids"]) - set(brokers))
        if missing:
            raise AirflowFailException(
                f"broker(s) {missing} are not registered in the cluster (its brokers: {list(brokers)}): "
                "start them first, or fix new_broker_ids"
            )
        return sorted(params["new_broker_ids"])

    plan = PlanReassignmentOperator(
        task_id="plan",
        output_uri=PLAN_STORAGE,
        storage_conn_id=STORAGE_CONN_ID,
        kafka_config_id=KAFKA_CONN_ID,
        goal="add-brokers",
        brokers="{{ params.new_broker_ids }}",
        topic_include="{{ params.topic_include }}",
        use_sizes=True,
        skip_if_empty=True,
        execution_timeout=timedelta(minutes=30),
        outlets=[PLAN_MADE],
    )

    approve = PlanApprovalOperator(
        task_id="approve",
        plan="{{ ti.xcom_pull(task_ids='plan') }}",
        required="{{ params.require_approval }}",
        subject="Scale out onto brokers {{ params.new_broker_ids }}: approve the plan?",
        response_timeout=timedelta(hours=2),
        retries=0,
    )

    execute = ExecuteReassignmentOperator(
        task_id="execute",
        storage_conn_id=STORAGE_CONN_ID,
        kafka_config_id=KAFKA_CONN_ID,
        plan_uri=PLAN_URI,
        throttle_bytes_per_sec="{{ params.throttle_bytes_per_sec }}",
        max_moves_per_broker="{{ params.max_moves_per_broker }}",
        elect_leaders=True,
        approval="{{ ti.xcom_pull(task_ids='approve') }}",
        max_snapshot_age=MAX_SNAPSHOT_AGE,
        wait_for_completion=False,  # submit the first batch, leave the throttles for `wait`
        execution_timeout=timedelta(minutes=30),
    )

    wait = WaitForReassignmentSensor(
        task_id="wait",
        storage_conn_id=STORAGE_CONN_ID,
        kafka_config_id=KAFKA_CONN_ID,
        plan_uri=PLAN_URI,
        deferrable=True,  # waits in the triggerer, not a worker slot
        submit_pending=True,  # the next batches, within the same limits, as moves finish
        throttle_bytes_per_sec="{{ params.throttle_bytes_per_sec }}",
        max_moves_per_broker="{{ params.max_moves_per_broker }}",
        elect_leaders=True,
        poke_interval=15,
        timeout=timedelta(hours=10),
        stuck_after=timedelta(minutes=15),
        outlets=[MOVES_FINISHED],
    )

    check_new_brokers() >> plan >> approve >> execute >> wait
# [END scale_out]
