"""MkDocs hook: parameter tables generated from the operators' and sensors' docstrings.

A line ``<!-- params: airflow_kafka_reassign.operators.plan.PlanReassignmentOperator -->`` in a
page becomes a table: every keyword argument of the class's ``__init__`` (from the source, with
its default) and its ``:param name:`` text from the class docstring (one ``:param a / b:`` entry
may document several). The source is read with ``ast`` (nothing is imported). The build fails,
naming the class and the parameter, when an argument has no ``:param:`` or a ``:param:`` names no
argument: a table can never go stale or miss a parameter.

A class without ``__init__`` whose fields are annotated with a docstring under each (a pydantic model such as
``ExecutionConfig``, ``use_attribute_docstrings``) becomes a table of its fields, each with its default and its
docstring; a field without a docstring fails the build.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

DIRECTIVE = re.compile(r"^<!-- params: (?P<target>[\w.]+) -->[ \t]*$", re.M)
PARAM = re.compile(r"^:param (?P<names>[^:]+):(?P<text>.*)$", re.S)
SKIP = {"self", "kwargs", "args"}
#: Arguments of the base classes (BaseSensorOperator, ApprovalOperator) a docstring may document too.
BASE = {"timeout", "poke_interval", "mode", "response_timeout"}


def _class(root: Path, target: str) -> ast.ClassDef:
    module, _, name = target.rpartition(".")
    path = root / (module.replace(".", "/") + ".py")
    if not path.is_file():  # no source tree beside mkdocs.yml (the installed wheel's check): the installed module
        import importlib.util

        try:
            spec = importlib.util.find_spec(module)
        except ImportError:
            spec = None
        if spec is None or not spec.origin:
            raise PluginError(f"params: {target}: {path} does not exist")
        path = Path(spec.origin)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise PluginError(f"params: {target}: no class {name} in {path}")


def _documented(doc: str) -> dict[str, str]:
    """``:param a / b: text`` (names and text may go on over indented lines) -> {"a": text, "b": text}."""
    entries: list[str] = []
    for raw in doc.splitlines():
        line = raw.strip()
        if line.startswith(":param "):
            entries.append(line)
        elif entries and raw.startswith((" ", "\t")) and line and not line.startswith(":") and entries[-1] != "":
            entries[-1] += " " + line
        elif entries:
            entries.append("")  # the entry ended
    out: dict[str, str] = {}
    for entry in filter(None, entries):
        match = PARAM.match(entry)
        if match:
            for name in (n.strip() for n in re.split(r"[/,]", match.group("names"))):
                if name:
                    out[name] = match.group("text").strip()
    return out


def _arguments(cls: ast.ClassDef) -> list[tuple[str, str]]:
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        return []
    a = init.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    pairs = list(zip(positional, defaults, strict=True)) + list(zip(a.kwonlyargs, a.kw_defaults, strict=True))
    return [(arg.arg, "required" if d is None else f"`{ast.unparse(d)}`") for arg, d in pairs if arg.arg not in SKIP]


def _cell(text: str) -> str:
    text = re.sub(r":\w+:`~?([\w.]+)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)  # Sphinx roles
    return text.replace("|", "\\|")


def _fields(target: str, cls: ast.ClassDef) -> str:
    rows = ["| Setting | Default | Meaning |", "|---|---|---|"]
    body = cls.body
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        if name.startswith("_") or name == "model_config":
            continue
        after = body[i + 1] if i + 1 < len(body) else None
        if not (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            raise PluginError(f"params: {target}: the field {name} has no docstring")
        doc = " ".join(line.strip() for line in after.value.value.strip().splitlines())
        default = "required" if node.value is None else f"`{ast.unparse(node.value)}`"
        rows.append(f"| `{name}` | {_cell(default)} | {_cell(doc)} |")
    return "\n".join(rows)


def table(root: Path, target: str) -> str:
    cls = _class(root, target)
    if not any(isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in cls.body):
        return _fields(target, cls)
    documented = _documented(ast.get_docstring(cls) or "")
    arguments = _arguments(cls)
    names = {n for n, _ in arguments}
    missing = [n for n in names if n not in documented]
    unknown = [n for n in documented if n not in names and n not in BASE]
    if missing or unknown:
        raise PluginError(f"params: {target}: " + "; ".join(
            ([f"no :param: for {sorted(missing)}"] if missing else [])
            + ([f":param: for no argument: {sorted(unknown)}"] if unknown else [])))
    rows = ["| Parameter | Default | Meaning |", "|---|---|---|"]
    rows += [f"| `{n}` | {_cell(default)} | {_cell(documented[n])} |" for n, default in arguments]
    rows += [f"| `{n}` | (Airflow's) | {_cell(text)} |" for n, text in documented.items() if n not in names]
    return "\n".join(rows)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    root = Path(config["config_file_path"]).resolve().parent
    return DIRECTIVE.sub(lambda m: table(root, m.group("target")), markdown)
