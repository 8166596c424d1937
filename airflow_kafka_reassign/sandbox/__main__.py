"""Command line of the Kafka sandbox: ``python -m airflow_kafka_reassign.sandbox COMMAND``.

Commands (``--dir`` defaults to ``$AKR_SANDBOX_DIR``)::

    up --dir DIR [--brokers 5] [--racks 3] [--sasl] [--tls] [--acls] [--kafka-version V] [--timeout 120]
       [--log-dirs 1] [--zookeeper] [--object-store]
        start a fresh cluster; prints ONE JSON line (bootstrap servers, brokers, racks, pids);
        --zookeeper runs ZooKeeper-mode Kafka (--kafka-version 2.8 to 3.9, 3.9.1 by default; the provider refuses
        below 3.0) and a ZooKeeper server in DIR/zookeeper instead of KRaft ("zookeeper_connect" in the JSON);
        --tls adds an SSL listener (its CA certificate under "tls_ca"), --acls (with --sasl) the
        StandardAuthorizer and the limited SCRAM users sandbox-limited and sandbox-nobody;
        --log-dirs N gives every broker N log dirs (KRaft JBOD; each broker's are under "log_dirs");
        with --object-store also an S3-compatible store (S3Proxy) in DIR/objectstore: its
        endpoint, bucket and the path of its credentials file (mode 600) under "object_store"
    down --dir DIR                     stop every node and the object store (idempotent)
    status --dir DIR                   JSON: each node alive or not
    stop-broker --dir DIR ID           graceful stop of one node, waits for the exit
    start-broker --dir DIR ID          start it again, waits until it is registered
    kafka-reassign-partitions --dir DIR [--] ARGS...
        Apache Kafka's reference tool with --bootstrap-server prepended (unless ARGS has one);
        its stdout, stderr and exit status pass through

Only ``up`` and ``status`` write to stdout; logs go to stderr. Exit status 1 on errors.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from airflow_kafka_reassign.sandbox.cluster import Sandbox
from airflow_kafka_reassign.sandbox.errors import SandboxError
from airflow_kafka_reassign.sandbox.maven import VERSION_ENV, KafkaFetchError
from airflow_kafka_reassign.sandbox.objectstore import ObjectStoreSandbox


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_kafka_reassign.sandbox",
        description="A real local Apache Kafka cluster, KRaft or ZooKeeper mode (jars fetched from Maven Central).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    default_dir = os.environ.get("AKR_SANDBOX_DIR")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument(
            "--dir",
            default=default_dir,
            required=default_dir is None,
            help="sandbox directory (default: $AKR_SANDBOX_DIR)",
        )
        return p

    up = command("up", "create and start a fresh cluster; print one JSON line")
    up.add_argument("--brokers", type=int, default=5, help="number of nodes (default 5)")
    up.add_argument(
        "--racks", type=int, default=3, help="racks r1..rR assigned round-robin; 0: no broker.rack"
    )
    up.add_argument("--sasl", action="store_true", help="add a SASL_PLAINTEXT SCRAM-SHA-512 listener")
    up.add_argument("--tls", action="store_true",
                    help="add an SSL listener (self-signed CA and broker certificate made once in DIR/tls)")
    up.add_argument("--acls", action="store_true",
                    help="with --sasl: StandardAuthorizer; ANONYMOUS and sandbox-admin are super users, "
                         "sandbox-limited may only describe, sandbox-nobody has no ACL")
    up.add_argument("--kafka-version", help=f"Kafka >= 3.9, KIP-860 from 4.1 (default: ${VERSION_ENV} or newest 4.x)")
    up.add_argument("--timeout", type=float, default=120.0, help="readiness timeout in s (120)")
    up.add_argument("--log-dirs", type=int, default=1,
                    help="log dirs per broker (default 1; N > 1: KRaft JBOD, data-1..data-N, the metadata log in the first)")
    up.add_argument("--zookeeper", action="store_true",
                    help="ZooKeeper-mode Kafka 3.x brokers and a ZooKeeper server instead of KRaft "
                         "(--kafka-version 2.8-3.9, default 3.9.1; the provider needs 3.0+)")
    up.add_argument("--object-store", action="store_true",
                    help="also start an S3-compatible object store (S3Proxy from Maven Central) in DIR/objectstore")

    down = command("down", "stop every node (idempotent)")
    down.add_argument("--timeout", type=float, default=20.0, help="SIGKILL after this many s")
    command("status", "print each node's process state as JSON")
    stop = command("stop-broker", "stop one node gracefully and wait for its exit")
    stop.add_argument("id", type=int)
    stop.add_argument("--timeout", type=float, default=60.0)
    start = command("start-broker", "start one node again and wait until it is registered")
    start.add_argument("id", type=int)
    start.add_argument("--timeout", type=float, default=120.0)
    tool = command(
        "kafka-reassign-partitions",
        "run Apache Kafka's kafka-reassign-partitions against the sandbox (args after --)",
    )
    tool.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the tool")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit status."""
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command != "kafka-reassign-partitions":
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="sandbox: %(message)s",
    )
    try:
        if args.command == "up":
            info = Sandbox(args.dir).up(
                brokers=args.brokers,
                racks=args.racks,
                sasl=args.sasl,
                kafka_version=args.kafka_version,
                timeout=args.timeout,
                tls=args.tls,
                acls=args.acls,
                log_dirs=args.log_dirs,
                zookeeper=args.zookeeper,
            )
            if args.object_store:
                info["object_store"] = ObjectStoreSandbox(os.path.join(args.dir, "objectstore")).up()
            print(json.dumps(info), flush=True)
        elif args.command == "down":
            ObjectStoreSandbox(os.path.join(args.dir, "objectstore")).down()
            Sandbox(args.dir).down(timeout=args.timeout)
        elif args.command == "status":
            print(json.dumps(Sandbox.load(args.dir).status()), flush=True)
        elif args.command == "stop-broker":
            Sandbox.load(args.dir).stop_broker(args.id, timeout=args.timeout)
        elif args.command == "start-broker":
            Sandbox.load(args.dir).start_broker(args.id, timeout=args.timeout)
        elif args.command == "kafka-reassign-partitions":
            tool_args = [*unknown, *args.args]  # options before `--` argparse did not know
            if "--" in tool_args:
                tool_args.remove("--")
            return Sandbox.load(args.dir).reassign_tool(tool_args, capture=False, timeout=None).returncode
    except (SandboxError, KafkaFetchError) as exc:
        logging.getLogger(__name__).error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
