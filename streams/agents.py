"""The common shape of the maintenance agents (nudge, health): a batch agent, a retry loop, a runner.

- `batch_agent`: a Faust agent that receives whole fetched partition batches (`streams.transport`) and
  acks a batch only after its handler returned, i.e. after the handler wrote its state: at-least-once,
  and every handler is idempotent on a re-delivered batch (replay marks or idempotent keys).
- `retrying`: a store or broker failure is retried with backoff, never skipped (nothing is lost); the
  batch stays unacked meanwhile, which is the back-pressure. A stop cancels the wait.
- `AgentRunner`: one Faust app (its own consumer group, `<prefix>-<suffix>`) with the agents and timers an
  `install` function declares, started and stopped inside the caller's event loop, like the gate's runner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import faust
from faust.types import StreamT

from episodic.bus import ensure_topics
from episodic.errors import EpisodicError
from episodic.metrics import Metrics
from episodic.settings import Settings
from streams.app import create_app
from streams.transport import BatchConsumer, RecordBatch

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRY_MAX_S = 30.0


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    metrics: Metrics,
    agent: str,
    stage: str,
    errors: tuple[type[BaseException], ...] = (EpisodicError,),
) -> T:
    """`await call()` until it succeeds; failures of the given types are logged, counted and retried."""
    delay = 0.2
    while True:
        try:
            return await call()
        except errors as e:
            metrics.agent_errors.labels(agent=agent, stage=stage).inc()
            log.warning("%s agent: %s failed (%s); retrying in %.1fs", agent, stage, e, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)


def batch_agent(app: faust.App, topic: str, name: str, handle: Callable[[RecordBatch], Awaitable[None]]) -> Any:
    """Declare an agent on `topic` that hands each fetched batch to `handle`, then acks it."""
    consumer = app.consumer
    if not isinstance(consumer, BatchConsumer):
        raise TypeError("the agents need the batch transport: create the app with streams.app.create_app")
    consumer.batch_topics.add(topic)
    source = app.topic(topic, key_serializer="raw", value_serializer="raw")

    async def run(stream: StreamT) -> None:
        manual: Any = stream.noack()  # type: ignore[attr-defined] # acked below, after the handler
        async for batch in manual:
            event = manual.current_event
            if not isinstance(batch, RecordBatch):  # pragma: no cover - the transport delivers batches only
                log.error("%s: unexpected value %r on %s; not acked", name, type(batch), topic)
                continue
            await handle(batch)
            batch.mark_delivered()
            await manual.ack(event)

    return app.agent(source, name=name)(run)


class AppHolder:
    """A Faust app started and stopped inside the caller's event loop: its crash state and its stop (shared
    by the gate's runner and the maintenance agents')."""

    label = "app"
    app: faust.App | None = None

    @property
    def crashed(self) -> bool:
        return self.app is not None and bool(self.app.crashed)

    @property
    def crash_reason(self) -> BaseException | None:
        return self.app.crash_reason if self.app is not None else None

    async def stop(self) -> None:
        """Stop consuming, let the batch in flight finish (acked batches are committed), leave the group."""
        app, self.app = self.app, None
        if app is None:
            return
        try:
            await app.stop()
        except Exception as e:  # stopping must not fail the caller's shutdown
            log.warning("%s: error while stopping: %r", self.label, e)
        log.info("%s stopped", self.label)


class AgentRunner(AppHolder):
    """One Faust app with the agents `install(app)` declares, in the caller's event loop."""

    def __init__(
        self,
        settings: Settings,
        *,
        suffix: str,
        install: Callable[[faust.App], None],
        topics: tuple[str, ...],
        app_id: str | None = None,
        create_topics: bool = True,
    ) -> None:
        self.settings = settings
        self.suffix = suffix
        self.label = f"{suffix} agent"
        self.install = install
        self.topics = topics
        self.app_id = app_id or f"{settings.consumer_group_prefix}-{suffix}"
        self.create_topics = create_topics
        self.app = None

    async def start(self) -> None:
        if self.app is not None:
            raise RuntimeError(f"{self.label} already started")
        if self.create_topics:
            s = self.settings
            await ensure_topics(
                s.bootstrap, partitions=s.topic_partitions, replication=s.topic_replication, topics=self.topics
            )
        app = create_app(self.settings, app_id=self.app_id)
        Path(app.conf.datadir).mkdir(parents=True, exist_ok=True)
        self.install(app)
        self.app = app
        await app.start()
        log.info("%s: %s (group %s)", self.label, ", ".join(self.topics), self.app_id)
