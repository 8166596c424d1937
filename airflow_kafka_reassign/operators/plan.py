"""PlanReassignmentOperator: snapshot the cluster, plan on Spark, push a small summary.

Example (docs/plan.md; example_dags/ has complete DAGs)::

    plan = PlanReassignmentOperator(
        task_id="plan",
        kafka_config_id="kafka_prod",
        goal="remove-brokers",
        brokers=[7],
        skip_if_empty=True,
    )

The task:

1. builds the :class:`~airflow_kafka_reassign.core.planner.PlanRequest` (a bad parameter fails
   here, before the cluster is touched);
2. snapshots the cluster through :class:`~airflow_kafka_reassign.hooks.kafka_reassign.KafkaReassignHook`
   into ``<output>/snapshot`` (docs/formats.md): every partition of every topic, or the task fails
   (:class:`~airflow_kafka_reassign.exceptions.IncompleteSnapshotError`, naming what is missing)
   once ``snapshot_settle_timeout_s`` is spent waiting for the cluster's metadata to settle, before
   anything is written or submitted, so no plan is ever made from a partial view (a task retry
   takes a new snapshot);
3. submits ``spark/plan_job.py`` with the Spark provider's ``SparkSubmitHook``: on the
   ``spark_conn_id`` connection's master when given, else on ``spark_master`` (``local[*]``)
   without any connection;
4. pushes ``{"plan_uri", "snapshot_uri", "partitions_moved", "replica_moves", "lower_bound",
   "bytes_to_move", "leader_changes", ...}`` (a few hundred bytes) to XCom; the plan stays in
   ``<output>/plan`` (docs/formats.md). With ``skip_if_empty=True`` an empty plan skips the
   downstream tasks.

``<output>`` is ``output_uri`` rendered per run (default
``$AIRFLOW_HOME/kafka_reassign/{dag_id}/{run_id}/{task_id}``). With distributed workers (Celery,
Kubernetes: no disk shared between tasks and the triggerer) give an object-storage URI
(``s3://bucket/prefix/{{ dag.dag_id }}/{{ run_id }}``) and its connection (``storage_conn_id``):
the task checks the store first (before the cluster is touched), uploads the snapshot and the
request there, and the plan job reads them and writes the plan there itself (its driver may run
on another machine; the connection's credentials reach it through spark-submit's environment,
never its command line), ``metrics.json`` last, so a reader never sees half a plan; the
downstream tasks read the plan from there (docs/storage.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException
from airflow.sdk import BaseOperator, Context

from airflow_kafka_reassign.core.guards.completeness import DEFAULT_SETTLE_S
from airflow_kafka_reassign.core.maintenance.cordon import apply_cordons, cordoned_brokers, decommission_cordons
from airflow_kafka_reassign.core.maintenance.drain import DEFAULT_MAX_ROUNDS, DRAIN_FILE, DrainSpec
from airflow_kafka_reassign.core.maintenance.quorum import check_voters
from airflow_kafka_reassign.core.maintenance.rounds import goal_spec
from airflow_kafka_reassign.core.planner import PlanRequest
from airflow_kafka_reassign.core.planner.goals import LOG_DIR_GOALS
from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable
from airflow_kafka_reassign.core.records.plan_io import ERROR_FILE, METRICS_FILE, PLAN_FILE, plan_digest, read_metrics
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot
from airflow_kafka_reassign.core.records.store import LocalStore, Store, StoreError
from airflow_kafka_reassign.core.vocabulary.rates import snapshot_bytes_in
from airflow_kafka_reassign.core.vocabulary.units import format_bytes as human_bytes
from airflow_kafka_reassign.exceptions import ClusterAccessError, ConfigurationError, GuardRefusedError, UnsupportedBrokerError
from airflow_kafka_reassign.hooks.kafka_reassign import KafkaReassignHook
from airflow_kafka_reassign.operators._base import as_bool, default_run_location
from airflow_kafka_reassign.plan_storage import (
    DEFAULT_TIMEOUT_S,
    ObjectStore,
    is_local,
    job_environment,
    local_path,
    open_store,
    run_state,
    upload_dir,
)
from airflow_kafka_reassign.report.links import PlanReportLink, push_report_location
from airflow_kafka_reassign.spark.submit import (
    DEFAULT_MASTER,
    default_conf,
    plan_job_args,
    plan_job_path,
    spark_submit_binary,
    submit_env,
)

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin

#: Connection id the operator defines (in this task's environment only) for the local master.
LOCAL_SPARK_CONN_ID = "akr_spark_local"


@contextlib.contextmanager
def _environment(extra: Mapping[str, str]) -> Iterator[None]:
    """``extra`` in this process's environment while the block runs (spark-submit inherits it), then
    the environment as it was: secrets never go to SparkSubmitHook's ``env_vars``, which it turns into
    ``--conf`` arguments on YARN and Kubernetes."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _as_list(value: Any, name: str) -> list[Any]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        value = json.loads(text) if text.startswith("[") else [v for v in re.split(r"[,\s]+", text) if v]
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ConfigurationError(f"{name} must be a list, not {type(value).__name__}")
    return list(value)


class PlanReassignmentOperator(BaseOperator):
    """Plan a reassignment with the Spark planner; see the module docstring.

    :param kafka_config_id: the ``kafka`` connection of the cluster.
    :param goal: ``rebalance``, ``add-brokers``, ``remove-brokers``, ``heal``, ``offload``, ``remove-disks`` or
        ``rebalance-disks`` (docs/decommission.md: the log dirs of a broker, JBOD).
    :param log_dirs: goal ``remove-disks``: the log dirs to empty, ``["1:/var/lib/kafka/data-2", ...]`` (broker id and
        the absolute path DescribeLogDirs reports; ``"1:/a,2:/b"`` as a rendered Param). They are checked against the
        cluster (nothing sent on a bad one, or when their replicas have nowhere to go), then cordoned (Kafka 4.3+,
        backed up on the plan's run state ``<output>/plan/run``) before the snapshot; they stay cordoned (not with
        ``cordon=False``).
    :param brokers: brokers added (add-brokers) or removed (remove-brokers); a list, or
        ``"4,5"`` as a rendered Param.
    :param topic_include / topic_exclude: regular expressions (full match) of topics.
    :param rf_changes: topic -> new replication factor, for exactly these topics (KIP-860:
        every other partition keeps its RF).
    :param heal_targets: ``"topic-partition" -> RF`` to heal (GuardedCreatePartitions records them).
    :param use_sizes: snapshot replica sizes (DescribeLogDirs) and prefer moving small replicas.
    :param capacity: a capacity document (a JSON/YAML file path or a mapping; see
        :mod:`airflow_kafka_reassign.core.vocabulary.capacity`): balance disk usage as a share of each
        broker's capacity (sizes are then always snapshotted). Needed by ``goal="offload"``.
        ``"cluster"`` (or ``"disk": "cluster"`` in an entry): each broker's disk as it reports it
        (the total bytes of its log dirs, DescribeLogDirs v4, Kafka 3.3+), read with the snapshot.
    :param sample_window_s: seconds between the two reads of the replicas' sizes (DescribeLogDirs)
        that estimate each partition's bytes-in rate (:mod:`airflow_kafka_reassign.core.vocabulary.rates`; an
        estimate: retention and compaction during the window skew it); ``0`` samples no rates.
        Default: 30 s when ``capacity`` gives a ``network_in`` capacity (the bytes-in goal needs
        the rates), else 0. The snapshot takes that much longer.
    :param disk_cap: with ``capacity``, and for goal ``remove-disks``: no broker (no target log dir's volume) above
        this share of its disk after the plan (0.85). Templated (``"{{ params.disk_cap }}"``).
    :param offload_threshold: ``goal="offload"``: brokers above this share shed down to it
        (default ``disk_cap``); the others only receive.
    :param partial_drain: goal ``remove-brokers`` with topic filters: drain only the selected
        topics now; topics left out keep their replicas on the removed brokers (a warning says how
        many). Without it such a plan is refused. Templated (``"{{ params.partial_drain }}"``).
    :param cordon: goal ``remove-brokers``: before the snapshot, cordon the brokers (``cordoned.log.dirs=*``,
        KIP-1066, Kafka 4.3+) so that topics created or grown while they drain get no replica there; the previous
        values are backed up in the plan's run state (``<plan>/run``) first. A cancel or a rollback of the plan
        uncordons them exactly; a finished drain leaves them cordoned until they are unregistered. On an older
        cluster a warning says so and the drain rounds do the work. Goal ``remove-disks``: the same for its log dirs
        (still checked when false). ``False``: nothing is cordoned, no backup is written. Templated (a dry run
        passes ``False``).
    :param allow_voter_removal: goal ``remove-brokers``: a broker that is a KRaft controller voter (a combined
        broker+controller node) is refused before anything is changed, naming the voters and the majority;
        this lets it be drained all the same (never when the voters left would be fewer than the majority).
    :param drain_rounds: goals ``remove-brokers`` and ``remove-disks``: the plan directory says its goal
        (``drain.json``: what is drained; ``disk-removal.json``: the disk removal's request), and the execution that
        runs it, once the plan's moves are done, moves the partitions that arrived on the drained brokers or in the
        removed dirs meanwhile (topics created, grown or re-created while it ran, placed there by the controller) in
        the same run, within the same limits, up to this many rounds (0: none). Goals ``rebalance``,
        ``add-brokers`` and ``offload`` (``balance.json``: the request): the topics whose moves the cluster
        invalidated during the run (re-created, moved by someone else) are planned again toward the same balance,
        up to this many rounds. See docs/decommission.md, docs/remove-disks.md and docs/execute.md.
    :param request: extra :class:`~airflow_kafka_reassign.core.planner.PlanRequest` fields.
    :param output_uri: where the snapshot and plan go: a path or an object-storage URI (templated;
        see the module doc).
    :param storage_conn_id: the Airflow connection of that object storage (for S3 the amazon
        provider's ``aws`` connection; ``endpoint_url`` in its extra for an S3-compatible store).
    :param storage_timeout_s: bound on each request to the object storage.
    :param spark_conn_id: a ``spark`` connection (master URL, deploy mode); ``None`` runs on
        ``spark_master`` without any connection. A connection id that does not exist (a typo) is
        refused by name before the cluster is touched (the Spark provider would fall back to YARN).
    :param spark_master: the master URL when ``spark_conn_id`` is ``None`` (default ``local[*]``). Templated.
    :param spark_partitions: tasks of the plan job's per-topic stages (default: 4 per core).
    :param include_internal: also plan internal topics (``__consumer_offsets``, ...).
    :param spark_conf: extra Spark conf.
    :param skip_if_empty: skip downstream tasks when the plan moves nothing.
    :param kafka_timeout_s: bound on each request to the cluster.
    :param snapshot_settle_timeout_s: how long the snapshot keeps reading while the cluster's
        metadata settles (topics created or grown a moment ago not yet known to every broker)
        before the task fails naming what is missing.
    """

    template_fields: Sequence[str] = (
        "goal", "brokers", "topic_include", "topic_exclude", "rf_changes", "heal_targets", "output_uri",
        "spark_master", "partial_drain", "storage_conn_id", "cordon", "log_dirs", "disk_cap",
    )
    ui_color = "#e8f0fe"
    operator_extra_links = (PlanReportLink(),)

    def __init__(
        self,
        *,
        kafka_config_id: str = "kafka_default",
        goal: str = "rebalance",
        brokers: Any = None,
        topic_include: Any = None,
        topic_exclude: Any = None,
        rf_changes: Mapping[str, int] | None = None,
        heal_targets: Mapping[str, int] | None = None,
        include_internal: bool = False,
        use_sizes: bool = False,
        partial_drain: bool = False,
        drain_rounds: int = DEFAULT_MAX_ROUNDS,
        cordon: Any = True,
        allow_voter_removal: bool = False,
        capacity: Any = None,
        sample_window_s: float | None = None,
        disk_cap: float | None = None,
        offload_threshold: float | None = None,
        log_dirs: Any = None,
        request: Mapping[str, Any] | None = None,
        output_uri: str | None = None,
        storage_conn_id: str | None = None,
        storage_timeout_s: float = DEFAULT_TIMEOUT_S,
        spark_conn_id: str | None = None,
        spark_master: str = DEFAULT_MASTER,
        spark_conf: Mapping[str, str] | None = None,
        spark_partitions: int | None = None,
        skip_if_empty: bool = False,
        kafka_timeout_s: float = 30.0,
        snapshot_settle_timeout_s: float = DEFAULT_SETTLE_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kafka_config_id = kafka_config_id
        self.goal = goal
        self.brokers = brokers
        self.topic_include = topic_include
        self.topic_exclude = topic_exclude
        self.rf_changes = rf_changes
        self.heal_targets = heal_targets
        self.include_internal = include_internal
        self.use_sizes = use_sizes
        self.partial_drain = partial_drain
        self.drain_rounds = drain_rounds
        self.cordon = cordon
        self.allow_voter_removal = allow_voter_removal
        self.capacity = capacity
        self.sample_window_s = sample_window_s
        self.disk_cap = disk_cap
        self.offload_threshold = offload_threshold
        self.log_dirs = log_dirs
        self.request = dict(request or {})
        self.output_uri = output_uri
        self.storage_conn_id = storage_conn_id
        self.storage_timeout_s = storage_timeout_s
        self.spark_conn_id = spark_conn_id
        self.spark_master = spark_master
        self.spark_conf = dict(spark_conf or {})
        self.spark_partitions = spark_partitions
        self.skip_if_empty = skip_if_empty
        self.kafka_timeout_s = kafka_timeout_s
        self.snapshot_settle_timeout_s = snapshot_settle_timeout_s
        self._spark_hook: Any = None

    # -- pieces (unit-tested on their own) --------------------------------------------------

    def build_request(self) -> PlanRequest:
        fields: dict[str, Any] = dict(self.request)
        fields["goal"] = self.goal
        fields["brokers"] = tuple(int(b) for b in _as_list(self.brokers, "brokers"))
        for name in ("topic_include", "topic_exclude"):
            value = _as_list(getattr(self, name), name)
            if value:
                fields[name] = tuple(value)
        if self.rf_changes:
            fields["rf_changes"] = dict(self.rf_changes)
        if self.heal_targets:
            fields["heal_targets"] = dict(self.heal_targets)
        if self.include_internal:
            fields["include_internal"] = True
        if self.use_sizes:
            fields["use_sizes"] = True
        if as_bool(self.partial_drain, "partial_drain"):
            fields["partial_drain"] = True
        if self.capacity is not None:
            from airflow_kafka_reassign.core.vocabulary.capacity import capacity_document, load_capacity

            fields["capacity"] = (
                load_capacity(self.capacity) if isinstance(self.capacity, str) else capacity_document(self.capacity)
            )
        if self.disk_cap is not None:
            fields["disk_cap"] = float(self.disk_cap)
        if self.offload_threshold is not None:
            fields["offload_threshold"] = float(self.offload_threshold)
        dirs = _as_list(self.log_dirs, "log_dirs")
        if dirs:
            fields["log_dirs"] = tuple(str(d) for d in dirs)
        try:
            return PlanRequest(**fields)
        except ValueError as e:
            raise ConfigurationError(f"task {self.task_id}: the plan request is not valid: {e}") from None

    def _cluster_disks(self, request: PlanRequest, space: Mapping[int, Any], snapshot: Any,
                       snapshot_dir: Path) -> PlanRequest:
        """Each broker's log-dir space beside the snapshot (``disks.json``), and a capacity document's
        ``"cluster"`` disks filled from it (KIP-827's total bytes) before anything is planned."""
        from airflow_kafka_reassign.core.vocabulary.capacity import write_disks

        write_disks(space, snapshot_dir)
        cap = request.capacity
        if cap is None or not cap.from_cluster:
            return request
        try:
            filled = cap.with_cluster_disks({b: s.total_bytes for b, s in space.items()},
                                            {b.id: b.rack for b in snapshot.brokers})
        except ConfigurationError as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from None
        self.log.info("Disk capacity from the cluster (log dirs' total bytes): %s", ", ".join(
            f"broker {b} {human_bytes(c.disk)}" for b, c in sorted(filled.brokers.items())))
        merged = sorted(b for b, s in space.items() if getattr(s, "merged", 0))
        if merged:
            self.log.warning("broker(s) %s have log dirs reporting the same volume size and free space: each such "
                             "group is counted once (log dirs on one filesystem). If they are separate, identical "
                             "disks (JBOD), give those brokers' disk in the capacity document", merged)
        return request.model_copy(update={"capacity": filled})

    def sample_window(self, request: PlanRequest) -> float:
        """Seconds to sample bytes-in rates over (0: none); see ``sample_window_s``."""
        from airflow_kafka_reassign.core.vocabulary.rates import DEFAULT_SAMPLE_WINDOW_S

        if self.sample_window_s is None:
            cap = request.capacity
            wanted = cap is not None and cap.gives_network_in()
            return DEFAULT_SAMPLE_WINDOW_S if wanted else 0.0
        try:
            window = float(self.sample_window_s)
        except (TypeError, ValueError):
            window = -1.0
        if not window >= 0:
            raise ConfigurationError(
                f"task {self.task_id}: sample_window_s {self.sample_window_s!r} is not a number of seconds >= 0; "
                "give e.g. 30, or 0 to sample no bytes-in rates"
            )
        return window

    def output_location(self, context: Context) -> str:
        if self.output_uri:
            return str(self.output_uri)
        return default_run_location(context, self, self.task_id)

    def spark_submit(self, snapshot: str, plan: str, request_file: str, *, plan_store: Store | None = None,
                     environment: Mapping[str, str] | None = None) -> None:
        """Submit the plan job: ``snapshot``, ``plan`` and ``request_file`` are paths or URIs the
        driver reads and writes; ``environment`` (the storage credentials) goes into spark-submit's
        process environment only, never its command line (docs/storage.md)."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        conn_id = self.spark_conn_id
        if conn_id is None:
            # No connection set up: define one for this task process only, so the Spark
            # provider runs the job on the local master (its own fallback would be YARN).
            conn_id = LOCAL_SPARK_CONN_ID
            os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps({"conn_type": "spark", "host": self.spark_master})
        hook = SparkSubmitHook(
            conf=default_conf(self.spark_conf),
            conn_id=conn_id,
            spark_binary=spark_submit_binary(),
            name=f"kafka-reassign-plan-{self.task_id}",
            application_args=plan_job_args(snapshot, plan, request_file, partitions=self.spark_partitions),
            env_vars=submit_env(),
        )
        self._spark_hook = hook
        try:
            with _environment(environment or {}):
                hook.submit(plan_job_path())
        except Exception:
            error = (plan_store or LocalStore(Path(plan))).read(ERROR_FILE)
            if error is not None:
                raise ConfigurationError(error.decode("utf-8", "replace").strip()) from None
            raise
        finally:
            self._spark_hook = None

    # -- the task ----------------------------------------------------------------------------

    def check_spark_connection(self) -> None:
        """Refuse, by name, a ``spark_conn_id`` that is not an Airflow connection of type ``spark``."""
        if self.spark_conn_id is None:
            return
        from airflow.providers.common.compat.sdk import BaseHook

        fix = (f"create it (type spark, host = the master URL such as spark://host:7077 or local[4]), or leave "
               f"spark_conn_id unset to plan on spark_master={self.spark_master!r}")
        try:
            conn = BaseHook.get_connection(self.spark_conn_id)
        except Exception:  # noqa: BLE001 (AirflowNotFoundException; its class moved between Airflow versions)
            raise ConfigurationError(
                f"task {self.task_id}: spark_conn_id {self.spark_conn_id!r} is not an Airflow connection: {fix}"
            ) from None
        if conn.conn_type != "spark":
            raise ConfigurationError(
                f"task {self.task_id}: spark_conn_id {self.spark_conn_id!r} is a {conn.conn_type!r} connection, not a "
                f"'spark' one: {fix}"
            )

    def execute(self, context: Context) -> dict[str, Any]:
        request = self.build_request()
        self.check_spark_connection()
        location = self.output_location(context)
        remote = not is_local(location)
        if remote:
            try:  # before the cluster is touched: a wrong URI, bucket or credential fails here
                ObjectStore(location, conn_id=self.storage_conn_id or None, timeout_s=float(self.storage_timeout_s)).check()
            except StoreError as e:
                raise ConfigurationError(f"task {self.task_id}: output_uri: {e}") from None
        work = Path(tempfile.mkdtemp(prefix="akr-plan-")) if remote else local_path(location)
        try:
            return self._plan(context, request, location, work, remote)
        except ClusterAccessError as e:  # the cluster refused the connection's client: a retry fails the same way
            raise AirflowFailException(f"task {self.task_id}: {e}") from None
        finally:
            if remote:
                shutil.rmtree(work, ignore_errors=True)

    def _plan(self, context: Context, request: PlanRequest, location: str, work: Path, remote: bool) -> dict[str, Any]:
        snapshot_dir, plan_dir = work / "snapshot", work / "plan"
        work.mkdir(parents=True, exist_ok=True)

        window = self.sample_window(request)  # bad input fails before the cluster is touched
        hook = KafkaReassignHook(kafka_config_id=self.kafka_config_id, timeout_s=self.kafka_timeout_s)
        admin = hook.get_admin()
        table = None
        try:  # complete, or IncompleteSnapshotError: the task fails before anything is written or submitted
            if request.goal == "remove-brokers" and request.brokers:
                self._before_drain(admin, request, location.rstrip("/") if remote else str(work))
            if request.goal in LOG_DIR_GOALS:  # remove-disks: checked (nothing sent on bad input), then cordoned
                self._cordon_for_removal(admin, request, location)
            snapshot = admin.snapshot(include_sizes=request.use_sizes or request.capacity is not None,
                                      settle_timeout_s=float(self.snapshot_settle_timeout_s))
            request = self._with_cordons(admin, request, snapshot.broker_ids)
            if request.goal in LOG_DIR_GOALS:
                table = LogDirTable.of(admin.log_dirs(None))
            if window:
                self.log.info("Sampling bytes-in rates: replica sizes read twice, %g s apart", window)
                snapshot = snapshot_bytes_in(admin.replica_sizes, snapshot, window)
            space = admin.log_dirs([snapshot.partitions[0].tp]).space \
                if request.capacity is not None and snapshot.partitions else None
        finally:
            admin.close()
        write_snapshot(snapshot, snapshot_dir)
        if table is not None:
            table.write(snapshot_dir)  # log_dirs.json: what the goals on log dirs plan from
        if space is not None:
            request = self._cluster_disks(request, space, snapshot, snapshot_dir)
        check = snapshot.check
        self.log.info(
            "Snapshot: %d brokers, %d topics, %d partitions (complete after %s read(s)) -> %s",
            len(snapshot.brokers), len(snapshot.topics), len(snapshot.partitions),
            check.attempts if check is not None else "?", snapshot_dir,
        )
        request_file = work / "request.json"
        request_file.write_text(request.model_dump_json(indent=1), encoding="utf-8")
        if not remote:
            self.spark_submit(str(snapshot_dir), str(plan_dir), str(request_file))
            metrics = read_metrics(plan_dir)
            report = self._write_report(plan_dir, snapshot)
        else:
            metrics, report = self._plan_on_storage(location.rstrip("/"), work, snapshot)

        base = location.rstrip("/") if remote else str(work)
        self._write_drain(request, f"{base}/plan")
        summary = metrics["summary"]
        out = {
            "plan_uri": f"{base}/plan",
            "snapshot_uri": f"{base}/snapshot",
            "report_uri": f"{base}/plan/{report}" if report else None,
            # what an approval binds to: the plan's content hash and the time of its snapshot
            "plan_sha256": self._digest(plan_dir, location, remote),
            "snapshot_taken_at": snapshot.taken_at.isoformat(),
            "goal": summary["goal"],
            "partitions_moved": summary["partitions_moved"],
            "replica_moves": summary["replica_moves"],
            "lower_bound": summary["lower_bound"],
            "bytes_to_move": summary["bytes_to_move"],
            "leader_changes": summary["leader_changes"],
            "leader_changes_lower_bound": summary["leader_changes_lower_bound"],
            "before": {k: summary["before"][k] for k in ("replica_max_min", "leader_max_min", "topic_replica_max_min",
                                                          "rack_violations", "replicas_on_removed_brokers")},
            "after": {k: summary["after"][k] for k in ("replica_max_min", "leader_max_min", "topic_replica_max_min",
                                                        "rack_violations", "replicas_on_removed_brokers")},
            # the best brokers' max-min the racks allow and what bounded it (absent from older plans)
            "replica_max_min_floor": summary.get("replica_max_min_floor"),
            "replica_balance_bounded_by": summary.get("replica_balance_bounded_by", []),
            "warnings": summary["warnings"][:10],
            **({"log_dirs": summary["log_dirs"]} if "log_dirs" in summary else {}),  # the goals on log dirs
        }
        self.log.info(
            "Plan: %d partitions to move, %d replica moves (lower bound %d), %d leader changes -> %s",
            out["partitions_moved"], out["replica_moves"], out["lower_bound"], out["leader_changes"], out["plan_uri"],
        )
        for w in summary["warnings"]:
            self.log.warning("Plan: %s", w)
        if report:
            push_report_location(context, out["plan_uri"], self.storage_conn_id)
            self.log.info("Plan report (open it with the task's \"Plan report\" link before approving): %s",
                          out["report_uri"])
        if self.skip_if_empty and out["partitions_moved"] == 0:
            context["ti"].xcom_push(key="plan", value=out)
            raise AirflowSkipException("the plan moves nothing: skipping the downstream tasks")
        return out

    def _before_drain(self, admin: ClusterAdmin, request: PlanRequest, base: str) -> None:
        """A decommission, before its snapshot: refuse to drain a KRaft controller voter (DescribeQuorum), then
        cordon the brokers (KIP-1066, Kafka 4.3+) so that nothing new lands on them while they drain; the previous
        ``cordoned.log.dirs`` values are backed up in the plan's run state first (a cancel or rollback restores
        them; a finished drain leaves the brokers cordoned until they are unregistered)."""
        caps = admin.capabilities()
        if caps.describe_quorum:
            try:
                check_voters(request.brokers, admin.describe_quorum(),
                             allow_voter_removal=as_bool(self.allow_voter_removal, "allow_voter_removal"))
            except GuardRefusedError as e:
                raise AirflowFailException(f"task {self.task_id}: {e}") from None
        else:
            self.log.info("controller voter guard skipped: this cluster (%s) has no KRaft controller quorum "
                          "(DescribeQuorum)%s", caps.line_name(),
                          ": in ZooKeeper mode the controller is whichever broker ZooKeeper elects, and another "
                          "takes over when it stops" if caps.zookeeper_mode else "")
        if not as_bool(self.cordon, "cordon"):
            return
        if not caps.cordons:
            self.log.warning(
                "brokers %s are not cordoned: cordons need Kafka 4.3+ in KRaft with metadata.version 4.3-IV0 "
                "(KIP-1066; this cluster runs %s, metadata.version level %s). Topics created or grown while they "
                "drain may get replicas on them; the execution drains those too, in up to %s later round(s) of the "
                "same run (drain rounds)", list(request.brokers), caps.line_name(), caps.metadata_version,
                self.drain_rounds)
            return
        state = run_state(open_store(f"{base}/plan", conn_id=self.storage_conn_id or None,
                                     timeout_s=float(self.storage_timeout_s)))
        apply_cordons(admin, decommission_cordons(request.brokers), state_dir=state, log=self.log)

    def _with_cordons(self, admin: ClusterAdmin, request: PlanRequest, brokers: Sequence[int]) -> PlanRequest:
        """The request with the brokers cordoned now (every log dir, KIP-1066; the removed ones aside): whatever the
        goal, the plan puts no replica there (core/planner/goals.py). None on a cluster without cordons."""
        removed = set(request.brokers) if request.goal == "remove-brokers" else set()
        cordoned = tuple(sorted(cordoned_brokers(admin, brokers) - removed))
        if not cordoned:
            return request
        self.log.info("brokers %s are cordoned (cordoned.log.dirs): the plan puts no replica on them", list(cordoned))
        return request.model_copy(update={"cordoned": cordoned})

    def _cordon_for_removal(self, admin: Any, request: PlanRequest, location: str) -> None:
        """goal remove-disks: bad input refused by name before anything is sent, then the dirs cordoned, backed up on
        the plan's run state (core/maintenance/disk_removal.py)."""
        from airflow_kafka_reassign.core.maintenance.disk_removal import cordon_for_removal
        from airflow_kafka_reassign.plan_storage import run_state

        state = run_state(open_store(f"{location.rstrip('/')}/plan", conn_id=self.storage_conn_id or None,
                                     timeout_s=float(self.storage_timeout_s)))
        try:
            cordon_for_removal(admin, request, state_dir=state, cordon=as_bool(self.cordon, "cordon"), log=self.log)
        except (ConfigurationError, UnsupportedBrokerError) as e:  # retrying cannot fix it
            raise AirflowFailException(f"task {self.task_id}: {e}") from None

    def _write_drain(self, request: PlanRequest, plan_uri: str) -> None:
        """A goal-driven plan directory says its goal: a decommission what is drained (drain.json), a disk removal or a
        balancing plan the request it was planned from (disk-removal.json, balance.json). The execution that runs it
        plans again, in the same run, what breaks the goal meanwhile (core/maintenance/rounds.py), up to
        ``drain_rounds`` rounds."""
        goal = goal_spec(request, int(self.drain_rounds))
        if goal is not None:
            open_store(plan_uri, conn_id=self.storage_conn_id or None, timeout_s=float(self.storage_timeout_s)).write(
                goal[0], goal[1].encode())
            return
        if request.goal != "remove-brokers" or not request.brokers:
            return
        partial = bool(request.partial_drain)
        spec = DrainSpec(brokers=request.brokers, max_rounds=int(self.drain_rounds),
                         topic_include=request.topic_include if partial else (),
                         topic_exclude=request.topic_exclude if partial else ())
        open_store(plan_uri, conn_id=self.storage_conn_id or None, timeout_s=float(self.storage_timeout_s)).write(
            DRAIN_FILE, spec.model_dump_json().encode())

    def _digest(self, plan_dir: Path, location: str, remote: bool) -> str:
        if not remote:
            return plan_digest((plan_dir / PLAN_FILE).read_bytes())
        data = open_store(f"{location.rstrip('/')}/plan", conn_id=self.storage_conn_id or None,
                          timeout_s=float(self.storage_timeout_s)).read(PLAN_FILE)
        if data is None:
            raise ConfigurationError(f"task {self.task_id}: the plan job wrote no {PLAN_FILE} to {location}/plan")
        return plan_digest(data)

    def _plan_on_storage(self, base: str, work: Path, snapshot: Any) -> tuple[dict[str, Any], str | None]:
        """The snapshot and the request uploaded to ``base``; the plan job reads them from there and
        writes the plan to ``base/plan`` itself (its driver may run on another machine); the report
        is made from the plan read back and uploaded next to it."""
        conn_id, timeout_s = self.storage_conn_id or None, float(self.storage_timeout_s)
        try:
            upload_dir(work / "snapshot", f"{base}/snapshot", conn_id=conn_id, timeout_s=timeout_s)
            open_store(base, conn_id=conn_id, timeout_s=timeout_s).write(
                "request.json", (work / "request.json").read_bytes())
            environment = job_environment(base, conn_id=conn_id, timeout_s=timeout_s)
        except StoreError as e:
            raise ConfigurationError(f"task {self.task_id}: output_uri: {e}") from None
        self.log.info("Uploaded the snapshot to %s/snapshot; the plan job reads it from there", base)
        plan_store = open_store(f"{base}/plan", conn_id=conn_id, timeout_s=timeout_s)
        self.spark_submit(f"{base}/snapshot", f"{base}/plan", f"{base}/request.json", plan_store=plan_store,
                          environment=environment)
        try:
            metrics = read_metrics(plan_store)
            local = work / "plan"
            local.mkdir(parents=True, exist_ok=True)
            for name in (PLAN_FILE, METRICS_FILE):  # what the report reads
                data = plan_store.read(name)
                if data is not None:
                    (local / name).write_bytes(data)
            report = self._write_report(local, snapshot)
            if report is not None:
                upload_dir(local / "report", f"{base}/plan/report", conn_id=conn_id, timeout_s=timeout_s)
        except StoreError as e:
            raise ConfigurationError(f"task {self.task_id}: reading the plan back from {base}/plan: {e}") from None
        return metrics, report

    def _write_report(self, plan_dir: Path, snapshot: Any) -> str | None:
        try:
            from airflow_kafka_reassign.report import write_report
        except ImportError as e:
            self.log.warning("No plan report: it needs matplotlib (pip install 'airflow-kafka-reassign[report]'): %s", e)
            return None
        try:
            path = Path(write_report(plan_dir, snapshot))
        except Exception as e:  # noqa: BLE001 (a report is a convenience, never a reason to fail the plan)
            self.log.warning("Could not write the plan report: %s", e)
            return None
        return str(path.relative_to(plan_dir)) if path.is_relative_to(plan_dir) else str(path)

    def on_kill(self) -> None:
        if self._spark_hook is not None:
            self._spark_hook.on_kill()
