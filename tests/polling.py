"""Polling for the integration tests: a condition that must come true within a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(check: Callable[[], object], seconds: float) -> bool:
    """Whether `check()` came true within `seconds` (polled every 50 ms)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def poll(check: Callable[[], object], seconds: float, what: str) -> None:
    """`until`, or an AssertionError naming `what` did not happen."""
    if not until(check, seconds):
        raise AssertionError(f"not within {seconds}s: {what}")
