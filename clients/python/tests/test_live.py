"""The client against a live `episodic up` (tests/conftest.py), from a venv without the engine: write, recall,
render, inspect, list, forget; identity from the token and from the environment; refusals as typed errors."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from helpers import TOKENS, Live, free_port, poll
from pydantic import ValidationError

from episodic_client import (
    AsyncMemoryClient,
    ClientSettings,
    EntriesRejected,
    Forbidden,
    Identity,
    MemoryClient,
    NotFound,
    RetryPolicy,
    ServiceUnreachable,
    Unauthorized,
)
from episodic_client.models import RecallRequest

WAIT_S = 60.0  # a written entry is searchable within about a second; a loaded 2-core runner takes longer


def phrase() -> str:
    """A query that matches one memory only (a unique token for BM25)."""
    return f"zq{uuid.uuid4().hex[:10]}"


def found(memory: MemoryClient, query: str, entry_id: str) -> bool:
    return entry_id in {h.entry_id for h in memory.recall(query, mode="sparse").hits}


def test_write_recall_render_inspect_list_forget(live: Live) -> None:
    key, run = phrase(), f"run-{uuid.uuid4().hex[:8]}"
    with live.client("a", workspace_id="ws-a", agent_id="coder") as memory:
        written = memory.remember_many(
            [
                {"summary": f"checkout OOM fixed by raising the heap {key}", "entry_type": "peer.escalation",
                 "severity": "error", "run_id": run},
                {"summary": f"the canary caught it first {key}", "entry_type": "summary.generated", "severity": "info",
                 "run_id": run},
                {"summary": "a bad severity", "entry_type": "peer.escalation", "severity": "fatal"},
            ]
        )  # fmt: skip
        assert written.accepted == 2 and written.topic == "journal.entries"
        assert [(e.index, e.field, e.reason) for e in written.errors] == [(2, "severity", "bad_severity")]
        first, second = written.ids
        poll(lambda: found(memory, key, first) and found(memory, key, second), timeout=WAIT_S, what="both recalled")

        block = memory.render(key, max_chars=800, mode="sparse")
        assert block.text.startswith("<recalled-memory") and key in block.text and len(block.text) <= 800
        detail = memory.get(first)
        assert detail.entry_id == first and detail.run_id == run and detail.summary.endswith(key)
        assert {m.entry_id for m in memory.list(run_id=run, page_size=1)} == {first, second}  # two pages
        assert memory.stats().indexed >= 2

        forgot = memory.forget([first], wait=30)
        assert forgot.status == "applied" and forgot.removed is not None and forgot.removed.memories == 1
        assert not found(memory, key, first) and found(memory, key, second)
        with pytest.raises(NotFound):
            memory.get(first)


def test_refusals_are_typed_and_name_the_field(live: Live) -> None:
    with live.client("a", workspace_id="ws-a", agent_id="coder") as memory:
        with pytest.raises(EntriesRejected) as rejected:
            memory.remember("x", ts="yesterday")
        assert rejected.value.errors[0].field == "ts"
        with pytest.raises(Forbidden, match=r"workspace_id"):
            memory.recall("anything", workspace_id="ws-b")
        with pytest.raises(ValidationError, match="k"):  # checked before anything is sent
            memory.recall("anything", k=500)
    stranger = MemoryClient(live.url, token="not-a-token-of-this-service", identity=Identity("ws-a", "coder"))
    with stranger, pytest.raises(Unauthorized):
        stranger.recall("anything")
    closed = f"http://127.0.0.1:{free_port()}"
    gone = MemoryClient(closed, identity=Identity("ws-a", "coder"), retry=RetryPolicy(retries=1, backoff_s=0.01))
    with gone, pytest.raises(ServiceUnreachable, match="cannot reach"):
        gone.recall("anything")


def test_identity_from_the_token_and_from_the_environment(live: Live) -> None:
    key = phrase()
    env = {"EPISODIC_URL": live.url, "episodic_token": TOKENS["planner"][0], "EPISODIC_CLIENT_RETRIES": "1"}
    settings = ClientSettings.from_env(env)
    assert settings.client_retries == 1 and settings.workspace_id is None
    with MemoryClient.from_settings(settings) as bare, bare.identify() as memory:
        assert memory.identity == Identity("ws-a", "planner", "core", "agent")
        entry_id = memory.remember(f"the billing deploy needs a canary {key}")
        poll(lambda: found(memory, key, entry_id), timeout=WAIT_S, what="the bound token's memory recalled")
        assert memory.whoami().agent_id == "planner"
        with pytest.raises(Forbidden, match="agent_id"):  # a bound token recalls as its agent only
            memory.recall(RecallRequest(workspace_id="ws-a", agent_id="coder", query=key))
    with pytest.raises(ValidationError, match="client_timeout_s"):
        ClientSettings.from_env({"EPISODIC_CLIENT_TIMEOUT_S": "0"})


def test_the_async_client(live: Live) -> None:
    key = phrase()

    async def scenario() -> tuple[str, set[str]]:
        identity = Identity("ws-a", "async-agent")
        async with AsyncMemoryClient(live.url, token=TOKENS["a"][0], identity=identity, timeout=20) as memory:
            entry_id = await memory.remember(f"the async path works too {key}")
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while asyncio.get_running_loop().time() < deadline:
                hits = {h.entry_id for h in (await memory.recall(key, mode="sparse")).hits}
                if entry_id in hits:
                    return entry_id, {m.entry_id async for m in memory.list(agent_id="async-agent")}
                await asyncio.sleep(0.2)
            raise AssertionError(f"timed out after {WAIT_S}s waiting for {entry_id} to be recalled")

    entry_id, listed = asyncio.run(scenario())
    assert entry_id in listed
