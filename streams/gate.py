"""The gate agent: journal.entries -> validate + policy -> journal.embeddable | journal.dlq (SPEC §3-§5).

A thin pipe around `episodic.indexing.gating.route`. Throughput comes from three choices (measured with
`python -m bench.bench_gate`, see the report in the commit history):

- the agent receives whole fetched partition batches (`streams.transport.RecordBatch`, one Faust event
  per batch), so Faust's per-record machinery (messages, events, sensors, acks) runs once per batch: the
  gate went from ~6k to ~13k records/s on the bench machine, and `route` is now most of the time;
- each batch's output is written as one aiokafka record batch per output partition (`batch_publisher`:
  the producer's own partitioner, then `create_batch`/`send_batch`), not record by record, and the next
  input batch is routed while the previous one's output is in flight (`GateOptions.in_flight_batches`);
- per-key order holds through retries: a batch's output is published only once the previous batch's
  output was acknowledged (`deliver(after=...)`), so a batch that fails and is resent never lands behind
  the next one on a partition of journal.embeddable (where the first entry of an id owns its memory);
  the next batch is still routed meanwhile, and routing is most of the time;
- the stream is `noack()`: the batch is marked delivered and its event acked only after the broker
  acknowledged all of the batch's output (batches are acked in order), so its offsets are committed only
  then (at-least-once: a crash or a stop mid-batch leaves the batch uncommitted, and it is read again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import faust
from aiokafka.partitioner import DefaultPartitioner
from faust.types import StreamT

from episodic.domain.policy import DECISIONS
from episodic.embedding.cores import CoreBudget
from episodic.indexing.gating import METRIC_TYPE_LABELS, DeadLetter, Forward, replayed_stamp, route, type_label
from episodic.kernel.metrics import Metrics
from schemas import topics as T
from schemas.events import DlqRecord, InvalidRecord, ReplayHistory
from streams.internals import producer_of
from streams.transport import BatchConsumer, RecordBatch

log = logging.getLogger(__name__)

DEAD_LETTER_DECISION = "dead_letter"
INVALID_TYPE_LABEL = "invalid"  # entry_type label of records that are not entries at all


@dataclass(frozen=True, slots=True)
class GateTopics:
    """The gate's three topics (defaults from schemas/topics.py; tests pass uuid names)."""

    entries: str = T.JOURNAL_ENTRIES
    embeddable: str = T.JOURNAL_EMBEDDABLE
    dlq: str = T.JOURNAL_DLQ

    def all(self) -> tuple[str, str, str]:
        return (self.entries, self.embeddable, self.dlq)


DEFAULT_BATCH_SIZE = 2000  # records per fetched batch at most (the consumer's max_poll_records)


@dataclass(frozen=True, slots=True)
class GateOptions:
    # A batch is what one fetch returns for one partition, at most `batch_size` records; how long a fetch
    # waits for data is streams.transport.FETCH_MAX_WAIT_MS.
    batch_size: int = DEFAULT_BATCH_SIZE
    max_retry_backoff_s: float = 5.0
    in_flight_batches: int = 2  # batches whose output may be in flight while the next one is routed


def init_gate_metrics(metrics: Metrics) -> None:
    """Create the gate's label values up front (bounded: known types x decisions)."""
    for label in METRIC_TYPE_LABELS:
        for decision in DECISIONS:
            metrics.entries_consumed.labels(entry_type=label, decision=decision)
    metrics.entries_consumed.labels(entry_type=INVALID_TYPE_LABEL, decision=DEAD_LETTER_DECISION)


Headers = tuple[tuple[str, bytes], ...]
Send = tuple[str, bytes | None, bytes, Headers]  # topic, key, value, headers (a replayed record's history)
SendFn = Callable[[str, bytes | None, bytes, Headers], Awaitable[Awaitable[Any]]]
# publish(records) -> one future per record (None where it could not even be queued)
PublishFn = Callable[[Sequence[Send]], Awaitable[list[Awaitable[Any] | None]]]


def record_publisher(send: SendFn) -> PublishFn:
    """A publisher that queues records one by one with `send` (any producer; the tests' fallback)."""

    async def publish(records: Sequence[Send]) -> list[Awaitable[Any] | None]:
        futures: list[Awaitable[Any] | None] = []
        for topic, key, value, headers in records:
            try:
                futures.append(await send(topic, key, value, headers))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("gate: cannot queue a record for %s: %r", topic, e)
                futures.append(None)
        return futures

    return publish


_NO_HEADER_LIST: list[tuple[str, bytes]] = []  # aiokafka's batch builder takes a list (never changes it)


def _listed(headers: Headers) -> list[tuple[str, bytes]]:
    return list(headers) if headers else _NO_HEADER_LIST


def batch_publisher(producer: Callable[[], Any]) -> PublishFn:
    """A publisher that writes whole aiokafka record batches, one per output partition.

    Per-record `producer.send` (Faust's wrapper, then aiokafka's metadata wait, partitioner and
    accumulator) was ~20 % of the gate's time. Here each record costs one `BatchBuilder.append` (aiokafka's
    public `create_batch` / `send_batch`); the partition is chosen by aiokafka's default partitioner (the
    one the producer uses: murmur2 of the key, any available partition without a key), so keys land where
    a per-record send would put them.
    """
    partitioner = DefaultPartitioner()

    async def publish(records: Sequence[Send]) -> list[Awaitable[Any] | None]:
        p = producer()
        partitions: dict[str, tuple[list[int], list[int]]] = {}
        for topic in {rec[0] for rec in records}:
            every = sorted(await p.partitions_for(topic))  # waits for metadata when needed
            available = sorted(p.client.cluster.available_partitions_for_topic(topic) or every)
            partitions[topic] = (every, available)
        groups: dict[tuple[str, int], list[int]] = {}
        for i, (topic, key, _, _) in enumerate(records):
            every, available = partitions[topic]
            part = partitioner(key, every, available)
            groups.setdefault((topic, part), []).append(i)
        futures: list[Awaitable[Any] | None] = [None] * len(records)
        for (topic, part), idx in groups.items():
            builder = p.create_batch()
            members: list[int] = []
            for i in idx:
                _, key, value, headers = records[i]
                if builder.append(key=key, value=value, timestamp=None, headers=_listed(headers)) is None:
                    if members:  # full: send it and start the next one
                        fut = await p.send_batch(builder, topic, partition=part)
                        for j in members:
                            futures[j] = fut
                        builder, members = p.create_batch(), []
                    if builder.append(key=key, value=value, timestamp=None, headers=_listed(headers)) is None:
                        log.warning("gate: a record for %s does not fit a produce batch", topic)
                        continue  # stays None: counted as failed
                members.append(i)
            if members:
                fut = await p.send_batch(builder, topic, partition=part)
                for j in members:
                    futures[j] = fut
        return futures

    return publish


async def deliver(
    publish: PublishFn,
    records: Sequence[Send],
    *,
    metrics: Metrics,
    max_backoff_s: float = 5.0,
    after: Awaitable[Any] | None = None,
) -> None:
    """Send all records and wait for every delivery; resend the failures until they are delivered.

    `after` is the previous batch's delivery: nothing is published before it returned, so a batch whose
    output failed and is resent still reaches every output partition before the next batch's output
    (per-key order through retries). Returns only when the broker acknowledged every record (or raises
    CancelledError on stop, or when `after` was cancelled, leaving the batch unacked so that it is read again).
    """
    if after is not None:
        await after
    pending = list(records)
    attempt = 0
    while pending:
        try:
            futures = await publish(pending)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("gate: cannot queue %d records: %r", len(pending), e)
            futures = [None] * len(pending)
        unique = list({id(f): f for f in futures if f is not None}.values())
        results = await asyncio.gather(*unique, return_exceptions=True)
        outcome = {id(f): r for f, r in zip(unique, results, strict=True)}
        failed: list[Send] = []
        for rec, fut in zip(pending, futures, strict=True):
            if fut is None:
                failed.append(rec)
                continue
            res = outcome[id(fut)]
            if isinstance(res, asyncio.CancelledError):
                raise res
            if isinstance(res, BaseException):
                failed.append(rec)
        if not failed:
            return
        attempt += 1
        metrics.consumer_errors.labels(stage="publish").inc(len(failed))
        backoff = min(max_backoff_s, 0.05 * 2**attempt)
        log.warning("gate: %d of %d records not delivered; retrying in %.2fs", len(failed), len(pending), backoff)
        pending = failed
        await asyncio.sleep(backoff)


def process(
    records: Sequence[Any], *, topics: GateTopics, now: datetime
) -> tuple[list[Send], Counter[tuple[str, str]], Counter[str]]:
    """Route one batch of raw records (anything with `.topic .partition .offset .key .value .headers`): the
    records to send, consumed counts by (type label, decision), DLQ counts.

    A replayed record (`episodic dlq replay`: header `episodic-replay`) keeps its history: forwarded, the
    header goes with it to journal.embeddable; dead-lettered again, the new dead letter carries it. It also
    keeps the acceptance stamp it carries, if any (`replayed_stamp`): an old version stays old."""
    sends: list[Send] = []
    consumed: Counter[tuple[str, str]] = Counter()
    dead: Counter[str] = Counter()
    embeddable, dlq = topics.embeddable, topics.dlq
    for rec in records:
        headers = getattr(rec, "headers", None)
        replay = ReplayHistory.of_headers(headers) if headers else None
        stamp = now if replay is None else replayed_stamp(rec.value, now)
        routed = route(rec.value, topic=rec.topic, partition=rec.partition, offset=rec.offset, now=stamp)
        if isinstance(routed, Forward):
            sends.append((embeddable, routed.key, routed.value, (replay.header(),) if replay else ()))
            consumed[(type_label(routed.entry_type), routed.decision)] += 1
        elif isinstance(routed, DeadLetter):
            sends.append((dlq, rec.key, routed.value if replay is None else _with_history(routed.value, replay), ()))
            consumed[(INVALID_TYPE_LABEL, DEAD_LETTER_DECISION)] += 1
            dead[routed.reason] += 1
        else:
            consumed[(type_label(routed.entry_type), routed.decision)] += 1
    return sends, consumed, dead


def _with_history(value: bytes, replay: ReplayHistory) -> bytes:
    """A dead letter of the gate's with the replay history of the record it holds."""
    try:
        return DlqRecord.from_json(value).with_replay(replay).to_json()
    except InvalidRecord:  # pragma: no cover - route() writes DlqRecords only; never lose the dead letter
        return value


InFlight = tuple["asyncio.Task[None] | None", RecordBatch, Any, Counter[tuple[str, str]], Counter[str]]


class GateDrain:
    """Drains the gate on stop: no new batch is routed, the batches in flight are delivered and acked, and
    their offsets committed, within a timeout (logged when hit: what is left is read again)."""

    def __init__(self) -> None:
        self.draining = False
        self.in_flight: asyncio.Queue[InFlight] | None = None  # set while the agent runs

    async def drain(self, app: faust.App, timeout: float) -> bool:
        """True when everything in flight was delivered and committed within `timeout` seconds."""
        self.draining = True
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            consumer = app.consumer
            consumer.pause_partitions(consumer.assignment())  # stop fetching: nothing new comes in
        except Exception as e:  # not started or already stopping: nothing to pause
            log.debug("gate: cannot pause the partitions: %r", e)
        try:
            if self.in_flight is not None:
                await asyncio.wait_for(self.in_flight.join(), timeout)
            remaining = max(1.0, deadline - asyncio.get_running_loop().time())
            await asyncio.wait_for(app.consumer.commit(), remaining)
        except TimeoutError:
            log.warning(
                "gate: drain timeout (%.0fs) hit: the batches still in flight stay uncommitted and are read again",
                timeout,
            )
            return False
        except Exception as e:
            log.warning("gate: drain failed (%r): what is not committed is read again", e)
            return False
        return True


def install_gate(
    app: faust.App,
    *,
    topics: GateTopics = GateTopics(),
    metrics: Metrics,
    options: GateOptions = GateOptions(),
    drain: GateDrain | None = None,
    cores: CoreBudget | None = None,
) -> Any:
    """Declare the gate agent on `app` (an `EpisodicApp`: batch delivery); returns the agent. `drain`, when
    given, is how the runner drains it on stop; `cores`, the process's core budget: a batch routed late
    claims a core back from bulk embedding (episodic.embedding.cores)."""
    consumer = app.consumer
    if not isinstance(consumer, BatchConsumer):
        raise TypeError("the gate needs the batch transport: create the app with streams.app.create_app")
    consumer.batch_topics.add(topics.entries)
    init_gate_metrics(metrics)
    source = app.topic(topics.entries, key_serializer="raw", value_serializer="raw")

    publish = batch_publisher(lambda: producer_of(app))
    window = max(1, options.in_flight_batches)
    state = drain if drain is not None else GateDrain()

    async def gate(stream: StreamT) -> None:
        manual: Any = stream.noack()  # type: ignore[attr-defined] # acked below, only after the batch's output is delivered
        # Batches whose output is in flight, oldest first: the next batch is routed while the broker
        # acknowledges the previous ones. The acker acks each batch, in order, once its own output is
        # delivered; the queue's bound is the back-pressure (and what a drain waits for).
        in_flight: asyncio.Queue[InFlight] = asyncio.Queue(maxsize=window)
        state.in_flight = in_flight
        tasks: set[asyncio.Task[None]] = set()
        previous: asyncio.Task[None] | None = None  # the last batch's delivery: the next one publishes after it

        async def acker() -> None:
            while True:
                task, batch, event, consumed, dead = await in_flight.get()
                try:
                    if task is not None:
                        await task
                        tasks.discard(task)
                    batch.mark_delivered()
                    if event is not None:
                        await manual.ack(event)
                    for (label, decision), n in consumed.items():
                        metrics.entries_consumed.labels(entry_type=label, decision=decision).inc(n)
                    for reason, n in dead.items():
                        metrics.dead_lettered.labels(reason=reason).inc(n)
                except asyncio.CancelledError:
                    raise
                except Exception:  # pragma: no cover - never stop acking the batches behind this one
                    log.exception("gate: cannot ack %r", batch)
                finally:
                    in_flight.task_done()

        acking = asyncio.ensure_future(acker())
        try:
            async for batch in manual:
                event = manual.current_event
                if not isinstance(batch, RecordBatch):  # pragma: no cover - the transport delivers batches only
                    log.error("gate: unexpected value %r on %s; not acked", type(batch), topics.entries)
                    continue
                if state.draining:  # fetched before the pause: not routed, not acked, read again later
                    continue
                if acking.done():  # pragma: no cover - a bug: stop rather than never ack again
                    acking.result()
                if cores is not None and batch.records:
                    cores.gate_behind(time.time() - batch.records[0].timestamp / 1000.0)
                sends, consumed, dead = process(batch.records, topics=topics, now=datetime.now(UTC))
                task = None
                if sends:
                    task = asyncio.ensure_future(
                        deliver(
                            publish,
                            sends,
                            metrics=metrics,
                            max_backoff_s=options.max_retry_backoff_s,
                            after=previous if previous is not None and not previous.done() else None,
                        )
                    )
                    tasks.add(task)
                    previous = task
                await in_flight.put((task, batch, event, consumed, dead))
        finally:
            # stopped (or failed) with output in flight: those batches stay unacked and are read again
            state.in_flight = None
            acking.cancel()
            for t in tasks:
                t.cancel()

    return app.agent(source, name="episodic.gate")(gate)
