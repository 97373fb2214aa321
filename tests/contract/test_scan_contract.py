"""The MemoryStore's whole-workspace reads (the health snapshot's input), on every adapter."""

from __future__ import annotations

import pytest

from episodic.domain.identity import point_id
from episodic.kernel.ports import MemoryStore
from episodic.store.facade import SCROLL_PAGE
from tests.contract.conftest import DIM, MakePoint, e, mix


def test_workspaces_lists_each_workspace_with_its_count(store: MemoryStore, mk: MakePoint) -> None:
    assert store.workspaces() == {}
    store.upsert([mk("a1", "one", e(0)), mk("a2", "two", None), mk("b1", "one", e(1), ws="ws-b")])
    assert store.workspaces() == {"ws-a": 2, "ws-b": 1}


def test_scan_workspace_returns_every_memory_of_that_workspace_only(store: MemoryStore, mk: MakePoint) -> None:
    n = SCROLL_PAGE + 9  # more than one page
    store.upsert([mk(f"a{i}", f"memory {i}", e(i % DIM)) for i in range(n)])
    store.upsert([mk("sparse", "no vector", None), mk("other", "elsewhere", e(0), ws="ws-b")])
    hits = list(store.scan_workspace("ws-a"))
    assert len(hits) == n + 1 and {h.payload["workspace_id"] for h in hits} == {"ws-a"}
    assert all(h.dense is None for h in hits)  # not asked for
    assert list(store.scan_workspace("ws-nobody")) == []


def test_scan_workspace_with_dense_returns_every_chunk(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("multi", "two chunks", [e(0), mix((1, 1.0), (2, 1.0))]), mk("bare", "sparse", None)])
    got = {h.payload["entry_id"]: h for h in store.scan_workspace("ws-a", with_dense=True)}
    assert got["bare"].dense is None
    rows = got["multi"].dense
    assert rows is not None and len(rows) == 2
    assert rows[0] == pytest.approx(e(0), abs=1e-6)
    assert rows[1] == pytest.approx(mix((1, 1.0), (2, 1.0)), abs=1e-6)
    assert got["multi"].point_id == point_id("ws-a", "multi")
