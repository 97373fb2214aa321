"""Distributed roles: two `episodic run gate` (or `run embedder`) processes share the partitions; after a
kill -9 of one the other takes its partitions over, and every entry comes out at least once.

The broker is the suite's embedded Apache Kafka (the `broker` fixture); the roles run as
`python -m stack.cli run ROLE` subprocesses against it, each with its own /metrics and /healthz port. A
producer feeds the journal at a steady rate while one process is killed, so entries land on the killed
process's partitions before, during and after the rebalance. What is counted is the output topic, by id:
every produced id must be there (duplicates are allowed: at-least-once).

Embedders: Qdrant Edge is one process per store directory and no Qdrant server binary exists on this
machine, so each embedder writes its own Edge store here (EPISODIC_DATA_DIR of its own). The test proves
the Kafka side (split, takeover, at-least-once memory.indexed for every id) and that the union of the two
stores holds every entry under its deterministic point id, which is what makes two embedders writing one
Qdrant server collection safe (a re-delivered entry is an upsert of the same point).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from episodic.bus.kafka import make_producer
from episodic.domain.identity import point_id
from episodic.kernel.settings import Settings
from infra.broker import free_port
from tests.e2e.conftest import poll, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WORKSPACES = [f"fo-ws-{i}" for i in range(12)]  # keys spread over the 4 partitions


class RoleProcess:
    def __init__(self, role: str, bootstrap: str, data_dir: Path, log: Path, **env: str) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        full = dict(os.environ)
        full.update(
            {
                "EPISODIC_KAFKA_BOOTSTRAP": bootstrap,
                "EPISODIC_DATA_DIR": str(data_dir),
                "EPISODIC_HTTP_PORT": str(self.port),
                "EPISODIC_TOPIC_PARTITIONS": "4",
                "EPISODIC_SESSION_TIMEOUT_MS": "6000",  # a dead member leaves the group within ~6 s
                "EPISODIC_EMBED_MODEL": "none",
                "EPISODIC_BATCH_SIZE": "32",
                "EPISODIC_BATCH_MAX_WAIT_MS": "20",
                "HF_HUB_OFFLINE": "1",
                **env,
            }
        )
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stack.cli", "run", role],
            env=full,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )

    def healthz(self) -> dict[str, object] | None:
        try:
            r = httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=2)
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def metric(self, name: str) -> float:
        """The sum of a metric's samples (every label set), -1 while the process does not answer."""
        try:
            text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=2).text
        except httpx.HTTPError:
            return -1.0
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return -9
        return self.proc.returncode


def entry(i: int) -> bytes:
    return json.dumps(
        {
            "id": f"fo{i:06d}",
            "workspace_id": WORKSPACES[i % len(WORKSPACES)],
            "agent_id": "agent",
            "ts": "2026-11-21T10:00:00Z",
            "entry_type": "summary.generated",
            "severity": "info",
            "summary": f"failover entry {i}: job {i % 29} finished on host {i % 7}",
            "payload": {"i": i},
        }
    ).encode()


class Feeder:
    """Produces entries at a steady rate (acknowledged: acks=all) until stopped; `sent` counts them."""

    def __init__(self, bootstrap: str, per_tick: int = 20, tick_s: float = 0.1) -> None:
        self.bootstrap, self.per_tick, self.tick_s = bootstrap, per_tick, tick_s
        self.sent = 0
        self.acked_at: list[float] = []  # monotonic time of each tick's acknowledgement
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        producer = make_producer(self.bootstrap)
        await producer.start()
        try:
            while not self._stop.is_set():
                futs = []
                for i in range(self.sent, self.sent + self.per_tick):
                    key = WORKSPACES[i % len(WORKSPACES)].encode()
                    futs.append(await producer.send("journal.entries", key=key, value=entry(i)))
                await asyncio.gather(*futs)
                self.sent += self.per_tick
                self.acked_at.append(time.monotonic())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.tick_s)
        finally:
            await producer.stop()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def longest_gap(self, since: float) -> float:
        """The longest time without an acknowledgement after `since` (a produce stalled by a failover)."""
        times = [since, *(t for t in self.acked_at if t > since)]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    async def stop(self) -> int:
        self._stop.set()
        assert self._task is not None
        await self._task
        return self.sent


async def both_working_then_kill_one(a: RoleProcess, b: RoleProcess, feeder: Feeder, counter: str) -> tuple[int, float]:
    """Wait until both processes did work (each holds partitions), kill -9 `a`, then wait until `b` has
    done clearly more than before the kill; returns (entries sent at the kill, b's counter at the kill)."""
    await poll(lambda: a.healthz() and b.healthz(), timeout=120, what="both role processes healthy")
    feeder.start()
    await poll(
        lambda: a.metric(counter) >= 100 and b.metric(counter) >= 100, timeout=120, what=f"both did work ({counter})"
    )
    at_kill, b_before = feeder.sent, b.metric(counter)
    a.kill9()
    # the survivor takes the dead member's partitions over after the session timeout and goes on
    await poll(lambda: b.metric(counter) > b_before + 400, timeout=120, what="the survivor takes over")
    return at_kill, b_before


def twins(role: str, bootstrap: str, tmp_path: Path, log: Path, procs: list[RoleProcess]) -> list[RoleProcess]:
    """Two processes of `role`, each with its own data directory and ports."""
    pair = [RoleProcess(role, bootstrap, tmp_path / name, log) for name in ("a", "b")]
    procs += pair
    return pair


async def test_two_gates_split_the_partitions_and_one_takes_over_after_kill_9(
    fresh_broker: str, tmp_path: Path, procs: list[RoleProcess]
) -> None:
    log = tmp_path / "gates.log"
    a, b = twins("gate", fresh_broker, tmp_path, log, procs)
    feeder = Feeder(fresh_broker)
    t0 = time.monotonic()
    at_kill, _ = await both_working_then_kill_one(a, b, feeder, "episodic_gate_entries_total")
    sent = await feeder.stop()
    assert sent > at_kill
    # the gates run under exactly-once (the default): what a read_committed reader sees is each entry once
    out = await read_topic(
        fresh_broker, "journal.embeddable", expect=sent, timeout=120, distinct="id", isolation_level="read_committed"
    )
    per_id = Counter(json.loads(r.value)["id"] for r in out)
    missing = {f"fo{i:06d}" for i in range(sent)} - set(per_id)
    assert not missing, (len(missing), sorted(missing)[:10], log.read_text()[-3000:])
    twice = sorted(i for i, n in per_id.items() if n > 1)
    assert not twice, (len(twice), twice[:10], log.read_text()[-3000:])
    assert b.healthz() is not None and b.stop() == 0, log.read_text()[-3000:]
    took = time.monotonic() - t0
    print(f"gates: {sent} entries ({at_kill} before the kill), each once, {took:.0f}s")


async def test_two_embedders_split_the_partitions_and_one_takes_over_after_kill_9(
    fresh_broker: str, tmp_path: Path, procs: list[RoleProcess]
) -> None:
    log = tmp_path / "embedders.log"
    gate = RoleProcess("gate", fresh_broker, tmp_path / "gate", log)
    procs.append(gate)
    a, b = twins("embedder", fresh_broker, tmp_path, log, procs)
    await poll(lambda: gate.healthz(), timeout=120, what="the gate healthy")
    feeder = Feeder(fresh_broker)
    at_kill, _ = await both_working_then_kill_one(a, b, feeder, "episodic_indexed_total")
    sent = await feeder.stop()
    ids = {f"fo{i:06d}" for i in range(sent)}
    events = await read_topic(fresh_broker, "memory.indexed", expect=sent, timeout=180, distinct="entry_id")
    per_id = Counter(json.loads(r.value)["entry_id"] for r in events)
    assert ids <= set(per_id), (len(ids - set(per_id)), log.read_text()[-3000:])
    assert b.stop() == 0 and gate.stop() == 0, log.read_text()[-3000:]
    # every entry is in one of the two stores under its deterministic point id (nothing lost; with a shared
    # Qdrant server the re-delivered ones are upserts of the same point)
    from stack.stores import open_store

    found: set[str] = set()
    for p in (a, b):
        store = open_store(Settings(data_dir=p.data_dir), dim=384)
        try:
            by_point = {point_id(WORKSPACES[int(i[2:]) % len(WORKSPACES)], i): i for i in ids}
            found |= {by_point[pid] for pid in store.retrieve(list(by_point), fields=["entry_id"])}
        finally:
            store.close()
    assert found == ids, len(ids - found)
    print(f"embedders: {sent} entries ({at_kill} before the kill), {len(events) - sent} events re-delivered")
