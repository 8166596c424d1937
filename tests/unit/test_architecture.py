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
