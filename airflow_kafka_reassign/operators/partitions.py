"""Guarded partition growth and its heal step, as Airflow operators.

* :class:`GuardedCreatePartitionsOperator` grows a batch of topics behind the guards of
  :mod:`airflow_kafka_reassign.core.maintenance.growth` (internal coordinator topics, compacted topics,
  shrinking, replica placement, under-replicated creation) and reports every topic's outcome.
* :class:`PlanHealOperator` reads the heal-targets file that an under-replicated growth wrote,
  and plans (``goal="heal"``) what brings exactly those partitions back to their intended
  replication factor, as a plan directory for the execution operator.

Example (see docs/partitions.md)::

    grow = GuardedCreatePartitionsOperator(
        task_id="grow",
        kafka_config_id="kafka_prod",
        new_total_partitions={"orders": 24, "payments": 12},
    )
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException
from airflow.sdk import BaseOperator, Context

from airflow_kafka_reassign.core.maintenance.cordon import cordoned_brokers
from airflow_kafka_reassign.core.maintenance.growth import (
    GrowthOutcome,
    GrowthRequest,
    grow_partitions,
    plan_heal,
    read_heal_targets,
    update_heal_targets,
)
from airflow_kafka_reassign.core.records.plan_io import write_plan_dir
from airflow_kafka_reassign.core.records.store import Store, StoreError
from airflow_kafka_reassign.exceptions import ConfigurationError, KafkaReassignError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.plan_storage import heal_targets_file, is_local, local_path, upload_dir


def _heal_file(path: str | None, conn_id: str | None) -> tuple[Store, str] | None:
    """The heal-targets file of ``path`` (a path or an object-storage URI), ``None`` when unset."""
    if not path:
        return None
    try:
        return heal_targets_file(str(path), conn_id=conn_id or None)
    except StoreError as e:
        raise AirflowFailException(f"heal_targets_path: {e}") from None


class PartitionGrowthFailedError(KafkaReassignError):
    """Kafka answered CreatePartitions with an error for some topic (a retry may succeed)."""


def parse_targets(value: Any) -> dict[str, int]:
    """The rendered ``new_total_partitions``: a mapping, or its JSON text; counts may be digit strings
    (what Jinja renders without ``render_template_as_native_obj``)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigurationError(
                f"new_total_partitions rendered to {value[:200]!r}, which is not a JSON object ({e.msg}); "
                'pass a mapping topic -> new total partition count, for example {"orders": 12}'
            ) from None
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"new_total_partitions must be a mapping topic -> new total partition count, not {type(value).__name__}"
        )
    out: dict[str, int] = {}
    for topic, count in value.items():
        if isinstance(count, str) and count.strip().isdigit():
            count = int(count)
        out[str(topic)] = count
    return out


class GuardedCreatePartitionsOperator(BaseOperator):
    """Grow topics to new TOTAL partition counts, behind the growth guards.

    In one batch, valid topics grow (one CreatePartitions request) and refused ones are
    reported with the reason; the task fails at the end if any topic was refused (unless
    ``fail_on_refused=False``) or failed. XCom (``return_value``, also pushed when the task
    fails): ``{"counts", "topics": {topic: {status, reason, new_partitions, ...}}, "heal_targets",
    "heal_targets_path", ...}``.

    :param new_total_partitions: topic -> new total partition count (templated; a mapping or
        its JSON text). A lower count is refused, an equal one is a no-op success.
    :param kafka_config_id: the ``kafka`` connection (templated).
    :param validate_only: the full check against the cluster (our guards, then Kafka's
        validate-only CreatePartitions); nothing is created, no file written.
    :param allow_internal_topic_partition_increase: let internal/coordinator topics grow
        (``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``, topics Kafka
        marks internal, ``extra_internal_topics``, ``internal_topic_pattern``). Growing them
        re-maps coordinators (hash % N) and causes split brain (KAFKA-20029): never do it
        with clients running.
    :param extra_internal_topics: more topic names guarded like internal topics (templated).
    :param internal_topic_pattern: a regex (full match) of more guarded topics, for example
        ``r".*-(changelog|repartition)"`` for Kafka Streams' internal topics (templated).
    :param allow_compacted: let compacted topics grow (keys move to other partitions).
    :param allow_under_replicated: with fewer live brokers than a topic's replication factor,
        create the new partitions anyway when at least min(min.insync.replicas, RF) brokers
        are live (KIP-409): live brokers get replicas and the leader, the rest go to the
        stopped (still registered) brokers, which copy them when they are back. Those
        partitions are recorded in ``heal_targets_path``.
    :param heal_targets_path: JSON file ``{"topic-partition": intended RF}`` the partitions
        created under-replicated are merged into (templated; required with
        ``allow_under_replicated=True``): a path, or an object-storage URI
        (``s3://bucket/kafka/heal-targets.json``, with ``storage_conn_id``) that every worker reads;
        updated by compare-and-set. Its content is exactly
        ``PlanRequest(goal="heal", heal_targets=...)``'s argument; :class:`PlanHealOperator` reads it.
    :param storage_conn_id: the connection of that object storage (docs/storage.md).
    :param fail_on_refused: fail the task when a guard refused a topic (after the valid
        topics grew). Kafka errors always fail it.
    :param rack_aware: spread each new partition's replicas over ``broker.rack`` racks.
    :param replica_assignment: explicit replicas of the new partitions, ``{topic: [[1, 2], [2, 3]]}`` (one list per
        partition added, each as long as the topic's replication factor), in place of the guarded placement
        (templated). Every guard still applies; a broker that is not live, or that is cordoned (KIP-1066: being
        emptied; Kafka 4.3.0/4.3.1 would accept it, KAFKA-20832), refuses the topic before anything is sent.
        Without it the placement avoids cordoned brokers.
    :param timeout_s: bound on every request to the cluster.
    """

    template_fields: Sequence[str] = (
        "replica_assignment",
        "new_total_partitions",
        "kafka_config_id",
        "heal_targets_path",
        "storage_conn_id",
        "extra_internal_topics",
        "internal_topic_pattern",
    )
    template_fields_renderers = {"new_total_partitions": "json"}
    ui_color = "#f4d8a8"

    def __init__(
        self,
        *,
        new_total_partitions: Mapping[str, int] | str,
        kafka_config_id: str = KafkaReassignHook.default_conn_name,
        validate_only: bool = False,
        allow_internal_topic_partition_increase: bool = False,
        extra_internal_topics: Sequence[str] = (),
        internal_topic_pattern: str | None = None,
        allow_compacted: bool = False,
        allow_under_replicated: bool = False,
        heal_targets_path: str | None = None,
        storage_conn_id: str | None = None,
        fail_on_refused: bool = True,
        rack_aware: bool = True,
        replica_assignment: Mapping[str, Sequence[Sequence[int]]] | None = None,
        timeout_s: float = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.storage_conn_id = storage_conn_id
        self.new_total_partitions = new_total_partitions
        self.kafka_config_id = kafka_config_id
        self.validate_only = validate_only
        self.allow_internal_topic_partition_increase = allow_internal_topic_partition_increase
        self.extra_internal_topics = extra_internal_topics
        self.internal_topic_pattern = internal_topic_pattern
        self.allow_compacted = allow_compacted
        self.allow_under_replicated = allow_under_replicated
        self.heal_targets_path = heal_targets_path
        self.fail_on_refused = fail_on_refused
        self.rack_aware = rack_aware
        self.replica_assignment = replica_assignment
        self.timeout_s = timeout_s

    def _request(self) -> GrowthRequest:
        try:
            return GrowthRequest(
                targets=parse_targets(self.new_total_partitions),
                allow_internal_topic_partition_increase=self.allow_internal_topic_partition_increase,
                extra_internal_topics=tuple(self.extra_internal_topics or ()),
                internal_topic_pattern=self.internal_topic_pattern or None,
                allow_compacted=self.allow_compacted,
                allow_under_replicated=self.allow_under_replicated,
                rack_aware=self.rack_aware,
                assignments={str(k): tuple(tuple(int(b) for b in r) for r in v)
                             for k, v in (self.replica_assignment or {}).items()},
            )
        except (ValueError, TypeError) as e:  # pydantic's ValidationError and ConfigurationError
            raise AirflowFailException(f"{self.task_id}: invalid parameters: {e}") from e

    def _log(self, level: str, message: str) -> None:
        (self.log.warning if level == "warning" else self.log.info)("%s", message)

    def execute(self, context: Context) -> dict[str, Any]:
        request = self._request()
        hook = KafkaReassignHook(kafka_config_id=self.kafka_config_id, timeout_s=self.timeout_s)
        admin = hook.get_admin()
        try:
            outcome = grow_partitions(
                admin, request, validate_only=self.validate_only,
                heal_targets_path=_heal_file(self.heal_targets_path, self.storage_conn_id), log=self._log,
            )
        except (ConfigurationError, StoreError) as e:
            raise AirflowFailException(str(e)) from e
        finally:
            admin.close()
        summary = outcome.summary()
        self._report(outcome)
        problems = outcome.failed or (outcome.refused if self.fail_on_refused else ())
        if problems:
            context["ti"].xcom_push(key="return_value", value=summary)
            message = (
                f"{len(outcome.refused)} topic(s) refused, {len(outcome.failed)} failed "
                f"(the others are done, see the XCom):\n{outcome.describe_problems()}"
            )
            if outcome.failed:
                raise PartitionGrowthFailedError(message)
            raise AirflowFailException(message + "\n(fail_on_refused=False lets the task succeed anyway)")
        return summary

    def _report(self, outcome: GrowthOutcome) -> None:
        self.log.info("%-40s %-10s %9s %s", "topic", "status", "partitions", "reason")
        for t in outcome.topics:
            before, after = (n if n is not None else "-" for n in (t.partitions_before, t.partitions_after))
            self.log.info("%-40s %-10s %4s->%-4s %s", t.topic, t.status, before, after, t.reason or "")
        if outcome.heal_targets:
            self.log.warning(
                "%d partition(s) created under-replicated, recorded in %s: %s",
                len(outcome.heal_targets), outcome.heal_targets_path, sorted(outcome.heal_targets),
            )


class PlanHealOperator(BaseOperator):
    """Plan the heal of the partitions in a heal-targets file, as a plan directory.

    Reads ``heal_targets_path`` (``{"topic-partition": intended RF}``, written by
    :class:`GuardedCreatePartitionsOperator` with ``allow_under_replicated=True``), snapshots
    the cluster and classifies every target (healed, catching-up, waiting-for-broker, short,
    missing). Partitions still short of their RF get moves from the planner's ``goal="heal"``,
    each an explicitly allowed RF change for exactly that partition, written to ``plan_dir``
    (:func:`~airflow_kafka_reassign.core.records.plan_io.write_plan_dir`) for the execution operator.

    Outcomes: a plan with moves -> XCom ``{"plan_dir", "moves", "states", ...}``; nothing to
    move -> the task is skipped (downstream execution too); a target still on a stopped
    broker -> the task fails (retry once the broker is back). With ``prune_healed=True``
    healed and missing partitions are removed from the file.

    :param heal_targets_path: the heal-targets file (templated): a path, or an object-storage URI
        (with ``storage_conn_id``) that GuardedCreatePartitions recorded into from any worker.
    :param plan_dir: where to write the plan directory (templated): a local path, or an
        object-storage URI (``s3://...``) for distributed workers.
    :param storage_conn_id: the Airflow connection of that object storage (templated), for both.
    :param kafka_config_id: the ``kafka`` connection (templated).
    :param prune_healed: drop healed partitions from the heal-targets file once they are at their RF.
    :param rack_aware: spread the added replicas over ``broker.rack`` racks.
    :param timeout_s: bound on every request to the cluster.
    """

    template_fields: Sequence[str] = ("heal_targets_path", "plan_dir", "kafka_config_id", "storage_conn_id")
    ui_color = "#c9e4c5"

    def __init__(
        self,
        *,
        heal_targets_path: str,
        plan_dir: str,
        kafka_config_id: str = KafkaReassignHook.default_conn_name,
        rack_aware: bool = True,
        prune_healed: bool = True,
        timeout_s: float = 30.0,
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.heal_targets_path = heal_targets_path
        self.plan_dir = plan_dir
        self.storage_conn_id = storage_conn_id
        self.kafka_config_id = kafka_config_id
        self.rack_aware = rack_aware
        self.prune_healed = prune_healed
        self.timeout_s = timeout_s

    def execute(self, context: Context) -> dict[str, Any]:
        heal_file = _heal_file(self.heal_targets_path, self.storage_conn_id)
        try:
            targets = read_heal_targets(heal_file) if heal_file is not None else {}
        except (ConfigurationError, StoreError) as e:
            raise AirflowFailException(f"{self.task_id}: {e}") from None
        ti = context["ti"]
        if not targets:
            ti.xcom_push(key="return_value", value={"plan_dir": None, "moves": 0, "states": {}})
            raise AirflowSkipException(f"heal-targets file {self.heal_targets_path} lists no partition: nothing to heal")
        hook = KafkaReassignHook(kafka_config_id=self.kafka_config_id, timeout_s=self.timeout_s)
        admin = hook.get_admin()
        try:
            snapshot = admin.snapshot()
            cordoned = cordoned_brokers(admin, snapshot.broker_ids)  # the heal places nothing there (KIP-1066)
        finally:
            admin.close()
        assessment, result = plan_heal(snapshot, targets, rack_aware=self.rack_aware, cordoned=cordoned)
        done = assessment.of("healed") + assessment.of("missing")
        if self.prune_healed and done:
            update_heal_targets(heal_file, remove=done)  # type: ignore[arg-type] (read above)
        for state in ("healed", "catching-up", "short", "missing"):
            if assessment.of(state):
                self.log.info("%s: %s", state, assessment.of(state))
        moves = len(result.plan) if result is not None else 0
        summary: dict[str, Any] = {
            "plan_dir": None,
            "moves": moves,
            "states": assessment.counts(),
            "short": assessment.of("short")[:100],
            "catching_up": assessment.of("catching-up")[:100],
            "pruned": len(done) if self.prune_healed else 0,
        }
        if result is None or moves == 0:
            ti.xcom_push(key="return_value", value=summary)
            raise AirflowSkipException(
                f"nothing to move: {assessment.counts()} (catching-up partitions finish on their own)"
            )
        for w in result.warnings:
            self.log.warning("%s", w)
        if is_local(self.plan_dir):
            write_plan_dir(result, local_path(self.plan_dir))
        else:
            with tempfile.TemporaryDirectory(prefix="akr-heal-") as tmp:
                write_plan_dir(result, tmp)
                upload_dir(Path(tmp), str(self.plan_dir), conn_id=self.storage_conn_id or None)
        summary["plan_dir"] = str(self.plan_dir)
        summary["replica_moves"] = result.replica_moves
        self.log.info("heal plan: %d partition(s), %d replica move(s), written to %s", moves, result.replica_moves,
                      self.plan_dir)
        return summary
