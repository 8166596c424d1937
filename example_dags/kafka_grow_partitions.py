"""Guarded partition growth, triggered by hand with Params.

Grows a batch of topics to new TOTAL partition counts behind every guard of
:class:`~airflow_kafka_reassign.operators.partitions.GuardedCreatePartitionsOperator`:
internal coordinator topics (``__consumer_offsets``, ``__transaction_state``, ...) and
compacted topics are refused, shrinking is refused, a count equal to the current one is a
no-op, and the operator places the new replicas itself (the topic's replication factor,
rack-aware, on the least-loaded brokers).

The run is all-or-nothing:

1. Airflow validates the Params when the run is triggered (a mapping of topic -> positive
   integer, at least one topic): a bad form never starts a run;
2. ``check`` runs the full check against the cluster with ``validate_only=True`` (our guards,
   then Kafka's own validate-only CreatePartitions with our placement) and fails the run,
   naming every refused topic and the reason, before anything is created;
3. ``grow`` creates the partitions, unless ``dry_run`` is set.

Trigger it from the UI (the form is built from the Params) or::

    airflow dags trigger kafka_grow_partitions --conf '{"new_total_partitions": {"orders": 24}}'

Overrides of a guard (``allow_compacted``, ``allow_internal_topic_partition_increase``,
``allow_under_replicated``) are deliberately not Params: they belong in reviewed code, on the
task that needs them, not in a form. For growth during a rolling restart (KIP-409), copy
``grow`` with ``allow_under_replicated=True`` and ``heal_targets_path=...``; the
``kafka_heal_under_replicated`` DAG then restores the full replication factor.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from airflow_kafka_reassign.operators.partitions import GuardedCreatePartitionsOperator

KAFKA_CONN_ID = "kafka_default"

# [START grow_partitions]
with DAG(
    dag_id="kafka_grow_partitions",
    description="Grow topics' partition counts behind the internal-topic, compacted-topic and shrink guards",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=30),
    default_args={"retries": 0, "execution_timeout": timedelta(minutes=10)},
    params={
        "new_total_partitions": Param(
            {"orders": 12},
            type="object",
            minProperties=1,
            additionalProperties={"type": "integer", "minimum": 1},
            title="New total partition counts",
            description="topic -> new TOTAL partition count (Kafka's increaseTo, not the number to add)",
        ),
        "dry_run": Param(False, type="boolean", title="Dry run", description="check against the cluster only"),
    },
    tags=["kafka", "partitions"],
) as dag:
    # Jinja renders text: `tojson` hands the mapping over as JSON, which the operator parses.
    targets = "{{ params.new_total_partitions | tojson }}"

    check = GuardedCreatePartitionsOperator(
        task_id="check",
        kafka_config_id=KAFKA_CONN_ID,
        new_total_partitions=targets,
        validate_only=True,
    )

    @task.short_circuit
    def not_a_dry_run(params: dict | None = None) -> bool:
        """Stop here (``grow`` skipped) when ``dry_run`` is set."""
        return not params["dry_run"]

    grow = GuardedCreatePartitionsOperator(
        task_id="grow",
        kafka_config_id=KAFKA_CONN_ID,
        new_total_partitions=targets,
    )

    check >> not_a_dry_run() >> grow
# [END grow_partitions]
