"""Which integration tests are acceptance tests, and in which slice (docs/testing.md, "What runs when").

``make test`` runs every integration test except these, on every commit, within its time budget. The acceptance
tests are the long fault and scenario runs (a production stack's components killed, a broker SIGKILLed twenty times,
a ZooKeeper-mode cluster of their own, a decommission while the cluster lives on): each checks what no short test
can, and each is as strict as the rest. They run:

* all of them with ``make acceptance`` (``AKR_ACCEPTANCE=all``);
* one slice per commit in CI, after ``make test`` (``make acceptance-slice``: ``AKR_ACCEPTANCE=slice``, the slice
  chosen from the commit hash as the compat cell is, so that consecutive commits cover every slice in turn);
* one slice by number with ``AKR_ACCEPTANCE=<n>``.

An entry is a file name or ``file::test_name``. A slice is sized to about ten minutes on the two workers of
``make acceptance-slice``: a stack's start-up (about 3 minutes when the machine is busy) counts once per file in it.
``ONLY_BY_HAND``: too long for a slice (a production stack of its own whose scenarios follow one another, about
16 minutes): ``make acceptance`` only. This module imports nothing of the project (tests/unit/test_acceptance.py
checks that every entry names a test that exists).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

SLICES: tuple[tuple[str, ...], ...] = (
    ("test_stack_faults.py::test_a_worker_killed_during_a_re_plan_round_is_resumed_by_the_retry_without_sending_anything_twice",
     "test_stack_faults.py::test_the_triggerer_sigkilled_during_a_deferrable_wait_is_restarted_and_the_wait_carries_on",
     "test_broker_kill_failover.py"),
    ("test_stack_faults.py::test_postgresql_restarted_during_a_deferrable_wait_the_components_revived_finish_the_run",
     "test_stack_faults.py::test_redis_restarted_between_tasks_the_next_task_is_queued_and_runs_on_a_worker",
     "test_zookeeper_mode.py"),
    ("test_stack.py::test_a_worker_killed_mid_batch_is_retried_on_the_other_worker_which_finishes_the_plan",
     "test_stack.py::test_a_run_whose_worker_died_is_named_in_one_line_and_taken_over_with_take_over_from",
     "test_living_cluster.py"),
)
ONLY_BY_HAND: tuple[str, ...] = ("test_stack_healing.py",)
ENV = "AKR_ACCEPTANCE"


def entries(choice: str | None) -> tuple[set[str], set[str]]:
    """``(kept, acceptance)``: the entries a run with ``AKR_ACCEPTANCE=choice`` keeps among the acceptance tests, and
    every acceptance entry. ``None``/``""``: none (``make test``); ``all``; ``slice`` (from the commit); a number."""
    every = {e for s in SLICES for e in s} | set(ONLY_BY_HAND)
    if not choice:
        return set(), every
    if choice == "all":
        return every, every
    index = slice_of(head_commit()) if choice == "slice" else int(choice)
    if not 0 <= index < len(SLICES):
        raise ValueError(f"{ENV}={choice}: there are {len(SLICES)} slices (0-{len(SLICES) - 1}); or 'all', 'slice'")
    return set(SLICES[index]), every


def slice_of(commit: str) -> int:
    """The slice CI runs for ``commit``: a different one from commit to commit (as the compat cell)."""
    return int(commit[:8] or "0", 16) % len(SLICES)


def head_commit() -> str:
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()


def matches(entry: str, file_name: str, test_name: str) -> bool:
    """Whether ``entry`` (a file, or ``file::test``) names this test (``test_name`` without its parameters)."""
    file_part, _, test_part = entry.partition("::")
    return file_part == file_name and (not test_part or test_part == test_name)


def named(entries_: Iterable[str], file_name: str, test_name: str) -> bool:
    return any(matches(e, file_name, test_name) for e in entries_)
