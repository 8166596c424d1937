"""Where the execute task's time goes (issue 27, item 2): its phases, read from the task's own log. Prints numbers only.

    .venv/bin/python tests/benchmarks/bench_task_phases.py [--partitions 39] [--kb 1000] [--throttle 5000000]
        [--runs 3] [--sandbox-dir DIR]

The plan of ``bench_execute.py`` (``--partitions`` RF-2 partitions on brokers 1-3 of a 5-broker sandbox, one replica of
each moved to broker 4 or 5, ``--kb`` kB each), executed ``--runs`` times by a real DAG run (``dag.test()``) of
``ExecuteReassignmentOperator(poll_interval=1)`` then ``WaitForReassignmentSensor``; Kafka's tool rolls the plan back
between two runs. Each phase runs from one line of the execute task's log to the next:

* **airflow start**: the execution API's "Task started" to the operator's "Executing" line;
* **connect + pre-flight**: to "rollback plan written" (the hook's clients, the cluster's capabilities, the first
  observation of the plan);
* **throttles set**: to the first "throttle configs set" (the backup read and written, the configs written);
* **submission**: to "AlterPartitionReassignments ... sent";
* **copy**: to the line reporting every move done;
* **restore**: to "Result:" (the throttles put back and checked);
* **airflow end**: to the task's end (XCom, state).

The fixed cost is every phase but the copy. The median of the runs is printed per phase. Before a figure is printed the
script checks that it timed what it says (sizes.py): every run succeeded, reported every move done, and left every
partition on its target and every throttle config as before.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from bench_execute import DAG, RUNNER, airflow_env, bench_sandbox, on_target, settled, setup, size_args, throttles
from bench_reference import wait_until
from sizes import expect

from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

#: (phase, the log line that ends it); a phase starts where the one before ended, the first at "Task started"
PHASES = (
    ("airflow start", re.compile(r"\] Executing ")),
    ("connect + pre-flight", re.compile(r"rollback plan written")),
    ("throttles set", re.compile(r"throttle configs set")),
    ("submission", re.compile(r"AlterPartitionReassignments v\d+ sent")),
    ("copy", re.compile(r"\] (\d+)/\1 moves done")),
    ("restore", re.compile(r"\] Result: ")),
    ("airflow end", re.compile(r"end task task_id=execute")),
)
STARTED = re.compile(r"Task started")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")


def phases(log: str) -> dict[str, float]:
    """Seconds per phase of the execute task, from its log (the first task's lines only)."""
    marks: list[tuple[str, datetime]] = []
    wanted = iter(PHASES)
    name, pattern = "start", STARTED
    for line in log.splitlines():
        stamp = STAMP.match(line)
        if stamp is None or not pattern.search(line):
            continue
        marks.append((name, datetime.fromisoformat(stamp.group(1))))
        step = next(wanted, None)
        if step is None:
            break
        name, pattern = step
    expect("phases found in the execute task's log", len(marks), len(PHASES) + 1)
    return {marks[i + 1][0]: (marks[i + 1][1] - marks[i][1]).total_seconds() for i in range(len(PHASES))}


def run_once(env: dict[str, str], plan_dir: Path, throttle: int) -> tuple[dict, str]:
    dag_file = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / "bench_execute.py"
    dag_file.write_text(DAG.format(plan=str(plan_dir), throttle=throttle, poll=1))
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(dag_file)], env=env, capture_output=True, text=True,
                          timeout=1800)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("BENCH-RESULT ")]
    if not lines:
        raise RuntimeError(f"no result from the DAG run: {proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    result = json.loads(lines[-1].removeprefix("BENCH-RESULT "))
    if result["state"] != "success":
        raise RuntimeError(f"the DAG run ended {result['state']}: {result['tis']}\n{proc.stdout[-3000:]}")
    return result, proc.stdout + proc.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size_args(ap, partitions=39, kb=1000.0, throttle=5_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sandbox-dir", type=Path)
    args = ap.parse_args()
    with bench_sandbox(args.sandbox_dir, "bench-phases-") as (sandbox, tmp):
        config = sandbox.client_config()
        topics, plan = setup(config, args.partitions, args.kb)
        before = {m.tp: m.current_replicas for m in plan.moves}
        after = {m.tp: m.target_replicas for m in plan.moves}
        env = airflow_env(tmp / "airflow", config)
        brokers = [1, 2, 3, 4, 5]
        table: dict[str, list[float]] = {name: [] for name, _ in PHASES}
        with KafkaClusterAdmin(config, timeout_s=60) as admin:
            clean = throttles(admin, brokers, topics)
            for i in range(args.runs):
                plan_dir = tmp / f"plan-{i}"
                plan_dir.mkdir()
                (plan_dir / "plan.json").write_text(plan.model_dump_json())
                (plan_dir / "metrics.json").write_text(json.dumps({"format_version": 1}))
                result, log = run_once(env, plan_dir, args.throttle)
                summary = result["xcom"].get("execute.return_value", {})
                expect("moves the execute task reports done", summary.get("done", 0), len(plan))
                expect("partitions on their targets", on_target(admin, topics, after), len(plan))
                expect("throttle configs as before (1 = yes)", int(throttles(admin, brokers, topics) == clean), 1)
                for name, seconds in phases(log).items():
                    table[name].append(seconds)
                back = tmp / f"rollback-{i}.json"
                back.write_text(plan.rollback().to_kafka_json())
                sandbox.reassign_tool(["--execute", "--reassignment-json-file", str(back)])
                wait_until(lambda: settled(admin, topics, before), "the rollback")
                sandbox.reassign_tool(["--verify", "--reassignment-json-file", str(back)])
                wait_until(lambda: throttles(admin, brokers, topics) == clean, "the rollback's throttles cleared", 60)
    print(f"\nexecute task of {len(plan)} moves, {args.kb:g} kB each, {args.throttle:,} B/s, poll 1 s: median of "
          f"{args.runs} runs (each run)")
    for name, values in table.items():
        print(f"  {name:<22} {statistics.median(values):5.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
    fixed = [sum(v[i] for n, v in table.items() if n != "copy") for i in range(args.runs)]
    print(f"  {'fixed (all but copy)':<22} {statistics.median(fixed):5.2f} s  ({', '.join(f'{v:.2f}' for v in fixed)})")
    whole = [sum(v[i] for v in table.values()) for i in range(args.runs)]
    print(f"  {'the task, in all':<22} {statistics.median(whole):5.2f} s  ({', '.join(f'{v:.2f}' for v in whole)})")


if __name__ == "__main__":
    main()
