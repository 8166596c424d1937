"""What a run keeps on the plan's run state besides the throttle backup (core/execution/throttle.py) and the lease
(core/records/lease.py): the journal's event names, this task try's events, and the governor a later process of the same
try goes on from (the sensor is rebuilt at each reschedule poke, at the deferral and when the triggerer restarts).

Reads and writes here are best effort where the run does not depend on them: a damaged governor object costs the
adaptive state, never the run. The health policy's stop is journalled (the journal is the durable record)."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from airflow_kafka_reassign.core.records.journal import StateLocation, read_journal
from airflow_kafka_reassign.core.records.store import as_store

#: ExecuteReassignment ran this plan.json (its digest): the sensor that submits the later batches refuses another.
PLAN_EXECUTED = "plan-executed"
#: A step sent reassignments (``submitted``: the moves Kafka accepted, ``refused``: the others).
SUBMITTED = "submitted"
#: The health policy stopped a task try's submissions (kept across the sensor's pokes, deferral, restarts).
HEALTH_STOPPED = "health-stopped"
#: The moves in flight cancelled by ``on_unhealthy="cancel"`` (with the cancel's summary).
HEALTH_CANCELLED = "health-cancelled"
#: Where a task try's governor is kept between processes: ``<run dir>/governor/<try>.json`` (overwritten).
GOVERNOR_DIR = "governor"
#: A drain's later rounds (core/maintenance/drain.py): ``<run dir>/drain/round-<n>.json``, each a plan of the partitions that
#: arrived on the drained brokers, written before any of its moves is sent (a retry, on any worker, goes on from them).
DRAIN_DIR = "drain"
#: The journal event of a drain round planned.
DRAIN_ROUND = "drain-round"
#: The journal event of a change of the cluster under the plan and what the run did about it (one line, ``line``).
CLUSTER_CHANGED = "cluster-changed"


def cluster_events(state: StateLocation) -> list[str]:
    """What the cluster did under the plan and what the run did about it, one line each, in order, over every process
    of the run (the sensor's pokes, the trigger, retries): the journal's ``cluster-changed`` entries."""
    seen: dict[str, None] = {}
    for e in read_journal(state):
        if e.get("event") == CLUSTER_CHANGED and isinstance(e.get("line"), str):
            seen.setdefault(e["line"], None)
    return list(seen)


#: The ids (KIP-516) of the plan's topics as the run first saw them, for a plan that does not record them:
#: ``<run dir>/topic-ids.json``, written once before the first submission (a retry on any worker judges by them).
TOPIC_IDS_FILE = "topic-ids.json"


def read_topic_ids(state: StateLocation) -> dict[str, str] | None:
    data = as_store(state).read(TOPIC_IDS_FILE)
    return {str(k): str(v) for k, v in json.loads(data).items()} if data else None


def write_topic_ids(state: StateLocation, ids: dict[str, str]) -> None:
    as_store(state).write(TOPIC_IDS_FILE, json.dumps(ids, sort_keys=True).encode())


def drain_round_name(n: int) -> str:
    return f"{DRAIN_DIR}/round-{n:03d}.json"


def read_drain_rounds(state: StateLocation) -> list[str]:
    """The drain rounds planned so far on this run state, in order (their JSON texts)."""
    store = as_store(state)
    out = []
    n = 1
    while (data := store.read(drain_round_name(n))) is not None:
        out.append(data.decode())
        n += 1
    return out


def write_drain_round(state: StateLocation, n: int, plan_json: str) -> None:
    as_store(state).write(drain_round_name(n), plan_json.encode())


def try_key(lease_holder: str | None) -> str | None:
    """The task try a lease holder names, without its host and pid (the same whichever worker or triggerer)."""
    return lease_holder.split(" on ")[0] if lease_holder else None


def try_events(state: StateLocation, key: str | None) -> list[dict[str, Any]]:
    """This task try's journal entries."""
    return [e for e in read_journal(state) if e.get("holder") == key] if key else []


def health_stop(state: StateLocation, key: str | None) -> dict[str, Any] | None:
    """What the health policy did in this task try, for the summary: ``{"why": ..., "cancel": {...}}``
    (``cancel`` with ``on_unhealthy="cancel"``: the cancel's summary), or ``None``."""
    events = try_events(state, key)
    stops = [e for e in events if e.get("event") == HEALTH_STOPPED]
    if not stops:
        return None
    cancels = [e["cancel"] for e in events if e.get("event") == HEALTH_CANCELLED]
    return {"why": stops[0]["why"], "cancel": cancels[0] if cancels else None}


def executed_digest(state: StateLocation) -> str | None:
    """The digest of the plan.json ExecuteReassignment last ran on this run state (``None``: none ran)."""
    ran = [e.get("plan_sha256") for e in read_journal(state) if e.get("event") == PLAN_EXECUTED]
    return ran[-1] if ran else None


def _governor_name(key: str) -> str:
    return f"{GOVERNOR_DIR}/{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def read_governor(state: StateLocation, key: str | None, log: logging.Logger) -> dict[str, Any] | None:
    """The governor this task try left (``None``: none, another try's, or unreadable)."""
    if not key:
        return None
    store = as_store(state)
    try:
        data = store.read(_governor_name(key))
        saved = json.loads(data) if data else None
        ok = isinstance(saved, dict) and saved.get("holder") == key and isinstance(saved.get("governor"), dict)
    except Exception as e:  # noqa: BLE001 (see the module docstring)
        log.warning("could not read the submitter's adaptive state in %s (%s): starting afresh", store.uri, e)
        return None
    return saved if ok else None


def write_governor(state: StateLocation, key: str | None, data: dict[str, Any], written: list[str],
                   log: logging.Logger) -> None:
    """Keep the governor for a later process of this try, when it changed (``written``: the last text kept)."""
    if not key:
        return
    text = json.dumps({"holder": key, **data}, sort_keys=True)
    # the watch's last sample and rate change at every poke with a copy under way; a rebuilt watch can take its
    # rate over a longer interval, so those alone do not make a write
    same = json.dumps({"holder": key, **data, "governor": {**data["governor"], "watch": {
        k: v for k, v in (data["governor"].get("watch") or {}).items() if k not in ("last", "rate")}}}, sort_keys=True)
    if written and written[-1] == same:
        return
    store = as_store(state)
    try:
        store.write(_governor_name(key), text.encode())
    except Exception as e:  # noqa: BLE001 (see the module docstring)
        log.warning("could not keep the submitter's adaptive state in %s: %s", store.uri, e)
        return
    written[:] = [same]
