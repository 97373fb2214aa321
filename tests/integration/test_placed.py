"""Every recall hit says why it stands where it does (`placed`), through `POST /v1/recall` and
`POST /v1/recall/render` over the real store and model: "direct" (its own score), "walk" (one hop along a
similar edge), "adjacent" (a run neighbour) and "newer" (right above the older memory it supersedes, the
supersession written by the real linker)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from html import unescape
from typing import Any

import pytest
from fastapi.testclient import TestClient

from episodic.domain.identity import point_id
from episodic.indexing.indexer import Indexer
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import Relation
from episodic.kernel.settings import Settings
from episodic.maintenance.linker import Linker
from episodic.store.edge import EdgeStore
from episodic.store.sparse import Bm25Encoder
from episodic_client.models import RecallResponse
from recall.app import create_app
from schemas.events import EmbeddableRecord, IndexedEvent

pytestmark = pytest.mark.integration

T = datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC)


def rec(i: str, summary: str, ts: str, run: str | None = None) -> EmbeddableRecord:
    return EmbeddableRecord.from_dict(
        {
            "id": i, "workspace_id": "ws", "agent_id": "a1", "crew_id": "c1", "ts": ts, "run_id": run,
            "entry_type": "summary.generated", "severity": "info", "summary": summary, "payload": {},
            "base_importance": 0.7, "accepted_at": datetime(2026, 11, 1, 10, 0, 1, tzinfo=UTC),
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[TestClient]:
    store = EdgeStore(tmp_path_factory.mktemp("placed") / "edge")
    store.ensure_collection(embedder.dim)
    bm25 = Bm25Encoder()
    Indexer(store=store, embedder=embedder, bm25=bm25).index_batch(
        [
            rec("t1", "the release train leaves on Tuesday from platform nine", "2026-01-01T10:00:00Z"),
            rec("t2", "the release train now leaves on Thursday from platform nine", "2026-02-01T10:00:00Z"),
            rec("lunch", "the team lunch is on Friday at the taco place", "2026-01-02T10:00:00Z"),
            rec("lunch2", "Friday lunch moved to the noodle bar", "2026-01-03T10:00:00Z"),
            rec("d1", "deploy step one: build the container image for checkout", "2026-01-04T10:00:00Z", "run-x"),
            rec("d2", "then the registry rejected the push with a quota error", "2026-01-04T10:05:00Z", "run-x"),
        ]
    )
    # the real linker decides the supersession (t2 changes t1's day); the walk's edge is written as test_walk's
    event = IndexedEvent(entry_id="t2", workspace_id="ws", point_id=point_id("ws", "t2"), indexed_at=T, mode="vector")
    assert Linker(store=store, clock=lambda: T).link([event]).superseded == 1
    store.add_relations(
        [Relation(src="lunch2", dst="lunch", relation="similar", weight=0.85, created_at="x", workspace_id="ws")]
    )
    app = create_app(
        settings=Settings(), store=store, embedder=embedder, bm25=bm25,
        publish=lambda *a: None, status=lambda: {"kafka": "ok", "kafka_bootstrap": "x"}, metrics=Metrics(),
    )  # fmt: skip
    try:
        yield TestClient(app)
    finally:
        store.close()


def recall(c: TestClient, query: str, k: int, path: str = "/v1/recall", **more: Any) -> list[tuple[str, str, str]]:
    body = {"workspace_id": "ws", "agent_id": "a1", "query": query, "k": k, "mode": "sparse", **more}
    r = c.post(path, json=body)
    assert r.status_code == 200, r.text
    RecallResponse.model_validate({"mode": "sparse", "degraded": False, "hits": r.json()["hits"]})  # the typed model
    return [(h["entry_id"], h["via"], h["placed"]) for h in r.json()["hits"]]


def test_a_direct_hit_is_placed_by_its_own_score(client: TestClient) -> None:
    assert recall(client, "taco place", 1) == [("lunch", "direct", "direct")]


def test_a_walked_hit_is_placed_walk(client: TestClient) -> None:
    assert recall(client, "taco place", 2, walk_depth=1) == [
        ("lunch", "direct", "direct"),
        ("lunch2", "similar", "walk"),
    ]
    assert recall(client, "taco place", 2, walk_depth=0) == [("lunch", "direct", "direct")]


def test_a_run_neighbour_is_placed_adjacent(client: TestClient) -> None:
    hits = recall(client, "container image build", 2, adjacent=True)
    assert hits == [("d1", "direct", "direct"), ("d2", "adjacent", "adjacent")]


def test_a_newer_fact_is_placed_newer_above_what_it_supersedes(client: TestClient) -> None:
    # only the older matches ("Tuesday"): the newer is brought in right above it
    assert recall(client, "Tuesday", 2) == [("t2", "supersedes", "newer"), ("t1", "direct", "direct")]
    # both match and BM25 ranks the older first ("Tuesday" is in t1 alone): the newer is moved up above it
    both = recall(client, "release train Tuesday platform", 2)
    assert both == [("t2", "direct", "newer"), ("t1", "direct", "direct")]
    # the newer ranks first on its own ("Thursday"): nothing was moved, both are direct
    assert recall(client, "release train Thursday", 2) == [("t2", "direct", "direct"), ("t1", "direct", "direct")]


def test_render_hits_say_why_too(client: TestClient) -> None:
    hits = recall(client, "Tuesday", 2, path="/v1/recall/render", max_chars=2000)
    assert sorted(hits) == [("t1", "direct", "direct"), ("t2", "supersedes", "newer")]


def test_the_explorer_says_why_and_reads_a_raised_score_as_placement_not_a_tie(client: TestClient) -> None:
    params = {"workspace_id": "ws", "agent_id": "a1", "q": "release train Tuesday platform", "k": "2", "mode": "hybrid"}
    r = client.get("/ui/search", params=params)
    assert r.status_code == 200, r.text
    page = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", r.text)))
    assert page.count("placed: newer") == 1 and "placed right above the older memory it supersedes" in page
    # t2 carries t1's score (it was moved above it): not a near tie between the legs' ranks
    assert "near-tied in a leg" not in page


def test_the_explorer_reads_a_score_the_neighbour_lift_raised_as_its_run_not_a_tie(client: TestClient) -> None:
    # the query matches d2 alone; d1 (short, d2's previous in run-x) gains half of d2's fused score (the default
    # neighbour lift), and the page says so instead of calling the gap a near tie between the legs' ranks
    q = "registry rejected the push quota"
    params = {"workspace_id": "ws", "agent_id": "a1", "q": q, "k": "2", "mode": "hybrid"}
    r = client.get("/ui/search", params=params)
    assert r.status_code == 200, r.text
    page = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", r.text)))
    # both are short and each is the other's neighbour: each gains half of the other's fused score
    assert page.count("raised by its run: its own ranks give") == 2, page
    assert "near-tied in a leg" not in page
    rows = re.findall(r"(\d\.\d{4}) (d[12]) summary\.generated .*? fused (\d\.\d{5}) × importance (\d\.\d{3})", page)
    assert [eid for _, eid, _, _ in rows] == ["d2", "d1"], rows
    (s2, _, f2, imp2), (s1, _, f1, imp1) = ((float(a), e, float(b), float(c)) for a, e, b, c in rows)
    w = Settings().rrf_neighbour_weight
    assert abs(s2 - (f2 + w * f1) * imp2) < 1e-3 and abs(s1 - (f1 + w * f2) * imp1) < 1e-3
