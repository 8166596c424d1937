"""The Kafka adapter against the real sandbox cluster (5 brokers, 3 racks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka.admin import KafkaAdminClient, NewTopic
from kafka_helpers import wait_until

from airflow_kafka_reassign.core.execution.throttle import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    apply_throttle,
    restore_throttle,
)
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import NewPartitions
from airflow_kafka_reassign.exceptions import ClusterUnreachableError, ConfigurationError, TopicNotFoundError
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin


def create_topic(sandbox, name: str, assignment: list[list[int]], configs: dict[str, str] | None = None) -> None:
    """Create a topic with an explicit replica assignment (kafka-python can; confluent cannot)."""
    kp = KafkaAdminClient(bootstrap_servers=sandbox.bootstrap_servers)
    try:
        kp.create_topics([NewTopic(name, -1, -1, replica_assignments=dict(enumerate(assignment)),
                                   topic_configs=configs or {})])
    finally:
        kp.close()
    wait_until(lambda: _described(sandbox, name) == [tuple(a) for a in assignment], what=f"topic {name} metadata")


def _described(sandbox, name):
    md = AdminClient({"bootstrap.servers": sandbox.bootstrap_servers}).list_topics(name, timeout=10)
    t = md.topics.get(name)
    if t is None or t.error is not None:
        return None
    return [tuple(t.partitions[i].replicas) for i in sorted(t.partitions)]




def produce(sandbox, topic: str, partition: int, megabytes: int) -> None:
    p = Producer({"bootstrap.servers": sandbox.bootstrap_servers, "linger.ms": 20, "acks": "all"})
    chunk = b"x" * 10_000
    for _ in range(megabytes * 100):
        p.produce(topic, chunk, partition=partition)
        p.poll(0)
    assert p.flush(60) == 0


@pytest.fixture
def admin(sandbox):
    with KafkaClusterAdmin(sandbox.client_config(), timeout_s=20) as a:
        yield a


def test_snapshot_matches_the_cluster(sandbox, admin, unique_topic):
    create_topic(sandbox, unique_topic, [[1, 2, 3], [2, 3, 4], [5, 1, 2]],
                 {"min.insync.replicas": "2", "cleanup.policy": "compact"})
    snap = admin.snapshot()
    assert snap.cluster_id
    assert {b.id: b.rack for b in snap.brokers} == {b["id"]: b["rack"] for b in sandbox.info["brokers"]}
    assert len({b.rack for b in snap.brokers}) == 3
    parts = {p.partition: p for p in snap.partitions if p.topic == unique_topic}
    assert [parts[i].replicas for i in range(3)] == [(1, 2, 3), (2, 3, 4), (5, 1, 2)]
    assert [parts[i].leader for i in range(3)] == [1, 2, 5]
    assert all(set(p.isr) == set(p.replicas) for p in parts.values())
    topic = snap.topic(unique_topic)
    assert topic.replication_factor == 3 and topic.partition_count == 3 and not topic.internal
    assert topic.is_compacted and topic.min_insync_replicas == 2
    assert snap.topic("__consumer_offsets").internal if any(
        t.name == "__consumer_offsets" for t in snap.topics) else True


def test_snapshot_can_include_replica_sizes(sandbox, admin, unique_topic):
    create_topic(sandbox, unique_topic, [[1, 2]])
    produce(sandbox, unique_topic, 0, 1)
    snap = admin.snapshot(topics=[unique_topic], include_sizes=True)
    sizes = snap.partitions[0].replica_sizes
    assert set(sizes) == {1, 2} and min(sizes.values()) > 500_000


def test_alter_list_and_cancel_a_throttled_move(sandbox, admin, unique_topic):
    create_topic(sandbox, unique_topic, [[1, 2]])
    produce(sandbox, unique_topic, 0, 20)
    tp = TopicPartition(unique_topic, 0)
    move = Move(topic=unique_topic, partition=0, current_replicas=(1, 2), target_replicas=(3, 4))
    backup = apply_throttle(admin, [move], 200_000)
    try:
        result = admin.alter_reassignments({tp: [3, 4]})
        assert result.failed == () and result.request_version == 1
        inflight = admin.list_reassignments()
        assert tp in inflight
        assert set(inflight[tp].adding_replicas) == {3, 4}
        assert set(inflight[tp].removing_replicas) == {1, 2}
        snap = admin.snapshot(topics=[unique_topic])
        assert snap.partitions[0].reassigning and snap.partitions[0].target_replicas == (3, 4)

        cancelled = admin.cancel_reassignments([tp])
        assert cancelled.failed == ()
        assert tp not in admin.list_reassignments()
        wait_until(lambda: _described(sandbox, unique_topic) == [(1, 2)], what="replicas back to [1, 2]")
        again = admin.cancel_reassignments([tp])
        assert again.results[0].error_code == "NO_REASSIGNMENT_IN_PROGRESS"
    finally:
        restore_throttle(admin, backup)


def test_kip860_guard_refuses_only_the_rf_change_in_one_request(sandbox, admin, unique_topic):
    create_topic(sandbox, unique_topic, [[1, 2], [2, 3]])
    rf_change, valid = TopicPartition(unique_topic, 0), TopicPartition(unique_topic, 1)
    result = admin.alter_reassignments({rf_change: [1, 2, 3], valid: [4, 5]})
    assert result.request_version == 1
    by = result.by_partition()
    assert by[rf_change].error_code == "INVALID_REPLICATION_FACTOR"
    assert by[valid].ok
    wait_until(lambda: not admin.list_reassignments(), what="the valid move to finish")
    # the controller lists the move as done a moment before every broker's metadata shows it
    wait_until(lambda: _described(sandbox, unique_topic) == [(1, 2), (4, 5)], what="the move in the brokers' metadata")

    allowed = admin.alter_reassignments({rf_change: [1, 2, 3]}, allow_replication_factor_change=True)
    assert allowed.failed == ()
    wait_until(lambda: _described(sandbox, unique_topic)[0] == (1, 2, 3), what="RF 3 on partition 0")


def test_kip860_race_plan_from_the_intermediate_replica_set_is_refused(sandbox, admin, unique_topic):
    """The seed's race: [1,2,3] moving to [4,5,1]... described as the union; "preserving" that RF fails."""
    create_topic(sandbox, unique_topic, [[1, 2, 3]])
    produce(sandbox, unique_topic, 0, 10)
    tp = TopicPartition(unique_topic, 0)
    move = Move(topic=unique_topic, partition=0, current_replicas=(1, 2, 3), target_replicas=(4, 5, 3))
    backup = apply_throttle(admin, [move], 100_000)
    try:
        assert admin.alter_reassignments({tp: [4, 5, 3]}).failed == ()
        # the intermediate replica set, once the broker that answers the metadata request has applied the change
        # (10 MB under 100 kB/s: the move lasts far longer than that wait)
        wait_until(lambda: len(_described(sandbox, unique_topic)[0]) == 5, what="the intermediate replica set",
                   timeout=30)
        described = _described(sandbox, unique_topic)[0]
        assert len(described) == 5
        refused = admin.alter_reassignments({tp: list(described)})
        assert refused.results[0].error_code == "INVALID_REPLICATION_FACTOR"
        assert admin.list_reassignments()[tp].target_replicas == (4, 5, 3)
        admin.cancel_reassignments([tp])
    finally:
        restore_throttle(admin, backup)


def test_create_partitions_validate_only_then_real(sandbox, admin, unique_topic):
    create_topic(sandbox, unique_topic, [[1, 2]])
    req = [NewPartitions(topic=unique_topic, total_count=3, assignment=((3, 4), (5, 1)))]
    assert admin.create_partitions(req, validate_only=True)[unique_topic].ok
    assert _described(sandbox, unique_topic) == [(1, 2)]
    assert admin.create_partitions(req)[unique_topic].ok
    wait_until(lambda: _described(sandbox, unique_topic) == [(1, 2), (3, 4), (5, 1)], what="3 partitions")
    shrink = admin.create_partitions([NewPartitions(topic=unique_topic, total_count=2)])
    assert shrink[unique_topic].error_code == "INVALID_PARTITIONS"


def _dynamic_configs(sandbox, brokers, topic):
    ck = AdminClient({"bootstrap.servers": sandbox.bootstrap_servers})
    out = {}
    for res in [ConfigResource(ConfigResource.Type.BROKER, str(b)) for b in brokers] + [
        ConfigResource(ConfigResource.Type.TOPIC, topic)
    ]:
        entries = ck.describe_configs([res])[res].result(20)
        out[(res.restype, res.name)] = sorted(
            (k, e.value) for k, e in entries.items()
            if "throttled" in k and e.source in (1, 2)  # DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG
        )
    return out


def test_throttles_set_then_cleared_leave_configs_exactly_as_before(sandbox, admin, unique_topic):
    create_topic(sandbox, unique_topic, [[1, 2], [2, 3]])
    ck = AdminClient({"bootstrap.servers": sandbox.bootstrap_servers})
    # someone else's values, which must survive
    res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry(LEADER_RATE, "777000", incremental_operation=AlterConfigOpType.SET)])
    ck.incremental_alter_configs([res])[res].result(20)
    res = ConfigResource(ConfigResource.Type.TOPIC, unique_topic, incremental_configs=[
        ConfigEntry(FOLLOWER_REPLICAS, "1:5", incremental_operation=AlterConfigOpType.SET)])
    ck.incremental_alter_configs([res])[res].result(20)
    # a dynamic config reaches the broker that describes it through the metadata log: a moment later under load
    wait_until(lambda: (LEADER_RATE, "777000") in _dynamic_configs(sandbox, [1], unique_topic)[
        (ConfigResource.Type.BROKER, "1")], "broker 1 to show the value set", timeout=30)
    before = _dynamic_configs(sandbox, [1, 2, 3, 4], unique_topic)

    moves = [Move(topic=unique_topic, partition=0, current_replicas=(1, 2), target_replicas=(3, 4))]
    backup = apply_throttle(admin, moves, 1_000_000)
    wait_until(lambda: (FOLLOWER_RATE, "1000000") in _dynamic_configs(sandbox, [4], unique_topic)[
        (ConfigResource.Type.BROKER, "4")], "broker 4 to show the throttle", timeout=30)
    during = _dynamic_configs(sandbox, [1, 2, 3, 4], unique_topic)
    assert (LEADER_RATE, "1000000") in during[(ConfigResource.Type.BROKER, "1")]
    assert (FOLLOWER_RATE, "1000000") in during[(ConfigResource.Type.BROKER, "4")]
    topic_during = dict(during[(ConfigResource.Type.TOPIC, unique_topic)])
    assert topic_during[LEADER_REPLICAS] == "0:1,0:2"
    assert topic_during[FOLLOWER_REPLICAS] == "0:3,0:4,1:5"

    restore_throttle(admin, backup)
    wait_until(lambda: _dynamic_configs(sandbox, [1, 2, 3, 4], unique_topic) == before, "the configs as before",
               timeout=30)
    # leave the broker as the suite found it
    res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry(LEADER_RATE, None, incremental_operation=AlterConfigOpType.DELETE)])
    ck.incremental_alter_configs([res])[res].result(20)


def _gone_for_own_client(sandbox, topic):
    """The test's own client no longer finds ``topic`` (each broker applies a deletion from the metadata log)."""
    ck = AdminClient({"bootstrap.servers": sandbox.bootstrap_servers})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        ck.describe_configs([res])[res].result(20)
    except KafkaException as e:
        return e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    return False


def _not_found(call):
    """The TopicNotFoundError ``call`` raises (``None``: it returned; a broker may apply the deletion a moment late)."""
    try:
        call()
    except TopicNotFoundError as e:
        return e
    return None


def test_a_topic_deleted_under_its_throttles_is_named_and_the_rest_still_set(sandbox, admin, unique_topic):
    """Issue 36: a topic deleted while a run throttled it made the throttle sync raise librdkafka's
    UNKNOWN_TOPIC_OR_PART raw. Describe and set name it (TopicNotFoundError); set still applies the brokers' and
    the other topics' configs, as the test's own client reads back."""
    kept = f"{unique_topic}-kept"
    create_topic(sandbox, unique_topic, [[1, 2], [2, 3]])
    create_topic(sandbox, kept, [[1, 2]])
    ours = {"1": (LEADER_RATE, "555000"), "2": (FOLLOWER_RATE, "555000")}

    def rates_set() -> dict[str, bool]:  # read by the test's own client
        found = _dynamic_configs(sandbox, [1, 2], kept)
        return {b: rate in found[(ConfigResource.Type.BROKER, b)] for b, rate in ours.items()}

    admin.set_throttles({1: {LEADER_RATE: "555000"}, 2: {FOLLOWER_RATE: "555000"}},
                        {unique_topic: {LEADER_REPLICAS: "0:1,1:2"}, kept: {LEADER_REPLICAS: "0:1"}})
    wait_until(lambda: dict(_dynamic_configs(sandbox, [1], unique_topic)[(ConfigResource.Type.TOPIC, unique_topic)])
               .get(LEADER_REPLICAS) == "0:1,1:2", "the throttled replicas set on the topic", timeout=30)
    wait_until(lambda: rates_set() == {"1": True, "2": True}, "the brokers' throttle rates set", timeout=30)

    ck = AdminClient({"bootstrap.servers": sandbox.bootstrap_servers})
    ck.delete_topics([unique_topic])[unique_topic].result(30)
    wait_until(lambda: _gone_for_own_client(sandbox, unique_topic), f"{unique_topic} to be gone", timeout=30)

    described = wait_until(lambda: _not_found(lambda: admin.describe_throttles([1, 2], [unique_topic, kept])),
                           "describe_throttles to see the deletion", timeout=30)
    assert described.topics == (unique_topic,) and described.code == "UNKNOWN_TOPIC_OR_PARTITION"
    assert unique_topic in str(described) and kept not in str(described)

    restore = {1: {LEADER_RATE: None}, 2: {FOLLOWER_RATE: None}}
    set_error = wait_until(lambda: _not_found(lambda: admin.set_throttles(
        restore, {unique_topic: {LEADER_REPLICAS: None}, kept: {LEADER_REPLICAS: None}})),
        "set_throttles to see the deletion", timeout=30)
    assert set_error.topics == (unique_topic,) and unique_topic in str(set_error)
    # read back by the test's own client: the brokers' rates and the kept topic's list were removed all the same
    wait_until(lambda: rates_set() == {"1": False, "2": False}, "the brokers' throttle rates removed", timeout=30)
    assert _dynamic_configs(sandbox, [1], kept)[(ConfigResource.Type.TOPIC, kept)] == []
    ck.delete_topics([kept])[kept].result(30)


def test_reference_tool_generate_output_parses_and_our_plan_executes(sandbox, admin, unique_topic, tmp_path: Path):
    create_topic(sandbox, unique_topic, [[1, 2], [2, 3], [3, 4]])
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": unique_topic}]}))
    out = sandbox.reassign_tool(["--generate", "--topics-to-move-json-file", str(topics_file),
                                 "--broker-list", "1,2,3,4,5"], check=True).stdout
    proposed = out.split("Proposed partition reassignment configuration")[1].strip().splitlines()[0]
    current = out.split("Current partition replica assignment")[1].strip().splitlines()[0]
    assert len(ReassignmentPlan.from_kafka_json(proposed)) == 3
    # the tool prints the current assignment with real log_dirs paths: readable, never executed
    assert len(ReassignmentPlan.from_kafka_json(current, log_dirs="ignore")) == 3
    with pytest.raises(ValueError, match="log_dirs"):
        ReassignmentPlan.from_kafka_json(current)

    plan = ReassignmentPlan.from_moves([
        Move(topic=unique_topic, partition=0, current_replicas=(1, 2), target_replicas=(5, 1)),
        Move(topic=unique_topic, partition=2, current_replicas=(3, 4), target_replicas=(4, 2)),
    ])
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.to_kafka_json())
    sandbox.reassign_tool(["--execute", "--reassignment-json-file", str(plan_file)], check=True)

    def verified():
        res = sandbox.reassign_tool(["--verify", "--reassignment-json-file", str(plan_file)], check=True)
        return "is still in progress" not in res.stdout and res.stdout.count("is completed") == 2

    wait_until(verified, what="--verify to report both moves completed", every=1.0)
    assert _described(sandbox, unique_topic) == [(5, 1), (2, 3), (4, 2)]


def test_preferred_leader_election(sandbox, admin, unique_topic):
    create_topic(sandbox, unique_topic, [[1, 2]])
    assert admin.alter_reassignments({TopicPartition(unique_topic, 0): [2, 1]}).failed == ()
    wait_until(lambda: not admin.list_reassignments([TopicPartition(unique_topic, 0)]), what="move done")
    results = admin.elect_preferred_leaders([TopicPartition(unique_topic, 0)])
    assert all(r.ok for r in results)
    wait_until(lambda: admin.snapshot(topics=[unique_topic]).partitions[0].leader == 2, what="leader 2")


def test_missing_bootstrap_servers_is_a_clear_error():
    with pytest.raises(ConfigurationError, match="bootstrap.servers"):
        KafkaClusterAdmin({"security.protocol": "PLAINTEXT"})


@pytest.mark.timeout(60)  # a hang fails the test; the error must come from our own timeout
def test_unreachable_cluster_fails_within_the_timeout_naming_the_servers():
    from airflow_kafka_reassign.sandbox.processes import free_ports

    port = free_ports(1)[0]
    with pytest.raises(ClusterUnreachableError, match=f"127.0.0.1:{port}"), \
            KafkaClusterAdmin({"bootstrap.servers": f"127.0.0.1:{port}"}, timeout_s=3) as a:
        a.snapshot()


def test_a_long_lived_admin_survives_the_restart_of_the_broker_it_routes_to(sandbox):
    """kafka-python remembers one broker as 'the controller'; when that broker stops (a rolling
    restart during a long wait), the adapter retries with fresh metadata instead of failing."""
    a = KafkaClusterAdmin(sandbox.client_config(), timeout_s=30)
    try:
        a.list_reassignments()
        routed = a._kp._controller_id  # noqa: SLF001 (the state this test is about)
        assert routed in sandbox.broker_ids
        sandbox.stop_broker(routed)
        try:
            assert isinstance(a.list_reassignments(), dict)
            result = a.cancel_reassignments([TopicPartition("no-such-topic-for-cancel", 0)])
            assert len(result.results) == 1
        finally:
            sandbox.start_broker(routed)
    finally:
        a.close()
