"""core/maintenance/growth.py: the growth guards, placement, KIP-409 placeholders and the heal step (in-memory fake)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from pydantic import ValidationError

from airflow_kafka_reassign.core.maintenance.growth import (
    SNAPSHOT_RETRIES,
    SNAPSHOT_RETRY_S,
    GrowthRequest,
    assess_heal,
    grow_partitions,
    plan_growth,
    plan_heal,
    read_heal_targets,
    update_heal_targets,
)
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import TopicResult
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.testing import FakeClusterAdmin

RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"}


def cluster(**topics):
    return FakeClusterAdmin.build(RACKS, topics)


def by_topic(outcome):
    return {t.topic: t for t in outcome.topics}


def partitions_of(fake, topic):
    return {tp.partition: r for tp, r in fake.replicas.items() if tp.topic == topic}


# -- internal topics (KAFKA-20029) ------------------------------------------------------------


def test_internal_topics_are_refused_in_a_batch_while_the_normal_topic_grows():
    fake = cluster(orders=[[1, 2], [2, 3]], __consumer_offsets=[[1, 2, 3]] * 3, __transaction_state=[[2, 3, 4]] * 3)
    out = by_topic(grow_partitions(fake, GrowthRequest(
        targets={"orders": 4, "__consumer_offsets": 6, "__transaction_state": 6})))
    assert out["orders"].status == "created" and len(partitions_of(fake, "orders")) == 4
    for name in ("__consumer_offsets", "__transaction_state"):
        assert out[name].status == "refused" and out[name].refusal == "internal-topic"
        assert "KAFKA-20029" in out[name].reason and "allow_internal_topic_partition_increase=True" in out[name].reason
        assert len(partitions_of(fake, name)) == 3
    assert "hash(id) % partition count" in out["__consumer_offsets"].reason


def test_a_coordinator_topic_that_does_not_exist_yet_is_refused_as_internal():
    fake = cluster(orders=[[1, 2]])
    t = grow_partitions(fake, GrowthRequest(targets={"__transaction_state": 60}), sleep=lambda _: None).topics[0]
    assert t.refusal == "internal-topic" and t.partitions_before is None


def test_share_group_state_is_refused_even_if_kafka_does_not_flag_it():
    fake = cluster(__share_group_state=[[1, 2]])
    fake.topics["__share_group_state"] = fake.topics["__share_group_state"].model_copy(update={"internal": False})
    out = grow_partitions(fake, GrowthRequest(targets={"__share_group_state": 2}))
    assert out.topics[0].refusal == "internal-topic" and "coordinator topic" in out.topics[0].reason


def test_a_topic_kafka_marks_internal_is_refused():
    fake = cluster(special=[[1, 2]])
    fake.topics["special"] = fake.topics["special"].model_copy(update={"internal": True})
    out = grow_partitions(fake, GrowthRequest(targets={"special": 2}))
    assert out.topics[0].refusal == "internal-topic" and "Kafka marks it internal" in out.topics[0].reason


@pytest.mark.parametrize(
    ("extra", "pattern", "why"),
    [(("connect-offsets",), None, "extra_internal_topics"), ((), r"connect-.*", "internal_topic_pattern")],
)
def test_extra_internal_topics_by_name_or_pattern(extra, pattern, why):
    fake = cluster(**{"connect-offsets": [[1, 2]], "orders": [[1, 2]]})
    out = by_topic(grow_partitions(fake, GrowthRequest(
        targets={"connect-offsets": 3, "orders": 3}, extra_internal_topics=extra, internal_topic_pattern=pattern)))
    assert out["connect-offsets"].refusal == "internal-topic" and why in out["connect-offsets"].reason
    assert out["orders"].status == "created"


def test_the_pattern_must_match_the_whole_name():
    fake = cluster(**{"my-connect-offsets": [[1, 2]]})
    out = grow_partitions(fake, GrowthRequest(targets={"my-connect-offsets": 2}, internal_topic_pattern="connect-.*"))
    assert out.topics[0].status == "created"


def test_the_override_lets_an_internal_topic_grow_with_the_loud_warning():
    fake = cluster(__consumer_offsets=[[1, 2, 3]] * 3)
    fake.topic_configs["__consumer_offsets"] = {"cleanup.policy": "compact"}
    logged = []
    out = grow_partitions(
        fake, GrowthRequest(targets={"__consumer_offsets": 5}, allow_internal_topic_partition_increase=True),
        log=lambda level, msg: logged.append((level, msg)),
    )
    t = out.topics[0]
    assert t.status == "created" and len(partitions_of(fake, "__consumer_offsets")) == 5
    loud = [m for level, m in logged if level == "warning" and "GROWING INTERNAL TOPIC" in m]
    assert len(loud) == 1 and "hash % 3 to hash % 5" in loud[0] and "split brain" in loud[0]
    assert any("GROWING INTERNAL TOPIC" in w for w in t.warnings)


# -- compacted topics, key re-mapping -------------------------------------------------------------


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact"])
def test_compacted_topics_are_refused_unless_allowed(policy):
    fake = cluster(users=[[1, 2]])
    fake.topic_configs["users"] = {"cleanup.policy": policy}
    refused = grow_partitions(fake, GrowthRequest(targets={"users": 2})).topics[0]
    assert refused.status == "refused" and refused.refusal == "compacted-topic"
    assert "allow_compacted=True" in refused.reason and len(partitions_of(fake, "users")) == 1
    allowed = grow_partitions(fake, GrowthRequest(targets={"users": 2}, allow_compacted=True)).topics[0]
    assert allowed.status == "created"


def test_every_growing_topic_is_warned_that_keys_move():
    fake = cluster(a=[[1, 2]], b=[[2, 3]] * 4)
    out = by_topic(grow_partitions(fake, GrowthRequest(targets={"a": 3, "b": 6})))
    assert any("hash(key) % 3" in w and "hash(key) % 1" in w for w in out["a"].warnings)
    assert any("hash(key) % 6" in w and "hash(key) % 4" in w for w in out["b"].warnings)


# -- never shrink, idempotent ---------------------------------------------------------------------


def test_shrinking_is_refused_and_an_equal_count_is_a_no_op():
    fake = cluster(orders=[[1, 2]] * 4, same=[[1, 2]] * 2)
    out = by_topic(grow_partitions(fake, GrowthRequest(targets={"orders": 2, "same": 2})))
    assert out["orders"].status == "refused" and out["orders"].refusal == "shrink"
    assert "cannot" in out["orders"].reason and len(partitions_of(fake, "orders")) == 4
    assert out["same"].status == "no-op" and out["same"].ok


def test_repeating_a_finished_growth_is_a_no_op():
    fake = cluster(orders=[[1, 2], [2, 3]])
    first = grow_partitions(fake, GrowthRequest(targets={"orders": 5}))
    after_first = partitions_of(fake, "orders")
    second = grow_partitions(fake, GrowthRequest(targets={"orders": 5}))
    assert first.topics[0].status == "created" and second.topics[0].status == "no-op"
    assert partitions_of(fake, "orders") == after_first


def test_an_unknown_topic_is_refused_and_the_others_proceed():
    fake = cluster(orders=[[1, 2]])
    waits: list[float] = []
    out = by_topic(grow_partitions(fake, GrowthRequest(targets={"orders": 2, "nope": 3}), sleep=waits.append))
    assert out["nope"].refusal == "unknown-topic" and out["orders"].status == "created"
    assert waits == [SNAPSHOT_RETRY_S] * SNAPSHOT_RETRIES  # it looked again before refusing


def test_a_topic_created_a_moment_ago_is_found_on_a_second_look():
    """A new topic not yet known to every broker is missing from a snapshot (its configs could
    not be read): growth takes the snapshot again instead of refusing it as unknown."""
    fake = cluster(orders=[[1, 2]], fresh=[[2, 3]])
    full = fake.snapshot
    looks: list[int] = []

    def first_without_fresh(**kwargs):
        snap = full(**kwargs)
        looks.append(1)
        if len(looks) == 1:
            return snap.model_copy(update={"topics": tuple(t for t in snap.topics if t.name != "fresh"),
                                           "partitions": tuple(p for p in snap.partitions if p.topic != "fresh")})
        return snap

    fake.snapshot = first_without_fresh  # type: ignore[method-assign]
    waits: list[float] = []
    out = by_topic(grow_partitions(fake, GrowthRequest(targets={"fresh": 3}), sleep=waits.append))
    assert out["fresh"].status == "created" and len(partitions_of(fake, "fresh")) == 3
    assert waits == [SNAPSHOT_RETRY_S] and len(looks) == 2


# -- placement ------------------------------------------------------------------------------------


def test_new_partitions_keep_the_rf_spread_racks_and_go_to_the_least_loaded_brokers():
    # the topic is even over all 5 brokers; brokers 1 and 2 carry a heavy ballast topic
    fake = cluster(t=[[1, 2], [2, 3], [3, 4], [4, 5], [5, 1]], ballast=[[1, 2]] * 30)
    out = grow_partitions(fake, GrowthRequest(targets={"t": 7})).topics[0]
    new = [partitions_of(fake, "t")[p] for p in (5, 6)]
    assert out.new_partitions == {5: new[0], 6: new[1]}
    assert all(len(r) == 2 for r in new)  # the topic's RF
    assert not {b for r in new for b in r} & {1, 2}  # the loaded brokers get nothing
    assert all(len({RACKS[b] for b in r}) == 2 for r in new)  # two racks each
    assert new[0][0] != new[1][0]  # preferred leaders spread


def test_the_topic_stays_within_a_spread_of_2_even_when_one_broker_is_much_emptier():
    fake = FakeClusterAdmin.build({1: None, 2: None, 3: None, 4: None},
                                  {"t": [[1, 2], [3, 4]], "ballast": [[1, 2], [2, 3], [3, 1]] * 20})
    grow_partitions(fake, GrowthRequest(targets={"t": 10}))
    counts = Counter(b for r in partitions_of(fake, "t").values() for b in r)
    assert max(counts.values()) - min(counts.values()) <= 2
    assert counts[4] == max(counts.values())  # the empty broker takes the most it may


def test_rf3_on_3_racks_puts_one_replica_per_rack_and_leaders_rotate():
    fake = cluster(t=[[1, 2, 3]])
    grow_partitions(fake, GrowthRequest(targets={"t": 7}))
    new = [partitions_of(fake, "t")[p] for p in range(1, 7)]
    assert all(sorted(RACKS[b] for b in r) == ["r1", "r2", "r3"] for r in new)
    leaders = Counter(r[0] for r in new)
    assert max(leaders.values()) - min(leaders.values()) <= 1 and len(leaders) == 5


def test_rack_unaware_placement_is_available():
    fake = cluster(t=[[1, 2, 3]])
    plan = plan_growth(fake.snapshot(), GrowthRequest(targets={"t": 2}, rack_aware=False))
    assert len(plan.topics[0].assignment[0]) == 3


def test_brokers_with_and_without_racks_place_without_rack_awareness_with_a_warning():
    fake = FakeClusterAdmin.build({1: "r1", 2: None, 3: "r2"}, {"t": [[1, 2]]})
    plan = plan_growth(fake.snapshot(), GrowthRequest(targets={"t": 2}))
    assert plan.topics[0].decision == "grow" and any("broker.rack" in w for w in plan.warnings)


def test_mixed_replication_factors_use_the_largest_with_a_warning():
    fake = cluster(t=[[1, 2, 3], [2, 3]])
    t = plan_growth(fake.snapshot(), GrowthRequest(targets={"t": 3})).topics[0]
    assert t.replication_factor == 3 and len(t.assignment[0]) == 3
    assert any("different replication factors" in w for w in t.warnings)


# -- under-replicated creation (KIP-409) -----------------------------------------------------------


def three_brokers_one_down(min_isr="2"):
    fake = FakeClusterAdmin.build({1: None, 2: None, 3: None}, {"t": [[1, 2, 3], [2, 3, 1], [3, 1, 2]]})
    fake.topic_configs["t"] = {"min.insync.replicas": min_isr}
    fake.down = {3}
    return fake


def test_fewer_live_brokers_than_the_rf_is_refused_by_default():
    fake = three_brokers_one_down()
    t = grow_partitions(fake, GrowthRequest(targets={"t": 5})).topics[0]
    assert t.status == "refused" and t.refusal == "under-replicated"
    assert "allow_under_replicated=True" in t.reason and len(partitions_of(fake, "t")) == 3


def test_allowed_under_replicated_growth_places_live_replicas_first_and_records_heal_targets(tmp_path):
    fake = three_brokers_one_down()
    path = tmp_path / "heal" / "targets.json"
    out = grow_partitions(fake, GrowthRequest(targets={"t": 5}, allow_under_replicated=True),
                          heal_targets_path=path)
    t = out.topics[0]
    assert t.status == "created"
    for p in (3, 4):
        replicas = partitions_of(fake, "t")[p]
        assert len(replicas) == 3 and replicas[-1] == 3 and set(replicas[:2]) == {1, 2}
    assert t.under_replicated == {"t-3": 3, "t-4": 3} == out.heal_targets
    assert t.offline_replicas == {"t-3": (3,), "t-4": (3,)}
    assert json.loads(path.read_text()) == {"t-3": 3, "t-4": 3} == read_heal_targets(path)
    assert out.heal_targets_path == str(path)
    assert out.summary()["heal_targets"] == {"t-3": 3, "t-4": 3}


def test_under_replicated_needs_min_isr_live_brokers():
    fake = three_brokers_one_down(min_isr="3")
    fake.down = {2, 3}
    t = grow_partitions(fake, GrowthRequest(targets={"t": 4}, allow_under_replicated=True),
                        validate_only=True).topics[0]
    assert t.refusal == "too-few-live-brokers" and "min(min.insync.replicas=3, RF=3) = 3" in t.reason


def test_under_replicated_with_min_isr_below_the_live_count_grows():
    fake = three_brokers_one_down(min_isr="1")
    fake.down = {2, 3}
    t = grow_partitions(fake, GrowthRequest(targets={"t": 4}, allow_under_replicated=True),
                        validate_only=True).topics[0]
    assert t.status == "validated" and t.new_partitions[3][0] == 1 and set(t.new_partitions[3]) == {1, 2, 3}


def test_allow_under_replicated_needs_a_heal_targets_path():
    fake = three_brokers_one_down()
    with pytest.raises(ConfigurationError, match="heal_targets_path"):
        grow_partitions(fake, GrowthRequest(targets={"t": 5}, allow_under_replicated=True))
    # validate_only writes nothing, so it needs no path
    t = grow_partitions(fake, GrowthRequest(targets={"t": 5}, allow_under_replicated=True), validate_only=True)
    assert t.topics[0].status == "validated"


# -- validate_only, Kafka errors --------------------------------------------------------------------


def test_validate_only_checks_everything_and_creates_nothing(tmp_path):
    fake = three_brokers_one_down()
    path = tmp_path / "heal.json"
    out = grow_partitions(fake, GrowthRequest(targets={"t": 5}, allow_under_replicated=True),
                          validate_only=True, heal_targets_path=path)
    t = out.topics[0]
    assert t.status == "validated" and t.partitions_after == 3 and set(t.new_partitions) == {3, 4}
    assert len(partitions_of(fake, "t")) == 3 and not path.exists()
    assert out.heal_targets == {} and out.heal_targets_path is None and out.validate_only


class FailingFake(FakeClusterAdmin):
    """Kafka refuses one topic's CreatePartitions."""

    fail_topic = "bad"

    def create_partitions(self, requests, *, validate_only=False):
        ok = [r for r in requests if r.topic != self.fail_topic]
        out = super().create_partitions(ok, validate_only=validate_only)
        for r in requests:
            if r.topic == self.fail_topic:
                out[r.topic] = TopicResult(topic=r.topic, error_code="INVALID_REPLICA_ASSIGNMENT", error="no")
        return out


def test_a_topic_kafka_refuses_fails_alone_and_leaves_no_heal_target(tmp_path):
    base = FakeClusterAdmin.build({1: None, 2: None, 3: None}, {"bad": [[1, 2, 3]], "good": [[1, 2, 3]]})
    fake = FailingFake(base.brokers, base.topics, base.replicas)
    fake.down = {3}
    path = tmp_path / "heal.json"
    update_heal_targets(path, add={"older-0": 3})
    out = by_topic(grow_partitions(fake, GrowthRequest(targets={"bad": 2, "good": 2}, allow_under_replicated=True),
                                   heal_targets_path=path))
    assert out["bad"].status == "failed" and out["bad"].error_code == "INVALID_REPLICA_ASSIGNMENT"
    assert "no partition of this topic was created" in out["bad"].reason
    assert out["good"].status == "created"
    assert read_heal_targets(path) == {"older-0": 3, "good-1": 3}


# -- request validation, the file -----------------------------------------------------------------


@pytest.mark.parametrize("targets", [{}, {"t": 0}, {"t": True}, {"t": "3"}, {"": 2}, [("t", 2)]])
def test_invalid_targets_are_refused_with_the_field_named(targets):
    with pytest.raises(ValidationError, match="targets|topic name"):
        GrowthRequest(targets=targets)


def test_an_invalid_pattern_is_refused():
    with pytest.raises(ValidationError, match="internal_topic_pattern"):
        GrowthRequest(targets={"t": 2}, internal_topic_pattern="(")


def test_heal_targets_file_merges_keeps_the_larger_rf_and_rejects_bad_content(tmp_path):
    path = tmp_path / "h.json"
    assert read_heal_targets(path) == {}
    update_heal_targets(path, add={"a-0": 2, "b-1": 3})
    assert update_heal_targets(path, add={"a-0": 3, "b-1": 2}, remove=["zzz-0"]) == {"a-0": 3, "b-1": 3}
    assert update_heal_targets(path, remove=["a-0"]) == {"b-1": 3}
    path.write_text("[1, 2]")
    with pytest.raises(ConfigurationError, match="must be a JSON object"):
        read_heal_targets(path)
    path.write_text("{oops")
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        read_heal_targets(path)


# -- heal -------------------------------------------------------------------------------------------


def test_heal_assessment_classifies_every_target():
    fake = FakeClusterAdmin.build({1: None, 2: None, 3: None, 4: None},
                                  {"t": [[1, 2, 3], [1, 2], [2, 3, 4], [3, 4, 1]]})
    fake.down = {4}
    a = assess_heal(fake.snapshot(), {"t-0": 3, "t-1": 3, "t-2": 3, "gone-0": 3})
    assert a.states == {"t-0": "healed", "t-1": "short", "t-2": "waiting-for-broker", "gone-0": "missing"}
    assert a.waiting_for == {"t-2": (4,)}
    with pytest.raises(ConfigurationError, match=r"broker\(s\) \[4\] that are not running.*remove-brokers"):
        plan_heal(fake.snapshot(), {"t-2": 3})


def test_heal_plan_adds_replicas_to_exactly_the_short_partitions():
    fake = FakeClusterAdmin.build(RACKS, {"t": [[1, 2, 3], [1, 2], [2, 4], [3, 4, 5]], "other": [[1, 2]] * 3})
    assessment, result = plan_heal(fake.snapshot(), {"t-0": 3, "t-1": 3, "t-2": 3})
    assert assessment.of("short") == ["t-1", "t-2"] and assessment.of("healed") == ["t-0"]
    moves = result.plan.by_partition()
    assert set(moves) == {TopicPartition("t", 1), TopicPartition("t", 2)}
    for m in moves.values():
        assert m.allow_rf_change and len(m.target_replicas) == 3
        assert set(m.current_replicas) <= set(m.target_replicas)  # only adds a replica
        assert len({RACKS[b] for b in m.target_replicas}) == 3  # rack-aware


def test_heal_with_nothing_short_gives_an_empty_plan_and_with_nothing_present_none():
    fake = FakeClusterAdmin.build(RACKS, {"t": [[1, 2, 3]]})
    assessment, result = plan_heal(fake.snapshot(), {"t-0": 3})
    assert assessment.of("healed") == ["t-0"] and len(result.plan) == 0
    assert plan_heal(fake.snapshot(), {"gone-3": 3}) == (assess_heal(fake.snapshot(), {"gone-3": 3}), None)


def test_heal_after_an_under_replicated_growth_end_to_end(tmp_path):
    fake = three_brokers_one_down()
    path = tmp_path / "heal.json"
    grow_partitions(fake, GrowthRequest(targets={"t": 4}, allow_under_replicated=True), heal_targets_path=path)
    targets = read_heal_targets(path)
    assert assess_heal(fake.snapshot(), targets).of("waiting-for-broker") == ["t-3"]
    fake.down = set()  # the broker is back and has copied its replica
    assessment, result = plan_heal(fake.snapshot(), targets)
    assert assessment.of("healed") == ["t-3"] and len(result.plan) == 0
