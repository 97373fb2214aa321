"""bench.common.child_process: a benchmark stopped with SIGTERM stops the stack it started (the child runs
in its own session, so it never sees the signal itself)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys, time
from pathlib import Path
from bench.common import child_process
with child_process([sys.executable, "-c", "import time; time.sleep(120)"], env={}, log_path=Path(sys.argv[1])) as p:
    print(p.pid, flush=True)
    time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie has exited: only its parent's wait is missing
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


def test_sigterm_to_the_benchmark_stops_its_child(tmp_path: Path) -> None:
    bench = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "child.log")], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert bench.stdout is not None
        child = int(bench.stdout.readline())
        assert _alive(child)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        bench.kill()
        bench.wait()
