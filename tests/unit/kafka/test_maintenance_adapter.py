"""kafka/maintenance.py without a cluster: capabilities from ApiVersions and features as each Kafka line reports
them (the values seen on 4.3.0, 4.3.1 and 4.4.0 sandboxes), DescribeLogDirs answers as log dirs, and the
UnregisterBroker request class (kafka-python 3.0 has none)."""

from __future__ import annotations

import io

from airflow_kafka_reassign.kafka.maintenance import capabilities_from, log_dirs_of
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
    assert caps == type(caps)(metadata_version=None)


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
