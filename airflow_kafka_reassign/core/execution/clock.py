"""The engine's one wait between two reads of the cluster (tests replace :func:`sleep`)."""

from __future__ import annotations

import time


def sleep(seconds: float) -> None:
    """Wait ``seconds``: the pause between two polls, and the settle recheck of a move that looks stale.

    Callers look it up through this module at call time (``clock.sleep``), so a test replaces it once for
    every path."""
    time.sleep(seconds)
