"""One move-state vocabulary: the engine's ExecutionStatus and the progress watch classify every move alike."""

from __future__ import annotations

import pytest
from execution_helpers import fake, mv, plan_of, tp

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, step
from airflow_kafka_reassign.core.execution.progress import observe
from airflow_kafka_reassign.core.vocabulary.move_state import (
    BLOCKED_STATES,
    FINISHED_STATES,
    UNFINISHED_STATES,
    MoveState,
)

MOVE = mv("t", 0, (1, 2), (1, 3))


def _set(f, replicas=None, inflight=None, down=()):
    if replicas is not None:
        f.replicas[tp("t", 0)] = tuple(replicas)
    if inflight is not None:
        f.inflight[tp("t", 0)] = inflight
    f.down.update(down)


# (scenario, how the fake shows partition t-0, the state both must name, the engine's bucket)
CASES = [
    ("untouched", {}, MoveState.PENDING, "pending"),
    ("moved", {"replicas": (1, 3)}, MoveState.DONE, "done"),
    ("moved, broker 3 not in the ISR", {"replicas": (1, 3), "down": {3}}, MoveState.LAGGING, "lagging"),
    ("listed to the plan's target", {"inflight": ((1, 2), (1, 3))}, MoveState.IN_FLIGHT, "in_flight"),
    ("metadata lagging a finished move", {"replicas": (1, 2, 3)}, MoveState.IN_FLIGHT, "in_flight"),
    ("moved elsewhere", {"replicas": (4, 5)}, MoveState.STALE, "stale"),
    ("listed to other replicas", {"inflight": ((1, 2), (4, 5))}, MoveState.FOREIGN, "waiting"),
]


@pytest.mark.parametrize(("scenario", "view", "state", "bucket"), CASES, ids=[c[0] for c in CASES])
def test_the_engine_and_the_watch_name_the_same_state(scenario, view, state, bucket):
    f = fake(t=[[1, 2]])
    _set(f, **view)
    plan = plan_of(MOVE)
    watched = observe(f, plan, at=1, retry_s=0)
    assert watched.partitions[0].state is state
    status = step(f, plan, ExecutionLimits(), ExecutionOptions(), submit=False, settle_s=-1)
    assert tp("t", 0) in getattr(status, bucket)
    assert status.summary()[bucket] == 1
    if state is MoveState.FOREIGN:  # waits for it, and listed among the foreign reassignments
        assert status.foreign == [tp("t", 0)] and "reassignment of it is in flight ([1, 2] -> [4, 5])" in \
            status.waiting[tp("t", 0)]


def test_a_deleted_topic_is_gone_for_both():
    f = fake(t=[[1, 2]], other=[[1, 2]])
    plan = plan_of(mv("gone", 0, (1, 2), (1, 3)), mv("t", 0, (1, 2), (1, 3)))
    watched = observe(f, plan, at=1, retry_s=0)
    assert [p.state for p in watched.partitions] == [MoveState.GONE, MoveState.PENDING]
    status = step(f, plan, ExecutionLimits(), ExecutionOptions(), submit=False, settle_s=-1)
    assert list(status.gone) == [tp("gone", 0)] and "deleted" in status.gone[tp("gone", 0)] and not status.failed


def test_blocked_and_unfinished_partition_the_states():
    assert set(MoveState) == BLOCKED_STATES | UNFINISHED_STATES | FINISHED_STATES
    assert not BLOCKED_STATES & UNFINISHED_STATES and not FINISHED_STATES & (BLOCKED_STATES | UNFINISHED_STATES)


def test_the_progress_line_reuses_the_steps_reads_and_agrees_with_the_engine(tmp_path):
    """ExecuteReassignment's progress line is built from what each step read: no snapshot of its own, one
    DescribeLogDirs per poll either way, and it names the moves the step just submitted in flight."""
    from airflow_kafka_reassign.core.execution import progress_observation, run

    calls = {}
    for with_line in (False, True):
        f = fake(t=[[1, 2], [2, 3], [3, 1]])
        f.sizes = {tp("t", p): {b: 1000 for b in (1, 2, 3)} for p in range(3)}
        plan = plan_of(mv("t", 0, (1, 2), (1, 4)), mv("t", 1, (2, 3), (2, 5)), mv("t", 2, (3, 1), (3, 6)))
        seen = []

        def line(status, plan=plan, seen=seen):
            obs = progress_observation(plan, status, at=0.0)
            seen.append((obs.done, obs.copying, obs.pending, sorted(status.in_flight), sorted(status.pending)))

        polls = iter(range(10))

        def sleep(_s, f=f, polls=polls):
            if next(polls) >= 1:  # moves finish from the second poll on
                f.complete()

        run(f, plan, ExecutionLimits(max_moves=2), ExecutionOptions(), state_dir=tmp_path / str(with_line),
            sleep=sleep, settle_s=0, progress=line if with_line else None)
        calls[with_line] = (f.calls.get("snapshot", 0), f.calls.get("replica_sizes", 0))
        if with_line:
            assert seen and seen[0][:3] == (0, 2, 1)  # the two moves submitted by that step count in flight
            assert all(in_flight == len(engine_in_flight) for _, in_flight, _, engine_in_flight, _ in seen)
    assert calls[True] == calls[False]
