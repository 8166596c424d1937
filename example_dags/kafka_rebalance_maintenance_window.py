"""A scheduled rebalance in the cluster's weekly maintenance window.

Every Saturday at 02:00 (UTC): plan a rebalance with the Spark planner, execute it under a
replication throttle in batches, and wait until every move is complete.

* ``plan`` snapshots the cluster and plans the fewest moves that balance replicas and leaders
  over the brokers (per topic too) and spread every partition over the racks; its XCom holds
  the plan directory and the moves against the lower bound, and it writes the plan report
  (HTML) next to the plan. A balanced cluster gives an empty plan: the run stops there
  (``skip_if_empty``), the downstream tasks are skipped.
* ``approve``: a person approves the plan (see kafka_decommission_brokers; ``require_approval``).
* the deferrable split, the recommended shape for long moves: ``execute`` re-checks every move
  against the live cluster (stale moves and reassignments it did not start are refused; KIP-860's
  replication-factor guard is on) and submits the first batch, at most ``max_moves_per_broker``
  at a time per broker under ``throttle_bytes_per_sec``, then returns; ``wait`` waits in the
  triggerer (``deferrable=True``), submits the next batches within the same limits as moves finish
  (``submit_pending=True``) and logs one progress line per poke (a bar, moves, bytes, throughput,
  ETA). Both stop submitting at the end of the window (``deadline``: ``window_minutes`` after the
  run started): moves in flight finish, the rest are named and left for the next run (which
  resumes the same plan... or plans again). ``wait`` restores the throttles exactly as they were,
  and cancels the moves still in flight 5 hours after it started (``on_timeout="cancel"``: the
  window is at most 4 hours).

``max_active_runs=1`` and ``catchup=False``: one window at a time, and a missed window is not
replayed. Every task is retry-safe: a retried ``execute`` recomputes what is done, in flight and
pending from the cluster and the plan, and never submits a move twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, Param

from airflow_kafka_reassign.operators.approval import PlanApprovalOperator
from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator
from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

KAFKA_CONN_ID = "kafka_default"
#: The approval is void when the plan's snapshot is older than this (re-plan).
MAX_SNAPSHOT_AGE = timedelta(hours=1)
PLAN_MADE = Asset(f"kafka_reassign.{KAFKA_CONN_ID}.plan_made")
MOVES_FINISHED = Asset(f"kafka_reassign.{KAFKA_CONN_ID}.moves_finished")
PLAN_URI = "{{ ti.xcom_pull(task_ids='plan')['plan_uri'] }}"
#: The window closes window_minutes after the run started: no move is submitted after it.
WINDOW_END = "{{ (dag_run.start_date + macros.timedelta(minutes=params.window_minutes)).isoformat() }}"
#: Where plans go. Distributed workers (Celery, Kubernetes) and the triggerer share no disk: set the
#: Airflow Variable ``akr_plan_storage`` to an object-storage prefix (``s3://kafka-plans/airflow``)
#: and ``akr_storage_conn_id`` to its connection (an ``aws`` connection); unset, plans stay on the
#: worker's disk under $AIRFLOW_HOME (one machine only). See docs/storage.md.
PLAN_STORAGE = (
    "{% set base = var.value.get('akr_plan_storage', '') %}"
    "{{ (base.rstrip('/') ~ '/' ~ dag.dag_id ~ '/' ~ run_id) if base else '' }}"
)
STORAGE_CONN_ID = "{{ var.value.get('akr_storage_conn_id', '') }}"

# [START rebalance_window]
with DAG(
    dag_id="kafka_rebalance_maintenance_window",
    description="Weekly rebalance of the Kafka cluster in its maintenance window",
    schedule="0 2 * * 6",  # Saturdays 02:00 UTC: the maintenance window opens
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=6),
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    render_template_as_native_obj=True,  # Params arrive in the operators as lists and ints
    params={
        "topic_include": Param(
            [".*"], type="array", items={"type": "string", "minLength": 1}, minItems=1,
            description="regular expressions (full match) of the topics to balance; internal topics are never moved",
        ),
        "throttle_bytes_per_sec": Param(
            50_000_000, type="integer", minimum=100_000, description="replication throttle on the brokers involved",
        ),
        "max_moves_per_broker": Param(2, type="integer", minimum=1, maximum=50),
        "window_minutes": Param(
            180, type="integer", minimum=5, maximum=240,
            description="no move is submitted later than this after the run started",
        ),
        "require_approval": Param(True, type="boolean", description="pause after the plan until a person approves it"),
    },
    tags=["kafka", "reassignment"],
) as dag:
    plan = PlanReassignmentOperator(
        task_id="plan",
        output_uri=PLAN_STORAGE,
        storage_conn_id=STORAGE_CONN_ID,
        kafka_config_id=KAFKA_CONN_ID,
        goal="rebalance",
        topic_include="{{ params.topic_include }}",
        use_sizes=True,  # balance bytes too, prefer moving small replicas
        skip_if_empty=True,
        execution_timeout=timedelta(minutes=30),
        outlets=[PLAN_MADE],
    )

    approve = PlanApprovalOperator(
        task_id="approve",
        plan="{{ ti.xcom_pull(task_ids='plan') }}",
        required="{{ params.require_approval }}",
        subject="Maintenance-window rebalance: approve the plan?",
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
        deadline=WINDOW_END,
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
        submit_pending=True,  # the next batches, within the same limits, as moves finish...
        deadline=WINDOW_END,  # ...until the window closes
        throttle_bytes_per_sec="{{ params.throttle_bytes_per_sec }}",
        max_moves_per_broker="{{ params.max_moves_per_broker }}",
        elect_leaders=True,
        poke_interval=30,
        timeout=timedelta(hours=5),  # the window (at most 4 h) and an hour for the moves in flight
        stuck_after=timedelta(minutes=15),
        outlets=[MOVES_FINISHED],
        on_timeout="cancel",
    )

    plan >> approve >> execute >> wait
# [END rebalance_window]
