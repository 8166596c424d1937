from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.execution.throttle import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    apply_throttle,
    merge_replica_list,
    restore_throttle,
    subtract_replica_list,
    throttle_configs,
    throttled_replicas,
)
from airflow_kafka_reassign.core.vocabulary.models import Move, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin
from airflow_kafka_reassign.testing import FakeClusterAdmin

MOVES = [
    Move(topic="a", partition=0, current_replicas=(1, 2), target_replicas=(3, 2)),
    Move(topic="a", partition=1, current_replicas=(2, 3), target_replicas=(3, 2)),  # leader order only
    Move(topic="b", partition=4, current_replicas=(1, 3), target_replicas=(1, 4)),
]


def test_throttled_replicas_are_current_replicas_as_leaders_and_adding_ones_as_followers():
    out = throttled_replicas(m for m in MOVES if m.adding_replicas)
    assert out == {"a": ({"0:1", "0:2"}, {"0:3"}), "b": ({"4:1", "4:3"}, {"4:4"})}


def test_throttle_configs_touch_only_brokers_and_replicas_involved():
    brokers, topics = throttle_configs(MOVES, 1_000_000, {})
    assert sorted(brokers) == [1, 2, 3, 4]
    assert brokers[1] == {LEADER_RATE: "1000000", FOLLOWER_RATE: "1000000"}
    assert topics["a"] == {LEADER_REPLICAS: "0:1,0:2", FOLLOWER_REPLICAS: "0:3"}


def test_a_move_that_copies_nothing_is_not_throttled():
    brokers, topics = throttle_configs([MOVES[1]], 10, {})
    assert brokers == {} and topics == {}


def test_existing_replica_lists_are_merged_not_overwritten():
    _, topics = throttle_configs(MOVES, 10, {"a": {LEADER_REPLICAS: "7:9", FOLLOWER_REPLICAS: "*"}})
    assert topics["a"] == {LEADER_REPLICAS: "0:1,0:2,7:9", FOLLOWER_REPLICAS: "*"}


@pytest.mark.parametrize(
    ("existing", "ours", "expected"),
    [(None, ["1:2", "0:1"], "0:1,1:2"), ("10:1, 2:1", ["2:1"], "2:1,10:1"), ("*", ["0:1"], "*"), (None, [], None)],
)
def test_merge_replica_list(existing, ours, expected):
    assert merge_replica_list(existing, ours) == expected


def test_subtract_keeps_what_was_there_before():
    assert subtract_replica_list("0:1,0:2,7:9", ["0:1", "0:2", "7:9"], original="7:9") == "7:9"
    assert subtract_replica_list("0:1", ["0:1"], original=None) is None


def test_rate_must_be_positive():
    with pytest.raises(ValueError, match="positive number of bytes/s"):
        throttle_configs(MOVES, 0, {})


def test_apply_then_restore_leaves_configs_exactly_as_before():
    fake = FakeClusterAdmin.build(brokers={1: None, 2: None, 3: None, 4: None},
                                  topics={"a": [[1, 2], [2, 3]], "b": [[1, 3]] * 5})
    assert isinstance(fake, ClusterAdmin)
    fake.broker_configs[1][LEADER_RATE] = "555"  # someone else's value
    fake.topic_configs["a"][FOLLOWER_REPLICAS] = "1:1"
    before = (repr(fake.broker_configs), repr(fake.topic_configs))

    backup = apply_throttle(fake, MOVES, 1000)
    assert fake.broker_configs[1][LEADER_RATE] == "1000"
    assert fake.topic_configs["a"][FOLLOWER_REPLICAS] == "0:3,1:1"
    restore_throttle(fake, backup)
    assert (repr(fake.broker_configs), repr(fake.topic_configs)) == before
    assert backup.brokers[1][LEADER_RATE] == "555" and backup.brokers[2][LEADER_RATE] is None


def test_fake_applies_kip860_semantics():
    fake = FakeClusterAdmin.build(brokers={i: None for i in range(1, 7)}, topics={"tp": [[1, 2, 3], [1, 2, 3]]})
    tp0, tp1 = TopicPartition("tp", 0), TopicPartition("tp", 1)
    fake.alter_reassignments({tp0: [4, 5, 6]})
    # a plan made from the intermediate replica set [1..6] is refused; the valid move proceeds
    res = fake.alter_reassignments({tp0: [1, 2, 3, 4, 5, 6], tp1: [4, 5, 6]})
    assert [r.error_code for r in res.results] == ["INVALID_REPLICATION_FACTOR", None]
    fake.cancel_reassignments([tp0])
    assert fake.replicas[tp0] == (1, 2, 3)


def test_a_step_reads_the_throttles_once_what_it_just_backed_up_is_not_read_again():
    from airflow_kafka_reassign.core.execution.throttle import FOLLOWER_RATE, LEADER_RATE, read_backup, sync_throttles
    from airflow_kafka_reassign.core.records.store import MemoryStore

    f, store = FakeClusterAdmin.build({1: None, 2: None, 3: None, 4: None}, {"t": [[1, 2], [2, 3]]}), MemoryStore()
    f.broker_configs[3][LEADER_RATE] = "777"  # someone else's, kept in the backup and put back
    reads: list[tuple[list[int], list[str]]] = []
    describe = f.describe_throttles
    f.describe_throttles = lambda b, t, **kw: (reads.append((list(b), list(t))), describe(b, t, **kw))[1]  # type: ignore[method-assign]
    first = [Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 2))]
    assert sync_throttles(f, first, 5000, state_dir=store)
    assert reads == [([1, 2, 3], ["t"])]  # the backup's read only: the diff uses it
    assert f.broker_configs[3][LEADER_RATE] == "5000" and read_backup(store).brokers[3][LEADER_RATE] == "777"
    reads.clear()
    second = [*first, Move(topic="t", partition=1, current_replicas=(2, 3), target_replicas=(2, 4))]
    assert sync_throttles(f, second, 5000, state_dir=store)
    assert reads == [([4], []), ([1, 2, 3], ["t"])]  # broker 4 backed up; the others read again (drift)
    assert f.broker_configs[4][FOLLOWER_RATE] == "5000"
    reads.clear()
    assert not sync_throttles(f, second, 5000, state_dir=store)  # nothing differs, nothing written
    assert reads == [([1, 2, 3, 4], ["t"])]


class _Lagging:
    """A cluster whose brokers apply a config write ``lag`` reads after it was answered (KRaft: the controller
    commits, the broker replays a moment later); ``never``: the write is lost."""

    def __init__(self, f: FakeClusterAdmin, lag: int, never: bool = False) -> None:
        self.f, self.lag, self.never, self.writes, self._stale = f, lag, never, 0, None
        self._left = 0

    def describe_throttles(self, brokers, topics, **kw):
        if self._left:
            self._left -= 1
            return self._stale
        return self.f.describe_throttles(brokers, topics, **kw)

    def set_throttles(self, brokers, topics):
        self.writes += 1
        self._stale, self._left = self.f.describe_throttles(list(brokers), list(topics)), self.lag
        if self.never:
            self._left = 10**9
        else:
            self.f.set_throttles(brokers, topics)

    def __getattr__(self, name):
        return getattr(self.f, name)


def test_the_restore_check_waits_for_the_brokers_to_apply_its_write_before_writing_again(monkeypatch):
    from airflow_kafka_reassign.core.execution import throttle
    from airflow_kafka_reassign.core.execution.throttle import LEADER_RATE, read_backup, restore_throttles, sync_throttles
    from airflow_kafka_reassign.core.records.store import MemoryStore

    now = [0.0]
    monkeypatch.setattr(throttle, "_clock", lambda: now[0])
    monkeypatch.setattr(throttle, "_sleep", lambda s: now.__setitem__(0, now[0] + s))
    f, store = FakeClusterAdmin.build({1: None, 2: None, 3: None}, {"t": [[1, 2]]}), MemoryStore()
    f.broker_configs[1][LEADER_RATE] = "777"
    sync_throttles(f, [Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 2))], 5000,
                   state_dir=store)
    slow = _Lagging(f, lag=3)
    assert restore_throttles(slow, store)
    assert slow.writes == 1 and f.broker_configs[1][LEADER_RATE] == "777" and read_backup(store) is None
    assert 0 < now[0] < throttle.RESTORE_SETTLE_S  # it read again until the write showed, then stopped

    sync_throttles(f, [Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 2))], 5000,
                   state_dir=store)
    lost = _Lagging(f, lag=0, never=True)
    with pytest.raises(RuntimeError, match="after restoring twice"):
        restore_throttles(lost, store)
    assert lost.writes == 2 and read_backup(store) is not None  # the backup stays for the next run


def test_a_broker_killed_but_still_listed_is_left_out_of_a_step_and_throttled_once_it_answers(caplog):
    """A broker killed stays listed alive until the cluster notices (ZooKeeper's session timeout, KRaft's fencing);
    its own config requests only wait for it (the adapter's BrokerUnreachableError). The step goes on without it,
    one line naming it, and never writes a config the backup does not hold."""
    from airflow_kafka_reassign.core.execution.throttle import read_backup, sync_throttles
    from airflow_kafka_reassign.core.records.store import MemoryStore

    f, store = FakeClusterAdmin.build({1: None, 2: None, 3: None, 4: None}, {"t": [[1, 2], [2, 3]]}), MemoryStore()
    f.broker_configs[3][LEADER_RATE] = "777"  # someone else's
    first = [Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 2))]
    f.silent = {3}
    assert sync_throttles(f, first, 5000, state_dir=store)
    assert f.broker_configs[1][LEADER_RATE] == "5000" and f.topic_configs["t"][FOLLOWER_REPLICAS] == "0:3"
    assert 3 not in read_backup(store).brokers and f.broker_configs[3][LEADER_RATE] == "777"  # untouched
    assert "broker(s) [3] did not answer the read of their throttle configs" in caplog.text
    f.silent = set()  # it answers again: backed up, then throttled
    assert sync_throttles(f, first, 5000, state_dir=store)
    assert read_backup(store).brokers[3][LEADER_RATE] == "777" and f.broker_configs[3][LEADER_RATE] == "5000"
    # killed again, now in the backup: the next step reads and writes the others only
    f.silent = {3}
    second = [*first, Move(topic="t", partition=1, current_replicas=(2, 3), target_replicas=(2, 4))]
    assert sync_throttles(f, second, 5000, state_dir=store)
    assert f.broker_configs[4][FOLLOWER_RATE] == "5000" and f.topic_configs["t"][FOLLOWER_REPLICAS] == "0:3,1:4"


def test_a_restore_leaves_a_broker_that_does_not_answer_in_the_backup_and_restores_it_once_it_does(caplog):
    from airflow_kafka_reassign.core.execution.throttle import read_backup, restore_throttles, sync_throttles
    from airflow_kafka_reassign.core.records.store import MemoryStore

    f, store = FakeClusterAdmin.build({1: None, 2: None, 3: None}, {"t": [[1, 2]]}), MemoryStore()
    f.broker_configs[3][LEADER_RATE] = "777"
    before = (repr(f.broker_configs), repr(f.topic_configs))
    sync_throttles(f, [Move(topic="t", partition=0, current_replicas=(1, 2), target_replicas=(3, 2))], 5000,
                   state_dir=store)
    f.silent = {3}
    assert restore_throttles(f, store)
    assert f.broker_configs[1].get(LEADER_RATE) is None and f.topic_configs["t"].get(FOLLOWER_REPLICAS) is None
    assert f.broker_configs[3][LEADER_RATE] == "5000"  # not reached: kept in the backup for later
    assert read_backup(store).brokers == {3: {LEADER_RATE: "777", FOLLOWER_RATE: None}}
    assert "broker(s) [3] did not answer: their throttle configs are restored when they are back" in caplog.text
    f.silent = set()
    assert restore_throttles(f, store)
    assert (repr(f.broker_configs), repr(f.topic_configs)) == before and read_backup(store) is None
