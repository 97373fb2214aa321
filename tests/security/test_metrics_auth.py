"""`/metrics` names workspaces (the health gauges' `workspace_id` label): with EPISODIC_METRICS_ADMIN_ONLY the
recall service answers it to an admin token only, so a tenant that reaches the port learns no other
tenant's workspaces; without the setting it stays open for scrapers, as SPEC §7 has it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.store.edge import EdgeStore
from episodic.store.sparse import Bm25Encoder
from recall.app import create_app

pytestmark = pytest.mark.integration

ADMIN, TENANT = "metrics-admin-token-0001", "metrics-tenant-token-01"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EdgeStore]:
    s = EdgeStore(tmp_path / "edge")
    s.ensure_collection(8)
    yield s
    s.close()


def client(store: EdgeStore, tmp_path: Path, **settings: Any) -> TestClient:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"token": ADMIN, "admin": True}, {"token": TENANT, "workspaces": ["a"]}]}))
    app = create_app(
        settings=Settings(tokens_file=tokens, data_dir=tmp_path, **settings),
        store=store, embedder=None, bm25=Bm25Encoder(), publish=lambda t, k, v: None,
        status=lambda: {"kafka": "ok", "kafka_bootstrap": "127.0.0.1:9092"}, metrics=Metrics(),
    )  # fmt: skip
    return TestClient(app)


def test_metrics_for_an_admin_token_only_when_asked(store: EdgeStore, tmp_path: Path) -> None:
    c = client(store, tmp_path, metrics_admin_only=True)
    assert c.get("/metrics").status_code == 401
    assert c.get("/metrics", headers={"Authorization": f"Bearer {TENANT}"}).status_code == 403
    r = c.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200 and "episodic_" in r.text
    assert c.get("/healthz").status_code == 200  # probes stay open


def test_metrics_stay_open_for_scrapers_by_default(store: EdgeStore, tmp_path: Path) -> None:
    assert client(store, tmp_path).get("/metrics").status_code == 200
