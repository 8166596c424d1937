"""An Airflow executor for the tests: every task try in a fresh process with its own directories.

What a Celery worker or a Kubernetes pod gives a task, on one machine: the try runs as
``python -m airflow.sdk.execution_time.execute_workload`` (the entry point of Airflow's container
executors) in a new process whose working directory, ``TMPDIR`` and ``AIRFLOW_HOME`` are its own
and empty, talking to the API server only (no metadata database). When the process ends, its
directories are checked and deleted, so no later task (nor the triggerer) can read anything from
them:

* ``AKR_OUTPUT_DIR`` points into the worker's own folder and must never be created (a plan
  written to a worker's disk);
* nothing named ``akr-*`` may be left in its ``TMPDIR``.

One JSON line per try goes to ``$AKR_WORKERS_DIR/tries.jsonl`` (task, try, exit code, the
violations found); the task's output to ``$AKR_WORKERS_DIR/<dag>.<task>.<try>.log``. Configure
with ``AIRFLOW__CORE__EXECUTOR=isolated_executor.IsolatedProcessExecutor`` and this folder on
``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from airflow.executors import workloads
from airflow.executors.base_executor import BaseExecutor


class IsolatedProcessExecutor(BaseExecutor):
    """Each ExecuteTask workload in its own process and directories (see the module docstring)."""

    is_local = True
    serve_logs = False

    def start(self) -> None:
        self.root = Path(os.environ["AKR_WORKERS_DIR"])
        self.root.mkdir(parents=True, exist_ok=True)
        self.procs: dict[Any, tuple[subprocess.Popen[bytes], Path, dict[str, Any]]] = {}

    def _process_workloads(self, workload_items: Any) -> None:
        for workload in workload_items:
            if not isinstance(workload, workloads.ExecuteTask):
                raise NotImplementedError(f"{type(workload).__name__} is not run by this test executor")
            ti = workload.ti
            key = ti.key
            self.queued_tasks.pop(key, None)
            name = f"{ti.dag_id}.{ti.task_id}.{ti.try_number}"
            worker = self.root / "workers" / f"{name}-{uuid.uuid4().hex[:6]}"
            cwd, tmp, home = worker / "cwd", worker / "tmp", worker / "airflow-home"
            for d in (cwd, tmp, home):
                d.mkdir(parents=True)
            spec = worker / "workload.json"  # the workload's token stays off the command line
            spec.write_text(workload.model_dump_json())
            env = {**os.environ, "TMPDIR": str(tmp), "AIRFLOW_HOME": str(home),
                   "AKR_OUTPUT_DIR": str(worker / "must-stay-unused"), "PYTHONUNBUFFERED": "1"}
            env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)  # a worker has no database, only the API
            out = (self.root / f"{name}.log").open("ab")
            proc = subprocess.Popen(
                [sys.executable, "-m", "airflow.sdk.execution_time.execute_workload", "--json-path", str(spec)],
                cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            out.close()
            self.running.add(key)
            self.procs[key] = (proc, worker, {"dag_id": ti.dag_id, "task_id": ti.task_id, "try": ti.try_number,
                                              "pid": proc.pid})

    def sync(self) -> None:
        for key, (proc, worker, info) in list(self.procs.items()):
            rc = proc.poll()
            if rc is None:
                continue
            del self.procs[key]
            violations = []
            if (worker / "must-stay-unused").exists():
                violations.append("wrote plan files under AKR_OUTPUT_DIR on the worker's disk")
            left = sorted(p.name for p in (worker / "tmp").iterdir() if p.name.startswith("akr-"))
            if left:
                violations.append(f"left local files in its TMPDIR: {left}")
            shutil.rmtree(worker, ignore_errors=True)
            with (self.root / "tries.jsonl").open("a") as f:
                f.write(json.dumps({**info, "exit_code": rc, "violations": violations}) + "\n")
            if rc == 0:
                self.success(key)
            else:
                self.fail(key)

    def end(self) -> None:
        for proc, *_ in self.procs.values():
            proc.wait()
        self.sync()

    def terminate(self) -> None:
        for proc, *_ in self.procs.values():
            proc.terminate()
