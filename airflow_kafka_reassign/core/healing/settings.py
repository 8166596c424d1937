"""What the cluster watch decides with, declared once: the kinds watched, each kind's dwell and recovery times, the
thresholds (:class:`WatchSettings`, the trigger's arguments validated). Imported by the observation (what to read)
and the state machine (when to fire), so that neither imports the other.

Pure: no Airflow, no Kafka client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from airflow_kafka_reassign.core.healing.incident import INCIDENT_KINDS, IncidentKind

#: How long each kind must last before it fires (seconds); docs/self-healing-watch.md says why each.
DEFAULT_DWELL_S: dict[str, float] = {
    "broker_down": 600.0,      # longer than a rolling restart of one broker (minutes, large logs included)
    "log_dir_offline": 300.0,  # a failed disk stays failed until the broker restarts; 5 min rules out a blip
    "log_dir_full": 900.0,     # retention deletes every 5 min (log.retention.check.interval.ms): three rounds
    "under_min_isr": 300.0,    # acks=all producers are failing; a restarted replica rejoins the ISR within minutes
    "empty_broker": 600.0,     # a scale-out: give whoever started the broker time to start their own rebalance
    "imbalance": 3600.0,       # slow by nature; a rebalance then waits for its window anyway
}
#: How long each kind must stay clear, after it fired, before its return is a new incident (seconds).
DEFAULT_RECOVERY_S: dict[str, float] = {
    "broker_down": 600.0,      # a broker flapping for 10 minutes is one incident
    "log_dir_offline": 600.0,
    "log_dir_full": 1800.0,    # usage hovering at the threshold is one incident
    "under_min_isr": 600.0,
    "empty_broker": 1800.0,
    "imbalance": 3600.0,
}
#: A condition not yet fired and last seen longer ago than this starts its dwell again.
DEFAULT_MAX_GAP_S = 300.0
#: An incident fired that no healing run has recorded a decision on (the healing ledger's ``answered`` marker) is
#: fired again, with the same id, this long after it fired, then after twice as long each time, up to
#: :data:`MAX_REFIRE_INTERVAL_S`, while its condition holds: Airflow can leave an asset event without a DAG run
#: (docs/self-healing-watch.md, "An event no run took"). A run that finds it taken up already records ``handled``.
DEFAULT_REFIRE_AFTER_S = 600.0
MAX_REFIRE_INTERVAL_S = 3600.0


def _check_kinds(values: Mapping[str, Any] | None, what: str) -> dict[str, float]:
    out = {}
    for kind, seconds in (values or {}).items():
        if kind not in INCIDENT_KINDS:
            raise ValueError(f"{what}: {kind!r} is not an incident kind; the kinds are {', '.join(INCIDENT_KINDS)}")
        seconds = float(seconds)
        if seconds < 0:
            raise ValueError(f"{what}[{kind!r}] is {seconds}: seconds must be 0 or more")
        out[kind] = seconds
    return out


class WatchSettings(BaseModel):
    """Everything the watch decides with, declared once (the trigger's arguments, validated)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: the cluster's label in incidents and in the state's name (the connection id by default; never a secret)
    cluster: str = Field(min_length=1)
    #: the kinds watched (others are neither observed nor touched in the state)
    kinds: tuple[IncidentKind, ...] = INCIDENT_KINDS  # type: ignore[assignment]
    #: seconds per kind (:data:`DEFAULT_DWELL_S` merged under what is given)
    dwell_s: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_DWELL_S))
    recovery_s: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_RECOVERY_S))
    #: a log dir whose volume is used at or above this share is full
    log_dir_full_ratio: float = Field(0.85, gt=0, le=1)
    #: a broker further than this share of the mean from it (replicas, disk usage) is out of balance
    imbalance_band: float = Field(0.2, gt=0)
    max_gap_s: float = Field(DEFAULT_MAX_GAP_S, gt=0)
    #: an incident no healing run has decided on is fired again after this long (:data:`DEFAULT_REFIRE_AFTER_S`)
    refire_after_s: float = Field(DEFAULT_REFIRE_AFTER_S, gt=0)

    def refire_interval(self, refires: int) -> float:
        """How long after its last firing an incident fired ``refires`` times already is fired again, when no run
        has decided on it: :attr:`refire_after_s`, doubled at each re-fire, at most :data:`MAX_REFIRE_INTERVAL_S`
        (never below :attr:`refire_after_s`)."""
        return float(max(self.refire_after_s, min(MAX_REFIRE_INTERVAL_S, self.refire_after_s * 2.0 ** min(refires, 20))))

    @field_validator("kinds", mode="before")
    @classmethod
    def _kinds(cls, value: Any) -> Any:
        if value is None:
            return INCIDENT_KINDS
        if isinstance(value, str):
            value = [value]
        unknown = [k for k in value if k not in INCIDENT_KINDS]
        if unknown:
            raise ValueError(f"kinds: {', '.join(map(repr, unknown))} not incident kinds; the kinds are "
                             f"{', '.join(INCIDENT_KINDS)}")
        if not value:
            raise ValueError("kinds is empty: name at least one kind, or None for all")
        return tuple(dict.fromkeys(value))

    @field_validator("dwell_s", mode="before")
    @classmethod
    def _dwell(cls, value: Any) -> dict[str, float]:
        return {**DEFAULT_DWELL_S, **_check_kinds(value, "dwell_s")}

    @field_validator("recovery_s", mode="before")
    @classmethod
    def _recovery(cls, value: Any) -> dict[str, float]:
        return {**DEFAULT_RECOVERY_S, **_check_kinds(value, "recovery_s")}

    def dwell(self, kind: str) -> float:
        return self.dwell_s[kind]

    def recovery(self, kind: str) -> float:
        return self.recovery_s[kind]
