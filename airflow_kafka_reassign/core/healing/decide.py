"""The decision of a healing run: for a batch of incidents, against the live cluster, what to do and why.

:func:`decide` takes the incidents of one DAG run (Airflow batches the events that arrived before the run started),
the :class:`~airflow_kafka_reassign.core.healing.view.ClusterView`, the
:class:`~airflow_kafka_reassign.core.healing.policy.HealingPolicy` and the
:class:`~airflow_kafka_reassign.core.healing.ledger.HealingLedger`, and returns a :class:`HealingDecision`. The
checks, in order, for each incident (the first that applies decides; each is one recorded outcome):

1. **handled**: a run acts or acted for this incident already (its claim on the ledger): nothing twice;
2. **stale**: the condition no longer holds on the live cluster (the broker is back, the dir is below the
   threshold ...): a no-op that says why;
3. **alert**: the kind's mode is ``alert``: recorded, nothing else;
4. **breaker**: more brokers down at once than the breaker allows: an outage to alert on, no move;
5. **manual**: the incident's broker or log dir is cordoned by someone else (a manual run): healing never touches it;
6. **writer**: another writer is at work: reassignments the controller lists in flight, or a broker or log dir
   cordoned by someone else that still holds replicas (a manual drain waiting for its approval or under way). This
   run waits (:attr:`HealingDecision.wait`) and asks again; it gives up after ``max_wait_s`` (``gave_up``);
7. **window**: an imbalance outside the maintenance window waits for it when it opens within ``max_wait_s``, else is
   recorded ``window``;
8. **budget**: the incident's runs or the day's are spent (:meth:`HealingLedger.claim`), else the incident is claimed
   for this run: ``act`` (or ``dry_run``).

"Someone else" is judged from the cluster itself, so a reassignment or a cordon made outside Airflow counts as much
as a manual DAG's. A cordon is healing's own (:func:`healing_cordons`) on the brokers and dirs of an incident a run is
acting on, and, once that run is done, only where the cordon it left is still there on what it left empty.

Pure: imports no Airflow, no Kafka client, no PySpark.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from airflow_kafka_reassign.core.healing.incident import Incident
from airflow_kafka_reassign.core.healing.ledger import Claim, HealingLedger, Outcome, dir_refs, outcome
from airflow_kafka_reassign.core.healing.observation import IMBALANCE_MIN_REPLICAS
from airflow_kafka_reassign.core.healing.policy import HealingPolicy
from airflow_kafka_reassign.core.healing.view import ClusterView
from airflow_kafka_reassign.core.maintenance.cordon import ALL_DIRS, parse_cordon, render_cordon
from airflow_kafka_reassign.core.vocabulary.ports import LogDir

#: What a healing DAG does for each incident kind (the existing operators do the work).
Action = Literal["drain", "remove_disks", "scale_out", "rebalance", "none"]
ACTION_OF: dict[str, Action] = {
    "broker_down": "drain",
    "log_dir_offline": "none",  # the remove-disks planner cannot copy from an offline dir: alert (docs)
    "log_dir_full": "remove_disks",
    "under_min_isr": "none",
    "empty_broker": "scale_out",
    "imbalance": "rebalance",
}
_STRICTNESS = {"act": 0, "approve": 1, "dry_run": 2, "alert": 3}


@dataclass(frozen=True)
class HealingDecision:
    """What the run does: ``action`` on ``brokers`` / ``log_dirs`` for the ``incidents`` it claimed, or nothing;
    ``wait`` says why it must ask again later (nothing recorded yet for that)."""

    action: Action = "none"
    brokers: tuple[int, ...] = ()
    log_dirs: tuple[str, ...] = ()
    #: cordon the brokers / dirs before the plan (False where a config cannot be written: a broker that is down)
    cordon: bool = True
    dry_run: bool = False
    require_approval: bool = False
    approval_timeout_s: float = 1800.0
    on_timeout: str = "approve"
    incidents: tuple[str, ...] = ()
    outcomes: tuple[Outcome, ...] = ()
    reason: str = ""
    wait: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def cordons(self) -> dict[int, str]:
        """What the run's plan cordons and a finished run leaves (``cordoned.log.dirs`` by broker): a drain's brokers
        (``*``) where their config can be written, a disk removal's dirs; nothing in a dry run or for the other
        actions. The run's claims keep it when it ends done (:meth:`HealingLedger.finish`)."""
        if not self.cordon or self.dry_run or self.action not in ("drain", "remove_disks"):
            return {}
        if self.action == "drain":
            return dict.fromkeys(self.brokers, ALL_DIRS)
        paths: dict[int, set[str]] = {}
        for d in dir_refs(self.log_dirs):
            paths.setdefault(d.broker, set()).add(d.path.rstrip("/") or "/")
        return {b: v for b, p in sorted(paths.items()) if (v := render_cordon(frozenset(p))) is not None}

    def xcom(self) -> dict[str, Any]:
        """The task's small XCom: what to do and why."""
        return {"action": self.action, "brokers": list(self.brokers), "log_dirs": list(self.log_dirs),
                "cordon": self.cordon, "cordons": {str(b): v for b, v in self.cordons.items()},
                "dry_run": self.dry_run, "require_approval": self.require_approval,
                "incidents": list(self.incidents), "reason": self.reason, "notes": list(self.notes),
                "outcomes": [{"incident": o.incident_id, "decision": o.decision, "reason": o.reason}
                             for o in self.outcomes]}


def stale_reason(incident: Incident, view: ClusterView, policy: HealingPolicy) -> tuple[Incident | None, str]:
    """The part of ``incident`` that still holds on the live cluster (``None``: none) and what no longer holds."""
    gone: list[str] = []
    if incident.kind == "broker_down":
        still = []
        for b in incident.brokers:
            if b in view.alive:
                gone.append(f"broker {b} is back (registered, not fenced)")
            elif not view.holds(b):
                gone.append(f"broker {b} holds no replica (nothing to drain)")
            else:
                still.append(b)
        return (incident.model_copy(update={"brokers": tuple(still)}) if still else None), "; ".join(gone)
    if incident.kind in ("log_dir_offline", "log_dir_full"):
        threshold = float(incident.detail.get("threshold", policy.log_dir_full_ratio))
        kept = []
        for d in incident.dirs:
            found = view.log_dir(d.broker, d.path)
            used = _used(found) if found is not None else None
            if d.broker not in view.alive:
                gone.append(f"broker {d.broker} is down (its broker_down incident drains it)")
            elif found is None:
                gone.append(f"broker {d.broker} no longer reports log dir {d.path}")
            elif incident.kind == "log_dir_offline" and not found.offline:
                gone.append(f"log dir {d} is online again")
            elif incident.kind == "log_dir_full" and found.offline:
                gone.append(f"log dir {d} is offline now (its log_dir_offline incident covers it)")
            elif incident.kind == "log_dir_full" and used is not None and used < threshold:
                gone.append(f"log dir {d} is {used:.0%} full, below {threshold:.0%}")
            elif incident.kind == "log_dir_full" and not found.replicas:
                gone.append(f"log dir {d} holds no replica (nothing to move off)")
            else:
                kept.append(d)
        return (incident.model_copy(update={"dirs": tuple(kept)}) if kept else None), "; ".join(gone)
    if incident.kind == "empty_broker":
        still = []
        for b in incident.brokers:
            if b not in view.alive:
                gone.append(f"broker {b} is not alive")
            elif view.holds(b):
                gone.append(f"broker {b} holds {view.holds(b)} replica(s) now")
            else:
                still.append(b)
        return (incident.model_copy(update={"brokers": tuple(still)}) if still else None), "; ".join(gone)
    if incident.kind == "imbalance":
        band = float(incident.detail.get("band", policy.imbalance_band))
        far = view.far_from_mean(band, IMBALANCE_MIN_REPLICAS)
        if not far and "disk" not in str(incident.detail.get("by", "")):
            return None, (f"every live broker's replica count is within {band:.0%} of the mean (or "
                          f"{IMBALANCE_MIN_REPLICAS} replicas) now")
        return incident, ""
    if incident.kind == "under_min_isr":
        if not view.under_min_isr:
            return None, "no partition is under min ISR now"
        return incident, ""
    return None, f"unknown incident kind {incident.kind!r}"


def _used(d: LogDir) -> float | None:
    if not d.total_bytes or d.usable_bytes is None:
        return None
    return 1.0 - d.usable_bytes / d.total_bytes


def breaker_reason(view: ClusterView, policy: HealingPolicy) -> str | None:
    """Why the mass-failure breaker is open (``None``: it is closed)."""
    down = sorted(view.down)
    total = len(set(view.registered) | set(down)) or 1
    share = len(down) / total
    if len(down) > policy.breaker.max_brokers or share > policy.breaker.max_share:
        return (f"mass-failure breaker: {len(down)} of {total} brokers are down ({sorted(down)}; max_brokers="
                f"{policy.breaker.max_brokers}, max_share={policy.breaker.max_share:g}): an outage to alert on, not "
                "brokers to drain; nothing is moved. Bring the brokers back, or drain them by hand "
                "(kafka_decommission_brokers)")
    return None


def healing_cordons(claims: Iterable[Claim], view: ClusterView) -> tuple[frozenset[int], frozenset[tuple[int, str]]]:
    """The brokers and log dirs whose cordon is healing's own; any other cordon is someone else's.

    * a claim a run is acting on: every broker and dir of its incident (the run cordons and empties them now);
    * a claim done: only the cordons its run left (:attr:`Claim.cordons_left
      <airflow_kafka_reassign.core.healing.ledger.Claim.cordons_left>`), each while it is still on the broker (``*``)
      or the dir, and while what it covers still holds no replica. Healing leaves a cordon only on what it emptied (a
      drained broker, an emptied dir), and the controller places no new replica under a cordon: replicas there again
      mean the cordon was lifted and set again since, or someone else moved them in; either way it is not healing's.
      A cordon that differs (``*`` where healing left one dir, a dir where it left none) is someone else's too. Kafka
      keeps no history of a config value, so a cordon lifted and set again to the same value on what is still empty
      is taken as healing's: no decision changes with it, an empty cordoned broker or dir is no writer;
    * a claim failed, or done without a recorded cordon (a drain of a broker that was down, a scale-out, a claim
      written before the cordons were kept): nothing.
    """
    brokers: set[int] = set()
    dirs: set[tuple[int, str]] = set()
    cordoned_brokers, cordoned_dirs = view.cordoned_brokers(), view.cordoned_dirs()
    for claim in claims:
        if claim.status == "acting":
            brokers.update(claim.incident.brokers)
            dirs.update((d.broker, d.path) for d in claim.incident.dirs)
            continue
        for broker, value in claim.cordons_left.items():
            left = parse_cordon(value)
            if left == ALL_DIRS:
                if broker in cordoned_brokers and not view.holds(broker):
                    brokers.add(broker)
                continue
            dirs.update((broker, p) for p in left if (broker, p) in cordoned_dirs
                        and not ((found := view.log_dir(broker, p)) is not None and found.replicas))
    return frozenset(brokers), frozenset(dirs)


def writer_reason(view: ClusterView, ours_brokers: Collection[int], ours_dirs: Collection[tuple[int, str]]
                  ) -> str | None:
    """Why another writer is at work on the cluster (``None``: nobody is): reassignments in flight, or a cordon
    healing did not set on a broker or dir that still holds replicas."""
    if view.in_flight:
        sample = ", ".join(str(tp) for tp in sorted(view.in_flight)[:3]) + (", ..." if len(view.in_flight) > 3 else "")
        return (f"the controller lists {len(view.in_flight)} reassignment(s) in flight ({sample}) "
                "that this run did not start: a manual run (or a tool outside Airflow) is moving replicas")
    busy = sorted(b for b in view.cordoned_brokers() - set(ours_brokers) if view.holds(b))
    if busy:
        return (f"broker(s) {busy} are cordoned by someone else and still hold replicas: a manual drain is waiting "
                "for its approval or under way")
    dirs = sorted((b, p) for b, p in view.cordoned_dirs() - set(ours_dirs)
                  if (d := view.log_dir(b, p)) is not None and d.replicas)
    if dirs:
        return (f"log dir(s) {[f'{b}:{p}' for b, p in dirs]} are cordoned by someone else and still hold replicas: "
                "a manual disk removal is waiting for its approval or under way")
    return None


def manual_reason(incident: Incident, view: ClusterView, ours_brokers: Collection[int],
                  ours_dirs: Collection[tuple[int, str]]) -> str | None:
    """Why healing must not touch the incident's brokers or dirs: someone else cordoned them."""
    mine = set(ours_brokers)
    brokers = sorted(b for b in incident.brokers if b in view.cordoned_brokers() and b not in mine)
    dirs = sorted(str(d) for d in incident.dirs
                  if ((d.broker, d.path) in view.cordoned_dirs() or d.broker in view.cordoned_brokers())
                  and (d.broker, d.path) not in set(ours_dirs) and d.broker not in mine)
    if brokers or dirs:
        what = ", ".join([f"broker {b}" for b in brokers] + [f"log dir {d}" for d in dirs])
        return (f"{what} cordoned by someone else (a manual run, or by hand): healing never touches what a manual "
                "run cordoned; that run owns it")
    return None


def decide(incidents: Sequence[Incident], view: ClusterView, policy: HealingPolicy, ledger: HealingLedger, *,
           run_id: str, now: datetime, cluster: str | None = None, kinds: Collection[str] | None = None,
           waiting_since: datetime | None = None) -> HealingDecision:
    """The decision for a batch (see the module docstring). Outcomes are recorded on the ledger and logged, except
    while the run waits for another writer or the window (``wait``): then nothing is recorded (the caller records
    the wait once, and the outcomes when the wait ends).

    ``waiting_since``: when this run started to wait (after ``policy.max_wait_s`` it gives up)."""
    outcomes: list[Outcome] = []

    def note(incident: Incident, decision: Any, reason: str) -> None:
        outcomes.append(outcome(incident, decision, reason, at=now, run_id=run_id))

    batch: list[Incident] = []
    for incident in incidents:
        if any(i.id == incident.id for i in batch):
            continue  # the same event twice in one batch
        if cluster is not None and incident.cluster != cluster:
            note(incident, "stale", f"the incident is about cluster {incident.cluster!r}, this DAG heals {cluster!r}")
        elif kinds is not None and incident.kind not in kinds:
            note(incident, "stale", f"this DAG heals {sorted(kinds)}, not {incident.kind}")
        else:
            batch.append(incident)

    live: list[Incident] = []
    for incident in batch:
        claimed = ledger.check(incident, run_id, policy.budget, now)
        if not claimed.claimed and claimed.decision == "handled":
            note(incident, "handled", claimed.reason)
            continue
        still, why = stale_reason(incident, view, policy)
        if still is None:
            note(incident, "stale", f"the condition no longer holds: {why}")
            continue
        if policy.kind(incident.kind).mode == "alert" or ACTION_OF.get(incident.kind, "none") == "none":
            note(incident, "alert", _alert_reason(incident))
            continue
        live.append(still if not why else still.model_copy(update={"detail": {**still.detail, "partly_stale": why}}))

    ours_brokers, ours_dirs = healing_cordons(ledger.claims(), view)
    if live:
        breaker = breaker_reason(view, policy)
        if breaker:
            for incident in live:
                note(incident, "breaker", breaker)
            live = []
    kept = []
    for incident in live:
        manual = manual_reason(incident, view, ours_brokers, ours_dirs)
        if manual:
            note(incident, "manual", manual)
        else:
            kept.append(incident)
    live = kept

    waited = now - waiting_since if waiting_since else timedelta(0)
    gave_up = waited.total_seconds() >= policy.max_wait_s
    if live:
        writer = writer_reason(view, ours_brokers, ours_dirs)
        if writer and not gave_up:
            return HealingDecision(outcomes=tuple(outcomes), wait=f"another writer: {writer}", reason=writer)
        if writer:
            for incident in live:
                note(incident, "gave_up", f"waited {waited} (max_wait_s={policy.max_wait_s:g}) for another writer: "
                                          f"{writer}")
            live = []
    kept = []
    for incident in live:
        if incident.kind != "imbalance":
            kept.append(incident)
            continue
        if policy.window is None:
            note(incident, "window", "no maintenance window is set (HealingPolicy.window): an imbalance is only "
                                     "rebalanced inside one")
            continue
        if policy.window.opened(now) is None:
            opens = policy.window.next_open(now)
            if (opens - now).total_seconds() <= policy.max_wait_s - waited.total_seconds():
                return HealingDecision(
                    outcomes=tuple(outcomes), reason=f"outside the maintenance window ({policy.window.cron})",
                    wait=f"the maintenance window ({policy.window.cron}, {policy.window.duration_s:g} s) opens at "
                         f"{opens.isoformat(timespec='minutes')}")
            note(incident, "window", f"outside the maintenance window ({policy.window.cron}, "
                                     f"{policy.window.duration_s:g} s); it opens at {opens.isoformat(timespec='minutes')}, "
                                     f"after max_wait_s={policy.max_wait_s:g}: the scheduled rebalance DAG takes it then")
            continue
        kept.append(incident)
    live = kept

    claimed_incidents: list[Incident] = []
    for incident in live:
        result = ledger.claim(incident, run_id, policy.budget, now)
        if not result.claimed:
            note(incident, result.decision, result.reason)
        else:
            claimed_incidents.append(incident)
    if not claimed_incidents:
        reasons = "; ".join(sorted({o.decision for o in outcomes})) or "no incident"
        return _recorded(ledger, HealingDecision(outcomes=tuple(outcomes), reason=f"nothing to do ({reasons})"))

    # one action per DAG: the first kind's; incidents of another action stay for their own DAG
    action = ACTION_OF[claimed_incidents[0].kind]
    mode = max((policy.kind(i.kind).mode for i in claimed_incidents), key=_STRICTNESS.__getitem__)
    strict = policy.kind(max(claimed_incidents, key=lambda i: _STRICTNESS[policy.kind(i.kind).mode]).kind)
    brokers = tuple(sorted({b for i in claimed_incidents for b in i.brokers}))
    dirs = tuple(sorted({str(d) for i in claimed_incidents for d in i.dirs}))
    notes = [str(i.detail["partly_stale"]) for i in claimed_incidents if "partly_stale" in i.detail]
    cordon = True
    if action == "drain":
        down = [b for b in brokers if b not in view.alive]
        if down:
            cordon = False
            notes.append(f"broker(s) {down} are down: their cordoned.log.dirs cannot be written (a broker config "
                         "request goes to the broker itself), so nothing is cordoned; the controller places no new "
                         "replica on a fenced broker anyway. They are drained, never unregistered: one that comes "
                         "back is given its share by the scale-out rebalance")
    what = {"drain": f"drain broker(s) {list(brokers)}", "remove_disks": f"empty log dir(s) {list(dirs)}",
            "scale_out": f"give broker(s) {list(brokers)} their share", "rebalance": "rebalance the cluster"}[action]
    decision = "dry_run" if mode == "dry_run" else "act"
    for incident in claimed_incidents:
        note(incident, decision, what + (" (dry run: the requests are logged, nothing changes)" if mode == "dry_run"
                                         else " (after a person's approval)" if mode == "approve" else ""))
    return _recorded(ledger, HealingDecision(
        action=action, brokers=brokers, log_dirs=dirs, cordon=cordon, dry_run=mode == "dry_run",
        require_approval=mode == "approve", approval_timeout_s=strict.approval_timeout_s,
        on_timeout=strict.on_timeout, incidents=tuple(i.id for i in claimed_incidents), outcomes=tuple(outcomes),
        reason=what, notes=tuple(notes)))


def _alert_reason(incident: Incident) -> str:
    if incident.kind == "log_dir_offline":
        return ("a log dir offline cannot be emptied by a remove-disks plan (its replicas cannot be copied from it): "
                f"replace the disk and restart broker(s) {sorted({d.broker for d in incident.dirs})}, or drain them "
                "(kafka_decommission_brokers); the replicas of its partitions on the other brokers keep serving")
    if incident.kind == "under_min_isr":
        return (f"partitions under min ISR ({incident.detail.get('partitions', '?')}): acks=all writes to them fail; "
                "their cause (a broker or a disk down) is its own incident and heals there")
    return f"mode alert for {incident.kind} (HealingPolicy.kinds): recorded, nothing moved"


def _recorded(ledger: HealingLedger, decision: HealingDecision) -> HealingDecision:
    for o in decision.outcomes:
        ledger.record(o)
    return decision
