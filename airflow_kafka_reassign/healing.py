"""Self-healing DAGs: incident assets watched by :class:`KafkaClusterWatchTrigger`, and the DAG that heals them.

The example DAGs ``example_dags/kafka_heal_*.py`` are each a :func:`healing_dag` call: one incident asset (or a few),
one action and a :class:`~airflow_kafka_reassign.core.healing.policy.HealingPolicy`. The DAG is the existing
maintenance operators behind the healing tasks (operators/healing.py)::

    decide -> plan -> budget -> approve -> execute -> [not a dry run] -> wait -> [verify] -> record
                                                          `-> restore_cordons (all_done)

* ``decide``: the incidents of the run against the live cluster and the guards (skips the rest when nothing is to
  be done; waits, in reschedule mode, while another writer works or the window is closed);
* ``plan``: ``remove-brokers`` (drain), ``remove-disks``, ``add-brokers`` (scale-out) or ``rebalance`` on what the
  decision named; cordons where the decision says a config can be written; never ``unregister``;
* ``budget``: the plan's bytes against the budget, the incidents re-checked against the cluster;
* ``approve``: asked only where the kind's mode is ``approve``; an unanswered approval becomes the policy's
  ``on_timeout`` after its ``approval_timeout_s``;
* ``execute`` / ``wait``: under a throttle, as the manual DAGs; ``dry_run`` logs the requests and stops;
* ``record`` (all_done): ``done`` or ``failed`` on the ledger.

See docs/self-healing.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_kafka_reassign.core.healing.decide import Action
from airflow_kafka_reassign.core.healing.policy import HealingPolicy
from airflow_kafka_reassign.operators.approval import PlanApprovalOperator
from airflow_kafka_reassign.operators.decommission import RestoreCordonsOperator
from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
from airflow_kafka_reassign.operators.healing import (
    HealingBudgetOperator,
    HealingDecisionOperator,
    HealingOutcomeOperator,
    approval_defaults,
)
from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator
from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor
from airflow_kafka_reassign.triggers.cluster_watch import KafkaClusterWatchTrigger

#: Where the watch state, the healing ledger and the plans go: the Airflow Variable ``akr_plan_storage`` (an object
#: storage prefix in production: every worker and the triggerer read it) and its connection ``akr_storage_conn_id``.
STATE_URI = "{{ var.value.get('akr_plan_storage', '') }}"
STORAGE_CONN_ID = "{{ var.value.get('akr_storage_conn_id', '') }}"
PLAN_STORAGE = (
    "{% set base = var.value.get('akr_plan_storage', '') %}"
    "{{ (base.rstrip('/') ~ '/' ~ dag.dag_id ~ '/' ~ run_id) if base else '' }}"
)
DECISION = "{{ ti.xcom_pull(task_ids='decide') }}"
PLAN_URI = "{{ ti.xcom_pull(task_ids='plan')['plan_uri'] }}"
GOAL: dict[str, str] = {"drain": "remove-brokers", "remove_disks": "remove-disks", "scale_out": "add-brokers",
                        "rebalance": "rebalance"}


#: The environment variables a deployment sets (where the DAG files are parsed: the DAG processor) to tune every
#: healing DAG's watch without editing its file: ``{variable: (trigger argument, parser)}``. The dwell and recovery
#: times are JSON objects of seconds per kind, merged over the DAG file's (``{"broker_down": 1800}``: rolling
#: restarts of this cluster take 20 minutes).
WATCH_ENV: dict[str, tuple[str, Any]] = {
    "AKR_WATCH_STATE_URI": ("state_uri", str),
    "AKR_WATCH_STORAGE_CONN_ID": ("storage_conn_id", str),
    "AKR_WATCH_DWELL_S": ("dwell_s", json.loads),
    "AKR_WATCH_RECOVERY_S": ("recovery_s", json.loads),
    "AKR_WATCH_POLL_INTERVAL_S": ("poll_interval_s", float),
    "AKR_WATCH_REFIRE_AFTER_S": ("refire_after_s", float),
}


def watch_settings_from_env(watch: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``watch`` (the trigger's arguments in a DAG file) with the deployment's :data:`WATCH_ENV` over them: the
    ``dwell_s`` / ``recovery_s`` objects merged per kind, the others replaced. A value that does not parse fails the
    DAG's import, naming the variable."""
    env = os.environ if environ is None else environ
    out = dict(watch)
    for variable, (argument, parse) in WATCH_ENV.items():
        raw = (env.get(variable) or "").strip()
        if not raw:
            continue
        try:
            value = parse(raw)
        except ValueError as e:
            raise ValueError(f"the environment variable {variable}={raw!r} does not parse ({e}): "
                             + ("a JSON object of seconds per incident kind, e.g. {\"broker_down\": 1800}"
                                if parse is json.loads else "a number of seconds" if parse is float else "")) from None
        if parse is json.loads:
            if not isinstance(value, dict):
                raise ValueError(f"the environment variable {variable}={raw!r} is not a JSON object of seconds per "
                                 "incident kind, e.g. {\"broker_down\": 1800}")
            value = {**(out.get(argument) or {}), **value}
        out[argument] = value
    return out


def incident_asset(kinds: Sequence[str], *, kafka_conn_id: str = "kafka_default", state_uri: str | None = None,
                   name: str | None = None, **watch: Any) -> Asset:
    """An incident asset ``kafka_reassign.<conn>.incidents.<kinds>`` watched by one
    :class:`~airflow_kafka_reassign.triggers.cluster_watch.KafkaClusterWatchTrigger` of these kinds. ``state_uri``
    (``None``: the plan storage of the Variables ``akr_plan_storage`` / ``akr_storage_conn_id``, read by the
    triggerer, as the healing tasks read it) must be a real location, not a template: the triggerer renders none.
    ``watch``: the trigger's other arguments (``dwell_s``, ``recovery_s``, ``poll_interval_s``, ``storage_conn_id``
    ...); :func:`watch_settings_from_env` merges the deployment's own over them."""
    label = name or f"kafka_reassign.{kafka_conn_id}.incidents.{'+'.join(kinds)}"
    watch = watch_settings_from_env(watch)
    state_uri = watch.pop("state_uri", None) or state_uri
    trigger = KafkaClusterWatchTrigger(kafka_conn_id=kafka_conn_id, state_uri=state_uri, kinds=list(kinds), **watch)
    return Asset(label, watchers=[AssetWatcher(name=label.replace(".", "_").replace("+", "_"), trigger=trigger)])


def healing_dag(dag_id: str, *, action: Action, kinds: Sequence[str], assets: Sequence[Asset],
                policy: HealingPolicy, kafka_conn_id: str = "kafka_default", throttle_bytes_per_sec: int = 50_000_000,
                max_moves_per_broker: int = 2, poke_interval: float = 60, wait_poke_interval: float = 15,
                doc_md: str | None = None) -> DAG:
    """The healing DAG of ``action`` for incidents of ``kinds`` (see the module docstring)."""
    kind = kinds[0]
    with DAG(
        dag_id=dag_id,
        description=f"Self-healing: {action} on {', '.join(kinds)} incidents",
        schedule=list(assets),
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,  # one healing run per DAG at a time; events that arrive meanwhile wait for the next run
        dagrun_timeout=timedelta(seconds=policy.max_wait_s) + timedelta(hours=12),
        default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
        render_template_as_native_obj=True,
        doc_md=doc_md,
        tags=["kafka", "self-healing"],
    ) as dag:
        common = {"kafka_config_id": kafka_conn_id, "storage_conn_id": STORAGE_CONN_ID}
        ledger = {"kafka_config_id": kafka_conn_id, "state_uri": STATE_URI, "storage_conn_id": STORAGE_CONN_ID}
        decide = HealingDecisionOperator(task_id="decide", kinds=kinds, policy=policy, poke_interval=poke_interval,
                                         **ledger)
        dry_run = "{{ ti.xcom_pull(task_ids='decide')['dry_run'] }}"
        plan = PlanReassignmentOperator(
            task_id="plan", output_uri=PLAN_STORAGE, goal=GOAL[action],
            brokers="{{ ti.xcom_pull(task_ids='decide')['brokers'] if ti.xcom_pull(task_ids='decide')['action'] "
                    "in ('drain', 'scale_out') else [] }}",
            log_dirs="{{ ti.xcom_pull(task_ids='decide')['log_dirs'] }}" if action == "remove_disks" else None,
            cordon="{{ ti.xcom_pull(task_ids='decide')['cordon'] and not ti.xcom_pull(task_ids='decide')['dry_run'] }}",
            # a failed broker that is a combined KRaft voter: draining its replicas costs the quorum nothing (healing
            # never stops nor unregisters it); the guard still refuses when too few voters would be left
            allow_voter_removal=action == "drain",
            use_sizes=True, skip_if_empty=True, execution_timeout=timedelta(minutes=30), **common)
        budget = HealingBudgetOperator(task_id="budget", decision=DECISION, plan="{{ ti.xcom_pull(task_ids='plan') }}",
                                       policy=policy, retries=0, **ledger)
        approve = PlanApprovalOperator(
            task_id="approve", plan="{{ ti.xcom_pull(task_ids='plan') }}",
            required="{{ ti.xcom_pull(task_ids='decide')['require_approval'] and not "
                     "ti.xcom_pull(task_ids='decide')['dry_run'] }}",
            subject=f"Self-healing ({', '.join(kinds)}): " + "{{ ti.xcom_pull(task_ids='decide')['reason'] }}?",
            retries=0, **approval_defaults(policy, kind))
        limits = {"throttle_bytes_per_sec": throttle_bytes_per_sec, "max_moves_per_broker": max_moves_per_broker}
        execute = ExecuteReassignmentOperator(
            task_id="execute", plan_uri=PLAN_URI, dry_run=dry_run, elect_leaders=action != "remove_disks",
            approval="{{ ti.xcom_pull(task_ids='approve') }}", max_snapshot_age=timedelta(hours=2),
            wait_for_completion=action == "remove_disks", execution_timeout=timedelta(hours=12 if action ==
                                                                                     "remove_disks" else 0.5),
            **limits, **common)
        restore = RestoreCordonsOperator(task_id="restore_cordons", plan_task_id="plan", trigger_rule="all_done",
                                         **common)
        decide >> plan >> budget >> approve >> execute
        if action == "remove_disks":
            done_task = "execute"
            execute >> restore
            last: Any = execute
        else:
            @task.short_circuit(retries=0)
            def not_a_dry_run(decision: dict | None = None) -> bool:
                """A dry run ends after ``execute`` logged the requests."""
                return not (decision or {}).get("dry_run")

            wait = WaitForReassignmentSensor(
                task_id="wait", plan_uri=PLAN_URI, deferrable=True, submit_pending=True, elect_leaders=True,
                poke_interval=wait_poke_interval, timeout=timedelta(hours=10), stuck_after=timedelta(minutes=15),
                on_timeout="leave", **limits, **common)
            execute >> not_a_dry_run(DECISION) >> wait
            wait >> restore
            done_task, last = "wait", wait
            if action == "drain":
                @task(retries=0)
                def verify_drained(decision: dict | None = None) -> dict:
                    """The drained brokers hold no replica (the second look, from a fresh snapshot)."""
                    from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook

                    brokers = set((decision or {}).get("brokers") or ())
                    admin = KafkaReassignHook(kafka_config_id=kafka_conn_id).get_admin()
                    try:
                        left = [str(p.tp) for p in admin.snapshot().partitions if brokers & set(p.replicas)]
                    finally:
                        admin.close()
                    if left:
                        raise RuntimeError(f"{len(left)} partition(s) still have replicas on brokers {sorted(brokers)}: "
                                           f"{left[:20]}; the next incident event (or a manual run) drains them")
                    print(f"brokers {sorted(brokers)} hold no replica; they are not unregistered: a broker that comes "
                          "back is given its share by the scale-out rebalance (its empty_broker incident)")
                    return {"drained": sorted(brokers)}

                last = verify_drained(DECISION)
                wait >> last
                done_task = "verify_drained"
        record = HealingOutcomeOperator(task_id="record", decision=DECISION, done_task_id=done_task, retries=2,
                                        **ledger)
        last >> record
        restore >> record
    return dag
