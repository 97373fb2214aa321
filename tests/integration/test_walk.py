"""walk_depth=1 over the real store and model: supports edges from memory.consolidated, similar edges."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from episodic.indexing.indexer import Indexer
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import Relation
from episodic.kernel.settings import Settings
from episodic.store.edge import EdgeStore
from episodic.store.sparse import Bm25Encoder
from recall.app import create_app
from schemas.events import EmbeddableRecord

pytestmark = pytest.mark.integration


def rec(
    i: str, summary: str, *, agent: str = "a1", et: str = "summary.generated", refs: Any = None
) -> EmbeddableRecord:
    return EmbeddableRecord.from_dict(
        {
            "id": i, "workspace_id": "ws", "agent_id": agent, "crew_id": "c1", "ts": "2026-11-01T10:00:00Z",
            "entry_type": et, "severity": "info", "summary": summary, "payload": {}, "refs": refs,
            "base_importance": 0.7, "accepted_at": datetime(2026, 11, 1, 10, 0, 1, tzinfo=UTC),
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[tuple[TestClient, EdgeStore]]:
    store = EdgeStore(tmp_path_factory.mktemp("walk") / "edge")
    store.ensure_collection(embedder.dim)
    bm25 = Bm25Encoder()
    Indexer(store=store, embedder=embedder, bm25=bm25).index_batch(
        [
            rec("ev1", "billing-api outage on March 3 after a deploy without the staging canary"),
            rec("ev2", "second billing incident: the canary step was skipped again"),
            rec("ev-other", "evidence written by another agent", agent="a2"),
            rec(
                "rule",
                "Rule: always run the canary before deploying billing-api to production",
                et="memory.consolidated",
                refs={"supports": ["ev1", "ev2", "ev-other"]},
            ),
            rec("lunch", "the team lunch is on Friday at the taco place"),
            rec("lunch2", "Friday lunch moved to the noodle bar"),
        ]
    )
    store.add_relations(
        [Relation(src="lunch2", dst="lunch", relation="similar", weight=0.85, created_at="x", workspace_id="ws")]
    )
    app = create_app(
        settings=Settings(), store=store, embedder=embedder, bm25=bm25,
        publish=lambda *a: None, status=lambda: {"kafka": "ok", "kafka_bootstrap": "x"}, metrics=Metrics(),
    )  # fmt: skip
    try:
        yield TestClient(app), store
    finally:
        store.close()


def recall(client: TestClient, query: str, walk: int, k: int = 3) -> list[tuple[str, str]]:
    body = {"workspace_id": "ws", "agent_id": "a1", "query": query, "k": k, "walk_depth": walk, "mode": "dense"}
    r = client.post("/v1/recall", json=body)
    assert r.status_code == 200, r.text
    return [(h["entry_id"], h["via"]) for h in r.json()["hits"]]


def test_supports_edges_are_written_at_index_time(client: tuple[TestClient, EdgeStore]) -> None:
    _, store = client
    rels = {(r.src, r.dst, r.relation) for r in store.relations_of("ws", ["rule"])}
    assert rels == {("rule", "ev1", "supports"), ("rule", "ev2", "supports"), ("rule", "ev-other", "supports")}


def test_walk_follows_supports_from_a_rule_to_its_evidence(client: tuple[TestClient, EdgeStore]) -> None:
    c, _ = client
    direct = recall(c, "what is our rule about the canary for billing deploys", 0, k=1)
    assert direct == [("rule", "direct")]
    # the evidence not already among the direct hits joins through the rule's supports edges, scored
    # rule score x 1.0, so it ranks right after the rule
    direct2 = recall(c, "what is our rule about the canary for billing deploys", 0, k=2)
    walked = recall(c, "what is our rule about the canary for billing deploys", 1, k=2)
    assert direct2[0] == walked[0] == ("rule", "direct")
    assert walked[1][1] == "supports" and walked[1][0] in {"ev1", "ev2"} and walked[1][0] != direct2[1][0]
    assert {e for e, _ in recall(c, "what is our rule about the canary for billing deploys", 1, k=3)} == {
        "rule",
        "ev1",
        "ev2",
    }
    # the other agent's evidence is outside scope "own": the walk never leaves the scope
    assert "ev-other" not in {e for e, _ in recall(c, "canary rule billing", 1, k=10)}


def test_walk_follows_similar_edges_in_both_directions(client: tuple[TestClient, EdgeStore]) -> None:
    c, _ = client
    # lunch2 -> lunch: walking from lunch (the direct hit) reaches lunch2 against the edge's direction
    hits = recall(c, "taco place lunch on friday", 1, k=2)
    assert hits[0] == ("lunch", "direct") and hits[1][0] == "lunch2"
    only = recall(c, "taco place lunch on friday", 0, k=1)
    assert only == [("lunch", "direct")]
    walked = recall(c, "taco place lunch on friday", 1, k=1)
    assert walked == [("lunch", "direct")]  # k caps the result; a direct hit wins over its neighbour
