"""The disk guard (core/guards/disk.py): a move is submitted only if every broker it adds keeps the reserve free."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, step
from airflow_kafka_reassign.core.guards.disk import DiskReserve, DiskSpace, fit_batch
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.testing import FakeClusterAdmin

GB = 10**9


def mv(topic: str, p: int, cur: tuple[int, ...], tgt: tuple[int, ...]) -> Move:
    return Move(topic=topic, partition=p, current_replicas=cur, target_replicas=tgt)


def disk(usable: int, total: int = 100 * GB) -> DiskSpace:
    return DiskSpace.one(total, usable)


@pytest.mark.parametrize(("value", "parsed"), [
    ("5%", DiskReserve(ratio=0.05)), ("20GiB", DiskReserve(bytes=20 * 2**30)), ("500 GB", DiskReserve(bytes=500 * GB)),
    ("20G", DiskReserve(bytes=20 * GB)), (2**30, DiskReserve(bytes=2**30)), ("0", DiskReserve(bytes=0)),
    (0, DiskReserve(bytes=0)), ("0.5%", DiskReserve(ratio=0.005)), (None, None), ("off", None),
])
def test_the_reserve_is_a_share_or_a_size(value, parsed):
    assert DiskReserve.parse(value) == parsed


@pytest.mark.parametrize("value", ["-1", -5, "100%", "-2%", "lots", True, "5 parsecs", float("inf"), float("nan"),
                                   "inf", 0.05, "0.05"])
def test_a_bad_reserve_is_refused_naming_the_forms(value):
    with pytest.raises(ConfigurationError, match="disk_reserve=.*a share of its disk.*a size.*off"):
        ExecutionOptions(disk_reserve=value)


def test_a_fraction_meant_as_a_share_is_refused_with_the_share_to_write():
    with pytest.raises(ConfigurationError, match=r'a share is written with %: "5%"'):
        DiskReserve.parse(0.05)


def test_log_dirs_of_one_volume_are_counted_once():
    shared = DiskSpace.of_dirs([(100 * GB, 40 * GB), (100 * GB, 40 * GB)])  # two log.dirs on one mount
    assert (shared.total_bytes, shared.usable_bytes) == (100 * GB, 40 * GB)
    jbod = DiskSpace.of_dirs([(100 * GB, 40 * GB), (100 * GB, 30 * GB)])
    assert (jbod.total_bytes, jbod.usable_bytes) == (200 * GB, 70 * GB)


A, B, C = (TopicPartition("t", i) for i in range(3))
SIZES = {A: {1: 4 * GB, 2: 4 * GB}, B: {1: 3 * GB, 2: 3 * GB}, C: {1: 2 * GB, 2: 2 * GB}}


@pytest.mark.parametrize(("case", "space", "in_flight", "reserve", "fits", "held"), [
    ("room for all", {3: disk(50 * GB)}, [], DiskReserve(), ["t-0", "t-1", "t-2"], []),
    ("room for the first two", {3: disk(8 * GB)}, [], DiskReserve(), ["t-0", "t-1"], ["t-2"]),
    ("the reserve counts (first fit: t-2 fits after t-1 is held)", {3: disk(8 * GB)}, [], DiskReserve(ratio=0.02),
     ["t-0", "t-2"], ["t-1"]),
    ("what the moves in flight still copy counts",
     {3: disk(8 * GB)}, [mv("u", 0, (1, 2), (3, 2))], DiskReserve(), ["t-0"], ["t-1", "t-2"]),
    ("a replica lands in one volume (JBOD)", {3: DiskSpace.of_dirs([(10 * GB, 3 * GB), (10 * GB, 3 * GB + GB // 5),
                                                                     (10 * GB, 3 * GB + 2 * GB // 5)])},
     [], DiskReserve(), ["t-1", "t-2"], ["t-0"]),
    ("JBOD: each volume keeps its share of a reserve larger than one volume", {3: DiskSpace.of_dirs(
        [(1000 * GB, 900 * GB + i) for i in range(10)])}, [], DiskReserve(ratio=0.15), ["t-0", "t-1", "t-2"], []),
    ("a broker reporting no space is not checked", {}, [], DiskReserve(), ["t-0", "t-1", "t-2"], []),
])
def test_fit_batch(case, space, in_flight, reserve, fits, held):
    sizes = {**SIZES, TopicPartition("u", 0): {1: 5 * GB, 2: 5 * GB, 3: 2 * GB}}  # 3 GB still to copy onto 3
    batch = [mv("t", i, (1, 2), (3, 2)) for i in range(3)]
    fit = fit_batch(batch, in_flight, sizes, space, reserve)
    assert [str(m.tp) for m in fit.fits] == fits, case
    assert sorted(map(str, fit.held)) == held, case


def test_copies_under_way_that_are_not_the_plans_count_too():
    from airflow_kafka_reassign.core.guards.disk import DiskRoom

    foreign = (TopicPartition("x", 0), (3,))  # someone else's reassignment onto broker 3, 4 GB to copy
    room = DiskRoom([foreign], {**SIZES, TopicPartition("x", 0): {1: 4 * GB}}, {3: disk(6 * GB)}, DiskReserve())
    assert room.take(mv("t", 1, (1, 2), (3, 2))) is not None  # 3 GB > 6 - 4
    assert room.take(mv("t", 2, (1, 2), (3, 2))) is None  # 2 GB fits


def test_a_broker_that_did_not_answer_holds_the_moves_onto_it():
    from airflow_kafka_reassign.core.guards.disk import DiskRoom

    room = DiskRoom([], SIZES, {3: disk(50 * GB)}, DiskReserve(), unanswered=[4])
    assert "broker 4 did not answer DescribeLogDirs" in room.take(mv("t", 0, (1, 2), (4, 2)))
    assert room.take(mv("t", 1, (1, 2), (3, 2))) is None


def test_a_held_move_names_the_broker_and_the_numbers():
    fit = fit_batch([mv("t", 0, (1, 2), (3, 2))], [], SIZES, {3: disk(5 * GB)}, DiskReserve(ratio=0.02))
    assert fit.held[A] == "needs 4.0 GB on broker 3: 5.0 GB free, reserve 2.0 GB"
    two = fit_batch([mv("t", 1, (1, 2), (3, 2)), mv("t", 0, (1, 2), (3, 2))], [], SIZES, {3: disk(6 * GB)}, DiskReserve())
    assert two.held[A] == "needs 4.0 GB on broker 3: 6.0 GB free, reserve 0 B, 3.0 GB still to come by copies " \
                          "under way or this batch"


def test_a_move_that_adds_no_broker_always_fits():
    reorder = mv("t", 0, (1, 2), (2, 1))
    assert fit_batch([reorder], [], SIZES, {1: disk(0), 2: disk(0)}, DiskReserve()).fits == [reorder]


# -- in the execution engine ----------------------------------------------------------------------------------


def cluster(usable_on_3: int) -> FakeClusterAdmin:
    f = FakeClusterAdmin.build({1: "r1", 2: "r2", 3: "r3"}, {"t": [[1, 2], [1, 2], [1, 2]]})
    f.sizes.update(SIZES)
    f.disk_total[3] = usable_on_3  # broker 3 holds nothing yet: usable = total
    return f


PLAN_ORDER = ExecutionLimits(order="plan")


def run_step(f, limits=PLAN_ORDER, **kw):
    plan = ReassignmentPlan(moves=tuple(mv("t", i, (1, 2), (3, 2)) for i in range(3)))
    return step(f, plan, limits, ExecutionOptions(**kw), settle_s=0, sleep=lambda s: None)


def test_the_engine_submits_what_fits_and_holds_the_rest():
    f = cluster(8 * GB)
    status = run_step(f, disk_reserve=0)
    assert sorted(map(str, status.submitted)) == ["t-0", "t-1"] and list(status.disk_held) == [C]
    assert "1 wait for disk space" in status.progress_line() and status.blocked is None
    assert status.summary()["disk_held"] == 1 and "t-2" in status.summary()["disk_held_partitions"]


def test_a_held_slot_goes_to_the_next_move_that_fits():
    f = cluster(3 * GB)
    status = run_step(f, ExecutionLimits(max_moves=1, order="plan"), disk_reserve=0)  # t-0 (4 GB) is first, t-1 (3 GB) fits
    assert [str(tp) for tp in status.submitted] == ["t-1"] and A in status.disk_held


def test_nothing_in_flight_and_nothing_fits_refuses_the_run_naming_the_broker():
    f = cluster(1 * GB)
    status = run_step(f, disk_reserve="0")
    assert status.submitted == [] and f.alter_requests == []
    assert status.blocked.startswith("disk guard: 3 move(s) wait for disk space: t-0: needs 4.0 GB on broker 3")
    assert "lower disk_reserve (now 0 B)" in status.blocked


def test_the_guard_off_submits_everything():
    f = cluster(1 * GB)
    assert len(run_step(f, disk_reserve=None).submitted) == 3


def test_every_pending_move_is_tried_before_the_run_is_refused():
    """Many moves that do not fit ahead of one that does, with max_moves=1: the one that fits is sent."""
    f = FakeClusterAdmin.build({1: "r1", 2: "r2", 3: "r3"}, {"t": [[1, 2]] * 12})
    for i in range(12):
        f.sizes[TopicPartition("t", i)] = {1: (5 if i < 11 else 1) * GB, 2: (5 if i < 11 else 1) * GB}
    f.disk_total[3] = 2 * GB
    plan = ReassignmentPlan(moves=tuple(mv("t", i, (1, 2), (3, 2)) for i in range(12)))
    status = step(f, plan, ExecutionLimits(max_moves=1, order="plan"), ExecutionOptions(disk_reserve=0), settle_s=0,
                  sleep=lambda s: None)
    assert [str(tp) for tp in status.submitted] == ["t-11"] and status.blocked is None
    assert len(status.disk_held) == 11


def test_log_dirs_of_one_busy_filesystem_count_once_and_the_least_usable_is_kept():
    busy = DiskSpace.of_dirs([(1000 * GB, 100 * GB + 4096), (1000 * GB, 100 * GB)])  # read a moment apart
    assert (busy.total_bytes, busy.usable_bytes, busy.merged) == (1000 * GB, 100 * GB, 1)
    room = DiskRoom_of(busy)
    assert room.take(mv("t", 0, (1, 2), (3, 2))) is None
    two_big = [mv("u", i, (1, 2), (3, 2)) for i in range(2)]
    sizes = {TopicPartition("u", i): {1: 80 * GB} for i in range(2)}
    from airflow_kafka_reassign.core.guards.disk import DiskRoom

    guard = DiskRoom([], sizes, {3: busy}, DiskReserve())
    assert guard.take(two_big[0]) is None and guard.take(two_big[1]) is not None  # 160 GB > 100 GB free


def DiskRoom_of(space):  # noqa: N802
    from airflow_kafka_reassign.core.guards.disk import DiskRoom

    return DiskRoom([], SIZES, {3: space}, DiskReserve())


@pytest.mark.parametrize("value", [5, "5", "1.5", "20G/s"])
def test_a_reserve_of_a_few_bytes_or_a_rate_is_refused(value):
    with pytest.raises(ConfigurationError, match="no margin at all|is a rate"):
        DiskReserve.parse(value)


def test_a_broker_that_does_not_answer_makes_the_run_wait_not_fail():
    f = cluster(50 * GB)
    f.log_dirs_unanswered = {3}
    status = run_step(f, disk_reserve=0)
    assert status.submitted == [] and status.blocked is None and len(status.disk_held) == 3
    assert "broker 3 did not answer DescribeLogDirs" in status.disk_held[A]


def test_a_foreign_copy_under_way_is_measured_and_counted():
    f = cluster(10 * GB)
    other = TopicPartition("t", 2)  # someone else's reassignment of t-2 onto broker 3 (6 GB): the plan moves t-0, t-1
    f.sizes[other] = {1: 6 * GB, 2: 6 * GB}
    f.alter_reassignments({other: (3, 2)})
    plan = ReassignmentPlan(moves=tuple(mv("t", i, (1, 2), (3, 2)) for i in range(2)))
    status = step(f, plan, PLAN_ORDER, ExecutionOptions(disk_reserve=0, allow_concurrent_reassignments=True),
                  settle_s=0, sleep=lambda s: None)
    # 10 GB free on broker 3, 6 GB of it still to come by the foreign copy: t-0 (4 GB) fits, t-1 (3 GB) then not
    assert [str(tp) for tp in status.submitted] == ["t-0"] and list(status.disk_held) == [B]


def test_a_deployment_sets_the_default_reserve_in_its_environment():
    from airflow_kafka_reassign.core.guards.disk import default_reserve

    assert default_reserve({}) == "1%" and default_reserve({"AKR_DISK_RESERVE": "10%"}) == "10%"
