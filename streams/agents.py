"""The common shape of the maintenance agents (linker, importance, health, nudge): batch agents, one retry
loop, one runner.

- `batch_agent`: a Faust agent on a topic registered with the batch transport (`streams.transport`): each
  event is one fetched partition batch (`RecordBatch`). It hands the batch to an async `handle`, then marks
  it delivered and acks it, so its offsets are committed only after it was applied: at-least-once, and
  every handler is idempotent on a re-delivered batch (replay marks or idempotent keys). Lag:
  `episodic_agent_lag_seconds{agent}` (an event's production to its handling, per record).
- `decode_batch`: the records of a batch decoded; a record that does not decode is logged, counted in
  `episodic_agent_malformed_total{agent,topic}` and skipped (the agent never dies of a bad record).
- `retrying`: a failure is counted in `episodic_agent_errors_total{agent,stage}` and retried with backoff;
  the batch stays unacked meanwhile, which is the back-pressure. For as long as the store is unavailable
  it is retried for ever (nothing is lost while it is down); with `attempts`, any other error gives up
  after that many tries (the caller skips the batch, so a poison batch never wedges the partition).
- `install_batch_agent`: the linker's and importance agent's shape: decode every record, apply the batch
  with a blocking core function in a worker thread (store calls stay off the event loop), skip a batch
  that still fails after `MAX_ATTEMPTS` (unless the store is down).
- `AppHolder` / `AgentRunner`: a Faust app with the agents and timers an `install` function declares, in
  the caller's event loop. Its app id is its consumer group, `<consumer_group_prefix>-<name>`, so that it
  reads every partition at its own pace and scales on its own. Beside the app, an `episodic.bus.kafka.LagProbe`
  per input topic measures the group's records not committed yet into
  `episodic_consumer_lag_records{group}` (summed over its topics), every `EPISODIC_LAG_INTERVAL_S`, so it
  keeps rising while the agent is stuck on a batch. The gate's runner shares `AppHolder`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import faust
from faust.types import StreamT

from episodic.bus.kafka import ensure_topics
from episodic.bus.offsets import LagProbe
from episodic.kernel.errors import EpisodicError, StoreUnavailable
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from schemas.events import InvalidRecord
from streams.app import create_app
from streams.transport import BatchConsumer, RecordBatch

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_ATTEMPTS = 5
MAX_BACKOFF_S = 30.0

Decoded = tuple[Any, T]  # (the raw aiokafka record, its decoded value)
# DeadLetters([(raw record, why), ...]): send records that do not decode to the dead-letter topic (acked)
DeadLetters = Callable[[list[tuple[Any, Exception]]], Awaitable[None]]


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    metrics: Metrics,
    agent: str,
    stage: str,
    errors: tuple[type[BaseException], ...] = (EpisodicError,),
    attempts: int | None = None,
    backoff_s: float = 0.2,
) -> T:
    """`await call()` until it succeeds; failures of the given types are logged, counted and retried. With
    `attempts`, the last failure is raised after that many tries, unless it is `StoreUnavailable`."""
    delay, tried = backoff_s, 0
    while True:
        try:
            return await call()
        except errors as e:
            tried += 1
            metrics.agent_errors.labels(agent=agent, stage=stage).inc()
            if attempts is not None and tried >= attempts and not isinstance(e, StoreUnavailable):
                raise
            log.warning("%s agent: %s failed (%s); retrying in %.1fs", agent, stage, e, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)


def decode_batch(
    records: Sequence[Any],
    parse: Callable[[bytes | None], T],
    *,
    metrics: Metrics,
    agent: str,
    topic: str,
    errors: tuple[type[Exception], ...] = (InvalidRecord,),
    rejected: list[tuple[Any, Exception]] | None = None,
) -> list[Decoded[T]]:
    """(raw record, decoded) pairs; the records that raise one of `errors` are counted, logged and left out
    (and appended to `rejected` with their error, when given: for a dead-letter topic)."""
    out: list[Decoded[T]] = []
    invalid, first = 0, ""
    for rec in records:
        try:
            out.append((rec, parse(rec.value)))
        except errors as e:
            invalid += 1
            first = first or f"{rec.partition}@{rec.offset}: {str(e).splitlines()[0][:300]}"
            if rejected is not None:
                rejected.append((rec, e))
    if invalid:
        metrics.agent_malformed.labels(agent=agent, topic=topic).inc(invalid)
        log.warning("%s agent: skipped %d malformed record(s) on %s (first at %s)", agent, invalid, topic, first)
    return out


def batch_agent(
    app: faust.App,
    topic: str,
    *,
    agent: str,
    handle: Callable[[RecordBatch], Awaitable[Sequence[Any]]],
    metrics: Metrics,
    name: str | None = None,
) -> Any:
    """Declare a Faust agent (`name`, default `episodic.<agent>`) on `topic` that hands each fetched batch
    to `handle`, then acks it. `handle` returns the records it applied (their lag is observed; malformed
    ones it skipped are not). Needs an app from `streams.app.create_app` (the batch transport)."""
    consumer = app.consumer
    if not isinstance(consumer, BatchConsumer):
        raise TypeError("a batch agent needs the batch transport: create the app with streams.app.create_app")
    consumer.batch_topics.add(topic)
    source = app.topic(topic, key_serializer="raw", value_serializer="raw")
    lag = metrics.agent_lag.labels(agent=agent)

    async def run(stream: StreamT) -> None:
        manual: Any = stream.noack()  # type: ignore[attr-defined] # acked below, after the handler
        async for batch in manual:
            event = manual.current_event
            if not isinstance(batch, RecordBatch):  # pragma: no cover - the transport delivers batches only
                log.error("%s: unexpected value %r on %s; not acked", agent, type(batch), topic)
                continue
            applied = await handle(batch)
            now = time.time()
            for rec in applied:
                if rec.timestamp is not None:
                    lag.observe(max(0.0, now - rec.timestamp / 1000.0))
            batch.mark_delivered()
            if event is not None:
                await manual.ack(event)

    return app.agent(source, name=name or f"episodic.{agent}")(run)


def install_batch_agent(
    app: faust.App,
    *,
    topic: str,
    name: str,
    decode: Callable[[bytes | None], T],
    handle: Callable[[list[Decoded[T]]], Any],
    metrics: Metrics,
    backoff_s: float = 0.2,
    dead_letter: DeadLetters | None = None,
) -> Any:
    """Declare an agent that decodes each batch and applies it with `handle` in a worker thread. With
    `dead_letter`, the records that do not decode are handed to it (sent to the dead-letter topic) before the
    batch is applied and acked; a send that still fails after `MAX_ATTEMPTS` is logged (they stay counted)."""

    async def apply(batch: RecordBatch) -> list[Any]:
        rejected: list[tuple[Any, Exception]] = []
        items = decode_batch(batch.records, decode, metrics=metrics, agent=name, topic=topic, rejected=rejected)
        if rejected and dead_letter is not None:
            try:
                await retrying(
                    lambda: dead_letter(rejected),
                    metrics=metrics,
                    agent=name,
                    stage="dead_letter",
                    errors=(Exception,),
                    attempts=MAX_ATTEMPTS,
                    backoff_s=backoff_s,
                )
            except Exception as e:
                log.error("%s: %d malformed record(s) not dead-lettered after %d attempts: %r", name, len(rejected),
                          MAX_ATTEMPTS, e)  # fmt: skip
        if not items:
            return []
        try:
            await retrying(
                lambda: asyncio.to_thread(handle, items),
                metrics=metrics,
                agent=name,
                stage="apply",
                errors=(Exception,),
                attempts=MAX_ATTEMPTS,
                backoff_s=backoff_s,
            )
        except Exception as e:
            log.error("%s: skipping a batch of %d after %d attempts: %r", name, len(items), MAX_ATTEMPTS, e)
        return [rec for rec, _ in items]

    return batch_agent(app, topic, agent=name, handle=apply, metrics=metrics)


class AppHolder:
    """A Faust app started and stopped inside the caller's event loop: its crash state, the lag probes
    beside it and its stop (shared by the gate's runner and the maintenance agents')."""

    label = "app"
    app: faust.App | None = None
    _probes: list[asyncio.Task[None]]

    @property
    def crashed(self) -> bool:
        return self.app is not None and bool(self.app.crashed)

    @property
    def crash_reason(self) -> BaseException | None:
        return self.app.crash_reason if self.app is not None else None

    def _probe_lag(self, settings: Settings, metrics: Metrics, group: str, topics: Sequence[str]) -> None:
        """Start one lag probe per topic; the group's gauge is their sum."""
        lags: dict[str, int] = {}

        def reporter(topic: str) -> Callable[[int], None]:
            def report(lag: int) -> None:
                lags[topic] = lag
                metrics.consumer_lag.labels(group=group).set(sum(lags.values()))

            return report

        self._probes = [
            asyncio.create_task(
                LagProbe(
                    bootstrap=settings.bootstrap,
                    group_id=group,
                    topic=topic,
                    report=reporter(topic),
                    interval_s=settings.lag_interval_s,
                    on_error=lambda e: metrics.consumer_errors.labels(stage="lag").inc(),
                    options=kafka_options(settings),
                    exact=not settings.broker_is_tansu,
                ).run(),
                name=f"lag-{group}-{topic}",
            )
            for topic in topics
        ]

    async def _stop_probes(self) -> None:
        probes, self._probes = getattr(self, "_probes", []), []
        for task in probes:
            task.cancel()
        await asyncio.gather(*probes, return_exceptions=True)

    input_topics: tuple[str, ...] = ()

    def assignment(self) -> set[Any]:
        """The partitions of the input topics this process holds now."""
        if self.app is None or not self.app.started:
            return set()
        try:
            return {tp for tp in self.app.consumer.assignment() if tp.topic in self.input_topics}
        except Exception:
            return set()

    async def wait_assigned(self, timeout: float) -> bool:
        """Wait until the group gave this process at least one input partition."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.crashed:
            if self.assignment():
                return True
            await asyncio.sleep(0.05)
        return bool(self.assignment())

    async def _drain_app(self, app: faust.App) -> bool:
        """Before the app stops: finish what is in flight; True when done. By default nothing: a batch
        being applied is not acked, so it is read again."""
        return True

    async def stop(self) -> bool:
        """Stop consuming (after `_drain_app`), then leave the group. True when the drain finished."""
        await self._stop_probes()
        app, self.app = self.app, None
        if app is None:
            return True
        drained = False
        try:
            if app.started and not app.crashed:
                drained = await self._drain_app(app)
        finally:
            try:
                await app.stop()
            except Exception as e:  # stopping must not fail the caller's shutdown
                log.warning("%s: error while stopping: %r", self.label, e)
        log.info("%s stopped%s", self.label, "" if drained else " (not drained)")
        return drained


class AgentRunner(AppHolder):
    """One Faust app (group `<prefix>-<name>`) with the agents and timers `install(app)` declares on
    `topics` (its input topics: their lag is probed); `create_topics` (default: `topics`) are created
    first when missing. `gather`: an agent that may lag, whose fetches the broker holds for
    `Settings.agent_gather_ms` (`streams.app.create_app`)."""

    def __init__(
        self,
        settings: Settings,
        *,
        name: str,
        topics: Sequence[str],
        install: Callable[[faust.App], Any],
        metrics: Metrics,
        app_id: str | None = None,
        create_topics: Sequence[str] | None = None,
        gather: bool = False,
    ) -> None:
        self.settings = settings
        self.gather = gather
        self.name = name
        self.label = f"{name} agent"
        self.topics = self.input_topics = tuple(topics)
        self.install = install
        self.metrics = metrics
        self.app_id = app_id or f"{settings.consumer_group_prefix}-{name}"
        self.create_topics = tuple(create_topics) if create_topics is not None else self.topics
        self.app = None
        self._probes = []

    async def start(self) -> None:
        if self.app is not None:
            raise RuntimeError(f"{self.label} already started")
        s = self.settings
        if self.create_topics:
            await ensure_topics(
                s.bootstrap,
                partitions=s.topic_partitions,
                replication=s.topic_replication,
                topics=self.create_topics,
                options=kafka_options(s),
            )
        app = create_app(s, app_id=self.app_id, gather=self.gather)
        Path(app.conf.datadir).mkdir(parents=True, exist_ok=True)
        self.install(app)
        self.app = app
        await app.start()
        self._probe_lag(s, self.metrics, self.app_id, self.topics)
        log.info("%s: %s (group %s, bootstrap %s)", self.label, ", ".join(self.topics), self.app_id, s.bootstrap)


def batch_runner(
    settings: Settings,
    *,
    name: str,
    topic: str,
    decode: Callable[[bytes | None], T],
    handle: Callable[[list[Decoded[T]]], Any],
    metrics: Metrics,
    app_id: str | None = None,
) -> AgentRunner:
    """A runner of one `install_batch_agent` agent on `topic` (the linker's and importance agent's)."""
    return AgentRunner(
        settings,
        name=name,
        topics=(topic,),
        install=lambda app: install_batch_agent(
            app, topic=topic, name=name, decode=decode, handle=handle, metrics=metrics
        ),
        metrics=metrics,
        app_id=app_id,
    )
