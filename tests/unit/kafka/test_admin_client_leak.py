"""kafka-python's admin client leaves its IO thread running when its bootstrap fails (it then
retries and logs "Connection failed" for the life of the process); ours stops it."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from kafka import errors as kp_errors

from airflow_kafka_reassign.kafka.admin import SafeKafkaAdminClient


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_failed_bootstrap_leaves_no_thread_behind():
    before = set(threading.enumerate())
    with pytest.raises(kp_errors.KafkaTimeoutError):  # what kafka-python 3.0 raises
        SafeKafkaAdminClient(bootstrap_servers=f"127.0.0.1:{closed_port()}", bootstrap_timeout_ms=1000,
                             request_timeout_ms=1000)
    deadline = time.monotonic() + 10
    while (left := [t for t in set(threading.enumerate()) - before if t.is_alive()]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left


def test_an_unreachable_cluster_on_the_kafka_python_side_is_the_clear_error():
    from airflow_kafka_reassign.exceptions import ClusterUnreachableError
    from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

    port = closed_port()
    with KafkaClusterAdmin({"bootstrap.servers": f"127.0.0.1:{port}"}, timeout_s=1) as admin, \
            pytest.raises(ClusterUnreachableError, match=f"127.0.0.1:{port}.*check the address"):
        admin.list_reassignments()


def test_threads_sharing_an_admin_create_one_kafka_python_client(monkeypatch):
    """Lazy creation under a lock: two threads asking at once must not both create a client
    (the one overwritten would keep its IO thread running)."""
    import airflow_kafka_reassign.kafka.admin.client as admin_module  # where the clients are made
    from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

    made: list[object] = []
    gate = threading.Barrier(4)

    class Slow:
        def __init__(self, **_kw: object) -> None:
            made.append(self)
            time.sleep(0.2)  # a bootstrap takes a while: the others would come in meanwhile

        def close(self) -> None:
            pass

    monkeypatch.setattr(admin_module, "SafeKafkaAdminClient", Slow)
    admin = KafkaClusterAdmin({"bootstrap.servers": "127.0.0.1:9"})
    got: list[object] = []

    def ask() -> None:
        gate.wait()
        got.append(admin._kafka_python())  # noqa: SLF001 (the lazy creation under test)

    workers = [threading.Thread(target=ask) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(made) == 1 and all(g is made[0] for g in got)
