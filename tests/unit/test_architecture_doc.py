"""docs/architecture.md keeps up with the code: every path and module it names exists, and it names every package
of the provider and of its core (so "one sentence per package" stays true when a package is added)."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "airflow_kafka_reassign"
DOC = ROOT / "docs" / "architecture.md"


def spans() -> list[str]:
    """The doc's inline code spans (fenced blocks left out)."""
    text = re.sub(r"^```.*?^```", "", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    return re.findall(r"`([^`\n]+)`", text)


def named_paths() -> list[str]:
    """Spans that are paths (a ``/`` in them), leaving out placeholders, globs, URIs and commands."""
    return sorted({s for s in spans() if "/" in s and not re.search(r"[<>*{}\s]|://", s)})


def named_modules() -> list[str]:
    return sorted({s for s in spans() if re.fullmatch(r"airflow_kafka_reassign(\.\w+)+", s)})


def test_the_doc_names_paths_and_modules():
    assert len(named_paths()) > 30 and named_modules()


@pytest.mark.parametrize("path", named_paths())
def test_every_named_path_exists(path):
    """A path is read from the repository's root or from the package's (``core/...`` is
    ``airflow_kafka_reassign/core/...``); a trailing ``/`` names a folder."""
    candidates = [ROOT / path, PKG / path]
    found = [c for c in candidates if (c.is_dir() if path.endswith("/") else c.exists())]
    assert found, f"docs/architecture.md names {path!r}, which is neither {candidates[0]} nor {candidates[1]}"


@pytest.mark.parametrize("name", named_modules())
def test_every_named_module_imports(name):
    assert importlib.util.find_spec(name) is not None, f"docs/architecture.md names {name}, which does not exist"


def packages(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if (p / "__init__.py").is_file())


@pytest.mark.parametrize("package", [*packages(PKG), *packages(PKG / "core")],
                         ids=lambda p: str(p.relative_to(PKG)))
def test_every_package_is_described(package):
    folder = f"{package.relative_to(PKG).as_posix()}/"
    assert folder in named_paths(), f"docs/architecture.md does not describe `{folder}`: add it to the packages' table"
