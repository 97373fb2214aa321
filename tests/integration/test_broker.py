"""The embedded broker launcher: a real Tansu process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.broker import BrokerError, EmbeddedBroker, free_port, port_open

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            state = next(line for line in fh if line.startswith("State:"))
        return "Z" in state.split()[1]  # a zombie has exited (init reaps it later)
    except (FileNotFoundError, StopIteration):
        return True


def test_start_stop_and_port_in_use() -> None:
    b = EmbeddedBroker(port=free_port())
    b.start()
    try:
        assert b.alive() and port_open("127.0.0.1", b.port)
        with pytest.raises(BrokerError, match="already in use"):
            EmbeddedBroker(port=b.port).start()
    finally:
        b.stop()
    assert not b.alive() and not port_open("127.0.0.1", b.port)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_broker_dies_with_a_parent_killed_by_sigkill() -> None:
    code = (
        "from infra.broker import EmbeddedBroker, free_port; import time; "
        "b = EmbeddedBroker(port=free_port()); b.start(); print(b.pid, flush=True); time.sleep(120)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=ROOT)
    assert parent.stdout is not None
    broker_pid = int(parent.stdout.readline())
    assert not _gone(broker_pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(10)
    deadline = time.monotonic() + 10
    while not _gone(broker_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(broker_pid), "the embedded broker outlived the process that started it"
