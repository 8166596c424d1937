"""CancelReassignmentOperator: cancel a plan's in-flight moves (KIP-455), clear its throttles, roll back.

Example (docs/execute.md)::

    cancel = CancelReassignmentOperator(
        task_id="cancel",
        plan_uri="{{ ti.xcom_pull(task_ids='plan')['plan_uri'] }}",
        kafka_config_id="kafka_prod",
        rollback=True,                 # then move the finished partitions back (rollback.json)
        throttle_bytes_per_sec=20_000_000,
        trigger_rule="one_failed",     # for example: clean up when the execution failed
    )

A cancel stops a move; it is not a revert (KIP-455): replicas that had already joined may stay,
leaving a partition with a higher replication factor than before. The operator reports those
partitions (XCom ``rf_changed`` and a warning each). Kafka's cancel also rebuilds each partition's
replica order from the controller's merged list (``[1, 2, 3]`` may come back as ``[3, 1, 2]``:
another preferred leader): the operator puts each back in the order the plan recorded, with a
reassignment to the same replicas that copies no data (XCom ``reordered``), and reports any
partition whose order or leader still differs (``order_changed``, ``leader_changed``). Only reassignments heading to exactly a
plan move's target are cancelled, unless ``cancel_all=True`` cancels every reassignment in the
cluster. The run's throttles (``<plan dir>/run``) are restored exactly as they were before the run, and so are its
cordons (a decommission's, a disk removal's), right after Kafka's cancel and before the reorder: Kafka 4.4 refuses a
reassignment naming a broker whose log dirs are all cordoned, a reorder included.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk import BaseOperator

from airflow_kafka_reassign.core.execution import ExecutionConfig, cancel_then_roll_back
from airflow_kafka_reassign.core.records.lease import DEFAULT_TTL_S, LeaseLostError
from airflow_kafka_reassign.core.records.plan_io import read_plan, read_rollback
from airflow_kafka_reassign.core.records.store import Store, StoreError
from airflow_kafka_reassign.core.vocabulary.durations import deadline as parse_deadline
from airflow_kafka_reassign.exceptions import ClusterAccessError, ConfigurationError, GuardRefusedError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators._base import ExecutionTask, execution_settings
from airflow_kafka_reassign.plan_storage import DEFAULT_TIMEOUT_S, open_store, plan_store, run_state

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin


class CancelReassignmentOperator(ExecutionTask, BaseOperator):
    """Cancel the plan's in-flight moves (or all), restore the run's throttles, optionally roll back.

    :param plan_uri: the plan directory (as for ExecuteReassignment). Templated. Optional with
        ``cancel_all=True``.
    :param kafka_config_id: the ``kafka`` connection. Templated.
    :param cancel_all: cancel EVERY reassignment in flight in the cluster, not only the plan's.
    :param rollback: after the cancel, execute the plan directory's ``rollback.json`` (every
        moved partition back to the replicas it had before the plan), with the limits, throttle
        and guards below, and wait for it (until ``deadline``).
    :param state_dir: the run's state folder (default ``<plan>/run``). Templated.
    :param storage_conn_id: the connection of the plan's object storage (as for ExecuteReassignment).
    :param storage_timeout_s: bound on each request to the plan's storage.
    :param lease_ttl_s: the plan's lease (as for ExecuteReassignment): a cancel of a plan that
        another DAG run drives is refused until its lease expires; ``cancel_all`` without a plan
        takes none.

    :param execution: the settings of the rollback (:class:`~airflow_kafka_reassign.core.execution.ExecutionConfig`,
        or its fields as keyword arguments: ``throttle_bytes_per_sec``, ``max_moves_per_broker``, ``rf_guard``, ...);
        they mean what they mean for ExecuteReassignment (the rollback is refused whole, before anything is sent,
        on a plan error by default). ``rf_guard`` and ``dry_run`` (log what would be cancelled and the rollback's
        first requests; change nothing) also apply to the cancel. Templated.
    :param deadline / poll_interval / kafka_timeout_s: as for ExecuteReassignment; used by the rollback.

    XCom (``return_value``): ``{"cancelled", "not_in_flight", "failed", "rf_changed",
    "not_reverted", "reordered", "order_changed", "leader_changed", "order_held", "throttles_restored", "cordons_restored",
    "rollback": {...} | None}`` (see :class:`~airflow_kafka_reassign.core.execution.cancel.CancelResult`).
    The task fails (after doing everything it could) when a cancel failed, when a cancelled
    partition is left off its replicas before (another RF, other brokers, another order) and no
    finished rollback put it back, or when the rollback refused a move.
    """

    template_fields: Sequence[str] = ("plan_uri", "kafka_config_id", "deadline", "state_dir", "storage_conn_id",
                                      "execution")
    ui_color = "#f8d7da"

    def __init__(
        self,
        *,
        plan_uri: str | None = None,
        kafka_config_id: str = "kafka_default",
        cancel_all: bool = False,
        rollback: bool = False,
        execution: ExecutionConfig | dict[str, Any] | None = None,
        deadline: Any = None,
        poll_interval: float = 5.0,
        state_dir: str | None = None,
        kafka_timeout_s: float = 30.0,
        storage_conn_id: str | None = None,
        storage_timeout_s: float = DEFAULT_TIMEOUT_S,
        lease_ttl_s: float = DEFAULT_TTL_S,
        **kwargs: Any,
    ) -> None:
        settings = execution_settings(kwargs)
        super().__init__(**kwargs)
        self._take_execution(execution, settings)
        self.plan_uri = plan_uri
        self.kafka_config_id = kafka_config_id
        self.storage_conn_id = storage_conn_id
        self.storage_timeout_s = storage_timeout_s
        self.lease_ttl_s = lease_ttl_s
        self.cancel_all = cancel_all
        self.rollback = rollback
        self.deadline = deadline
        self.poll_interval = poll_interval
        self.state_dir = state_dir
        self.kafka_timeout_s = kafka_timeout_s

    def _admin(self) -> ClusterAdmin:
        return KafkaReassignHook(kafka_config_id=self.kafka_config_id, timeout_s=self.kafka_timeout_s).get_admin()

    def execute(self, context: Context) -> dict[str, Any]:
        timeout = float(self.storage_timeout_s)
        try:
            store = plan_store(str(self.plan_uri), conn_id=self.storage_conn_id or None,
                               timeout_s=timeout) if self.plan_uri else None
            if store is None and not self.cancel_all:
                raise ConfigurationError("give plan_uri (cancel that plan's moves) or cancel_all=True (cancel every "
                                         "reassignment in the cluster)")
            if store is None and self.rollback:
                raise ConfigurationError("rollback=True needs plan_uri: the rollback plan is its rollback.json")
            plan = read_plan(store) if store is not None else None
            rollback_plan = read_rollback(store) if store is not None and self.rollback else None
            config = self.execution_config()
            options = config.options(default_disk_reserve=self.default_disk_reserve())
            deadline = parse_deadline(self.deadline, now=datetime.now(timezone.utc))
            state: Store | None = (
                run_state(store, self.state_dir, conn_id=self.storage_conn_id or None, timeout_s=timeout)
                if store is not None
                else open_store(self.state_dir, conn_id=self.storage_conn_id or None, timeout_s=timeout)
                if self.state_dir else None
            )
        except (ConfigurationError, StoreError, FileNotFoundError, ValueError) as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from e
        lease = (self._take_lease(state, context, float(self.lease_ttl_s))
                 if state is not None and store is not None and not options.dry_run else None)

        admin = self._admin()
        try:
            if rollback_plan is not None and state is not None:
                self._running = (rollback_plan, options, state)
            outcome = cancel_then_roll_back(
                admin, plan, config, state_dir=state, rollback=rollback_plan, cancel_all=bool(self.cancel_all),
                lease=lease, deadline=deadline, poll_interval_s=float(self.poll_interval),
                should_stop=self._should_stop, default_disk_reserve=self.default_disk_reserve(), log=self.log)
        except (GuardRefusedError, LeaseLostError, ClusterAccessError) as e:  # the same again on a retry
            raise AirflowFailException(f"task {self.task_id}: {e}") from e
        finally:
            self._running = None
            admin.close()
            self._release_lease()

        result, rolled = outcome.cancel, outcome.rollback
        summary: dict[str, Any] = {"plan_uri": store.uri if store else None, **result.summary(),
                                   "cordons_restored": outcome.cordons_restored,
                                   "rollback": rolled.summary() if rolled is not None else None}
        # a partition the cancel left off its replicas (count, brokers, order) is put back by a rollback that finished
        problems = result.problems(placement=rolled is None or not rolled.status.ok)
        rollback_problem = outcome.rollback_problem()
        if rollback_problem:
            problems.append(rollback_problem)
        if problems:
            context["ti"].xcom_push(key="summary", value=summary)
            raise AirflowFailException(f"task {self.task_id}: " + "; ".join(problems))
        return summary

    def on_kill(self) -> None:
        self._kill(self._admin, self.log)
