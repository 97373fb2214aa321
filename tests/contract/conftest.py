"""Fixtures for the store contract suite: every test runs against every adapter.

- `edge`: EdgeStore on a Qdrant Edge shard under tmp_path.
- `qdrant-local`: QdrantServerStore on qdrant-client's local mode (the server API, in process).
- `state`: the state store beside the store under test.

Vectors are tiny synthetic unit vectors (DIM 8) so scores are known exactly; sparse vectors come from
the real BM25 encoder.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from episodic.domain.identity import point_id
from episodic.kernel.ports import DENSE, MemoryPoint, MemoryStore, StateStore
from episodic.store.facade import QdrantStore
from episodic.store.sparse import Bm25Encoder
from episodic.store.state import QdrantStateStore
from tests.tmpfs import fast_tmp_dir

DIM = 8
BACKENDS = ["edge", "qdrant-local"]
PERSISTENT_BACKENDS = ["edge", "qdrant-local-path"]


def e(i: int) -> list[float]:
    """The i-th standard basis vector."""
    v = [0.0] * DIM
    v[i] = 1.0
    return v


def mix(*parts: tuple[int, float]) -> list[float]:
    """A unit vector with the given (axis, weight) components, normalised."""
    v = [0.0] * DIM
    for i, w in parts:
        v[i] = w
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def make_store(backend: str, tmp_path: Path, *, dim: int = DIM, vector: str = DENSE) -> MemoryStore:
    if backend == "edge":
        from episodic.store.edge import EdgeStore

        store: MemoryStore = EdgeStore(tmp_path / "edge", prefetch_limit=50)
    elif backend == "qdrant-local":
        from episodic.store.qdrant_server import QdrantServerStore

        store = QdrantServerStore(location=":memory:", collection="memories", prefetch_limit=50)
    elif backend == "qdrant-local-path":
        from episodic.store.qdrant_server import QdrantServerStore

        store = QdrantServerStore(path=tmp_path / "qlocal", collection="memories", prefetch_limit=50)
    else:  # pragma: no cover
        raise ValueError(backend)
    assert isinstance(store, QdrantStore)
    store.ensure_collection(dim, vector=vector)
    return store


def as_qdrant(store: MemoryStore) -> QdrantStore:
    """The store under test as the QdrantStore it is (for what the MemoryStore port does not offer)."""
    assert isinstance(store, QdrantStore)
    return store


@pytest.fixture
def fast_tmp(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory on tmpfs where there is one (tests.tmpfs); the restart test runs on the real disk."""
    with fast_tmp_dir(tmp_path) as d:
        yield d


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, fast_tmp: Path) -> Iterator[MemoryStore]:
    s = make_store(request.param, fast_tmp)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def state(store: MemoryStore) -> Iterator[StateStore]:
    """The state store beside `store` (same engine)."""
    assert isinstance(store, QdrantStore)
    st = QdrantStateStore.beside(store)
    yield st
    st.close()


@pytest.fixture(scope="session")
def bm25() -> Bm25Encoder:
    return Bm25Encoder()


MakePoint = Callable[..., MemoryPoint]


@pytest.fixture
def mk(bm25: Bm25Encoder) -> MakePoint:
    """Build a MemoryPoint the way the indexer does (payload fields recall filters on)."""

    def _mk(
        entry_id: str,
        text: str,
        dense: list[list[float]] | list[float] | None,
        *,
        ws: str = "ws-a",
        agent: str = "agent-1",
        crew: str | None = "crew-1",
        importance: float | None = 0.5,
        **extra: Any,
    ) -> MemoryPoint:
        rows: list[list[float]] | None
        if dense is None:
            rows = None
        elif dense and isinstance(dense[0], (int, float)):
            rows = [cast(list[float], list(dense))]
        else:
            rows = [list(r) for r in cast(list[list[float]], dense)]
        payload: dict[str, Any] = {
            "entry_id": entry_id,
            "workspace_id": ws,
            "agent_id": agent,
            "crew_id": crew,
            "entry_type": "summary.generated",
            "severity": "info",
            "summary": text,
            "ts": "2026-01-01T00:00:00Z",
            "indexed_at": "2026-01-01T00:00:01Z",
            "aliases": [],
            "payload": {"k": [1, 2, {"nested": True}]},
            "reference_count": 0,
        }
        if importance is not None:
            payload["importance_score"] = importance
        payload.update(extra)
        return MemoryPoint(point_id=point_id(ws, entry_id), sparse=bm25.document(text), payload=payload, dense=rows)

    return _mk


class Interleaved:
    """The store, with `during()` run once inside the first call to `method`: after it (`before=False`) or just
    before it: another writer's turn in the window between what a writer read and what it writes."""

    def __init__(self, store: MemoryStore, method: str, during: Callable[[], Any], *, before: bool = False) -> None:
        self._store, self._method, self._before = store, method, before
        self._during: Callable[[], Any] | None = during

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name != self._method or self._during is None:
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            during, self._during = self._during, None
            assert during is not None
            if self._before:
                during()
            out = attr(*args, **kw)
            if not self._before:
                during()
            return out

        return call
