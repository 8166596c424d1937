"""Helpers the integration tests share (a module, not a test file: test modules never import each other)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.workload import create_topic, produce
from airflow_kafka_reassign.plan_storage import upload_dir
from airflow_kafka_reassign.sandbox import wait_until

#: The session sandbox's brokers (tests/integration/conftest.py).
BROKERS = [1, 2, 3, 4, 5]

def make_topic(config: dict[str, Any], topic: str, assignment: list[list[int]], megabytes: float = 0.0,
               configs: dict[str, str] | None = None) -> None:
    """Create ``topic`` with this replica assignment (and topic ``configs``), wait until every partition has a
    leader, then write about ``megabytes`` of records into each partition."""
    create_topic(config, topic, assignment, configs=configs)
    with KafkaClusterAdmin(config) as admin:
        def led() -> bool:
            try:  # the broker that answers may not know the new topic yet (metadata propagation)
                parts = admin.snapshot(topics=[topic]).partitions
            except ConfigurationError:
                return False
            return len(parts) == len(assignment) and all(p.leader is not None for p in parts)

        wait_until(led, f"the partitions of {topic} to have leaders", timeout=60)
    if megabytes:
        for i in range(len(assignment)):
            produce(config, topic, partition=i, megabytes=megabytes)


def node_status(sandbox: Any, node_id: int) -> dict[str, Any]:
    """Node ``node_id``'s row of ``sandbox.status()``: its ``pid``, ``port``, ``alive``."""
    return next(n for n in sandbox.status()["nodes"] if n["id"] == node_id)


def kill_broker(sandbox: Any, node_id: int) -> None:
    """SIGKILL of node ``node_id``'s JVM (no controlled shutdown, nothing flushed), waited until its process is gone."""
    os.kill(node_status(sandbox, node_id)["pid"], signal.SIGKILL)
    wait_until(lambda: not sandbox.is_alive(node_id), f"broker {node_id}'s process to be gone", timeout=30)


def write_plan_dir(path: Path, plan: ReassignmentPlan) -> Path:
    """A plan directory as PlanReassignment writes it (plan, rollback, metrics)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "plan.json").write_text(plan.model_dump_json())
    (path / "rollback.json").write_text(plan.rollback().model_dump_json())
    (path / "metrics.json").write_text(json.dumps({"format_version": 1}))
    return path


def throttles(admin: KafkaClusterAdmin, topics: list[str]) -> dict:
    """Every throttle config of every broker and of ``topics``, as Kafka reports them."""
    return admin.describe_throttles(BROKERS, topics).model_dump()


def replicas(admin: KafkaClusterAdmin, topic: str) -> list[tuple[int, ...]]:
    """The replicas of every partition of ``topic``, in partition order."""
    return [p.replicas for p in admin.snapshot(topics=[topic]).partitions]


class TI:
    """A task instance stand-in for operators run in-process: keeps what they push to XCom (as JSON would)."""

    def __init__(self) -> None:
        self.pushed: dict = {}

    def xcom_push(self, key, value):
        self.pushed[key] = json.loads(json.dumps(value))


def replicas_of(config, topic: str) -> dict[int, tuple[int, ...]]:
    md = AdminClient(dict(config)).list_topics(topic, timeout=15)
    t = md.topics[topic]
    return {p: tuple(t.partitions[p].replicas) for p in sorted(t.partitions)} if t.error is None else {}


def make_coordinator_topics_exist(config) -> None:
    """A consumer group commit creates __consumer_offsets, a transaction __transaction_state."""
    topic = f"t-coordinators-{uuid.uuid4().hex[:8]}"
    create_topic(config, topic, [[1, 2]])
    wait_until(lambda: replicas_of(config, topic), what=f"topic {topic}")
    producer = Producer({**config, "transactional.id": f"txn-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"v", key=b"k")
    producer.commit_transaction(30)
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    msg = None
    while msg is None and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
    assert msg is not None and msg.error() is None, "the test consumer read nothing"
    consumer.commit(msg, asynchronous=False)
    consumer.close()
    delete_topics(config, [topic])
    for name in ("__consumer_offsets", "__transaction_state"):
        wait_until(lambda name=name: replicas_of(config, name), what=name)


def own_topic_ids(config, topics: list[str]) -> dict[str, str]:
    """Each topic's id (KIP-516) as a client of the test's own reads it (confluent-kafka's DescribeTopics, its two
    64-bit halves), printed here as Kafka prints it (URL-safe base64 of the 16 bytes, no padding), sharing no code
    with the adapter's reading or rendering."""
    import base64

    from confluent_kafka import TopicCollection

    client = AdminClient(dict(config))
    out = {}
    for name, future in client.describe_topics(TopicCollection(list(topics)), request_timeout=30).items():
        tid = future.result(60).topic_id
        raw = ((tid.get_most_significant_bits() % 2**64) << 64 | tid.get_least_significant_bits() % 2**64)
        out[name] = base64.urlsafe_b64encode(raw.to_bytes(16, "big")).rstrip(b"=").decode()
    return dict(sorted(out.items()))


def delete_topics(config, names: list[str]) -> None:
    if names:
        admin = AdminClient(dict(config))  # keep the handle alive until the futures are done
        for fut in admin.delete_topics(names, operation_timeout=30).values():
            fut.result(60)


def put_plan(object_store: Any, prefix: str, plan: ReassignmentPlan, tmp: Path, conn_id: str = "akr_plans",
             extra: dict[str, str] | None = None) -> str:
    """``plan`` (and its rollback) uploaded as a plan folder to the sandbox store under ``prefix``; its URI.
    ``extra``: more files of the folder (name -> text), for example a goal's ``balance.json``."""
    local = tmp / "plan-src"
    local.mkdir()
    for name, text in (extra or {}).items():
        (local / name).write_text(text)
    (local / "plan.json").write_text(plan.model_dump_json())
    (local / "rollback.json").write_text(plan.rollback().model_dump_json())
    (local / "metrics.json").write_text(json.dumps({"format_version": 1}))
    uri = f"s3://{object_store.bucket}/{prefix}/plan"
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = object_store.airflow_connection()
    try:
        upload_dir(local, uri, conn_id=conn_id)
    finally:
        os.environ.pop(f"AIRFLOW_CONN_{conn_id.upper()}", None)
    shutil.rmtree(local)
    return uri


class Traffic:
    """Records written while a test runs, and the read-back check that none was lost.

    A background thread sends numbered records (``seq:<n>``) to every partition of ``topic`` through an
    acks=all, idempotent producer at about ``per_second`` records per partition; :meth:`check` (after the
    ``with`` block) reads each partition from the beginning up to its end and asserts that every record
    Kafka acknowledged is there, and that some were acknowledged at all. Use as::

        with Traffic(config, topic, partitions=2) as traffic:
            ...  # move, cancel, roll back
        traffic.check()
    """

    def __init__(self, config: dict[str, Any], topic: str, *, partitions: int, per_second: float = 20,
                 pad_bytes: int = 0) -> None:
        self._config = dict(config)
        self.topic = topic
        self.partitions = partitions
        self._interval = 1.0 / per_second
        self._pad = b":" + b"x" * pad_bytes if pad_bytes else b""  # a hot partition: bytes per record
        self.acked: set[tuple[int, int]] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name=f"traffic-{topic}", daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # never started (the test failed before it): nothing to wait for
            self._thread.join(120)

    def stop(self) -> None:
        """Stop sending (returns at once; leaving the ``with`` block still waits for the last acknowledgements)."""
        self._stop.set()

    def _produce(self) -> None:
        producer = Producer({**self._config, "acks": "all", "enable.idempotence": True, "linger.ms": 5})

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked.add((msg.partition(), int(msg.value().split(b":")[1])))

        seq = 0
        due = time.monotonic()
        while not self._stop.is_set():
            for p in range(self.partitions):
                producer.produce(self.topic, f"seq:{seq}".encode() + self._pad, partition=p, on_delivery=delivered)
            seq += 1
            # paced by the clock: poll() returns as soon as it has served a delivery report, so polling once per
            # round sent a round per acknowledgement (thousands of records a second whatever per_second said: the
            # brokers took more than a core and the producer half of one on 2026-12-03)
            due += self._interval
            while (wait := due - time.monotonic()) > 0 and not self._stop.is_set():
                producer.poll(wait)
            if wait < -1.0:  # fell a second behind (a stalled broker): catch up from now, not in a burst
                due = time.monotonic()
        left = producer.flush(60)
        if left:
            self.errors.append(f"{left} record(s) not acknowledged within 60 s of the end")

    def check(self) -> None:
        from confluent_kafka import TopicPartition as CKTopicPartition

        assert not self._thread.is_alive(), "check() after the with block"
        assert self.acked, "the producer had no record acknowledged"
        assert not self.errors, f"the producer failed {len(self.errors)} send(s): {self.errors[:3]}"
        consumer = Consumer({**self._config, "group.id": f"readback-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False})
        seen: set[tuple[int, int]] = set()
        try:
            ends = {p: consumer.get_watermark_offsets(CKTopicPartition(self.topic, p), timeout=30)[1]
                    for p in range(self.partitions)}
            consumer.assign([CKTopicPartition(self.topic, p, 0) for p in range(self.partitions)])
            done = {p for p, end in ends.items() if end == 0}
            deadline = time.monotonic() + 120
            while len(done) < self.partitions and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None or msg.error() is not None:
                    continue
                if msg.value().startswith(b"seq:"):
                    seen.add((msg.partition(), int(msg.value().split(b":")[1])))
                if msg.offset() >= ends[msg.partition()] - 1:
                    done.add(msg.partition())
        finally:
            consumer.close()
        lost = self.acked - seen
        assert not lost, f"{len(lost)} acknowledged record(s) missing on read-back, e.g. {sorted(lost)[:5]}"


def skip_unless_kafka(version: str, least: tuple[int, ...], why: str) -> None:
    """Skip a test that needs Kafka ``least`` or newer on a cluster running ``version``, but only on a pinned older line
    (a compat cell: ``AKR_KAFKA_VERSION`` or ``AKR_MAINTENANCE_KAFKA_VERSION``). On the default Kafka, the newest the
    sandbox resolves and the one CI runs, it fails instead: a feature test that skips there proves nothing, and the
    skip would hide it."""
    import pytest

    from airflow_kafka_reassign.sandbox.maven import parse_version

    if (parse_version(version) or ()) >= least:
        return
    wanted = ".".join(map(str, least))
    pinned = os.environ.get("AKR_KAFKA_VERSION") or os.environ.get("AKR_MAINTENANCE_KAFKA_VERSION")
    if pinned:
        pytest.skip(f"{why}: needs Kafka {wanted}+, the cluster runs {version} (pinned by the environment)")
    pytest.fail(f"{why}: needs Kafka {wanted}+, but the sandbox's default Kafka resolved to {version}: the test would "
                "prove nothing on CI. The sandbox resolves the newest Apache Kafka on Maven Central (sandbox/maven.py): "
                "check that it is reachable, or pin a version with AKR_KAFKA_VERSION", pytrace=False)


@contextlib.contextmanager
def cordon_capable_cluster(directory: Path, *, brokers: int = 4, log_dirs: int = 1) -> Iterator[Any]:
    """A KRaft cluster of a test's own, 4 nodes by default (nodes 1-3 combined broker+controller voters, 4 a broker
    only, no racks), Kafka 4.3+ (cordons): the sandbox's default version or ``AKR_MAINTENANCE_KAFKA_VERSION``; the test is
    skipped on an older line. Stopped at the end."""

    from airflow_kafka_reassign.sandbox import Sandbox

    sandbox = Sandbox(directory)
    sandbox.up(brokers=brokers, racks=0, log_dirs=log_dirs,
               kafka_version=os.environ.get("AKR_MAINTENANCE_KAFKA_VERSION") or None,
               timeout=float(os.environ.get("AKR_SANDBOX_TIMEOUT", "180")))
    try:
        skip_unless_kafka(sandbox.kafka_version, (4, 3), "cordons (KIP-1066)")
        yield sandbox
    finally:
        sandbox.down()


def dynamic_broker_configs(config: dict[str, Any], brokers: list[int] | None = None) -> dict[int, dict[str, Any]]:
    """Every dynamic config of each broker (``cordoned.log.dirs``, throttles, anything set per broker or cluster-wide,
    as each broker reports it; sensitive values as ``None``): a config dump to compare before and after."""
    from confluent_kafka.admin import ConfigResource, ConfigSource

    dynamic = {ConfigSource.DYNAMIC_BROKER_CONFIG.value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value}
    client = AdminClient(dict(config))
    out: dict[int, dict[str, Any]] = {}
    for b in brokers if brokers is not None else BROKERS:  # one broker per request (each answers for itself)
        res = ConfigResource(ConfigResource.Type.BROKER, str(b))
        entries = client.describe_configs([res], request_timeout=30)[res].result(60)
        out[b] = {name: e.value for name, e in sorted(entries.items()) if getattr(e.source, "value", e.source) in dynamic}
    return out


def plan_job_in_process(operator: Any, snapshot: str, plan: str, request_file: str, **_: object) -> None:
    """In place of ``PlanReassignmentOperator.spark_submit``: the same planner in this process (the staged path the
    Spark job runs; a goal on log dirs: the job's own driver-side planner), reading and writing what the job's driver
    would. An ``output_uri`` on object storage works too
    (the snapshot and request read from there, the plan written there, as spark/job_storage.py does)."""
    from airflow_kafka_reassign.core.planner import PlanRequest
    from airflow_kafka_reassign.core.planner.goals import LOG_DIR_GOALS
    from airflow_kafka_reassign.core.planner.staged import plan_staged
    from airflow_kafka_reassign.core.records.plan_io import write_plan_dir
    from airflow_kafka_reassign.core.records.snapshot_io import read_snapshot
    from airflow_kafka_reassign.plan_storage import fetch_dir, is_local, open_store
    from airflow_kafka_reassign.spark.plan_job import plan_log_dirs_on_driver

    print(f"PLAN-IN-PROCESS task {operator.task_id}: the plan job's planner run in the task's process, no spark-submit",
          flush=True)
    if is_local(snapshot):
        request = PlanRequest.model_validate_json(Path(request_file).read_text())
        if request.goal in LOG_DIR_GOALS:  # the job plans these on its driver, from the log dirs beside the snapshot
            plan_log_dirs_on_driver(snapshot, plan, request, snapshot)
            return
        write_plan_dir(plan_staged(read_snapshot(Path(snapshot)), request), Path(plan), snapshot=snapshot)
        return
    conn_id, timeout_s = operator.storage_conn_id or None, float(operator.storage_timeout_s)
    folder, name = request_file.rsplit("/", 1)
    request = PlanRequest.model_validate_json(open_store(folder, conn_id=conn_id, timeout_s=timeout_s).read(name))
    with tempfile.TemporaryDirectory(prefix="akr-plan-in-process-") as tmp:
        local = fetch_dir(snapshot, conn_id=conn_id, cache=Path(tmp), timeout_s=timeout_s)
        write_plan_dir(plan_staged(read_snapshot(local), request), Path(tmp) / "plan", snapshot=snapshot)
        upload_dir(Path(tmp) / "plan", plan, conn_id=conn_id, timeout_s=timeout_s)


def plan_tasks_in_process(monkeypatch: Any, config: dict[str, Any]) -> None:
    """PlanReassignmentOperator against the real cluster of ``config`` (its hook's admin), with the plan job replaced by
    the same planner in this process (``plan_job_in_process``) and no report: what the task does around the planner
    (voter check, cordons, snapshot, request) on real Kafka, without a Spark start-up."""
    from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
    from airflow_kafka_reassign.operators.plan import PlanReassignmentOperator

    monkeypatch.setattr(KafkaReassignHook, "get_admin", lambda self: KafkaClusterAdmin(config, timeout_s=30))
    monkeypatch.setattr(PlanReassignmentOperator, "spark_submit", plan_job_in_process)
    monkeypatch.setattr(PlanReassignmentOperator, "_write_report", lambda self, *a: None)


def reopen_cordoned_brokers(config: dict[str, Any]) -> list[int]:
    """Remove every broker's cordon (a finished decommission leaves its brokers cordoned) and wait until the
    controller takes an explicit assignment onto them again (a validate-only CreateTopics: Kafka 4.4 refuses one onto
    a cordoned broker, and the controller learns an uncordon from the broker's next heartbeat). Returns them."""
    from kafka.admin import NewTopic

    from airflow_kafka_reassign.kafka.admin import SafeKafkaAdminClient
    from airflow_kafka_reassign.kafka.config import to_kafka_python

    with KafkaClusterAdmin(config, timeout_s=30) as admin:
        if not admin.capabilities().cordons:
            return []
        live = [b.id for b in admin.describe_cluster(include_fenced=True).brokers if not b.fenced]
        left = sorted(b for b, v in admin.describe_cordons(live).items() if v)
        if not left:
            return []
        admin.set_cordons(dict.fromkeys(left))
    kp = SafeKafkaAdminClient(**to_kafka_python(config, timeout_s=30))

    def open_again() -> bool:
        try:
            probe = NewTopic("akr-cordon-probe", -1, -1, replica_assignments={i: [b] for i, b in enumerate(left)})
            kp.create_topics([probe], validate_only=True)
        except Exception:  # noqa: BLE001 (INVALID_REPLICA_ASSIGNMENT while the controller still sees the cordon)
            return False
        return True

    try:
        wait_until(open_again, f"the controller to take replicas on {left} again", timeout=30)
    finally:
        kp.close()
    return left
