"""What healing keeps on the plan storage: which incidents were taken up, the budget spent, and every outcome.

One folder per cluster (``<plan storage>/healing/<cluster>``, beside the plans; S3 in production), a handful of small
whole objects written through the :class:`~airflow_kafka_reassign.core.records.store.Store` port::

    claims/<kind>/<sha>.json       one per incident: its payload, each run started for it (run id, time, bytes
                                   planned, how it ended, the cordons a finished run left) and its status: acting,
                                   done or failed
    waits/<sha>.json               when a run started to wait for another writer or the window
    days/<YYYY-MM-DD>.json         the runs started and the bytes planned that UTC day, all incidents together
    outcomes/<YYYY-MM-DD>/<time>-<sha>.json
                                   one per decision, to act or not (the reason, the incident id, the run, the time):
                                   what a dashboard or an alerting DAG reads (:meth:`HealingLedger.outcomes`)
    answered/<sha>.json            one per incident some run has decided on (its first outcome): the watch fires an
                                   incident again while it has none (core/healing/watch.py, :meth:`answered`)

A claim is created or changed only by compare-and-set (``If-None-Match`` / ``If-Match`` on S3, a lock on local disk),
so of two runs that take up the same incident at once (Airflow does not de-duplicate asset events,
apache/airflow#49900) exactly one acts; the other records ``handled``. The same DAG run asking again (a retried
task) finds its own run in the claim and goes on.

Pure: imports no Airflow, no Kafka client, no PySpark.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict

from airflow_kafka_reassign.core.healing.incident import Incident, LogDirRef
from airflow_kafka_reassign.core.healing.policy import Budget
from airflow_kafka_reassign.core.maintenance.cordon import ALL_DIRS, Cordon, parse_cordon, render_cordon
from airflow_kafka_reassign.core.records.store import Store

_log = logging.getLogger(__name__)
_SEQ = itertools.count()

#: Every decision a healing run records. ``act`` and ``dry_run``: it goes on; ``done`` / ``failed``: how the run
#: that acted ended; every other one is a decision NOT to act, with its reason.
Decision = Literal["act", "dry_run", "done", "failed", "stale", "handled", "breaker", "budget", "window", "writer",
                   "manual", "alert", "rejected", "gave_up"]
NOT_ACTING: tuple[str, ...] = ("stale", "handled", "breaker", "budget", "window", "writer", "manual", "alert",
                               "rejected", "gave_up")
ClaimStatus = Literal["acting", "done", "failed"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Outcome(_Record):
    """One decision about one incident."""

    at: datetime
    incident_id: str
    kind: str
    decision: Decision
    reason: str
    run_id: str | None = None
    brokers: tuple[int, ...] = ()
    dirs: tuple[str, ...] = ()

    @property
    def acted(self) -> bool:
        return self.decision not in NOT_ACTING

    def line(self) -> str:
        """The one log line of this decision."""
        return f"healing {self.decision}: incident {self.incident_id}: {self.reason}"


class ClaimRun(_Record):
    run_id: str
    started_at: datetime
    bytes: int = 0
    status: ClaimStatus = "acting"
    #: The cordons this run left on its incident's brokers and log dirs when it ended ``done`` (healing's part of each
    #: broker's ``cordoned.log.dirs``: ``"*"`` for a drained broker, the emptied dirs comma-separated); a broker not
    #: named: none. A claim written before this field was kept has none: nothing there counts as healing's cordon
    #: (whose cordon is whose: :func:`~airflow_kafka_reassign.core.healing.decide.healing_cordons`).
    cordons: dict[int, str] = {}


class Claim(_Record):
    """An incident taken up by healing, and every run started for it."""

    incident: Incident
    runs: tuple[ClaimRun, ...] = ()

    @property
    def status(self) -> ClaimStatus:
        return self.runs[-1].status if self.runs else "failed"

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.runs)

    def run(self, run_id: str) -> ClaimRun | None:
        return next((r for r in self.runs if r.run_id == run_id), None)

    @property
    def cordons_left(self) -> dict[int, str]:
        """The cordons the run that healed the incident left (:attr:`ClaimRun.cordons`); none unless it is done."""
        return dict(self.runs[-1].cordons) if self.status == "done" else {}


class Day(_Record):
    runs: int = 0
    bytes: int = 0
    run_ids: tuple[str, ...] = ()


class ClaimResult(_Record):
    """What :meth:`HealingLedger.claim` found: ``claimed`` (this run acts for the incident), or why not."""

    claimed: bool
    decision: Decision = "act"
    reason: str = ""


#: The ledger's folder under the plan storage: ``healing/<cluster, as one safe path segment>``; the healing tasks
#: keep the ledger there and the cluster watch reads its ``answered`` markers there (one base: the plan storage).
LEDGER_FOLDER = "healing"


def ledger_folder(cluster_segment: str) -> str:
    """The ledger's folder of a cluster under the plan storage (``cluster_segment``: its label made a path segment)."""
    return f"{LEDGER_FOLDER}/{cluster_segment}"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _day(at: datetime) -> str:
    return at.astimezone(timezone.utc).date().isoformat()


class HealingLedger:
    """The healing state of one cluster on a :class:`Store` (see the module docstring)."""

    def __init__(self, store: Store, *, log: logging.Logger | None = None) -> None:
        self.store = store
        self.log = log or _log

    # -- outcomes -----------------------------------------------------------------------------------------------

    def record(self, outcome: Outcome) -> Outcome:
        """Write the outcome (``outcomes/<day>/...``) and log it in one line (a warning for a decision not to act)."""
        stamp = outcome.at.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        name = (f"outcomes/{_day(outcome.at)}/{stamp}-{next(_SEQ):06d}-"
                f"{_sha(outcome.incident_id + outcome.decision + (outcome.run_id or '') + str(os.getpid()))}.json")
        self.store.write(name, outcome.model_dump_json().encode())
        # the incident has had a decision: the watch stops firing it again (written once; a lost race is the same)
        self.store.write_if(self.answered_name(outcome.incident_id), json.dumps(
            {"incident_id": outcome.incident_id, "at": outcome.at.isoformat(), "run_id": outcome.run_id}).encode(), None)
        (self.log.info if outcome.acted else self.log.warning)("%s", outcome.line())
        return outcome

    @staticmethod
    def answered_name(incident_id: str) -> str:
        return f"answered/{_sha(incident_id)}.json"

    def answered(self, incident_ids: Iterable[str]) -> set[str]:
        """The incidents of ``incident_ids`` some healing run has recorded a decision on (one read each)."""
        return {i for i in incident_ids if self.store.read(self.answered_name(i)) is not None}

    def outcomes(self, since: date | None = None) -> list[Outcome]:
        """Every recorded outcome (from the UTC day ``since`` on), oldest first: what a dashboard reads."""
        names = [n for n in self.store.list("outcomes") if since is None or n.split("/")[1] >= since.isoformat()]
        out = []
        for name in names:  # sorted by name: time, then the order of one process's records
            data = self.store.read(name)
            if data is not None:
                out.append(Outcome.model_validate_json(data))
        return out

    # -- claims -------------------------------------------------------------------------------------------------

    @staticmethod
    def claim_name(incident_id: str) -> str:
        kind = incident_id.split("/")[1] if incident_id.count("/") >= 3 else "other"
        return f"claims/{kind}/{_sha(incident_id)}.json"

    def read_claim(self, incident_id: str) -> Claim | None:
        data = self.store.read(self.claim_name(incident_id))
        return None if data is None else Claim.model_validate_json(data)

    def claims(self) -> list[Claim]:
        out = []
        for name in self.store.list("claims"):
            data = self.store.read(name)
            if data is not None:
                out.append(Claim.model_validate_json(data))
        return out

    def _day(self, at: datetime) -> tuple[Day, str | None]:
        current = self.store.read_versioned(f"days/{_day(at)}.json")
        return (Day(), None) if current is None else (Day.model_validate_json(current[0]), current[1])

    def check(self, incident: Incident, run_id: str, budget: Budget, now: datetime) -> ClaimResult:
        """Whether this run may take the incident up, without taking it: ``handled`` when another run acts or acted
        for it, ``budget`` when its runs or the day's are spent."""
        claim = self.read_claim(incident.id)
        if claim is not None and claim.run(run_id) is not None:
            return ClaimResult(claimed=True, reason=f"this run ({run_id}) took it up already (a retried task)")
        if claim is not None and claim.status in ("acting", "done"):
            last = claim.runs[-1]
            verb = "is healing it" if last.status == "acting" else "healed it"
            return ClaimResult(claimed=False, decision="handled",
                               reason=f"run {last.run_id} {verb} (started {last.started_at.isoformat(timespec='seconds')}): "
                                      "a second event for the same incident does nothing")
        if claim is not None and len(claim.runs) >= budget.runs_per_incident:
            return ClaimResult(claimed=False, decision="budget",
                               reason=f"{len(claim.runs)} run(s) already started for this incident and all failed "
                                      f"(runs_per_incident={budget.runs_per_incident}): look at run "
                                      f"{claim.runs[-1].run_id}, fix the cause, then heal it by hand or raise "
                                      "Budget.runs_per_incident")
        day, _ = self._day(now)
        if run_id not in day.run_ids and day.runs >= budget.runs_per_day:
            return ClaimResult(claimed=False, decision="budget",
                               reason=f"{day.runs} healing run(s) started today (UTC {_day(now)}), "
                                      f"runs_per_day={budget.runs_per_day}: tomorrow's budget, or raise "
                                      "Budget.runs_per_day")
        return ClaimResult(claimed=True)

    def claim(self, incident: Incident, run_id: str, budget: Budget, now: datetime) -> ClaimResult:
        """Take the incident up for this run (compare-and-set: of two runs at once, one wins), after
        :meth:`check`; the day's run count goes up once per run, whatever the number of incidents it takes up."""
        name = self.claim_name(incident.id)
        for _ in range(5):
            found = self.check(incident, run_id, budget, now)
            if not found.claimed:
                return found
            current = self.store.read_versioned(name)
            claim = Claim(incident=incident) if current is None else Claim.model_validate_json(current[0])
            if claim.run(run_id) is not None:
                return found
            claim = claim.model_copy(update={"runs": (*claim.runs, ClaimRun(run_id=run_id, started_at=now))})
            if self.store.write_if(name, claim.model_dump_json(indent=1).encode(), current[1] if current else None):
                self._count_run(run_id, now)
                return ClaimResult(claimed=True)
        return ClaimResult(claimed=False, decision="handled",
                           reason="the incident's claim changed five times while this run was taking it: other runs "
                                  "are taking it up")

    def _count_run(self, run_id: str, now: datetime) -> None:
        name = f"days/{_day(now)}.json"
        for _ in range(10):
            day, version = self._day(now)
            if run_id in day.run_ids:
                return
            new = Day(runs=day.runs + 1, bytes=day.bytes, run_ids=(*day.run_ids, run_id))
            if self.store.write_if(name, new.model_dump_json().encode(), version):
                return
        self.log.warning("healing: the day's run count %s changed ten times while this run counted itself; not counted",
                         name)

    def _update_run(self, incident_id: str, run_id: str, **fields: object) -> bool:
        name = self.claim_name(incident_id)
        for _ in range(10):
            current = self.store.read_versioned(name)
            if current is None:
                return False
            claim = Claim.model_validate_json(current[0])
            runs = tuple(r.model_copy(update=fields) if r.run_id == run_id else r for r in claim.runs)
            if claim.run(run_id) is None:
                return False
            if self.store.write_if(name, claim.model_copy(update={"runs": runs}).model_dump_json(indent=1).encode(),
                                   current[1]):
                return True
        return False

    def charge_bytes(self, incident_ids: Sequence[str], run_id: str, planned: int, budget: Budget,
                     now: datetime) -> str | None:
        """Charge a plan's bytes to the run's incidents and the day; the reason it may not go on (``None``: it may).
        Each incident is charged the whole plan (a drain of two brokers moves their replicas together)."""
        for incident_id in incident_ids:
            claim = self.read_claim(incident_id)
            spent = 0 if claim is None else sum(r.bytes for r in claim.runs if r.run_id != run_id)
            if spent + planned > budget.bytes_per_incident:
                return (f"incident {incident_id}: the plan moves {planned} bytes and {spent} were planned for it "
                        f"before, above bytes_per_incident={budget.bytes_per_incident}: heal it by hand "
                        "(kafka_decommission_brokers, kafka_remove_disk) or raise Budget.bytes_per_incident")
        name = f"days/{_day(now)}.json"
        for _ in range(10):
            day, version = self._day(now)
            already = 0
            for incident_id in incident_ids[:1]:
                claim = self.read_claim(incident_id)
                run = claim.run(run_id) if claim else None
                already = run.bytes if run else 0
            if day.bytes - already + planned > budget.bytes_per_day:
                return (f"the plan moves {planned} bytes and {day.bytes - already} were planned by healing today "
                        f"(UTC {_day(now)}), above bytes_per_day={budget.bytes_per_day}: tomorrow's budget, or raise "
                        "Budget.bytes_per_day")
            new = day.model_copy(update={"bytes": day.bytes - already + planned})
            if self.store.write_if(name, new.model_dump_json().encode(), version):
                break
        for incident_id in incident_ids:
            self._update_run(incident_id, run_id, bytes=planned)
        return None

    def finish(self, incident_ids: Iterable[str], run_id: str, status: ClaimStatus,
               cordons: Mapping[int | str, str | None] | None = None) -> list[str]:
        """Mark this run's claim of each incident ``done`` or ``failed`` (a failed one may be taken up again by the
        next event, within the budget); returns the incidents it changed. ``cordons``: what the run cordoned and
        leaves (``cordoned.log.dirs`` values by broker, as :attr:`HealingDecision.cordons
        <airflow_kafka_reassign.core.healing.decide.HealingDecision.cordons>`); each claim keeps the part on its own
        incident's brokers and dirs (:func:`cordons_on`)."""
        values = {int(b): v for b, v in (cordons or {}).items()}
        changed = []
        for incident_id in incident_ids:
            claim = self.read_claim(incident_id)
            left = cordons_on(claim.incident, values) if claim is not None else {}
            if self._update_run(incident_id, run_id, status=status, cordons=left):
                changed.append(incident_id)
        return changed

    def waiting_since(self, run_id: str) -> datetime | None:
        """When this run started to wait (for another writer, for the window), or ``None``."""
        data = self.store.read(f"waits/{_sha(run_id)}.json")
        return None if data is None else datetime.fromisoformat(json.loads(data)["since"])

    def start_wait(self, run_id: str, now: datetime) -> bool:
        """Note that this run waits from ``now`` on (once: ``False`` when it already did)."""
        return self.store.write_if(f"waits/{_sha(run_id)}.json",
                                   json.dumps({"run_id": run_id, "since": now.isoformat()}).encode(), None)


def outcome(incident: Incident, decision: Decision, reason: str, *, at: datetime, run_id: str | None = None) -> Outcome:
    """An :class:`Outcome` about ``incident``."""
    return Outcome(at=at, incident_id=incident.id, kind=incident.kind, decision=decision, reason=reason,
                   run_id=run_id, brokers=incident.brokers, dirs=tuple(str(d) for d in incident.dirs))


def _path(path: str) -> str:
    return path.rstrip("/") or "/"


def cordons_on(incident: Incident, cordons: Mapping[int, str | None]) -> dict[int, str]:
    """The part of ``cordons`` (``cordoned.log.dirs`` values by broker) on the incident's brokers (``*``) and log
    dirs (each dir cordoned, alone or by ``*``)."""
    out: dict[int, Cordon] = {b: ALL_DIRS for b in incident.brokers if parse_cordon(cordons.get(b)) == ALL_DIRS}
    for d in incident.dirs:
        value, mine = parse_cordon(cordons.get(d.broker)), out.get(d.broker, frozenset())
        if mine != ALL_DIRS and (value == ALL_DIRS or _path(d.path) in {_path(p) for p in value}):
            out[d.broker] = frozenset(mine) | {_path(d.path)}
    return {b: v for b, c in sorted(out.items()) if (v := render_cordon(c)) is not None}


def dir_refs(entries: Iterable[str]) -> tuple[LogDirRef, ...]:
    """``["5:/data/1"]`` as :class:`LogDirRef`."""
    out = []
    for entry in entries:
        broker, _, path = str(entry).partition(":")
        out.append(LogDirRef(broker=int(broker), path=path))
    return tuple(out)


def dumps(outcomes: Iterable[Outcome]) -> str:
    return json.dumps([o.model_dump(mode="json") for o in outcomes])


__all__ = ["Claim", "ClaimResult", "Day", "Decision", "HealingLedger", "NOT_ACTING", "Outcome", "cordons_on", "outcome"]

