"""The cluster watch's requests in the adapter, without a cluster: DescribeLogDirs asks for NO partition (an empty
array, not null, which means every partition), all live brokers at once; the Metadata is folded, and each topic's
min.insync.replicas is read once, for new topics, and again after its maximum age. The real cluster:
tests/integration/test_cluster_watch.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kafka.protocol.admin import DescribeLogDirsRequest

from airflow_kafka_reassign.core.vocabulary.models import Broker
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.admin.snapshot import _Partition, _Topic


def test_log_dirs_of_no_partition_sends_topics_empty_to_every_live_broker_at_once():
    admin = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"}, timeout_s=5)
    sent: list[tuple[int, Any]] = []
    awaited: list[int] = []

    class Manager:
        cluster = SimpleNamespace(brokers=lambda: [SimpleNamespace(node_id=n) for n in (1, 2, 3)])

        def send(self, request: Any, node_id: int, **_kw: Any) -> int:
            sent.append((node_id, request))
            return node_id

        async def wait_for(self, node_id: int, _timeout_ms: int) -> Any:
            awaited.append(node_id)
            d = SimpleNamespace(to_dict=lambda: {"error_code": 0, "log_dir": f"/data/{node_id}", "topics": [],
                                                 "total_bytes": 1000, "usable_bytes": 400 + node_id})
            return SimpleNamespace(results=[d])

        def run(self, coro: Any) -> Any:
            try:
                coro().send(None)
            except StopIteration as done:
                return done.value
            raise AssertionError("the coroutine awaited something else")

    admin._kafka_python = lambda: SimpleNamespace(_manager=Manager())  # type: ignore[method-assign]
    admin.describe_cluster_brokers = lambda: ("c", [Broker(id=1), Broker(id=2)])  # type: ignore[method-assign]
    dirs = admin.log_dirs(())
    assert [n for n, _ in sent] == [1, 2] and awaited == [1, 2]  # every request sent before the first is awaited
    assert all(r.topics == [] and bytes(r.encode(version=4)) == b"\x01\x00" for _, r in sent)  # [] on the wire
    assert DescribeLogDirsRequest(topics=None).encode(version=4) != sent[0][1].encode(version=4)
    assert dirs.sizes == {} and {b: [(d.path, d.usable_bytes, d.replicas) for d in ds] for b, ds in dirs.dirs.items()} \
        == {1: [("/data/1", 401, ())], 2: [("/data/2", 402, ())]}
    assert dirs.space[1].usable_bytes == 401 and dirs.unanswered == ()


def test_partition_health_reads_min_isr_for_new_topics_and_again_after_its_maximum_age(monkeypatch):
    admin = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"}, timeout_s=5)
    topics = {"a": _Topic(None, None, False, {0: _Partition((1, 2), (1,), 1), 1: _Partition((2, 3), (2, 3), 2)})}
    admin._read_metadata = lambda names: dict(topics)  # type: ignore[method-assign]
    read: list[list[str]] = []

    def read_min_isr(names: list[str]) -> None:
        read.append(sorted(names))
        admin._min_isr.update({n: 2 for n in names})  # type: ignore[union-attr]

    admin._read_min_isr = read_min_isr  # type: ignore[method-assign]
    clock = [100.0]
    monkeypatch.setattr("airflow_kafka_reassign.kafka.admin.snapshot.time.monotonic", lambda: clock[0])
    health = admin.partition_health(min_isr_max_age_s=600)
    assert (health.partitions, health.replicas, health.under_min_isr, health.out_of_isr) == (2, {1: 1, 2: 2, 3: 1}, 1, {2: 1})
    admin.partition_health(min_isr_max_age_s=600)
    topics["b"] = _Topic(None, None, False, {0: _Partition((1, 3), (1, 3), 1)})
    admin.partition_health(min_isr_max_age_s=600)
    clock[0] += 601
    admin.partition_health(min_isr_max_age_s=600)
    assert read == [["a"], ["b"], ["a", "b"]]
