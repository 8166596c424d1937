"""The healing decision on the fake cluster: stale, already handled, the breaker, another writer, a manual cordon,
the window, the budget, dry run and approval per kind; every decision not to act is an outcome on the ledger.

Each guard's test fails when the guard is taken out (checked by hand, the guard's condition replaced by ``False``):
the breaker (test_the_breaker...), the handled check in ``HealingLedger.check`` (test_a_second_event...), another
writer (the two writer tests) and the window (test_an_imbalance...)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_kafka_reassign.core.healing.decide import decide, healing_cordons
from airflow_kafka_reassign.core.healing.incident import Incident, LogDirRef
from airflow_kafka_reassign.core.healing.ledger import HealingLedger
from airflow_kafka_reassign.core.healing.policy import Breaker, Budget, HealingPolicy, KindPolicy, Window
from airflow_kafka_reassign.core.healing.view import cluster_view
from airflow_kafka_reassign.core.records.store import MemoryStore
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica
from airflow_kafka_reassign.testing import FakeClusterAdmin

T = datetime(2026, 12, 2, 7, 0, tzinfo=timezone.utc)
NOW = T + timedelta(minutes=11)


@pytest.fixture
def fake() -> FakeClusterAdmin:
    topics = {"orders": [[1, 2, 5], [2, 3, 4], [3, 5, 1], [4, 5, 2], [1, 4, 3]], "audit": [[5, 1], [2, 4]]}
    return FakeClusterAdmin.build(brokers={1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"}, topics=topics)


@pytest.fixture
def ledger() -> HealingLedger:
    return HealingLedger(MemoryStore())


def down(broker: int, at: datetime = T) -> Incident:
    return Incident.of("broker_down", cluster="kafka_default", brokers=[broker], first_seen=at, last_seen=at)


def run(fake, ledger, incidents, policy=None, run_id="r1", now=NOW, **kwargs):
    view = cluster_view(fake, with_dirs=any(i.dirs for i in incidents))
    return decide(incidents, view, policy or HealingPolicy(), ledger, run_id=run_id, now=now,
                  cluster="kafka_default", **kwargs)


def decisions(ledger: HealingLedger) -> list[tuple[str, str]]:
    return [(o.incident_id.split("/")[2], o.decision) for o in ledger.outcomes()]


def test_a_broker_down_is_drained_uncordoned_since_its_config_cannot_be_written(fake, ledger):
    fake.down.add(5)
    decision = run(fake, ledger, [down(5)])
    assert (decision.action, decision.brokers, decision.cordon) == ("drain", (5,), False)
    assert "cannot be written" in decision.notes[0] and "never unregistered" in decision.notes[0]
    assert decisions(ledger) == [("b5", "act")]
    assert decision.xcom()["incidents"] == [down(5).id]


def test_a_stale_incident_is_a_no_op_that_says_why(fake, ledger):
    decision = run(fake, ledger, [down(5)])  # broker 5 is up again
    assert decision.action == "none"
    [o] = ledger.outcomes()
    assert o.decision == "stale" and "broker 5 is back" in o.reason
    fake.down.add(6)  # a broker that holds nothing is not drained either
    empty = Incident.of("broker_down", cluster="kafka_default", brokers=[6], first_seen=T, last_seen=T)
    assert run(fake, ledger, [empty]).action == "none"


def test_a_second_event_for_the_same_incident_does_nothing_even_batched(fake, ledger):
    fake.down.add(5)
    assert run(fake, ledger, [down(5), down(5)], run_id="r1").action == "drain"
    again = run(fake, ledger, [down(5)], run_id="r2")  # the triggerer restarted and fired it again
    assert again.action == "none"
    assert decisions(ledger) == [("b5", "act"), ("b5", "handled")]
    assert "run r1 is healing it" in ledger.outcomes()[-1].reason
    # the same run asking again (a retried task) goes on
    assert run(fake, ledger, [down(5)], run_id="r1").action == "drain"
    # a run that failed may be taken up again by the next event, within runs_per_incident
    ledger.finish([down(5).id], "r1", "failed")
    assert run(fake, ledger, [down(5)], run_id="r3").action == "drain"
    ledger.finish([down(5).id], "r3", "failed")
    budget = run(fake, ledger, [down(5)], run_id="r4")
    assert budget.action == "none" and ledger.outcomes()[-1].decision == "budget"


def test_the_breaker_alerts_on_a_mass_failure_and_moves_nothing(fake, ledger):
    fake.down.update({4, 5})
    decision = run(fake, ledger, [down(4), down(5)], HealingPolicy(breaker=Breaker(max_brokers=1, max_share=1)))
    assert decision.action == "none"
    assert [d for _, d in decisions(ledger)] == ["breaker", "breaker"]
    assert "2 of 5 brokers are down" in ledger.outcomes()[0].reason
    assert ledger.claims() == []  # nothing claimed: once the outage is over, a new event may heal
    # the share counts too
    fake.down.discard(4)
    assert run(fake, ledger, [down(5)], HealingPolicy(breaker=Breaker(max_brokers=3, max_share=0.1))).action == "none"
    assert ledger.outcomes()[-1].decision == "breaker"


def test_another_writer_makes_the_run_wait_then_it_acts_on_what_is_still_needed(fake, ledger):
    fake.down.add(5)
    fake.alter_reassignments({TopicPartition("audit", 1): [2, 3]})  # a manual run's move, in flight
    decision = run(fake, ledger, [down(5)])
    assert decision.action == "none" and decision.wait and "1 reassignment(s) in flight" in decision.wait
    assert ledger.outcomes() == [] and ledger.claims() == []  # nothing recorded or claimed while waiting
    fake.complete()
    assert run(fake, ledger, [down(5)], waiting_since=NOW - timedelta(minutes=20)).action == "drain"


def test_a_manual_drain_awaiting_approval_is_seen_from_its_cordon_and_the_wait_is_bounded(fake, ledger):
    fake.down.add(5)
    fake.set_cordons({3: "*"})  # a manual decommission of broker 3 cordoned it, its approval pending
    decision = run(fake, ledger, [down(5)])
    assert decision.wait and "broker(s) [3] are cordoned by someone else" in decision.wait
    late = run(fake, ledger, [down(5)], waiting_since=NOW - timedelta(hours=7))
    assert late.action == "none" and ledger.outcomes()[-1].decision == "gave_up"
    # a cordoned broker that is already empty (a finished decommission, not unregistered yet) is no writer
    fresh = HealingLedger(MemoryStore())
    fake.replicas = {tp: tuple(b for b in r if b != 3) or r for tp, r in fake.replicas.items()}
    assert run(fake, fresh, [down(5)]).action == "drain"


def test_healing_never_touches_what_a_manual_run_cordoned(fake, ledger):
    from airflow_kafka_reassign.core.vocabulary.models import Broker

    fake.brokers.append(Broker(id=6, rack="r3"))
    fake.broker_configs[6] = {}
    fake.broker_dirs[6] = ["/kafka/6/data-1"]
    fake.set_cordons({6: "*"})  # someone parked the new broker 6: it must not get a share
    new = Incident.of("empty_broker", cluster="kafka_default", brokers=[6], first_seen=T, last_seen=T)
    assert run(fake, ledger, [new]).action == "none"
    assert decisions(ledger) == [("b6", "manual")]
    fake.set_cordons({6: None})
    assert run(fake, ledger, [new], run_id="r2").action == "scale_out"


def test_an_imbalance_is_rebalanced_only_inside_the_window(fake, ledger):
    fake.create_topic("big", [[1, 2, 3]] * 30)  # brokers 4 and 5 far below the mean
    imbalance = Incident.of("imbalance", cluster="kafka_default", brokers=[4, 5], first_seen=T, last_seen=T,
                            detail={"band": 0.2, "by": "replicas"})
    window = Window(cron="0 2 * * 6", duration_s=4 * 3600)  # Saturdays 02:00-06:00 UTC
    policy = HealingPolicy(window=window, kinds={"imbalance": KindPolicy(mode="act")}, max_wait_s=3600)
    wednesday = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
    assert run(fake, ledger, [imbalance], policy, now=wednesday).action == "none"
    [o] = ledger.outcomes()
    assert o.decision == "window" and "2026-12-05T02:00" in o.reason
    friday_night = datetime(2026, 12, 5, 1, 30, tzinfo=timezone.utc)  # opens in 30 minutes: wait for it
    assert "opens at 2026-12-05T02:00" in run(fake, ledger, [imbalance], policy, now=friday_night).wait
    saturday = datetime(2026, 12, 5, 3, 0, tzinfo=timezone.utc)
    assert run(fake, ledger, [imbalance], policy, now=saturday, run_id="r2").action == "rebalance"
    # within the band it is stale
    balanced = HealingLedger(MemoryStore())
    wide = imbalance.model_copy(update={"detail": {"band": 5.0, "by": "replicas"}})
    assert run(fake, balanced, [wide], policy, now=saturday).action == "none"
    assert balanced.outcomes()[0].decision == "stale"


def test_the_budget_of_runs_per_day_and_of_bytes(fake, ledger):
    fake.down.add(5)
    policy = HealingPolicy(budget=Budget(runs_per_day=1, bytes_per_incident=1000, bytes_per_day=1500))
    assert run(fake, ledger, [down(5)], policy, run_id="r1").action == "drain"
    other = Incident.of("broker_down", cluster="kafka_default", brokers=[5], first_seen=T + timedelta(hours=1),
                        last_seen=T + timedelta(hours=1))
    assert run(fake, ledger, [other], policy, run_id="r2").action == "none"
    assert ledger.outcomes()[-1].decision == "budget" and "runs_per_day=1" in ledger.outcomes()[-1].reason
    # bytes: the plan's are charged to the incident and the day; above either, the run may not go on
    assert ledger.charge_bytes([down(5).id], "r1", 1200, policy.budget, NOW) is not None
    assert ledger.charge_bytes([down(5).id], "r1", 900, policy.budget, NOW) is None
    assert ledger.charge_bytes([down(5).id], "r1", 900, policy.budget, NOW) is None  # a retry charges once
    tomorrow = NOW + timedelta(days=1)
    assert run(fake, ledger, [other], policy, run_id="r2", now=tomorrow).action == "drain"
    assert "bytes_per_incident" in ledger.charge_bytes([other.id], "r2", 1001, policy.budget, tomorrow)


def test_dry_run_and_approval_per_kind_the_strictest_wins(fake, ledger):
    fake.down.update({5})
    policy = HealingPolicy(kinds={"broker_down": KindPolicy(mode="approve", approval_timeout_s=60, on_timeout="reject")})
    decision = run(fake, ledger, [down(5)], policy)
    assert decision.require_approval and not decision.dry_run
    assert (decision.approval_timeout_s, decision.on_timeout) == (60, "reject")
    dry = run(fake, HealingLedger(MemoryStore()), [down(5)], HealingPolicy(kinds={"broker_down": KindPolicy(mode="dry_run")}))
    assert dry.dry_run and dry.action == "drain"


def test_log_dirs_full_are_emptied_offline_ones_alert(fake, ledger):
    fake.broker_dirs[2].append("/kafka/2/data-2")
    fake.dir_total["/kafka/2/data-1"] = 1000
    fake.sizes = {TopicPartition("orders", 0): {2: 900}}
    full = Incident.of("log_dir_full", cluster="kafka_default", dirs=[LogDirRef(broker=2, path="/kafka/2/data-1")],
                       first_seen=T, last_seen=T, detail={"threshold": 0.85})
    decision = run(fake, ledger, [full], HealingPolicy(kinds={"log_dir_full": KindPolicy(mode="act")}))
    assert (decision.action, decision.log_dirs) == ("remove_disks", ("2:/kafka/2/data-1",))
    fake.offline_dirs.add("/kafka/2/data-2")
    offline = Incident.of("log_dir_offline", cluster="kafka_default", dirs=[LogDirRef(broker=2, path="/kafka/2/data-2")],
                          first_seen=T, last_seen=T)
    assert run(fake, ledger, [offline]).action == "none"
    assert ledger.outcomes()[-1].decision == "alert" and "replace the disk" in ledger.outcomes()[-1].reason


def test_a_cordon_set_after_healing_drained_the_broker_is_someone_elses_and_waited_for(fake, ledger):
    """Healing drained broker 5 (down: no cordon) and finished; broker 5 came back and holds replicas again (the
    scale-out gave it its share). A person now cordons it for a manual decommission: that cordon is not healing's,
    so a later healing run waits for that drain instead of running beside it (cruise-control #724)."""
    fake.down.add(5)
    assert run(fake, ledger, [down(5)], run_id="r1").action == "drain"
    ledger.finish([down(5).id], "r1", "done")
    fake.down.discard(5)
    fake.set_cordons({5: "*"})  # a manual decommission of broker 5, its approval pending
    fake.down.add(3)
    decision = run(fake, ledger, [down(3)], run_id="r2")
    assert decision.action == "none" and decision.wait and "broker(s) [5] are cordoned by someone else" in decision.wait


def test_the_cordon_a_finished_disk_removal_left_is_healings_until_it_is_lifted_and_set_again(fake, ledger):
    """Healing empties log dir 2:/kafka/2/data-1 and leaves it cordoned: that cordon stays healing's (no wait, no
    "someone else"). A person lifts it, the dir fills again, and the person cordons it again (the same value) for a
    manual disk removal: that one is someone else's, and a healing run waits for it."""
    data1, data2 = "/kafka/2/data-1", "/kafka/2/data-2"
    fake.broker_dirs[2].append(data2)
    fake.dir_total[data1] = 1000
    fake.sizes = {TopicPartition("orders", 0): {2: 900}}
    full = Incident.of("log_dir_full", cluster="kafka_default", dirs=[LogDirRef(broker=2, path=data1)],
                       first_seen=T, last_seen=T, detail={"threshold": 0.85})
    decision = run(fake, ledger, [full], HealingPolicy(kinds={"log_dir_full": KindPolicy(mode="act")}), run_id="r1")
    assert (decision.action, decision.cordons) == ("remove_disks", {2: data1})
    fake.set_cordons(decision.cordons)  # what the plan task cordons; then the moves empty the dir
    on_2 = [TopicPartitionReplica(tp.topic, tp.partition, 2) for tp, r in fake.replicas.items() if 2 in r]
    fake.replica_dirs.update(dict.fromkeys(on_2, data2))
    ledger.finish([full.id], "r1", "done", cordons=decision.xcom()["cordons"])  # as the record task passes them
    assert ledger.read_claim(full.id).cordons_left == {2: data1}
    assert healing_cordons(ledger.claims(), cluster_view(fake, with_dirs=True)) == (frozenset(), {(2, data1)})
    fake.down.add(5)
    assert run(fake, ledger, [down(5)], run_id="r2").action == "drain"  # healing does not wait for itself
    assert decisions(ledger)[-1] == ("b5", "act")
    ledger.finish([down(5).id], "r2", "done", cordons=None)
    assert ledger.read_claim(down(5).id).cordons_left == {}  # a broker drained while down: nothing cordoned
    fake.down.discard(5)

    fake.set_cordons({2: None})  # the disk replaced, the cordon lifted, the dir fills again
    fake.replica_dirs.update(dict.fromkeys(on_2, data1))
    assert healing_cordons(ledger.claims(), cluster_view(fake, with_dirs=True)) == (frozenset(), frozenset())
    fake.set_cordons({2: data1})  # a person starts a manual removal of the same dir: the same value again
    assert healing_cordons(ledger.claims(), cluster_view(fake, with_dirs=True)) == (frozenset(), frozenset())
    fake.down.add(3)
    wait = run(fake, ledger, [down(3)], run_id="r3").wait
    assert wait and f"log dir(s) ['2:{data1}'] are cordoned by someone else" in wait
    # a cordon that differs from the one healing left (the whole broker, where healing left one dir) is someone else's
    fake.set_cordons({2: "*"})
    assert "broker(s) [2] are cordoned by someone else" in run(fake, ledger, [down(3)], run_id="r3").wait


def test_a_claim_written_before_cordons_were_kept_loads_and_owns_no_cordon(fake, ledger):
    """A claim on the ledger from before ``ClaimRun.cordons`` (a drain of broker 5 that healing finished) loads; it
    names no cordon, so a cordon on broker 5 is someone else's (fail closed: a manual run always wins)."""
    old = {"incident": json.loads(down(5).model_dump_json()),
           "runs": [{"run_id": "r1", "started_at": T.isoformat(), "bytes": 1200, "status": "done"}]}
    ledger.store.write(ledger.claim_name(down(5).id), json.dumps(old).encode())
    claim = ledger.read_claim(down(5).id)
    assert claim is not None and claim.status == "done" and claim.runs[0].cordons == {}
    fake.set_cordons({5: "*"})  # broker 5 holds replicas (it is back); a person cordons it
    fake.down.add(3)
    decision = run(fake, ledger, [down(3)], run_id="r2")
    assert decision.wait and "broker(s) [5] are cordoned by someone else" in decision.wait
    # the same incident again is still handled: the old claim keeps its meaning there
    assert ledger.check(down(5), "r3", HealingPolicy().budget, NOW).decision == "handled"
