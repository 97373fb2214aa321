"""The memory clients' lifecycle calls (forget, delete, forget_status, get, list) over httpx.MockTransport:
the requests they make, the typed answers, the timeouts of a forget that waits, and bad arguments refused
before anything is sent. tests/e2e/test_agent_surfaces.py runs them against a real stack."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from episodic_client import ClientConfigError, Identity, NotFound, ServiceUnavailable
from episodic_client.models import MemoryItem
from tests.unit.test_client import Service

APPLIED = {
    "forget_id": "f1", "workspace_id": "acme", "status": "applied", "selector": {"entry_ids": ["e1"]},
    "requested_at": "2026-11-20T10:00:00Z", "applied_at": "2026-11-20T10:00:01Z",
    "removed": {"memories": 1, "entry_ids": 2, "edges": 0}, "removed_ids": ["e1", "e1-dup"],
    "status_url": "/v1/memory/forget/f1?workspace_id=acme",
}  # fmt: skip
PENDING = {**APPLIED, "status": "pending", "applied_at": None, "removed": None, "removed_ids": []}
ITEM = {
    "entry_id": "e1", "ts": "2026-11-20T10:00:00Z", "entry_type": "peer.escalation", "severity": "error",
    "agent_id": "planner", "crew_id": "platform", "run_id": "r1", "summary": "checkout OOM",
    "importance_score": 0.9, "reference_count": 2, "occurrences": 1, "aliases": [], "has_dense": True,
}  # fmt: skip
DETAIL = {
    **ITEM, "requested_id": "e1", "workspace_id": "acme", "payload": {}, "refs": None, "priority": None,
    "base_importance": 0.9, "last_referenced_at": None, "indexed_at": None, "accepted_at": None, "model": None,
    "relations": [],
}  # fmt: skip


def read_timeout(svc: Service, n: int) -> float:
    return float(svc.seen[n].extensions["timeout"]["read"])


def test_forget_posts_one_selection_and_waits_longer_than_its_wait() -> None:
    svc = Service((200, APPLIED), (202, PENDING), (200, APPLIED), (200, APPLIED))
    with svc.client(timeout=5.0) as memory:
        done = memory.forget(["e1"], wait=30)
        assert done.status == "applied" and done.removed is not None and done.removed.entry_ids == 2
        queued = memory.forget(run_id="r7", agent_id="planner", wait=0)
        assert queued.status == "pending" and queued.removed is None
        memory.forget("e9")  # one id as a string is one id, not its characters
        memory.forget(all=True, workspace_id="other")
    assert [(r.method, r.url.path) for r in svc.seen] == [("POST", "/v1/memory/forget")] * 4
    assert svc.body(0) == {"workspace_id": "acme", "entry_ids": ["e1"]}
    assert svc.body(1) == {"workspace_id": "acme", "agent_id": "planner", "run_id": "r7"}
    assert svc.body(2)["entry_ids"] == ["e9"] and svc.body(3) == {"workspace_id": "other", "all": True}
    assert [svc.seen[n].url.params["wait"] for n in range(3)] == ["30.0", "0.0", "10.0"]
    # the service holds the answer up to `wait`: the HTTP timeout is above it, never below the client's
    assert read_timeout(svc, 0) == 40.0 and read_timeout(svc, 1) == 10.0


def test_delete_status_and_get_read_any_id() -> None:
    svc = Service((200, APPLIED), (200, APPLIED), (200, DETAIL), (404, {"error": "entry_id: 'e9' was forgotten"}))
    with svc.client() as memory:
        assert memory.delete("a/b c", wait=2).forget_id == "f1"
        assert memory.forget_status("f1").status == "applied"
        assert memory.get("stats").reference_count == 2
        with pytest.raises(NotFound, match="was forgotten"):
            memory.get("e9")
    assert svc.seen[0].method == "DELETE" and svc.seen[0].url.raw_path.startswith(b"/v1/memory/a%2Fb%20c?")
    assert dict(svc.seen[0].url.params) == {"workspace_id": "acme", "wait": "2.0"}
    assert svc.seen[1].url.path == "/v1/memory/forget/f1" and svc.seen[1].url.params["workspace_id"] == "acme"
    assert svc.seen[2].url.path == "/v1/memory" and dict(svc.seen[2].url.params) == {
        "workspace_id": "acme",
        "entry_id": "stats",
    }


def test_list_follows_the_cursor_through_every_page() -> None:
    page = {"memories": [ITEM, {**ITEM, "entry_id": "e2"}], "next_cursor": "c1"}
    svc = Service((200, page), (200, {"memories": [{**ITEM, "entry_id": "e3"}], "next_cursor": None}))
    with svc.client() as memory:
        listing = memory.list(agent_id="planner", entry_types=["a", "b"], page_size=2)
        assert svc.seen == []  # lazy: nothing is asked before the first item is wanted
        items = list(listing)
    assert all(isinstance(m, MemoryItem) for m in items) and [m.entry_id for m in items] == ["e1", "e2", "e3"]
    assert [r.url.params.get("cursor") for r in svc.seen] == [None, "c1"]
    first = svc.seen[0].url.params
    assert first["agent_id"] == "planner" and first.get_list("entry_type") == ["a", "b"] and first["limit"] == "2"
    assert "run_id" not in first and "crew_id" not in first
    one = Service((200, page))
    with one.client() as memory:
        assert memory.list_page(crew_id="platform", cursor="c0", limit=5).next_cursor == "c1"
    assert dict(one.seen[0].url.params) == {"workspace_id": "acme", "crew_id": "platform", "cursor": "c0", "limit": "5"}


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m: m.forget(), ValidationError, "give exactly one of entry_ids"),
        (lambda m: m.forget(["e1"], run_id="r"), ValidationError, "entry_ids or run_id"),
        (lambda m: m.forget(all=True, agent_id="a"), ValidationError, "whole workspace"),
        (lambda m: m.forget(["e1"], wait=61), ClientConfigError, "wait: must be 0..60"),
        (lambda m: m.delete("", wait=1), ClientConfigError, "entry_id: must be a string of 1..128"),
        (lambda m: m.forget_status(""), ClientConfigError, "forget_id: must be a string"),
        (lambda m: m.get("x" * 129), ClientConfigError, "entry_id: must be a string"),
        (lambda m: m.list(page_size=101), ClientConfigError, "limit: must be 1..100"),
        (lambda m: m.list_page(agent="a"), ClientConfigError, "agent: not a listing parameter"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_sent(call: Any, error: type[Exception], match: str) -> None:
    svc = Service((200, APPLIED))
    with svc.client() as memory, pytest.raises(error, match=match):
        call(memory)
    assert svc.seen == []


def test_without_a_workspace_nothing_is_sent() -> None:
    svc = Service((200, APPLIED))
    with svc.client(identity=Identity()) as memory:
        for call in (lambda: memory.forget(["e1"]), lambda: memory.get("e1"), lambda: memory.list()):
            with pytest.raises(ClientConfigError, match="workspace_id"):
                call()
    assert svc.seen == []


async def test_the_async_client_does_the_same() -> None:
    svc = Service(
        (503, {"error": "could not queue the forget"}),
        (200, APPLIED),
        (200, DETAIL),
        (200, {"memories": [ITEM], "next_cursor": "c1"}),
        (200, {"memories": [{**ITEM, "entry_id": "e2"}], "next_cursor": None}),
    )
    async with svc.aclient() as memory:
        assert (await memory.forget(["e1"], wait=20)).status == "applied"  # the 503 was retried
        assert (await memory.get("e1")).entry_id == "e1"
        assert [m.entry_id async for m in memory.list(run_id="r1")] == ["e1", "e2"]
    assert read_timeout(svc, 1) == 30.0 and svc.seen[3].url.params["run_id"] == "r1"
    assert json.loads(svc.seen[0].content) == json.loads(svc.seen[1].content)
    async with Service((503, {"error": "down"})).aclient() as memory:
        with pytest.raises(ServiceUnavailable):
            await memory.delete("e1")
