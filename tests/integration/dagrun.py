"""Run a DAG file once as a real Airflow run (``dag.test()`` in a subprocess) and read its outcome.

Use with the ``airflow_home`` fixture (tests/integration/conftest.py)::

    result = run_dag_file(airflow_home, dag_file, {"brokers": [4]})
    assert result["state"] == "success", result["log"][-4000:]
"""

from __future__ import annotations

import sys
from pathlib import Path

RUNNER = '''
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

spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
dag = getattr(module, sys.argv[2]) if len(sys.argv) > 3 and sys.argv[2] else next(
    v for v in vars(module).values() if type(v).__name__ == "DAG")
run = dag.test(run_conf=json.loads(sys.argv[-1]))
with create_session() as session:
    tis = {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}
    rows = session.query(XComModel).filter_by(dag_id=dag.dag_id, run_id=run.run_id).all()
    xcom = {f"{r.task_id}.{r.key}": XComModel.deserialize_value(r) for r in rows}
print("DAG-RESULT " + json.dumps({"state": str(run.state), "tis": tis, "xcom": xcom}, default=str))
'''


def run_dag_file(env: dict[str, str], dag_file: Path, conf: dict | None = None, *, timeout: float = 600) -> dict:
    """Run the DAG of ``dag_file`` once with ``dag.test()`` in a subprocess; returns
    ``{"state", "tis": {task_id: state}, "xcom": {"task.key": value}, "log"}`` (a failed run
    exits 0 too: assert the state)."""
    import json
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(dag_file), json.dumps(conf or {})],
        env=env, capture_output=True, text=True, timeout=timeout,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("DAG-RESULT ")]
    assert lines, f"no result from the DAG run (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    result: dict = json.loads(lines[-1].removeprefix("DAG-RESULT "))
    result["log"] = proc.stdout + proc.stderr
    return result


def copy_migrated_db(template: Path, home: Path) -> None:
    """Give ``home`` (an ``AIRFLOW_HOME`` using the default SQLite database) the session's migrated database."""
    import shutil

    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, home / "airflow.db")
