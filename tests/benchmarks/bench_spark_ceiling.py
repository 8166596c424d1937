"""What ``local[2]`` can gain over ``local[1]`` on this machine at best: prints numbers, asserts nothing about time.

The plan job's speed-up (``bench_spark_plan.py --compare``) is measured against this ceiling:
the same spark-submit and conf, but perfectly parallel Python work (``spark_ceiling_job.py``)
with no driver step at all, as many tasks as the plan job, and the CPU the plan job's
executor tasks spend at 1M replicas (about 10 s in Python, split over 3 stages). It prints,
for ``local[1]`` and ``local[2]``, the wall time of each job and the speed-ups: with the
Python workers' start (the first job, as in any job's first stage) and without.

    .venv/bin/python tests/benchmarks/bench_spark_ceiling.py              # 10 s of CPU in 3 stages
    .venv/bin/python tests/benchmarks/bench_spark_ceiling.py --cpu 20 --stages 1

Before printing, each run is checked (sizes.py): its parallelism, jobs, task results and the CPU
its tasks burnt are what the benchmark says.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from sizes import at_least, expect

from airflow_kafka_reassign.spark.submit import spark_submit_command, submit_env

JOB = Path(__file__).with_name("spark_ceiling_job.py")


def run(master: str, cpu: float, stages: int) -> dict:
    cmd = spark_submit_command(str(JOB), [str(cpu), str(stages)], master=master, options=["--driver-memory", "2g"])
    proc = subprocess.run(cmd, env={**os.environ, **submit_env()}, capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"ceiling job failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", type=float, default=10.0, help="seconds of Python CPU in all (default 10)")
    ap.add_argument("--stages", type=int, default=3, help="jobs the CPU is split over (default 3)")
    args = ap.parse_args()
    print(f"ceiling: perfectly parallel Python tasks, {args.cpu:g} s of CPU in {args.stages} job(s), no driver work; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)
    one, two = run("local[1]", args.cpu, args.stages), run("local[2]", args.cpu, args.stages)
    for r, cores in ((one, 1), (two, 2)):  # each job ran the tasks it says and burnt the CPU it says
        expect(f"parallelism of {r['master']}", r["parallelism"], cores)
        expect(f"jobs on {r['master']}", len(r["jobs_s"]), args.stages)
        expect(f"task results per job on {r['master']}", sum(r["results"]), args.stages * 4 * cores)
        at_least(f"centiseconds of CPU burnt on {r['master']}", round(100 * r["burnt_s"]), round(100 * args.cpu))
    for r in (one, two):
        print(f"  {r['master']:<9} {r['tasks']} tasks per job: jobs {r['jobs_s']} s, total {sum(r['jobs_s']):.2f} s", flush=True)
    total = sum(one["jobs_s"]) / sum(two["jobs_s"])
    print(f"  speed-up local[1] / local[2]: {total:.2f}x with the Python workers' start", flush=True)
    if args.stages > 1:
        warm = sum(one["jobs_s"][1:]) / sum(two["jobs_s"][1:])
        print(f"  speed-up without the first job (workers running): {warm:.2f}x", flush=True)


if __name__ == "__main__":
    sys.exit(main())
