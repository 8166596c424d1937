"""The "Plan report" extra link of PlanReassignment and ExecuteReassignment.

The plan report (``<plan>/report/report.html``) lives in the plan's storage: a worker's disk or
object storage, never a place a browser can open. The link therefore points at the provider's
own route in Airflow's API server (:mod:`airflow_kafka_reassign.report.server`, an Airflow 3
plugin)::

    {api.base_url}/kafka-reassign/report/{dag_id}/{run_id}/{task_id}/report.html

The task pushes where its report is (XCom key :data:`REPORT_XCOM_KEY`: ``{"report_uri",
"storage_conn_id"}``); the route reads that XCom, checks with Airflow's auth manager that the
caller may read the DAG's task instances, and serves the report's files from the storage. A
URL holds ids only: no path or URI from a request is ever opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

try:  # Airflow 3
    from airflow.sdk import BaseOperatorLink
except ImportError:  # pragma: no cover
    from airflow.models.baseoperatorlink import BaseOperatorLink  # type: ignore[no-redef]

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

#: XCom key under which a task records where its plan report is.
REPORT_XCOM_KEY = "plan_report"
#: Where the provider's plugin app is mounted in Airflow's API server.
URL_PREFIX = "/kafka-reassign"
REPORT_SUBDIR = "report"
REPORT_FILE = "report.html"


def report_url(dag_id: str, run_id: str, task_id: str, *, map_index: int = -1, name: str = REPORT_FILE,
               base_url: str | None = None) -> str:
    """The URL of a task's plan report on Airflow's API server (relative when no ``api.base_url`` is set)."""
    if base_url is None:
        try:
            from airflow.configuration import conf

            base_url = conf.get("api", "base_url", fallback="") or ""
        except Exception:  # noqa: BLE001 (no configuration: a relative link still works in the UI)
            base_url = ""
    parts = [quote(str(p), safe="") for p in (dag_id, run_id, task_id)]
    query = f"?map_index={map_index}" if map_index not in (None, -1) else ""
    return f"{base_url.rstrip('/')}{URL_PREFIX}/report/{'/'.join(parts)}/{name}{query}"


def push_report_location(context: Any, plan_uri: str, storage_conn_id: str | None) -> None:
    """Record where the report of the plan at ``plan_uri`` is (for the link and the route)."""
    ti = context.get("ti") if hasattr(context, "get") else None
    if ti is None:
        return
    ti.xcom_push(key=REPORT_XCOM_KEY, value={
        "report_uri": f"{str(plan_uri).rstrip('/')}/{REPORT_SUBDIR}/{REPORT_FILE}",
        "storage_conn_id": storage_conn_id or None,
    })


class PlanReportLink(BaseOperatorLink):
    """"Plan report": the plan's HTML report, served by the provider's route in Airflow's API server."""

    name = "Plan report"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return report_url(ti_key.dag_id, ti_key.run_id, ti_key.task_id, map_index=getattr(ti_key, "map_index", -1))
