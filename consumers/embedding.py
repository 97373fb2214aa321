"""The embedding consumer: journal.embeddable -> embed -> Qdrant -> memory.indexed (SPEC §5).

An aiokafka consumer group. Each batch is bounded by size (`EPISODIC_BATCH_SIZE`) and by time
(`EPISODIC_BATCH_MAX_WAIT_MS` after its first record), goes through one model call and one store upsert,
then its memory.indexed events are produced and only then are its offsets committed: at-least-once
delivery with idempotent writes, so a crash re-delivers the batch and the store still holds exactly one
point per entry.

Nothing wedges a partition. Errors are sorted by what retrying can do:
- transient (the store unavailable, the broker unreachable): retried with backoff, for ever; the batch is
  never skipped (during a drain, for `STOP_RETRY_S`, then left uncommitted and re-delivered later);
- deterministic (the store or the indexer rejects something in the batch): the batch is split in halves
  until the records that fail alone are found; those go to journal.dlq with reason `store_rejected` and
  their original bytes, the rest is indexed and the whole batch committed. A record that does not decode
  goes there at once (`bad_embeddable`). Both count in `episodic_dead_lettered_total`.

Visibility first (SPEC §5: recall sees an entry within about a second). A batch is embedded inline only
while its oldest record can still become searchable within `EPISODIC_VISIBLE_BUDGET_MS` of production,
judged from the measured embedding speed. Otherwise the batch is written with its BM25 vectors only,
committed, and `memory.indexed` says "sparse-only"; the densify loop (`consumers.densify`) then adds the
dense vectors and emits a second `memory.indexed` ("vector") for each.

Forgets (SPEC §11), control records keyed by workspace on this topic, are applied before their batch is
indexed, and the records they cover are left out, also in the halves of a split batch (`consumers.batch`,
episodic.lifecycle.forget). A forget this consumer cannot decode or apply goes to journal.dlq (`bad_control`); one
the store refuses, as `forget_failed` (its status says failed).

Lag: a `LagProbe` measures this group's lag from fetch high watermarks on its own timer (SPEC §10), so it
keeps rising while the consumer is stuck.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.structs import OffsetAndMetadata

from consumers.batch import BatchApplier, Forget, Item, observe
from consumers.densify import Densifier
from consumers.poison import BAD_CONTROL, BAD_EMBEDDABLE, Abandoned, dead_letter
from episodic.bus.kafka import dumps, stop_quietly
from episodic.bus.offsets import group_lag_probe
from episodic.embedding.cores import CoreBudget
from episodic.indexing.indexer import Indexer
from episodic.kernel.errors import StoreUnavailable
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from episodic.lifecycle.forget import Forgetter
from schemas import topics
from schemas.events import FORGET, DlqRecord, EmbeddableRecord, ForgetRecord, InvalidRecord, control_of

log = logging.getLogger(__name__)

RETRY_MAX_S = 30.0  # backoff ceiling for transient errors
STOP_RETRY_S = 10.0  # while draining, give a transient error this long before leaving the batch uncommitted
PRIOR_SECONDS_PER_CHAR = 2e-4  # about 30 one-line summaries a second on one core, until measured
R = TypeVar("R")

Send = tuple[str, bytes | None, bytes]


class EmbedSpeed:
    """Moving average of the model's seconds per character, and the inline-or-defer decision."""

    def __init__(self, budget_s: float, prior: float = PRIOR_SECONDS_PER_CHAR, alpha: float = 0.2) -> None:
        self.budget_s = budget_s
        self.per_char = prior
        self.alpha = alpha

    def observe(self, chars: int, seconds: float) -> None:
        if chars >= 200 and seconds > 0:  # tiny batches are dominated by fixed costs
            self.per_char += self.alpha * (seconds / chars - self.per_char)

    def defer(self, *, age_s: float, chars: int, model_busy: bool) -> bool:
        """True when embedding inline would make the oldest record visible later than the budget."""
        if self.budget_s <= 0:
            return False
        return model_busy or age_s + chars * self.per_char > self.budget_s


@dataclass
class ConsumerStats:
    batches: int = 0
    records: int = 0
    indexed: int = 0
    errors: int = 0
    dead_lettered: int = 0
    last_batch_at: float = 0.0
    lag: dict[str, int] = field(default_factory=dict)


class EmbeddingConsumer:
    def __init__(
        self,
        *,
        settings: Settings,
        indexer: Indexer,
        producer: AIOKafkaProducer,
        metrics: Metrics,
        source_topic: str = topics.JOURNAL_EMBEDDABLE,
        indexed_topic: str = topics.MEMORY_INDEXED,
        dlq_topic: str = topics.JOURNAL_DLQ,
        group_id: str | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
        forgetter: Forgetter | None = None,
        forgotten_topic: str = topics.MEMORY_FORGOTTEN,
        cores: CoreBudget | None = None,
    ) -> None:
        self.settings = settings
        self.indexer = indexer
        self.producer = producer
        self.metrics = metrics
        self.source_topic = source_topic
        self.indexed_topic = indexed_topic
        self.dlq_topic = dlq_topic
        self.group_id = group_id or f"{settings.consumer_group_prefix}-embedder"
        self.on_fatal = on_fatal
        self.forgetter = forgetter  # forgets (control records) are dead-lettered without one
        self.forgotten_topic = forgotten_topic
        self.stats = ConsumerStats()
        self._consumer: AIOKafkaConsumer | None = None
        self._stopping = asyncio.Event()
        self._ready = asyncio.Event()
        self.speed = EmbedSpeed(settings.visible_budget_ms / 1000)
        self.densifier = Densifier(
            indexer=indexer,
            metrics=metrics,
            speed=self.speed,
            publish=self._publish,
            quarantine_after=settings.densify_max_attempts,
            stopping=self._stopping,
            cores=cores,
        )
        self.applier = BatchApplier(indexer=indexer, forgetter=forgetter, metrics=metrics, retrying=self._retrying)
        self.lag = group_lag_probe(settings, metrics, group=self.group_id, topic=source_topic, also=self._seen_lag)

    # -- lifecycle -------------------------------------------------------------------------------
    async def wait_ready(self, timeout: float = 60.0) -> None:
        await asyncio.wait_for(self._ready.wait(), timeout)

    def request_stop(self) -> None:
        """Stop taking new records; the batch in flight is finished and committed."""
        self._stopping.set()

    async def run(self) -> None:
        s = self.settings
        consumer = AIOKafkaConsumer(
            self.source_topic,
            bootstrap_servers=s.bootstrap,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=s.batch_size,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=max(500, s.session_timeout_ms // 10),
            fetch_max_wait_ms=s.fetch_wait_ms,
            isolation_level=s.isolation_level,  # read_committed under the gate's exactly-once
            **kafka_options(s),
        )
        self._consumer = consumer
        await consumer.start()
        lag = asyncio.create_task(self.lag.run(), name=f"lag-{self.group_id}")
        densify = (
            asyncio.create_task(self.densifier.run(), name="densify") if self.indexer.embedder is not None else None
        )
        try:
            self._ready.set()
            log.info("embedding consumer: group %s on %s (%s)", self.group_id, self.source_topic, self.indexer.mode)
            while not self._stopping.is_set():
                batch = await self._collect()
                if batch:
                    await self._process(consumer, batch)
        except Abandoned as e:
            log.warning("embedding consumer: %s; the batch in flight stays uncommitted (re-delivered)", e)
        finally:
            self._stopping.set()
            if densify is not None:  # let a batch of vectors in flight land before the store closes
                await self.densifier.finish(densify)
            lag.cancel()
            await asyncio.gather(lag, return_exceptions=True)
            try:
                await stop_quietly(consumer.stop(), "embedding consumer")
            except Exception:  # pragma: no cover - best effort on shutdown
                log.exception("consumer stop failed")
            self._consumer = None

    def _seen_lag(self, lag: int) -> None:
        self.stats.lag[self.group_id] = lag

    # -- batching ----------------------------------------------------------------------------------
    async def _collect(self) -> list[ConsumerRecord[bytes, bytes]]:
        """A batch bounded by size and by time since its first record. Broker errors are retried."""
        consumer = self._consumer
        if consumer is None:
            raise RuntimeError("the consumer is not running")
        s = self.settings
        batch: list[ConsumerRecord[bytes, bytes]] = []
        deadline: float | None = None
        delay = 0.2
        while len(batch) < s.batch_size and not self._stopping.is_set():
            if deadline is None:
                timeout_ms = 200
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                timeout_ms = max(1, int(remaining * 1000))
            try:
                got = await consumer.getmany(timeout_ms=timeout_ms, max_records=s.batch_size - len(batch))
            except KafkaError as e:  # transient: the broker away or the group rebalancing
                self.metrics.consumer_errors.labels(stage="broker").inc()
                self.stats.errors += 1
                log.warning("fetch failed (%r); retrying in %.1fs", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            delay = 0.2
            for recs in got.values():
                batch.extend(recs)
            if batch and deadline is None:
                deadline = time.monotonic() + s.batch_max_wait_ms / 1000
        return batch

    # -- one batch -----------------------------------------------------------------------------------
    async def _process(self, consumer: AIOKafkaConsumer, batch: list[ConsumerRecord[bytes, bytes]]) -> None:
        m = self.metrics
        items: list[Item] = []
        forgets: list[Forget] = []
        dead: list[DlqRecord] = []
        for msg in batch:
            control = control_of(msg.headers)
            try:
                if control is not None:
                    forgets.append((self._forget_record(control, msg), msg))
                else:
                    items.append((EmbeddableRecord.from_json(msg.value or b""), msg))
            except InvalidRecord as e:
                m.consumer_errors.labels(stage="decode").inc()
                if control is None:
                    dead.append(dead_letter(BAD_EMBEDDABLE, str(e), msg))
                else:
                    dead.append(dead_letter(BAD_CONTROL, str(e), msg))
                    if self.forgetter is not None:  # a dead-lettered forget is a failed one (issue 25)
                        await asyncio.to_thread(self.forgetter.fail_unreadable, msg.value or b"", str(e)[:300])
        m.batch_size.observe(len(batch))

        defer = False
        if items and self.indexer.embedder is not None:
            oldest = min(msg.timestamp for msg in batch) / 1000.0
            defer = self.speed.defer(
                age_s=max(0.0, time.time() - oldest),
                chars=sum(len(r.summary) for r, _ in items),
                model_busy=self.densifier.busy,
            )
        applied = await self.applier.apply(forgets, items, defer=defer)
        result = applied.result
        dead += applied.dead
        self.stats.errors += applied.rejections
        if result.deferred:
            m.dense_deferred.inc(result.deferred)
            self.densifier.wake()
        if result.embedded:
            m.embed_duration.observe(result.embed_seconds)
            self.speed.observe(result.chars, result.embed_seconds)
        if result.written:
            m.upsert_duration.observe(result.upsert_seconds)
            m.points_written.inc(result.written)
        if result.stale:
            m.stale_versions.inc(result.stale)
        if result.embed_failed:
            m.consumer_errors.labels(stage="embed").inc()
            self.densifier.wake()  # written sparse-only: the densify loop finds the failing text

        # Publish events, dead letters and what the forgets removed, wait for the broker, then commit.
        sends: list[Send] = [
            (self.indexed_topic, ev.workspace_id.encode(), dumps(ev.to_json_dict())) for ev in result.events
        ]
        sends += [(self.dlq_topic, None, d.to_json()) for d in dead]
        sends += [(self.forgotten_topic, fe.workspace_id.encode(), fe.to_json()) for fe in applied.forgotten]
        await self._publish(sends)
        for d in dead:
            m.dead_lettered.labels(reason=d.reason).inc()
        self.stats.dead_lettered += len(dead)
        observe(m, applied, items)
        await self._commit(consumer, batch)
        self.stats.batches += 1
        self.stats.records += len(batch)
        self.stats.indexed += len(result.events)
        self.stats.last_batch_at = time.time()

    def _forget_record(self, control: bytes, msg: ConsumerRecord[bytes, bytes]) -> ForgetRecord:
        if control != FORGET or self.forgetter is None:
            why = "no forgetter in this consumer" if control == FORGET else f"unknown control {control!r}"
            raise InvalidRecord(f"cannot apply this control record: {why}")
        return ForgetRecord.from_json(msg.value or b"")

    async def _retrying(self, fn: Callable[..., R], *args: Any, **kw: Any) -> R:
        """`fn(*args, **kw)` in a thread; retried with backoff while the store is unavailable: never skip a
        batch (nothing is lost). Anything else is the caller's (a deterministic rejection)."""
        delay, waited = 0.2, 0.0
        while True:
            try:
                return await asyncio.to_thread(fn, *args, **kw)
            except StoreUnavailable as e:
                self.metrics.consumer_errors.labels(stage="store").inc()
                self.stats.errors += 1
                waited = await self._backoff("store", e, delay, waited)
                delay = min(delay * 2, RETRY_MAX_S)

    async def _backoff(self, what: str, error: BaseException, delay: float, waited: float) -> float:
        if self._stopping.is_set() and waited >= STOP_RETRY_S:
            raise Abandoned(f"{what} still failing after {waited:.0f}s while draining: {error}")
        log.warning("%s failed (%s); retrying in %.1fs", what, error, delay)
        await asyncio.sleep(delay)
        return waited + delay

    async def _publish(self, sends: Sequence[Send]) -> None:
        """Produce records and wait for the broker; what fails is sent again (transient), for ever."""
        pending = list(sends)
        delay, waited = 0.2, 0.0
        while pending:
            failed: list[Send] = []
            queued: list[tuple[Send, asyncio.Future[Any]]] = []
            error: BaseException | None = None
            for rec in pending:
                topic, key, value = rec
                try:
                    queued.append((rec, await self.producer.send(topic, key=key, value=value)))
                except KafkaError as e:
                    failed.append(rec)
                    error = e
            results = await asyncio.gather(*(f for _, f in queued), return_exceptions=True)
            for (rec, _), res in zip(queued, results, strict=True):
                if isinstance(res, BaseException):
                    failed.append(rec)
                    error = res
            if not failed:
                return
            self.metrics.consumer_errors.labels(stage="publish").inc(len(failed))
            self.stats.errors += 1
            waited = await self._backoff(f"publishing {len(failed)} records", error or KafkaError(), delay, waited)
            delay = min(delay * 2, RETRY_MAX_S)
            pending = failed

    async def _commit(self, consumer: AIOKafkaConsumer, batch: list[ConsumerRecord[bytes, bytes]]) -> None:
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for msg in batch:
            tp = TopicPartition(msg.topic, msg.partition)
            if tp not in offsets or offsets[tp].offset < msg.offset + 1:
                offsets[tp] = OffsetAndMetadata(msg.offset + 1, "")
        delay, waited = 0.2, 0.0
        while True:
            try:
                await consumer.commit(offsets)
                return
            except CommitFailedError as e:
                # A rebalance took the partitions: the new owner re-delivers; writes are idempotent.
                self.metrics.consumer_errors.labels(stage="commit").inc()
                log.warning("commit failed after a rebalance (records will be re-delivered): %s", e)
                return
            except KafkaError as e:  # the coordinator away: the batch is done, its commit must follow
                self.metrics.consumer_errors.labels(stage="commit").inc()
                with contextlib.suppress(Abandoned):
                    waited = await self._backoff("commit", e, delay, waited)
                    delay = min(delay * 2, RETRY_MAX_S)
                    continue
                return
