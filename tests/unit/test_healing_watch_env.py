"""The deployment's knobs of every healing DAG's watch (``AKR_WATCH_*``, airflow_kafka_reassign.healing.WATCH_ENV):
merged over the DAG file's arguments, carried into the trigger's serialized arguments (what the triggerer rebuilds
it from), and a value that does not parse fails the DAG's import naming the variable."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from airflow_kafka_reassign.healing import incident_asset, watch_settings_from_env

EXAMPLE = Path(__file__).resolve().parents[2] / "example_dags" / "kafka_heal_broker_down.py"


def test_the_environment_is_merged_over_the_dag_files_watch_per_kind():
    env = {"AKR_WATCH_DWELL_S": '{"broker_down": 90}', "AKR_WATCH_RECOVERY_S": '{"log_dir_full": 60}',
           "AKR_WATCH_POLL_INTERVAL_S": "5", "AKR_WATCH_STATE_URI": "s3://b/p", "AKR_WATCH_STORAGE_CONN_ID": "aws",
           "AKR_WATCH_REFIRE_AFTER_S": "120"}
    got = watch_settings_from_env({"dwell_s": {"broker_down": 600, "empty_broker": 900}, "imbalance_band": 0.3}, env)
    assert got == {"dwell_s": {"broker_down": 90, "empty_broker": 900}, "recovery_s": {"log_dir_full": 60},
                   "poll_interval_s": 5.0, "state_uri": "s3://b/p", "storage_conn_id": "aws", "imbalance_band": 0.3,
                   "refire_after_s": 120.0}
    assert watch_settings_from_env({"dwell_s": {"broker_down": 600}}, {}) == {"dwell_s": {"broker_down": 600}}


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("AKR_WATCH_DWELL_S", "90", "not a JSON object"),
    ("AKR_WATCH_RECOVERY_S", "{broker_down: 1}", "does not parse"),
    ("AKR_WATCH_POLL_INTERVAL_S", "soon", "a number of seconds"),
])
def test_a_value_that_does_not_parse_names_the_variable(variable, value, message):
    with pytest.raises(ValueError, match=message) as e:
        watch_settings_from_env({}, {variable: value})
    assert variable in str(e.value)


def test_the_example_dag_carries_the_deployments_knobs_into_its_watch(monkeypatch):
    monkeypatch.setenv("AKR_WATCH_DWELL_S", '{"broker_down": 120}')
    monkeypatch.setenv("AKR_WATCH_POLL_INTERVAL_S", "3")
    asset = runpy.run_path(str(EXAMPLE))["BROKER_DOWN"]
    kwargs = asset.watchers[0].trigger.serialize()[1]
    assert kwargs["dwell_s"] == {"broker_down": 120} and kwargs["poll_interval_s"] == 3.0
    assert kwargs["state_uri"] is None  # the plan storage's Variables, read in the triggerer
    monkeypatch.delenv("AKR_WATCH_DWELL_S")
    monkeypatch.delenv("AKR_WATCH_POLL_INTERVAL_S")
    kwargs = runpy.run_path(str(EXAMPLE))["BROKER_DOWN"].watchers[0].trigger.serialize()[1]
    assert kwargs["dwell_s"] == {"broker_down": 600} and kwargs["poll_interval_s"] == 30.0


def test_an_unknown_kind_in_the_environment_fails_the_import():
    with pytest.raises(ValueError, match="'broker_gone' is not an incident kind"):
        incident_asset(["broker_down"], **watch_settings_from_env({}, {"AKR_WATCH_DWELL_S": '{"broker_gone": 1}'}))
