"""What the provider's Airflow plugin costs the processes that load it. Prints numbers only.

    .venv/bin/python tests/benchmarks/bench_plugin.py [--runs 3]

Airflow loads plugins in every process that deserializes operators (the scheduler, the dag processor, a task run
under ``dag.test()``); only the API server mounts their FastAPI apps. Each run is a fresh process (median of
``--runs``): Airflow's SDK and plugins manager imported first (the baseline every such process pays), then the
plugin module (``report.server``), then its apps read (``fastapi_apps``: what only the API server does). CPU
seconds of the process (user + system), each step's increment printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

STEP = r'''
import json, os, time
def cpu():
    t = os.times()
    return t.user + t.system
out = {}
c = cpu()
import airflow.sdk, airflow.plugins_manager
out["airflow"] = cpu() - c
c = cpu()
from airflow_kafka_reassign.report.server import KafkaReassignPlugin
out["plugin module"] = cpu() - c
c = cpu()
apps = KafkaReassignPlugin.fastapi_apps
out["its apps read (API server only)"] = cpu() - c
print(json.dumps(out))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = [json.loads(subprocess.run([sys.executable, "-c", STEP], capture_output=True, text=True,
                                      check=True).stdout.splitlines()[-1]) for _ in range(args.runs)]
    print(f"fresh processes: {args.runs}; CPU seconds, median (min-max)")
    for key in ("airflow", "plugin module", "its apps read (API server only)"):
        values = [r[key] for r in runs]
        print(f"  {key:<34} {statistics.median(values):5.2f} ({min(values):.2f}-{max(values):.2f})")


if __name__ == "__main__":
    main()
