"""The densify loop records the piece count of memories written before the store recorded it, once no vector
is missing, with no model (the real Edge store; the piece prior reads the count, store_query.DenseLeg)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from consumers.densify import Densifier
from episodic.domain.identity import point_id
from episodic.indexing.indexer import Indexer
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import MemoryPoint, SparseVec
from episodic.kernel.settings import Settings
from episodic.store.rules import stored_point
from episodic.store.sparse import Bm25Encoder

WS = "ws-old"


def row(i: int) -> list[float]:
    v = [0.0] * 384
    v[i] = 1.0
    return v


def old_point(eid: str, rows: list[list[float]] | None) -> MemoryPoint:
    """A memory as written before the count existed: its payload has no `pieces`."""
    payload: dict[str, Any] = {
        "entry_id": eid,
        "workspace_id": WS,
        "agent_id": "a1",
        "summary": eid,
        "ts": "2026-01-01T00:00:00Z",
        "indexed_at": "2026-01-01T00:00:01Z",
    }
    p = stored_point(MemoryPoint(point_id(WS, eid), SparseVec([1], [1.0]), payload, rows))
    p.payload.pop("pieces", None)
    return MemoryPoint(p.point_id, p.sparse, p.payload, p.dense, p.vector)


def test_the_loop_counts_the_old_memories_pieces_and_then_waits(tmp_path: Path) -> None:
    from stack.stores import open_store

    store = open_store(Settings(data_dir=tmp_path), dim=384)
    try:
        olds = {f"old-{n}": [row(i) for i in range(n)] for n in (1, 3, 7)}
        store.engine.upsert([old_point(eid, rows) for eid, rows in olds.items()] + [old_point("bm25-only", None)])
        pids = [point_id(WS, eid) for eid in [*olds, "bm25-only"]]
        assert not any("pieces" in p for p in store.retrieve(pids).values())

        async def run() -> None:
            stopping = asyncio.Event()

            async def publish(sends: Any) -> None:
                return None

            d = Densifier(
                indexer=Indexer(store=store, embedder=None, bm25=Bm25Encoder()),
                metrics=Metrics(CollectorRegistry()),
                speed=None,  # type: ignore[arg-type]  # nothing is embedded here
                publish=publish,
                quarantine_after=3,
                stopping=stopping,
            )
            task = asyncio.create_task(d.run())
            for _ in range(200):
                got = store.retrieve(pids)
                if all("pieces" in got[point_id(WS, eid)] for eid in olds):
                    break
                await asyncio.sleep(0.05)
            stopping.set()
            d.wake()
            await asyncio.wait_for(task, 10)

        asyncio.run(run())
        got = store.retrieve(pids)
        assert {eid: got[point_id(WS, eid)]["pieces"] for eid in olds} == {"old-1": 1, "old-3": 3, "old-7": 7}
        assert "pieces" not in got[point_id(WS, "bm25-only")]  # no vector: nothing to count
        assert store.backfill_pieces(10) == 0
    finally:
        store.close()
