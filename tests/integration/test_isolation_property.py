"""Property: whatever the request, token, mode or scope, no response carries another workspace's memory,
and auth is enforced (hypothesis over the real EdgeStore and the real model)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from episodic.indexing.indexer import Indexer
from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.store.edge import EdgeStore
from episodic.store.sparse import Bm25Encoder
from recall.app import create_app
from schemas.events import EmbeddableRecord

pytestmark = pytest.mark.integration

WORKSPACES = ["ws-a", "ws-b", "ws-c"]
AGENTS = ["a1", "a2"]
CREWS = ["c1", "c2"]
TEXTS = [
    "checkout service crashed with OOM after the heap limit was hit",
    "DNS resolution for the payments API failed intermittently",
    "postgres migration locked the orders table",
    "deploy rolled back after the canary error budget burned",
]
TOKENS = {"tok-ws-a-0123456789": ["ws-a"], "tok-ws-bc-0123456789": ["ws-b", "ws-c"]}
ADMIN = "tok-admin-0123456789"


def _records() -> list[EmbeddableRecord]:
    out = []
    for ws in WORKSPACES:
        for n, text in enumerate(TEXTS):  # identical texts in every workspace
            for agent, crew, base in (("a1", "c1", 0.7), ("a2", "c1", 0.9), ("a2", "c2", 0.5)):
                out.append(
                    EmbeddableRecord.from_dict(
                        {
                            "id": f"{ws}:{n}:{agent}:{crew}",
                            "workspace_id": ws,
                            "agent_id": agent,
                            "crew_id": crew,
                            "ts": "2026-01-10T10:00:00Z",
                            "entry_type": "summary.generated",
                            "severity": "info",
                            "summary": f"{text} ({ws})" if n == 0 else text,
                            "payload": {"ws": ws},
                            "base_importance": base,
                            "accepted_at": datetime(2026, 1, 10, 10, 0, 1, tzinfo=UTC),
                        }
                    )
                )
    return out


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[TestClient]:
    root: Path = tmp_path_factory.mktemp("isolation")
    store = EdgeStore(root / "edge")
    store.ensure_collection(embedder.dim)
    bm25 = Bm25Encoder()
    Indexer(store=store, embedder=embedder, bm25=bm25).index_batch(_records())
    store.flush()
    tokens = root / "tokens.json"
    entries: list[dict[str, Any]] = [{"token": t, "workspaces": ws} for t, ws in TOKENS.items()]
    entries.append({"token": ADMIN, "admin": True})
    tokens.write_text(json.dumps({"tokens": entries}))
    app = create_app(
        settings=Settings(tokens_file=tokens),
        store=store,
        embedder=embedder,
        bm25=bm25,
        publish=lambda *a: None,
        status=lambda: {"kafka": "ok", "kafka_bootstrap": "x"},
        metrics=Metrics(),
    )
    try:
        yield TestClient(app)
    finally:
        store.close()


# Mostly well-formed requests with valid tokens (so that most examples reach the store), plus a share
# of malformed requests and bad or missing tokens.
token = st.sampled_from([*TOKENS, ADMIN] * 4 + [None, "tok-unknown-0123456789", "", "tok-ws-a-0123456789 "])
valid = st.fixed_dictionaries(
    {
        "workspace_id": st.sampled_from(WORKSPACES),
        "agent_id": st.sampled_from(AGENTS),
        "crew_id": st.sampled_from(CREWS),
        "scope": st.sampled_from(["own", "crew_shared"]),
        "query": st.one_of(
            st.sampled_from([*TEXTS, "ws-b", "ws-a heap", "checkout"]),
            st.text(min_size=1, max_size=30).filter(str.strip),
        ),
        "k": st.integers(1, 50),
        "mode": st.sampled_from(["hybrid", "dense", "sparse"]),
    },
    optional={"walk_depth": st.integers(0, 1), "max_chars": st.integers(400, 3000)},
)
garbage = st.fixed_dictionaries(
    {
        "workspace_id": st.sampled_from([*WORKSPACES, "ws-zz", "WS-A", ""]),
        "agent_id": st.one_of(st.none(), st.sampled_from(["", "zz", *AGENTS])),
        "crew_id": st.one_of(st.none(), st.sampled_from(["", *CREWS])),
        "scope": st.sampled_from(["own", "crew_shared", "everyone"]),
        "query": st.text(max_size=30),
        "k": st.integers(-1, 60),
        "mode": st.sampled_from(["hybrid", "cosine"]),
    },
    optional={"walk_depth": st.integers(0, 2), "junk": st.just(1)},
)
request = st.integers(0, 5).flatmap(lambda n: garbage if n == 0 else valid)  # about 1 in 6 malformed


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None)
@given(body=request, tok=token, render=st.booleans(), scheme=st.sampled_from(["Bearer"] * 6 + ["bearer", "Basic"]))
def test_no_response_leaks_another_workspace(
    client: TestClient, body: dict[str, Any], tok: str | None, render: bool, scheme: str
) -> None:
    headers = {"Authorization": f"{scheme} {tok}"} if tok is not None else {}
    path = "/v1/recall/render" if render else "/v1/recall"
    if not render:
        body.pop("max_chars", None)
    r = client.post(path, json=body, headers=headers)
    assert r.status_code < 500, r.text
    event(f"status {r.status_code}")
    ws = body["workspace_id"]
    tok = tok.strip() if tok is not None else None  # surrounding whitespace is not part of a token
    valid_token = tok is not None and scheme.lower() == "bearer" and (tok in TOKENS or tok == ADMIN)
    if not valid_token:
        assert r.status_code == 401, r.text
        return
    allowed = tok == ADMIN or ws in TOKENS[tok]  # type: ignore[index]
    if r.status_code == 422:
        event(r.json()["error"][:40])
        return
    if not allowed:
        assert r.status_code == 403, r.text
        return
    assert r.status_code == 200, r.text
    data = r.json()
    for h in data["hits"]:
        assert h["payload"]["ws"] == ws
        assert h["entry_id"].startswith(f"{ws}:")
        if body["scope"] == "own":
            assert h["agent_id"] == body["agent_id"]
        else:
            assert h["crew_id"] == body["crew_id"] or h["agent_id"] == body.get("agent_id")
    text = r.text
    for other in WORKSPACES:
        if other != ws:
            assert f"{other}:" not in text and f"({other})" not in text
