"""Broker capacity: how many bytes each broker's log dirs may hold (and, optionally, how much
traffic it may take in), from a capacity document.

A capacity document gives a ``default`` for every broker and overrides per ``racks`` name and
per ``brokers`` id (the most specific wins: broker, then rack, then default), like Cruise
Control's capacity file (its broker id ``-1`` is our ``default``); heterogeneous brokers are
the normal case. JSON or YAML::

    {"default": {"disk": "2TiB"},
     "racks": {"rack-c": {"disk": "4TiB"}},
     "brokers": {"7": {"disk": "1TiB", "network_in": "100MiB"}}}

``disk`` is the bytes the broker's log dirs may hold (the volume size, not what is free), or
``"cluster"``: the size the broker itself reports for its log dirs (DescribeLogDirs v4, Kafka
3.3+, KIP-827's total bytes), read when the snapshot is taken, so no capacity file has to follow
the hardware (``{"default": {"disk": "cluster"}}``, or the shorthand ``capacity="cluster"``).
``network_in`` and ``network_out`` (bytes per second) are optional (``network_out`` serves the headroom throttle,
core/guards/headroom.py). Sizes are integers (bytes) or strings with a
unit, read by :func:`~airflow_kafka_reassign.core.vocabulary.units.parse_bytes`: ``K``/``M``/``G``/``T``
(powers of 1000) or ``KiB``/``MiB``/``GiB``/``TiB`` (powers of 1024); ``B`` is optional.

:meth:`CapacityDocument.resolve` turns a document into one :class:`BrokerCapacity` per broker
and fails, naming the broker, rack or number, on an override for a broker or rack the cluster
does not have, or a broker that nothing gives a capacity. Zero or negative capacities fail when
the document is read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from airflow_kafka_reassign.core.vocabulary.models import _Frozen
from airflow_kafka_reassign.core.vocabulary.units import parse_bytes
from airflow_kafka_reassign.exceptions import ConfigurationError


class BrokerCapacity(_Frozen):
    """One broker's capacity."""

    #: Bytes the broker's log dirs may hold.
    disk: int
    #: Bytes per second the broker may take in (produce plus replication), when known.
    network_in: int | None = None
    #: Bytes per second the broker may send (replication plus consumer fetches), when known: the headroom
    #: throttle's (core/guards/headroom.py); the planner does not use it.
    network_out: int | None = None

    @field_validator("disk", mode="before")
    @classmethod
    def _disk(cls, v: Any) -> int:
        n = parse_bytes(v, "disk")
        if n <= 0:
            raise ValueError(f"disk capacity {v!r} is not positive; give the bytes the broker's log dirs may hold")
        return n

    @field_validator("network_in", "network_out", mode="before")
    @classmethod
    def _network(cls, v: Any, info: ValidationInfo) -> int | None:
        if v is None:
            return None
        n = parse_bytes(v, str(info.field_name))
        if n <= 0:
            raise ValueError(f"{info.field_name} capacity {v!r} is not positive; leave it out if unknown")
        return n


#: A ``disk`` that the brokers report themselves (KIP-827), and the whole document that says so for every broker.
FROM_CLUSTER = "cluster"
#: The file beside a snapshot with each broker's log-dir space (``{broker: {"total_bytes", "usable_bytes"}}``).
DISKS_FILE = "disks.json"


class CapacityDocument(_Frozen):
    """Capacities: a default, overrides per rack name and per broker id (see module doc)."""

    default: BrokerCapacity | None = None
    racks: dict[str, BrokerCapacity] = Field(default_factory=dict)
    brokers: dict[int, BrokerCapacity] = Field(default_factory=dict)
    #: entries whose ``disk`` is ``"cluster"`` (``"default"``, ``"racks.<name>"``, ``"brokers.<id>"``): their disk is
    #: a placeholder until :meth:`with_cluster_disks` fills it from the brokers' own report
    from_cluster: tuple[str, ...] = ()

    def with_cluster_disks(self, totals: Mapping[int, int], brokers: Mapping[int, str | None]) -> CapacityDocument:
        """The document with every ``"cluster"`` disk replaced by the total bytes broker reports for its log dirs
        (``totals``); every broker then has its own entry. :class:`ConfigurationError` naming a broker that
        reports none (older than Kafka 3.3, or it did not answer)."""
        if not self.from_cluster:
            return self
        self._check_fits(brokers)
        concrete: dict[int, BrokerCapacity] = {}
        missing = []
        for b, rack in sorted(brokers.items()):
            path, cap = self._entry(b, rack)
            if cap is None:
                continue  # resolve() names it
            if path in self.from_cluster:
                if totals.get(b, 0) <= 0:
                    missing.append(b)
                    continue
                cap = cap.model_copy(update={"disk": int(totals[b])})
            concrete[b] = cap
        if missing:
            raise ConfigurationError(
                f"capacity document takes the disk of broker(s) {missing} from the cluster (\"cluster\"), but they "
                "report no log-dir size (DescribeLogDirs v4 needs Kafka 3.3+, and the broker must answer): give "
                "their disk in the document instead")
        return CapacityDocument(brokers=concrete)

    def _entry(self, broker: int, rack: str | None) -> tuple[str, BrokerCapacity | None]:
        if broker in self.brokers:
            return f"brokers.{broker}", self.brokers[broker]
        if rack is not None and rack in self.racks:
            return f"racks.{rack}", self.racks[rack]
        return "default", self.default

    def gives_network_in(self) -> bool:
        """Whether any entry gives a ``network_in`` capacity (the bytes-in goal then applies)."""
        entries = [self.default, *self.racks.values(), *self.brokers.values()]
        return any(c is not None and c.network_in is not None for c in entries)

    def resolve(self, brokers: Mapping[int, str | None]) -> dict[int, BrokerCapacity]:
        """Capacity of every broker of ``brokers`` (id -> rack name); raises
        :class:`ConfigurationError` naming the broker or rack that does not fit the cluster."""
        if self.from_cluster:
            raise ConfigurationError(
                f"capacity document takes disks from the cluster ({', '.join(self.from_cluster)}: \"cluster\"), "
                f"but they were not read: plan from a snapshot taken with sizes (it writes {DISKS_FILE}), through "
                "PlanReassignmentOperator or `airflow-kafka-reassign snapshot --sizes`")
        self._check_fits(brokers)
        out: dict[int, BrokerCapacity] = {}
        missing = []
        for b, rack in sorted(brokers.items()):
            cap = self._entry(b, rack)[1]
            if cap is None:
                missing.append(b)
            else:
                out[b] = cap
        if missing:
            raise ConfigurationError(
                f"capacity document gives no capacity for broker(s) {missing}; add a default "
                "or an override for them"
            )
        return out

    def _check_fits(self, brokers: Mapping[int, str | None]) -> None:
        """Every broker id and rack the document names is the cluster's."""
        unknown = sorted(b for b in self.brokers if b not in brokers)
        if unknown:
            raise ConfigurationError(
                f"capacity document names broker(s) {unknown}, which the cluster does not have "
                f"(brokers {sorted(brokers)}); fix the ids or remove those overrides"
            )
        racks = {r for r in brokers.values() if r is not None}
        bad_racks = sorted(r for r in self.racks if r not in racks)
        if bad_racks:
            raise ConfigurationError(
                f"capacity document names rack(s) {bad_racks}, which no broker has (racks {sorted(racks)}); "
                "fix the names or remove those overrides"
            )


def capacity_document(data: Mapping[str, Any] | CapacityDocument | str) -> CapacityDocument:
    """A validated document from a mapping (or ``"cluster"``: every broker's disk as it reports it);
    :class:`ConfigurationError` with the first problem. A ``"cluster"`` disk is validated with a
    placeholder and listed in :attr:`CapacityDocument.from_cluster`."""
    if isinstance(data, CapacityDocument):
        return data
    if data == FROM_CLUSTER:
        data = {"default": {"disk": FROM_CLUSTER}}
    if not isinstance(data, Mapping):
        raise ConfigurationError(
            f"capacity document: expected a mapping with default / racks / brokers, or \"cluster\", got {data!r}")
    data, from_cluster = _cluster_placeholders(data)
    try:
        return CapacityDocument.model_validate(data).model_copy(update={"from_cluster": from_cluster})
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigurationError(f"capacity document: {where}: {msg}") from None


def _cluster_placeholders(data: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``data`` with every ``"disk": "cluster"`` replaced by a placeholder (1 byte), and where they were."""
    out: dict[str, Any] = dict(data)
    found: list[str] = []

    def fill(entry: Any, path: str) -> Any:
        if isinstance(entry, Mapping) and str(entry.get("disk", "")).strip().lower() == FROM_CLUSTER:
            found.append(path)
            return {**entry, "disk": 1}
        return entry

    if "default" in out:
        out["default"] = fill(out["default"], "default")
    for group in ("racks", "brokers"):
        if isinstance(out.get(group), Mapping):
            out[group] = {k: fill(v, f"{group}.{k}") for k, v in out[group].items()}
    return out, tuple(found)


def write_disks(space: Mapping[int, Any], directory: Path) -> None:
    """Each broker's log-dir space (``DiskSpace``-like: ``total_bytes``, ``usable_bytes``) beside a snapshot."""
    data = {str(b): {"total_bytes": int(s.total_bytes), "usable_bytes": int(s.usable_bytes)}
            for b, s in sorted(space.items())}
    (directory / DISKS_FILE).write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")


def disk_totals(data: bytes | str) -> dict[int, int]:
    """The total bytes of each broker's log dirs, from a snapshot's :data:`DISKS_FILE`."""
    return {int(b): int(v["total_bytes"]) for b, v in json.loads(data).items()}


#: The file names a capacity document may have (anything else is read as the document's text).
DOCUMENT_SUFFIXES = frozenset({".json", ".yaml", ".yml"})


def names_a_document_file(source: str | Path) -> bool:
    """Whether ``source`` is a path to a JSON or YAML file rather than a document's text."""
    text = str(source)
    return "\n" not in text and not text.lstrip().startswith("{") and Path(text.strip()).suffix in DOCUMENT_SUFFIXES


def read_document(source: str | Path) -> Any:
    """The data of a JSON or YAML capacity document: its file (:func:`names_a_document_file`) or its text."""
    text = str(source)
    if names_a_document_file(text):
        try:
            text = Path(text.strip()).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigurationError(f"capacity document {source}: cannot read it ({e.strerror})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        import yaml  # type: ignore[import-untyped]  # noqa: PLC0415 (only YAML documents need it)

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigurationError(f"capacity document {source}: neither JSON nor YAML ({e})") from None


def load_capacity(source: str | Path) -> CapacityDocument:
    """A capacity document from a JSON or YAML file path (or the text itself, or ``"cluster"``)."""
    if str(source).strip().lower() == FROM_CLUSTER:
        return capacity_document(FROM_CLUSTER)
    data = read_document(source)
    if not isinstance(data, Mapping):
        raise ConfigurationError(
            f"capacity document {source}: expected a mapping with default / racks / brokers, got {type(data).__name__}"
        )
    return capacity_document(data)
