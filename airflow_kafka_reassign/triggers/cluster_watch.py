"""The cluster watch: :class:`KafkaClusterWatchTrigger`, a ``BaseEventTrigger`` for an ``AssetWatcher``.

It polls the cluster every ``poll_interval_s`` seconds with a few requests whose cost does not grow with the number
of partitions beyond one Metadata request (:func:`~airflow_kafka_reassign.core.healing.observation.observe`), finds
the conditions of the watched kinds (:func:`~airflow_kafka_reassign.core.healing.observation.conditions_of`), and
advances the watch state on the plan storage with compare-and-set
(:class:`~airflow_kafka_reassign.core.healing.watch.WatchLedger`). Each condition that has lasted its dwell time
fires ONE event, whose payload is :meth:`Incident.to_payload()
<airflow_kafka_reassign.core.healing.incident.Incident.to_payload>`; Airflow turns it into an asset event and the
DAGs scheduled on the asset read it from ``triggering_asset_events[asset][i].extra["payload"]``::

    from airflow.sdk import DAG, Asset, AssetWatcher
    from airflow_kafka_reassign.triggers.cluster_watch import KafkaClusterWatchTrigger

    incidents = Asset("kafka_prod_incidents", watchers=[AssetWatcher(
        name="kafka_prod_watch",
        trigger=KafkaClusterWatchTrigger(kafka_conn_id="kafka_prod", state_uri="s3://kafka-plans/watch",
                                         storage_conn_id="aws_plans", kinds=["broker_down", "log_dir_offline"]),
    )])

    with DAG("heal_kafka_prod", schedule=[incidents]) as dag:
        ...

The triggerer rebuilds the trigger from its arguments after a restart, a failover or an exception, and Airflow
does not de-duplicate events: everything the watch must remember is in the state at ``state_uri``, so a rebuilt
trigger neither fires an incident twice nor forgets how long a condition has lasted. Every call to Kafka or to
the storage runs in a thread (``asyncio.to_thread``): the triggerer's event loop never waits on it. A poll that
fails (the cluster or the storage unreachable) is retried after a pause that doubles up to
:data:`MAX_BACKOFF_S`, and the admin client is made again. Logs: one line per poll at DEBUG, one per change of
the state at INFO (seen, fired, cleared, over), one per failed poll at WARNING; never a secret (the connection's
config is redacted by the hook; incidents carry the cluster's label, not its bootstrap servers).

docs/self-healing-watch.md has the kinds, their dwell and recovery times and the costs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_kafka_reassign.core.healing.ledger import HealingLedger, ledger_folder
from airflow_kafka_reassign.core.healing.observation import conditions_of, observe
from airflow_kafka_reassign.core.healing.settings import DEFAULT_REFIRE_AFTER_S
from airflow_kafka_reassign.core.healing.watch import WatchLedger, WatchSettings, WatchStep
from airflow_kafka_reassign.plan_storage import DEFAULT_TIMEOUT_S, default_output_root, open_store, safe_name

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin

#: The Airflow Variables of the plan storage and its connection: the healing DAGs' (airflow_kafka_reassign.healing),
#: and the watch's when it is given no ``state_uri``.
PLAN_STORAGE_VARIABLE = "akr_plan_storage"
STORAGE_CONN_VARIABLE = "akr_storage_conn_id"
#: The longest pause between two polls after failures (seconds): a failing watch backs off to one poll per 10 minutes.
MAX_BACKOFF_S = 600.0


def backoff_s(failures: int, poll_interval_s: float, cap_s: float = MAX_BACKOFF_S) -> float:
    """The pause after ``failures`` failed polls in a row: the poll interval, doubled per failure after the first,
    never above ``cap_s`` (nor below the poll interval)."""
    if failures <= 0:
        return poll_interval_s
    return max(poll_interval_s, min(cap_s, poll_interval_s * 2 ** (failures - 1)))


class KafkaClusterWatchTrigger(BaseEventTrigger):
    """Watches a Kafka cluster and fires one event per incident (see the module docstring).

    :param kafka_conn_id: the ``kafka`` connection (librdkafka config dict in its extra).
    :param state_uri: where the watch state lives (a folder: a path, or ``s3://bucket/prefix``); the state is the
        object ``cluster-watch/<cluster>.json`` in it. One watch per cluster and ``state_uri``. ``None`` (the
        default): the plan storage the healing DAGs use, the Airflow Variables ``akr_plan_storage`` and
        ``akr_storage_conn_id`` read in the triggerer when the watch starts (:meth:`storage`); unset, the
        triggerer's ``$AKR_OUTPUT_DIR`` (one machine only).
    :param cluster: the cluster's label in incidents and in the state's name (default: ``kafka_conn_id``).
    :param kinds: the incident kinds watched (default: all of
        :data:`~airflow_kafka_reassign.core.healing.incident.INCIDENT_KINDS`).
    :param dwell_s: ``{kind: seconds}`` a condition must last before it fires, merged over
        :data:`~airflow_kafka_reassign.core.healing.watch.DEFAULT_DWELL_S` (``broker_down``: 600).
    :param recovery_s: ``{kind: seconds}`` a fired condition must stay clear before its return is a new incident,
        merged over :data:`~airflow_kafka_reassign.core.healing.watch.DEFAULT_RECOVERY_S`.
    :param poll_interval_s: seconds between polls.
    :param log_dir_full_ratio: a log dir whose volume is used at or above this share is full.
    :param imbalance_band: a broker further than this share of the mean (replicas, disk usage) is out of balance.
    :param kafka_timeout_s: bound on each request to the cluster.
    :param storage_conn_id: the Airflow connection of the storage of ``state_uri`` (S3: an ``aws`` connection);
        with ``state_uri=None``, the Variable ``akr_storage_conn_id`` unless given.
    :param storage_timeout_s: bound on each request to that storage.
    :param refire_after_s: an incident no healing run has decided on (the healing ledger under the same plan storage,
        ``healing/<cluster>``) is fired again, same id, this long after it fired, then after twice as long each time
        (up to an hour), while its condition holds (:data:`~airflow_kafka_reassign.core.healing.settings.DEFAULT_REFIRE_AFTER_S`).
    """

    def __init__(
        self, *, kafka_conn_id: str = "kafka_default", state_uri: str | None = None, cluster: str | None = None,
        kinds: list[str] | None = None, dwell_s: dict[str, float] | None = None,
        recovery_s: dict[str, float] | None = None, poll_interval_s: float = 30.0, log_dir_full_ratio: float = 0.85,
        imbalance_band: float = 0.2, kafka_timeout_s: float = 30.0, storage_conn_id: str | None = None,
        storage_timeout_s: float = DEFAULT_TIMEOUT_S, refire_after_s: float = DEFAULT_REFIRE_AFTER_S,
    ) -> None:
        super().__init__()
        if float(poll_interval_s) <= 0:
            raise ValueError(f"poll_interval_s is {poll_interval_s}: it must be more than 0 seconds")
        self.kafka_conn_id = kafka_conn_id
        self.state_uri = str(state_uri) if state_uri else None
        self.cluster = cluster
        self.kinds = list(kinds) if kinds is not None else None
        self.dwell_s = dict(dwell_s) if dwell_s is not None else None
        self.recovery_s = dict(recovery_s) if recovery_s is not None else None
        self.poll_interval_s = float(poll_interval_s)
        self.log_dir_full_ratio = float(log_dir_full_ratio)
        self.imbalance_band = float(imbalance_band)
        self.kafka_timeout_s = float(kafka_timeout_s)
        self.storage_conn_id = storage_conn_id
        self.storage_timeout_s = float(storage_timeout_s)
        self.refire_after_s = float(refire_after_s)
        # validated now: a wrong kind or threshold fails the DAG's import, naming it, not every rebuild in the triggerer
        self.settings = WatchSettings(
            cluster=cluster or kafka_conn_id, kinds=self.kinds, dwell_s=self.dwell_s, recovery_s=self.recovery_s,
            log_dir_full_ratio=self.log_dir_full_ratio, imbalance_band=self.imbalance_band,
            refire_after_s=self.refire_after_s)
        self._admin: ClusterAdmin | None = None
        self._ledger: WatchLedger | None = None
        self._healing: HealingLedger | None = None
        #: the clock and the pause of the loop (tests give their own: no real waiting)
        self._clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"kafka_conn_id": self.kafka_conn_id, "state_uri": self.state_uri, "cluster": self.cluster,
             "kinds": self.kinds, "dwell_s": self.dwell_s, "recovery_s": self.recovery_s,
             "poll_interval_s": self.poll_interval_s, "log_dir_full_ratio": self.log_dir_full_ratio,
             "imbalance_band": self.imbalance_band, "kafka_timeout_s": self.kafka_timeout_s,
             "storage_conn_id": self.storage_conn_id, "storage_timeout_s": self.storage_timeout_s,
             "refire_after_s": self.refire_after_s},
        )

    # -- one poll, in a thread -----------------------------------------------------------------

    def make_admin(self) -> ClusterAdmin:
        """The cluster's admin, from the connection (the hook the operators use)."""
        from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook

        return KafkaReassignHook(kafka_config_id=self.kafka_conn_id, timeout_s=self.kafka_timeout_s).get_admin()

    def storage(self) -> tuple[str, str | None]:
        """Where the watch state lives and the storage's connection: ``state_uri`` and ``storage_conn_id`` when
        given; else the healing DAGs' plan storage, the Airflow Variables ``akr_plan_storage`` and
        ``akr_storage_conn_id`` (read in the triggerer: the environment's ``AIRFLOW_VAR_*``, a secrets backend, or
        the metadata database), so that the watch, the healing ledger and the plans share one setting; unset, the
        triggerer's ``$AKR_OUTPUT_DIR`` (one machine only). Blocking: call it in a thread."""
        if self.state_uri:
            return self.state_uri, self.storage_conn_id
        from airflow.sdk import Variable

        base = (Variable.get(PLAN_STORAGE_VARIABLE, default=None) or "").strip()
        conn_id = self.storage_conn_id or (Variable.get(STORAGE_CONN_VARIABLE, default=None) or "").strip() or None
        if not base:
            self.log.warning("cluster watch: the Airflow Variable %s is not set: the watch state stays on this "
                             "triggerer's disk (%s), which another triggerer does not see; set it (and %s) to the "
                             "plan storage, e.g. s3://kafka-plans/airflow", PLAN_STORAGE_VARIABLE,
                             default_output_root(), STORAGE_CONN_VARIABLE)
            return str(default_output_root()), conn_id
        return base, conn_id

    def make_ledger(self) -> WatchLedger:
        uri, conn_id = self.storage()
        return WatchLedger(open_store(uri, conn_id=conn_id, timeout_s=self.storage_timeout_s), self.settings)

    def poll(self, now: datetime | None = None) -> WatchStep:
        """One poll (blocking: run it in a thread): observe, find the conditions, advance the state (firing again
        the incidents no healing run has decided on, as the healing ledger beside the state says)."""
        if self._admin is None:
            self._admin = self.make_admin()
        if self._ledger is None:
            self._ledger = self.make_ledger()
            self._healing = HealingLedger(self._ledger.store.child(ledger_folder(safe_name(self.settings.cluster))))
        seen = conditions_of(observe(self._admin, self.settings), self.settings)
        healing = self._healing
        return self._ledger.advance(seen, now=now or self._clock(),
                                    answered=healing.answered if healing is not None else None)

    def _drop_admin(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                admin.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                self.log.debug("closing the Kafka admin client failed", exc_info=True)

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        s = self.settings
        self.log.info("watching cluster %r (connection %r) for %s every %g s; state in %s", s.cluster,
                      self.kafka_conn_id, ", ".join(f"{k} (dwell {s.dwell(k):g} s)" for k in s.kinds),
                      self.poll_interval_s, self.state_uri or f"the plan storage (Variable {PLAN_STORAGE_VARIABLE})")
        failures = 0
        while True:
            try:
                step = await asyncio.to_thread(self.poll)
            except Exception as e:  # noqa: BLE001 - the watch never stops by itself: it backs off and tries again
                failures += 1
                pause = backoff_s(failures, self.poll_interval_s)
                self.log.warning("cluster watch %r: poll failed (%d in a row), next in %g s: %s: %s", s.cluster,
                                 failures, pause, type(e).__name__, e)
                await asyncio.to_thread(self._drop_admin)
                await self._sleep(pause)
                continue
            if failures:
                self.log.info("cluster watch %r: polling again after %d failed poll(s)", s.cluster, failures)
            failures = 0
            for change in step.changes:
                self.log.info("cluster watch %r: %s", s.cluster, change)
            self.log.debug("cluster watch %r: %d condition(s) tracked, %d fired now", s.cluster,
                           len(step.state.conditions), len(step.fire))
            for incident in step.fire:
                yield TriggerEvent(incident.to_payload())
            await self._sleep(self.poll_interval_s)

    async def cleanup(self) -> None:
        await asyncio.to_thread(self._drop_admin)
