"""The wheel is the product: the runtime wheel ships no development module, and works without them.

Two distributions come out of this repository: ``airflow-kafka-reassign`` (the provider) and
``airflow-kafka-reassign-sandbox`` (packages/sandbox: the sandbox, the demo, the fakes), whose
modules are the ones the main wheel's ``exclude`` list names. Both wheels are built here into a
temporary directory, as a release would build them (``uv build --wheel``).
"""

from __future__ import annotations

import ast
import email.parser
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli below 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".tools" / "uv" / "bin" / "uv"
PKG = "airflow_kafka_reassign"
if not (ROOT / "packages" / "sandbox").is_dir():  # make compat-airflow: a copy of tests/ run against installed wheels
    pytest.skip("no source tree to build the wheels from", allow_module_level=True)
MAIN = tomllib.loads((ROOT / "pyproject.toml").read_text())
SANDBOX = tomllib.loads((ROOT / "packages" / "sandbox" / "pyproject.toml").read_text())
#: the development modules, as the main wheel's hatch config excludes them
DEV_PATHS = MAIN["tool"]["hatch"]["build"]["targets"]["wheel"]["exclude"]
DEV_MODULES = sorted(p.removesuffix(".py").replace("/", ".") for p in DEV_PATHS)


def is_dev(path: str) -> bool:
    """Whether ``path`` (relative to the repository, or to a wheel's root) is a development file."""
    return any(path == d or path.startswith(f"{d}/") for d in DEV_PATHS)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    for project in (ROOT, ROOT / "packages" / "sandbox"):
        subprocess.run([UV, "build", "-q", "--wheel", "--offline", "-o", out, project], check=True, timeout=300)
    found = {p.name.split("-")[0]: p for p in out.glob("*.whl")}
    return {"main": found["airflow_kafka_reassign"], "sandbox": found["airflow_kafka_reassign_sandbox"]}


def package_files(wheel: Path) -> set[str]:
    return {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith(f"{PKG}/")}


def requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []


def test_the_exclude_list_names_the_development_modules():
    named = {"sandbox", "demo", "testing", "core.planner.synthetic", "kafka.readiness", "kafka.workload"}
    assert {f"{PKG}.{m}" for m in named} <= set(DEV_MODULES)
    assert all((ROOT / p).exists() for p in DEV_PATHS)


def test_the_main_wheel_ships_no_development_module_and_no_cryptography(wheels):
    files = package_files(wheels["main"])
    assert f"{PKG}/operators/execute.py" in files
    assert f"{PKG}/spark/log4j2.properties" in files
    assert {f for f in files if is_dev(f)} == set()
    for word in ("sandbox", "demo", "testing", "fake", "synthetic", "readiness", "workload"):
        assert not [f for f in files if word in f], word
    deps = requires_dist(wheels["main"])
    runtime = [d for d in deps if "extra ==" not in d]
    assert not [d for d in runtime if d.lower().startswith("cryptography")], runtime
    assert "airflow-kafka-reassign-sandbox==0.1.0; extra == 'sandbox'" in deps


def test_every_source_file_is_in_exactly_one_wheel(wheels):
    main, sandbox = package_files(wheels["main"]), package_files(wheels["sandbox"])
    source = {
        str(p.relative_to(ROOT)) for p in (ROOT / PKG).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    assert main & sandbox == set()
    assert main | sandbox == source
    assert sandbox == {f for f in source if is_dev(f)}
    assert requires_dist(wheels["sandbox"]) == ["airflow-kafka-reassign==0.1.0", "cryptography>=41"]


def test_the_two_distributions_pin_each_other_at_one_version():
    version = MAIN["project"]["version"]
    assert SANDBOX["project"]["version"] == version
    assert MAIN["project"]["optional-dependencies"]["sandbox"] == [f"airflow-kafka-reassign-sandbox=={version}"]
    assert f"airflow-kafka-reassign=={version}" in SANDBOX["project"]["dependencies"]


def imported_modules(path: Path) -> set[str]:
    """Absolute names of what ``path`` imports (relative imports resolved), at any depth."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(x for x in (base, node.module) if x)
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)
    return names


RUNTIME_SOURCES = [p for p in sorted((ROOT / PKG).rglob("*.py")) if not is_dev(str(p.relative_to(ROOT)))]


@pytest.mark.parametrize("path", RUNTIME_SOURCES, ids=lambda p: str(p.relative_to(ROOT / PKG)))
def test_runtime_code_imports_no_development_module(path):
    dev = {m for m in imported_modules(path) for d in DEV_MODULES if m == d or m.startswith(f"{d}.")}
    assert dev == set()


def test_the_main_wheel_works_alone_and_beside_the_sandbox_wheel(wheels, tmp_path):
    """A fresh environment with the main wheel and its runtime dependencies only (the versions of
    uv.lock, from uv's cache: no network) imports the operators and has no development module;
    the sandbox wheel installed beside it brings them back at their import paths.

    The dependencies come from ``uv sync --frozen --offline`` (the lock names each file, which uv's cache keeps
    by name and version), not ``uv pip install --offline -r <export>``: that one resolves against the index
    pages in uv's cache, which a cache filled by ``uv sync`` alone does not have (it failed so on a new machine:
    "a2wsgi was not found in the cache")."""
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    sync_env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {"UV_PROJECT_ENVIRONMENT": str(venv)}
    subprocess.run([UV, "sync", "-q", "--frozen", "--offline", "--no-install-workspace", "--python", sys.executable],
                   cwd=ROOT, env=sync_env, check=True, timeout=600)
    installed = subprocess.run([UV, "pip", "freeze", "--python", python], check=True, capture_output=True,
                               text=True, timeout=120).stdout.lower().split()
    names = {line.split("==")[0] for line in installed}
    assert "apache-airflow" in names and "confluent-kafka" in names, names  # the runtime dependencies ...
    assert not {n for n in names if n.startswith("pytest")} and "pyspark" not in names, names  # ... and only them
    assert not {n for n in names if n.startswith("airflow-kafka-reassign")}, names  # no workspace member yet
    install = [UV, "pip", "install", "-q", "--offline", "--no-deps", "--python", python]
    subprocess.run([*install, wheels["main"]], check=True, timeout=600)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}

    def run(code: str) -> str:
        done = subprocess.run([python, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout

    alone = run(
        "import importlib.util as u, airflow_kafka_reassign.operators.execute as m\n"
        f"print(m.__file__)\nprint([n for n in {DEV_MODULES!r} if u.find_spec(n)])"
    ).splitlines()
    assert alone[0].startswith(str(venv)), alone
    assert alone[1] == "[]"
    subprocess.run([*install, wheels["sandbox"]], check=True, timeout=120)
    beside = run(
        "import subprocess, sys, airflow_kafka_reassign.testing as t\n"
        "from airflow_kafka_reassign.core.planner.synthetic import synthetic_snapshot\n"
        "print(t.__file__)\n"
        "subprocess.run([sys.executable, '-m', 'airflow_kafka_reassign.sandbox', '--help'], check=True)"
    )
    assert beside.splitlines()[0].startswith(str(venv)), beside
    assert "usage: python -m airflow_kafka_reassign.sandbox" in beside
