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

Under `EPISODIC_GATE_EXACTLY_ONCE` (`Transactions`, `GroupCommit`) a batch's output and its offsets are
committed together in a Kafka transaction instead, so that a read_committed reader of the output sees each
record once across crashes, kills and rebalances (docs/pipeline.md, "Exactly-once for the gate").

Size: over 400 lines: one batch path in its two delivery modes (`deliver` for at-least-once, `Transactions` and
`GroupCommit` for exactly-once) that share the publisher, the drain and the metrics; split, the seams a fault
test patches (`publish_batches`, `deliver`, `Transactions.commit`) would live in two modules.
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
from faust.transport.consumer import TopicPartitionGroup, TransactionManager
from faust.types import StreamT

from episodic.domain.policy import DECISIONS
from episodic.embedding.cores import CoreBudget
from episodic.indexing.gating import METRIC_TYPE_LABELS, DeadLetter, Forward, replayed_stamp, route, type_label
from episodic.kernel.metrics import Metrics
from schemas import topics as T
from schemas.events import DlqRecord, InvalidRecord, ReplayHistory
from streams.internals import (
    in_transaction,
    note_committed,
    producer_death,
    producer_of,
    renew_transaction_producer,
    transaction_failed_fatally,
    transaction_producer,
)
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
DEFAULT_TRANSACTION_BATCHES = 32  # see GroupCommit; 16, 32 and 64 measured alike (docs/benchmarks.md)


@dataclass(frozen=True, slots=True)
class GateOptions:
    # A batch is what one fetch returns for one partition, at most `batch_size` records; how long a fetch
    # waits for data is streams.transport.FETCH_MAX_WAIT_MS.
    batch_size: int = DEFAULT_BATCH_SIZE
    max_retry_backoff_s: float = 5.0
    in_flight_batches: int = 2  # batches whose output may be in flight while the next one is routed
    # under exactly-once: batches routed and waiting for their partition's transaction (GroupCommit), at most
    transaction_batches: int = DEFAULT_TRANSACTION_BATCHES


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
        return await publish_batches(producer(), records, partitioner)

    return publish


async def publish_batches(p: Any, records: Sequence[Send], partitioner: Any) -> list[Awaitable[Any] | None]:
    """Queue `records` on the aiokafka producer `p` as one record batch per output partition (`batch_publisher`);
    one future per record, None where a record does not fit a produce batch."""
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


class Transactions:
    """The gate under Faust's exactly-once guarantee (`Settings.exactly_once`): a batch's output and its
    offsets are committed in one Kafka transaction, by the transactional producer that Faust keeps for the
    batch's input partition. A read_committed reader of journal.embeddable or journal.dlq sees a batch's output
    once, when its offsets are committed with it, or never (an aborted transaction: the batch is written
    again in the next one, or read again by the partition's next owner).

    Faust keeps what it does well (faust/transport/consumer.py, `TransactionManager`): one transactional
    producer per assigned partition (transactional id `<app id>-<topic group>-<partition>`), started on
    assignment and stopped on revocation, whose start fences the producer of a worker that lost the partition
    (its open transaction is aborted); and a consumer that reads committed records only. Two parts of Faust's
    own exactly-once path do not fit the gate, so the gate commits its transactions itself:
    - Faust's send picks the transaction by the *output* record's partition (`TransactionManager.send`):
      right for a table's changelog, co-partitioned with its input, but a batch of one input partition goes
      to every partition its keys hash to (without a key, to any), so its output would be committed with
      other partitions' offsets, and a worker that holds some partitions has no producer for the others
      (ProducerSendError);
    - Faust's commit loop reads the acked offsets before it takes the transaction's lock, so a transaction
      could commit output whose offsets it does not carry (a duplicate after a crash).
    Under the producer's lock the gate writes the output (`publish_batches`), adds the next offset
    (`send_offsets_to_transaction`) and commits. The batches are then acked undelivered, so that Faust's own
    commit never carries their offsets.
    """

    def __init__(self, app: faust.App) -> None:
        self.app = app
        self.partitioner = DefaultPartitioner()
        # transactional id -> the dead producer found for it, and when it was first found dead
        self.dead_since: dict[str, tuple[Any, float]] = {}

    def transactional_id(self, tp: Any) -> str | None:
        """Faust's transactional id for an input partition (None before the assignment knows the topic)."""
        try:
            group = self.app.assignor.group_for_topic(tp.topic)
        except KeyError:
            return None
        tpg = TopicPartitionGroup(tp.topic, tp.partition, group)
        return TransactionManager.transactional_id_format.format(tpg=tpg, group_id=self.app.conf.id)

    def owns(self, batch: RecordBatch) -> bool:
        """Whether this worker may still commit the batch: fetched in this consumer generation, and its
        partition still assigned here (after a rebalance its owner reads it again from the committed offset)."""
        try:
            assigned = batch.tp in self.app.consumer.assignment()
        except Exception:  # the consumer is stopping
            return False
        return assigned and batch.message.generation_id == self.app.consumer_generation_id

    async def commit(self, batches: Sequence[RecordBatch], records: Sequence[Send]) -> bool:
        """One transaction: `records` (the output of `batches`, consecutive batches of one partition) and the
        offset after the last batch. False when it was not committed (aborted, or no producer for the
        partition yet): nothing of it is visible to a read_committed reader."""
        last = batches[-1]
        tid = self.transactional_id(last.tp)
        if tid is None:
            return False
        lock, producer = transaction_producer(self.app, tid)
        if lock is None or producer is None:
            return False
        if transaction_failed_fatally(producer):
            await self._renew(tid, lock, producer, last)
            return False  # the next try commits with the new producer
        offsets = {last.tp: last.last_offset + 1}
        async with lock:
            if transaction_producer(self.app, tid) != (lock, producer):  # Faust replaced it while we waited
                return False
            try:
                if not in_transaction(producer):
                    await producer.begin_transaction()
                futures = await publish_batches(producer, records, self.partitioner) if records else []
                # the offsets travel while the records do; the commit waits for both, and only for records
                # the broker acknowledged (aiokafka would commit past a failed produce batch)
                waits = [producer.send_offsets_to_transaction(offsets, self.app.conf.id)]
                waits += {id(f): f for f in futures if f is not None}.values()
                results = await asyncio.gather(*waits, return_exceptions=True)
                failed = [r for r in results if isinstance(r, BaseException)]
                if failed or None in futures:
                    raise failed[0] if failed else RuntimeError("a record does not fit a produce batch")
                await producer.commit_transaction()
            except asyncio.CancelledError:  # stopped mid-transaction: abort it rather than leave it open
                await _abort(producer, last)
                raise
            except Exception as e:
                log.warning("gate: the transaction up to %r failed (%r): aborted, written again", last, e)
                await _abort(producer, last)
                return False
        note_committed(self.app, offsets)
        return True

    async def _renew(self, tid: str, lock: asyncio.Lock, dead: Any, batch: RecordBatch) -> None:
        """Start a new transactional producer in place of a dead one (`transaction_failed_fatally`), once
        this worker has owned the partition for `RENEW_AFTER_HEARTBEATS` heartbeats since it found it dead.

        A producer dies when the broker gave its transactional id a newer epoch (measured, the two-gate
        failover test under load: the survivor's producers of its own partitions were fenced in the
        rebalance after the other gate's kill) or timed its transaction out. Faust keeps a dead producer
        until the partition is revoked, and while the partition stays here no revocation comes: every
        commit of the partition failed and its entries were held back for good (87 of 1,000 after 120 s).

        Why the wait: the newer epoch may be the partition's new owner's, this worker a zombie (its session
        expired while it stalled, and it does not know yet). A new producer would take the epoch back and
        commit a batch the new owner commits too (aiokafka's offset commit in a transaction carries no group
        generation the broker could refuse). A zombie's next heartbeat tells it of the rebalance, and the
        revocation takes the partition away (`owns` is False, the batch is given up) before the wait ends.
        The new producer is kept only if the dead one is still the one Faust holds for the id when it has
        started (a rebalance in between: Faust's own is kept) and the partition is still here."""
        now = time.monotonic()
        found = self.dead_since.get(tid)
        if found is None or found[0] is not dead:  # this producer's death is new (not an older one's time)
            self.dead_since[tid] = found = (dead, now)
        if now - found[1] < RENEW_AFTER_HEARTBEATS * float(self.app.conf.broker_heartbeat_interval):
            return
        async with lock:
            if transaction_producer(self.app, tid)[1] is not dead or not self.owns(batch):
                self.dead_since.pop(tid, None)
                return
            log.warning("gate: the transactional producer %s is dead (%r); a new one goes on with %r", tid,
                        producer_death(dead), batch)  # fmt: skip
            try:
                kept = await renew_transaction_producer(
                    self.app, tid, dead, still=lambda: self.owns(batch), timeout=RENEW_TIMEOUT_S
                )
            except Exception as e:  # the broker did not answer in time: tried again on the next commit
                log.warning("gate: cannot start a new transactional producer %s: %r", tid, e)
                return
        self.dead_since.pop(tid, None)
        if not kept:
            log.info("gate: %s changed hands while its new producer started: the new one is stopped", tid)


# A dead transactional producer is replaced after this many consumer heartbeats (`Transactions._renew`), within
# this long for its start (InitProducerId retries until the broker answers).
RENEW_AFTER_HEARTBEATS = 3
RENEW_TIMEOUT_S = 30.0


ABORT_TIMEOUT_S = 5.0


async def _abort(producer: Any, batch: RecordBatch) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(producer.abort_transaction()), ABORT_TIMEOUT_S)
    except Exception as e:  # fenced, stopped or not in a transaction: the broker aborts it (fencing, timeout)
        log.debug("gate: cannot abort the transaction up to %r: %r", batch, e)


Waiting = tuple[RecordBatch, list[Send], "asyncio.Future[bool]"]


class GroupCommit:
    """Under exactly-once, the batches of each input partition waiting for their transaction: one committer
    task per partition commits everything that waits in one transaction, then the next group. A transaction
    costs the broker a fixed amount (a commit marker on every partition it wrote, the transaction log, the
    offsets) and holds back read_committed readers until it commits, so a transaction per fetched batch was
    slow under load (measured: `python -m bench.bench_eos`, docs/benchmarks.md), while one per
    partition per commit round grows with the load: one batch each when the journal is quiet, several when
    it is busy. Partitions commit independently (their own producers); per-key order holds, since a key's
    entries are all on one input partition, committed in order."""

    def __init__(self, transactions: Transactions, *, metrics: Metrics, max_backoff_s: float) -> None:
        self.transactions = transactions
        self.metrics = metrics
        self.max_backoff_s = max_backoff_s
        self.waiting: dict[Any, list[Waiting]] = {}
        self.committers: dict[Any, asyncio.Task[None]] = {}

    def submit(self, batch: RecordBatch, sends: list[Send]) -> asyncio.Future[bool]:
        """Queue a routed batch; the future says True once it is committed, False if it was given up (its
        partition went to another worker, or came back in a new generation: read again from the committed
        offset)."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(batch.tp, []).append((batch, sends, done))
        if batch.tp not in self.committers:
            self.committers[batch.tp] = asyncio.ensure_future(self._commit(batch.tp))
        return done

    async def _commit(self, tp: Any) -> None:
        group: list[Waiting] = []
        try:
            while self.waiting.get(tp):
                group = self.waiting.pop(tp)
                # generations only grow: batches fetched before a rebalance come first, and are given up
                stale = [w for w in group if not self.transactions.owns(w[0])]
                for _, _, done in stale:
                    done.set_result(False)
                fresh = group[len(stale) :]
                if fresh:
                    ok = await self._deliver(fresh)
                    for _, _, done in fresh:
                        done.set_result(ok)
                group = []
        finally:
            del self.committers[tp]
            for _, _, done in group + self.waiting.pop(tp, []):  # cancelled: nothing committed
                if not done.done():
                    done.cancel()

    async def _deliver(self, group: list[Waiting]) -> bool:
        """Commit the group, retrying until committed; False when it is no longer this worker's."""
        batches = [w[0] for w in group]
        records = [rec for w in group for rec in w[1]]
        attempt = 0
        while self.transactions.owns(batches[-1]):
            if await self.transactions.commit(batches, records):
                return True
            attempt += 1
            self.metrics.consumer_errors.labels(stage="publish").inc(max(1, len(records)))
            await asyncio.sleep(min(self.max_backoff_s, 0.05 * 2**attempt))
        log.info("gate: %r is no longer this worker's: not committed here, read again by its owner", batches[-1])
        return False

    def cancel(self) -> None:
        for task in list(self.committers.values()):
            task.cancel()


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


InFlight = tuple["asyncio.Future[Any] | None", RecordBatch, Any, Counter[tuple[str, str]], Counter[str]]


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
    # Faust's exactly-once (streams.app.create_app(exactly_once=True)): the batches in transactions
    transactions = Transactions(app) if app.in_transaction else None
    window = max(1, options.in_flight_batches if transactions is None else options.transaction_batches)
    state = drain if drain is not None else GateDrain()

    async def gate(stream: StreamT) -> None:
        manual: Any = stream.noack()  # type: ignore[attr-defined] # acked below, only after the batch's output is delivered
        # Batches whose output is in flight, oldest first: the next batch is routed while the broker
        # acknowledges the previous ones. The acker acks each batch, in order, once its own output is
        # delivered; the queue's bound is the back-pressure (and what a drain waits for).
        in_flight: asyncio.Queue[InFlight] = asyncio.Queue(maxsize=window)
        state.in_flight = in_flight
        tasks: set[asyncio.Task[Any]] = set()
        previous: asyncio.Task[Any] | None = None  # the last batch's delivery: the next one publishes after it
        grouped = (
            GroupCommit(transactions, metrics=metrics, max_backoff_s=options.max_retry_backoff_s)
            if transactions is not None
            else None
        )

        async def acker() -> None:
            while True:
                task, batch, event, consumed, dead = await in_flight.get()
                try:
                    done = True
                    if task is not None:
                        done = (await task) is not False  # False: given up under exactly-once (not ours now)
                        tasks.discard(task)  # type: ignore[arg-type]
                    if transactions is None:
                        batch.mark_delivered()  # its offsets are Faust's to commit
                    # else committed with its output (or given up): acked undelivered, Faust never commits it
                    if event is not None:
                        await manual.ack(event)
                    if not done:
                        continue
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
                task: asyncio.Future[Any] | None = None
                if grouped is not None:  # a batch with no output still commits its offsets
                    task = grouped.submit(batch, sends)
                elif sends:
                    after = previous if previous is not None and not previous.done() else None
                    previous = asyncio.ensure_future(
                        deliver(publish, sends, metrics=metrics, max_backoff_s=options.max_retry_backoff_s, after=after)
                    )
                    task = previous
                    tasks.add(previous)
                await in_flight.put((task, batch, event, consumed, dead))
        finally:
            # stopped (or failed) with output in flight: those batches stay unacked and are read again
            state.in_flight = None
            acking.cancel()
            for t in tasks:
                t.cancel()
            if grouped is not None:
                grouped.cancel()

    return app.agent(source, name="episodic.gate")(gate)
