"""Self-healing: a log dir above its usage threshold is emptied (remove-disks); an offline one raises an alert.

The watch fires ``log_dir_full`` when a log dir's volume has been used above ``log_dir_full_ratio`` (DescribeLogDirs'
total and usable bytes, KIP-827) for its dwell time, and ``log_dir_offline`` when a broker has reported a dir offline
for its dwell time. ``decide`` checks each against the cluster (below the threshold now, online again: stale); a full
dir is emptied by a ``remove-disks`` plan (its replicas to the broker's other dirs, else to other brokers; the dir
cordoned first, Kafka 4.3+), after a person's approval by default (``on_timeout="approve"``: still full after 30
minutes, it goes on). An offline dir is recorded as an alert: its replicas cannot be copied from it (replace the disk,
or drain the broker with kafka_decommission_brokers).
"""

from __future__ import annotations

from airflow_kafka_reassign.core.healing.policy import HealingPolicy, KindPolicy
from airflow_kafka_reassign.healing import healing_dag, incident_asset

KAFKA_CONN_ID = "kafka_default"

# [START heal_log_dir]
POLICY = HealingPolicy(kinds={
    "log_dir_full": KindPolicy(mode="approve", approval_timeout_s=1800, on_timeout="approve"),
    "log_dir_offline": KindPolicy(mode="alert"),
})
LOG_DIRS = incident_asset(["log_dir_full", "log_dir_offline"], kafka_conn_id=KAFKA_CONN_ID, log_dir_full_ratio=0.85)

dag = healing_dag("kafka_heal_log_dir", action="remove_disks", kinds=["log_dir_full", "log_dir_offline"],
                  assets=[LOG_DIRS], policy=POLICY, kafka_conn_id=KAFKA_CONN_ID, doc_md=__doc__)
# [END heal_log_dir]
