"""The run's CPU table (tests/cpu_use.py): which processes are the run's, their kinds, and the sums."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cpu_use  # noqa: E402

VENV = "/repo/.venv/bin/python"


@pytest.mark.parametrize(("command", "kind"), [
    ("/usr/bin/java -Xms64m -cp /k/libs/* kafka.Kafka /tmp/s/node-1/server.properties", "Kafka brokers"),
    ("bash /v/pyspark/bin/spark-class org.apache.spark.deploy.SparkSubmit --master local[2] /r/spark/plan_job.py",
     "Spark JVMs"),
    (f"{VENV} /r/airflow_kafka_reassign/spark/plan_job.py --snapshot /s --out /o", "the plan job's Python driver"),
    (f"{VENV} -m pyspark.daemon", "Spark Python workers"),
    (f"{VENV} -c \nimport os as _os\nif _os.environ.get('x'):\n    print('EXECUTION-API unpatched')", "dag.test() runs"),
    ("java -Xmx256m -jar /c/s3proxy/s3proxy.jar --properties x", "S3Proxy"),
    ("/usr/bin/java -cp /k/libs/* org.apache.kafka.tools.reassign.ReassignPartitionsCommand", "other JVMs (Kafka tools)"),
    (f"{VENV} /repo/.venv/bin/airflow scheduler", "Airflow components (stack, UI)"),
    (f"{VENV} /repo/.venv/bin/airflow celery worker --hostname w1", "Airflow components (stack, UI)"),
    ("airflow worker -- 01a23afc-a887-798d-b0cb-23313e62781a", "Airflow components (stack, UI)"),
    (f"{VENV} /repo/.venv/bin/airflow db migrate", "Airflow CLI"),
    ("/usr/bin/redis-server 127.0.0.1:6380", "Redis"),
    (f"{VENV} -u -c import sys;exec(eval(sys.stdin.readline()))", "pytest"),
    ("/bin/sleep 5", "other"),
])
def test_each_process_is_named_by_its_kind(command, kind):
    assert cpu_use.kind_of(command) == kind


def fake_process(proc: Path, pid: int, *, start: int, ticks: int, command: str, environ: list[str]) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    # stat: pid (comm) then fields 3..; utime and stime are fields 14 and 15, the start time field 22
    fields = ["S"] + ["0"] * 10 + [str(ticks), "0"] + ["0"] * 6 + [str(start)] + ["0"] * 10
    (d / "stat").write_text(f"{pid} (comm with ) spaces) " + " ".join(fields))
    (d / "cmdline").write_bytes(command.replace(" ", "\0").encode() + b"\0")
    (d / "environ").write_bytes(b"\0".join(e.encode() for e in environ) + b"\0")


def test_only_the_runs_marked_processes_count_each_at_its_last_cpu_time_and_a_reused_pid_is_another(tmp_path):
    use = cpu_use.CpuUse(proc=tmp_path)
    mark = use.mark.decode()
    tick = cpu_use._TICK
    fake_process(tmp_path, 10, start=5, ticks=2 * tick, command="/usr/bin/java kafka.Kafka a", environ=["A=1", mark])
    fake_process(tmp_path, 11, start=5, ticks=7 * tick, command="/usr/bin/java kafka.Kafka b", environ=["A=1"])
    fake_process(tmp_path, 12, start=5, ticks=1 * tick, command="/bin/sleep 1", environ=[mark + "0"])  # another run
    (tmp_path / "self").mkdir()
    use.sample()
    fake_process(tmp_path, 10, start=5, ticks=3 * tick, command="/usr/bin/java kafka.Kafka a", environ=[mark])
    use.sample()
    assert use.by_kind() == {"Kafka brokers": (3.0, 1)}
    # pid 10 ends; a new process of the run gets pid 10 again (another start time): both count
    fake_process(tmp_path, 10, start=9, ticks=1 * tick, command=f"{VENV} -m pyspark.daemon", environ=[mark])
    use.sample()
    assert use.by_kind() == {"Kafka brokers": (3.0, 1), "Spark Python workers": (1.0, 1)}


def test_a_real_child_process_started_after_the_mark_is_seen_with_its_cpu_time(monkeypatch):
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc on this system: the table is left out there")
    use = cpu_use.CpuUse(interval_s=0.05)
    monkeypatch.delenv(cpu_use.MARK_ENV, raising=False)
    use.start()
    try:
        assert os.environ[cpu_use.MARK_ENV] in use.mark.decode()
        # about 0.3 s of CPU, then it stays alive until the sampler has seen its last figure
        busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(0.5)"
        subprocess.run([sys.executable, "-c", busy], check=True, timeout=60)
    finally:
        by_kind = use.stop()
        monkeypatch.delenv(cpu_use.MARK_ENV, raising=False)
    seconds, count = by_kind["other"]
    assert count >= 1 and seconds >= 0.25


def test_the_table_says_how_many_cores_were_busy_and_leaves_out_kinds_under_a_second():
    lines = cpu_use.table({"Kafka brokers": (870.4, 54), "pytest": (241.0, 5), "Redis": (0.4, 1)}, 1000.0)
    assert "1112 s in 1000 s of wall clock, 1.11 of the machine's" in lines[0]
    assert lines[1:] == ["    870 s  Kafka brokers (54)", "    241 s  pytest (5)"]
    assert cpu_use.table({}, 10.0) == []
