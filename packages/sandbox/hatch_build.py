"""Selects airflow-kafka-reassign-sandbox's files: the modules the runtime wheel leaves out.

The main distribution's ``[tool.hatch.build.targets.wheel] exclude`` (../../pyproject.toml) names
them; they stay in the source tree at their import paths and this hook adds exactly those to the
wheel and the sdist. A wheel built from the sdist finds them in the sdist, which carries them at
the same paths (and no main pyproject.toml).

The editable install (``uv sync`` / ``make setup`` in this repository) ships no module: the editable
install of airflow-kafka-reassign puts the source tree on ``sys.path``, which serves these modules
as it serves the others. Copies in site-packages would be dead files beside the live ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

try:
    import tomllib
except ImportError:  # Python 3.10: tomli, a build requirement there (pyproject.toml)
    import tomli as tomllib

PACKAGE = "airflow_kafka_reassign"


def sandbox_paths(root: Path) -> tuple[Path, list[str]]:
    """(where the files are, their paths relative to it) from this project's folder ``root``."""
    if (root / PACKAGE).is_dir():  # an unpacked sdist: everything under airflow_kafka_reassign/ is ours
        return root, sorted(str(p.relative_to(root)) for p in (root / PACKAGE).rglob("*")
                            if p.is_file() and "__pycache__" not in p.parts)
    repo = root.parents[1]
    main = tomllib.loads((repo / "pyproject.toml").read_text())
    paths = main["tool"]["hatch"]["build"]["targets"]["wheel"]["exclude"]
    missing = [p for p in paths if not (repo / p).exists()]
    if missing:
        raise FileNotFoundError(f"the main wheel's exclude list names paths that do not exist: {missing}")
    return repo, paths


class SandboxFiles(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        base, paths = sandbox_paths(Path(self.root))
        for path in paths:
            build_data["force_include"][str(base / path)] = path
