"""The layering of architecture.md, enforced: a pure core, one home for Kafka clients."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "airflow_kafka_reassign"
KAFKA_CLIENTS = {"confluent_kafka", "kafka"}
FORBIDDEN_IN_CORE = {"airflow", "pyspark", *KAFKA_CLIENTS}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", sorted((PKG / "core").rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_core_is_pure(path):
    assert not imported_roots(path) & FORBIDDEN_IN_CORE


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(PKG.rglob("*.py")) if p.relative_to(PKG).parts[0] != "kafka"],
    ids=lambda p: str(p.relative_to(PKG)),
)
def test_only_the_kafka_package_imports_a_kafka_client(path):
    assert not imported_roots(path) & KAFKA_CLIENTS


def test_test_modules_have_unique_basenames():
    """tests/ has no __init__.py (pytest's rootdir-relative imports): two test files of the same
    name in different folders break collection of the whole suite ("import file mismatch")."""
    tests = Path(__file__).resolve().parents[1]
    seen: dict[str, list[str]] = {}
    for path in tests.rglob("*.py"):
        if path.name != "conftest.py" and "__pycache__" not in path.parts:
            seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_test_modules_do_not_import_each_other():
    """Shared test helpers live in helper modules (kafka_helpers.py, dagrun.py): a test module
    imported by another runs its module-level code and fixtures twice."""
    tests = Path(__file__).resolve().parents[1]
    offenders = {
        str(path.relative_to(tests)): sorted(r for r in imported_roots(path) if r.startswith("test_"))
        for path in tests.rglob("test_*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def imported_modules(path: Path) -> set[str]:
    mods = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods.add(node.module)
            mods.update(f"{node.module}.{a.name}" for a in node.names)
    return mods


SHELLS = [p for d in ("operators", "sensors", "triggers") for p in sorted((PKG / d).glob("*.py"))]


@pytest.mark.parametrize("path", SHELLS, ids=lambda p: str(p.relative_to(PKG)))
def test_operators_sensors_and_triggers_do_not_import_each_other(path):
    """A shared base module (operators/_base.py) holds what they share; no operator imports another operator."""
    own = f"airflow_kafka_reassign.{path.parent.name}.{path.stem}"
    others = {m for m in imported_modules(path) if m.startswith("airflow_kafka_reassign.operators.")
              and not m.startswith("airflow_kafka_reassign.operators._base") and not m.startswith(own)}
    assert others == set()


@pytest.mark.parametrize("path", [p for p in [*SHELLS, PKG / "wait.py"] if p.is_file()],
                         ids=lambda p: str(p.relative_to(PKG)))
def test_only_the_execution_session_loops(path):
    """One run loop: the operators, the sensor, the trigger and the wait tick the ExecutionSession (through
    ``run``, ``cancel_then_roll_back`` or ``ExecutionSession``); none calls the engine's step or governor itself."""
    forbidden = {f"airflow_kafka_reassign.core.execution.{name}" for name in ("step", "RunGovernor")} | {
        "airflow_kafka_reassign.core.execution.iteration", "airflow_kafka_reassign.core.execution.governor"}
    assert not imported_modules(path) & forbidden


@pytest.mark.parametrize("path", sorted((PKG / "core").rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_the_core_asks_the_port_not_the_adapter(path):
    """What the cluster supports is a method of the port (ClusterAdmin), never probed with getattr, and no Kafka
    api key is spelled in the core."""
    text = path.read_text()
    assert "getattr(admin" not in text and "api_version(" not in text and "_KEY = " not in text


def test_the_second_observer_shares_no_code_with_the_product():
    """tests/integration/observers.py reads disks and broker configs apart from the adapter (issue 38): a parsing
    mistake in ``KafkaClusterAdmin`` must not be shared by the test that judges it, nor can the project's other
    test helpers (which import it) be its base."""
    observers = Path(__file__).resolve().parents[1] / "integration" / "observers.py"
    assert not imported_roots(observers) & {"airflow_kafka_reassign", "kafka_helpers", "dagrun"}
