"""The cluster watch's state machine on the fake cluster: dwell, recovery, a rolling restart that fires nothing, the
state re-read by a rebuilt watch (8 of 10 minutes fires at 10; fired before, not fired again), the compare-and-set
race of two triggerers, and what the watch cannot see left untouched. Time is given to each poll, never waited for."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_kafka_reassign.core.healing.incident import Incident
from airflow_kafka_reassign.core.healing.observation import conditions_of, observe
from airflow_kafka_reassign.core.healing.watch import (
    WatchLedger,
    WatchSettings,
    WatchState,
    WatchStateError,
    advance,
    state_name,
)
from airflow_kafka_reassign.core.records.store import LocalStore, MemoryStore
from airflow_kafka_reassign.testing import FakeClusterAdmin

T0 = datetime(2026, 12, 3, 6, 0, tzinfo=timezone.utc)
MIN = timedelta(minutes=1)


def cluster() -> FakeClusterAdmin:
    return FakeClusterAdmin.build(brokers={1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"},
                                  topics={"orders": [[1, 2], [2, 3], [3, 4], [4, 5], [5, 1]]})


def settings(**kw) -> WatchSettings:
    return WatchSettings(cluster="prod", **{"kinds": ["broker_down"], **kw})


class Watch:
    """A watch as the trigger runs it (observe, conditions, ledger), on a given store, at given times."""

    def __init__(self, admin: FakeClusterAdmin, store, **kw) -> None:
        self.admin = admin
        self.settings = settings(**kw)
        self.ledger = WatchLedger(store, self.settings)

    def poll(self, at: datetime) -> list[Incident]:
        seen = conditions_of(observe(self.admin, self.settings), self.settings)
        return list(self.ledger.advance(seen, now=at).fire)


def polls(watch: Watch, start: timedelta, stop: timedelta, every: timedelta = MIN / 2) -> list[tuple[timedelta, Incident]]:
    out = []
    t = start
    while t <= stop:
        out.extend((t, i) for i in watch.poll(T0 + t))
        t += every
    return out


def test_a_broker_down_fires_once_when_it_has_lasted_its_dwell_and_never_again_while_it_stays():
    admin = cluster()
    watch = Watch(admin, MemoryStore())
    admin.down.add(5)
    fired = polls(watch, timedelta(0), 30 * MIN)
    assert [(t, i.kind, i.brokers) for t, i in fired] == [(10 * MIN, "broker_down", (5,))]
    incident = fired[0][1]
    assert incident.id == "prod/broker_down/b5/20261203T060000Z"
    assert incident.first_seen == T0 and incident.last_seen == T0 + 10 * MIN and incident.detail == {"fenced": 1}


def test_a_rolling_restart_within_the_dwell_fires_nothing_and_is_forgotten():
    admin = cluster()
    store = MemoryStore()
    watch = Watch(admin, store)
    for b in (1, 2, 3, 4, 5):  # each broker down for 3 minutes, one after the other
        admin.down = {b}
        assert polls(watch, (b - 1) * 4 * MIN, ((b - 1) * 4 + 3) * MIN) == []
        admin.down = set()
        assert polls(watch, ((b - 1) * 4 + 3.5) * MIN, ((b - 1) * 4 + 4) * MIN - MIN / 2) == []
    assert watch.ledger.read()[0].conditions == {}


def test_a_condition_that_clears_before_its_dwell_starts_its_dwell_again_when_it_comes_back():
    admin = cluster()
    watch = Watch(admin, MemoryStore())
    admin.down = {5}
    assert polls(watch, timedelta(0), 6 * MIN) == []
    admin.down = set()
    assert polls(watch, 7 * MIN, 7 * MIN) == []
    admin.down = {5}
    fired = polls(watch, 8 * MIN, 20 * MIN)
    assert [t for t, _ in fired] == [18 * MIN]


def test_back_within_its_recovery_time_it_is_the_same_incident_after_it_a_new_one():
    admin = cluster()
    watch = Watch(admin, MemoryStore())  # broker_down: dwell 10 min, recovery 10 min
    admin.down = {5}
    first = polls(watch, timedelta(0), 12 * MIN)
    admin.down = set()
    assert polls(watch, 12.5 * MIN, 15 * MIN) == []
    admin.down = {5}  # flapping: back 3 minutes after it cleared
    assert polls(watch, 15.5 * MIN, 17 * MIN) == []
    admin.down = set()
    assert polls(watch, 17.5 * MIN, 28 * MIN) == []  # clear for 10.5 minutes: over
    assert watch.ledger.read()[0].conditions == {}
    admin.down = {5}
    second = polls(watch, 30 * MIN, 45 * MIN)
    assert [t for t, _ in first] == [10 * MIN] and [t for t, _ in second] == [40 * MIN]
    assert second[0][1].id != first[0][1].id and second[0][1].first_seen == T0 + 30 * MIN


def test_a_rebuilt_watch_resumes_from_the_state_8_of_10_minutes_fires_at_10_not_18(tmp_path):
    admin = cluster()
    admin.down = {5}
    before = Watch(admin, LocalStore(tmp_path))
    assert polls(before, timedelta(0), 8 * MIN) == []
    after = Watch(admin, LocalStore(tmp_path))  # a new trigger (restart, failover): only the store is shared
    fired = polls(after, 8.5 * MIN, 20 * MIN)
    assert [(t, i.brokers) for t, i in fired] == [(10 * MIN, (5,))]


def test_an_incident_fired_before_a_rebuild_is_not_fired_again(tmp_path):
    admin = cluster()
    admin.down = {5}
    before = Watch(admin, LocalStore(tmp_path))
    assert len(polls(before, timedelta(0), 10 * MIN)) == 1
    after = Watch(admin, LocalStore(tmp_path))
    assert polls(after, 10.5 * MIN, 40 * MIN) == []
    stored = json.loads((tmp_path / state_name("prod")).read_text())
    assert stored["conditions"]["broker_down/b5"]["fired"] == "prod/broker_down/b5/20261203T060000Z"


class RacingStore(MemoryStore):
    """A store where another writer gets in between this one's read and its compare-and-set, once."""

    def __init__(self, objects: dict[str, bytes], before_write) -> None:
        super().__init__(objects=objects)
        self.before_write = before_write

    def write_if(self, name: str, data: bytes, version: str | None) -> bool:
        if self.before_write is not None:
            other, self.before_write = self.before_write, None
            other()
        return super().write_if(name, data, version)


def test_of_two_triggerers_polling_at_once_the_one_that_loses_the_write_does_not_fire_the_incident():
    admin = cluster()
    admin.down = {5}
    shared: dict[str, bytes] = {}
    a = Watch(admin, MemoryStore(objects=shared))
    assert polls(a, timedelta(0), 9.5 * MIN) == []
    fired_by_a: list[Incident] = []
    b = Watch(admin, RacingStore(shared, lambda: fired_by_a.extend(a.poll(T0 + 10 * MIN))))
    fired_by_b = b.poll(T0 + 10 * MIN + timedelta(seconds=1))  # read, A writes (fires), B's write loses: re-read
    assert [i.brokers for i in fired_by_a] == [(5,)] and fired_by_b == []
    assert a.poll(T0 + 11 * MIN) == [] and b.poll(T0 + 11 * MIN) == []


def test_a_store_that_keeps_losing_the_write_is_an_error_naming_the_cause():
    class AlwaysLoses(MemoryStore):
        def write_if(self, name, data, version):
            return False

    admin = cluster()
    admin.down = {5}
    with pytest.raises(WatchStateError, match="another writer at each of 5 attempts.*One watch per cluster"):
        Watch(admin, AlwaysLoses()).poll(T0)


def test_nothing_is_written_while_the_cluster_is_healthy():
    store = MemoryStore()
    watch = Watch(cluster(), store, kinds=None)
    polls(watch, timedelta(0), 30 * MIN)
    assert store.objects == {}


def test_a_pending_condition_not_seen_for_longer_than_max_gap_dwells_again():
    admin = cluster()
    admin.down = {5}
    watch = Watch(admin, MemoryStore())
    assert polls(watch, timedelta(0), 4 * MIN) == []
    # the watch was away 40 minutes (no triggerer): it cannot tell the broker stayed down all along
    fired = polls(watch, 44 * MIN, 60 * MIN)
    assert [(t, i.first_seen) for t, i in fired] == [(54 * MIN, T0 + 44 * MIN)]


def test_a_full_log_dir_on_a_broker_that_stops_answering_is_neither_cleared_nor_fired():
    admin = cluster()
    admin.dir_total["/kafka/2/data-1"] = 1000
    admin.sizes = {tp: {b: 450 for b in reps} for tp, reps in admin.replicas.items()}  # broker 2: 900 of 1000
    watch = Watch(admin, MemoryStore(), kinds=["log_dir_full"], dwell_s={"log_dir_full": 12 * 60})
    assert polls(watch, timedelta(0), 10 * MIN) == []
    admin.log_dirs_unanswered = {2}
    assert polls(watch, 10.5 * MIN, 14 * MIN) == []  # past its 12 minutes, but unseen: not fired
    state = watch.ledger.read()[0]
    assert list(state.conditions) == ["log_dir_full/d2:/kafka/2/data-1"]
    admin.log_dirs_unanswered = set()
    fired = polls(watch, 14.5 * MIN, 15 * MIN)
    assert [(i.kind, [str(d) for d in i.dirs], i.detail["used_ratio"]) for _, i in fired] == [
        ("log_dir_full", ["2:/kafka/2/data-1"], 0.9)]


def test_only_the_watched_kinds_are_touched_in_the_state():
    admin = cluster()
    admin.down = {5}
    store = MemoryStore()
    polls(Watch(admin, store), timedelta(0), 2 * MIN)
    other = Watch(admin, store, kinds=["log_dir_offline"])
    polls(other, 3 * MIN, 30 * MIN)
    assert list(other.ledger.read()[0].conditions) == ["broker_down/b5"]


def test_the_state_is_json_and_a_state_of_another_cluster_or_version_is_refused():
    admin = cluster()
    admin.down = {5}
    store = MemoryStore()
    polls(Watch(admin, store), timedelta(0), 10 * MIN)
    name = state_name("prod")
    assert WatchState.model_validate_json(store.read(name)).conditions["broker_down/b5"].fired
    store.write(name, store.read(name).replace(b'"version":1', b'"version":2'))
    with pytest.raises(WatchStateError, match="version 2 is not 1"):
        Watch(admin, store).poll(T0 + 11 * MIN)
    store.write(name, b"{not json")
    with pytest.raises(WatchStateError, match="(?s)cannot be read.*delete it to start over"):
        Watch(admin, store).poll(T0 + 11 * MIN)
    store.write(name, WatchState(cluster="staging").to_json())
    with pytest.raises(WatchStateError, match="of cluster 'staging', not 'prod'"):
        Watch(admin, store).poll(T0 + 11 * MIN)


def test_settings_merge_the_defaults_and_name_what_is_wrong():
    s = WatchSettings(cluster="prod", dwell_s={"broker_down": 5})
    assert s.dwell("broker_down") == 5 and s.dwell("log_dir_full") == 900 and s.recovery("broker_down") == 600
    assert s.kinds[0] == "broker_down" and len(s.kinds) == 6
    with pytest.raises(ValueError, match="'broker_gone' is not an incident kind"):
        WatchSettings(cluster="prod", dwell_s={"broker_gone": 5})
    with pytest.raises(ValueError, match="'disk' not incident kinds"):
        WatchSettings(cluster="prod", kinds=["disk"])
    with pytest.raises(ValueError, match="seconds must be 0 or more"):
        WatchSettings(cluster="prod", recovery_s={"imbalance": -1})


def test_advance_is_deterministic_and_says_each_change():
    admin = cluster()
    admin.down = {5}
    s = settings(max_gap_s=3600)
    seen = conditions_of(observe(admin, s), s)
    empty = WatchState(cluster="prod")
    step = advance(empty, seen, now=T0, settings=s)
    assert step == advance(empty, seen, now=T0, settings=s)
    assert step.changes == ("broker_down/b5: seen; fires at 2026-12-03T06:10:00+00:00 if it lasts (dwell 600 s)",)
    fired = advance(step.state, seen, now=T0 + 10 * MIN, settings=s)
    assert "incident prod/broker_down/b5/20261203T060000Z fired" in fired.changes[0]


def test_an_incident_no_run_decided_on_is_fired_again_same_id_backing_off_while_it_holds():
    admin = cluster()
    admin.down = {5}
    store = MemoryStore()
    watch = Watch(admin, store, refire_after_s=120)
    answered: set[str] = set()

    def poll(at: timedelta) -> list[Incident]:
        seen = conditions_of(observe(admin, watch.settings), watch.settings)
        return list(watch.ledger.advance(seen, now=T0 + at, answered=lambda ids: answered & set(ids)).fire)

    fired = [(t, i) for t in (MIN * m / 2 for m in range(0, 41)) for i in poll(t)]  # 0 to 20 minutes
    assert [t for t, _ in fired] == [10 * MIN, 12 * MIN, 16 * MIN]  # after 2, then 4 minutes (8 next)
    assert {i.id for _, i in fired} == {"prod/broker_down/b5/20261203T060000Z"}
    assert [i.last_seen for _, i in fired] == [T0 + t for t, _ in fired]
    assert WatchState.model_validate_json(store.read(state_name("prod"))).conditions["broker_down/b5"].refires == 2
    answered.add(fired[0][1].id)  # a run decided on it
    assert [i for m in range(41, 200) for i in poll(MIN * m / 2)] == []
    # without the ledger's answers (a caller that does not ask), nothing is ever fired again
    other = Watch(admin, MemoryStore(), refire_after_s=120)
    assert len(polls(other, timedelta(0), 60 * MIN)) == 1


def test_a_cleared_incident_is_not_fired_again_and_the_interval_is_capped():
    s = settings(refire_after_s=600)
    assert [s.refire_interval(n) for n in (0, 1, 2, 3, 50)] == [600, 1200, 2400, 3600, 3600]
    admin = cluster()
    admin.down = {5}
    watch = Watch(admin, MemoryStore(), refire_after_s=60)
    assert len(polls(watch, timedelta(0), 10 * MIN)) == 1
    admin.down = set()  # back: cleared, within its recovery time
    seen = conditions_of(observe(admin, watch.settings), watch.settings)
    assert watch.ledger.advance(seen, now=T0 + 20 * MIN, answered=lambda ids: set()).fire == ()
