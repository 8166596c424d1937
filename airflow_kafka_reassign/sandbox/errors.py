"""The sandbox's own error (every module of the sandbox raises it; :mod:`.maven` has its own fetch error)."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """The sandbox could not do what was asked (the message says why, with log tails)."""
