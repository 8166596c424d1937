"""How fast a plan was copied, as an outside observer sees it, against what the throttle allows.

:class:`CopyPhase` watches the cluster from a client of its own while something else (a DAG run, Kafka's tool)
executes a plan: every ``every`` seconds it lists the reassignments in flight (ListPartitionReassignments, one
request). The copy phase runs from the first reassignment of the plan's topics it sees to the first sample with
none left. It knows nothing of the executor, so the same figure serves our operators and the reference tool
(``make demo``, ``tests/benchmarks/bench_window.py``). Its resolution is the sampling period.

:func:`plan_throttle_bound_s` is the least time the plan can take under the throttle
(:func:`airflow_kafka_reassign.core.execution.schedule.throttle_bound_s`), from the replicas' sizes on disk::

    topics = sorted({m.topic for m in plan.moves})
    with KafkaClusterAdmin(config) as admin:
        before = admin.snapshot(topics=topics, include_sizes=True)
    bound = plan_throttle_bound_s(plan, before, throttle=20_000_000)
    with CopyPhase(config, topics) as phase:
        ...  # execute the plan
    print(f"copy phase {phase.seconds:.1f} s, {phase.seconds / bound:.1f}x the throttle bound")
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Mapping

from airflow_kafka_reassign.core.execution.schedule import copies_of, throttle_bound_s
from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot, ReassignmentPlan


def plan_throttle_bound_s(plan: ReassignmentPlan, snapshot: ClusterSnapshot, *, throttle: float) -> float:
    """The throttle bound of ``plan`` from a snapshot taken before it ran with the replicas' sizes
    (``admin.snapshot(include_sizes=True)``): each move copies its partition's largest replica from its leader.
    Raises ``ValueError`` naming partitions the snapshot has no size for."""
    moves = {m.tp: m for m in plan.moves}
    parts = {p.tp: p for p in snapshot.partitions}
    sizes = {tp: parts[tp].replica_sizes or {} for tp in moves if tp in parts}
    leaders = {tp: parts[tp].leader for tp in moves if tp in parts}
    copies = copies_of(moves, (), list(moves), sizes, leaders)
    if copies is None:
        missing = sorted(str(tp) for tp in moves if not sizes.get(tp))[:5]
        raise ValueError(f"the snapshot has no size for {missing}: take it with include_sizes=True")
    return throttle_bound_s(copies, throttle)


class CopyPhase:
    """A context manager: from the first reassignment of ``topics`` seen to the first sample with none left.

    :param config: the cluster's client config (as ``Sandbox.client_config()``).
    :param topics: the plan's topics; other reassignments are ignored.
    :param every: seconds between two samples (the figure's resolution).
    """

    def __init__(self, config: Mapping[str, str], topics: Collection[str], *, every: float = 0.2) -> None:
        from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

        self._admin = KafkaClusterAdmin(dict(config), timeout_s=30)
        self._topics, self.every = frozenset(topics), every
        self.first: float | None = None
        self.last: float | None = None
        self.samples = 0
        #: samples that failed (the cluster did not answer); they count neither way
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="copy-phase", daemon=True)

    def __enter__(self) -> CopyPhase:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._admin.close()

    def _sample(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                moving = any(tp.topic in self._topics for tp in self._admin.list_reassignments())
            except Exception:  # noqa: BLE001 (a sample lost, say to a broker restarting: the next one counts)
                self.errors += 1
                self._stop.wait(self.every)
                continue
            self.samples += 1
            if moving:
                if self.first is None:
                    self.first = now
                self.last = None
            elif self.first is not None and self.last is None:
                self.last = now
            self._stop.wait(self.every)

    @property
    def seconds(self) -> float | None:
        """The copy phase in seconds; ``None`` when no reassignment was seen, or one was still in flight at exit."""
        return None if self.first is None or self.last is None else self.last - self.first
