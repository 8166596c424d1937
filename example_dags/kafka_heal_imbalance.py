"""Self-healing: an imbalance beyond the band is rebalanced, only inside the maintenance window.

The watch fires ``imbalance`` when some broker's replica count (or disk usage) has been further than the band from
the mean for its dwell time (an hour by default). ``decide`` re-checks it with the same rule, then waits for the
window (``Window(cron, duration_s)``, UTC) when it opens within ``max_wait_s``, else records a ``window`` outcome (the
weekly kafka_rebalance_maintenance_window takes it then). Inside the window a person approves the plan; an approval
left unanswered is a rejection (``on_timeout="reject"``): a rebalance is never urgent.
"""

from __future__ import annotations

from airflow_kafka_reassign.core.healing.policy import HealingPolicy, KindPolicy, Window
from airflow_kafka_reassign.healing import healing_dag, incident_asset

KAFKA_CONN_ID = "kafka_default"

# [START heal_imbalance]
POLICY = HealingPolicy(
    window=Window(cron="0 2 * * 6", duration_s=4 * 3600),  # Saturdays 02:00-06:00 UTC
    kinds={"imbalance": KindPolicy(mode="approve", approval_timeout_s=3600, on_timeout="reject")},
    max_wait_s=24 * 3600,
    imbalance_band=0.2,
)
IMBALANCE = incident_asset(["imbalance"], kafka_conn_id=KAFKA_CONN_ID, imbalance_band=0.2)

dag = healing_dag("kafka_heal_imbalance", action="rebalance", kinds=["imbalance"], assets=[IMBALANCE],
                  policy=POLICY, kafka_conn_id=KAFKA_CONN_ID, doc_md=__doc__)
# [END heal_imbalance]
