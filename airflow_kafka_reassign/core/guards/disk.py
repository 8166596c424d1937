"""The disk guard: never submit a move that a broker's disk cannot hold.

A reassignment copies every byte of a partition onto each broker it adds, and the replicas it
removes are deleted only once the move is done. A broker whose log directory fills up stops
(its logs go offline): the worst outcome a reassignment can cause. A plan's disk cap is only as
good as the capacity document it was planned with, and the plan may be hours old; so before each
batch the execution engine reads what each broker's disk has free *now* (DescribeLogDirs v4+,
Kafka 3.3+, KIP-827: each log dir's total and usable bytes, in the same request that reads the
replica sizes) and submits a move only if every broker it adds keeps ``reserve`` free after it:

    usable bytes now  -  bytes still to copy onto the broker by the copies under way
                      -  the partition's size (its largest replica)  >=  reserve

The copies under way are every reassignment in flight (this plan's or not) and the moves whose
new replicas are still catching up. A move that does not fit waits (it stays pending: a move that
ends frees its source's replicas, and a retention pass frees more); when nothing is under way and
no pending move fits, the run is refused naming the broker, the numbers and the fix.

KIP-827 reports each log dir's *filesystem*: log dirs on one volume report the same total and
usable bytes and are counted once. A new replica lands in one log dir, so it must also fit in one
volume, with that volume's share of the reserve (best effort: Kafka picks the log dir with the
fewest partitions, which this cannot see). A broker older than 3.3 (it reports no space) is not
guarded, and said so; a live broker that does not answer holds the moves onto it; a partition no
live broker reports a size for is not checked (none of its replicas can be read from until one
is back).

Pure: no Kafka client here; the adapter reads the log dirs (``ClusterAdmin.log_dirs``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from airflow_kafka_reassign.core.vocabulary.models import Move, TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import DiskSpace
from airflow_kafka_reassign.core.vocabulary.units import format_bytes, parse_bytes
from airflow_kafka_reassign.exceptions import ConfigurationError

#: The default reserve: keep at least 1% of each broker's disk free after the moves.
DEFAULT_RESERVE = "1%"
#: The environment variable that sets the operators' default reserve for a deployment (a task's ``disk_reserve``
#: wins); the test sessions set it, so their sandbox's moves of a few MB do not depend on the host's free disk.
RESERVE_ENV = "AKR_DISK_RESERVE"


@dataclass(frozen=True)
class DiskReserve:
    """What must stay free on each broker's disk after a move: bytes, or a share of the disk."""

    bytes: int = 0
    ratio: float = 0.0

    @classmethod
    def parse(cls, value: object, name: str = "disk_reserve") -> DiskReserve | None:
        """``"5%"``, ``"20GiB"``, ``"500 GB"``, ``"20G"``, an int (bytes); ``None``/``"off"``: no guard."""
        if value is None or (isinstance(value, str) and value.strip().lower() in ("off", "none", "")):
            return None
        fix = (f"{name} is what each broker keeps free after a move: a share of its disk (\"5%\"), a size "
               "(\"20GiB\", \"500GB\", bytes as an integer), or \"off\" (no disk guard)")
        if isinstance(value, bool):
            raise ConfigurationError(f"{name}={value!r}: {fix}")
        text = str(value).strip()
        if text.endswith("%"):
            try:
                share = float(text[:-1])
            except ValueError:
                raise ConfigurationError(f"{name}={value!r} is not a share or a size: {fix}") from None
            if not 0 <= share < 100:
                raise ConfigurationError(f"{name}={value!r}: a share is from 0% to below 100%: {fix}")
            return cls(ratio=share / 100)
        try:
            number: float | None = float(text)
        except ValueError:
            number = None
        if number is not None and (not math.isfinite(number) or 0 < number < 1):
            hint = f" (a share is written with %: \"{number * 100:g}%\")" if 0 < number < 1 else ""
            raise ConfigurationError(f"{name}={value!r} is not a number of bytes{hint}: {fix}")
        if number is not None and 0 < number < 2**20:  # "5" meaning 5% would leave no margin at all
            raise ConfigurationError(
                f"{name}={value!r} would keep {number:g} bytes free, no margin at all: write \"{number:g}%\" for a "
                f"share, or a unit (\"{number:g}GiB\", \"{number:g}B\" if bytes are meant): {fix}")
        if "/" in text:
            raise ConfigurationError(f"{name}={value!r} is a rate, not a size: {fix}")
        try:
            size = parse_bytes(value, name)
        except ValueError:
            raise ConfigurationError(f"{name}={value!r} is not a share or a size: {fix}") from None
        if size < 0:
            raise ConfigurationError(f"{name}={value!r} is negative: {fix}")
        return cls(bytes=size)

    def of(self, space: DiskSpace) -> int:
        """The bytes ``space`` (a broker) keeps free."""
        return max(self.bytes, int(self.ratio * space.total_bytes))

    def of_volume(self, space: DiskSpace, total: int) -> int:
        """The bytes one volume of ``space`` keeps free: its share (by size) of the broker's reserve."""
        return int(self.of(space) * total / space.total_bytes) if space.total_bytes else 0

    def __str__(self) -> str:
        return f"{self.ratio * 100:g}%" if self.ratio else format_bytes(self.bytes)


@dataclass
class DiskFit:
    """The batch that fits, the moves held for disk space (``{partition: why}``), and the brokers the guard
    could not check (no space reported)."""

    fits: list[Move] = field(default_factory=list)
    held: dict[TopicPartition, str] = field(default_factory=dict)
    unguarded: list[int] = field(default_factory=list)
    #: moves let through unchecked: no broker reported the partition's size (DescribeLogDirs)
    unsized: list[TopicPartition] = field(default_factory=list)
    #: per broker: bytes free above the reserve once the copies under way are done (before this batch)
    room: dict[int, int] = field(default_factory=dict)

    def line(self, limit: int = 3) -> str:
        """One line naming the held moves and why (the first ``limit``)."""
        shown = "; ".join(f"{tp}: {why}" for tp, why in sorted(self.held.items())[:limit])
        more = f" (and {len(self.held) - limit} more)" if len(self.held) > limit else ""
        return f"{len(self.held)} move(s) wait for disk space: {shown}{more}"


def default_reserve(environ: Mapping[str, str]) -> str:
    """The operators' default ``disk_reserve``: :data:`RESERVE_ENV` when set, else :data:`DEFAULT_RESERVE`."""
    return environ.get(RESERVE_ENV) or DEFAULT_RESERVE


def partition_bytes(sizes: Mapping[TopicPartition, Mapping[int, int]], tp: TopicPartition) -> int | None:
    """A partition's size: its largest replica (the leader's log, which a new replica copies)."""
    replicas = sizes.get(tp)
    return max(replicas.values()) if replicas else None


class DiskRoom:
    """The room each broker has for new replicas now, taken move by move (:meth:`take`).

    ``copies``: the copies under way, ``(partition, adding brokers)``; each still needs the
    partition's size minus what its new replica holds so far (``space`` was read after what they
    already copied). ``unanswered``: live brokers that did not answer DescribeLogDirs."""

    def __init__(self, copies: Iterable[tuple[TopicPartition, Iterable[int]]],
                 sizes: Mapping[TopicPartition, Mapping[int, int]], space: Mapping[int, DiskSpace],
                 reserve: DiskReserve, unanswered: Iterable[int] = ()) -> None:
        self.sizes, self.space, self.reserve = sizes, space, reserve
        self.unanswered = set(unanswered)
        self.room: dict[int, int] = {b: s.usable_bytes - reserve.of(s) for b, s in space.items()}
        self.volumes: dict[int, list[int]] = {
            b: [u - reserve.of_volume(s, t) for t, u in s.dirs] for b, s in space.items()}
        for tp, adding in copies:
            copying = partition_bytes(sizes, tp) or 0
            for b in adding:
                if b in self.room:
                    self._use(b, max(0, copying - sizes.get(tp, {}).get(b, 0)))
        self.unguarded: set[int] = set()
        self.unsized: list[TopicPartition] = []
        #: moves held only because a broker they add did not answer: they wait, and never refuse the run
        self.waiting: set[TopicPartition] = set()

    def _use(self, broker: int, size: int) -> None:
        self.room[broker] -= size
        volumes = self.volumes[broker]
        if volumes:
            i = max(range(len(volumes)), key=volumes.__getitem__)
            volumes[i] -= size

    def take(self, m: Move) -> str | None:
        """``None``: every broker ``m`` adds has room (now taken); else why it has not, in words."""
        silent = [b for b in m.adding_replicas if b in self.unanswered]
        if silent:
            self.waiting.add(m.tp)
            return (f"broker {silent[0]} did not answer DescribeLogDirs: its free space is unknown (the move waits "
                    "until it answers)")
        adding = [b for b in m.adding_replicas if b in self.room]
        self.unguarded.update(b for b in m.adding_replicas if b not in self.room)
        if not adding:
            return None
        size = partition_bytes(self.sizes, m.tp)
        if size is None:  # no live broker reports a replica: nothing can be copied from it until one is back
            self.unsized.append(m.tp)
            return None
        for b in adding:
            space = self.space[b]
            kept = self.reserve.of(space)
            if self.room[b] < size:
                coming = max(0, space.usable_bytes - kept - self.room[b])
                return (f"needs {format_bytes(size)} on broker {b}: {format_bytes(space.usable_bytes)} free, "
                        f"reserve {format_bytes(kept)}"
                        + (f", {format_bytes(coming)} still to come by copies under way or this batch" if coming
                           else ""))
            if max(self.volumes[b], default=0) < size:
                return (f"needs {format_bytes(size)} in one log dir of broker {b}: its roomiest volume has "
                        f"{format_bytes(max(0, max(self.volumes[b], default=0)))} above its share of the reserve "
                        f"({len(space.dirs)} volumes, {format_bytes(space.usable_bytes)} free in all)")
        for b in adding:
            self._use(b, size)
        return None


def fit_batch(
    batch: Sequence[Move],
    in_flight: Iterable[Move],
    sizes: Mapping[TopicPartition, Mapping[int, int]],
    space: Mapping[int, DiskSpace],
    reserve: DiskReserve,
) -> DiskFit:
    """The moves of ``batch`` (in order) that every broker they add can hold with ``reserve`` left free
    (:class:`DiskRoom`, first fit), next to the moves ``in_flight``."""
    room = DiskRoom([(m.tp, m.adding_replicas) for m in in_flight], sizes, space, reserve)
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
    """Why the run cannot go on when nothing is under way and nothing fits (the run is refused)."""
    return (f"disk guard: {fit.line()}; no copy is under way that would free space. Free disk space on those "
            f"brokers (retention, deleting topics), lower disk_reserve (now {reserve}), or plan again with a "
            "capacity document that reflects the disks (docs/plan.md)")
