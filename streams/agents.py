"""Maintenance agents over whole fetched batches, and a runner for one such agent in its own Faust app.

`install_batch_agent` declares a Faust agent on a topic registered with the batch transport
(`streams.transport`): each event is one fetched partition batch (`RecordBatch`). The agent decodes every
record (`decode`; a record that does not decode is logged, counted in `episodic_agent_malformed_total` and
skipped), hands the batch to `handle` in a worker thread (the core's blocking store calls stay off the
event loop), then marks the batch delivered and acks it, so its offsets are committed only after it was
applied: at-least-once, and the core functions are idempotent.

A batch that fails is retried with backoff: for as long as the store is unavailable (nothing is lost while
it is down), and `MAX_ATTEMPTS` times for any other error; then it is logged, counted and skipped, so a
poison batch never wedges the partition. The agent itself never dies of a bad record.

Lag: `episodic_agent_lag_seconds{agent}` (an event's production to its handling, per event) and
`episodic_consumer_lag_records{group}`: the group's records not committed yet, measured from fetch high
watermarks by an `episodic.bus.LagProbe` beside the app (the same probe as the gate's and the embedding
consumer's), every `EPISODIC_LAG_INTERVAL_S`, so it keeps rising while the agent is stuck on a batch.

Each agent runs in a Faust app of its own (`AgentRunner`): its app id is its consumer group,
`<consumer_group_prefix>-<name>`, so that it reads every partition at its own pace and scales on its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import faust
from faust.types import StreamT

from episodic.bus import ensure_topics, group_lag_probe
from episodic.errors import StoreUnavailable
from episodic.metrics import Metrics
from episodic.settings import Settings
from schemas.events import InvalidRecord
from streams.app import create_app
from streams.transport import BatchConsumer, RecordBatch

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_ATTEMPTS = 5
MAX_BACKOFF_S = 30.0

Decoded = tuple[Any, T]  # (the raw aiokafka record, its decoded value)


def install_batch_agent(
    app: faust.App,
    *,
    topic: str,
    name: str,
    decode: Callable[[bytes | None], T],
    handle: Callable[[list[Decoded[T]]], Any],
    metrics: Metrics,
    backoff_s: float = 0.2,
) -> Any:
    """Declare the agent on `app` (an EpisodicApp); returns it. `handle` runs in a thread."""
    consumer = app.consumer
    if not isinstance(consumer, BatchConsumer):
        raise TypeError("a batch agent needs the batch transport: create the app with streams.app.create_app")
    consumer.batch_topics.add(topic)
    source = app.topic(topic, key_serializer="raw", value_serializer="raw")

    def decoded(batch: RecordBatch) -> list[Decoded[T]]:
        out: list[Decoded[T]] = []
        for rec in batch.records:
            try:
                out.append((rec, decode(rec.value)))
            except InvalidRecord as e:
                metrics.agent_malformed.labels(agent=name).inc()
                log.warning(
                    "%s: skipped a malformed record at %s[%d]@%d: %s", name, topic, rec.partition, rec.offset, e
                )
        return out

    async def apply(items: list[Decoded[T]]) -> None:
        delay, attempt = backoff_s, 0
        while True:
            try:
                await asyncio.to_thread(handle, items)
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                attempt += 1
                metrics.agent_errors.labels(agent=name).inc()
                down = isinstance(e, StoreUnavailable)
                if not down and attempt >= MAX_ATTEMPTS:
                    log.error("%s: skipping a batch of %d after %d attempts: %r", name, len(items), attempt, e)
                    return
                log.warning("%s: batch failed (%s); retrying in %.1fs", name, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)

    async def agent(stream: StreamT) -> None:
        manual: Any = stream.noack()  # type: ignore[attr-defined] # acked below, after the batch is applied
        async for batch in manual:
            event = manual.current_event
            if not isinstance(batch, RecordBatch):  # pragma: no cover - the transport delivers batches only
                log.error("%s: unexpected value %r on %s; not acked", name, type(batch), topic)
                continue
            items = decoded(batch)
            if items:
                await apply(items)
                now = time.time()
                for rec, _ in items:
                    if rec.timestamp is not None:
                        metrics.agent_lag.labels(agent=name).observe(max(0.0, now - rec.timestamp / 1000.0))
            batch.mark_delivered()
            if event is not None:
                await manual.ack(event)

    return app.agent(source, name=f"episodic.{name}")(agent)


class AgentRunner(Generic[T]):
    """One batch agent in a Faust app of its own, started and stopped inside the caller's event loop."""

    def __init__(
        self,
        settings: Settings,
        *,
        name: str,
        topic: str,
        decode: Callable[[bytes | None], T],
        handle: Callable[[list[Decoded[T]]], Any],
        metrics: Metrics,
        app_id: str | None = None,
        create_topics: Sequence[str] | None = None,
    ) -> None:
        self.settings = settings
        self.name = name
        self.topic = topic
        self.decode = decode
        self.handle = handle
        self.metrics = metrics
        self.app_id = app_id or f"{settings.consumer_group_prefix}-{name}"
        self.create_topics = tuple(create_topics) if create_topics is not None else (topic,)
        self.app: faust.App | None = None
        self._lag: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.app is not None:
            raise RuntimeError(f"{self.name} already started")
        if self.create_topics:
            await ensure_topics(
                self.settings.bootstrap,
                partitions=self.settings.topic_partitions,
                replication=self.settings.topic_replication,
                topics=self.create_topics,
            )
        app = create_app(self.settings, app_id=self.app_id)
        Path(app.conf.datadir).mkdir(parents=True, exist_ok=True)
        install_batch_agent(
            app,
            topic=self.topic,
            name=self.name,
            decode=self.decode,
            handle=self.handle,
            metrics=self.metrics,
        )
        self.app = app
        await app.start()
        group = self.app_id
        probe = group_lag_probe(self.settings, self.metrics, group=group, topic=self.topic)
        self._lag = asyncio.create_task(probe.run(), name=f"lag-{group}")
        log.info("%s: %s (group %s, bootstrap %s)", self.name, self.topic, self.app_id, self.settings.bootstrap)

    def assignment(self) -> set[Any]:
        if self.app is None or not self.app.started:
            return set()
        try:
            return {tp for tp in self.app.consumer.assignment() if tp.topic == self.topic}
        except Exception:
            return set()

    async def wait_assigned(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.crashed:
            if self.assignment():
                return True
            await asyncio.sleep(0.05)
        return bool(self.assignment())

    @property
    def crashed(self) -> bool:
        return self.app is not None and bool(self.app.crashed)

    @property
    def crash_reason(self) -> BaseException | None:
        return self.app.crash_reason if self.app is not None else None

    async def stop(self) -> None:
        """Stop consuming; the batch being applied is not acked (it is read again), then leave the group."""
        app, self.app = self.app, None
        lag, self._lag = self._lag, None
        if lag is not None:
            lag.cancel()
            await asyncio.gather(lag, return_exceptions=True)
        if app is None:
            return
        try:
            await app.stop()
        except Exception as e:  # stopping must not fail the caller's shutdown
            log.warning("%s: error while stopping: %r", self.name, e)
        log.info("%s stopped", self.name)
