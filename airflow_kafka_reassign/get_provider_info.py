"""Provider metadata that Airflow reads through the ``apache_airflow_provider`` entry point.

``package-name`` must equal the normalised distribution name (``airflow-kafka-reassign``):
Airflow 3.3's ProvidersManager raises otherwise, which breaks every ``airflow providers`` and
``airflow connections`` command. Keep this module import-light: Airflow calls it while it
initialises its configuration.

No ``connection-types`` on purpose: the hook reuses the ``kafka`` connection type, which
apache-airflow-providers-apache-kafka registers. ProvidersManager walks providers sorted by
package name, so ``airflow-kafka-reassign`` would register ``kafka`` FIRST: our hook would
replace KafkaBaseHook for every ``kafka`` connection (UI form, "Test" button,
``Connection.get_hook()``) and Airflow would log "The connection_type 'kafka' has been already
registered by provider 'airflow-kafka-reassign'" against the apache-kafka provider. The hook
is listed under ``hooks`` only, which is documentation, not registration.

Example::

    >>> get_provider_info()["package-name"]
    'airflow-kafka-reassign'
"""

from __future__ import annotations

from typing import Any

INTEGRATION_NAME = "Kafka Partition Reassignment"


def get_provider_info() -> dict[str, Any]:
    """The provider dict for Airflow 3.3 (runtime schema: ``airflow/provider_info.schema.json``)."""
    return {
        "package-name": "airflow-kafka-reassign",
        "name": "Kafka Partition Reassignment",
        "description": (
            "Plan, execute, watch, cancel and guard Apache Kafka partition reassignments "
            "and partition growth, using the ``kafka`` connection of "
            "apache-airflow-providers-apache-kafka."
        ),
        "versions": ["0.1.0"],
        "integrations": [
            {
                "integration-name": INTEGRATION_NAME,
                "external-doc-url": "https://kafka.apache.org/documentation/#basic_ops_cluster_expansion",
                "tags": ["apache"],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION_NAME,
                "python-modules": ["airflow_kafka_reassign.hooks.kafka_reassign"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION_NAME,
                "python-modules": [
                    "airflow_kafka_reassign.operators.cancel",
                    "airflow_kafka_reassign.operators.execute",
                    "airflow_kafka_reassign.operators.leadership",
                    "airflow_kafka_reassign.operators.partitions",
                    "airflow_kafka_reassign.operators.plan",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION_NAME,
                "python-modules": ["airflow_kafka_reassign.sensors.reassignment"],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION_NAME,
                "python-modules": ["airflow_kafka_reassign.triggers.reassignment",
                                   "airflow_kafka_reassign.triggers.cluster_watch"],
            }
        ],
        # the "Plan report" extra link and the plugin route that serves the report (Airflow's auth)
        "extra-links": ["airflow_kafka_reassign.report.links.PlanReportLink"],
        "plugins": [
            {"name": "kafka_reassign", "plugin-class": "airflow_kafka_reassign.report.server.KafkaReassignPlugin"},
        ],
        # "operators", "sensors" and "triggers" entries go here once those modules exist
        # (airflow_kafka_reassign.operators..., .sensors..., .triggers...); list only modules
        # that import: tests/unit/test_provider_info.py imports every module listed.
    }
