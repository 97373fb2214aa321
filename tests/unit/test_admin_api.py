"""`POST /v1/admin/run/decay`: admin only when the service has tokens, the job's report, 409 when another
process runs it, 503 when this process was not given it. The job itself is tested over the real store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.maintenance.decay import JobBusy
from episodic.store.sparse import Bm25Encoder
from recall.app import create_app
from tests.unit.test_recall_api import TOK_A, TOK_ADMIN, FakeStore

REPORT = {
    "run_id": "r1", "reference_time": "2026-11-21T03:30:00Z", "started_at": "2026-11-21T03:30:00Z",
    "finished_at": "2026-11-21T03:30:02Z", "resumed": False, "duration_s": 2.0, "pages": 1, "scanned": 10,
    "updated": 9, "unchanged": 1, "archived": 0, "edges_removed": 0, "ledger_pruned": 3, "retention": False,
}  # fmt: skip


def client(jobs: dict[str, Any], tokens: Path | None = None) -> TestClient:
    app = create_app(
        settings=Settings(tokens_file=tokens),
        store=FakeStore(),
        embedder=None,
        bm25=Bm25Encoder(),
        publish=lambda *a: None,
        status=lambda: {"kafka": "ok", "kafka_bootstrap": "x"},
        metrics=Metrics(),
        jobs=jobs,
    )
    return TestClient(app)


def test_runs_the_job_and_answers_its_report() -> None:
    calls: list[int] = []
    c = client({"decay": lambda: calls.append(1) or REPORT})
    r = c.post("/v1/admin/run/decay")
    assert r.status_code == 200 and r.json() == REPORT and calls == [1]
    assert "/v1/admin/run/decay" in c.get("/openapi.json").json()["paths"]


def test_only_an_admin_token_may_run_it(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(
        json.dumps({"tokens": [{"token": TOK_A, "workspaces": ["ws-a"]}, {"token": TOK_ADMIN, "admin": True}]})
    )
    calls: list[int] = []
    c = client({"decay": lambda: calls.append(1) or REPORT}, tokens)
    assert c.post("/v1/admin/run/decay").status_code == 401
    r = c.post("/v1/admin/run/decay", headers={"Authorization": f"Bearer {TOK_A}"})
    assert r.status_code == 403 and "admin" in r.json()["error"]
    assert calls == []
    ok = c.post("/v1/admin/run/decay", headers={"Authorization": f"Bearer {TOK_ADMIN}"})
    assert ok.status_code == 200 and calls == [1]


def test_busy_elsewhere_is_409_with_its_progress_and_a_missing_job_503() -> None:
    def busy() -> dict[str, Any]:
        raise JobBusy("a decay run is in progress in host-b", {"holder": "host-b", "scanned": 512})

    r = client({"decay": busy}).post("/v1/admin/run/decay")
    assert r.status_code == 409 and r.json()["progress"]["scanned"] == 512 and "host-b" in r.json()["error"]
    r = client({}).post("/v1/admin/run/decay")
    assert r.status_code == 503 and "not available" in r.json()["error"]
