"""Adaptive limits on the real sandbox: a throttle below a hot partition's ingest rate (issue 15).

A hot partition takes acks=all writes at about 150 kB/s while it is moved under a 30 kB/s replication
throttle: its new replica cannot gain on the leader. The engine (``core.execution.run``, what
ExecuteReassignment runs) with adaptive limits must say so (the "copy STALLED" warning, ``stalled_polls`` in
the result) and slow down (fewer concurrent moves, logged and journaled) instead of letting its ETA slide
silently. Once the stall is reported the producer stops, the copy catches up and the move completes; the
throttles end exactly as before and every acknowledged record is read back.

Nothing here waits on a clock: the producer stops when the engine logs the stall.
"""

from __future__ import annotations

import logging

from kafka_helpers import Traffic, make_topic, throttles

from airflow_kafka_reassign.core.execution import ExecutionLimits, ExecutionOptions, run
from airflow_kafka_reassign.core.execution.throttle import read_backup
from airflow_kafka_reassign.core.guards.adaptive import AdaptiveBounds
from airflow_kafka_reassign.core.records.journal import read_journal
from airflow_kafka_reassign.core.vocabulary.models import Move, ReassignmentPlan
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

THROTTLE = 30_000  # B/s, far below the hot partition's ingest
RECORDS_PER_S, RECORD_PAD = 150, 1_000  # about 150 kB/s into the hot partition


class StopOnStall(logging.Handler):
    """Keeps the engine's lines; stops the producer once the engine has cut its limits for a stalled copy."""

    def __init__(self, traffic: Traffic, hot: str) -> None:
        super().__init__()
        self.traffic = traffic
        self.hot = hot
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        self.lines.append(line)
        # the cut is what the test waits for; five stalled polls without it and the test has its answer (a failure)
        # (a cold move held back by the throttle a moment may be reported first: the hot one is what counts)
        hot_stalls = sum(x.startswith("copy STALLED") and f"{self.hot}-0" in x for x in self.lines)
        cut = any(x.startswith("adaptive limits: copy stalled") for x in self.lines)
        if (hot_stalls and cut) or hot_stalls >= 5:
            self.traffic.stop()


def test_a_throttle_below_a_hot_partitions_ingest_is_reported_as_a_stall_and_slows_the_run(
        sandbox, unique_topic, tmp_path):
    config = sandbox.client_config()
    cold, hot = f"{unique_topic}-cold", f"{unique_topic}-hot"
    make_topic(config, cold, [[1, 2]] * 3, megabytes=0.01)  # copied at once: the run grows its concurrency first
    # more than one fetch (replica.fetch.max.bytes, 1 MiB) holds: the new replica cannot catch up in one
    # fetch before the throttle holds it back
    make_topic(config, hot, [[1, 2]], megabytes=1.5)
    # the plan's order: the cold moves, then the hot one (it is the last in flight, alone)
    plan = ReassignmentPlan(moves=(
        *(Move(topic=cold, partition=p, current_replicas=(1, 2), target_replicas=(1, 3)) for p in range(3)),
        Move(topic=hot, partition=0, current_replicas=(1, 2), target_replicas=(1, 3)),
    ))
    traffic = Traffic(config, hot, partitions=1, per_second=RECORDS_PER_S, pad_bytes=RECORD_PAD)
    log = logging.getLogger(f"akr.test.{unique_topic}")
    log.setLevel(logging.INFO)
    lines = StopOnStall(traffic, hot)
    log.addHandler(lines)
    # stall_s: two flat polls suffice here (the default waits two fetch steps at the throttle, 24 s at 30 kB/s)
    bounds = AdaptiveBounds(min_moves=1, max_moves=4, stall_polls=2, stall_s=2.0)
    with KafkaClusterAdmin(config, timeout_s=20) as admin:
        before = throttles(admin, [cold, hot])
        with traffic:
            result = run(admin, plan, ExecutionLimits(order="plan"), ExecutionOptions(throttle_bytes_per_sec=THROTTLE),
                         state_dir=tmp_path, poll_interval_s=1.0, adaptive=bounds, log=log)
        assert result.status.ok and result.status.complete, result.summary()
        # the stall was reported, in the log and in the result (the operator's XCom)
        stalled = [x for x in lines.lines if x.startswith("copy STALLED") and f"{hot}-0" in x]
        assert stalled and f"{hot}-0" in stalled[0] and f"the throttle ({THROTTLE} B/s)" in stalled[0], lines.lines
        assert result.stalled_polls >= 1 and result.summary()["stalled_polls"] == result.stalled_polls
        # ... and the run slowed: fewer concurrent moves, logged and journaled
        cuts = [why for why in result.adaptations if why.startswith("copy stalled: moves")]
        assert cuts, result.adaptations
        before_cut, after_cut = (int(n) for n in cuts[0].removeprefix("copy stalled: moves ").split(" -> "))
        assert after_cut < before_cut
        journaled = [e for e in read_journal(tmp_path) if e.get("event") == "adapted"]
        assert any(e["why"] == cuts[0] and e["max_moves"] == after_cut for e in journaled), journaled
        # the throttles are exactly as before
        assert throttles(admin, [cold, hot]) == before and read_backup(tmp_path) is None
        assert [p.replicas for p in admin.snapshot(topics=[hot]).partitions] == [(1, 3)]
    traffic.check()  # every acknowledged record is there
