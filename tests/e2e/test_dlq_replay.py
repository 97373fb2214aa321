"""Dead-letter replay end to end (issue 10 item 4): the whole stack on a real broker, store and model.

- A record the store refuses is dead-lettered (`store_rejected`); replayed while the store still refuses it,
  it comes back to the DLQ with its history (the gate passes the header on to the consumer); once the store
  is repaired, a replay indexes it exactly once (recall finds it once), and replaying again is refused.
- A record the gate refuses comes back with its history on every replay, each run replays what it saw at
  its start only, and the replay limit ends it: no loop.
- `dlq ls` filters by reason, time, workspace, entry and id; garbage on the DLQ topic (and on the ledger)
  is listed as such and skipped by a replay, never a crash.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from episodic.bus.kafka import make_producer, send_all
from episodic.domain.identity import point_id
from episodic.kernel.errors import StoreError
from episodic.kernel.ports import MemoryPoint
from episodic.lifecycle.dlq import Letter, letters
from schemas.topics import JOURNAL_DLQ, JOURNAL_DLQ_REPLAYS
from stack.commands.dlq import ls_main, replay_main
from stack.runtime import Stack
from tests.e2e.conftest import poll, produce_lines, running_stack, stack_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def entry(i: str, ws: str, summary: str, **over: Any) -> bytes:
    fields = {
        "id": i,
        "workspace_id": ws,
        "agent_id": "planner",
        "ts": (datetime.now(UTC) - timedelta(seconds=1)).isoformat().replace("+00:00", "Z"),
        "entry_type": "summary.generated",
        "severity": "info",
        "summary": summary,
    }
    fields.update(over)
    return json.dumps(fields).encode()


async def dead_letters(bootstrap: str) -> list[Letter]:
    return [letter async for letter in letters(bootstrap)]


async def cli(fn: Any, args: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """A CLI entry point (it runs its own event loop) in a thread; its exit status and stdout."""
    capsys.readouterr()
    code = await asyncio.to_thread(fn, list(args))
    return code, capsys.readouterr().out


def poison_store(stack: Stack, refused: set[str]) -> None:
    """The store refuses points of the entries in `refused` (a limit, a broken field: something to repair)."""
    store = stack.store
    assert store is not None
    real, real_if = store.upsert, store.upsert_if

    def refuse(points: list[MemoryPoint]) -> None:
        bad = [p.payload["entry_id"] for p in points if p.payload.get("entry_id") in refused]
        if bad:
            raise StoreError(f"payload refused for {bad}")

    def upsert(points: list[MemoryPoint]) -> None:
        refuse(points)
        real(points)

    def upsert_if(points: list[MemoryPoint], expect: Any, *, writer: str) -> list[str]:
        refuse(points)  # the indexer's write (under the write discipline)
        return real_if(points, expect, writer=writer)

    store.upsert = upsert  # type: ignore[method-assign]
    store.upsert_if = upsert_if  # type: ignore[method-assign]


async def recall_ids(stack: Stack, ws: str, query: str, mode: str = "hybrid") -> list[str]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.http_port}", timeout=30) as http:
        answer = await http.post("/v1/recall", json={"workspace_id": ws, "agent_id": "planner", "query": query,
                                                     "k": 10, "mode": mode})  # fmt: skip
        assert answer.status_code == 200, answer.text
        return [h["entry_id"] for h in answer.json()["hits"]]


async def test_a_repaired_record_is_replayed_and_indexed_once(
    fresh_broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws, b = "w-dlq", ["--bootstrap", fresh_broker]
    refused = {"e3"}
    texts = {
        f"e{i}": f"the canary of release {i} failed on the billing cluster, rollback {i * 11}" for i in range(1, 6)
    }
    texts["e3"] = "the payments queue overflowed when the ledger migration locked the invoices table"
    settings = stack_settings(fresh_broker, tmp_path, visible_budget_ms=0)
    async with running_stack(settings) as stack:
        poison_store(stack, refused)
        await produce_lines(fresh_broker, [entry(i, ws, t) for i, t in texts.items()])
        await poll(lambda: stack.store is not None and stack.store.count(ws) == 4, what="the four others indexed")
        first = await poll(lambda: dead_letters(fresh_broker), what="the refused record dead-lettered")
        assert [(d.record.reason, d.entry_id) for d in first if d.record] == [("store_rejected", "e3")]

        # replayed while the store still refuses it: back in the DLQ, with its history
        code, out = await cli(replay_main, ["--reason", "store_rejected", *b], capsys)
        assert code == 0, out
        assert "replayed 1 of 1" in out
        again = await poll(lambda: _pending(dead_letters(fresh_broker)), what="the replayed record dead-lettered again")
        assert len(again) == 1 and again[0].record is not None
        back = again[0].record
        assert (back.reason, back.replays) == ("store_rejected", 1)
        assert [(h.reason, h.dead_letter.offset) for h in back.history] == [("store_rejected", first[0].offset)]
        assert back.source.topic == "journal.embeddable"  # the consumer refused it again, the header went along
        assert back.raw_bytes() != b"" and json.loads(back.raw_bytes())["id"] == "e3"

        # repaired: a replay indexes it once; the dead letters already replayed are not sent again
        refused.clear()
        code, out = await cli(replay_main, ["--reason", "store_rejected", *b], capsys)
        assert code == 5, out  # the first dead letter is skipped: replayed already
        assert "replayed 1 of 2" in out and "skipped 1: replayed already" in out
        await poll(lambda: stack.store is not None and stack.store.count(ws) == 5, what="the repaired record indexed")
        for mode in ("hybrid", "dense", "sparse"):
            hits = await recall_ids(stack, ws, "payments queue overflowed during the ledger migration", mode)
            assert hits.count("e3") == 1 and hits[0] == "e3", (mode, hits)
        assert stack.store is not None
        assert stack.store.retrieve([point_id(ws, "e3")])[point_id(ws, "e3")]["entry_id"] == "e3"

        # nothing left to replay, unless forced; forced, it is a re-delivery: still one memory
        code, out = await cli(replay_main, ["--reason", "store_rejected", *b], capsys)
        assert code == 5 and "replayed 0 of 2" in out, out
        before = indexed(stack)
        code, out = await cli(replay_main, ["--entry", "e3", "--force", *b], capsys)
        assert code == 0 and "replayed 2 of 2" in out, out
        await poll(lambda: indexed(stack) >= before + 2, what="the forced copies through the pipeline")
        assert stack.store.count(ws) == 5
        assert (await recall_ids(stack, ws, "payments queue overflowed during the ledger migration")).count("e3") == 1
        assert not _unmarked(await dead_letters(fresh_broker))  # no new dead letter: the forced copies indexed

        # ls: filters, and the status of each dead letter
        code, out = await cli(ls_main, ["--json", *b], capsys)
        listed = sorted((json.loads(line) for line in out.splitlines()), key=lambda v: v["replays"])
        assert code == 0 and [v["status"].split()[0] for v in listed] == ["replayed", "replayed"]
        assert [v["replays"] for v in listed] == [0, 1]
        assert listed[1]["history"][0]["reason"] == "store_rejected"
        for args, expect in [
            (["--reason", "store_rejected"], 2),
            (["--reason", "bad_severity"], 0),
            (["--since", "1h"], 2),
            (["--since", (datetime.now(UTC) + timedelta(hours=1)).isoformat()], 0),
            (["--workspace", ws], 2),
            (["--workspace", "elsewhere"], 0),
            (["--entry", "e3"], 2),
            (["--id", listed[1]["id"]], 1),
        ]:
            code, out = await cli(ls_main, ["--json", *args, *b], capsys)
            assert code == 0 and len(out.splitlines()) == expect, (args, out)
        code, out = await cli(ls_main, b, capsys)
        assert code == 0 and "store_rejected" in out and "e3" in out


def indexed(stack: Stack) -> float:
    """`memory.indexed` events of mode vector so far (a re-delivered memory gets one too)."""
    return stack.metrics.registry.get_sample_value("episodic_indexed_total", {"mode": "vector"}) or 0.0


async def _pending(found: Any) -> list[Letter]:
    return [d for d in await found if d.mark is None]


def _unmarked(found: list[Letter]) -> list[Letter]:
    return [d for d in found if d.mark is None]


async def test_a_record_that_keeps_failing_comes_back_with_its_history_and_stops(
    fresh_broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws, b = "w-loop", ["--bootstrap", fresh_broker]
    bad = entry("bad-1", ws, "the severity is not one of ours", severity="fatal")
    settings = stack_settings(fresh_broker, tmp_path, visible_budget_ms=0)
    async with running_stack(settings) as stack:
        await produce_lines(fresh_broker, [bad, entry("ok-1", ws, "a valid neighbour of the bad record")])
        await poll(lambda: stack.store is not None and stack.store.count(ws) == 1, what="the valid entry indexed")
        await poll(lambda: dead_letters(fresh_broker), what="the bad entry dead-lettered")
        # garbage on the DLQ topic (and, once the first replay created it, on the ledger): never fatal
        await produce_lines(fresh_broker, [b"\xff\xfe not json", b'{"reason": 7}'], topic=JOURNAL_DLQ)
        code, out = await cli(ls_main, ["--json", *b], capsys)
        views = [json.loads(line) for line in out.splitlines()]
        assert code == 0 and len(views) == 3
        assert sorted(v["status"] for v in views) == ["pending", "unreplayable", "unreplayable"]

        for run in range(1, 4):  # each run replays the one failure it saw at its start, and no more
            code, out = await cli(replay_main, ["--all", "--max-replays", "2", *b], capsys)
            latest = await poll(
                lambda n=run: _replays_seen(fresh_broker, n), what=f"the failure of replay {run} dead-lettered"
            )
            if run == 1:
                # garbage in the ledger, keyed: it is compacted, and Kafka refuses a record without a key there
                await produce_keyed(fresh_broker, JOURNAL_DLQ_REPLAYS, [(b"x", b"not a mark"), (b"y", b"{}")])
            if run <= 2:
                assert code == 5 and f"replayed 1 of {run + 2}" in out, out  # garbage (and replayed ones) skipped
                assert "skipped 2: not a dead-letter record" in out
                assert latest.record is not None and latest.record.replays == run
                assert [h.reason for h in latest.record.history] == ["bad_severity"] * run
                assert latest.record.raw_bytes() == bad  # the original bytes, every time
            else:
                assert code == 5 and "replayed 0 of 5" in out and "skipped 1: replayed 2 times already" in out, out
        found = await dead_letters(fresh_broker)
        assert sum(1 for d in found if d.entry_id == "bad-1") == 3
        # forced past the limit, once more
        code, out = await cli(replay_main, ["--entry", "bad-1", "--force", "--dry-run", *b], capsys)
        assert code == 0 and "would replay 3 of 3" in out, out


async def _replays_seen(bootstrap: str, n: int) -> Letter | None:
    """The dead letter of `bad-1` with the most replays, once it has `n` of them (run 3 expects none new)."""
    found = [d for d in await dead_letters(bootstrap) if d.entry_id == "bad-1" and d.record is not None]
    best = max(found, key=lambda d: d.record.replays if d.record else 0)
    return best if best.record is not None and best.record.replays >= min(n, 2) else None


async def produce_keyed(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    producer = make_producer(bootstrap)
    await producer.start()
    try:
        await send_all(producer, topic, records)
    finally:
        await producer.stop()
