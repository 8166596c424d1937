"""The cluster watch's state machine: when a condition becomes an incident, and the state that survives the triggerer.

A condition (:class:`~airflow_kafka_reassign.core.healing.observation.Condition`, one per subject: a broker, a log
dir, the cluster) goes through:

1. **seen**: its first-seen time is recorded;
2. **fired**: once it has lasted its kind's dwell time (``now - first_seen >= dwell``) it fires ONE
   :class:`~airflow_kafka_reassign.core.healing.incident.Incident` (its id: cluster, kind, subject, first seen) and
   never again while it stays;
3. **cleared**: not seen any more. Before it fired (a rolling restart within the dwell): forgotten, nothing fired.
   After: it is kept while it stays clear for its kind's recovery time; back within it, it is the same incident,
   not fired again (a flapping broker is one incident); clear for the whole recovery time, it is over, and a
   return is a new occurrence (new first seen, new id) that dwells again.

An incident fired is fired again, with the same id, while its condition holds and no healing run has recorded a
decision on it (the healing ledger's ``answered`` marker, read by :meth:`WatchLedger.advance` through its
``answered`` callback): :attr:`WatchSettings.refire_after_s` after it fired, then twice as long each time, up to
:data:`~airflow_kafka_reassign.core.healing.settings.MAX_REFIRE_INTERVAL_S`. Airflow can leave an asset event
without a DAG run: the scheduler merges events of one asset that arrive while a run of its DAG is due or cannot start
yet (``max_active_runs``) into one queue entry, and the run consumes only the events up to that entry's time; the
ones after it wait for the next event of the asset (seen on the stack: two brokers' incidents fired in one poll, one
run, one incident never decided). A re-fired incident reaches a run like the first event; a run that finds it taken
up already records ``handled``, so it is never healed twice.

A condition the watch could not see at a poll (:meth:`Seen.is_blind`) keeps its state untouched. A pending
condition last seen longer than ``max_gap_s`` ago (the watch was away: no triggerer, the cluster unreachable)
starts its dwell again: the watch cannot tell it lasted.

The state (:class:`WatchState`: first-seen, last-seen, fired ids, cleared-since times) is small JSON kept on the plan
storage (:class:`WatchLedger`, one object per cluster label), written with the store's compare-and-set
(``Store.write_if``): a rebuilt trigger (restart, failover, an exception) resumes from it, so a broker down for 8
of its 10 minutes fires at 10, not at 18, and an incident fired before is not fired again; of two triggerers polling
at once (a failover), the one whose write loses reads the state again and advances from it, so one incident fires
once. The write comes BEFORE the event is yielded: a triggerer killed between the two loses that event (at most
once; the window is the time to hand one event to the triggerer), it never fires it twice.

Pure: imports no Airflow, no Kafka client, no PySpark.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from airflow_kafka_reassign.core.healing.incident import Incident, IncidentKind, LogDirRef
from airflow_kafka_reassign.core.healing.observation import Seen
from airflow_kafka_reassign.core.healing.settings import (  # noqa: F401 (their public home was here)
    DEFAULT_DWELL_S,
    DEFAULT_MAX_GAP_S,
    DEFAULT_RECOVERY_S,
    WatchSettings,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence
from airflow_kafka_reassign.core.records.store import Store

#: The version of the state's shape.
STATE_VERSION = 1
#: Compare-and-set attempts before a poll gives up (another writer won each time).
CAS_ATTEMPTS = 5


class WatchStateError(ValueError):
    """The watch state on the plan storage cannot be used (not JSON, another version, another cluster, or writers
    that keep winning); the message names the object and the fix."""


def _utc(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ValueError(f"{value.isoformat()} has no time zone: the watch keeps UTC times")
    return None if value is None else value.astimezone(timezone.utc)


class ConditionRecord(BaseModel):
    """One condition in the watch state: when it was first and last seen, the incident it fired (its id), and
    since when it has been clear after firing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: IncidentKind
    brokers: tuple[int, ...] = ()
    dirs: tuple[LogDirRef, ...] = ()
    first_seen: datetime
    last_seen: datetime
    fired: str | None = None
    fired_at: datetime | None = None
    #: how many times the incident was fired again because no healing run had decided on it
    refires: int = 0
    cleared_since: datetime | None = None

    _times = field_validator("first_seen", "last_seen", "fired_at", "cleared_since")(_utc)


class WatchState(BaseModel):
    """The watch's state of one cluster: its conditions by key (``<kind>/<subject>``). JSON, a few hundred bytes
    per condition; empty while the cluster is healthy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = STATE_VERSION
    cluster: str
    conditions: dict[str, ConditionRecord] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_version(self) -> WatchState:
        if self.version != STATE_VERSION:
            raise ValueError(f"watch state version {self.version} is not {STATE_VERSION}: written by another "
                             "provider version; run one version, or delete the object to start over")
        return self

    def to_json(self) -> bytes:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class WatchStep:
    """What one poll decided: the new state, the incidents to fire now, and one line per change (for the log)."""

    state: WatchState
    fire: tuple[Incident, ...] = ()
    changes: tuple[str, ...] = ()


def _s(delta: timedelta) -> str:
    return f"{delta.total_seconds():.0f} s"


def refire_due(state: WatchState, *, now: datetime, settings: WatchSettings) -> list[str]:
    """The incidents fired, their condition not cleared, whose time to be fired again has come if no run has decided
    on them (the caller asks the healing ledger which; :func:`advance` fires those it is given)."""
    out = []
    for rec in state.conditions.values():
        if rec.fired is None or rec.fired_at is None or rec.cleared_since is not None:
            continue
        if (now - rec.fired_at).total_seconds() >= settings.refire_interval(rec.refires):
            out.append(rec.fired)
    return out


def advance(state: WatchState, seen: Seen, *, now: datetime, settings: WatchSettings,
            unanswered: Collection[str] = ()) -> WatchStep:
    """The state after the poll at ``now`` that saw ``seen``, and the incidents to fire (see the module docstring).
    ``unanswered``: incidents of :func:`refire_due` that no healing run has decided on: fired again if their
    condition is still seen. Pure and deterministic: the same state, conditions, time and answers give the same
    step."""
    now = _utc(now)  # type: ignore[assignment]
    again = set(unanswered)
    records = dict(state.conditions)
    fire: list[Incident] = []
    changes: list[str] = []
    watched = set(settings.kinds)
    observed = {c.key: c for c in seen.conditions if c.kind in watched}
    for key, c in observed.items():
        dwell = settings.dwell(c.kind)
        rec = records.get(key)
        if rec is not None and rec.fired is None and (now - rec.last_seen).total_seconds() > settings.max_gap_s:
            changes.append(f"{key}: last seen {_s(now - rec.last_seen)} ago (the watch was away, longer than "
                           f"max_gap_s={settings.max_gap_s:g}): its dwell starts again now")
            rec = None
        if rec is None:
            rec = ConditionRecord(kind=c.kind, brokers=c.brokers, dirs=c.dirs, first_seen=now, last_seen=now)
            changes.append(f"{key}: seen; fires at {(now + timedelta(seconds=dwell)).isoformat()} if it lasts "
                           f"(dwell {dwell:g} s)")
        else:
            if rec.cleared_since is not None:
                changes.append(f"{key}: back after {_s(now - rec.cleared_since)} clear, within its recovery time "
                               f"({settings.recovery(c.kind):g} s): still incident {rec.fired}, not fired again")
            rec = rec.model_copy(update={"last_seen": now, "cleared_since": None})
        if rec.fired is None and (now - rec.first_seen).total_seconds() >= dwell:
            incident = Incident.of(c.kind, cluster=settings.cluster, first_seen=rec.first_seen, last_seen=now,
                                   brokers=c.brokers, dirs=c.dirs, detail=dict(c.detail))
            rec = rec.model_copy(update={"fired": incident.id, "fired_at": now})
            fire.append(incident)
            changes.append(f"{key}: lasted {_s(now - rec.first_seen)} (dwell {dwell:g} s): incident {incident.id} fired")
        elif rec.fired is not None and rec.fired in again and rec.fired_at is not None:
            incident = Incident.of(c.kind, cluster=settings.cluster, first_seen=rec.first_seen, last_seen=now,
                                   brokers=c.brokers, dirs=c.dirs, detail=dict(c.detail))
            if incident.id == rec.fired:  # the same occurrence (its subject and first-seen time name it)
                fire.append(incident)
                changes.append(f"{key}: incident {rec.fired} fired again: no healing run has decided on it since it "
                               f"fired {_s(now - rec.fired_at)} ago (an asset event Airflow left without a run, or no "
                               f"unpaused DAG scheduled on its asset); next time after "
                               f"{settings.refire_interval(rec.refires + 1):g} s")
                rec = rec.model_copy(update={"fired_at": now, "refires": rec.refires + 1})
        records[key] = rec
    for key, rec in list(records.items()):
        if key in observed or rec.kind not in watched or seen.is_blind(rec.kind, rec.dirs):
            continue
        if rec.fired is None:
            del records[key]
            changes.append(f"{key}: cleared after {_s(rec.last_seen - rec.first_seen)}, within its dwell "
                           f"({settings.dwell(rec.kind):g} s): nothing fired")
        elif rec.cleared_since is None:
            records[key] = rec.model_copy(update={"cleared_since": now})
            changes.append(f"{key}: cleared; incident {rec.fired} is over once it stays clear for "
                           f"{settings.recovery(rec.kind):g} s")
        elif (now - rec.cleared_since).total_seconds() >= settings.recovery(rec.kind):
            del records[key]
            changes.append(f"{key}: clear for {_s(now - rec.cleared_since)}: incident {rec.fired} is over; a return "
                           "is a new incident")
    new = state if records == state.conditions else state.model_copy(update={"conditions": records})
    return WatchStep(state=new, fire=tuple(fire), changes=tuple(changes))


def state_name(cluster: str) -> str:
    """The state object's name on the store: ``cluster-watch/<cluster label, made a safe file name>.json``."""
    return f"cluster-watch/{re.sub(r'[^A-Za-z0-9._-]+', '_', cluster).strip('_.') or '_'}.json"


class WatchLedger:
    """The watch state of one cluster on a :class:`~airflow_kafka_reassign.core.records.store.Store`, advanced with
    compare-and-set (see the module docstring)."""

    def __init__(self, store: Store, settings: WatchSettings) -> None:
        self.store = store
        self.settings = settings
        self.name = state_name(settings.cluster)

    def read(self) -> tuple[WatchState, str | None]:
        """The state and its version tag (``None``: none yet, an empty state)."""
        found = self.store.read_versioned(self.name)
        if found is None:
            return WatchState(cluster=self.settings.cluster), None
        data, version = found
        where = f"{self.store.uri}/{self.name}"
        try:
            state = WatchState.model_validate_json(data)
        except ValueError as e:
            raise WatchStateError(f"the cluster watch's state {where} cannot be read ({e}); delete it to start over "
                                  "(conditions pending then dwell again; incidents fired may fire once more)") from None
        if state.cluster != self.settings.cluster:
            raise WatchStateError(f"the cluster watch's state {where} is of cluster {state.cluster!r}, not "
                                  f"{self.settings.cluster!r}")
        return state, version

    def advance(self, seen: Seen, *, now: datetime,
                answered: Callable[[Sequence[str]], Collection[str]] | None = None) -> WatchStep:
        """Read the state, :func:`advance` it with ``seen`` and write it back only if nobody wrote it meanwhile;
        otherwise read again and advance from what the other writer left (whose incidents are then not fired
        again here). Nothing is written when nothing changed. ``answered``: which of the incidents due to be fired
        again a healing run has decided on (the healing ledger); ``None``: never fire again."""
        for _ in range(CAS_ATTEMPTS):
            state, version = self.read()
            due = refire_due(state, now=now, settings=self.settings) if answered is not None else []
            unanswered = set(due) - set(answered(due)) if due and answered is not None else set()
            step = advance(state, seen, now=now, settings=self.settings, unanswered=unanswered)
            if step.state == state:
                return step
            if self.store.write_if(self.name, step.state.to_json(), version):
                return step
        raise WatchStateError(f"the cluster watch's state {self.store.uri}/{self.name} was written by another writer "
                              f"at each of {CAS_ATTEMPTS} attempts: is more than one watch of cluster "
                              f"{self.settings.cluster!r} polling it? One watch per cluster and state_uri")
