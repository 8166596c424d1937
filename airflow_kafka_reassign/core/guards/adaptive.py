"""Adaptive limits and poll interval: decisions only, pure and small.

* :func:`adapt`: AIMD on the number of concurrent moves and on the replication throttle, within
  the bounds the user set (:class:`AdaptiveBounds`): additive increase while the cluster is
  healthy and the copy progresses, multiplicative decrease on trouble (both) or on a stalled
  copy (concurrency only: fewer moves share the throttle, so each finishes sooner).
* :class:`CopyWatch`: the bytes left to copy over the last polls; a copy that does not gain on
  its leaders for ``stall_polls`` polls is *stalled* (for example a throttle below a hot
  partition's ingest rate: the follower copies, the leader grows as fast), and is reported as
  such instead of an ETA that slides silently.
* :func:`next_poll_s`: poll soon when the first move in flight is about to finish (from the bytes
  left and the rate), rarely when it is far, between a floor and a ceiling.

Example::

    >>> b = AdaptiveBounds(min_moves=1, max_moves=8, min_throttle=1_000_000, max_throttle=50_000_000)
    >>> adapt(Limits(moves=4, throttle=10_000_000), b, healthy=True, progressing=True, stalled=False)
    (Limits(moves=5, throttle=14900000), 'healthy and progressing: moves 4 -> 5, throttle 10000000 -> 14900000 B/s')
    >>> adapt(Limits(moves=4, throttle=10_000_000), b, healthy=False, progressing=True, stalled=False)[0]
    Limits(moves=2, throttle=5000000)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_kafka_reassign.core.vocabulary.models import Move, TopicPartition
from airflow_kafka_reassign.exceptions import ConfigurationError

#: The poll interval's floor by default (seconds): small plans finish as soon as Kafka's own tool.
DEFAULT_MIN_POLL_S = 0.5


@dataclass(frozen=True)
class Limits:
    """The limits in force now: concurrent moves, and the throttle in bytes/s (``None``: none)."""

    moves: int
    throttle: int | None = None


#: The keys of a task's ``adaptive_limits`` (the fields of :class:`AdaptiveBounds`).
BOUND_KEYS = frozenset({"max_moves", "min_moves", "min_throttle", "max_throttle", "increase_moves",
                        "increase_throttle", "decrease", "stall_polls", "stall_s"})


@dataclass(frozen=True)
class AdaptiveBounds:
    """The user's bounds for adaptive execution.

    :param min_moves: / :param max_moves: concurrent moves stay within these; the run starts at
        ``min_moves`` and adds ``increase_moves`` per healthy, progressing poll.
    :param min_throttle: / :param max_throttle: the throttle (bytes/s) stays within these (both or
        neither); it starts at the task's ``throttle_bytes_per_sec`` (or ``min_throttle``) and adds
        ``increase_throttle`` (default a tenth of the range) per healthy, progressing poll.
    :param decrease: the factor applied on trouble (both limits) or a stalled copy (moves only).
    :param stall_polls: polls without the bytes left shrinking before a copy counts as stalled.
    :param stall_s: and at least this many seconds (default ``None``: two fetch steps at the throttle,
        10-24 s, :func:`stall_window_s`); lower it only where a follower's 1 MiB fetch steps are no concern.
    """

    max_moves: int
    min_moves: int = 1
    min_throttle: int | None = None
    max_throttle: int | None = None
    increase_moves: int = 1
    increase_throttle: int | None = None
    decrease: float = 0.5
    stall_polls: int = 3
    stall_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_moves", "min_moves", "increase_moves", "stall_polls"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"adaptive {name} must be a positive integer, not {value!r}")
        if self.min_moves > self.max_moves:
            raise ConfigurationError(
                f"adaptive min_moves ({self.min_moves}) is above max_moves ({self.max_moves}); swap them")
        if (self.min_throttle is None) != (self.max_throttle is None):
            raise ConfigurationError("give both min_throttle and max_throttle (bytes/s) for an adaptive throttle, "
                                     "or neither for a fixed one")
        if self.min_throttle is not None and self.max_throttle is not None and not (
                0 < self.min_throttle <= self.max_throttle):
            raise ConfigurationError(f"adaptive throttle bounds must satisfy 0 < min_throttle <= max_throttle, not "
                                     f"{self.min_throttle} .. {self.max_throttle}")
        if self.stall_s is not None and (isinstance(self.stall_s, bool) or not isinstance(self.stall_s, int | float)
                                         or self.stall_s < 0):
            raise ConfigurationError(f"adaptive stall_s must be a duration in seconds >= 0, not {self.stall_s!r}")
        if not 0 < self.decrease < 1:
            raise ConfigurationError(f"adaptive decrease must be a factor between 0 and 1, not {self.decrease!r}")

    @classmethod
    def parse(cls, bounds: object, *, max_moves: int | None = None) -> AdaptiveBounds | None:
        """The bounds from a task's ``adaptive_limits`` dict (``None`` or empty: not adaptive), their
        ``max_moves`` defaulting to the task's ``max_moves`` (or 1); an unknown key is named."""
        if not bounds:
            return None
        if not isinstance(bounds, Mapping):
            raise ConfigurationError(f"adaptive_limits must be a dict such as {{'max_moves': 8}}, not {bounds!r}")
        unknown = set(bounds) - BOUND_KEYS
        if unknown:
            raise ConfigurationError(f"adaptive_limits: unknown key(s) {sorted(unknown)}; known: "
                                     f"{', '.join(sorted(BOUND_KEYS))}")
        return cls(**{"max_moves": max_moves or 1, **bounds})

    def start(self, throttle: int | None) -> Limits:
        """Where a run starts: the fewest moves, the given throttle clamped into the bounds."""
        if self.min_throttle is None or self.max_throttle is None:
            return Limits(self.min_moves, throttle)
        return Limits(self.min_moves, min(self.max_throttle, max(self.min_throttle, throttle or self.min_throttle)))

    @property
    def throttle_step(self) -> int:
        if self.increase_throttle is not None:
            return self.increase_throttle
        if self.min_throttle is None or self.max_throttle is None:
            return 0
        return max(1, (self.max_throttle - self.min_throttle) // 10)


def adapt(current: Limits, bounds: AdaptiveBounds, *, healthy: bool, progressing: bool,
          stalled: bool) -> tuple[Limits, str | None]:
    """The limits for the next poll, and why they changed (``None``: unchanged)."""
    moves, rate = current.moves, current.throttle
    adaptive_rate = rate is not None and bounds.min_throttle is not None and bounds.max_throttle is not None
    if not healthy or stalled:
        moves = max(bounds.min_moves, math.floor(moves * bounds.decrease))
        if not healthy and adaptive_rate:
            assert rate is not None and bounds.min_throttle is not None
            rate = max(bounds.min_throttle, int(rate * bounds.decrease))
        why = "cluster unhealthy" if not healthy else "copy stalled"
    elif progressing:
        moves = min(bounds.max_moves, moves + bounds.increase_moves)
        if adaptive_rate:
            assert rate is not None and bounds.max_throttle is not None
            rate = min(bounds.max_throttle, rate + bounds.throttle_step)
        why = "healthy and progressing"
    else:
        return current, None
    new = Limits(moves, rate)
    if new == current:
        return current, None
    parts = [f"moves {current.moves} -> {moves}"] if moves != current.moves else []
    if rate != current.throttle:
        parts.append(f"throttle {current.throttle} -> {rate} B/s")
    return new, f"{why}: {', '.join(parts)}"


def bytes_left(moves: Mapping[TopicPartition, Move],
               sizes: Mapping[TopicPartition, Mapping[int, int]]) -> dict[TopicPartition, int]:
    """Bytes each move in flight still has to copy: its largest current replica less its smallest
    adding replica (one not reported yet counts as empty). Moves whose current replicas' sizes
    are unknown (DescribeLogDirs said nothing) are left out."""
    out = {}
    for tp, m in moves.items():
        have = sizes.get(tp, {})
        source = [have[b] for b in (m.current_replicas or ()) if b in have]
        if source and m.adding_replicas:
            out[tp] = max(0, max(source) - min(have.get(b, 0) for b in m.adding_replicas))
    return out


def soonest_eta_s(left: Mapping[TopicPartition, int], rate: float | None) -> float | None:
    """When the first move in flight should finish: its bytes left at its share of the net rate."""
    if not left or rate is None or rate <= 0:
        return None
    return min(left.values()) * len(left) / rate


#: A follower fetches up to ``replica.fetch.max.bytes`` (1 MiB by default) at once, then the throttle holds it
#: back: under a throttle of T bytes/s its bytes grow in steps up to this many bytes apart (1 MiB / T seconds).
FETCH_STEP_BYTES = 1_048_576
#: No copy is called stalled before this many seconds without a new low of its bytes left, whatever the polls.
MIN_STALL_S = 10.0
#: Kafka measures a replication quota over 11 one-second windows (replication.quota.window.num): a throttled
#: follower fetches again at least this often, however low the throttle.
MAX_STALL_S = 24.0


def stall_window_s(throttle_bytes_per_sec: int | None) -> float:
    """The least time without gaining that means a stall: two fetch steps at the throttle (a throttled copy
    gains in ~1 MiB steps), between :data:`MIN_STALL_S` and :data:`MAX_STALL_S` (two quota windows)."""
    if not throttle_bytes_per_sec or throttle_bytes_per_sec <= 0:
        return MIN_STALL_S
    return min(MAX_STALL_S, max(MIN_STALL_S, 2 * FETCH_STEP_BYTES / throttle_bytes_per_sec))


class CopyWatch:
    """The bytes left over successive polls: the net copy rate, and whether the copy stalled.

    A copy is *stalled* when its bytes left have made no new low for ``stall_polls`` polls AND for at least
    ``window_s`` seconds (:func:`stall_window_s`): fast polls under a low throttle see the follower's ~1 MiB fetch
    steps as flat, which is not a stall. A move finishing, or the set of moves in flight changing (``key``),
    starts the count again."""

    def __init__(self, stall_polls: int = 3) -> None:
        self.stall_polls = stall_polls
        self._last: tuple[float, int] | None = None
        self._best: tuple[float, int] | None = None
        self._key: object = None
        self._flat = 0
        #: net bytes/s gained on the leaders over the last interval (``None``: unknown)
        self.rate: float | None = None

    def update(self, at_s: float, left: int | None, *, finished: int = 0, key: object = None,
               window_s: float = 0.0) -> bool:
        """Record the bytes left at ``at_s`` (seconds, on one clock for the life of the watch: monotonic in a
        run, wall-clock where the watch is carried across processes); ``finished`` moves ended since the
        last poll; ``key`` names the moves in flight. Returns whether the copy is stalled now."""
        if left is None:
            self._last, self._best, self.rate, self._flat = None, None, None, 0
            return False
        if self._last is not None and at_s > self._last[0] and key == self._key:
            # the same moves in flight at both polls: their bytes left fell this fast. Once the set changed (moves
            # ended, others were sent) the two sums are of different moves, and their difference says nothing of the
            # rate (20 moves sent as 20 ended read as almost no gain: a long ETA, the next poll a whole
            # poke_interval away); the last rate measured goes on, as the throttle that set it does.
            t0, left0 = self._last
            self.rate = (left0 - left) / (at_s - t0)
        self._last = (at_s, left)
        if self._best is None or finished or key != self._key or left < self._best[1]:
            self._best, self._key, self._flat = (at_s, left), key, 0
            return False
        self._flat += 1
        return left > 0 and self._flat >= self.stall_polls and at_s - self._best[0] >= window_s

    def export(self) -> dict[str, Any]:
        """The watch as JSON (``key``: the moves in flight, as ``[topic, partition]`` pairs)."""
        key = self._key
        return {"last": list(self._last) if self._last else None, "best": list(self._best) if self._best else None,
                "key": sorted([str(t), int(p)] for t, p in key) if isinstance(key, frozenset) else None,
                "flat": self._flat, "rate": self.rate}

    def restore(self, data: Mapping[str, Any]) -> None:
        """Go on from :meth:`export`'s output (a rebuilt watch of the same run)."""
        self._last = (float(data["last"][0]), int(data["last"][1])) if data.get("last") else None
        self._best = (float(data["best"][0]), int(data["best"][1])) if data.get("best") else None
        key = data.get("key")
        self._key = frozenset(TopicPartition(t, int(p)) for t, p in key) if key is not None else None
        self._flat = int(data.get("flat") or 0)
        self.rate = float(data["rate"]) if data.get("rate") is not None else None

    @property
    def flat_s(self) -> float:
        """Seconds since the bytes left made their last new low (0 when unknown)."""
        if self._best is None or self._last is None:
            return 0.0
        return self._last[0] - self._best[0]

    @property
    def flat_polls(self) -> int:
        """Polls since the bytes left made their last new low."""
        return self._flat

    @property
    def progressing(self) -> bool:
        return self.rate is not None and self.rate > 0


def next_poll_s(eta_s: float | None, *, previous_s: float | None, floor_s: float, ceiling_s: float,
                progressed: bool = False) -> float:
    """Seconds until the next poll: half the ETA of what is in flight, between ``floor_s`` and
    ``ceiling_s``; without an ETA, twice the previous interval (from the floor), so a small plan
    is polled soon and a long one does not flood the controller; but the previous interval again
    when moves finished since the last poll (``progressed``: the plan moves at that pace, and the
    rate of a set of moves that changed is unknown until the next poll)."""
    if ceiling_s <= floor_s:
        return ceiling_s
    if eta_s is not None:
        wait = eta_s / 2
    elif previous_s is None:
        wait = floor_s
    else:
        wait = previous_s if progressed else previous_s * 2
    return min(ceiling_s, max(floor_s, wait))
