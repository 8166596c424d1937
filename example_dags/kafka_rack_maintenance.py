"""Rolling maintenance of a rack: take leadership off it, do the maintenance, give leadership back.

Trigger it from the UI or::

    airflow dags trigger kafka_rack_maintenance --conf '{"racks": ["r1"]}'

1. ``evacuate`` moves preferred and actual leadership off every broker of the racks (and of
   ``brokers``): each affected partition's replicas are reordered so that an in-sync replica on
   another rack comes first, then its preferred leader is elected. No data is copied. The replica
   order before is recorded first (``leadership.json``, on the plan storage when the Variable
   ``akr_plan_storage`` is set, else on the worker's disk). A partition with no in-sync replica off
   the rack is named and the run stops: nothing is forced.
2. ``maintenance`` is where the rack's brokers are restarted, patched or moved: replace it with your
   own task (a rolling restart through your orchestration). Here it only waits
   ``hold_seconds``. Clients see no leader change while the brokers go down.
3. ``restore`` puts every recorded order back and elects the previous preferred leaders, retrying
   while the returning brokers rejoin the ISR (up to ``restore_timeout_s``). A partition someone
   moved in between keeps its new order, and is named.

If the maintenance fails, the run stops before ``restore``: bring the brokers back, then clear
``restore`` to run it.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from airflow_kafka_reassign.operators.leadership import EvacuateLeadershipOperator, RestoreLeadershipOperator

KAFKA_CONN_ID = "kafka_default"
#: The record's folder: on the plan storage when the Variable ``akr_plan_storage`` is set (distributed
#: workers share no disk), else '' (the operators' default, on the worker's disk).
RECORD_URI = (
    "{% set base = var.value.get('akr_plan_storage', '') %}"
    "{{ (base.rstrip('/') ~ '/' ~ dag.dag_id ~ '/' ~ run_id ~ '/leadership') if base else '' }}"
)
STORAGE_CONN_ID = "{{ var.value.get('akr_storage_conn_id', '') }}"

# [START rack_maintenance]
with DAG(
    dag_id="kafka_rack_maintenance",
    description="Leadership off a rack, maintenance, leadership back: no data moved",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=26),  # the longest hold (a day) plus the restore
    default_args={"retries": 0},
    render_template_as_native_obj=True,
    params={
        "racks": Param(["r1"], type="array", items={"type": "string", "minLength": 1}, title="Racks"),
        "brokers": Param([], type="array", items={"type": "integer", "minimum": 0}, uniqueItems=True,
                         title="Brokers (besides the racks' brokers)"),
        "hold_seconds": Param(0, type="integer", minimum=0, maximum=86_400,
                              title="Maintenance placeholder: seconds to hold"),
        "restore_timeout_s": Param(600, type="integer", minimum=10, maximum=86_400,
                                   title="Restore: how long to retry elections while brokers rejoin"),
    },
    tags=["kafka", "leadership"],
) as dag:
    evacuate = EvacuateLeadershipOperator(
        task_id="evacuate",
        kafka_config_id=KAFKA_CONN_ID,
        racks="{{ params.racks }}",
        brokers="{{ params.brokers }}",
        record_uri=RECORD_URI,
        storage_conn_id=STORAGE_CONN_ID,
        retries=1,  # a retry adds to the record, never overwrites an original order
    )

    @task
    def maintenance(params: dict | None = None) -> None:
        """Replace with the real work on the rack's brokers (restart, patch, move)."""
        print(f"leadership is off racks {params['racks']} and brokers {params['brokers']}: "
              f"holding {params['hold_seconds']} s")
        time.sleep(params["hold_seconds"])

    restore = RestoreLeadershipOperator(
        task_id="restore",
        kafka_config_id=KAFKA_CONN_ID,
        record_uri=RECORD_URI,
        storage_conn_id=STORAGE_CONN_ID,
        timeout_s="{{ params.restore_timeout_s }}",
        execution_timeout=timedelta(hours=2),
    )

    evacuate >> maintenance() >> restore
# [END rack_maintenance]
