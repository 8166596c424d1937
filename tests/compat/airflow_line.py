"""The built wheel in a fresh environment with the oldest supported Airflow line (``make compat-airflow``).

Users install the provider into an Airflow image they already have. This check does the same from
scratch: it builds the wheels (``uv build``: the provider and airflow-kafka-reassign-sandbox),
creates a new virtual environment in .tools/compat/ with ``apache-airflow==<line>.*`` (default 3.0,
the oldest line pyproject.toml allows) and the provider's wheel with its extras, checks that the
operators import there without the sandbox distribution (none of its modules is importable), then
adds the sandbox wheel (the tests' fakes and the sandbox), migrates a throw-away metadata database,
checks that ``airflow providers list`` shows the provider, the DagBag check of every example DAG
(tests/unit/test_example_dags_import.py), with ``--unit`` the whole unit test suite instead, and one
example DAG end to end against a sandbox Kafka cluster (the decommission, dry run then real run), from a
copy of tests/ beside which there is no source tree, so they import the installed wheels. The wheels are
built with the cell's interpreter (the sandbox distribution's build hook runs on it).

Usage: ``.venv/bin/python tests/compat/airflow_line.py [--airflow 3.0] [--python 3.10] [--kafka 3.9.1] [--unit]``,
or ``--cell NAME`` (one of CELLS), ``--all`` (``make compat``: every cell, the unit tests in UNIT_CELL only, then a
table with pass/fail and time per cell and the failed cells' log tails) or ``--slice`` (``make compat-slice``, CI: the
one cell chosen from the commit hash, without the unit tests, which ``make test`` runs); exit 1 on a failure.
``--lock LINE`` writes that line's lock, tests/compat/locks/<line>.txt, which its cells then install under (LOCKS
below: Airflow's closure as PyPI was on the patch's release day, what its constraints file would pin; 3.2, 3.3).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10 (tests/unit/test_compat_slice.py imports this file in the 3.10 cell)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".tools" / "uv" / "bin" / "uv"
#: The example DAG run against a sandbox Kafka cluster with the oldest line (a test of test_example_dags.py).
EXAMPLE = "test_decommission_dry_run_then_real_run_drains_the_broker"
#: What Airflow's constraints file of a line pins and today's releases break (that file is on GitHub, which this
#: machine does not reach). Airflow 3.0 declares fastapi and cadwyn without upper bounds; with fastapi 0.165 and
#: cadwyn 8 its in-process execution API refuses every task ("Remote server returned validation error").
#: Airflow 3.2 asks for fastapi>=0.129 and cadwyn>=6.1.1, no upper bound either; with fastapi 0.165 and cadwyn 9 its
#: execution API fails at import ("PydanticUserError: Model 'TITerminalStatePayload' needs a discriminator field"), so
#: every task does; fastapi 0.136.3 with cadwyn 7.0.0 (what uv.lock has for 3.3) works. 3.2 also asks for svcs>=25.1.0
#: unbounded; svcs 26.2.0 (2026-08-24; 3.2.2 came out on 2026-05-29, with svcs 25.1.0 the newest) deletes
#: ``app.state.svcs_registry`` when the FastAPI lifespan exits, and 3.2.2's InProcessExecutionAPI (dag.test(); the triggerer
#: builds its client the same way) keeps that lifespan only on the object its callers drop: the lifespan is closed at
#: once, and 3.2's ti_run, which takes the services container, fails every task's start ("'State' object has no
#: attribute 'svcs_registry'"). 3.0 and 3.1 have the same lifespan handling, but no in-process route needs the container.
LINE_PINS = {"3.0": ["fastapi[standard]<0.117", "cadwyn<6"],
             "3.2": ["fastapi[standard-no-fastapi-cloud-cli]<0.137", "cadwyn<8", "svcs<26.2"]}
#: Test tools every cell installs besides Airflow and the wheels (and locks: ``--lock``).
TOOLS = ["pyspark==4.2.0", "pyspark-client==4.2.0", "pytest>=8", "pytest-timeout", "pytest-xdist", "mkdocs>=1.6"]
#: Per-line locks, tests/compat/locks/<line>.txt (``--lock LINE`` writes one; a cell installs under its line's lock, as
#: uv constraints, when there is one). Airflow's constraints file of a patch release, resolved on its release day, is not
#: reachable here, so ``--lock`` rebuilds what it would pin: uv resolves ``apache-airflow==<patch>`` alone with
#: ``--exclude-newer`` the day after the patch's upload to PyPI (the line's patch and that day: below, by hand), then the
#: cell's whole requirement set (the provider's dependencies with its extras, the sandbox's, TOOLS, LINE_PINS) under that
#: set, for every Python from 3.10 (``--universal``). What Airflow's closure does not hold (PySpark, pytest, the Kafka
#: clients) is today's release. Lines without an entry install unlocked.
#: No 3.0 lock: the set of 3.0.6's day (2025-08-30) pins pydantic 2.11.7 (the provider needs 2.12: ``exclude_if``),
#: common-compat 1.7.3 (it needs 1.12), grpcio 1.74.0 and googleapis-common-protos 1.70.0 (pyspark-client 4.2.0 needs
#: 1.76 and 1.71): the cell's stack is younger than that day, and each unpinning by hand brought the next conflict.
#: line: (patch, the day after apache-airflow-core's upload to PyPI: 3.1.8 2026-03-11T19:28Z, 3.2.2 2026-05-29T05:20Z,
#: 3.3.2 2026-09-17T08:38Z).
LINE_RELEASES = {"3.1": ("3.1.8", "2026-03-12"), "3.2": ("3.2.2", "2026-05-30"), "3.3": ("3.3.2", "2026-09-18")}
#: Distributions taken out of a line's dated set before the cell's requirements are resolved under it, because the
#: provider needs a newer release than that day's (a user upgrades a provider past the constraints file, as Airflow's
#: docs allow). 3.1: on 3.1.8's day the standard provider is 1.12.0, whose ApprovalOperator takes no
#: ``response_timeout``; the provider requires apache-airflow-providers-standard>=1.13.1 (docs/install.md).
LINE_RELEASED = {"3.1": ["apache-airflow-providers-standard", "apache-airflow-providers-common-compat"]}
LOCKS = Path(__file__).resolve().parent / "locks"
#: The matrix (``make compat``): not the cartesian product, but every Airflow line, every Python 3.10-3.13 and the Kafka
#: lines 3.9 (KRaft, no KIP-860 on the broker: the client-side RF guard), 4.0 and the newest 4.x in at least one cell.
#: A cell's Kafka version with this prefix runs the sandbox in ZooKeeper mode (``AKR_SANDBOX_ZOOKEEPER=1``).
ZOOKEEPER_PREFIX = "zk:"
CELLS: dict[str, tuple[str, str, str]] = {  # name: (python, airflow line, kafka version)
    "py3.10-af3.0-k3.9": ("3.10", "3.0", "3.9.1"),
    "py3.11-af3.1-k4.0": ("3.11", "3.1", "4.0.2"),
    "py3.12-af3.2-k4.3": ("3.12", "3.2", "4.3.1"),
    "py3.13-af3.3-k4.4": ("3.13", "3.3", "4.4.0"),
    # ZooKeeper-mode Kafka 3.9 and 3.6 (issue 39; docs/kafka-lines.md): the session sandbox starts with --zookeeper
    "py3.11-af3.3-k3.9-zk": ("3.11", "3.3", ZOOKEEPER_PREFIX + "3.9.1"),
    "py3.12-af3.2-k3.6-zk": ("3.12", "3.2", ZOOKEEPER_PREFIX + "3.6.2"),
}
#: Cells ``make compat`` runs that CI's slice does not pick: the lead adds a new cell to the rotation.
OUT_OF_SLICE: dict[str, str] = {
    "py3.12-af3.2-k3.6-zk": "ZooKeeper mode on an older 3.x line, run by make compat; the 3.9 ZooKeeper cell is in the "
                            "rotation",
}
#: The one cell ``make compat`` runs the whole unit test suite in (6 of its 13.6 min on 2 cores): the oldest Python and
#: the oldest Airflow line, the farthest from the lock file's 3.11 x 3.3 that ``make test`` runs them on. The other cells,
#: and the CI slice, run the DagBag check and the example DAG only.
UNIT_CELL = "py3.10-af3.0-k3.9"
#: The example DAGs' import check: a DagBag of example_dags/ with every warning an error, and their Params.
DAGBAG_TEST = "tests/unit/test_example_dags_import.py"
#: Cells that fail for an upstream reason (docs/install.md says why): ``make compat`` runs them, CI's slice does not pick
#: them (it would fail one commit in four for a cause outside this repository). None today (the Airflow 3.2 cell was,
#: until the svcs pin above).
UNVERIFIED: dict[str, str] = {}
PYENV = Path.home() / ".pyenv" / "versions"


def interpreter(python: str) -> str:
    """The newest pyenv interpreter of a Python line (uv's own interpreter downloads are not reachable here)."""
    found = sorted(PYENV.glob(f"{python}.*/bin/python"), key=lambda p: [int(x) for x in p.parts[-3].split(".")])
    return str(found[-1]) if found else sys.executable


def slice_cell(commit: str) -> str:
    """The one cell CI runs for ``commit`` (``make compat-slice``): a different one from commit to commit."""
    names = sorted(set(CELLS) - set(UNVERIFIED) - set(OUT_OF_SLICE))
    return names[int(commit[:8], 16) % len(names)]
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
    ap.add_argument("--python", default=None, help="the Python line (default: this interpreter's)")
    ap.add_argument("--kafka", default=None, help="the sandbox's Kafka version (default: the sandbox's newest 4.x)")
    ap.add_argument("--cell", choices=sorted(CELLS), help="one cell of the matrix")
    ap.add_argument("--unit", action="store_true", help="the whole unit test suite, not only the DagBag check")
    ap.add_argument("--all", action="store_true", help="every cell, then the table (make compat)")
    ap.add_argument("--slice", action="store_true", help="the cell chosen from git rev-parse HEAD (make compat-slice)")
    ap.add_argument("--which", action="store_true", help="only print the cell --slice would run for HEAD")
    ap.add_argument("--lock", choices=sorted(LINE_RELEASES), help="write tests/compat/locks/<line>.txt (uv, dated)")
    args = ap.parse_args(argv)
    if args.lock:
        return write_lock(args.lock)
    if args.all or args.slice or args.which:
        if args.slice or args.which:
            head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
            names = [slice_cell(head or "0")]
            print(f"compat slice for {head[:12]}: {names[0]} {CELLS[names[0]]}", flush=True)
            if args.which:
                return 0
        else:
            names = list(CELLS)
        return matrix(names, unit_cells={UNIT_CELL} if args.all else set())
    if args.cell:
        args.python, args.airflow, args.kafka = CELLS[args.cell]
    return cell(args.airflow, args.python, args.kafka, unit=args.unit)


def matrix(names: list[str], unit_cells: set[str]) -> int:
    """Each cell in a process of its own (the unit tests in ``unit_cells``), its output in .tools/compat/<cell>.log;
    a table; the failures' log tails."""
    rows = []
    for name in names:
        log_path = ROOT / ".tools" / "compat" / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        print(f"== {name} ({log_path})", flush=True)
        began = time.perf_counter()
        with log_path.open("w") as out:
            rc = subprocess.run([sys.executable, __file__, "--cell", name, *(["--unit"] if name in unit_cells else [])],
                                stdout=out, stderr=subprocess.STDOUT).returncode
        rows.append((name, rc == 0, time.perf_counter() - began, log_path))
    print(f"\n{'cell':<22} {'python':<7} {'airflow':<8} {'kafka':<7} {'tests':<7} {'result':<7} time")
    for name, ok, took, _ in rows:
        python, airflow, kafka = CELLS[name]
        tests = "unit" if name in unit_cells else "dagbag"
        print(f"{name:<22} {python:<7} {airflow:<8} {kafka:<7} {tests:<7} {'pass' if ok else 'FAIL':<7} {took / 60:.1f} min")
    for name, ok, _, log_path in rows:
        if not ok:
            print(f"\n-- {name}: the last 40 lines of {log_path}")
            print("\n".join(log_path.read_text(errors="replace").splitlines()[-40:]))
    return 0 if all(ok for _, ok, _, _ in rows) else 1


def requirements(airflow: str) -> list[str]:
    """What a cell installs, as requirements: Airflow, the provider's dependencies with its s3 and report extras, the
    sandbox distribution's (but the provider itself), TOOLS and the line's LINE_PINS."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    sandbox = tomllib.loads((ROOT / "packages" / "sandbox" / "pyproject.toml").read_text())["project"]
    line = ".".join(airflow.split(".")[:2])
    return [f"apache-airflow=={airflow}", *[r for r in project["dependencies"] if not r.startswith("apache-airflow>")],
            *project["optional-dependencies"]["s3"], *project["optional-dependencies"]["report"],
            *[r for r in sandbox["dependencies"] if not r.startswith(project["name"])], *TOOLS, *LINE_PINS.get(line, [])]


def write_lock(line: str) -> int:
    """tests/compat/locks/<line>.txt: Airflow's closure as on its release day, then the cell's requirements under it."""
    patch, day = LINE_RELEASES[line]
    LOCKS.mkdir(exist_ok=True)
    out = LOCKS / f"{line}.txt"
    with tempfile.TemporaryDirectory(prefix="akr-lock-") as tmp:
        airflow_in, dated, cell_in = Path(tmp) / "airflow.in", Path(tmp) / "dated.txt", Path(tmp) / "cell.in"
        airflow_in.write_text(f"apache-airflow=={patch}\n")
        cell_in.write_text("\n".join(requirements(patch)) + "\n")
        compile_ = [UV, "pip", "compile", "-q", "--universal", "--python-version", "3.10", "--no-header"]
        if run([*compile_, "--exclude-newer", day, airflow_in, "-o", dated]).returncode:
            return 1
        released = LINE_RELEASED.get(line, [])
        dated.write_text("".join(pin for pin in dated.read_text().splitlines(keepends=True)
                                 if pin.split("==")[0].strip() not in released))
        if run([*compile_, "--no-annotate", "--constraint", dated, cell_in, "-o", out]).returncode:
            return 1
    hand = ", ".join([*LINE_PINS.get(line, []), *[t for t in TOOLS if "==" in t],
                      *[f"{r} released from the day's set" for r in LINE_RELEASED.get(line, [])]])
    out.write_text(f"# The py3.10+ lock of the Airflow {line} line's compat cells (tests/compat/airflow_line.py --lock {line}):\n"
                   f"# apache-airflow=={patch} resolved alone as PyPI was on {day} (uv --exclude-newer: what its constraints\n"
                   f"# file would pin), then the cell's requirements under that set. Pinned by hand: the day, {hand}.\n"
                   + out.read_text())
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


def cell(airflow_line: str, python_line: str | None, kafka: str | None, *, unit: bool = False) -> int:
    """One cell: the wheel in a fresh environment of ``python_line`` with Airflow ``airflow_line``, the DagBag check
    (``unit``: the whole unit test suite), the example DAG on a sandbox of Kafka ``kafka``."""
    started = time.perf_counter()
    python_exe = interpreter(python_line) if python_line else sys.executable
    base = ROOT / ".tools" / "compat" / f"airflow-{airflow_line}-py{python_line or 'this'}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    dist = base / "dist"
    if run([UV, "build", "-q", "--wheel", "--all-packages", "--python", python_exe, "-o", dist, ROOT]).returncode:
        return 1
    wheel = next(dist.glob("airflow_kafka_reassign-*.whl"))
    sandbox_wheel = next(dist.glob("airflow_kafka_reassign_sandbox-*.whl"))
    venv = base / "venv"
    python = venv / "bin" / "python"
    run([UV, "venv", "-q", "--python", python_exe, venv], check=True)
    lock = LOCKS / f"{airflow_line}.txt"
    print("installing under", lock.relative_to(ROOT) if lock.exists() else "no lock (resolved today, LINE_PINS only)")
    install = [UV, "pip", "install", "-q", "--python", python, f"apache-airflow=={airflow_line}.*",
               f"{wheel}[s3,report]", *TOOLS, *LINE_PINS.get(airflow_line, []),
               *(["--constraint", lock] if lock.exists() else [])]
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
    # a cell says "passes on Airflow <line>": its DAG runs use Airflow's execution API as installed (dagrun.py)
    env["AKR_AIRFLOW_UNPATCHED"] = "1"
    if kafka:
        if kafka.startswith(ZOOKEEPER_PREFIX):  # the session sandbox in ZooKeeper mode (tests/integration/conftest.py)
            kafka = kafka.removeprefix(ZOOKEEPER_PREFIX)
            env["AKR_SANDBOX_ZOOKEEPER"] = "1"
        env["AKR_KAFKA_VERSION"] = kafka  # the session sandbox of the example DAG's test
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
        if unit:
            tests = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile",
                         "tests/unit"], cwd=tmp, env=env)
        else:  # one process: the DagBag is filled once, in a module fixture
            tests = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", DAGBAG_TEST], cwd=tmp, env=env)
        # one example DAG end to end against a real sandbox cluster (started by the installed wheel)
        example = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:logging",
                       "tests/integration/test_example_dags.py", "-k", EXAMPLE], cwd=tmp, env=env)
        where = run([python, "-c", "import airflow_kafka_reassign as m; print(m.__file__)"], cwd=tmp, env=env,
                    capture_output=True).stdout.strip()
    print(f"Airflow {airflow_line} line on Python {python_line or 'this'}, Kafka {kafka or 'default'}: {versions}")
    print(f"the provider imported from {where}")
    print(f"environment built in {t_install:.0f} s; everything in {time.perf_counter() - started:.0f} s")
    print(f"{'unit tests' if unit else 'DagBag check'}: {'passed' if tests.returncode == 0 else 'FAILED'}; "
          f"example DAG ({EXAMPLE}) on the sandbox: {'passed' if example.returncode == 0 else 'FAILED'}")
    ok = alone_ok and tests.returncode == 0 and example.returncode == 0 and bool(shown) and "site-packages" in where
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
