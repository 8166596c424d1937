"""Self-healing: a broker down for longer than its dwell time is drained, by itself.

The cluster watch (``KafkaClusterWatchTrigger`` in an ``AssetWatcher``, run by the triggerer) fires one
``broker_down`` incident when a broker has been fenced (the controller's view, KIP-1073) for its dwell time (10
minutes by default: longer than a rolling restart). This DAG is scheduled on that asset:

1. ``decide`` checks the incident against the live cluster and the guards (docs/self-healing.md): a broker already
   back is a no-op that says why; an incident already handled does nothing twice; more brokers down than the breaker
   allows is an outage: an alert outcome, no move; a manual run's reassignments or cordons make it wait;
2. ``plan`` plans the drain (``remove-brokers``: every replica of the broker to the others, rack-aware). A broker
   that is down cannot be cordoned (its config is written on the broker itself): the decision says so, and the
   controller places no new replica on a fenced broker anyway;
3. ``budget`` charges the plan's bytes; ``approve`` is asked only where the policy says so;
4. ``execute`` and ``wait`` move the replicas under a throttle; ``verify_drained`` reads the cluster again;
5. ``record`` writes how it ended on the healing ledger. The broker is never unregistered: it may come back, and
   then its ``empty_broker`` incident gives it its share (kafka_heal_empty_broker).

Replay an incident by hand (a lost event, a test)::

    airflow dags trigger kafka_heal_broker_down --conf '{"incidents": [<payload>]}'
"""

from __future__ import annotations

from airflow_kafka_reassign.core.healing.policy import Breaker, Budget, HealingPolicy
from airflow_kafka_reassign.healing import healing_dag, incident_asset

KAFKA_CONN_ID = "kafka_default"

# [START heal_broker_down]
POLICY = HealingPolicy(
    breaker=Breaker(max_brokers=1, max_share=0.2),  # two brokers down at once: alert, move nothing
    budget=Budget(runs_per_incident=2, runs_per_day=6, bytes_per_incident=2 * 1024**4),
)
# the watch state goes where the plans and the healing ledger go (the Variable akr_plan_storage); the deployment may
# set the dwell and recovery times for its own rolling restarts: AKR_WATCH_DWELL_S='{"broker_down": 1800}'
BROKER_DOWN = incident_asset(["broker_down"], kafka_conn_id=KAFKA_CONN_ID, dwell_s={"broker_down": 600})

dag = healing_dag("kafka_heal_broker_down", action="drain", kinds=["broker_down"], assets=[BROKER_DOWN],
                  policy=POLICY, kafka_conn_id=KAFKA_CONN_ID, doc_md=__doc__)
# [END heal_broker_down]
