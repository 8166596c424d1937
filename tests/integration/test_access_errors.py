"""Errors that name the cause, in real Airflow task runs against the sandbox's SASL/SCRAM listener.

A wrong SCRAM password fails the plan task and the wait sensor at once (no retry, no transient-outage pokes)
with "authentication failed for user X with mechanism Y"; the password is in no log line, no XCom and no
process command line. A wrong bootstrap address gives one error naming the servers, not hundreds of
librdkafka / kafka-python "Connection refused" lines.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import textwrap
import threading
import time
from datetime import datetime
from pathlib import Path

from dagrun import run_dag_file
from kafka_helpers import write_plan_dir

from airflow_kafka_reassign.core.models import Move, ReassignmentPlan

DAG = '''
from datetime import datetime, timedelta
from airflow.sdk import DAG
from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator
from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

with DAG("akr_access_errors", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    # retries: a refused password must not use them; an unreachable cluster may be transient (not retried here
    # only to keep the test short)
    for conn, timeout, retries in (("kafka_wrong_password", {timeout}, 2), ("kafka_wrong_bootstrap", 3, 0)):
        PlanReassignmentOperator(task_id=f"plan_{{conn}}", kafka_config_id=conn, goal="rebalance",
                                 kafka_timeout_s=timeout, retries=retries, retry_delay=timedelta(seconds=1))
        WaitForReassignmentSensor(task_id=f"wait_{{conn}}", plan_uri={plan_dir!r}, kafka_config_id=conn,
                                  kafka_timeout_s=timeout, deferrable=False, mode="poke", poke_interval=1,
                                  timeout=600, retries=retries, retry_delay=timedelta(seconds=1))
'''
TIMEOUT_S = 10


def _task_log(log: str, task: str) -> str:
    """The lines of the first try of ``task`` (dag.test runs one task at a time)."""
    start = log.index(f"starting task_id={task} ")
    return log[start:log.index(f"end task task_id={task} ", start)]


def _task_seconds(log: str, task: str) -> float:
    """Seconds from the task's first use of its Kafka connection (the hook's line) to the task's last line:
    the task's own start-up (imports, under the machine's load) is not the client's doing."""
    stamped = [x for x in _task_log(log, task).splitlines() if x[:4].isdigit() and "T" in x[:11]]
    first = next(x for x in stamped if "Kafka connection 'kafka_wrong_password'" in x)

    def at(line: str) -> datetime:
        return datetime.fromisoformat(line.split()[0].rstrip("Z"))

    return (at(stamped[-1]) - at(first)).total_seconds()


def _command_lines() -> str:
    out = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            out.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return "\n".join(out)


def test_a_wrong_scram_password_fails_the_plan_and_the_sensor_at_once_naming_the_cause(
        sandbox, airflow_home, tmp_path):
    password = f"wrong-{secrets.token_hex(8)}"
    good = sandbox.client_config(sasl=True)
    env = {
        **airflow_home,
        "AIRFLOW_CONN_KAFKA_WRONG_PASSWORD": json.dumps({"conn_type": "kafka", "extra": {**good,
                                                                                          "sasl.password": password}}),
        "AIRFLOW_CONN_KAFKA_WRONG_BOOTSTRAP": json.dumps({"conn_type": "kafka",
                                                          "extra": {"bootstrap.servers": "127.0.0.1:1,127.0.0.1:2"}}),
    }
    plan = ReassignmentPlan(moves=(Move(topic="t-access", partition=0, current_replicas=(1, 2),
                                        target_replicas=(3, 2)),))
    plan_dir = write_plan_dir(tmp_path / "plan", plan)
    dag_file = Path(airflow_home["AIRFLOW__CORE__DAGS_FOLDER"]) / "akr_access_errors.py"
    dag_file.write_text(textwrap.dedent(DAG.format(plan_dir=str(plan_dir), timeout=TIMEOUT_S)))

    seen_in_argv: list[str] = []
    done = threading.Event()

    def scan() -> None:  # every process's command line, while the tasks run
        while not done.is_set():
            if password in _command_lines():
                seen_in_argv.append("found")
            time.sleep(0.2)

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    try:
        result = run_dag_file(env, dag_file, timeout=300)
    finally:
        done.set()
        scanner.join(10)
    log = result["log"]
    assert result["tis"] == {"plan_kafka_wrong_password": "failed", "wait_kafka_wrong_password": "failed",
                             "plan_kafka_wrong_bootstrap": "failed", "wait_kafka_wrong_bootstrap": "failed"}, log[-6000:]
    cause = "authentication failed for user 'sandbox-admin' with mechanism SCRAM-SHA-512"
    for task in ("plan_kafka_wrong_password", "wait_kafka_wrong_password"):
        part = _task_log(log, task)
        assert f"task {task}: {cause}" in part, part[-6000:]
        # at once: no retry, and the sensor did not poke again as after a transient outage
        assert "up_for_retry" not in part and "poke 1/" not in part, part[-6000:]
    # within one timeout: from the task's start to its end (Airflow's own start-up included)
    for task in ("plan_kafka_wrong_password", "wait_kafka_wrong_password"):
        took = _task_seconds(log, task)
        print(f"{task}: failed {took:.1f} s after its first use of the connection")
        assert took < TIMEOUT_S, (task, took)
    assert password not in log and password not in json.dumps(result["xcom"]) and not seen_in_argv
    # the unreachable cluster: one error naming the bootstrap servers and the fix, no client noise
    assert "Kafka cluster at bootstrap.servers=127.0.0.1:1,127.0.0.1:2 did not answer within" in log
    assert log.count("Connection refused") + log.count("ECONNREFUSED") <= 6, log[-6000:]
    assert "%3|" not in log  # librdkafka's own stderr lines
