"""Decommission brokers: drain every replica off them, triggered by hand with Params.

Trigger it from the UI (the form is built from the Params) or::

    airflow dags trigger kafka_decommission_brokers --conf '{"broker_ids": [7], "dry_run": false}'

Nothing runs before the input is checked:

1. Airflow validates the Params when the run is triggered (broker ids: a non-empty list of
   distinct non-negative integers; throttle and concurrency limits: positive integers within
   bounds; ``dry_run``: a boolean): a bad form never starts a run;
2. ``check_request`` checks what a schema cannot, against the live cluster: the brokers exist,
   at least one broker is left, and ``max_moves_per_broker`` is not above ``max_moves``;
3. ``plan`` plans the fewest moves that empty the brokers AND leave the others balanced (a
   decommission plus rebalance in one plan, rack-aware, replication factors unchanged); a plan
   that cannot be made (an RF larger than the brokers left, racks that cannot be spread over)
   fails here with the reason, before anything changed. The plan report is written next to it.

4. ``approve`` pauses the run for a person (Airflow's human-in-the-loop approval, Airflow 3.1+): the
   task's "Required actions" page shows the plan's summary and a link to the plan report; "Reject"
   skips everything after it (nothing is submitted) but ``restore_cordons``, which gives the brokers'
   cordons back exactly as they were before ``plan`` set them. The approval is bound to the plan's content
   hash and its snapshot time: ``execute`` refuses a plan edited after the approval, or planned
   more than ``MAX_SNAPSHOT_AGE`` ago, saying to re-plan. A dry run asks no approval; untick
   ``require_approval`` only where nobody is there to answer (CI, ``airflow dags test``).

Then the deferrable split, the recommended shape for long moves: ``execute`` checks the approval and
the guards and submits the first batch under the throttle, then returns (no worker slot held for
hours; ``dry_run``: it logs the exact requests and changes nothing, and the run stops after it);
``wait`` waits in the triggerer (``deferrable=True``), submits the next batches within the same
limits as moves finish (``submit_pending=True``), logs one progress line per poke (bytes copied,
rate, ETA) and restores the throttles exactly at the end; partitions that topics created or grown meanwhile
put on the brokers are drained in the same run (drain rounds: on Kafka before 4.3, or wherever the cordon
could not be set); ``verify_drained`` confirms the brokers hold no replica any more. They stay cordoned.

The whole lifecycle (docs/decommission.md): ``plan`` first refuses a broker that is a KRaft controller voter
(a combined broker+controller node: draining it and then stopping it would cost the quorum a voter), then
cordons the brokers (``cordoned.log.dirs=*``, Kafka 4.3+: nothing new lands there while they drain; the
previous values are backed up with the plan, and a cancel or rollback restores them). ``restore_cordons`` runs
after the drain whatever happened (``trigger_rule="all_done"``): when the plan's moves were never sent (rejected,
no answer in time, refused by ``execute``, or ``plan`` failed after cordoning) it restores the backup; once they
were sent it changes nothing (the drain owns the cordons then). With ``unregister``
ticked, the run then waits (``wait_for_shutdown``, reschedule mode) until you have stopped the brokers'
processes, and unregisters them (``unregister``): a broker never unregistered still counts, and gets new
partitions assigned (KIP-1073).

A large decommission can run in steps: with ``topic_include`` naming some topics and
``partial_drain`` ticked, only those topics are drained in this run (the plan refuses otherwise,
since the brokers would not end empty), and ``verify_drained`` checks just them and names what
is left for the next step.

``dry_run`` defaults to True: a first trigger shows what would happen; untick it to execute.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk import DAG, Asset, Param, task

from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators.approval import PlanApprovalOperator
from airflow_kafka_reassign.operators.decommission import (
    RestoreCordonsOperator,
    UnregisterBrokersOperator,
    WaitForBrokerShutdownSensor,
)
from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator
from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

KAFKA_CONN_ID = "kafka_default"
# [START approval_bound]
#: The approval is void when the plan's snapshot is older than this (re-plan: the cluster may have moved on).
MAX_SNAPSHOT_AGE = timedelta(hours=2)
#: Other DAGs can be scheduled on these (schedule=[PLAN_MADE]): a plan was made / its moves finished.
PLAN_MADE = Asset(f"kafka_reassign.{KAFKA_CONN_ID}.plan_made")
MOVES_FINISHED = Asset(f"kafka_reassign.{KAFKA_CONN_ID}.moves_finished")
# [END approval_bound]
PLAN_URI = "{{ ti.xcom_pull(task_ids='plan')['plan_uri'] }}"
# [START plan_storage]
#: Where plans go. Distributed workers (Celery, Kubernetes) and the triggerer share no disk: set the
#: Airflow Variable ``akr_plan_storage`` to an object-storage prefix (``s3://kafka-plans/airflow``)
#: and ``akr_storage_conn_id`` to its connection (an ``aws`` connection); unset, plans stay on the
#: worker's disk under $AIRFLOW_HOME (one machine only). See docs/storage.md.
PLAN_STORAGE = (
    "{% set base = var.value.get('akr_plan_storage', '') %}"
    "{{ (base.rstrip('/') ~ '/' ~ dag.dag_id ~ '/' ~ run_id) if base else '' }}"
)
STORAGE_CONN_ID = "{{ var.value.get('akr_storage_conn_id', '') }}"
# [END plan_storage]

# [START decommission_params]
PARAMS = {
    "broker_ids": Param(
        type="array",
        items={"type": "integer", "minimum": 0},
        minItems=1,
        uniqueItems=True,
        title="Brokers to decommission",
        description="broker ids (node.id) that must end with no replica",
    ),
    "dry_run": Param(True, type="boolean", title="Dry run", description="validate and log the requests only"),
    "require_approval": Param(
        True, type="boolean", title="Require approval",
        description="pause after the plan until a person approves it (untick only where nobody can answer: CI)",
    ),
    "throttle_bytes_per_sec": Param(
        50_000_000, type="integer", minimum=100_000, maximum=1_000_000_000,
        title="Replication throttle (bytes/s)", description="on the brokers and replicas involved, removed at the end",
    ),
    "max_moves": Param(20, type="integer", minimum=1, maximum=1000, title="Moves in flight in the cluster"),
    "max_moves_per_broker": Param(2, type="integer", minimum=1, maximum=100, title="Moves in flight per broker"),
    "topic_include": Param(
        [".*"], type="array", items={"type": "string", "minLength": 1}, minItems=1,
        title="Topics (regular expressions, full match)",
    ),
    "partial_drain": Param(
        False, type="boolean", title="Partial drain",
        description="drain only the topics above now; other topics keep their replicas on these brokers",
    ),
    "rf_guard": Param(
        "auto", type="string", enum=["auto", "broker", "client"], title="Replication-factor guard",
        description="broker: the brokers refuse a replica-count change (KIP-860, Kafka 4.1+); "
        "client: older brokers, the task checks each move's replica count itself before sending it; "
        "auto: broker, or client on a ZooKeeper-mode cluster (Kafka 3.x), said in the task's log",
    ),
    "unregister": Param(
        False, type="boolean", title="Wait for shutdown, then unregister",
        description="after the drain, wait until you have stopped the brokers (fenced), then unregister them",
    ),
}
# [END decommission_params]

# [START decommission]
with DAG(
    dag_id="kafka_decommission_brokers",
    description="Drain brokers before they are shut down: plan, execute under a throttle, wait, verify",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=12),
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    render_template_as_native_obj=True,  # Params arrive in the operators as lists, ints and booleans
    params=PARAMS,
    tags=["kafka", "reassignment"],
) as dag:

    @task(retries=0)
    def check_request(params: dict | None = None) -> dict:
        """Cross-field and cluster checks a JSON schema cannot express; fails the run before any plan."""
        remove = sorted(params["broker_ids"])
        if params["max_moves_per_broker"] > params["max_moves"]:
            raise AirflowFailException(
                f"max_moves_per_broker ({params['max_moves_per_broker']}) is above max_moves "
                f"({params['max_moves']}): lower it, or raise max_moves"
            )
        admin = KafkaReassignHook(kafka_config_id=KAFKA_CONN_ID).get_admin()
        try:
            brokers = admin.snapshot(topics=[]).broker_ids  # brokers only, no topic metadata
        finally:
            admin.close()
        unknown = [b for b in remove if b not in brokers]
        if unknown:
            raise AirflowFailException(
                f"broker(s) {unknown} are not in the cluster (its brokers: {list(brokers)}); "
                "check broker_ids (a stopped broker is not listed: start it, or plan without it)"
            )
        remaining = [b for b in brokers if b not in remove]
        if not remaining:
            raise AirflowFailException(f"broker_ids {remove} are every broker of the cluster: nothing would be left")
        return {"remove": remove, "remaining": remaining}

    plan = PlanReassignmentOperator(
        task_id="plan",
        output_uri=PLAN_STORAGE,
        storage_conn_id=STORAGE_CONN_ID,
        kafka_config_id=KAFKA_CONN_ID,
        goal="remove-brokers",
        brokers="{{ params.broker_ids }}",
        topic_include="{{ params.topic_include }}",
        partial_drain="{{ params.partial_drain }}",
        cordon="{{ not params.dry_run }}",  # cordoned.log.dirs=* before the snapshot (Kafka 4.3+), backed up
        use_sizes=True,
        skip_if_empty=True,
        execution_timeout=timedelta(minutes=30),
        outlets=[PLAN_MADE],
    )

    approve = PlanApprovalOperator(
        task_id="approve",
        plan="{{ ti.xcom_pull(task_ids='plan') }}",
        required="{{ params.require_approval and not params.dry_run }}",
        subject="Drain brokers {{ params.broker_ids }}: approve the plan?",
        response_timeout=timedelta(hours=4),
        retries=0,
    )

    execute = ExecuteReassignmentOperator(
        task_id="execute",
        storage_conn_id=STORAGE_CONN_ID,
        kafka_config_id=KAFKA_CONN_ID,
        plan_uri=PLAN_URI,
        dry_run="{{ params.dry_run }}",
        throttle_bytes_per_sec="{{ params.throttle_bytes_per_sec }}",
        max_moves="{{ params.max_moves }}",
        max_moves_per_broker="{{ params.max_moves_per_broker }}",
        elect_leaders=True,
        rf_guard="{{ params.rf_guard }}",
        approval="{{ ti.xcom_pull(task_ids='approve') }}",
        max_snapshot_age=MAX_SNAPSHOT_AGE,
        wait_for_completion=False,  # submit the first batch, leave the throttles for `wait`
        execution_timeout=timedelta(minutes=30),
    )

    @task.short_circuit
    def not_a_dry_run(params: dict | None = None) -> bool:
        """A dry run ends after ``execute`` logged the requests: ``wait`` and ``verify_drained`` are skipped."""
        return not params["dry_run"]

    wait = WaitForReassignmentSensor(
        task_id="wait",
        storage_conn_id=STORAGE_CONN_ID,
        kafka_config_id=KAFKA_CONN_ID,
        plan_uri=PLAN_URI,
        deferrable=True,  # waits in the triggerer, not a worker slot
        submit_pending=True,  # the next batches, within the same limits, as moves finish
        throttle_bytes_per_sec="{{ params.throttle_bytes_per_sec }}",
        max_moves="{{ params.max_moves }}",
        max_moves_per_broker="{{ params.max_moves_per_broker }}",
        elect_leaders=True,
        rf_guard="{{ params.rf_guard }}",
        poke_interval=15,
        timeout=timedelta(hours=10),
        stuck_after=timedelta(minutes=15),
        on_timeout="leave",  # a drain is resumed, not undone: fix the cause and trigger again
        outlets=[MOVES_FINISHED],
    )

    @task(retries=0)
    def verify_drained(params: dict | None = None) -> dict:
        """The decommissioned brokers hold no replica (of the planned topics, for a partial drain)."""
        import re

        remove = set(params["broker_ids"])
        patterns = [re.compile(p) for p in params["topic_include"]]
        admin = KafkaReassignHook(kafka_config_id=KAFKA_CONN_ID).get_admin()
        try:
            snapshot = admin.snapshot()
        finally:
            admin.close()
        on_removed = [p for p in snapshot.partitions if remove & set(p.replicas)]  # (drain rounds took late ones)
        planned = [p for p in on_removed if any(r.fullmatch(p.topic) for r in patterns)]
        left = planned if params["partial_drain"] else on_removed
        if left:
            raise AirflowFailException(
                f"{len(left)} partition(s) still have replicas on brokers {sorted(remove)}: "
                f"{[str(p.tp) for p in left[:20]]} after the plan and its drain rounds (see the wait task's log: "
                "something keeps creating partitions there; cordons, Kafka 4.3+, stop it); trigger the DAG again"
            )
        if on_removed:
            topics = sorted({p.topic for p in on_removed})
            print(f"brokers {sorted(remove)} hold no replica of the planned topics; {len(on_removed)} partition(s) "
                  f"of other topics are still there ({topics[:10]}): drain them next, then shut the brokers down")
        else:
            print(f"brokers {sorted(remove)} hold no replica and stay cordoned: stop their processes (with the "
                  "'unregister' Param ticked, the run waits for that, then unregisters them)")
        return {"drained": sorted(remove), "left_for_later": len(on_removed)}

    @task.short_circuit
    def unregister_requested(params: dict | None = None) -> bool:
        """The end of the lifecycle only when asked: the brokers' processes are yours to stop."""
        return bool(params["unregister"])

    wait_for_shutdown = WaitForBrokerShutdownSensor(
        task_id="wait_for_shutdown",
        kafka_config_id=KAFKA_CONN_ID,
        brokers="{{ params.broker_ids }}",
        mode="reschedule",  # no worker slot while you stop the brokers
        poke_interval=15,
        timeout=timedelta(hours=6),
    )
    unregister = UnregisterBrokersOperator(
        task_id="unregister",
        kafka_config_id=KAFKA_CONN_ID,
        brokers="{{ params.broker_ids }}",
        retries=0,
    )

    # [START restore_cordons]
    # a plan never executed gives its cordons back: after the drain's last task, whatever happened before it (a
    # "Reject" skips the tasks after approve, a failure marks them upstream_failed; all_done runs either way)
    restore_cordons = RestoreCordonsOperator(
        task_id="restore_cordons",
        plan_task_id="plan",
        kafka_config_id=KAFKA_CONN_ID,
        storage_conn_id=STORAGE_CONN_ID,
        trigger_rule="all_done",
    )

    drained = verify_drained()
    check_request() >> plan >> approve >> execute >> not_a_dry_run() >> wait >> drained
    wait >> restore_cordons
    # [END restore_cordons]
    drained >> unregister_requested() >> wait_for_shutdown >> unregister
# [END decommission]
