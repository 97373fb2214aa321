"""A Faust Kafka transport that hands whole fetched partition batches to an agent, as one event each.

Why: profiling the gate (py-spy, `bench/bench_gate.py`) showed that with Faust's per-record path the
framework, not the gate, owns the time. For every record Faust builds a `ConsumerMessage`, runs the
conductor's `on_message` (flow-control lock, decode, `Event`), pushes it through a queue into the
stream (sensors, tracking, the Monitor, `Event.ack`, refcounts) and back into the consumer's ack
bookkeeping: about 100 µs/record on the bench machine, while `episodic.indexing.gating.route` needs 10-20 µs.
So the gate reached 2-4 % of a raw aiokafka consumer.

What: for the topics registered as *batch topics* (`BatchConsumer.batch_topics`; the gate's
`journal.entries`), the consumer's drain loop does not make a message per record. Each fetched
`(topic-partition, [records])` chunk becomes one `RecordBatch` (the raw aiokafka records), delivered to
every channel subscribed to the topic as one Faust `Event`. The event's message is a `BatchMessage`: a
real `ConsumerMessage` for the batch's last record that also knows the batch's first offset. So the
agent is still an ordinary Faust agent on the topic (group membership, rebalances, flow control,
generation checks, stream tracking and acks are Faust's), but all of that runs once per batch.

At-least-once: acking the batch's event (`stream.ack(event)`) marks every offset of the batch as
processed in Faust's own offset tracking (`_acked`, committed by Faust's commit loop), and only if the
agent called `RecordBatch.mark_delivered()` first, i.e. after the broker acknowledged all of the batch's
output. Faust acks events in a few places where nothing was processed (an event skipped during a
rebalance, an agent that raised or was cancelled): such a batch's offsets stay uncommitted and it is
read again. A batch fetched before a rebalance (older consumer generation) is never acked either.

Records of other topics keep Faust's per-record path, minus its per-record `wait_first` (two tasks and
an `asyncio.wait` per record), which only matters while the flow is suspended during a rebalance.

This subclass overrides Faust's private hooks and keeps its private offset bookkeeping: every private name
it relies on is listed in `streams/internals.py`, and a unit test checks them on the installed versions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar, cast

from faust.events import Event
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, Message
from faust.types.tuples import ConsumerMessage, ack_lock

from episodic.bus.kafka import stop_quietly
from episodic.kernel.settings import KAFKA_FETCH_WAIT_MS
from streams.internals import (
    READ_COMMITTED,
    channels_of,
    fetcher_stopped,
    own_transaction_producers,
    set_fetch_max_wait,
    set_isolation_level,
)


class BatchMessage(ConsumerMessage):
    """The message of a batch event: the batch's last record, plus the first offset the batch covers."""

    __slots__ = ("delivered", "first_offset")

    def __init__(self, *args: Any, first_offset: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.first_offset = first_offset
        self.delivered = False


class RecordBatch:
    """The value of a batch event: one partition's fetched records, in offset order.

    `records` are aiokafka `ConsumerRecord`s (`.key`, `.value`, `.offset`, `.partition`, `.topic`,
    `.timestamp`). Call `mark_delivered()` once the batch's output is safely delivered, then ack the event.
    """

    __slots__ = ("message", "records", "tp")

    def __init__(self, tp: TP, records: list[Any], message: BatchMessage) -> None:
        self.tp = tp
        self.records = records
        self.message = message

    @property
    def first_offset(self) -> int:
        return self.message.first_offset

    @property
    def last_offset(self) -> int:
        return self.message.offset

    def mark_delivered(self) -> None:
        self.message.delivered = True

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return f"<RecordBatch {self.tp.topic}[{self.tp.partition}] {self.first_offset}..{self.last_offset}>"


# Faust hard-codes fetch_max_wait_ms=1500: on Tansu, which answers a waiting fetch late (it looks again
# during the wait), every record waited a share of it (~750 ms median gate latency, measured).
# The app's `fetch_max_wait_ms` (Settings.fetch_wait_ms: 200 ms on Kafka, which answers early, 50 on the Tansu
# fallback) replaces it; an app without one gets Kafka's.
FETCH_MAX_WAIT_MS = KAFKA_FETCH_WAIT_MS


class ShortFetchConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        wait = getattr(transport.app, "fetch_max_wait_ms", None) or FETCH_MAX_WAIT_MS
        minimum = getattr(transport.app, "fetch_min_bytes", 1)
        set_fetch_max_wait(consumer, wait, minimum)  # read by AIOKafkaConsumer.start() for its Fetcher
        if getattr(transport.app, "isolation_level", None) == READ_COMMITTED:  # Faust's own under exactly-once
            set_isolation_level(consumer, READ_COMMITTED)
        return consumer

    async def on_thread_stop(self) -> None:
        """Stopping with the broker gone: aiokafka's fetcher cancels its fetch in retry and then awaits it,
        which raises CancelledError out of `consumer.stop()` and printed the thread's traceback on every
        stop after a broker loss. That error now ends the thread quietly; the consumer is closed (its
        connections to the dead broker go with it, or with the process)."""
        await stop_quietly(super().on_thread_stop(), "consumer thread")


class BatchConsumer(faust_aiokafka.Consumer):
    """aiokafka Faust consumer: batch delivery for `batch_topics`, direct per-record delivery otherwise."""

    batch_topics: set[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch_topics = set()

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return ShortFetchConsumerThread(self, loop=self.loop, beacon=self.beacon)

    # -- offsets -------------------------------------------------------------------------------------

    def ack(self, message: Message) -> bool:
        if type(message) is BatchMessage:
            return self._ack_batch(message)
        return bool(super().ack(message))

    def _ack_batch(self, message: BatchMessage) -> bool:
        """Mark all offsets of a delivered batch as processed (Faust commits them on its next commit)."""
        with ack_lock:
            if message.acked:
                return False
            message.acked = True
            self._unacked_messages.discard(message)
            if not message.delivered or message.generation_id != self.app.consumer_generation_id:
                return False  # not processed, or fetched before a rebalance: it is read again
            tp = message.tp
            first, last = message.first_offset, message.offset
            committed = self._committed_offset[tp]
            if committed is not None:
                first = max(first, committed)
            if first > last:
                return False
            acked_index = self._acked_index[tp]
            new = [o for o in range(first, last + 1) if o not in acked_index]
            acked_index.update(new)
            self._acked[tp].extend(new)
            self._n_acked += len(new)
            return bool(new)

    # -- delivery ------------------------------------------------------------------------------------

    def _batch_message(self, tp: TP, record: Any, first_offset: int, generation_id: int) -> BatchMessage:
        ts = record.timestamp
        return BatchMessage(
            record.topic,
            record.partition,
            record.offset,
            ts / 1000.0 if ts is not None else cast(float, None),
            record.timestamp_type,
            record.headers,
            record.key,
            None,  # the records are in the batch; the carrier holds no value of its own
            record.checksum,
            0,
            0,
            tp,
            generation_id=generation_id,
            first_offset=first_offset,
        )

    async def _deliver_batch(self, tp: TP, records: list[Any], generation_id: int) -> None:
        r_offset = self._read_offset[tp]
        if r_offset is not None:
            records = [r for r in records if r.offset >= r_offset]
        if not records:
            return
        first = records[0].offset if r_offset is None else min(records[0].offset, r_offset + 1)
        message = self._batch_message(tp, records[-1], first, generation_id)
        batch = RecordBatch(tp, records, message)
        channels = channels_of(self.app, tp.topic)
        if channels:
            message.incref(len(channels))
            for chan in channels:
                event = Event(self.app, None, batch, None, message)
                await chan.queue.put(event)  # blocks while the stream is behind: back-pressure
        self._read_offset[tp] = message.offset

    async def _deliver_records(self, tp: TP, records: list[Any]) -> None:
        callback = self.callback
        to_message = self._to_message
        suspend_flow = self.suspend_flow
        acks_enabled = self.app.topics.acks_enabled_for(tp.topic)
        for i, record in enumerate(records):
            offset = record.offset
            r_offset = self._read_offset[tp]
            if r_offset is None or offset >= r_offset:
                if r_offset and offset - r_offset > 1 and acks_enabled:
                    await self._add_gap(tp, r_offset + 1, offset)
                message = to_message(tp, record)
                if suspend_flow.is_set():
                    await self.wait_first(callback(message), suspend_flow.wait())
                else:
                    await callback(message)
                self._read_offset[tp] = offset
            if i % 100 == 99:
                await asyncio.sleep(0)

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - exercised by every gate test
        consumer_should_stop = self._stopped.is_set

        def fetcher_should_stop() -> bool:
            return fetcher_stopped(fetcher)

        set_flag = self.diag.set_flag
        unset_flag = self.diag.unset_flag
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(CONSUMER_FETCHING)
                records, active = await self._wait_next_records(1.0)
                if records is None or self.should_stop:
                    unset_flag(CONSUMER_FETCHING)
                    continue
                if not self.flow_active:
                    try:
                        await self.perform_seek()
                    except Exception as e:
                        self.log.warning(f"exception performing seek when flow not active {e}")
                    unset_flag(CONSUMER_FETCHING)
                    continue
                generation_id = self.app.consumer_generation_id
                batch_topics = self.batch_topics
                for tp, recs in records.items():
                    if not self.flow_active or self.app.consumer_generation_id != generation_id:
                        break
                    if not (active is None or tp in active or tp in self._buffered_partitions):
                        continue
                    self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                    if tp.topic in batch_topics:
                        await self._deliver_batch(tp, recs, generation_id)
                    else:
                        await self._deliver_records(tp, recs)
                unset_flag(CONSUMER_FETCHING)
                await asyncio.sleep(0)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        finally:
            unset_flag(CONSUMER_FETCHING)


class IdempotentProducer(faust_aiokafka.Producer):
    """Faust's producer, idempotent (KIP-98) outside transactions too: a retried produce batch is written once,
    in order, so a broker's lost acknowledgement cannot put an entry twice on journal.embeddable. Faust asks
    for it only under exactly-once processing. Off where the app says the broker lacks it (the Tansu
    fallback: `EpisodicApp.idempotent`, from Settings.broker_is_tansu).

    Each producer keeps its own transactional producers: Faust keeps them in class-level dicts, shared by every
    app's producer in the process, so stopping any app (a health agent restarted by its watchdog, say) would
    stop and forget the gate's under exactly-once (streams/gate.py `Transactions`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        own_transaction_producers(self)

    def _settings_extra(self) -> Mapping[str, Any]:
        extra = dict(super()._settings_extra())
        if getattr(self.transport.app, "idempotent", False):
            extra.update(acks="all", enable_idempotence=True)
        return extra


class BatchTransport(faust_aiokafka.Transport):
    Consumer: ClassVar[type] = cast(type, BatchConsumer)
    Producer: ClassVar[type] = cast(type, IdempotentProducer)
