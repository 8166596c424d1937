"""What a healing run may do by itself: the guards' settings as one typed object (docs/self-healing.md).

:class:`HealingPolicy` is declared once (in the DAG file) and read by every healing task: the mass-failure
breaker, the budget, the maintenance window, and per incident kind whether the run acts, acts as a dry run, or
asks a person first (and what an unanswered question becomes).

Example::

    >>> policy = HealingPolicy(breaker=Breaker(max_brokers=1), window=Window(cron="0 2 * * 6", duration_s=4 * 3600))
    >>> policy.kind("broker_down").mode, policy.kind("imbalance").mode
    ('act', 'approve')

Pure: imports no Airflow, no Kafka client, no PySpark.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from airflow_kafka_reassign.core.healing.incident import INCIDENT_KINDS

#: ``act``: heal by itself; ``approve``: a person approves the plan first; ``dry_run``: plan and log the requests,
#: change nothing; ``alert``: record an outcome and do nothing else.
Mode = Literal["act", "approve", "dry_run", "alert"]
#: What an approval left unanswered becomes after its timeout: ``approve`` (heal anyway, once the run has checked
#: that the incident still holds) or ``reject`` (do nothing; the outcome says so).
OnTimeout = Literal["approve", "reject"]


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Breaker(_Settings):
    """The mass-failure breaker: more brokers down at once than this is an outage to alert on, not a broker to
    drain (moving every replica of several brokers at once would load the survivors at the worst moment)."""

    #: at most this many brokers down (fenced, or gone from the registration while replicas name them) at once
    max_brokers: int = Field(1, ge=0)
    #: and at most this share of the registered brokers
    max_share: float = Field(0.2, gt=0, le=1)


class Budget(_Settings):
    """How much healing may move: per incident and per UTC day, kept on the healing state (all runs count)."""

    #: runs started for one incident (a run that failed may be started again by the next event, up to this)
    runs_per_incident: int = Field(2, ge=1)
    #: bytes one incident's plans may move
    bytes_per_incident: int = Field(2 * 1024**4, ge=0)
    #: healing runs started per UTC day, all incidents together
    runs_per_day: int = Field(6, ge=1)
    #: bytes planned per UTC day, all incidents together
    bytes_per_day: int = Field(10 * 1024**4, ge=0)


class Window(_Settings):
    """A maintenance window: it opens at each time of ``cron`` (UTC) and lasts ``duration_s``."""

    cron: str
    duration_s: float = Field(gt=0)

    @model_validator(mode="after")
    def _check(self) -> Window:
        from croniter import croniter  # type: ignore[import-untyped]  # Airflow's own cron library (a dependency of apache-airflow)

        if not croniter.is_valid(self.cron):
            raise ValueError(f"window cron {self.cron!r} is not a cron expression (five fields: 'minute hour "
                             "day-of-month month day-of-week', for example '0 2 * * 6')")
        return self

    def opened(self, now: datetime) -> datetime | None:
        """When the window that ``now`` is inside opened, or ``None`` when it is closed."""
        from croniter import croniter

        last = croniter(self.cron, now.astimezone(timezone.utc) + timedelta(microseconds=1)).get_prev(datetime)
        return last if now < last + timedelta(seconds=self.duration_s) else None

    def next_open(self, now: datetime) -> datetime:
        from croniter import croniter

        out: datetime = croniter(self.cron, now.astimezone(timezone.utc)).get_next(datetime)
        return out


class KindPolicy(_Settings):
    """What a healing run does for one incident kind."""

    mode: Mode = "act"
    #: with ``approve``: how long a person has to answer, and what no answer becomes
    approval_timeout_s: float = Field(1800.0, gt=0)
    on_timeout: OnTimeout = "approve"


#: the defaults: a failed broker or disk, and a new broker, heal by themselves; under-min-ISR partitions alert only
#: (their cause, a broker or a disk, is its own incident); an imbalance asks a person (and heals only in the window)
DEFAULT_KINDS: dict[str, KindPolicy] = {
    "broker_down": KindPolicy(mode="act"),
    "log_dir_offline": KindPolicy(mode="act"),
    "log_dir_full": KindPolicy(mode="approve", on_timeout="approve"),
    "under_min_isr": KindPolicy(mode="alert"),
    "empty_broker": KindPolicy(mode="act"),
    "imbalance": KindPolicy(mode="approve", on_timeout="reject"),
}


class HealingPolicy(_Settings):
    """Every guard of a healing run (docs/self-healing.md, "The guards")."""

    breaker: Breaker = Breaker()
    budget: Budget = Budget()
    #: the maintenance window, for ``imbalance`` only (``None``: imbalance is never healed by itself: alert only)
    window: Window | None = None
    kinds: dict[str, KindPolicy] = Field(default_factory=lambda: dict(DEFAULT_KINDS))
    #: how long a run waits for another writer (a manual run's reassignments or cordons) before it gives up
    max_wait_s: float = Field(6 * 3600.0, gt=0)
    #: the share of a log dir's volume above which a ``log_dir_full`` incident still holds (when its payload
    #: carries no ``threshold``)
    log_dir_full_ratio: float = Field(0.85, gt=0, le=1)
    #: a live broker whose replica count is further from the mean than this share of it (and than
    #: :data:`~airflow_kafka_reassign.core.healing.observation.IMBALANCE_MIN_REPLICAS`) keeps an ``imbalance`` holding
    #: (when its payload carries no ``band``): the watch's own rule
    imbalance_band: float = Field(0.2, gt=0)

    @model_validator(mode="after")
    def _check(self) -> HealingPolicy:
        unknown = sorted(set(self.kinds) - set(INCIDENT_KINDS))
        if unknown:
            raise ValueError(f"kinds names {unknown}, which are not incident kinds ({list(INCIDENT_KINDS)})")
        return self

    def kind(self, kind: str) -> KindPolicy:
        return self.kinds.get(kind) or DEFAULT_KINDS.get(kind) or KindPolicy()
