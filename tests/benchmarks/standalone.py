"""A Spark standalone cluster on this machine for the benchmarks: a master and N workers started from
the installed PySpark with ``spark-class`` (as tests/integration/test_spark_standalone.py starts
one), on loopback, stopped at the end. The workers' process ids are given so that a benchmark can
count their executors' CPU and memory (``TreeMemory(..., extra=...)`` in bench_spark_plan.py).

    with standalone(workers=2, cores=1, memory="4g") as (url, worker_pids):
        ...
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from airflow_kafka_reassign.spark.submit import submit_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from test_spark_standalone import free_port, wait_for_log  # noqa: E402  (the integration test's own helpers)


@contextlib.contextmanager
def standalone(workers: int = 2, cores: int = 1, memory: str = "4g") -> Iterator[tuple[str, list[int]]]:
    """``(spark://127.0.0.1:PORT, the workers' pids)`` of a master with ``workers`` workers."""
    with tempfile.TemporaryDirectory(prefix="akr-bench-standalone-") as tmp:
        work = Path(tmp)
        env = {**os.environ, **submit_env(), "SPARK_LOG_DIR": str(work), "SPARK_WORKER_DIR": str(work / "worker")}
        spark_class = str(Path(env["SPARK_HOME"]) / "bin" / "spark-class")
        port = free_port()
        url = f"spark://127.0.0.1:{port}"
        procs: list[subprocess.Popen[bytes]] = []
        try:
            log = work / "master.log"
            with log.open("w") as out:
                procs.append(subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(free_port())], env=env, stdout=out, stderr=subprocess.STDOUT))
            wait_for_log(log, "I have been elected leader")
            for i in range(workers):
                log = work / f"worker-{i}.log"
                with log.open("w") as out:
                    procs.append(subprocess.Popen(
                        [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores",
                         str(cores), "--memory", memory, "--webui-port", str(free_port()),
                         "--work-dir", str(work / f"worker-{i}"), url],
                        env=env, stdout=out, stderr=subprocess.STDOUT))
                wait_for_log(log, "Successfully registered with master")
            yield url, [p.pid for p in procs[1:]]
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
