"""The Spark application of ``bench_spark_ceiling.py``: perfectly parallel CPU work, no driver work.

``spark-submit spark_ceiling_job.py SECONDS STAGES``: ``STAGES`` jobs, each of ``4 x parallelism``
tasks (the plan job's task count) that burn ``SECONDS / tasks`` of CPU in Python and return a
few bytes (the CPU seconds they burnt). Prints one JSON line: the wall time of each job, measured
on the driver from the Spark session on (the first job includes starting the Python workers, as
the plan job's first stage does), the results each job collected and the CPU burnt in all.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator


def burn(seconds: float) -> float:
    """Burn ``seconds`` of CPU; the CPU seconds actually burnt."""
    start, x = time.process_time(), 0
    while time.process_time() - start < seconds:
        for i in range(10_000):
            x += i
    return time.process_time() - start


def main() -> None:
    from pyspark.sql import SparkSession

    total, stages = float(sys.argv[1]), int(sys.argv[2])
    spark = SparkSession.builder.appName("akr-spark-ceiling").getOrCreate()
    sc = spark.sparkContext
    tasks = 4 * sc.defaultParallelism
    per_task = total / stages / tasks

    def run(_: Iterator[int]) -> Iterator[float]:
        yield burn(per_task)

    jobs, results, burnt = [], [], 0.0
    for _ in range(stages):
        t0 = time.perf_counter()
        out = sc.parallelize(range(tasks), tasks).mapPartitions(run).collect()
        jobs.append(round(time.perf_counter() - t0, 3))
        results.append(len(out))
        burnt += sum(out)
    print(json.dumps({"master": sc.master, "parallelism": sc.defaultParallelism, "tasks": tasks, "cpu_s": total,
                      "jobs_s": jobs, "results": results, "burnt_s": round(burnt, 3)}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
