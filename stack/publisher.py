"""The recall service's events (`memory.referenced`): fire and forget, buffered while Kafka is away.

`Publisher` is what `recall.create_app` calls as `publish(topic, key, value)`: from the loop thread or any
other, it never blocks and never fails a request. Events go into a bounded buffer
(`EPISODIC_REFERENCED_BUFFER`) that one task drains to Kafka in batches; while Kafka is unreachable they
wait there, and once the buffer is full new events are dropped and counted
(`episodic_referenced_dropped_total`; `episodic_referenced_buffered` is the backlog). A failed send is put
back in order and retried with backoff, so an outage delays events instead of losing them (up to the
bound). When the stack started without Kafka (`episodic serve` may), the publisher connects by itself
with `connect` until it succeeds; `connected()` hands that producer to the service's other senders (a
forget, the archive of an admin decay run), connecting it first when needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from episodic.bus.kafka import dumps
from episodic.kernel.metrics import Metrics

log = logging.getLogger("episodic")

SEND_BATCH = 500
RETRY_MAX_S = 10.0

Event = tuple[str, bytes | None, bytes]
Connect = Callable[[], Awaitable[Any]]  # a started AIOKafkaProducer, or raises


class Publisher:
    def __init__(
        self,
        *,
        metrics: Metrics,
        limit: int,
        loop: asyncio.AbstractEventLoop,
        producer: Any | None = None,
        connect: Connect | None = None,
    ) -> None:
        if producer is None and connect is None:
            raise ValueError("a Publisher needs a started producer or a way to connect one")
        self._metrics = metrics
        self._limit = limit
        self._loop = loop
        self._producer = producer
        self._own_producer = False  # connected here (and so stopped here)
        self._connect = connect
        self._queue: deque[Event] = deque()
        self._transit = 0  # events handed over from other threads, not in the queue yet
        self._transit_lock = threading.Lock()
        self._connecting = asyncio.Lock()  # one connection, whoever asks first
        self._nonempty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    # -- the request side: any thread, never blocks -------------------------------------------------

    def __call__(self, topic: str, key: str | None, value: dict[str, Any]) -> None:
        event = (topic, key.encode() if key else None, dumps(value))
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._put(event)
            return
        # From another thread (the recall service's loop): counted against the bound before it is handed
        # over, so that events waiting for a busy stack loop are bounded too.
        with self._transit_lock:
            full = self._transit + len(self._queue) >= self._limit
            if not full:
                self._transit += 1
        if full:
            self._drop()  # here, not on the loop: nothing is handed over for an event that is not kept
        else:
            self._loop.call_soon_threadsafe(self._arrive, event)

    def _arrive(self, event: Event) -> None:
        with self._transit_lock:
            self._transit -= 1
        self._put(event)

    def _put(self, event: Event) -> None:
        if len(self._queue) >= self._limit:
            self._drop()
            return
        self._queue.append(event)
        self._metrics.referenced_buffered.set(len(self._queue))
        self._nonempty.set()

    def _drop(self) -> None:
        """One event more than the buffer holds (any thread)."""
        with self._transit_lock:
            self.dropped += 1
            dropped = self.dropped
        self._metrics.referenced_dropped.inc()
        if dropped == 1 or dropped % 1000 == 0:
            log.warning(
                "memory.referenced buffer full (%d events waiting for Kafka): %d dropped so far",
                self._limit,
                dropped,
            )

    @property
    def buffered(self) -> int:
        return len(self._queue)

    # -- the sending side: one task ------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="publisher")

    async def _run(self) -> None:
        delay = 0.5
        while True:
            await self._nonempty.wait()
            try:
                producer = await self._ready()
                sent = await self._send_some(producer)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                sent = False
                log.debug("publisher: %r", e)
            if sent:
                delay = 0.5
            else:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
            if not self._queue:
                self._nonempty.clear()

    async def connected(self) -> Any:
        """The started producer, connected now if the stack started without Kafka; raises while Kafka is
        unreachable."""
        return await self._ready()

    async def _ready(self) -> Any:
        async with self._connecting:
            if self._producer is not None:
                return self._producer
            if self._connect is None:  # pragma: no cover - refused in __init__
                raise RuntimeError("no producer and no way to connect one")
            self._producer = await self._connect()
            self._own_producer = True
        log.info("publisher: connected to Kafka; sending %d buffered events", len(self._queue))
        return self._producer

    async def _send_some(self, producer: Any) -> bool:
        """Send up to a batch from the head of the buffer; what fails goes back to the head, in order."""
        batch = [self._queue.popleft() for _ in range(min(SEND_BATCH, len(self._queue)))]
        failed: set[int] = set()
        queued: list[tuple[int, Any]] = []
        for i, (topic, key, value) in enumerate(batch):
            try:
                queued.append((i, await producer.send(topic, key=key, value=value)))
            except Exception:
                failed.add(i)
        results = await asyncio.gather(*(f for _, f in queued), return_exceptions=True)
        failed.update(i for (i, _), res in zip(queued, results, strict=True) if isinstance(res, BaseException))
        if failed:
            self._metrics.consumer_errors.labels(stage="publish").inc(len(failed))
            self._queue.extendleft(batch[i] for i in sorted(failed, reverse=True))
            while len(self._queue) > self._limit:  # the bound holds: the newest go
                self._queue.pop()
                self.dropped += 1
                self._metrics.referenced_dropped.inc()
        self._metrics.referenced_buffered.set(len(self._queue))
        return not failed

    async def close(self, timeout: float) -> None:
        """Send what is buffered within `timeout` (when Kafka is there), then stop; the rest is dropped
        and counted."""
        if self._task is not None:
            deadline = self._loop.time() + timeout
            while self._queue and self._producer is not None and self._loop.time() < deadline:
                await asyncio.sleep(0.05)
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._queue:
            log.warning("publisher: %d memory.referenced events not sent (Kafka unreachable)", len(self._queue))
            self.dropped += len(self._queue)
            self._metrics.referenced_dropped.inc(len(self._queue))
            self._queue.clear()
            self._metrics.referenced_buffered.set(0)
        if self._own_producer and self._producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._producer.stop(), 10)
