"""Benchmark of the Spark plan job end to end (spark-submit): prints numbers, asserts nothing about time.

For synthetic snapshots of 250k / 500k / 1M / 2M replicas (100 brokers in 3 racks, RF 2
and 3, uneven topic sizes, a scale-out to 110 brokers) it prints per size: spark-submit wall
time, the planning stage (from the Spark session up to the plan written: metrics.json's
``job.planning_s``) and its stages, the peak memory of the whole process tree (JVM and
Python workers, summed), moves / lower bound and the balance after. ``--compare`` plans each
size on ``local[1]`` and ``local[2]`` and prints the planning-stage speed-up; ``--repeat N``
runs N such pairs one after the other and prints the medians (on a shared 2-core machine one
run's ratio varies by more than 0.1x).

    .venv/bin/python tests/benchmarks/bench_spark_plan.py                    # 250k 500k 1M 2M on local[2]
    .venv/bin/python tests/benchmarks/bench_spark_plan.py 250000 --master 'local[1]'
    .venv/bin/python tests/benchmarks/bench_spark_plan.py --compare 1000000  # local[1] vs local[2]
    .venv/bin/python tests/benchmarks/bench_spark_plan.py --compare 1000000 --repeat 5  # 5 interleaved pairs, medians
    .venv/bin/python tests/benchmarks/bench_spark_plan.py 1000000 --reader spark          # Spark's reader
    .venv/bin/python tests/benchmarks/bench_spark_plan.py 1000000 --reader broadcast --file-uri

Snapshots are cached under ``$AKR_BENCH_DIR`` (default /tmp/akr-bench). Before a run's figures are
printed its size is checked (sizes.py): the snapshot holds the replicas asked for (up to RF - 1
more), the job checked the snapshot's files against the counts its snapshot.json records, and the
plan's "before" metrics count every partition and replica recorded there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from sizes import expect, synthetic

from airflow_kafka_reassign.core.planner.synthetic import synthetic_cluster, to_snapshot
from airflow_kafka_reassign.core.records.plan_io import read_metrics
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot
from airflow_kafka_reassign.spark.submit import plan_job_args, plan_job_path, spark_submit_command, submit_env

ROOT = Path(os.environ.get("AKR_BENCH_DIR", "/tmp/akr-bench"))


def snapshot_dir(replicas: int, seed: int = 7) -> Path:
    d = ROOT / f"snap-{replicas}-s{seed}-rg"  # -rg: written with whole-topic row groups
    meta = d / "snapshot.json"
    if not meta.is_file() or "check" not in json.loads(meta.read_text()):  # written before snapshots recorded counts
        t0 = time.perf_counter()
        cluster = synthetic_cluster(brokers=100, racks=3, new_brokers=10, replicas=replicas, seed=seed)
        write_snapshot(to_snapshot(cluster, validate=False), d)
        print(f"  (generated {d.name} in {time.perf_counter() - t0:.1f}s)", flush=True)
    return d


class TreeMemory:
    """Peak of the summed RSS of a process and its descendants, sampled every 0.2 s; also the CPU
    seconds each descendant used (its last sample), summed per kind of process (:meth:`cpu`)."""

    def __init__(self, pid: int, extra: tuple[int, ...] = ()) -> None:
        self.proc = psutil.Process(pid)
        #: other processes whose descendants count too (a standalone cluster's workers: the executors)
        self.extra = [psutil.Process(p) for p in extra]
        self.peak = 0
        self._cpu: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def kind(cmdline: list[str]) -> str:
        """``jvm`` (the driver JVM and its executors on a local master), ``python driver`` (the
        plan job), ``python workers`` (PySpark's daemon and the workers it forks), else ``other``."""
        if cmdline and Path(cmdline[0]).name == "java":
            return "jvm"
        text = " ".join(cmdline)
        if "plan_job.py" in text:
            return "python driver"
        if "daemon" in text or "worker" in text:
            return "python workers"
        return "other"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [self.proc, *self.proc.children(recursive=True)]
                for root in self.extra:
                    with contextlib.suppress(psutil.Error):
                        procs.extend(root.children(recursive=True))
                total = 0
                for p in procs:
                    with contextlib.suppress(psutil.Error):
                        total += p.memory_info().rss
                        t = p.cpu_times()
                        # a forked Python worker read at the wrong moment may show no command line yet
                        kind = self.kind(p.cmdline() or [p.name()])
                        if kind == "other" and "python" in p.name():
                            kind = "python workers"
                        self._cpu[p.pid] = (kind, t.user + t.system)
                self.peak = max(self.peak, total)
            except psutil.Error:
                return
            time.sleep(0.2)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak

    def cpu(self) -> dict[str, float]:
        """CPU seconds per kind of process (a process's time up to its last sample: a worker that
        lived less than 0.2 s is missed)."""
        out: dict[str, float] = {}
        for kind, seconds in self._cpu.values():
            out[kind] = out.get(kind, 0.0) + seconds
        return dict(sorted(out.items()))


def run_plan(
    snapshot: Path | str, master: str, out: Path, reader: str = "auto", request_json: str | None = None,
    extra: tuple[str, ...] = (), workers: tuple[int, ...] = (), options: tuple[str, ...] = (),
) -> dict:
    """One spark-submit of the plan job; ``workers``: a standalone cluster's worker pids (their
    executors' CPU and memory count with the job's); ``options``: more spark-submit options."""
    request = out.parent / "request.json"
    request.write_text(request_json or json.dumps({"goal": "add-brokers"}))
    cmd = spark_submit_command(
        plan_job_path(), [*plan_job_args(str(snapshot), str(out), str(request)), "--reader", reader, *extra],
        master=master, options=["--driver-memory", "2g", *options],
    )
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env={**os.environ, **submit_env()}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    mem = TreeMemory(proc.pid, workers)
    output, _ = proc.communicate()
    wall = time.perf_counter() - t0
    peak = mem.stop()
    if proc.returncode != 0:
        raise SystemExit(f"plan job failed ({proc.returncode}):\n{output[-4000:]}")
    metrics = read_metrics(out)
    return {"wall_s": wall, "peak_mb": peak / 1e6, "metrics": metrics, "cpu_s": mem.cpu(), "output": output}


def check_size(replicas: int, snap: Path, r: dict) -> None:
    """The job planned the snapshot it was given, whole: the replicas asked for (up to RF - 1 more),
    and every partition and replica that the snapshot's snapshot.json records, checked by the job."""
    recorded = json.loads((snap / "snapshot.json").read_text())["check"]
    before, job = r["metrics"]["before"], r["metrics"]["job"]
    synthetic("replicas in the snapshot", recorded["replicas"], replicas)
    expect("partitions planned", before["partitions"], recorded["partitions"])
    expect("replicas planned", before["replicas"], recorded["replicas"])
    if job.get("snapshot_check") != "checked":
        raise SystemExit(f"benchmark: the plan job did not check the snapshot's counts ({job.get('snapshot_check')})")


def show(replicas: int, master: str, r: dict) -> None:
    m = r["metrics"]
    s, job, after = m["summary"], m["job"], m["after"]
    stages = " ".join(f"{k} {v:.1f}" for k, v in job["stages_s"].items())
    print(
        f"{replicas:>9,} replicas {master:<9} | spark-submit {r['wall_s']:6.1f}s  planning {job['planning_s']:6.1f}s "
        f"({job.get('input')}, {job['partitions']} tasks, {job.get('quota_groups', 0)} quota groups"
        f"{' in place' if job.get('quota_groups_in_place') else ''}) "
        f"[{stages}] | peak {r['peak_mb']:6.0f} MB (process tree)\n"
        f"{'':>19} moves {s['replica_moves']:,} / bound {s['lower_bound']:,} = {m['moves_ratio']}; "
        f"leader changes {s['leader_changes']:,} / fewest {s['leader_changes_lower_bound']:,}; "
        f"after: replicas max-min {after['replica_max_min']}, worst topic {after['topic_replica_max_min']}, "
        f"leaders {after['leader_max_min']}, rack violations {after['rack_violations']}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sizes", nargs="*", type=int, default=[250_000, 500_000, 1_000_000, 2_000_000])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--compare", action="store_true", help="local[1] vs local[2] on each size")
    ap.add_argument("--repeat", type=int, default=1,
                    help="with --compare: this many local[1]/local[2] pairs, interleaved; medians reported")
    ap.add_argument("--reader", choices=("auto", "broadcast", "spark"), default="auto", help="plan_job.py --reader")
    ap.add_argument("--file-uri", action="store_true", help="pass the snapshot as a file:// URI (read through Spark)")
    args = ap.parse_args()
    if args.repeat < 1 or (args.repeat > 1 and not args.compare):
        ap.error("--repeat takes a count of 1 or more, and only with --compare (pairs of local[1] and local[2] runs)")
    ROOT.mkdir(parents=True, exist_ok=True)
    print(f"plan job (spark-submit), goal add-brokers, 100 brokers in 3 racks + 10; python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)
    for n in args.sizes:
        snap = snapshot_dir(n)
        masters = ["local[1]", "local[2]"] if args.compare else [args.master]
        jobs: dict[str, list[dict]] = {m: [] for m in masters}  # metrics.json's "job" per run
        for _ in range(args.repeat):
            for master in masters:  # interleaved: a slow spell of the machine hits both masters alike
                with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
                    r = run_plan(f"file://{snap}" if args.file_uri else snap, master, Path(tmp) / "plan", args.reader)
                check_size(n, snap, r)
                show(n, master, r)
                jobs[master].append(r["metrics"]["job"])
            if args.compare:
                one, two = (jobs[m][-1]["planning_s"] for m in masters)
                print(f"{'':>19} planning stage local[1] {one:.1f}s / local[2] {two:.1f}s = speed-up {one / two:.2f}x",
                      flush=True)
        if args.compare:
            planning = [[j["planning_s"] for j in jobs[m]] for m in masters]
            one, two = (statistics.median(x) for x in planning)
            t1, t2 = (statistics.median(executor_stages_s(j) for j in jobs[m]) for m in masters)
            d1, d2 = (statistics.median(sum(j["stages_s"].values()) - executor_stages_s(j) for j in jobs[m])
                      for m in masters)
            pairs = sorted(a / b for a, b in zip(*planning, strict=True))
            print(f"{'':>19} medians of {args.repeat} pair(s): planning stage local[1] {one:.1f}s / local[2] {two:.1f}s = "
                  f"speed-up {one / two:.2f}x (per pair: {', '.join(f'{x:.2f}' for x in pairs)})\n"
                  f"{'':>19} stages with executor tasks {t1:.1f}s / {t2:.1f}s = {t1 / t2:.2f}x; "
                  f"driver-only steps {d1:.1f}s / {d2:.1f}s", flush=True)


def executor_stages_s(job: dict) -> float:
    """The seconds of a run's stages with executor tasks (their driver-side collect included);
    the rest of ``stages_s`` is the driver's own steps. The quota step has executor tasks of its
    own when it ran per group of topics (``quota_groups``) in a stage of its own (not inside the
    place stage's tasks: ``quota_groups_in_place``)."""
    grouped = job.get("quota_groups", 0) > 0 and not job.get("quota_groups_in_place", False)
    return sum(v for k, v in job["stages_s"].items() if k in ("prepare", "place", "finish") or (k == "quotas" and grouped))


if __name__ == "__main__":
    main()
