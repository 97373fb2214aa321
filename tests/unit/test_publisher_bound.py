"""The recall service's event buffer (`stack.publisher.Publisher`) keeps its bound for events handed over from
another thread (the recall service's own loop) while the stack's loop is busy: counted before the hand-over."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from prometheus_client import CollectorRegistry

from episodic.kernel.metrics import Metrics
from stack.publisher import Publisher


async def no_kafka() -> Any:
    raise ConnectionError("no Kafka here")


async def test_events_from_another_thread_stay_within_the_bound_while_the_loop_is_held() -> None:
    metrics = Metrics(CollectorRegistry())
    publisher = Publisher(metrics=metrics, limit=5, loop=asyncio.get_running_loop(), connect=no_kafka)
    # not started: nothing drains the buffer, so what it holds is what was kept

    def recalls() -> None:
        for i in range(50):
            publisher("memory.referenced", "w", {"i": i})

    sender = threading.Thread(target=recalls)
    sender.start()
    sender.join()  # blocks this loop: none of the hand-overs has run yet
    assert publisher.dropped == 45 and publisher.buffered == 0
    await asyncio.sleep(0)  # the loop runs the 5 hand-overs
    assert publisher.buffered == 5 and publisher.dropped == 45
    dropped = metrics.registry.get_sample_value("episodic_referenced_dropped_total")
    assert dropped == 45
    publisher("memory.referenced", "w", {"i": 50})  # on the loop itself: the same bound
    assert publisher.buffered == 5 and publisher.dropped == 46
