"""What the client's live tests share: the tokens of the stack they start, free ports, polling with a deadline."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from episodic_client import Identity, MemoryClient

TOKENS = {
    "a": ("client-token-workspace-a-01", {"workspaces": ["ws-a"]}),
    "planner": ("client-token-planner-bound-01", {"workspaces": ["ws-a"], "agent_id": "planner", "crew_id": "core"}),
}  # fmt: skip
START_TIMEOUT_S = 240.0  # the model loads and the topics are created on a CI runner of 2 cores


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def poll(check: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.2) -> Any:
    """`check()` until it is truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}: last={last!r}")


@dataclass
class Live:
    url: str

    def client(self, who: str, **identity: Any) -> MemoryClient:
        return MemoryClient(self.url, token=TOKENS[who][0], identity=Identity(**identity), timeout=20)
