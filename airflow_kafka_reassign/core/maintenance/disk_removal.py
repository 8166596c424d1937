"""A disk removal's first step, before its snapshot: check the request against the cluster, then cordon the dirs.

The lifecycle is: cordon the log dir -> plan the moves -> move -> verify. PlanReassignmentOperator (goal
``remove-disks``) calls :func:`cordon_for_removal` before it takes the snapshot it plans from:

1. read-only: every broker's log dirs (DescribeLogDirs), the brokers, and the partitions in the dirs to remove; the
   request is planned once from them (:func:`~airflow_kafka_reassign.core.planner.log_dirs.plan_log_dirs`), so a bad
   request (a broker or log dir the cluster does not have, a dir of another broker, replicas with nowhere to go) is
   refused by name before anything is sent;
2. the dirs are cordoned (``cordoned.log.dirs``, KIP-1066, Kafka 4.3+), each broker's previous value backed up on
   the plan's run state first (:func:`~airflow_kafka_reassign.core.maintenance.cordon.apply_cordons`): from then on the
   controller places no new replica there, so the snapshot taken next holds every replica the plan must move and
   the dir ends empty. The cordon stays after the moves (the dir is being removed); a cancel or rollback of the
   plan restores it from the backup.

Why at planning and not at execution: the plan must see everything the dir will hold, and approval may take hours;
cordoned after the snapshot, a topic created meanwhile could land in the dir unplanned. A cluster without cordons
(Kafka before 4.3, or metadata.version below 4.3-IV0) is warned about and planned all the same.

Pure: the cluster is read and changed through the :class:`~airflow_kafka_reassign.core.vocabulary.ports.ClusterAdmin` port.
"""

from __future__ import annotations

import logging

from airflow_kafka_reassign.core.maintenance.cordon import apply_cordons, disk_removal_cordons
from airflow_kafka_reassign.core.planner.goals import PlanRequest
from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable, check_dir_removals, plan_log_dirs
from airflow_kafka_reassign.core.records.journal import StateLocation
from airflow_kafka_reassign.core.vocabulary.ports import JBOD_METADATA_LEVEL, ClusterAdmin
from airflow_kafka_reassign.exceptions import UnsupportedBrokerError

_log = logging.getLogger(__name__)


def cordon_for_removal(admin: ClusterAdmin, request: PlanRequest, *, state_dir: StateLocation, cordon: bool = True,
                       log: logging.Logger | None = None) -> dict[int, str | None]:
    """goal ``remove-disks``: refuse a bad request before anything is sent, then cordon its log dirs (backed up in
    ``state_dir``, the plan's run state); returns what was set (empty: another goal, no cordons on this cluster, or
    ``cordon=False``: the request is checked all the same, nothing is cordoned and no backup is written)."""
    log = log or _log
    if request.goal != "remove-disks":
        return {}
    caps = admin.capabilities()
    if not caps.jbod:
        raise UnsupportedBrokerError(
            "the cluster cannot move replicas between log dirs (AlterReplicaLogDirs: ZooKeeper mode, or KRaft with log "
            f"dirs assigned in the metadata, metadata.version 3.7-IV2, level {JBOD_METADATA_LEVEL}; this cluster runs "
            f"{caps.line_name()}, level {caps.metadata_version}). Nothing was sent")
    removals = request.dir_removals()
    table = LogDirTable.of(admin.log_dirs(None))
    brokers = admin.snapshot(topics=()).broker_ids
    check_dir_removals(table, brokers, removals)
    topics = sorted({t for b, path in removals for t, _, _ in getattr(table.dir(b, path), "replicas", ())})
    plan_log_dirs(admin.snapshot(topics=topics), table, request)  # nowhere to go: refused here, nothing sent
    if not cordon:
        log.warning("log dir(s) %s are not cordoned (cordon=False): a topic created or grown meanwhile may get "
                    "replicas there that the plan does not move", list(request.log_dirs))
        return {}
    if not caps.cordons:
        log.warning("the cluster has no cordons (cordoned.log.dirs: Kafka 4.3+ in KRaft with metadata.version 4.3-IV0; "
                    "this cluster runs %s, level %s): log dir(s) %s are not cordoned, and a topic created or grown "
                    "meanwhile may get replicas there, which the run's rounds move off", caps.line_name(),
                    caps.metadata_version, list(request.log_dirs))
        return {}
    return apply_cordons(admin, disk_removal_cordons(removals), state_dir=state_dir, log=log)
