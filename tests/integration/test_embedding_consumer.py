"""The embedding consumer on the real broker and the real store (Qdrant Edge): poison records, transient
store failures, and lag measured while the consumer is stuck."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import CollectorRegistry

from consumers.embedding import EmbeddingConsumer
from episodic.bus import ensure_topics, make_producer
from episodic.errors import StoreError, StoreUnavailable
from episodic.indexer import Indexer
from episodic.metrics import Metrics
from episodic.ports import MemoryPoint
from episodic.settings import Settings
from episodic.sparse import Bm25Encoder
from episodic.store_edge import EdgeStore
from tests.e2e.conftest import poll

pytestmark = pytest.mark.integration


class FlakyStore(EdgeStore):
    """The real Qdrant Edge store, refusing what a test tells it to: any batch holding a `poison` entry
    (deterministically, as a store refusing a record would), or everything while `down` is set."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.poison: set[str] = set()
        self.down = threading.Event()
        self.upserts = 0

    def upsert(self, points: list[MemoryPoint]) -> None:
        if self.down.is_set():
            raise StoreUnavailable("qdrant-edge upsert: the shard is away (test)")
        bad = [p.payload["entry_id"] for p in points if p.payload["entry_id"] in self.poison]
        if bad:
            raise StoreError(f"qdrant-edge upsert: refused {bad} (test)")
        self.upserts += 1
        super().upsert(points)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FlakyStore]:
    s = FlakyStore(tmp_path / "edge")
    s.ensure_collection(384)
    try:
        yield s
    finally:
        s.close()


def record(i: int, **over: Any) -> dict[str, Any]:
    r = {
        "id": f"r{i:03d}",
        "workspace_id": "ws",
        "agent_id": "agent",
        "crew_id": None,
        "ts": "2026-05-01T10:00:00Z",
        "entry_type": "summary.generated",
        "severity": "info",
        "summary": f"memory number {i}: the deploy of service {i % 7} went fine",
        "payload": {"i": i},
        "base_importance": 0.7,
        "accepted_at": "2026-05-01T10:00:01Z",
    }
    r.update(over)
    return r


class Topics:
    def __init__(self, uid: str) -> None:
        self.source, self.indexed, self.dlq = f"emb.{uid}", f"idx.{uid}", f"dlq.{uid}"


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = make_producer(bootstrap)
    await p.start()
    try:
        await asyncio.gather(*[await p.send(topic, key=b"ws", value=v) for v in values])
    finally:
        await p.stop()


async def read(bootstrap: str, topic: str, timeout: float = 3.0) -> list[Any]:
    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None)
    await c.start()
    out: list[Any] = []
    try:
        while True:
            got = await c.getmany(timeout_ms=int(timeout * 1000))
            if not got:
                return out
            for recs in got.values():
                out.extend(recs)
    finally:
        await c.stop()


async def committed(bootstrap: str, group: str, topic: str) -> int | None:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        return await c.committed(TopicPartition(topic, 0))
    finally:
        await c.stop()


@asynccontextmanager
async def consuming(
    bootstrap: str, store: FlakyStore, topics: Topics, tmp_path: Path, **over: Any
) -> AsyncIterator[EmbeddingConsumer]:
    settings = Settings(
        kafka_bootstrap=bootstrap, data_dir=tmp_path, batch_size=16, batch_max_wait_ms=20, lag_interval_s=0.3, **over
    )
    producer = make_producer(bootstrap)
    await producer.start()
    consumer = EmbeddingConsumer(
        settings=settings,
        indexer=Indexer(store=store, embedder=None, bm25=Bm25Encoder()),
        producer=producer,
        metrics=Metrics(CollectorRegistry()),
        source_topic=topics.source,
        indexed_topic=topics.indexed,
        dlq_topic=topics.dlq,
        group_id=f"group-{topics.source}",
    )
    task = asyncio.create_task(consumer.run())
    try:
        await consumer.wait_ready(30)
        yield consumer
    finally:
        consumer.request_stop()
        await asyncio.wait_for(task, 60)
        await producer.stop()


def metric(consumer: EmbeddingConsumer, name: str, **labels: str) -> float:
    return consumer.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_a_record_the_store_rejects_is_dead_lettered_and_the_partition_keeps_flowing(
    broker: str, uid: str, tmp_path: Path, store: FlakyStore
) -> None:
    topics = Topics(uid)
    await ensure_topics(broker, partitions=1, topics=(topics.source, topics.indexed, topics.dlq))
    store.poison = {"r012"}
    values = [json.dumps(record(i)).encode() for i in range(30)]
    garbage = b'{"id": "no workspace", "summary": 3}'
    await produce(broker, topics.source, [*values[:20], garbage, *values[20:]])
    async with consuming(broker, store, topics, tmp_path) as consumer:
        await poll(lambda: store.count("ws") == 29, timeout=60, what="every record but the poison indexed")
        group = consumer.group_id
        await poll(lambda: committed(broker, group, topics.source), timeout=30, what="a commit")
        assert await committed(broker, group, topics.source) == 31  # past the poison and the garbage
        # the partition keeps flowing after it
        await produce(broker, topics.source, [json.dumps(record(i)).encode() for i in range(30, 35)])
        await poll(lambda: store.count("ws") == 34, timeout=60, what="later records indexed")
        assert metric(consumer, "episodic_dead_lettered_total", reason="store_rejected") == 1
        assert metric(consumer, "episodic_dead_lettered_total", reason="bad_embeddable") == 1
        assert metric(consumer, "episodic_consumer_errors_total", stage="store") >= 1
    dlq = [json.loads(r.value) for r in await read(broker, topics.dlq)]
    by_reason = {d["reason"]: d for d in dlq}
    assert sorted(by_reason) == ["bad_embeddable", "store_rejected"] and len(dlq) == 2
    rejected = by_reason["store_rejected"]
    assert base64.b64decode(rejected["raw_b64"]) == values[12]  # the original bytes
    assert rejected["source"] == {"topic": topics.source, "partition": 0, "offset": 12}
    assert "refused ['r012']" in rejected["error"]
    assert base64.b64decode(by_reason["bad_embeddable"]["raw_b64"]) == garbage
    events = [json.loads(r.value) for r in await read(broker, topics.indexed)]
    assert sorted(e["entry_id"] for e in events) == sorted(f"r{i:03d}" for i in range(35) if i != 12)
    assert store.retrieve([p for p in [store_pid("r012")]]) == {}


def store_pid(entry_id: str) -> str:
    from episodic.identity import point_id

    return point_id("ws", entry_id)


async def test_an_unavailable_store_is_retried_and_nothing_is_dead_lettered(
    broker: str, uid: str, tmp_path: Path, store: FlakyStore
) -> None:
    topics = Topics(uid)
    await ensure_topics(broker, partitions=1, topics=(topics.source, topics.indexed, topics.dlq))
    store.down.set()
    await produce(broker, topics.source, [json.dumps(record(i)).encode() for i in range(20)])
    async with consuming(broker, store, topics, tmp_path) as consumer:
        await poll(
            lambda: metric(consumer, "episodic_consumer_errors_total", stage="store") >= 3,
            timeout=30,
            what="retries while the store is away",
        )
        assert store.count("ws") == 0 and await committed(broker, consumer.group_id, topics.source) is None
        store.down.clear()
        await poll(lambda: store.count("ws") == 20, timeout=60, what="indexed once the store is back")
        await poll(lambda: committed(broker, consumer.group_id, topics.source), timeout=30, what="the commit")
        assert metric(consumer, "episodic_dead_lettered_total", reason="store_rejected") == 0
    assert await read(broker, topics.dlq, timeout=1.0) == []


async def test_lag_keeps_rising_while_the_consumer_is_stuck(
    broker: str, uid: str, tmp_path: Path, store: FlakyStore
) -> None:
    """The consumer is stuck on its first batch (the store is away): it fetches nothing more, yet its lag,
    measured on the probe's own timer from fetch high watermarks, follows every record produced."""
    topics = Topics(uid)
    await ensure_topics(broker, partitions=2, topics=(topics.source, topics.indexed, topics.dlq))
    store.down.set()
    async with consuming(broker, store, topics, tmp_path) as consumer:
        lag = f"group-{topics.source}"

        def lag_is(n: int) -> bool:
            return metric(consumer, "episodic_consumer_lag_records", group=lag) == n

        await produce(broker, topics.source, [json.dumps(record(i)).encode() for i in range(40)])
        await poll(lambda: lag_is(40), timeout=30, what="lag 40 while stuck")
        assert consumer.stats.batches == 0  # stuck indeed: no batch finished
        await produce(broker, topics.source, [json.dumps(record(i)).encode() for i in range(40, 100)])
        await poll(lambda: lag_is(100), timeout=30, what="lag 100, still stuck")
        assert consumer.stats.batches == 0
        store.down.clear()
        await poll(lambda: lag_is(0), timeout=60, what="lag back to 0 once unstuck")
        assert store.count("ws") == 100
