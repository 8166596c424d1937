"""Errors that name the cause, in real Airflow task runs against the sandbox's SASL/SCRAM listener.

A wrong SCRAM password fails the plan task and the wait sensor at once (no retry, no transient-outage pokes)
with "authentication failed for user X with mechanism Y"; the password is in no log line, no XCom and no
process command line. A wrong bootstrap address gives one error naming the servers, not hundreds of
librdkafka / kafka-python "Connection refused" lines.

On a sandbox with ``--acls --tls`` (the session's own) the same DAG run also has: an execute task whose user may
only describe (it fails at once naming the ACL refused and the grant, nothing submitted, throttles untouched),
and plan tasks whose user has no ACL, or whose client does not trust the brokers' CA ("TLS handshake failed ...
(certificate verify failed)"). test_access_errors_acl_tls.py covers the adapter and the engine.
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
from kafka_helpers import make_topic, replicas, throttles, write_plan_dir

from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.sandbox.nodes import LIMITED_USERNAME, NO_ACL_USERNAME
from airflow_kafka_reassign.sandbox.tls import new_ca

DAG = '''
from datetime import datetime, timedelta
from airflow.sdk import DAG
from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator
from airflow_kafka_reassign.sensors.reassignment import WaitForReassignmentSensor

with DAG("akr_access_errors", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    # retries: a refused password must not use them; an unreachable cluster may be transient (not retried here
    # only to keep the test short)
    for conn, timeout, retries in (("kafka_wrong_password", {refused_timeout}, 2), ("kafka_wrong_bootstrap", 3, 0)):
        PlanReassignmentOperator(task_id=f"plan_{{conn}}", kafka_config_id=conn, goal="rebalance",
                                 kafka_timeout_s=timeout, retries=retries, retry_delay=timedelta(seconds=1))
        WaitForReassignmentSensor(task_id=f"wait_{{conn}}", plan_uri={plan_dir!r}, kafka_config_id=conn,
                                  kafka_timeout_s=timeout, deferrable=False, mode="poke", poke_interval=1,
                                  timeout=600, retries=retries, retry_delay=timedelta(seconds=1))
{secured}
'''
# on a sandbox with --acls --tls: a refused ACL or TLS handshake must not use the retries either
SECURED_TASKS = '''
    from airflow_kafka_reassign.operators.execute import ExecuteReassignmentOperator
    ExecuteReassignmentOperator(task_id="execute_kafka_limited", plan_uri={real_plan_dir!r},
                                kafka_config_id="kafka_limited", throttle_bytes_per_sec=1000000,
                                kafka_timeout_s={timeout}, retries=2, retry_delay=timedelta(seconds=1))
    for conn in ("kafka_nobody", "kafka_untrusted_ca"):
        PlanReassignmentOperator(task_id=f"plan_{{conn}}", kafka_config_id=conn, goal="rebalance",
                                 kafka_timeout_s={timeout}, retries=2, retry_delay=timedelta(seconds=1))
'''
TIMEOUT_S = 10
#: The whole DAG run's bound (run_dag_file's timeout).
RUN_BOUND_S = 300
#: The wrong password's tasks may wait this long for an answer, far beyond RUN_BOUND_S: a refusal noticed only when
#: a request timed out would not fail them before the run's bound. "At once" is shown without reading a clock.
REFUSED_TIMEOUT_S = 3600


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
    secrets_ = [password]
    secured, expected = "", {}
    if sandbox.acls and sandbox.tls_ca_path:
        topic = f"t-access-limited-{secrets.token_hex(4)}"
        make_topic(sandbox.client_config(), topic, [[1, 2]])
        real = ReassignmentPlan(moves=(Move(topic=topic, partition=0, current_replicas=(1, 2), target_replicas=(3, 2)),))
        other_ca = tmp_path / "other-ca.pem"
        other_ca.write_bytes(new_ca("not the sandbox's CA")[0])
        env |= {
            "AIRFLOW_CONN_KAFKA_LIMITED": json.dumps(
                {"conn_type": "kafka", "extra": sandbox.client_config(user=LIMITED_USERNAME)}),
            "AIRFLOW_CONN_KAFKA_NOBODY": json.dumps({"conn_type": "kafka", "extra": sandbox.client_config(user=NO_ACL_USERNAME)}),
            "AIRFLOW_CONN_KAFKA_UNTRUSTED_CA": json.dumps({"conn_type": "kafka", "extra": {
                **sandbox.client_config(tls=True), "ssl.ca.location": str(other_ca)}}),
        }
        secrets_ += list(sandbox.state["acl_users"].values())
        secured = SECURED_TASKS.format(real_plan_dir=str(write_plan_dir(tmp_path / "real-plan", real)), timeout=TIMEOUT_S)
        expected = {"execute_kafka_limited": "failed", "plan_kafka_nobody": "failed", "plan_kafka_untrusted_ca": "failed"}
        with KafkaClusterAdmin(sandbox.client_config(), timeout_s=30) as admin:
            before = (replicas(admin, topic), throttles(admin, [topic]))
    dag_file = Path(airflow_home["AIRFLOW__CORE__DAGS_FOLDER"]) / "akr_access_errors.py"
    dag_file.write_text(textwrap.dedent(DAG.format(plan_dir=str(plan_dir), refused_timeout=REFUSED_TIMEOUT_S,
                                                   secured=secured)))

    seen_in_argv: list[str] = []
    done = threading.Event()

    def scan() -> None:  # every process's command line, while the tasks run
        while not done.is_set():
            if any(s in _command_lines() for s in secrets_):
                seen_in_argv.append("found")
            time.sleep(0.2)

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    try:
        result = run_dag_file(env, dag_file, timeout=RUN_BOUND_S)
    finally:
        done.set()
        scanner.join(10)
    log = result["log"]
    assert result["tis"] == {"plan_kafka_wrong_password": "failed", "wait_kafka_wrong_password": "failed",
                             "plan_kafka_wrong_bootstrap": "failed", "wait_kafka_wrong_bootstrap": "failed",
                             **expected}, log[-6000:]
    cause = "authentication failed for user 'sandbox-admin' with mechanism SCRAM-SHA-512"
    for task in ("plan_kafka_wrong_password", "wait_kafka_wrong_password"):
        part = _task_log(log, task)
        assert f"task {task}: {cause}" in part, part[-6000:]
        # at once: no retry, and the sensor did not poke again as after a transient outage
        assert "up_for_retry" not in part and "poke 1/" not in part, part[-6000:]
    # and not by a timeout: their requests may wait REFUSED_TIMEOUT_S, beyond the run's bound, so the run finished
    # because the refusal itself ended them (the time each took is the machine's: printed)
    for task in ("plan_kafka_wrong_password", "wait_kafka_wrong_password"):
        print(f"{task}: failed {_task_seconds(log, task):.1f} s after its first use of the connection")
        part = _task_log(log, task)
        assert f"timeout={REFUSED_TIMEOUT_S}s" in part and "did not answer within" not in part, part[-6000:]
    assert not any(s in log or s in json.dumps(result["xcom"]) for s in secrets_) and not seen_in_argv
    if expected:  # authorization and TLS: at once, naming what was refused and the fix; nothing changed
        causes = {
            "execute_kafka_limited": (f"authorization failed for user '{LIMITED_USERNAME}'",
                                      "ALTER_CONFIGS on the cluster was refused",
                                      f"--allow-principal User:{LIMITED_USERNAME} --operation AlterConfigs --cluster"),
            "plan_kafka_nobody": (f"authorization failed for user '{NO_ACL_USERNAME}'",
                                  "DESCRIBE on the cluster was refused", "--operation Describe --cluster"),
            "plan_kafka_untrusted_ca": ("TLS handshake failed with bootstrap.servers=", "(certificate verify failed)",
                                        "Check ssl.ca.location"),
        }
        for task, needles in causes.items():
            part = _task_log(log, task)
            assert f"task {task}: {needles[0]}" in part and all(n in part for n in needles[1:]), part[-6000:]
            assert "up_for_retry" not in part and "did not answer within" not in part, part[-6000:]
            assert "restoring the throttles failed" not in part, part[-6000:]
        with KafkaClusterAdmin(sandbox.client_config(), timeout_s=30) as admin:
            assert (replicas(admin, topic), throttles(admin, [topic])) == before
            assert not admin.list_reassignments()
    # the unreachable cluster: one error naming the bootstrap servers and the fix, no client noise
    assert "Kafka cluster at bootstrap.servers=127.0.0.1:1,127.0.0.1:2 did not answer within" in log
    assert log.count("Connection refused") + log.count("ECONNREFUSED") <= 6, log[-6000:]
    assert "%3|" not in log  # librdkafka's own stderr lines
