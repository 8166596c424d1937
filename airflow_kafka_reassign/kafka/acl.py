"""What a request needs from Kafka's authorizer, so that a refusal can name the ACL that grants it."""

from __future__ import annotations

from typing import NamedTuple


class Refused(NamedTuple):
    """What a request needs from the authorizer, to name it when the cluster refuses it: the ACL
    ``operation`` (Kafka's name: ``ALTER``, ``ALTER_CONFIGS`` ...) on ``resource`` for ``request``, and
    the ``kafka-acls`` options that grant it."""

    operation: str
    resource: str
    request: str
    grant: str

    @classmethod
    def on_cluster(cls, operation: str, request: str) -> Refused:
        option = "".join(w.capitalize() for w in operation.split("_"))
        return cls(operation, "the cluster", request, f"--operation {option} --cluster")

    @classmethod
    def on_topic(cls, operation: str, topic: str, request: str) -> Refused:
        option = "".join(w.capitalize() for w in operation.split("_"))
        return cls(operation, f"topic {topic!r}", request, f"--operation {option} --topic {topic}")
