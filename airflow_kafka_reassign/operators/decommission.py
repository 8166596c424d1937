"""The end of a decommission: wait until the drained brokers are shut down, unregister them; or take them back.

A decommission is cordon -> plan -> approve -> drain -> verify -> (the broker is stopped, by you) -> unregister
(docs/decommission.md). PlanReassignment cordons and the execution drains; these tasks end the lifecycle:

* :class:`WaitForBrokerShutdownSensor` waits until each broker is shut down: DescribeCluster with fenced brokers
  (KIP-1073, Kafka 4.0+) lists it fenced, or not at all. Stopping the broker's process is yours to do (a
  controlled shutdown: ``kafka-server-stop``, your orchestrator); the sensor says which are still running.
* :class:`UnregisterBrokersOperator` unregisters each (UnregisterBroker, KRaft) and checks that DescribeCluster
  with fenced brokers no longer lists it: a broker that is never unregistered still counts, and gets new
  partitions assigned (KIP-1073). A broker still running is refused (Kafka would accept it and leave a running,
  unregistered broker behind); one already unregistered is done (a retry is fine).
* :class:`UncordonBrokersOperator` takes drained brokers back (a re-commission): it restores the cordons a plan's
  decommission set (from the plan's run state, exactly as before), or removes the brokers' cordons.
* :class:`RestoreCordonsOperator` is the clean-up of a plan that was never executed (rejected at approval, timed out,
  refused, or its plan task failed after cordoning): it restores the cordons the plan set, exactly; once the plan's
  moves were sent it changes nothing (the execution owns the cordons then). It runs whatever happened upstream
  (``trigger_rule="all_done"``): "Reject" on Airflow's approval skips the tasks after it, so no hook of the approval
  task can do this (on Airflow 3 its skip ends the task: ``DownstreamTasksSkipped``).

Example (the complete lifecycle is ``example_dags/kafka_decommission_brokers.py``)::

    shut_down = WaitForBrokerShutdownSensor(task_id="wait_for_shutdown", brokers=[7], mode="reschedule",
                                            poke_interval=30, timeout=6 * 3600)
    unregister = UnregisterBrokersOperator(task_id="unregister", brokers=[7])
    shut_down >> unregister

    # after the last task of the drain (all_done: it runs when approval was rejected, or the run failed before
    # execution too; then the cordons plan set go back)
    wait >> RestoreCordonsOperator(task_id="restore_cordons", plan_task_id="plan")
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException
from airflow.sdk import BaseOperator, BaseSensorOperator

from airflow_kafka_reassign.core.execution.cordon_release import release_unexecuted_cordons
from airflow_kafka_reassign.core.execution.finishing import release_idle_throttles
from airflow_kafka_reassign.core.maintenance.cordon import restore_cordons
from airflow_kafka_reassign.core.maintenance.lifecycle import broker_state, unregister
from airflow_kafka_reassign.core.records.lease import DEFAULT_TTL_S, LeaseHeldError, LeaseKeeper, task_lease_identity
from airflow_kafka_reassign.core.records.plan_io import read_plan
from airflow_kafka_reassign.core.records.store import StoreError
from airflow_kafka_reassign.exceptions import ConfigurationError, KafkaReassignError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators._base import as_bool, release_lease
from airflow_kafka_reassign.plan_storage import DEFAULT_TIMEOUT_S, open_store, plan_folder_uri, plan_store, run_state

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin


def _brokers(value: Any) -> list[int]:
    """Broker ids from a list (or a rendered Param); an empty or malformed value is named."""
    try:
        ids = sorted({int(b) for b in (value if isinstance(value, list | tuple | set) else [value])})
    except (TypeError, ValueError):
        raise ConfigurationError(f"brokers must be a list of broker ids, not {value!r}") from None
    if not ids or any(b < 0 for b in ids):
        raise ConfigurationError(f"brokers must be a non-empty list of broker ids (>= 0), not {value!r}")
    return ids


class _BrokerTask:
    kafka_config_id: str
    kafka_timeout_s: float

    def _admin(self) -> ClusterAdmin:
        return KafkaReassignHook(kafka_config_id=self.kafka_config_id, timeout_s=self.kafka_timeout_s).get_admin()


class WaitForBrokerShutdownSensor(_BrokerTask, BaseSensorOperator):
    """Wait until every broker of ``brokers`` is shut down (fenced, or no longer registered).

    :param brokers: the broker ids (a list, or a templated Param such as ``"{{ params.broker_ids }}"``).
    :param kafka_config_id: the ``kafka`` connection. Templated.
    :param kafka_timeout_s: bound on every request to the cluster.

    Each poke logs which brokers are still running. Use ``mode="reschedule"`` for long waits (no worker slot
    held); ``timeout`` bounds the wait. XCom: ``{"shut_down": [...], "states": {broker: "fenced" | "unregistered"}}``.
    """

    template_fields: Sequence[str] = ("brokers", "kafka_config_id")
    ui_color = "#e8e8f4"

    def __init__(self, *, brokers: Any, kafka_config_id: str = "kafka_default", kafka_timeout_s: float = 30.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.brokers = brokers
        self.kafka_config_id = kafka_config_id
        self.kafka_timeout_s = kafka_timeout_s

    def poke(self, context: Context) -> Any:
        from airflow.sdk import PokeReturnValue

        try:
            ids = _brokers(self.brokers)
        except ConfigurationError as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from None
        admin = self._admin()
        try:
            caps = admin.capabilities()
            if not caps.fenced_brokers and not caps.zookeeper_mode:
                raise AirflowFailException(
                    f"task {self.task_id}: the cluster cannot list fenced brokers (DescribeCluster v2, KIP-1073, Kafka "
                    "4.0+): a stopped broker cannot be told from a running one here; check the process by hand")
            if caps.zookeeper_mode:  # a stopped broker leaves the cluster: not listed is shut down
                self.log.info("this cluster runs %s: a broker that stops leaves the cluster (no fenced state); "
                              "not listed is shut down", caps.line_name())
            description = admin.describe_cluster(include_fenced=caps.fenced_brokers)
        finally:
            admin.close()
        states = {b: broker_state(description, b) for b in ids}
        running = [b for b, s in states.items() if s == "running"]
        if running:
            self.log.info("still running (DescribeCluster lists them unfenced): %s; stop them (a controlled "
                          "shutdown), this task goes on when they are fenced", running)
            return False
        self.log.info("shut down: %s", ", ".join(f"{b} ({s})" for b, s in states.items()))
        return PokeReturnValue(True, {"shut_down": ids, "states": {str(b): s for b, s in states.items()}})


class UnregisterBrokersOperator(_BrokerTask, BaseOperator):
    """Unregister shut-down brokers (UnregisterBroker, KRaft) and check that DescribeCluster no longer lists them.

    :param brokers: the broker ids (a list, or a templated Param). Templated.
    :param kafka_config_id: the ``kafka`` connection. Templated.
    :param dry_run: check each broker's state and log what would be sent; change nothing. Templated.
    :param kafka_timeout_s: bound on every request to the cluster.

    A broker still running is refused, nothing sent (stop it first: :class:`WaitForBrokerShutdownSensor`); one not
    registered any more is already done. XCom: ``{"unregistered": [...], "already": [...], "dry_run": bool}``.
    """

    template_fields: Sequence[str] = ("brokers", "kafka_config_id", "dry_run")
    ui_color = "#f4e8e8"

    def __init__(self, *, brokers: Any, kafka_config_id: str = "kafka_default", dry_run: Any = False,
                 kafka_timeout_s: float = 30.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.brokers = brokers
        self.kafka_config_id = kafka_config_id
        self.dry_run = dry_run
        self.kafka_timeout_s = kafka_timeout_s

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            ids = _brokers(self.brokers)
            dry = as_bool(self.dry_run, "dry_run")
        except ConfigurationError as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from None
        admin = self._admin()
        out: dict[str, Any] = {"unregistered": [], "already": [], "dry_run": dry}
        try:
            if dry:
                description = admin.describe_cluster(include_fenced=True)
                for b in ids:
                    state = broker_state(description, b)
                    what = {"running": "REFUSE (still running: stop it first)", "fenced": "send UnregisterBroker",
                            "unregistered": "nothing (not registered)"}[state]
                    self.log.info("DRY RUN: broker %s is %s: would %s", b, state, what)
                return out
            for b in ids:
                done = unregister(admin, b, log=self.log)
                out["already" if done.outcome == "already" else "unregistered"].append(b)
        except KafkaReassignError as e:  # still running, unsupported, refused by the controller: the same on a retry
            raise AirflowFailException(f"task {self.task_id}: {e}") from None
        finally:
            admin.close()
        self.log.info("unregistered %s (already not registered: %s); DescribeCluster with fenced brokers no longer "
                      "lists them", out["unregistered"], out["already"])
        return out


class UncordonBrokersOperator(_BrokerTask, BaseOperator):
    """Take drained brokers back (a re-commission): their cordons go.

    :param plan_uri: a decommission's plan directory: the cordons its plan set are restored exactly as they were
        before (from its run state); the way to undo a decommission that finished or was abandoned. Templated.
    :param brokers: without ``plan_uri``: remove these brokers' ``cordoned.log.dirs``. Templated.
    :param storage_conn_id: the connection of the plan's object storage.
    :param storage_timeout_s: bound on each request to the plan's storage.
    :param kafka_config_id: the ``kafka`` connection. Templated.
    :param kafka_timeout_s: bound on every request to the cluster.
    """

    template_fields: Sequence[str] = ("plan_uri", "brokers", "kafka_config_id", "storage_conn_id")
    ui_color = "#e8f4f0"

    def __init__(self, *, plan_uri: str | None = None, brokers: Any = None, kafka_config_id: str = "kafka_default",
                 storage_conn_id: str | None = None, storage_timeout_s: float = DEFAULT_TIMEOUT_S,
                 kafka_timeout_s: float = 30.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan_uri = plan_uri
        self.brokers = brokers
        self.kafka_config_id = kafka_config_id
        self.storage_conn_id = storage_conn_id
        self.storage_timeout_s = storage_timeout_s
        self.kafka_timeout_s = kafka_timeout_s

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            if not self.plan_uri and not self.brokers:
                raise ConfigurationError("give plan_uri (restore the cordons a decommission set) or brokers (remove "
                                         "their cordons)")
            state = run_state(plan_store(str(self.plan_uri), conn_id=self.storage_conn_id or None,
                                         timeout_s=float(self.storage_timeout_s))) if self.plan_uri else None
            ids = _brokers(self.brokers) if not self.plan_uri else []
        except (ConfigurationError, StoreError) as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from None
        admin = self._admin()
        try:
            if state is not None:
                restored = restore_cordons(admin, state, log=self.log)
                self.log.info("cordons %s", "restored as they were before the decommission" if restored
                              else "not restored: the plan's run state holds no cordon backup (nothing was cordoned)")
                return {"restored": restored}
            admin.set_cordons(dict.fromkeys(ids))
            self.log.info("cordoned.log.dirs removed on brokers %s", ids)
            return {"uncordoned": ids}
        except KafkaReassignError as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from None
        finally:
            admin.close()


class RestoreCordonsOperator(_BrokerTask, BaseOperator):
    """The clean-up of a run, whatever happened upstream: the cordons of a plan never executed go back exactly as they
    were, and no replication throttle stays behind for moves that are not in flight.

    PlanReassignment cordons (a decommission's brokers, a disk removal's log dirs) before its snapshot, long before
    anything is executed. When the plan's moves are never sent (a person rejected it, nobody answered the approval,
    execute refused it before sending, the plan task failed after cordoning), this task restores each broker's
    ``cordoned.log.dirs`` from the plan's backup (``<plan>/run/cordon-backup.json``), checks it and journals it,
    holding the plan's lease. Once any of the plan's moves was sent (the run's journal, or the cluster shows one done or
    in flight) it changes nothing: the execution owns the cordons then (a cancel or rollback restores them, a finished
    drain keeps them). A plan that moves nothing keeps them too (what it was to empty is already empty).

    Put it after the last task of the drain; its ``trigger_rule`` is ``"all_done"`` (it runs whatever happened
    upstream: "Reject" skips the tasks after the approval, a failure marks them upstream_failed). Not directly after
    the approval task: Airflow's approval skips its direct downstream tasks on "Reject", whatever their trigger rule.

    :param plan_task_id: the PlanReassignment task of this DAG (default ``"plan"``): its plan directory is the
        ``plan_uri`` it pushed to XCom, or, when it pushed none (it failed), its output location for this run.
    :param plan_uri: the plan directory, instead of ``plan_task_id``. Templated.
    :param kafka_config_id: the ``kafka`` connection. Templated.
    :param storage_conn_id: the connection of the plan's object storage. Templated.
    :param storage_timeout_s: bound on each request to the plan's storage.
    :param kafka_timeout_s: bound on every request to the cluster.
    :param lease_ttl_s: time to live of the plan's lease while the cordons are restored.
    :param trigger_rule: Airflow's trigger rule, ``"all_done"`` by default (see above: it must run after a
        rejection or a failure upstream).

    Then the replication throttles: when the run state still holds a throttle backup (the wait failed on its last
    try, a worker was lost) and none of the plan's moves is in flight, they are restored exactly; while moves are in
    flight they stay, and one warning names the tasks that restore them (the wait, or CancelReassignmentOperator).

    XCom: ``{"outcome": "restored" | "kept" | "none", "why": "...", "brokers": [...], "plan_uri": "...",
    "throttles": "restored" | "kept" | "none"}`` (and ``"throttles_why"`` when kept).
    """

    template_fields: Sequence[str] = ("plan_uri", "kafka_config_id", "storage_conn_id")
    ui_color = "#e8f4f0"

    def __init__(self, *, plan_task_id: str = "plan", plan_uri: str | None = None,
                 kafka_config_id: str = "kafka_default", storage_conn_id: str | None = None,
                 storage_timeout_s: float = DEFAULT_TIMEOUT_S, kafka_timeout_s: float = 30.0,
                 lease_ttl_s: float = DEFAULT_TTL_S, trigger_rule: str = "all_done", **kwargs: Any) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        self.plan_task_id = plan_task_id
        self.plan_uri = plan_uri
        self.kafka_config_id = kafka_config_id
        self.storage_conn_id = storage_conn_id
        self.storage_timeout_s = storage_timeout_s
        self.kafka_timeout_s = kafka_timeout_s
        self.lease_ttl_s = lease_ttl_s
        self._lease: LeaseKeeper | None = None

    def plan_location(self, context: Context) -> str | None:
        """The plan directory: ``plan_uri``, else the plan task's XCom, else its output location for this run."""
        if self.plan_uri:
            return str(self.plan_uri)
        ti = context.get("ti")
        for key in ("return_value", "plan"):  # "plan": a plan that moves nothing (skip_if_empty) pushes it there
            pushed = ti.xcom_pull(task_ids=self.plan_task_id, key=key) if ti is not None else None
            if isinstance(pushed, Mapping) and pushed.get("plan_uri"):
                return str(pushed["plan_uri"])
        dag = self.dag if self.has_dag() else None
        if dag is None or not dag.has_task(self.plan_task_id):
            return None
        task = dag.get_task(self.plan_task_id)
        if not callable(getattr(task, "output_location", None)):
            return None
        task = copy.copy(task)  # rendered here for its location only
        task.output_uri = self.render_template(task.output_uri, context)
        return f"{str(task.output_location(context)).rstrip('/')}/plan"

    def execute(self, context: Context) -> dict[str, Any]:
        location = self.plan_location(context)
        if not location:
            self.log.info("no plan directory (task %r pushed no plan_uri and is not a plan task of this DAG): nothing "
                          "was cordoned by it", self.plan_task_id)
            return {"outcome": "none", "why": "no plan directory", "brokers": [], "plan_uri": None}
        conn_id, timeout_s = self.storage_conn_id or None, float(self.storage_timeout_s)
        try:
            store = open_store(plan_folder_uri(location), conn_id=conn_id, timeout_s=timeout_s)
            state = run_state(store)
            try:
                plan = read_plan(store)
            except FileNotFoundError:  # the plan task failed before writing it
                plan = None
        except (ConfigurationError, StoreError, ValueError) as e:
            raise AirflowException(f"task {self.task_id}: the plan at {location} cannot be read: {e}; the cordons its "
                                   f"plan task set stay (UncordonBrokersOperator(plan_uri={location!r}) takes them "
                                   "back)") from e
        admin = self._admin()
        throttles: tuple[str, str] = ("none", "")
        try:
            done = release_unexecuted_cordons(admin, state, plan, before_restore=lambda: self._take_lease(state, context),
                                              log=self.log)
            # however the run ended (a wait failed on its last try, a worker lost): no throttle stays behind for
            # moves that are not in flight
            throttles = release_idle_throttles(
                admin, plan, state, plan_uri=location, log=self.log,
                before_restore=lambda: self._lease is None and self._take_lease(state, context))
        except LeaseHeldError as e:  # another run drives this plan: it owns the cordons and the throttles
            raise AirflowFailException(f"task {self.task_id}: {e}") from e
        except (KafkaReassignError, StoreError, RuntimeError) as e:  # the backup stays: a retry, or by hand
            raise AirflowException(
                f"task {self.task_id}: the cordons of {location} could not be restored: {e}; the backup stays in "
                f"{state.uri.rstrip('/')}: run this task again, or UncordonBrokersOperator(plan_uri={location!r})") from e
        finally:
            admin.close()
            self._release_lease()
        self.log.info("cordons %s: %s", done.outcome, done.why)
        if throttles[0] != "none":
            (self.log.warning if throttles[0] == "kept" else self.log.info)("throttles %s: %s", *throttles)
        return {**done.summary(), "plan_uri": location, "throttles": throttles[0],
                **({"throttles_why": throttles[1]} if throttles[0] == "kept" else {})}

    def _take_lease(self, state: Any, context: Context) -> None:
        holder, scope = task_lease_identity(context, self.task_id)
        self._lease = LeaseKeeper.take(state, holder=holder, scope=scope, ttl_s=float(self.lease_ttl_s), log=self.log)

    def _release_lease(self) -> None:
        lease, self._lease = self._lease, None
        release_lease(lease, self.log)
