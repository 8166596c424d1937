"""Run a DAG file once as a real Airflow run (``dag.test()`` in a subprocess) and read its outcome.

Use with the ``airflow_home`` fixture (tests/integration/conftest.py)::

    result = run_dag_file(airflow_home, dag_file, {"brokers": [4]})
    assert result["state"] == "success", result["log"][-4000:]

A human-in-the-loop task (an approval) is answered the way a person's click is, through Airflow's REST API (the
Core API's ``PATCH .../hitlDetails`` route, in process: FastAPI's test client on the same metadata database), once
the task waits for it (``awaiting_input``, Airflow 3.3+)::

    result = run_dag_file(airflow_home, dag_file, conf, answers={"approve": "Reject"})

``plan_in_process=True``: the plan task's Spark job is replaced, in the DAG run's process, by the same planner
(``kafka_helpers.plan_job_in_process``, the staged path the job's driver runs): for the tests whose subject is the DAG
and its operators around the planner, not the job. It saves a spark-submit (a JVM and a Spark session, 20-30 s)
per plan task. The DAG file is unchanged; the log says ``PLAN-IN-PROCESS`` for each task planned so. The plan job
itself runs through spark-submit in test_plan_on_sandbox, test_spark_standalone, test_plan_job_readers,
test_load_aware_plan, the decommission example's real run here, the stack's Celery workers (test_stack) and
the UI test.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

#: the runner's first lines: with ``AKR_PLAN_IN_PROCESS`` (this folder) set, plan tasks plan in process
_PLAN_IN_PROCESS = '''
import os, sys
if os.environ.get("AKR_PLAN_IN_PROCESS"):
    sys.path.insert(0, os.environ["AKR_PLAN_IN_PROCESS"])
    from kafka_helpers import plan_job_in_process
    from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator
    PlanReassignmentOperator.spark_submit = plan_job_in_process
'''

#: Every runner's first lines (this module's and the other tests' own). Unless ``AKR_AIRFLOW_UNPATCHED`` is set, the
#: in-process execution API that dag.test() starts serves the newest API version only. Airflow's Cadwyn app builds its
#: routes for every version it keeps (ten on 3.3) at the first request: 7 s of CPU in each DAG run's process on this
#: machine (py-spy: Cadwyn._cadwyn_initialize, 377 of 963 samples of a one-task run), several times that on a loaded
#: machine. The task SDK installed with it speaks the newest version, which equals the head, so the routes a task
#: calls are the same; what goes is the translation for older clients (a deployment's API server, in test_stack and
#: test_airflow_ui, keeps every version). The head's routes that only older versions have are dropped with them
#: (Cadwyn refuses a bundle that does not restore them).
#:
#: It is a speed-up of the test runner, and Airflow's own code is what it changes: so every example DAG has at least
#: one integration test run on Airflow as installed (``run_dag_file(..., unpatched=True)``; the list in
#: docs/testing.md), every compat cell runs unpatched (tests/compat/airflow_line.py sets the variable), and each run
#: says in its log which Airflow it ran on (``EXECUTION-API patched|unpatched``).
FAST_EXECUTION_API = '''
import os as _os
if _os.environ.get("AKR_AIRFLOW_UNPATCHED"):
    print("EXECUTION-API unpatched: Airflow as installed", flush=True)
else:
    import airflow.api_fastapi.execution_api.versions as _versions
    from airflow.api_fastapi.execution_api.routes import execution_api_router as _router
    from cadwyn import HeadVersion as _Head, Version as _Version, VersionBundle as _Bundle

    _versions.bundle = _Bundle(_Head(), _Version(_versions.bundle.versions[0].value))
    _router.routes[:] = [r for r in _router.routes if "_CADWYN_DELETED_ROUTE" not in (getattr(r, "tags", None) or [])]
    print("EXECUTION-API patched: the newest version only (tests/integration/dagrun.py)", flush=True)
'''

RUNNER = FAST_EXECUTION_API + _PLAN_IN_PROCESS + '''
import json, sys, importlib.util
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session

import airflow, os
if tuple(int(x) for x in airflow.__version__.split(".")[:2]) < (3, 1):
    # Airflow 3.0's dag.test() does not register the DAG's assets: a task with outlets would fail on "inactive
    # assets". What the dag processor does in a deployment, done here: the dags folder parsed into the database.
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.models.dagbag import DagBag

    DagBundlesManager().sync_bundles_to_db()
    DagBag(os.path.dirname(sys.argv[1]), include_examples=False).sync_to_db("dags-folder", None)

answers = json.loads(os.environ.get("AKR_DAGRUN_ANSWERS") or "{}")
if answers:
    # A person answers once the task is parked: right after dag.test() has run it into awaiting_input (answered in
    # the same moment the task parks, a response could be overwritten by dag.test() recording the parked state).
    import airflow.sdk.definitions.dag as dag_module

    run_task = dag_module._run_task

    def run_then_answer(*, ti, task, **kwargs):
        result = run_task(ti=ti, task=task, **kwargs)
        option = answers.get(ti.task_id)
        if option is not None and ti.state == "awaiting_input":
            from fastapi.testclient import TestClient
            from airflow.api_fastapi.app import create_app

            client = TestClient(create_app(apps="core"))
            token = client.get("/auth/token").json()["access_token"]  # simple auth manager, all admins
            path = (f"/api/v2/dags/{ti.dag_id}/dagRuns/{ti.run_id}/taskInstances/{ti.task_id}/{ti.map_index}"
                    "/hitlDetails")
            response = client.patch(path, json={"chosen_options": [option], "params_input": {}},
                                    headers={"Authorization": f"Bearer {token}"})
            print(f"HITL-ANSWER {ti.task_id}: {option} -> HTTP {response.status_code}", flush=True)
            response.raise_for_status()
            del answers[ti.task_id]
        return result

    dag_module._run_task = run_then_answer

spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
dag = getattr(module, sys.argv[2]) if len(sys.argv) > 3 and sys.argv[2] else next(
    v for v in vars(module).values() if type(v).__name__ == "DAG")
run = dag.test(run_conf=json.loads(sys.argv[-1]))
with create_session() as session:
    tis = {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}
    tries = {ti.task_id: ti.try_number for ti in run.get_task_instances(session=session)}
    rows = session.query(XComModel).filter_by(dag_id=dag.dag_id, run_id=run.run_id).all()
    xcom = {f"{r.task_id}.{r.key}": XComModel.deserialize_value(r) for r in rows}
print("DAG-RESULT " + json.dumps({"state": str(run.state), "tis": tis, "tries": tries, "xcom": xcom}, default=str))
'''


def run_dag_file(env: dict[str, str], dag_file: Path, conf: dict | None = None, *, timeout: float = 600,
                 answers: dict[str, str] | None = None, plan_in_process: bool = False,
                 log_file: Path | None = None, unpatched: bool = False) -> dict:
    """Run the DAG of ``dag_file`` once with ``dag.test()`` in a subprocess; returns
    ``{"state", "tis": {task_id: state}, "tries": {task_id: try_number}, "xcom": {"task.key": value}, "log"}`` (a
    failed run exits 0 too: assert the state). ``answers``: ``{task_id: option}`` for human-in-the-loop tasks
    (see the module doc; Airflow 3.3+). ``plan_in_process``: no spark-submit (see the module doc). ``log_file``: the
    run's output (stdout and stderr) goes there as it is written, for a test that watches the run while it runs.
    ``unpatched``: Airflow's execution API as installed (:data:`FAST_EXECUTION_API`); the log then says so, checked
    here."""
    import json
    import subprocess

    if answers:
        env = {**env, "AKR_DAGRUN_ANSWERS": json.dumps(answers),
               "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"}
    if plan_in_process:
        env = {**env, "AKR_PLAN_IN_PROCESS": str(Path(__file__).resolve().parent)}
    if unpatched:
        env = {**env, "AKR_AIRFLOW_UNPATCHED": "1"}
    argv = [sys.executable, "-c", RUNNER, str(dag_file), json.dumps(conf or {})]
    if log_file is None:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        stdout, stderr = proc.stdout, proc.stderr
    else:
        with open(log_file, "w") as out:
            proc = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        stdout, stderr = Path(log_file).read_text(), ""
    lines = [line for line in stdout.splitlines() if line.startswith("DAG-RESULT ")]
    assert lines, f"no result from the DAG run (exit {proc.returncode}):\n{stdout[-4000:]}\n{stderr[-4000:]}"
    result: dict = json.loads(lines[-1].removeprefix("DAG-RESULT "))
    result["log"] = stdout + stderr
    if unpatched or env.get("AKR_AIRFLOW_UNPATCHED"):  # what the caller asked is what ran: the runner said it
        assert "EXECUTION-API unpatched" in result["log"] and "EXECUTION-API patched" not in result["log"]
    if os.environ.get("AKR_DAGRUN_LOG_DIR"):  # keep every run's whole log (where the time goes, what a task said)
        keep = Path(os.environ["AKR_DAGRUN_LOG_DIR"])
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{time.strftime('%H%M%S')}-{dag_file.stem}.log").write_text(result["log"])
    return result


def copy_migrated_db(template: Path, home: Path) -> None:
    """Give ``home`` (an ``AIRFLOW_HOME`` using the default SQLite database) the session's migrated database."""
    import shutil

    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, home / "airflow.db")
