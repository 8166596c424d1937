"""MkDocs hook: include repository files in pages, so the docs show the code the tests run.

pymdown-extensions' ``snippets`` is not a dependency of this project; this hook reads the same
directive. A line (inside a fenced code block, usually)::

    --8<-- "example_dags/decommission.py"              the whole file
    --8<-- "example_dags/decommission.py:params"       the lines between the markers
                                                       ``[START params]`` and ``[END params]``
                                                       (Airflow's convention; marker lines dropped)
    --8<-- "example_dags/decommission.py:10:24"        lines 10 to 24 (1-based, inclusive)

is replaced by that text, dedented, then indented like the directive. Paths are relative to
the folder of ``mkdocs.yml``. Marker lines of other sections inside the included text are
dropped. ``;--8<--`` shows the directive literally. A missing file, section or line range
fails the build with the page named (a doc never shows stale or empty code silently).
``mkdocs serve`` also watches ``example_dags/``.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

DIRECTIVE = re.compile(r'^(?P<indent>[ \t]*)(?P<escape>;?)--8<--[ \t]+"(?P<target>[^"]+)"[ \t]*$')
MARKER = re.compile(r"\[(START|END) [^\]]+\]")
WATCHED = ("example_dags",)


def _root(config: Any) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def _select(path: Path, spec: str | None, where: str) -> str:
    lines = path.read_text(encoding="utf-8").splitlines()
    if spec is None:
        chosen = lines
    elif re.fullmatch(r"\d+:\d+", spec):
        first, last = (int(x) for x in spec.split(":"))
        if not 1 <= first <= last <= len(lines):
            raise PluginError(f"{where}: lines {first}:{last} are outside {path.name} (1:{len(lines)})")
        chosen = lines[first - 1:last]
    else:
        starts = [i for i, line in enumerate(lines) if f"[START {spec}]" in line]
        ends = [i for i, line in enumerate(lines) if f"[END {spec}]" in line]
        if len(starts) != 1 or len(ends) != 1 or ends[0] <= starts[0]:
            raise PluginError(
                f"{where}: {path.name} needs exactly one '[START {spec}]' line followed by one '[END {spec}]' line"
            )
        chosen = lines[starts[0] + 1:ends[0]]
    kept = [line for line in chosen if not MARKER.search(line)]
    return textwrap.dedent("\n".join(kept)).strip("\n")


def include(markdown: str, root: Path, where: str) -> str:
    """``markdown`` with every directive line replaced (see the module doc)."""
    out: list[str] = []
    for line in markdown.split("\n"):
        m = DIRECTIVE.match(line)
        if m is None:
            out.append(line)
            continue
        if m["escape"]:
            out.append(line.replace(";--8<--", "--8<--", 1))
            continue
        target = m["target"]
        name, _, spec = target.partition(":")
        path = (root / name).resolve()
        if root not in path.parents or not path.is_file():
            raise PluginError(f"{where}: cannot include {name!r}: no such file under {root}")
        text = _select(path, spec or None, f"{where} ({target})")
        out.extend(m["indent"] + piece if piece else piece for piece in text.split("\n"))
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return include(markdown, _root(config), page.file.src_uri)


def on_serve(server: Any, config: Any, builder: Any) -> Any:
    for name in WATCHED:
        folder = _root(config) / name
        if folder.is_dir():
            server.watch(str(folder))
    return server
