"""One vocabulary for where a move stands, shared by the execution engine and the progress watch.

:func:`classify` reads one move of a plan against the partition as the cluster reports it (the metadata merged
with the controller's in-flight reassignments, as :meth:`ClusterAdmin.snapshot` returns it) and says which
:class:`MoveState` it is in. :mod:`~airflow_kafka_reassign.core.execution` (which submits) and
:mod:`~airflow_kafka_reassign.core.execution.progress` (which watches and reports) both call it, so a task log, an XCom and
the sensor's line never disagree on a move.

**States**:

* ``done``: the partition's replicas equal the target (same order), the ISR holds every target replica, and the
  controller lists no reassignment for it;
* ``lagging``: the replicas equal the target but some target replica is not in the ISR yet;
* ``in_flight``: the controller lists a reassignment to the plan's target, or the metadata still shows the
  intermediate replica set of a reassignment that has just finished (metadata lags the controller by a moment);
* ``pending``: the partition still has the move's current replicas (or the plan names none) and nothing is in
  flight: not submitted yet;
* ``stale``: the replicas are neither the plan's current nor its target replicas: someone moved the partition
  since the plan was made;
* ``foreign``: the controller lists a reassignment of the partition to OTHER replicas (not this plan's): the move
  waits for it to finish (bounded by the run), then is judged again where the partition is;
* ``gone``: the partition is no longer the one the plan moves: its topic was deleted (the partition does not
  exist), or deleted and re-created under the same name (a new topic id, KIP-516). Nothing is left to do for it:
  the move is dropped, counted apart, never a failure;
* ``failed``: refused: a guard refused the move (KIP-860, a plan error), or the broker refused its submission.

``stale`` and ``failed`` are *blocked* (:data:`BLOCKED_STATES`): waiting cannot finish them. ``lagging``,
``in_flight``, ``pending`` and ``foreign`` are *unfinished* (:data:`UNFINISHED_STATES`); ``done`` and ``gone`` are
*finished* (:data:`FINISHED_STATES`).

Example::

    >>> from airflow_kafka_reassign.core.vocabulary.models import Move, PartitionState
    >>> move = Move(topic="orders", partition=0, current_replicas=(1, 2), target_replicas=(3, 2))
    >>> classify(move, PartitionState(topic="orders", partition=0, replicas=(1, 2), isr=(1, 2))).state
    <MoveState.PENDING: 'pending'>
    >>> classify(move, PartitionState(topic="orders", partition=0, replicas=(3, 2), isr=(2,))).state
    <MoveState.LAGGING: 'lagging'>
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from airflow_kafka_reassign.core.vocabulary.models import Move, PartitionState, TopicPartition, _Frozen
from airflow_kafka_reassign.core.vocabulary.units import format_bytes


class MoveState(str, Enum):
    """Where one move of a plan stands (see the module docstring for each rule).

    A ``str`` enum whose ``str()`` and ``format()`` are its value, as ``enum.StrEnum`` (Python 3.11+) gives.
    """

    DONE = "done"
    LAGGING = "lagging"
    IN_FLIGHT = "in_flight"
    PENDING = "pending"
    STALE = "stale"
    FOREIGN = "foreign"
    FAILED = "failed"
    GONE = "gone"

    def __str__(self) -> str:
        return str(self.value)


#: States that waiting cannot finish: the move is refused.
BLOCKED_STATES = frozenset({MoveState.STALE, MoveState.FAILED})
#: States of a move still under way: the cluster copies (or will copy) its data, or someone else's reassignment of
#: its partition has to finish first.
UNFINISHED_STATES = frozenset({MoveState.LAGGING, MoveState.IN_FLIGHT, MoveState.PENDING, MoveState.FOREIGN})
#: States in which nothing is left to do for a move: done, or dropped because its partition is gone.
FINISHED_STATES = frozenset({MoveState.DONE, MoveState.GONE})


class PartitionProgress(_Frozen):
    """One move as observed: its state, bytes and a short human detail."""

    topic: str
    partition: int
    state: MoveState
    #: Bytes the move copies in total (source size x adding replicas); ``None`` when sizes are unknown.
    bytes_total: int | None = None
    bytes_copied: int | None = None
    #: Target replicas not (yet) in the ISR.
    lagging: tuple[int, ...] = ()
    #: The controller lists a reassignment of the partition to the plan's target (cancellable as ours).
    listed: bool = False
    detail: str = ""

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def bytes_remaining(self) -> int | None:
        if self.bytes_total is None or self.bytes_copied is None:
            return None
        return max(0, self.bytes_total - self.bytes_copied)

    def describe(self) -> str:
        """``orders-3 (in_flight: replicas [4] not in ISR; 1.2 MB of 20.0 MB copied)``."""
        parts = [self.state.value]
        if self.detail:
            parts[0] += f": {self.detail}"
        if self.bytes_total is not None and self.state not in BLOCKED_STATES:
            parts.append(f"{format_bytes(self.bytes_copied or 0)} of {format_bytes(self.bytes_total)} copied")
        return f"{self.topic}-{self.partition} ({'; '.join(parts)})"


def _construct(**fields: Any) -> PartitionProgress:
    # Trusted values computed here: skip validation (a 10,000-move plan is assessed on every poke).
    fields.setdefault("bytes_total", None)
    fields.setdefault("bytes_copied", None)
    fields.setdefault("lagging", ())
    fields.setdefault("listed", False)
    fields.setdefault("detail", "")
    return PartitionProgress.model_construct(**fields)


def _source_size(sizes: Mapping[int, int] | None, brokers: Sequence[int]) -> int | None:
    if sizes is None:
        return None
    known = [sizes[b] for b in brokers if b in sizes]
    return max(known) if known else None


def classify(move: Move, part: PartitionState | None, sizes: Mapping[int, int] | None = None) -> PartitionProgress:
    """The state and bytes of one move, from the partition as the cluster reports it.

    ``part`` carries the controller's in-flight reassignment (``adding_replicas`` / ``removing_replicas``), as
    :meth:`ClusterAdmin.snapshot` merges it; ``sizes`` is the partition's ``{broker: bytes}`` from DescribeLogDirs
    (``None``: not measured).
    """
    topic, partition, target = move.topic, move.partition, move.target_replicas
    if part is None:
        return _construct(topic=topic, partition=partition, state=MoveState.GONE,
                          detail="the partition does not exist (topic deleted): move dropped")
    current = move.current_replicas
    replicas = part.replicas
    isr = set(part.isr)
    lagging = tuple(b for b in target if b not in isr)
    if part.reassigning:
        if part.target_replicas != target:
            return _construct(topic=topic, partition=partition, state=MoveState.FOREIGN,
                              detail=f"the controller is moving it to {list(part.target_replicas)}, "
                                     f"not to the plan's {list(target)}")
        adding = part.adding_replicas
        source = [b for b in replicas if b not in adding]
        state, detail = MoveState.IN_FLIGHT, ""
    elif replicas == target:
        adding = tuple(b for b in target if b not in current) if current is not None else lagging
        if not lagging:
            size = _source_size(sizes, target)
            total = None if size is None else size * len(adding)
            return _construct(topic=topic, partition=partition, state=MoveState.DONE, bytes_total=total,
                              bytes_copied=total)
        source = [b for b in target if b in isr]
        state, detail = MoveState.LAGGING, f"replicas {list(lagging)} not in ISR yet"
    elif current is not None and replicas == current:
        adding = tuple(b for b in target if b not in replicas)
        size = _source_size(sizes, replicas)
        total = None if size is None else size * len(adding)
        return _construct(topic=topic, partition=partition, state=MoveState.PENDING, bytes_total=total,
                          bytes_copied=None if total is None else 0, lagging=lagging)
    elif current is not None and set(target) < set(replicas) <= set(target) | set(current):
        # the intermediate replica set with no reassignment listed: the move has just finished and the
        # metadata has not caught up with the controller yet (without the plan's current replicas this cannot
        # be told from a pending move that drops replicas, which is then reported pending)
        adding = tuple(b for b in target if b not in current)
        source = [b for b in replicas if b not in adding]
        state, detail = MoveState.IN_FLIGHT, "finishing"
    elif current is None:
        adding = tuple(b for b in target if b not in replicas)
        size = _source_size(sizes, replicas)
        total = None if size is None else size * len(adding)
        return _construct(topic=topic, partition=partition, state=MoveState.PENDING, bytes_total=total,
                          bytes_copied=None if total is None else 0, lagging=lagging)
    else:
        return _construct(topic=topic, partition=partition, state=MoveState.STALE,
                          detail=f"replicas are {list(replicas)}, the plan expected {list(current)} "
                                 f"(moving to {list(target)})")
    size = _source_size(sizes, source)
    if size is None:
        total = copied = None
    else:
        total = size * len(adding)
        copied = sum(size if b in isr else min(size, (sizes or {}).get(b, 0)) for b in adding)
    return _construct(topic=topic, partition=partition, state=state, bytes_total=total, bytes_copied=copied,
                      lagging=lagging, listed=part.reassigning, detail=detail)
