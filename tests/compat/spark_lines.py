"""The Spark plan job on another PySpark line: the same plan files byte for byte (``make compat-spark``).

Many clusters still run PySpark 3.5 (EMR, Dataproc). The job (airflow_kafka_reassign/spark/plan_job.py)
uses nothing newer than Spark 3.3 (``mapInArrow``), so it is meant to run unchanged on 3.5 and 4.x.
This check proves it: it builds a second environment with ``pyspark==3.5.*`` (in .tools/compat/,
with uv, cached), makes a synthetic snapshot, runs the job with each line's ``spark-submit`` on
``local[2]`` through both of its readers (row groups from the file; the Spark DataFrame reader), and
compares the four plan files byte for byte. It prints the wall times and exits 1 on any difference.

Usage: ``.venv/bin/python tests/compat/spark_lines.py [--replicas 20000] [--pyspark 3.5.9]``
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from airflow_kafka_reassign.core.planner.synthetic import synthetic_cluster, to_snapshot  # noqa: E402
from airflow_kafka_reassign.core.records.plan_io import KAFKA_PLAN_FILE, KAFKA_ROLLBACK_FILE, PLAN_FILE, ROLLBACK_FILE  # noqa: E402
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot  # noqa: E402
from airflow_kafka_reassign.spark.submit import plan_job_args, plan_job_path, spark_submit_command  # noqa: E402

UV = ROOT / ".tools" / "uv" / "bin" / "uv"
FILES = (PLAN_FILE, ROLLBACK_FILE, KAFKA_PLAN_FILE, KAFKA_ROLLBACK_FILE)


def environment(version: str) -> Path:
    """A venv with PySpark ``version`` and the job's own needs (pydantic, numpy, pyarrow, pandas)."""
    venv = ROOT / ".tools" / "compat" / f"pyspark-{version}"
    python = venv / "bin" / "python"
    if not (venv / ".ready").is_file():
        subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        # pyarrow 26 needs numpy 2; PySpark 3.5's sql extra caps numpy below 2: no [sql] extra, pandas listed
        subprocess.run([str(UV), "pip", "install", "-q", "--python", str(python), f"pyspark=={version}",
                        "pydantic>=2.7,<3", "numpy", "pyarrow>=15", "pandas>=2"], check=True)
        (venv / ".ready").write_text(version + "\n")
    return python


def run_job(python: Path, snapshot: Path, out: Path, request: Path, reader: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": str(python), "SPARK_LOCAL_IP": "127.0.0.1"}
    code = ("import sys; from airflow_kafka_reassign.spark.submit import *; "
            "sys.stdout.write('\\0'.join(spark_submit_command(plan_job_path(), sys.argv[1:], master='local[2]')))")
    args = [*plan_job_args(str(snapshot), str(out), str(request)), "--reader", reader]
    env_py = {**env, "PATH": f"{python.parent}:{env.get('PATH', '')}"}
    cmd = subprocess.run([str(python), "-c", code, *args], env=env_py, capture_output=True, text=True, check=True)
    command = cmd.stdout.split("\0")
    started = time.perf_counter()
    done = subprocess.run(command, env=env_py, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the plan job failed on {python}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=20_000)
    ap.add_argument("--pyspark", default="3.5.9", help="the other PySpark line's version (default 3.5.9)")
    args = ap.parse_args(argv)
    assert spark_submit_command and plan_job_path  # imported for the subprocesses' sake too
    other = environment(args.pyspark)
    versions = {
        "this environment": Path(sys.executable),
        f"pyspark {args.pyspark}": other,
    }
    with tempfile.TemporaryDirectory(prefix="akr-compat-") as tmp:
        work = Path(tmp)
        snapshot = work / "snapshot"
        cluster = synthetic_cluster(brokers=20, racks=3, new_brokers=2, replicas=args.replicas, seed=7)
        write_snapshot(to_snapshot(cluster, validate=False), snapshot)
        request = work / "request.json"
        request.write_text('{"goal": "add-brokers"}')
        failed = False
        for reader in ("broadcast", "spark"):
            outs = {}
            for label, python in versions.items():
                version = subprocess.run([str(python), "-c", "import pyspark; print(pyspark.__version__)"],
                                         capture_output=True, text=True, check=True).stdout.strip()
                out = work / f"plan-{reader}-{version}"
                wall = run_job(python, snapshot, out, request, reader)
                outs[version] = out
                print(f"reader={reader:9s} pyspark {version:6s} ({label}): spark-submit {wall:5.1f} s")
            (a, pa), (b, pb) = outs.items()
            for name in FILES:
                same = filecmp.cmp(pa / name, pb / name, shallow=False)
                failed |= not same
                print(f"  {name:22s} {'identical' if same else 'DIFFERENT'} ({a} vs {b})")
    print("FAILED: the plans differ" if failed else f"OK: the same plan on both PySpark lines ({args.replicas} replicas)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
