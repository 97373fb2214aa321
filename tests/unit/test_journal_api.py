"""`POST /v1/journal`, `GET /v1/whoami` and bound tokens on the recall routes, over a fake store and a
recording (or failing) producer. tests/e2e/test_agent_surfaces.py runs the endpoint on the real broker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.maintenance.health_job import HealthConfig, HealthJob
from episodic.store.sparse import Bm25Encoder
from episodic_client.models import MAX_JOURNAL_BYTES, MAX_JOURNAL_ENTRIES
from recall import journal as journal_routes
from recall.app import create_app
from schemas.journal import parse_entry
from tests.e2e.journal import build
from tests.unit.test_nudge import MemoryState
from tests.unit.test_recall_api import FakeEmbedder, FakeStore

TOKENS = {
    "orchestrator": ("orchestrator-token-0001", {"workspaces": ["ws-a"]}),
    "b": ("token-for-workspace-b-01", {"workspaces": ["ws-b"]}),
    "planner": ("planner-bound-token-0001", {"workspaces": ["ws-a"], "agent_id": "ag", "crew_id": "crew"}),
    "lead": ("lead-bound-token-000001",
             {"workspaces": ["ws-a"], "agent_id": "boss", "role": "lead", "crew_id": "crew"}),
}  # fmt: skip


def entry(i: int, **over: Any) -> dict[str, Any]:
    e = {
        "id": f"e{i}", "workspace_id": "ws-a", "agent_id": "ag", "crew_id": "crew", "ts": "2026-11-21T10:00:00Z",
        "entry_type": "summary.generated", "severity": "info", "summary": f"memory number {i}",
        "payload": {"i": i},
    }  # fmt: skip
    e.update(over)
    return {k: v for k, v in e.items() if v is not ...}


class Producer:
    """Records what would be produced; fails or hangs when told to."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []
        self.fail: Exception | None = None
        self.hang = False

    async def __call__(self, topic: str, records: Sequence[tuple[bytes | None, bytes]]) -> None:
        if self.hang:
            await asyncio.sleep(60)
        if self.fail is not None:
            raise self.fail
        self.sent.extend((topic, k, v) for k, v in records)


class Env:
    def __init__(self, tmp: Path, *, tokens: bool = True, producer: bool = True) -> None:
        tokens_file = None
        if tokens:
            tokens_file = tmp / "tokens.json"
            rows = [{"name": name, "token": tok, **spec} for name, (tok, spec) in TOKENS.items()]
            tokens_file.write_text(json.dumps({"tokens": rows}))
        self.producer = Producer()
        self.metrics = Metrics()
        self.store = FakeStore()
        app = create_app(
            settings=Settings(tokens_file=tokens_file),
            store=self.store,
            embedder=FakeEmbedder(),
            bm25=Bm25Encoder(),
            publish=lambda t, k, v: None,
            status=lambda: {"kafka": "ok", "kafka_bootstrap": "x:1"},
            metrics=self.metrics,
            produce=self.producer if producer else None,
            health=HealthJob(self.store, MemoryState(), HealthConfig.from_settings(Settings())),  # type: ignore[arg-type]
        )
        self.client = TestClient(app)

    def post(self, body: Any, who: str = "orchestrator", **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {TOKENS[who][0]}"} if who else {}
        return self.client.post("/v1/journal", json=body, headers=headers, **kw)

    def count(self, outcome: str) -> float:
        return self.metrics.registry.get_sample_value("episodic_journal_http_entries_total", {"outcome": outcome}) or 0


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    yield Env(tmp_path)


def test_valid_entries_are_produced_keyed_by_workspace_and_answered_202(env: Env) -> None:
    entries = [entry(1), entry(2, severity="warn", entry_type="keeper.decision"), entry(3, crew_id=None)]
    r = env.post({"entries": entries})
    assert r.status_code == 202, r.text
    assert r.json() == {"accepted": 3, "ids": ["e1", "e2", "e3"], "rejected": 0, "errors": [],
                        "topic": "journal.entries"}  # fmt: skip
    assert [(t, k) for t, k, _ in env.producer.sent] == [("journal.entries", b"ws-a")] * 3
    # the produced value is the entry as sent, which the gate parses back to the same entry
    for (_, _, value), sent in zip(env.producer.sent, entries, strict=True):
        assert json.loads(value) == sent and parse_entry(value).id == sent["id"]
    assert env.count("accepted") == 3 and env.count("invalid") == 0


def test_invalid_entries_come_back_with_index_field_and_reason_and_the_rest_is_accepted(env: Env) -> None:
    entries = [
        entry(0),
        entry(1, agent_id=...),
        entry(2, severity="fatal"),
        "not an object",
        entry(4, ts="yesterday"),
        entry(5, payload=[1]),
        entry(6, summary="x" * 16_385),
        entry(7),
    ]
    r = env.post({"entries": entries})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["accepted"] == 2 and body["ids"] == ["e0", "e7"] and body["rejected"] == 6
    got = [(e["index"], e["id"], e["field"], e["reason"]) for e in body["errors"]]
    assert got == [
        (1, "e1", "agent_id", "missing_field"),
        (2, "e2", "severity", "bad_severity"),
        (3, None, "entry", "not_object"),
        (4, "e4", "ts", "bad_timestamp"),
        (5, "e5", "payload", "payload_not_object"),
        (6, "e6", "summary", "oversize_summary"),
    ]
    assert body["errors"][0]["error"] == "entries[1].agent_id: field required"
    assert body["errors"][2]["error"].startswith("entries[3]: value must be a JSON object")
    assert [json.loads(v)["id"] for _, _, v in env.producer.sent] == ["e0", "e7"]
    assert env.count("accepted") == 2 and env.count("invalid") == 6


def test_the_gates_garbage_is_refused_per_entry_with_its_dead_letter_reason(env: Env) -> None:
    """Every kind of bad entry the gate dead-letters (tests/e2e/journal.py) that can travel inside JSON."""
    garbage = [
        (reason, json.loads(raw)) for reason, raw in build(n_valid=1).dlq if reason not in ("not_json", "not_utf8")
    ]
    r = env.post({"entries": [obj for _, obj in garbage]})
    assert r.status_code == 422, r.text
    body = r.json()
    assert [e["reason"] for e in body["errors"]] == [reason for reason, _ in garbage]
    assert all(e["field"] and e["error"].startswith(f"entries[{e['index']}]") for e in body["errors"])
    assert body["error"].startswith("no valid entry in the batch: entries[0]")
    assert env.producer.sent == []


def test_a_token_writes_only_its_own_workspace_and_nothing_is_produced(env: Env) -> None:
    r = env.post({"entries": [entry(1), entry(2, workspace_id="ws-b")]})
    assert r.status_code == 403
    assert r.json()["error"] == "entries[1].workspace_id: token 'orchestrator' may not write workspace 'ws-b'"
    assert env.producer.sent == [] and env.count("forbidden") == 2
    assert env.post({"entries": [entry(1, workspace_id="ws-b")]}, who="b").status_code == 202
    assert env.post({"entries": [entry(1)]}, who="").status_code == 401


def test_a_bound_token_writes_only_as_its_agent_and_crew(env: Env) -> None:
    assert env.post({"entries": [entry(1)]}, who="planner").status_code == 202
    r = env.post({"entries": [entry(1), entry(2, agent_id="coder")]}, who="planner")
    assert r.status_code == 403 and r.json()["error"].startswith("entries[1].agent_id: token 'planner' is bound")
    r = env.post({"entries": [entry(1, crew_id="other")]}, who="planner")
    assert r.status_code == 403 and r.json()["error"].startswith("entries[0].crew_id:")
    # priority is an operator's marker: an agent cannot floor its own entries' importance (issue 29)
    r = env.post({"entries": [entry(1), entry(2, priority="permanent")]}, who="planner")
    assert r.status_code == 403 and r.json()["error"].startswith("entries[1].priority: token 'planner' is bound")
    assert env.post({"entries": [entry(2, priority="permanent")]}).status_code == 202  # a workspace token may


def test_a_broker_failure_is_503_and_claims_nothing(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    env.producer.fail = RuntimeError("KafkaConnectionError: Unable to bootstrap from kafka-0.internal:9092")
    r = env.post({"entries": [entry(1)]})
    assert r.status_code == 503
    assert "did not acknowledge" in r.json()["error"] and "retry" in r.json()["error"]
    assert "kafka-0.internal" not in r.text and "ref " in r.json()["error"]  # errors name no internal hosts
    assert env.count("unavailable") == 1 and env.count("accepted") == 0
    env.producer.fail, env.producer.hang = None, True
    monkeypatch.setattr(journal_routes, "ACK_TIMEOUT_S", 0.2)
    r = env.post({"entries": [entry(2)]})
    assert r.status_code == 503 and "TimeoutError" in r.json()["error"]


def test_without_a_producer_the_endpoint_says_so(tmp_path: Path) -> None:
    env = Env(tmp_path, producer=False)
    r = env.post({"entries": [entry(1)]})
    assert r.status_code == 503 and "no Kafka producer" in r.json()["error"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "body: not valid JSON"),
        (b"[]", "body: Input should be a valid dictionary or instance of JournalBatch"),
        (b'{"entries": []}', "entries: List should have at least 1 item"),
        (b'{"entries": {}}', "entries: Input should be a valid list"),
        (b'{"entries": [{}], "more": 1}', "more: Extra inputs are not permitted"),
        (json.dumps({"entries": [{}] * (MAX_JOURNAL_ENTRIES + 1)}).encode(), "entries: List should have at most"),
        (b'{"entries": [' + b"[" * 5000 + b"]" * 5000 + b"]}", "body: not valid JSON"),
    ],
    ids=["not-json", "not-object", "empty", "not-list", "extra", "too-many", "too-deep"],
)
def test_a_malformed_envelope_is_422_naming_the_field(env: Env, body: bytes, message: str) -> None:
    r = env.client.post(
        "/v1/journal",
        content=body,
        headers={"Authorization": f"Bearer {TOKENS['orchestrator'][0]}", "content-type": "application/json"},
    )
    assert r.status_code == 422 and r.json()["error"].startswith(message), r.text
    assert env.producer.sent == []


def test_a_body_over_the_bound_is_413_also_when_chunked(env: Env) -> None:
    big = json.dumps({"entries": [entry(i, summary="y" * 16_000) for i in range(70)]}).encode()
    assert len(big) > MAX_JOURNAL_BYTES
    headers = {"Authorization": f"Bearer {TOKENS['orchestrator'][0]}", "content-type": "application/json"}
    r = env.client.post("/v1/journal", content=big, headers=headers)
    assert r.status_code == 413 and "body: larger than" in r.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the router counts as it reads
        for i in range(0, len(big), 64 * 1024):
            yield big[i : i + 64 * 1024]

    r = env.client.post("/v1/journal", content=chunks(), headers=headers)
    assert r.status_code == 413 and "split the batch" in r.json()["error"]
    assert env.producer.sent == []


def test_the_openapi_document_describes_the_endpoint(env: Env) -> None:
    doc = env.client.get("/openapi.json").json()
    op = doc["paths"]["/v1/journal"]["post"]
    assert set(op["responses"]) >= {"202", "401", "403", "413", "422", "503"}
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["entries"] and schema["properties"]["entries"]["maxItems"] == MAX_JOURNAL_ENTRIES
    assert "/v1/whoami" in doc["paths"]


def test_whoami_describes_the_token(env: Env, tmp_path: Path) -> None:
    r = env.client.get("/v1/whoami", headers={"Authorization": f"Bearer {TOKENS['lead'][0]}"})
    assert r.json() == {"name": "lead", "auth": True, "admin": False, "workspaces": ["ws-a"], "agent_id": "boss",
                        "crew_id": "crew", "role": "lead", "scope": "crew_shared"}  # fmt: skip
    r = env.client.get("/v1/whoami", headers={"Authorization": f"Bearer {TOKENS['orchestrator'][0]}"})
    assert r.json()["role"] is None and r.json()["scope"] is None and r.json()["agent_id"] is None
    assert env.client.get("/v1/whoami").status_code == 401
    open_env = Env(tmp_path, tokens=False)
    assert open_env.client.get("/v1/whoami").json()["auth"] is False


RECALL = {"workspace_id": "ws-a", "agent_id": "ag", "query": "deploy OOM"}


@pytest.mark.parametrize(
    ("who", "body", "status", "field"),
    [
        ("planner", RECALL, 200, None),
        ("planner", {**RECALL, "agent_id": "other"}, 403, "agent_id"),
        ("planner", {**RECALL, "scope": "crew_shared", "crew_id": "crew"}, 403, "scope"),
        ("lead", {**RECALL, "agent_id": "boss", "scope": "crew_shared", "crew_id": "crew"}, 200, None),
        ("lead", {**RECALL, "agent_id": "boss", "scope": "crew_shared", "crew_id": "other"}, 403, "crew_id"),
        ("lead", {**RECALL, "scope": "crew_shared", "crew_id": "crew"}, 403, "agent_id"),
        ("orchestrator", {**RECALL, "agent_id": "anyone"}, 200, None),
        ("orchestrator", {**RECALL, "workspace_id": "ws-b"}, 403, "workspace_id"),
    ],
)
def test_bound_tokens_on_recall_and_render(env: Env, who: str, body: dict[str, Any], status: int, field: str) -> None:
    headers = {"Authorization": f"Bearer {TOKENS[who][0]}"}
    for path in ("/v1/recall", "/v1/recall/render"):
        r = env.client.post(path, json=body, headers=headers)
        assert r.status_code == status, r.text
        if field:
            assert r.json()["error"].startswith(f"{field}: token '{who}'"), r.json()


def test_a_bound_token_asks_health_of_its_crew_only(env: Env) -> None:
    headers = {"Authorization": f"Bearer {TOKENS['planner'][0]}"}
    r = env.client.get("/v1/memory/health", params={"workspace_id": "ws-a", "crew_id": "other"}, headers=headers)
    assert r.status_code == 403 and r.json()["error"].startswith("crew_id:")
    r = env.client.get("/v1/memory/health", params={"workspace_id": "ws-a", "crew_id": "crew"}, headers=headers)
    assert r.status_code == 404 and "no memory-health snapshot for workspace 'ws-a', crew 'crew'" in r.json()["error"]
