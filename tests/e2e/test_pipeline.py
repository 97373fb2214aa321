"""The whole embedded stack on a real broker, the real store and the real model."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest

from episodic.domain.identity import point_id
from episodic.kernel.ports import Selection
from stack.roles import EmbedderRole
from tests.e2e.conftest import poll, produce_lines, read_topic, running_stack, stack_settings
from tests.e2e.journal import build

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_mixed_journal_gives_exact_memories_and_dead_letters(fresh_broker: str, tmp_path: Path) -> None:
    exp = build(n_valid=300)
    # vectors inline (no deferral), so that every memory has exactly one memory.indexed event
    settings = stack_settings(fresh_broker, tmp_path, visible_budget_ms=0)
    async with running_stack(settings) as stack:
        await produce_lines(fresh_broker, exp.lines)
        store = stack.store
        await poll(lambda: store.count() >= len(exp.memories), timeout=120, what="memories indexed")
        events = await read_topic(fresh_broker, "memory.indexed", expect=len(exp.memories) + len(exp.duplicates))
        dlq = await read_topic(fresh_broker, "journal.dlq", expect=len(exp.dlq))

        # exactly the memories the policy keeps: one point per kept entry, none for skipped entries
        assert store.count() == len(exp.memories)
        present = store.retrieve([point_id(ws, i) for ws, i in exp.memories])
        if len(present) != len(exp.memories):  # say which, and what the consumer said of them
            wss = {w for w, _ in exp.memories}
            stored = {(p["workspace_id"], p["entry_id"]) for w in wss for _, p in store.select(Selection(w))}
            said = [json.loads(r.value) for r in events]
            missing, extra = exp.memories - stored, stored - exp.memories
            about = {i for _, i in missing | extra} | {exp.duplicates.get(k, "") for k in missing | extra}
            raise AssertionError(
                f"missing {sorted(missing)}, unexpected {sorted(extra)}; "
                f"events {[e for e in said if e['entry_id'] in about]}; dlq {[json.loads(r.value) for r in dlq]}"
            )
        assert store.retrieve([point_id(ws, i) for ws, i in exp.skipped | set(exp.duplicates)]) == {}
        for ws in {w for w, _ in exp.memories}:
            assert store.count(ws) == len([1 for w, _ in exp.memories if w == ws])

        # duplicates folded into their first entry as aliases
        for (ws, dup_id), owner in exp.duplicates.items():
            assert dup_id in present[point_id(ws, owner)]["aliases"]

        # one memory.indexed event per memory, duplicates marked
        parsed = [json.loads(r.value) for r in events]
        modes = {(e["workspace_id"], e["entry_id"]): e for e in parsed}
        assert len(parsed) == len(exp.memories) + len(exp.duplicates)
        assert {k for k, e in modes.items() if e["mode"] == "vector"} == exp.memories
        assert {k: e["duplicate_of"] for k, e in modes.items() if e["mode"] == "duplicate"} == exp.duplicates

        # the dead letters: exactly the garbage, original bytes, reason and source offsets
        got = sorted((json.loads(r.value)["reason"], base64.b64decode(json.loads(r.value)["raw_b64"])) for r in dlq)
        assert got == sorted(exp.dlq)
        for r in dlq:
            d = json.loads(r.value)
            assert d["source"]["topic"] == "journal.entries" and d["source"]["offset"] >= 0 and d["error"]

        # and the service answers over HTTP
        base = f"http://127.0.0.1:{stack.http_port}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            health = (await http.get("/healthz")).json()
            assert health["episodic"] == "vector" and health["kafka_bootstrap"] == fresh_broker
            stats = (await http.get("/v1/memory/stats", params={"workspace_id": "w-a"})).json()
            assert stats["indexed"] == store.count("w-a") == stats["dense"] and stats["sparse_only"] == 0
            metrics = (await http.get("/metrics")).text
            assert 'episodic_dead_lettered_total{reason="not_utf8"} 1.0' in metrics


async def test_a_backlog_is_searchable_first_and_gets_its_vectors_right_after(
    fresh_broker: str, tmp_path: Path
) -> None:
    exp = build(n_valid=80, seed=9)
    # a 1 ms budget: no batch can be embedded inline in time, so every batch is written sparse first
    settings = stack_settings(fresh_broker, tmp_path, visible_budget_ms=1)
    async with running_stack(settings) as stack:
        await produce_lines(fresh_broker, exp.lines)
        total = len(exp.memories)
        await poll(lambda: stack.store.count() >= total, timeout=90, what="memories searchable")
        await poll(lambda: stack.store.count(has_dense=True) == total, timeout=120, what="vectors added")
        events = await read_topic(fresh_broker, "memory.indexed", expect=2 * total + len(exp.duplicates))
        parsed = [json.loads(r.value) for r in events]
        by_mode: dict[str, list[tuple[str, str]]] = {}
        for e in parsed:
            by_mode.setdefault(e["mode"], []).append((e["workspace_id"], e["entry_id"]))
        # each memory: first searchable (sparse-only), then its vector; duplicates once, as before
        assert sorted(by_mode["vector"]) == sorted(exp.memories)
        assert sorted(by_mode["sparse-only"]) == sorted(exp.memories)
        assert sorted(by_mode["duplicate"]) == sorted(exp.duplicates)
        first = {}
        for i, e in enumerate(parsed):
            first.setdefault((e["workspace_id"], e["entry_id"], e["mode"]), i)
        assert all(first[(*k, "sparse-only")] < first[(*k, "vector")] for k in exp.memories)
        role = stack.role(EmbedderRole)
        assert role is not None and role.consumer is not None and role.consumer.stats.records >= total
        ws, _ = next(iter(exp.memories))
        base = f"http://127.0.0.1:{stack.http_port}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            r = await http.post(
                "/v1/recall",
                json={"workspace_id": ws, "agent_id": "planner", "query": "checkout failed", "mode": "dense", "k": 5},
            )
            assert r.status_code == 200 and r.json()["degraded"] is False
            metrics = (await http.get("/metrics")).text
            assert f"episodic_dense_deferred_total {float(total)}" in metrics
            assert f"episodic_densified_total {float(total)}" in metrics


async def test_sparse_only_mode_then_backfill(fresh_broker: str, tmp_path: Path) -> None:
    exp = build(n_valid=60, seed=5)
    settings = stack_settings(fresh_broker, tmp_path, embed_model="none")
    async with running_stack(settings) as stack:
        assert stack.embedder is None
        await produce_lines(fresh_broker, exp.lines)
        await poll(lambda: stack.store.count() >= len(exp.memories), timeout=60, what="sparse-only indexing")
        base = f"http://127.0.0.1:{stack.http_port}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            assert (await http.get("/healthz")).json()["episodic"] == "sparse-only"
            ws = next(iter(exp.memories))[0]
            stats = (await http.get("/v1/memory/stats", params={"workspace_id": ws})).json()
            assert stats["dense"] == 0 and stats["sparse_only"] == stats["indexed"] > 0
            agent = "planner"
            r = await http.post(
                "/v1/recall",
                json={"workspace_id": ws, "agent_id": agent, "query": "checkout failed", "mode": "hybrid", "k": 5},
            )
            body = r.json()
            assert r.status_code == 200 and body["degraded"] is True
    # the model is back: a restart against the same broker and store backfills the dense vectors
    settings2 = stack_settings(fresh_broker, tmp_path)
    async with running_stack(settings2) as stack2:
        total = len(exp.memories)
        await poll(lambda: stack2.store.count(has_dense=True) == total, timeout=90, what="backfill")
        assert stack2.store.count(has_dense=False) == 0


async def test_entries_are_indexed_with_their_run_context_through_the_stack(fresh_broker: str, tmp_path: Path) -> None:
    chat = [
        "user: what should I buy for my sister's birthday next week?",
        "assistant: a scarf or a book are safe choices",
        "user: I got her a yellow dress",
        "assistant: she will love it",
    ]

    def line(i: int, run: str = "chat-1") -> bytes:
        return json.dumps(
            {
                "id": f"{run}-{i}",
                "workspace_id": "w-ctx",
                "agent_id": "planner",
                "run_id": run,
                "ts": f"2026-11-21T10:00:{i:02d}Z",
                "entry_type": "summary.generated",
                "severity": "info",
                "summary": chat[i],
                "payload": {},
            }
        ).encode()

    settings = stack_settings(fresh_broker, tmp_path)
    async with running_stack(settings) as stack:
        await produce_lines(fresh_broker, [line(0), line(1)])
        await poll(lambda: stack.store.count("w-ctx") >= 2, timeout=60, what="the first two entries")
        await produce_lines(fresh_broker, [line(2), line(3)])  # a later batch: its context comes from the store
        await poll(lambda: stack.store.count("w-ctx") >= 4, timeout=60, what="all four entries")
        base = f"http://127.0.0.1:{stack.http_port}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            assert (await http.get("/healthz")).json()["context"] == "prev:2/16w"
            body = {"workspace_id": "w-ctx", "agent_id": "planner", "query": "sister birthday present", "k": 4}
            hits = (await http.post("/v1/recall", json=body)).json()["hits"]
            reply = next(h for h in hits if h["entry_id"] == "chat-1-2")
            assert reply["summary"] == chat[2]
            assert [c["entry_id"] for c in reply["context"]] == ["chat-1-0", "chat-1-1"]
            shown = (await http.get("/v1/memory/chat-1-2", params={"workspace_id": "w-ctx"})).json()
            own = {(r["relation"], r["dst"]) for r in shown["relations"] if r["src"] == "chat-1-2"}
            assert own == {("previous", "chat-1-1"), ("next", "chat-1-3")}
