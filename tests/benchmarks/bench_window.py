"""A maintenance window's pace (issue 27): the deferrable DAG shape, ExecuteReassignment alone and Kafka's own tool,
each against the throttle bound of the same plan. Prints numbers only.

    .venv/bin/python tests/benchmarks/bench_window.py [--workloads small,large,mix] [--throttle 10000000]
        [--max-moves 50] [--max-moves-per-broker 10] [--poke-interval 15] [--sandbox-dir DIR] [--logs DIR]

Starts its own 5-broker, 3-rack sandbox in a temporary directory (stopped on any exit) unless ``--sandbox-dir``
names a running one (its topics are then left behind). Each workload is RF-2 partitions on brokers 1-3 with real
records, and one plan that replaces the follower of every partition by broker 4 or 5 (one replica to copy per
partition, from the leader that stays):

* ``small``: 300 partitions of 1 MB; ``large``: 12 partitions of 40 MB; ``mix``: 150 of 1 MB and 6 of 40 MB.

The **throttle bound** is what no execution under the throttle can beat: for each broker the bytes it takes in
(its new replicas) and the bytes it sends as a leader, over the throttle; the largest of them
(``core.execution.schedule.throttle_bound_s``, from the replicas' sizes on disk as DescribeLogDirs reports them).

Each workload is then executed three times from the same assignment, the plan's rollback (Kafka's tool, not
timed) between them, every one under the same throttle:

* **reference**: ``kafka-reassign-partitions --execute --throttle T``, then ``--verify`` every second until it
  reports nothing in progress (the last one clears the throttles). It has no limits: every move at once;
* **execute-only**: a DAG run (``dag.test()`` in a subprocess) of ``ExecuteReassignmentOperator`` with
  ``wait_for_completion=True`` (its default poll), ``max_moves`` / ``max_moves_per_broker`` as given;
* **deferrable**: the shape the example DAGs recommend, ``ExecuteReassignmentOperator(wait_for_completion=False)``
  then ``WaitForReassignmentSensor(deferrable=True, submit_pending=True, poke_interval=...)`` with the same limits:
  the first batch from the task, the rest from the trigger as moves finish.

For each it prints the wall time. The reference: from ``--execute`` to the last ``--verify`` (a JVM start each).
Ours: the tasks' **running** time, from the first task's start (the execution API's "Task started") to the last
one's end, as a deployed worker runs them; the ``dag.test()`` call and the whole process are printed too, but they
hold what only ``dag.test()`` pays once before its first task (Airflow's import, and building its in-process
execution API: about 10 s on this machine), which a deployed worker never pays for a task. And the **copy phase** as
an outside observer sees it (``sandbox/pace.py``): a second client lists the cluster's reassignments every 0.2 s,
from the first one seen to the first sample with none left. Before a figure is printed it checks what it timed
(sizes.py): the plan's size, every partition on its target and in sync, our tasks reporting every move done and
every one timed in the log, and every throttle config of the brokers and topics exactly as before.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from bench_execute import (
    RUNNER,
    airflow_env,
    bench_sandbox,
    follower_topic,
    on_target,
    reference,
    settled,
    throttles,
)
from bench_reference import fill, wait_until
from confluent_kafka.admin import AdminClient
from sizes import expect

from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.config import to_confluent
from airflow_kafka_reassign.sandbox import Sandbox
from airflow_kafka_reassign.sandbox.pace import CopyPhase, plan_throttle_bound_s

PER_TOPIC = 50
BROKERS = [1, 2, 3, 4, 5]
#: name: ((partitions, kB each), ...)
WORKLOADS: dict[str, tuple[tuple[int, int], ...]] = {
    "small": ((300, 1_000),),
    "large": ((12, 40_000),),
    "mix": ((150, 1_000), (6, 40_000)),
}

EXECUTE_ONLY = '''
from datetime import datetime
from airflow.sdk import DAG
from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator

with DAG("bench_window_execute", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    ExecuteReassignmentOperator(task_id="execute", plan_uri={plan!r}, throttle_bytes_per_sec={throttle},
                                max_moves={max_moves}, max_moves_per_broker={per_broker})
'''

DEFERRABLE = '''
from datetime import datetime
from airflow.sdk import DAG
from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

with DAG("bench_window_deferrable", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    ExecuteReassignmentOperator(task_id="execute", plan_uri={plan!r}, throttle_bytes_per_sec={throttle},
                                max_moves={max_moves}, max_moves_per_broker={per_broker},
                                wait_for_completion=False) >> WaitForReassignmentSensor(
        task_id="wait", plan_uri={plan!r}, deferrable=True, submit_pending=True, poke_interval={poke},
        throttle_bytes_per_sec={throttle}, max_moves={max_moves}, max_moves_per_broker={per_broker},
        timeout=3600)
'''


def setup(config: dict[str, str], name: str, shape: tuple[tuple[int, int], ...]) -> tuple[list[str], ReassignmentPlan]:
    topics, moves = [], []
    for g, (partitions, kb) in enumerate(shape):
        for t in range((partitions + PER_TOPIC - 1) // PER_TOPIC):
            topic = f"bench-window-{name}-{g}-{t}"
            count = min(PER_TOPIC, partitions - t * PER_TOPIC)
            mine = follower_topic(config, topic, count, t)
            topics.append(topic)
            moves.extend(mine)
            tps = [m.tp for m in mine]
            with KafkaClusterAdmin(config) as admin:
                wait_until(lambda tp=topic, n=count: sum(1 for p in admin.snapshot(topics=[tp]).partitions
                                                         if p.leader is not None) == n, f"leaders of {topic}")
            fill(config, tps, kb)
    expect("moves in the plan", len(moves), sum(n for n, _ in shape))
    return topics, ReassignmentPlan(moves=tuple(moves))


def drop(config: dict[str, str], topics: list[str]) -> None:
    """The workload's topics deleted (their data is not needed by the next one)."""
    client = AdminClient(to_confluent(config, timeout_s=60))
    for future in client.delete_topics(topics, operation_timeout=60).values():
        future.result(120)


def running_s(output: str) -> dict[str, float]:
    """Each task's running time from a ``dag.test()`` log: from the execution API's "Task started" to "[DAG TEST]
    end task". It leaves out what only ``dag.test()`` pays before its first task (building the in-process execution
    API: about 10 s here), which a deployed worker never does (its API server has it built); ``"shape"``: from the
    first task's start to the last one's end."""
    stamp = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")
    started: dict[str, datetime] = {}
    out: dict[str, float] = {}
    task = None
    first = last = None
    for line in output.splitlines():
        m = stamp.match(line)
        if not m:
            continue
        at = datetime.fromisoformat(m.group(1))
        if (s := re.search(r"\[DAG TEST\] starting task_id=(\S+)", line)) is not None:
            task = s.group(1)
        elif "Task started" in line and task is not None and task not in started:
            started[task] = at
            first = first or at
        elif (e := re.search(r"\[DAG TEST\] end task task_id=(\S+)", line)) is not None and e.group(1) in started:
            out[e.group(1)] = (at - started[e.group(1)]).total_seconds()
            last = at
    if first is not None and last is not None:
        out["shape"] = (last - first).total_seconds()
    return out


def run_dag(env: dict[str, str], source: str, name: str, logs: Path | None = None) -> dict:
    dag_file = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / f"{name}.py"
    dag_file.write_text(source)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(dag_file)], env=env, capture_output=True, text=True,
                          timeout=3600)
    wall = time.monotonic() - started
    dag_file.unlink()
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{name}.log").write_text(proc.stdout + proc.stderr)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("BENCH-RESULT ")]
    if not lines:
        raise RuntimeError(f"no result from the DAG run: {proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    result = json.loads(lines[-1].removeprefix("BENCH-RESULT "))
    result["process_s"] = wall
    result["running"] = running_s(proc.stdout + proc.stderr)
    if result["state"] != "success":
        raise RuntimeError(f"the DAG run ended {result['state']}: {result['tis']}\n{proc.stdout[-3000:]}")
    return result


def roll_back(sandbox: Sandbox, admin: KafkaClusterAdmin, plan: ReassignmentPlan, topics: list[str], work: Path,
              clean: str) -> None:
    before = {m.tp: m.current_replicas for m in plan.moves}
    back = work / "rollback.json"
    back.write_text(plan.rollback().to_kafka_json())
    sandbox.reassign_tool(["--execute", "--reassignment-json-file", str(back)])
    wait_until(lambda: settled(admin, topics, before), "the rollback", 900)
    sandbox.reassign_tool(["--verify", "--reassignment-json-file", str(back)])
    wait_until(lambda: throttles(admin, BROKERS, topics) == clean, "the rollback's throttles to be cleared", 60)


def workload(sandbox: Sandbox, name: str, args: argparse.Namespace, tmp: Path) -> dict[str, float | None]:
    config = sandbox.client_config()
    work = tmp / name
    work.mkdir()
    t0 = time.monotonic()
    topics, plan = setup(config, name, WORKLOADS[name])
    after = {m.tp: m.target_replicas for m in plan.moves}
    admin = KafkaClusterAdmin(config, timeout_s=60)
    before = admin.snapshot(topics=topics, include_sizes=True)
    expect("partitions with sizes", sum(1 for p in before.partitions if p.replica_sizes), len(plan))
    bound = plan_throttle_bound_s(plan, before, throttle=args.throttle)
    total = sum(max(p.replica_sizes.values()) for p in before.partitions)
    print(f"\n== {name}: {len(plan)} partitions in {len(topics)} topics, {total / 1e6:.0f} MB to copy, set up in "
          f"{time.monotonic() - t0:.0f} s; throttle {args.throttle / 1e6:g} MB/s: throttle bound {bound:.1f} s",
          flush=True)
    clean = throttles(admin, BROKERS, topics)
    out: dict[str, float | None] = {"bound": bound}

    with CopyPhase(config, topics) as phase:
        ref_s, verifies = reference(sandbox, plan, args.throttle, work, every=1.0)
    expect("partitions on their targets after the reference", on_target(admin, topics, after), len(plan))
    ref_clean = throttles(admin, BROKERS, topics) == clean
    out["reference"], out["reference_copy"] = ref_s, phase.seconds
    print(f"  reference --execute + --verify every 1 s: {ref_s:.1f} s ({verifies} --verify runs), copy phase "
          f"{_s(phase.seconds)}; throttles as before: {ref_clean}", flush=True)
    roll_back(sandbox, admin, plan, topics, work, clean)

    plan_dir = work / "plan"
    env = airflow_env(work / "airflow", config)
    limits = {"throttle": args.throttle, "max_moves": args.max_moves, "per_broker": args.max_moves_per_broker}
    for shape, source in (("execute-only", EXECUTE_ONLY), ("deferrable", DEFERRABLE)):
        if plan_dir.exists():
            subprocess.run(["rm", "-rf", str(plan_dir)], check=True)
        plan_dir.mkdir()
        (plan_dir / "plan.json").write_text(plan.model_dump_json())
        (plan_dir / "metrics.json").write_text(json.dumps({"format_version": 1}))
        with CopyPhase(config, topics) as phase:
            res = run_dag(env, source.format(plan=str(plan_dir), poke=args.poke_interval, **limits),
                          f"bench_window_{shape.replace('-', '_')}",
                          args.logs / name if args.logs is not None else None)
        summary = res["xcom"].get("execute.return_value", {})
        expect(f"moves the {shape} execute task reports", summary.get("moves", 0), len(plan))
        expect(f"partitions on their targets after {shape}", on_target(admin, topics, after), len(plan))
        ok = settled(admin, topics, after)
        same = throttles(admin, BROKERS, topics) == clean
        run = res["running"]
        expect(f"tasks timed in the {shape} log", len([t for t in run if t != "shape"]), len(res["tis"]))
        out[shape], out[f"{shape}_copy"], out[f"{shape}_execute"] = run["shape"], phase.seconds, run["execute"]
        tasks = ", ".join(f"{t} {d:.1f} s" for t, d in sorted(run.items()) if t != "shape")
        print(f"  {shape}: tasks running {run['shape']:.1f} s ({tasks}); dag.test() {res['dag_test_s']:.1f} s, process "
              f"{res['process_s']:.1f} s; copy phase {_s(phase.seconds)} = {_x(phase.seconds, bound)} the bound; all in "
              f"sync: {ok}; throttles as before: {same}", flush=True)
        roll_back(sandbox, admin, plan, topics, work, clean)
    print(f"  ratios: deferrable / execute-only (tasks running) {_x(out['deferrable'], out['execute-only'])}; execute "
          f"task / reference {_x(out['execute-only_execute'], out['reference'])}; copy phase / bound: reference "
          f"{_x(out['reference_copy'], bound)}, execute-only {_x(out['execute-only_copy'], bound)}, deferrable "
          f"{_x(out['deferrable_copy'], bound)}", flush=True)
    admin.close()
    drop(config, topics)
    return out


def _s(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:.1f} s"


def _x(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="small,large,mix", help=f"of {', '.join(WORKLOADS)}")
    ap.add_argument("--throttle", type=int, default=10_000_000, help="bytes/s, every execution")
    ap.add_argument("--max-moves", type=int, default=50, help="ours, both shapes")
    ap.add_argument("--max-moves-per-broker", type=int, default=10, help="ours, both shapes")
    ap.add_argument("--poke-interval", type=float, default=15.0, help="the deferrable wait's (the examples': 15)")
    ap.add_argument("--sandbox-dir", type=Path)
    ap.add_argument("--logs", type=Path, help="keep each DAG run's output (its tasks' logs) in this directory")
    args = ap.parse_args()
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        ap.error(f"unknown workload(s) {unknown}: choose from {sorted(WORKLOADS)}")
    print(f"ours: max_moves={args.max_moves}, max_moves_per_broker={args.max_moves_per_broker}; the deferrable wait's "
          f"poke_interval={args.poke_interval:g} s; the reference tool has no limits", flush=True)
    with bench_sandbox(args.sandbox_dir, "bench-window-") as (sandbox, tmp):
        rows = {name: workload(sandbox, name, args, tmp) for name in names}
    print("\n| workload | throttle bound | reference | execute-only, running | deferrable, running | deferrable copy phase |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, r in rows.items():
        print(f"| {name} | {_s(r['bound'])} | {_s(r['reference'])} | {_s(r['execute-only'])} "
              f"({_s(r['execute-only_execute'])}) | {_s(r['deferrable'])} | {_s(r['deferrable_copy'])} "
              f"({_x(r['deferrable_copy'], r['bound'])}) |")


if __name__ == "__main__":
    main()
