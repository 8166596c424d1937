"""EvacuateLeadershipOperator and RestoreLeadershipOperator: leadership off brokers or racks, no data moved.

Example (a rolling maintenance of rack ``r1``, example_dags/kafka_rack_maintenance.py)::

    evacuate = EvacuateLeadershipOperator(
        task_id="evacuate",
        racks=["r1"],                                  # or brokers=[4, 7]
        record_uri="s3://kafka-plans/leadership/r1/{{ ds }}",
        storage_conn_id="aws_plans",
        kafka_config_id="kafka_prod",
    )
    # ... the maintenance of rack r1 ...
    restore = RestoreLeadershipOperator(
        task_id="restore",
        record_uri="s3://kafka-plans/leadership/r1/{{ ds }}",
        storage_conn_id="aws_plans",
        kafka_config_id="kafka_prod",
    )
    evacuate >> maintenance >> restore

The evacuation reorders each affected partition's replicas so an in-sync replica on a broker that
stays comes first (a reassignment to the same replicas: nothing is copied) and elects the
preferred leaders; the replica order before is kept in ``<record_uri>/leadership.json``, written
before the first request, which the restore puts back (core/maintenance/leader_evacuation.py has the rules).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk import BaseOperator

from airflow_kafka_reassign.core.maintenance.leader_evacuation import (
    RECORD_FILE,
    LeadershipPlan,
    apply_leadership,
    brokers_to_evacuate,
    evacuation_plan,
    read_record,
    restore_plan,
    save_record,
)
from airflow_kafka_reassign.core.records.store import Store, StoreError
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators._base import default_run_location
from airflow_kafka_reassign.plan_storage import DEFAULT_TIMEOUT_S, open_store

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin


class _LeadershipOperator(BaseOperator):
    """What the evacuation and the restore share.

    :param record_uri: the folder of the record (local path or object-storage URI). Templated.
        Default: ``$AKR_OUTPUT_DIR/<dag_id>/<run_id>/leadership`` on the worker's disk (one machine
        only: distributed workers share no disk, give an object-storage URI).
    :param kafka_config_id: the ``kafka`` connection. Templated.
    :param batch_size: partitions per reorder request and election.
    :param timeout_s: bound on waiting for the reorders and retrying elections.
    :param allow_partial: succeed even when partitions were refused (no in-sync replica outside
        the brokers, a reassignment in flight) or kept their leader there; default: fail naming them
        (after doing everything it could).
    :param dry_run: log and return what would change; change nothing, write no record.
    :param kafka_timeout_s: bound on each Kafka request.
    :param storage_conn_id: the connection of the record's object storage. Templated.
    :param storage_timeout_s: bound on each request to that storage.
    """

    template_fields: Sequence[str] = ("record_uri", "kafka_config_id", "storage_conn_id", "timeout_s")
    ui_color = "#e2e3f3"

    def __init__(
        self,
        *,
        record_uri: str = "",
        kafka_config_id: str = "kafka_default",
        batch_size: int = 1000,
        timeout_s: float = 300.0,
        allow_partial: bool = False,
        dry_run: bool = False,
        kafka_timeout_s: float = 30.0,
        storage_conn_id: str | None = None,
        storage_timeout_s: float = DEFAULT_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.record_uri = record_uri
        self.kafka_config_id = kafka_config_id
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.allow_partial = allow_partial
        self.dry_run = dry_run
        self.kafka_timeout_s = kafka_timeout_s
        self.storage_conn_id = storage_conn_id
        self.storage_timeout_s = storage_timeout_s

    def _plan(self, admin: ClusterAdmin, store: Store) -> tuple[LeadershipPlan, str | None]:
        raise NotImplementedError

    def record_location(self, context: Context) -> str:
        """``record_uri``, or by default ``$AKR_OUTPUT_DIR/<dag>/<run>/leadership`` on this machine (the
        evacuation and the restore of one DAG run find the same record; distributed workers need a
        ``record_uri`` on object storage)."""
        return str(self.record_uri) if self.record_uri else default_run_location(context, self, "leadership")

    def _store(self, context: Context) -> Store:
        return open_store(self.record_location(context), conn_id=self.storage_conn_id or None,
                          timeout_s=float(self.storage_timeout_s))

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            store = self._store(context)
        except (ConfigurationError, StoreError, ValueError) as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from e
        admin = KafkaReassignHook(kafka_config_id=self.kafka_config_id, timeout_s=self.kafka_timeout_s).get_admin()
        try:
            plan, cluster_id = self._plan(admin, store)
            what = "off" if plan.action == "evacuate" else "back to"
            self.log.info("leadership %s brokers %s: %d partition(s) to reorder, %d more to elect only, %d refused",
                          what, list(plan.brokers), plan.reorders, len(plan.changes) - plan.reorders, len(plan.refused))
            for name, reason in sorted(plan.refused.items())[:20]:
                self.log.warning("refused %s: %s", name, reason)
            if self.dry_run:
                return {"action": plan.action, "brokers": list(plan.brokers), "dry_run": True,
                        "reorders": plan.reorders, "elections": len(plan.changes), "refused": len(plan.refused),
                        "record_uri": store.uri}
            if plan.action == "evacuate":
                save_record(store, plan, cluster_id=cluster_id)
            result = apply_leadership(admin, plan, batch_size=int(self.batch_size), timeout_s=float(self.timeout_s))
        except (ConfigurationError, StoreError) as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from e
        finally:
            admin.close()
        summary = {**result.summary(), "record_uri": store.uri}
        self.log.info("leadership %s brokers %s: %d reordered, %d elected%s", what, list(plan.brokers),
                      result.reordered, result.elected, "" if result.ok else f"; {result.problems()}")
        if not result.ok and not self.allow_partial:
            context["ti"].xcom_push(key="summary", value=summary)
            raise AirflowFailException(f"task {self.task_id}: {result.problems()} (allow_partial=True accepts this)")
        self._finished(store)
        return summary

    def _finished(self, store: Store) -> None:
        """After a run that did what it could (not a dry run)."""


class EvacuateLeadershipOperator(_LeadershipOperator):
    """Move preferred and actual leadership off ``brokers`` and/or every broker of ``racks``.

    No data moves: each affected partition's replicas are reordered (an in-sync replica on a
    broker that stays comes first) and its preferred leader elected, ``batch_size`` partitions
    at a time, each batch re-read first. The replica order before is written to
    ``<record_uri>/leadership.json`` before the first request (a retry adds to it, never
    overwrites an original order); :class:`RestoreLeadershipOperator` puts it back.

    :param brokers: broker ids to take leadership off.
    :param racks: racks whose every broker loses leadership.
    :param topics: only the partitions of topics matching one of these regular expressions (full
        match). Default: every topic, internal ones included (a group coordinator on a broker under
        maintenance moves too). Templated.

    XCom (``return_value``): ``{"action", "brokers", "reordered", "elected", "refused", "failed",
    "not_moved", "refused_partitions", "failed_partitions", "not_moved_partitions", "record_uri"}``
    (at most 20 partitions named per list).
    """

    template_fields: Sequence[str] = (*_LeadershipOperator.template_fields, "brokers", "racks", "topics")

    def __init__(self, *, brokers: Sequence[int] = (), racks: Sequence[str] = (), topics: Sequence[str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.brokers = brokers
        self.racks = racks
        self.topics = topics

    def _plan(self, admin: ClusterAdmin, store: Store) -> tuple[LeadershipPlan, str | None]:
        snapshot = admin.snapshot()
        away = brokers_to_evacuate(snapshot, [int(b) for b in self.brokers], [str(r) for r in self.racks])
        topics = None if self.topics is None else [str(t) for t in self.topics]
        return evacuation_plan(snapshot, away, topics), snapshot.cluster_id


class RestoreLeadershipOperator(_LeadershipOperator):
    """Put back the replica order an evacuation recorded, and elect those preferred leaders again.

    Only a partition whose replica set is unchanged since the record is reordered (one moved by
    someone since is reported stale and left as it is). Elections that fail because a returning
    broker is not back in the ISR yet are retried until ``timeout_s``. Parameters and XCom as for
    :class:`EvacuateLeadershipOperator` (without ``brokers`` and ``racks``: the record names them).
    Once everything is back, the record is renamed ``leadership.json.restored``, so the next
    evacuation with the same ``record_uri`` starts a new record.
    """

    def _plan(self, admin: ClusterAdmin, store: Store) -> tuple[LeadershipPlan, str | None]:
        record, _ = read_record(store)
        if record is None:
            raise ConfigurationError(f"no leadership record at {store.uri}/{RECORD_FILE}: give the record_uri "
                                     "of the evacuation to restore")
        snapshot = admin.snapshot(topics=sorted({e.topic for e in record.partitions}))
        return restore_plan(snapshot, record), snapshot.cluster_id

    def _finished(self, store: Store) -> None:
        data = store.read(RECORD_FILE)
        if data is not None:
            store.write(f"{RECORD_FILE}.restored", data)
            store.delete(RECORD_FILE)
