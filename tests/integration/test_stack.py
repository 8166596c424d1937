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
* more faults (a worker killed during a re-plan round, the triggerer, PostgreSQL, Redis) in test_stack_faults.py, on
  a stack of its own (the stack fixture: conftest.py; the helpers both modules share: stack_support.py).

The faults assert the cluster as before: every broker's dynamic configs and the topic's throttle configs identical,
every partition at its target, the replication factor unchanged, no partition submitted twice. Each fault runs
acks=all traffic on the plan's topic through it and reads every acknowledged record back (``Traffic``); "submitted
once" is judged from the controller too (``controller_listing.Episodes``: ListPartitionReassignments sampled by a
kafka-python client of the test's own, one in-flight episode per partition), not only from the project's journal;
and the faults that come mid-plan (a worker, the triggerer, PostgreSQL) read at the fault, from the controller's
listing and the metadata, that a move was in flight and another not sent yet (``at_the_fault``).
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest
from kafka_helpers import make_topic, put_plan, replicas, throttles
from stack_support import (
    EXAMPLES,
    assert_nothing_on_the_workers_disks,
    assert_plan_done,
    assert_sent_once,
    at_the_fault,
    config_dump,
    deploy,
    execute_dag,
    fault_plan,
    joined,
    journal_submitted,
    kill_worker_running,
    logs_of,
    observed,
    restart_in_background,
    task_log,
    tries,
    trigger,
    wait_run,
    xcom,
)

from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.sandbox import wait_until
from airflow_kafka_reassign.sandbox.stack import STORAGE_CONN_ID

#: the stack's start-up (the first test's setup) and a run (Spark planning, faults) together
pytestmark = pytest.mark.timeout(1800)


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
