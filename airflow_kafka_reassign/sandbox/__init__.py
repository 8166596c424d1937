"""A real local Apache Kafka (KRaft) cluster, fetched from Maven Central, for demos and tests.

Python::

    from airflow_kafka_reassign.sandbox import Sandbox

    sandbox = Sandbox("/tmp/kafka-sandbox")
    info = sandbox.up(brokers=5, racks=3, sasl=True)  # blocks until the cluster is usable
    info["bootstrap_servers"]                        # "127.0.0.1:p1,..."
    sandbox.stop_broker(4); sandbox.start_broker(4)
    sandbox.reassign_tool(["--list"], check=True)    # Apache Kafka's kafka-reassign-partitions
    sandbox.down()

Command line: ``python -m airflow_kafka_reassign.sandbox --help``.

The cluster is :mod:`.cluster` (the :class:`Sandbox` facade), :mod:`.nodes` (each node's configuration and files) and
:mod:`.processes` (the JVMs as processes); docs/sandbox.md lists every module.
"""

from __future__ import annotations

from airflow_kafka_reassign.sandbox.cluster import Sandbox
from airflow_kafka_reassign.sandbox.errors import SandboxError
from airflow_kafka_reassign.sandbox.maven import KafkaDistribution, KafkaFetchError
from airflow_kafka_reassign.sandbox.nodes import rack_of
from airflow_kafka_reassign.sandbox.waiting import wait_until

__all__ = ["KafkaDistribution", "KafkaFetchError", "Sandbox", "SandboxError", "rack_of", "wait_until"]
