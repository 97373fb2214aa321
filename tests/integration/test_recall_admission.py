"""Recall admission (`EPISODIC_RECALL_CONCURRENCY`, recall/routes.py): with a limit, at most that many recalls
are computed at once and the rest wait their turn in arrival order; without one, every request runs as it
arrives. Over the real store and model, requests sent at once through the ASGI app."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from episodic.indexing.indexer import Indexer
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.store.edge import EdgeStore
from episodic.store.sparse import Bm25Encoder
from recall.app import create_app
from schemas.events import EmbeddableRecord

pytestmark = pytest.mark.integration


def record(i: str, summary: str, day: int) -> dict[str, Any]:
    return {
        "id": i, "workspace_id": "ws", "agent_id": "a1", "crew_id": "c1", "ts": f"2026-01-0{day + 1}T10:00:00Z",
        "run_id": None, "entry_type": "summary.generated", "severity": "info", "summary": summary, "payload": {},
        "base_importance": 0.5, "accepted_at": datetime(2026, 11, 1, tzinfo=UTC),
    }  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[tuple[EdgeStore, Bm25Encoder]]:
    store = EdgeStore(Path(tmp_path_factory.mktemp("admission")) / "edge")
    store.ensure_collection(embedder.dim)
    bm25 = Bm25Encoder()
    texts = ["the deploy failed on a quota error", "lunch moved to Friday", "the cache warmed"]
    records = [EmbeddableRecord.from_dict(record(f"m{i}", text, i)) for i, text in enumerate(texts)]
    Indexer(store=store, embedder=embedder, bm25=bm25).index_batch(records)
    try:
        yield store, bm25
    finally:
        store.close()


def burst(store: EdgeStore, bm25: Bm25Encoder, embedder: Any, limit: int, n: int) -> tuple[int, list[int], list[str]]:
    """`n` recalls sent one after the other, 60 ms apart, to an app with `EPISODIC_RECALL_CONCURRENCY=limit`:
    the most computed at once, the statuses, and the order they were computed in. Every recall is held inside
    the engine until the last one was sent, so those computed meanwhile are the ones let in."""
    app = create_app(
        settings=Settings(recall_concurrency=limit), store=store, embedder=embedder, bm25=bm25,
        publish=lambda *a: None, status=lambda: {"kafka": "ok", "kafka_bootstrap": "x"}, metrics=Metrics(),
    )  # fmt: skip
    engine = app.state.services.engine
    real = engine.recall
    lock = threading.Lock()
    now, most, order = 0, 0, []
    sent = threading.Event()

    def held(req: Any) -> Any:
        nonlocal now, most
        with lock:
            now += 1
            most = max(most, now)
            order.append(req.query)
        try:
            assert sent.wait(30)
            time.sleep(0.01)
            return real(req)
        finally:
            with lock:
                now -= 1

    engine.recall = held

    async def send() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            sent.set()
            warm = {"workspace_id": "ws", "agent_id": "a1", "query": "warm", "k": 2}
            assert (await client.post("/v1/recall", json=warm)).status_code == 200  # first-call costs out of the way
            order.clear()
            sent.clear()

            async def one(i: int) -> int:
                await asyncio.sleep(0.06 * i)  # arrival order: 0, 1, 2, ...
                body = {"workspace_id": "ws", "agent_id": "a1", "query": f"deploy quota {i}", "k": 2}
                return (await client.post("/v1/recall", json=body)).status_code

            async def release() -> None:
                await asyncio.sleep(0.06 * n + 0.1)
                sent.set()

            statuses, _ = await asyncio.gather(asyncio.gather(*(one(i) for i in range(n))), release())
            return list(statuses)

    statuses = asyncio.run(send())
    return most, statuses, order


def test_a_limit_bounds_the_recalls_computed_at_once_and_keeps_their_order(
    store: tuple[EdgeStore, Bm25Encoder], embedder: Any
) -> None:
    most, statuses, order = burst(*store, embedder, limit=2, n=8)
    assert statuses == [200] * 8
    assert most == 2
    # first come, first let in: two let in together start their threads in either order, no more
    assert all(abs(p - int(q.rsplit(" ", 1)[1])) < 2 for p, q in enumerate(order)), order
    most, statuses, order = burst(*store, embedder, limit=1, n=5)
    assert (most, statuses) == (1, [200] * 5)
    assert order == [f"deploy quota {i}" for i in range(5)]


def test_without_a_limit_every_recall_runs_as_it_arrives(store: tuple[EdgeStore, Bm25Encoder], embedder: Any) -> None:
    most, statuses, _ = burst(*store, embedder, limit=0, n=6)
    assert statuses == [200] * 6
    assert most == 6  # the thread pool runs them side by side
