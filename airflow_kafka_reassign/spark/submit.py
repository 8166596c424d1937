"""How the plan job is submitted: the application file, the spark-submit binary, the conf.

No Airflow import: the CLI submits with :func:`submit_plan` (a subprocess), the operator with
the Spark provider's SparkSubmitHook using :func:`plan_job_path`, :func:`spark_submit_binary`
and :func:`default_conf`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Exit code of the plan job when the input cannot give a sound plan (see plan_job.py).
EXIT_BAD_INPUT = 2
DEFAULT_MASTER = "local[*]"


def plan_job_path() -> str:
    """Absolute path of the application file ``plan_job.py``."""
    return str(Path(__file__).with_name("plan_job.py").resolve())


def log4j_config_path() -> str:
    return str(Path(__file__).with_name("log4j2.properties").resolve())


def spark_submit_binary() -> str:
    """The ``spark-submit`` of this environment (next to its python), else the one on PATH.

    Absolute, so the job runs with the same PySpark (and the same Python packages) as the
    caller whatever PATH the Airflow worker has.
    """
    here = Path(sys.executable).parent / "spark-submit"
    if here.is_file():
        return str(here)
    found = shutil.which("spark-submit")
    if found is None:
        raise FileNotFoundError(
            "spark-submit not found next to the Python interpreter nor on PATH: install pyspark "
            "(it ships spark-submit) in this environment"
        )
    return found


def submit_env() -> dict[str, str]:
    """Environment spark-submit needs: SPARK_HOME of the installed PySpark (spark-submit's own
    search runs whatever ``python3`` is on PATH, which may not see PySpark), this Python for
    the workers, and the loopback address for local masters."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    env = {
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        # PySpark 4.2 warns about pandas 3 on import; the job does not use pandas
        "PYTHONWARNINGS": "ignore:PySpark does not yet fully support pandas:FutureWarning",
    }
    if spec is not None and spec.origin:
        env["SPARK_HOME"] = os.environ.get("SPARK_HOME", str(Path(spec.origin).parent))
    return env


def default_conf(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark conf for the plan job: this Python on driver and executors, no UI, quiet logs.

    The driver JVM lives for seconds and does little of the work (the Python processes do):
    it runs with the client compiler only and the serial collector, which spend less CPU
    beside the Python workers (on 2 cores, ``spark-submit`` of a 1M-replica plan 1.4-2.2 s
    faster, see docs/performance.md). Executors on a cluster keep the JVM's defaults. The
    Python workers start under :mod:`airflow_kafka_reassign.spark.daemon` (PySpark's daemon,
    with PySpark's cached bytecode where pip installed it). ``extra`` replaces any of these
    keys whole.
    """
    quiet = f"-Dlog4j2.configurationFile=file:{log4j_config_path()}"
    conf = {
        "spark.ui.enabled": "false",
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "spark.pyspark.driver.python": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
        "spark.driver.extraJavaOptions": f"{quiet} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "spark.executor.extraJavaOptions": quiet,
        "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
        # PySpark from its installed package, not recompiled from Spark's zip every job
        "spark.python.daemon.module": "airflow_kafka_reassign.spark.daemon",
    }
    conf.update(extra or {})
    return conf


def plan_job_args(snapshot: str, out: str, request_file: str, *, partitions: int | None = None) -> list[str]:
    args = ["--snapshot", snapshot, "--out", out, "--request", request_file]
    if partitions:
        args += ["--partitions", str(partitions)]
    return args


def spark_submit_command(
    app: str,
    app_args: Sequence[str] = (),
    *,
    master: str = DEFAULT_MASTER,
    conf: Mapping[str, str] | None = None,
    options: Sequence[str] = (),
) -> list[str]:
    """The spark-submit command line of ``app`` with the plan job's conf (:func:`default_conf`
    over ``conf``); ``options`` go before the conf (``--driver-memory 2g``, say)."""
    cmd = [spark_submit_binary(), "--master", master, *options]
    for k, v in default_conf(conf).items():
        cmd += ["--conf", f"{k}={v}"]
    return [*cmd, app, *app_args]


def submit_plan(
    snapshot: str,
    out: str,
    request_file: str,
    *,
    master: str = DEFAULT_MASTER,
    conf: Mapping[str, str] | None = None,
    partitions: int | None = None,
    capture: bool = False,
    environment: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the plan job with spark-submit in a subprocess; returns the completed process.

    Its output (spark-submit prints the Python driver's stderr on stdout) goes to this
    process's stderr unless ``capture``, so stdout stays free for the caller's own result.
    ``environment``: more variables for the job (storage credentials: never on its command line).
    """
    cmd = spark_submit_command(
        plan_job_path(), plan_job_args(snapshot, out, request_file, partitions=partitions), master=master, conf=conf
    )
    env = {**os.environ, **submit_env(), **(environment or {})}
    if capture:
        return subprocess.run(cmd, env=env, text=True, capture_output=True, check=False)
    return subprocess.run(cmd, env=env, text=True, stdout=sys.stderr, check=False)
