"""The state store (episodic.store.state) on every engine: documents keyed by (kind, key) beside the memories,
kept apart from them, surviving a restart; and `MemoryStore.delete`."""

from __future__ import annotations

from pathlib import Path

import pytest

from episodic.domain.identity import point_id
from episodic.kernel.errors import StoreError
from episodic.kernel.ports import MemoryStore, StateStore
from episodic.store.facade import QdrantStore
from episodic.store.state import QdrantStateStore
from tests.contract.conftest import PERSISTENT_BACKENDS, MakePoint, e, make_store


def test_put_get_replace_delete(state: StateStore) -> None:
    assert state.get("ledger", "a") is None
    state.put("ledger", "a", {"n": 1, "nested": {"x": [1, 2]}, "workspace_id": "ws-a"})
    state.put_many("ledger", {"b": {"n": 2}, "c/with:odd chars ü": {"n": 3}})
    assert state.get("ledger", "a") == {"n": 1, "nested": {"x": [1, 2]}, "workspace_id": "ws-a"}
    assert state.get_many("ledger", ["a", "b", "missing", "c/with:odd chars ü"]) == {
        "a": {"n": 1, "nested": {"x": [1, 2]}, "workspace_id": "ws-a"},
        "b": {"n": 2},
        "c/with:odd chars ü": {"n": 3},
    }
    state.put("ledger", "a", {"n": 10})  # whole-document replace
    assert state.get("ledger", "a") == {"n": 10}
    state.delete("ledger", ["a", "never-there"])
    assert state.get("ledger", "a") is None
    assert state.count("ledger") == 2


def test_kinds_are_separate_and_where_filters(state: StateStore) -> None:
    state.put("tombstone", "k", {"workspace_id": "ws-a"})
    state.put("snapshot", "k", {"workspace_id": "ws-a", "crew_id": "c1"})
    state.put("snapshot", "k2", {"workspace_id": "ws-b", "crew_id": "c1"})
    state.put("snapshot", "k3", {"workspace_id": "ws-a", "crew_id": "c2"})
    assert state.get("tombstone", "k") == {"workspace_id": "ws-a"}
    assert state.get("snapshot", "k") == {"workspace_id": "ws-a", "crew_id": "c1"}
    assert sorted(k for k, _ in state.scan("snapshot")) == ["k", "k2", "k3"]
    assert sorted(k for k, _ in state.scan("snapshot", where={"workspace_id": "ws-a"})) == ["k", "k3"]
    assert [k for k, _ in state.scan("snapshot", where={"workspace_id": "ws-a", "crew_id": "c2"})] == ["k3"]
    assert state.count("snapshot", where={"crew_id": "c1"}) == 2
    assert state.count("tombstone") == 1
    assert len(list(state.scan("snapshot", limit=2))) == 2


def test_scan_pages_past_one_scroll_page(state: StateStore) -> None:
    state.put_many("many", {f"k{i:04d}": {"i": i} for i in range(600)})
    got = dict(state.scan("many"))
    assert len(got) == 600 and got["k0599"] == {"i": 599}


def test_bad_documents_are_refused(state: StateStore) -> None:
    with pytest.raises(StoreError, match="JSON object"):
        state.put("k", "a", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="may not start with '_'"):
        state.put("k", "a", {"_kind": "forged"})
    with pytest.raises(StoreError, match="kind"):
        state.put("", "a", {})
    with pytest.raises(StoreError, match="must be a string"):
        list(state.scan("k", where={"n": 1}))  # type: ignore[dict-item]


def test_state_never_shows_among_memories(store: MemoryStore, state: StateStore, mk: MakePoint) -> None:
    store.upsert([mk("m1", "disk full on node 3", e(0))])
    state.put_many("ledger", {f"x{i}": {"workspace_id": "ws-a"} for i in range(5)})
    assert store.count() == 1 and store.count("ws-a") == 1
    assert list(store.retrieve([point_id("ws-a", "m1")])) == [point_id("ws-a", "m1")]


def test_delete_removes_memories(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("m1", "one", e(0)), mk("m2", "two", e(1)), mk("m3", "three", None)])
    store.delete([point_id("ws-a", "m1"), point_id("ws-a", "m3"), point_id("ws-a", "never")])
    assert set(store.retrieve([point_id("ws-a", m) for m in ("m1", "m2", "m3")])) == {point_id("ws-a", "m2")}
    assert store.count("ws-a") == 1
    store.delete([])


@pytest.mark.parametrize("backend", PERSISTENT_BACKENDS)
def test_state_survives_a_restart(backend: str, tmp_path: Path) -> None:
    first = make_store(backend, tmp_path)
    assert isinstance(first, QdrantStore)
    st = QdrantStateStore.beside(first)
    st.put("cursor", "decay", {"after": "p-17", "run": "2026-11-23"})
    st.close()
    first.close()
    second = make_store(backend, tmp_path)
    assert isinstance(second, QdrantStore)
    st2 = QdrantStateStore.beside(second)
    try:
        assert st2.get("cursor", "decay") == {"after": "p-17", "run": "2026-11-23"}
    finally:
        st2.close()
        second.close()
