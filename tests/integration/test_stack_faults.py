"""The production stack under faults, part two (part one and the stack itself: test_stack.py; the helpers:
stack_support.py), on a stack of its own, so that the two modules run on two xdist workers at once:

* a worker SIGKILLed while a balancing plan's re-plan round is in flight: the retry takes the recorded round up;
* the triggerer SIGKILLed during a deferrable wait that submits the plan itself: restarted, it carries on;
* PostgreSQL restarted during that wait: the scheduler, the triggerer and the DAG processor exit with it,
  :meth:`Stack.revive` starts them again (a process supervisor's job) and the run finishes;
* Redis restarted while a run is held between two tasks by a sensor: the next task is queued and runs on a worker.

The faults are judged as in test_stack.py: configs byte-identical, every partition at its target, acks=all traffic read
back, "submitted once" from the controller's listing (``controller_listing.Episodes``) beside the journal.
"""

from __future__ import annotations

import re
import signal
import time

import pytest
from confluent_kafka.admin import AdminClient
from controller_listing import admin_client, in_flight
from kafka_helpers import make_topic, put_plan
from stack_support import (
    assert_plan_done,
    assert_sent_once,
    at_the_fault,
    config_dump,
    deferred_wait,
    execute_dag,
    fault_plan,
    joined,
    journal_events,
    journal_submitted,
    logged_since,
    logs_of,
    observed,
    open_gate,
    restart_in_background,
    ti_state,
    tries,
    trigger,
    trigger_logs,
    wait_run,
    xcom,
)

from airflow_kafka_reassign.core.execution.run_state import DRAIN_ROUND
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.sandbox import wait_until

#: the stack's start-up (the first test's setup) and a run (Spark planning, faults) together
pytestmark = pytest.mark.timeout(1800)


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
