"""``make demo`` and ``make ui``: the main job end to end on a local sandbox Kafka cluster.

``python -m airflow_kafka_reassign.demo`` (``make demo``), from a clean clone, in a few minutes:

1. starts a 5-broker, 3-rack sandbox Kafka cluster (Apache Kafka from Maven Central);
2. loads a skewed workload with real data: every replica on brokers 3-5, brokers 1 and 2 empty;
3. prepares a throw-away Airflow (its own ``AIRFLOW_HOME``, ``airflow db migrate``) whose dags
   folder is ``example_dags/`` and whose ``kafka_default`` connection points at the sandbox;
4. runs the ``kafka_decommission_brokers`` example DAG with ``airflow dags test`` (which exits 1
   when the run fails): broker 5 is drained and the remaining brokers 1-4 end balanced (a
   decommission plus rebalance in one plan: snapshot -> Spark plan job -> guarded, throttled,
   batched execution -> wait with one progress line per poke -> verification);
5. prints the per-broker table before and after (replicas, leaders, bytes), the replica moves
   against the planner's lower bound, the copy phase (reassignments in flight, as a second client saw
   them) against the plan's throttle bound (``sandbox/pace.py``), and where the plan report (HTML +
   charts) was written;
6. stops the sandbox. The exit status is non-zero if any step failed.

``python -m airflow_kafka_reassign.demo ui`` (``make ui``) is for people who want the Airflow UI:
it starts the sandbox with the same workload, and ``airflow standalone`` with the example DAGs and a
``kafka_default`` connection pointing at the sandbox, on http://127.0.0.1:8080 (no login: local
use only). It runs in the foreground: Ctrl-C stops Airflow and the sandbox. From another terminal
(or after the terminal was lost) ``python -m airflow_kafka_reassign.demo ui-stop`` does the same.

Options: ``--dir DIR`` (work directory, default ``demo-output``), ``--keep`` (demo: leave the
sandbox running), ``--port`` (ui).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_kafka_reassign.core.vocabulary.loads import broker_loads
from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot, ReassignmentPlan
from airflow_kafka_reassign.core.vocabulary.units import format_bytes
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.sandbox.pace import CopyPhase, plan_throttle_bound_s

#: topic -> (partitions, RF, MB per partition); all placed on brokers 3-5 only.
SKEWED_TOPICS = {"orders": (12, 3, 2.0), "payments": (6, 2, 1.0), "clicks": (18, 2, 0.5)}
#: The broker the demo decommissions: not a KRaft controller voter (the sandbox's nodes 1-3 are combined
#: broker+controller voters; the decommission refuses to drain one).
DECOMMISSIONED = 5
DEMO_DAG = "kafka_decommission_brokers"
#: bytes/s per broker: the plan's busiest broker needs about 6 s at this rate (its throttle bound), so the moves take
#: seconds and the progress line shows them; at 20 MB/s (1.6 s) a poke's own cost set the pace (docs/performance.md)
DEMO_THROTTLE = 5_000_000
REPO = Path(__file__).resolve().parents[1]
EXAMPLE_DAGS = REPO / "example_dags"
UI_STATE = "ui.json"
#: Lines of the DAG run's output echoed to the terminal (everything goes to the log file).
ECHO = (
    "| moves ", "moves done", "Plan:", "Plan report", "Snapshot:", "rollback plan written", "refused", "stale",
    "throttle configs restored", "preferred leaders", "{'drained'", "Traceback", "new_state=failed", "[error",
)


class DemoError(RuntimeError):
    """A demo step failed; the message says which and where its log is."""


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def skewed_assignment(partitions: int, rf: int, crowded: tuple[int, ...] = (3, 4, 5)) -> list[list[int]]:
    n = len(crowded)
    return [[crowded[(p + k) % n] for k in range(rf)] for p in range(partitions)]


# -- the cluster ----------------------------------------------------------------------------------


def start_sandbox(directory: Path) -> Any:
    from airflow_kafka_reassign.sandbox import Sandbox

    sandbox = Sandbox(directory)
    started = time.monotonic()
    say("starting a 5-broker, 3-rack Kafka sandbox (the first run downloads Kafka from Maven Central)")
    info = sandbox.up(brokers=5, racks=3)
    racks = ", ".join(f"{b['id']}:{b['rack']}" for b in info["brokers"])
    print(f"    Kafka {info['kafka_version']} at {info['bootstrap_servers']}, racks {racks} "
          f"(up in {time.monotonic() - started:.1f} s)", flush=True)
    return sandbox


def load_workload(config: Mapping[str, str]) -> None:
    from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
    from airflow_kafka_reassign.kafka.workload import create_topic, produce

    say("creating skewed topics with real data: every replica on brokers 3-5, brokers 1 and 2 empty")
    for name, (partitions, rf, _) in SKEWED_TOPICS.items():
        create_topic(config, name, skewed_assignment(partitions, rf))
    with KafkaClusterAdmin(config) as admin:  # new topics take a moment to have leaders everywhere
        deadline = time.monotonic() + 60
        expected = sum(p for p, _, _ in SKEWED_TOPICS.values())
        while True:
            try:
                parts = admin.snapshot(topics=list(SKEWED_TOPICS)).partitions
            except ConfigurationError:  # the answering broker does not know every new topic yet
                parts = ()
            if len(parts) == expected and all(p.leader is not None for p in parts):
                break
            if time.monotonic() > deadline:
                raise DemoError("the demo topics have no leader 60 s after their creation")
            time.sleep(0.3)
    for name, (partitions, rf, mb) in SKEWED_TOPICS.items():
        for p in range(partitions):
            produce(config, name, partition=p, megabytes=mb)
        print(f"    {name}: {partitions} partitions, RF {rf}, {format_bytes(mb * partitions * 1_000_000)} of records",
              flush=True)


def demo_snapshot(config: Mapping[str, str]) -> ClusterSnapshot:
    from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

    with KafkaClusterAdmin(config) as admin:
        return admin.snapshot(topics=list(SKEWED_TOPICS), include_sizes=True)


def before_after_table(before: ClusterSnapshot, after: ClusterSnapshot) -> str:
    """Per broker: replicas, leaders and bytes, before -> after, with the max-min spread."""
    a, b = broker_loads(before), broker_loads(after)
    racks = {**before.racks, **after.racks}
    ids = sorted(set(a) | set(b))
    zero = {"replicas": 0, "leaders": 0, "bytes": 0}
    head = f"{'broker':>6}  {'rack':<5} {'replicas':>13} {'leaders':>11} {'bytes':>21}"
    lines = [head, "-" * len(head)]
    for i in ids:
        x, y = a.get(i, zero), b.get(i, zero)
        lines.append(
            f"{i:>6}  {racks.get(i) or '-':<5} {x['replicas']:>5} -> {y['replicas']:<4} {x['leaders']:>4} -> "
            f"{y['leaders']:<4} {format_bytes(x['bytes']):>8} -> {format_bytes(y['bytes']):<9}"
        )

    def spread(loads: Mapping[int, Mapping[str, int]], key: str, skip: Iterable[int] = ()) -> int:
        values = [v[key] for k, v in loads.items() if k not in set(skip)]
        return max(values) - min(values) if values else 0

    lines.append("-" * len(head))
    lines.append(
        f"{'max-min':>6}  {'':<5} {spread(a, 'replicas'):>5} -> {spread(b, 'replicas', [DECOMMISSIONED]):<4} "
        f"{spread(a, 'leaders'):>4} -> {spread(b, 'leaders', [DECOMMISSIONED]):<4}"
        f"   (after: over the brokers left)"
    )
    return "\n".join(lines)


# -- Airflow ---------------------------------------------------------------------------------------


def airflow_bin() -> str:
    return str(Path(sys.executable).with_name("airflow"))


def airflow_env(workdir: Path, kafka_config: Mapping[str, str], **extra: str) -> dict[str, str]:
    """A private Airflow: its own home and database, the example DAGs, ``kafka_default`` -> the sandbox."""
    if not EXAMPLE_DAGS.is_dir():
        raise DemoError(f"{EXAMPLE_DAGS} does not exist: run the demo from a clone of the repository")
    home = workdir / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(EXAMPLE_DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "AKR_OUTPUT_DIR": str(workdir / "plans"),
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": dict(kafka_config)}),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        # `airflow standalone` starts its components as `airflow ...` found on PATH
        "PATH": os.pathsep.join([str(Path(airflow_bin()).parent), os.environ.get("PATH", "")]),
        **extra,
    }
    env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)
    return env


def airflow(env: Mapping[str, str], *args: str, log: Path, timeout: float = 600) -> None:
    """``airflow ARGS`` with its output in ``log``; a non-zero exit is a :class:`DemoError`."""
    with open(log, "ab") as out:
        proc = subprocess.run([airflow_bin(), *args], env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                              timeout=timeout, check=False)
    if proc.returncode != 0:
        raise DemoError(f"'airflow {' '.join(args[:2])}' exited {proc.returncode}; see {log}\n{_tail(log)}")


def _tail(path: Path, lines: int = 25) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join("    " + line for line in text[-lines:])


def migrate(env: Mapping[str, str], logs: Path) -> None:
    started = time.monotonic()
    say(f"preparing Airflow in {env['AIRFLOW_HOME']} (airflow db migrate)")
    airflow(env, "db", "migrate", log=logs / "airflow-db-migrate.log", timeout=600)
    print(f"    migrated in {time.monotonic() - started:.1f} s", flush=True)


def dags_test(env: Mapping[str, str], dag_id: str, conf: Mapping[str, Any], log: Path, timeout: float = 900) -> None:
    """``airflow dags test DAG -c CONF``: the whole run in this process tree; exits 1 when it failed.

    The task logs go to ``log``; the progress lines and the key results are echoed.
    """
    cmd = [airflow_bin(), "dags", "test", dag_id, "-c", json.dumps(conf)]
    print(f"    $ airflow dags test {dag_id} -c '{json.dumps(conf)}'", flush=True)
    deadline = time.monotonic() + timeout
    with open(log, "w", encoding="utf-8") as out, subprocess.Popen(
        cmd, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            if any(key in line for key in ECHO):
                print("    | " + _short(line.rstrip()), flush=True)
            if time.monotonic() > deadline:
                proc.kill()
                raise DemoError(f"the DAG run took over {timeout:g} s; see {log}")
        code = proc.wait()
    if code != 0:
        raise DemoError(f"the {dag_id} DAG run failed (airflow dags test exited {code}); see {log}")


def _short(line: str) -> str:
    """A task-log line without Airflow's timestamp, level, logger and key=value decoration."""
    for sep in ("} INFO - ", "} WARNING - ", "} ERROR - "):
        if sep in line:
            return line.split(sep, 1)[1][:220]
    text = line
    if text.startswith("20") and "[" in text[:40]:  # "2026-...Z [info     ] message [logger] k=v ..."
        level = text.split("[", 1)[1].split("]", 1)[0].strip()
        text = text.split("] ", 1)[-1]
        text = re.split(r" \[(?:airflow|task|py\.warnings)[\w.]*\]", text, maxsplit=1)[0].rstrip()
        if level not in ("info", ""):
            text = f"{level.upper()}: {text}"
    return text[:220]


def newest_plan_dir(workdir: Path, dag_id: str) -> Path:
    plans = sorted((workdir / "plans" / dag_id).glob("*/plan/plan/metrics.json"), key=lambda p: p.stat().st_mtime)
    if not plans:
        raise DemoError(f"no plan directory under {workdir / 'plans' / dag_id}: did the plan task run?")
    return plans[-1].parent


# -- make demo ------------------------------------------------------------------------------------


def run(workdir: Path, keep: bool) -> int:
    started = time.monotonic()
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    sandbox = start_sandbox(workdir / "sandbox")
    try:
        config = sandbox.client_config()
        load_workload(config)
        before = demo_snapshot(config)
        env = airflow_env(workdir, config)
        migrate(env, logs)

        say(f"running the {DEMO_DAG} example DAG through Airflow: drain broker {DECOMMISSIONED}, "
            "balance brokers 1-4")
        conf = {
            "broker_ids": [DECOMMISSIONED],
            "dry_run": False,
            "require_approval": False,  # `airflow dags test`: nobody to answer (make ui shows the approval)
            "throttle_bytes_per_sec": DEMO_THROTTLE,
            "max_moves": 12,
            "max_moves_per_broker": 4,
            "topic_include": list(SKEWED_TOPICS),
        }
        run_started = time.monotonic()
        with CopyPhase(config, SKEWED_TOPICS) as phase:  # the pace, as a second client sees it
            dags_test(env, DEMO_DAG, conf, logs / f"{DEMO_DAG}.log")
        print(f"    DAG run succeeded in {time.monotonic() - run_started:.1f} s (task logs: {logs / DEMO_DAG}.log)",
              flush=True)

        after = demo_snapshot(config)
        say("per-broker load before -> after (demo topics; bytes from DescribeLogDirs)")
        print(before_after_table(before, after), flush=True)
        left = sum(1 for p in after.partitions if DECOMMISSIONED in p.replicas)
        if left:
            raise DemoError(f"broker {DECOMMISSIONED} still holds {left} replica(s) after the DAG run")

        plan_dir = newest_plan_dir(workdir, DEMO_DAG)
        summary = json.loads((plan_dir / "metrics.json").read_text())["summary"]
        say("the plan")
        print(f"    replica moves {summary['replica_moves']} (lower bound {summary['lower_bound']}, "
              f"{summary['replica_moves'] / max(1, summary['lower_bound']):.2f}x), "
              f"{summary['partitions_moved']} partitions, {format_bytes(summary['bytes_to_move'] or 0)} to copy, "
              f"{summary['leader_changes']} leader changes", flush=True)
        plan = ReassignmentPlan.model_validate_json((plan_dir / "plan.json").read_text())
        bound = plan_throttle_bound_s(plan, before, throttle=DEMO_THROTTLE)
        copied = phase.seconds
        print(f"    copy phase {'n/a' if copied is None else f'{copied:.1f} s'} (reassignments in flight, as a second "
              f"client saw them every {phase.every:g} s); the plan's throttle bound {bound:.1f} s (its busiest "
              f"broker's bytes in or out at {format_bytes(DEMO_THROTTLE)}/s)"
              + ("" if copied is None or not bound else f": {copied / bound:.1f}x"), flush=True)
        report = plan_dir / "report" / "report.html"
        if not report.is_file():
            raise DemoError(f"the plan report {report} was not written")
        print(f"    plan directory: {plan_dir}\n    plan report:    {report} (open it in a browser)", flush=True)
    finally:
        if keep:
            say(f"leaving the sandbox running; stop it with: "
                f"{sys.executable} -m airflow_kafka_reassign.sandbox down --dir {sandbox.dir}")
        else:
            say("stopping the sandbox")
            sandbox.down()
    say(f"demo finished in {time.monotonic() - started:.1f} s")
    return 0


# -- make ui --------------------------------------------------------------------------------------


def _health(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=3) as r:  # noqa: S310 (local URL)
            return json.loads(r.read())
    except Exception:  # noqa: BLE001 (not up yet)
        return None


def _group_alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap the leader if it is our child (else it stays a zombie, "alive")
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_processes(pgid: int) -> dict[int, tuple[int, str, str]]:
    """``{pid: (parent pid, state, command line)}`` of the processes of group ``pgid`` (Linux ``/proc``; empty elsewhere)."""
    found: dict[int, tuple[int, str, str]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
                fields = stat.rsplit(")", 1)[1].split()
                if int(fields[2]) != pgid:
                    continue
                cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            found[int(entry.name)] = (int(fields[1]), fields[0], cmd.strip())
    return found


def _trigger_runners(pgid: int) -> list[int]:
    """The trigger runner processes of the triggerer that ``airflow standalone`` (leader ``pgid``) started."""
    procs = _group_processes(pgid)
    triggerers = {pid for pid, (ppid, _, cmd) in procs.items() if ppid == pgid and " triggerer" in f" {cmd}"}
    return [pid for pid, (ppid, state, cmd) in procs.items()
            if ppid in triggerers and state != "Z" and "serve-logs" not in cmd]


def _ignores_sigint(pid: int) -> bool:
    """Whether ``pid`` ignores SIGINT (started in the background by a non-interactive shell: ``nohup``, CI)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    except (OSError, ValueError, IndexError):
        pass
    return False


@dataclass
class Stopped:
    """How a process group was stopped: how long it took, and what needed more than a polite signal."""

    seconds: float
    #: escalations beyond the processes' own shutdown ("SIGTERM to the group", "SIGKILL to 3 process(es)")
    forced: list[str] = field(default_factory=list)

    def line(self) -> str:
        how = f" ({'; '.join(self.forced)})" if self.forced else " (each process by its own shutdown, no SIGKILL)"
        return f"{self.seconds:.1f} s{how}"


def _stop_group(pid: int, timeout: float = 30.0, *, runner_grace: float = 10.0) -> Stopped:
    """Stop the process group of ``airflow standalone`` the way it stops itself; returns how it went.

    ``airflow standalone`` (the leader) stops on Ctrl-C by sending SIGTERM to each component (API
    server, scheduler, DAG processor, triggerer), each of which stops its own children (the executor's
    workers, serve-logs) and exits. That is done here for it, with one change for the triggerer:

    1. SIGINT to the triggerer's trigger runner (what the triggerer itself sends it when stopping) and
       SIGTERM to every other component, at once;
    2. the triggerer ends on its own once its runner has ended (it sees that at its next poll); it gets
       its SIGTERM only then (or after ``runner_grace`` s): stopped by SIGTERM first, Airflow 3.3's
       triggerer can wait 10 s (its escalation delay) for a runner that exited between two of its polls;
    3. once the components are gone, SIGINT to the leader (SIGTERM when it ignores SIGINT: started in
       the background by a script), which then has nothing left to stop;
    4. only if something is still running after ``timeout`` s: SIGTERM to every process of the group,
       and SIGKILL 5 s later. Those escalations are reported in :attr:`Stopped.forced`.

    The scheduler, triggerer and executor hold no state that needs more: a task they ran is retried or
    resumed from the cluster and the plan (docs/execute.md)."""
    started = time.monotonic()
    out = Stopped(0.0)
    procs = _group_processes(pid)
    components = [c for c, (ppid, state, _) in procs.items() if ppid == pid and state != "Z"]
    runners = {r: procs[r][0] for r in _trigger_runners(pid)}  # runner -> its triggerer
    for target, sig in [*((r, signal.SIGINT) for r in runners),
                        *((c, signal.SIGTERM) for c in components if c not in runners.values())]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, sig)
    waiting = dict(runners)
    while time.monotonic() - started < timeout:
        procs = _group_processes(pid)
        for runner, triggerer in list(waiting.items()):
            if runner not in procs or time.monotonic() - started > runner_grace:  # reaped by its triggerer
                del waiting[runner]
                if triggerer in procs and procs[triggerer][1] != "Z":
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(triggerer, signal.SIGTERM)
        if not waiting and not any(c in procs and procs[c][1] != "Z" for c in components):
            break
        time.sleep(0.1)
    if pid in _group_processes(pid):  # still the leader of its own group (a stale pid may have been reused)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM if _ignores_sigint(pid) else signal.SIGINT)
    for sig, until in ((None, timeout), (signal.SIGTERM, timeout + 5)):
        if sig is not None:
            out.forced.append(f"{sig.name} to {len(_group_processes(pid)) or 'the'} process(es) left after "
                              f"{time.monotonic() - started:.0f} s")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)
        while time.monotonic() - started < until:
            if not _group_alive(pid):
                out.seconds = time.monotonic() - started
                return out
            time.sleep(0.1)
    out.forced.append(f"SIGKILL to {len(_group_processes(pid)) or 'the'} process(es) left after "
                      f"{time.monotonic() - started:.0f} s")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    while _group_alive(pid) and time.monotonic() - started < timeout + 10:
        time.sleep(0.1)
    out.seconds = time.monotonic() - started
    return out


def ui(workdir: Path, port: int) -> int:
    from airflow_kafka_reassign.sandbox import Sandbox, SandboxError

    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    state_file = workdir / UI_STATE
    if state_file.exists():
        old = json.loads(state_file.read_text())
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(old["standalone_pgid"], 0)
            raise DemoError(f"a UI is already running from {workdir} (pid {old['standalone_pgid']}); "
                            f"stop it with: {sys.executable} -m airflow_kafka_reassign.demo ui-stop --dir {workdir}")
    try:
        sandbox = Sandbox.load(workdir / "sandbox")
        if not sandbox.status()["all_alive"]:
            raise SandboxError("not running")
        say(f"reusing the sandbox running in {sandbox.dir}")
    except SandboxError:
        sandbox = start_sandbox(workdir / "sandbox")
    config = sandbox.client_config()
    from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin

    with KafkaClusterAdmin(config) as admin:
        existing = set(admin.list_topic_names())
    if not set(SKEWED_TOPICS) <= existing:
        load_workload(config)

    url = f"http://127.0.0.1:{port}"
    env = airflow_env(
        workdir, config,
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__CORE__PARALLELISM="4",
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__BASE_URL=url,
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{url}/execution/",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="30",
    )
    # the UI lists connections from the database: store kafka_default there (no secret: plain listener)
    env.pop("AIRFLOW_CONN_KAFKA_DEFAULT")
    migrate(env, logs)
    subprocess.run([airflow_bin(), "connections", "delete", "kafka_default"], env=env, capture_output=True,
                   check=False, timeout=120)
    airflow(env, "connections", "add", "kafka_default", "--conn-type", "kafka", "--conn-extra",
            json.dumps(config), log=logs / "airflow-connections.log", timeout=120)

    # Ctrl-C stops everything, even when this was started from a script that ignores SIGINT; airflow standalone
    # then honours SIGINT too (a handled signal is reset to its default in a child)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    say(f"starting airflow standalone on {url} (logs: {logs / 'standalone.log'})")
    out = open(logs / "standalone.log", "ab")  # noqa: SIM115 (closed at the end)
    proc = subprocess.Popen([airflow_bin(), "standalone"], env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    state_file.write_text(json.dumps({"standalone_pgid": proc.pid, "sandbox_dir": str(sandbox.dir), "url": url}))
    stopping = False

    def stopped_elsewhere() -> bool:
        """``ui-stop`` (another terminal) marks the state file, then stops everything itself."""
        try:
            return bool(json.loads(state_file.read_text()).get("stopping"))
        except (OSError, ValueError):
            return True  # the state file is gone: ui-stop is done

    def stop(*_: object) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        if stopped_elsewhere():
            say("stopped by ui-stop")
            out.close()
            return
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C would leave things half stopped
        say("stopping airflow standalone and the sandbox (a few seconds)")
        stop_everything(proc.pid, sandbox.dir)
        state_file.unlink(missing_ok=True)
        out.close()

    try:
        deadline = time.monotonic() + 240
        while _health(url) is None:
            if proc.poll() is not None:
                raise DemoError(f"airflow standalone exited {proc.returncode}; see {logs / 'standalone.log'}\n"
                                f"{_tail(logs / 'standalone.log')}")
            if time.monotonic() > deadline:
                raise DemoError(f"the Airflow UI did not answer on {url} within 240 s; see {logs / 'standalone.log'}")
            time.sleep(2)
        say(f"Airflow UI: {url} (no login: local use only)")
        print(
            "    DAGs: the example_dags/ folder (kafka_decommission_brokers, kafka_scale_out, ...);\n"
            f"    connection kafka_default -> {config['bootstrap.servers']}\n"
            f"    plans and reports: {workdir / 'plans'}\n"
            "    stop: Ctrl-C here, or from another terminal:\n"
            f"      {sys.executable} -m airflow_kafka_reassign.demo ui-stop --dir {workdir}",
            flush=True,
        )
        while proc.poll() is None:
            time.sleep(0.2)  # ui-stop waits for this process to reap airflow standalone
        if not stopping and not stopped_elsewhere():
            raise DemoError(f"airflow standalone exited {proc.returncode}; see {logs / 'standalone.log'}")
    except KeyboardInterrupt:
        pass
    finally:
        stop()
    return 0


def stop_everything(standalone_pgid: int | None, sandbox_dir: Path) -> None:
    """Stop ``airflow standalone`` (:func:`_stop_group`) and the sandbox at the same time, saying how long each took."""
    from airflow_kafka_reassign.sandbox import Sandbox

    started = time.monotonic()
    sandbox_done: list[float | BaseException] = []

    def sandbox_down() -> None:
        try:
            Sandbox(sandbox_dir).down()
            sandbox_done.append(time.monotonic() - started)
        except BaseException as e:  # noqa: BLE001 (re-raised below, in the caller's thread)
            sandbox_done.append(e)

    thread = threading.Thread(target=sandbox_down, name="sandbox-down", daemon=True)
    thread.start()
    if standalone_pgid is not None:
        print(f"    airflow standalone stopped in {_stop_group(standalone_pgid).line()}", flush=True)
    thread.join()
    if isinstance(sandbox_done[0], BaseException):
        raise sandbox_done[0]
    print(f"    sandbox stopped in {sandbox_done[0]:.1f} s; everything stopped in {time.monotonic() - started:.1f} s",
          flush=True)


def ui_stop(workdir: Path) -> int:
    """Stop what ``ui`` started from ``workdir`` (when its terminal is gone)."""
    state_file = workdir / UI_STATE
    pgid = None
    if state_file.exists():
        state = json.loads(state_file.read_text())
        state_file.write_text(json.dumps({**state, "stopping": True}))  # the `make ui` terminal then ends cleanly
        pgid = int(state["standalone_pgid"])
        say(f"stopping airflow standalone (process group {pgid}) and the sandbox (a few seconds)")
    else:
        say("stopping the sandbox")
    stop_everything(pgid, workdir / "sandbox")
    state_file.unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_kafka_reassign.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="run", choices=("run", "ui", "ui-stop"),
                        help="run (default): the demo; ui: airflow standalone + sandbox; ui-stop: stop them")
    parser.add_argument("--dir", type=Path, default=Path("demo-output"), help="work directory (default: demo-output)")
    parser.add_argument("--keep", action="store_true", help="run: leave the sandbox running at the end")
    parser.add_argument("--port", type=int, default=8080, help="ui: the port of the Airflow UI (default 8080)")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    workdir = args.dir.resolve()
    try:
        if args.command == "ui":
            return ui(workdir, args.port)
        if args.command == "ui-stop":
            return ui_stop(workdir)
        return run(workdir, args.keep)
    except Exception as e:  # the demo's contract: a clear message and a non-zero exit
        print(f"demo FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
