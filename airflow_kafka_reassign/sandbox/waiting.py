"""Polling for a condition on a sandbox (tests, benchmarks and the demo drive clusters with it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(cond: Callable[[], T], what: str, timeout: float = 120.0, every: float = 0.3) -> T:
    """``cond()``'s first truthy value, polling every ``every`` s; ``TimeoutError`` naming ``what``
    after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
