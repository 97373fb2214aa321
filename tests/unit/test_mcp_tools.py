"""The MCP tools (episodic_client.mcp.tools) through the SDK's own in-memory client, over a scripted recall service.

They check the tool schemas (identity fields absent, unknown arguments refused), what each tool sends,
how refusals and outages reach the agent (tool errors, never a crash) and where the identity comes from.
tests/e2e/test_agent_surfaces.py runs `episodic mcp` over stdio and streamable HTTP against a real stack.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from mcp import Client

from episodic.kernel.settings import Settings
from episodic_client import AsyncMemoryClient, Identity, RetryPolicy
from episodic_client.mcp.cli import exposed, service_authenticates
from episodic_client.mcp.tools import HttpWriter, MemoryTools, Writer, bearer, build_server
from stack.commands.mcp import _parser, importance, preflight
from stack.mcp_writers import KafkaWriter

HIT = {
    "entry_id": "e1", "score": 0.91, "age_seconds": 120.0, "entry_type": "peer.escalation", "severity": "error",
    "agent_id": "planner", "crew_id": "platform", "ts": "2026-11-21T10:00:00Z", "payload": {},
    "summary": "checkout ran out of memory", "via": "supersedes", "placed": "newer",
}  # fmt: skip
FORGOTTEN = {
    "forget_id": "f1", "workspace_id": "acme", "status": "applied", "selector": {"entry_ids": ["e1"]},
    "requested_at": "2026-11-20T10:00:00Z", "applied_at": "2026-11-20T10:00:01Z",
    "removed": {"memories": 1, "entry_ids": 1, "edges": 0}, "removed_ids": ["e1"],
    "status_url": "/v1/memory/forget/f1?workspace_id=acme",
}  # fmt: skip
WHO = {"name": "planner", "auth": True, "admin": False, "workspaces": ["acme"], "agent_id": "planner",
       "crew_id": "platform", "role": "agent", "scope": "own"}  # fmt: skip


class Service:
    """The recall service's answers by path; records the requests."""

    def __init__(self, **answers: tuple[int, Any]) -> None:
        self.answers = {
            "/v1/recall": (200, {"mode": "hybrid", "degraded": False, "hits": [HIT]}),
            "/v1/recall/render": (200, {"text": "<recalled-memory>block</recalled-memory>", "hits": [HIT],
                                        "nudge": "You have 72 new journal entries", "mode": "hybrid",
                                        "degraded": False}),
            "/v1/journal": None,
            "/v1/memory/health": (404, {"error": "no memory-health snapshot for workspace 'ws' yet: ..."}),
            "/v1/whoami": (200, WHO),
            "/v1/memory/forget": (200, FORGOTTEN),
            "/v1/memory/review": (202, {"accepted": 1, "entry_ids": ["e1"], "ignored": [],
                                        "topic": "memory.reviewed"}),
        }  # fmt: skip
        self.answers.update({"/" + k.replace("__", "-").replace("_", "/"): v for k, v in answers.items()})
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        answer = self.answers[request.url.path]
        if answer is None:  # the journal endpoint accepts what it gets
            ids = [e["id"] for e in json.loads(request.content)["entries"]]
            answer = (202, {"accepted": len(ids), "ids": ids, "rejected": 0, "errors": [], "topic": "journal.entries"})
        if isinstance(answer, Exception):
            raise answer
        return httpx.Response(answer[0], json=answer[1])

    def paths(self) -> list[str]:
        return [r.url.path for r in self.seen]


def client_of(svc: Service, identity: Identity | None = None) -> AsyncMemoryClient:
    return AsyncMemoryClient(
        "http://svc",
        identity=identity if identity is not None else Identity("acme", "planner", "platform"),
        transport=httpx.MockTransport(svc),
        retry=RetryPolicy(retries=0),
    )


def server(
    svc: Service, identity: Identity | None = None, writer: Writer | None = None, *, engine: bool = True, **kw: Any
) -> Any:
    """The engine's server (`episodic mcp`: the policy's importance), or with engine=False the client's."""
    tools = MemoryTools(
        client_of(svc, identity), writer or HttpWriter(), importance=importance if engine else None, **kw
    )
    return build_server(tools)


async def test_the_tools_and_their_schemas_hold_no_identity() -> None:
    async with Client(server(Service())) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
    assert set(tools) == {"recall", "recall_render", "remember", "review", "forget", "memory_health"}
    for tool in tools.values():
        schema = tool.input_schema
        assert schema["additionalProperties"] is False and tool.description and tool.output_schema
        assert not {"workspace_id", "agent_id", "crew_id", "scope"} & set(schema["properties"])
    assert tools["recall"].input_schema["required"] == ["query"]
    assert tools["recall"].input_schema["properties"]["k"] == {
        "default": 5, "maximum": 50, "minimum": 1, "title": "K", "type": "integer"
    }  # fmt: skip
    assert {"max_chars", "max_tokens", "run_id"} <= set(tools["recall_render"].input_schema["properties"])
    remember = tools["remember"].input_schema
    assert remember["required"] == ["summary"]
    assert set(remember["properties"]) == {"summary", "entry_type", "severity", "run_id", "payload", "id"}
    assert remember["properties"]["severity"]["enum"] == ["debug", "info", "warn", "error"]
    assert tools["recall"].annotations.read_only_hint and not tools["remember"].annotations.read_only_hint
    # the recall filters come from the API's request model (minus identity), with their bounds
    recall = tools["recall"].input_schema["properties"]
    assert {"since", "until", "entry_types", "min_severity", "run_id", "exclude_run_id"} <= set(recall)
    assert recall["entry_types"]["anyOf"][0]["maxItems"] == 50
    assert {"since", "until", "entry_types", "min_severity", "exclude_run_id"} <= set(
        tools["recall_render"].input_schema["properties"]
    )
    forget = tools["forget"]
    assert set(forget.input_schema["properties"]) == {"entry_ids", "run_id", "wait"}
    assert forget.annotations.destructive_hint and not forget.annotations.read_only_hint
    assert "cannot forget another agent's memories or a" in forget.description and "workspace" in forget.description


@pytest.mark.parametrize("field", ["workspace_id", "agent_id", "crew_id", "scope"])
async def test_an_identity_argument_is_refused_and_nothing_is_sent(field: str) -> None:
    svc = Service()
    async with Client(server(svc)) as mcp:
        calls = [("recall", {"query": "x"}), ("remember", {"summary": "x"}), ("memory_health", {}),
                 ("forget", {"entry_ids": ["e1"]}),
                 ("review", {"reviews": [{"entry_id": "e1", "rating": "good"}]})]  # fmt: skip
        for tool, args in calls:
            result = await mcp.call_tool(tool, {**args, field: "other"})
            assert result.is_error
            text = result.content[0].text
            assert field in text and "Extra inputs are not permitted" in text
    assert svc.seen == []


async def test_recall_sends_the_configured_identity() -> None:
    svc = Service()
    async with Client(server(svc)) as mcp:
        result = await mcp.call_tool("recall", {"query": "checkout oom", "k": 3, "mode": "sparse"})
    assert not result.is_error and result.structured_content["hits"][0]["entry_id"] == "e1"
    assert result.structured_content["hits"][0]["placed"] == "newer"  # why the hit stands there reaches the agent
    body = json.loads(svc.seen[0].content)
    # the configured crew is not sent with scope own (it would narrow the recall to that crew's memories)
    assert body == {"workspace_id": "acme", "scope": "own", "agent_id": "planner", "query": "checkout oom", "k": 3,
                    "mode": "sparse", "walk_depth": 0}  # fmt: skip


async def test_a_lead_recalls_its_crew_shared_memory() -> None:
    svc = Service()
    async with Client(server(svc, Identity("acme", "boss", "platform", role="lead"))) as mcp:
        await mcp.call_tool("recall", {"query": "x"})
    assert json.loads(svc.seen[0].content)["scope"] == "crew_shared"


async def test_recall_render_returns_the_block_and_the_nudge_apart() -> None:
    svc = Service()
    async with Client(server(svc)) as mcp:
        result = await mcp.call_tool("recall_render", {"query": "deploy", "max_chars": 800, "run_id": "r1"})
    assert not result.is_error
    assert result.structured_content == {"text": "<recalled-memory>block</recalled-memory>",
                                         "nudge": "You have 72 new journal entries", "degraded": False,
                                         "entry_ids": ["e1"], "placed": ["newer"], "key_moments": []}  # fmt: skip
    assert result.content[0].text.startswith("<recalled-memory>block</recalled-memory>\n\nYou have 72")
    assert json.loads(svc.seen[0].content)["run_id"] == "r1"


async def test_key_moments_are_marked_in_the_tools_output_not_only_in_hit_fields() -> None:
    key = {**HIT, "entry_id": "e2", "surprise": 0.83, "key_moment": True, "placed": "direct"}
    svc = Service(
        v1_recall=(200, {"mode": "hybrid", "degraded": False, "hits": [HIT, key]}),
        v1_recall_render=(200, {"text": "<recalled-memory>[e2 · key moment]</recalled-memory>", "hits": [HIT, key],
                                "mode": "hybrid", "degraded": False}),
    )  # fmt: skip
    async with Client(server(svc)) as mcp:
        ranked = await mcp.call_tool("recall", {"query": "x"})
        block = await mcp.call_tool("recall_render", {"query": "x"})
    assert ranked.structured_content is not None and ranked.structured_content["key_moments"] == ["e2"]
    assert [h["key_moment"] for h in ranked.structured_content["hits"]] == [False, True]
    assert block.structured_content is not None and block.structured_content["key_moments"] == ["e2"]


async def test_remember_writes_an_entry_that_is_always_embedded() -> None:
    svc = Service()
    async with Client(server(svc)) as mcp:
        result = await mcp.call_tool(
            "remember", {"summary": "raised the heap to 4 GiB", "run_id": "r1", "entry_type": "peer.escalation",
                         "payload": {"gib": 4}, "id": "mem-1"}
        )  # fmt: skip
        again = await mcp.call_tool("remember", {"summary": "no id given"})
    assert not result.is_error
    out = result.structured_content
    assert out == {"id": "mem-1", "workspace_id": "acme", "agent_id": "planner", "run_id": "r1",
                   "importance": 0.9, "written_via": "http"}  # fmt: skip
    entry = json.loads(svc.seen[0].content)["entries"][0]
    assert entry["refs"] == {"episodic": True} and entry["crew_id"] == "platform" and entry["payload"] == {"gib": 4}
    generated = again.structured_content["id"]
    assert generated and json.loads(svc.seen[1].content)["entries"][0]["id"] == generated


async def test_the_client_only_server_remembers_without_an_importance() -> None:
    """`episodic-mcp` (episodic-client[mcp]) has no embedding policy: it writes the same entry, importance null."""
    svc = Service()
    async with Client(server(svc, engine=False)) as mcp:
        result = await mcp.call_tool("remember", {"summary": "raised the heap", "entry_type": "peer.escalation"})
    assert not result.is_error and result.structured_content["importance"] is None
    assert json.loads(svc.seen[0].content)["entries"][0]["refs"] == {"episodic": True}


async def test_refusals_and_outages_are_tool_errors_an_agent_can_read() -> None:
    svc = Service(
        v1_recall=(403, {"error": "workspace_id: token 'a' may not read workspace 'acme'"}),
        v1_journal=(422, {"error": "no valid entry", "errors": [
            {"index": 0, "id": "x", "field": "payload", "reason": "oversize_payload",
             "error": "entries[0].payload: payload is 70000 bytes encoded, the limit is 65536"}]}),
    )  # fmt: skip
    async with Client(server(svc)) as mcp:
        denied = await mcp.call_tool("recall", {"query": "x"})
        refused = await mcp.call_tool("remember", {"summary": "x"})
        bad_k = await mcp.call_tool("recall", {"query": "x", "k": 99})
    assert denied.is_error and denied.content[0].text.endswith(
        "refused by the memory service (HTTP 403): workspace_id: token 'a' may not read workspace 'acme' "
        "(identity comes from the server's configuration or your token)"
    )
    assert refused.is_error and "entries[0].payload: payload is 70000 bytes" in refused.content[0].text
    assert bad_k.is_error and "k" in bad_k.content[0].text and "less than or equal to 50" in bad_k.content[0].text
    down = Service(v1_recall=httpx.ConnectError("connection refused"))  # type: ignore[arg-type]
    async with Client(server(down)) as mcp:
        result = await mcp.call_tool("recall", {"query": "x"})
    text = result.content[0].text
    # the service's address stays in the server's log (errors name no internal host; issue 29)
    assert result.is_error and "memory service unreachable (see " in text and "svc" not in text


async def test_memory_health_relays_a_missing_snapshot_clearly() -> None:
    async with Client(server(Service())) as mcp:
        result = await mcp.call_tool("memory_health", {})
    assert not result.is_error
    assert result.structured_content["available"] is False
    assert "no memory-health snapshot" in result.structured_content["reason"]
    snapshot = {"workspace_id": "acme", "score": 81.0, "band": "green"}
    async with Client(server(Service(v1_memory_health=(200, snapshot)))) as mcp:
        result = await mcp.call_tool("memory_health", {})
    assert result.structured_content == {"available": True, "snapshot": snapshot, "reason": None}


async def test_without_configured_identity_it_comes_from_the_token_once() -> None:
    svc = Service()
    async with Client(server(svc, Identity())) as mcp:
        await mcp.call_tool("recall", {"query": "x"})
        await mcp.call_tool("remember", {"summary": "y"})
    assert svc.paths() == ["/v1/whoami", "/v1/recall", "/v1/journal"]
    assert json.loads(svc.seen[1].content)["agent_id"] == "planner"
    assert json.loads(svc.seen[2].content)["entries"][0]["workspace_id"] == "acme"
    several = Service(v1_whoami=(200, {**WHO, "workspaces": ["a", "b"], "agent_id": None, "role": None}))
    async with Client(server(several, Identity())) as mcp:
        result = await mcp.call_tool("recall", {"query": "x"})
    assert result.is_error and "set EPISODIC_WORKSPACE_ID" in result.content[0].text


async def test_kafka_writes_are_checked_by_the_gates_parser_first() -> None:
    writer = KafkaWriter("127.0.0.1:1")  # never reached: the entry is refused before any connection
    async with Client(server(Service(), writer=writer)) as mcp:
        result = await mcp.call_tool("remember", {"summary": "x", "payload": {"blob": "z" * 70_000}})
    assert result.is_error and "entry refused: payload: payload is 70011 bytes encoded" in result.content[0].text
    assert writer._producer is None


def test_the_caller_bearer_token() -> None:
    assert bearer({"authorization": "Bearer abc"}) == "abc"
    assert bearer({"Authorization": "bearer  abc "}) == "abc"
    assert bearer({"authorization": "Basic abc"}) is None
    assert bearer({}) is None and bearer(None) is None


def test_the_command_refuses_to_lend_its_token_beyond_loopback() -> None:
    args = _parser().parse_args(["--transport", "http", "--host", "0.0.0.0"])
    assert "refusing to serve MCP on '0.0.0.0'" in str(preflight(args, Settings(token="server-token-123456")))
    assert preflight(args, Settings(token=None)) is None
    insecure = _parser().parse_args(["--transport", "http", "--host", "0.0.0.0", "--insecure"])
    assert preflight(insecure, Settings(token="server-token-123456")) is None
    kafka = _parser().parse_args(["--writes", "kafka"])
    assert "EPISODIC_KAFKA_BOOTSTRAP" in str(preflight(kafka, Settings(kafka_bootstrap=None)))


async def test_recall_filters_reach_the_service_and_bad_ones_are_tool_errors() -> None:
    svc = Service()
    async with Client(server(svc)) as mcp:
        ok = await mcp.call_tool(
            "recall", {"query": "x", "since": "2026-11-01T00:00:00+01:00", "entry_types": ["peer.escalation"],
                       "min_severity": "warn", "exclude_run_id": "r-now"}
        )  # fmt: skip
        bad = await mcp.call_tool(
            "recall", {"query": "x", "since": "2026-11-02T00:00:00Z", "until": "2026-11-01T00:00:00Z"}
        )
    assert not ok.is_error
    body = json.loads(svc.seen[0].content)
    assert body["since"] == "2026-10-31T23:00:00Z" and body["entry_types"] == ["peer.escalation"]
    assert body["min_severity"] == "warn" and body["exclude_run_id"] == "r-now" and "crew_id" not in body
    assert bad.is_error and "until" in bad.content[0].text and "must be after since" in bad.content[0].text
    assert len(svc.seen) == 1


async def test_forget_removes_only_the_configured_agents_memories() -> None:
    svc = Service()
    async with Client(server(svc)) as mcp:
        by_ids = await mcp.call_tool("forget", {"entry_ids": ["e1", "e2"]})
        by_run = await mcp.call_tool("forget", {"run_id": "r7", "wait": 0})
    assert not by_ids.is_error and by_ids.structured_content["removed"]["memories"] == 1
    assert [json.loads(r.content) for r in svc.seen] == [
        {"workspace_id": "acme", "entry_ids": ["e1", "e2"], "agent_id": "planner"},
        {"workspace_id": "acme", "agent_id": "planner", "run_id": "r7"},
    ]
    assert [r.url.params["wait"] for r in svc.seen] == ["10.0", "0.0"] and not by_run.is_error


async def test_review_sends_the_configured_agents_reviews_and_refuses_garbage() -> None:
    svc = Service()
    async with Client(server(svc)) as mcp:
        ok = await mcp.call_tool(
            "review", {"reviews": [{"entry_id": "e1", "rating": "good"}, {"entry_id": "e2", "rating": "again"}],
                       "run_id": "r7"}
        )  # fmt: skip
        bad = [
            await mcp.call_tool("review", {"reviews": [{"entry_id": "e1", "rating": "great"}]}),
            await mcp.call_tool("review", {"reviews": []}),
            await mcp.call_tool("review", {"reviews": [{"entry_id": "e1", "rating": "good", "agent_id": "x"}]}),
        ]
    assert not ok.is_error and ok.structured_content["accepted"] == 1
    sent = [json.loads(r.content) for r in svc.seen]
    assert len(sent[0].pop("review_id")) == 32  # one idempotency key per call: a retry is applied once
    assert sent == [
        {"workspace_id": "acme", "agent_id": "planner", "run_id": "r7",
         "reviews": [{"entry_id": "e1", "rating": "good"}, {"entry_id": "e2", "rating": "again"}]},
    ]  # fmt: skip
    assert all(r.is_error for r in bad) and "rating" in bad[0].content[0].text and len(svc.seen) == 1
    schema = (await _tool("review")).input_schema
    assert set(schema["properties"]) == {"reviews", "run_id"}
    lead = Service(v1_whoami=(200, {**WHO, "agent_id": None, "role": "lead"}))
    async with Client(server(lead, Identity())) as mcp:
        result = await mcp.call_tool("review", {"reviews": [{"entry_id": "e1", "rating": "good"}]})
    assert result.is_error and "no agent" in result.content[0].text and lead.paths() == ["/v1/whoami"]


async def _tool(name: str) -> Any:
    async with Client(server(Service())) as mcp:
        return {t.name: t for t in (await mcp.list_tools()).tools}[name]


async def test_forget_refuses_what_is_not_one_selection_of_its_own() -> None:
    svc = Service()
    async with Client(server(svc)) as mcp:
        results = [
            await mcp.call_tool("forget", {}),
            await mcp.call_tool("forget", {"entry_ids": ["e1"], "run_id": "r1"}),
            await mcp.call_tool("forget", {"all": True}),
            await mcp.call_tool("forget", {"entry_ids": []}),
            await mcp.call_tool("forget", {"run_id": "r1", "wait": 61}),
        ]
    assert all(r.is_error for r in results)
    assert "give entry_ids or run_id (exactly one)" in results[0].content[0].text
    assert "all" in results[2].content[0].text and "Extra inputs are not permitted" in results[2].content[0].text
    assert svc.seen == []
    crew_lead = {**WHO, "agent_id": None, "role": "lead"}
    lead = Service(v1_whoami=(200, crew_lead))
    async with Client(server(lead, Identity())) as mcp:
        result = await mcp.call_tool("forget", {"run_id": "r1"})
    assert result.is_error and "no agent" in result.content[0].text and lead.paths() == ["/v1/whoami"]
    refused = Service(v1_memory_forget=(403, {"error": "all: token 'x' is bound to agent 'planner'"}))
    async with Client(server(refused)) as mcp:
        result = await mcp.call_tool("forget", {"run_id": "r1"})
    assert result.is_error and "HTTP 403" in result.content[0].text


async def test_kafka_writes_are_held_to_the_callers_token_like_the_journal_endpoint() -> None:
    """--writes kafka goes around POST /v1/journal: the service says who the token is, and the endpoint's own
    rule is applied before anything reaches the broker (issue 29)."""
    cases = [
        (401, {"error": "invalid bearer token"}, "HTTP 401"),
        (200, {**WHO, "agent_id": "coder"}, "agent_id: token 'planner' is bound to agent 'coder'"),
        (200, {**WHO, "workspaces": ["other"], "agent_id": None, "role": None, "crew_id": None}, "workspace_id:"),
    ]
    for status, who, refusal in cases:
        writer = KafkaWriter("127.0.0.1:1")
        svc = Service(v1_whoami=(status, who))
        async with Client(server(svc, writer=writer)) as mcp:
            result = await mcp.call_tool("remember", {"summary": "checkout OOM fixed by a bigger heap"})
        assert result.is_error and refusal in result.content[0].text, result.content
        assert writer._producer is None and "/v1/whoami" in svc.paths()


async def test_a_broker_failure_names_no_host() -> None:
    writer = KafkaWriter("kafka-0.internal.example:1")  # nothing resolves it: the producer cannot start
    async with Client(server(Service(), writer=writer)) as mcp:
        result = await mcp.call_tool("remember", {"summary": "checkout OOM fixed by a bigger heap"})
    text = result.content[0].text
    assert result.is_error and "did not acknowledge" in text and "ref " in text and "internal" not in text


async def test_beyond_loopback_every_call_needs_the_callers_own_token() -> None:
    svc = Service()
    async with Client(server(svc, caller_tokens=True, require_token=True)) as mcp:
        result = await mcp.call_tool("recall", {"query": "x"})
    assert result.is_error and "send your own 'Authorization: Bearer <token>'" in result.content[0].text
    assert svc.seen == []  # nothing reached the service


async def test_beyond_loopback_the_recall_service_must_authenticate() -> None:
    assert exposed(_parser().parse_args(["--transport", "http", "--host", "0.0.0.0"]))
    assert not exposed(_parser().parse_args(["--transport", "http", "--host", "0.0.0.0", "--insecure"]))
    assert not exposed(_parser().parse_args(["--transport", "http"]))  # loopback
    assert await service_authenticates(client_of(Service(v1_whoami=(401, {"error": "missing bearer token"})))) is None
    open_service = Service(v1_whoami=(200, {**WHO, "name": "open", "auth": False, "admin": True}))
    assert "no tokens file" in str(await service_authenticates(client_of(open_service)))
    assert open_service.seen[0].headers.get("authorization") is None  # asked without any token
    down = Service(v1_whoami=httpx.ConnectError("connection refused"))  # type: ignore[arg-type]
    assert "cannot reach" in str(await service_authenticates(client_of(down)))
