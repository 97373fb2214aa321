"""Run context beside embedding generations, on every engine: the five-leg query runs its dense legs (the
context-re-scored one included) on the active generation, filling and switching to another generation
(the re-embed pass, the densify backfill) keeps each memory's context vector, and a collection holding
several generations and the context vector opens again after a restart (Qdrant Edge reads its layout from
the shard's `edge_config.json`: the dense generations and the sparse vectors both)."""

from __future__ import annotations

from pathlib import Path

import pytest

from episodic.domain.context_mode import ContextMode
from episodic.domain.identity import point_id
from episodic.indexing.indexer import Indexer
from episodic.kernel.ports import DENSE, Fusion, MemoryStore, ScopeFilter
from episodic.store.sparse import Bm25Encoder
from tests.contract.conftest import DIM, PERSISTENT_BACKENDS, make_store
from tests.contract.conftest import as_qdrant as q
from tests.contract.test_context_contract import CONTEXT_ONLY, _old_client, _old_edge, chat, context_ids

OWN = ScopeFilter(workspace_id="ws-a", scope="own", agent_id="agent-1")
NEXT = "dense_1"
NEXT_DIM = 3
# every leg, the dense one and the context-re-scored dense one included
FIVE = Fusion(method="rrf", k=3, both_weight=0.5, head=5, head_weight=0.75, context_weight=1.0, both_by_context=True)
DENSE_ONLY = Fusion(method="rrf", k=3, dense_weight=1.0, sparse_weight=0.0)


def u(i: int) -> list[float]:
    v = [0.0] * NEXT_DIM
    v[i] = 1.0
    return v


def found(store: MemoryStore, vector: list[float], text: str, fusion: Fusion) -> list[str]:
    return [h.payload["entry_id"] for h in store.query_hybrid(vector, Bm25Encoder().query(text), OWN, 10, fusion)]


def index_chat(store: MemoryStore, bm25: Bm25Encoder) -> None:
    """The chat, indexed with its run context (sparse-only: no model), then the next generation filled."""
    Indexer(store=store, embedder=None, bm25=bm25, context=ContextMode("prev", 2, 16)).index_batch(chat())
    s = q(store)
    s.add_dense_vector(NEXT, NEXT_DIM)
    rows = {point_id("ws-a", f"c{i}"): [u(i % NEXT_DIM)] for i in range(4)}
    assert s.set_vectors(NEXT, rows, {"model@dense_1": "m2"}) == 4  # the re-embed pass's write


def test_filling_and_switching_generations_keeps_the_context_vector(store: MemoryStore, bm25: Bm25Encoder) -> None:
    index_chat(store, bm25)
    s = q(store)
    s.use_dense_vector(NEXT)
    assert context_ids(store, "c2") == ["c0", "c1"]
    # "sister" is only in c2's (and c3's) run context: the context vector survived the second generation
    assert "c2" in found(store, u(0), "sister's birthday present", CONTEXT_ONLY)
    # the five-leg query on the active generation: every dense leg (the one inside the context-re-scored
    # leg too) takes a NEXT_DIM query vector, which the first generation's vector would refuse
    assert set(found(store, u(2), "sister's birthday present", FIVE)) == {"c0", "c1", "c2", "c3"}
    assert found(store, u(2), "sister", DENSE_ONLY)[0] == "c2"  # ranked by the second generation's rows
    # the densify backfill's write (set_dense on the active vector) keeps it too
    s.set_dense(point_id("ws-a", "c2"), [u(1)], {"densified": True})
    assert "c2" in found(store, u(0), "sister's birthday present", CONTEXT_ONLY)
    with pytest.raises(Exception):  # noqa: B017 - the engine's own dim check: the legs do not use `dense`
        found(store, [1.0] * DIM, "sister", FIVE)


@pytest.mark.parametrize("backend", PERSISTENT_BACKENDS)
def test_generations_and_the_context_vector_open_again(backend: str, tmp_path: Path, bm25: Bm25Encoder) -> None:
    store = make_store(backend, tmp_path)
    try:
        index_chat(store, bm25)
        store.flush()
    finally:
        store.close()

    store = make_store(backend, tmp_path)  # both generations and bm25_context on disk
    try:
        assert store.has_context and q(store).dense_layout() == {DENSE: DIM, NEXT: NEXT_DIM}
        q(store).use_dense_vector(NEXT)
        assert "c2" in found(store, u(0), "sister's birthday present", CONTEXT_ONLY)
        q(store).drop_dense_vector(DENSE)
        store.flush()
    finally:
        store.close()

    store = make_store(backend, tmp_path, dim=NEXT_DIM, vector=NEXT)  # the second generation alone, and C
    try:
        assert store.has_context and q(store).dense_layout() == {NEXT: NEXT_DIM}
        assert "c2" in found(store, u(0), "sister's birthday present", CONTEXT_ONLY)
        assert "c2" in found(store, u(2), "sister's birthday present", FIVE)
    finally:
        store.close()


@pytest.mark.parametrize("backend", PERSISTENT_BACKENDS)
def test_an_old_collection_takes_a_second_generation_and_still_has_no_context(
    backend: str, tmp_path: Path, bm25: Bm25Encoder
) -> None:
    """A collection from before `bm25_context` opens without it, and with a second generation beside its
    first it opens again the same way (Edge: a config naming `bm25_context` would not match the shard)."""
    if backend == "edge":
        _old_edge(tmp_path / "edge")
    else:
        _old_client(tmp_path / "qlocal")
    store = make_store(backend, tmp_path)
    try:
        assert not store.has_context
        index_chat(store, bm25)
        store.flush()
    finally:
        store.close()
    store = make_store(backend, tmp_path)
    try:
        assert not store.has_context and q(store).dense_layout() == {DENSE: DIM, NEXT: NEXT_DIM}
        q(store).use_dense_vector(NEXT)
        assert found(store, u(2), "yellow dress", FIVE)[0] == "c2"  # the four-leg tree on the new generation
    finally:
        store.close()
