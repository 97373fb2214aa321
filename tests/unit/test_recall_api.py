"""The recall HTTP API over a fake store: 4xx that name the field, auth, 503, events, metrics, OpenAPI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from episodic.kernel.errors import StoreUnavailable
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import MemoryStore, ScopeFilter, StoredHit
from episodic.kernel.settings import Settings
from episodic.store.sparse import Bm25Encoder
from recall.app import InsecureBind, check_bind, create_app
from schemas.events import ReferencedEvent
from schemas.topics import MEMORY_REFERENCED

TOK_A = "token-for-workspace-a"
TOK_ADMIN = "the-admin-token-0123"
DIM = 4


def _payload(ws: str, eid: str, agent: str = "ag", summary: str = "deploy failed: OOM") -> dict[str, Any]:
    return {
        "entry_id": eid, "workspace_id": ws, "crew_id": "crew", "agent_id": agent, "run_id": None,
        "ts": "2026-01-01T00:00:00Z", "entry_type": "peer.escalation", "severity": "warn",
        "summary": summary, "payload": {"k": 1}, "importance_score": 0.9, "aliases": ["dup-1"],
    }  # fmt: skip


class FakeStore(MemoryStore):
    """Answers every query with the stored hits of the filter's workspace, or fails when told to."""

    def __init__(self) -> None:
        self.points = [
            StoredHit("p1", 0.8, _payload("ws-a", "e1"), [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]),
            StoredHit("p2", 0.5, _payload("ws-a", "e2", summary="the cache was cold"), None),
            StoredHit("p3", 0.9, _payload("ws-b", "e3")),
        ]
        self.fail = False
        self.leak = False
        self.quarantined = 0
        self.calls: list[tuple[str, ScopeFilter, int]] = []
        self.fusions: list[Any] = []  # the hybrid queries' fusions
        self.listed: list[tuple[str, dict[str, Any]]] = []  # what `page` lists (the common words' sample)

    def _q(self, kind: str, scope: ScopeFilter, limit: int) -> list[StoredHit]:
        self.calls.append((kind, scope, limit))
        if self.fail:
            raise StoreUnavailable("connection refused")
        if self.leak:
            return list(self.points)
        return [p for p in self.points if p.payload["workspace_id"] == scope.workspace_id][:limit]

    def ensure_collection(self, dim: int) -> None: ...
    def upsert(self, points: Any) -> None: ...
    def upsert_if(self, points: Any, expect: Any, *, writer: str) -> list[str]:
        return []

    def update_memories(self, point_ids: Any, change: Any, **kw: Any) -> Any:
        raise AssertionError("the recall API writes no memory")

    def retrieve(self, point_ids: Any) -> dict[str, dict[str, Any]]:
        return {}

    def find_by_dedup_keys(self, workspace_id: Any, keys: Any) -> dict[str, Any]:
        return {}

    def find_by_alias(self, workspace_id: Any, entry_ids: Any) -> dict[str, str]:
        return {}

    def set_payload(self, point_id: Any, fields: Any) -> None: ...
    def set_dense(self, point_id: Any, dense: Any, fields: Any) -> None: ...
    def delete(self, point_ids: Any) -> None: ...
    def missing_dense(self, limit: int, *, quarantine_after: int | None = None) -> list[Any]:
        return []

    def count_without_dense(self, scope: ScopeFilter, *, using: Any = None) -> int:
        return len([p for p in self.points if p.payload["workspace_id"] == scope.workspace_id and p.dense is None])

    def count_quarantined(self, workspace_id: str | None, quarantine_after: int) -> int:
        return self.quarantined

    def backfill_pieces(self, limit: int) -> int:
        return 0  # its hits carry no vectors to count

    def find_entries(
        self, scope: ScopeFilter, entry_ids: Any, *, with_dense: bool = False, using: Any = None
    ) -> list[StoredHit]:
        return []

    def select(self, selection: Any) -> Any:
        return iter(())

    def page(self, selection: Any, after: Any, limit: int) -> Any:
        return self.listed[:limit], None

    def linked_to(self, workspace_id: Any, entry_ids: Any) -> list[Any]:
        return []

    def add_relations(self, relations: Any) -> int:
        return 0

    def relations_of(self, workspace_id: Any, entry_ids: Any) -> list[Any]:
        return []

    def remove_edges_to(self, workspace_id: Any, entry_ids: Any, *, sparing: Any = ()) -> int:
        return 0

    def fetch(self, point_ids: Any, *, with_dense: bool = False, using: Any = None) -> dict[str, Any]:
        return {}

    def scroll_page(self, offset: Any, limit: int, *, fields: Any = None) -> tuple[list[Any], None]:
        return [], None

    def set_payloads(self, updates: Any) -> int:
        return 0

    def similar_to(
        self,
        workspace_id: Any,
        rows: Any,
        limit: int,
        *,
        exclude_entry_ids: Any = (),
        fields: Any = None,
        using: Any = None,
    ) -> list[Any]:
        return []

    def count(self, workspace_id: str | None = None, *, has_dense: bool | None = None) -> int:
        if self.fail:
            raise StoreUnavailable("connection refused")
        pts = [p for p in self.points if workspace_id is None or p.payload["workspace_id"] == workspace_id]
        if has_dense is not None:
            pts = [p for p in pts if (p.dense is not None) == has_dense]
        return len(pts)

    def workspaces(self, limit: int = 1_000_000) -> dict[str, int]:
        return {}

    def scan_workspace(self, workspace_id: str, *, with_dense: bool = False) -> Any:
        return iter(())

    def query_dense(self, vector: Any, scope: ScopeFilter, limit: int, *, with_dense: bool = False) -> Any:
        return self._q("dense", scope, limit)

    def query_sparse(self, sparse: Any, scope: ScopeFilter, limit: int, *, with_dense: bool = False) -> Any:
        return self._q("sparse", scope, limit)

    def query_hybrid(self, vector: Any, sparse: Any, scope: ScopeFilter, limit: int, fusion: Any, *,
                     with_dense: bool = False) -> Any:  # fmt: skip
        assert fusion.prefetch_limit >= 100
        self.fusions.append(fusion)
        return self._q("hybrid", scope, limit)

    def flush(self) -> None: ...
    def close(self) -> None: ...


class FakeEmbedder:
    dim = DIM
    model_id = "fake"
    pieces = "whole"

    def embed_documents(self, texts: list[str]) -> list[np.ndarray]:
        return [np.eye(DIM, dtype=np.float32)[:1] for _ in texts]

    def embed_query(self, text: str) -> np.ndarray:
        return np.array([0.6, 0.8, 0.0, 0.0], dtype=np.float32)


@pytest.fixture(scope="module")
def bm25() -> Bm25Encoder:
    return Bm25Encoder()


class Env:
    def __init__(
        self, bm25: Bm25Encoder, *, tokens: Path | None = None, embedder: Any = None, settings: Settings | None = None
    ) -> None:
        self.store = FakeStore()
        self.metrics = Metrics()
        self.published: list[tuple[str, str | None, dict[str, Any]]] = []
        self.app = create_app(
            settings=(settings or Settings()).model_copy(update={"tokens_file": tokens}),
            store=self.store,
            embedder=embedder,
            bm25=bm25,
            publish=lambda t, k, v: self.published.append((t, k, v)),
            status=lambda: {"kafka": "ok", "kafka_bootstrap": "127.0.0.1:9092", "journal": "durable"},
            metrics=self.metrics,
        )
        self.client = TestClient(self.app)

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def env(bm25: Bm25Encoder) -> Env:
    return Env(bm25, embedder=FakeEmbedder())


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    f = tmp_path / "tokens.json"
    f.write_text(
        json.dumps({"tokens": [{"token": TOK_A, "workspaces": ["ws-a"]}, {"token": TOK_ADMIN, "admin": True}]})
    )
    return f


OK = {"workspace_id": "ws-a", "agent_id": "ag", "query": "deploy OOM"}


def test_recall_returns_every_spec_field_and_publishes_one_event(env: Env) -> None:
    r = env.client.post("/v1/recall", json={**OK, "k": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "hybrid" and body["degraded"] is False
    assert [h["entry_id"] for h in body["hits"]] == ["e1", "e2"]
    fields = {"entry_id", "score", "age_seconds", "summary", "entry_type", "severity", "agent_id",
              "crew_id", "ts", "payload", "via", "aliases", "occurrences"}  # fmt: skip
    for h in body["hits"]:
        assert fields <= set(h)
        assert h["via"] == "direct" and h["age_seconds"] > 0 and h["aliases"] == ["dup-1"]
        assert h["occurrences"] == 2  # itself and its duplicate (the stored count is missing: at least that)
    assert len(env.published) == 1
    topic, key, event = env.published[0]
    assert topic == MEMORY_REFERENCED and key == "ws-a"
    assert event["workspace_id"] == "ws-a" and event["scope"] == "own" and event["mode"] == "hybrid"
    assert event["at"].endswith("Z")
    # cosine: max over the point's chunks (0.8 for the second chunk); None without a dense vector
    assert event["hits"] == [
        {"entry_id": "e1", "score": 0.8, "cosine": pytest.approx(0.8)},
        {"entry_id": "e2", "score": 0.5, "cosine": None},
    ]
    assert env.metric("episodic_recall_duration_seconds_count", mode="hybrid") == 1
    assert env.metric("episodic_recall_hits_sum") == 2
    # a fresh id per event: the importance agent counts a re-delivered event once, and two recalls twice
    assert ReferencedEvent.from_dict(event).event_id == event["event_id"] and len(event["event_id"]) == 32
    env.client.post("/v1/recall", json={**OK, "k": 5})
    assert env.published[1][2]["event_id"] != event["event_id"]


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_modes_reach_their_leg(env: Env, mode: str) -> None:
    r = env.client.post("/v1/recall", json={**OK, "mode": mode})
    assert r.status_code == 200 and r.json()["mode"] == mode
    assert env.store.calls[-1][0] == mode


def test_a_hybrid_query_of_stop_words_only_stays_hybrid(env: Env) -> None:
    """No searchable term: the hybrid's dense leg ranks alone (its piece prior included), not the dense mode
    (cosine x importance), so the order is the one that leg gives in any other hybrid query."""
    r = env.client.post("/v1/recall", json={**OK, "query": "what did you do to it?", "mode": "hybrid"})
    assert r.status_code == 200 and r.json()["mode"] == "hybrid"
    assert env.store.calls[-1][0] == "hybrid"
    r = env.client.post("/v1/recall", json={**OK, "query": "what did you do to it?", "mode": "sparse"})
    assert r.status_code == 200 and r.json()["hits"] == []  # nothing can match lexically


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_sparse_only_answers_dense_and_hybrid_degraded(bm25: Bm25Encoder, mode: str) -> None:
    env = Env(bm25, embedder=None)
    r = env.client.post("/v1/recall", json={**OK, "mode": mode})
    assert r.status_code == 200
    assert r.json()["degraded"] is True and r.json()["mode"] == mode
    assert env.store.calls[-1][0] == "sparse"
    assert env.metric("episodic_recall_degraded_total") == 1
    assert env.published[0][2]["hits"][0]["cosine"] is None
    assert env.client.get("/healthz").json()["episodic"] == "sparse-only"


def test_a_hybrid_query_naming_a_time_brings_its_time_legs_by_default(env: Env) -> None:
    """Issue 46: the time a question names ("in May 2023") reaches the store as the spans its time legs search
    (docs/quality.md, "Conversations"); a question naming none, or the time legs set off, adds none. The
    run-level re-rank is an option, off by default."""
    env.client.post("/v1/recall", json={**OK, "query": "what did we deploy in May 2023?", "mode": "hybrid"})
    fusion = env.store.fusions[-1]
    assert (fusion.time_weight, fusion.run_weight) == (1.0, 0.0)
    assert fusion.when == (("2023-05-01T00:00:00Z", "2023-06-01T00:00:00Z"),)
    env.client.post("/v1/recall", json={**OK, "query": "what did we deploy?", "mode": "hybrid"})
    assert env.store.fusions[-1].when == ()
    off = Env(Bm25Encoder(), embedder=FakeEmbedder(), settings=Settings(rrf_time_weight=0))
    off.client.post("/v1/recall", json={**OK, "query": "what did we deploy in May 2023?", "mode": "hybrid"})
    assert off.store.fusions[-1].when == ()


def test_as_of_is_when_the_query_s_relative_times_are_read_from(env: Env) -> None:
    """Issue 46: a question asked on 20 June 2023 ("two weeks ago", "last May") reaches the time legs as the spans
    of that date, whatever the service's clock says; without `as_of` they are read from the clock. It filters
    nothing (the scope's filters stay empty), and an absolute time is the same either way."""
    asked = {**OK, "mode": "hybrid", "as_of": "2023-06-20T14:00:00+02:00"}
    env.client.post("/v1/recall", json={**asked, "query": "what did we deploy two weeks ago?"})
    assert env.store.fusions[-1].when == (("2023-05-30T12:00:00Z", "2023-06-13T12:00:00Z"),)
    assert env.store.calls[-1][1].filters.empty
    env.client.post("/v1/recall/render", json={**asked, "query": "what did we deploy last May?"})
    assert env.store.fusions[-1].when == (("2023-05-01T00:00:00Z", "2023-06-01T00:00:00Z"),)
    env.client.post("/v1/recall", json={**OK, "mode": "hybrid", "query": "what did we deploy last May?"})
    (clock,) = env.store.fusions[-1].when  # the service's clock: a May after 2023's
    assert clock[0].endswith("-05-01T00:00:00Z") and clock[0] > "2024"
    env.client.post("/v1/recall", json={**asked, "query": "what did we deploy in July 2021?"})
    assert env.store.fusions[-1].when == (("2021-07-01T00:00:00Z", "2021-08-01T00:00:00Z"),)


def test_the_hybrid_s_dense_query_leaves_out_the_words_most_memories_hold(bm25: Bm25Encoder) -> None:
    """Issue 46: in a workspace where most memories name Melanie, the hybrid embeds its query without the name
    (the BM25 legs keep it); dense mode, and the setting at 0, embed the whole query."""

    class Recording(FakeEmbedder):
        def __init__(self) -> None:
            self.queries: list[str] = []

        def embed_query(self, text: str) -> np.ndarray:
            self.queries.append(text)
            return super().embed_query(text)

    chat = ["Melanie: I run to de-stress.", "Caroline: Nice, Melanie!", "Melanie: pottery too.", "Caroline: cool."]
    for common, want in ((None, "What does do to de-stress?"), (0.0, "What does Melanie do to de-stress?")):
        emb = Recording()
        env = Env(bm25, embedder=emb, settings=Settings() if common is None else Settings(dense_query_common=common))
        env.store.listed = [(f"p{i}", {"summary": t}) for i, t in enumerate(chat)]
        query = {**OK, "query": "What does Melanie do to de-stress?"}
        assert env.client.post("/v1/recall", json={**query, "mode": "hybrid"}).status_code == 200
        assert env.client.post("/v1/recall", json={**query, "mode": "dense"}).status_code == 200
        assert emb.queries == [want, "What does Melanie do to de-stress?"]


def test_crew_shared_may_omit_agent(env: Env) -> None:
    r = env.client.post("/v1/recall", json={"workspace_id": "ws-a", "crew_id": "crew", "scope": "crew_shared",
                                            "query": "q"})  # fmt: skip
    assert r.status_code == 200
    scope = env.store.calls[-1][1]
    assert scope.scope == "crew_shared" and scope.agent_id is None and scope.high_value == 0.6


BAD: list[tuple[Any, str]] = [
    ({**OK, "k": 0}, "k"),
    ({**OK, "k": 51}, "k"),
    ({**OK, "k": -3}, "k"),
    ({**OK, "k": "5"}, "k"),
    ({**OK, "k": 2.5}, "k"),
    ({**OK, "k": True}, "k"),
    ({**OK, "query": ""}, "query"),
    ({**OK, "query": "   \n"}, "query"),
    ({**OK, "query": "x" * 4097}, "query"),
    ({**OK, "query": 42}, "query"),
    ({**OK, "query": None}, "query"),
    ({"workspace_id": "ws-a", "agent_id": "ag"}, "query"),
    ({**OK, "mode": "semantic"}, "mode"),
    ({**OK, "mode": "HYBRID"}, "mode"),
    ({**OK, "scope": "everyone"}, "scope"),
    ({"workspace_id": "ws-a", "query": "q"}, "agent_id"),
    ({"workspace_id": "ws-a", "query": "q", "agent_id": ""}, "agent_id"),
    ({"workspace_id": "ws-a", "query": "q", "scope": "crew_shared", "agent_id": "ag"}, "crew_id"),
    ({**OK, "walk_depth": 2}, "walk_depth"),
    ({**OK, "walk_depth": "1"}, "walk_depth"),
    ({**OK, "garbage": 1}, "garbage"),
    ({**OK, "workspace_id": ""}, "workspace_id"),
    ({**OK, "workspace_id": "w" * 129}, "workspace_id"),
    ({**OK, "workspace_id": None}, "workspace_id"),
    ({"agent_id": "ag", "query": "q"}, "workspace_id"),
    ({**OK, "agent_id": ["ag"]}, "agent_id"),
    ([OK], "body"),
    ("just a string", "body"),
    # filters (SPEC §11)
    ({**OK, "since": "yesterday"}, "since"),
    ({**OK, "since": "2026-01-01T00:00:00"}, "since"),  # no offset
    ({**OK, "since": 1767225600}, "since"),
    ({**OK, "until": "2026-13-01T00:00:00Z"}, "until"),
    ({**OK, "since": "2026-02-01T00:00:00Z", "until": "2026-01-31T23:00:00-01:00"}, "until"),  # the same instant
    ({**OK, "entry_types": []}, "entry_types"),
    ({**OK, "entry_types": "peer.escalation"}, "entry_types"),
    ({**OK, "entry_types": [""]}, "entry_types.0"),
    ({**OK, "entry_types": ["t"] * 51}, "entry_types"),
    ({**OK, "min_severity": "fatal"}, "min_severity"),
    ({**OK, "exclude_run_id": ""}, "exclude_run_id"),
    # when the question is asked (issue 46)
    ({**OK, "as_of": "two weeks ago"}, "as_of"),
    ({**OK, "as_of": "2023-06-20T12:00:00"}, "as_of"),  # no offset
    ({**OK, "as_of": 1687262400}, "as_of"),
    ({**OK, "as_of": "2023-02-30T12:00:00Z"}, "as_of"),
]


def test_filters_reach_the_store_inside_the_scope(env: Env) -> None:
    body = {**OK, "since": "2026-01-01T02:00:00+02:00", "until": "2026-02-01T00:00:00.5Z", "min_severity": "warn",
            "entry_types": ["a", "b", "a"], "run_id": "r1", "exclude_run_id": "r0", "crew_id": "crew"}  # fmt: skip
    assert env.client.post("/v1/recall", json=body).status_code == 200
    f = env.store.calls[-1][1].filters
    assert (f.since, f.until) == ("2026-01-01T00:00:00Z", "2026-02-01T00:00:00.500000Z")
    assert f.severities == ("warn", "error") and f.entry_types == ("a", "b")
    assert (f.run_id, f.exclude_run_id, f.crew_id) == ("r1", "r0", "crew")  # crew narrows scope own
    # on render, run_id is the run of a pending nudge, not a filter: it may equal exclude_run_id
    render = {**OK, "run_id": "r1", "exclude_run_id": "r1"}
    assert env.client.post("/v1/recall/render", json=render).status_code == 200
    f = env.store.calls[-1][1].filters
    assert (f.run_id, f.exclude_run_id) == (None, "r1")
    r = env.client.post("/v1/recall", json=render)
    assert r.status_code == 422 and r.json()["error"].startswith("exclude_run_id:")
    # crew_shared: crew_id is the scope, not a narrowing; no filters at all: an empty filter
    shared = {"workspace_id": "ws-a", "scope": "crew_shared", "crew_id": "crew", "query": "q"}
    assert env.client.post("/v1/recall", json=shared).status_code == 200
    assert env.store.calls[-1][1].filters.empty


@pytest.mark.parametrize(("body", "field"), BAD)
@pytest.mark.parametrize("path", ["/v1/recall", "/v1/recall/render"])
def test_bad_requests_are_422_naming_the_field(env: Env, body: Any, field: str, path: str) -> None:
    r = env.client.post(path, json=body)
    assert r.status_code == 422, r.text
    data = r.json()
    assert data["error"].startswith(f"{field}: "), data
    assert isinstance(data["detail"], list) and data["detail"]
    assert env.published == []


@pytest.mark.parametrize("raw", [b"{not json", b"", b'{"workspace_id": ', b"\xff\xfe", b"null", b"[]"])
def test_body_that_is_not_a_json_object_is_422(env: Env, raw: bytes) -> None:
    r = env.client.post("/v1/recall", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith("body: ")


def test_huge_body_is_413(env: Env) -> None:
    r = env.client.post("/v1/recall", content=b"x" * (2 << 20), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"].startswith("body: ")


def test_a_huge_chunked_body_is_413_too(env: Env) -> None:
    """No Content-Length (chunked transfer encoding): the limit holds on the bytes read."""

    def chunks() -> Any:
        yield b'{"workspace_id": "ws-a", "agent_id": "ag", "query": "'
        for _ in range(40):
            yield b"x" * 65536
        yield b'"}'

    r = env.client.post("/v1/recall", content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in {k.lower() for k in r.request.headers}
    assert r.status_code == 413 and r.json()["error"] == "body: larger than 1048576 bytes"
    small = env.client.post(
        "/v1/recall", content=iter([json.dumps(OK).encode()]), headers={"content-type": "application/json"}
    )
    assert small.status_code == 200, small.text  # a chunked body within the limit is read as usual


@pytest.mark.parametrize(
    ("extra", "field"),
    [({"max_chars": 10}, "max_chars"), ({"max_chars": 10**7}, "max_chars"), ({"max_tokens": 5}, "max_tokens"),
     ({"max_chars": 1000, "max_tokens": 250}, "max_tokens"), ({"max_chars": "1000"}, "max_chars"),
     ({"run_id": ""}, "run_id")],
)  # fmt: skip
def test_bad_render_budgets_are_422(env: Env, extra: dict[str, Any], field: str) -> None:
    r = env.client.post("/v1/recall/render", json={**OK, **extra})
    assert r.status_code == 422
    assert r.json()["error"].startswith(f"{field}: ")


def test_render_marks_only_what_made_it_into_the_text(env: Env) -> None:
    env.store.points[0].payload["summary"] = "OOM " + "detail " * 2000
    env.store.points[1].payload["summary"] = "cold cache " * 2000
    r = env.client.post("/v1/recall/render", json={**OK, "max_chars": 400, "run_id": "run-1"})
    assert r.status_code == 200
    data = r.json()
    assert len(data["text"]) <= 400
    assert data["text"].startswith("<recalled-memory>\nUNTRUSTED HINTS")
    assert data["nudge"] is None
    shown = [h["entry_id"] for h in data["hits"]]
    assert shown == ["e1"]
    assert [h["entry_id"] for h in env.published[0][2]["hits"]] == shown
    r = env.client.post("/v1/recall/render", json={**OK, "max_tokens": 1000})
    assert len(r.json()["text"]) <= 4000 and len(r.json()["hits"]) == 2


def test_store_failure_is_503_not_500(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    env.store.fail = True
    for path, body in [("/v1/recall", OK), ("/v1/recall/render", OK)]:
        r = env.client.post(path, json=body)
        assert r.status_code == 503 and r.json()["error"].startswith("memory store unavailable (ref ")
        # the raw store error stays in the log, under the reference the body gives
        assert "connection refused" not in r.text
        ref = r.json()["error"].split("ref ")[1].split(":")[0]
        assert any(ref in m and "connection refused" in m for m in caplog.messages)
    r = env.client.get("/v1/memory/stats", params={"workspace_id": "ws-a"})
    assert r.status_code == 503
    h = env.client.get("/healthz")
    assert h.status_code == 503 and h.json()["qdrant"] == "down" and h.json()["status"] == "degraded"
    assert env.published == []


def test_a_leaking_store_cannot_leak_through_the_engine(env: Env) -> None:
    env.store.leak = True
    r = env.client.post("/v1/recall", json={**OK, "k": 10})
    assert {h["entry_id"] for h in r.json()["hits"]} == {"e1", "e2"}


def test_stats_health_healthz_metrics_openapi(env: Env) -> None:
    assert env.client.get("/v1/memory/stats", params={"workspace_id": "ws-a"}).json() == {
        "indexed": 2, "dense": 1, "sparse_only": 1, "quarantined": 0,
    }  # fmt: skip
    env.store.quarantined = 1
    assert env.client.get("/v1/memory/stats").json()["indexed"] == 3
    assert env.client.get("/v1/memory/stats").json()["quarantined"] == 1
    r = env.client.get("/v1/memory/stats", params={"workspace_id": ""})
    assert r.status_code == 422 and r.json()["error"].startswith("workspace_id: ")
    r = env.client.get("/v1/memory/health", params={"workspace_id": "ws-a"})  # no state store in this app
    assert r.status_code == 503 and "health" in r.json()["error"]
    assert env.client.get("/v1/memory/health").json()["error"].startswith("workspace_id: ")
    assert env.client.get("/healthz").json() == {
        "status": "ok", "episodic": "vector", "kafka": "ok", "qdrant": "ok", "kafka_bootstrap": "127.0.0.1:9092",
        "journal": "durable",
        "context": "unavailable",  # the fake store has no context vector
    }  # fmt: skip
    env.client.post("/v1/recall", json=OK)
    m = env.client.get("/metrics")
    assert m.status_code == 200 and "text/plain" in m.headers["content-type"]
    assert 'episodic_recall_duration_seconds_count{mode="hybrid"} 1.0' in m.text
    spec = env.client.get("/openapi.json").json()
    for path in ["/v1/recall", "/v1/recall/render", "/v1/memory/stats", "/v1/memory/health", "/healthz", "/metrics"]:
        assert path in spec["paths"]
    req = spec["components"]["schemas"]["RecallRequest"]["properties"]
    assert req["k"]["maximum"] == 50 and req["k"]["minimum"] == 1
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    assert env.client.get("/nope").json()["error"] == "Not Found"


def test_auth_401_403_and_admin(bm25: Bm25Encoder, tokens_file: Path) -> None:
    env = Env(bm25, tokens=tokens_file, embedder=FakeEmbedder())
    c = env.client
    r = c.post("/v1/recall", json=OK)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert c.post("/v1/recall", json={"garbage": 1}).status_code == 401  # auth before validation
    assert c.post("/v1/recall", json=OK, headers={"Authorization": "Basic abc"}).status_code == 401
    assert c.post("/v1/recall", json=OK, headers={"Authorization": "Bearer wrong-token-xxxxxx"}).status_code == 401
    a = {"Authorization": f"Bearer {TOK_A}"}
    assert c.post("/v1/recall", json=OK, headers=a).status_code == 200
    r = c.post("/v1/recall", json={**OK, "workspace_id": "ws-b"}, headers=a)
    assert r.status_code == 403 and "ws-b" in r.json()["error"]
    assert c.post("/v1/recall/render", json={**OK, "workspace_id": "ws-b"}, headers=a).status_code == 403
    assert c.get("/v1/memory/stats", params={"workspace_id": "ws-b"}, headers=a).status_code == 403
    assert c.get("/v1/memory/stats", headers=a).status_code == 403
    assert c.get("/v1/memory/stats", params={"workspace_id": "ws-a"}, headers=a).status_code == 200
    adm = {"Authorization": f"Bearer {TOK_ADMIN}"}
    r = c.post("/v1/recall", json={**OK, "workspace_id": "ws-b"}, headers=adm)
    assert r.status_code == 200 and [h["entry_id"] for h in r.json()["hits"]] == ["e3"]
    assert c.get("/v1/memory/stats", headers=adm).json()["indexed"] == 3
    # unauthenticated on purpose
    assert c.get("/healthz").status_code == 200
    assert c.get("/metrics").status_code == 200
    assert c.get("/openapi.json").status_code == 200
    assert env.metric("episodic_auth_failures_total", reason="missing") == 2
    assert env.metric("episodic_auth_failures_total", reason="invalid") == 2
    assert env.metric("episodic_auth_failures_total", reason="forbidden") == 4
    # only the successful recalls published
    assert [e[2]["workspace_id"] for e in env.published] == ["ws-a", "ws-b"]


def test_publish_failure_does_not_fail_recall(env: Env) -> None:
    def boom(*a: Any) -> None:
        raise RuntimeError("broker down")

    env.app.state.services.publish = boom
    assert env.client.post("/v1/recall", json=OK).status_code == 200


def test_refuses_to_bind_beyond_loopback_without_tokens(bm25: Bm25Encoder, tokens_file: Path) -> None:
    check_bind("127.0.0.1", tokens_configured=False, insecure=False)
    check_bind("0.0.0.0", tokens_configured=True, insecure=False)
    check_bind("0.0.0.0", tokens_configured=False, insecure=True)
    with pytest.raises(InsecureBind, match="--insecure"):
        check_bind("0.0.0.0", tokens_configured=False, insecure=False)
    kw: dict[str, Any] = dict(store=FakeStore(), embedder=None, bm25=bm25, publish=lambda *a: None,
                              status=lambda: {}, metrics=Metrics())  # fmt: skip
    with pytest.raises(InsecureBind):
        create_app(settings=Settings(http_host="0.0.0.0"), **kw)
    create_app(settings=Settings(http_host="0.0.0.0"), insecure=True, **kw)
    create_app(settings=Settings(http_host="0.0.0.0", tokens_file=tokens_file), **kw)


def test_rendering_and_encoding_run_off_the_event_loop(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """In `episodic up` the loop also carries the gate and the consumer: the CPU work of a recall (the
    render of up to 50 hits of 16k characters, the response's validation and JSON) runs in the pool."""
    import asyncio

    from recall import routes

    seen: list[tuple[str, bool]] = []

    def on_loop() -> bool:
        try:
            asyncio.get_running_loop()
            return True
        except RuntimeError:
            return False

    real_render, real_json = routes.render, routes._json

    def render(*args: Any, **kwargs: Any) -> Any:
        seen.append(("render", on_loop()))
        return real_render(*args, **kwargs)

    def to_json(model: Any) -> Any:
        seen.append(("json", on_loop()))
        return real_json(model)

    monkeypatch.setattr(routes, "render", render)
    monkeypatch.setattr(routes, "_json", to_json)
    assert env.client.post("/v1/recall/render", json={**OK, "k": 50, "max_chars": 200_000}).status_code == 200
    assert env.client.post("/v1/recall", json=OK).status_code == 200
    assert seen == [("render", False), ("json", False), ("json", False)]
    assert len(env.published) == 2  # published from the loop, after the pool's work
