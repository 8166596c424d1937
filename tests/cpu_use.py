"""Where the CPU goes in a test run: the CPU time of every process the run started, by kind (tests/timings.py prints it).

The run's controller marks its environment (``AKR_TEST_RUN``: a random id, inherited by the xdist workers and by
everything they start: Kafka brokers, spark-submit and its Python workers, ``dag.test()`` runners, the stack's
Airflow components) and samples ``/proc`` once a second in a thread. A process whose environment holds the mark is
the run's; its CPU time (user + system) is the last value seen. So the table is a lower bound: a process that lives
less than a second between two samples is not seen, one that ends loses at most a second, and one started with an
environment of its own (the stack's PostgreSQL) is not the run's. Linux only (no ``/proc``: no table).

Why it matters here: on a 2-core machine the integration tests are bound by CPU, not by waits (a clean clone of
cc58f65: 2,157 s of CPU in 1,232 s, the Kafka brokers 870 s of it), so a cut in waits alone does not shorten the run.
Nothing asserts on these numbers.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import uuid
from collections import Counter
from pathlib import Path

MARK_ENV = "AKR_TEST_RUN"
PROC = Path("/proc")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

#: (kind, pattern in the command line), the first that matches; the order matters (a spark-submit's command names
#: Python files, a DAG run's runner names Spark)
KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((kind, re.compile(pattern)) for kind, pattern in (
    ("Kafka brokers", r"\bkafka\.Kafka\b"),
    ("ZooKeeper", r"zookeeper\.server"),
    ("Spark JVMs", r"org\.apache\.spark\.|spark-class"),
    ("Spark Python workers", r"pyspark[./]daemon|pyspark[./]worker"),
    ("the plan job's Python driver", r"spark/plan_job\.py"),
    ("dag.test() runs", r"EXECUTION-API"),
    ("S3Proxy", r"(?i)s3proxy"),
    ("other JVMs (Kafka tools)", r"(^|/)java\s"),
    ("Chromium", r"chrom"),
    ("Airflow components (stack, UI)", r"\bairflow (scheduler|triggerer|api-server|dag-processor|standalone|celery)"
                                       r"|celery|supervisor:|worker -- |serve-logs"),
    ("Airflow CLI", r"\bairflow\b"),
    ("Redis", r"redis-server"),
    ("pytest", r"pytest|execnet|exec\(eval\(sys\.stdin"),
))


def kind_of(command: str) -> str:
    """The kind of a process from its command line (arguments joined by spaces)."""
    for kind, pattern in KINDS:
        if pattern.search(command):
            return kind
    return "other"


class CpuUse:
    """Samples the CPU time of the processes marked with this run's id (:meth:`start` marks ``os.environ``)."""

    def __init__(self, interval_s: float = 1.0, proc: Path = PROC) -> None:
        self.mark = f"{MARK_ENV}={uuid.uuid4().hex}".encode()
        self.interval_s = interval_s
        self.proc = proc
        self._seen: dict[tuple[str, str], list] = {}  # (pid, start tick) -> [cpu s, kind] (None: not the run's)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="akr-cpu-use", daemon=True)

    def start(self) -> None:
        os.environ[MARK_ENV] = self.mark.decode().split("=", 1)[1]
        if self.proc.is_dir():
            self._thread.start()

    def stop(self) -> dict[str, tuple[float, int]]:
        """Stop sampling; ``{kind: (CPU seconds, processes)}``."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.sample()
        return self.by_kind()

    def by_kind(self) -> dict[str, tuple[float, int]]:
        seconds: Counter[str] = Counter()
        count: Counter[str] = Counter()
        for entry in self._seen.values():
            if entry is not None:
                seconds[entry[1]] += entry[0]
                count[entry[1]] += 1
        return {kind: (seconds[kind], count[kind]) for kind, _ in seconds.most_common()}

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        for entry in self.proc.iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
                    self._sample_one(entry)

    def _sample_one(self, entry: Path) -> None:
        stat = (entry / "stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        key = (entry.name, fields[19])  # field 22 of stat: the start time, so a reused pid is another process
        cpu_s = (int(fields[11]) + int(fields[12])) / _TICK
        if key not in self._seen:
            if self.mark not in (entry / "environ").read_bytes().split(b"\0"):
                self._seen[key] = None
                return
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            self._seen[key] = [cpu_s, kind_of(command)]
        elif self._seen[key] is not None:
            self._seen[key][0] = max(self._seen[key][0], cpu_s)


def table(by_kind: dict[str, tuple[float, int]], wall_s: float) -> list[str]:
    """The printed lines: the run's CPU time and how many cores it kept busy on average, then each kind."""
    total = sum(s for s, _ in by_kind.values())
    if not total:
        return []
    lines = [f"-- CPU of the run's processes (a lower bound, tests/cpu_use.py): {total:.0f} s in {wall_s:.0f} s of "
             f"wall clock, {total / wall_s:.2f} of the machine's {os.cpu_count()} cores busy on average"]
    lines += [f"{s:>7.0f} s  {kind} ({n})" for kind, (s, n) in by_kind.items() if s >= 1]
    return lines
