"""Provider registration: the entry point, the provider dict, and the real ``airflow`` CLI."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_kafka_reassign.get_provider_info import get_provider_info

ENTRY_POINT = "airflow_kafka_reassign.get_provider_info:get_provider_info"
AIRFLOW = Path(sys.executable).with_name("airflow")


def normalise(name: str) -> str:
    """PEP 503 normalisation, as Airflow compares provider names."""
    return re.sub(r"[-_.]+", "-", name).lower()


def our_entry_point() -> importlib.metadata.EntryPoint:
    matches = [
        ep
        for ep in importlib.metadata.entry_points(group="apache_airflow_provider")
        if ep.value == ENTRY_POINT
    ]
    assert len(matches) == 1, f"expected one apache_airflow_provider entry point, got {matches}"
    return matches[0]


def test_package_name_is_the_normalised_distribution_name():
    ep = our_entry_point()
    assert ep.dist is not None
    assert get_provider_info()["package-name"] == normalise(ep.dist.metadata["Name"])


def test_entry_point_loads_get_provider_info():
    assert our_entry_point().load() is get_provider_info


def test_version_matches_the_distribution():
    assert get_provider_info()["versions"][0] == importlib.metadata.version("airflow-kafka-reassign")


def test_provider_info_matches_airflows_runtime_schema():
    import airflow
    import jsonschema

    schema_path = Path(airflow.__file__).with_name("provider_info.schema.json")
    jsonschema.validate(get_provider_info(), json.loads(schema_path.read_text()))


def test_does_not_register_the_kafka_connection_type_twice():
    """apache-airflow-providers-apache-kafka owns ``kafka``; registering it again would make
    our hook the one Airflow uses for every kafka connection (sorted first) and warn."""
    info = get_provider_info()
    assert "connection-types" not in info
    assert "hook-class-names" not in info


def test_every_listed_module_imports():
    info = get_provider_info()
    integrations = {i["integration-name"] for i in info.get("integrations", [])}
    for section in ("hooks", "operators", "sensors", "triggers", "transfers"):
        for entry in info.get(section, []):
            assert entry["integration-name"] in integrations
            for module in entry["python-modules"]:
                importlib.import_module(module)


def test_airflow_providers_manager_sees_the_provider():
    from airflow.providers_manager import ProvidersManager

    providers = ProvidersManager().providers
    assert "airflow-kafka-reassign" in providers
    assert providers["airflow-kafka-reassign"].version == "0.1.0"


CLI_COMMANDS = {
    "list": ("providers", "list", "--output", "json"),
    "get": ("providers", "get", "airflow-kafka-reassign", "--output", "json"),
    "hooks": ("providers", "hooks", "--output", "json"),
}


@pytest.fixture(scope="module")
def airflow_cli(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    """Run the real ``airflow`` CLI commands once, concurrently (each takes 15-40 s to start)."""
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path_factory.mktemp("airflow-home")),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # Show every warning the providers manager logs.
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }
    # Initialise AIRFLOW_HOME once so the concurrent commands do not race to write airflow.cfg.
    subprocess.run(
        [str(AIRFLOW), "config", "get-value", "core", "dags_folder"],
        env=env, capture_output=True, text=True, timeout=300, check=True,
    )
    procs = {
        name: subprocess.Popen(
            [str(AIRFLOW), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name, args in CLI_COMMANDS.items()
    }
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return results


def parse_json_output(result: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    # Airflow < 3.1 logs "[date] {file} INFO - ..." lines on stdout before the JSON
    return json.loads(next(line for line in result.stdout.splitlines() if line.startswith("[{") or line == "[]"))


def assert_no_complaint_about_us(result: subprocess.CompletedProcess[str]) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for line in output.splitlines():
        lowered = line.lower()
        if "warn" in lowered or "error" in lowered or "traceback" in lowered:
            assert "reassign" not in lowered, line
            assert "connection_type 'kafka'" not in lowered, line
            assert "connection type 'kafka'" not in lowered, line


def test_airflow_providers_list_shows_the_provider(airflow_cli):
    result = airflow_cli["list"]
    assert_no_complaint_about_us(result)
    providers = {p["package_name"]: p for p in parse_json_output(result)}
    assert providers["airflow-kafka-reassign"]["version"] == "0.1.0"
    assert "apache-airflow-providers-apache-kafka" in providers


def test_airflow_providers_get_shows_the_provider(airflow_cli):
    result = airflow_cli["get"]
    assert_no_complaint_about_us(result)
    assert "airflow-kafka-reassign" in result.stdout
    assert "0.1.0" in result.stdout


def test_kafka_connection_type_still_belongs_to_the_apache_kafka_provider(airflow_cli):
    result = airflow_cli["hooks"]
    assert_no_complaint_about_us(result)
    hooks = {h["connection_type"]: h for h in parse_json_output(result)}
    assert hooks["kafka"]["package_name"] == "apache-airflow-providers-apache-kafka"


def test_the_report_plugin_is_an_airflow_plugin_entry_point():
    # provider-info "plugins" is only listed by `airflow providers`; Airflow loads plugins from this group
    eps = [ep for ep in importlib.metadata.entry_points(group="airflow.plugins") if ep.name == "kafka_reassign"]
    assert len(eps) == 1
    plugin = eps[0].load()
    assert plugin.name == "kafka_reassign" and plugin.fastapi_apps[0]["url_prefix"] == "/kafka-reassign"
