"""Apache Kafka's own ``kafka-reassign-partitions --generate`` as a baseline for the planner.

The reference tool proposes a placement for whole topics from scratch (a rack-aware
round-robin with a random start, ignoring where the replicas are now). This module runs it
on a :class:`~airflow_kafka_reassign.sandbox.Sandbox` and reads its answer as a
:class:`~airflow_kafka_reassign.core.vocabulary.models.ReassignmentPlan` whose moves carry the current
replicas, so its cost (replica moves, leader changes) and its balance
(:func:`~airflow_kafka_reassign.core.planner.compute_metrics`) compare directly with ours::

    from airflow_kafka_reassign.sandbox.reference import generate

    proposal = generate(sandbox, ["orders", "payments"], brokers=[1, 2, 3, 4, 5, 6], workdir=tmp)
    proposal.replica_moves, proposal.leader_changes     # what the reference plan costs
    compute_metrics(snapshot, proposal.plan)           # and the balance it reaches

``tests/benchmarks/bench_reference.py`` and ``tests/integration/test_reference_side_by_side.py`` use it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan, TopicPartition

if TYPE_CHECKING:
    from airflow_kafka_reassign.sandbox.cluster import Sandbox

CURRENT_HEADER = "Current partition replica assignment"
PROPOSED_HEADER = "Proposed partition reassignment configuration"


def parse_generate_output(stdout: str) -> tuple[str, str]:
    """The two JSON documents ``--generate`` prints: (current assignment, proposed one).

    The current one names real log directories (``log_dirs``); read it with
    ``ReassignmentPlan.from_kafka_json(text, log_dirs="ignore")``.
    """
    found: dict[str, str] = {}
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        header = line.strip()
        if header in (CURRENT_HEADER, PROPOSED_HEADER):
            rest = [x for x in lines[i + 1 :] if x.strip()]
            if rest and rest[0].lstrip().startswith("{"):
                found[header] = rest[0].strip()
    missing = [h for h in (CURRENT_HEADER, PROPOSED_HEADER) if h not in found]
    if missing:
        raise ValueError(
            f"kafka-reassign-partitions --generate output has no {' / '.join(repr(m) for m in missing)} "
            f"section followed by a JSON line; output was:\n{stdout[-2000:]}"
        )
    return found[CURRENT_HEADER], found[PROPOSED_HEADER]


@dataclass(frozen=True)
class ReferenceProposal:
    """What ``--generate`` proposed, with each partition's current replicas."""

    #: Every partition of the topics, as the tool saw it.
    current: dict[TopicPartition, tuple[int, ...]]
    #: The proposal for every partition (unchanged ones included), moves carrying the
    #: current replicas; RF changes allowed so they show up as a metric, not as an error.
    plan: ReassignmentPlan
    #: The tool's two JSON documents, verbatim.
    current_json: str
    proposed_json: str
    #: Wall seconds of the tool's run (a JVM start included).
    seconds: float

    @property
    def changed(self) -> ReassignmentPlan:
        """Only the partitions whose replica list (set or order) changes."""
        return ReassignmentPlan(moves=tuple(m for m in self.plan.moves if m.target_replicas != m.current_replicas))

    @property
    def replica_moves(self) -> int:
        """Replicas added to a broker that did not hold them."""
        return sum(m.replica_moves for m in self.plan.moves)

    @property
    def leader_changes(self) -> int:
        """Partitions whose preferred leader (first replica) changes."""
        return sum(1 for m in self.plan.moves if m.leader_changes)

    def rollback(self) -> ReassignmentPlan:
        """The current assignment of every partition (what undoes the proposal)."""
        return self.plan.rollback()


def topics_to_move_json(topics: Collection[str]) -> str:
    """The ``--topics-to-move-json-file`` document for ``topics``."""
    return json.dumps({"version": 1, "topics": [{"topic": t} for t in sorted(topics)]})


def generate(
    sandbox: Sandbox,
    topics: Collection[str],
    brokers: Sequence[int],
    *,
    workdir: str | Path,
    disable_rack_aware: bool = False,
    timeout: float = 300.0,
) -> ReferenceProposal:
    """Run ``kafka-reassign-partitions --generate`` for ``topics`` onto ``brokers``.

    Writes the topics-to-move file into ``workdir``. Raises ``RuntimeError`` with the tool's
    output when it fails. Each run differs: the tool starts its round-robin at random.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    spec = workdir / "topics-to-move.json"
    spec.write_text(topics_to_move_json(topics))
    args = [
        "--generate",
        "--topics-to-move-json-file",
        str(spec),
        "--broker-list",
        ",".join(str(b) for b in brokers),
    ]
    if disable_rack_aware:
        args.append("--disable-rack-aware")
    started = time.monotonic()
    proc = sandbox.reassign_tool(args, timeout=timeout)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(
            f"kafka-reassign-partitions --generate exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    current_json, proposed_json = parse_generate_output(proc.stdout)
    current_plan = ReassignmentPlan.from_kafka_json(current_json, log_dirs="ignore")
    current = {m.tp: m.target_replicas for m in current_plan.moves}
    plan = ReassignmentPlan.from_kafka_json(proposed_json, current, allow_rf_change=True, log_dirs="ignore")
    return ReferenceProposal(
        current=current, plan=plan, current_json=current_json, proposed_json=proposed_json, seconds=seconds
    )
