"""Where agents meet the memory, against one running stack (real broker, store and model, tokens on):
`POST /v1/journal` and the lifecycle (get, list, forget) through the typed client, `episodic mcp` over
stdio and streamable HTTP driven by the MCP SDK's own client session (remember, recall, forget), a
librdkafka (confluent-kafka) producer, and the LangChain retriever. A broker that stops answering turns a
journal write into a 503."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from episodic_client import (
    AsyncMemoryClient,
    EntriesRejected,
    Forbidden,
    Identity,
    MemoryClient,
    NotFound,
    ServiceUnavailable,
)
from episodic_client.calls import RetryPolicy
from infra.broker import free_port
from stack.runtime import Stack
from tests.brokers import TestBroker
from tests.e2e.conftest import poll, running_stack, stack_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TOKENS = {
    "a": ("token-for-workspace-a-0001", {"workspaces": ["ws-a"]}),
    "b": ("token-for-workspace-b-0001", {"workspaces": ["ws-b"]}),
    "planner": ("planner-bound-token-00001", {"workspaces": ["ws-a"], "agent_id": "planner", "crew_id": "platform"}),
    "ops": ("ops-admin-token-000000001", {"admin": True}),
}  # fmt: skip


@dataclass
class Surfaces:
    url: str
    bootstrap: str
    stack: Stack

    def client(self, who: str, **identity: Any) -> MemoryClient:
        return MemoryClient(self.url, token=TOKENS[who][0], identity=Identity(**identity), timeout=20)


@pytest.fixture(scope="module")
async def surfaces(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Surfaces]:
    data = tmp_path_factory.mktemp("surfaces")
    tokens = data / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"name": n, "token": t, **spec} for n, (t, spec) in TOKENS.items()]}))
    broker = TestBroker()
    try:
        settings = stack_settings(broker.bootstrap, data, tokens_file=tokens)
        async with running_stack(settings) as stack:
            yield Surfaces(f"http://127.0.0.1:{stack.http_port}", broker.bootstrap, stack)
    finally:
        broker.close()


def phrase() -> str:
    """A query that matches one memory only (a unique token for BM25)."""
    return f"zq{uuid.uuid4().hex[:10]}"


async def recalled(client: MemoryClient, query: str, entry_id: str, **fields: Any) -> bool:
    answer = await asyncio.to_thread(client.recall, query, mode="sparse", **fields)
    return entry_id in {h.entry_id for h in answer.hits}


async def test_the_journal_endpoint_feeds_the_pipeline(surfaces: Surfaces) -> None:
    key = phrase()
    with surfaces.client("a", workspace_id="ws-a", agent_id="coder") as memory:
        answer = await asyncio.to_thread(
            memory.remember_many,
            [
                {"summary": f"checkout OOM fixed by raising the heap {key}", "entry_type": "peer.escalation",
                 "severity": "error", "id": "http-1"},
                {"summary": "a bad severity", "entry_type": "peer.escalation", "severity": "fatal", "id": "http-bad"},
                {"summary": f"routine chatter {key}", "entry_type": "peer.conversation", "severity": "info",
                 "id": "http-skip"},
            ]
        )  # fmt: skip
        assert answer.accepted == 2 and answer.ids == ["http-1", "http-skip"]
        assert [(e.index, e.field, e.reason) for e in answer.errors] == [(1, "severity", "bad_severity")]
        await poll(lambda: recalled(memory, key, "http-1"), timeout=30, what="the HTTP-written memory recalled")
        hits = (await asyncio.to_thread(memory.recall, key, mode="sparse")).hits
        assert [h.entry_id for h in hits] == ["http-1"]  # the gate's policy still applies: the chatter is skipped
        with pytest.raises(EntriesRejected) as rejected:
            await asyncio.to_thread(memory.remember, "x", ts="yesterday")
        assert rejected.value.errors[0].field == "ts"
        with pytest.raises(Forbidden, match=r"entries\[0\]\.workspace_id: token 'a' may not write workspace 'ws-b'"):
            await asyncio.to_thread(memory.remember, f"sneak {key}", workspace_id="ws-b")
    with surfaces.client("b", workspace_id="ws-b", agent_id="coder") as other:
        assert (await asyncio.to_thread(other.recall, key, mode="sparse")).hits == []


async def test_the_client_inspects_lists_and_forgets(surfaces: Surfaces) -> None:
    key, run = phrase(), f"run-{uuid.uuid4().hex[:8]}"
    with surfaces.client("a", workspace_id="ws-a", agent_id="lifecycle") as memory:
        written = await asyncio.to_thread(
            memory.remember_many,
            [{"summary": f"lesson {i} about the ledger {key}", "entry_type": "peer.escalation", "severity": "warn",
              "run_id": run} for i in range(3)],
        )  # fmt: skip
        assert written.accepted == 3
        first = written.ids[0]
        await poll(lambda: recalled(memory, key, first), timeout=30, what="the written memories recalled")
        detail = await asyncio.to_thread(memory.get, first)
        assert detail.entry_id == first and detail.run_id == run and key in detail.summary
        listed = await asyncio.to_thread(lambda: [m.entry_id for m in memory.list(run_id=run, page_size=2)])
        assert sorted(listed) == sorted(written.ids)  # two pages, followed by the client
        one = await asyncio.to_thread(memory.delete, first, wait=30)
        assert one.status == "applied" and one.removed is not None and one.removed.memories == 1
        with pytest.raises(NotFound, match="was forgotten"):
            await asyncio.to_thread(memory.get, first)
        rest = await asyncio.to_thread(memory.forget, run_id=run, wait=30)
        assert rest.status == "applied" and rest.removed is not None and rest.removed.memories == 2
        assert (await asyncio.to_thread(memory.recall, key, mode="sparse")).hits == []
        assert (await asyncio.to_thread(memory.forget_status, rest.forget_id)).status == "applied"
    refusal = r"^HTTP 403: all: token 'planner' is bound to agent 'planner'"
    with surfaces.client("planner", workspace_id="ws-a") as bound, pytest.raises(Forbidden, match=refusal):
        await asyncio.to_thread(bound.forget, all=True)


def mcp_env(surfaces: Surfaces, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")])
    return {"PYTHONPATH": path, "EPISODIC_URL": surfaces.url, "EPISODIC_CLIENT_RETRIES": "1", **extra}


async def call(session: ClientSession, tool: str, args: dict[str, Any]) -> Any:
    return await session.call_tool(tool, args, read_timeout_seconds=60)


async def test_mcp_over_stdio_remembers_and_recalls_as_its_token(surfaces: Surfaces) -> None:
    """No identity configured: the server takes it from EPISODIC_TOKEN, a token bound to agent planner."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "stack.cli", "mcp"],
        env=mcp_env(surfaces, EPISODIC_TOKEN=TOKENS["planner"][0]),
        cwd=str(ROOT),
    )
    key = phrase()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"recall", "recall_render", "remember", "review", "forget", "memory_health"}
        assert "workspace_id" not in tools["recall"].input_schema["properties"]

        wrote = await call(session, "remember", {"summary": f"the billing deploy needs a canary {key}", "run_id": "r1"})
        assert not wrote.is_error, wrote.content
        memory = wrote.structured_content
        assert memory["workspace_id"] == "ws-a" and memory["agent_id"] == "planner" and memory["written_via"] == "http"

        async def found() -> bool:
            result = await call(session, "recall", {"query": key, "mode": "sparse"})
            assert not result.is_error, result.content
            return memory["id"] in {h["entry_id"] for h in result.structured_content["hits"]}

        await poll(found, timeout=30, what="the remembered entry recalled over MCP")
        block = await call(session, "recall_render", {"query": key, "max_chars": 800, "mode": "sparse"})
        assert not block.is_error and key in block.structured_content["text"]
        assert block.structured_content["entry_ids"] == [memory["id"]]

        sneaky = await call(session, "recall", {"query": key, "workspace_id": "ws-b"})
        assert sneaky.is_error and "workspace_id" in sneaky.content[0].text
        health = await call(session, "memory_health", {})
        assert not health.is_error and health.structured_content["available"] is False
        assert "snapshot" in health.structured_content["reason"]
        with surfaces.client("ops") as ops:  # an admin takes today's snapshots now: the tool reads them
            await asyncio.to_thread(ops.run_health, "ws-a")
        health = await call(session, "memory_health", {})
        assert not health.is_error and health.structured_content["available"] is True, health.content
        snapshot = health.structured_content["snapshot"]
        assert snapshot["workspace_id"] == "ws-a" and snapshot["crew_id"] == "platform"  # the token's crew
        assert snapshot["trigger"] == "admin" and snapshot["inputs"]["memories"] >= 1

        # another agent's memory of the same workspace cannot be forgotten through this agent's server
        with surfaces.client("a", workspace_id="ws-a", agent_id="coder") as coder:
            theirs = await asyncio.to_thread(coder.remember, f"coder's own note {key}")
            await poll(lambda: recalled(coder, key, theirs), timeout=30, what="the other agent's memory")
            # (answered as for an id of no memory: narrowed to this agent, it removes nothing; issue 29)
            refused = await call(session, "forget", {"entry_ids": [theirs]})
            assert not refused.is_error and refused.structured_content["removed"]["memories"] == 0, refused.content
            assert refused.structured_content["selector"] == {"entry_ids": [theirs], "agent_id": "planner"}
            # remember -> forget -> recall no longer finds it (and the other agent's memory stays)
            forgot = await call(session, "forget", {"entry_ids": [memory["id"]]})
            assert not forgot.is_error, forgot.content
            assert forgot.structured_content["status"] == "applied"
            assert forgot.structured_content["removed"]["memories"] == 1
            assert forgot.structured_content["selector"] == {"entry_ids": [memory["id"]], "agent_id": "planner"}
            after = await call(session, "recall", {"query": key, "mode": "sparse"})
            assert not after.is_error and after.structured_content["hits"] == []
            assert await recalled(coder, key, theirs)


async def test_the_client_distributions_mcp_server_needs_no_engine(surfaces: Surfaces) -> None:
    """`episodic-mcp` (episodic-client[mcp]): the same tools over HTTP calls; no policy, so importance is null."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "episodic_client.mcp.cli"],
        env=mcp_env(surfaces, EPISODIC_TOKEN=TOKENS["a"][0], EPISODIC_WORKSPACE_ID="ws-a", EPISODIC_AGENT_ID="lean"),
        cwd=str(ROOT),
    )
    key = phrase()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert {t.name for t in (await session.list_tools()).tools} == {
            "recall", "recall_render", "remember", "review", "forget", "memory_health"
        }  # fmt: skip
        wrote = await call(session, "remember", {"summary": f"the lean server writes too {key}"})
        assert not wrote.is_error, wrote.content
        memory = wrote.structured_content
        assert memory["agent_id"] == "lean" and memory["written_via"] == "http" and memory["importance"] is None

        async def found() -> bool:
            result = await call(session, "recall", {"query": key, "mode": "sparse"})
            assert not result.is_error, result.content
            return memory["id"] in {h["entry_id"] for h in result.structured_content["hits"]}

        await poll(found, timeout=30, what="the memory recalled through the client's MCP server")


async def test_mcp_can_write_straight_to_kafka(surfaces: Surfaces) -> None:
    """`--writes kafka`: the entry goes to journal.entries (after the gate's parser), recall still by HTTP."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "stack.cli", "mcp", "--writes", "kafka"],
        env=mcp_env(
            surfaces,
            EPISODIC_TOKEN=TOKENS["a"][0],
            EPISODIC_WORKSPACE_ID="ws-a",
            EPISODIC_AGENT_ID="kafka-writer",
            EPISODIC_KAFKA_BOOTSTRAP=surfaces.bootstrap,
        ),
        cwd=str(ROOT),
    )
    key = phrase()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        wrote = await call(session, "remember", {"summary": f"written through Kafka {key}", "severity": "warn"})
        assert not wrote.is_error, wrote.content
        assert wrote.structured_content["written_via"] == "kafka"
        bad = await call(session, "remember", {"summary": "too big", "payload": {"blob": "z" * 70_000}})
        assert bad.is_error and "entry refused: payload" in bad.content[0].text
    with surfaces.client("a", workspace_id="ws-a", agent_id="kafka-writer") as memory:
        eid = wrote.structured_content["id"]
        await poll(lambda: recalled(memory, key, eid), timeout=30, what="the Kafka-written memory recalled")


@contextlib.contextmanager
def mcp_http_server(env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "stack.cli", "mcp", "--transport", "http", "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"episodic mcp did not start: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.asynccontextmanager
async def http_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def test_mcp_over_http_a_token_for_workspace_a_cannot_reach_b(surfaces: Surfaces) -> None:
    """The server is configured for workspace ws-b and holds no token: callers bring theirs."""
    env = mcp_env(surfaces, EPISODIC_WORKSPACE_ID="ws-b", EPISODIC_AGENT_ID="agent-b", EPISODIC_TOKEN="")
    key = phrase()
    with mcp_http_server(env) as url:
        async with http_session(url, TOKENS["a"][0]) as session:
            denied = await call(session, "recall", {"query": key})
            assert denied.is_error
            assert "HTTP 403): workspace_id: token 'a' may not read workspace 'ws-b'" in denied.content[0].text
            wrote = await call(session, "remember", {"summary": f"written into b? {key}"})
            assert wrote.is_error
            assert "entries[0].workspace_id: token 'a' may not write workspace 'ws-b'" in wrote.content[0].text
            sneaky = await call(session, "recall", {"query": key, "workspace_id": "ws-a"})
            assert sneaky.is_error and "Extra inputs are not permitted" in sneaky.content[0].text
        async with http_session(url, None) as session:
            anonymous = await call(session, "recall", {"query": key})
            assert anonymous.is_error and "HTTP 401" in anonymous.content[0].text
        async with http_session(url, TOKENS["b"][0]) as session:
            wrote = await call(session, "remember", {"summary": f"ws-b remembers this {key}"})
            assert not wrote.is_error and wrote.structured_content["workspace_id"] == "ws-b"
            eid = wrote.structured_content["id"]

            async def found() -> bool:
                result = await call(session, "recall", {"query": key, "mode": "sparse"})
                return eid in {h["entry_id"] for h in result.structured_content["hits"]}

            await poll(found, timeout=30, what="the entry written through the HTTP MCP server recalled")
    with surfaces.client("a", workspace_id="ws-a", agent_id="agent-b") as memory:
        assert (await asyncio.to_thread(memory.recall, key, mode="sparse")).hits == []


async def test_a_confluent_kafka_producer_feeds_the_pipeline(surfaces: Surfaces) -> None:
    """librdkafka (the client behind most non-Java Kafka libraries) against the embedded broker, idempotent."""
    from confluent_kafka import Producer

    key = phrase()
    producer = Producer(
        {"bootstrap.servers": surfaces.bootstrap, "acks": "all", "enable.idempotence": True, "client.id": "rdkafka"}
    )
    errors: list[Any] = []
    delivered: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        (errors if err is not None else delivered).append(err or msg)

    ids = [f"rdk-{i}" for i in range(5)]
    for i, eid in enumerate(ids):
        entry = {"id": eid, "workspace_id": "ws-a", "agent_id": "rdkafka", "ts": "2026-11-21T10:00:00Z",
                 "entry_type": "summary.generated", "severity": "info",
                 "summary": f"librdkafka entry {i} about the ledger {key}", "payload": {"i": i}}  # fmt: skip
        producer.produce("journal.entries", key=b"ws-a", value=json.dumps(entry).encode(), on_delivery=report)
    remaining = await asyncio.to_thread(producer.flush, 30)
    assert remaining == 0 and errors == [] and len(delivered) == 5
    with surfaces.client("a", workspace_id="ws-a", agent_id="rdkafka") as memory:

        async def all_recalled() -> bool:
            answer = await asyncio.to_thread(memory.recall, key, mode="sparse", k=10)
            return {h.entry_id for h in answer.hits} == set(ids)

        await poll(all_recalled, timeout=30, what="the librdkafka-produced entries recalled")


@pytest.mark.skipif(
    shutil.which("kcat") is None and os.environ.get("EPISODIC_REQUIRE_KCAT") != "1",
    reason="kcat is not installed (Debian's kcat; .ci/run installs it and sets EPISODIC_REQUIRE_KCAT=1)",
)
async def test_kcat_from_debian_feeds_the_pipeline(surfaces: Surfaces) -> None:
    """kcat 1.7 (Debian 12: librdkafka 2.0.2) on Kafka: it failed on Tansu (its ApiVersions v3 answer)."""
    key = phrase()
    lines = [
        json.dumps({"id": f"kcat-{i}", "workspace_id": "ws-a", "agent_id": "kcat", "ts": "2026-11-21T10:00:00Z",
                    "entry_type": "summary.generated", "severity": "info", "summary": f"kcat entry {i} on {key}"})
        for i in range(3)
    ]  # fmt: skip
    done = await asyncio.to_thread(
        subprocess.run,
        ["kcat", "-P", "-b", surfaces.bootstrap, "-t", "journal.entries", "-k", "ws-a", "-X", "acks=all"],
        input="\n".join(lines) + "\n", text=True, capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with surfaces.client("a", workspace_id="ws-a", agent_id="kcat") as memory:

        async def all_recalled() -> bool:
            answer = await asyncio.to_thread(memory.recall, key, mode="sparse", k=10)
            return {h.entry_id for h in answer.hits} == {f"kcat-{i}" for i in range(3)}

        await poll(all_recalled, timeout=30, what="the kcat-produced entries recalled")


async def test_the_langchain_retriever_returns_documents(surfaces: Surfaces) -> None:
    from langchain_core.documents import Document

    from episodic_client.langchain import EpisodicRetriever

    key = phrase()
    identity = Identity(workspace_id="ws-a", agent_id="lc-agent")
    with surfaces.client("a", **vars(identity)) as memory:
        eid = await asyncio.to_thread(memory.remember, f"the search index needs a reindex after {key}", run_id="r9")
        await poll(lambda: recalled(memory, key, eid), timeout=30, what="the memory for the retriever")
        retriever = EpisodicRetriever(client=memory, k=3, recall_fields={"mode": "sparse"})
        docs = await asyncio.to_thread(retriever.invoke, key)
    assert len(docs) == 1 and isinstance(docs[0], Document)
    doc = docs[0]
    assert key in doc.page_content and doc.id == eid
    assert doc.metadata["entry_id"] == eid and doc.metadata["agent_id"] == "lc-agent"
    assert doc.metadata["source"] == f"episodic:{eid}" and "score" in doc.metadata and "summary" not in doc.metadata
    async with AsyncMemoryClient(surfaces.url, token=TOKENS["a"][0], identity=identity) as amemory:
        adocs = await EpisodicRetriever(async_client=amemory, recall_fields={"mode": "sparse"}).ainvoke(key)
    assert [d.id for d in adocs] == [eid]


async def test_a_broker_that_does_not_acknowledge_is_a_503(tmp_path: Path) -> None:
    broker = TestBroker()
    try:
        # the recall service alone (no gate: this checks the endpoint, not how the stages outlive Kafka)
        stack = Stack(stack_settings(broker.bootstrap, tmp_path, embed_model="none"), roles=("http",))
        try:
            await stack.start()
            url = f"http://127.0.0.1:{stack.http_port}"
            identity = Identity(workspace_id="w", agent_id="a")
            async with AsyncMemoryClient(url, identity=identity, retry=RetryPolicy(retries=0), timeout=60) as memory:
                assert await memory.remember("the broker is up") is not None
                await asyncio.to_thread(broker.close)
                t0 = time.monotonic()
                with pytest.raises(ServiceUnavailable, match="did not acknowledge the batch") as e:
                    await memory.remember("the broker is gone")
                assert e.value.status_code == 503 and time.monotonic() - t0 < 45
            async with httpx.AsyncClient(base_url=url) as http:
                text = (await http.get("/metrics")).text
            assert 'episodic_journal_http_entries_total{outcome="unavailable"} 1.0' in text
        finally:
            await stack.stop()
    finally:
        broker.close()
