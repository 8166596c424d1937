"""The bytes-in step and the tiered-storage accounting of load-aware plans.

**Bytes in.** Runs after the disk step (:mod:`.disk`) and before the leader fix-up, when the
capacity document gives every live broker a ``network_in`` capacity and the snapshot carries
bytes-in rates (:mod:`airflow_kafka_reassign.core.vocabulary.rates`). A broker takes in a partition's bytes
on every replica it holds (the leader from producers, a follower by replication), so its bytes in
is the sum of its replicas' rates, and the goal is every broker within ``ingress_tolerance`` of
the mean share (total rate over total ``network_in``). The goals keep their order: a move or swap
of this step never takes a broker's disk bytes out of the disk band (or further out, where the
disk step left it outside), above the disk cap, a partition onto fewer racks, a broker's replica
count or a topic's count on a broker out of the window the disk step kept; replication factors
never change. Where the disk band or the counts leave no room for a plain move, a *swap* sends
back a partner replica: the receiver's quietest of about the size both disk bands allow. It moves
the replicas that shed the most rate per byte first, and the busiest of those that cost no bytes
(put on the broker by an earlier step) before any other; a broker it leaves outside the band is
named with what stopped it (:data:`STOP_REASONS`). Leadership does not change bytes in (followers
take in what the leader does), so preferred leaders stay with the leader step's count balance.

Any plan that brings a broker's rate from ``x`` down to ``y`` moves replicas whose rates add up to
``x - y`` off it; the fewest bytes that does is at least the fractional knapsack of its replicas
by bytes per rate (:func:`ingress_min_out`): a per-broker lower bound the plan's bytes bound uses.

**Tiered topics** (``remote.storage.enable=true``, KIP-405): a replica's older segments live in
remote storage, and a new replica copies only the leader's local log. DescribeLogDirs reports
those local bytes, so the disk step, the bytes bound and the plan's bytes moved count tiered
partitions at their local bytes; :class:`TieredReport` says how many there are and what they
weigh against the whole.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_reassign.core.planner.disk import DiskGoal
from airflow_kafka_reassign.core.planner.metrics import partition_size, target_of
from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicMove, TopicPartitions
from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot, _Frozen


class TieredReport(_Frozen):
    """Tiered topics of a plan: counted at their local bytes (what a move copies)."""

    topics: int
    partitions: int
    #: Bytes of the tiered partitions' replicas on the brokers' disks (DescribeLogDirs: local).
    local_bytes: int
    #: Bytes of every replica of the snapshot (the disk goal's total), tiered or not.
    total_bytes: int
    #: Of the plan's bytes to move, those of tiered partitions.
    bytes_to_move: int = 0


class IngressReport(_Frozen):
    """Bytes in per broker before and after the plan (estimated rates), against ``network_in``."""

    #: Live broker -> network_in capacity (bytes/s); empty when the capacity document gives none.
    capacity: dict[int, int]
    #: Broker -> estimated bytes in per second before (live and removed) and after (live).
    rate_before: dict[int, float]
    rate_after: dict[int, float]
    tolerance: float
    #: Whether the bytes-in step ran (``network_in`` for every live broker, a balance goal).
    balanced: bool = False
    #: Replicas the bytes-in step moved, and how many of those were swaps.
    moves: int = 0
    swaps: int = 0
    #: Seconds the rates were sampled over (snapshot's ``bytes_in.window_s``).
    window_s: float | None = None
    #: Broker the bytes-in step left outside the band -> what stopped it short (a key of
    #: :data:`STOP_REASONS`: ``disk band``, ``racks``, ``replica counts``, ``too busy``, ``no room``,
    #: ``pinned``, ``move limit``).
    stopped_by: dict[int, str] = {}

    @property
    def mean_share(self) -> float:
        cap = sum(self.capacity.values())
        return sum(self.rate_after.values()) / cap if cap else 0.0

    def share(self, broker: int, after: bool = True) -> float:
        rates = self.rate_after if after else self.rate_before
        return rates.get(broker, 0.0) / self.capacity[broker]

    def max_deviation(self, after: bool = True) -> float:
        mean = self.mean_share
        return max((abs(self.share(b, after) - mean) for b in self.capacity), default=0.0)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"balanced": self.balanced, "moves": self.moves, "swaps": self.swaps,
                               "total_rate": round(sum(self.rate_after.values()), 1)}
        if self.capacity:
            out |= {
                "mean_share": round(self.mean_share, 4),
                "max_deviation_before": round(self.max_deviation(False), 4),
                "max_deviation_after": round(self.max_deviation(True), 4),
                "max_share_after": round(max(self.share(b) for b in self.capacity), 4),
            }
        if self.stopped_by:
            by_reason: dict[str, list[int]] = {}
            for b, reason in sorted(self.stopped_by.items()):
                by_reason.setdefault(reason, []).append(b)
            out["stopped_short"] = by_reason
        return out


@dataclass(frozen=True)
class IngressGoal:
    """What the bytes-in step aims at."""

    #: Live broker -> network_in capacity (bytes/s).
    capacity: Mapping[int, int]
    #: The disk goal whose band and cap the step keeps.
    disk: DiskGoal
    #: Band around the mean share every broker should end in.
    tolerance: float = 0.05

    def band(self, total: float) -> dict[int, tuple[float, float]]:
        cap_total = sum(self.capacity.values())
        mean = total / cap_total if cap_total else 0.0
        return {b: (max(0.0, mean - self.tolerance) * c, (mean + self.tolerance) * c) for b, c in self.capacity.items()}


@dataclass
class IngressOutcome:
    """What the bytes-in step changed."""

    #: (topic index, partition index) -> new replicas.
    changed: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    before: dict[int, float] = field(default_factory=dict)
    after: dict[int, float] = field(default_factory=dict)
    moves: int = 0
    swaps: int = 0
    warnings: list[str] = field(default_factory=list)
    #: Broker left outside the band -> what stopped it (a key of :data:`STOP_REASONS`).
    stopped_by: dict[int, str] = field(default_factory=dict)


# -- tiered topics ---------------------------------------------------------------------------


def tiered_report(snapshot: ClusterSnapshot, moves: Sequence[TopicMove]) -> TieredReport | None:
    """How many tiered partitions the snapshot has and their local bytes (``None``: none)."""
    tiered = {t.name for t in snapshot.topics if t.is_tiered}
    if not tiered:
        return None
    partitions = local = total = 0
    for p in snapshot.partitions:
        size = (partition_size(p.replica_sizes) or 0) * len(target_of(p))
        total += size
        if p.topic in tiered:
            partitions += 1
            local += size
    moved = sum(m.size * m.replica_moves for m in moves if m.topic in tiered)
    return TieredReport(topics=len(tiered), partitions=partitions, local_bytes=local, total_bytes=total,
                        bytes_to_move=moved)


# -- rates per broker and the bound ----------------------------------------------------------


def rate_per_broker(
    snapshot: ClusterSnapshot, moved: Mapping[tuple[str, int], tuple[int, ...]] | None = None,
    live: Sequence[int] | None = None,
) -> dict[int, float]:
    """Bytes in per broker: the rates of the replicas it holds (after ``moved``, live brokers only)."""
    out: dict[int, float] = dict.fromkeys(live, 0.0) if live is not None else {}
    keep = set(live) if live is not None else None
    for p in snapshot.partitions:
        r = p.bytes_in_per_s or 0.0
        reps = moved.get((p.topic, p.partition), target_of(p)) if moved else target_of(p)
        for b in reps:
            if keep is None or b in keep:
                out[b] = out.get(b, 0.0) + r
    return out


def ingress_min_out(
    snapshot: ClusterSnapshot, before: Mapping[int, float], after: Mapping[int, float], goal: IngressGoal,
    *, include_in_flight: bool = False,
) -> dict[int, int]:
    """Per broker above the band (widened to where the plan left it): the fewest bytes any plan moves
    off it to shed that rate (fractional knapsack of its movable replicas by bytes per rate)."""
    band = goal.band(sum(after.values()))
    need = {b: before.get(b, 0.0) - max(hi, after.get(b, 0.0)) for b, (_, hi) in band.items()}
    need = {b: x for b, x in need.items() if x > 0}
    if not need:
        return {}
    held: dict[int, list[tuple[float, float]]] = {b: [] for b in need}
    for p in snapshot.partitions:
        r = p.bytes_in_per_s or 0.0
        if r <= 0 or (p.reassigning and not include_in_flight):
            continue
        size = float(partition_size(p.replica_sizes) or 0)
        for b in target_of(p):
            if b in held:
                held[b].append((size / r, r))
    out: dict[int, int] = {}
    for b, x in need.items():
        acc = 0.0
        for per_rate, r in sorted(held[b]):
            take = min(r, x)
            acc += per_rate * take
            x -= take
            if x <= 0:
                break
        out[b] = int(acc)
    return out


def ingress_goal(
    network_in: Mapping[int, int | None], layout: BrokerLayout, disk: DiskGoal, tolerance: float
) -> IngressGoal | None:
    """The goal when every live broker has a ``network_in`` capacity; ``None`` when none has one;
    :class:`ConfigurationError` naming the brokers without one when only some have."""
    from airflow_kafka_reassign.exceptions import ConfigurationError

    given = {b: c for b in layout.brokers if (c := network_in.get(b)) is not None}
    if not given:
        return None
    missing = [b for b in layout.brokers if b not in given]
    if missing:
        raise ConfigurationError(
            f"capacity document gives network_in for some brokers but not for broker(s) {missing}; give every "
            "broker one (a default, or per rack) or none, so bytes in can be balanced as a share of it"
        )
    return IngressGoal(capacity=given, disk=disk, tolerance=tolerance)


# -- the step --------------------------------------------------------------------------------


def _racks_ok(rack: Mapping[int, int], n_racks: int, reps: Sequence[int], old: int, new: int) -> bool:
    if rack.get(new, -1) == rack.get(old, -1):
        return True
    before = {rack.get(b, -1) for b in reps}
    after = {rack.get(b, -1) for b in reps if b != old} | {rack.get(new, -1)}
    return len(after) >= min(len(reps), n_racks, len(before))


class _Window:
    """Counts per broker that must stay within max - min <= limit (the larger of the wanted spread
    and the one they start with). A histogram of the counts makes each check O(1)."""

    def __init__(self, counts: Mapping[int, int], brokers: Sequence[int], spread: int) -> None:
        self.counts = {b: counts.get(b, 0) for b in brokers}
        values = list(self.counts.values()) or [0]
        self.hi, self.lo = max(values), min(values)
        self.limit = max(spread, self.hi - self.lo)
        self.hist: dict[int, int] = {}
        for v in values:
            self.hist[v] = self.hist.get(v, 0) + 1

    def _after(self, src: int, dst: int) -> tuple[int, int]:
        """(max, min) of the counts once one replica went from ``src`` to ``dst``."""
        cs, cd = self.counts[src], self.counts[dst]
        h = self.hist

        def left(v: int) -> int:
            return h.get(v, 0) - (v == cs) - (v == cd) + (v == cs - 1) + (v == cd + 1)

        hi = self.hi if left(self.hi) > 0 else self.hi - 1
        lo = self.lo if left(self.lo) > 0 else self.lo + 1
        return max(hi, cd + 1), min(lo, cs - 1)

    def allows(self, src: int, dst: int) -> bool:
        hi, lo = self._after(src, dst)
        return hi - lo <= self.limit

    def apply(self, src: int, dst: int) -> None:
        self.hi, self.lo = self._after(src, dst)
        h = self.hist
        for v, d in ((self.counts[src], -1), (self.counts[src] - 1, 1), (self.counts[dst], -1), (self.counts[dst] + 1, 1)):
            h[v] = h.get(v, 0) + d
        self.counts[src] -= 1
        self.counts[dst] += 1


def _bucket(size: int) -> int:
    """Size bucket of a swap partner: four per power of two (sizes within a factor 1.25 or so)."""
    bl = max(size, 1).bit_length()
    return bl * 4 + ((size >> (bl - 3)) & 3) if bl >= 3 else bl * 4


def _bucket_floor(k: int) -> int:
    """The smallest size of bucket ``k``."""
    bl, sub = divmod(k, 4)
    if bl < 3:
        return 0 if bl <= 1 else 2
    return (4 + sub) << (bl - 3)


def _bucket_top(k: int) -> int:
    """One more than the largest size of bucket ``k``."""
    bl, sub = divmod(k, 4)
    if bl < 3:
        return 1 << bl
    return _bucket_floor(k + 1) if sub < 3 else 1 << bl


class _Order:
    """Replicas of one broker in the order of their keys; those gone from it are skipped (and
    dropped once at the front), arrivals inserted."""

    __slots__ = ("ids", "keys", "start")

    def __init__(self, pairs: list[tuple[float, int]]) -> None:
        pairs.sort()
        self.keys = [k for k, _ in pairs]
        self.ids = [e for _, e in pairs]
        self.start = 0

    def insert(self, key: float, e: int) -> None:
        i = bisect.bisect(self.keys, key, lo=self.start)
        self.keys.insert(i, key)
        self.ids.insert(i, e)

    def take(self, n: int, valid: Callable[[int], bool], stop: Callable[[int], bool] | None = None,
             skip: int = 0) -> list[int]:
        """The first ``n`` valid replicas (distinct) after the first ``skip`` valid ones, before the
        first that ``stop`` ends the list at."""
        ids = self.ids
        i = self.start
        while i < len(ids) and not valid(ids[i]):
            i += 1
        self.start = i
        out: list[int] = []
        seen: set[int] = set()
        while i < len(ids) and len(out) < n:
            e = ids[i]
            i += 1
            if stop is not None and stop(e):
                break
            if valid(e) and e not in seen:
                seen.add(e)
                if skip:
                    skip -= 1
                else:
                    out.append(e)
        return out


#: Replicas of a broker looked at per exchange: the most rate per byte, and the busiest of those
#: an earlier step put there (free to move on).
CANDIDATES = 32
FREE_CANDIDATES = 8
#: Windows of CANDIDATES a broker that finds no exchange looks at before it counts as stuck (at least).
DEPTH = 4
#: Brokers a broker outside the band tries to exchange with before it counts as stuck.
RECEIVERS = 8
#: Partners looked at per size bucket of the receiver in a swap search.
BUCKET_TRIES = 8
#: Feasible exchanges compared before the one shifting the most rate per byte moved is applied.
COMPARED = 4
#: The least rate an exchange shifts, as a share of the pair's smaller network_in.
MIN_SHIFT = 0.001
#: Rounds over the brokers left stuck (each after some other broker moved).
ROUNDS = 4
#: Windows wider than this are not checked (``disk_topic_spread`` unset: unlimited).
UNLIMITED = 10**8

#: Why a broker stays outside the bytes-in band (:attr:`IngressOutcome.stopped_by`), in words.
STOP_REASONS = {
    "disk band": "no exchange keeps both brokers' disk within the disk band (or under the cap): no replica of a fitting size",
    "racks": "its busy replicas' partitions may not leave their racks (the rack rule)",
    "replica counts": "the replica-count window allows no plain move and no swap partner fits",
    "too busy": "its replicas are too busy for the room the other brokers' bands leave (each would overshoot)",
    "no room": "no other broker has room in its band (or bytes in to spare)",
    "pinned": "no replica of it may move (in flight, or a topic not balanced)",
    "move limit": "the step's move limit",
}


class IngressStep:
    """The bytes-in step on ``replicas`` (one list per topic of ``topics``, after the disk step), with
    one rate per partition (``rates``) and the load of the partitions the plan leaves alone (``fixed_*``);
    :meth:`run` gives its :class:`IngressOutcome`.

    A broker above its band sends replicas to (and one below pulls them from) the brokers furthest
    the other way, one *exchange* at a time: a plain move, or a swap with a partner replica of the
    receiver. Each broker keeps its replicas in two orders: by rate per byte (the busiest per byte
    first: what sheds rate for the fewest bytes; those an earlier step put there, free to move on,
    before all) and in size buckets (four per power of two) by rate (the quietest partner of about the size
    the two disk bands leave room for). Of the first feasible exchanges the one shifting the most
    rate per byte it adds to the plan wins; none shifts more than the room left in either band."""

    def __init__(
        self,
        topics: Sequence[TopicPartitions],
        replicas: Sequence[Sequence[tuple[int, ...]]],
        rates: Sequence[Sequence[float]],
        layout: BrokerLayout,
        fixed_bytes: Mapping[int, int],
        fixed_counts: Mapping[int, int],
        fixed_rates: Mapping[int, float],
        goal: IngressGoal,
    ) -> None:
        self.goal = goal
        self.live = tuple(layout.brokers)
        live = set(self.live)
        self.rack = layout.rack_of
        self.n_racks = layout.n_racks
        self.bytes = {b: fixed_bytes.get(b, 0) for b in self.live}
        self.rate = {b: float(fixed_rates.get(b, 0.0)) for b in self.live}
        counts = {b: fixed_counts.get(b, 0) for b in self.live}
        self.reps: list[list[int]] = []
        self.orig: list[tuple[int, ...]] = []
        self.size: list[int] = []
        self.r: list[float] = []
        self.topic: list[int] = []
        self.key: list[tuple[int, int]] = []
        held: dict[int, list[int]] = {b: [] for b in self.live}
        unlimited = goal.disk.topic_spread >= UNLIMITED
        tcounts: list[dict[int, int]] = []
        for ti, (t, reps, rs) in enumerate(zip(topics, replicas, rates, strict=True)):
            sizes = t.sizes or [0] * len(reps)
            frozen = t.frozen or [False] * len(reps)
            tc: dict[int, int] = {}
            for pi, (rep, s, r) in enumerate(zip(reps, sizes, rs, strict=True)):
                e = len(self.reps)
                self.reps.append(list(rep))
                self.orig.append(t.replicas[pi])
                self.size.append(s)
                self.r.append(r)
                self.topic.append(ti)
                self.key.append((ti, pi))
                movable = t.balance and not frozen[pi]
                for b in rep:
                    if b in live:
                        self.bytes[b] += s
                        self.rate[b] += r
                        counts[b] += 1
                        if not unlimited:
                            tc[b] = tc.get(b, 0) + 1
                        if movable:
                            held[b].append(e)
            tcounts.append(tc)
        self.density = [r / max(s, 1) for r, s in zip(self.r, self.size, strict=True)]
        #: broker -> its replicas to shed: those an earlier step put there (free to move on) by rate,
        #: the others by rate per byte
        self.free: dict[int, _Order] = {}
        self.paid: dict[int, _Order] = {}
        #: broker -> size bucket -> (rates ascending, replicas): the swap partners
        self.cold: dict[int, dict[int, tuple[list[float], list[int]]]] = {}
        self.cold_buckets: dict[int, list[int]] = {}
        for b, es in held.items():
            self.free[b] = _Order([(-self.r[e], e) for e in es if b not in self.orig[e]])
            self.paid[b] = _Order([(-self.density[e], e) for e in es if b in self.orig[e]])
            buckets: dict[int, list[tuple[float, int]]] = {}
            for e in es:
                buckets.setdefault(_bucket(self.size[e]), []).append((self.r[e], e))
            self.cold[b] = {}
            for k, items in buckets.items():
                items.sort()
                self.cold[b][k] = ([r for r, _ in items], [e for _, e in items])
            self.cold_buckets[b] = sorted(self.cold[b])
        self.total_bytes = sum(self.bytes.values())
        disk = goal.disk
        band = disk.band(self.total_bytes)
        cap = disk.capacity
        # the disk band, widened to where the disk step left a broker (never made worse), under the cap
        self.disk_lo = {b: min(band[b][0], self.bytes[b]) for b in self.live}
        self.disk_hi = {b: max(min(band[b][1], disk.cap * cap[b]), self.bytes[b]) for b in self.live}
        self.band = goal.band(sum(self.rate.values()))
        self.counts = _Window(counts, self.live, disk.count_spread)
        self.tcounts = [None if unlimited else _Window(tc, self.live, disk.topic_spread) for tc in tcounts]
        self.touched: set[int] = set()
        #: replica moves left (each exchange shifts at least MIN_SHIFT of a network_in): bounds the work
        self.budget = 2 * len(self.reps) + 16
        self.reasons: dict[int, dict[str, int]] = {}
        #: how deep a stuck broker looks into its replicas (CANDIDATES at a time): scales with its replicas
        self.depth = max(DEPTH, int(math.sqrt(len(self.reps) / max(1, len(self.live)))) // 8)
        self.out = IngressOutcome(before=dict(self.rate))

    # -- checks ----------------------------------------------------------------------------
    def cost(self, e: int, src: int, dst: int) -> int:
        """Bytes this move adds to the plan's (negative: it saves some)."""
        o = self.orig[e]
        return self.size[e] * ((dst not in o) - (src not in o))

    def topic_allows(self, e: int, src: int, dst: int) -> bool:
        w = self.tcounts[self.topic[e]]
        return w is None or w.allows(src, dst)

    def apply(self, e: int, src: int, dst: int) -> None:
        reps = self.reps[e]
        reps[reps.index(src)] = dst
        s, r = self.size[e], self.r[e]
        self.bytes[src] -= s
        self.bytes[dst] += s
        self.rate[src] -= r
        self.rate[dst] += r
        self.counts.apply(src, dst)
        w = self.tcounts[self.topic[e]]
        if w is not None:
            w.apply(src, dst)
        # e is now one of dst's replicas: in its order to shed and among its swap partners
        if dst in self.orig[e]:
            self.paid[dst].insert(-self.density[e], e)
        else:
            self.free[dst].insert(-r, e)
        bk = _bucket(s)
        bucket = self.cold[dst].get(bk)
        if bucket is None:
            bucket = self.cold[dst][bk] = ([], [])
            bisect.insort(self.cold_buckets[dst], bk)
        i = bisect.bisect(bucket[0], r)
        bucket[0].insert(i, r)
        bucket[1].insert(i, e)
        self.touched.add(e)
        self.out.moves += 1
        self.budget -= 1

    # -- one exchange ----------------------------------------------------------------------
    def candidates(self, src: int, least: float, depth: int = 0) -> list[int]:
        """Replicas on ``src`` with a rate of at least ``least``, in the order to shed them: the busiest
        of those free to move on (up to FREE_CANDIDATES), then the most rate per byte (up to CANDIDATES,
        after ``depth`` times as many)."""
        reps = self.reps
        free = [] if depth else self.free[src].take(FREE_CANDIDATES, lambda e: src in reps[e],
                                                    stop=lambda e: self.r[e] < least)
        paid = self.paid[src].take(CANDIDATES, lambda e: src in reps[e] and self.r[e] >= least, skip=depth * CANDIDATES)
        return free + [e for e in paid if e not in free]

    def partner(self, e: int, src: int, dst: int, lo: float, hi: float, rlo: float, rhi: float,
                c_e: int, best: float) -> tuple[int | None, float]:
        """The quietest replica ``q`` of ``dst`` of size in [``lo``, ``hi``] and rate in [``rlo``, ``rhi``]
        that may go to ``src`` (racks, topic window), per size bucket, smallest buckets first: the one
        shifting the most rate per byte moved (``(r_e - r_q) / bytes``), if better than ``best``."""
        found: int | None = None
        r_e = self.r[e]
        cold = self.cold[dst]
        for k in self.cold_buckets[dst]:
            smallest = _bucket_floor(k)
            if smallest > hi:
                break
            if _bucket_top(k) <= lo:
                continue
            if best > 0 and (r_e - max(rlo, 0.0)) / max(c_e + smallest, 1) <= best:
                break  # larger partners cost more bytes than the best found shifts per byte
            rates, ids = cold[k]
            i = bisect.bisect_left(rates, rlo)
            tries = 0
            while i < len(rates) and rates[i] <= rhi and tries < BUCKET_TRIES:
                q = ids[i]
                i += 1
                reps = self.reps[q]
                if dst not in reps:
                    continue  # gone from dst since
                tries += 1
                s_q = self.size[q]
                if not lo <= s_q <= hi or src in reps or q == e:
                    continue
                if not _racks_ok(self.rack, self.n_racks, reps, dst, src):
                    continue
                if self.topic[q] != self.topic[e] and not (self.topic_allows(e, src, dst) and self.topic_allows(q, dst, src)):
                    continue
                score = (r_e - rates[i - 1]) / max(c_e + self.cost(q, dst, src), 1)
                if score > best:
                    best, found = score, q
                break
        return found, best

    def exchange(self, src: int, dst: int, why: dict[str, int], depth: int = 0) -> bool:
        """The best plain move or swap of a replica of ``src`` to ``dst`` (rate from ``src`` to ``dst``);
        ``why`` counts what refused the candidates when there is none."""
        band = self.band
        cap = self.goal.capacity
        lim = min(self.rate[src] - band[src][0], band[dst][1] - self.rate[dst])
        least = min(MIN_SHIFT * min(cap[src], cap[dst]), self.rate[src] / max(1, self.counts.counts[src]))
        if lim < least:
            why["no room"] = why.get("no room", 0) + 1
            return False
        bs, bd = self.bytes[src], self.bytes[dst]
        # what a swap partner's size may differ from the replica's: both disks stay in their bands
        dlo = max(self.disk_lo[src] - bs, bd - self.disk_hi[dst])
        dhi = min(self.disk_hi[src] - bs, bd - self.disk_lo[dst])
        counts_ok = self.counts.allows(src, dst)
        cands = self.candidates(src, least, depth)
        if not cands:
            if not depth:
                why["pinned"] = why.get("pinned", 0) + 1
            return False
        best = 0.0
        choice: tuple[int, int | None] | None = None
        feasible = 0
        for e in cands:
            r_e = self.r[e]
            reps = self.reps[e]
            if dst in reps or not _racks_ok(self.rack, self.n_racks, reps, src, dst):
                why["racks"] = why.get("racks", 0) + 1
                continue
            s_e = self.size[e]
            c_e = self.cost(e, src, dst)
            if r_e <= lim and dlo <= -s_e <= dhi and counts_ok and self.topic_allows(e, src, dst):
                score = r_e / max(c_e, 1)
                feasible += 1
                if score > best:
                    best, choice = score, (e, None)
            elif dlo <= dhi:
                q, score = self.partner(e, src, dst, s_e + dlo, s_e + dhi, r_e - lim, r_e - least, c_e, best)
                if q is not None:
                    feasible += 1
                    best, choice = score, (e, q)
                else:
                    reason = "too busy" if r_e > lim else "disk band" if not dlo <= -s_e <= dhi else "replica counts"
                    why[reason] = why.get(reason, 0) + 1
            else:
                why["disk band"] = why.get("disk band", 0) + 1
            if feasible >= COMPARED:
                break
        if choice is None:
            return False
        e, q = choice
        self.apply(e, src, dst)
        if q is not None:
            self.apply(q, dst, src)
            self.out.swaps += 1
        return True

    # -- the passes ------------------------------------------------------------------------
    def share(self, b: int) -> float:
        return self.rate[b] / self.goal.capacity[b]

    def partners(self, b: int, pool: Sequence[int], busiest: bool) -> list[int]:
        """The RECEIVERS brokers of ``pool`` furthest the other way from ``b``, and as many again of
        ``b``'s rack (a partition on every rack only moves within one)."""
        order = sorted(pool, key=self.share, reverse=busiest)
        out = order[:RECEIVERS]
        same = [x for x in order[RECEIVERS:] if self.rack.get(x, -1) == self.rack.get(b, -1)]
        return out + same[:RECEIVERS]

    def passes(self) -> None:
        band = self.band
        cap = self.goal.capacity
        stuck: set[int] = set()
        rounds = 0
        moves_at_reset = self.out.moves
        while self.budget > 0:
            worst, b0, over = 0.0, None, True
            for b in self.live:
                if b in stuck:
                    continue
                r = self.rate[b]
                if r > band[b][1] and (r - band[b][1]) / cap[b] > worst:
                    worst, b0, over = (r - band[b][1]) / cap[b], b, True
                elif r < band[b][0] and (band[b][0] - r) / cap[b] > worst:
                    worst, b0, over = (band[b][0] - r) / cap[b], b, False
            if b0 is None:
                rounds += 1
                if not stuck or self.out.moves == moves_at_reset or rounds >= ROUNDS:
                    break
                stuck.clear()
                moves_at_reset = self.out.moves
                continue
            why: dict[str, int] = {}
            done = False
            # the busiest replicas per byte first; deeper in the broker's order only when none of them fits
            for depth in range(self.depth):
                if over:
                    pool = [b for b in self.live if b != b0 and self.rate[b] < band[b][1]]
                    done = any(self.exchange(b0, dst, why, depth) for dst in self.partners(b0, pool, busiest=False))
                else:
                    pool = [b for b in self.live if b != b0 and self.rate[b] > band[b][0]]
                    done = any(self.exchange(src, b0, why, depth) for src in self.partners(b0, pool, busiest=True))
                if done or not pool or (over and not self.candidates(b0, 0.0, depth + 1)):
                    break
            if not done:
                if not pool:
                    why["no room"] = 1
                stuck.add(b0)
                self.reasons[b0] = why

    def run(self) -> IngressOutcome:
        self.passes()
        for e in self.touched:
            self.out.changed[self.key[e]] = tuple(self.reps[e])
        self.out.after = dict(self.rate)
        mean = sum(self.rate.values()) / sum(self.goal.capacity.values())
        off = [b for b in self.live if not self.band[b][0] - 1e-9 <= self.rate[b] <= self.band[b][1] + 1e-9]
        for b in off:
            why = self.reasons.get(b)
            reason = "move limit" if self.budget <= 0 or not why else max(why, key=lambda k: (why[k], k))
            self.out.stopped_by[b] = reason
        if off:
            by_reason: dict[str, list[int]] = {}
            for b, reason in self.out.stopped_by.items():
                by_reason.setdefault(reason, []).append(b)
            parts = "; ".join(f"{sorted(bs)}: {STOP_REASONS[k]}" for k, bs in sorted(by_reason.items()))
            self.out.warnings.append(
                f"bytes in: broker(s) {off} end outside {mean:.1%} +- {self.goal.tolerance:.0%} of their network_in "
                f"capacity; what stopped them: {parts}"
            )
        return self.out
