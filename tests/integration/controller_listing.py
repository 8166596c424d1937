"""The controller's own listing of reassignments in flight, read by a client of the test's own (kafka-python), for
the claims "moves were in flight at the fault" and "no partition was submitted twice".

It shares no code with the product (no import of ``airflow_kafka_reassign``): the project's journal says what the
project believes it sent; the controller says what it was asked to do.

:class:`Episodes` samples ListPartitionReassignments in a thread and counts, per partition, its separate in-flight
episodes and their targets: a partition submitted once shows one episode; submitted again after its move finished,
two. (A move that starts and ends between two samples is not seen at all: the tests that use it move each partition
for several seconds at a throttle, against a sample every ``interval`` s.) A sample that fails (a broker restarting)
is skipped, never read as "nothing in flight": it cannot split an episode in two.

    with Episodes(config, partitions) as episodes:
        ...  # the run, the fault
    assert episodes.targets() == {tp: [target] for tp, target in plan}
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any

from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

Partition = tuple[str, int]


def admin_client(config: dict[str, Any]) -> KafkaAdminClient:
    """A kafka-python admin client of the sandbox's plaintext listener (``sandbox.client_config()``)."""
    if config.get("security.protocol", "PLAINTEXT").upper() != "PLAINTEXT":
        raise ValueError("controller_listing reads through the plaintext listener: pass sandbox.client_config()")
    return KafkaAdminClient(bootstrap_servers=config["bootstrap.servers"].split(","), request_timeout_ms=10_000,
                            client_id="test-controller-listing")


def in_flight(client: KafkaAdminClient, partitions: Collection[Partition]) -> dict[Partition, tuple[int, ...]]:
    """The partitions of ``partitions`` the controller lists as being reassigned: ``{(topic, p): target replicas}``
    (the target: the listed replicas without those being removed)."""
    listed = client.list_partition_reassignments([TopicPartition(t, p) for t, p in partitions], timeout_ms=10_000)
    return {(tp.topic, tp.partition): tuple(r for r in v["replicas"] if r not in set(v["removing_replicas"]))
            for tp, v in listed.items()}


class Episodes:
    """Samples the controller's listing of ``partitions`` every ``interval`` s while the ``with`` block runs."""

    def __init__(self, config: dict[str, Any], partitions: Collection[Partition], *, interval: float = 0.2) -> None:
        self._config = dict(config)
        self.partitions = sorted(set(partitions))
        self.interval = interval
        self._episodes: dict[Partition, list[tuple[int, ...]]] = {tp: [] for tp in self.partitions}
        self._open: set[Partition] = set()
        self.samples = 0
        self.failed_samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controller-listing", daemon=True)

    def __enter__(self) -> Episodes:
        self._client = admin_client(self._config)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        self._client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                now = in_flight(self._client, self.partitions)
            except Exception:  # noqa: BLE001 - a broker restarting: this sample says nothing
                self.failed_samples += 1
            else:
                self.samples += 1
                for tp, target in now.items():
                    if tp not in self._open:
                        self._episodes[tp].append(target)
                        self._open.add(tp)
                self._open &= set(now)
            self._stop.wait(self.interval)

    def targets(self) -> dict[Partition, list[tuple[int, ...]]]:
        """Each partition's in-flight episodes, by their targets, in order: ``[target]`` for a move sent once."""
        assert self.samples > 0, f"no sample of the controller's listing succeeded ({self.failed_samples} failed)"
        return {tp: list(v) for tp, v in self._episodes.items()}
