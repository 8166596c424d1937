"""Protocol request classes the adapter sends itself: those kafka-python lacks (schemas in :mod:`.messages`), and
kafka-python's own DescribeTopicPartitions (the adapter pages several topics at once with it)."""

from __future__ import annotations

from kafka.protocol.admin import DescribeTopicPartitionsRequest
from kafka.protocol.api_message import ApiMessage

_SCHEMAS = "airflow_kafka_reassign.kafka.messages"


class UnregisterBrokerRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
    """UnregisterBroker (api key 64, KIP-631): remove a shut-down broker's registration (KRaft)."""


class UnregisterBrokerResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[misc,call-arg]
    """The controller's answer: ``error_code`` (0, ``BROKER_ID_NOT_REGISTERED`` ...) and ``error_message``."""


#: DescribeTopicPartitions (api key 75, KIP-966's EligibleLeaderReplicas and LastKnownElr): kafka-python's own class.
__all__ = ["DescribeTopicPartitionsRequest", "UnregisterBrokerRequest", "UnregisterBrokerResponse"]
