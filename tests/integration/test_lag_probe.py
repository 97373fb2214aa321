"""The lag probe against the real broker: it measures, and it does not fetch between its ticks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from episodic.bus.offsets import LagProbe
from tests.integration.test_embedding_consumer import produce

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("exact", [True, False], ids=["list-offsets", "fetch-high-watermarks"])
async def test_the_probe_measures_and_sends_no_fetch_between_its_ticks(broker: str, uid: str, exact: bool) -> None:
    """On Kafka the probe asks ListOffsets and never fetches; the Tansu path (`exact=False`: fetch high
    watermarks, right on Kafka too) fetches during a measure only."""
    topic = f"lag-probe-{uid}"
    await produce(broker, topic, [b"x"] * 7)
    probe = LagProbe(bootstrap=broker, group_id=f"nobody-{uid}", topic=topic, report=lambda _lag: None, exact=exact)
    consumer = probe.consumer()
    await consumer.start()
    fetches: list[Any] = []
    send = consumer._client.send

    async def counting(node_id: int, request: Any, **kw: Any) -> Any:
        if type(request).__name__.startswith("FetchRequest"):
            fetches.append(request)
        return await send(node_id, request, **kw)

    consumer._client.send = counting
    try:
        assert await probe.measure(consumer) == 7  # a group that never committed: every record
        assert bool(fetches) is not exact  # the Tansu path fetched, for the high watermarks
        assert consumer.paused() == consumer.assignment()
        before = len(fetches)
        await asyncio.sleep(1.0)  # 20 fetch intervals of 50 ms
        assert len(fetches) == before  # idle between ticks
        await produce(broker, topic, [b"y"] * 3)
        assert await probe.measure(consumer) == 10  # resumed for the next tick
    finally:
        await consumer.stop()
