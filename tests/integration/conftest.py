"""Integration tests run against ONE real local Kafka cluster per test session.

* Every test under ``tests/integration`` is marked ``integration`` (``-m "not integration"``
  skips them).
* ``sandbox`` (session): a 5-broker, 3-rack KRaft cluster with a SASL/SCRAM listener, a TLS
  listener and the StandardAuthorizer (``--tls --acls``: the PLAINTEXT clients and
  ``sandbox-admin`` are super users, so only the tests that ask for a limited user meet an ACL),
  started in a temporary directory and stopped at the end. ``AKR_SANDBOX_DIR=<dir>`` reuses
  a sandbox already running there (started with ``python -m airflow_kafka_reassign.sandbox
  up --dir <dir> --sasl --tls --acls``) and leaves it running; ``AKR_SANDBOX_KEEP=1`` leaves the
  session's own sandbox running (its directory is printed) for a post-mortem.
* When an integration test fails, the tail of every broker's ``server.log`` is attached to
  its report.
* ``unique_topic``: a fresh topic name per test, so tests sharing the cluster never collide.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from airflow_kafka_reassign.sandbox import Sandbox, wait_until

# The disk guard's default reserve is 1% of each broker's disk; the sandbox's brokers share the host's disk, whose
# free space is not the tests' business: its moves of a few MB keep 64 MiB free (the guard's own test sets its own).
# Task processes (Airflow's workers, the compat check's environment) inherit it.
os.environ.setdefault("AKR_DISK_RESERVE", "64MiB")
import acceptance
import spark_cds
from dagrun import copy_migrated_db

from airflow_kafka_reassign.sandbox.objectstore import ObjectStoreSandbox

INTEGRATION_DIR = Path(__file__).resolve().parent
LOG_TAIL_LINES = 60
_ACTIVE: dict[str, Sandbox] = {}


_spark_cds: list[subprocess.Popen[bytes] | None] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: runs against the real local Kafka sandbox (Java 17, Maven)"
    )
    if not hasattr(config, "workerinput"):  # the run's spark-submits start on a CDS archive (spark_cds.py)
        _spark_cds.append(spark_cds.start())
    workers = getattr(config.option, "numprocesses", None)
    if not hasattr(config, "workerinput") and workers and os.environ.get(_DB_TEMPLATE_ENV) is None:
        # xdist's controller, before it starts the workers (which inherit the variable): one `airflow db migrate` for
        # the whole run, in the background while every worker starts its sandbox, instead of one per worker after it
        _migrations["run"] = started = _start_migration(Path(tempfile.mkdtemp(prefix="akr-airflow-db-")))
        os.environ[_DB_TEMPLATE_ENV] = str(started.home)


def pytest_unconfigure(config: pytest.Config) -> None:
    training = _spark_cds.pop() if _spark_cds else None
    if training is not None and training.poll() is None:  # a run shorter than the training: the next run trains
        with contextlib.suppress(ProcessLookupError):
            os.killpg(training.pid, signal.SIGKILL)
        training.wait()
    started = _migrations.pop("run", None)
    if started is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(started.proc.pid, signal.SIGKILL)  # a run stopped early: the migration with it
        started.proc.wait()
        shutil.rmtree(started.home, ignore_errors=True)
        os.environ.pop(_DB_TEMPLATE_ENV, None)


#: The longest files, longest first (test time per file, three workers, 2026-11-29): under ``make test``'s
#: ``--dist loadfile --no-loadscope-reorder`` (a whole file per worker, the next file to the first worker free) they
#: start first and the short ones fill in behind them, so that none of the long ones is left running alone at the
#: end (docs/testing.md). The stack's faults mostly wait on Airflow's components: they are cut in two modules with a
#: stack each (test_stack.py, test_stack_faults.py), since in one they took 19-30 minutes on one worker, the suite's
#: critical path; test_living_cluster.py (one throttled decommission with the cluster changing under it) 6-7 minutes
#: (2026-12-02); test_broker_kill_failover.py (20 kills) 5-7 minutes; test_stack_healing.py (a stack, three dwells of
#: 2 minutes and a drain) about 16 minutes; test_zookeeper_mode.py (a ZooKeeper sandbox of its own; the decommission,
#: remove-disk, rebalance and growth examples, a broker killed mid-move) 13-15 minutes alone on a machine at a load of
#: 12-35 (2026-12-02; the 4 tests before took 14 minutes there); test_healing_examples.py (a 4-broker cluster of its
#: own, three healing DAG runs) 9 minutes beside the unit tests (2026-12-02).
FIRST = ("test_stack.py", "test_stack_faults.py", "test_stack_healing.py",
         "test_living_cluster.py", "test_example_dags.py", "test_broker_kill_failover.py",
         "test_healing_examples.py", "test_health_gate.py", "test_object_storage.py",
         "test_airflow_ui.py", "test_execution_engine.py", "test_plan_job_readers.py", "test_spark_standalone.py",
         "test_execution_airflow.py", "test_plan_on_sandbox.py", "test_remove_disk.py", "test_living_cluster_disk.py",
         "test_drain_before_cordons.py", "test_zookeeper_mode.py",
         "test_wait_broker_down.py", "test_decommission_lifecycle.py", "test_wait_sensor.py")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # the by-hand acceptance files are not even imported by the other runs (acceptance.py)
    if collection_path.name in acceptance.ONLY_BY_HAND and os.environ.get(acceptance.ENV) != "all":
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.integration)
    # the acceptance tests (acceptance.py): out of `make test`; `make acceptance` runs them all, CI one slice
    kept, every = acceptance.entries(os.environ.get(acceptance.ENV))
    choice = os.environ.get(acceptance.ENV)
    selected, deselected = [], []
    for item in items:
        name = getattr(item, "originalname", item.name)
        is_acceptance = acceptance.named(every, item.path.name, name)
        wanted = acceptance.named(kept, item.path.name, name) if choice else not is_acceptance
        (selected if wanted else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected
    # the longest files first, the rest in their order; a file's tests keep theirs (a stable sort)
    items.sort(key=lambda item: FIRST.index(item.path.name) if item.path.name in FIRST else len(FIRST))


def pytest_report_header(config: pytest.Config) -> str | None:
    choice = os.environ.get(acceptance.ENV)
    if not choice:
        return (f"acceptance tests left out ({acceptance.ENV} unset: make acceptance runs them, CI one slice of "
                f"{len(acceptance.SLICES)})")
    if choice == "slice":
        index = acceptance.slice_of(acceptance.head_commit())
        return f"acceptance slice {index} of 0-{len(acceptance.SLICES) - 1} (from the commit): {acceptance.SLICES[index]}"
    return f"acceptance tests: {choice}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    sandbox = _ACTIVE.get("session")
    if report.failed and sandbox is not None and item.get_closest_marker("integration"):
        for node_id in sandbox.broker_ids:
            try:
                tail = sandbox.log_tail(node_id, LOG_TAIL_LINES)
            except Exception as exc:  # noqa: BLE001 (never hide the test's own failure)
                tail = f"<cannot read the log: {exc}>"
            report.sections.append((f"kafka node {node_id} server.log (last {LOG_TAIL_LINES} lines)", tail))
    return report


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """The session's Kafka cluster: 5 brokers on racks r1, r2, r3, r1, r2; SASL, TLS and ACLs enabled."""
    reuse = os.environ.get("AKR_SANDBOX_DIR")
    if reuse:
        existing = Sandbox.load(reuse)
        dead = [n["id"] for n in existing.status()["nodes"] if not n["alive"]]
        if dead:
            pytest.fail(f"AKR_SANDBOX_DIR={reuse}: nodes {dead} are not running")
        _ACTIVE["session"] = existing
        try:
            yield existing
        finally:
            _ACTIVE.pop("session", None)
        return

    started = Sandbox(tmp_path_factory.mktemp("kafka-sandbox"))
    # make compat's ZooKeeper-mode cell (tests/compat/airflow_line.py): ACLs are KRaft only in the sandbox
    zookeeper = os.environ.get("AKR_SANDBOX_ZOOKEEPER", "").lower() in ("1", "true", "yes")
    started.up(
        brokers=5,
        racks=3,
        sasl=True,
        timeout=float(os.environ.get("AKR_SANDBOX_TIMEOUT", "180")),
        tls=True,  # their start-up cost: docs/sandbox.md
        acls=not zookeeper,
        zookeeper=zookeeper,
    )
    _ACTIVE["session"] = started
    try:
        yield started
    finally:
        _ACTIVE.pop("session", None)
        if os.environ.get("AKR_SANDBOX_KEEP", "").lower() in ("1", "true", "yes"):
            print(f"\nkafka sandbox left running in {started.dir}", file=sys.stderr)
        else:
            started.down()


@pytest.fixture(scope="module", autouse=True)
def _topics_of_the_module_deleted(request: pytest.FixtureRequest) -> Iterator[None]:
    """The topics a test module created in the session's sandbox are deleted after it. Every broker's replica
    fetchers, and every snapshot of all topics (the health gate reads them at each step), would otherwise carry
    the partitions of every module before it for the rest of the session (a few thousand by its end). Topics
    are unique per test (``unique_topic``), so no other module reads them; Kafka's internal ones are kept."""
    if not any(item.module is request.module and "sandbox" in item.fixturenames for item in request.session.items):
        yield
        return
    from confluent_kafka.admin import AdminClient
    from kafka_helpers import delete_topics

    config = request.getfixturevalue("sandbox").client_config()
    before = set(AdminClient(dict(config)).list_topics(timeout=30).topics)
    yield
    try:
        now = set(AdminClient(dict(config)).list_topics(timeout=30).topics)
        delete_topics(config, sorted(t for t in now - before if not t.startswith("__")))
    except Exception as exc:  # noqa: BLE001 (housekeeping: a module that left a broker down fails on its own)
        print(f"\n{request.module.__name__}: its topics were not all deleted ({exc}); they stay for the session",
              file=sys.stderr)


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses: ``t-<test name>-<random hex>``."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:150]
    return f"t-{name}-{secrets.token_hex(4)}"


# -- real Airflow task runs -----------------------------------------------------------------------

KAFKA_CONN_ID = "kafka_default"


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory, sandbox: Sandbox, migrated_airflow_db: Path) -> dict[str, str]:
    """Environment of a migrated AIRFLOW_HOME with an empty dags folder, shared by the session,
    and the ``kafka_default`` connection pointing at the sandbox (SASL) in the environment.
    Write a DAG file into ``env["AIRFLOW__CORE__DAGS_FOLDER"]`` and run it with :func:`run_dag_file`."""
    import json

    home = tmp_path_factory.mktemp("airflow-home")
    dags = home / "dags"
    dags.mkdir()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AKR_OUTPUT_DIR": str(home / "kafka_reassign"),
        f"AIRFLOW_CONN_{KAFKA_CONN_ID.upper()}": json.dumps({"conn_type": "kafka", "extra": sandbox.client_config(sasl=True)}),
    }
    copy_migrated_db(migrated_airflow_db, home)
    return env


#: the migrated database's directory, set by xdist's controller for its workers (:func:`pytest_configure`)
_DB_TEMPLATE_ENV = "AKR_AIRFLOW_DB_TEMPLATE"
_migrations: dict[str, Any] = {}


class _Migration(NamedTuple):
    home: Path
    proc: subprocess.Popen


def _start_migration(home: Path) -> _Migration:
    """``airflow db migrate`` into ``home`` (a SQLite database), started now; ``home/done`` appears once it succeeded,
    ``home/failed`` (its output) if it did not."""
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)
    airflow = Path(sys.executable).with_name("airflow")
    script = (f"{shlex.quote(str(airflow))} db migrate > migrate.log 2>&1 && touch done || mv migrate.log failed")
    return _Migration(home, subprocess.Popen(["sh", "-c", script], cwd=home, env=env, start_new_session=True))


def _wait_migrated(home: Path, timeout: float = 300) -> Path:
    def finished() -> bool:
        if (home / "failed").exists():
            raise RuntimeError(f"airflow db migrate failed in {home}:\n{(home / 'failed').read_text()[-4000:]}")
        return (home / "done").exists()

    wait_until(finished, f"airflow db migrate in {home}", timeout=timeout, every=0.2)
    return home / "airflow.db"


@pytest.fixture(scope="session")
def migrated_airflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite metadata database migrated once (15-30 s), which each new ``AIRFLOW_HOME`` of the session copies
    (:func:`copy_migrated_db`) instead of migrating again. Under xdist the controller migrates it once for every
    worker, in the background while the workers start their sandboxes (:func:`pytest_configure`; each worker used to
    migrate its own, after its sandbox: 20 s of each worker's start on a busy machine, CI of 3527f39); alone, the
    session migrates its own."""
    shared = os.environ.get(_DB_TEMPLATE_ENV)
    if shared:
        return _wait_migrated(Path(shared))
    return _wait_migrated(_start_migration(tmp_path_factory.mktemp("airflow-db-template")).home)


# -- a real S3-compatible store ------------------------------------------------------------------

@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStoreSandbox]:
    """S3Proxy from Maven Central serving one bucket from a temporary directory, for the session."""
    store = ObjectStoreSandbox(tmp_path_factory.mktemp("object-store"))
    store.up()
    try:
        yield store
    finally:
        store.down()


@pytest.fixture(scope="module")
def stack(sandbox: Sandbox, object_store: ObjectStoreSandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The production stack (airflow_kafka_reassign.sandbox.stack: PostgreSQL, Redis, the CeleryExecutor with two
    workers, a scheduler, a DAG processor, a triggerer and the API server) on the session's Kafka sandbox and S3 store:
    one per test module that uses it (test_stack.py, test_stack_faults.py: on two xdist workers at once)."""
    from stack_support import stack_running

    with stack_running(tmp_path_factory.mktemp("stack"), kafka_dir=sandbox.dir, object_store_dir=object_store.dir,
                       dags=None, heartbeat_timeout_s=20) as st:
        yield st


@pytest.fixture
def idle_admin(sandbox: Sandbox) -> Iterator[Any]:
    """An admin client of the sandbox, once no reassignment of another test is in flight
    (execution refuses to run beside foreign reassignments)."""
    from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
    from airflow_kafka_reassign.sandbox import wait_until

    with KafkaClusterAdmin(sandbox.client_config(), timeout_s=30) as a:
        wait_until(lambda: not a.list_reassignments(), what="the sandbox to have no reassignment in flight",
                   timeout=180)
        yield a


@pytest.fixture(autouse=True)
def no_cordon_left_on_the_shared_cluster(request: pytest.FixtureRequest) -> Iterator[None]:
    """A decommission that finishes leaves its brokers cordoned (KIP-1066: until they are unregistered); on the
    session's shared cluster the next test must find every broker open again (Kafka 4.4 refuses an explicit
    assignment onto a cordoned broker)."""
    yield
    if "sandbox" in request.fixturenames:
        from kafka_helpers import reopen_cordoned_brokers

        reopen_cordoned_brokers(request.getfixturevalue("sandbox").client_config())
