"""The embedding consumer on the real broker and the real store (Qdrant Edge): poison records, transient
store failures, forgets next to poison records, and lag measured while the consumer is stuck."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import CollectorRegistry

from consumers.embedding import EmbeddingConsumer
from episodic.bus.kafka import ensure_topics, make_producer, send_forget
from episodic.domain.identity import point_id
from episodic.indexing.indexer import Indexer
from episodic.kernel.errors import StoreError, StoreUnavailable
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import MemoryPoint
from episodic.kernel.settings import Settings
from episodic.lifecycle.forget import FAILED, STATUS, Forgetter
from episodic.store.edge import EdgeStore
from episodic.store.sparse import Bm25Encoder
from episodic.store.state import QdrantStateStore
from schemas.events import ForgetRecord, ForgetSelector
from streams.internals import AIOKAFKA_CONSUMER_FETCH_WAIT
from tests.e2e.conftest import poll

pytestmark = pytest.mark.integration


class FlakyStore(EdgeStore):
    """The real Qdrant Edge store, refusing what a test tells it to: any batch holding a `poison` entry
    (deterministically, as a store refusing a record would), every delete while `refuse_delete` is set, or
    everything while `down` is set."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.poison: set[str] = set()
        self.down = threading.Event()
        self.refuse_delete = False
        self.upserts = 0

    def delete(self, point_ids: list[str]) -> None:
        if self.refuse_delete:
            raise StoreError("qdrant-edge delete: refused (test)")
        super().delete(point_ids)

    def _refuse(self, points: list[MemoryPoint]) -> None:
        if self.down.is_set():
            raise StoreUnavailable("qdrant-edge upsert: the shard is away (test)")
        bad = [p.payload["entry_id"] for p in points if p.payload["entry_id"] in self.poison]
        if bad:
            raise StoreError(f"qdrant-edge upsert: refused {bad} (test)")
        self.upserts += 1

    def upsert(self, points: list[MemoryPoint]) -> None:
        self._refuse(points)
        super().upsert(points)

    def upsert_if(self, points: list[MemoryPoint], expect: Any, *, writer: str) -> list[str]:
        self._refuse(points)  # the indexer's write (under the write discipline)
        return super().upsert_if(points, expect, writer=writer)


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
        self.forgotten = f"fgt.{uid}"

    def all(self) -> tuple[str, ...]:
        return (self.source, self.indexed, self.dlq, self.forgotten)


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
    bootstrap: str, store: FlakyStore, topics: Topics, tmp_path: Path, forgetter: Forgetter | None = None, **over: Any
) -> AsyncIterator[EmbeddingConsumer]:
    fields: dict[str, Any] = {
        "batch_size": 16, "batch_max_wait_ms": 20, "lag_interval_s": 0.3, "fetch_max_wait_ms": 40, **over
    }  # fmt: skip
    settings = Settings(kafka_bootstrap=bootstrap, data_dir=tmp_path, **fields)
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
        forgetter=forgetter,
        forgotten_topic=topics.forgotten,
    )
    task = asyncio.create_task(consumer.run())
    try:
        await consumer.wait_ready(30)
        assert getattr(consumer._consumer, AIOKAFKA_CONSUMER_FETCH_WAIT) == settings.fetch_wait_ms  # the setting's
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
    from episodic.domain.identity import point_id

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


def state_beside(store: FlakyStore) -> QdrantStateStore:
    return QdrantStateStore.beside(store)


async def forget_on(bootstrap: str, topic: str, forget: ForgetRecord) -> None:
    p = make_producer(bootstrap)
    await p.start()
    try:
        await send_forget(p, forget, topic=topic)
    finally:
        await p.stop()


def forget_record(fid: str, **selector: Any) -> ForgetRecord:
    return ForgetRecord(
        forget_id=fid, workspace_id="ws", selector=ForgetSelector(**selector), requested_at=datetime.now(UTC)
    )


async def test_a_split_batch_applies_its_forget_first_and_never_indexes_nor_dead_letters_what_it_covers(
    broker: str, uid: str, tmp_path: Path, store: FlakyStore
) -> None:
    """One batch: entries, a forget of two ids (one before it, one after it), more entries, and a record the
    store refuses. The forget is applied before anything is indexed; the batch is split to find the refused
    record; the forgotten ids are left out of every half (r002 would be refused too: it never reaches the
    store, so it is not dead-lettered for it)."""
    topics = Topics(uid)
    await ensure_topics(broker, partitions=1, topics=topics.all())
    state = state_beside(store)
    store.poison = {"r002", "r008"}
    values = [json.dumps(record(i)).encode() for i in range(10)]
    forget = forget_record("f-ids", entry_ids=["r002", "r007"])
    await produce(broker, topics.source, values[:5])
    await forget_on(broker, topics.source, forget)
    await produce(broker, topics.source, values[5:])
    try:
        async with consuming(
            broker, store, topics, tmp_path, forgetter=Forgetter(store=store, state=state), batch_max_wait_ms=2000
        ) as consumer:
            await poll(lambda: committed(broker, consumer.group_id, topics.source), timeout=60, what="a commit")
            assert await committed(broker, consumer.group_id, topics.source) == 11  # the whole batch
            assert consumer.stats.batches == 1  # one batch, split inside
            kept = {f"r{i:03d}" for i in (0, 1, 3, 4, 5, 6, 9)}
            got = store.retrieve([point_id("ws", f"r{i:03d}") for i in range(10)])
            assert {p["entry_id"] for p in got.values()} == kept
            assert metric(consumer, "episodic_forget_suppressed_total") == 2
            assert metric(consumer, "episodic_forgets_total", selector="entry_ids") == 1
            assert metric(consumer, "episodic_dead_lettered_total", reason="store_rejected") == 1
        assert state.get(STATUS, "f-ids")["status"] == "applied"
    finally:
        state.close()
    dlq = [json.loads(r.value) for r in await read(broker, topics.dlq)]
    assert [(d["reason"], base64.b64decode(d["raw_b64"])) for d in dlq] == [("store_rejected", values[8])]
    events = [json.loads(r.value) for r in await read(broker, topics.indexed)]
    assert sorted(e["entry_id"] for e in events) == sorted(kept)
    forgotten = [json.loads(r.value) for r in await read(broker, topics.forgotten)]
    assert [(f["forget_id"], sorted(f["entry_ids"])) for f in forgotten] == [("f-ids", ["r002", "r007"])]


async def test_a_forget_the_store_refuses_is_failed_and_dead_lettered_and_the_partition_keeps_flowing(
    broker: str, uid: str, tmp_path: Path, store: FlakyStore
) -> None:
    topics = Topics(uid)
    await ensure_topics(broker, partitions=1, topics=topics.all())
    state = state_beside(store)
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    try:
        async with consuming(broker, store, topics, tmp_path, forgetter=Forgetter(store=store, state=state)) as c:
            await produce(broker, topics.source, [json.dumps(record(i)).encode() for i in range(5)])
            await poll(lambda: store.count("ws") == 5, timeout=60, what="the first entries indexed")
            store.refuse_delete = True
            forget = forget_record("f-agent", agent_id="agent")
            await forget_on(broker, topics.source, forget)
            # written after the forget (a later ts): a new memory, indexed whatever became of the forget
            newer = json.dumps(record(10, ts=later, accepted_at=later)).encode()
            await produce(broker, topics.source, [newer])
            await poll(lambda: store.count("ws") == 6, timeout=60, what="the later entry indexed")
            await poll(lambda: committed(broker, c.group_id, topics.source), timeout=30, what="a commit")
            await poll(lambda: (state.get(STATUS, "f-agent") or {}).get("status") == FAILED, timeout=30, what="failed")
            assert await committed(broker, c.group_id, topics.source) == 7  # past the forget
            assert metric(c, "episodic_dead_lettered_total", reason="forget_failed") == 1
            assert metric(c, "episodic_forgets_total", selector="agent_id") == 0
        doc = state.get(STATUS, "f-agent")
        # the store's own words stay in the log and the dead letter; the status names the error's kind and a ref
        assert doc["failure"].startswith("could not apply: the store refused it (StoreError; ref ")
    finally:
        state.close()
    dlq = [json.loads(r.value) for r in await read(broker, topics.dlq)]
    assert [d["reason"] for d in dlq] == ["forget_failed"] and "delete: refused" in dlq[0]["error"]
    assert json.loads(base64.b64decode(dlq[0]["raw_b64"]))["forget_id"] == "f-agent"
