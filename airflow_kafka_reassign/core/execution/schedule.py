"""When a plan ends: the copy slots simulated under the per-broker limits (the plan's ETA).

Pure (no Airflow, no Kafka client). The engine sends pending moves in its order wherever they fit the limits
(``select_batch``: at most ``max_moves`` reassignments in the cluster, ``max_moves_per_broker`` touching any one
broker, a move *touching* the brokers it adds or removes a replica on). :func:`simulate` plays that out:

* every broker copies at most its **rate in** into its new replicas (the follower side) and sends at most its
  **rate out** as a leader; the copies on a broker share its rate equally (Kafka's replication throttle is one
  rate per broker, ``follower.replication.throttled.rate`` and ``leader.replication.throttled.rate``, shared by
  every throttled replica on it). A copy moves at the smallest share along its path: ``rate_in(b) / copies into
  b`` for each broker ``b`` it adds a replica on, ``rate_out(s) / copies out of s`` for its source ``s`` (the
  leader, which sends the partition once to every adding replica);
* when a copy ends it frees its slots at once, and the pending moves are started in the engine's order wherever
  they fit (the order is the priority: the same greedy as ``select_batch``, so a move that does not fit lets the
  next one take the slot);
* the ETA is when the last copy ends; :attr:`Schedule.first_s` when the first one in flight does.

Costs O(n log n) in the moves with bounded shares: each start or end reprices the copies on the brokers it
touches (at most ``max_moves_per_broker`` each). Where a broker's share is not bounded by a small limit
(:data:`MAX_EXACT_SHARE`), every move is in flight at once in effect and the plan ends when its busiest broker has
moved its bytes: the ETA is then that bound (the *fluid* bound, :attr:`Schedule.exact` False), in O(n).

Example: two brokers, one copy slot each, 1 MB/s each; broker 1 takes two 4 MB moves, broker 2 one 2 MB move::

    >>> copies = [Copy("a", 4_000_000, adding=(1,)), Copy("b", 2_000_000, adding=(2,)), Copy("c", 4_000_000, adding=(1,))]
    >>> simulate(copies, Rates(default_in=1_000_000), max_moves_per_broker=1).end_s
    8.0
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections import defaultdict
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from airflow_kafka_reassign.core.vocabulary.models import Move, TopicPartition

#: Above this many copies sharing one broker (the smaller of ``max_moves_per_broker`` and ``max_moves``), the ETA is
#: the fluid bound instead of the simulation: repricing every copy on a broker at each event would cost O(n^2).
MAX_EXACT_SHARE = 32
#: Pending moves simulated one by one; beyond them the ETA is extrapolated per broker (:func:`simulate`).
EXACT_PENDING = 1000
#: Parked moves (blocked by a full broker) looked at again per broker that frees a slot, per event.
SCAN = 32
#: Two events closer than this (seconds) are one.
_EPS = 1e-9


class Copy(NamedTuple):
    """One move as the schedule sees it (a named tuple: a schedule of 100k moves builds 100k of them per tick).

    :param key: names it (the partition).
    :param left: bytes each adding replica still has to copy: the partition's size for a pending move, the
        largest current replica less the adding replica for one in flight (0: only the ISR or the controller is
        left).
    :param adding: the brokers it adds a replica on (none: a move that only reorders replicas ends at once).
    :param touched: the brokers whose per-broker slot it holds, its adding and removing replicas (as
        ``select_batch`` counts them); ``None``: its ``adding`` only.
    :param source: the broker it copies from (the partition's leader); ``None``: unknown, only the adding side
        limits it.
    :param running: in flight already: it holds its slots from the start.
    """

    key: Hashable
    left: int
    adding: tuple[int, ...] = ()
    touched: tuple[int, ...] | None = None
    source: int | None = None
    running: bool = False

    @property
    def slots(self) -> tuple[int, ...]:
        return self.adding if self.touched is None else self.touched


@dataclass(frozen=True)
class Rates:
    """Bytes per second each broker copies into its new replicas (``into``, else ``default_in``) and sends as a
    leader (``out``, else ``default_out``), each shared by the copies on it. An unknown rate in (``None``) makes
    the ETA unknown; a rate out of ``None`` is no limit on the leader side (the adding side then sets the pace)."""

    into: Mapping[int, float] = field(default_factory=dict)
    default_in: float | None = None
    out: Mapping[int, float] = field(default_factory=dict)
    default_out: float | None = None

    def rate_in(self, broker: int) -> float | None:
        return self.into.get(broker, self.default_in)

    def rate_out(self, broker: int) -> float:
        rate = self.out.get(broker, self.default_out)
        return math.inf if rate is None else rate


@dataclass(frozen=True)
class Schedule:
    """The simulated end of a plan's copies."""

    #: seconds until the last copy ends (0.0: nothing left to copy)
    end_s: float
    #: seconds until the first copy in flight ends (``None``: none in flight)
    first_s: float | None = None
    #: pending moves the simulation started (every one, unless a move can never fit: then the ETA is unknown)
    started: int = 0
    #: ``False``: the fluid bound (the busiest broker's bytes over its rate), not the simulation
    exact: bool = True


def simulate(copies: Sequence[Copy], rates: Rates, *, max_moves: int | None = None,
             max_moves_per_broker: int | None = None, exact_pending: int | None = None) -> Schedule | None:
    """When the copies end, the running ones first and the pending ones started in the order given (``None``: a
    broker's rate in is unknown or zero, so no ETA can be told).

    The simulation runs until ``exact_pending`` pending copies (default :data:`EXACT_PENDING`) have started, every
    pending copy competing for the slots; from there the rest goes on at the rate the cluster reached until then,
    no broker faster than its own rate (:attr:`Schedule.exact` False): the cost stays bounded whatever the plan's
    size (the events to simulate, that is; reading the copies is O(n log n))."""
    exact_pending = EXACT_PENDING if exact_pending is None else max(1, exact_pending)
    brokers = {b for c in copies for b in c.adding}
    rate_in: dict[int, float] = {}
    for b in brokers:
        r = rates.rate_in(b)
        if r is None or r <= 0:
            return None
        rate_in[b] = float(r)
    rate_out = {c.source: rates.rate_out(c.source) for c in copies if c.source is not None}
    if any(r <= 0 for r in rate_out.values()):
        return None
    share = min(max_moves_per_broker or math.inf, max_moves or math.inf)
    if share > MAX_EXACT_SHARE:
        return _fluid(copies, rate_in, rate_out)
    pending = sum(1 for c in copies if not c.running)
    if pending <= exact_pending:
        return _Simulation(copies, rate_in, rate_out, max_moves, max_moves_per_broker).run()
    sim = _Simulation(copies, rate_in, rate_out, max_moves, max_moves_per_broker, record_at=exact_pending)
    simulated = sim.run()
    if sim.recorded is None or sim.recorded[0] <= 0:
        return _fluid(copies, rate_in, rate_out)
    at, copied = sim.recorded
    left: dict[int, float] = defaultdict(float)
    for c in copies:
        for b in c.adding:
            left[b] += max(0, c.left)
    for b, n in copied.items():
        left[b] -= n
    # every pending move competed for the slots until ``at``: the rest goes on at the rate the cluster reached
    # then, and no broker faster than its own rate
    reached = sum(copied.values()) / at
    total = sum(n for n in left.values() if n > 0)
    end = max([total / reached if reached > 0 else math.inf] + [n / rate_in[b] for b, n in left.items() if n > 0])
    return Schedule(end_s=at + end, first_s=simulated.first_s, started=pending, exact=False)


def _fluid(copies: Sequence[Copy], rate_in: Mapping[int, float], rate_out: Mapping[int, float]) -> Schedule:
    """Every copy in flight at once: the plan ends when its busiest broker has copied its bytes (in or out)."""
    into: dict[int, float] = defaultdict(float)
    out: dict[int, float] = defaultdict(float)
    n_in: dict[int, int] = defaultdict(int)
    n_out: dict[int, int] = defaultdict(int)
    for c in copies:
        for b in c.adding:
            into[b] += c.left
            n_in[b] += 1
        if c.source is not None and c.adding:
            out[c.source] += c.left * len(c.adding)
            n_out[c.source] += len(c.adding)
    end = max([into[b] / rate_in[b] for b in into] + [out[s] / rate_out[s] for s in out], default=0.0)
    first = None
    for c in copies:
        if c.running:
            r = _share(c, rate_in, rate_out, n_in, n_out)
            first = min(first if first is not None else math.inf, 0.0 if c.left <= 0 or not c.adding else c.left / r)
    return Schedule(end_s=end, first_s=first, started=sum(1 for c in copies if not c.running), exact=False)


def _share(c: Copy, rate_in: Mapping[int, float], rate_out: Mapping[int, float], n_in: Mapping[int, int],
           n_out: Mapping[int, int]) -> float:
    """The copy's rate: the smallest share along its path (bytes/s per adding replica)."""
    r = math.inf
    for b in c.adding:
        r = min(r, rate_in[b] / max(1, n_in[b]))
    if c.source is not None:
        r = min(r, rate_out[c.source] / max(1, n_out[c.source]))
    return r


class _Simulation:
    """Processor sharing on each broker, events in a heap (stale entries skipped by version).

    Admission keeps the engine's greedy: the first pending copy in order that fits goes next. A copy blocked by a
    full broker is *parked* on it; when that broker has room again its parked copies compete again, by priority,
    with the ones never looked at (``ready``). Each copy is looked at for the first time once in the whole run; the
    parked ones looked at again are at most :data:`SCAN` per event (when the limits are tight most are blocked by
    another full broker: looking at all would cost O(n^2)), then only the ones never looked at compete; a slot left
    idle by that is filled at the next event, and when nothing is in flight every copy is looked at."""

    def __init__(self, copies: Sequence[Copy], rate_in: Mapping[int, float], rate_out: Mapping[int, float],
                 max_moves: int | None, per_broker: int | None, record_at: int | None = None) -> None:
        self.copies = copies
        #: when the ``record_at``-th pending copy starts: (that time, bytes copied into each broker until then)
        self.record_at = record_at
        self.recorded: tuple[float, dict[int, float]] | None = None
        self.rate_in, self.rate_out = rate_in, rate_out
        self.max_moves = max_moves if max_moves is not None else len(copies) + 1
        self.per_broker = per_broker if per_broker is not None else len(copies) + 1
        n = len(copies)
        self.slot_of = [c.slots for c in copies]
        self.path = [(*c.adding, *((c.source,) if c.source is not None and c.adding else ())) for c in copies]
        self.left = [float(max(0, c.left)) for c in copies]
        self.rate = [0.0] * n
        self.start_left = [0.0] * n
        self.since = [0.0] * n
        self.version = [0] * n
        self.done = [False] * n
        self.begun = [False] * n
        self.now = 0.0
        self.active = 0
        self.slots: dict[int, int] = defaultdict(int)
        #: bytes the copies in flight on each slot-holding broker had when they started (which full broker frees last)
        self.busy: dict[int, float] = defaultdict(float)
        self.n_in: dict[int, int] = defaultdict(int)
        self.n_out: dict[int, int] = defaultdict(int)
        self.on: dict[int, set[int]] = defaultdict(set)
        self.events: list[tuple[float, int, int]] = []
        #: pending copies never found blocked, by priority (their index)
        self.ready: list[int] = []
        #: copies found blocked, on the full broker that blocked them
        self.parked: dict[int, list[int]] = defaultdict(list)
        #: (first parked copy, broker) for brokers with room again (entries checked when taken)
        self.reopened: list[tuple[int, int]] = []

    def run(self) -> Schedule:
        touched: set[int] = set()
        for i, c in enumerate(self.copies):
            if c.running:
                touched.update(self._start(i))
            else:
                self.ready.append(i)  # already a heap: increasing indexes
        started = self._admit(touched, scan=None)
        self._reprice(touched)
        first = min((t for t, v, i in self.events if self.copies[i].running and v == self.version[i]), default=None)
        if self.record_at is not None and started >= self.record_at:
            self._record()
            return Schedule(end_s=self.now, first_s=first, started=started)
        events, version, done = self.events, self.version, self.done
        while events:
            t, v, i = heapq.heappop(events)
            if done[i] or v != version[i]:
                continue
            self.now = max(self.now, t)
            touched = set(self._end(i))
            while events and events[0][0] <= self.now + _EPS:
                _, v2, j = heapq.heappop(events)
                if not done[j] and v2 == version[j]:
                    touched.update(self._end(j))
            started += self._admit(touched, scan=SCAN)
            if not self.active:  # nothing left in flight to make an event: look at every copy
                started += self._admit(touched, scan=None)
            self._reprice(touched)
            if self.record_at is not None and started >= self.record_at:
                self._record()
                break
        if self.recorded is not None:  # stopped there: the caller extrapolates
            return Schedule(end_s=self.now, first_s=first, started=started)
        if any(not c.running and not done[i] for i, c in enumerate(self.copies)):
            return Schedule(end_s=math.inf, first_s=first, started=started)  # a move that can never fit
        return Schedule(end_s=self.now, first_s=first, started=started)

    def _record(self) -> None:
        """The bytes copied into each broker so far (the copies in flight settled at now)."""
        copied: dict[int, float] = defaultdict(float)
        for i, c in enumerate(self.copies):
            if not c.adding or not self.begun[i]:
                continue
            left = 0.0 if self.done[i] else max(0.0, self.left[i] - self.rate[i] * (self.now - self.since[i]))
            for b in c.adding:
                copied[b] += max(0, c.left) - left
        self.recorded = (self.now, dict(copied))

    # -- slots -------------------------------------------------------------------------------------

    def _admit(self, touched: set[int], scan: int | None) -> int:
        """Start pending copies in order where they fit (adding the brokers they touch to ``touched``); at most
        ``scan`` copies found blocked on the way (``None``: any number). Returns how many started."""
        started = 0
        k, slots, ready, reopened, parked = self.per_broker, self.slots, self.ready, self.reopened, self.parked
        busy = self.busy
        while self.active < self.max_moves and (ready or (reopened and scan != 0)):
            # a copy parked on a broker with room again competes by priority with those never looked at, until
            # ``scan`` of them were found blocked again at this event: then only the ones never looked at
            again = bool(reopened) and scan != 0 and (not ready or reopened[0][0] < ready[0])
            if again:
                first, b = heapq.heappop(reopened)
                heap = parked[b]
                if not heap or slots[b] >= k:
                    continue  # stale: nothing parked there any more, or the broker is full again (it reopens then)
                if heap[0] != first:  # another copy was parked first since: the entry goes on from it
                    heapq.heappush(reopened, (heap[0], b))
                    continue
                i = heapq.heappop(heap)
                if heap:
                    heapq.heappush(reopened, (heap[0], b))
            else:
                i = heapq.heappop(ready)
            blocker = None
            for b in self.slot_of[i]:  # of its full brokers, the one likely to free last (the most bytes started)
                if slots[b] >= k and (blocker is None or busy[b] > busy[blocker]):
                    blocker = b
            if blocker is not None:
                heapq.heappush(parked[blocker], i)
                # a copy looked at for the first time is looked at once in all (O(n) in the whole run); one looked
                # at again may be again and again: those are bounded per event
                if again and scan is not None:
                    scan -= 1
                continue
            touched.update(self._start(i))
            started += 1
        return started

    # -- copies -----------------------------------------------------------------------------------

    def _start(self, i: int) -> tuple[int, ...]:
        c = self.copies[i]
        self.begun[i] = True
        self.active += 1
        for b in self.slot_of[i]:
            self.slots[b] += 1
            self.busy[b] += self.left[i]
        for b in c.adding:
            self.n_in[b] += 1
            self.on[b].add(i)
        if c.source is not None and c.adding:
            self.n_out[c.source] += len(c.adding)
            self.on[c.source].add(i)
        self.since[i] = self.now
        self.start_left[i] = self.left[i]
        self.rate[i] = 0.0
        if not c.adding or self.left[i] <= 0:  # nothing to copy: ends now (its slot is free at the next event)
            self.version[i] += 1
            heapq.heappush(self.events, (self.now, self.version[i], i))
        return self.path[i]

    def _end(self, i: int) -> tuple[int, ...]:
        c = self.copies[i]
        self.done[i] = True
        self.active -= 1
        k, parked = self.per_broker, self.parked
        start_left = self.start_left[i]
        for b in self.slot_of[i]:
            self.slots[b] -= 1
            self.busy[b] -= start_left
            heap = parked.get(b)
            if heap and self.slots[b] == k - 1:  # room again: its parked copies compete again
                heapq.heappush(self.reopened, (heap[0], b))
        for b in c.adding:
            self.n_in[b] -= 1
            self.on[b].discard(i)
        if c.source is not None and c.adding:
            self.n_out[c.source] -= len(c.adding)
            self.on[c.source].discard(i)
        return self.path[i]

    def _reprice(self, brokers: Iterable[int]) -> None:
        """The copies on ``brokers`` go on at their new shares from now."""
        ids: set[int] = set()
        on = self.on
        for b in brokers:
            if b in on:
                ids |= on[b]
        now, left, rate, since, version, events = self.now, self.left, self.rate, self.since, self.version, self.events
        for i in ids:
            left[i] = max(0.0, left[i] - rate[i] * (now - since[i]))
            since[i] = now
            r = _share(self.copies[i], self.rate_in, self.rate_out, self.n_in, self.n_out)
            rate[i] = r
            version[i] += 1
            heapq.heappush(events, (now if left[i] <= 0 or math.isinf(r) else now + left[i] / r, version[i], i))


# -- the plan's ETA: one place ------------------------------------------------------------------------------

#: The broker of copies whose brokers are unknown (a plan in Kafka's own format, without current replicas):
#: they share one rate, the cluster's.
UNKNOWN_BROKER = -1


def plan_eta(copies: Sequence[Copy], rates: Rates | None, *, max_moves: int | None = None,
             max_moves_per_broker: int | None = None) -> float | None:
    """The plan's ETA in seconds: when the last of ``copies`` ends (:func:`simulate`); 0.0 with nothing left;
    ``None`` when no rate is known. The engine's progress line, the sensor's and the bare watch's all come from
    here."""
    if not copies or all(c.left <= 0 for c in copies):
        return 0.0
    if rates is None:
        return None
    s = simulate(copies, rates, max_moves=max_moves, max_moves_per_broker=max_moves_per_broker)
    return None if s is None or math.isinf(s.end_s) else s.end_s


def broker_rates(*, throttle: float | None, observed: Mapping[int, float] | None = None,
                 net_rate: float | None = None, brokers: Collection[int] = ()) -> Rates | None:
    """Each broker's rate for the schedule: the rate it took in over the last polls (``observed``, never above the
    throttle); else the throttle; else the median of the observed ones; else the cluster's net rate shared by
    ``brokers`` (those with a copy in flight); ``None`` when nothing is known. The leader side is limited by the
    throttle only (``leader.replication.throttled.rate``)."""
    into = {b: (min(r, throttle) if throttle else r) for b, r in (observed or {}).items() if r > 0}
    if throttle:
        default: float | None = float(throttle)
    elif into:
        default = statistics.median(into.values())
    elif net_rate and net_rate > 0:
        default = net_rate / max(1, len(brokers))
    else:
        return None
    return Rates(into=into, default_in=default, default_out=float(throttle) if throttle else None)


def copies_of(
    moves: Mapping[TopicPartition, Move],
    in_flight: Iterable[TopicPartition],
    pending: Iterable[TopicPartition],
    sizes: Mapping[TopicPartition, Mapping[int, int]],
    leaders: Mapping[TopicPartition, int | None] | None = None,
) -> list[Copy] | None:
    """The schedule's copies from the engine's view (``moves`` by partition, as ``ExecutionStatus.moves``): the moves
    ``in_flight`` (bytes left: their largest current replica less the smallest adding one) and the ``pending`` ones in
    the order they go out (their partition's size); each holding the slots of its adding and removing replicas,
    copied from its leader. ``None`` when a size is unknown (DescribeLogDirs said nothing of a partition): no ETA
    then."""
    out: list[Copy] = []
    for running, tps in ((True, in_flight), (False, pending)):
        for tp in tps:
            m = moves[tp]
            current, target = m.current_replicas or (), m.target_replicas
            adding = tuple([b for b in target if b not in current])
            touched = adding + tuple([b for b in current if b not in target])
            if not adding:
                out.append(Copy(tp, 0, adding=(), touched=touched, running=running))
                continue
            have = sizes.get(tp)
            if not have:
                return None
            source = [have[b] for b in current if b in have]
            if not source:
                return None
            left = max(source) - (min([have.get(b, 0) for b in adding]) if running else 0)
            leader = leaders.get(tp) if leaders is not None else None
            out.append(Copy(tp, max(0, left), adding, touched, leader if leader in current else None, running))
    return out


def throttle_bound_s(copies: Sequence[Copy], throttle: float) -> float:
    """The least time any execution of ``copies`` can take under a replication throttle of ``throttle`` bytes/s on
    every broker (both sides): each broker's bytes in (into its adding replicas) and out (as the leader that sends
    them), over the throttle; the largest. No limit on moves in flight can make an execution faster than this; the
    benchmarks judge a pace against it (``tests/benchmarks/bench_window.py``).

        >>> throttle_bound_s([Copy("a", 4_000_000, adding=(4,), source=1), Copy("b", 2_000_000, adding=(5,), source=1)],
        ...                  1_000_000)
        6.0
    """
    if throttle <= 0:
        raise ValueError(f"throttle must be positive bytes/s, not {throttle}")
    brokers = {b for c in copies for b in c.adding}
    sources = {c.source for c in copies if c.source is not None}
    return _fluid(copies, dict.fromkeys(brokers, float(throttle)), dict.fromkeys(sources, float(throttle))).end_s


class ObservedRates:
    """The bytes per second each broker took into its adding replicas, poll after poll (smoothed: half the new
    reading, half the old one). Only replicas seen at two polls in a row count (a move that started or ended in
    between gives no reading); a broker with no copy at both polls keeps its last rate."""

    def __init__(self) -> None:
        self.rates: dict[int, float] = {}
        self._last: tuple[float, dict[tuple[TopicPartition, int], int]] | None = None

    def update(self, at_s: float, held: Mapping[tuple[TopicPartition, int], int]) -> None:
        """``held``: the bytes each adding replica (partition, broker) of the moves in flight holds at ``at_s``."""
        last = self._last
        if last is not None and at_s > last[0]:
            dt = at_s - last[0]
            gained: dict[int, int] = {}
            for key, n in held.items():
                before = last[1].get(key)
                if before is not None:
                    gained[key[1]] = gained.get(key[1], 0) + max(0, n - before)
            for b, n in gained.items():
                r = n / dt
                self.rates[b] = r if b not in self.rates else (r + self.rates[b]) / 2
        self._last = (at_s, dict(held))

    def export(self) -> dict[str, float]:
        return {str(b): r for b, r in self.rates.items()}

    def restore(self, data: Mapping[str, float]) -> None:
        self.rates = {int(b): float(r) for b, r in data.items()}
