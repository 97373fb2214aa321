"""The recall service's HTTP client (episodic.client) and the `episodic recall` front-end over it.

httpx.MockTransport stands in for the service: these check the client's request, its errors and the
command's exit statuses and output; tests/e2e/test_cli.py runs them against a real stack.
"""

from __future__ import annotations

import json

import httpx
import pytest

from episodic.client import RecallClient, RecallClientError, RecallRefused, ServiceUnreachable, default_url
from stack.commands.recall import main as recall_main

HIT = {
    "entry_id": "e1",
    "score": 0.91,
    "age_seconds": 120.0,
    "entry_type": "incident.report",
    "severity": "error",
    "agent_id": "planner",
    "summary": "checkout ran out of memory",
}


def answering(status: int, body: object, seen: list[httpx.Request] | None = None) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handle)


def unreachable() -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    return httpx.MockTransport(handle)


def test_recall_posts_the_body_with_the_token() -> None:
    seen: list[httpx.Request] = []
    body = {"workspace_id": "acme", "agent_id": "planner", "query": "oom"}
    with RecallClient("http://svc:1/", token="t0k", transport=answering(200, {"hits": [HIT]}, seen)) as client:
        assert client.recall(body) == {"hits": [HIT]}
        assert client.render(body) == {"hits": [HIT]}
    assert [str(r.url) for r in seen] == ["http://svc:1/v1/recall", "http://svc:1/v1/recall/render"]
    assert all(r.headers["authorization"] == "Bearer t0k" for r in seen)
    assert json.loads(seen[0].content) == body


def error_of(transport: httpx.MockTransport) -> RecallClientError:
    with RecallClient("http://svc", transport=transport) as client, pytest.raises(RecallClientError) as e:
        client.recall({"workspace_id": "acme", "query": "x", "k": 99})
    return e.value


def test_errors_carry_the_service_message() -> None:
    refusal = {"detail": [], "error": "body.k: Input should be less than or equal to 50"}
    e = error_of(answering(422, refusal))
    assert isinstance(e, RecallRefused) and e.status_code == 422 and str(e) == f"HTTP 422: {refusal['error']}"
    e = error_of(answering(502, "bad gateway"))
    assert isinstance(e, RecallRefused) and str(e) == "HTTP 502: bad gateway"
    e = error_of(answering(200, [1, 2]))
    assert isinstance(e, RecallRefused) and "not a JSON object" in str(e)
    e = error_of(unreachable())
    assert isinstance(e, ServiceUnreachable) and str(e) == "cannot reach http://svc: connection refused"


def test_default_url(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("EPISODIC_RECALL_URL", "EPISODIC_HTTP_HOST", "EPISODIC_HTTP_PORT"):
        monkeypatch.delenv(var, raising=False)
    assert default_url() == "http://127.0.0.1:8080"
    monkeypatch.setenv("EPISODIC_HTTP_HOST", "0.0.0.0")
    monkeypatch.setenv("EPISODIC_HTTP_PORT", "9")
    assert default_url() == "http://127.0.0.1:9"
    monkeypatch.setenv("EPISODIC_RECALL_URL", "https://memory.example/")
    assert default_url() == "https://memory.example"


ARGS = ["checkout oom", "--workspace", "acme", "--agent", "planner", "--url", "http://svc"]


def test_recall_command_prints_a_table_json_or_the_block(capsys: pytest.CaptureFixture[str]) -> None:
    assert recall_main(ARGS, transport=answering(200, {"hits": [HIT], "degraded": True})) == 0
    out = capsys.readouterr()
    assert "score" in out.out and "incident.report" in out.out and "checkout ran out of memory" in out.out
    assert "degraded" in out.err

    assert recall_main([*ARGS, "--json"], transport=answering(200, {"hits": [HIT]})) == 0
    assert json.loads(capsys.readouterr().out) == {"hits": [HIT]}

    seen: list[httpx.Request] = []
    block = "<recalled-memory>...</recalled-memory>"
    assert recall_main([*ARGS, "--render", "--max-chars", "800"], transport=answering(200, {"text": block}, seen)) == 0
    assert capsys.readouterr().out.strip() == block
    assert seen[0].url.path == "/v1/recall/render" and json.loads(seen[0].content)["max_chars"] == 800


def test_recall_command_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    assert recall_main(ARGS, transport=answering(403, {"error": "token not allowed for workspace acme"})) == 1
    assert capsys.readouterr().err.strip() == "episodic recall: HTTP 403: token not allowed for workspace acme"
    assert recall_main(ARGS, transport=unreachable()) == 3
    err = capsys.readouterr().err
    assert "cannot reach http://svc" in err and "Is `episodic up` running?" in err
    with pytest.raises(SystemExit) as usage:
        recall_main(["no workspace"])
    assert usage.value.code == 2
