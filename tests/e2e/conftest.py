"""End-to-end helpers: a fresh broker per test, the whole stack in-process, polling with deadlines."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from episodic.bus.kafka import make_producer
from episodic.kernel.settings import Settings
from infra.broker import free_port
from stack.roles import EmbedderRole
from stack.runtime import Stack


def stack_settings(bootstrap: str, data_dir: Path, **over: Any) -> Settings:
    base: dict[str, Any] = {
        "kafka_bootstrap": bootstrap,
        "data_dir": data_dir,
        "http_port": free_port(),
        "topic_partitions": 2,
        "batch_size": 32,
        "batch_max_wait_ms": 30,
    }
    base.update(over)
    return Settings(**base)


@asynccontextmanager
async def running_stack(settings: Settings, **kw: Any) -> AsyncIterator[Stack]:
    """A started Stack (every role unless `roles=` says otherwise; `clock=` for a controllable clock)."""
    stack = Stack(settings, **kw)
    try:
        await stack.start()
        embedder = stack.role(EmbedderRole)
        if embedder is not None and embedder.consumer is not None:
            await embedder.consumer.wait_ready()
        yield stack
    finally:
        await stack.stop()


async def produce_lines(bootstrap: str, lines: list[bytes], topic: str = "journal.entries") -> None:
    producer = make_producer(bootstrap)
    await producer.start()
    try:
        futs = []
        for line in lines:
            key = None
            try:
                obj = json.loads(line)
                if isinstance(obj, dict) and isinstance(obj.get("workspace_id"), str) and obj["workspace_id"]:
                    key = obj["workspace_id"].encode()
            except (ValueError, UnicodeDecodeError):
                pass
            futs.append(await producer.send(topic, key=key, value=line))
        await asyncio.gather(*futs)
    finally:
        await producer.stop()


async def poll(check: Callable[[], Any], *, timeout: float = 60.0, interval: float = 0.2, what: str = "") -> Any:
    """Poll `check` until it returns a truthy value; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}: last={last!r}")


async def read_topic(
    bootstrap: str,
    topic: str,
    *,
    expect: int,
    timeout: float = 60.0,
    distinct: str | None = None,
    isolation_level: str = "read_uncommitted",
) -> list[Any]:
    """Read `expect` records from the start of `topic` (a fresh group), or stop at the deadline.

    `distinct` names a JSON field: then `expect` counts the records with distinct values of it, so that a
    topic with re-deliveries (a killed member's batch written again by the survivor) is read until every id
    has come, not until as many records as ids have (the re-delivered ones would end the read early).
    `isolation_level` "read_committed" leaves out what aborted transactions wrote (the gate under exactly-once)."""
    c = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"reader-{topic}-{time.monotonic_ns()}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1_000,
        isolation_level=isolation_level,
    )
    await c.start()
    out: list[Any] = []
    try:
        deadline = time.monotonic() + timeout
        seen: set[Any] = set()
        while (len(seen) if distinct else len(out)) < expect and time.monotonic() < deadline:
            got = await c.getmany(timeout_ms=300)
            for recs in got.values():
                out.extend(recs)
                if distinct:
                    seen.update(json.loads(r.value)[distinct] for r in recs)
        # a short grace read: more than expected is a failure the caller should see
        got = await c.getmany(timeout_ms=300)
        for recs in got.values():
            out.extend(recs)
    finally:
        await c.stop()
    return out


@pytest.fixture
def procs() -> Iterator[list[Any]]:
    """Processes a test starts (anything with a `proc`: a subprocess.Popen), killed at the end if still running."""
    started: list[Any] = []
    yield started
    for p in started:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(10)
