"""A Class Data Sharing archive for the test run's spark-submit JVMs: each plan job's driver JVM starts on less CPU.

The integration tests run about twenty spark-submits (the plan job on local Spark, in the Spark tests and the DAG
runs that plan for real). On a 2-core machine the run is bound by CPU (tests/cpu_use.py), and a spark-submit of a
small plan spends most of its JVM's CPU loading and verifying Spark's classes: with a dynamic CDS archive of them
(``-XX:ArchiveClassesAtExit``, taken once from a throw-away plan job), one took 3.8-4.1 s of CPU instead of
5.6-5.7 s (30,000 replicas, ``local[2]``, a quiet machine; docs/testing.md).

xdist's controller calls :func:`start` before it starts its workers: it points ``SPARK_SUBMIT_OPTS`` (what
``spark-class`` gives the driver JVM in client mode; everything the run starts inherits it) at the archive of this
PySpark and JVM in the cache, and trains it in the background when it is missing. As with the sandbox's Kafka
archives (``airflow_kafka_reassign.sandbox.cds``), a JVM started before the archive exists, or with another class
path (``--jars``), runs without it, silently (``-Xshare:auto``, CDS logging off): the archive changes how fast the
driver starts, never what the job does. ``AKR_SANDBOX_CDS=0`` turns it off with the Kafka archives.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from airflow_kafka_reassign.sandbox import cds
from airflow_kafka_reassign.sandbox.maven import cache_root
from airflow_kafka_reassign.sandbox.processes import java

OPTS_ENV = "SPARK_SUBMIT_OPTS"
ARCHIVE = "spark-submit.jsa"

#: the training job: the plan job on a small synthetic snapshot, the archive written when its JVM exits
_TRAIN = '''
import os, shutil, subprocess, sys
from pathlib import Path
from airflow_kafka_reassign.core.planner import PlanRequest
from airflow_kafka_reassign.core.planner.synthetic import synthetic_cluster, to_snapshot
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot
from airflow_kafka_reassign.spark.submit import plan_job_path, spark_submit_command, submit_env

work, archive = Path(sys.argv[1]), Path(sys.argv[2])
snapshot = write_snapshot(to_snapshot(synthetic_cluster(brokers=6, racks=3, new_brokers=1, replicas=3_000, seed=1)),
                          work / "snapshot")
partial = work / "archive.jsa"
cmd = spark_submit_command(plan_job_path(), ["--snapshot", str(snapshot), "--out", str(work / "plan"),
                                             "--request-json", PlanRequest(goal="add-brokers").model_dump_json()],
                           master="local[2]")
env = {**os.environ, **submit_env(), "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial} {sys.argv[3]}"}
done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
if done.returncode != 0 or not partial.exists():
    sys.exit(f"the training plan job exited {done.returncode}: {done.stderr[-2000:]}")
archive.parent.mkdir(parents=True, exist_ok=True)
os.replace(partial, archive)  # whole or not at all: a JVM never maps half an archive
shutil.rmtree(work, ignore_errors=True)
'''


def archive_path() -> Path:
    """The archive of this PySpark and this JVM (an archive fits only the JVM and class path that wrote it)."""
    import pyspark

    return cache_root().parent / "spark-cds" / pyspark.__version__ / cds.jvm_key(java()) / ARCHIVE


def start() -> subprocess.Popen[bytes] | None:
    """Point ``SPARK_SUBMIT_OPTS`` at the archive; train it in the background if it is missing (the process, to be
    waited for or killed at the end of the run), or ``None``."""
    if not cds.enabled() or OPTS_ENV in os.environ:  # turned off, or the user's own options: left as they are
        return None
    archive = archive_path()
    os.environ[OPTS_ENV] = f"-XX:SharedArchiveFile={archive} {cds.QUIET}"
    if archive.exists():
        return None
    work = tempfile.mkdtemp(prefix="akr-spark-cds-")
    env = {k: v for k, v in os.environ.items() if k != OPTS_ENV}
    return subprocess.Popen([sys.executable, "-c", _TRAIN, work, str(archive), cds.QUIET], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
