"""The ``kafka_rack_maintenance`` example DAG, unchanged, on Airflow as installed: leadership off rack r1 during the
maintenance step, leadership given back.

Judged by a client of the test's own (confluent-kafka's metadata), never the project's adapter: while the DAG holds
its maintenance step, no partition of the cluster is led from r1 (brokers 1 and 4) and the replica order puts an
off-rack replica first; after the restore every partition has its original replica order and its original leader,
and every acknowledged record of the acks=all traffic that ran throughout is read back.

(Stopping both r1 brokers during the hold, tried in CI on 2026-12-02, left broker 1's fetchers with two partitions
"marked as failed" after its restart and the leaders not back within 120 s of a restore that reported success: under
investigation, see the issue note; test_health_gate and test_living_cluster restart brokers under runs.)
"""

from __future__ import annotations

import concurrent.futures
import shutil
from pathlib import Path

from confluent_kafka import ElectionType
from confluent_kafka.admin import AdminClient
from dagrun import run_dag_file
from kafka_helpers import Traffic, make_topic

from airflow_kafka_reassign.sandbox import wait_until

EXAMPLE = Path(__file__).resolve().parents[2] / "example_dags" / "kafka_rack_maintenance.py"
RACK, RACK_BROKERS = "r1", (1, 4)  # the sandbox puts broker i on r{(i - 1) % 3 + 1}
#: every partition led from r1 before, with in-sync replicas on the other racks
ASSIGNMENT = [[1, 2, 3], [4, 5, 3], [1, 3, 5], [4, 2, 3], [2, 1, 3], [3, 4, 5]]
HOLD_S = 15  # the DAG's placeholder for the real work: the test reads the leaders in it


def cluster_view(config: dict) -> dict[tuple[str, int], tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """Every partition of the cluster: (leader, replicas in order, ISR), by the test's own client."""
    topics = AdminClient(dict(config)).list_topics(timeout=30).topics
    return {(t, p): (m.leader, tuple(m.replicas), tuple(sorted(m.isrs)))
            for t, meta in topics.items() for p, m in meta.partitions.items()}


def preferred_leaders_everywhere(config: dict) -> dict[tuple[str, int], tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """Every partition in sync and led by its preferred replica, by the test's own client (it elects them first).

    The restore elects each recorded partition's preferred replica: a partition that an earlier test on the shared
    sandbox left led by another replica (a reorder-only reassignment keeps its leader) would be led differently after
    the run, by Kafka's own rule, not by a mistake of the DAG. A CI run on 2026-12-03 timed out on that."""
    admin = AdminClient(dict(config))
    # per-partition errors (ELECTION_NOT_NEEDED, a replica not in sync yet) are judged by the wait below
    admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout=60)
    return wait_until(lambda: (v := cluster_view(config)) and all(
        set(r) == set(isr) and leader == r[0] for leader, r, isr in v.values()) and v,
        "every partition fully in sync and led by its preferred replica", timeout=60)


def test_rack_maintenance_moves_leadership_off_a_rack_and_gives_it_back(
        sandbox, airflow_home, unique_topic, tmp_path):
    config = sandbox.client_config()
    make_topic(config, unique_topic, ASSIGNMENT, megabytes=0.2)
    before = preferred_leaders_everywhere(config)
    stuck = [tp for tp, (_, _, isr) in before.items() if set(isr) <= set(RACK_BROKERS)]
    assert not stuck, f"partitions with no in-sync replica off {RACK} (the evacuation would stop on them): {stuck}"
    assert {before[(unique_topic, p)][0] for p in range(len(ASSIGNMENT))} >= {1, 4}  # r1 leads some
    dag_file = Path(airflow_home["AIRFLOW__CORE__DAGS_FOLDER"]) / EXAMPLE.name
    shutil.copyfile(EXAMPLE, dag_file)
    log_file = tmp_path / "run.log"

    with Traffic(config, unique_topic, partitions=len(ASSIGNMENT)) as traffic, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        run = pool.submit(run_dag_file, airflow_home, dag_file,
                          {"racks": [RACK], "hold_seconds": HOLD_S, "restore_timeout_s": 600},
                          log_file=log_file, unpatched=True)
        # bounded by the run's own timeout (run_dag_file: 600 s), not less: on a machine at a load of 40 the run
        # reached its maintenance step after 320 s (a clean clone of cbfdb09 with two helpers' clusters beside it)
        wait_until(lambda: run.done() or (log_file.exists() and "leadership is off racks" in log_file.read_text()),
                   "the DAG's maintenance step", timeout=600)
        assert not run.done(), run.result()["log"][-4000:]
        during = cluster_view(config)
        led_from_rack = {tp: leader for tp, (leader, _, _) in during.items() if leader in RACK_BROKERS}
        assert led_from_rack == {}, led_from_rack
        first_on_rack = {tp: r for tp, (_, r, _) in during.items() if r[0] in RACK_BROKERS and tp in before
                         and not set(before[tp][2]) <= set(RACK_BROKERS)}
        assert first_on_rack == {}, first_on_rack
        result = run.result()
    traffic.check()

    assert result["state"] == "success", result["log"][-6000:]
    assert result["tis"] == {"evacuate": "success", "maintenance": "success", "restore": "success"}, result["tis"]
    evacuated = result["xcom"]["evacuate.return_value"]
    assert sorted(evacuated["brokers"]) == list(RACK_BROKERS) and evacuated["reordered"] >= 4  # the topic's four led from r1
    def changed() -> dict:
        now = cluster_view(config)
        return {tp: (before[tp][:2], now[tp][:2]) for tp in before if tp in now and now[tp][:2] != before[tp][:2]}
    try:
        wait_until(lambda: not changed(), "every leader and order as before", timeout=120)
    except TimeoutError as e:
        raise AssertionError(f"{e}: (leader, order) before -> now: {changed()}") from None
    after = cluster_view(config)
    assert {tp: v[:2] for tp, v in after.items() if tp in before} == {tp: v[:2] for tp, v in before.items()}
