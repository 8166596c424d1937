"""What the cluster watch finds in one observation of the fake cluster, kind by kind, and which requests it sends."""

from __future__ import annotations

from airflow_kafka_reassign.core.healing.observation import conditions_of, fold_partitions, observe
from airflow_kafka_reassign.core.healing.watch import WatchSettings
from airflow_kafka_reassign.core.vocabulary.models import Broker, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import ClusterCapabilities
from airflow_kafka_reassign.testing import FakeClusterAdmin


def fake(**kw) -> FakeClusterAdmin:
    return FakeClusterAdmin.build(brokers={1: "r1", 2: "r2", 3: "r3"},
                                  topics={"orders": [[1, 2], [2, 3], [3, 1]] * 4}, **kw)


def seen(admin: FakeClusterAdmin, *kinds: str, **kw):
    s = WatchSettings(cluster="prod", kinds=list(kinds) or None, **kw)
    return conditions_of(observe(admin, s), s)


def described(result) -> list[tuple[str, tuple[int, ...], tuple[str, ...]]]:
    return [(c.key, c.brokers, tuple(str(d) for d in c.dirs)) for c in result.conditions]


def test_a_healthy_cluster_shows_no_condition_of_any_kind():
    assert seen(fake()).conditions == ()


def test_broker_down_alone_sends_describe_cluster_only_on_kafka_4():
    admin = fake()
    admin.down.add(2)
    result = seen(admin, "broker_down")
    assert described(result) == [("broker_down/b2", (2,), ())]
    assert "partition_health" not in admin.calls and "replica_sizes" not in admin.calls


def test_without_kip_1073_a_broker_that_holds_replicas_and_is_not_listed_is_down():
    admin = fake(capabilities=ClusterCapabilities(fenced_brokers=False))
    admin.down.add(2)
    result = seen(admin, "broker_down")
    assert described(result) == [("broker_down/b2", (2,), ())]
    assert result.conditions[0].detail == {"fenced": 0, "replicas": 8} and admin.calls["partition_health"] == 1


def test_an_offline_log_dir_and_a_full_one_are_found_per_dir():
    admin = fake(log_dirs=2)
    admin.offline_dirs.add("/kafka/1/data-2")
    admin.dir_total["/kafka/3/data-1"] = 1000
    admin.sizes = {tp: {3: 110} for tp, reps in admin.replicas.items() if 3 in reps}  # 8 x 110 = 880 of 1000
    result = seen(admin, "log_dir_offline", "log_dir_full")
    assert described(result) == [("log_dir_offline/d1:/kafka/1/data-2", (), ("1:/kafka/1/data-2",)),
                                 ("log_dir_full/d3:/kafka/3/data-1", (), ("3:/kafka/3/data-1",))]
    assert result.conditions[0].detail == {"error": "KAFKA_STORAGE_ERROR"}
    assert result.conditions[1].detail["used_ratio"] == 0.88
    assert described(seen(admin, "log_dir_full", log_dir_full_ratio=0.9)) == []


def test_partitions_under_min_isr_are_one_condition_naming_the_brokers_out_of_their_isr():
    admin = fake()
    admin.topic_configs["orders"]["min.insync.replicas"] = "2"
    admin.down.add(3)
    result = seen(admin, "under_min_isr")
    assert described(result) == [("under_min_isr/cluster", (3,), ())]
    assert result.conditions[0].detail["partitions"] == 8


def test_a_partition_whose_replication_factor_is_below_its_min_isr_is_not_an_incident():
    health = fold_partitions([("t", 0, (1,), (1,), 1), ("u", 0, (1, 2), (1,), 1)], {"t": 2, "u": 2})
    assert (health.under_min_isr, health.min_isr_above_rf, health.under_min_isr_sample) == (
        1, 1, (TopicPartition("u", 0),))
    assert health.replicas == {1: 2, 2: 1} and health.leaders == {1: 2} and health.out_of_isr == {2: 1}


def test_a_new_broker_without_replicas_is_empty_unless_it_is_cordoned():
    admin = fake()
    admin.brokers.append(Broker(id=4, rack="r1"))
    admin.broker_configs[4] = {}
    admin.broker_dirs[4] = ["/kafka/4/data-1"]
    assert described(seen(admin, "empty_broker")) == [("empty_broker/b4", (4,), ())]
    admin.set_cordons({4: "*"})  # being drained for its decommission: not waiting for a share
    assert described(seen(admin, "empty_broker")) == []


def test_replica_counts_beyond_the_band_are_an_imbalance_naming_the_brokers():
    admin = FakeClusterAdmin.build(brokers={1: "r1", 2: "r2", 3: "r3"},
                                   topics={"orders": [[1, 2]] * 30 + [[2, 3], [3, 1]]})
    result = seen(admin, "imbalance")
    assert described(result) == [("imbalance/cluster", (1, 2, 3), ())]
    assert result.conditions[0].detail["by"] == "replicas"
    assert described(seen(admin, "imbalance", imbalance_band=1.0)) == []


def test_disk_usage_beyond_the_band_is_an_imbalance():
    admin = fake()
    admin.disk_total = {1: 1000, 2: 1000, 3: 1000}
    admin.sizes = {tp: {b: (60 if b == 3 else 20) for b in reps} for tp, reps in admin.replicas.items()}
    result = seen(admin, "imbalance")  # 8 replicas each; broker 3 uses 480 of 1000, brokers 1 and 2 160 (mean 0.27)
    assert described(result) == [("imbalance/cluster", (1, 2, 3), ())]
    assert result.conditions[0].detail["disk_used_max"] == 0.48
    assert result.conditions[0].detail["by"] == "disk"


def test_what_a_poll_cannot_see_is_blind_not_clear():
    admin = fake()
    admin.log_dirs_unanswered = {2}
    admin.down.add(3)
    result = seen(admin, "log_dir_full", "broker_down")
    assert result.blind_brokers == {2, 3} and result.blind_kinds == frozenset()
