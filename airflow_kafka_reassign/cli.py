"""``airflow-kafka-reassign``: the planner outside Airflow (snapshot, plan, metrics).

Examples (against the sandbox: ``python -m airflow_kafka_reassign.sandbox up``)::

    airflow-kafka-reassign snapshot --bootstrap-servers 127.0.0.1:19092 --out /tmp/snap
    airflow-kafka-reassign plan --snapshot /tmp/snap --goal remove-brokers --brokers 4 --out /tmp/plan
    airflow-kafka-reassign metrics --snapshot /tmp/snap --plan /tmp/plan

The goals on log dirs (JBOD) plan from each broker's log dirs, which ``snapshot --log-dirs`` records beside the
snapshot (``log_dirs.json``)::

    airflow-kafka-reassign snapshot --bootstrap-servers 127.0.0.1:19092 --log-dirs --out /tmp/snap
    airflow-kafka-reassign plan --snapshot /tmp/snap --goal remove-disks --log-dir 1:/var/lib/kafka/data-2 --out /tmp/plan
    airflow-kafka-reassign plan --snapshot /tmp/snap --goal rebalance-disks --out /tmp/plan

The command plans only: it changes nothing on the cluster. PlanReassignmentOperator(goal="remove-disks") also cordons
the dirs (Kafka 4.3+) before its snapshot; here, cordon them yourself first if topics are created meanwhile.

Every ``--out``, ``--snapshot`` and ``--plan`` may be an object-storage URI (``s3://bucket/...``):
it is read or written through the same storage layer as the operators
(``airflow_kafka_reassign.plan_storage``), with the Airflow connection ``--storage-conn-id`` when
given, else the file system's own defaults (for S3 the ``AWS_*`` environment variables).

``plan`` submits the Spark job (``spark-submit``, ``--master local[*]`` by default; any
master URL works) unless ``--no-spark`` plans in this process. Security settings go in a
file (``--command-config``, librdkafka ``key=value`` lines like Kafka's own tools), never on
the command line. Exit codes: 0 done, 2 bad input (the reason on stderr: a bad argument or file,
a snapshot whose files do not hold the counts its snapshot.json records), 1 other failures (the
reason on stderr), among them a cluster that did not give a complete snapshot within
``--settle-timeout`` seconds: nothing is written then, and the error names what was missing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from airflow_kafka_reassign.core.guards.completeness import DEFAULT_SETTLE_S
from airflow_kafka_reassign.core.records.store import StoreError
from airflow_kafka_reassign.exceptions import ConfigurationError, KafkaReassignError

EXIT_BAD_INPUT = 2


def _brokers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of broker ids, e.g. 4,5") from None


def _window(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0 (e.g. 30; 0 samples no rates)")
    return value


def _kv_file(path: str) -> dict[str, str]:
    """librdkafka ``key=value`` lines (``#`` comments), as Kafka's --command-config files."""
    out: dict[str, str] = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigurationError(f"{path} line {n}: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


@contextlib.contextmanager
def _writable(uri: str, args: argparse.Namespace) -> Iterator[Path]:
    """A local directory for ``uri``: itself, or a temporary one uploaded to it at the end."""
    from airflow_kafka_reassign.plan_storage import is_local, local_path, upload_dir

    if is_local(uri):
        yield local_path(uri)
        return
    with tempfile.TemporaryDirectory(prefix="akr-out-") as tmp:
        yield Path(tmp)
        upload_dir(Path(tmp), uri, conn_id=args.storage_conn_id)


def _readable(uri: str, args: argparse.Namespace) -> Path:
    from airflow_kafka_reassign.plan_storage import fetch_dir

    return fetch_dir(uri, conn_id=args.storage_conn_id)


def cmd_snapshot(args: argparse.Namespace) -> int:
    from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot
    from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

    config: dict[str, Any] = _kv_file(args.command_config) if args.command_config else {}
    config["bootstrap.servers"] = args.bootstrap_servers
    admin = KafkaClusterAdmin(config, timeout_s=args.timeout)
    try:  # complete or IncompleteSnapshotError (exit 1): nothing is written from a partial view
        snapshot = admin.snapshot(include_sizes=args.sizes, settle_timeout_s=args.settle_timeout)
        if args.sample_window_s:
            from airflow_kafka_reassign.core.vocabulary.rates import snapshot_bytes_in

            snapshot = snapshot_bytes_in(admin.replica_sizes, snapshot, args.sample_window_s)
        # each broker's log-dir space (KIP-827): a capacity document's "cluster" disks come from it
        space = admin.log_dirs([snapshot.partitions[0].tp]).space if args.sizes and snapshot.partitions else None
        table = None
        if args.log_dirs:  # what the goals on log dirs plan from
            from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable

            table = LogDirTable.of(admin.log_dirs(None))
    finally:
        admin.close()
    with _writable(args.out, args) as local:
        write_snapshot(snapshot, local)
        if table is not None:
            table.write(Path(local))
        if space:
            from airflow_kafka_reassign.core.vocabulary.capacity import write_disks

            write_disks(space, Path(local))
    out = args.out
    check = snapshot.check
    reads = f", complete after {check.attempts} read(s)" if check is not None and check.attempts else ""
    print(
        f"snapshot of {len(snapshot.brokers)} brokers, {len(snapshot.topics)} topics, "
        f"{len(snapshot.partitions)} partitions{reads} -> {out}"
    )
    return 0


def build_request(args: argparse.Namespace) -> Any:
    from airflow_kafka_reassign.core.planner import PlanRequest

    fields: dict[str, Any] = {"goal": args.goal, "brokers": args.brokers or ()}
    if args.topic_include:
        fields["topic_include"] = tuple(args.topic_include)
    if args.topic_exclude:
        fields["topic_exclude"] = tuple(args.topic_exclude)
    if args.rf_change:
        rf: dict[str, int] = {}
        for item in args.rf_change:
            topic, sep, value = item.rpartition("=")
            if not sep or not value.isdigit():
                raise ConfigurationError(f"--rf-change {item!r}: write TOPIC=RF, e.g. orders=3")
            rf[topic] = int(value)
        fields["rf_changes"] = rf
    if args.heal_targets:
        fields["heal_targets"] = json.loads(Path(args.heal_targets).read_text(encoding="utf-8"))
    if args.log_dir:
        fields["log_dirs"] = tuple(args.log_dir)
    for name in ("include_internal", "include_in_flight", "use_sizes"):
        if getattr(args, name):
            fields[name] = True
    if args.no_rack_aware:
        fields["rack_aware"] = False
    if args.max_leader_spread:
        fields["max_leader_spread"] = args.max_leader_spread
    if args.capacity:
        from airflow_kafka_reassign.core.vocabulary.capacity import load_capacity

        fields["capacity"] = load_capacity(args.capacity)
    for name in ("disk_cap", "disk_tolerance", "offload_threshold", "ingress_tolerance"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    return PlanRequest(**fields)


def cmd_plan(args: argparse.Namespace) -> int:
    from airflow_kafka_reassign.core.planner import plan_reassignment
    from airflow_kafka_reassign.core.planner.goals import LOG_DIR_GOALS
    from airflow_kafka_reassign.core.records.plan_io import read_metrics, write_plan_dir
    from airflow_kafka_reassign.core.records.snapshot_io import read_snapshot

    request = _cluster_disks(build_request(args), args)
    if args.no_spark:
        with _writable(args.out, args) as out:
            snapshot = _readable(args.snapshot, args)
            if request.goal in LOG_DIR_GOALS:  # the pure planner, as the plan job runs it on its driver
                from airflow_kafka_reassign.core.planner.log_dirs import LogDirTable, plan_log_dirs

                result = plan_log_dirs(read_snapshot(snapshot), LogDirTable.read(snapshot), request)
            else:
                result = plan_reassignment(read_snapshot(snapshot), request)
            write_plan_dir(result, out, snapshot=str(args.snapshot))
            summary = read_metrics(out)["summary"]
    else:
        summary = _plan_on_spark(args, request)
        if summary is None:
            return 1
    print(json.dumps({"plan": str(args.out), **{k: summary[k] for k in (
        "goal", "partitions_moved", "replica_moves", "lower_bound", "bytes_to_move", "leader_changes",
        "leader_changes_lower_bound")}, "replica_max_min_floor": summary.get("replica_max_min_floor"),
        "replica_balance_bounded_by": summary.get("replica_balance_bounded_by", []),
        **{k: summary[k] for k in ("bytes_lower_bound", "disk", "log_dirs") if k in summary},
        "warnings": summary["warnings"]}, indent=1))
    return 0


def _cluster_disks(request: Any, args: argparse.Namespace) -> Any:
    """The request with its capacity document's ``"cluster"`` disks filled from the snapshot's disks.json."""
    import io

    import pyarrow.parquet as pq

    from airflow_kafka_reassign.core.vocabulary.capacity import DISKS_FILE, disk_totals
    from airflow_kafka_reassign.plan_storage import open_store

    cap = request.capacity
    if cap is None or not cap.from_cluster:
        return request
    store = open_store(str(args.snapshot), conn_id=args.storage_conn_id)
    disks, brokers = store.read(DISKS_FILE), store.read("brokers.parquet")
    if disks is None or brokers is None:
        raise ConfigurationError(
            f"--capacity takes disks from the cluster (\"cluster\"), but {args.snapshot} has no {DISKS_FILE}: take "
            "the snapshot with `airflow-kafka-reassign snapshot --sizes` (brokers on Kafka 3.3+ report their disks), "
            "or give the disks in the capacity document")
    racks = {r["id"]: r["rack"] for r in pq.read_table(io.BytesIO(brokers)).to_pylist()}
    return request.model_copy(update={"capacity": cap.with_cluster_disks(disk_totals(disks), racks)})


def _plan_on_spark(args: argparse.Namespace, request: Any) -> dict[str, Any] | None:
    """The plan job on ``--master``: it reads the snapshot and writes the plan where they are (paths,
    or object-storage URIs its driver reads with the credentials of ``--storage-conn-id`` or its own
    environment); the summary of metrics.json, ``None`` when the job failed (its output says why)."""
    from airflow_kafka_reassign.core.records.plan_io import ERROR_FILE, read_metrics
    from airflow_kafka_reassign.plan_storage import is_local, job_environment, local_path, open_store
    from airflow_kafka_reassign.spark.submit import EXIT_BAD_INPUT as JOB_BAD_INPUT
    from airflow_kafka_reassign.spark.submit import submit_plan

    def where(uri: str) -> str:
        return str(local_path(uri).resolve()) if is_local(uri) else uri

    if is_local(args.snapshot):  # bad input fails here in a second, in one line, before a JVM starts
        from airflow_kafka_reassign.spark.job_storage import check_local_snapshot

        check_local_snapshot(where(args.snapshot))
    environment: dict[str, str] = {}
    for uri in (args.snapshot, args.out):
        if not is_local(uri):
            environment.update(job_environment(uri, conn_id=args.storage_conn_id))
    plan_store = open_store(args.out, conn_id=args.storage_conn_id)
    with tempfile.TemporaryDirectory(prefix="akr-request-") as tmp:
        request_file = Path(tmp) / "request.json"
        request_file.write_text(request.model_dump_json(), encoding="utf-8")
        conf = dict(kv.split("=", 1) for kv in args.conf or [])
        # the job's output is captured: bad input is ONE line (below), any other failure shows the output's tail
        done = submit_plan(where(args.snapshot), where(args.out), str(request_file), master=args.master, conf=conf,
                           partitions=args.partitions, environment=environment, capture=True)
    if done.returncode == JOB_BAD_INPUT:
        error = plan_store.read(ERROR_FILE)
        text = error.decode("utf-8", "replace").strip() if error is not None else _job_error_line(done.stderr)
        raise ConfigurationError(text or "the Spark plan job refused its input (exit code 2) without saying why")
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
        print(f"{tail}\nerror: the Spark plan job failed (exit code {done.returncode}); its output's last lines are "
              "above", file=sys.stderr)
        return None
    summary: dict[str, Any] = read_metrics(plan_store)["summary"]
    return summary


def _job_error_line(output: str) -> str:
    """The plan job's own "plan_job: ..." line from its output (spark-submit adds JVM chatter around it)."""
    lines = [line.strip() for line in output.splitlines() if line.startswith("plan_job: ")]
    return lines[-1].removeprefix("plan_job: ").removeprefix("no plan: ") if lines else ""


def cmd_metrics(args: argparse.Namespace) -> int:
    from airflow_kafka_reassign.core.planner import compute_metrics
    from airflow_kafka_reassign.core.records.plan_io import read_plan
    from airflow_kafka_reassign.core.records.snapshot_io import read_snapshot
    from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan
    from airflow_kafka_reassign.plan_storage import is_local, open_plan

    snapshot = read_snapshot(_readable(args.snapshot, args))
    plan_path = Path(args.plan)
    if not is_local(args.plan):
        plan = read_plan(open_plan(args.plan, conn_id=args.storage_conn_id))
    elif plan_path.is_dir():
        plan = read_plan(plan_path)
    else:
        current = {p.tp: p.target_replicas for p in snapshot.partitions}
        plan = ReassignmentPlan.from_kafka_json(plan_path.read_text(encoding="utf-8"), current,
                                                allow_rf_change=args.allow_rf_change, log_dirs="ignore")
    removed = args.removed or ()
    before = compute_metrics(snapshot, removed=removed)
    after = compute_metrics(snapshot, plan, removed=removed)
    moves = sum(m.replica_moves for m in plan.moves)
    leaders = sum(1 for m in plan.moves if m.leader_changes)
    print(json.dumps({
        "partitions_moved": len(plan), "replica_moves": moves, "leader_changes": leaders,
        "before": before.summary(), "after": after.summary(),
    }, indent=1))
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="airflow-kafka-reassign", description=__doc__.split("\n\n")[0])
    ap.add_argument("--storage-conn-id", help="Airflow connection of the object storage that s3://... paths use")
    sub = ap.add_subparsers(dest="command", required=True)

    s = sub.add_parser("snapshot", help="snapshot a cluster into a snapshot directory (docs/formats.md)")
    s.add_argument("--bootstrap-servers", required=True)
    s.add_argument("--command-config", help="librdkafka key=value file with security settings")
    s.add_argument("--out", required=True, help="snapshot directory to write")
    s.add_argument("--sizes", action="store_true", help="also record replica sizes (DescribeLogDirs)")
    s.add_argument("--sample-window-s", type=_window, nargs="?", const=30.0, default=0.0, metavar="SECONDS",
                   help="also estimate each partition's bytes-in rate from two reads of the replicas' sizes this "
                        "many seconds apart (alone: 30; default: no rates). An estimate: retention and compaction "
                        "during the window skew it")
    s.add_argument("--log-dirs", action="store_true",
                   help="also record each broker's log dirs and their replicas (DescribeLogDirs, log_dirs.json): what "
                        "the goals remove-disks and rebalance-disks plan from")
    s.add_argument("--timeout", type=float, default=30.0, help="bound on each request to the cluster (s)")
    s.add_argument("--settle-timeout", type=float, default=DEFAULT_SETTLE_S, metavar="SECONDS",
                   help="how long to keep reading while the cluster's metadata settles (topics created a moment "
                        f"ago not yet known to every broker) before failing with what is missing (default {DEFAULT_SETTLE_S:g})")
    s.set_defaults(func=cmd_snapshot)

    p = sub.add_parser("plan", help="plan a reassignment from a snapshot (Spark job)")
    p.add_argument("--snapshot", required=True)
    p.add_argument("--goal", choices=["rebalance", "add-brokers", "remove-brokers", "heal", "offload", "remove-disks",
                                      "rebalance-disks"],
                   default="rebalance")
    p.add_argument("--brokers", type=_brokers, help="broker ids added or removed, e.g. 7,8")
    p.add_argument("--topic-include", action="append", help="regex (full match); repeatable")
    p.add_argument("--topic-exclude", action="append", help="regex (full match); repeatable")
    p.add_argument("--rf-change", action="append", help="TOPIC=RF: change this topic's replication factor")
    p.add_argument("--log-dir", action="append", metavar="BROKER:/PATH",
                   help="goal remove-disks: a log dir to empty, as DescribeLogDirs reports it (1:/var/lib/kafka/data-2); "
                        "repeatable. Needs a snapshot taken with --log-dirs")
    p.add_argument("--heal-targets", help="JSON file {\"topic-partition\": rf} (GuardedCreatePartitions writes it)")
    p.add_argument("--include-internal", action="store_true")
    p.add_argument("--include-in-flight", action="store_true")
    p.add_argument("--use-sizes", action="store_true")
    p.add_argument("--no-rack-aware", action="store_true")
    p.add_argument("--max-leader-spread", type=int)
    p.add_argument("--capacity", help="capacity document (JSON/YAML): disk bytes per broker; balances disk share; "
                                      "'cluster': each broker's disk as it reports it (a snapshot taken with --sizes)")
    p.add_argument("--disk-cap", type=float, help="no broker above this share of its disk after the plan (0.85)")
    p.add_argument("--disk-tolerance", type=float,
                   help="disk share within this of the mean (0.02); goal rebalance-disks: each log dir's share of its "
                        "volume within this of its broker's mean")
    p.add_argument("--offload-threshold", type=float, help="goal offload: brokers above this share shed down to it")
    p.add_argument("--ingress-tolerance", type=float,
                   help="with network_in capacities and a snapshot with bytes-in rates: bytes-in share within this "
                        "of the mean (0.05)")
    p.add_argument("--out", required=True, help="plan directory to write")
    p.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    p.add_argument("--conf", action="append", help="extra Spark conf KEY=VALUE; repeatable")
    p.add_argument("--partitions", type=int, help="tasks of the per-topic stages (default 4 per core)")
    p.add_argument("--no-spark", action="store_true", help="plan in this process (small clusters, tests)")
    p.set_defaults(func=cmd_plan)

    m = sub.add_parser("metrics", help="balance metrics of a snapshot before and after a plan")
    m.add_argument("--snapshot", required=True)
    m.add_argument("--plan", required=True, help="plan directory, or a Kafka reassignment JSON file")
    m.add_argument("--removed", type=_brokers, help="brokers being removed (not counted as live)")
    m.add_argument("--allow-rf-change", action="store_true", help="a Kafka JSON file may change RFs")
    m.set_defaults(func=cmd_metrics)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ConfigurationError, ValueError, FileNotFoundError, StoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KafkaReassignError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
