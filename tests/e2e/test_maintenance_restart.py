"""`episodic up` killed with -9 and started again against the same broker and store: one nudge per run per
window (on memory.nudges and in render), and health snapshots and run counters that survive the restart.

The broker runs in the test process (the embedded one would die with the stack), the stack as
`python -m stack.cli up`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from episodic.maintenance.nudge import nudge_text
from infra.broker import free_port
from schemas.events import HealthSnapshot, NudgeEvent
from tests.e2e.conftest import poll, produce_lines, read_topic
from tests.e2e.test_crash import start_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WS, AGENT, RUN = "nudge-ws", "agent-n", "run-7"


def entries(start: int, stop: int, *, run: str = RUN) -> list[bytes]:
    types = ("exec.output_chunk", "peer.conversation", "summary.generated", "keeper.decision")
    return [
        json.dumps(
            {
                "id": f"{run}-{i:04d}",
                "workspace_id": WS,
                "agent_id": AGENT,
                "crew_id": "crew-n",
                "run_id": run,
                "ts": "2026-11-21T10:00:00Z",
                "entry_type": types[i % len(types)],
                "severity": "info",
                "summary": f"step {i}: the agent looked at shard {i % 13} of the billing queue",
                "payload": {"i": i},
            }
        ).encode()
        for i in range(start, stop)
    ]


def metric(port: int, name: str, labels: str = "") -> float:
    """A sample of the stack's /metrics, -1 while it does not answer."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return -1.0
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def counted(port: int) -> float:
    return metric(port, "episodic_nudge_entries_total", 'outcome="counted"')


def render(port: int, run_id: str) -> dict[str, Any]:
    body = {"workspace_id": WS, "agent_id": AGENT, "query": "billing queue", "max_chars": 1200, "run_id": run_id}
    r = httpx.post(f"http://127.0.0.1:{port}/v1/recall/render", json=body, timeout=30)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


@asynccontextmanager
async def stack_up(broker: str, data: Path, log: Path, what: str) -> AsyncIterator[tuple[int, subprocess.Popen[bytes]]]:
    """`episodic up` on a fresh port, once it answers; killed on the way out if it still runs."""
    port = free_port()
    proc = start_stack(broker, data, port, log)
    try:
        await poll(lambda: counted(port) >= 0, timeout=300, what=what)  # model and seven roles, shared machine
        yield port, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def kill_9(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


async def test_one_nudge_per_run_and_snapshots_across_kill_9(fresh_broker: str, tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "stack.log"
    async with stack_up(fresh_broker, data, log, "stack up") as (port, proc):
        await produce_lines(fresh_broker, entries(0, 45))
        await poll(lambda: counted(port) >= 45, timeout=60, what="45 entries counted")
        await poll(lambda: metric(port, "episodic_indexed_total", 'mode="vector"') >= 11, timeout=60, what="indexed")
        r = httpx.post(f"http://127.0.0.1:{port}/v1/admin/run/health", params={"workspace_id": WS}, timeout=60)
        assert r.status_code == 200 and r.json()["workspaces"] == 1, r.text
        first = r.json()["snapshots"][0]
        records = await read_topic(fresh_broker, "memory.health", expect=2)  # published (fire and forget)
        health = [HealthSnapshot.from_json(rec.value) for rec in records]
        assert [(h.crew_id, h.trigger) for h in health] == [(None, "admin"), ("crew-n", "admin")]
        assert health[0].to_json_dict() == first
        kill_9(proc)

    async with stack_up(fresh_broker, data, log, "stack up again") as (port, proc):
        # the snapshot survived the kill, and so did the run's counter: 15 more entries reach the threshold
        r = httpx.get(f"http://127.0.0.1:{port}/v1/memory/health", params={"workspace_id": WS}, timeout=10)
        assert r.status_code == 200 and r.json()["computed_at"] == first["computed_at"]
        assert metric(port, "episodic_memory_health_score", f'workspace_id="{WS}"') == first["score"]
        await produce_lines(fresh_broker, entries(45, 60))
        await poll(lambda: metric(port, "episodic_nudges_total") == 1, timeout=60, what="the nudge")
        await produce_lines(fresh_broker, entries(60, 75))
        await poll(lambda: counted(port) >= 30, timeout=60, what="30 entries counted")
        shown = render(port, RUN)
        assert shown["nudge"] == nudge_text(75) and "memory update" not in shown["text"]  # outside the block
        assert render(port, RUN)["nudge"] is None  # delivered once
        assert render(port, "another-run")["nudge"] is None
        kill_9(proc)

    async with stack_up(fresh_broker, data, log, "stack up a third time") as (port, proc):
        await produce_lines(fresh_broker, entries(75, 80))
        await poll(lambda: counted(port) >= 5, timeout=60, what="5 more entries counted")
        assert render(port, RUN)["nudge"] is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]

    nudges = [NudgeEvent.from_json(r.value) for r in await read_topic(fresh_broker, "memory.nudges", expect=1)]
    assert [(n.workspace_id, n.agent_id, n.run_id, n.count) for n in nudges] == [(WS, AGENT, RUN, 60)]
