"""Self-healing: a new (or returned) broker that holds no replica gets its share: the scale-out rebalance.

The watch fires ``empty_broker`` when a registered, unfenced, uncordoned broker has held no replica for its dwell
time: a scale-out, or a broker that healing drained while it was down and that came back. ``decide`` checks it still
holds nothing (a manual scale-out may have moved replicas there already: stale) and that nobody cordoned it (a broker
parked on purpose is never filled); ``plan`` is the ``add-brokers`` plan of kafka_scale_out (the fewest moves that
give it its share, per topic, rack-aware), executed under a throttle.
"""

from __future__ import annotations

from airflow_kafka_reassign.core.healing.policy import HealingPolicy, KindPolicy
from airflow_kafka_reassign.healing import healing_dag, incident_asset

KAFKA_CONN_ID = "kafka_default"

# [START heal_empty_broker]
POLICY = HealingPolicy(kinds={"empty_broker": KindPolicy(mode="act")})
EMPTY_BROKER = incident_asset(["empty_broker"], kafka_conn_id=KAFKA_CONN_ID)

dag = healing_dag("kafka_heal_empty_broker", action="scale_out", kinds=["empty_broker"], assets=[EMPTY_BROKER],
                  policy=POLICY, kafka_conn_id=KAFKA_CONN_ID, doc_md=__doc__)
# [END heal_empty_broker]
