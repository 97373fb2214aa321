"""The densify loop's pipeline (pure logic, a fake indexer): a round embeds while the previous round's
vectors are written, the next pick leaves the round being written out, every memory is written once, and a
stop lets the write in flight land."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from consumers.densify import DENSIFY_BULK, Densifier
from episodic.embedding.cores import CoreBudget
from episodic.indexing.indexer import BatchResult, DensifyRound
from episodic.kernel.metrics import Metrics
from schemas.events import IndexedEvent

STEP_S = 0.05


class Store:
    def backfill_pieces(self, limit: int) -> int:
        return 0


class Indexer:
    """Memories m0..m{n-1} lack vectors until written; records when each round embeds and writes."""

    def __init__(self, n: int) -> None:
        self.missing = [f"m{i}" for i in range(n)]
        self.lock = threading.Lock()
        self.skips: list[frozenset[str]] = []
        self.spans: list[tuple[str, int, float, float]] = []  # (embed|write, round, start, end)
        self.writes: list[str] = []
        self.store = Store()

    def densify_pick(self, limit: int, *, quarantine_after: int | None = None, skip: Any = ()) -> DensifyRound | None:
        with self.lock:
            self.skips.append(frozenset(skip))
            todo = [(pid, {"summary": pid}) for pid in self.missing if pid not in skip][:limit]
        return DensifyRound(None, "dense", todo) if todo else None  # type: ignore[arg-type]

    def densify_embed(self, work: DensifyRound) -> None:
        t0 = time.monotonic()
        time.sleep(STEP_S)
        work.vectors = [None] * len(work.todo)
        self.spans.append(("embed", id(work), t0, time.monotonic()))

    def densify_write(self, work: DensifyRound, *, quarantine_after: int | None = None) -> BatchResult:
        t0 = time.monotonic()
        time.sleep(STEP_S)
        with self.lock:
            for pid, _ in work.todo:
                self.writes.append(pid)
                self.missing.remove(pid)
        self.spans.append(("write", id(work), t0, time.monotonic()))
        now = datetime.now(UTC)
        return BatchResult(
            events=[
                IndexedEvent(entry_id=p, workspace_id="w", point_id=p, indexed_at=now, mode="vector")
                for p, _ in work.todo
            ]
        )


def densifier(ix: Indexer, sent: list[Any], stopping: asyncio.Event) -> Densifier:
    async def publish(sends: Any) -> None:
        sent.extend(sends)

    return Densifier(
        indexer=ix,  # type: ignore[arg-type]
        metrics=Metrics(),
        speed=SimpleNamespace(observe=lambda chars, seconds: None),  # type: ignore[arg-type]
        publish=publish,
        quarantine_after=3,
        stopping=stopping,
        cores=CoreBudget(cores=2),
    )


def test_a_round_embeds_while_the_last_one_is_written_and_each_memory_is_written_once() -> None:
    n = DENSIFY_BULK * 4 + 7
    ix = Indexer(n)
    sent: list[Any] = []

    async def run() -> None:
        stopping = asyncio.Event()
        d = densifier(ix, sent, stopping)
        task = asyncio.create_task(d.run())
        while ix.missing:
            await asyncio.sleep(0.01)
        stopping.set()
        d.wake()
        await asyncio.wait_for(task, 10)

    asyncio.run(run())
    assert sorted(ix.writes) == sorted(f"m{i}" for i in range(n)) and len(ix.writes) == n  # once each
    assert len(sent) == n  # one event each
    embeds = [s for s in ix.spans if s[0] == "embed"]
    writes = [s for s in ix.spans if s[0] == "write"]
    assert len(embeds) == len(writes) == 5
    # Round k+1 embeds while round k is written (their spans overlap), for every round after the first.
    for (_, _, ws, we), (_, _, es, ee) in zip(writes, embeds[1:], strict=False):
        assert es < we and ws < ee
    # Each pick after the first leaves out the round then being written.
    assert any(len(skip) == DENSIFY_BULK for skip in ix.skips)


def test_a_stop_lets_the_round_being_written_land() -> None:
    ix = Indexer(DENSIFY_BULK + 3)
    sent: list[Any] = []

    async def run() -> None:
        stopping = asyncio.Event()
        d = densifier(ix, sent, stopping)
        task = asyncio.create_task(d.run())
        while not any(s[0] == "embed" for s in ix.spans):
            await asyncio.sleep(0.005)
        stopping.set()  # the first round is being written (or about to be)
        await asyncio.wait_for(task, 10)

    asyncio.run(run())
    embedded = {r for kind, r, *_ in ix.spans if kind == "embed"}
    written = {r for kind, r, *_ in ix.spans if kind == "write"}
    assert embedded and written == embedded  # every round embedded was written before the loop ended
    assert len(ix.writes) == len(set(ix.writes)) >= DENSIFY_BULK and len(sent) == len(ix.writes)
