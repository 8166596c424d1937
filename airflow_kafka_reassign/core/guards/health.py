"""The health gate: is the cluster healthy enough to submit more moves?

Pure (no Airflow, no Kafka client). Before each batch and at each poke the engine reads every
partition's replicas, ISR and leader (Metadata) and its topic's ``min.insync.replicas``, and
:func:`assess` sorts the partitions that are not fully in sync:

* **under-replicated**: a replica is missing from the ISR;
* **under min ISR**: the ISR is smaller than ``min.insync.replicas`` (acks=all writes fail). Where the cluster has
  KIP-966's eligible leader replicas on (Kafka 4.0+ opt-in, the default for clusters created on 4.1+), the ELR of
  these partitions (and of the offline ones) is read too (DescribeTopicPartitions) and reported: replicas that left
  the ISR while it was below min ISR, when nothing new could be committed, so every committed record is still on
  the ISR and the ELR and the controller may elect one of them without losing any. They are still trouble (acks=all
  writes are refused until the ISR is back to min ISR). ``min.insync.replicas`` is the topic's effective value
  (DescribeConfigs of the topic: its own, else the cluster-wide default, else the broker's static one; under ELR
  the controller keeps a cluster-wide default and there is no per-broker value);
* **offline**: no leader (with ELR: whether eligible leader replicas still hold its committed records).

Some of these are **expected**, because the run itself explains them: a partition this plan is
moving whose only missing replicas are its adding replicas still catching up (and which keeps
its leader and min ISR), or one whose missing replicas are on a broker that is down and that
this plan drains (the plan recreates those replicas elsewhere: pausing would block the repair).
Every other one is **trouble**, and then :class:`HealthPolicy` decides: ``"pause"`` (default)
submits nothing new and says why in one line per poke, resuming by itself once healthy (up to
``max_pause_s``); ``"cancel"`` cancels the plan's moves in flight; ``"fail"`` stops at once.

Example::

    >>> from airflow_kafka_reassign.core.vocabulary.models import PartitionState
    >>> p = PartitionState(topic="t", partition=0, replicas=(1, 2, 3), isr=(1, 2), leader=1)
    >>> report = assess([p], {"t": 2})
    >>> report.healthy, report.trouble[p.tp]
    (False, 'replicas [1, 2, 3], ISR [1, 2], missing 3')
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from airflow_kafka_reassign.core.vocabulary.models import Move, PartitionState, TopicPartition
from airflow_kafka_reassign.exceptions import ConfigurationError

OnUnhealthy = Literal["pause", "cancel", "fail"]
BelowMinIsr = Literal["last", "refuse"]
#: Partitions named in a health line.
SAMPLE = 3


@dataclass(frozen=True)
class HealthPolicy:
    """What the engine does when the cluster is unhealthy for reasons of its own.

    :param gate: read the cluster's health before each batch and at each poke (``False``: never).
    :param on_unhealthy: ``"pause"`` (submit nothing new; resume when healthy), ``"cancel"``
        (cancel the plan's moves in flight, KIP-455, then stop) or ``"fail"`` (stop at once; moves
        in flight keep running with their throttles, a new run resumes and restores them).
    :param max_pause_s: how long a pause may last before the run gives up as with ``"fail"``
        (``None``: no bound).
    :param below_min_isr: pending moves whose target keeps fewer in-sync replicas than
        ``min.insync.replicas`` (until their new replicas catch up, acks=all writes depend on the
        replicas the move removes) go ``"last"`` (after every other pending move) or are
        ``"refuse"``-d by name. Either way their count is reported.
    """

    gate: bool = True
    on_unhealthy: OnUnhealthy = "pause"
    max_pause_s: float | None = 1800.0
    below_min_isr: BelowMinIsr = "last"

    def __post_init__(self) -> None:
        if self.on_unhealthy not in ("pause", "cancel", "fail"):
            raise ConfigurationError(
                f"on_unhealthy must be 'pause' (submit nothing new until healthy), 'cancel' or 'fail', "
                f"not {self.on_unhealthy!r}")
        if self.below_min_isr not in ("last", "refuse"):
            raise ConfigurationError(f"below_min_isr must be 'last' or 'refuse', not {self.below_min_isr!r}")
        bound = self.max_pause_s
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int | float) or bound < 0):
            raise ConfigurationError(f"max_pause_s must be a number of seconds >= 0 or None, not {bound!r}")


@dataclass
class HealthReport:
    """The partitions that are not fully in sync, sorted into expected and trouble."""

    #: partition -> replicas missing from its ISR (expected ones included)
    under_replicated: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    under_min_isr: list[TopicPartition] = field(default_factory=list)
    #: of those, the partitions with KIP-966 eligible leader replicas (partition -> its ELR): every committed record
    #: is on the ISR and the ELR, so losing the leader loses none (acks=all writes are still refused)
    under_min_isr_elr: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    offline: list[TopicPartition] = field(default_factory=list)
    #: explained by the run itself: partition -> why
    expected: dict[TopicPartition, str] = field(default_factory=dict)
    #: everything else: partition -> what is wrong with it
    trouble: dict[TopicPartition, str] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return not self.trouble

    def line(self) -> str:
        """One line: what is wrong, counted, with a few partitions named."""
        if self.healthy:
            return (f"cluster healthy ({len(self.expected)} partition(s) out of sync as expected: reassignments catching "
                    "up, or down brokers this plan drains)"
                    if self.expected else "cluster healthy")
        bad = set(self.trouble)
        ur = sum(1 for tp in self.under_replicated if tp in bad)
        umi = sum(1 for tp in self.under_min_isr if tp in bad)
        elr = sum(1 for tp in self.under_min_isr_elr if tp in bad)
        off = sum(1 for tp in self.offline if tp in bad)
        shown = "; ".join(f"{tp}: {why}" for tp, why in sorted(self.trouble.items())[:SAMPLE])
        more = f"; and {len(bad) - SAMPLE} more" if len(bad) > SAMPLE else ""
        own = f"; {len(self.expected)} more are expected (reassignments catching up)" if self.expected else ""
        kept = f" ({elr} with eligible leader replicas: committed records kept)" if elr else ""
        return (f"cluster unhealthy: {ur} partition(s) under-replicated, {umi} under min ISR{kept}, {off} offline "
                f"({shown}{more}){own}")

    def summary(self) -> dict[str, object]:
        return {"healthy": self.healthy, "trouble": len(self.trouble), "expected": len(self.expected),
                "under_min_isr_elr": len(self.under_min_isr_elr),
                "trouble_partitions": [str(tp) for tp in sorted(self.trouble)[:SAMPLE * 3]]}


def min_isr_of(configs: Mapping[str, Mapping[str, str]]) -> dict[str, int]:
    """``min.insync.replicas`` per topic from topic configs (topics without it: 1, Kafka's default)."""
    out = {}
    for topic, cfg in configs.items():
        try:
            out[topic] = max(1, int(cfg.get("min.insync.replicas", "1")))
        except ValueError:
            out[topic] = 1
    return out


def assess(
    partitions: Iterable[PartitionState],
    min_isr: Mapping[str, int],
    *,
    moving: Collection[TopicPartition] | Mapping[TopicPartition, Collection[int]] = (),
    drained: Collection[int] = (),
    live_brokers: Collection[int] | None = None,
) -> HealthReport:
    """Sort the partitions that are not fully in sync into expected and trouble.

    :param min_isr: ``min.insync.replicas`` per topic (absent: 1).
    :param moving: partitions this run has in flight. Missing replicas that are a partition's
        adding replicas (catching up, in this run's reassignment or anyone's) are expected, as long as
        the partition keeps a leader and min ISR.
        A mapping also names each one's adding replicas (the metadata can lag the controller).
    :param drained: brokers this plan removes replicas from (and adds none to): a replica missing
        because such a broker is down (not in ``live_brokers``) is expected, the plan recreates it.
    :param live_brokers: the brokers the cluster lists as alive (``None``: not known).
    """
    report = HealthReport()
    ours = set(moving)
    adding = moving if isinstance(moving, Mapping) else {}
    gone = set(drained) - set(live_brokers) if live_brokers is not None else set()
    for p in partitions:
        isr = set(p.isr)
        missing = tuple(b for b in p.replicas if b not in isr)
        need = min_isr.get(p.topic, 1)
        short = len(isr) < need and len(p.replicas) >= need
        if not missing and not short and p.leader is not None:
            continue
        tp = p.tp
        if missing:
            report.under_replicated[tp] = missing
        if short:
            report.under_min_isr.append(tp)
            if p.elr:
                report.under_min_isr_elr[tp] = p.elr
        if p.leader is None:
            report.offline.append(tp)
        state = f"replicas {list(p.replicas)}, ISR {list(p.isr)}, missing {_ids(missing)}"
        if p.leader is None:
            report.trouble[tp] = f"offline (no leader){_offline_elr(p, live_brokers)}; {state}"
            continue
        # adding replicas outside the ISR are every reassignment's normal state (its original replicas still
        # hold the data): expected whoever started it; the run's own moves also by the controller's word
        # (the metadata can lag it)
        catching_up = set(p.adding_replicas) | (set(adding.get(tp, ())) if tp in ours else set())
        explained = [b for b in missing if b in catching_up or b in gone]
        if len(explained) == len(missing) and (not short or all(b in gone for b in missing)):
            why = [("adding replicas catching up", [b for b in missing if b in catching_up]),
                   ("down broker(s) this plan drains", [b for b in missing if b in gone])]
            report.expected[tp] = "; ".join(f"{what}: {_ids(bs)}" for what, bs in why if bs)
        else:
            report.trouble[tp] = (_short(p, need, live_brokers) if short else "") + state
    return report


def _down(brokers: Iterable[int], live_brokers: Collection[int] | None) -> str:
    gone = [b for b in brokers if live_brokers is not None and b not in live_brokers]
    return f" (down: {_ids(gone)})" if gone else ""


def _short(p: PartitionState, need: int, live_brokers: Collection[int] | None) -> str:
    """What "under min ISR" means for ``p``, with KIP-966's eligible leader replicas when they were read."""
    head = f"under min ISR ({len(p.isr)} < {need})"
    if p.elr is None:  # not read (ELR off or unknown)
        return f"{head}; "
    if not p.elr:
        return f"{head}, no eligible leader replica (KIP-966: committed records only on the ISR {list(p.isr)}); "
    return (f"{head}, eligible leader replicas {list(p.elr)}{_down(p.elr, live_brokers)} (KIP-966: acks=all writes "
            f"refused until the ISR is back to {need}; every committed record is on the ISR and ELR "
            f"{sorted({*p.isr, *p.elr})}, none lost if the leader fails); ")


def _offline_elr(p: PartitionState, live_brokers: Collection[int] | None) -> str:
    if p.elr:
        return (f", eligible leader replicas {list(p.elr)}{_down(p.elr, live_brokers)} hold every committed record "
                "(KIP-966: back without data loss once one of them is unfenced)")
    if p.last_known_elr:
        return (f", only last known eligible replicas {list(p.last_known_elr)} left (KIP-966: they shut down "
                "uncleanly and may lack committed records)")
    return ""


def below_min_isr(moves: Sequence[Move], isr: Mapping[TopicPartition, Sequence[int]],
                  min_isr: Mapping[str, int]) -> list[TopicPartition]:
    """The moves that take an in-sync replica away from a partition whose target then keeps fewer in-sync replicas
    than ``min.insync.replicas`` (when above 1).

    Until their adding replicas catch up, such a partition's acks=all writes depend on replicas
    the move removes: one more failure there and producers with acks=all are refused. They are
    safest last (or refused, see :class:`HealthPolicy`). A move that removes only replicas already out of the ISR
    (a repair: it replaces a replica that is lagging or on a broker that is down) lowers nothing and does not
    qualify. With ``min.insync.replicas=1`` (Kafka's default) no move qualifies: a partition with a leader is
    never below it.
    """
    out = []
    for m in moves:
        need = min_isr.get(m.topic, 1)
        if need <= 1:
            continue
        in_sync = set(isr.get(m.tp, ()))
        kept = set(m.target_replicas) & in_sync
        if len(kept) < need and any(b in in_sync for b in m.removing_replicas):
            out.append(m.tp)
    return out


#: A pending move's urgency (lower goes first, whatever the order): it replaces a missing replica of a partition
#: below ``min.insync.replicas`` with no eligible leader replica (KIP-966) beside its ISR ...
RESTORES_MIN_ISR = 0
#: ... of a partition below min ISR whose eligible leader replicas still hold every committed record ...
RESTORES_MIN_ISR_ELR = 1
#: ... of an under-replicated partition (a replica out of the ISR, or on a broker that is down), or it adds
#: replicas (a partition created under-replicated, KIP-409, healed);
RESTORES_REPLICA = 2
#: any other move;
NORMAL = 3
#: a move that takes an in-sync replica from a partition it leaves below min ISR (:func:`below_min_isr`): last.
BELOW_MIN_ISR_LAST = 4

URGENCY_NAMES = {RESTORES_MIN_ISR: "restores min ISR", RESTORES_MIN_ISR_ELR: "restores min ISR (eligible leaders "
                 "keep the data)", RESTORES_REPLICA: "restores a replica", NORMAL: "normal",
                 BELOW_MIN_ISR_LAST: "below min ISR (last)"}


def urgency(m: Move, p: PartitionState | None, min_isr: int, live_brokers: Collection[int] | None = None) -> int:
    """How urgent the pending move ``m`` of partition ``p`` (as the cluster shows it now) is: one of
    :data:`RESTORES_MIN_ISR` ... :data:`NORMAL` (:data:`BELOW_MIN_ISR_LAST` is told by :func:`below_min_isr`).

    A move *restores redundancy* when it removes a replica that is out of the ISR or on a broker that is not alive
    (and adds one elsewhere), or when it adds replicas: it gives the partition back a copy it lacks. A move of a
    degraded partition that does not (it moves an in-sync replica and keeps the missing one) is normal."""
    if p is None:
        return NORMAL
    isr = set(p.isr)
    missing = {b for b in p.replicas if b not in isr or (live_brokers is not None and b not in live_brokers)}
    current = m.current_replicas if m.current_replicas is not None else p.replicas
    restores = (bool(missing) and any(b in missing for b in m.removing_replicas) and bool(m.adding_replicas)) \
        or len(m.target_replicas) > len(current)
    if not restores:
        return NORMAL
    if len(isr) < min_isr:
        return RESTORES_MIN_ISR_ELR if p.elr else RESTORES_MIN_ISR
    return RESTORES_REPLICA


def drained_brokers(moves: Iterable[Move]) -> set[int]:
    """Brokers that the moves remove replicas from and add none to (a decommission drains them)."""
    removing: set[int] = set()
    adding: set[int] = set()
    for m in moves:
        removing.update(m.removing_replicas)
        adding.update(m.adding_replicas)
    return removing - adding


def _ids(brokers: Iterable[int]) -> str:
    return ", ".join(str(b) for b in brokers) or "none"
