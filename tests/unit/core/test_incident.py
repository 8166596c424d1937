"""The incident payload: a stable id per occurrence, JSON only, read back equal, other versions refused."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_kafka_reassign.core.healing.incident import Incident, LogDirRef

T = datetime(2026, 12, 2, 7, 0, 5, 123, tzinfo=timezone.utc)


def test_the_same_occurrence_has_the_same_id_whenever_it_is_seen_again():
    first = Incident.of("broker_down", cluster="prod", brokers=[5, 4], first_seen=T, last_seen=T)
    later = Incident.of("broker_down", cluster="prod", brokers=[4, 5], first_seen=T, last_seen=T + timedelta(minutes=9))
    assert first.id == later.id == "prod/broker_down/b4,b5/20261202T070005Z"
    again = Incident.of("broker_down", cluster="prod", brokers=[4, 5], first_seen=T + timedelta(hours=1), last_seen=T)
    assert again.id != first.id  # cleared and back later: a new occurrence


def test_the_payload_is_json_and_reads_back_equal():
    incident = Incident.of("log_dir_full", cluster="prod", dirs=[LogDirRef(broker=2, path="/data/1")],
                           first_seen=T, last_seen=T, detail={"used_share": 0.93})
    payload = json.loads(json.dumps(incident.to_payload()))
    assert payload["version"] == 1 and payload["dirs"] == [{"broker": 2, "path": "/data/1"}]
    assert Incident.from_payload(payload) == incident
    assert incident.subject == "d2:/data/1"


def test_a_payload_of_another_version_or_a_naive_time_is_refused_naming_the_fix():
    payload = Incident.of("empty_broker", cluster="prod", brokers=[6], first_seen=T, last_seen=T).to_payload()
    with pytest.raises(ValueError, match="version 2 is not 1.*upgrade both"):
        Incident.from_payload({**payload, "version": 2})
    with pytest.raises(ValueError, match="no time zone"):
        Incident.of("empty_broker", cluster="prod", brokers=[6], first_seen=T.replace(tzinfo=None), last_seen=T)
