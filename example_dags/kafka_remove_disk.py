"""Remove a disk (JBOD): empty log dirs of brokers, triggered by hand with Params.

Trigger it from the UI (the form is built from the Params) or::

    airflow dags trigger kafka_remove_disk --conf '{"log_dirs": ["1:/var/lib/kafka/data-2"]}'

1. ``plan`` checks the log dirs against the cluster (each one of its broker's log dirs as DescribeLogDirs reports
   them; their replicas must have somewhere to go): a bad one fails the task by name before anything is sent. Then
   it cordons them (``cordoned.log.dirs``, Kafka 4.3+; the previous values backed up on the plan's run state) so that
   no new replica lands there, takes the snapshot and plans: each replica of a removed dir to the broker's log dir
   with the most room, else (no room on the broker) to another broker, rack-aware. The plan is Kafka's format with
   ``log_dirs``.
2. ``execute`` moves them: between log dirs with AlterReplicaLogDirs, at most ``max_moves_per_dir`` in flight out of
   or into each dir, under the log-dir throttle (``replica.alter.log.dirs.io.max.bytes.per.second``, restored
   exactly at the end), the disk guard checking each target volume; it stops, keeping its state, if a log dir goes
   offline. Replicas sent to other brokers are ordinary reassignments under the replication throttle.
3. ``verify_emptied``: the dirs hold no replica and are still cordoned. Take them out of the brokers' ``log.dirs``
   (a rolling restart), then clear ``cordoned.log.dirs`` for them. A cluster without cordons (before Kafka 4.3,
   ZooKeeper mode) is not cordoned at step 1 (one line says so); replicas that land in the dirs meanwhile are moved
   off by the run's rounds, and the verdict says to take the dirs out of ``log.dirs`` at once.
4. ``restore_cordons`` (``RestoreCordonsOperator``, ``trigger_rule="all_done"``, after ``execute``): when none of the
   plan's moves was sent (``execute`` refused the plan in pre-flight, ``plan`` failed after cordoning), the dirs'
   cordons go back exactly as they were; once moves were sent it changes nothing: a finished removal keeps the dirs
   cordoned.

A cancel or a rollback (CancelReassignmentOperator on the plan) restores the cordons from the backup.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk import DAG, Param, task

from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators.decommission import RestoreCordonsOperator
from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator

KAFKA_CONN_ID = "kafka_default"

# [START remove_disk]
with DAG(
    dag_id="kafka_remove_disk",
    description="Empty log dirs of brokers (JBOD): check, cordon, plan, move between log dirs, verify",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=13),
    render_template_as_native_obj=True,  # Params arrive in the operators as lists and ints
    params={
        "log_dirs": Param(
            type="array", items={"type": "string", "pattern": "^[0-9]+:/.+"}, minItems=1, uniqueItems=True,
            title="Log dirs to empty", description='BROKER:/absolute/path each, e.g. "1:/var/lib/kafka/data-2"',
        ),
        "log_dir_throttle_bytes_per_sec": Param(
            50_000_000, type="integer", minimum=100_000, title="Log-dir throttle (bytes/s)",
            description="replica.alter.log.dirs.io.max.bytes.per.second on the brokers moving, restored at the end",
        ),
        "max_moves_per_dir": Param(1, type="integer", minimum=1, maximum=16, title="Moves in flight per log dir"),
        "disk_cap": Param(
            0.85, type="number", exclusiveMinimum=0, maximum=1, title="Disk cap",
            description="no target log dir (its volume) fuller than this share after the plan; raise it only when "
                        "the volumes are known to hold the data",
        ),
    },
    tags=["kafka", "reassignment", "jbod"],
) as dag:
    plan = PlanReassignmentOperator(
        task_id="plan",
        kafka_config_id=KAFKA_CONN_ID,
        goal="remove-disks",
        log_dirs="{{ params.log_dirs }}",
        disk_cap="{{ params.disk_cap }}",
        skip_if_empty=True,
        retries=0,
    )

    execute = ExecuteReassignmentOperator(
        task_id="execute",
        kafka_config_id=KAFKA_CONN_ID,
        plan_uri="{{ ti.xcom_pull(task_ids='plan')['plan_uri'] }}",
        log_dir_throttle_bytes_per_sec="{{ params.log_dir_throttle_bytes_per_sec }}",
        max_moves_per_dir="{{ params.max_moves_per_dir }}",
        throttle_bytes_per_sec=50_000_000,  # for replicas that must go to other brokers
        execution_timeout=timedelta(hours=12),
    )

    @task(retries=0)
    def verify_emptied(params: dict | None = None) -> dict:
        """Every removed log dir holds no replica and is still cordoned."""
        admin = KafkaReassignHook(kafka_config_id=KAFKA_CONN_ID).get_admin()
        try:
            dirs = admin.log_dirs(None).dirs
        finally:
            admin.close()
        left, no_cordons = {}, False
        for entry in params["log_dirs"]:
            broker, _, path = entry.partition(":")
            found = next((d for d in dirs.get(int(broker), ()) if d.path == path.rstrip("/")), None)
            if found is None or found.replicas or found.cordoned is False:
                left[entry] = "not reported" if found is None else (
                    f"{len(found.replicas)} replica(s) left" if found.replicas else "not cordoned")
            no_cordons = no_cordons or (found is not None and found.cordoned is None)  # the broker has no cordons
        if left:
            raise AirflowFailException(f"log dir(s) not emptied: {left}; trigger the DAG again")
        if no_cordons:  # Kafka before 4.3, ZooKeeper mode: nothing keeps new replicas out of an empty dir
            print(f"log dir(s) {params['log_dirs']} are empty; this cluster has no cordons (cordoned.log.dirs, Kafka "
                  "4.3+): take them out of log.dirs now (a rolling restart), a new replica may land there meanwhile "
                  "(Kafka puts it in the broker's log dir with the fewest replicas)")
        else:
            print(f"log dir(s) {params['log_dirs']} are empty and cordoned: take them out of log.dirs")
        return {"emptied": params["log_dirs"]}

    # the dirs' cordons go back when no move was sent (a refused plan, a plan task that failed after cordoning);
    # all_done: it runs whatever happened to execute; a removal that moved replicas keeps its cordons
    restore_cordons = RestoreCordonsOperator(
        task_id="restore_cordons",
        plan_task_id="plan",
        kafka_config_id=KAFKA_CONN_ID,
        trigger_rule="all_done",
    )

    plan >> execute >> verify_emptied()
    execute >> restore_cordons
# [END remove_disk]
