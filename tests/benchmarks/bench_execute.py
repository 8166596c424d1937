"""Executing one plan: our operators in a real Airflow run vs the reference tool (issue 3). Prints numbers only.

    .venv/bin/python tests/benchmarks/bench_execute.py [--partitions 500] [--kb 100] [--throttle 10000000]
        [--poll 5] [--sandbox-dir DIR]

Starts its own 5-broker, 3-rack sandbox in a temporary directory (stopped on any exit) unless ``--sandbox-dir``
names a running one (its topics are then left behind). Creates ``--partitions`` RF-2 partitions in topics of 50
partitions, all on brokers 1-3, with ``--kb`` kB of real records each, and one plan that moves one replica of every
partition onto broker 4 or 5 (the same moves for both executions, all allowed at once, the same throttle):

* **reference**: ``kafka-reassign-partitions --execute --throttle T`` with the plan's Kafka JSON, then ``--verify``
  in a loop (what an operator does by hand) until it reports no move in progress (the last ``--verify`` also clears
  the throttles). Then the plan's rollback is executed the same way (not timed) and the cluster settles.
* **ours**: a DAG run (``dag.test()`` in a subprocess, a migrated throw-away AIRFLOW_HOME) of
  ``ExecuteReassignmentOperator(throttle_bytes_per_sec=T, poll_interval=--poll)`` followed by
  ``WaitForReassignmentSensor``: pre-flight, rollback plan, throttles set on the brokers and replicas involved,
  submission, polling, throttles restored exactly, the wait's completion check. Timed: the execute task (its
  ``elapsed_s``), the two tasks, and the whole ``dag.test()`` process (Python and Airflow start-up included).

Both end with every replica in sync and no throttle left; the script checks that and prints what it saw. Before
printing a time it checks that it timed what it says (sizes.py): the plan moves ``--partitions`` partitions, and each
execution left every one of them on its target replicas (ours also reports every move done); otherwise it stops
without the figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from bench_reference import fill, wait_until  # one producer for every partition; polling
from sizes import expect

from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import create_topic
from airflow_kafka_reassign.sandbox import Sandbox

PER_TOPIC = 50
THROTTLE_KEYS_BROKER = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")

DAG = '''
from datetime import datetime
from airflow.sdk import DAG
from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

with DAG("bench_execute", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    ExecuteReassignmentOperator(task_id="execute", plan_uri={plan!r}, throttle_bytes_per_sec={throttle},
                                poll_interval={poll}) >> WaitForReassignmentSensor(
        task_id="wait", plan_uri={plan!r}, mode="poke", deferrable=False, poke_interval=1, timeout=1800)
'''

RUNNER = '''
import json, sys, time, importlib.util
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
spec = importlib.util.spec_from_file_location("bench_dag", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
t0 = time.monotonic()
run = module.dag.test()
took = time.monotonic() - t0
with create_session() as session:
    tis = {ti.task_id: [str(ti.state), (ti.end_date - ti.start_date).total_seconds() if ti.end_date else None]
           for ti in run.get_task_instances(session=session)}
    rows = session.query(XComModel).filter_by(dag_id=module.dag.dag_id, run_id=run.run_id).all()
    xcom = {f"{r.task_id}.{r.key}": XComModel.deserialize_value(r) for r in rows}
print("BENCH-RESULT " + json.dumps({"state": str(run.state), "dag_test_s": took, "tis": tis, "xcom": xcom}, default=str))
'''


def settled(admin: KafkaClusterAdmin, topics: list[str], expected: dict[TopicPartition, tuple[int, ...]]) -> bool:
    if any(tp.topic in topics for tp in admin.list_reassignments()):
        return False
    snap = admin.snapshot(topics=topics)
    return all(len(p.isr) == len(p.replicas) and expected[p.tp] == p.replicas for p in snap.partitions)


def on_target(admin: KafkaClusterAdmin, topics: list[str], expected: dict[TopicPartition, tuple[int, ...]]) -> int:
    """How many partitions of ``topics`` have exactly their ``expected`` replicas, all in sync."""
    snap = admin.snapshot(topics=topics)
    return sum(1 for p in snap.partitions if expected.get(p.tp) == p.replicas and len(p.isr) == len(p.replicas))


def throttles(admin: KafkaClusterAdmin, brokers: list[int], topics: list[str]) -> str:
    """A fingerprint of every throttle config of the brokers and topics (empty when none is set)."""
    backup = admin.describe_throttles(brokers, topics)
    return json.dumps(backup.model_dump(mode="json"), sort_keys=True)


def follower_topic(config: dict[str, str], name: str, count: int, t: int) -> list[Move]:
    """A topic of ``count`` RF-2 partitions on brokers 1-3 (leaders rotated by ``t``), and the moves that replace each
    partition's follower by broker 4 or 5: one replica to copy per partition, sent by the leader that stays."""
    assignment = [[1 + (p + t) % 3, 1 + (p + t + 1) % 3] for p in range(count)]
    create_topic(config, name, assignment)
    return [Move(topic=name, partition=p, current_replicas=tuple(c), target_replicas=(c[0], 4 + p % 2))
            for p, c in enumerate(assignment)]


def setup(config: dict[str, str], partitions: int, kb: float) -> tuple[list[str], ReassignmentPlan]:
    topics, moves = [], []
    for t in range((partitions + PER_TOPIC - 1) // PER_TOPIC):
        name = f"bench-exec-{t}"
        topics.append(name)
        moves.extend(follower_topic(config, name, min(PER_TOPIC, partitions - t * PER_TOPIC), t))
    with KafkaClusterAdmin(config) as admin:
        wait_until(lambda: all(p.leader is not None for p in admin.snapshot(topics=topics).partitions)
                   and len(admin.snapshot(topics=topics).partitions) == partitions, "leaders of the new topics")
        expect("partitions created", len(admin.snapshot(topics=topics).partitions), partitions)
    expect("moves in the plan", len(moves), partitions)
    fill(config, [m.tp for m in moves], kb)
    return topics, ReassignmentPlan(moves=tuple(moves))


def reference(sandbox: Sandbox, plan: ReassignmentPlan, throttle: int, work: Path,
              every: float = 0.0) -> tuple[float, int]:
    """``--execute --throttle``, then ``--verify`` until nothing is in progress: the next one starts ``every``
    seconds after the previous one started (at once if that took longer). Returns (seconds, --verify runs)."""
    path = work / "reference.json"
    path.write_text(plan.to_kafka_json())
    started = time.monotonic()
    proc = sandbox.reassign_tool(["--execute", "--reassignment-json-file", str(path), "--throttle", str(throttle)])
    if proc.returncode != 0:
        raise RuntimeError(f"--execute exited {proc.returncode}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    verifies = 0
    while True:
        begun = time.monotonic()
        verify = sandbox.reassign_tool(["--verify", "--reassignment-json-file", str(path)])
        verifies += 1
        if "still in progress" not in verify.stdout and verify.returncode == 0:
            return time.monotonic() - started, verifies
        if time.monotonic() - started > 1800:
            raise TimeoutError("the reference execution did not finish in 30 minutes")
        time.sleep(max(0.0, every - (time.monotonic() - begun)))


def ours(env: dict[str, str], plan_dir: Path, throttle: int, poll: float) -> dict:
    dag_file = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / "bench_execute.py"
    dag_file.write_text(DAG.format(plan=str(plan_dir), throttle=throttle, poll=poll))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(dag_file)], env=env, capture_output=True, text=True,
                          timeout=1800)
    wall = time.monotonic() - started
    lines = [x for x in proc.stdout.splitlines() if x.startswith("BENCH-RESULT ")]
    if not lines:
        raise RuntimeError(f"no result from the DAG run: {proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    result = json.loads(lines[-1].removeprefix("BENCH-RESULT "))
    result["process_s"] = wall
    if result["state"] != "success":
        raise RuntimeError(f"the DAG run ended {result['state']}: {result['tis']}\n{proc.stdout[-3000:]}")
    return result


def airflow_env(home: Path, config: dict[str, str]) -> dict[str, str]:
    dags = home / "dags"
    dags.mkdir(parents=True)
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": config})}
    subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], env=env, check=True,
                   capture_output=True, timeout=300)
    return env


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def own_or_given(sandbox_dir: Path | None, tmp: Path) -> Iterator[Sandbox]:
    if sandbox_dir is not None:
        yield Sandbox.load(sandbox_dir)
        return
    sandbox = Sandbox(tmp / "sandbox")
    t0 = time.monotonic()
    try:
        sandbox.up(brokers=5, racks=3, timeout=300)
        print(f"sandbox up (5 brokers, racks r1 r2 r3 r1 r2): {time.monotonic() - t0:.1f} s", flush=True)
        yield sandbox
    finally:
        sandbox.down()


@contextlib.contextmanager
def bench_sandbox(sandbox_dir: Path | None, prefix: str) -> Iterator[tuple[Sandbox, Path]]:
    """A benchmark's sandbox (``sandbox_dir``'s, else its own, stopped on any exit, SIGTERM included) and a
    temporary working directory."""
    signal.signal(signal.SIGTERM, _raise_exit)
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp_name:
        tmp = Path(tmp_name)
        with own_or_given(sandbox_dir, tmp) as sandbox:
            yield sandbox, tmp


def size_args(ap: argparse.ArgumentParser, *, partitions: int, kb: float, throttle: int) -> None:
    """The plan's size and throttle options every execution benchmark takes."""
    ap.add_argument("--partitions", type=int, default=partitions)
    ap.add_argument("--kb", type=float, default=kb, help="kB of records per partition")
    ap.add_argument("--throttle", type=int, default=throttle, help="bytes/s, every execution")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=500)
    ap.add_argument("--kb", type=float, default=100.0, help="kB of records per partition")
    ap.add_argument("--throttle", type=int, default=10_000_000, help="bytes/s, both executions")
    ap.add_argument("--poll", type=float, default=5.0, help="ExecuteReassignment's poll_interval (default: its own)")
    ap.add_argument("--sandbox-dir", type=Path)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, _raise_exit)
    with tempfile.TemporaryDirectory(prefix="bench-execute-") as tmp_name:
        tmp = Path(tmp_name)
        with own_or_given(args.sandbox_dir, tmp) as sandbox:
            config = sandbox.client_config()
            t0 = time.monotonic()
            topics, plan = setup(config, args.partitions, args.kb)
            print(f"setup: {len(topics)} topics, {len(plan)} partitions, RF 2 on brokers 1-3, {args.kb:g} kB each: "
                  f"{time.monotonic() - t0:.1f} s", flush=True)
            before = {m.tp: m.current_replicas for m in plan.moves}
            after = {m.tp: m.target_replicas for m in plan.moves}
            admin = KafkaClusterAdmin(config, timeout_s=60)
            brokers = [1, 2, 3, 4, 5]
            clean = throttles(admin, brokers, topics)

            ref_s, verifies = reference(sandbox, plan, args.throttle, tmp)
            ref_ok = settled(admin, topics, after)
            # the time is for every move done: count the partitions on their targets before printing it
            expect("partitions on their targets after the reference execution", on_target(admin, topics, after),
                   len(plan))
            left = throttles(admin, brokers, topics)
            ref_clean = left == clean
            if not ref_clean:  # name what the reference left behind
                was, now = json.loads(clean), json.loads(left)
                diff = {kind: {k: v for k, v in now[kind].items() if was[kind].get(k) != v} for kind in now}
                print(f"  throttle configs the reference left behind: {json.dumps(diff, sort_keys=True)[:800]}")
            print(f"reference --execute + --verify loop: {ref_s:.1f} s ({verifies} --verify runs); all in sync on the "
                  f"target: {ref_ok}; throttles as before: {ref_clean}", flush=True)
            back = tmp / "rollback.json"
            back.write_text(plan.rollback().to_kafka_json())
            sandbox.reassign_tool(["--execute", "--reassignment-json-file", str(back)])
            wait_until(lambda: settled(admin, topics, before), "the rollback")
            sandbox.reassign_tool(["--verify", "--reassignment-json-file", str(back)])
            wait_until(lambda: throttles(admin, brokers, topics) == clean, "the rollback's throttles to be cleared", 60)

            plan_dir = tmp / "plan"
            plan_dir.mkdir()
            (plan_dir / "plan.json").write_text(plan.model_dump_json())
            (plan_dir / "metrics.json").write_text(json.dumps({"format_version": 1}))
            env = airflow_env(tmp / "airflow", config)
            res = ours(env, plan_dir, args.throttle, args.poll)
            ours_ok = settled(admin, topics, after)
            ours_clean = throttles(admin, brokers, topics) == clean
            summary = res["xcom"].get("execute.return_value", {})
            tis = res["tis"]
            expect("moves the execute task reports", summary.get("moves", 0), len(plan))
            expect("moves the execute task reports done", summary.get("done", 0), len(plan))
            expect("partitions on their targets after our execution", on_target(admin, topics, after), len(plan))
            print(f"ours (ExecuteReassignment poll_interval={args.poll:g} s + WaitForReassignment): execute task "
                  f"{tis['execute'][1]:.1f} s (engine {summary.get('elapsed_s')} s, {summary.get('steps')} steps), "
                  f"wait task {tis['wait'][1]:.1f} s, dag.test() {res['dag_test_s']:.1f} s, whole process "
                  f"{res['process_s']:.1f} s; all in sync on the target: {ours_ok}; throttles as before: {ours_clean}",
                  flush=True)
            admin.close()


if __name__ == "__main__":
    main()
