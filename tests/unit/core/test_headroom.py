"""The headroom throttle (issue 27, item 3): per-broker rates from each broker's capacity less the client traffic it
carries, measured from replica sizes between steps; on the fake cluster through the one execution session."""

from __future__ import annotations

import json
import logging

import pytest
from execution_helpers import fake, mv, plan_of, tp

from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession
from airflow_kafka_reassign.core.execution.throttle import (
    FOLLOWER_RATE,
    LEADER_RATE,
    THROTTLE_BACKUP_FILE,
    desired_throttles,
)
from airflow_kafka_reassign.core.guards.headroom import (
    BrokerRates,
    HeadroomPolicy,
    HeadroomWatch,
    NetworkCapacity,
    measure_traffic,
)
from airflow_kafka_reassign.core.records.journal import read_journal
from airflow_kafka_reassign.core.vocabulary.models import PartitionState
from airflow_kafka_reassign.core.vocabulary.ports import ThrottleBackup
from airflow_kafka_reassign.exceptions import ConfigurationError

MB = 1_000_000


def part(topic: str, p: int, replicas: tuple[int, ...], leader: int | None = None) -> PartitionState:
    return PartitionState(topic=topic, partition=p, replicas=replicas, isr=replicas,
                          leader=replicas[0] if leader is None else leader)


# -- measuring the traffic ------------------------------------------------------------------------


def test_traffic_counts_leaders_followers_and_consumers_but_not_our_adding_replicas():
    parts = [part("t", 0, (1, 2, 4)), part("u", 0, (2, 3))]
    before = {tp("t", 0): {1: 0, 2: 0, 4: 0}, tp("u", 0): {2: 0, 3: 0}}
    # 10 s: t-0 takes 20 MB on its leader 1 and follower 2; 4 is our adding replica (its copy is ours);
    # u-0 takes 5 MB (leader 2, follower 3)
    after = {tp("t", 0): {1: 20 * MB, 2: 20 * MB, 4: 50 * MB}, tp("u", 0): {2: 5 * MB, 3: 5 * MB}}
    t = measure_traffic(before, after, 10.0, parts, {tp("t", 0): (4,)}, consumer_read_ratio=1.0)
    assert t.inbound == {1: 2 * MB, 2: 2.5 * MB, 3: 0.5 * MB}  # 4's copy is not client traffic
    # leader 1 sends t-0 to follower 2 (2 MB/s) and to consumers (1.0 x 2 MB/s); leader 2 sends u-0 to 3 and out
    assert t.outbound == {1: 4 * MB, 2: 1 * MB}
    no_consumers = measure_traffic(before, after, 10.0, parts, {tp("t", 0): (4,)}, consumer_read_ratio=0.0)
    assert no_consumers.outbound == {1: 2 * MB, 2: 0.5 * MB}


def test_a_catching_up_replica_that_is_not_ours_counts_against_the_headroom():
    # broker 3 restarted: its replica of r-0 catches up at 8 MB/s from leader 1 (recovery traffic, not ours)
    p = PartitionState(topic="r", partition=0, replicas=(1, 3), isr=(1,), leader=1)
    t = measure_traffic({tp("r", 0): {1: 100 * MB, 3: 20 * MB}}, {tp("r", 0): {1: 100 * MB, 3: 100 * MB}}, 10.0,
                        [p], {})
    assert t.inbound == {3: 8 * MB}
    assert t.outbound == {1: 8 * MB}


def test_a_shrinking_replica_counts_zero_and_a_new_one_is_not_measured():
    p = part("t", 0, (1, 2, 3))
    t = measure_traffic({tp("t", 0): {1: 9 * MB, 2: 9 * MB}}, {tp("t", 0): {1: 1 * MB, 2: 1 * MB, 3: 5 * MB}}, 1.0,
                        [p], {})
    assert t.inbound == {} and t.outbound == {}


# -- the rates --------------------------------------------------------------------------------------


def test_rates_are_capacity_less_traffic_with_the_margin_never_above_the_cap_nor_below_the_floor():
    policy = HeadroomPolicy.parse({"default": "100MB", "2": {"network_in": "50MB", "network_out": "200MB"}},
                                  margin=0.2, floor="1MB")
    # 80 MB/s usable; 30 MB/s in, 10 out: follower 50, leader 70
    assert policy.target(1, None, 30 * MB, 10 * MB, None)[:2] == (70 * MB, 50 * MB)
    # the cap (throttle_bytes_per_sec) wins
    assert policy.target(1, None, 30 * MB, 10 * MB, 40 * MB)[:2] == (40 * MB, 40 * MB)
    # broker 2: 40 MB/s usable in, 160 out
    assert policy.target(2, None, 0, 0, None)[:2] == (160 * MB, 40 * MB)
    # no headroom: the floor, and said so
    leader, follower, floored = policy.target(1, None, 95 * MB, 0, None)
    assert (follower, leader, floored) == (1 * MB, 80 * MB, True)
    # a cap below the floor: the cap (never above it)
    assert policy.target(1, None, 95 * MB, 95 * MB, 500_000)[:2] == (500_000, 500_000)


def test_a_rate_moves_only_past_the_hysteresis_or_when_the_cap_falls_below_it():
    policy = HeadroomPolicy.parse(100 * MB, margin=0.2, floor=MB)
    watch = HeadroomWatch(policy)
    p = part("t", 0, (1, 2))
    sizes = {tp("t", 0): {1: 0, 2: 0}}

    def grow(at: float, mb_per_s: float, cap: int | None = None) -> list[str]:
        nonlocal sizes
        sizes = {tp("t", 0): {b: n + int(mb_per_s * MB) for b, n in sizes[tp("t", 0)].items()}}
        return watch.update(at, sizes, [p], {}, {1: None, 2: None}, cap)

    assert watch.update(0.0, sizes, [p], {}, {1: None, 2: None}, None) == []  # a baseline only
    assert watch.rates(None) == BrokerRates(default=MB)  # before the first measurement: the floor
    changes = grow(1.0, 10)  # 10 MB/s into both brokers
    assert len(changes) == 2 and watch.held[2] == (80 * MB, 70 * MB)  # 2 only takes in; 1 also sends 10 + 10
    assert watch.held[1] == (60 * MB, 70 * MB)
    assert grow(2.0, 12) == []  # 2 MB/s more moves the rates by less than 10%: no config write
    assert watch.held[1] == (60 * MB, 70 * MB)
    changes = grow(3.0, 30)
    assert changes and watch.held[1] == (20 * MB, 50 * MB) and "broker 1: leader 60000000 -> 20000000" in changes[0]
    # the cap fell (adaptive limits) below a held rate: rewritten at once, whatever the hysteresis
    assert grow(4.0, 30, cap=45 * MB) and watch.held[2] == (45 * MB, 45 * MB)
    assert watch.rates(10 * MB).of(1) == (10 * MB, 10 * MB)  # never above the step's cap


# -- bad input fails before anything is set ------------------------------------------------------


@pytest.mark.parametrize(("settings", "named"), [
    ({"throttle_headroom": -5}, "not a positive number"),
    ({"throttle_headroom": "100 parsecs"}, "throttle_headroom"),
    ({"throttle_headroom": {"x": "1MB"}}, "not a broker id"),
    ({"throttle_headroom": "100MB", "headroom_margin": 1.0}, "headroom_margin must be a share in [0, 1)"),
    ({"throttle_headroom": "100MB", "headroom_margin": -0.1}, "headroom_margin"),
    ({"throttle_headroom": "100MB", "headroom_floor": 0}, "headroom_floor must be a positive"),
    ({"throttle_headroom": "100MB", "consumer_read_ratio": -1}, "consumer_read_ratio must be"),
    ({"throttle_headroom": {"default": {"network_in": "-3MB"}}}, "not a positive number"),
])
def test_bad_headroom_settings_are_named(settings, named):
    with pytest.raises(ConfigurationError, match="invalid execution settings") as e:
        ExecutionConfig.parse(**settings)
    assert named in str(e.value)


def test_a_broker_without_capacity_refuses_the_run_before_any_throttle_is_set(tmp_path):
    f = fake(t=[[1, 2]])
    plan = plan_of(mv("t", 0, (1, 2), (1, 3)))
    config = ExecutionConfig(throttle_headroom={"1": "100MB", "2": "100MB"}, throttle_bytes_per_sec=50 * MB)
    session = ExecutionSession(f, plan, config, state_dir=tmp_path, clock_s=lambda: 0.0)
    with pytest.raises(ConfigurationError, match=r"no network capacity for broker\(s\) \[3\].*nothing was changed"):
        session.tick()
    assert all(not c for c in f.broker_configs.values()) and not f.inflight
    assert not (tmp_path / THROTTLE_BACKUP_FILE).exists()


def test_a_capacity_document_resolves_by_broker_then_rack_then_default(tmp_path):
    doc = {"default": {"disk": "1TB", "network_in": "100MB"},
           "racks": {"r2": {"disk": "1TB", "network_in": "50MB", "network_out": "60MB"}},
           "brokers": {"3": {"disk": "1TB", "network_out": "20MB"}}}
    path = tmp_path / "capacity.json"
    path.write_text(json.dumps(doc))
    policy = HeadroomPolicy.parse(str(path))
    assert policy is not None
    caps = {b: policy.capacity(b, rack) for b, rack in {1: "r1", 2: "r2", 3: "r3"}.items()}
    assert [(c.network_in, c.network_out) for c in caps.values() if c] == [
        (100 * MB, 100 * MB), (50 * MB, 60 * MB), (20 * MB, 20 * MB)]


# -- the single-rate path is as before ------------------------------------------------------------


def test_one_rate_is_unchanged_and_broker_rates_set_each_brokers_own():
    backup = ThrottleBackup(brokers={b: {LEADER_RATE: None, FOLLOWER_RATE: None} for b in (1, 2, 3, 9)})
    moving = [mv("t", 0, (1, 2), (1, 3))]
    brokers, _ = desired_throttles(backup, moving, 5000)
    assert brokers == {1: {LEADER_RATE: "5000", FOLLOWER_RATE: "5000"}, 2: {LEADER_RATE: "5000", FOLLOWER_RATE: "5000"},
                       3: {LEADER_RATE: "5000", FOLLOWER_RATE: "5000"}, 9: {LEADER_RATE: None, FOLLOWER_RATE: None}}
    brokers, _ = desired_throttles(backup, moving, BrokerRates(rates={1: (700, 800), 3: (10, 20)}, default=55))
    assert brokers == {1: {LEADER_RATE: "700", FOLLOWER_RATE: "800"}, 2: {LEADER_RATE: "55", FOLLOWER_RATE: "55"},
                       3: {LEADER_RATE: "10", FOLLOWER_RATE: "20"}, 9: {LEADER_RATE: None, FOLLOWER_RATE: None}}


def test_without_headroom_the_options_carry_one_rate():
    options = ExecutionConfig(throttle_bytes_per_sec=5000).options()
    assert options.throttle_headroom is None and options.replication_rate == 5000


# -- a run on the fake --------------------------------------------------------------------------


def test_a_run_under_headroom_sets_per_broker_rates_from_traffic_and_restores_them_exactly(tmp_path, caplog):
    # hot-0 is led by broker 1 and takes 30 MB/s of producer writes (replicated to 2); the plan moves cold
    # partitions between brokers 1..4
    f = fake(hot=[[1, 2]], cold=[[1, 2], [2, 3], [3, 4]])
    f.broker_configs[1][LEADER_RATE] = "999"  # set by someone before: it must come back
    before = json.dumps(f.broker_configs, sort_keys=True), json.dumps(f.topic_configs, sort_keys=True)
    f.sizes = {tp("hot", 0): {1: 0, 2: 0}, tp("cold", 0): {1: 5 * MB, 2: 5 * MB},
               tp("cold", 1): {2: 5 * MB, 3: 5 * MB}, tp("cold", 2): {3: 5 * MB, 4: 5 * MB}}
    plan = plan_of(mv("cold", 0, (1, 2), (1, 4)), mv("cold", 1, (2, 3), (2, 4)), mv("cold", 2, (3, 4), (3, 1)))
    now = [0.0]
    config = ExecutionConfig(throttle_headroom="100MB", headroom_margin=0.2, headroom_floor="1MB",
                             throttle_bytes_per_sec=70 * MB)
    session = ExecutionSession(f, plan, config, state_dir=tmp_path, clock_s=lambda: now[0], poll_interval_s=1.0)
    caplog.set_level(logging.INFO)

    def tick_after(seconds: float) -> None:
        now[0] += seconds
        for b in (1, 2):
            f.sizes[tp("hot", 0)][b] += int(30 * MB * seconds)
        for (t, p), new in {("cold", 0): 4, ("cold", 1): 4, ("cold", 2): 1}.items():  # our copies: not traffic
            f.sizes[tp(t, p)][new] = f.sizes[tp(t, p)].get(new, 0) + int(40 * MB * seconds)
        session.tick()

    session.tick()  # submits all three at the floor (no measurement yet): a baseline read
    assert {b: f.broker_configs[b].get(FOLLOWER_RATE) for b in (1, 2, 3, 4)} == dict.fromkeys((1, 2, 3, 4), str(MB))
    tick_after(1.0)  # the first measurement moves the rates ...
    tick_after(1.0)  # ... which this step writes
    rates = {b: (int(f.broker_configs[b][LEADER_RATE]), int(f.broker_configs[b][FOLLOWER_RATE])) for b in (1, 2, 3, 4)}
    # broker 1 leads hot-0: 80 - 30 in -> 50 follower; out: 30 to broker 2 + 30 to consumers -> 80 - 60 = 20 leader
    assert rates[1] == (20 * MB, 50 * MB)
    assert rates[2] == (70 * MB, 50 * MB)  # takes 30 in; sends nothing of its own; leader capped at 70
    assert rates[3] == rates[4] == (70 * MB, 70 * MB)  # idle: the cap
    changes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("headroom throttle: broker 1")]
    assert changes and "broker 1: leader 20000000, follower 50000000" in changes[0]
    journaled = [e for e in read_journal(tmp_path) if e.get("event") == "headroom-throttle"]
    assert journaled and journaled[0]["rates"]["1"] == [20 * MB, 50 * MB]

    writes = []
    real = f.set_throttles
    f.set_throttles = lambda b, t: (writes.append(b), real(b, t))[1]  # type: ignore[method-assign]
    tick_after(1.0)  # the same traffic: no rate moves, nothing is written
    assert writes == []

    f.complete()
    tick_after(1.0)
    session.finish()
    assert (json.dumps(f.broker_configs, sort_keys=True), json.dumps(f.topic_configs, sort_keys=True)) == before
    assert not (tmp_path / THROTTLE_BACKUP_FILE).exists()


def test_the_headroom_rates_survive_a_rebuilt_governor(tmp_path):
    config = ExecutionConfig(throttle_headroom="100MB")
    f = fake(t=[[1, 2]])
    session = ExecutionSession(f, plan_of(mv("t", 0, (1, 2), (1, 3))), config, state_dir=tmp_path)
    assert session.governor.headroom is not None
    session.governor.headroom.held[3] = (7 * MB, 8 * MB)
    other = ExecutionSession(f, plan_of(mv("t", 0, (1, 2), (1, 3))), config, state_dir=tmp_path)
    other.governor.restore(json.loads(json.dumps(session.governor.export())))
    assert other.governor.headroom is not None and other.governor.headroom.held == {3: (7 * MB, 8 * MB)}


def test_the_planners_capacity_document_with_network_out_serves_both(tmp_path):
    """One document for the plan (disk, network_in) and the headroom throttle (network_in, network_out)."""
    from airflow_kafka_reassign.core.vocabulary.capacity import load_capacity

    doc = tmp_path / "capacity.yaml"
    doc.write_text("default: {disk: 2TiB, network_in: 100MiB, network_out: 200MiB}\n"
                   "brokers: {'3': {disk: 1TiB, network_in: 50MiB}}\n")
    planner = load_capacity(str(doc))
    assert planner.default is not None and planner.default.network_out == 200 * 2**20
    policy = HeadroomPolicy.parse(str(doc))
    assert policy is not None
    assert policy.capacity(1) == NetworkCapacity(100 * 2**20, 200 * 2**20)
    assert policy.capacity(3) == NetworkCapacity(50 * 2**20, 50 * 2**20)  # one direction given: the other equal
    with pytest.raises(ConfigurationError, match="network_out capacity"):
        load_capacity('{"default": {"disk": "1TiB", "network_out": 0}}')
