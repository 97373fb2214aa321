"""Agents that may lag gather their input (Settings.agent_gather_ms): on the real broker, a gathering agent
gets a trickle of records in one batch per wait instead of one per fetch, every record once, and a
pipeline agent beside it (no gather) still gets them within its short wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from episodic.bus.kafka import ensure_topics, make_producer
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from streams.agents import AgentRunner, Decoded, install_batch_agent

pytestmark = pytest.mark.integration

TRICKLE_S = 3.0
EVERY_S = 0.025  # 40 records a second, one at a time (as recalls' memory.referenced events come)


def runner(
    bootstrap: str, topic: str, group: str, *, gather: bool, gather_ms: int, seen: list[list[bytes]]
) -> AgentRunner:
    settings = Settings(kafka_bootstrap=bootstrap, fetch_max_wait_ms=50, agent_gather_ms=gather_ms)
    metrics = Metrics(CollectorRegistry())

    def handle(items: list[Decoded[bytes]]) -> None:
        seen.append([value for _, value in items])

    install: Callable[..., object] = lambda app: install_batch_agent(  # noqa: E731
        app, topic=topic, name="probe", decode=lambda raw: raw or b"", handle=handle, metrics=metrics
    )
    return AgentRunner(
        settings, name="probe", app_id=group, topics=(topic,), install=install, metrics=metrics, gather=gather
    )


async def trickle(bootstrap: str, topic: str) -> list[bytes]:
    producer = make_producer(bootstrap)
    await producer.start()
    sent: list[bytes] = []
    try:
        end = time.monotonic() + TRICKLE_S
        while time.monotonic() < end:
            value = f"r{len(sent)}".encode()
            await (await producer.send(topic, key=b"ws", value=value))
            sent.append(value)
            await asyncio.sleep(EVERY_S)
    finally:
        await producer.stop()
    return sent


async def drained(seen: list[list[bytes]], want: int, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while sum(map(len, seen)) < want and time.monotonic() < end:
        await asyncio.sleep(0.1)


async def test_a_gathering_agent_gets_a_trickle_in_one_batch_per_wait_and_a_pipeline_agent_per_fetch(
    broker: str, uid: str
) -> None:
    topic = f"gather-{uid}"
    await ensure_topics(broker, partitions=1, topics=(topic,))
    gathered: list[list[bytes]] = []
    direct: list[list[bytes]] = []
    off: list[list[bytes]] = []
    runners = [
        runner(broker, topic, f"gather-{uid}", gather=True, gather_ms=600, seen=gathered),
        runner(broker, topic, f"direct-{uid}", gather=False, gather_ms=600, seen=direct),
        runner(broker, topic, f"off-{uid}", gather=True, gather_ms=0, seen=off),  # 0: the pipeline's wait
    ]
    for r in runners:
        await r.start()
    try:
        await asyncio.sleep(2.0)  # the groups' assignments
        sent = await trickle(broker, topic)
        for seen in (gathered, direct, off):
            await drained(seen, len(sent))
    finally:
        for r in runners:
            await r.stop()
    assert len(sent) > 60
    for seen in (gathered, direct, off):
        got = [v for batch in seen for v in batch]
        assert sorted(got) == sorted(sent), "every record once, none lost"
    # one batch per 600 ms wait over the trickle (and a partial one at each end), not one per fetch
    assert len(gathered) <= TRICKLE_S / 0.6 + 4, [len(b) for b in gathered]
    assert len(direct) >= 3 * len(gathered), (len(direct), len(gathered))
    assert len(off) >= 3 * len(gathered), (len(off), len(gathered))


def test_the_gather_setting_is_bounded_and_names_the_field() -> None:
    with pytest.raises(ValueError, match="agent_gather_ms"):
        Settings(agent_gather_ms=-1)
    with pytest.raises(ValueError, match="agent_gather_ms"):
        Settings(agent_gather_ms=60_000)
