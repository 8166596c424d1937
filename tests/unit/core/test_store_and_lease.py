"""The Store port (LocalStore, MemoryStore) and the plan's lease on top of it."""

from __future__ import annotations

import copy
import threading
from datetime import datetime, timedelta, timezone

import pytest

from airflow_kafka_reassign.core.execution import (
    THROTTLE_BACKUP_FILE,
    ExecutionConfig,
    ExecutionLimits,
    ExecutionOptions,
    run,
)
from airflow_kafka_reassign.core.records.journal import read_journal
from airflow_kafka_reassign.core.records.lease import LEASE_FILE, Lease, LeaseHeldError, LeaseKeeper, LeaseLostError, acquire
from airflow_kafka_reassign.core.records.store import LocalStore, MemoryStore, as_store
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.testing import FakeClusterAdmin


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path):
    return LocalStore(tmp_path / "run") if request.param == "local" else MemoryStore("memory://plans/p/run")


class Clock:
    def __init__(self):
        self.t = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)

    def __call__(self):
        return self.t

    def advance(self, seconds):
        self.t += timedelta(seconds=seconds)


# -- the store ----------------------------------------------------------------------------------------------

def test_read_write_delete_list(store):
    assert store.read("a.json") is None and store.list() == []
    store.write("a.json", b"1")
    store.write("journal/x.json", b"2")
    assert store.read("a.json") == b"1"
    assert store.list() == ["a.json", "journal/x.json"] and store.list("journal") == ["journal/x.json"]
    assert store.child("journal").read("x.json") == b"2"
    store.delete("a.json")
    store.delete("a.json")  # missing: nothing
    assert store.read("a.json") is None


def test_write_if_is_a_compare_and_set(store):
    assert store.write_if("l", b"first", None)
    assert not store.write_if("l", b"second", None)  # exists
    data, version = store.read_versioned("l")
    assert data == b"first"
    store.write("l", b"changed")
    assert not store.write_if("l", b"third", version)  # changed since read
    data, version = store.read_versioned("l")
    assert store.write_if("l", b"third", version) and store.read("l") == b"third"


@pytest.mark.parametrize("name", ["", "/abs", "a/../b", "./a", "a//b"])
def test_bad_names_are_refused(store, name):
    with pytest.raises(ValueError, match="not a relative object name"):
        store.read(name)


def test_local_write_is_atomic_and_leaves_no_temporary(tmp_path):
    s = LocalStore(tmp_path)
    s.write("x/y.json", b"{}")
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["y.json"]
    assert as_store(tmp_path) == s and as_store(s) is s


def test_local_compare_and_set_has_one_winner_among_threads(tmp_path):
    s = LocalStore(tmp_path)
    wins = []
    barrier = threading.Barrier(8)

    def race(i):
        barrier.wait()
        if s.write_if("lease.json", f"{i}".encode(), None):
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and s.read("lease.json") == str(wins[0]).encode()


# -- the lease ----------------------------------------------------------------------------------------------

def test_a_second_run_is_refused_naming_the_holder_and_the_way_out(store):
    clock = Clock()
    acquire(store, holder="dag d / run r1 / task execute", scope="d/r1", ttl_s=300, now=clock)
    with pytest.raises(LeaseHeldError) as e:
        acquire(store, holder="dag d / run r2 / task execute", scope="d/r2", ttl_s=300, now=clock)
    text = str(e.value)
    assert "\n" not in text  # one line in the task's log
    assert "held by DAG run 'r1' (dag d / run r1 / task execute)" in text and f"{store.uri}/{LEASE_FILE}" in text
    assert "until 2026-11-24T12:05:00+00:00 (in 300 s;" in text and "can take over once it expires" in text
    assert "at once with take_over_from='r1' after you have confirmed that run is dead" in text


def test_the_same_run_takes_over_at_once_and_others_after_expiry(store):
    clock = Clock()
    first = acquire(store, holder="try 1", scope="d/r1", ttl_s=300, now=clock)
    retry = acquire(store, holder="try 2", scope="d/r1", ttl_s=300, now=clock)  # a retry on another worker
    assert retry.token != first.token
    clock.advance(299)
    with pytest.raises(LeaseHeldError):
        acquire(store, holder="other", scope="d/r2", ttl_s=300, now=clock)
    clock.advance(1)
    other = acquire(store, holder="other", scope="d/r2", ttl_s=300, now=clock)
    assert Lease.model_validate_json(store.read(LEASE_FILE)).token == other.token


def test_keeper_renews_and_stops_when_taken_over(store):
    clock = Clock()
    keeper = LeaseKeeper.take(store, holder="a", scope="d/r1", ttl_s=90, now=clock)
    keeper.confirm()  # fresh: no write
    clock.advance(31)
    keeper.confirm()  # renewed
    assert keeper.lease.expires_at == clock.t + timedelta(seconds=90)
    clock.advance(91)  # the holder stalled past its expiry: another run takes over
    acquire(store, holder="b", scope="d/r2", ttl_s=90, now=clock)
    with pytest.raises(LeaseLostError, match="taken over by b"):
        keeper.confirm()
    assert not keeper.release()  # not ours any more: left alone
    assert Lease.model_validate_json(store.read(LEASE_FILE)).holder == "b"


def test_a_takeover_by_a_later_try_is_seen_at_the_next_write(store):
    clock = Clock()
    first = LeaseKeeper.take(store, holder="try 1", scope="d/r1", now=clock)
    acquire(store, holder="try 2", scope="d/r1", now=clock)  # a retry while try 1 still runs (a zombie)
    with pytest.raises(LeaseLostError, match="taken over by try 2"):
        first.confirm()  # long before a renewal is due


def test_release_lets_the_next_run_in_at_once(store):
    clock = Clock()
    keeper = LeaseKeeper.take(store, holder="a", scope="d/r1", now=clock)
    assert keeper.release()
    assert acquire(store, holder="b", scope="d/r2", now=clock).holder == "b"


def test_an_unreadable_lease_fails_closed(store):
    store.write(LEASE_FILE, b"not json")
    with pytest.raises(LeaseHeldError, match="not readable.*delete"):
        acquire(store, holder="a", scope="s")


@pytest.mark.parametrize("name", ["r1", "d/r1", " r1 "])
def test_take_over_from_the_dead_run_takes_its_lease_at_once(store, name, caplog):
    clock = Clock()
    dead = LeaseKeeper.take(store, holder="dag d / run r1 / task execute / try 1 on w1 (pid 7)", scope="d/r1",
                            now=clock)
    clock.advance(5)
    new = acquire(store, holder="dag d / run r2 / task execute", scope="d/r2", now=clock, take_over_from=name)
    assert Lease.model_validate_json(store.read(LEASE_FILE)).token == new.token
    assert "took over the plan's lease at once from DAG run 'r1'" in caplog.text
    with pytest.raises(LeaseLostError, match="taken over by dag d / run r2"):
        dead.confirm()  # were it alive after all: it stops at its next write


def test_take_over_from_another_run_than_the_holder_is_refused(store):
    clock = Clock()
    acquire(store, holder="dag d / run r1 / task execute", scope="d/r1", now=clock)
    with pytest.raises(LeaseHeldError) as e:
        acquire(store, holder="dag d / run r3 / task execute", scope="d/r3", now=clock, take_over_from="r2")
    assert str(e.value).startswith("take_over_from='r2' names another run than the holder; ")
    assert "held by DAG run 'r1'" in str(e.value)
    assert Lease.model_validate_json(store.read(LEASE_FILE)).scope == "d/r1"


def test_take_over_from_is_harmless_when_the_lease_is_free_or_ours(store):
    clock = Clock()
    assert acquire(store, holder="a", scope="d/r1", now=clock, take_over_from="r0").scope == "d/r1"  # absent
    assert acquire(store, holder="b", scope="d/r1", now=clock, take_over_from="r0").holder == "b"  # our own run


def test_take_over_from_is_an_execution_setting():
    assert ExecutionConfig.parse(take_over_from="manual__2026-11-24").take_over_from == "manual__2026-11-24"
    assert ExecutionConfig.parse(take_over_from="").take_over_from is None  # an unset Param, rendered
    assert ExecutionConfig.parse(take_over_from="None").take_over_from is None


def test_the_run_that_takes_over_from_a_dead_run_restores_its_throttles_and_submits_nothing_twice():
    """A run dies after its first batch (throttles set, its lease never released); another run takes over with
    ``take_over_from`` and finishes: the throttles as before the dead run, each move submitted once."""
    state = MemoryStore("s3://bucket/plans/p/run")
    fake, plan = plan_and_fake()
    fake.broker_configs[1]["leader.replication.throttled.rate"] = "777"  # someone's own throttle, kept
    before = copy.deepcopy((fake.broker_configs, fake.topic_configs))
    clock = Clock()
    dead = LeaseKeeper.take(state, holder="dag d / run r1 / task execute / try 1", scope="d/r1", now=clock)
    run(fake, plan, ExecutionLimits(max_moves=1), ExecutionOptions(throttle_bytes_per_sec=1000), state_dir=state,
        lease=dead, wait=False, finish_at_end=False, sleep=lambda _: None)
    assert len(fake.inflight) == 1 and (fake.broker_configs, fake.topic_configs) != before  # throttled, then lost
    fake.complete()
    with pytest.raises(LeaseHeldError, match="take_over_from='r1'"):
        LeaseKeeper.take(state, holder="dag d / run r2 / task execute / try 1", scope="d/r2", now=clock)
    keeper = LeaseKeeper.take(state, holder="dag d / run r2 / task execute / try 1", scope="d/r2", now=clock,
                              take_over_from="r1")
    result = run(fake, plan, ExecutionLimits(max_moves=1), ExecutionOptions(throttle_bytes_per_sec=1000),
                 state_dir=state, lease=keeper, sleep=lambda _: fake.complete())
    assert result.status.complete
    assert (fake.broker_configs, fake.topic_configs) == before  # the dead run's throttles restored exactly
    assert state.read(THROTTLE_BACKUP_FILE) is None
    submitted = [m for e in read_journal(state) if e["event"] == "submitted" for m in e["submitted"]]
    assert sorted(submitted) == [["t", 0, [2, 3]], ["t", 1, [2, 3]]]  # once each


# -- the engine on a store -----------------------------------------------------------------------------------

def plan_and_fake():
    fake = FakeClusterAdmin.build(brokers={1: "a", 2: "b", 3: "c"}, topics={"t": [[1, 2], [1, 2]]})
    plan = ReassignmentPlan(moves=tuple(Move(topic="t", partition=p, current_replicas=(1, 2), target_replicas=(2, 3))
                                        for p in (0, 1)))
    return fake, plan


def test_run_keeps_backup_and_journal_in_the_store_and_holds_the_lease():
    state = MemoryStore("s3://bucket/plans/p/run")
    fake, plan = plan_and_fake()
    keeper = LeaseKeeper.take(state, holder="me", scope="d/r")
    seen = []

    def sleep(_):
        seen.append(state.read(THROTTLE_BACKUP_FILE) is not None)
        fake.complete()

    result = run(fake, plan, ExecutionLimits(max_moves=1), ExecutionOptions(throttle_bytes_per_sec=1000),
                 state_dir=state, sleep=sleep, lease=keeper)
    assert result.status.complete and seen and all(seen)
    assert state.read(THROTTLE_BACKUP_FILE) is None  # restored and deleted
    events = read_journal(state)
    submitted = [e for e in events if e["event"] == "submitted"]
    assert [s["submitted"] for s in submitted] == [[["t", 0, [2, 3]]], [["t", 1, [2, 3]]]]
    assert submitted[0]["holder"] == "me" and events[-1]["event"] == "throttles-restored"


def test_a_run_that_lost_its_lease_writes_nothing_more():
    state = MemoryStore("memory://run")
    fake, plan = plan_and_fake()
    clock = Clock()
    keeper = LeaseKeeper.take(state, holder="me", scope="d/r1", ttl_s=30, now=clock)

    def sleep(_):
        clock.advance(60)  # stalled past the expiry; another run took over
        acquire(state, holder="them", scope="d/r2", ttl_s=30, now=clock)

    with pytest.raises(LeaseLostError):
        run(fake, plan, ExecutionLimits(max_moves=1), ExecutionOptions(throttle_bytes_per_sec=1000),
            state_dir=state, sleep=sleep, lease=keeper, settle_s=-1)
    assert len(fake.inflight) == 1  # only the first batch went out
    assert state.read(THROTTLE_BACKUP_FILE) is not None  # the new holder's to restore: untouched


# -- the heal-targets file on any store ------------------------------------------------------------------------

def test_heal_targets_file_on_a_store_is_updated_by_compare_and_set():
    from airflow_kafka_reassign.core.maintenance.growth import heal_targets_uri, read_heal_targets, update_heal_targets

    store = MemoryStore("s3://plans/kafka")
    where = (store, "heal-targets.json")
    assert read_heal_targets(where) == {}
    update_heal_targets(where, add={"orders-3": 3, "orders-4": 3})
    update_heal_targets(where, add={"orders-3": 2, "audit-0": 3}, remove=["orders-4"])  # the larger RF stays
    assert read_heal_targets(where) == {"audit-0": 3, "orders-3": 3}
    assert heal_targets_uri(where) == "s3://plans/kafka/heal-targets.json"

    class Racing(MemoryStore):
        """Another writer changes the file between each read and write of ours, twice."""

        races = 2

        def write_if(self, name, data, version):
            if self.races:
                self.races -= 1
                super().write(name, b'{"payments-1": 3}\n' if self.races else b'{"payments-1": 3, "x-0": 2}\n')
            return super().write_if(name, data, version)

    racing = Racing("memory://")
    update_heal_targets((racing, "h.json"), add={"orders-9": 3})
    assert read_heal_targets((racing, "h.json")) == {"orders-9": 3, "payments-1": 3, "x-0": 2}  # no update lost


def test_heal_targets_file_refuses_bad_content_naming_the_uri():
    from airflow_kafka_reassign.core.maintenance.growth import read_heal_targets

    store = MemoryStore("s3://plans/kafka", {"h.json": b'["orders-1"]'})
    with pytest.raises(ConfigurationError, match=r"s3://plans/kafka/h.json must be a JSON object"):
        read_heal_targets((store, "h.json"))
