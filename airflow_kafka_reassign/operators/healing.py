"""The healing tasks: decide on the incidents of a run, check the plan against the budget, record how it ended.

A healing DAG (example_dags/kafka_heal_*.py, docs/self-healing.md) is scheduled on incident assets (an ``Asset`` with
``watchers=[AssetWatcher(name, KafkaClusterWatchTrigger(...))]``) and runs the existing operators around three thin
tasks of this module:

* :class:`HealingDecisionOperator` (first) reads the incidents of the run (every
  ``triggering_asset_events[asset][i].extra["payload"]``: Airflow batches the events that arrived before the run
  started; or ``dag_run.conf["incidents"]``, a list of payloads, to replay one by hand), reads the live cluster and
  decides (:func:`~airflow_kafka_reassign.core.healing.decide.decide`). XCom ``return_value``::

      {"action": "drain", "brokers": [5], "log_dirs": [], "cordon": false, "cordons": {}, "dry_run": false,
       "require_approval": false, "incidents": ["kafka_default/broker_down/b5/20261202T070000Z"],
       "reason": "drain broker(s) [5]", "notes": [...], "outcomes": [...]}

  Nothing to do skips the downstream tasks (the outcomes say why). Another writer at work, or an imbalance outside
  its window, makes it wait (a sensor, ``mode="reschedule"``: no worker slot meanwhile) and ask again;
* :class:`HealingBudgetOperator` (after the plan) charges the plan's bytes to the incidents and the day, and checks
  that the incidents still hold (a plan waited for, an approval waited for): over budget or stale, it skips the rest;
* :class:`HealingOutcomeOperator` (last, ``trigger_rule="all_done"``) records how the run ended (``done`` when the
  confirming task returned, else ``failed``: the next event for the incident may try again, within the budget) and,
  done, the cordons the run leaves (the decision's ``cordons``: a cordon there is healing's only while it is the one
  healing left).

State: the healing ledger on the plan storage (``<state_uri>/healing/<cluster>``; core/healing/ledger.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.common.compat.sdk import AirflowSkipException
from airflow.sdk import BaseOperator, BaseSensorOperator, Context, PokeReturnValue

from airflow_kafka_reassign.core.healing.decide import decide, stale_reason
from airflow_kafka_reassign.core.healing.incident import Incident
from airflow_kafka_reassign.core.healing.ledger import HealingLedger, ledger_folder, outcome
from airflow_kafka_reassign.core.healing.policy import HealingPolicy
from airflow_kafka_reassign.core.healing.view import ClusterView, cluster_view
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.plan_storage import DEFAULT_TIMEOUT_S, default_output_root, open_store, safe_name


def healing_ledger(state_uri: str | None, cluster: str, *, conn_id: str | None = None,
                   timeout_s: float = DEFAULT_TIMEOUT_S, log: Any = None) -> HealingLedger:
    """The ledger of ``cluster`` under ``state_uri`` (``""``: ``$AKR_OUTPUT_DIR``, one machine only)."""
    base = (state_uri or "").rstrip("/") or str(default_output_root())
    return HealingLedger(open_store(f"{base}/{ledger_folder(safe_name(cluster))}", conn_id=conn_id or None,
                                    timeout_s=timeout_s), log=log)


def incidents_of(context: Context) -> list[Incident]:
    """The incidents of this run: every triggering asset event's ``extra["payload"]``, then ``conf["incidents"]``."""
    payloads: list[Mapping[str, Any]] = []
    events = context.get("triggering_asset_events") or {}
    for _asset, items in dict(events).items():
        for event in items or ():
            extra = getattr(event, "extra", None) or {}
            if isinstance(extra.get("payload"), Mapping):
                payloads.append(extra["payload"])
    conf = getattr(context.get("dag_run"), "conf", None) or {}
    payloads.extend(p for p in (conf.get("incidents") or ()) if isinstance(p, Mapping))
    return [Incident.from_payload(p) for p in payloads]


def _policy(value: HealingPolicy | Mapping[str, Any] | None) -> HealingPolicy:
    if value is None:
        return HealingPolicy()
    return value if isinstance(value, HealingPolicy) else HealingPolicy.model_validate(dict(value))


class _Healing:
    """Where the healing tasks find the cluster and its ledger."""

    kafka_config_id: str
    cluster: str | None
    state_uri: str
    storage_conn_id: str
    storage_timeout_s: float
    kafka_timeout_s: float

    def _keep_locations(self, kafka_config_id: str, cluster: str | None, state_uri: str, storage_conn_id: str,
                        storage_timeout_s: float, kafka_timeout_s: float = 30.0) -> None:
        self.kafka_config_id = kafka_config_id
        self.cluster = cluster
        self.state_uri = state_uri
        self.storage_conn_id = storage_conn_id
        self.storage_timeout_s = float(storage_timeout_s)
        self.kafka_timeout_s = float(kafka_timeout_s)

    def ledger(self, log: Any) -> HealingLedger:
        return healing_ledger(self.state_uri, self.cluster or self.kafka_config_id, conn_id=self.storage_conn_id,
                              timeout_s=self.storage_timeout_s, log=log)

    def view(self, *, with_dirs: bool) -> ClusterView:
        """The live cluster as a healing decision reads it (core/healing/view.py)."""
        admin = KafkaReassignHook(kafka_config_id=self.kafka_config_id, timeout_s=self.kafka_timeout_s).get_admin()
        try:
            return cluster_view(admin, with_dirs=with_dirs)
        finally:
            admin.close()


class HealingDecisionOperator(_Healing, BaseSensorOperator):
    """Decide what a healing run does for its incidents (see the module docstring).

    :param kinds: the incident kinds this DAG heals (others in the run are recorded stale).
    :param policy: the guards (:class:`~airflow_kafka_reassign.core.healing.policy.HealingPolicy` or its dict).
    :param kafka_config_id: the ``kafka`` connection. Templated.
    :param cluster: the cluster's label in the incidents (default: ``kafka_config_id``, as the watch's).
    :param state_uri: the plan storage folder that holds ``healing/<cluster>`` (``""``: ``$AKR_OUTPUT_DIR``).
        Templated.
    :param storage_conn_id: its connection (an ``aws`` connection for S3). Templated.
    """

    template_fields: Sequence[str] = ("kafka_config_id", "state_uri", "storage_conn_id")
    ui_color = "#fde8e8"

    def __init__(self, *, kinds: Sequence[str], policy: HealingPolicy | Mapping[str, Any] | None = None,
                 kafka_config_id: str = "kafka_default", cluster: str | None = None, state_uri: str = "",
                 storage_conn_id: str = "", storage_timeout_s: float = DEFAULT_TIMEOUT_S,
                 kafka_timeout_s: float = 30.0, **kwargs: Any) -> None:
        self.policy = _policy(policy)
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 60)
        kwargs.setdefault("timeout", self.policy.max_wait_s + 3600)  # decide() gives up first, with an outcome
        super().__init__(**kwargs)
        self.kinds = tuple(kinds)
        self._keep_locations(kafka_config_id, cluster, state_uri, storage_conn_id, storage_timeout_s, kafka_timeout_s)

    def poke(self, context: Context) -> PokeReturnValue | bool:
        now = datetime.now(timezone.utc)
        ledger = self.ledger(self.log)
        incidents = incidents_of(context)
        run_id = str(context["run_id"])
        if not incidents:
            raise AirflowSkipException("this run carries no incident (no asset event payload, no conf['incidents']): "
                                       "nothing to heal")
        ti = context["ti"]
        since = ledger.waiting_since(run_id)
        view = self.view(with_dirs=any(i.dirs for i in incidents))
        decision = decide(incidents, view, self.policy, ledger, run_id=run_id, now=now,
                          cluster=self.cluster or self.kafka_config_id, kinds=self.kinds, waiting_since=since)
        if decision.wait:
            if ledger.start_wait(run_id, now):  # the wait is recorded once, not at every poke
                for incident in incidents:
                    ledger.record(outcome(incident, "window" if "window" in decision.wait else "writer",
                                          f"waits: {decision.wait}", at=now, run_id=run_id))
            self.log.info("healing waits: %s; asks again in %s s", decision.wait, self.poke_interval)
            return False
        for line in decision.notes:
            self.log.warning("%s", line)
        if decision.action == "none":
            ti.xcom_push(key="return_value", value=decision.xcom())
            raise AirflowSkipException(f"healing does nothing: {decision.reason}")
        self.log.info("healing decision: %s for incident(s) %s%s", decision.reason, list(decision.incidents),
                      " (DRY RUN)" if decision.dry_run else "")
        return PokeReturnValue(is_done=True, xcom_value=decision.xcom())


class HealingBudgetOperator(_Healing, BaseOperator):
    """After the plan: charge its bytes to the run's incidents and the day, and check that they still hold.

    :param decision: the decision task's XCom (``"{{ ti.xcom_pull(task_ids='decide') }}"``). Templated.
    :param plan: the plan task's XCom (``"{{ ti.xcom_pull(task_ids='plan') }}"``). Templated.
    The other parameters as :class:`HealingDecisionOperator`'s.
    """

    template_fields: Sequence[str] = ("decision", "plan", "kafka_config_id", "state_uri", "storage_conn_id")
    ui_color = "#fde8e8"

    def __init__(self, *, decision: Any, plan: Any, policy: HealingPolicy | Mapping[str, Any] | None = None,
                 kafka_config_id: str = "kafka_default", cluster: str | None = None, state_uri: str = "",
                 storage_conn_id: str = "", storage_timeout_s: float = DEFAULT_TIMEOUT_S,
                 kafka_timeout_s: float = 30.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.decision = decision
        self.plan = plan
        self.policy = _policy(policy)
        self._keep_locations(kafka_config_id, cluster, state_uri, storage_conn_id, storage_timeout_s, kafka_timeout_s)

    def execute(self, context: Context) -> dict[str, Any]:
        now = datetime.now(timezone.utc)
        ledger = self.ledger(self.log)
        run_id = str(context["run_id"])
        ids = list((self.decision or {}).get("incidents") or [])
        claims = [c for c in (ledger.read_claim(i) for i in ids) if c is not None]
        planned = int((self.plan or {}).get("bytes_to_move") or 0)
        view = self.view(with_dirs=any(c.incident.dirs for c in claims))
        stale = [(c.incident, why) for c in claims for still, why in [stale_reason(c.incident, view, self.policy)]
                 if still is None]
        if claims and len(stale) == len(claims):
            for incident, why in stale:
                ledger.record(outcome(incident, "stale", f"no longer holds after the plan: {why}", at=now,
                                      run_id=run_id))
            ledger.finish(ids, run_id, "done")
            raise AirflowSkipException(f"the incidents no longer hold: {'; '.join(w for _, w in stale)}")
        refused = ledger.charge_bytes(ids, run_id, planned, self.policy.budget, now)
        if refused:
            for c in claims:
                ledger.record(outcome(c.incident, "budget", refused, at=now, run_id=run_id))
            ledger.finish(ids, run_id, "failed")
            raise AirflowSkipException(f"healing budget: {refused}")
        self.log.info("healing budget: %s byte(s) planned for incident(s) %s, within the budget", planned, ids)
        return {"bytes_to_move": planned, "incidents": ids}


class HealingOutcomeOperator(_Healing, BaseOperator):
    """Record how the healing run ended (``trigger_rule="all_done"``): ``done`` when ``done_task_id`` returned a
    value, else ``failed`` (the next event for the incident may try again, within the budget).

    :param decision: the decision task's XCom. Templated.
    :param done_task_id: the task whose result confirms the end state (``verify_drained``, ``wait`` ...).
    """

    template_fields: Sequence[str] = ("decision", "state_uri", "storage_conn_id")
    ui_color = "#fde8e8"

    def __init__(self, *, decision: Any, done_task_id: str, kafka_config_id: str = "kafka_default",
                 cluster: str | None = None, state_uri: str = "", storage_conn_id: str = "",
                 storage_timeout_s: float = DEFAULT_TIMEOUT_S, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.decision = decision
        self.done_task_id = done_task_id
        self._keep_locations(kafka_config_id, cluster, state_uri, storage_conn_id, storage_timeout_s)

    def execute(self, context: Context) -> dict[str, Any]:
        decision = self.decision or {}
        ids = list(decision.get("incidents") or [])
        if not ids:
            return {"status": "nothing", "incidents": []}
        now = datetime.now(timezone.utc)
        ledger = self.ledger(self.log)
        run_id = str(context["run_id"])
        confirmed = context["ti"].xcom_pull(task_ids=self.done_task_id)
        status = "done" if confirmed is not None else "failed"
        # a finished run keeps what it cordoned (a drained broker, an emptied dir): its claims say so, so that a
        # cordon there is healing's only while it is the one healing left (core/healing/decide.py, healing_cordons)
        changed = ledger.finish(ids, run_id, status, cordons=decision.get("cordons") if status == "done" else None)
        for incident_id in changed:
            claim = ledger.read_claim(incident_id)
            if claim is None:
                continue
            why = (f"{decision.get('reason')}: confirmed by {self.done_task_id}" if status == "done" else
                   f"{decision.get('reason')}: the run ended before {self.done_task_id} confirmed it (a failure, a "
                   "rejected or unanswered approval, a dry run, or a skip: see the run's tasks); the next event for "
                   "this incident may try again, within the budget")
            ledger.record(outcome(claim.incident, status, why, at=now, run_id=run_id))
        return {"status": status, "incidents": changed}


def approval_defaults(policy: HealingPolicy, kind: str) -> dict[str, Any]:
    """The approval task's ``response_timeout`` and ``defaults`` (the option an unanswered approval becomes) for an
    incident kind: ``PlanApprovalOperator(..., **approval_defaults(POLICY, "broker_down"))``."""
    k = policy.kind(kind)
    return {"response_timeout": timedelta(seconds=k.approval_timeout_s),
            "defaults": "Approve" if k.on_timeout == "approve" else "Reject"}
