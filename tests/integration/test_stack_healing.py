"""Self-healing on the production stack: the example DAGs ``kafka_heal_broker_down`` and ``kafka_heal_empty_broker``
deployed as a user would, their ``AssetWatcher`` run by the stack's own triggerer, the healing runs on the Celery
workers, plans and state on S3.

One stack for the module (:mod:`airflow_kafka_reassign.sandbox.stack`: PostgreSQL, Redis, CeleryExecutor with two
workers, scheduler, DAG processor, triggerer, API server) on the session's Kafka sandbox and S3 store. The example
files are deployed unchanged; the deployment shortens the watch's times through the examples' documented knobs
(``AKR_WATCH_DWELL_S``, ``AKR_WATCH_RECOVERY_S``, ``AKR_WATCH_POLL_INTERVAL_S``: docs/self-healing.md) and keeps its
plans, its healing ledger and the watch state on S3 through the Variables ``akr_plan_storage`` /
``akr_storage_conn_id`` (the stack sets them, as a deployment does). In order, on one stack:

1. a rolling restart of broker 4 within the dwell: the watch saw it and forgot it; no asset event, no DAG run;
2. broker 5 stopped for longer than its dwell, the triggerer SIGKILLed and restarted in the middle of the dwell:
   exactly one asset event for the incident asset (the metadata DB), whose incident keeps the first-seen time of
   before the kill; exactly one healing run, which drains broker 5; read by a confluent-kafka client of the test's
   own, every partition has its replication factor again, off broker 5; acks=all traffic runs throughout and every
   acknowledged record is read back. Broker 5 is started again; still one event, one run;
3. broker 5, back and empty: one ``empty_broker`` incident after its dwell, one scale-out run (``add-brokers``), and
   broker 5 holds its share again (the test's own client); the same incident replayed is ``handled``, nothing moves;
   the incident is over after its recovery time, and it fired once;
4. brokers 3 and 4 stopped at once (the example's breaker allows one): no move (every partition as before, no plan),
   each incident's outcome on the S3 store is ``breaker``, naming it;
5. broker 4 cordoned by hand (a manual decommission awaiting its approval) when broker 5 stops: the healing run
   records that it waits for another writer and moves nothing; the manual drain empties broker 4 (and takes broker 5
   out of the partitions it moves); then the healing run drains from broker 5 what is left there (its plan balances
   brokers 1-3 as any drain's does), puts nothing on broker 4, and broker 4's cordon stays. Last: brokers 4 and 5
   end empty (the scale-out DAG is paused first).

The scenarios build on each other (3 needs the drain of 2); 5 stands alone (``-k manual``). The watch's state and the
ledger's outcomes are read from the S3 store's data directory (S3Proxy's filesystem backend), not through the
product's code.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from controller_listing import admin_client as listing_client
from kafka import TopicPartition
from kafka_helpers import Traffic, make_topic
from observers import CORDONED_LOG_DIRS, cordons
from stack_support import stack_running

from airflow_kafka_reassign.sandbox import wait_until
from airflow_kafka_reassign.sandbox.stack import Stack

#: the stack's start-up and a scenario with its dwell time, a drain with Spark planning (on a loaded machine)
pytestmark = pytest.mark.timeout(2400)

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
DAG_ID = "kafka_heal_broker_down"
ASSET = "kafka_reassign.kafka_default.incidents.broker_down"
CLUSTER = "kafka_default"
#: the broker's dwell: longer than the sandbox's rolling restart of one broker (about 20 s) and than a triggerer's
#: restart (30-60 s on a busy machine); recovery: short, so that a return after the drain is over quickly
DWELL_S = 120
RECOVERY_S = 30
POLL_S = 3
#: an incident no run decided on is fired again after this (an asset event Airflow left without a run: two brokers'
#: incidents in one poll, scenario 4); longer than a run takes to reach its decision on this stack
REFIRE_S = 180
#: the scale-out's example, deployed beside it: a broker that comes back empty gets its share
EMPTY_DAG_ID = "kafka_heal_empty_broker"
EMPTY_ASSET = "kafka_reassign.kafka_default.incidents.empty_broker"
#: the empty broker's dwell: short, to keep the module quick (a broker that restarts keeps its replicas in the
#: metadata: only a broker that was drained, or a new one, is empty when it comes back)
EMPTY_DWELL_S = 60
EMPTY_RECOVERY_S = 30
#: a topic of the module on every broker, 4 replicas each, two racks per partition (r1: 1, 4; r2: 2, 5; r3: 3): the
#: share that broker 5 loses to the drain and is given back by the scale-out
SHARE_TOPIC = f"t-stack-healing-share-{secrets.token_hex(4)}"
SHARE_ASSIGNMENT = [[1, 2], [2, 3], [3, 4], [4, 5], [5, 1], [1, 3], [2, 4], [3, 5], [1, 5], [2, 4]]


@pytest.fixture(scope="module")
def stack(sandbox, object_store, tmp_path_factory) -> Iterator[Stack]:
    with stack_running(tmp_path_factory.mktemp("stack-healing"), kafka_dir=sandbox.dir,
                       object_store_dir=object_store.dir, dags=None, heartbeat_timeout_s=20, env={
        "AKR_WATCH_DWELL_S": json.dumps({"broker_down": DWELL_S, "empty_broker": EMPTY_DWELL_S}),
        "AKR_WATCH_RECOVERY_S": json.dumps({"broker_down": RECOVERY_S, "empty_broker": EMPTY_RECOVERY_S}),
        "AKR_WATCH_POLL_INTERVAL_S": str(POLL_S),
        "AKR_WATCH_REFIRE_AFTER_S": str(REFIRE_S),
    }) as st:
        yield st


@pytest.fixture(scope="module")
def healing(sandbox, stack: Stack) -> Stack:
    """The examples deployed (the broker drain and the scale-out), parsed and unpaused, their watches running in the
    triggerer; the module's share topic on every broker (created first: no broker is empty when the watch starts)."""
    config = sandbox.client_config()
    make_topic(config, SHARE_TOPIC, SHARE_ASSIGNMENT, megabytes=0.1)
    assert all(any(b in r for r in SHARE_ASSIGNMENT) for b in (1, 2, 3, 4, 5))
    for dag_id, asset in ((DAG_ID, ASSET), (EMPTY_DAG_ID, EMPTY_ASSET)):
        stack.add_dag(EXAMPLES / f"{dag_id}.py")
        wait_until(lambda d=dag_id: stack.query("select 1 from serialized_dag where dag_id=%s", d),
                   f"the DAG processor to parse {dag_id}", 180, 1)
        stack.cli("dags", "unpause", dag_id)
        wait_until(lambda a=asset: watch_trigger(stack, a)[1] is not None, f"the triggerer to run the watch of {asset}",
                   180, 1)
    assert stack.alive("triggerer"), stack.tail("triggerer")
    return stack


# -- second observers: the metadata DB, the S3 store's files, the test's own Kafka client ----------------------------

def watch_trigger(stack: Stack, asset: str = ASSET) -> tuple[int | None, int | None]:
    """The watcher's trigger row of ``asset``: its id and the triggerer job running it (``None``: none yet)."""
    rows = stack.query("select t.id, t.triggerer_id from trigger t join asset_watcher w on w.trigger_id = t.id "
                       "join asset a on a.id = w.asset_id where a.name = %s", asset)
    return rows[0] if rows else (None, None)


def asset_events(stack: Stack, asset: str = ASSET) -> list[dict]:
    rows = stack.query("select e.id, e.timestamp, e.extra from asset_event e join asset a on a.id = e.asset_id "
                       "where a.name = %s order by e.id", asset)
    return [{"id": i, "at": at, "payload": (x if isinstance(x, dict) else json.loads(x or "{}")).get("payload") or {}}
            for i, at, x in rows]


def dag_runs(stack: Stack, dag_id: str = DAG_ID) -> list[dict]:
    rows = stack.query("select run_id, run_type, state from dag_run where dag_id=%s order by id", dag_id)
    return [dict(zip(("run_id", "run_type", "state"), r, strict=True)) for r in rows]


def task_states(stack: Stack, run_id: str, dag_id: str = DAG_ID) -> dict[str, str]:
    return dict(stack.query("select task_id, state from task_instance where dag_id=%s and run_id=%s", dag_id, run_id))


def xcom(stack: Stack, run_id: str, task_id: str, dag_id: str = DAG_ID) -> dict | None:
    rows = stack.query("select value from xcom where dag_id=%s and run_id=%s and task_id=%s and key='return_value'",
                       dag_id, run_id, task_id)
    if not rows:
        return None
    return rows[0][0] if isinstance(rows[0][0], dict) else json.loads(rows[0][0])


def store_root(stack: Stack) -> Path:
    store = stack.object_store
    return Path(store.state["data_dir"]) / store.bucket / "airflow"


def watch_state(stack: Stack) -> dict:
    """The watch's conditions by key, as it wrote them on S3 (``{}``: none, or no state yet)."""
    path = store_root(stack) / "cluster-watch" / f"{CLUSTER}.json"
    try:
        return dict(json.loads(path.read_text()).get("conditions") or {})
    except (FileNotFoundError, ValueError):  # not written yet, or caught mid-write
        return {}


def outcomes(stack: Stack) -> list[dict]:
    folder = store_root(stack) / "healing" / CLUSTER / "outcomes"
    return [json.loads(p.read_text()) for p in sorted(folder.rglob("*.json"))] if folder.is_dir() else []


def wait_run_end(stack: Stack, run_id: str, timeout: float = 900, dag_id: str = DAG_ID) -> str:
    try:
        return wait_until(lambda: (s := next((r["state"] for r in dag_runs(stack, dag_id) if r["run_id"] == run_id),
                                             None)) in ("success", "failed") and s,
                          f"the healing run {dag_id} {run_id} to end", timeout, 2)
    except TimeoutError as e:
        raise AssertionError(f"{e}: {task_states(stack, run_id, dag_id)}\n--- scheduler\n{stack.tail('scheduler')}\n"
                             f"--- triggerer\n{stack.tail('triggerer')}") from None


def logs_of(stack: Stack, run_id: str, dag_id: str = DAG_ID) -> str:
    store = stack.object_store
    root = Path(store.state["data_dir"]) / store.bucket / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    return "\n".join(f"--- {p.relative_to(root)}\n" + p.read_text(errors="replace")[-3000:]
                     for p in sorted(root.rglob("*.log"))) if root.exists() else ""


def partitions(config: dict) -> dict[tuple[str, int], tuple[list[int], list[int]]]:
    """Every partition's (replicas, ISR), by the test's own confluent-kafka client."""
    topics = AdminClient(dict(config)).list_topics(timeout=30).topics
    return {(t, p.id): (list(p.replicas), list(p.isrs)) for t, md in topics.items() for p in md.partitions.values()}


def fenced(config: dict) -> set[int]:
    """Brokers the controller lists fenced (the test's own kafka-python request)."""
    from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

    with KafkaClusterAdmin(config) as admin:
        return {b.id for b in admin.describe_cluster().brokers if b.fenced}


def all_in_sync(config: dict, brokers: set[int]) -> bool:
    """``brokers`` are not fenced and every partition's ISR is its whole replica set."""
    return not (fenced(config) & brokers) and all(sorted(r) == sorted(i) for r, i in partitions(config).values())


# -- the scenarios, in order on one stack -------------------------------------------------------------------------

def test_a_rolling_restart_within_the_dwell_starts_nothing(sandbox, healing):
    stack = healing
    sandbox.stop_broker(4)
    try:
        seen = wait_until(lambda: watch_state(stack).get("broker_down/b4"), "the watch to see broker 4 down", 120, 0.5)
    finally:
        sandbox.start_broker(4)
    wait_until(lambda: "broker_down/b4" not in watch_state(stack), "the watch to forget broker 4", 120, 0.5)
    assert seen["fired"] is None, seen
    assert asset_events(stack) == [] and asset_events(stack, EMPTY_ASSET) == [], asset_events(stack)
    assert dag_runs(stack) == [] and dag_runs(stack, EMPTY_DAG_ID) == [], dag_runs(stack)
    assert outcomes(stack) == []
    wait_until(lambda: all_in_sync(sandbox.client_config(), {4}), "broker 4 back in every ISR", 180, 1)


def test_a_broker_down_past_its_dwell_is_drained_once_across_a_triggerer_kill(sandbox, healing, unique_topic):
    stack = healing
    config = sandbox.client_config()
    assignment = [[5, 1, 2], [1, 5, 3], [2, 3, 5], [3, 4, 1], [4, 5, 2], [5, 3, 4]]
    make_topic(config, unique_topic, assignment, megabytes=0.2, configs={"min.insync.replicas": "2"})
    wait_until(lambda: all_in_sync(config, {1, 2, 3, 4, 5}), "every ISR full before the stop", 180, 1)
    before = {tp: len(r) for tp, (r, _) in partitions(config).items()}
    started = time.monotonic()
    try:
        with Traffic(config, unique_topic, partitions=len(assignment)) as traffic:
            sandbox.stop_broker(5)
            # the middle of the dwell, by the watch's own clock: it has tracked broker 5 down for a third of it
            record = wait_until(lambda: (r := watch_state(stack).get("broker_down/b5")) and datetime.fromisoformat(
                r["last_seen"]) - datetime.fromisoformat(r["first_seen"]) >= timedelta(seconds=DWELL_S / 3) and r,
                "the watch to track broker 5 down for a third of its dwell", DWELL_S, 0.5)
            first_seen = datetime.fromisoformat(record["first_seen"])
            trigger_id, first_job = watch_trigger(stack)
            # the triggerer SIGKILLed in the middle of the dwell, and started again (a supervisor's restart)
            killed_at = datetime.now(timezone.utc)
            assert killed_at < first_seen + timedelta(seconds=DWELL_S) and record["fired"] is None, record
            stack.kill("triggerer")
            stack.start("triggerer")
            restarted_at = datetime.now(timezone.utc)
            events = wait_until(lambda: asset_events(stack), "the broker_down incident", DWELL_S + 300, 1)
            fired_at = time.monotonic() - started
            # the watcher's trigger runs in the new triggerer job
            assert watch_trigger(stack)[0] == trigger_id and watch_trigger(stack)[1] not in (None, first_job)
            run = wait_until(lambda: next((r for r in dag_runs(stack) if r["run_type"] == "asset_triggered"), None),
                             "the healing run", 300, 1)
            state = wait_run_end(stack, run["run_id"])
            assert state == "success", (task_states(stack, run["run_id"]), logs_of(stack, run["run_id"])[-8000:])
            ran_at = time.monotonic() - started
        traffic.check()  # acks=all throughout: every acknowledged record read back

        # one incident, fired once: its first-seen time is the one the watch recorded before the kill
        assert len(events) == 1, events
        payload = events[0]["payload"]
        assert payload["kind"] == "broker_down" and payload["brokers"] == [5], payload
        assert datetime.fromisoformat(payload["first_seen"]) == first_seen < killed_at, (payload, killed_at)
        assert events[0]["at"] >= first_seen + timedelta(seconds=DWELL_S), (events[0]["at"], first_seen)
        # one run, which drained broker 5
        assert [r["run_type"] for r in dag_runs(stack)] == ["asset_triggered"], dag_runs(stack)
        decision = xcom(stack, run["run_id"], "decide")
        assert decision["action"] == "drain" and decision["brokers"] == [5] and decision["incidents"] == [
            payload["id"]], decision
        assert xcom(stack, run["run_id"], "verify_drained") == {"drained": [5]}
        mine = [o["decision"] for o in outcomes(stack) if o["incident_id"] == payload["id"]]
        assert mine == ["act", "done"], outcomes(stack)
        # the test's own client: no replica on broker 5, every partition its replication factor again, in sync
        wait_until(lambda: all(sorted(r) == sorted(i) for r, i in partitions(config).values()),
                   "every ISR to be the whole replica set", 120, 1)
        after = partitions(config)
        on_5 = sorted(tp for tp, (r, _) in after.items() if 5 in r)
        assert not on_5, on_5
        short = {tp: (n, after[tp]) for tp, n in before.items() if tp in after and len(after[tp][0]) != n}
        assert not short, short
        assert all(len(after[(unique_topic, p)][0]) == 3 for p in range(len(assignment)))
    finally:
        sandbox.start_broker(5)

    # back, clear for its recovery time: the incident is over; nothing fired again, no second run
    wait_until(lambda: "broker_down/b5" not in watch_state(stack), "the broker_down/b5 incident to be over",
               RECOVERY_S + 180, 1)
    assert len(asset_events(stack)) == 1 and len(dag_runs(stack)) == 1, (asset_events(stack), dag_runs(stack))
    print(f"\nbroker 5 stopped at 0 s; the triggerer SIGKILLed {(killed_at - first_seen).total_seconds():.0f} s after "
          f"the watch first saw it, restarted at {(restarted_at - first_seen).total_seconds():.0f} s; the incident "
          f"fired at {fired_at:.0f} s (dwell {DWELL_S} s), the healing run ended at {ran_at:.0f} s")


def test_the_drained_broker_back_empty_gets_its_share_from_one_scale_out_run(sandbox, healing):
    """Broker 5, drained while it was down (the scenario before) and started again at its end, holds no replica: the
    watch fires ``empty_broker`` after its dwell, the deployed kafka_heal_empty_broker runs once (the ``add-brokers``
    plan) and broker 5 ends with its share; a replayed event for the same incident and the incident's recovery start
    no second scale-out."""
    stack = healing
    config = sandbox.client_config()
    events = wait_until(lambda: asset_events(stack, EMPTY_ASSET), "the empty_broker incident of broker 5",
                        EMPTY_DWELL_S + 300, 1)
    payload = events[0]["payload"]
    assert payload["kind"] == "empty_broker" and payload["brokers"] == [5], payload
    assert events[0]["at"] >= datetime.fromisoformat(payload["first_seen"]) + timedelta(seconds=EMPTY_DWELL_S)
    run = wait_until(lambda: next((r for r in dag_runs(stack, EMPTY_DAG_ID) if r["run_type"] == "asset_triggered"),
                                  None), "the scale-out run", 300, 1)
    state = wait_run_end(stack, run["run_id"], dag_id=EMPTY_DAG_ID)
    assert state == "success", (task_states(stack, run["run_id"], EMPTY_DAG_ID),
                                logs_of(stack, run["run_id"], EMPTY_DAG_ID)[-8000:])
    decision = xcom(stack, run["run_id"], "decide", EMPTY_DAG_ID)
    # the decision checked the incident on the live cluster: broker 5 still held nothing, so it was not stale
    assert decision["action"] == "scale_out" and decision["brokers"] == [5] and decision["incidents"] == [
        payload["id"]], decision
    assert [o["decision"] for o in outcomes(stack) if o["incident_id"] == payload["id"]] == ["act", "done"]

    # the test's own client: broker 5 holds replicas again, its share of the topics the plan balances (Kafka's
    # internal topics are left where they are); broker 3, alone in rack r3, holds what its rack must
    after = partitions(config)
    counts = {b: sum(b in r for (t, _), (r, _) in after.items() if not t.startswith("__")) for b in (1, 2, 3, 4, 5)}
    share = {b: sum(b in r for (t, _), (r, _) in after.items() if t == SHARE_TOPIC) for b in (1, 2, 3, 4, 5)}
    print(f"\nafter the scale-out: replicas per broker {counts}; of the share topic {share}")
    peers = [counts[b] for b in (1, 2, 4, 5)]
    assert counts[5] > 0 and max(peers) - min(peers) <= 2, counts
    assert share[5] > 0, share
    assert all(len(r) == 2 for (t, _), (r, _) in after.items() if t == SHARE_TOPIC), "a replication factor changed"

    # the same incident again (a replayed event): the run's state says it is handled; nothing moves
    replay = f"replay-{secrets.token_hex(4)}"
    stack.cli("dags", "trigger", EMPTY_DAG_ID, "--run-id", replay, "--conf", json.dumps({"incidents": [payload]}))
    wait_run_end(stack, replay, dag_id=EMPTY_DAG_ID)
    states = task_states(stack, replay, EMPTY_DAG_ID)
    assert states.get("decide") == "skipped" and states.get("plan") == "skipped", states
    assert [o["decision"] for o in outcomes(stack) if o["incident_id"] == payload["id"]] == ["act", "done", "handled"]
    assert {tp: r for tp, (r, _) in partitions(config).items()} == {tp: r for tp, (r, _) in after.items()}

    # broker 5 holds replicas: the condition clears; clear for its recovery time, the incident is over; it fired once
    wait_until(lambda: "empty_broker/b5" not in watch_state(stack), "the empty_broker/b5 incident to be over",
               EMPTY_RECOVERY_S + 180, 1)
    assert len(asset_events(stack, EMPTY_ASSET)) == 1, asset_events(stack, EMPTY_ASSET)
    assert [r["run_type"] for r in dag_runs(stack, EMPTY_DAG_ID)] == ["asset_triggered", "manual"], dag_runs(
        stack, EMPTY_DAG_ID)


def test_two_brokers_down_at_once_trip_the_breaker_and_nothing_moves(sandbox, healing, unique_topic):
    stack = healing
    config = sandbox.client_config()
    make_topic(config, unique_topic, [[3, 4, 1], [4, 3, 2], [1, 2, 3]], megabytes=0.1)
    wait_until(lambda: all_in_sync(config, {1, 2, 3, 4, 5}), "every ISR full before the stops", 180, 1)
    events_before = len(asset_events(stack))
    runs_before = {r["run_id"] for r in dag_runs(stack)}
    replicas_before = {tp: r for tp, (r, _) in partitions(config).items()}
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(sandbox.stop_broker, (3, 4)))
        events = wait_until(lambda: (e := asset_events(stack)[events_before:]) and len(
            {b for x in e for b in x["payload"]["brokers"]}) == 2 and e, "the incidents of brokers 3 and 4",
            DWELL_S + 300, 1)
        ids = {e["payload"]["id"] for e in events}
        runs = wait_until(lambda: (new := [r for r in dag_runs(stack) if r["run_id"] not in runs_before]) and all(
            r["state"] in ("success", "failed") for r in new) and {o["incident_id"] for o in outcomes(stack)} >= ids
            and new, "the healing runs to end with an outcome per incident", 600, 2)
        for r in runs:
            states = task_states(stack, r["run_id"])
            assert states.get("decide") == "skipped" and states.get("plan") == "skipped", (states, logs_of(
                stack, r["run_id"])[-6000:])
        mine = [o for o in outcomes(stack) if o["incident_id"] in ids]
        assert {o["decision"] for o in mine} == {"breaker"}, mine
        assert all("mass-failure breaker" in o["reason"] and "max_brokers=1" in o["reason"] for o in mine), mine
        fired = [e["payload"]["id"] for e in asset_events(stack)[events_before:]]
        print(f"\n{len(ids)} incident(s) of brokers 3 and 4 in {len(fired)} asset event(s) (an incident no run decided "
              f"on is fired again), {len(runs)} healing run(s): {[(o['incident_id'], o['decision']) for o in mine]}")
        after = {tp: r for tp, (r, _) in partitions(config).items()}
        assert {tp: r for tp, r in after.items() if tp in replicas_before} == {
            tp: r for tp, r in replicas_before.items() if tp in after}, "a replica moved"
    finally:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(sandbox.start_broker, (3, 4)))
    wait_until(lambda: all_in_sync(config, {3, 4}), "brokers 3 and 4 back in every ISR", 300, 1)


# -- a manual decommission in flight (the last scenario: it leaves brokers 4 and 5 empty) ----------------------------

def cordon_by_hand(config: dict, broker: int) -> None:
    """Every log dir of ``broker`` cordoned (``cordoned.log.dirs=*``, KIP-1066), as kafka_decommission_brokers' cordon
    step sets it before its plan's approval, by the test's own client (incremental: the broker's other configs stay).
    The autouse fixture ``no_cordon_left_on_the_shared_cluster`` reopens it after the test."""
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker), incremental_configs=[
        ConfigEntry(CORDONED_LOG_DIRS, "*", incremental_operation=AlterConfigOpType.SET)])
    client = AdminClient(dict(config))  # held until the answer: a client collected first fails its futures
    client.incremental_alter_configs([resource])[resource].result(60)


def drain_by_hand(config: dict, broker: int, down: set[int], keep: list[int]) -> dict[tuple[str, int], list[int]]:
    """A decommission of ``broker`` by hand, outside Airflow (as ``kafka-reassign-partitions --generate
    --broker-list`` plans it): every partition with a replica on ``broker`` gets brokers of ``keep`` instead of it and
    of the ``down`` brokers it also has (a reassignment ends only when every target replica is in sync: one that
    kept a broker that is down would never end), in one AlterPartitionReassignments of the test's own kafka-python
    client. Returns the targets."""
    targets: dict[tuple[str, int], list[int]] = {}
    gone = {broker} | down
    for tp, (replicas, _) in partitions(config).items():
        if broker in replicas:
            spare = [b for b in keep if b not in replicas]
            targets[tp] = [b if b not in gone else spare.pop(0) for b in replicas]
    client = listing_client(config)
    try:
        errors = client.alter_partition_reassignments({TopicPartition(t, p): r for (t, p), r in targets.items()})
    finally:
        client.close()
    failed = {tp: e for tp, e in errors.items() if e is not None}
    assert not failed, failed
    return targets


def test_a_manual_decommission_in_flight_makes_healing_wait_then_drain_what_is_left(sandbox, healing,
                                                                                      unique_topic):
    """A person decommissions broker 4 by hand: its cordon is set (the plan awaits their approval) when broker 5
    stops. The broker_down incident fires after its dwell; the healing run sees another writer (a broker cordoned by
    someone else that still holds replicas), records that it waits, plans nothing and moves nothing. The manual drain
    then moves every replica off broker 4 (and, broker 5 being down, off 5 in the same partitions). Only then does the
    healing run act: it drains from broker 5 what the manual run left there (its plan balancing brokers 1-3 as any
    drain's does); broker 4 stays cordoned and empty (healing never touches what a manual run cordoned); acks=all
    traffic throughout, read back."""
    stack = healing
    config = sandbox.client_config()
    assignment = [[4, 5, 1], [5, 4, 2], [4, 1, 3], [5, 1, 2], [2, 5, 3], [1, 2, 3]]
    make_topic(config, unique_topic, assignment, megabytes=0.2, configs={"min.insync.replicas": "2"})
    wait_until(lambda: all_in_sync(config, {1, 2, 3, 4, 5}), "every ISR full before the stop", 180, 1)
    events_before = len(asset_events(stack))
    runs_before = {r["run_id"] for r in dag_runs(stack)}
    stopped = False
    try:
        with Traffic(config, unique_topic, partitions=len(assignment)) as traffic:
            cordon_by_hand(config, 4)
            stopped = True
            sandbox.stop_broker(5)
            before = {tp: r for tp, (r, _) in partitions(config).items()}
            events = wait_until(lambda: asset_events(stack)[events_before:], "the broker_down incident of broker 5",
                                DWELL_S + 300, 1)
            payload = events[0]["payload"]
            assert payload["kind"] == "broker_down" and payload["brokers"] == [5], payload
            run = wait_until(lambda: next((r for r in dag_runs(stack) if r["run_id"] not in runs_before), None),
                             "the healing run", 300, 1)

            def outcomes_of_the_incident() -> list[dict]:
                return [o for o in outcomes(stack) if o["incident_id"] == payload["id"]]

            waits = wait_until(outcomes_of_the_incident, "the healing run to decide", 300, 1)
            assert [o["decision"] for o in waits] == ["writer"], (waits, logs_of(stack, run["run_id"])[-6000:])
            assert "broker(s) [4] are cordoned by someone else and still hold replicas" in waits[0]["reason"], waits
            # while it waits (rescheduled, no worker slot): no plan, and every replica where it was (own client)
            states = wait_until(lambda: (t := task_states(stack, run["run_id"])).get("decide") == "up_for_reschedule"
                                and t, "the decision to wait for its next poke", 120, 0.5)
            assert states.get("plan") is None, states
            now = partitions(config)
            assert {tp: now[tp][0] for tp in before} == before

            # the manual drain: every replica off broker 4 onto 1-3 (and off broker 5, down, in those partitions), sent
            # right after a poke: the next one comes a poke interval (60 s) later, whatever the drain's speed
            manual_started = datetime.now(timezone.utc)
            targets = drain_by_hand(config, 4, down={5}, keep=[1, 2, 3])
            wait_until(lambda: all(sorted(partitions(config)[tp][0]) == sorted(r) for tp, r in targets.items()),
                       "the manual drain to end", 180, 1)
            after_manual = {tp: r for tp, (r, _) in partitions(config).items()}
            state = wait_run_end(stack, run["run_id"])
            assert state == "success", (task_states(stack, run["run_id"]), logs_of(stack, run["run_id"])[-8000:])
        traffic.check()

        mine = outcomes_of_the_incident()
        assert [o["decision"] for o in mine] == ["writer", "act", "done"], mine
        assert datetime.fromisoformat(mine[1]["at"]) > manual_started, (mine[1], manual_started)
        decision = xcom(stack, run["run_id"], "decide")
        assert decision["action"] == "drain" and decision["brokers"] == [5], decision
        # the test's own client: what the manual run left on broker 5, healing moved off it; nothing is on 4 or 5
        # (healing put nothing on the broker the manual run cordoned, moved nothing back), every partition keeps its
        # replication factor. The drain's plan (goal remove-brokers) balances the brokers left, 1-3, as the manual
        # decommission DAG's does: a partition with no replica on 5 may move among them (counted, printed)
        wait_until(lambda: all(sorted(r) == sorted(i) for r, i in partitions(config).values()),
                   "every ISR to be the whole replica set", 120, 1)
        final = {tp: r for tp, (r, _) in partitions(config).items()}
        left_on_5 = sorted(tp for tp, r in after_manual.items() if 5 in r)
        assert left_on_5 and all(5 not in final[tp] for tp in left_on_5), (left_on_5, final)
        assert not [tp for tp, r in final.items() if {4, 5} & set(r)], final
        assert {tp: len(r) for tp, r in final.items() if tp in after_manual} == {
            tp: len(r) for tp, r in after_manual.items()}, "a replication factor changed"
        rebalanced = sorted(tp for tp, r in after_manual.items() if 5 not in r and final[tp] != r)
        # broker 4's cordon is the manual run's: healing left it as it was
        assert cordons(AdminClient(dict(config)), [4]) == {4: "*"}
        print(f"\nthe manual drain moved {len(targets)} partition(s) off broker 4 ({sum(5 in before[tp] for tp in targets)} "
              f"also off broker 5); healing waited for it, then drained the {len(left_on_5)} partition(s) left on 5 "
              f"and moved {len(rebalanced)} other(s) among brokers 1-3 (its plan's balance): {rebalanced}")
    finally:
        # brokers 4 and 5 end empty (4 is reopened after the test): no scale-out of them after the module
        stack.cli("dags", "pause", EMPTY_DAG_ID)
        if stopped:
            sandbox.start_broker(5)
