"""The health endpoints over the real store and state store (Qdrant Edge) with auth on: who may read a
workspace's snapshots, who may compute them, what is published, the OpenAPI contract."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from episodic.domain.identity import point_id
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import MemoryPoint, MemoryStore, StateStore
from episodic.kernel.settings import Settings
from episodic.maintenance.health_job import HealthConfig, HealthJob
from episodic.store.sparse import Bm25Encoder
from recall.app import create_app
from stack.stores import open_state, open_store

pytestmark = pytest.mark.integration

TOK_A = "token-for-workspace-a-0001"
TOK_ADMIN = "token-for-the-operators-01"
DIM = 4


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[TestClient, list[tuple[str, str | None, dict[str, Any]]], Metrics]]:
    store: MemoryStore = open_store(Settings(data_dir=tmp_path), dim=DIM)
    state: StateStore = open_state(store)
    bm25 = Bm25Encoder()
    points = []
    for ws in ("ws-a", "ws-b"):
        for i, row in enumerate(([1.0, 0, 0, 0], [0.9, 0.1, 0, 0], [0, 0, 1.0, 0])):
            payload = {
                "entry_id": f"e{i}",
                "workspace_id": ws,
                "agent_id": "ag",
                "crew_id": "c1",
                "ts": "2026-03-01T00:00:00Z",
                "summary": f"memory {i}",
                "links": ["e0"] if i == 1 else [],
            }
            points.append(MemoryPoint(point_id(ws, f"e{i}"), bm25.document(f"memory {i}"), payload, [row]))
    store.upsert(points)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(
        json.dumps({"tokens": [{"token": TOK_A, "workspaces": ["ws-a"]}, {"token": TOK_ADMIN, "admin": True}]})
    )
    settings = Settings(data_dir=tmp_path, tokens_file=tokens, health_gauge_workspaces=1)
    published: list[tuple[str, str | None, dict[str, Any]]] = []
    metrics = Metrics(CollectorRegistry())
    app = create_app(
        settings=settings,
        store=store,
        embedder=None,
        bm25=bm25,
        publish=lambda t, k, v: published.append((t, k, v)),
        status=lambda: {"kafka": "ok", "kafka_bootstrap": "x"},
        metrics=metrics,
        health=HealthJob(store, state, HealthConfig.from_settings(settings)),
    )
    try:
        yield TestClient(app), published, metrics
    finally:
        state.close()
        store.close()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_only_an_admin_token_computes_and_a_workspace_token_reads_its_own(env: Any) -> None:
    client, published, metrics = env
    assert client.post("/v1/admin/run/health").status_code == 401
    r = client.post("/v1/admin/run/health", headers=auth(TOK_A), params={"workspace_id": "ws-a"})
    assert r.status_code == 403 and "admin" in r.json()["error"]
    assert client.get("/v1/memory/health", params={"workspace_id": "ws-a"}, headers=auth(TOK_A)).status_code == 404

    r = client.post("/v1/admin/run/health", headers=auth(TOK_ADMIN))  # every workspace
    assert r.status_code == 200 and r.json()["workspaces"] == 2 and r.json()["failed"] == []
    snaps = r.json()["snapshots"]
    assert [(s["workspace_id"], s["crew_id"]) for s in snaps] == [("ws-a", None), ("ws-a", "c1"), ("ws-b", None),
                                                                   ("ws-b", "c1")]  # fmt: skip
    assert [(t, k) for t, k, _ in published] == [("memory.health", "ws-a")] * 2 + [("memory.health", "ws-b")] * 2
    assert published[0][2] == snaps[0]

    r = client.get("/v1/memory/health", params={"workspace_id": "ws-a", "days": 3}, headers=auth(TOK_A))
    body = r.json()
    assert r.status_code == 200 and body["score"] == snaps[0]["score"] and len(body["history"]) == 1
    assert body["inputs"]["reachable"] == 2 and body["metrics"]["reachability"] == pytest.approx(66.67)
    assert body["metrics"]["efficiency"] is None  # no recalls: not measured, not zero
    r = client.get("/v1/memory/health", params={"workspace_id": "ws-b"}, headers=auth(TOK_A))
    assert r.status_code == 403

    # one workspace labelled in the gauges (the lowest score), both counted by band
    text = client.get("/metrics").text
    assert text.count("episodic_memory_health_score{") == 1
    assert sum(metrics.registry.get_sample_value("episodic_memory_health_workspaces", {"band": b}) for b in
               ("red", "yellow", "green")) == 2  # fmt: skip


def test_the_contract_names_the_fields(env: Any) -> None:
    client, _, _ = env
    spec = client.get("/openapi.json").json()
    assert {"/v1/memory/health", "/v1/admin/run/health"} <= spec["paths"].keys()
    params = {p["name"]: p for p in spec["paths"]["/v1/memory/health"]["get"]["parameters"]}
    assert set(params) == {"workspace_id", "crew_id", "days"} and params["days"]["schema"]["anyOf"][0]["maximum"] == 366
    snap = spec["components"]["schemas"]["HealthSnapshotModel"]["properties"]
    assert {"score", "band", "metrics", "inputs", "date", "trigger"} <= snap.keys()
    r = client.get("/v1/memory/health", params={"workspace_id": "ws-a", "crew_id": ""}, headers=auth(TOK_ADMIN))
    assert r.status_code == 422 and r.json()["error"].startswith("crew_id")
