"""The maintenance calls of kafka/admin/ (cluster.py, log_dirs.py, reassignments.py) without a cluster:
capabilities from ApiVersions and features as each Kafka line reports them (the values seen on 4.3.0, 4.3.1
and 4.4.0 sandboxes), DescribeLogDirs answers as log dirs, and the UnregisterBroker request class (kafka-python
3.0 has none)."""

from __future__ import annotations

import asyncio
import contextlib
import io

import pytest

from airflow_kafka_reassign.exceptions import UnsupportedBrokerError
from airflow_kafka_reassign.kafka.admin.cluster import capabilities_from
from airflow_kafka_reassign.kafka.admin.log_dirs import log_dirs_of
from airflow_kafka_reassign.kafka.protocol import UnregisterBrokerRequest, UnregisterBrokerResponse

API_4_3 = {34: (1, 2), 35: (1, 5), 55: (0, 2), 60: (0, 2), 64: (0, 0)}


def features(finalized: int, supported_max: int) -> dict:
    return {"metadata.version": {"supported": (7, supported_max), "finalized": (finalized, finalized)}}


def test_kafka_4_3_has_cordons_but_does_not_check_explicit_assignments():
    caps = capabilities_from(API_4_3, features(30, 30))  # 4.3.0 and 4.3.1
    assert caps.cordons and not caps.cordons_refuse_explicit_assignments
    assert caps.metadata_version == 30 and caps.describe_quorum and caps.fenced_brokers
    assert caps.unregister_broker and caps.jbod


def test_kafka_4_4_checks_explicit_assignments():
    assert capabilities_from({**API_4_3, 93: (0, 0)}, features(33, 33)).cordons_refuse_explicit_assignments


def test_a_4_4_cluster_still_at_an_older_metadata_version_has_no_cordons():
    caps = capabilities_from(API_4_3, features(27, 33))  # 4.1-IV1 not finalized further
    assert not caps.cordons and not caps.cordons_refuse_explicit_assignments and caps.jbod


def test_an_old_cluster_without_the_apis():
    caps = capabilities_from({35: (0, 3), 60: (0, 1)}, {})
    assert caps == type(caps)(metadata_version=None, zookeeper_mode=True)  # no quorum, no metadata.version, no 34


#: ApiVersions keys and features as the sandbox's Kafka 3.9.1 answered them, in ZooKeeper mode and in KRaft (the keys
#: that tell them apart: 4-7 are ZooKeeper's inter-broker requests, 55 DescribeQuorum, 64 UnregisterBroker).
ZK_391 = {4: (0, 7), 5: (0, 4), 6: (0, 8), 7: (0, 3), 34: (0, 2), 35: (0, 4), 45: (0, 0), 57: (0, 1), 60: (0, 1)}
KRAFT_391 = {34: (0, 2), 35: (0, 4), 45: (0, 0), 55: (0, 2), 57: (0, 1), 60: (0, 1), 64: (0, 0)}
KRAFT_391_FEATURES = {"kraft.version": {"supported": (0, 1)},
                      "metadata.version": {"supported": (1, 21), "finalized": (21, 21), "finalized_epoch": 10}}


def test_a_zookeeper_mode_3_9_cluster_is_told_from_a_kraft_one():
    zk = capabilities_from(ZK_391, {}, (3, 9))
    assert zk.zookeeper_mode and zk.kafka_line == "3.9" and zk.line_name() == "Kafka 3.9, ZooKeeper mode"
    assert not (zk.describe_quorum or zk.unregister_broker or zk.cordons or zk.fenced_brokers)
    assert zk.jbod  # AlterReplicaLogDirs between a ZooKeeper-mode broker's dirs: since Kafka 1.1
    assert "zookeeper_mode=True" in str(zk)  # the capability line every task logs
    kraft = capabilities_from(KRAFT_391, KRAFT_391_FEATURES, (3, 9))
    assert not kraft.zookeeper_mode and kraft.describe_quorum and kraft.jbod and kraft.line_name() == "Kafka 3.9"


def test_log_dirs_of_a_describe_log_dirs_answer():
    answer = [{"broker": 2, "log_dirs": [
        {"error_code": 0, "log_dir": "/k/2/data-1", "total_bytes": 100, "usable_bytes": 40, "is_cordoned": False,
         "topics": [{"name": "t", "partitions": [
             {"partition_index": 0, "partition_size": 10, "offset_lag": 0, "is_future_key": False},
             {"partition_index": 1, "partition_size": 5, "offset_lag": 0, "is_future_key": False}]}]},
        {"error_code": 0, "log_dir": "/k/2/data-2", "total_bytes": 100, "usable_bytes": 40, "is_cordoned": True,
         "topics": [{"name": "t", "partitions": [
             {"partition_index": 0, "partition_size": 4, "offset_lag": 7, "is_future_key": True}]}]},
        {"error_code": 56, "log_dir": "/k/2/data-3", "total_bytes": -1, "usable_bytes": -1, "topics": []},
    ]}]
    dirs = log_dirs_of(answer, {"t": {0}})[2]
    assert [d.path for d in dirs] == ["/k/2/data-1", "/k/2/data-2", "/k/2/data-3"]
    assert [(r.partition, r.size, r.future) for r in dirs[0].replicas] == [(0, 10, False)]  # 1 was not asked
    assert dirs[1].cordoned and dirs[1].replicas[0].future and dirs[1].replicas[0].offset_lag == 7
    assert dirs[2].offline and dirs[2].error == "KAFKA_STORAGE_ERROR" and dirs[2].total_bytes is None
    assert dirs[2].cordoned is None  # a broker older than 4.3 (DescribeLogDirs v4) does not say
    assert len(log_dirs_of(answer, None)[2][0].replicas) == 2


def test_unregister_broker_request_and_response_round_trip():
    request = UnregisterBrokerRequest(broker_id=4, version=0)
    assert request.API_KEY == 64 and UnregisterBrokerRequest.max_version == 0
    assert UnregisterBrokerRequest.decode(request.encode(), version=0).broker_id == 4
    response = UnregisterBrokerResponse(throttle_time_ms=0, error_code=102, error_message="not registered", version=0)
    back = UnregisterBrokerResponse.decode(io.BytesIO(response.encode()), version=0)
    assert (back.error_code, back.error_message) == (102, "not registered")


def test_eligible_leader_replicas_follow_the_finalized_feature_and_describe_topic_partitions():
    elr_on = {**features(33, 33), "eligible.leader.replicas.version": {"supported": (0, 1), "finalized": (1, 1)}}
    assert capabilities_from({**API_4_3, 75: (0, 0)}, elr_on).eligible_leader_replicas  # as a 4.4 sandbox reports
    # a 4.0 cluster that did not opt in: the feature is supported, not finalized
    opted_out = {**features(25, 25), "eligible.leader.replicas.version": {"supported": (0, 1)}}
    assert not capabilities_from({**API_4_3, 75: (0, 0)}, opted_out).eligible_leader_replicas
    assert not capabilities_from(API_4_3, elr_on).eligible_leader_replicas  # no DescribeTopicPartitions (api 75)


class PagingBroker:
    """kafka-python's connection manager as DescribeTopicPartitions sees it: pages of ``limit`` partitions from the
    request's cursor, a next cursor while partitions are left (as a broker answers)."""

    def __init__(self, topics: dict[str, list[tuple[list[int], list[int]]]]) -> None:
        self.topics = topics  # topic -> per partition (ELR, last known ELR)
        self.requests: list[tuple[str, int, int]] = []

    def send(self, request):
        from kafka.protocol.admin import DescribeTopicPartitionsResponse as R

        name, start, limit = request.topics[0].name, request.cursor.partition_index, request.response_partition_limit
        self.requests.append((name, start, limit))
        parts = self.topics[name]
        page = range(start, min(len(parts), start + limit))
        topic = R.DescribeTopicPartitionsResponseTopic(
            error_code=0, name=name, partitions=[R.DescribeTopicPartitionsResponseTopic.DescribeTopicPartitionsResponsePartition(
                error_code=0, partition_index=i, leader_id=1, leader_epoch=0, replica_nodes=[1, 2, 3], isr_nodes=[1],
                eligible_leader_replicas=parts[i][0], last_known_elr=parts[i][1], offline_replicas=[]) for i in page])
        more = page.stop < len(parts)
        cursor = R.Cursor(topic_name=name, partition_index=page.stop) if more else None
        response = R(throttle_time_ms=0, topics=[topic], next_cursor=cursor)

        async def answer():
            return response

        return answer()

    def run(self, fn):
        return asyncio.run(fn())


def test_describe_eligible_leaders_pages_each_topic_from_its_first_wanted_partition(monkeypatch):
    import airflow_kafka_reassign.kafka.admin.reassignments as reassignments
    from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
    from airflow_kafka_reassign.core.vocabulary.ports import ClusterCapabilities
    from airflow_kafka_reassign.kafka.admin.reassignments import ReassignmentsMixin

    broker = PagingBroker({"orders": [([], [])] * 3 + [([3], [])] + [([], [2])] + [([], [])] * 5,
                           "clicks": [([2, 3], [])]})

    class Adapter(ReassignmentsMixin):
        _bootstrap = "test"

        def __init__(self):  # no clients: the methods below stand in for them
            pass

        def capabilities(self):
            return ClusterCapabilities(eligible_leader_replicas=True)

        def _kafka_python(self):
            return type("KP", (), {"_manager": broker})()

        def _authorized(self, refused):
            return contextlib.nullcontext()

    monkeypatch.setattr(reassignments, "ELR_PAGE", 2)
    found = Adapter().describe_eligible_leaders([TopicPartition("orders", 3), TopicPartition("orders", 4),
                                                TopicPartition("clicks", 0)])
    assert {str(tp): (e.elr, e.last_known_elr) for tp, e in found.items()} == {
        "orders-3": ((3,), ()), "orders-4": ((), (2,)), "clicks-0": ((2, 3), ())}
    # orders from its partition 3, two per page, and no page after the last partition wanted
    assert sorted(broker.requests) == [("clicks", 0, 2), ("orders", 3, 2)]
    broker.requests.clear()  # partitions 3 and 8: the pages from 3 to 8, following the broker's cursor
    assert len(Adapter().describe_eligible_leaders([TopicPartition("orders", 3), TopicPartition("orders", 8)])) == 2
    assert broker.requests == [("orders", 3, 2), ("orders", 5, 2), ("orders", 7, 2)]
    with pytest.raises(UnsupportedBrokerError, match="eligible leader replicas"):
        type("Off", (Adapter,), {"capabilities": lambda self: ClusterCapabilities()})().describe_eligible_leaders(
            [TopicPartition("orders", 3)])
