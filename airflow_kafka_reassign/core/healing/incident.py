"""An incident: one condition of the cluster that has lasted its dwell time, as the watch trigger reports it.

The trigger (:mod:`airflow_kafka_reassign.triggers.cluster_watch`) fires one :class:`Incident` per condition when it
has lasted its dwell time; Airflow turns it into an asset event whose ``extra["payload"]`` is
:meth:`Incident.to_payload`, and a healing DAG reads it back with :meth:`Incident.from_payload`. The payload is small
JSON with no secrets: the cluster's label (the connection id, never its bootstrap or credentials), the kind, the
brokers or log dirs it concerns, and when it was first and last seen.

The id is stable for one occurrence of a condition: the kind, the cluster, the subject (brokers or dirs) and the
first-seen time. A second event for the same occurrence (a triggerer restarted after it fired, Airflow does not
de-duplicate, apache/airflow#49900) carries the same id, so a healing run that keys its run state on it does nothing
twice. The condition clearing and coming back later is a new occurrence with a new id.

Example::

    >>> from datetime import datetime, timezone
    >>> t = datetime(2026, 12, 2, 7, 0, tzinfo=timezone.utc)
    >>> incident = Incident.of("broker_down", cluster="kafka_default", brokers=[5], first_seen=t, last_seen=t)
    >>> incident.id
    'kafka_default/broker_down/b5/20261202T070000Z'
    >>> Incident.from_payload(incident.to_payload()) == incident
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: The kinds of incident the watch raises, each with its own dwell and recovery time (docs/self-healing.md).
IncidentKind = Literal[
    "broker_down",      # a registered broker fenced or not alive in the controller's view (KIP-1073)
    "log_dir_offline",  # a log dir a broker reports offline (DescribeLogDirs error KAFKA_STORAGE_ERROR)
    "log_dir_full",     # a log dir above the usage threshold (DescribeLogDirs total/usable bytes, KIP-827)
    "under_min_isr",    # partitions with fewer in-sync replicas than their min.insync.replicas
    "empty_broker",     # a registered, alive broker that holds no replica (a scale-out waiting for its share)
    "imbalance",        # replica count or disk usage spread beyond the band
]

INCIDENT_KINDS: tuple[str, ...] = IncidentKind.__args__  # type: ignore[attr-defined]

#: The version of the payload's shape, so a DAG can refuse a payload it does not understand.
PAYLOAD_VERSION = 1


class LogDirRef(BaseModel):
    """One log dir of one broker."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    broker: int
    path: str

    def __str__(self) -> str:
        return f"{self.broker}:{self.path}"


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{value.isoformat()} has no time zone: incidents carry UTC times (datetime(..., tzinfo=timezone.utc))")
    return value.astimezone(timezone.utc)


class Incident(BaseModel):
    """One occurrence of a condition that has lasted its dwell time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    kind: IncidentKind
    cluster: str = Field(min_length=1)
    brokers: tuple[int, ...] = ()
    dirs: tuple[LogDirRef, ...] = ()
    first_seen: datetime
    last_seen: datetime
    #: small facts for the log and the dashboard (counts, bytes, a threshold), never secrets
    detail: dict[str, int | float | str] = Field(default_factory=dict)

    _check_first = field_validator("first_seen", "last_seen")(_utc)

    @classmethod
    def of(
        cls, kind: IncidentKind, *, cluster: str, first_seen: datetime, last_seen: datetime,
        brokers: Iterable[int] = (), dirs: Iterable[LogDirRef] = (), detail: Mapping[str, int | float | str] | None = None,
    ) -> Incident:
        """An incident with its id derived from what it is about and when it began."""
        brokers = tuple(sorted(set(brokers)))
        dirs = tuple(sorted(set(dirs), key=lambda d: (d.broker, d.path)))
        return cls(id=incident_id(kind, cluster, brokers, dirs, first_seen), kind=kind, cluster=cluster,
                   brokers=brokers, dirs=dirs, first_seen=first_seen, last_seen=last_seen, detail=dict(detail or {}))

    @property
    def subject(self) -> str:
        """What the incident is about, as its id names it: ``b5``, ``b1,b2``, ``d3:/data/1``, or ``cluster``."""
        return _subject(self.brokers, self.dirs)

    def to_payload(self) -> dict[str, Any]:
        """The asset event's payload: JSON types only."""
        return {"version": PAYLOAD_VERSION, **self.model_dump(mode="json")}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Incident:
        """Read a payload back; a payload of another version is refused, naming both."""
        version = payload.get("version")
        if version != PAYLOAD_VERSION:
            raise ValueError(f"incident payload version {version!r} is not {PAYLOAD_VERSION}: a trigger and a DAG of "
                             "different provider versions; upgrade both to the same release")
        return cls.model_validate({k: v for k, v in payload.items() if k != "version"})


def _subject(brokers: tuple[int, ...], dirs: tuple[LogDirRef, ...]) -> str:
    parts = [f"b{b}" for b in brokers] + [f"d{d}" for d in dirs]
    return ",".join(parts) or "cluster"


def incident_id(kind: str, cluster: str, brokers: tuple[int, ...], dirs: tuple[LogDirRef, ...],
                first_seen: datetime) -> str:
    """``<cluster>/<kind>/<subject>/<first seen, UTC, to the second>``."""
    return f"{cluster}/{kind}/{_subject(brokers, dirs)}/{_utc(first_seen).strftime('%Y%m%dT%H%M%SZ')}"
