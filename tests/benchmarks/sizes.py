"""What every benchmark checks before it prints a figure: that it measured the size it says.

A benchmark that times 2,000 partitions while it says 10,000 (bench_snapshot.py did, issue 18)
prints a number that is simply wrong. Each benchmark calls :func:`expect` on what it measured
(partitions, topics, moves, replicas) before printing a time for it; a mismatch stops it with
both counts, and no figure is printed.

    expect("partitions in the snapshot", len(snap.partitions), 10_000)
"""

from __future__ import annotations


class SizeMismatch(SystemExit):
    """The benchmark measured another size than it says: no figure."""


def expect(what: str, measured: int, expected: int) -> int:
    """``measured`` when it equals ``expected``; else stop the benchmark naming both."""
    if measured != expected:
        raise SizeMismatch(f"benchmark: measured {measured:,} {what}, not the {expected:,} it says: no figure printed")
    return measured


def require(what: str, holds: bool) -> None:
    """Stop the benchmark naming ``what`` when it does not hold (``assert`` would vanish under ``python -O``)."""
    if not holds:
        raise SizeMismatch(f"benchmark: expected {what}, it did not hold: no figure printed")


def at_least(what: str, measured: int, least: int) -> int:
    """``measured`` when it is at least ``least`` (a size only bounded from below, e.g. moves of a plan)."""
    if measured < least:
        raise SizeMismatch(f"benchmark: measured {measured:,} {what}, fewer than the {least:,} it needs: no figure printed")
    return measured


def synthetic(what: str, measured: int, wanted: int, max_rf: int = 3) -> int:
    """``measured`` replicas of a synthetic cluster asked for ``wanted``: it stops adding partitions
    once it has ``wanted`` replicas, so it may hold up to ``max_rf - 1`` more, never fewer."""
    if not wanted <= measured < wanted + max_rf:
        raise SizeMismatch(f"benchmark: measured {measured:,} {what}, not the {wanted:,} it says: no figure printed")
    return measured
