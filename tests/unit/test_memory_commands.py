"""`episodic forget`, `show`, `ls` (stack/commands/memory.py) over httpx.MockTransport: the requests they
make, their output and exit statuses. tests/e2e/test_forget.py runs them against a real stack."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from stack.commands.memory import forget_main, ls_main, show_main

APPLIED = {
    "forget_id": "f1",
    "workspace_id": "acme",
    "status": "applied",
    "selector": {"agent_id": "planner"},
    "requested_at": "2026-11-20T10:00:00Z",
    "applied_at": "2026-11-20T10:00:01Z",
    "removed": {"memories": 3, "entry_ids": 4, "edges": 2},
    "removed_ids": ["e1", "e2", "e3", "e4"],
    "status_url": "/v1/memory/forget/f1?workspace_id=acme",
}
PENDING = {**APPLIED, "status": "pending", "removed": None, "applied_at": None, "removed_ids": []}


def service(*answers: tuple[int, Any]) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        status, body = queue.pop(0) if len(queue) > 1 else queue[0]
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handle), seen


def test_forget_one_id_deletes_it_and_says_what_went(capsys: pytest.CaptureFixture[str]) -> None:
    transport, seen = service((200, APPLIED))
    assert forget_main(["--workspace", "acme", "--id", "a/b c", "--wait", "5"], transport=transport) == 0
    [req] = seen
    assert req.method == "DELETE" and req.url.raw_path.startswith(b"/v1/memory/a%2Fb%20c?")
    assert dict(req.url.params) == {"workspace_id": "acme", "wait": "5.0"}
    assert "forgot 3 memories in acme (4 ids with their aliases, 2 relations) [forget f1]" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "body"),
    [
        (["--id", "e1", "--id", "e2"], {"entry_ids": ["e1", "e2"]}),
        (["--agent", "planner"], {"agent_id": "planner"}),
        (["--run", "r7"], {"run_id": "r7"}),
        (["--all", "--yes"], {"all": True}),
    ],
)
def test_forget_selectors_post_one_body(args: list[str], body: dict[str, Any]) -> None:
    transport, seen = service((200, APPLIED))
    assert forget_main(["-w", "acme", *args], transport=transport) == 0
    [req] = seen
    assert req.method == "POST" and req.url.path == "/v1/memory/forget"
    assert json.loads(req.content) == {"workspace_id": "acme", **body}


def test_forget_all_needs_yes_and_one_selector(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["-w", "acme", "--all"], ["-w", "acme"], ["-w", "acme", "--agent", "a", "--run", "r"]):
        with pytest.raises(SystemExit) as e:
            forget_main(argv, transport=service((200, APPLIED))[0])
        assert e.value.code == 2
    assert "--yes" in capsys.readouterr().err


def test_forget_queued_then_status(capsys: pytest.CaptureFixture[str]) -> None:
    transport, _ = service((202, PENDING))
    assert forget_main(["-w", "acme", "--agent", "planner", "--wait", "0"], transport=transport) == 4
    assert "queued, not applied yet: episodic forget --workspace acme --status f1" in capsys.readouterr().out
    transport, seen = service((200, APPLIED))
    assert forget_main(["-w", "acme", "--status", "f1", "--json"], transport=transport) == 0
    assert seen[0].method == "GET" and seen[0].url.path == "/v1/memory/forget/f1"
    assert json.loads(capsys.readouterr().out)["removed"]["memories"] == 3


def test_refusals_and_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    transport, _ = service((403, {"error": "workspace_id: token 'x' may not read workspace 'acme'"}))
    assert forget_main(["-w", "acme", "--id", "e1"], transport=transport) == 1
    assert "HTTP 403: workspace_id: token" in capsys.readouterr().err
    transport, _ = service((404, {"error": "entry_id: 'e9' was forgotten (forget f1 at 2026-11-20T10:00:01Z)"}))
    assert show_main(["e9", "-w", "acme"], transport=transport) == 1

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    assert ls_main(["-w", "acme"], transport=httpx.MockTransport(down)) == 3
    assert "Is `episodic up` running?" in capsys.readouterr().err


MEMORY = {
    "entry_id": "e1", "requested_id": "e1-dup", "workspace_id": "acme", "crew_id": None, "agent_id": "planner",
    "run_id": "r1", "ts": "2026-11-20T10:00:00Z", "entry_type": "peer.escalation", "severity": "error",
    "summary": "checkout OOM\nsecond line", "payload": {"k": 1}, "refs": None, "priority": None,
    "base_importance": 0.9, "importance_score": 0.9, "reference_count": 2, "last_referenced_at": None,
    "indexed_at": "2026-11-20T10:00:01Z", "accepted_at": "2026-11-20T10:00:00Z", "has_dense": True,
    "model": "all-MiniLM-L6-v2", "aliases": ["e1-dup"], "occurrences": 2,
    "relations": [{"src": "e1", "dst": "e0", "relation": "similar", "weight": 0.83, "created_at": "x"}],
}  # fmt: skip


def test_show_reads_any_id_with_the_query_form(capsys: pytest.CaptureFixture[str]) -> None:
    transport, seen = service((200, MEMORY))
    assert show_main(["stats", "-w", "acme"], transport=transport) == 0
    assert seen[0].url.path == "/v1/memory" and dict(seen[0].url.params) == {
        "workspace_id": "acme",
        "entry_id": "stats",
    }
    out = capsys.readouterr().out
    expected = ["e1  (asked for alias e1-dup)", "referenced 2x", "dense by all-MiniLM-L6-v2", "    second line"]
    for text in [*expected, "e1 -similar (0.83)-> e0", "aliases: e1-dup"]:
        assert text in out, text
    assert "reviews             none" in out
    reviewed = {**MEMORY, "review": {"count": 2, "ratings": {"again": 1, "hard": 0, "good": 1, "easy": 0},
                                     "last_rating": "good", "last_reviewed_at": "2026-11-21T10:00:00Z",
                                     "stability": 2.31, "difficulty": 5.1, "retrievability": 0.97}}  # fmt: skip
    transport, _ = service((200, reviewed))
    assert show_main(["e1", "-w", "acme"], transport=transport) == 0
    out = capsys.readouterr().out
    assert "reviews             2 (again 1, hard 0, good 1, easy 0), last good at 2026-11-21T10:00:00Z" in out
    assert "stability 2.31 days, difficulty 5.1, retrievability 0.97" in out


def test_ls_pages_through_with_every(capsys: pytest.CaptureFixture[str]) -> None:
    keys = ("entry_id", "ts", "entry_type", "severity", "agent_id", "crew_id", "run_id", "summary", "importance_score",
            "reference_count", "occurrences", "aliases", "has_dense")  # fmt: skip
    item = {k: MEMORY[k] for k in keys}
    transport, seen = service(
        (200, {"memories": [item], "next_cursor": "c1"}),
        (200, {"memories": [{**item, "entry_id": "e0"}], "next_cursor": None}),
    )
    args = ["-w", "acme", "--agent", "planner", "--type", "a", "--type", "b", "--limit", "1", "--every", "--json"]
    assert ls_main(args, transport=transport) == 0
    assert [m["entry_id"] for m in json.loads(capsys.readouterr().out)["memories"]] == ["e1", "e0"]
    assert seen[0].url.params.get_list("entry_type") == ["a", "b"] and "cursor" not in seen[0].url.params
    assert seen[1].url.params["cursor"] == "c1" and seen[1].url.params["agent_id"] == "planner"
    transport, _ = service((200, {"memories": [item], "next_cursor": "c2"}))
    assert ls_main(["-w", "acme"], transport=transport) == 0
    captured = capsys.readouterr()
    assert "peer.escalation" in captured.out and "--cursor c2" in captured.err


def test_ls_by_crew_and_a_bad_limit_is_usage(capsys: pytest.CaptureFixture[str]) -> None:
    transport, seen = service((200, {"memories": [], "next_cursor": None}))
    assert ls_main(["-w", "acme", "--crew", "platform"], transport=transport) == 0
    assert seen[0].url.params["crew_id"] == "platform" and "(no memories)" in capsys.readouterr().out
    assert ls_main(["-w", "acme", "--limit", "0"], transport=transport) == 2 and len(seen) == 1
    assert capsys.readouterr().err.startswith("episodic ls: limit: must be 1..100")
