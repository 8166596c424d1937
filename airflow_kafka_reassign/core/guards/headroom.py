"""A replication throttle that uses each broker's headroom (issue 27): per-broker rates from its network capacity
less the client traffic it carries now.

Kafka's replication throttle is a per-broker config: ``follower.replication.throttled.rate`` limits what a broker's
throttled (adding) replicas fetch, ``leader.replication.throttled.rate`` what its throttled leaders send them. A single
rate for every broker is either too slow for idle brokers or too fast for a busy one. Here each broker ``b`` gets::

    follower rate(b) = clamp(capacity_in(b)  x (1 - margin) - inbound(b),  floor, cap)
    leader rate(b)   = clamp(capacity_out(b) x (1 - margin) - outbound(b), floor, cap)

(the idea of kafka-kit's autothrottle), where the traffic is measured from two reads of every replica's size
(DescribeLogDirs, the reads the engine makes at each step anyway), the time between them:

* ``inbound(b)``: the growth of every replica on ``b`` except the adding replicas of this run's own moves (their
  copy is what the throttle limits): producer writes on the leaders it holds, replication into its followers, and
  the catch-up of replicas that are out of sync after a broker restart (recovery traffic that is not ours: it
  grows fast, so it takes the headroom it uses);
* ``outbound(b)``: for the partitions ``b`` leads, the growth of their other replicas (again except this run's
  adding replicas) plus an estimate of what consumers read, ``consumer_read_ratio`` x the leader's growth (sizes
  cannot show reads; 1.0 assumes each byte produced is read once; 0 ignores consumers, 3 assumes three consumer
  groups);
* a replica that shrank (retention, compaction) counts 0; a replica absent from one of the reads counts 0.

Assumptions, stated: a broker's capacity is its NIC (or quota) in each direction, the same all the time; the margin
(default 20%) absorbs bursts between two measurements and what sizes cannot see (request overhead, fetches of
consumers that re-read); the floor (default 1 MB/s, never above the cap) keeps a copy moving on a broker without
headroom (a warning names it); a broker's rate is rewritten only when it moved by more than ``hysteresis`` (10%) or
the cap fell below it, so config writes do not churn at every poll. Before the first measurement the rates are the
floor: with no measurement there is no known headroom, and one poll later there is.

Pure: no Airflow, no Kafka client. Everything is O(replicas) per measurement.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_reassign.core.vocabulary.capacity import names_a_document_file, read_document
from airflow_kafka_reassign.core.vocabulary.models import PartitionState, TopicPartition
from airflow_kafka_reassign.core.vocabulary.units import format_bytes, parse_bytes
from airflow_kafka_reassign.exceptions import ConfigurationError

_log = logging.getLogger(__name__)

DEFAULT_MARGIN = 0.2
DEFAULT_FLOOR = 1_000_000
DEFAULT_CONSUMER_READ_RATIO = 1.0
#: A broker's rate is rewritten when it would move by more than this share of its current value.
HYSTERESIS = 0.1
#: The journal event of a change of the per-broker rates.
HEADROOM_EVENT = "headroom-throttle"

Sizes = Mapping[TopicPartition, Mapping[int, int]]

_FIX = ("give throttle_headroom as bytes/s for every broker (50000000, \"100MiB\"), a mapping of broker ids to "
        "capacities ({\"default\": \"100MiB\", \"3\": {\"network_in\": \"50MiB\", \"network_out\": \"80MiB\"}}), or "
        "a capacity document (its default / racks / brokers entries with network_in and network_out)")


@dataclass(frozen=True)
class BrokerRates:
    """Per-broker replication throttle rates, what :func:`~airflow_kafka_reassign.core.execution.throttle.sync_throttles`
    takes in place of one rate: ``rates`` maps a broker to its ``(leader rate, follower rate)`` in bytes/s; a broker
    not in it (not measured yet) gets ``default`` for both."""

    rates: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    default: int = DEFAULT_FLOOR

    def __post_init__(self) -> None:
        bad = {b: r for b, r in self.rates.items() if min(r) <= 0}
        if self.default <= 0 or bad:
            raise ValueError(f"throttle rates must be positive bytes/s: default {self.default}, {bad or ''}")

    def of(self, broker: int) -> tuple[int, int]:
        """``(leader rate, follower rate)`` of ``broker``."""
        return self.rates.get(broker, (self.default, self.default))


@dataclass(frozen=True)
class NetworkCapacity:
    """Bytes per second a broker may take in (``network_in``: produce plus replication) and send
    (``network_out``: replication plus consumer fetches)."""

    network_in: int
    network_out: int


def _size(value: Any, what: str) -> int:
    try:
        n = parse_bytes(value, what)
    except ValueError as e:
        raise ConfigurationError(f"throttle_headroom: {e}") from None
    if n <= 0:
        raise ConfigurationError(f"throttle_headroom: {what} {value!r} is not a positive number of bytes/s; {_FIX}")
    return n


def _entry(value: Any, where: str) -> NetworkCapacity | None:
    """One capacity entry: a size (both directions), or a mapping with ``network_in`` and/or ``network_out`` (one
    given: the other is taken equal: a symmetric link); a document entry with neither gives no capacity."""
    if isinstance(value, Mapping):
        cin, cout = value.get("network_in"), value.get("network_out")
        if cin is None and cout is None:
            return None
        n_in = _size(cin if cin is not None else cout, f"{where}.network_in")
        n_out = _size(cout if cout is not None else cin, f"{where}.network_out")
        return NetworkCapacity(n_in, n_out)
    n = _size(value, where)
    return NetworkCapacity(n, n)


def _load(text: str) -> Any:
    """A size, or a capacity document's text or file (JSON or YAML, read as the planner reads it)."""
    stripped = text.strip()
    if "\n" not in stripped and not stripped.startswith("{") and not names_a_document_file(stripped):
        return stripped  # a size
    try:
        return read_document(stripped)
    except ConfigurationError as e:
        raise ConfigurationError(f"throttle_headroom: {e}") from None


@dataclass(frozen=True)
class HeadroomPolicy:
    """Where each broker's network capacity comes from and how the headroom is used (see the module doc).

    Build it with :meth:`parse`. ``cap`` (the task's ``throttle_bytes_per_sec``) is applied per step; without one,
    each broker's cap is its own capacity x (1 - margin)."""

    default: NetworkCapacity | None = None
    racks: Mapping[str, NetworkCapacity] = field(default_factory=dict)
    brokers: Mapping[int, NetworkCapacity] = field(default_factory=dict)
    margin: float = DEFAULT_MARGIN
    floor: int = DEFAULT_FLOOR
    consumer_read_ratio: float = DEFAULT_CONSUMER_READ_RATIO
    hysteresis: float = HYSTERESIS

    @classmethod
    def parse(cls, value: Any, *, margin: float = DEFAULT_MARGIN, floor: Any = DEFAULT_FLOOR,
              consumer_read_ratio: float = DEFAULT_CONSUMER_READ_RATIO) -> HeadroomPolicy | None:
        """The policy from ``throttle_headroom`` (``None``: off): bytes/s or a size string for every broker; a
        mapping of broker ids (and ``"default"``) to a size or ``{"network_in", "network_out"}``; or a capacity
        document (a mapping with ``default`` / ``racks`` / ``brokers``, or its JSON/YAML file or text), whose
        entries' ``network_in``/``network_out`` are used (``disk`` is ignored). :class:`ConfigurationError`
        naming the problem and the fix."""
        if value is None:
            return None
        if not (isinstance(margin, int | float) and not isinstance(margin, bool) and 0 <= margin < 1):
            raise ConfigurationError(
                f"headroom_margin must be a share in [0, 1) of each broker's capacity kept free (0.2 keeps 20%), "
                f"not {margin!r}")
        if not (isinstance(consumer_read_ratio, int | float) and not isinstance(consumer_read_ratio, bool)
                and consumer_read_ratio >= 0):
            raise ConfigurationError(
                f"consumer_read_ratio must be a number >= 0 (bytes consumers read per byte produced: 1.0 = read "
                f"once), not {consumer_read_ratio!r}")
        try:
            floor_n = parse_bytes(floor, "headroom_floor")
        except ValueError as e:
            raise ConfigurationError(str(e)) from None
        if floor_n <= 0:
            raise ConfigurationError(f"headroom_floor must be a positive number of bytes/s (the slowest a copy may "
                                     f"go on a broker without headroom), not {floor!r}")

        def make(default: NetworkCapacity | None, racks: Mapping[str, NetworkCapacity] | None = None,
                 brokers: Mapping[int, NetworkCapacity] | None = None) -> HeadroomPolicy:
            return cls(default=default, racks=dict(racks or {}), brokers=dict(brokers or {}), margin=float(margin),
                       floor=floor_n, consumer_read_ratio=float(consumer_read_ratio))

        if isinstance(value, str):
            value = _load(value)
        if isinstance(value, bool) or not isinstance(value, int | float | str | Mapping):
            raise ConfigurationError(f"throttle_headroom: {value!r} is not a capacity; {_FIX}")
        if not isinstance(value, Mapping):
            return make(_entry(value, "throttle_headroom"))
        if value and set(value) <= {"default", "racks", "brokers"}:  # a capacity document
            racks = value.get("racks") or {}
            brokers = value.get("brokers") or {}
            if not isinstance(racks, Mapping) or not isinstance(brokers, Mapping):
                raise ConfigurationError(f"throttle_headroom: racks and brokers must be mappings; {_FIX}")
            default = _entry(value["default"], "default") if value.get("default") is not None else None
            rack_caps = {str(r): c for r, v in racks.items() if (c := _entry(v, f"racks.{r}")) is not None}
            broker_caps = {_broker_id(b): c for b, v in brokers.items() if (c := _entry(v, f"brokers.{b}")) is not None}
            return make(default, rack_caps, broker_caps)
        default = _entry(value["default"], "default") if value.get("default") is not None else None
        per_broker = {_broker_id(b): c for b, v in value.items() if b != "default"
                      if (c := _entry(v, f"broker {b}")) is not None}
        return make(default, brokers=per_broker)

    def capacity(self, broker: int, rack: str | None = None) -> NetworkCapacity | None:
        """The most specific capacity of ``broker``: its own, its rack's, the default (``None``: none)."""
        if broker in self.brokers:
            return self.brokers[broker]
        if rack is not None and rack in self.racks:
            return self.racks[rack]
        return self.default

    def check(self, brokers: Collection[int], racks: Mapping[int, str | None]) -> None:
        """:class:`ConfigurationError` naming every broker of ``brokers`` (those a run may throttle) without a
        capacity: without one its headroom is unknown, and guessing it could starve its clients."""
        missing = sorted(b for b in brokers if self.capacity(b, racks.get(b)) is None)
        if missing:
            raise ConfigurationError(
                f"throttle_headroom gives no network capacity for broker(s) {missing}, which this plan's moves copy "
                f"from or to; nothing was changed. Add a \"default\" or an entry for them; {_FIX}")

    def target(self, broker: int, rack: str | None, inbound: float, outbound: float,
               cap: int | None) -> tuple[int, int, bool]:
        """``(leader rate, follower rate, at the floor)`` of a broker that carries ``inbound``/``outbound`` client
        bytes/s, within ``[floor, cap]`` (no cap: its capacity x (1 - margin)); the floor never exceeds the cap."""
        c = self.capacity(broker, rack)
        assert c is not None  # check() ran first
        keep = 1.0 - self.margin
        leader_room, follower_room = c.network_out * keep - outbound, c.network_in * keep - inbound
        out: list[int] = []
        floored = False
        for room, capacity in ((leader_room, c.network_out), (follower_room, c.network_in)):
            top = cap if cap is not None else max(1, int(capacity * keep))
            low = min(self.floor, top)
            floored = floored or room <= low
            out.append(int(min(top, max(low, room))))
        return out[0], out[1], floored

    def start_rate(self, cap: int | None) -> int:
        """The rate before the first measurement: the floor (within the cap)."""
        return min(self.floor, cap) if cap is not None else self.floor


@dataclass
class Traffic:
    """Client bytes per second each broker carries, measured over ``window_s``."""

    window_s: float
    inbound: dict[int, float] = field(default_factory=dict)
    outbound: dict[int, float] = field(default_factory=dict)


def _broker_id(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"throttle_headroom: {value!r} is not a broker id; {_FIX}") from None


def measure_traffic(before: Sizes, after: Sizes, window_s: float, partitions: Iterable[PartitionState],
                    ours: Mapping[TopicPartition, Collection[int]], *,
                    consumer_read_ratio: float = DEFAULT_CONSUMER_READ_RATIO) -> Traffic:
    """The client traffic of every broker from two reads of the replicas' sizes ``window_s`` apart (see the module
    doc): ``ours`` maps a partition to this run's adding replicas, whose growth is the copy itself and not counted.
    Partitions absent from a read, and replicas that shrank, count 0. One pass over the replicas."""
    if window_s <= 0:
        raise ValueError(f"window_s {window_s!r} is not positive")
    inbound: dict[int, float] = {}
    outbound: dict[int, float] = {}
    for p in partitions:
        a, b = before.get(p.tp), after.get(p.tp)
        if not a or not b:
            continue
        mine = ours.get(p.tp, ())
        replicated = 0
        leader_growth = 0
        for r, size in b.items():
            if r in mine or r not in a:
                continue
            grown = max(0, size - a[r])
            if not grown:
                continue
            inbound[r] = inbound.get(r, 0.0) + grown
            if r == p.leader:
                leader_growth = grown
            else:
                replicated += grown
        if p.leader is not None and (replicated or leader_growth):
            outbound[p.leader] = outbound.get(p.leader, 0.0) + replicated + consumer_read_ratio * leader_growth
    return Traffic(window_s=window_s, inbound={k: v / window_s for k, v in inbound.items()},
                   outbound={k: v / window_s for k, v in outbound.items()})


@dataclass
class HeadroomWatch:
    """The headroom throttle's state over a run: the last read of the sizes and the rates in force.

    Each :meth:`update` (one per step, with the sizes the step read) measures the traffic since the previous read
    and moves the rates of the brokers whose target moved by more than the hysteresis, or that the cap no longer
    allows; :meth:`rates` gives what to set now."""

    policy: HeadroomPolicy
    #: ``(leader, follower)`` bytes/s in force per broker (the last written, within the cap of their step)
    held: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: brokers at the floor at the last measurement (no headroom)
    floored: set[int] = field(default_factory=set)
    last: Traffic | None = None
    _before: tuple[float, Sizes] | None = None
    _ours: dict[TopicPartition, Collection[int]] = field(default_factory=dict)

    def rates(self, cap: int | None) -> BrokerRates:
        """The per-broker rates to set now, never above ``cap``."""
        held = dict(self.held) if cap is None else {b: (min(lr, cap), min(fr, cap)) for b, (lr, fr) in self.held.items()}
        return BrokerRates(rates=held, default=self.policy.start_rate(cap))

    def update(self, at_s: float, sizes: Sizes, partitions: Iterable[PartitionState],
               ours: Mapping[TopicPartition, Collection[int]], brokers: Mapping[int, str | None],
               cap: int | None) -> list[str]:
        """Measure against the previous read and move the rates of ``brokers`` (id -> rack: those with a capacity
        that the run may throttle); returns one ``"broker b: leader x -> y, follower x -> y (...)"`` per change."""
        before, self._before = self._before, (at_s, sizes)
        # a move that finished since the last read copied into its new replica until then: still ours this time
        mine, self._ours = {**self._ours, **ours}, dict(ours)
        if before is None or at_s <= before[0]:
            return []
        traffic = self.last = measure_traffic(before[1], sizes, at_s - before[0], partitions, mine,
                                              consumer_read_ratio=self.policy.consumer_read_ratio)
        changes: list[str] = []
        self.floored = set()
        h = self.policy.hysteresis
        for b, rack in sorted(brokers.items()):
            if self.policy.capacity(b, rack) is None:
                continue
            inbound, outbound = traffic.inbound.get(b, 0.0), traffic.outbound.get(b, 0.0)
            leader, follower, floored = self.policy.target(b, rack, inbound, outbound, cap)
            if floored:
                self.floored.add(b)
            old = self.held.get(b)
            if old is not None:
                over_cap = cap is not None and max(old) > cap
                if not over_cap and abs(leader - old[0]) <= h * old[0] and abs(follower - old[1]) <= h * old[1]:
                    continue
            self.held[b] = (leader, follower)
            was = f"{old[0]} -> " if old else ""
            wasf = f"{old[1]} -> " if old else ""
            changes.append(f"broker {b}: leader {was}{leader}, follower {wasf}{follower} B/s (client traffic in "
                           f"{format_bytes(inbound)}/s, out {format_bytes(outbound)}/s"
                           f"{'; NO HEADROOM: at the floor' if floored else ''})")
        return changes

    def export(self) -> dict[str, Any]:
        """The rates in force (JSON): a rebuilt watch goes on from them (its next read is a new baseline)."""
        return {"held": {str(b): list(r) for b, r in sorted(self.held.items())}}

    def restore(self, data: Mapping[str, Any]) -> None:
        self.held = {int(b): (int(r[0]), int(r[1])) for b, r in (data.get("held") or {}).items()}
