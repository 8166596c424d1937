"""The disk guard: never submit a move that a broker's disk cannot hold.

A reassignment copies every byte of a partition onto each broker it adds, and the replicas it
removes are deleted only once the move is done. A broker whose log directory fills up stops
(its logs go offline): the worst outcome a reassignment can cause. A plan's disk cap is only as
good as the capacity document it was planned with, and the plan may be hours old; so before each
batch the execution engine reads what each broker's disk has free *now* (DescribeLogDirs v4+,
Kafka 3.3+, KIP-827: each log dir's total and usable bytes, in the same request that reads the
replica sizes) and submits a move only if every broker it adds keeps ``reserve`` free after it:

    usable bytes now  -  bytes still to copy onto the broker by the moves in flight
                      -  the partition's size (its largest replica)  >=  reserve

A move that does not fit waits (it stays pending: a move in flight that ends frees its source's
replicas, and a retention pass frees more); when nothing is in flight and nothing fits, the run
is refused naming the broker, the numbers and the fix. A broker that does not report its space
(older than 3.3, or no answer) is not guarded, and said so once per step; nor is a partition no
live broker reports a size for (none of its replicas can be read from until one is back).

Pure: no Kafka client here; the adapter reads the log dirs (``ClusterAdmin.log_dirs``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from airflow_kafka_reassign.core.models import Move, TopicPartition
from airflow_kafka_reassign.core.report import human_bytes
from airflow_kafka_reassign.exceptions import ConfigurationError

#: The default reserve: keep at least 1% of each broker's disk free after the moves.
DEFAULT_RESERVE = "1%"

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


@dataclass(frozen=True)
class DiskSpace:
    """One broker's log dirs as DescribeLogDirs reports them (summed over its log dirs)."""

    total_bytes: int
    usable_bytes: int
    #: the most usable bytes of any one log dir: a new replica lands in one log dir
    largest_usable: int


@dataclass(frozen=True)
class DiskReserve:
    """What must stay free on each broker's disk after a move: bytes, or a share of the disk."""

    bytes: int = 0
    ratio: float = 0.0

    @classmethod
    def parse(cls, value: object, name: str = "disk_reserve") -> DiskReserve | None:
        """``"5%"``, ``"20GiB"``, ``"500 GB"``, an int (bytes); ``None``/``"off"``: no guard."""
        if value is None or (isinstance(value, str) and value.strip().lower() in ("off", "none", "")):
            return None
        fix = (f"{name} is what each broker keeps free after a move: a share of its disk (\"5%\"), a size "
               "(\"20GiB\", \"500GB\", bytes as an integer), or \"off\" (no disk guard)")
        if isinstance(value, bool):
            raise ConfigurationError(f"{name}={value!r}: {fix}")
        if isinstance(value, int | float):
            if value < 0:
                raise ConfigurationError(f"{name}={value!r} is negative: {fix}")
            return cls(bytes=int(value))
        text = str(value).strip().lower().replace(" ", "")
        m = re.fullmatch(r"(\d+(?:\.\d+)?)(%|[kmgt]i?b|b)?", text)
        if not m:
            raise ConfigurationError(f"{name}={value!r} is not a share or a size: {fix}")
        number, unit = float(m.group(1)), m.group(2) or ""
        if unit == "%":
            if number >= 100:
                raise ConfigurationError(f"{name}={value!r}: a share must be below 100%: {fix}")
            return cls(ratio=number / 100)
        return cls(bytes=int(number * _UNITS[unit]))

    def of(self, space: DiskSpace) -> int:
        return max(self.bytes, int(self.ratio * space.total_bytes))

    def __str__(self) -> str:
        return f"{self.ratio * 100:g}%" if self.ratio else human_bytes(self.bytes)


@dataclass
class DiskFit:
    """The batch that fits, the moves held for disk space (``{partition: why}``), and the brokers the guard
    could not check (no space reported)."""

    fits: list[Move] = field(default_factory=list)
    held: dict[TopicPartition, str] = field(default_factory=dict)
    unguarded: list[int] = field(default_factory=list)
    #: moves let through unchecked: no broker reported the partition's size (DescribeLogDirs)
    unsized: list[TopicPartition] = field(default_factory=list)
    #: per broker: bytes free above the reserve once the moves in flight have copied (before this batch)
    room: dict[int, int] = field(default_factory=dict)

    def line(self, limit: int = 3) -> str:
        """One line naming the held moves and why (the first ``limit``)."""
        shown = "; ".join(f"{tp}: {why}" for tp, why in sorted(self.held.items())[:limit])
        more = f" (and {len(self.held) - limit} more)" if len(self.held) > limit else ""
        return f"{len(self.held)} move(s) wait for disk space: {shown}{more}"


def partition_bytes(sizes: Mapping[TopicPartition, Mapping[int, int]], tp: TopicPartition) -> int | None:
    """A partition's size: its largest replica (the leader's log, which a new replica copies)."""
    replicas = sizes.get(tp)
    return max(replicas.values()) if replicas else None


class DiskRoom:
    """The room each broker has for new replicas now, taken move by move (:meth:`take`).

    The moves ``in_flight`` still copy onto their adding brokers what those replicas lack (the
    partition's size minus the replica's bytes so far); ``space`` is read after what they already
    copied, so only the rest counts against it."""

    def __init__(self, in_flight: Iterable[Move], sizes: Mapping[TopicPartition, Mapping[int, int]],
                 space: Mapping[int, DiskSpace], reserve: DiskReserve) -> None:
        self.sizes, self.space, self.reserve = sizes, space, reserve
        self.room: dict[int, int] = {b: s.usable_bytes - reserve.of(s) for b, s in space.items()}
        for m in in_flight:
            copying = partition_bytes(sizes, m.tp) or 0
            for b in m.adding_replicas:
                if b in self.room:
                    self.room[b] -= max(0, copying - sizes.get(m.tp, {}).get(b, 0))
        self.unguarded: set[int] = set()
        self.unsized: list[TopicPartition] = []

    def take(self, m: Move) -> str | None:
        """``None``: every broker ``m`` adds has room (now taken); else why it has not, in words."""
        adding = [b for b in m.adding_replicas if b in self.room]
        self.unguarded.update(b for b in m.adding_replicas if b not in self.room)
        if not adding:
            return None
        size = partition_bytes(self.sizes, m.tp)
        if size is None:  # no live broker reports a replica: nothing can be copied from it until one is back
            self.unsized.append(m.tp)
            return None
        space, reserve = self.space, self.reserve
        short = [b for b in adding if self.room[b] < size or space[b].largest_usable - reserve.of(space[b]) < size]
        if short:
            b = short[0]
            kept = reserve.of(space[b])
            coming = max(0, space[b].usable_bytes - kept - self.room[b])
            return (f"needs {human_bytes(size)} on broker {b}: {human_bytes(space[b].usable_bytes)} free, "
                    f"reserve {human_bytes(kept)}"
                    + (f", {human_bytes(coming)} still to come by moves in flight or this batch" if coming else ""))
        for b in adding:
            self.room[b] -= size
        return None


def fit_batch(
    batch: Sequence[Move],
    in_flight: Iterable[Move],
    sizes: Mapping[TopicPartition, Mapping[int, int]],
    space: Mapping[int, DiskSpace],
    reserve: DiskReserve,
) -> DiskFit:
    """The moves of ``batch`` (in order) that every broker they add can hold with ``reserve`` left free
    (:class:`DiskRoom`, first fit)."""
    room = DiskRoom(in_flight, sizes, space, reserve)
    out = DiskFit(room=dict(room.room))
    for m in batch:
        why = room.take(m)
        if why is None:
            out.fits.append(m)
        else:
            out.held[m.tp] = why
    out.unguarded, out.unsized = sorted(room.unguarded), room.unsized
    return out


def refusal(fit: DiskFit, reserve: DiskReserve) -> str:
    """Why the run cannot go on when nothing is in flight and nothing fits (the run is refused)."""
    return (f"disk guard: {fit.line()}; nothing is in flight that would free space. Free disk space on those "
            f"brokers (retention, deleting topics), lower disk_reserve (now {reserve}), or plan again with a "
            "capacity document that reflects the disks (docs/plan.md)")
