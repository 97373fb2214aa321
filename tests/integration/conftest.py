"""Integration fixtures: a scratch directory on tmpfs, and a real store with its state store on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from episodic.kernel.ports import MemoryStore, StateStore
from tests.integration.maint_helpers import open_edge
from tests.tmpfs import fast_tmp_dir


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    with fast_tmp_dir(tmp_path) as d:
        yield d


@pytest.fixture
def edge_stores(fast_dir: Path) -> Iterator[tuple[MemoryStore, StateStore]]:
    """A Qdrant Edge store (dim 8) and its state store, on tmpfs."""
    store, state = open_edge(fast_dir / "edge")
    try:
        yield store, state
    finally:
        state.close()
        store.close()
