"""One driver per plan: a lease in the plan's run state, taken by compare-and-set, with an expiry.

Every task that changes the cluster for a plan (execute, the sensor when it submits or finishes,
cancel) holds the plan's lease while it does, so two workers never drive one plan at once: two
DAG runs pointed at the same plan, a manual run next to a scheduled one, a task whose worker was
thought dead. The lease is one small object, ``<plan>/run/lease.json``::

    {"holder": "dag decommission / run manual__2026-11-24 / task execute / try 2 on worker-b (pid 412)",
     "scope": "decommission/manual__2026-11-24", "token": "...",
     "acquired_at": "...", "renewed_at": "...", "expires_at": "...", "released": false}

* It is created only if absent and replaced only if unchanged since it was read
  (:meth:`~airflow_kafka_reassign.core.records.store.Store.write_if`: ``If-None-Match`` / ``If-Match`` on
  S3, a lock on local disk), so of two workers racing for it exactly one wins.
* The holder renews it (:meth:`LeaseKeeper.confirm`, called before anything is written to the
  cluster) well before it expires; a holder that finds it taken over stops at once and touches
  nothing (:class:`LeaseLostError`).
* The same **scope** (the tasks of one DAG run: Airflow runs them one after another, and runs one
  try of a task at a time) takes it over at any moment: a retry on another worker resumes at once
  after its predecessor was killed. Any other scope is refused until the lease expires
  (:class:`LeaseHeldError`, one line: which run holds it, until when, how to take over).
* ``take_over_from="<run id>"`` takes it over at once from that very run (its scope ``<dag>/<run id>``,
  or the run id alone), for an operator who has confirmed that run is dead (its worker lost, its task
  never retried). It names the run, not "anyone": a lease held by another run is still refused. Should
  the old run still be alive after all, it finds the lease taken at its next write and stops
  (:class:`LeaseLostError`); the throttle backup stays on the run state for whichever run finishes.
* Release marks it released (by compare-and-set, never a blind delete), so the next driver takes
  it at once.

Pure: no Airflow, no Kafka client.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from airflow_kafka_reassign.core.records.store import Store
from airflow_kafka_reassign.exceptions import GuardRefusedError, KafkaReassignError

LEASE_FILE = "lease.json"
#: Default time to live of a lease; the holder renews it after a third of it.
DEFAULT_TTL_S = 300.0

_log = logging.getLogger(__name__)


class LeaseHeldError(GuardRefusedError):
    """Another run drives this plan (its lease has not expired)."""


class LeaseLostError(KafkaReassignError):
    """This run's lease was taken over (it had expired): stop, change nothing."""


class Lease(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    holder: str
    scope: str
    token: str
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime
    released: bool = False

    def expired(self, now: datetime) -> bool:
        return self.released or now >= self.expires_at

    def dump(self) -> bytes:
        return self.model_dump_json(indent=1).encode()


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _parse(data: bytes, where: str) -> Lease:
    try:
        return Lease.model_validate_json(data)
    except (ValidationError, json.JSONDecodeError) as e:
        raise LeaseHeldError(
            f"the plan's lease {where} is not readable ({e.errors()[0]['msg'] if isinstance(e, ValidationError) else e}); "
            f"if no run drives this plan, delete {where} and run again"
        ) from None


def run_of(scope: str) -> str:
    """The DAG run id of a lease scope ``<dag_id>/<run_id>`` (a DAG id has no ``/``); the scope itself otherwise."""
    return scope.split("/", 1)[1] if "/" in scope else scope


def names_scope(take_over_from: str | None, scope: str) -> bool:
    """Whether ``take_over_from`` names the run of ``scope``: its whole scope or its run id."""
    return take_over_from is not None and take_over_from.strip() in (scope, run_of(scope))


def held_message(held: Lease, where: str, now: datetime, take_over_from: str | None = None) -> str:
    """One line: which run holds the plan's lease, when this run can take over, and how at once."""
    until = held.expires_at.isoformat(timespec="seconds")
    left = max(0, int((held.expires_at - now).total_seconds()))
    wrong = (f"take_over_from={take_over_from!r} names another run than the holder; "
             if take_over_from else "")
    return (f"{wrong}the plan's lease ({where}) is held by DAG run {run_of(held.scope)!r} ({held.holder}) until {until} "
            f"(in {left} s; renewed while that run works): this run can take over once it expires, or at once with "
            f"take_over_from={run_of(held.scope)!r} after you have confirmed that run is dead (its task not running "
            "on any worker, no retry to come)")


def acquire(store: Store, *, holder: str, scope: str, ttl_s: float = DEFAULT_TTL_S,
            now: Callable[[], datetime] = _now, log: logging.Logger | None = None,
            take_over_from: str | None = None) -> Lease:
    """Take the lease of the run state ``store`` for ``holder`` (see the module docstring); ``take_over_from``: the
    run id (or scope) of a dead run whose unexpired lease is taken over at once."""
    log = log or _log
    where = f"{store.uri.rstrip('/')}/{LEASE_FILE}"
    for _ in range(5):
        t = now()
        lease = Lease(holder=holder, scope=scope, token=uuid.uuid4().hex, acquired_at=t, renewed_at=t,
                      expires_at=t + timedelta(seconds=ttl_s))
        current = store.read_versioned(LEASE_FILE)
        if current is None:
            if store.write_if(LEASE_FILE, lease.dump(), None):
                return lease
            continue
        held = _parse(current[0], where)
        forced = not held.expired(t) and held.scope != scope and names_scope(take_over_from, held.scope)
        if not held.expired(t) and held.scope != scope and not forced:
            raise LeaseHeldError(held_message(held, where, t, take_over_from))
        if store.write_if(LEASE_FILE, lease.dump(), current[1]):
            if forced:
                log.warning("took over the plan's lease at once from DAG run %r (%s, held until %s): "
                            "take_over_from=%r says that run is dead; if it still runs, it stops at its next write",
                            run_of(held.scope), held.holder, held.expires_at.isoformat(timespec="seconds"),
                            take_over_from)
            elif not held.expired(t):
                log.warning("took over the plan's lease from %s (the same DAG run: a retry, or the next task)",
                            held.holder)
            elif not held.released:
                log.warning("took over the plan's expired lease from %s (expired %s)", held.holder,
                            held.expires_at.isoformat(timespec="seconds"))
            return lease
    raise LeaseHeldError(f"the plan's lease {where} changed five times while it was being taken; another run is "
                         "taking it: run this task again later")


class LeaseKeeper:
    """A held lease, renewed by :meth:`confirm` (call it before each write to the cluster)."""

    def __init__(self, store: Store, lease: Lease, *, ttl_s: float = DEFAULT_TTL_S,
                 now: Callable[[], datetime] = _now) -> None:
        self.store = store
        self.lease = lease
        self.ttl_s = ttl_s
        self._now = now
        self._where = f"{store.uri.rstrip('/')}/{LEASE_FILE}"

    @classmethod
    def take(cls, store: Store, *, holder: str, scope: str, ttl_s: float = DEFAULT_TTL_S,
             now: Callable[[], datetime] = _now, log: logging.Logger | None = None,
             take_over_from: str | None = None) -> LeaseKeeper:
        return cls(store, acquire(store, holder=holder, scope=scope, ttl_s=ttl_s, now=now, log=log,
                                  take_over_from=take_over_from), ttl_s=ttl_s, now=now)

    def _current(self) -> tuple[Lease, str]:
        current = self.store.read_versioned(LEASE_FILE)
        if current is None:
            raise LeaseLostError(f"the plan's lease {self._where} is gone (deleted by hand?): this run stops here and "
                                 "changes nothing more; run the task again to resume")
        held = _parse(current[0], self._where)
        if held.token != self.lease.token:
            raise LeaseLostError(
                f"the plan's lease {self._where} was taken over by {held.holder}: this run stops here and changes "
                "nothing more (the other run drives the plan now)"
            )
        return held, current[1]

    def confirm(self) -> None:
        """Check that the lease is still ours (one read: a takeover by a later try of the same DAG run
        is seen at the next write, not only at the next renewal); renew it once a third of its time
        has passed."""
        t = self._now()
        _, version = self._current()
        if t < self.lease.renewed_at + timedelta(seconds=self.ttl_s / 3):
            return
        renewed = self.lease.model_copy(update={"renewed_at": t, "expires_at": t + timedelta(seconds=self.ttl_s)})
        if not self.store.write_if(LEASE_FILE, renewed.dump(), version):
            self._current()  # raises when taken over
            raise LeaseLostError(f"the plan's lease {self._where} changed while it was being renewed: this run stops")
        self.lease = renewed

    def release(self) -> bool:
        """Mark the lease released (the next run takes it at once). ``False`` if it was no longer ours."""
        try:
            _, version = self._current()
        except (LeaseLostError, LeaseHeldError):
            return False
        released = self.lease.model_copy(update={"released": True, "expires_at": self._now()})
        return self.store.write_if(LEASE_FILE, released.dump(), version)


def task_lease_identity(context: Mapping[str, Any] | None, task_id: str) -> tuple[str, str]:
    """``(holder, scope)`` of the lease an Airflow task takes: scope = the DAG run (a retry or the next task of the
    same run takes over at once; any other run waits for the lease to expire), holder = the task try and worker.
    ``context`` is the task's context (read by duck typing: nothing of Airflow is imported here)."""
    ti = (context or {}).get("ti")
    dag_id = getattr(ti, "dag_id", None) or "-"
    run_id = getattr(ti, "run_id", None) or (context or {}).get("run_id") or f"pid-{os.getpid()}"
    try_number = getattr(ti, "try_number", None)
    map_index = getattr(ti, "map_index", -1)
    task = task_id if map_index in (None, -1) else f"{task_id}[{map_index}]"
    holder = (f"dag {dag_id} / run {run_id} / task {task}" + (f" / try {try_number}" if try_number else "")
              + f" on {socket.gethostname()} (pid {os.getpid()})")
    return holder, f"{dag_id}/{run_id}"
