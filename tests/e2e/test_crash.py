"""kill -9 mid-batch, restart: nothing is lost and nothing already stored is written again.

The broker runs in the test process (the embedded broker would die with the process we kill), the stack
runs as `python -m stack.cli up` against it. One point per entry holds by construction (uuid5 ids), so the
test counts what can go wrong instead: every entry gets its `memory.indexed` event (at-least-once: the
batches in flight at the kill are delivered again, so some get two), and the restarted consumer writes
exactly the points that were missing at the kill, not one more (re-delivered entries that were already
written are recognised, not rewritten).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from episodic.domain.identity import point_id
from episodic.kernel.settings import Settings
from infra.broker import free_port
from tests.e2e.conftest import poll, produce_lines, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def start_stack(bootstrap: str, data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        {
            "EPISODIC_KAFKA_BOOTSTRAP": bootstrap,
            "EPISODIC_DATA_DIR": str(data_dir),
            "EPISODIC_HTTP_PORT": str(port),
            "EPISODIC_BATCH_SIZE": "16",
            "EPISODIC_BATCH_MAX_WAIT_MS": "20",
            "EPISODIC_TOPIC_PARTITIONS": "2",
            "EPISODIC_VISIBLE_BUDGET_MS": "0",  # vectors inline: one "vector" event per entry and delivery
            "HF_HUB_OFFLINE": "1",
        }
    )
    return subprocess.Popen(
        [sys.executable, "-m", "stack.cli", "up"], env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )


def indexed(port: int, ws: str) -> int:
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/v1/memory/stats", params={"workspace_id": ws}, timeout=2)
        return int(r.json()["indexed"]) if r.status_code == 200 else -1
    except (httpx.HTTPError, ValueError, KeyError):
        return -1


async def test_kill_9_mid_batch_then_restart_indexes_each_entry_once(fresh_broker: str, tmp_path: Path) -> None:
    n = 600
    lines = [
        json.dumps(
            {
                "id": f"k{i:05d}",
                "workspace_id": "crash-ws",
                "agent_id": "agent",
                "ts": "2026-11-21T10:00:00Z",
                "entry_type": "summary.generated",
                "severity": "info",
                "summary": f"incident {i}: service {i % 37} restarted after {i % 11} retries on node {i % 5}",
                "payload": {"i": i},
            }
        ).encode()
        for i in range(n)
    ]
    port = free_port()
    log = tmp_path / "stack.log"
    proc = start_stack(fresh_broker, tmp_path / "data", port, log)
    try:
        await poll(lambda: indexed(port, "crash-ws") == 0, timeout=180, what="stack up")
        await produce_lines(fresh_broker, lines)
        # kill -9 while the consumer is part-way through the journal
        got = await poll(
            lambda: indexed(port, "crash-ws") >= 40 and indexed(port, "crash-ws"), timeout=90, what="first batches"
        )
        assert got < n, "the consumer finished before the kill: make the journal longer"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    # what the killed process left in the store (nothing runs now: the store can be opened)
    from stack.stores import open_store

    store = open_store(Settings(data_dir=tmp_path / "data"), dim=384)
    try:
        stored_at_kill = store.count("crash-ws")
    finally:
        store.close()
    assert 0 < stored_at_kill < n

    port2 = free_port()
    proc2 = start_stack(fresh_broker, tmp_path / "data", port2, log)
    try:
        await poll(lambda: indexed(port2, "crash-ws") == n, timeout=180, what=f"all {n} entries indexed after restart")
        events = await read_topic(fresh_broker, "memory.indexed", expect=n, timeout=60, distinct="entry_id")
        text = httpx.get(f"http://127.0.0.1:{port2}/metrics", timeout=5).text
        proc2.send_signal(signal.SIGTERM)
        assert proc2.wait(60) == 0, log.read_text()[-3000:]
        # `episodic up` froze its started heap out of the collector's full passes (stack.heap), each time
        assert log.read_text().count("objects frozen out of the collector's full passes") == 2
    finally:
        if proc2.poll() is None:
            proc2.kill()
    # nothing lost: every entry has its memory.indexed event (vector), some twice (re-delivered)
    per_entry = Counter(json.loads(r.value)["entry_id"] for r in events)
    assert set(per_entry) == {f"k{i:05d}" for i in range(n)}
    assert {json.loads(r.value)["mode"] for r in events} == {"vector"}
    # nothing written twice: the restarted consumer wrote exactly the points missing at the kill
    written = _sample(text, "episodic_points_written_total")
    assert written == n - stored_at_kill, (written, n, stored_at_kill)
    store = open_store(Settings(data_dir=tmp_path / "data"), dim=384)
    try:
        assert store.count("crash-ws") == store.count() == n
        assert len(store.retrieve([point_id("crash-ws", f"k{i:05d}") for i in range(n)])) == n
    finally:
        store.close()


def _sample(text: str, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return float(s.value)
    raise AssertionError(f"{name} not exported")
