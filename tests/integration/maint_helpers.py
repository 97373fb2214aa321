"""Helpers for the maintenance tests: memories as the indexer writes them, on a real store, a clock to move."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from episodic.domain.identity import point_id
from episodic.kernel.ports import MemoryPoint, MemoryStore, SparseVec, StateStore

DIM = 8
T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


@dataclass
class Clock:
    """A controllable clock: `clock()` is now; `advance(days=...)` moves it."""

    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def memory(
    entry_id: str,
    *,
    ws: str = "ws-a",
    agent: str = "agent-1",
    base: float = 0.7,
    indexed_at: datetime = T0,
    refs: int = 0,
    priority: str | None = None,
    axis: int = 0,
    **extra: Any,
) -> MemoryPoint:
    dense = [0.0] * DIM
    dense[axis % DIM] = 1.0
    payload: dict[str, Any] = {
        "entry_id": entry_id,
        "workspace_id": ws,
        "agent_id": agent,
        "crew_id": "crew-1",
        "entry_type": "summary.generated",
        "severity": "info",
        "summary": f"memory {entry_id}",
        "payload": {"detail": "x" * 1000, "n": 1},
        "ts": iso(indexed_at),
        "base_importance": base,
        "importance_score": base,
        "priority": priority,
        "reference_count": refs,
        "last_referenced_at": None,
        "indexed_at": iso(indexed_at),
        "aliases": [],
        "occurrences": 1,
        "relations": [],
        "links": [],
    }
    payload.update(extra)
    return MemoryPoint(point_id(ws, entry_id), SparseVec([axis], [1.0]), payload, [dense])


def open_edge(path: Path) -> tuple[MemoryStore, StateStore]:
    from episodic.store.edge import EdgeStore
    from stack.stores import open_state

    store = EdgeStore(path)
    store.ensure_collection(DIM)
    return store, open_state(store)


@dataclass
class Failing:
    """Wraps a store or state store: the `n`th call of `method` raises (a crash at that point)."""

    inner: Any
    method: str
    n: int = 1
    calls: int = 0
    before: Any = None  # called with the arguments just before each call of `method` is delegated
    log: list[Any] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name != self.method:
            return attr

        def wrapped(*args: Any, **kw: Any) -> Any:
            self.calls += 1
            if self.before is not None:
                self.before(*args, **kw)
            if self.calls == self.n:
                raise RuntimeError(f"crash in {name} (call {self.calls})")
            return attr(*args, **kw)

        return wrapped
