"""Where a topic ends and how far a group is behind it: end offsets, consumer lag, reading a topic to an end.

On Kafka the end of a partition is what ListOffsets says (one request). On Tansu (the fallback broker), whose
ListOffsets misreports it (1 for a partition of 10 records, measured), it is the high watermark that fetch
responses carry (SPEC §10): every function here takes `exact=False` for it, from `Settings.broker_is_tansu`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any

from aiokafka.errors import KafkaError

from episodic.kernel.errors import BrokerUnavailable
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.kernel.transport_security import kafka_options

log = logging.getLogger(__name__)

AIOKAFKA_CONSUMER_CLIENT = "_client"  # the consumer's AIOKafkaClient (tests/unit/test_internals.py checks it)


async def partitions_of(consumer: Any, topic: str) -> set[int]:
    """The partition ids of `topic` (none when it does not exist), from a metadata request made now, so that
    partitions added since count. aiokafka has no public call for it on a consumer without a subscription:
    `topics()` fetches every topic's metadata but keeps it to itself, and `partitions_for_topic` answers only
    for topics the client already tracks, which such a consumer never does on Kafka (Tansu answered a
    metadata request for no topic with all of them)."""
    cluster = await getattr(consumer, AIOKAFKA_CONSUMER_CLIENT).fetch_all_metadata()
    return set(cluster.partitions_for_topic(topic) or ())


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
    """A consumer group's lag on its own timer: end offsets minus the group's committed offsets.

    The group's own consumer stops fetching while it is stuck (its buffer is full), so the high watermark it
    last saw goes stale exactly when lag matters; this probe is a separate consumer that never joins the
    group: it reads the group's committed offsets (OffsetFetch) and each partition's end (ListOffsets, one
    request). So the lag keeps rising while the group is stuck, and an alert can fire on it.

    On Tansu (`exact=False`), whose ListOffsets misreports end offsets (SPEC §10: 1 for a partition of 10
    records, measured), the end comes from the high watermark that fetch responses carry instead: it is
    assigned every partition of `topic`, seeks to the committed offsets and fetches at most a record per
    partition.
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
        exact: bool = True,
    ) -> None:
        self.exact = exact
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

        tps = {TopicPartition(self.topic, p) for p in await partitions_of(consumer, self.topic)}
        if not tps:
            return None
        if self.exact:
            done: dict[Any, int | None] = {tp: await consumer.committed(tp) for tp in tps}
            if any(c is None for c in done.values()):  # never committed: it reads from the log's start
                starts = await consumer.beginning_offsets(sorted(tps))
                done = {tp: starts[tp] if c is None else c for tp, c in done.items()}
            return group_lag(dict(await consumer.end_offsets(sorted(tps))), done)
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
    bootstrap: str,
    topic: str,
    *,
    wait_s: float = 10.0,
    options: Mapping[str, Any] | None = None,
    exact: bool = True,
) -> dict[int, int]:
    """partition -> the offset after its last record now (ListOffsets; with `exact=False`, on Tansu, whose
    ListOffsets misreports it, the fetch high watermark: SPEC §10). {} when the topic does not exist.
    BrokerUnavailable when the broker cannot be reached or a partition does not answer within `wait_s`."""
    from aiokafka import TopicPartition

    # max_partition_fetch_bytes=1: the high watermark is the point, not the records
    async with _reader(bootstrap, options, max_partition_fetch_bytes=1, request_timeout_ms=10_000) as probe:
        tps = {TopicPartition(topic, p) for p in await partitions_of(probe, topic)}
        if not tps:
            return {}
        if exact:
            try:
                async with asyncio.timeout(wait_s):
                    ends = await probe.end_offsets(sorted(tps))
            except (KafkaError, TimeoutError) as e:
                raise BrokerUnavailable(f"{topic}: no end offsets within {wait_s:g}s: {e!r}") from e
            return {tp.partition: int(end) for tp, end in ends.items()}
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
    starts: Mapping[int, int] | None = None,
) -> AsyncGenerator[Any, None]:
    """Every record of `topic` before `ends` (partition -> offset, `topic_ends`), partition by partition in
    offset order, from `starts` (partition -> offset; default 0: a reader that keeps its place, such as the
    explorer's dead-letter index, reads only what is new); records written after `ends` are not read.
    BrokerUnavailable when no record arrives for `stall_s` seconds while some are still to be read."""
    from aiokafka import TopicPartition

    first = {p: (starts or {}).get(p, 0) for p in ends}
    todo = {TopicPartition(topic, p): end for p, end in ends.items() if end > first[p]}
    if not todo:
        return
    async with _reader(bootstrap, options) as consumer:
        consumer.assign(sorted(todo))
        for tp in todo:
            consumer.seek(tp, first[tp.partition])
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
        exact=not settings.broker_is_tansu,
    )
