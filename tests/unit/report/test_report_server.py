"""The plugin route that serves plan reports, and the link that points at it (no API server: the auth
dependency is replaced here; tests/integration/test_airflow_ui.py checks the real login)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from airflow_kafka_reassign.report import app as server
from airflow_kafka_reassign.report.app import _ACCESS, app
from airflow_kafka_reassign.report.links import URL_PREFIX, PlanReportLink, report_url
from airflow_kafka_reassign.report.server import KafkaReassignPlugin


@pytest.fixture
def client(tmp_path, monkeypatch):
    report = tmp_path / "plan" / "report"
    report.mkdir(parents=True)
    (report / "report.html").write_text("<h1>Plan report</h1>")
    (report / "replicas.png").write_bytes(b"\x89PNG")
    locations = {("d", "manual__2026-11-22T08:00:00+00:00", "plan", -1): {
        "report_uri": str(report / "report.html"), "storage_conn_id": None}}
    monkeypatch.setattr(server, "report_location", lambda *key: locations.get(key))
    app.dependency_overrides[_ACCESS.dependency] = lambda: None
    yield TestClient(app)
    app.dependency_overrides.clear()


def test_the_report_and_its_charts_are_served_from_the_plan_storage(client):
    url = report_url("d", "manual__2026-11-22T08:00:00+00:00", "plan", base_url="")
    assert url == "/kafka-reassign/report/d/manual__2026-11-22T08%3A00%3A00%2B00%3A00/plan/report.html"
    page = client.get(url.removeprefix("/kafka-reassign"))
    assert page.status_code == 200 and page.text == "<h1>Plan report</h1>"
    assert page.headers["content-type"].startswith("text/html")
    png = client.get(url.removeprefix("/kafka-reassign").replace("report.html", "replicas.png"))
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"


@pytest.mark.parametrize(("path", "status", "message"), [
    ("/report/d/other-run/plan/report.html", 404, "recorded no plan report"),
    ("/report/d/manual__2026-11-22T08:00:00+00:00/plan/moves.png", 404, "does not exist"),
    ("/report/d/manual__2026-11-22T08:00:00+00:00/plan/..%2Fplan.json", 404, "Not Found"),  # no route: never a path
    ("/report/d/manual__2026-11-22T08:00:00+00:00/plan/.env.html", 400, "not a file of a plan report"),
])
def test_anything_else_is_refused_with_the_reason(client, path, status, message):
    response = client.get(path)
    assert response.status_code == status and message in response.json()["detail"]


def test_the_route_is_behind_airflows_auth_dependency():
    route = next(r for r in app.routes if getattr(r, "path", "") == "/report/{dag_id}/{run_id}/{task_id}/{name}")
    assert _ACCESS in route.dependencies
    assert PlanReportLink().name == "Plan report"


def test_the_link_and_the_plugin_load_no_chart_library_and_the_plugin_no_web_app():
    """The operators import the link and Airflow the plugin, in every process that deserializes operators (each task
    run under dag.test, the scheduler, ...): neither may need the report extra (matplotlib), and the plugin leaves
    FastAPI, Airflow's core API security and the report's app unimported until the API server reads its apps."""
    import subprocess
    import sys

    heavy = ("matplotlib", "fastapi", "airflow.api_fastapi.core_api", "airflow_kafka_reassign.report.app")
    code = (
        "import sys, airflow_kafka_reassign.report.links, airflow_kafka_reassign.report.server\n"
        f"heavy = {heavy!r}\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy) or m.endswith('report.write')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "[]"  # (Airflow may log a warning before)


def test_the_plugin_mounts_the_report_app_when_its_apps_are_read():
    for source in (KafkaReassignPlugin, KafkaReassignPlugin()):
        (mounted,) = source.fastapi_apps
        assert mounted["app"] is app and mounted["url_prefix"] == URL_PREFIX == "/kafka-reassign"
