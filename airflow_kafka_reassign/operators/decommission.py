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

Example (the complete lifecycle is ``example_dags/kafka_decommission_brokers.py``)::

    shut_down = WaitForBrokerShutdownSensor(task_id="wait_for_shutdown", brokers=[7], mode="reschedule",
                                            poke_interval=30, timeout=6 * 3600)
    unregister = UnregisterBrokersOperator(task_id="unregister", brokers=[7])
    shut_down >> unregister
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk import BaseOperator, BaseSensorOperator

from airflow_kafka_reassign.core.cordon import restore_cordons
from airflow_kafka_reassign.core.lifecycle import broker_state, unregister
from airflow_kafka_reassign.core.store import StoreError
from airflow_kafka_reassign.exceptions import ConfigurationError, KafkaReassignError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators._base import as_bool
from airflow_kafka_reassign.plan_storage import DEFAULT_TIMEOUT_S, plan_store, run_state

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_kafka_reassign.core.ports import ClusterAdmin


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
            if not caps.fenced_brokers:
                raise AirflowFailException(
                    f"task {self.task_id}: the cluster cannot list fenced brokers (DescribeCluster v2, KIP-1073, Kafka "
                    "4.0+): a stopped broker cannot be told from a running one here; check the process by hand")
            description = admin.describe_cluster(include_fenced=True)
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
