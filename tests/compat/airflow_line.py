"""The built wheel in a fresh environment with the oldest supported Airflow line (``make compat-airflow``).

Users install the provider into an Airflow image they already have. This check does the same from
scratch: it builds the wheels (``uv build``: the provider and airflow-kafka-reassign-sandbox),
creates a new virtual environment in .tools/compat/ with ``apache-airflow==<line>.*`` (default 3.0,
the oldest line pyproject.toml allows) and the provider's wheel with its extras, checks that the
operators import there without the sandbox distribution (none of its modules is importable), then
adds the sandbox wheel (the tests' fakes and the sandbox), migrates a throw-away metadata database,
checks that ``airflow providers list`` shows the provider, and runs the unit tests (the DagBag check
of every example DAG among them) and one example DAG end to end against a sandbox Kafka cluster
(the decommission, dry run then real run), from a copy of tests/ beside which there is no source
tree, so they import the installed wheels.

Usage: ``.venv/bin/python tests/compat/airflow_line.py [--airflow 3.0]``; exit 1 on a failure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".tools" / "uv" / "bin" / "uv"
#: The example DAG run against a sandbox Kafka cluster with the oldest line (a test of test_example_dags.py).
EXAMPLE = "test_decommission_dry_run_then_real_run_drains_the_broker"
#: What Airflow's constraints file of a line pins and today's releases break (that file is on GitHub, which this
#: machine does not reach). Airflow 3.0 declares fastapi and cadwyn without upper bounds; with fastapi 0.165 and
#: cadwyn 8 its in-process execution API refuses every task ("Remote server returned validation error").
LINE_PINS = {"3.0": ["fastapi[standard]<0.117", "cadwyn<6"]}
#: Copied next to the tests: what they read besides the package (pytest's settings in pyproject.toml).
SUPPORT = ("tests", "example_dags", "docs", "mkdocs.yml", "pyproject.toml", "README.md")
#: What the provider's wheel leaves out for airflow-kafka-reassign-sandbox (its hatch `exclude` list), as modules.
DEV_MODULES = [p.removesuffix(".py").replace("/", ".") for p in tomllib.loads((ROOT / "pyproject.toml").read_text())
               ["tool"]["hatch"]["build"]["targets"]["wheel"]["exclude"]]


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    print("$", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], text=True, **kw)  # type: ignore[call-overload]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--airflow", default="3.0", help="the Airflow line (default 3.0)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    base = ROOT / ".tools" / "compat" / f"airflow-{args.airflow}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    dist = base / "dist"
    if run([UV, "build", "-q", "--wheel", "--all-packages", "-o", dist, ROOT]).returncode:
        return 1
    wheel = next(dist.glob("airflow_kafka_reassign-*.whl"))
    sandbox_wheel = next(dist.glob("airflow_kafka_reassign_sandbox-*.whl"))
    venv = base / "venv"
    python = venv / "bin" / "python"
    run([UV, "venv", "-q", "--python", sys.executable, venv], check=True)
    install = [UV, "pip", "install", "-q", "--python", python, f"apache-airflow=={args.airflow}.*",
               f"{wheel}[s3,report]", "pyspark==4.2.0", "pyspark-client==4.2.0", "pytest>=8", "pytest-timeout", "pytest-xdist",
               "mkdocs>=1.6", *LINE_PINS.get(args.airflow, [])]
    if run(install).returncode:
        return 1
    # the provider alone: its operators import, and no development module is there
    alone = run([python, "-c", "import importlib.util as u, airflow_kafka_reassign.operators.execute; "
                 f"print([n for n in {DEV_MODULES!r} if u.find_spec(n)])"],
                cwd=base, env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}, capture_output=True)
    alone_ok = alone.returncode == 0 and alone.stdout.strip() == "[]"
    print("the provider without the sandbox distribution:", "imports, no development module" if alone_ok
          else f"FAILED {alone.stdout.strip()} {alone.stderr.strip()[-2000:]}")
    # `[sandbox]` names the sandbox distribution, which is not on an index: its wheel file stands for it
    if run([UV, "pip", "install", "-q", "--python", python, sandbox_wheel]).returncode:
        return 1
    t_install = time.perf_counter() - started
    versions = run([python, "-c", "from importlib.metadata import version as v; print(', '.join(f'{p} {v(p)}' for p in "
                    "('apache-airflow', 'apache-airflow-task-sdk', 'apache-airflow-providers-apache-spark', "
                    "'apache-airflow-providers-apache-kafka', 'confluent-kafka', 'kafka-python', 'pydantic')))"],
                   capture_output=True, check=True).stdout.strip()
    home = base / "airflow-home"
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "PYSPARK_PYTHON": str(python), "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}"}
    env.pop("VIRTUAL_ENV", None)
    airflow = venv / "bin" / "airflow"
    if run([airflow, "db", "migrate"], env=env, capture_output=True).returncode:
        print("airflow db migrate failed")
        return 1
    listed = run([airflow, "providers", "list"], env=env, capture_output=True)
    shown = [line for line in listed.stdout.splitlines() if "airflow-kafka-reassign" in line]
    print("airflow providers list:", shown[0].strip() if shown else "NOT LISTED")
    with tempfile.TemporaryDirectory(prefix="akr-compat-airflow-") as tmp:
        for name in SUPPORT:
            src = ROOT / name
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, Path(tmp) / name)
        tests = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile", "tests/unit"],
                    cwd=tmp, env=env)
        # one example DAG end to end against a real sandbox cluster (started by the installed wheel)
        example = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:logging",
                       "tests/integration/test_example_dags.py", "-k", EXAMPLE], cwd=tmp, env=env)
        where = run([python, "-c", "import airflow_kafka_reassign as m; print(m.__file__)"], cwd=tmp, env=env,
                    capture_output=True).stdout.strip()
    print(f"Airflow {args.airflow} line: {versions}")
    print(f"the provider imported from {where}")
    print(f"environment built in {t_install:.0f} s; everything in {time.perf_counter() - started:.0f} s")
    print(f"unit tests: {'passed' if tests.returncode == 0 else 'FAILED'}; "
          f"example DAG ({EXAMPLE}) on the sandbox: {'passed' if example.returncode == 0 else 'FAILED'}")
    ok = alone_ok and tests.returncode == 0 and example.returncode == 0 and bool(shown) and "site-packages" in where
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
