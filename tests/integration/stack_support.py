"""The production stack's test helpers, shared by test_stack.py and test_stack_faults.py (a module, not a test file;
the module-scoped ``stack`` fixture is in conftest.py: each test module that uses it starts a stack of its own, so the
two modules run on two xdist workers at once instead of one after the other)."""

from __future__ import annotations

import json
import secrets
import signal
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient
from controller_listing import Episodes, admin_client, in_flight
from kafka_helpers import Traffic, dynamic_broker_configs, make_topic, put_plan, replicas, throttles

from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.sandbox import wait_until
from airflow_kafka_reassign.sandbox.objectstore import ObjectStoreSandbox
from airflow_kafka_reassign.sandbox.stack import STORAGE_CONN_ID, Stack

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "example_dags"





@contextmanager
def stack_running(directory: Path, **up: object) -> Iterator[Stack]:
    """A :class:`Stack` started in ``directory`` (``up``: :meth:`Stack.up`'s arguments), stopped at the end; the
    stop is checked: no process of the stack left running."""
    started = time.monotonic()
    st = Stack(directory)
    info = st.up(**up)  # type: ignore[arg-type]
    print(f"\nthe stack started in {time.monotonic() - started:.1f} s: {info['took_s']}")
    try:
        yield st
    finally:
        pids = dict(st.state["pids"])
        stopped = st.down()
        print(f"\nthe stack stopped: {stopped}")
        running = {n: pid for n, pid in pids.items() if st.process_running(pid)}
        assert not running, f"processes of the stack left running: {running}"


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


def journal_events(store: ObjectStoreSandbox, prefix: str, event: str) -> list[dict]:
    """The plan's journal entries of one kind (``drain-round``: a goal's round, recorded before its moves go out)."""
    data = Path(store.state["data_dir"]) / store.bucket / prefix / "plan" / "run" / "journal"
    entries = [json.loads(p.read_text()) for p in sorted(data.iterdir())] if data.is_dir() else []
    return [e for e in entries if e.get("event") == event]
