"""The provider's Airflow plugin: plan reports served by Airflow's API server, behind Airflow's auth.

Registered through the provider metadata (``plugins`` in ``get_provider_info``) and the ``airflow.plugins`` entry
point: nothing to install or configure. It mounts :mod:`airflow_kafka_reassign.report.app` (one route,
``GET /kafka-reassign/report/{dag_id}/{run_id}/{task_id}/{name}``) in the API server.

Airflow loads plugins in every process that deserializes operators (the scheduler, the dag processor, each task
run under ``dag.test()``, ...), and only the API server mounts their apps. So this module imports nothing heavy:
the app, with FastAPI and Airflow's core API security, is imported the first time ``fastapi_apps`` is read. Loading
the plugin costs about 2-3 s of CPU less per process than when the app was built at import (docs/performance.md).
"""

from __future__ import annotations

from typing import Any

from airflow_kafka_reassign.report.links import URL_PREFIX

try:
    from airflow.plugins_manager import AirflowPlugin
except ImportError:  # pragma: no cover
    AirflowPlugin = object  # type: ignore[assignment,misc]


class _ReportApps:
    """``fastapi_apps``, built when first read (on the class or an instance): the API server reads it."""

    def __get__(self, instance: object, owner: type | None = None) -> list[dict[str, Any]]:
        from airflow_kafka_reassign.report.app import app

        return [{"app": app, "url_prefix": URL_PREFIX, "name": "Kafka reassignment plan reports"}]


class KafkaReassignPlugin(AirflowPlugin):
    """Serves plan reports at ``/kafka-reassign`` (the "Plan report" extra link opens them)."""

    name = "kafka_reassign"
    fastapi_apps = _ReportApps()  # type: ignore[assignment]
