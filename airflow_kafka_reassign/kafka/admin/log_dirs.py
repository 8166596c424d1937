"""Log dirs: DescribeLogDirs (each replica's size, each broker's log dirs and disk space, KIP-827) and
AlterReplicaLogDirs (KIP-113, JBOD on KRaft, KIP-858), through kafka-python: one request per live broker.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from kafka import errors as kp_errors
from kafka.protocol.admin import DescribeLogDirsRequest

from airflow_kafka_reassign.core.vocabulary.models import TopicPartition
from airflow_kafka_reassign.core.vocabulary.ports import (
    JBOD_METADATA_LEVEL,
    DirReplica,
    DiskSpace,
    LogDir,
    LogDirs,
    ReplicaDirResult,
    TopicPartitionReplica,
)
from airflow_kafka_reassign.kafka.acl import Refused
from airflow_kafka_reassign.kafka.admin.cluster import ClusterMixin

log = logging.getLogger(__name__)


def log_dirs_of(responses: list[dict[str, Any]], wanted: Mapping[str, set[int]] | None) -> dict[int, tuple[LogDir, ...]]:
    """Each broker's log dirs from kafka-python's DescribeLogDirs results, with the replicas of ``wanted``
    (``{topic: {partition}}``; ``None``: all) each holds, future replicas included."""
    out: dict[int, tuple[LogDir, ...]] = {}
    for broker in responses:
        dirs = []
        for d in broker["log_dirs"]:
            code = d.get("error_code") or 0
            replicas = tuple(
                DirReplica(topic=t["name"], partition=p["partition_index"], size=int(p["partition_size"]),
                           offset_lag=int(p.get("offset_lag") or 0), future=bool(p.get("is_future_key")))
                for t in d.get("topics", ()) for p in t.get("partitions", ())
                if wanted is None or p["partition_index"] in wanted.get(t["name"], ())
            )
            total, usable = d.get("total_bytes", -1), d.get("usable_bytes", -1)
            dirs.append(LogDir(
                path=d["log_dir"], offline=bool(code), error=kp_errors.for_code(code).message if code else None,
                total_bytes=int(total) if total is not None and total >= 0 else None,
                usable_bytes=int(usable) if usable is not None and usable >= 0 else None,
                cordoned=d.get("is_cordoned"), replicas=replicas,
            ))
        out[broker["broker"]] = tuple(dirs)
    return out



class LogDirsMixin(ClusterMixin):
    """The port's log-dir calls: replica sizes, disk space, log dirs, intra-broker moves."""

    def _replica_sizes(self, live: Collection[int]) -> dict[TopicPartition, dict[int, int]]:
        """Every replica's size on the live brokers (DescribeLogDirs to each; none to a broker that is down)."""
        with self._authorized(Refused.on_cluster("DESCRIBE", "DescribeLogDirs")):
            return _sizes_from_log_dirs(self._kafka_python().describe_log_dirs(brokers=sorted(live)))

    def replica_sizes(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, dict[int, int]]:
        """Bytes on disk of each replica of ``partitions``, by broker id.

        One DescribeLogDirs request per live broker, naming exactly these partitions (so no
        data about other topics). A broker the cluster does not list as alive (DescribeCluster)
        is skipped, with one line naming it; one that fails to answer is logged and left out,
        so a caller can keep reporting while a broker is down.
        """
        return self._log_dirs(partitions)[0] if partitions else {}

    def log_dirs(self, partitions: Collection[TopicPartition] | None) -> LogDirs:
        """:meth:`replica_sizes` and each answering broker's disk space and log dirs, from the same requests
        (``partitions=None``: every partition)."""
        if partitions is not None and not partitions:
            return self._dirs_only()
        sizes, space, unanswered, responses = self._log_dirs(partitions, with_space=True)
        asked = None if partitions is None else {t: set(ps) for t, ps in _by_topic(partitions).items()}
        return LogDirs(sizes=sizes, space=space, unanswered=tuple(unanswered), dirs=log_dirs_of(responses, asked))

    def _log_dirs(self, partitions: Collection[TopicPartition] | None, with_space: bool = False,
                  ) -> tuple[dict[TopicPartition, dict[int, int]], dict[int, DiskSpace], list[int], list[dict[str, Any]]]:
        """One DescribeLogDirs per live broker naming ``partitions`` (``None``: all): their sizes, each broker's
        space, the live brokers that did not answer, and the answers."""
        wanted = _by_topic(partitions) if partitions is not None else None
        if wanted is not None and not wanted:  # never an empty request: kafka-python would send "every topic"
            return {}, {}, [], []
        kp = self._kafka_python()
        request = None if wanted is None else {t: sorted(set(ps)) for t, ps in sorted(wanted.items())}
        responses: list[dict[str, Any]] = []
        live = {b.id for b in self.describe_cluster_brokers()[1]}
        known = {b.node_id for b in kp._manager.cluster.brokers()}
        skipped = sorted(known - live)
        if skipped and set(skipped) != self._sizes_skipped:
            log.warning("DescribeLogDirs skips broker(s) %s: the cluster does not list them as alive; their "
                        "replica sizes are unknown until they are back", skipped)
        self._sizes_skipped = set(skipped)
        unanswered = sorted(live - known)  # alive for the controller, unknown to this client yet
        for node in sorted(known & live):
            try:
                if request is None:  # Topics null: every partition the broker holds, in one request
                    responses.extend(kp._manager.run(kp._async_describe_log_dirs, None, [node]))
                else:
                    responses.extend(kp.describe_log_dirs(topic_partitions=request, brokers=[node]))
            except (kp_errors.KafkaError, OSError) as e:
                unanswered.append(node)
                # warned once per broker and client: a broker that is down would repeat it on every poll
                (log.debug if node in self._sizes_warned else log.warning)(
                    "DescribeLogDirs to broker %s failed (%s: %s); its replica sizes are unknown",
                    node, type(e).__name__, e)
                self._sizes_warned.add(node)
        sizes = _sizes_from_log_dirs(responses)
        space = self._space_from_log_dirs(responses) if with_space else {}
        if request is None:
            return sizes, space, sorted(unanswered), responses
        asked = {t: set(ps) for t, ps in request.items()}  # sets: a million partitions are filtered in linear time
        return ({tp: s for tp, s in sizes.items() if tp.partition in asked.get(tp.topic, ())}, space,
                sorted(unanswered), responses)

    def _dirs_only(self) -> LogDirs:
        """Each live broker's log dirs and their space, no partition: DescribeLogDirs with ``Topics=[]`` (an empty
        array, not null, which would ask for every partition), sent to every live broker at once and awaited
        together. A few hundred bytes per broker whatever it holds: the cluster watch sends it at each poll."""
        kp = self._kafka_python()
        manager = kp._manager
        live = {b.id for b in self.describe_cluster_brokers()[1]}
        known = {b.node_id for b in manager.cluster.brokers()}
        nodes = sorted(known & live)
        timeout_ms = int(self._timeout_s * 1000)

        async def ask() -> tuple[list[dict[str, Any]], dict[int, str]]:
            futures = {}
            failed: dict[int, str] = {}
            for node in nodes:
                try:
                    futures[node] = manager.send(DescribeLogDirsRequest(topics=[]), node_id=node,
                                                 request_timeout_ms=timeout_ms)
                except kp_errors.KafkaError as e:
                    failed[node] = f"{type(e).__name__}: {e}"
            answers = []
            for node, future in futures.items():
                try:
                    response = await manager.wait_for(future, timeout_ms)
                except kp_errors.KafkaError as e:
                    failed[node] = f"{type(e).__name__}: {e}"
                    continue
                answers.append({"broker": node, "log_dirs": [r.to_dict() for r in response.results]})
            return answers, failed

        with self._authorized(Refused.on_cluster("DESCRIBE", "DescribeLogDirs")):
            responses, failed = manager.run(ask)
        for node, why in failed.items():
            (log.debug if node in self._sizes_warned else log.warning)(
                "DescribeLogDirs to broker %s failed (%s); its log dirs are unknown", node, why)
            self._sizes_warned.add(node)
        space = self._space_from_log_dirs(responses)
        return LogDirs(sizes={}, space=space, unanswered=tuple(sorted((live - known) | set(failed))),
                       dirs=log_dirs_of(responses, {}))

    def _space_from_log_dirs(self, responses: Sequence[Mapping[str, Any]]) -> dict[int, DiskSpace]:
        """Each broker's disk space (KIP-827, DescribeLogDirs v4+): the log dirs that answer without error, log
        dirs of one volume (the same total and usable bytes) counted once. A broker that reports none (-1:
        older than Kafka 3.3) is left out, and said once per broker."""
        out: dict[int, DiskSpace] = {}
        for broker in responses:
            dirs = [(int(d.get("total_bytes", -1)), int(d.get("usable_bytes", -1)))
                    for d in broker["log_dirs"] if not d.get("error_code")]
            if dirs and all(t >= 0 and u >= 0 for t, u in dirs):
                out[broker["broker"]] = DiskSpace.of_dirs(dirs)
            elif broker["broker"] not in self._no_space_warned:
                self._no_space_warned.add(broker["broker"])
                log.warning("broker %s reports no free disk space in DescribeLogDirs (v4, Kafka 3.3+): the disk guard "
                            "cannot check the moves onto it", broker["broker"])
        return out

    # -- log dirs ---------------------------------------------------------------------------

    def alter_replica_log_dirs(self, targets: Mapping[TopicPartitionReplica, str]) -> tuple[ReplicaDirResult, ...]:
        """AlterReplicaLogDirs (KIP-113): each replica to its new log dir; one request per broker."""

        if not targets:
            return ()
        self._require(self.capabilities().jbod, "AlterReplicaLogDirs between log dirs (JBOD)",
                      f"AlterReplicaLogDirs and metadata.version 3.7-IV2 (level {JBOD_METADATA_LEVEL}) on KRaft")
        for replica, path in targets.items():
            if not path or not path.startswith("/"):
                raise ValueError(f"replica {TopicPartitionReplica(*replica)}: the target log dir must be an absolute "
                                 f"path of the broker's log.dirs, not {path!r}")
        try:
            with self._authorized(Refused.on_cluster("ALTER", "AlterReplicaLogDirs")):
                raw = self._kafka_python().alter_replica_log_dirs(
                    {(r[0], r[1], r[2]): path for r, path in targets.items()})
        except kp_errors.KafkaTimeoutError as e:
            raise self._unreachable(e) from e
        out = []
        for tpr, err in raw.items():
            ok = err is kp_errors.NoError
            out.append(ReplicaDirResult(topic=tpr.topic, partition=tpr.partition, broker=tpr.broker_id,
                                        error=None if ok else err.description, error_code=None if ok else err.message))
        return tuple(sorted(out, key=lambda r: (r.broker, r.topic, r.partition)))


def _by_topic(partitions: Collection[TopicPartition]) -> dict[str, list[int]]:
    wanted: dict[str, list[int]] = defaultdict(list)
    for t, p in partitions:
        wanted[t].append(p)
    return wanted


def _sizes_from_log_dirs(responses: Sequence[Mapping[str, Any]]) -> dict[TopicPartition, dict[int, int]]:
    """``{partition: {broker: bytes}}`` from kafka-python's DescribeLogDirs results (future
    replicas of intra-broker moves and log dirs that report an error are skipped)."""
    sizes: dict[TopicPartition, dict[int, int]] = defaultdict(dict)
    for broker in responses:
        for log_dir in broker["log_dirs"]:
            if log_dir.get("error_code"):
                continue
            for topic in log_dir.get("topics", ()):
                for part in topic.get("partitions", ()):
                    if part.get("is_future_key"):
                        continue
                    tp = TopicPartition(topic["name"], part["partition_index"])
                    sizes[tp][broker["broker"]] = int(part["partition_size"])
    return dict(sizes)
