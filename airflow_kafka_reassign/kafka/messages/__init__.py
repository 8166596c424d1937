"""Kafka protocol messages that kafka-python does not define, as kafka-python message schemas (JSON).

kafka-python builds a request or response class from a JSON schema of Kafka's message format
(``class X(ApiMessage, load_json=<package>)`` reads ``X.json`` from that package). The schemas here
are written for this project from Kafka's protocol description: only the fields and versions the
adapter uses.

* ``UnregisterBrokerRequest`` / ``UnregisterBrokerResponse`` (api key 64, KRaft, Kafka 3.0+;
  version 0, flexible): ask the controller to remove the registration of a broker that is shut
  down. kafka-python 3.0 has no class for it.
"""
