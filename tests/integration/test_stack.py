"""The production stack for real: PostgreSQL, the CeleryExecutor on Redis with two workers, a triggerer.

One stack (:mod:`airflow_kafka_reassign.sandbox.stack`) for the module, on the session's Kafka sandbox and S3 store:
an API server, a scheduler, a DAG processor and a triggerer on a throw-away PostgreSQL, and two Celery workers, each
with its own working directory, ``TMPDIR``, ``AIRFLOW_HOME`` and copy of the DAGs, sharing nothing but the
database, the broker queue, Kafka and the plan storage. Which worker ran each task try is read from the database
(``task_instance`` and ``task_instance_history``: the workers name themselves ``stack-worker-N``).

* the decommission example DAG, unchanged, triggered as a user would (``airflow dags trigger``), every try on a
  worker of the stack, plans on S3, nothing left on a worker's disk;
* a deferrable wait whose trigger runs in the separate triggerer and reads only the store;
* the worker running ``execute`` SIGKILLed mid-batch: Airflow's retry runs on the other worker and finishes the plan;
* a run whose worker died with no retry left: the next run of the plan is refused in one line naming it, and a run
  with ``take_over_from`` finishes the plan at once;
* the triggerer SIGKILLed during a deferrable wait that submits the plan itself: restarted, it carries on;
* PostgreSQL restarted during that wait: the scheduler, the triggerer and the DAG processor exit with it,
  :meth:`Stack.revive` starts them again (a process supervisor's job) and the run finishes;
* Redis restarted while a run is held between two tasks by a sensor: the next task is queued and runs on a worker.

The faults assert the cluster as before: every broker's dynamic configs and the topic's throttle configs identical,
every partition at its target, the replication factor unchanged, no partition submitted twice. Each fault runs
acks=all traffic on the plan's topic through it and reads every acknowledged record back (``Traffic``); "submitted
once" is judged from the controller too (``controller_listing.Episodes``: ListPartitionReassignments sampled by a
kafka-python client of the test's own, one in-flight episode per partition), not only from the project's journal;
and the faults that come mid-plan (a worker, the triggerer, PostgreSQL) read at the fault, from the controller's
listing and the metadata, that a move was in flight and another not sent yet (``at_the_fault``).
"""

from __future__ import annotations

import json
import re
import secrets
import signal
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from controller_listing import Episodes, admin_client, in_flight
from kafka_helpers import Traffic, dynamic_broker_configs, make_topic, put_plan, replicas, throttles

from airflow_kafka_reassign.core.execution.run_state import DRAIN_ROUND
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.sandbox import wait_until
from airflow_kafka_reassign.sandbox.objectstore import ObjectStoreSandbox
from airflow_kafka_reassign.sandbox.stack import STORAGE_CONN_ID, Stack

#: the stack's start-up (the first test's setup) and a run of the decommission example (Spark planning) together
pytestmark = pytest.mark.timeout(1800)

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "example_dags"


@pytest.fixture(scope="module")
def stack(sandbox, object_store, tmp_path_factory) -> Iterator[Stack]:
    started = time.monotonic()
    st = Stack(tmp_path_factory.mktemp("stack"))
    info = st.up(kafka_dir=sandbox.dir, object_store_dir=object_store.dir, dags=None, heartbeat_timeout_s=20)
    print(f"\nthe stack started in {time.monotonic() - started:.1f} s: {info['took_s']}")
    try:
        yield st
    finally:
        pids = dict(st.state["pids"])
        stopped = st.down()
        print(f"\nthe stack stopped: {stopped}")
        running = {n: pid for n, pid in pids.items() if st.process_running(pid)}
        assert not running, f"processes of the stack left running: {running}"


# -- helpers ------------------------------------------------------------------------------------------

def deploy(stack: Stack, dag_file: Path, dag_id: str) -> None:
    """Deploy a DAG file (to the DAG processor and each worker) and wait until it is parsed and unpaused."""
    stack.add_dag(dag_file)
    wait_until(lambda: stack.query("select 1 from serialized_dag where dag_id=%s", dag_id),
               f"the DAG processor to parse {dag_id}", 180, 1)
    stack.cli("dags", "unpause", dag_id)


def trigger(stack: Stack, dag_id: str, conf: dict | None = None, prefix: str = "stack") -> str:
    run_id = f"{prefix}-{secrets.token_hex(3)}"
    stack.cli("dags", "trigger", dag_id, "--run-id", run_id, "--conf", json.dumps(conf or {}))
    return run_id


def run_state(stack: Stack, dag_id: str, run_id: str) -> str | None:
    rows = stack.query("select state from dag_run where dag_id=%s and run_id=%s", dag_id, run_id)
    return rows[0][0] if rows else None


def wait_run(stack: Stack, dag_id: str, run_id: str, timeout: float = 900) -> str:
    try:
        return wait_until(lambda: (s := run_state(stack, dag_id, run_id)) in ("success", "failed") and s,
                          f"the {dag_id} run {run_id} to end", timeout, 2)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n--- scheduler\n{stack.tail('scheduler')}\n--- triggerer\n"
                             f"{stack.tail('triggerer')}") from None


def tries(stack: Stack, dag_id: str, run_id: str) -> list[dict]:
    """Every try of every task of the run, earlier ones (``task_instance_history``) and the last, with the worker
    (hostname) and process that ran it."""
    rows = stack.query(
        "select task_id, try_number, state, hostname, pid from task_instance_history where dag_id=%s and run_id=%s "
        "union all select task_id, try_number, state, hostname, pid from task_instance where dag_id=%s and run_id=%s "
        "order by 1, 2", dag_id, run_id, dag_id, run_id)
    return [dict(zip(("task_id", "try", "state", "hostname", "pid"), r, strict=True)) for r in rows]


def xcom(stack: Stack, dag_id: str, run_id: str, task_id: str) -> dict:
    """A task's ``return_value`` (a JSON column on PostgreSQL: psycopg2 returns it decoded)."""
    value = stack.query("select value from xcom where dag_id=%s and run_id=%s and task_id=%s and key='return_value'",
                        dag_id, run_id, task_id)[0][0]
    return value if isinstance(value, dict) else json.loads(value)


def log_folders(stack: Stack, dag_id: str, run_id: str, task_id: str) -> list[Path]:
    """Where a task's logs are: the remote log store (the object store, where workers and the triggerer upload them)
    and the triggerer's disk (a trigger's lines as it runs)."""
    part = Path("logs") / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    store = stack.object_store
    return [Path(store.state["data_dir"]) / store.bucket / part, stack.home("triggerer") / part]


def task_log(stack: Stack, dag_id: str, run_id: str, task_id: str, attempt: int = 1, *, marker: str = "",
             timeout: float = 120) -> str:
    """A task try's log as the UI reads it, from the object store (remote logging), once it holds ``marker``: the
    worker uploads it after the try reported its state. What is there after ``timeout`` s otherwise."""
    # the try's own log (remote), and what the triggerer wrote for it (its trigger's lines, on its disk)
    folders = log_folders(stack, dag_id, run_id, task_id)

    def read() -> str:
        files = [p for folder in folders for p in folder.glob(f"attempt={attempt}.log*")]
        return "\n".join(p.read_text(errors="replace") for p in sorted(files) if p.is_file())

    try:
        return wait_until(lambda: (text := read()) and marker in text and text, f"the log of {task_id} holding "
                          f"{marker!r}", timeout, 1)
    except TimeoutError:
        return read()


def logs_of(stack: Stack, dag_id: str, run_id: str) -> str:
    store = stack.object_store
    root = Path(store.state["data_dir"]) / store.bucket / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(root.rglob("*.log"))) if root.exists() else ""


def assert_nothing_on_the_workers_disks(stack: Stack) -> None:
    """No plan written under a worker's (or the triggerer's) AKR_OUTPUT_DIR; nothing of ours left in its TMPDIR."""
    for name in [*stack.workers, "triggerer"]:
        own = stack.dir / name
        assert not (own / "must-stay-unused").exists(), f"{name} wrote plan files on its own disk"
        left = [p.name for p in (own / "tmp").iterdir() if p.name.startswith("akr-")]
        assert not left, f"{name} left local files in its TMPDIR: {left}"


def journal_submitted(store: ObjectStoreSandbox, prefix: str) -> list[tuple[str, int]]:
    """Every partition the plan's journal records as submitted (by any run, any try)."""
    data = Path(store.state["data_dir"]) / store.bucket / prefix / "plan" / "run" / "journal"
    entries = [json.loads(p.read_text()) for p in sorted(data.iterdir())] if data.is_dir() else []
    return sorted((t, p) for e in entries for t, p, _ in e.get("submitted", []))


def execute_dag(stack: Stack, dag_id: str, plan_uri: str, *, retries: int, gate: bool = False) -> None:
    """A DAG of one execute task on a fixed plan (runs of it share the plan and its lease), 1 move at a time.
    ``gate``: a sensor before it holds each run until the Variable ``akr_gate_<run id>`` exists (:func:`open_gate`)."""
    path = stack.dir / f"{dag_id}.py"
    path.write_text(textwrap.dedent(f'''
        from datetime import datetime, timedelta
        from airflow.sdk import DAG, Param, Variable
        from airflow.providers.standard.sensors.python import PythonSensor
        from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator

        def opened(run_id, **_):
            return Variable.get(f"akr_gate_{{run_id}}", default=None) is not None

        with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
                 params={{"take_over_from": Param(None, type=["null", "string"])}},
                 default_args={{"retries": {retries}, "retry_delay": timedelta(seconds=1)}}) as dag:
            execute = ExecuteReassignmentOperator(
                task_id="execute", plan_uri={plan_uri!r}, storage_conn_id={STORAGE_CONN_ID!r}, max_moves=1,
                order="plan", throttle_bytes_per_sec=300_000, poll_interval=1,
                take_over_from="{{{{ params.take_over_from }}}}")
            if {gate!r}:
                PythonSensor(task_id="gate", python_callable=opened, poke_interval=1, timeout=300) >> execute
    '''))
    deploy(stack, path, dag_id)


def open_gate(stack: Stack, run_id: str) -> None:
    """Let the run's ``gate`` (:func:`execute_dag`) pass: its Variable, written as ``airflow variables set`` would."""
    stack.query("insert into variable (key, val, is_encrypted) values (%s, 'open', false)", f"akr_gate_{run_id}")


def wait_dag(stack: Stack, dag_id: str, plan_uri: str) -> None:
    """A DAG of one deferrable wait that submits the plan itself (``submit_pending``), 1 move at a time: the moves
    after the first are submitted by its trigger, in the triggerer."""
    path = stack.dir / f"{dag_id}.py"
    path.write_text(textwrap.dedent(f'''
        from datetime import datetime
        from airflow.sdk import DAG
        from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

        with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
            WaitForReassignmentSensor(
                task_id="wait", plan_uri={plan_uri!r}, storage_conn_id={STORAGE_CONN_ID!r}, deferrable=True,
                poke_interval=1, timeout=600, submit_pending=True, max_moves=1, throttle_bytes_per_sec=300_000)
    '''))
    deploy(stack, path, dag_id)


def deferred_in_the_triggerer(stack: Stack, dag_id: str, run_id: str, store: ObjectStoreSandbox, prefix: str,
                              moves: int) -> list[tuple[str, int]]:
    """Once the run's ``wait`` has deferred and a triggerer runs its trigger, with part of the plan submitted (the
    rest is the trigger's to submit): the partitions submitted so far."""
    wait_until(lambda: stack.query(
        "select 1 from task_instance ti join trigger t on t.id = ti.trigger_id where ti.dag_id=%s and ti.run_id=%s "
        "and ti.state='deferred' and t.triggerer_id is not null", dag_id, run_id), "a triggerer to run the wait",
        300, 0.5)
    submitted = wait_until(lambda: journal_submitted(store, prefix), "the first move to be submitted", 60, 0.5)
    assert len(submitted) < moves, f"the plan was all submitted before the fault: {submitted}"
    return submitted


@dataclass
class DeferredWait:
    """A run of a :func:`wait_dag` on a :func:`fault_plan`, deferred in the triggerer with part of the plan submitted
    (:func:`deferred_wait`)."""

    stack: Stack
    store: ObjectStoreSandbox
    config: dict
    plan: ReassignmentPlan
    prefix: str
    before: dict
    dag_id: str
    run_id: str
    started: float
    submitted: list[tuple[str, int]]

    def since(self) -> float:
        return time.monotonic() - self.started

    def assert_finished(self) -> float:
        """The run succeeded in its first try, every move submitted once (the journal), the cluster as before but
        for the moves (:func:`assert_plan_done`). Seconds from the trigger to the run's end."""
        state = wait_run(self.stack, self.dag_id, self.run_id, 300)
        elapsed = self.since()
        assert state == "success", logs_of(self.stack, self.dag_id, self.run_id)[-6000:] + self.stack.tail("triggerer")
        ran = tries(self.stack, self.dag_id, self.run_id)
        assert [(t["task_id"], t["try"], t["state"]) for t in ran] == [("wait", 1, "success")], ran
        assert journal_submitted(self.store, self.prefix) == sorted(m.tp for m in self.plan.moves)
        assert xcom(self.stack, self.dag_id, self.run_id, "wait")["done"] == len(self.plan.moves)
        assert_plan_done(self.config, self.plan, self.before)
        return elapsed


def ti_state(stack: Stack, run: DeferredWait) -> str | None:
    rows = stack.query("select state from task_instance where dag_id=%s and run_id=%s and task_id='wait'", run.dag_id,
                       run.run_id)
    return rows[0][0] if rows else None


def trigger_logs(stack: Stack, run: DeferredWait) -> dict[int, str]:
    """The wait's trigger logs by triggerer job id: Airflow writes a trigger's lines, as it runs, next to the task's
    log as ``attempt=1.log.trigger.<triggerer job id>.log`` on the triggerer's disk, and uploads the file to the
    remote log store (the object store) when the trigger ends there."""
    out: dict[int, str] = {}
    for path in (p for folder in log_folders(stack, run.dag_id, run.run_id, "wait")
                 for p in folder.glob("attempt=*.log.trigger.*.log")):
        job = path.name.rsplit(".trigger.", 1)[1].removesuffix(".log")
        if job.isdigit():
            out[int(job)] = out.get(int(job), "") + path.read_text(errors="replace")
    return out


def deferred_wait(sandbox, stack: Stack, store: ObjectStoreSandbox, name: str,
                  fault: tuple[ReassignmentPlan, str, str, dict]) -> DeferredWait:
    """Deploy a :func:`wait_dag` of a :func:`fault_plan` as ``akr_stack_<name>``, trigger it, and return once its
    wait has deferred in the triggerer with part of the plan submitted (the rest is the trigger's to submit)."""
    plan, plan_uri, prefix, before = fault
    dag_id = f"akr_stack_{name.replace('-', '_')}"
    wait_dag(stack, dag_id, plan_uri)
    started = time.monotonic()
    run_id = trigger(stack, dag_id)
    submitted = deferred_in_the_triggerer(stack, dag_id, run_id, store, prefix, len(plan.moves))
    return DeferredWait(stack, store, sandbox.client_config(), plan, prefix, before, dag_id, run_id, started,
                        submitted)


def logged_since(stack: Stack, name: str, offset: int, text: str) -> bool:
    with open(stack.log_path(name), "rb") as f:
        f.seek(offset)
        return text.encode() in f.read()


def fault_plan(sandbox, object_store, topic: str, name: str, tmp_path: Path, megabytes: float = 4.5,
               ) -> tuple[ReassignmentPlan, str, str, dict]:
    """Three partitions of ``megabytes / 3`` each (1.5 MB: about 5 s per move at the throttle): (plan, its URI, its
    prefix, the cluster's configs before any run of it: :func:`config_dump`)."""
    config = sandbox.client_config()
    make_topic(config, topic, [[1, 2], [2, 3], [3, 4]], megabytes=megabytes)
    plan = ReassignmentPlan(moves=(
        Move(topic=topic, partition=0, current_replicas=(1, 2), target_replicas=(3, 2)),
        Move(topic=topic, partition=1, current_replicas=(2, 3), target_replicas=(4, 3)),
        Move(topic=topic, partition=2, current_replicas=(3, 4), target_replicas=(5, 4)),
    ))
    prefix = f"{name}-{topic}"
    return plan, put_plan(object_store, prefix, plan, tmp_path), prefix, config_dump(config, [topic])


def config_dump(config: dict, topics: list[str]) -> dict:
    """What a run may change in the cluster's configs: every broker's dynamic configs (throttle rates, anything set
    per broker or cluster-wide) and the throttle configs of ``topics``."""
    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        return {"brokers": dynamic_broker_configs(config), "throttles": throttles(admin, topics)}


def assert_plan_done(config: dict, plan: ReassignmentPlan, before: dict) -> None:
    """Every partition of the plan at its target (the replication factor unchanged: each target is as long as the
    current replicas it replaces), nothing of it in flight, the configs identical to ``before``: no throttle left."""
    topic = plan.moves[0].topic
    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        assert replicas(admin, topic) == [m.target_replicas for m in plan.moves]
        assert not [tp for tp in admin.list_reassignments() if tp.topic == topic]
    assert all(len(m.target_replicas) == len(m.current_replicas) for m in plan.moves)
    assert config_dump(config, [topic]) == before


def at_the_fault(config: dict, plan: ReassignmentPlan) -> tuple[list, list]:
    """What the controller and the metadata say at the moment of a fault, read by the test's own clients:
    ``(in flight, pending)``: the plan's partitions the controller lists as being reassigned, and those still on their
    current replicas with nothing in flight (not sent yet)."""
    client = admin_client(config)
    try:
        flying = in_flight(client, plan.partitions)
    finally:
        client.close()
    topic = plan.moves[0].topic
    metadata = AdminClient(dict(config)).list_topics(topic, timeout=20).topics[topic].partitions
    pending = [m.tp for m in plan.moves if (m.topic, m.partition) not in flying
               and tuple(metadata[m.partition].replicas) == m.current_replicas]
    return sorted(flying), pending


def observed(config: dict, plan: ReassignmentPlan) -> tuple[Traffic, Episodes]:
    """The second observers of a fault: acks=all traffic on the plan's topic (every acknowledged record read back
    after), and the controller's listing sampled (each partition's in-flight episodes)."""
    return (Traffic(config, plan.moves[0].topic, partitions=len(plan.moves)),
            Episodes(config, [(m.topic, m.partition) for m in plan.moves]))


def assert_sent_once(episodes: Episodes, plan: ReassignmentPlan) -> None:
    """No partition submitted twice, judged from the controller: one in-flight episode per move, to its target."""
    assert episodes.targets() == {(m.topic, m.partition): [m.target_replicas] for m in plan.moves}, (
        episodes.targets(), episodes.samples, episodes.failed_samples)


def kill_worker_running(stack: Stack, dag_id: str, run_id: str, store: ObjectStoreSandbox, prefix: str) -> str:
    """Once ``execute`` has submitted its first batch: SIGKILL the worker running it (and its task processes);
    start that worker again in the background (:func:`restarted`). The worker's name."""
    wait_until(lambda: journal_submitted(store, prefix), "the first batch to be submitted", 300, 0.5)
    rows = stack.query("select hostname, state from task_instance where dag_id=%s and run_id=%s and task_id='execute'",
                       dag_id, run_id)
    worker, state = rows[0]
    assert state == "running" and worker in stack.workers, rows
    killed = stack.kill(worker, signal.SIGKILL)
    print(f"\nSIGKILLed {worker}: {len(killed)} process(es) mid-batch")
    return worker


def restart_in_background(stack: Stack, worker: str) -> threading.Thread:
    errors: list[BaseException] = []

    def start() -> None:
        try:
            stack.start(worker)
        except BaseException as e:  # noqa: BLE001 (reported by the test)
            errors.append(e)

    thread = threading.Thread(target=start, daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def joined(thread: threading.Thread) -> None:
    thread.join(300)
    assert not thread.is_alive() and not thread.errors, thread.errors  # type: ignore[attr-defined]


# -- the example DAG ----------------------------------------------------------------------------------

def test_decommission_example_runs_on_the_stacks_celery_workers(sandbox, stack, object_store, unique_topic):
    config = sandbox.client_config()
    topics = [f"{unique_topic}-{i}" for i in range(2)]
    for topic in topics:
        make_topic(config, topic, [[1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 1]], megabytes=0.3)
    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        before = throttles(admin, topics)
    dag_id = "kafka_decommission_brokers"
    deploy(stack, EXAMPLES / f"{dag_id}.py", dag_id)
    started = time.monotonic()
    run_id = trigger(stack, dag_id, {
        "broker_ids": [5], "dry_run": False, "require_approval": False, "throttle_bytes_per_sec": 5_000_000,
        "topic_include": [f"{unique_topic}-.*"], "partial_drain": True})
    state = wait_run(stack, dag_id, run_id)
    elapsed = time.monotonic() - started
    assert state == "success", logs_of(stack, dag_id, run_id)[-8000:]

    ran = tries(stack, dag_id, run_id)
    done = [t for t in ran if t["state"] != "skipped"]
    expected = {"check_request", "plan", "approve", "execute", "not_a_dry_run", "wait", "verify_drained"}
    assert expected <= {t["task_id"] for t in done}, ran
    assert all(t["state"] == "success" for t in done), done
    assert {t["hostname"] for t in done} <= set(stack.workers), done  # every try on a worker of the stack
    assert len({t["pid"] for t in done}) == len(done), done  # one process per try
    assert_nothing_on_the_workers_disks(stack)

    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        for topic in topics:
            assert all(5 not in r and len(r) == 3 for r in replicas(admin, topic))
        assert throttles(admin, topics) == before
    plan = xcom(stack, dag_id, run_id, "plan")
    assert plan["plan_uri"] == f"s3://{object_store.bucket}/airflow/{dag_id}/{run_id}/plan"
    data = Path(object_store.state["data_dir"]) / object_store.bucket / "airflow" / dag_id / run_id
    for name in ("plan/plan.json", "plan/metrics.json", "plan/report/report.html", "snapshot/partitions.parquet",
                 "request.json", "plan/run/lease.json"):
        assert (data / name).is_file(), name
    # the task's log, on the store, for the UI
    assert "Executing" in task_log(stack, dag_id, run_id, "execute", marker="Executing")
    print(f"\ndecommission example on the stack (CeleryExecutor, PostgreSQL, S3 plans): {elapsed:.1f} s from "
          f"trigger to end; tries {[(t['task_id'], t['hostname']) for t in done]}")


# -- the triggerer ------------------------------------------------------------------------------------

def test_deferrable_wait_runs_in_the_stacks_triggerer(sandbox, stack, object_store, unique_topic, tmp_path):
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[1, 2], [2, 3]], megabytes=8)  # about 25 s per move: the wait defers
    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        before = throttles(admin, [unique_topic])
    plan = ReassignmentPlan(moves=(
        Move(topic=unique_topic, partition=0, current_replicas=(1, 2), target_replicas=(3, 2)),
        Move(topic=unique_topic, partition=1, current_replicas=(2, 3), target_replicas=(4, 3)),
    ))
    plan_uri = put_plan(object_store, f"defer-{unique_topic}", plan, tmp_path)
    dag_id = "akr_stack_defer"
    path = stack.dir / f"{dag_id}.py"
    path.write_text(textwrap.dedent(f'''
        from datetime import datetime
        from airflow.sdk import DAG
        from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
        from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

        with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
            execute = ExecuteReassignmentOperator(
                task_id="execute", plan_uri={plan_uri!r}, storage_conn_id={STORAGE_CONN_ID!r},
                throttle_bytes_per_sec=300_000, wait_for_completion=False)
            wait = WaitForReassignmentSensor(
                task_id="wait", plan_uri={plan_uri!r}, storage_conn_id={STORAGE_CONN_ID!r}, deferrable=True,
                poke_interval=1, timeout=300)
            execute >> wait
    '''))
    deploy(stack, path, dag_id)
    run_id = trigger(stack, dag_id)
    state = wait_run(stack, dag_id, run_id, 600)
    assert state == "success", logs_of(stack, dag_id, run_id)[-6000:] + stack.tail("triggerer")
    ran = tries(stack, dag_id, run_id)
    assert [(t["task_id"], t["state"]) for t in ran] == [("execute", "success"), ("wait", "success")], ran
    assert {t["hostname"] for t in ran} <= set(stack.workers), ran
    # the wait deferred, and the separate triggerer (its own folders) ran the trigger to the end
    log = task_log(stack, dag_id, run_id, "wait", marker="| moves 2/2 done")
    assert "| moves 2/2 done" in log, log[-4000:] + stack.tail("triggerer")
    assert_nothing_on_the_workers_disks(stack)
    summary = xcom(stack, dag_id, run_id, "wait")
    assert summary["done"] == 2 and summary["finish"]["throttles_restored"] == "yes"
    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        assert replicas(admin, unique_topic) == [(3, 2), (4, 3)]
        assert throttles(admin, [unique_topic]) == before


# -- faults -------------------------------------------------------------------------------------------

def test_a_worker_killed_mid_batch_is_retried_on_the_other_worker_which_finishes_the_plan(
        sandbox, stack, object_store, unique_topic, tmp_path):
    config = sandbox.client_config()
    plan, plan_uri, prefix, before = fault_plan(sandbox, object_store, unique_topic, "killed-worker", tmp_path)
    dag_id = "akr_stack_killed_worker"
    execute_dag(stack, dag_id, plan_uri, retries=1)
    traffic, episodes = observed(config, plan)
    with traffic, episodes:
        started = time.monotonic()
        run_id = trigger(stack, dag_id)
        killed = kill_worker_running(stack, dag_id, run_id, object_store, prefix)
        flying, pending = at_the_fault(config, plan)
        assert flying and pending, (flying, pending)  # the kill came mid-plan: a move in flight, others not sent
        # the killed worker comes back only once the retry runs (else the retry may land on it again)
        wait_until(lambda: stack.query("select 1 from task_instance where dag_id=%s and run_id=%s and try_number=2 "
                                       "and state in ('running', 'success')", dag_id, run_id), "the retry to run", 300, 1)
        restart = restart_in_background(stack, killed)
        state = wait_run(stack, dag_id, run_id, 600)
        elapsed = time.monotonic() - started
    traffic.check()  # nothing acknowledged was lost through the kill
    assert_sent_once(episodes, plan)  # the controller's listing: each partition one episode, to its target
    assert state == "success", logs_of(stack, dag_id, run_id)[-8000:]
    ran = tries(stack, dag_id, run_id)
    other = next(w for w in stack.workers if w != killed)
    assert [(t["try"], t["hostname"]) for t in ran] == [(1, killed), (2, other)], ran  # the retry on the other worker
    assert ran[-1]["state"] == "success"
    # the same run: the retry takes the lease over at once
    assert "took over the plan's lease" in task_log(stack, dag_id, run_id, "execute", 2, marker="took over the plan")
    assert_plan_done(config, plan, before)  # at target, RF unchanged, configs identical to before the run
    assert journal_submitted(object_store, prefix) == sorted(m.tp for m in plan.moves)  # none submitted twice
    joined(restart)
    print(f"\na worker SIGKILLed mid-batch, the retry on {other}: {elapsed:.1f} s from trigger to end")


def journal_events(store: ObjectStoreSandbox, prefix: str, event: str) -> list[dict]:
    """The plan's journal entries of one kind (``drain-round``: a goal's round, recorded before its moves go out)."""
    data = Path(store.state["data_dir"]) / store.bucket / prefix / "plan" / "run" / "journal"
    entries = [json.loads(p.read_text()) for p in sorted(data.iterdir())] if data.is_dir() else []
    return [e for e in entries if e.get("event") == event]


def test_a_worker_killed_during_a_re_plan_round_is_resumed_by_the_retry_without_sending_anything_twice(
        sandbox, stack, object_store, unique_topic, tmp_path):
    """Issue 36: a balancing plan (``balance.json`` beside plan.json) whose last move another tool invalidated before
    the run (partition 2 put on brokers 1 and 4, one rack): once the plan's other moves are done, the run plans a round
    toward the plan's own request, records it on the run state, and sends it. The worker is SIGKILLed while the round's
    move is in flight (the controller lists it); Airflow's retry, on the other worker, takes the recorded round up,
    plans no second one, and finishes. Judged by the controller's listing (one episode per partition), the test's own
    metadata read (partition 2 on two racks), traffic read back and the configs as before."""
    from airflow_kafka_reassign.core.maintenance.rounds import goal_spec
    from airflow_kafka_reassign.core.planner.goals import PlanRequest

    config = sandbox.client_config()
    topic = unique_topic
    make_topic(config, topic, [[1, 2], [2, 3], [3, 4]], megabytes=6)  # 2 MB per partition: about 7 s per move
    plan = ReassignmentPlan(moves=(
        Move(topic=topic, partition=0, current_replicas=(1, 2), target_replicas=(3, 2)),
        Move(topic=topic, partition=1, current_replicas=(2, 3), target_replicas=(5, 3)),
        Move(topic=topic, partition=2, current_replicas=(3, 4), target_replicas=(5, 4)),
    ))
    name, text = goal_spec(PlanRequest(goal="rebalance", topic_include=(re.escape(topic),)), 5)
    prefix = f"round-{topic}"
    plan_uri = put_plan(object_store, prefix, plan, tmp_path, extra={name: text})
    with KafkaClusterAdmin(config, timeout_s=30) as other:  # another tool, before the run: one rack for partition 2
        other.alter_reassignments({plan.moves[2].tp: [1, 4]})
        wait_until(lambda: not [tp for tp in other.list_reassignments() if tp.topic == topic],
                   "the other tool's move to finish", 120, 0.5)
    before = config_dump(config, [topic])
    dag_id = "akr_stack_round_killed"
    execute_dag(stack, dag_id, plan_uri, retries=1)
    rack = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"}
    traffic, episodes = observed(config, plan)
    with traffic, episodes:
        run_id = trigger(stack, dag_id)
        wait_until(lambda: journal_events(object_store, prefix, DRAIN_ROUND), "the round to be recorded", 600, 0.5)
        listing = admin_client(config)
        try:
            wait_until(lambda: in_flight(listing, [(topic, 2)]), "the round's move of partition 2 in flight", 120, 0.2)
        finally:
            listing.close()
        rows = stack.query("select hostname from task_instance where dag_id=%s and run_id=%s and task_id='execute'",
                           dag_id, run_id)
        killed = rows[0][0]
        stack.kill(killed, signal.SIGKILL)
        print(f"\nSIGKILLed {killed} during round 1")
        wait_until(lambda: stack.query("select 1 from task_instance where dag_id=%s and run_id=%s and try_number=2 "
                                       "and state in ('running', 'success')", dag_id, run_id), "the retry to run", 300, 1)
        restart = restart_in_background(stack, killed)
        state = wait_run(stack, dag_id, run_id, 600)
    traffic.check()
    assert state == "success", logs_of(stack, dag_id, run_id)[-8000:]
    ran = tries(stack, dag_id, run_id)
    assert [t["try"] for t in ran] == [1, 2] and ran[1]["hostname"] != killed, ran
    rounds = journal_events(object_store, prefix, DRAIN_ROUND)
    assert [r["round"] for r in rounds] == [1], rounds  # the retry took the round up, it planned no second one
    assert f"{topic}-2" in rounds[0]["partitions"], rounds
    targets = episodes.targets()  # the controller's listing: nothing sent twice to the same target
    assert all(len(set(v)) == len(v) for v in targets.values()), targets
    assert targets[(topic, 0)][0] == (3, 2) and targets[(topic, 1)][0] == (5, 3), targets
    layout = AdminClient(dict(config)).list_topics(topic, timeout=20).topics[topic].partitions
    assert targets[(topic, 2)] == [tuple(layout[2].replicas)], targets  # the round's move, sent once
    assert len(layout[2].replicas) == 2 and rack[layout[2].replicas[0]] != rack[layout[2].replicas[1]]
    assert config_dump(config, [topic]) == before  # no throttle left, the round's included
    joined(restart)


def test_a_run_whose_worker_died_is_named_in_one_line_and_taken_over_with_take_over_from(
        sandbox, stack, object_store, unique_topic, tmp_path):
    config = sandbox.client_config()
    plan, plan_uri, prefix, before = fault_plan(sandbox, object_store, unique_topic, "takeover", tmp_path)
    dag_id = "akr_stack_takeover"
    execute_dag(stack, dag_id, plan_uri, retries=0)
    traffic, episodes = observed(config, plan)
    with traffic, episodes:
        dead = trigger(stack, dag_id, prefix="dead")
        killed = kill_worker_running(stack, dag_id, dead, object_store, prefix)
        flying, pending = at_the_fault(config, plan)
        assert flying and pending, (flying, pending)  # the kill came mid-plan
        restart = restart_in_background(stack, killed)
        assert config_dump(config, [unique_topic]) != before  # the dead run's throttles are on the cluster
        # the next run of the plan is refused at once, told which run holds the lease and how to take over
        refused = trigger(stack, dag_id, prefix="refused")
        assert wait_run(stack, dag_id, refused, 300) == "failed"
        log = task_log(stack, dag_id, refused, "execute", marker="is held by DAG run")
        line = next((ln for ln in log.splitlines() if "is held by DAG run" in ln), None)
        assert line is not None, log[-4000:]
        assert f"is held by DAG run '{dead}'" in line and f"take_over_from='{dead}'" in line and "until " in line
        assert "submitting" not in log
        # the operator confirms the dead run is dead (Airflow failed its task: no heartbeat, no retry), then takes over
        assert wait_run(stack, dag_id, dead, 300) == "failed"
        assert [t["state"] for t in tries(stack, dag_id, dead)] == ["failed"]
        joined(restart)
        started = time.monotonic()
        takeover = trigger(stack, dag_id, {"take_over_from": dead}, prefix="takeover")
        assert wait_run(stack, dag_id, takeover, 600) == "success", logs_of(stack, dag_id, takeover)[-6000:]
        elapsed = time.monotonic() - started
    traffic.check()  # nothing acknowledged was lost
    assert_sent_once(episodes, plan)  # the controller's listing: the takeover sent nothing the dead run had sent
    assert "took over the plan's lease at once from DAG run" in task_log(stack, dag_id, takeover, "execute",
                                                                         marker="took over the plan's lease")
    assert_plan_done(config, plan, before)  # the dead run's throttles restored exactly
    assert journal_submitted(object_store, prefix) == sorted(m.tp for m in plan.moves)  # none submitted twice
    print(f"\ntake_over_from: the plan finished {elapsed:.1f} s after the takeover run was triggered")


def test_the_triggerer_sigkilled_during_a_deferrable_wait_is_restarted_and_the_wait_carries_on(
        sandbox, stack, object_store, unique_topic, tmp_path):
    """Also the proof test_wait_sensor_deferrable.py gave on a SQLite deployment (moved here, every assertion kept):
    the task stays deferred through the kill, the trigger is taken by another triggerer job, and both jobs logged
    the wait's progress into the task's trigger logs. At the kill, the controller lists a move in flight and the
    metadata shows a move not sent yet (9 MB: about 10 s per move): the restarted triggerer finished a plan under way."""
    config = sandbox.client_config()
    fault = fault_plan(sandbox, object_store, unique_topic, "killed-triggerer", tmp_path, megabytes=9)
    traffic, episodes = observed(config, fault[0])
    with traffic, episodes:
        run = deferred_wait(sandbox, stack, object_store, "killed-triggerer", fault)
        trigger_id, first_job = stack.query(
            "select t.id, t.triggerer_id from trigger t join task_instance ti on ti.trigger_id = t.id "
            "where ti.dag_id=%s and ti.run_id=%s", run.dag_id, run.run_id)[0]
        # the first triggerer polled the plan (a progress line in its trigger log) before the kill: the restarted one
        # takes over a wait under way, not one that never started
        wait_until(lambda: "| moves " in trigger_logs(stack, run).get(first_job, ""),
                   "the first triggerer's progress line", 120, 0.5)
        killed_at = run.since()
        killed = stack.kill("triggerer", signal.SIGKILL)  # its trigger runner too: no clean shutdown
        flying, pending = at_the_fault(config, run.plan)
        assert flying and pending, (flying, pending)  # judged by the controller and the metadata, not the journal
        assert ti_state(stack, run) == "deferred", "the task should still be deferred after the kill"
        stack.start("triggerer")  # ready once it heartbeats; it takes the dead one's trigger (no heartbeat for 10 s)
        restarted = run.since()
        wait_until(lambda: (stack.query("select triggerer_id from trigger where id=%s", trigger_id) or [(None,)])[0][0]
                   not in (None, first_job) or ti_state(stack, run) != "deferred", "another triggerer job to take the "
                   "trigger", 120, 0.5)
        elapsed = run.assert_finished()  # the rest of the plan submitted after the kill, by the restarted triggerer
    traffic.check()
    assert_sent_once(episodes, run.plan)
    summary = xcom(stack, run.dag_id, run.run_id, "wait")
    assert summary["status"] == "complete" and summary["finish"]["throttles_restored"] == "yes", summary
    logs = trigger_logs(stack, run)
    assert len(logs) >= 2 and first_job in logs, sorted(logs)  # both triggerer jobs logged the wait
    assert all("| moves " in text for text in logs.values()), {job: text[-500:] for job, text in logs.items()}
    done = f"{len(run.plan.moves)}/{len(run.plan.moves)} done"
    assert any(done in text for job, text in logs.items() if job != first_job), done
    print(f"\nthe triggerer SIGKILLed ({len(killed)} process(es)) with {flying} in flight and {pending} pending, at "
          f"{killed_at:.0f} s, restarted at {restarted:.0f} s; the run ended at {elapsed:.0f} s")


def test_postgresql_restarted_during_a_deferrable_wait_the_components_revived_finish_the_run(
        sandbox, stack, object_store, unique_topic, tmp_path):
    config = sandbox.client_config()
    fault = fault_plan(sandbox, object_store, unique_topic, "postgres-restart", tmp_path, megabytes=9)
    traffic, episodes = observed(config, fault[0])
    with traffic, episodes:
        run = deferred_wait(sandbox, stack, object_store, "postgres-restart", fault)
        stopped_at = run.since()
        seen: dict[str, list] = {}

        def while_down() -> None:
            # judged at the outage, by the controller and the metadata: a move in flight, another not sent yet
            seen["in flight"], seen["pending"] = at_the_fault(config, run.plan)
            # down until the scheduler and the triggerer have exited (seconds; the triggerer 30 s): an outage, not a blip
            wait_until(lambda: not stack.alive("scheduler") and not stack.alive("triggerer"),
                       "the scheduler and the triggerer to exit without the database", 60, 0.5)

        down = stack.restart("postgres", while_down=while_down)
        assert seen["in flight"] and seen["pending"], seen
        assert stack.alive("api-server") and all(stack.alive(w) for w in stack.workers)  # these reconnect
        # what a process supervisor does (systemd's Restart=always, Kubernetes): start what exited
        revived = stack.revive()
        assert {"scheduler", "triggerer"} <= set(revived) <= {"scheduler", "triggerer", "dag-processor"}, revived
        back = run.since()
        elapsed = run.assert_finished()
    traffic.check()
    assert_sent_once(episodes, run.plan)
    print(f"\nPostgreSQL down {down:.1f} s from {stopped_at:.0f} s with {seen}; {sorted(revived)} revived by "
          f"{back:.0f} s; the run ended at {elapsed:.0f} s")


def test_redis_restarted_between_tasks_the_next_task_is_queued_and_runs_on_a_worker(
        sandbox, stack, object_store, unique_topic, tmp_path):
    config = sandbox.client_config()
    plan, plan_uri, prefix, before = fault_plan(sandbox, object_store, unique_topic, "redis-restart", tmp_path)
    dag_id = "akr_stack_redis_restart"
    execute_dag(stack, dag_id, plan_uri, retries=0, gate=True)
    traffic, episodes = observed(config, plan)
    with traffic, episodes:
        started = time.monotonic()
        run_id = trigger(stack, dag_id)
        wait_until(lambda: stack.query("select 1 from task_instance where dag_id=%s and run_id=%s and task_id='gate' "
                                       "and state='running'", dag_id, run_id), "the gate to run on a worker", 300, 0.5)
        gated = time.monotonic() - started
        offsets = {w: stack.log_path(w).stat().st_size for w in stack.workers}
        # down until both workers have lost the broker (the queue comes back empty: nothing was queued)
        down = stack.restart("redis", while_down=lambda: wait_until(
            lambda: all(logged_since(stack, w, offsets[w], "Cannot connect to redis") for w in stack.workers),
            "the workers to lose the broker", 60, 0.2))
        # the run is between its tasks: nothing sent, by the journal and by the controller
        assert not journal_submitted(object_store, prefix)
        assert at_the_fault(config, plan) == ([], [m.tp for m in plan.moves])
        open_gate(stack, run_id)
        state = wait_run(stack, dag_id, run_id, 300)
        elapsed = time.monotonic() - started
    traffic.check()
    assert_sent_once(episodes, plan)
    assert state == "success", logs_of(stack, dag_id, run_id)[-6000:] + stack.tail("scheduler")
    ran = tries(stack, dag_id, run_id)
    assert [(t["task_id"], t["try"], t["state"]) for t in ran] == [("execute", 1, "success"), ("gate", 1, "success")]
    assert {t["hostname"] for t in ran} <= set(stack.workers), ran
    assert journal_submitted(object_store, prefix) == sorted(m.tp for m in plan.moves)
    assert_plan_done(config, plan, before)
    print(f"\nRedis down {down:.1f} s at {gated:.0f} s, between gate and execute; the run ended at {elapsed:.0f} s")
