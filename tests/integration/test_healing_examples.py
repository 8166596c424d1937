"""The healing examples beside the drain, as real DAG runs on a cluster of this module's own: kafka_heal_empty_broker,
kafka_heal_log_dir and kafka_heal_imbalance, each given a hand-made incident (the payload the watch would fire; no
triggerer here) in ``conf["incidents"]``, as an operator replays one.

The cluster: ``kafka_helpers.cordon_capable_cluster`` with 4 brokers and 2 log dirs each, no racks; its topics are the
tests' own, on brokers 1-3 only, so broker 4 starts empty (a broker just added). Judged by a second observer: a
confluent-kafka client of the test's own (the replicas), the brokers' directories on disk (which replicas broker 4
holds), and the healing ledger's files (the outcomes, their reasons).

* the empty broker: one run gives broker 4 its share of every topic (``add-brokers``), each partition keeping its
  replication factor; the same kind of incident again, once broker 4 holds replicas, is a no-op that says why;
* a log dir below the incident's threshold, and a cluster within the imbalance band: each run records ``stale``
  with the reason and moves nothing.

The examples' other paths are the drain's (test_self_healing, test_stack_healing) or need what a sandbox cannot give
without editing the example: a full log dir is refused by the remove-disks plan's ``disk_cap`` when every dir shares
the host's volume, and an imbalance acts only inside its weekly window (unit tests on the fake cover both).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from dagrun import copy_migrated_db, run_dag_file
from kafka_helpers import cordon_capable_cluster, make_topic
from observers import broker_dirs, replicas_by_dir

from airflow_kafka_reassign.core.healing.incident import Incident, LogDirRef
from airflow_kafka_reassign.sandbox import Sandbox

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
CLUSTER = "kafka_default"
NEW = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with cordon_capable_cluster(tmp_path_factory.mktemp("healing-examples"), brokers=4, log_dirs=2) as sandbox:
        yield sandbox


@pytest.fixture
def home(cluster: Sandbox, tmp_path: Path, migrated_airflow_db: Path) -> dict[str, str]:
    """An Airflow home whose ``kafka_default`` connection is this module's cluster; the healing ledger in its
    ``AKR_OUTPUT_DIR`` (no Variable ``akr_plan_storage``: one machine)."""
    root = tmp_path / "airflow"
    (root / "dags").mkdir(parents=True)
    copy_migrated_db(migrated_airflow_db, root)
    return {**os.environ, "AIRFLOW_HOME": str(root), "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AKR_OUTPUT_DIR": str(root / "kafka_reassign"),
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": cluster.client_config()})}


def install(home: dict[str, str], name: str) -> Path:
    dag_file = Path(home["AIRFLOW__CORE__DAGS_FOLDER"]) / name
    shutil.copyfile(EXAMPLES / name, dag_file)
    return dag_file


def incident(kind: str, **subject) -> Incident:
    """An incident as the watch fires it: first seen ten minutes ago (its dwell), last seen now; a new id each time."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    first = now - timedelta(minutes=10, seconds=secrets.randbelow(3600))
    return Incident.of(kind, cluster=CLUSTER, first_seen=first, last_seen=now, **subject)


def outcomes(home: dict[str, str], incident_id: str) -> list[dict]:
    """The healing ledger's outcomes of one incident, read from its files."""
    folder = Path(home["AKR_OUTPUT_DIR"]) / "healing" / CLUSTER / "outcomes"
    found = [json.loads(p.read_text()) for p in sorted(folder.rglob("*.json"))] if folder.is_dir() else []
    return [o for o in found if o["incident_id"] == incident_id]


def replicas(config: dict, topics: list[str]) -> dict[tuple[str, int], list[int]]:
    """Every partition's replicas of ``topics``, by the test's own confluent-kafka client."""
    listed = AdminClient(dict(config)).list_topics(timeout=30).topics
    return {(t, p.id): list(p.replicas) for t in topics for p in listed[t].partitions.values()}


def assert_nothing_done(result: dict, what: str) -> None:
    """A run that decided to do nothing: ``decide`` skipped, and every task after it that changes the cluster."""
    tis = result["tis"]
    assert result["state"] == "success", result["log"][-6000:]
    assert tis["decide"] == "skipped", (what, tis, result["log"][-6000:])
    assert all(tis[t] == "skipped" for t in ("plan", "budget", "approve", "execute")), (what, tis)


def test_the_empty_broker_gets_its_share_once_and_a_stale_incident_says_why(cluster, home):
    config = cluster.client_config()
    base = f"heal-empty-{secrets.token_hex(3)}"
    topics = {f"{base}-a": [[1, 2], [2, 3], [3, 1], [1, 3], [2, 1], [3, 2], [1, 2], [2, 3]],
              f"{base}-b": [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2]]}
    for name, assignment in topics.items():
        make_topic(config, name, assignment, megabytes=0.1)
    names = sorted(topics)
    before = replicas(config, names)
    held = [tp for tp, r in replicas(config, [*AdminClient(dict(config)).list_topics(timeout=30).topics]).items()
            if NEW in r]
    assert not held, f"broker {NEW} is meant to start empty, it holds {held}"
    dag_file = install(home, "kafka_heal_empty_broker.py")
    new = incident("empty_broker", brokers=[NEW])

    result = run_dag_file(home, dag_file, {"incidents": [new.to_payload()]}, plan_in_process=True, unpatched=True)
    assert result["state"] == "success", result["log"][-6000:]
    for task_id in ("decide", "plan", "budget", "approve", "execute", "wait", "restore_cordons", "record"):
        assert result["tis"][task_id] == "success", (task_id, result["tis"], result["log"][-6000:])
    decision = result["xcom"]["decide.return_value"]
    assert (decision["action"], decision["brokers"], decision["incidents"]) == ("scale_out", [NEW], [new.id])
    assert [o["decision"] for o in outcomes(home, new.id)] == ["act", "done"]

    # the test's own client: every topic spread over the four brokers (its share on broker 4: no racks here, so the
    # counts per topic within one), each partition with its replication factor
    after = replicas(config, names)
    assert {tp: len(r) for tp, r in after.items()} == {tp: len(r) for tp, r in before.items()}
    share = {}
    for name in names:
        counts = [sum(b in r for (t, _), r in after.items() if t == name) for b in (1, 2, 3, 4)]
        share[name] = counts
        assert counts[NEW - 1] > 0 and max(counts) - min(counts) <= 1, (name, counts)
    # the disk: broker 4's log dirs hold exactly the replicas the client says it holds
    on_4 = {tp for tp, r in after.items() if NEW in r}
    on_disk = set().union(*replicas_by_dir(broker_dirs(cluster.dir, NEW), names).values())
    assert on_disk == on_4, (on_disk, on_4)
    print(f"\nreplicas per broker (1-4) of each topic after the scale-out: {share}")

    # broker 4 holds replicas now: another empty_broker incident for it is stale, and says why; nothing moves
    late = incident("empty_broker", brokers=[NEW])
    # the runner's execution-API speed-up (dagrun.FAST_EXECUTION_API) here: the first run above is this DAG's run on
    # Airflow as installed, and what this one proves (a stale incident, nothing moved) is the DAG's own decision
    stale = run_dag_file(home, dag_file, {"incidents": [late.to_payload()]}, plan_in_process=True)
    assert_nothing_done(stale, "a stale empty_broker incident")
    [o] = outcomes(home, late.id)
    assert o["decision"] == "stale" and f"broker {NEW} holds {len(on_4)} replica(s) now" in o["reason"], o
    assert replicas(config, names) == after


def test_a_log_dir_below_its_threshold_and_a_balanced_cluster_are_stale_incidents(cluster, home):
    """kafka_heal_log_dir with a ``log_dir_full`` incident whose threshold (the watch's, in its detail) the dir is
    below now, and kafka_heal_imbalance with an ``imbalance`` incident on a cluster within the band: each run records
    ``stale`` with the reason, plans nothing, moves nothing."""
    config = cluster.client_config()
    topic = f"heal-stale-{secrets.token_hex(3)}"
    make_topic(config, topic, [[1, 2], [2, 3], [3, 4], [4, 1]], megabytes=0.1)
    before = replicas(config, [topic])
    path = cluster.log_dirs(2)[1]

    full = incident("log_dir_full", dirs=[LogDirRef(broker=2, path=path)],
                    detail={"threshold": 0.99, "used_ratio": 0.995})
    result = run_dag_file(home, install(home, "kafka_heal_log_dir.py"), {"incidents": [full.to_payload()]},
                          plan_in_process=True, unpatched=True)
    assert_nothing_done(result, "a log dir below its threshold")
    [o] = outcomes(home, full.id)
    assert o["decision"] == "stale" and f"log dir 2:{path} is" in o["reason"] and "full, below 99%" in o["reason"], o

    spread = incident("imbalance", brokers=[4], detail={"band": 0.2, "by": "replicas"})
    result = run_dag_file(home, install(home, "kafka_heal_imbalance.py"), {"incidents": [spread.to_payload()]},
                          plan_in_process=True, unpatched=True)
    assert_nothing_done(result, "a cluster within the band")
    [o] = outcomes(home, spread.id)
    assert o["decision"] == "stale" and "within 20% of the mean" in o["reason"], o
    assert replicas(config, [topic]) == before
