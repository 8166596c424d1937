"""The approval record and its checks (pure)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_kafka_reassign.core.guards.approval import ApprovalRecord, check_approval, check_snapshot_age
from airflow_kafka_reassign.exceptions import ConfigurationError, GuardRefusedError

NOW = datetime(2026, 11, 22, 9, tzinfo=timezone.utc)
RECORD = {"approved": True, "plan_sha256": "sha256:ab", "snapshot_taken_at": "2026-11-22T08:00:00+00:00"}


def test_the_approved_plan_passes():
    check_approval(ApprovalRecord.parse(RECORD), plan_sha256="sha256:ab", now=NOW, max_snapshot_age_s=7200)


@pytest.mark.parametrize("text", [str(RECORD), '{"approved": true, "plan_sha256": "sha256:ab"}'])
def test_rendered_text_is_parsed(text):
    assert ApprovalRecord.parse(text).plan_sha256 == "sha256:ab"


@pytest.mark.parametrize(("value", "message"), [
    (None, "did the approval task run"), ("nonsense", "not the approval task's result"),
    ({"approved": True}, "plan_sha256"),
])
def test_what_is_not_an_approval_is_named(value, message):
    with pytest.raises(ConfigurationError, match=message):
        ApprovalRecord.parse(value)


def test_another_plan_is_refused_with_both_hashes():
    with pytest.raises(GuardRefusedError, match="approved sha256:ab, now sha256:cd.*re-plan"):
        check_approval(ApprovalRecord.parse(RECORD), plan_sha256="sha256:cd", now=NOW)


def test_snapshot_age_bound():
    check_snapshot_age("2026-11-22T08:00:00Z", now=NOW, max_snapshot_age_s=3600)
    with pytest.raises(GuardRefusedError, match="60 min ago.*max_snapshot_age \\(59 min\\)"):
        check_snapshot_age("2026-11-22T08:00:00Z", now=NOW, max_snapshot_age_s=59 * 60)
    with pytest.raises(GuardRefusedError, match="unknown"):
        check_snapshot_age(None, now=NOW, max_snapshot_age_s=60)
