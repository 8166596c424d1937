"""The bytes-in step and the tiered-storage accounting of load-aware plans.

**Bytes in.** Runs after the disk step (:mod:`.disk`) and before the leader fix-up, when the
capacity document gives every live broker a ``network_in`` capacity and the snapshot carries
bytes-in rates (:mod:`airflow_kafka_reassign.core.rates`). A broker takes in a partition's bytes
on every replica it holds (the leader from producers, a follower by replication), so its bytes in
is the sum of its replicas' rates, and the goal is every broker within ``ingress_tolerance`` of
the mean share (total rate over total ``network_in``). The goals keep their order: a move or swap
of this step never takes a broker's disk bytes out of the disk band (or further out, where the
disk step left it outside), above the disk cap, a partition onto fewer racks, a broker's replica
count or a topic's count on a broker out of the window the disk step kept; replication factors
never change. Where the counts would break, a *swap* sends back one of the receiver's quietest
replicas. It moves the replicas that shed the most rate per byte first, and those that cost no
bytes (put on the broker by an earlier step, or going back to a broker that held them) before
any other. Leadership does not change bytes in (followers take in what the leader does), so
preferred leaders stay with the leader step's count balance.

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

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_reassign.core.models import ClusterSnapshot, _Frozen
from airflow_kafka_reassign.core.planner.disk import DiskGoal
from airflow_kafka_reassign.core.planner.metrics import partition_size, target_of
from airflow_kafka_reassign.core.planner.types import BrokerLayout, TopicMove, TopicPartitions

#: Replicas of a broker tried per move (the best rate per byte first).
CANDIDATES = 64
#: Receivers tried per replica.
RECEIVERS = 16
#: Replicas of a receiver tried to send back in a swap.
SWAP_CANDIDATES = 64


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
    and the one they start with)."""

    def __init__(self, counts: dict[int, int], brokers: Sequence[int], spread: int) -> None:
        self.counts = {b: counts.get(b, 0) for b in brokers}
        values = list(self.counts.values()) or [0]
        self.limit = max(spread, max(values) - min(values))

    def allows(self, changes: Mapping[int, int]) -> bool:
        if all(d == 0 for d in changes.values()):
            return True
        after = dict(self.counts)
        for b, d in changes.items():
            after[b] = after.get(b, 0) + d
        return max(after.values()) - min(after.values()) <= self.limit

    def apply(self, changes: Mapping[int, int]) -> None:
        for b, d in changes.items():
            self.counts[b] = self.counts.get(b, 0) + d


class IngressStep:
    """The bytes-in step on ``replicas`` (one list per topic of ``topics``, after the disk step), with
    one rate per partition (``rates``) and the load of the partitions the plan leaves alone (``fixed_*``);
    :meth:`run` gives its :class:`IngressOutcome`."""

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
        self.on: dict[int, list[int]] = {b: [] for b in self.live}
        #: replicas that arrived on a broker during the step (not in its sorted lists)
        self.arrived: dict[int, list[int]] = {b: [] for b in self.live}
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
                        tc[b] = tc.get(b, 0) + 1
                        if movable:
                            self.on[b].append(e)
            tcounts.append(tc)
        # sorted once: the busiest per byte (free moves first) to shed, the quietest to swap back
        for b, lst in self.on.items():
            lst.sort(key=functools.partial(self.shed_order, b=b))
        self.quiet = {b: sorted(lst, key=lambda q: (self.r[q], self.size[q])) for b, lst in self.on.items()}
        self.total_bytes = sum(self.bytes.values())
        disk = goal.disk
        band = disk.band(self.total_bytes)
        cap = disk.capacity
        # the disk band, widened to where the disk step left a broker (never made worse), under the cap
        self.disk_lo = {b: min(band[b][0], self.bytes[b]) for b in self.live}
        self.disk_hi = {b: max(min(band[b][1], disk.cap * cap[b]), self.bytes[b]) for b in self.live}
        self.band = goal.band(sum(self.rate.values()))
        self.counts = _Window(counts, self.live, disk.count_spread)
        self.tcounts = [_Window(tc, self.live, disk.topic_spread) for tc in tcounts]
        self.touched: set[int] = set()
        #: moves left: each shrinks a broker's distance to its band, this bounds the passes' work
        self.budget = 2 * len(self.reps) + 16
        self.out = IngressOutcome(before=dict(self.rate))

    def shed_order(self, e: int, b: int) -> tuple[bool, float]:
        """Sort key of ``e`` on ``b``: put there by an earlier step (free to move on) first, then bytes per rate."""
        return (b in self.orig[e], self.size[e] / self.r[e] if self.r[e] > 0 else float("inf"))

    # -- checks ----------------------------------------------------------------------------
    def cost(self, e: int, src: int, dst: int) -> int:
        """Bytes this move adds to the plan's (negative: it saves some)."""
        o = self.orig[e]
        return self.size[e] * ((dst not in o) - (src not in o))

    def fits(self, e: int, src: int, dst: int, back: int | None = None) -> bool:
        """``e`` from ``src`` to ``dst`` (and ``back`` from ``dst`` to ``src``) keeps racks, the disk band and cap."""
        reps = self.reps[e]
        if dst in reps or not _racks_ok(self.rack, self.n_racks, reps, src, dst):
            return False
        ds = self.size[e] - (self.size[back] if back is not None else 0)
        if back is not None:
            breps = self.reps[back]
            if src in breps or not _racks_ok(self.rack, self.n_racks, breps, dst, src):
                return False
        return self.bytes[src] - ds >= self.disk_lo[src] and self.bytes[dst] + ds <= self.disk_hi[dst] \
            and self.bytes[dst] + ds >= self.disk_lo[dst] and self.bytes[src] - ds <= self.disk_hi[src]

    def windows_allow(self, e: int, src: int, dst: int, back: int | None = None) -> bool:
        if back is None:
            return self.counts.allows({src: -1, dst: 1}) and self.tcounts[self.topic[e]].allows({src: -1, dst: 1})
        te, tb = self.topic[e], self.topic[back]
        if te == tb:
            return True
        return self.tcounts[te].allows({src: -1, dst: 1}) and self.tcounts[tb].allows({dst: -1, src: 1})

    def apply(self, e: int, src: int, dst: int) -> None:
        reps = self.reps[e]
        reps[reps.index(src)] = dst
        s, r = self.size[e], self.r[e]
        self.bytes[src] -= s
        self.bytes[dst] += s
        self.rate[src] -= r
        self.rate[dst] += r
        self.counts.apply({src: -1, dst: 1})
        self.tcounts[self.topic[e]].apply({src: -1, dst: 1})
        self.arrived[dst].append(e)
        self.touched.add(e)
        self.out.moves += 1

    # -- moving ----------------------------------------------------------------------------
    def candidates(self, src: int, most: float) -> list[int]:
        """Movable replicas on ``src`` with a rate up to ``most``: free moves first, then the most rate per byte."""
        out = [e for e in self.arrived[src] if 0 < self.r[e] <= most and src in self.reps[e]]
        for e in self.on[src]:
            if len(out) >= CANDIDATES:
                break
            r = self.r[e]
            if r <= 0 or r > most or src not in self.reps[e]:
                continue
            out.append(e)
        return out[:CANDIDATES]

    def swap_back(self, e: int, src: int, dst: int) -> int | None:
        """A quiet replica on ``dst`` that may go to ``src`` in exchange for ``e`` (rate lower than ``e``'s)."""
        tried = 0
        for q in self.quiet[dst]:
            if tried >= SWAP_CANDIDATES or self.r[q] * 2 >= self.r[e]:
                return None
            if dst not in self.reps[q] or q == e:
                continue
            tried += 1
            if self.fits(e, src, dst, q) and self.windows_allow(e, src, dst, q):
                return q
        return None

    def move_one(self, src: int, receivers: Sequence[int], most: float) -> bool:
        """Move (or swap) one replica off ``src`` to one of ``receivers`` (each kept under its band's top)."""
        if self.budget <= 0:
            return False
        self.budget -= 1
        hi = self.band
        for e in self.candidates(src, most):
            r = self.r[e]
            tried = 0
            for dst in receivers:
                if tried >= RECEIVERS:
                    break
                if dst == src or self.rate[dst] + r > hi[dst][1]:
                    continue
                tried += 1
                if self.fits(e, src, dst) and self.windows_allow(e, src, dst):
                    self.apply(e, src, dst)
                    return True
                q = self.swap_back(e, src, dst)
                if q is not None:
                    self.apply(e, src, dst)
                    self.apply(q, dst, src)
                    self.out.swaps += 1
                    return True
        return False

    def share(self, b: int) -> float:
        return self.rate[b] / self.goal.capacity[b]

    def passes(self) -> None:
        band = self.band
        for _ in range(3):
            progress = self.out.moves
            for src in sorted((b for b in self.live if self.rate[b] > band[b][1]), key=lambda b: -self.share(b)):
                while self.rate[src] > band[src][1]:
                    receivers = sorted((b for b in self.live if b != src), key=self.share)
                    if not self.move_one(src, receivers, self.rate[src] - band[src][0]):
                        break
            for dst in sorted((b for b in self.live if self.rate[b] < band[b][0]), key=self.share):
                while self.rate[dst] < band[dst][0]:
                    donors = sorted((b for b in self.live if b != dst and self.rate[b] > band[b][0]),
                                    key=lambda b: -self.share(b))
                    room = band[dst][1] - self.rate[dst]
                    if not any(self.move_one(src, [dst], min(self.rate[src] - band[src][0], room))
                               for src in donors[:RECEIVERS]):
                        break
            if self.out.moves == progress:
                break

    def run(self) -> IngressOutcome:
        self.passes()
        for e in self.touched:
            self.out.changed[self.key[e]] = tuple(self.reps[e])
        self.out.after = dict(self.rate)
        mean = sum(self.rate.values()) / sum(self.goal.capacity.values())
        off = [b for b in self.live if not self.band[b][0] - 1e-9 <= self.rate[b] <= self.band[b][1] + 1e-9]
        if off:
            self.out.warnings.append(
                f"bytes in: broker(s) {off} end outside {mean:.1%} +- {self.goal.tolerance:.0%} of their network_in "
                "capacity: their busy replicas are too busy, too large for the disk band, or pinned by the rack and "
                "count limits"
            )
        return self.out
