"""The recall service outlives Kafka: started with Kafka unreachable it answers, /healthz says kafka
degraded, memory.referenced events wait in a bounded buffer (the rest dropped and counted), the watchdog
leaves it running, and the buffer is delivered once a broker listens; a forget is 503 while Kafka is away
and queued through the service's own connection once it is back."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from episodic.indexing.indexer import Indexer
from episodic.kernel.settings import Settings
from episodic.store.sparse import Bm25Encoder
from infra.broker import free_port
from schemas.events import EmbeddableRecord
from stack import runtime
from stack.roles import HttpRole
from stack.runtime import Stack
from stack.stores import open_store
from tests.brokers import TestBroker
from tests.e2e.conftest import poll, read_topic

pytestmark = pytest.mark.integration


def seed(settings: Settings) -> None:
    store = open_store(settings, dim=384)
    try:
        Indexer(store=store, embedder=None, bm25=Bm25Encoder()).index_batch(
            [
                EmbeddableRecord.from_dict(
                    {
                        "id": f"m{i}",
                        "workspace_id": "ws",
                        "agent_id": "a1",
                        "ts": "2026-03-01T00:00:00Z",
                        "entry_type": "summary.generated",
                        "severity": "info",
                        "payload": {},
                        "summary": f"the checkout service ran out of memory, case {i}",
                        "base_importance": 0.7,
                        "accepted_at": datetime(2026, 3, 1, tzinfo=UTC),
                    }
                )
                for i in range(3)
            ]
        )
    finally:
        store.close()


async def test_serve_answers_while_kafka_is_down_and_delivers_the_buffer_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "BROKER_DEAD_AFTER_S", 1.0)  # the watchdog would have stopped it by now
    monkeypatch.setattr(runtime, "WATCH_EVERY_S", 0.2)
    kafka_port = free_port()  # nothing listens there (yet)
    settings = Settings(
        kafka_bootstrap=f"127.0.0.1:{kafka_port}",
        data_dir=tmp_path,
        http_port=free_port(),
        embed_model="none",
        referenced_buffer=3,
        topic_partitions=1,
    )
    seed(settings)
    stack = Stack(settings, roles=(HttpRole.name,))
    broker: TestBroker | None = None
    try:
        await stack.start()  # no BrokerUnavailable: serving does not need Kafka
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.http_port}", timeout=10) as http:
            for _ in range(5):
                r = await http.post(
                    "/v1/recall", json={"workspace_id": "ws", "agent_id": "a1", "query": "checkout memory", "k": 2}
                )
                assert r.status_code == 200 and len(r.json()["hits"]) == 2, r.text
            health = await http.get("/healthz")
            assert health.status_code == 200
            assert health.json()["kafka"] == "degraded" and health.json()["status"] == "degraded"
            await poll(lambda: stack.status.down_since is not None, timeout=5, what="the watchdog saw Kafka down")
            await poll(lambda: _running_for(stack, 1.5), timeout=10, what="down longer than BROKER_DEAD_AFTER_S")
            assert not stack._stop.is_set() and stack.exit_code == 0  # still serving
            text = (await http.get("/metrics")).text
            assert "episodic_referenced_dropped_total 2.0" in text  # 5 events, a buffer of 3
            assert "episodic_referenced_buffered 3.0" in text
            forget = {"workspace_id": "ws", "entry_ids": ["m0"]}
            r = await http.post("/v1/memory/forget", params={"wait": 0}, json=forget)
            assert r.status_code == 503 and "nothing has been removed" in r.json()["error"], r.text

            broker = await asyncio.to_thread(TestBroker, port=kafka_port)  # Kafka is back
            role = stack.role(HttpRole)
            assert role is not None and role.publisher is not None
            publisher = role.publisher
            await poll(lambda: publisher.buffered == 0, timeout=60, what="the buffer delivered")
            events = await read_topic(broker.bootstrap, "memory.referenced", expect=3, timeout=30)
            assert len(events) == 3 and all(json.loads(e.value)["workspace_id"] == "ws" for e in events)
            # a forget goes through the producer the service connected (queued: no consumer here applies it)
            r = await http.post("/v1/memory/forget", params={"wait": 0}, json=forget)
            assert r.status_code == 202 and r.json()["status"] == "pending", r.text
            queued = await read_topic(broker.bootstrap, "journal.embeddable", expect=1, timeout=30)
            assert [json.loads(e.value)["forget_id"] for e in queued] == [r.json()["forget_id"]]
            await poll(lambda: _kafka_ok(http), timeout=10, what="/healthz says kafka ok again")
    finally:
        await stack.stop()
        if broker is not None:
            broker.close()


def _running_for(stack: Stack, seconds: float) -> bool:
    return stack.status.down_since is not None and time.monotonic() - stack.status.down_since > seconds


async def _kafka_ok(http: httpx.AsyncClient) -> bool:
    return bool((await http.get("/healthz")).json()["kafka"] == "ok")


async def test_a_stack_that_needs_kafka_still_refuses_to_start_without_it(tmp_path: Path) -> None:
    settings = Settings(kafka_bootstrap=f"127.0.0.1:{free_port()}", data_dir=tmp_path, embed_model="none")
    stack = Stack(settings, roles=("embedder",))
    try:
        with pytest.raises(Exception, match="cannot reach Kafka"):
            await stack.start()
    finally:
        await stack.stop()
