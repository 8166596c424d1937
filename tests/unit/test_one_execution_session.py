"""One execution engine: the operator's path (``run``, what ExecuteReassignment calls) and the sensor's path (a
submitter rebuilt at every poke, what the sensor in each mode and its trigger call) tick the same
:class:`ExecutionSession`, so a health stop, a deadline and the adaptive limits behave the same through both.

Each scenario runs the same plan on two identical fakes, once per path, with ``ExecutionSession.tick`` spied on:
both paths must tick it, and what each saw and did at each tick must be the same."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_kafka_reassign.core.execution import ExecutionConfig, ExecutionSession, run
from airflow_kafka_reassign.core.execution import clock as engine_clock
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.testing import FakeClusterAdmin
from airflow_kafka_reassign.wait import WaitSpec

MB = 1_000_000
HOLDER = "dag d / run r / task wait / try 1 on host (pid 9)"


def cluster() -> FakeClusterAdmin:
    admin = FakeClusterAdmin.build(brokers={1: "r1", 2: "r2", 3: "r3", 4: "r1"},
                                   topics={"orders": [[1, 2]] * 6, "other": [[4, 1]]})
    for i in range(6):
        admin.sizes[TopicPartition("orders", i)] = {1: MB, 2: MB}
    return admin


PLAN = ReassignmentPlan(moves=tuple(Move(topic="orders", partition=i, current_replicas=(1, 2),
                                         target_replicas=(3, 2)) for i in range(6)))


@pytest.fixture
def ticks(monkeypatch):
    """Every tick of any session: (path, what the tick submitted, in flight after it, its health stop)."""
    seen: list[tuple[str, int, int, str | None]] = []
    original = ExecutionSession.tick

    def spy(self, **kw):
        tick = original(self, **kw)
        seen.append((self.log.name, len(tick.status.submitted), len(tick.status.in_flight), tick.health_stop))
        return tick

    monkeypatch.setattr(ExecutionSession, "tick", spy)
    return seen


def plan_dir(tmp_path):
    d = tmp_path / "plan"
    d.mkdir(parents=True)
    (d / "plan.json").write_text(PLAN.model_dump_json())
    (d / "metrics.json").write_text("{}")
    return d


def operator_path(admin, config, tmp_path, *, deadline=None, between=None):
    """What ExecuteReassignment runs: run() to the end, its pause between ticks replaced by ``between``."""
    return run(admin, PLAN, config, state_dir=tmp_path / "op-run", deadline=deadline, poll_interval_s=0.01,
               sleep=lambda s: between(admin) if between else None, settle_s=0, holder="execute try 1")


def sensor_path(admin, config, tmp_path, *, until=None, between=None, pokes=12):
    """What the sensor (poke, reschedule: a new submitter each poke) and the trigger run, poke after poke."""
    outcomes = []
    for _ in range(pokes):
        spec = WaitSpec(plan_uri=str(plan_dir_of(tmp_path)), kafka_config_id="k", submit_pending=True,
                        execution=config.to_json(), lease_holder=HOLDER, lease_scope="d/r", submit_until=until)
        outcome = spec.submitter(spec.load_plan())(admin)
        outcomes.append(outcome)
        if outcome.blocked or outcome.closed or all(admin.replicas[m.tp] == m.target_replicas for m in PLAN.moves):
            break
        if between:
            between(admin)
    return outcomes


def plan_dir_of(tmp_path):
    d = tmp_path / "plan"
    return d if d.exists() else plan_dir(tmp_path)


def test_both_paths_tick_the_one_session_and_stop_alike_on_unhealthy(tmp_path, ticks):
    config = ExecutionConfig(on_unhealthy="fail", max_moves=2)
    a, b = cluster(), cluster()
    a.down.add(4)  # "other-0" is under-replicated: trouble the plan's moves do not explain
    b.down.add(4)
    result = operator_path(a, config, tmp_path / "a")
    outcomes = sensor_path(b, config, tmp_path / "b")
    assert result.unhealthy and result.unhealthy == outcomes[-1].blocked  # the one message, from the one tick
    assert a.alter_requests == b.alter_requests == []
    paths = {name for name, *_ in ticks}
    assert len(paths) == 2, paths  # the engine's logger and the sensor's: both ticked ExecutionSession.tick
    assert [t[1:] for t in ticks if t[0] != "airflow_kafka_reassign.sensors.submit"] == \
           [t[1:] for t in ticks if t[0] == "airflow_kafka_reassign.sensors.submit"]


def test_both_paths_submit_nothing_after_the_deadline(tmp_path, ticks):
    config = ExecutionConfig(max_moves=2)
    past = datetime.now(timezone.utc) - timedelta(minutes=1)
    a, b = cluster(), cluster()
    result = operator_path(a, config, tmp_path / "a", deadline=past)
    outcomes = sensor_path(b, config, tmp_path / "b", until=past.isoformat())
    assert result.deadline_reached and outcomes[-1].closed
    assert a.alter_requests == b.alter_requests == [] and result.submitted == []
    assert {name for name, *_ in ticks} == {"airflow_kafka_reassign.core.execution.session",
                                             "airflow_kafka_reassign.sensors.submit"}


def test_the_adaptive_limits_move_alike_through_both_paths(tmp_path, ticks, monkeypatch):
    """Concurrency starts at min_moves and grows by one per poll while the plan progresses, the same way whether
    one process runs the loop or each poke is a new process (the governor is kept on the run state)."""
    monkeypatch.setattr(engine_clock, "sleep", lambda s: None)
    config = ExecutionConfig(max_moves=3, adaptive_limits={"min_moves": 1})
    a, b = cluster(), cluster()
    result = operator_path(a, config, tmp_path / "a", between=lambda admin: admin.complete())
    outcomes = sensor_path(b, config, tmp_path / "b", between=lambda admin: admin.complete())
    assert result.status.complete and all(b.replicas[m.tp] == (3, 2) for m in PLAN.moves)
    batches_a = [len(targets) for targets, _ in a.alter_requests]
    batches_b = [len(targets) for targets, _ in b.alter_requests]
    # starts at min_moves and grows as moves finish (AIMD), never past max_moves: the same batches through both
    assert batches_a == batches_b and batches_a[0] == 1 and max(batches_a) > 1 and sum(batches_a) == 6
    notes = [n for o in outcomes for n in o.notes]
    assert [f"adaptive limits: {why}" for why in result.adaptations] == notes and notes
    engine = [t[1:] for t in ticks if t[0] == "airflow_kafka_reassign.core.execution.session"]
    sensor = [t[1:] for t in ticks if t[0] == "airflow_kafka_reassign.sensors.submit"]
    assert engine[:len(sensor)] == sensor  # the same tick by tick (the operator ticks once more, to see it done)


def test_a_session_runs_a_whole_plan_tick_by_tick_on_the_fake(tmp_path):
    admin = cluster()
    session = ExecutionSession(admin, PLAN, ExecutionConfig(max_moves_per_broker=2, throttle_bytes_per_sec=MB),
                               state_dir=tmp_path / "run", settle_s=0)
    assert session.preflight().pending and admin.alter_requests == []  # read-only
    while not (tick := session.tick()).status.complete:
        assert len(tick.status.in_flight) <= 2 and admin.broker_configs[3]  # throttled while moving
        assert 0 < tick.next_poll_s <= 5.0
        admin.complete()
    assert session.finish()["throttles_restored"] == "yes"
    assert all(not configs for configs in admin.broker_configs.values())  # restored exactly: nothing was there
    assert sorted(session.submitted) == sorted(m.tp for m in PLAN.moves)


def test_the_deferred_wait_pokes_when_the_first_move_is_predicted_to_finish(tmp_path, monkeypatch):
    """Pacing from the session, not the poll interval: a move predicted to finish in about 3 s is polled within
    that, never later than poke_interval; with nothing predicted, poke_interval."""
    from airflow_kafka_reassign.core.execution.progress import ReassignmentWatch
    from airflow_kafka_reassign.triggers.reassignment import next_poke_s

    watch = ReassignmentWatch(PLAN, started_at=0.0, stuck_after_s=600)
    assert next_poke_s(watch, 15.0) == 15.0  # a bare watch: no prediction
    admin = cluster()
    spec = WaitSpec(plan_uri=str(plan_dir_of(tmp_path)), kafka_config_id="k", submit_pending=True,
                    execution={"max_moves": 2}, lease_holder=HOLDER, lease_scope="d/r", poll_interval_s=15.0)
    watch = spec.watch(started_at=0.0, admin=admin)
    session_clock = [1000.0]
    monkeypatch.setattr("airflow_kafka_reassign.core.execution.session.time.time", lambda: session_clock[0])
    watch.poke(admin, now=0.0)  # submits 2 moves of 1 MB each
    first = next_poke_s(watch, 15.0)
    assert 1.0 <= first < 15.0  # no rate yet: soon, growing from the floor
    for tp in admin.inflight:
        admin.sizes[tp] = {**admin.sizes[tp], 3: MB // 4}  # a quarter copied in 1 s: 3 s left
    session_clock[0] += 1.0
    watch.poke(admin, now=1.0)
    assert 1.0 <= next_poke_s(watch, 15.0) <= 3.0
