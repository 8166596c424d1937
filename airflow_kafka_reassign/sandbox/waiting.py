"""Polling for a condition on a sandbox (tests, benchmarks and the demo drive clusters with it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_result, stop_before_delay, wait_fixed

T = TypeVar("T")


def wait_until(cond: Callable[[], T], what: str, timeout: float = 120.0, every: float = 0.3) -> T:
    """``cond()``'s first truthy value, polling every ``every`` s; ``TimeoutError`` naming ``what``
    once another poll would come after ``timeout`` s. An exception of ``cond`` ends the wait."""

    def timed_out(_: RetryCallState) -> T:
        raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")

    retrying = Retrying(
        retry=retry_if_result(lambda value: not value),
        stop=stop_before_delay(timeout),
        wait=wait_fixed(every),
        retry_error_callback=timed_out,
    )
    return retrying(cond)
