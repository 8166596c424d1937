"""The plan-report route: plan reports served by Airflow's API server, behind Airflow's auth.

The provider's plugin (:mod:`airflow_kafka_reassign.report.server`) mounts this small FastAPI app at
``/kafka-reassign``, on the API server only (this module imports FastAPI and Airflow's core API security, which a
task process has no use for). One route::

    GET /kafka-reassign/report/{dag_id}/{run_id}/{task_id}/{name}?map_index=-1

1. Airflow's auth manager checks that the caller (the UI's session cookie, or a bearer token)
   may read the DAG's task instances (``requires_access_dag("GET", TASK_INSTANCE)``): anyone
   else gets 401/403.
2. The task instance's XCom ``plan_report`` (pushed by PlanReassignment and ExecuteReassignment,
   :mod:`airflow_kafka_reassign.report.links`) says where the report is and with which storage
   connection; ``name`` must be one file of the report folder (``report.html`` or a chart's PNG).
3. The file is read from the plan storage (the API server's disk, or object storage through the
   connection) and returned. A missing XCom or file is a 404 that says why.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Response

from airflow_kafka_reassign.report.links import REPORT_XCOM_KEY

try:
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    _ACCESS: Any = Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))
except ImportError:  # pragma: no cover (an API server without the auth dependency: fail closed)
    def _refuse() -> None:
        raise HTTPException(503, "this Airflow has no auth dependency the plan-report route can use")

    _ACCESS = Depends(_refuse)

#: File names a report folder holds: no path separator, no leading dot.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\.(html|png|svg|json|css)$")
_TYPES = {"html": "text/html; charset=utf-8", "png": "image/png", "svg": "image/svg+xml",
          "json": "application/json", "css": "text/css"}

app = FastAPI(title="Kafka reassignment plan reports", docs_url=None, redoc_url=None, openapi_url=None)


def report_location(dag_id: str, run_id: str, task_id: str, map_index: int) -> dict[str, Any] | None:
    """The task instance's ``plan_report`` XCom (from Airflow's metadata database)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (session.query(XComModel)
               .filter_by(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index, key=REPORT_XCOM_KEY)
               .first())
        value = XComModel.deserialize_value(row) if row is not None else None
    return value if isinstance(value, dict) else None


def read_report_file(location: dict[str, Any], name: str) -> bytes | None:
    from airflow_kafka_reassign.core.records.store import StoreError
    from airflow_kafka_reassign.plan_storage import open_store

    folder = str(location["report_uri"]).rsplit("/", 1)[0]
    try:
        return open_store(folder, conn_id=location.get("storage_conn_id")).read(name)
    except StoreError as e:
        raise HTTPException(502, f"the plan storage could not be read: {e}") from None


@app.get("/report/{dag_id}/{run_id}/{task_id}/{name}", dependencies=[_ACCESS])
def plan_report(dag_id: str, run_id: str, task_id: str, name: str, map_index: int = -1) -> Response:
    """One file of a task's plan report."""
    if not _NAME.match(name):
        raise HTTPException(400, f"{name!r} is not a file of a plan report (report.html, *.png)")
    location = report_location(dag_id, run_id, task_id, map_index)
    if location is None:
        raise HTTPException(404, f"task {task_id} of {dag_id} / {run_id} recorded no plan report (it has not run "
                                 "yet, or planned before reports were linked)")
    data = read_report_file(location, name)
    if data is None:
        raise HTTPException(404, f"{location['report_uri'].rsplit('/', 1)[0]}/{name} does not exist (the report "
                                 "needs matplotlib on the worker: pip install 'airflow-kafka-reassign[report]')")
    return Response(content=data, media_type=_TYPES[name.rsplit(".", 1)[1]],
                    headers={"Cache-Control": "private, max-age=60", "X-Content-Type-Options": "nosniff"})

