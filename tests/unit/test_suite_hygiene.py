"""Rules the suite keeps about itself, read from its source (issue 38): checks that cannot vanish or turn into skips.

* A benchmark stops with a message (``sizes.expect``/``require``/``SizeMismatch``), never with ``assert``: ``python -O``
  removes asserts, and the benchmark would print a figure it did not check.
* A test never ``importorskip``s the project's own modules: an import error there is a failure, not a skip.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_benchmark_relies_on_assert():
    found = [f"{path.name}:{node.lineno}" for path in sorted((TESTS / "benchmarks").glob("*.py"))
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Assert)]
    assert found == [], f"use sizes.require()/expect() instead of assert (gone under python -O): {found}"


def test_no_test_skips_on_an_import_of_the_project_itself():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "importorskip" and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and str(node.args[0].value).startswith("airflow_kafka_reassign")):
                found.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert found == [], f"import the project's modules plainly (an import error must fail): {found}"
