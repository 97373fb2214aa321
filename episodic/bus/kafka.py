"""Kafka plumbing shared by the stages: topic creation, producers, lag from high watermarks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from episodic.kernel.errors import BrokerUnavailable
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options
from schemas.events import CONTROL_HEADER, FORGET, ForgetRecord
from schemas.topics import ALL_TOPICS, JOURNAL_EMBEDDABLE

log = logging.getLogger(__name__)


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode()


async def ensure_topics(
    bootstrap: str,
    *,
    partitions: int = 4,
    replication: int = 1,
    topics: tuple[str, ...] = ALL_TOPICS,
    options: Mapping[str, Any] | None = None,
) -> list[str]:
    """Create the missing topics; return the ones created. `options`: the transport's
    (`episodic.kernel.transport_security.kafka_options`)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000, **(options or {}))
    try:
        await admin.start()
    except KafkaError as e:
        raise BrokerUnavailable(f"cannot reach Kafka at {bootstrap}: {e}") from e
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in topics if t not in existing]
        if missing:
            try:
                await admin.create_topics(
                    [NewTopic(t, num_partitions=partitions, replication_factor=replication) for t in missing]
                )
            except TopicAlreadyExistsError:
                pass
        return missing
    finally:
        await admin.close()


async def list_topics(bootstrap: str, *, options: Mapping[str, Any] | None = None) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5_000, **(options or {}))
    try:
        await admin.start()
        return set(await admin.list_topics())
    except KafkaError as e:
        raise BrokerUnavailable(f"cannot reach Kafka at {bootstrap}: {e}") from e
    finally:
        await admin.close()


def bootstrap_reachable(bootstrap: str, timeout: float = 1.0) -> bool:
    """True when a TCP connection to any of the bootstrap servers succeeds (a cheap liveness probe)."""
    import socket

    for hostport in bootstrap.split(","):
        host, _, port = hostport.strip().rpartition(":")
        if not port.isdigit():
            continue
        try:
            with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout):
                return True
        except OSError:
            continue
    return False


def make_producer(bootstrap: str, **kw: Any) -> AIOKafkaProducer:
    """A producer for the embedded broker and Kafka alike (no idempotence: Tansu lacks it); `kw` carries the
    transport's options (`**kafka_options(settings)`) and overrides."""
    opts: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "acks": "all",
        "linger_ms": 5,
        "enable_idempotence": False,
        "request_timeout_ms": 15_000,
    }
    opts.update(kw)
    return AIOKafkaProducer(**opts)


async def produce_json(producer: AIOKafkaProducer, topic: str, key: str | None, value: Any) -> asyncio.Future[Any]:
    """Queue one JSON record; the returned future resolves once the broker acknowledged it."""
    return await producer.send(topic, key=key.encode() if key is not None else None, value=dumps(value))


async def send_forget(producer: AIOKafkaProducer, record: ForgetRecord, *, topic: str = JOURNAL_EMBEDDABLE) -> None:
    """Produce a forget as a control record on `journal.embeddable`, keyed by its workspace like the entries
    (the same partition: it is applied in order with them), and return once the broker acknowledged it (the
    producer's acks; `make_producer` asks for all in-sync replicas)."""
    await producer.send_and_wait(
        topic, key=record.workspace_id.encode(), value=record.to_json(), headers=[(CONTROL_HEADER, FORGET)]
    )


async def send_all(producer: AIOKafkaProducer, topic: str, records: Sequence[tuple[bytes | None, bytes]]) -> None:
    """Send (key, value) records and return once the broker acknowledged every one of them (the producer's
    acks; `make_producer` asks for all in-sync replicas). Raises the first failure."""
    futures = [await producer.send(topic, key=key, value=value) for key, value in records]
    await asyncio.gather(*futures)


# -- consumer lag ----------------------------------------------------------------------------------------

LAG_INTERVAL_S = 5.0
LAG_FETCH_WAIT_S = 3.0  # how long one measurement waits for a fresh fetch response of every partition


def group_lag(highwater: dict[Any, int | None], committed: dict[Any, int | None]) -> int | None:
    """Records the group has not committed yet: sum over partitions of high watermark - committed offset
    (a partition without a commit counts from 0). None when a partition's high watermark is unknown."""
    total = 0
    for tp, hw in highwater.items():
        if hw is None:
            return None
        total += max(0, hw - (committed.get(tp) or 0))
    return total


class LagProbe:
    """A consumer group's lag on its own timer, from the high watermarks that fetch responses carry.

    SPEC §10: Tansu misreports ListOffsets (end offsets), so the high watermark comes from a fetch. The
    group's own consumer stops fetching while it is stuck (its buffer is full), so its high watermark goes
    stale exactly when lag matters; this probe is a separate consumer that never joins the group: it is
    assigned every partition of `topic`, reads the group's committed offsets (OffsetFetch), seeks there
    and fetches (at most a record per partition), which refreshes each partition's high watermark. So the
    lag keeps rising while the group is stuck, and an alert can fire on it.
    """

    def __init__(
        self,
        *,
        bootstrap: str,
        group_id: str,
        topic: str,
        report: Callable[[int], None],
        interval_s: float = LAG_INTERVAL_S,
        on_error: Callable[[BaseException], None] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.options = dict(options or {})
        self.group_id = group_id
        self.topic = topic
        self.report = report
        self.interval_s = interval_s
        self.on_error = on_error
        self.last: int | None = None

    def consumer(self) -> Any:
        """The probe's consumer (not started)."""
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group_id,  # for OffsetFetch only: with manual assignment it never joins the group
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
            max_partition_fetch_bytes=1,  # the first record only: the point is the high watermark
            isolation_level="read_uncommitted",
            **self.options,
        )

    async def run(self) -> None:
        """Measure every `interval_s` until cancelled; failures are reported and retried next tick."""
        consumer = self.consumer()
        started = False
        try:
            while True:
                try:
                    if not started:
                        await consumer.start()
                        started = True
                    lag = await self.measure(consumer)
                    if lag is not None:
                        self.last = lag
                        self.report(lag)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # the broker away, the topic not there yet: try again next tick
                    if self.on_error is not None:
                        self.on_error(e)
                    log.debug("lag probe for %s on %s: %r", self.group_id, self.topic, e)
                await asyncio.sleep(self.interval_s)
        finally:
            if started:
                with contextlib.suppress(Exception):
                    await consumer.stop()

    async def measure(self, consumer: Any) -> int | None:
        from aiokafka import TopicPartition

        await consumer.topics()  # refresh metadata: partitions added since the last tick
        parts = consumer.partitions_for_topic(self.topic) or set()
        tps = {TopicPartition(self.topic, p) for p in parts}
        if not tps:
            return None
        if consumer.assignment() != tps:
            consumer.assign(sorted(tps))
        # Paused between ticks: an assigned consumer's fetcher polls its partitions in the background, and
        # at the end of a topic that is an empty fetch every fetch_max_wait_ms (20 a second) for nothing.
        try:
            committed: dict[Any, int | None] = {}
            for tp in tps:
                committed[tp] = await consumer.committed(tp)
                consumer.seek(tp, committed[tp] or 0)
            consumer.resume(*tps)  # after the seek: a fetch from the old position would be thrown away
            highwater = await fresh_highwaters(consumer, tps)
        finally:
            consumer.pause(*tps)
        return None if highwater is None else group_lag(dict(highwater), committed)


async def stop_quietly(stop: Awaitable[None], what: str) -> None:
    """Await a Kafka client's `stop()`. After the broker is lost, aiokafka's fetcher cancels its fetch in
    retry and then awaits it, which raises CancelledError out of the consumer's `stop()`: that one is
    logged and dropped, unless this task itself is being cancelled (then it goes on)."""
    try:
        await stop
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        log.debug("%s: a fetch cancelled while stopping (the broker was gone)", what)


async def fresh_highwaters(consumer: Any, tps: set[Any], *, wait_s: float = LAG_FETCH_WAIT_S) -> dict[Any, int] | None:
    """The high watermark of every partition in `tps` as fetch responses newer than this call carry it (the
    consumer is assigned `tps` and positioned; it fetches, at most a record per partition per round, and
    the records are dropped). None when a partition got no fresh fetch response within `wait_s` seconds."""
    since = int(1000 * time.time())
    deadline = time.monotonic() + wait_s
    fresh: set[Any] = set()
    while time.monotonic() < deadline:
        await consumer.getmany(timeout_ms=100, max_records=len(tps))
        fresh = {tp for tp in tps if (consumer.last_poll_timestamp(tp) or 0) >= since}
        if fresh == tps:
            break
    if fresh != tps:
        return None
    return {tp: int(consumer.highwater(tp) or 0) for tp in tps}


# -- reading a topic to the end it had ------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _reader(bootstrap: str, options: Mapping[str, Any] | None, **kw: Any) -> AsyncIterator[Any]:
    """A started consumer without a group, for manual assignment from the start of a topic (`kw`: more
    aiokafka settings); BrokerUnavailable when Kafka cannot be reached; stopped on exit."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        **kw,
        **(options or {}),  # TLS / SASL (episodic.kernel.transport_security)
    )
    try:
        await consumer.start()
    except KafkaError as e:
        raise BrokerUnavailable(f"cannot reach Kafka at {bootstrap}: {e}") from e
    try:
        yield consumer
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()


async def topic_ends(
    bootstrap: str, topic: str, *, wait_s: float = 10.0, options: Mapping[str, Any] | None = None
) -> dict[int, int]:
    """partition -> the offset after its last record now (the fetch high watermark, SPEC §10: not ListOffsets,
    which the embedded broker misreports). {} when the topic does not exist. BrokerUnavailable when the broker
    cannot be reached or a partition does not answer within `wait_s`."""
    from aiokafka import TopicPartition

    # max_partition_fetch_bytes=1: the high watermark is the point, not the records
    async with _reader(bootstrap, options, max_partition_fetch_bytes=1, request_timeout_ms=10_000) as probe:
        await probe.topics()
        tps = {TopicPartition(topic, p) for p in probe.partitions_for_topic(topic) or ()}
        if not tps:
            return {}
        probe.assign(sorted(tps))
        for tp in tps:
            probe.seek(tp, 0)
        ends = await fresh_highwaters(probe, tps, wait_s=wait_s)
        if ends is None:
            raise BrokerUnavailable(f"{topic}: no fetch answer from every partition within {wait_s:g}s")
        return {tp.partition: hw for tp, hw in ends.items()}


async def read_to(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    *,
    stall_s: float = 30.0,
    options: Mapping[str, Any] | None = None,
) -> AsyncGenerator[Any, None]:
    """Every record of `topic` before `ends` (partition -> offset, `topic_ends`), partition by partition in
    offset order; records written after `ends` are not read. BrokerUnavailable when no record arrives for
    `stall_s` seconds while some are still to be read."""
    from aiokafka import TopicPartition

    todo = {TopicPartition(topic, p): end for p, end in ends.items() if end > 0}
    if not todo:
        return
    async with _reader(bootstrap, options) as consumer:
        consumer.assign(sorted(todo))
        for tp in todo:
            consumer.seek(tp, 0)
        last = time.monotonic()
        while todo:
            batch = await consumer.getmany(*todo, timeout_ms=200)
            for tp, records in sorted(batch.items()):
                if tp not in todo:
                    continue
                for rec in records:
                    if rec.offset < todo[tp]:
                        yield rec
                        last = time.monotonic()
            for tp in list(todo):
                if await consumer.position(tp) >= todo[tp]:
                    consumer.pause(tp)
                    del todo[tp]
            if todo and time.monotonic() - last > stall_s:
                raise BrokerUnavailable(f"{topic}: nothing read for {stall_s:g}s before the end seen at the start")


def group_lag_probe(
    settings: Settings,
    metrics: Metrics,
    *,
    group: str,
    topic: str,
    also: Callable[[int], None] | None = None,
) -> LagProbe:
    """The probe of one consumer group on `topic`, every `EPISODIC_LAG_INTERVAL_S`, into
    `episodic_consumer_lag_records{group}` (and `also`); its failures count at stage `lag`."""

    def report(lag: int) -> None:
        metrics.consumer_lag.labels(group=group).set(lag)
        if also is not None:
            also(lag)

    return LagProbe(
        bootstrap=settings.bootstrap,
        group_id=group,
        topic=topic,
        report=report,
        interval_s=settings.lag_interval_s,
        on_error=lambda e: metrics.consumer_errors.labels(stage="lag").inc(),
        options=kafka_options(settings),
    )
