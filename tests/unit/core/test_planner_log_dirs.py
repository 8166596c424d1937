"""The goals on log dirs: remove-disks (the removed dirs end empty; the broker's other dirs first, other brokers when
it has no room; bad input refused by name before anything is planned or sent) and rebalance-disks."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.planner.goals import PlanRequest
from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable, plan_log_dirs
from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import TopicPartitionReplica as R
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.testing import FakeClusterAdmin

MB = 1_000_000
D1, D2 = "/kafka/1/data-1", "/kafka/1/data-2"


def cluster(**kwargs) -> FakeClusterAdmin:
    """4 brokers on racks a, b, c, a with 2 log dirs each; topic t: 4 partitions of 10, 20, 30, 40 MB on broker 1's
    second dir, u-0 (5 MB) in its first."""
    f = FakeClusterAdmin.build({1: "a", 2: "b", 3: "c", 4: "a"},
                               {"t": [[1, 2], [2, 1], [1, 3], [3, 1]], "u": [[1, 2]]}, log_dirs=2, **kwargs)
    for p in range(4):
        f.sizes[TopicPartition("t", p)] = {1: (p + 1) * 10 * MB, 2: 1, 3: 1}
        f.replica_dirs[R("t", p, 1)] = D2
    f.sizes[TopicPartition("u", 0)] = {1: 5 * MB, 2: 5 * MB}
    return f


def plan(f: FakeClusterAdmin, **request):
    request.setdefault("goal", "remove-disks")
    return plan_log_dirs(f.snapshot(include_sizes=True), LogDirTable.of(f.log_dirs(None)), PlanRequest(**request))


def test_a_removed_dir_goes_to_the_brokers_other_dir_as_kafkas_log_dirs():
    f = cluster()
    result = plan(f, log_dirs=[f"1:{D2}"])
    moves = {m.tp: m for m in result.plan.moves}
    assert set(moves) == {TopicPartition("t", p) for p in range(4)}
    for m in moves.values():
        assert m.target_replicas == m.current_replicas and m.pinned_dirs == {1: D1}
    assert moves[TopicPartition("t", 1)].log_dirs == ("any", D1)  # aligned with the replicas, "any" elsewhere
    report = result.log_dirs
    assert (report.intra_moves, report.intra_bytes, report.cross_moves) == (4, 100 * MB, 0)
    assert report.dirs_before[f"1:{D2}"] == 100 * MB and report.dirs_after[f"1:{D2}"] == 0
    assert report.dirs_after[f"1:{D1}"] == 105 * MB
    assert result.replica_moves == 0 and result.lower_bound == 0
    assert '"log_dirs":["any","/kafka/1/data-1"]' in result.plan.to_kafka_json()
    assert result.summary()["log_dirs"]["intra_moves"] == 4


def test_without_room_on_the_broker_the_replica_goes_to_another_broker_of_the_same_rack_first():
    f = cluster()
    f.dir_total[D1] = 36 * MB  # 5 MB used: room for 25.6 MB up to disk_cap 0.85 -> only t-1 (20 MB) fits
    result = plan(f, log_dirs=[f"1:{D2}"])
    moves = {m.tp: m for m in result.plan.moves}
    assert moves[TopicPartition("t", 1)].pinned_dirs == {1: D1}  # the largest that fits after t-3, t-2 did not
    for p, current in ((0, (1, 2)), (2, (1, 3)), (3, (3, 1))):
        m = moves[TopicPartition("t", p)]
        assert 1 not in m.target_replicas and m.log_dirs is None and len(m.target_replicas) == 2
        assert m.target_replicas == tuple(4 if b == 1 else b for b in current)  # broker 4: rack a, as broker 1
    assert result.log_dirs.cross_moves == 3 and result.replica_moves == 3
    assert result.lower_bound == 3  # 100 MB leave, 25.6 MB of room: at least 40 + 30 + 20 MB must go elsewhere
    assert result.after.rack_violations == result.before.rack_violations


def test_a_cordoned_or_offline_dir_takes_nothing_and_another_broker_does():
    f = cluster()
    f.set_cordons({1: D1})
    result = plan(f, log_dirs=[f"1:{D2}"])
    assert all(1 not in m.target_replicas for m in result.plan.moves)
    assert any("keeps no usable log dir" in w for w in result.warnings)


@pytest.mark.parametrize(("entry", "message"), [
    ("9:/kafka/9/data-1", "broker 9 is not in the cluster \\(its brokers: \\[1, 2, 3, 4\\]\\); check the broker id"),
    ("1:/kafka/1/data-3", "broker 1 has no such log dir \\(its log dirs: \\['/kafka/1/data-1', '/kafka/1/data-2'\\]\\)"),
    ("1:/kafka/2/data-2", 'it is a log dir of broker 2: write "2:/kafka/2/data-2"'),
])
def test_bad_input_is_refused_by_name_before_anything(entry, message):
    with pytest.raises(ConfigurationError, match=f"{message}.*Nothing was sent"):
        plan(cluster(), log_dirs=[entry])


def test_the_last_dir_of_a_broker_with_nowhere_to_go_is_refused_naming_the_replicas():
    f = FakeClusterAdmin.build({1: "a", 2: "b"}, {"t": [[1, 2], [2, 1]]}, log_dirs=1)
    f.sizes = {TopicPartition("t", p): {1: MB, 2: MB} for p in (0, 1)}
    with pytest.raises(ConfigurationError, match=(
            r"broker 1: 2 replica\(s\) of \['/kafka/1/data-1'\] \(t-0 1.0 MB, t-1 1.0 MB\) have nowhere to go: they are "
            r"in the broker's last usable log dir, and no other broker can take them .*Nothing was sent")):
        plan(f, log_dirs=["1:/kafka/1/data-1"])


def test_a_broker_that_did_not_report_its_log_dirs_and_bad_entries():
    f = cluster()
    f.log_dirs_unanswered.add(1)
    with pytest.raises(ConfigurationError, match="broker 1 did not report its log dirs"):
        plan(f, log_dirs=[f"1:{D2}"])
    with pytest.raises(ValueError, match="is not BROKER:/ABSOLUTE/PATH"):
        PlanRequest(goal="remove-disks", log_dirs=["1:data-2"])
    with pytest.raises(ValueError, match="goal remove-disks needs log_dirs"):
        PlanRequest(goal="remove-disks")


def test_a_partition_being_reassigned_in_the_removed_dir_is_refused():
    f = cluster()
    f.alter_reassignments({TopicPartition("t", 0): [4, 2]})
    with pytest.raises(ConfigurationError, match="partition t-0 in log dir /kafka/1/data-2 of broker 1 is being "
                                                 "reassigned"):
        plan(f, log_dirs=[f"1:{D2}"])


def test_rebalance_disks_evens_out_the_bytes_between_a_brokers_dirs():
    f = cluster()
    for d in (D1, D2):
        f.dir_total[d] = 1000 * MB
    result = plan(f, goal="rebalance-disks")
    pins = {m.tp: m.pinned_dirs for m in result.plan.moves}
    # 5 and 100 MB: 52.5 each is even; t-3 (40 MB) leaves them 7.5 MB apart from it, within 2% of 1000 MB
    assert pins == {TopicPartition("t", 3): {1: D1}}
    after = result.log_dirs.dirs_after
    assert (after[f"1:{D1}"], after[f"1:{D2}"]) == (45 * MB, 60 * MB)
    assert result.plan.moves[0].log_dirs == ("any", D1)  # t-3 is on [3, 1]
    assert not plan(f, goal="rebalance-disks", disk_tolerance=0.05).plan.moves
    for d in (D1, D2):
        f.dir_total[d] = 100 * MB  # within 2% of 100 MB: 40, then 10 MB (55 / 50 MB)
    assert {m.tp.partition for m in plan(f, goal="rebalance-disks").plan.moves} == {3, 0}


def test_a_removed_dir_of_another_broker_takes_nothing():
    f = cluster()
    f.dir_total[D1] = 36 * MB  # broker 1's other dir takes only t-1 (see above)
    f.dir_total["/kafka/4/data-1"] = MB  # broker 4 has room only in the dir it removes too
    result = plan(f, log_dirs=[f"1:{D2}", "4:/kafka/4/data-2"])
    targets = {m.tp.partition: m.target_replicas for m in result.plan.moves if m.log_dirs is None}
    assert set(targets) == {0, 2, 3} and not any(4 in t for t in targets.values())
    assert result.after.rack_violations == result.before.rack_violations
