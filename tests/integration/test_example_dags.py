"""Every example DAG, run end to end as a real Airflow run against the session sandbox.

Each test copies the example file, unchanged, into the session's dags folder and runs it with
``dag.test()`` in a subprocess (tests/integration/dagrun.py), through the ``kafka_default``
connection (SASL) to the shared 5-broker, 3-rack sandbox. Each run is confined to the test's
own topics through the DAG's Params (``topic_include`` and the like), so it never moves another
test's partitions. The topics hold real records (a few MB) and the moves run under a throttle.

The plan job runs through spark-submit in the decommission's real run; the other runs plan with the same planner in
the DAG run's process (``plan_in_process``, tests/integration/dagrun.py: the subject here is the DAG and its operators,
and each spark-submit costs 20-30 s); the plan job itself is proved in test_plan_on_sandbox and the Spark tests.

Asserted: the DagRun's state and every task's state (``dag.test()`` returns normally even when the
run failed), and the outcome on the cluster: every planned move applied, the promised balance,
replication factors unchanged (or healed), no reassignment left in flight, and the throttle
configs of every broker and topic exactly as they were before.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from dagrun import run_dag_file
from kafka_helpers import dynamic_broker_configs, make_topic, wait_until

from airflow_kafka_reassign.core.maintenance.growth import update_heal_targets
from airflow_kafka_reassign.core.planner import compute_metrics
from airflow_kafka_reassign.core.records.journal import read_journal
from airflow_kafka_reassign.core.records.plan_io import read_metrics, read_plan
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.sandbox.maven import parse_version

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
BROKERS = [1, 2, 3, 4, 5]
RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"}
MB_PER_PARTITION = 0.5
THROTTLE = 2_000_000  # bytes/s: a 0.5 MB replica copies in well under a second, but under a real throttle




@pytest.fixture
def admin(idle_admin):
    return idle_admin


def install(airflow_home: dict[str, str], name: str) -> Path:
    """The example file, unchanged, in the session's dags folder."""
    target = Path(airflow_home["AIRFLOW__CORE__DAGS_FOLDER"]) / name
    shutil.copyfile(EXAMPLES / name, target)
    return target


def topics_pattern(prefix: str) -> list[str]:
    return [re.escape(prefix) + "-.*"]


def make_topics(sandbox, prefix: str, specs: dict[str, list[list[int]]]) -> list[str]:
    names = []
    for suffix, assignment in specs.items():
        name = f"{prefix}-{suffix}"
        make_topic(sandbox.client_config(), name, assignment, megabytes=MB_PER_PARTITION)
        names.append(name)
    return names


def replicas(admin: KafkaClusterAdmin, topics: list[str]) -> dict[TopicPartition, tuple[int, ...]]:
    return {p.tp: p.replicas for p in admin.snapshot(topics=topics).partitions}


def assert_run(result: dict, state: str, tasks: dict[str, str]) -> None:
    assert result["state"] == state, result["log"][-6000:]
    for task_id, task_state in tasks.items():
        assert result["tis"].get(task_id) == task_state, (task_id, result["tis"], result["log"][-6000:])


def assert_plan_applied(admin: KafkaClusterAdmin, plan_dir: Path, topics: list[str], removed: tuple[int, ...] = ()) -> None:
    """Every move of the plan is on the cluster and in sync; this test's topics are spread over the racks, off
    the removed brokers, no less balanced than the plan's worst topic, with their replication factors unchanged."""
    plan = whole = read_plan(plan_dir)
    assert len(plan) > 0
    # confined to this test's topics, but for an internal topic's replicas on a removed broker, which a drain
    # always evacuates (__consumer_offsets exists once any earlier test or benchmark used a consumer group)
    outside = {m.topic for m in plan.moves} - set(topics)
    assert all(t.startswith("__") for t in outside), outside
    assert all(set(m.current_replicas or ()) & set(removed) for m in plan.moves if m.topic in outside)
    plan = plan.model_copy(update={"moves": tuple(m for m in plan.moves if m.topic not in outside)})

    def settled():
        parts = {p.tp: p for p in admin.snapshot(topics=topics).partitions}
        return all(parts[m.tp].replicas == m.target_replicas and set(m.target_replicas) <= set(parts[m.tp].isr)
                   for m in plan.moves) and parts

    wait_until(settled, what="every planned move applied and in sync", timeout=60)
    assert admin.list_reassignments() == {}
    actual = compute_metrics(admin.snapshot(topics=topics), topics=topics, removed=removed)
    promised = read_metrics(plan_dir)["after"]
    assert actual.rack_violations == 0 and actual.rf_changes == 0
    assert actual.replicas_on_removed_brokers == 0
    # the plan's "after" covers the whole shared cluster (other tests' topics are load it may not move): its
    # worst topic bounds this test's topics; the per-broker totals are checked by test_plan_on_sandbox.py
    assert actual.topic_replica_max_min <= promised["topic_replica_max_min"]
    assert read_metrics(plan_dir)["summary"]["replica_moves"] == sum(len(m.adding_replicas) for m in whole.moves)


# -- the scheduled maintenance-window rebalance -------------------------------------------------------


def test_maintenance_window_rebalance_balances_a_skewed_set_of_topics(sandbox, admin, airflow_home, unique_topic):
    # every replica on brokers 1 and 2: skewed over 5 brokers and 3 racks
    topics = make_topics(sandbox, unique_topic, {
        "a": [[1, 2], [2, 1], [1, 2], [2, 1], [1, 2], [2, 1]],
        "b": [[1, 2], [2, 1], [1, 2], [2, 1]],
    })
    before = replicas(admin, topics)
    throttles = admin.describe_throttles(BROKERS, topics)
    dag_file = install(airflow_home, "kafka_rebalance_maintenance_window.py")

    result = run_dag_file(airflow_home, dag_file, {
        "topic_include": topics_pattern(unique_topic),
        "throttle_bytes_per_sec": THROTTLE,
        "max_moves_per_broker": 2,
        "window_minutes": 30,
        "require_approval": False,  # nobody answers in dag.test(): the Chromium test approves in a real UI
    }, plan_in_process=True, unpatched=True)

    assert_run(result, "success", {"plan": "success", "execute": "success", "wait": "success"})
    out = result["xcom"]["plan.return_value"]
    assert out["replica_moves"] >= out["lower_bound"] > 0
    plan_dir = Path(out["plan_uri"])
    assert_plan_applied(admin, plan_dir, topics)
    after = replicas(admin, topics)
    assert {len(r) for r in after.values()} == {2} and after != before
    # the empty brokers of racks r1 and r2 took their share; broker 3 (rack r3 alone) holds a replica of every RF-3
    # partition of the shared cluster (__consumer_offsets, other tests' topics): the whole cluster's balance may
    # give it none of these, depending on what ran before (the per-topic balance is checked above)
    assert {4, 5} <= {b for r in after.values() for b in r}
    assert admin.describe_throttles(BROKERS, topics) == throttles
    assert Path(out["report_uri"]).is_file()
    # the deferrable split: execute submitted the first batch, the wait (deferrable, submit_pending, the window's
    # deadline not reached) submitted the rest, its one progress line shows them done
    assert result["xcom"]["execute.return_value"]["submitted"] >= 1
    assert result["xcom"]["execute.return_value"]["throttles_restored"] == "no"
    assert result["xcom"]["wait.return_value"]["status"] == "complete"
    assert any("100% | moves " in line and "done" in line for line in result["log"].splitlines())


# -- the manually triggered decommission ---------------------------------------------------------------


DECOMMISSIONED = 5


def test_decommission_dry_run_then_real_run_drains_the_broker(sandbox, admin, airflow_home, unique_topic):
    topics = make_topics(sandbox, unique_topic, {
        "a": [[5, 1, 2], [1, 5, 3], [2, 3, 5], [3, 4, 1], [4, 5, 2], [5, 3, 4]],
        "b": [[5, 4], [4, 5], [5, 1], [2, 5]],
    })
    # a topic outside the drain on broker 5 (so the run is partial even on a sandbox of its own)
    make_topic(sandbox.client_config(), f"other-{unique_topic}", [[5, 1]])
    before = replicas(admin, topics)
    throttles = admin.describe_throttles(BROKERS, topics)
    dag_file = install(airflow_home, "kafka_decommission_brokers.py")
    conf = {
        "broker_ids": [DECOMMISSIONED],
        "throttle_bytes_per_sec": THROTTLE,
        "max_moves": 4,
        "max_moves_per_broker": 2,
        "topic_include": topics_pattern(unique_topic),
        # other tests' topics share broker 5: drain this test's topics only (the plan refuses otherwise)
        "partial_drain": True,
        "require_approval": False,  # nobody answers in dag.test(): the Chromium test approves in a real UI
        # Kafka before 4.1 (make compat's 3.9 and 4.0 cells) cannot enforce KIP-860: the client-side check
        "rf_guard": "broker" if (parse_version(sandbox.kafka_version) or ()) >= (4, 1) else "client",
    }

    # dry_run defaults to True: plans and validates, changes nothing, stops after execute
    dry = run_dag_file(airflow_home, dag_file, conf, plan_in_process=True)
    assert "PLAN-IN-PROCESS task plan" in dry["log"]
    assert_run(dry, "success", {"check_request": "success", "plan": "success", "execute": "success",
                                "not_a_dry_run": "success", "wait": "skipped", "verify_drained": "skipped"})
    assert replicas(admin, topics) == before
    assert admin.list_reassignments() == {}
    assert admin.describe_throttles(BROKERS, topics) == throttles

    real = run_dag_file(airflow_home, dag_file, {**conf, "dry_run": False})
    assert "PLAN-IN-PROCESS" not in real["log"] and "spark-submit" in real["log"]  # the plan job, on local Spark

    assert_run(real, "success", {"check_request": "success", "plan": "success", "execute": "success",
                                 "wait": "success", "verify_drained": "success"})
    # the deferrable split: execute submitted the first batch and left the throttles to the deferrable wait
    assert real["xcom"]["execute.return_value"]["submitted"] >= 1
    assert real["xcom"]["execute.return_value"]["throttles_restored"] == "no"
    assert real["xcom"]["verify_drained.return_value"]["drained"] == [DECOMMISSIONED]
    assert real["xcom"]["verify_drained.return_value"]["left_for_later"] > 0  # other-..., and other tests' topics
    assert "partial drain:" in real["log"]
    plan_dir = Path(real["xcom"]["plan.return_value"]["plan_uri"])
    assert_plan_applied(admin, plan_dir, topics, removed=(DECOMMISSIONED,))
    after = replicas(admin, topics)
    assert not any(DECOMMISSIONED in r for r in after.values())
    assert {tp: len(r) for tp, r in after.items()} == {tp: len(r) for tp, r in before.items()}
    assert admin.describe_throttles(BROKERS, topics) == throttles


def test_a_rejected_decommission_changes_nothing_and_takes_its_cordon_back(sandbox, admin, airflow_home, unique_topic):
    """The real rejection path: the approval task parks (awaiting_input), "Reject" goes through Airflow's REST API,
    the task resumes and skips what follows it; the clean-up task (restore_cordons, all_done) gives back the cordon
    the plan task set. Every broker's dynamic configs are the same before and after."""
    topics = make_topics(sandbox, unique_topic, {"a": [[5, 1], [1, 5], [5, 2]]})
    before = replicas(admin, topics)
    configs = dynamic_broker_configs(sandbox.client_config())
    assert all(not c.get("cordoned.log.dirs") for c in configs.values()), configs
    dag_file = install(airflow_home, "kafka_decommission_brokers.py")

    result = run_dag_file(airflow_home, dag_file, {
        "broker_ids": [DECOMMISSIONED], "dry_run": False, "require_approval": True, "throttle_bytes_per_sec": THROTTLE,
        "topic_include": topics_pattern(unique_topic), "partial_drain": True,
    }, answers={"approve": "Reject"}, plan_in_process=True, unpatched=True)

    assert_run(result, "success", {"plan": "success", "approve": "success", "execute": "skipped",
                                   "wait": "skipped", "verify_drained": "skipped", "restore_cordons": "success"})
    assert "HITL-ANSWER approve: Reject -> HTTP 200" in result["log"]
    assert 'cordoned.log.dirs set: {"5": "*"}' in result["log"]  # the plan cordoned broker 5 before its snapshot
    assert result["xcom"]["approve.return_value"]["approved"] is False
    restored = result["xcom"]["restore_cordons.return_value"]
    assert restored["outcome"] == "restored" and restored["brokers"] == [DECOMMISSIONED], restored
    run_dir = Path(result["xcom"]["plan.return_value"]["plan_uri"]) / "run"
    assert [e["event"] for e in read_journal(run_dir)] == ["cordoned", "cordons-restored"]
    assert dynamic_broker_configs(sandbox.client_config()) == configs  # exactly as before: the config dump
    assert replicas(admin, topics) == before and admin.list_reassignments() == {}


def test_decommission_of_an_unknown_broker_fails_before_anything_is_planned(sandbox, admin, airflow_home,
                                                                             unique_topic):
    topics = make_topics(sandbox, unique_topic, {"a": [[1, 2], [2, 3]]})
    before = replicas(admin, topics)
    dag_file = install(airflow_home, "kafka_decommission_brokers.py")

    result = run_dag_file(airflow_home, dag_file, {
        "broker_ids": [99], "dry_run": False, "topic_include": topics_pattern(unique_topic)})

    assert_run(result, "failed", {"check_request": "failed", "plan": "upstream_failed",
                                  "execute": "upstream_failed"})
    assert "broker(s) [99] are not in the cluster" in result["log"]
    assert "plan.return_value" not in result["xcom"]
    assert replicas(admin, topics) == before


# -- scale-out -------------------------------------------------------------------------------------------


def test_scale_out_moves_a_share_onto_the_new_brokers(sandbox, admin, airflow_home, unique_topic):
    # the topics live on brokers 1-3 only; 4 and 5 play the brokers that just joined
    topics = make_topics(sandbox, unique_topic, {
        "a": [[1, 2, 3], [2, 3, 1], [3, 1, 2]] * 2,
        "b": [[1, 2], [2, 3], [3, 1], [1, 3]],
    })
    before = replicas(admin, topics)
    throttles = admin.describe_throttles(BROKERS, topics)
    dag_file = install(airflow_home, "kafka_scale_out.py")

    result = run_dag_file(airflow_home, dag_file, {
        "new_broker_ids": [4, 5],
        "throttle_bytes_per_sec": THROTTLE,
        "max_moves_per_broker": 2,
        "topic_include": topics_pattern(unique_topic),
        "require_approval": False,
    }, plan_in_process=True, unpatched=True)

    assert_run(result, "success", {"check_new_brokers": "success", "plan": "success", "execute": "success",
                                   "wait": "success"})
    assert_plan_applied(admin, Path(result["xcom"]["plan.return_value"]["plan_uri"]), topics)
    after = replicas(admin, topics)
    per_broker = {b: sum(b in r for r in after.values()) for b in BROKERS}
    assert per_broker[4] > 0 and per_broker[5] > 0
    # broker 3 is alone in rack r3: it holds a replica of every RF-3 partition; the others share the rest
    others = [per_broker[b] for b in (1, 2, 4, 5)]
    assert max(others) - min(others) <= 2, per_broker
    assert {tp: len(r) for tp, r in after.items()} == {tp: len(r) for tp, r in before.items()}
    assert admin.describe_throttles(BROKERS, topics) == throttles


# -- guarded partition growth ------------------------------------------------------------------------------


def partition_count(admin: KafkaClusterAdmin, topic: str) -> int:
    return len(admin.snapshot(topics=[topic]).partitions)


def test_guarded_growth_grows_a_topic_and_refuses_a_batch_with_an_internal_topic(sandbox, admin, airflow_home,
                                                                                 unique_topic):
    (topic,) = make_topics(sandbox, unique_topic, {"a": [[1, 2], [2, 3], [3, 1]]})
    dag_file = install(airflow_home, "kafka_grow_partitions.py")

    # all-or-nothing: the internal topic is refused by the check, so the normal one does not grow either
    refused = run_dag_file(airflow_home, dag_file, {"new_total_partitions": {topic: 6, "__consumer_offsets": 100}})
    assert_run(refused, "failed", {"check": "failed", "not_a_dry_run": "upstream_failed", "grow": "upstream_failed"})
    outcome = refused["xcom"]["check.return_value"]["topics"]
    assert outcome["__consumer_offsets"]["status"] == "refused"
    assert outcome["__consumer_offsets"]["refusal"] == "internal-topic"
    assert outcome[topic]["status"] == "validated"
    assert partition_count(admin, topic) == 3

    grown = run_dag_file(airflow_home, dag_file, {"new_total_partitions": {topic: 6}, "dry_run": False}, unpatched=True)
    assert_run(grown, "success", {"check": "success", "not_a_dry_run": "success", "grow": "success"})
    assert grown["xcom"]["grow.return_value"]["topics"][topic]["status"] == "created"
    wait_until(lambda: partition_count(admin, topic) == 6, what="the topic's 6 partitions")
    new = {p.partition: p.replicas for p in admin.snapshot(topics=[topic]).partitions if p.partition >= 3}
    assert all(len(r) == 2 and len({RACKS[b] for b in r}) == 2 for r in new.values())  # its RF, over 2 racks


# -- heal of under-replicated partitions -----------------------------------------------------------------------


def test_heal_restores_the_replication_factor_of_recorded_partitions_only(sandbox, admin, airflow_home,
                                                                         unique_topic, tmp_path):
    (topic,) = make_topics(sandbox, unique_topic, {"a": [[1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 1]]})
    # partitions 1 and 2 short of a replica, as if created under-replicated (an explicit RF change)
    current = replicas(admin, [topic])
    short = {TopicPartition(topic, p): current[TopicPartition(topic, p)][:2] for p in (1, 2)}
    assert not admin.alter_reassignments(short, allow_replication_factor_change=True).failed
    wait_until(lambda: all(len(replicas(admin, [topic])[tp]) == 2 for tp in short) and not admin.list_reassignments(),
               what="the partitions to be RF 2")
    before = replicas(admin, [topic])
    heal_file = tmp_path / "heal-targets.json"
    update_heal_targets(heal_file, add={f"{topic}-1": 3, f"{topic}-2": 3})
    throttles = admin.describe_throttles(BROKERS, [topic])
    dag_file = install(airflow_home, "kafka_heal_under_replicated.py")

    result = run_dag_file(airflow_home, dag_file, {"heal_targets_path": str(heal_file),
                                                   "throttle_bytes_per_sec": THROTTLE}, unpatched=True)

    assert_run(result, "success", {"plan_heal": "success", "execute": "success", "wait": "success"})
    assert result["xcom"]["plan_heal.return_value"]["moves"] == 2
    after = replicas(admin, [topic])
    assert {tp: len(r) for tp, r in after.items()} == {TopicPartition(topic, p): 3 for p in range(4)}
    for tp in short:  # healed: the two replicas it had are kept, one added on another rack
        assert set(before[tp]) < set(after[tp]) and len({RACKS[b] for b in after[tp]}) == 3
    assert {tp: r for tp, r in after.items() if tp not in short} == {
        tp: r for tp, r in before.items() if tp not in short}
    assert admin.describe_throttles(BROKERS, [topic]) == throttles
    json.loads(heal_file.read_text())  # still a valid heal-targets file
