"""Honest answers over the real store (Qdrant Edge) and the real model: dense recall says when memories
still wait for their vector, crew_shared includes the agent's own memories without a crew, garbage stored
by hand never becomes a 500, and the body limit holds for chunked requests on a real server."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from episodic.domain.identity import point_id
from episodic.indexing.indexer import Indexer
from episodic.kernel.errors import BrokerUnavailable
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import MemoryPoint
from episodic.kernel.settings import Settings
from episodic.store.edge import EdgeStore
from episodic.store.sparse import Bm25Encoder
from recall.app import create_app
from schemas.events import EmbeddableRecord
from stack.roles import HttpRole, Resources

pytestmark = pytest.mark.integration


def rec(i: str, summary: str, *, agent: str = "a1", crew: str | None = "c1", base: float = 0.5) -> EmbeddableRecord:
    return EmbeddableRecord.from_dict(
        {
            "id": i, "workspace_id": "ws", "agent_id": agent, "crew_id": crew, "ts": "2026-02-01T10:00:00Z",
            "entry_type": "summary.generated", "severity": "info", "summary": summary, "payload": {"i": i},
            "base_importance": base, "accepted_at": datetime(2026, 2, 1, 10, 0, 1, tzinfo=UTC),
        }
    )  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EdgeStore]:
    s = EdgeStore(tmp_path / "edge")
    s.ensure_collection(384)
    try:
        yield s
    finally:
        s.close()


def client(store: EdgeStore, embedder: Any) -> TestClient:
    app = create_app(
        settings=Settings(),
        store=store,
        embedder=embedder,
        bm25=Bm25Encoder(),
        publish=lambda *a: None,
        status=lambda: {"kafka": "ok", "kafka_bootstrap": "x:1"},
        metrics=Metrics(CollectorRegistry()),
    )
    return TestClient(app)


def post(c: TestClient, path: str = "/v1/recall", **body: Any) -> dict[str, Any]:
    r = c.post(path, json={"workspace_id": "ws", "agent_id": "a1", "query": "checkout out of memory", **body})
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def test_dense_recall_is_degraded_while_memories_wait_for_their_vector(store: EdgeStore, embedder: Any) -> None:
    ix = Indexer(store=store, embedder=embedder, bm25=Bm25Encoder())
    ix.index_batch([rec("inline", "checkout crashed: out of memory in the heap")])
    ix.index_batch([rec("later", "checkout out of memory again after the deploy")], defer_dense=True)
    c = client(store, embedder)
    dense = post(c, mode="dense", k=10)
    assert dense["degraded"] is True  # "later" is invisible to the dense leg: said, not silent
    assert [h["entry_id"] for h in dense["hits"]] == ["inline"]
    hybrid = post(c, mode="hybrid", k=10)  # its BM25 legs find the memory without a vector
    assert hybrid["degraded"] is False and {h["entry_id"] for h in hybrid["hits"]} == {"inline", "later"}
    other = post(c, mode="dense", agent_id="a2")  # another agent's scope has nothing pending
    assert other["degraded"] is False
    assert ix.densify(10).written == 1
    done = post(c, mode="dense", k=10)
    assert done["degraded"] is False and {h["entry_id"] for h in done["hits"]} == {"inline", "later"}


def test_crew_shared_includes_the_agents_own_memories_without_a_crew(store: EdgeStore, embedder: Any) -> None:
    Indexer(store=store, embedder=embedder, bm25=Bm25Encoder()).index_batch(
        [
            rec("own-no-crew", "checkout out of memory: my own note, written outside any crew", crew=None),
            rec("own-other-crew", "checkout out of memory, noted for another crew", crew="c9"),
            rec("mate-high", "checkout out of memory rule for the crew", agent="a2", base=0.9),
            rec("mate-low", "checkout out of memory chatter", agent="a2", base=0.3),
            rec("stranger-no-crew", "checkout out of memory elsewhere", agent="a3", crew=None, base=0.9),
        ]
    )
    c = client(store, embedder)
    for mode in ("hybrid", "dense", "sparse"):
        got = {h["entry_id"] for h in post(c, scope="crew_shared", crew_id="c1", mode=mode, k=50)["hits"]}
        assert got == {"own-no-crew", "own-other-crew", "mate-high"}, mode
    crew_only = post(c, scope="crew_shared", crew_id="c1", agent_id=None, k=50)["hits"]
    assert {h["entry_id"] for h in crew_only} == {"mate-high"}


def _garbage_points(bm25: Bm25Encoder, embedder: Any) -> list[MemoryPoint]:
    text = "checkout out of memory garbage record"
    rows = embedder.embed_documents([text])[0].tolist()
    payloads: list[dict[str, Any]] = [
        {  # every field of the wrong type
            "entry_id": 42, "workspace_id": "ws", "agent_id": "a1", "crew_id": 7, "summary": {"not": "text"},
            "ts": 1234, "entry_type": ["x"], "severity": None, "payload": "not an object", "aliases": "dup",
            "occurrences": "many", "importance_score": "high", "relations": "none", "links": 5,
            "folded": "x", "agents": 3,
        },
        {"workspace_id": "ws", "agent_id": "a1"},  # nearly nothing
        {  # odd but typed values
            "entry_id": "odd", "workspace_id": "ws", "agent_id": "a1", "summary": "x" * 20_000, "ts": "yesterday",
            "aliases": [1, None, "kept", {"a": 1}], "occurrences": 1e30, "importance_score": -3,
            "relations": [{"dst": None}, "junk"], "payload": {"deep": [[[[]]]]},
            "folded": [{"entry_id": 5}, "junk", {"entry_id": "f1", "aliases": [1, "f2"]}], "agents": ["a1", 7],
        },
    ]  # fmt: skip
    return [
        MemoryPoint(point_id=point_id("ws", f"garbage-{i}"), sparse=bm25.document(text), payload=p, dense=rows)
        for i, p in enumerate(payloads)
    ]


def test_garbage_stored_by_hand_never_becomes_a_500(store: EdgeStore, embedder: Any) -> None:
    bm25 = Bm25Encoder()
    store.upsert(_garbage_points(bm25, embedder))
    Indexer(store=store, embedder=embedder, bm25=bm25).index_batch([rec("fine", "checkout out of memory, fine")])
    c = client(store, embedder)
    for mode in ("hybrid", "dense", "sparse"):
        for walk in (0, 1):
            data = post(c, mode=mode, walk_depth=walk, k=10)
            assert "fine" in {h["entry_id"] for h in data["hits"]}, (mode, walk)
            assert len(data["hits"]) == 4, (mode, walk)  # the garbage is answered, coerced
    render = post(c, "/v1/recall/render", k=10, max_chars=2000)
    assert render["text"].startswith("<recalled-memory") and len(render["text"]) <= 2000
    odd = next(h for h in post(c, mode="sparse", k=10)["hits"] if h["entry_id"] == "odd")
    assert odd["aliases"] == ["kept"] and odd["occurrences"] == int(1e30) and odd["age_seconds"] == 0
    assert odd["folded"] == ["f1", "f2"] and odd["agents"] == ["a1"]  # near-duplicate folds, coerced
    worst = next(h for h in post(c, mode="sparse", k=10)["hits"] if h["entry_id"] == "42")
    assert worst["summary"] == "" and worst["payload"] == {} and worst["aliases"] == [] and worst["occurrences"] == 1
    assert worst["folded"] == [] and worst["agents"] == []
    stats = c.get("/v1/memory/stats", params={"workspace_id": "ws"})
    assert stats.status_code == 200 and stats.json()["indexed"] == 4


async def no_kafka() -> Any:
    raise BrokerUnavailable("no Kafka in this test")


async def test_the_body_limit_holds_for_chunked_requests_on_a_real_server(tmp_path: Path, store: EdgeStore) -> None:
    settings = Settings(data_dir=tmp_path, http_port=0, embed_model="none")
    role = HttpRole()
    res = Resources(
        settings=settings,
        metrics=Metrics(CollectorRegistry()),
        producer=None,
        kafka_connect=no_kafka,
        status=lambda: {"kafka": "ok", "kafka_bootstrap": "x:1"},
        fail=lambda code: None,
        store=store,
        bm25=Bm25Encoder(),
    )
    try:
        await role.start(res)

        async def body() -> Any:
            yield b'{"workspace_id": "ws", "agent_id": "a1", "query": "'
            for _ in range(64):
                yield b"y" * 32768
            yield b'"}'

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{role.http_port}", timeout=10) as http:
            r = await http.post("/v1/recall", content=body(), headers={"content-type": "application/json"})
            assert r.request.headers.get("transfer-encoding") == "chunked"
            assert r.status_code == 413 and r.json()["error"] == "body: larger than 1048576 bytes"
            ok = await http.get("/healthz")  # the server is fine afterwards
            assert ok.status_code == 200
    finally:
        await role.drain()
