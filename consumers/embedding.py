"""The embedding consumer: journal.embeddable -> embed -> Qdrant -> memory.indexed (SPEC §5).

An aiokafka consumer group. Each batch is bounded by size (`EPISODIC_BATCH_SIZE`) and by time
(`EPISODIC_BATCH_MAX_WAIT_MS` after its first record), goes through one model call and one store upsert,
then its memory.indexed events are produced and only then are its offsets committed: at-least-once
delivery with idempotent writes, so a crash re-delivers the batch and the store still holds exactly one
point per entry.

Visibility first (SPEC §5: recall sees an entry within about a second). A batch is embedded inline only
while its oldest record can still become searchable within `EPISODIC_VISIBLE_BUDGET_MS` of production,
judged from the measured embedding speed (seconds per character, moving average). Otherwise (a backlog,
a long report, the model busy filling earlier vectors) the batch is written with its BM25 vectors only,
committed, and `memory.indexed` says "sparse-only"; the densify loop then adds the dense vectors as soon
as the model is free and emits a second `memory.indexed` ("vector") for each. The missing vectors are
found in the store (`has_dense` false), so a crash in between loses nothing. The same loop is the
backfill after sparse-only mode.

Forgets (SPEC §11), control records keyed by workspace on this topic, are applied before their batch is
indexed, and the records they cover are left out (episodic.forget).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.structs import OffsetAndMetadata

from episodic.bus import dumps
from episodic.errors import StoreError, StoreUnavailable
from episodic.forget import Forgetter, Position
from episodic.indexer import BatchResult, Indexer
from episodic.metrics import Metrics
from episodic.settings import Settings
from schemas import topics
from schemas.events import (
    CONTROL_HEADER,
    FORGET,
    DlqRecord,
    EmbeddableRecord,
    ForgetRecord,
    ForgottenEvent,
    InvalidRecord,
)

log = logging.getLogger(__name__)

STORE_RETRY_MAX_S = 30.0
DENSIFY_BATCH = 32  # small: the consumer waits for the model no longer than one of these
DENSIFY_IDLE_S = 30.0  # look for missing vectors at least this often (backfill after sparse-only mode)
DENSIFY_STOP_S = 30.0  # on stop, wait this long for the vectors being computed
PRIOR_SECONDS_PER_CHAR = 2e-4  # about 30 one-line summaries a second on one core, until measured
R = TypeVar("R")


def _control(msg: ConsumerRecord[bytes, bytes]) -> bytes | None:
    """The value of the record's control header (a forget), or None for a journal entry."""
    return next((bytes(v or b"") for k, v in msg.headers or () if k == CONTROL_HEADER), None)


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
        self._densify_wake = asyncio.Event()
        self._densifying = False

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
            fetch_max_wait_ms=50,
            isolation_level="read_uncommitted",
        )
        self._consumer = consumer
        await consumer.start()
        densify = (
            asyncio.create_task(self._densify_loop(), name="densify") if self.indexer.embedder is not None else None
        )
        try:
            self._ready.set()
            log.info("embedding consumer: group %s on %s (%s)", self.group_id, self.source_topic, self.indexer.mode)
            while not self._stopping.is_set():
                batch = await self._collect()
                if batch:
                    await self._process(consumer, batch)
        finally:
            if densify is not None:  # let a batch of vectors in flight land before the store closes
                self._stopping.set()
                self._densify_wake.set()
                try:
                    await asyncio.wait_for(asyncio.shield(densify), DENSIFY_STOP_S)
                except BaseException:
                    densify.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await densify
            try:
                await consumer.stop()
            except Exception:  # pragma: no cover - best effort on shutdown
                log.exception("consumer stop failed")
            self._consumer = None

    # -- batching ----------------------------------------------------------------------------------
    async def _collect(self) -> list[ConsumerRecord[bytes, bytes]]:
        """A batch bounded by size and by time since its first record."""
        assert self._consumer is not None
        s = self.settings
        batch: list[ConsumerRecord[bytes, bytes]] = []
        deadline: float | None = None
        while len(batch) < s.batch_size and not self._stopping.is_set():
            if deadline is None:
                timeout_ms = 200
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                timeout_ms = max(1, int(remaining * 1000))
            got = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=s.batch_size - len(batch))
            for recs in got.values():
                batch.extend(recs)
            if batch and deadline is None:
                deadline = time.monotonic() + s.batch_max_wait_ms / 1000
            if not batch and not got:
                continue
        return batch

    # -- one batch -----------------------------------------------------------------------------------
    async def _process(self, consumer: AIOKafkaConsumer, batch: list[ConsumerRecord[bytes, bytes]]) -> None:
        m = self.metrics
        records: list[EmbeddableRecord] = []
        positions: list[Position] = []
        forgets: list[tuple[ForgetRecord, Position]] = []
        produce_ts: dict[tuple[str, str], float] = {}
        dead: list[DlqRecord] = []
        for msg in batch:
            control = _control(msg)
            try:
                if control is not None:
                    forgets.append(self._forget_record(control, msg))
                    continue
                rec = EmbeddableRecord.from_json(msg.value or b"")
            except InvalidRecord as e:
                m.consumer_errors.labels(stage="decode").inc()
                dead.append(
                    DlqRecord.build(
                        reason="bad_embeddable" if control is None else "bad_control",
                        error=str(e).splitlines()[0][:500],
                        raw=msg.value,
                        topic=msg.topic,
                        partition=msg.partition,
                        offset=msg.offset,
                    )
                )
                continue
            records.append(rec)
            positions.append(Position(msg.partition, msg.offset))
            produce_ts[(rec.workspace_id, rec.id)] = msg.timestamp / 1000.0
        m.batch_size.observe(len(batch))
        records, forgotten = await self._forget(forgets, records, positions)

        defer = False
        if records and self.indexer.embedder is not None:
            oldest = min(msg.timestamp for msg in batch) / 1000.0
            defer = self.speed.defer(
                age_s=max(0.0, time.time() - oldest),
                chars=sum(len(r.summary) for r in records),
                model_busy=self._densifying,
            )
        result = await self._index_with_retry(records, defer_dense=defer)
        if result.deferred:
            m.dense_deferred.inc(result.deferred)
            self._densify_wake.set()
        if result.embedded:
            m.embed_duration.observe(result.embed_seconds)
            self.speed.observe(result.chars, result.embed_seconds)
        if result.written:
            m.upsert_duration.observe(result.upsert_seconds)
        if result.embed_failed:
            m.consumer_errors.labels(stage="embed").inc()

        # Publish events (and dead letters), wait for the broker, then commit.
        futures: list[asyncio.Future[Any]] = []
        try:
            for ev in result.events:
                futures.append(
                    await self.producer.send(
                        self.indexed_topic, key=ev.workspace_id.encode(), value=dumps(ev.to_json_dict())
                    )
                )
            for d in dead:
                futures.append(await self.producer.send(self.dlq_topic, value=d.to_json()))
            for fe in forgotten:
                futures.append(
                    await self.producer.send(self.forgotten_topic, key=fe.workspace_id.encode(), value=fe.to_json())
                )
            if futures:
                await asyncio.gather(*futures)
        except KafkaError:
            m.consumer_errors.labels(stage="publish").inc()
            raise
        now = datetime.now(UTC).timestamp()
        by_key = {(r.workspace_id, r.id): r for r in records}
        for ev in result.events:
            m.indexed.labels(mode=ev.mode).inc()
            src = by_key.get((ev.workspace_id, ev.entry_id))
            if src is not None and ev.mode != "duplicate":
                m.index_lag.observe(max(0.0, now - src.ts_datetime.timestamp()))
            pts = produce_ts.get((ev.workspace_id, ev.entry_id))
            if pts:
                m.produce_to_index.observe(max(0.0, now - pts))
        await self._commit(consumer, batch)
        self.stats.batches += 1
        self.stats.records += len(batch)
        self.stats.indexed += len(result.events)
        self.stats.last_batch_at = time.time()
        await self._update_lag(consumer)

    def _forget_record(self, control: bytes, msg: ConsumerRecord[bytes, bytes]) -> tuple[ForgetRecord, Position]:
        if control != FORGET or self.forgetter is None:
            why = "no forgetter in this consumer" if control == FORGET else f"unknown control {control!r}"
            raise InvalidRecord(f"cannot apply this control record: {why}")
        return ForgetRecord.from_json(msg.value or b""), Position(msg.partition, msg.offset)

    async def _forget(
        self, forgets: list[tuple[ForgetRecord, Position]], records: list[EmbeddableRecord], positions: list[Position]
    ) -> tuple[list[EmbeddableRecord], list[ForgottenEvent]]:
        """Forgets (SPEC §11): applied before the batch is indexed; the records they cover are left out."""
        if self.forgetter is None:
            return records, []
        handled = await self._with_retry(self.forgetter.handle, forgets, records, positions)
        self.metrics.observe_forgets(handled.outcomes, handled.left_out)
        return handled.kept, handled.events()

    async def _index_with_retry(self, records: list[EmbeddableRecord], *, defer_dense: bool = False) -> BatchResult:
        """Retry store failures with backoff: never skip a batch (nothing is lost)."""
        return await self._with_retry(functools.partial(self.indexer.index_batch, defer_dense=defer_dense), records)

    async def _with_retry(self, fn: Callable[..., R], *args: Any) -> R:
        """`fn(*args)` in a thread; store failures are retried with backoff."""
        delay = 0.2
        while True:
            try:
                return await asyncio.to_thread(fn, *args)
            except (StoreUnavailable, StoreError) as e:
                self.metrics.consumer_errors.labels(stage="store").inc()
                self.stats.errors += 1
                if self._stopping.is_set() and delay >= STORE_RETRY_MAX_S:
                    raise
                log.warning("store write failed (%s); retrying in %.1fs", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, STORE_RETRY_MAX_S)

    # -- vectors after the fact ----------------------------------------------------------------------
    async def _densify_loop(self) -> None:
        """Fill missing dense vectors (deferred, or left by sparse-only mode) whenever the model is free;
        look again at least every DENSIFY_IDLE_S. Store errors are retried on the next round."""
        while not self._stopping.is_set():
            self._densify_wake.clear()
            filled = 0
            try:
                filled = await self._densify_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.metrics.consumer_errors.labels(stage="densify").inc()
                log.warning("adding dense vectors failed (retried later): %s", e)
            if filled:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._densify_wake.wait(), DENSIFY_IDLE_S)

    async def _densify_once(self) -> int:
        self._densifying = True
        try:
            result = await asyncio.to_thread(self.indexer.densify, DENSIFY_BATCH)
        finally:
            self._densifying = False
        if result.embedded:
            self.speed.observe(result.chars, result.embed_seconds)
        events = result.events
        if not events:
            return 0
        self.metrics.densified.inc(len(events))
        futures = [
            await self.producer.send(self.indexed_topic, key=ev.workspace_id.encode(), value=dumps(ev.to_json_dict()))
            for ev in events
        ]
        await asyncio.gather(*futures)
        return len(events)

    async def _commit(self, consumer: AIOKafkaConsumer, batch: list[ConsumerRecord[bytes, bytes]]) -> None:
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for msg in batch:
            tp = TopicPartition(msg.topic, msg.partition)
            if tp not in offsets or offsets[tp].offset < msg.offset + 1:
                offsets[tp] = OffsetAndMetadata(msg.offset + 1, "")
        try:
            await consumer.commit(offsets)
        except CommitFailedError as e:
            # A rebalance took the partitions: the new owner re-delivers; writes are idempotent.
            self.metrics.consumer_errors.labels(stage="commit").inc()
            log.warning("commit failed after a rebalance (records will be re-delivered): %s", e)

    async def _update_lag(self, consumer: AIOKafkaConsumer) -> None:
        """Lag from the high watermark carried by fetch responses (Tansu misreports ListOffsets)."""
        total = 0
        for tp in consumer.assignment():
            hw = consumer.highwater(tp)
            if hw is None:
                continue
            try:
                position = await asyncio.wait_for(consumer.position(tp), 1.0)
            except (KafkaError, TimeoutError, AssertionError):
                continue
            total += max(0, hw - position)
        self.stats.lag[self.group_id] = total
        self.metrics.consumer_lag.labels(group=self.group_id).set(total)
