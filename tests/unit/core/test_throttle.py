from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.models import Move, TopicPartition
from airflow_kafka_reassign.core.ports import ClusterAdmin
from airflow_kafka_reassign.core.throttle import (
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
