"""Our planner against Apache Kafka's ``kafka-reassign-partitions --generate`` (issue 6). Prints numbers only.

    .venv/bin/python tests/benchmarks/bench_reference.py [--execute both|ours|none] [--generate-runs 3]
        [--kb 50] [--throttle 1000000] [--sandbox-dir DIR] [--scenarios scale-out,decommission,skewed]

Starts its own 6-broker sandbox (racks r1 r2 r3 r1 r2 r3) in a temporary directory and stops it on any exit,
unless ``--sandbox-dir`` names a running 6-broker one (its topics are then left behind). Each scenario creates
204 partitions in six topics (102 with RF 3, 102 with RF 2) with ``--kb`` kB of real records in every
partition, then plans the same change twice on the same snapshot:

* scale-out: the topics live on brokers 1-4 only, brokers 5 and 6 are new. Reference:
  ``--generate --topics-to-move-json-file ... --broker-list 1,2,3,4,5,6``; ours: goal add-brokers [5, 6];
* decommission: the topics are spread over all six brokers, broker 6 leaves. Reference: ``--broker-list
  1,2,3,4,5``; ours: goal remove-brokers [6];
* skewed: the RF-3 topics sit on brokers 1-3 with every preferred leader on broker 1, the RF-2 ones over all
  six. Reference: ``--broker-list 1,2,3,4,5,6``; ours: goal rebalance.

For both plans it prints the replica moves (replicas added to a broker), the partitions whose preferred leader
changes, our lower bound and moves / lower bound, and the balance after each plan computed by the same
``compute_metrics`` on the same snapshot. The reference tool starts its round-robin at random, so it runs
``--generate-runs`` times: the range of its moves is printed and the run with the median moves is the one shown
(and executed).

Before a figure is printed the sizes are checked (sizes.py): the snapshot holds the 204 partitions and 510
replicas, the reference plan covers all 204, and ``--verify`` reports every partition of an executed plan completed.

``--execute both`` (default) then executes the reference plan with the reference tool's own ``--execute
--throttle``, waits until the controller has finished, runs ``--verify`` (which also clears the throttles), rolls
it back the same way (the "current assignment" it printed) and executes our plan likewise on the same data; it
prints both execution times and checks the cluster shows the per-broker replicas and preferred leaders our plan
promised. ``--execute ours`` executes only ours; ``none`` only plans.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from confluent_kafka import Producer
from sizes import expect

from airflow_kafka_reassign.core.planner import BalanceMetrics, PlanRequest, compute_metrics, plan_reassignment
from airflow_kafka_reassign.core.vocabulary.models import ClusterSnapshot, ReassignmentPlan, TopicPartition
from airflow_kafka_reassign.kafka.admin import KafkaClusterAdmin
from airflow_kafka_reassign.kafka.config import to_confluent
from airflow_kafka_reassign.kafka.workload import create_topic
from airflow_kafka_reassign.sandbox import Sandbox, rack_of, wait_until
from airflow_kafka_reassign.sandbox.reference import ReferenceProposal, generate

BROKERS = 6
RACKS = 3
#: (partitions, replication factor) of the six topics: 204 partitions, 102 with RF 3 and 102 with RF 2.
TOPICS = ((48, 3), (36, 2), (30, 3), (24, 2), (24, 3), (42, 2))
RECORD_BYTES = 10_000


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    goal: str
    #: brokers added / removed (our PlanRequest.brokers)
    goal_brokers: tuple[int, ...]
    #: the reference tool's --broker-list
    ref_brokers: tuple[int, ...]

    @property
    def removed(self) -> tuple[int, ...]:
        return self.goal_brokers if self.goal == "remove-brokers" else ()

    @property
    def live(self) -> list[int]:
        return [b for b in range(1, BROKERS + 1) if b not in self.removed]


ALL = tuple(range(1, BROKERS + 1))
SCENARIOS = (
    Scenario("scale-out", "scale-out 4 → 6 brokers", "add-brokers", (5, 6), ALL),
    Scenario("decommission", "remove broker 6 of 6", "remove-brokers", (6,), (1, 2, 3, 4, 5)),
    Scenario("skewed", "skewed rebalance (6 brokers)", "rebalance", (), ALL),
)


def spread(brokers: Sequence[int], rf: int, start: int) -> list[int]:
    """``rf`` replicas from ``brokers`` rotated by ``start``, one per rack first (rack-aware, no violation)."""
    order = [brokers[(start + i) % len(brokers)] for i in range(len(brokers))]
    chosen: list[int] = []
    racks: set[str | None] = set()
    for b in order:
        if len(chosen) < rf and rack_of(b, RACKS) not in racks:
            chosen.append(b)
            racks.add(rack_of(b, RACKS))
    for b in order:
        if len(chosen) < rf and b not in chosen:
            chosen.append(b)
    return chosen


def initial_assignment(scenario: str, topic: int, partitions: int, rf: int) -> list[list[int]]:
    if scenario == "scale-out":
        return [spread((1, 2, 3, 4), rf, topic * 7 + p) for p in range(partitions)]
    if scenario == "decommission":
        return [spread(ALL, rf, topic * 7 + p) for p in range(partitions)]
    if rf == 3:  # skewed: on brokers 1-3, broker 1 the preferred leader of every partition
        return [[1, 2, 3] if p % 2 == 0 else [1, 3, 2] for p in range(partitions)]
    return [spread(ALL, rf, topic + p) for p in range(partitions)]


def fill(config: dict[str, str], partitions: Sequence[TopicPartition], kb: float) -> int:
    """``kb`` kB of records into each partition (one producer, acks=all); returns the bytes written."""
    producer = Producer({**to_confluent(config, timeout_s=120), "linger.ms": 20, "acks": "all"})
    per = max(1, round(kb * 1000 / RECORD_BYTES))
    payload = b"x" * RECORD_BYTES
    for tp in partitions:
        for _ in range(per):
            while True:
                try:
                    producer.produce(tp.topic, payload, partition=tp.partition)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
    left = producer.flush(180)
    if left:
        raise TimeoutError(f"{left} records were not acknowledged")
    return per * RECORD_BYTES * len(partitions)


def assignment_of(snapshot: ClusterSnapshot) -> dict[TopicPartition, tuple[int, ...]]:
    return {p.tp: p.replicas for p in snapshot.partitions}


Assignment = dict[TopicPartition, tuple[int, ...]]


def settled_snapshot(admin: KafkaClusterAdmin, topics: list[str], expected: Assignment) -> ClusterSnapshot:
    """A snapshot of ``topics`` once no reassignment of theirs is in flight and every replica list is ``expected``."""

    def check() -> ClusterSnapshot | None:
        if any(tp.topic in topics for tp in admin.list_reassignments()):
            return None
        snap = admin.snapshot(topics=topics)
        in_sync = all(len(p.isr) == len(p.replicas) for p in snap.partitions)
        return snap if in_sync and assignment_of(snap) == expected else None

    return wait_until(check, "the reassignment to finish", timeout=600)


def execute(sandbox: Sandbox, admin: KafkaClusterAdmin, plan: ReassignmentPlan, topics: list[str],
            expected: Assignment, throttle: int, path: Path) -> tuple[float, str]:
    """``--execute --throttle`` ``plan``, wait until done, ``--verify``. Returns (seconds to done, verify summary)."""
    path.write_text(plan.to_kafka_json())
    started = time.monotonic()
    proc = sandbox.reassign_tool(["--execute", "--reassignment-json-file", str(path), "--throttle", str(throttle)])
    if proc.returncode != 0:
        raise RuntimeError(f"--execute exited {proc.returncode}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    settled_snapshot(admin, topics, expected)
    seconds = time.monotonic() - started
    verify = sandbox.reassign_tool(["--verify", "--reassignment-json-file", str(path)])
    done = sum("is completed" in line for line in verify.stdout.splitlines())
    expect("partitions --verify reports completed", done, len(plan))  # the time is for the whole plan
    pending = sum("still in progress" in line for line in verify.stdout.splitlines())
    cleared = "Clearing broker-level throttles" in verify.stdout
    return seconds, f"{done}/{len(plan)} completed, {pending} in progress, throttles cleared: {'yes' if cleared else 'no'}"


def pct(n: int, total: int) -> str:
    return f"{n} ({100 * n / total:.0f}%)" if total else str(n)


def per_broker(counts: dict[int, int]) -> str:
    return " ".join(str(counts[b]) for b in sorted(counts))


def ratio(moves: int, bound: int) -> str:
    return f"{moves / bound:.2f}" if bound else ("1.00" if moves == 0 else "inf")


METRIC_ROWS = (
    ("replica max-min", "replica_max_min"),
    ("per-topic worst max-min", "topic_replica_max_min"),
    ("leader max-min", "leader_max_min"),
    ("rack violations", "rack_violations"),
    ("RF changes", "rf_changes"),
    ("replicas left on removed brokers", "replicas_on_removed_brokers"),
)


def run_scenario(sandbox: Sandbox, admin: KafkaClusterAdmin, sc: Scenario, args: argparse.Namespace, work: Path,
                 prefix: str) -> dict[str, Any]:
    config = sandbox.client_config()
    t0 = time.monotonic()
    names = []
    for i, (partitions, rf) in enumerate(TOPICS):
        name = f"{prefix}-{sc.name}-{i}"
        create_topic(config, name, initial_assignment(sc.name, i, partitions, rf), timeout_s=120)
        names.append(name)
    n_partitions = sum(p for p, _ in TOPICS)
    wait_until(lambda: set(names) <= set(admin.list_topic_names()), "the new topics in the metadata", timeout=180)
    created = wait_until(lambda: len((s := admin.snapshot(topics=names)).partitions) == n_partitions and s,
                         "every partition in a snapshot", timeout=180)
    written = fill(config, [p.tp for p in created.partitions], args.kb)
    snapshot = admin.snapshot(topics=names)
    expect("partitions in the snapshot", len(snapshot.partitions), n_partitions)
    expect("replicas in the snapshot", sum(len(p.replicas) for p in snapshot.partitions), sum(p * rf for p, rf in TOPICS))
    print(f"\n=== {sc.title}: {len(names)} topics, {len(snapshot.partitions)} partitions, "
          f"{sum(len(p.replicas) for p in snapshot.partitions)} replicas, {written / 1e6:.1f} MB of records "
          f"({time.monotonic() - t0:.1f} s to set up)")

    # ours, in this process (the same as `airflow-kafka-reassign plan --no-spark`)
    t0 = time.monotonic()
    ours = plan_reassignment(snapshot, PlanRequest(goal=sc.goal, brokers=sc.goal_brokers,  # type: ignore[arg-type]
                                                   topic_include=(f"{prefix}-{sc.name}-.*",)))
    ours_s = time.monotonic() - t0

    runs: list[ReferenceProposal] = []
    for r in range(args.generate_runs):
        runs.append(generate(sandbox, names, sc.ref_brokers, workdir=work / f"{sc.name}-gen-{r}"))
        if runs[-1].current != assignment_of(snapshot):
            raise RuntimeError("the reference tool saw another assignment than our snapshot")
    ranked = sorted(runs, key=lambda x: x.replica_moves)
    ref = ranked[len(ranked) // 2]
    expect("partitions the reference plan covers", len(ref.plan), n_partitions)  # --generate lists every one

    def metrics(plan: ReassignmentPlan | None) -> BalanceMetrics:
        return compute_metrics(snapshot, plan, brokers=sc.live, removed=sc.removed, topics=names)

    before, ref_after, ours_after = metrics(None), metrics(ref.plan), metrics(ours.plan)
    total = len(snapshot.partitions)
    moves = [x.replica_moves for x in runs]
    leaders = [x.leader_changes for x in runs]
    bound = ours.lower_bound
    rows = [
        ("replica moves", f"{ref.replica_moves} (runs: {min(moves)}-{max(moves)})", str(ours.replica_moves)),
        ("lower bound (ours)", str(bound), str(bound)),
        ("moves / lower bound", ratio(ref.replica_moves, bound), ratio(ours.replica_moves, bound)),
        ("partitions moved or reordered", pct(len(ref.changed), total), pct(len(ours.plan), total)),
        ("preferred leader changes", pct(ref.leader_changes, total) + f" (runs: {min(leaders)}-{max(leaders)})",
         pct(ours.leader_changes, total)),
        ("fewest leader changes for leader balance", "", str(ours.leader_changes_lower_bound)),
    ]
    rows += [(label, str(getattr(ref_after, key)), str(getattr(ours_after, key))) for label, key in METRIC_ROWS]
    rows += [
        ("replicas per broker", per_broker(ref_after.replicas_per_broker), per_broker(ours_after.replicas_per_broker)),
        ("preferred leaders per broker", per_broker(ref_after.leaders_per_broker),
         per_broker(ours_after.leaders_per_broker)),
    ]
    rows.append(("planning wall s (reference: JVM incl.)", f"{statistics.median(x.seconds for x in runs):.1f}",
                 f"{ours_s:.2f}"))
    print("  before: " + ", ".join(f"{label} {getattr(before, key)}" for label, key in METRIC_ROWS))
    width = max(len(r[0]) for r in rows) + 2
    print(f"  {'':<{width}}{'reference --generate':<34}ours ({sc.goal})")
    for label, a, b in rows:
        print(f"  {label:<{width}}{a:<34}{b}")
    if ours.warnings:
        print(f"  our warnings: {list(ours.warnings)}")
    if ours_after.replicas_per_broker != ours.after.replicas_per_broker:
        print("  NOTE: compute_metrics and the planner's own 'after' disagree")

    result: dict[str, Any] = {
        "scenario": sc, "partitions": total, "ref": ref, "ref_moves": moves, "ours": ours,
        "ref_after": ref_after, "ours_after": ours_after, "ref_s": None, "ours_s": None,
    }
    if args.execute == "none":
        return result
    current = assignment_of(snapshot)
    if args.execute == "both":
        target = {**current, **{m.tp: m.target_replicas for m in ref.plan.moves}}
        secs, verify = execute(sandbox, admin, ref.plan, names, target, args.throttle, work / f"{sc.name}-ref.json")
        result["ref_s"] = secs
        print(f"  reference plan executed (--throttle {args.throttle}): {secs:.1f} s to done; --verify: {verify}")
        t0 = time.monotonic()
        execute(sandbox, admin, ref.rollback(), names, current, args.throttle, work / f"{sc.name}-rollback.json")
        print(f"  rolled back to the original assignment: {time.monotonic() - t0:.1f} s")
    target = {**current, **{m.tp: m.target_replicas for m in ours.plan.moves}}
    secs, verify = execute(sandbox, admin, ours.plan, names, target, args.throttle, work / f"{sc.name}-ours.json")
    result["ours_s"] = secs
    print(f"  our plan executed (--throttle {args.throttle}): {secs:.1f} s to done; --verify: {verify}")
    actual = compute_metrics(admin.snapshot(topics=names), brokers=sc.live, removed=sc.removed, topics=names)
    same = (actual.replicas_per_broker == ours_after.replicas_per_broker
            and actual.leaders_per_broker == ours_after.leaders_per_broker
            and actual.rack_violations == ours_after.rack_violations)
    print(f"  cluster after execution shows the promised per-broker replicas and leaders: {'yes' if same else 'NO'}")
    return result


def summary(results: list[dict[str, Any]]) -> None:
    print("\n=== summary (markdown)\n")
    print("| scenario | partitions | reference: moves (runs) | ours: moves | lower bound | reference / bound | "
          "ours / bound | reference: leader changes | ours: leader changes |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        ours, ref, n, bound = r["ours"], r["ref"], r["partitions"], r["ours"].lower_bound
        print(f"| {r['scenario'].title} | {n} | {ref.replica_moves} ({min(r['ref_moves'])}-{max(r['ref_moves'])}) | "
              f"{ours.replica_moves} | {bound} | {ratio(ref.replica_moves, bound)} | {ratio(ours.replica_moves, bound)} | "
              f"{pct(ref.leader_changes, n)} | {pct(ours.leader_changes, n)} |")
    print("\n| scenario | plan | replica max-min | per-topic worst max-min | leader max-min | rack violations | "
          "RF changes | executed in (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        for who, m, secs in (("reference", r["ref_after"], r["ref_s"]), ("ours", r["ours_after"], r["ours_s"])):
            t = f"{secs:.1f}" if secs is not None else ""
            print(f"| {r['scenario'].title} | {who} | {m.replica_max_min} | {m.topic_replica_max_min} | "
                  f"{m.leader_max_min} | {m.rack_violations} | {m.rf_changes} | {t} |")


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def own_or_given(sandbox_dir: Path | None) -> Iterator[Sandbox]:
    """The sandbox to use: ``sandbox_dir``'s, or a fresh 6-broker one in a temp dir, stopped on any exit."""
    if sandbox_dir is not None:
        yield Sandbox.load(sandbox_dir)
        return
    with tempfile.TemporaryDirectory(prefix="bench-reference-") as tmp:
        sandbox = Sandbox(Path(tmp) / "sandbox")
        t0 = time.monotonic()
        try:
            sandbox.up(brokers=BROKERS, racks=RACKS, timeout=300)
            print(f"sandbox up ({BROKERS} brokers, racks r1 r2 r3 r1 r2 r3): {time.monotonic() - t0:.1f} s")
            yield sandbox
        finally:
            t0 = time.monotonic()
            sandbox.down()
            print(f"sandbox stopped: {time.monotonic() - t0:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--execute", choices=["ours", "both", "none"], default="both")
    ap.add_argument("--generate-runs", type=int, default=3, help="runs of --generate per scenario (it is random)")
    ap.add_argument("--kb", type=float, default=50.0, help="kB of records per partition")
    ap.add_argument("--throttle", type=int, default=1_000_000, help="bytes/s, --execute --throttle")
    ap.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS))
    ap.add_argument("--sandbox-dir", type=Path, help="a running 6-broker, 3-rack sandbox to use (left running)")
    args = ap.parse_args()
    chosen = [s for s in SCENARIOS if s.name in args.scenarios.split(",")]
    signal.signal(signal.SIGTERM, _raise_exit)
    signal.signal(signal.SIGHUP, _raise_exit)
    started = time.monotonic()
    with own_or_given(args.sandbox_dir) as sandbox, tempfile.TemporaryDirectory(prefix="bench-reference-work-") as work:
        racks = [n["rack"] for n in sandbox.status()["nodes"]]
        if len(racks) != BROKERS or racks != [rack_of(i, RACKS) for i in ALL]:
            sys.exit(f"the sandbox must have {BROKERS} brokers on racks r1 r2 r3 r1 r2 r3, not {racks}")
        print(f"Kafka {sandbox.kafka_version}; --execute {args.execute}, --throttle {args.throttle} B/s, "
              f"{args.kb:g} kB per partition, {args.generate_runs} --generate runs per scenario")
        prefix = f"bench-ref-{int(time.time())}"
        with KafkaClusterAdmin(sandbox.client_config(), timeout_s=60) as admin:
            results = [run_scenario(sandbox, admin, sc, args, Path(work), prefix) for sc in chosen]
        summary(results)
        print(f"\ntotal {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
