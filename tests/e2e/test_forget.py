"""Forget end to end (issue 10, SPEC §11): the whole stack on a real broker, the real store and the real model.

- A forgotten memory stays forgotten when its journal entry is produced again, and when both topics are
  consumed again from the start by new consumer groups (re-delivery of everything, the forget included).
- A workspace forgotten while it is being ingested: nothing of it remains once its partition is drained,
  and an entry written after the forget is a new memory.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from episodic.domain.identity import point_id
from stack.runtime import Stack
from tests.e2e.conftest import poll, produce_lines, read_topic, running_stack, stack_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def entry(i: str, ws: str, summary: str, *, ts: datetime | None = None, agent: str = "planner") -> bytes:
    when = ts or datetime.now(UTC) - timedelta(seconds=1)
    return json.dumps(
        {
            "id": i,
            "workspace_id": ws,
            "agent_id": agent,
            "run_id": "run-1",
            "ts": when.isoformat().replace("+00:00", "Z"),
            "entry_type": "summary.generated",
            "severity": "info",
            "summary": summary,
            "payload": {"i": i},
        }
    ).encode()


def present(stack: Stack, ws: str, *ids: str) -> set[str]:
    assert stack.store is not None
    return {p["entry_id"] for p in stack.store.retrieve([point_id(ws, i) for i in ids]).values()}


def suppressed(stack: Stack) -> float:
    return stack.metrics.registry.get_sample_value("episodic_forget_suppressed_total") or 0.0


async def test_a_forgotten_entry_stays_forgotten_when_it_comes_again(fresh_broker: str, tmp_path: Path) -> None:
    ws = "w-forget"
    lines = [entry(f"e{i}", ws, f"deploy {i} of the billing service failed with error {i * 7}") for i in range(1, 6)]
    settings = stack_settings(fresh_broker, tmp_path, visible_budget_ms=0)
    async with running_stack(settings) as stack:
        await produce_lines(fresh_broker, lines)
        await poll(lambda: present(stack, ws, "e1", "e2", "e3", "e4", "e5") == {"e1", "e2", "e3", "e4", "e5"})
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.http_port}", timeout=40) as http:
            r = await http.delete("/v1/memory/e2", params={"workspace_id": ws, "wait": 30})
            assert r.status_code == 200, r.text
            forget = r.json()
            assert forget["status"] == "applied" and forget["removed"]["memories"] == 1
            # the same entry produced again, then a new one behind it on the same partition
            await produce_lines(fresh_broker, [lines[1], entry("e6", ws, "a new memory after the forget")])
            await poll(lambda: present(stack, ws, "e6") == {"e6"}, what="the entry behind the replay")
            assert present(stack, ws, "e2") == set()
            # counted once the batch's output is delivered, which is after its memories are in the store
            await poll(lambda: suppressed(stack) == 1, timeout=30, what="the replay counted as kept out")
            gone = await http.get("/v1/memory/e2", params={"workspace_id": ws})
            assert gone.status_code == 404 and forget["forget_id"] in gone.json()["error"]
            hits = await http.post("/v1/recall", json={"workspace_id": ws, "agent_id": "planner", "query": "deploy 2"})
            assert "e2" not in {h["entry_id"] for h in hits.json()["hits"]}

    # every record of both topics delivered again: new consumer groups read them from the start, forget included
    again = stack_settings(fresh_broker, tmp_path, visible_budget_ms=0, consumer_group_prefix="episodic-again")
    async with running_stack(again) as stack:
        await produce_lines(fresh_broker, [entry("e7", ws, "the sentinel after the replay")])
        await poll(lambda: present(stack, ws, "e7") == {"e7"}, timeout=120, what="the replay drained")
        assert present(stack, ws, *[f"e{i}" for i in range(1, 8)]) == {"e1", "e3", "e4", "e5", "e6", "e7"}
        assert stack.store is not None and stack.store.count(ws) == 6
        # e2 kept out four times: the original and its replay, each read again and each gated again
        await poll(lambda: suppressed(stack) == 4, timeout=30, what="e2 kept out four times")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.http_port}", timeout=10) as http:
            status = (await http.get(forget["status_url"])).json()
        assert status["status"] == "applied" and status["removed"] == forget["removed"]


async def test_forgetting_a_workspace_while_it_is_ingested_leaves_nothing(fresh_broker: str, tmp_path: Path) -> None:
    doomed, kept = "w-doomed", "w-kept"
    lines: list[bytes] = []
    for i in range(400):
        lines.append(entry(f"d{i}", doomed, f"doomed workspace note {i}: cache {i % 13} evicted under load {i}"))
        if i % 4 == 0:
            lines.append(entry(f"k{i}", kept, f"kept workspace note {i}: queue {i % 7} drained in {i} ms"))
    # inline embedding and small batches: ingestion takes seconds, so the forget lands in the middle of it
    settings = stack_settings(fresh_broker, tmp_path, visible_budget_ms=0, batch_size=8)
    async with running_stack(settings) as stack:
        store = stack.store
        assert store is not None
        await produce_lines(fresh_broker, lines)  # every entry is in the journal before the forget is asked
        await poll(lambda: store.count(doomed) >= 20, what="ingestion under way")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.http_port}", timeout=70) as http:
            r = await http.post("/v1/memory/forget", params={"wait": 60}, json={"workspace_id": doomed, "all": True})
            assert r.status_code == 200, r.text
            removed = r.json()["removed"]["memories"]
            assert 20 <= removed < 400  # the rest was still on its way, and is kept out as it arrives
            later = datetime.now(UTC) + timedelta(seconds=1)
            await produce_lines(
                fresh_broker,
                [entry("after", doomed, "written after the forget", ts=later), entry("k-end", kept, "the end")],
            )
            await poll(lambda: present(stack, doomed, "after") == {"after"}, timeout=120, what="the doomed drained")
            await poll(lambda: store.count(kept) == 101, timeout=120, what="the kept workspace indexed")
            assert store.count(doomed) == 1  # only the memory written after the forget
            listed = (await http.get("/v1/memories", params={"workspace_id": doomed})).json()
            assert [m["entry_id"] for m in listed["memories"]] == ["after"]
        assert removed + suppressed(stack) == 400  # each doomed entry: removed, or kept out on arrival

        # the forget travelled on the doomed workspace's own partition of journal.embeddable
        records = await read_topic(fresh_broker, "journal.embeddable", expect=len(lines) + 3)
        forgets = [r for r in records if dict(r.headers).get("episodic-control") == b"forget"]
        assert len(forgets) == 1
        partitions = {r.partition for r in records if _workspace(r) == doomed}
        assert partitions == {forgets[0].partition}


def _workspace(record: Any) -> str | None:
    try:
        return str(json.loads(record.value)["workspace_id"])
    except (ValueError, KeyError, TypeError):
        return None


async def test_the_cli_forgets_shows_and_lists(
    fresh_broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stack.commands.memory import forget_main, ls_main, show_main

    ws = "w-cli"
    lines = [entry(f"c{i}", ws, f"cli memory {i} about the ledger") for i in range(3)]
    async with running_stack(stack_settings(fresh_broker, tmp_path, visible_budget_ms=0)) as stack:
        url = f"http://127.0.0.1:{stack.http_port}"
        await produce_lines(fresh_broker, lines)
        await poll(lambda: stack.store is not None and stack.store.count(ws) == 3)
        capsys.readouterr()
        assert await asyncio.to_thread(ls_main, ["-w", ws, "--url", url, "--json"]) == 0
        assert {m["entry_id"] for m in json.loads(capsys.readouterr().out)["memories"]} == {"c0", "c1", "c2"}
        assert await asyncio.to_thread(show_main, ["c1", "-w", ws, "--url", url]) == 0
        assert "cli memory 1 about the ledger" in capsys.readouterr().out
        assert await asyncio.to_thread(forget_main, ["-w", ws, "--agent", "planner", "--url", url]) == 0
        assert "forgot 3 memories in w-cli" in capsys.readouterr().out
        assert await asyncio.to_thread(show_main, ["c1", "-w", ws, "--url", url]) == 1
        assert "was forgotten" in capsys.readouterr().err
