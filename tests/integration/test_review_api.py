"""`POST /v1/memory/review` over the real store (Qdrant Edge) and a recording producer (issue 26): what goes
on memory.reviewed, an alias or a folded id resolved to its memory, the same auth rules as the memory API
(another agent's memory ignored exactly like a missing one), and garbage refused naming the field and
counted. tests/e2e/test_reviews.py runs it on the real broker, importance agent and model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from episodic.kernel.metrics import Metrics
from episodic.kernel.settings import Settings
from episodic.store.sparse import Bm25Encoder
from recall.app import create_app
from schemas.events import ReviewedEvent
from tests.integration.maint_helpers import memory, open_edge
from tests.unit.test_journal_api import TOKENS, Producer
from tests.unit.test_recall_api import FakeEmbedder

pytestmark = pytest.mark.integration


class Env:
    def __init__(self, tmp: Path) -> None:
        tokens_file = tmp / "tokens.json"
        rows = [{"name": name, "token": tok, **spec} for name, (tok, spec) in TOKENS.items()]
        tokens_file.write_text(json.dumps({"tokens": rows}))
        self.store, self.state = open_edge(tmp / "edge")
        self.store.upsert(
            [
                memory("m1", agent="ag", crew_id="crew", aliases=["m1-again"]),
                memory("m2", agent="ag", crew_id="crew", axis=1),
                memory("f1", agent="ag", crew_id="crew", folded_into="m2", axis=2),
                memory("other", agent="someone", crew_id="crew-x", axis=3),
                memory("m1", ws="ws-b", agent="ag"),
            ]
        )
        self.producer = Producer()
        self.metrics = Metrics()
        app = create_app(
            settings=Settings(tokens_file=tokens_file),
            store=self.store,
            embedder=FakeEmbedder(),
            bm25=Bm25Encoder(),
            publish=lambda t, k, v: None,
            status=lambda: {"kafka": "ok", "kafka_bootstrap": "x:1"},
            metrics=self.metrics,
            produce=self.producer,
            state=self.state,
        )
        self.client = TestClient(app)

    def post(self, body: Any, who: str = "planner", **kw: Any) -> Any:
        return self.client.post("/v1/memory/review", json=body, headers={"Authorization": f"Bearer {TOKENS[who][0]}"})

    def events(self) -> list[ReviewedEvent]:
        return [ReviewedEvent.from_json(v) for t, _, v in self.producer.sent if t == "memory.reviewed"]

    def refused(self, reason: str) -> float:
        return self.metrics.registry.get_sample_value("episodic_reviews_refused_total", {"reason": reason}) or 0


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    try:
        yield e
    finally:
        e.state.close()
        e.store.close()


def body(*reviews: tuple[str, str], **over: Any) -> dict[str, Any]:
    return {"workspace_id": "ws-a", "reviews": [{"entry_id": i, "rating": r} for i, r in reviews], **over}


def test_reviews_go_on_memory_reviewed_keyed_by_workspace_with_ids_resolved(env: Env) -> None:
    r = env.post(body(("m1", "good"), ("m1-again", "easy"), ("f1", "again"), ("nope", "good"), ("other", "hard")))
    assert r.status_code == 202, r.text
    answer = r.json()
    assert answer["accepted"] == 3 and answer["entry_ids"] == ["m1", "m1", "m2"]  # alias and fold resolved
    assert answer["ignored"] == [  # a missing id and another agent's memory: the same answer
        {"index": 3, "entry_id": "nope", "reason": "no_memory"},
        {"index": 4, "entry_id": "other", "reason": "no_memory"},
    ]
    assert answer["topic"] == "memory.reviewed"
    ((_, key, _),) = env.producer.sent
    assert key == b"ws-a"
    (ev,) = env.events()
    assert ev.workspace_id == "ws-a" and ev.agent_id == "ag" and ev.event_id
    assert [(i.entry_id, i.rating) for i in ev.reviews] == [("m1", "good"), ("m1", "easy"), ("m2", "again")]
    assert env.refused("unknown_memory") == 2


def test_a_workspace_token_may_review_any_memory_of_its_workspace_and_name_the_agent(env: Env) -> None:
    r = env.post(body(("other", "good"), agent_id="reviewer", run_id="r1"), who="orchestrator")
    assert r.status_code == 202 and r.json()["accepted"] == 1
    assert env.events()[0].agent_id == "reviewer" and env.events()[0].run_id == "r1"


def test_a_retried_request_with_a_review_id_is_one_event(env: Env) -> None:
    once = body(("m1", "good"), review_id="call-1")
    assert env.post(once).status_code == 202 and env.post(once).status_code == 202  # a retry
    assert env.post(body(("m1", "good"), review_id="call-2")).status_code == 202
    assert env.post(once, who="orchestrator").status_code == 202  # another caller's key is another event
    assert env.post(body(("m1", "good"))).status_code == 202  # no key: a fresh event id
    ids = [e.event_id for e in env.events()]
    assert ids[0] == ids[1] and len(set(ids)) == 4


def test_nothing_reviewable_is_404_and_nothing_is_produced(env: Env) -> None:
    r = env.post(body(("other", "good"), ("nope", "easy")))
    assert r.status_code == 404 and r.json()["error"].startswith("reviews.0.entry_id: no memory 'other'")
    r = env.post(body(("m1", "good")), who="b")  # ws-b's token, ws-a's ids
    assert r.status_code == 403 and "workspace_id" in r.json()["error"]
    assert env.producer.sent == []


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (body(("m1", "great")), "reviews.0.rating"),
        (body(("m1", "good"), ("m2", "GOOD")), "reviews.1.rating"),
        (body(("m1", 3)), "reviews.0.rating"),
        (body(("", "good")), "reviews.0.entry_id"),
        (body(("x" * 129, "good")), "reviews.0.entry_id"),
        ({"workspace_id": "ws-a", "reviews": []}, "reviews"),
        (body(*[("m1", "good")] * 101), "reviews"),
        ({"workspace_id": "ws-a", "reviews": [{"entry_id": "m1"}]}, "reviews.0.rating"),
        ({"workspace_id": "ws-a", "reviews": [{"entry_id": "m1", "rating": "good", "used": True}]}, "reviews.0.used"),
        ({"reviews": [{"entry_id": "m1", "rating": "good"}]}, "workspace_id"),
        ({"workspace_id": "ws-a", "reviews": "m1"}, "reviews"),
        ([1, 2], "body"),
    ],
)
def test_garbage_is_422_naming_the_field_and_counted(env: Env, bad: Any, field: str) -> None:
    r = env.post(bad)
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith(f"{field}:"), r.json()["error"]
    assert env.refused("invalid") == 1 and env.producer.sent == []


def test_a_bound_token_reviews_as_its_own_agent_only(env: Env) -> None:
    r = env.post(body(("m1", "good"), agent_id="someone"))
    assert r.status_code == 403 and r.json()["error"].startswith("agent_id:")
    assert env.refused("forbidden") == 1 and env.producer.sent == []


def test_a_broker_that_does_not_acknowledge_is_503_and_claims_nothing(env: Env) -> None:
    env.producer.fail = RuntimeError("broker down at kafka-7.internal:9092")
    r = env.post(body(("m1", "good")))
    assert r.status_code == 503 and "retry" in r.json()["error"] and "kafka-7" not in r.json()["error"]
    assert env.refused("unavailable") == 1


def test_an_oversize_body_is_413(env: Env) -> None:
    huge = body(("m1", "good"), run_id="r" * 2_000_000)
    r = env.client.post(
        "/v1/memory/review", content=json.dumps(huge), headers={"Authorization": f"Bearer {TOKENS['planner'][0]}"}
    )
    assert r.status_code == 413 and env.producer.sent == []
