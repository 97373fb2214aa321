"""The re-embed pass and the model switch on every backend (real engines; two tiny deterministic "models"
of different dims stand in for sentence-transformers: the integration test runs the real ones)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from episodic.domain.chunking import LEGACY
from episodic.domain.identity import point_id
from episodic.embedding.generations import Generation, ModelSwitch, next_vector, plan, read, write
from episodic.kernel.errors import StoreError
from episodic.kernel.ports import DENSE, MemoryStore, ScopeFilter, StateStore
from episodic.lifecycle.reembed import FAILURES, Progress, Reembedder
from tests.contract.conftest import DIM, MakePoint
from tests.contract.conftest import as_qdrant as q

OWN = ScopeFilter(workspace_id="ws-a", agent_id="agent-1", crew_id="crew-1", scope="own")


class Hashed:
    """A deterministic embedder: a text's words hashed into `dim` buckets (unit norm). `fail_on`: texts it
    raises on."""

    def __init__(self, model_id: str, dim: int, fail_on: frozenset[str] = frozenset(), pieces: str = "whole") -> None:
        self.model_id, self.dim, self.fail_on, self.pieces = model_id, dim, fail_on, pieces
        self.calls = 0

    def _vec(self, text: str) -> np.ndarray:
        if text in self.fail_on:
            raise RuntimeError(f"cannot embed {text!r}")
        v = np.zeros(self.dim, dtype=np.float32)
        for w in text.split():
            v[int(hashlib.sha1(w.encode()).hexdigest(), 16) % self.dim] += 1.0
        v[0] += 0.01  # never all zero
        return v / np.linalg.norm(v)

    def embed_documents(self, texts: list[str]) -> list[np.ndarray]:
        self.calls += 1
        return [self._vec(t).reshape(1, -1) for t in texts]

    def embed_query(self, text: str) -> np.ndarray:
        return self._vec(text)


def test_the_pass_fills_the_new_vector_then_switches_every_switch(
    store: MemoryStore, state: StateStore, mk: MakePoint
) -> None:
    s = q(store)
    a, b = Hashed("model-a", DIM), Hashed("model-b", 5, fail_on=frozenset({"poison text"}))
    texts = [f"memory number {i} about topic {i % 3}" for i in range(30)] + ["poison text"]
    assert plan(s, state, a, wall=lambda: 0.0)["pending"] is None  # a new store: its generation is model A's
    s.upsert([mk(f"e{i}", t, a.embed_documents([t])[0].tolist(), model="model-a") for i, t in enumerate(texts)])
    assert plan(s, state, a, wall=lambda: 0.0)["pending"] is None  # the store's own model: nothing to do

    doc = plan(s, state, b, wall=lambda: 0.0)
    assert doc["active"] == {"vector": DENSE, "model": "model-a", "dim": DIM, "pieces": "whole"}
    assert doc["pending"]["vector"] == "dense_1" and doc["pending"]["dim"] == 5
    assert plan(s, state, b, wall=lambda: 0.0)["pending"]["vector"] == "dense_1"  # a restart resumes it
    other = ModelSwitch(store=s, state=state, embedders=[a], poll_s=0.0)  # another process, on model A
    assert other.current() == (other.current()[0], a) and other.current()[0].vector == DENSE

    seen: list[Progress] = []
    now = [100.0]
    first = Reembedder(store=s, state=state, embedder=b, page_size=8, quarantine_after=2, wall=lambda: now[0])
    assert first.step()
    # A second holder waits while the lease is live, and takes over once it is released.
    second = Reembedder(
        store=s, state=state, embedder=b, page_size=8, quarantine_after=2, wall=lambda: now[0], on_progress=seen.append
    )
    with pytest.raises(Exception, match="running in"):
        second.step()
    first.release()
    while second.step():
        pass
    assert seen and seen[-1].switched and seen[-1].ratio == 1.0
    assert [p.remaining for p in seen[:-1]] == sorted((p.remaining for p in seen[:-1]), reverse=True)

    doc = read(state)
    assert doc is not None and doc["active"]["vector"] == "dense_1" and doc["pending"] is None
    assert s.vector == "dense_1"
    # The text model B fails on was retried until quarantined (not forever), then counted as one of the
    # failures the switch allows (EPISODIC_REEMBED_MAX_FAILED); it still has model A's vector.
    poison = point_id("ws-a", "e30")
    assert s.retrieve([poison])[poison][FAILURES] == 2 and s.fetch([poison], with_dense=True)[poison].dense is None
    assert s.count_without_vector("dense_1", failures=FAILURES) == 1
    # The other process moves on its next poll: query vector and ranking are model B's.
    gen, model = other.current()
    assert gen.vector == "dense_1" and model is None  # model B is not loaded there (no loader): BM25 meanwhile
    other.add(b)
    assert other.current()[1] is b
    hits = s.query_dense(b.embed_query(texts[4]).tolist(), OWN, 1)
    assert hits[0].payload["entry_id"] == "e4" and hits[0].payload["model@dense_1"] == "model-b"

    # Retired after its grace: not before.
    assert second.retire() == [] and DENSE in s.dense_layout()
    now[0] += 60
    assert second.retire() == [DENSE] and s.dense_layout() == {"dense_1": 5}
    assert read(state)["retired"] == []  # type: ignore[index]
    assert next_vector(s.dense_layout(), read(state)) == "dense_2"


def test_changing_the_model_again_mid_pass_abandons_the_first_target(
    store: MemoryStore, state: StateStore, mk: MakePoint
) -> None:
    s = q(store)
    a, b, c = Hashed("model-a", DIM), Hashed("model-b", 5), Hashed("model-c", 6)
    plan(s, state, a, wall=lambda: 0.0)
    s.upsert([mk(f"e{i}", f"text {i}", a.embed_documents([f"text {i}"])[0].tolist()) for i in range(10)])
    plan(s, state, b, wall=lambda: 0.0)
    Reembedder(store=s, state=state, embedder=b, page_size=4).step()
    doc = plan(s, state, c, wall=lambda: 0.0)  # started again with yet another model
    assert doc["pending"]["vector"] == "dense_2" and doc["pending"]["model"] == "model-c"
    assert [r["vector"] for r in doc["retired"]] == ["dense_1"]
    assert not Reembedder(store=s, state=state, embedder=b).step()  # B's pass has nothing to do any more
    doc = plan(s, state, a, wall=lambda: 0.0)  # back to the active model: nothing pending
    assert doc["pending"] is None and doc["active"]["model"] == "model-a"
    r = Reembedder(store=s, state=state, embedder=a, retire_after_s=0.0)
    assert sorted(r.retire()) == ["dense_1", "dense_2"] and s.dense_layout() == {DENSE: DIM}


def test_vectors_from_before_generations_or_their_pieces_are_taken_as_the_old_windows(
    store: MemoryStore, state: StateStore, mk: MakePoint
) -> None:
    s = q(store)
    windows, sentences = Hashed("model-a", DIM, pieces=LEGACY), Hashed("model-a", DIM, pieces="sentences:32:254:32")
    s.upsert([mk(f"e{i}", f"text {i}", windows.embed_documents([f"text {i}"])[0].tolist()) for i in range(4)])
    # No document, and memories with vectors: a store from before generations, cut into windows then.
    doc = plan(s, state, sentences, wall=lambda: 0.0)
    assert doc["active"] == {"vector": DENSE, "model": "model-a", "dim": DIM, "pieces": LEGACY}
    assert doc["pending"]["vector"] == "dense_1" and doc["pending"]["model"] == "model-a"
    assert doc["pending"]["pieces"] == "sentences:32:254:32"
    assert plan(s, state, windows, wall=lambda: 0.0)["pending"] is None  # the windows again: nothing to do

    # A document written before generations recorded their pieces reads the same way.
    write(state, {"active": {"vector": DENSE, "model": "model-a", "dim": DIM}, "pending": None, "retired": []})
    switch = ModelSwitch(store=s, state=state, embedders=[sentences, windows], poll_s=0.0)
    assert switch.current() == (Generation(DENSE, "model-a", DIM, LEGACY), windows)
    assert plan(s, state, sentences, wall=lambda: 0.0)["pending"]["pieces"] == "sentences:32:254:32"
    with pytest.raises(StoreError, match="malformed"):
        Generation.of({"vector": DENSE, "model": "m"})


def test_windows_of_unrecorded_sizes_are_the_configured_windows_and_get_recorded(
    store: MemoryStore, state: StateStore, mk: MakePoint
) -> None:
    s = q(store)
    s.upsert([mk("e0", "text 0", [1.0] + [0.0] * (DIM - 1))])
    write(state, {"active": {"vector": DENSE, "model": "model-a", "dim": DIM}, "pending": None, "retired": []})
    exact = Hashed("model-a", DIM, pieces="window:126:16")
    switch = ModelSwitch(store=s, state=state, embedders=[exact], poll_s=0.0)
    assert switch.current()[1] is exact  # the windows of the configured sizes make the unrecorded ones
    doc = plan(s, state, exact, wall=lambda: 0.0)
    assert doc["pending"] is None and doc["active"]["pieces"] == "window:126:16"  # recorded exactly now
    assert read(state)["active"]["pieces"] == "window:126:16"  # type: ignore[index]
    other = plan(s, state, Hashed("model-a", DIM, pieces="window:254:32"), wall=lambda: 0.0)
    assert other["pending"]["pieces"] == "window:254:32"  # other sizes, once recorded: another generation


def test_a_new_store_takes_the_configured_pieces(store: MemoryStore, state: StateStore) -> None:
    sentences = Hashed("model-a", DIM, pieces="sentences:32:254:32")
    doc = plan(q(store), state, sentences, wall=lambda: 0.0)
    assert doc["active"]["pieces"] == "sentences:32:254:32" and doc["pending"] is None


def test_queries_take_any_embedder_of_the_model_while_one_of_the_exact_cut_is_missing(
    store: MemoryStore, state: StateStore, mk: MakePoint
) -> None:
    """A recall-only process configured with other pieces (or facing a pieces key it cannot make, during a
    rolling upgrade): documents need the exact cut, queries are embedded whole, so the same model serves."""
    s = q(store)
    s.upsert([mk("e0", "text 0", [1.0] + [0.0] * (DIM - 1))])
    write(
        state,
        {"active": {"vector": DENSE, "model": "model-a", "dim": DIM, "pieces": "sentences.9:1:2:3"}, "retired": []},
    )
    mine = Hashed("model-a", DIM, pieces="sentences:32:254:32")
    switch = ModelSwitch(store=s, state=state, embedders=[mine, Hashed("model-b", DIM)], poll_s=0.0)
    assert switch.current()[1] is None  # no embedder here makes these pieces for documents
    assert switch.current(queries=True)[1] is mine
    write(state, {"active": {"vector": DENSE, "model": "model-c", "dim": DIM, "pieces": LEGACY}, "retired": []})
    assert switch.current(queries=True)[1] is None  # another model: its vectors, not ours


def test_a_model_that_fails_on_every_text_never_becomes_active(
    store: MemoryStore, state: StateStore, mk: MakePoint
) -> None:
    """Issue 25: the switch used to leave the quarantined memories out of the count, so a model that raised on
    every text switched after a few sweeps (at once under a page) and dense recall was gone."""
    import threading

    from episodic.kernel.metrics import Metrics
    from episodic.lifecycle.reembed import ReembedFailed

    s = q(store)
    a = Hashed("model-a", DIM)
    texts = [f"memory number {i} about topic {i % 3}" for i in range(20)]
    broken = Hashed("model-b", 5, fail_on=frozenset(texts))
    plan(s, state, a, wall=lambda: 0.0)
    s.upsert([mk(f"e{i}", t, a.embed_documents([t])[0].tolist(), model="model-a") for i, t in enumerate(texts)])
    plan(s, state, broken, wall=lambda: 0.0)
    failed: list[dict[str, object]] = []
    run = Reembedder(
        store=s,
        state=state,
        embedder=broken,
        page_size=64,
        quarantine_after=3,
        wall=lambda: 5.0,
        on_failed=failed.append,
    )
    with pytest.raises(ReembedFailed, match="20 of 20 memories failed the model model-b"):
        run.run(threading.Event(), idle_s=0.0)
    doc = read(state)
    assert doc is not None and doc["active"]["model"] == "model-a" and doc["pending"] is None
    assert doc["failed"]["model"] == "model-b" and doc["failed"]["failed"] == 20 and doc["failed"]["embedded"] == 0
    assert "RuntimeError: cannot embed" in str(doc["failed"]["last_error"])
    assert [r["vector"] for r in doc["retired"]] == ["dense_1"] and failed and failed[0]["failed"] == 20
    assert s.vector == DENSE and s.count(has_dense=True) == 20  # dense recall still has every old vector
    assert len(s.query_dense(a.embed_query(texts[3]).tolist(), OWN, 5)) == 5  # answered by model A's vectors
    m = Metrics()
    m.observe_generations(doc)
    assert m.registry.get_sample_value("episodic_reembed_failed_points") == 20
    labels = {"state": "failed", "model": "model-b", "vector": "dense_1", "pieces": "whole"}
    assert m.registry.get_sample_value("episodic_embedding_generation_info", labels) == 1


def test_a_few_failures_within_the_allowance_switch_and_more_do_not(
    store: MemoryStore, state: StateStore, mk: MakePoint
) -> None:
    from episodic.lifecycle.reembed import ReembedFailed

    s = q(store)
    a = Hashed("model-a", DIM)
    texts = [f"memory number {i} about topic {i % 3}" for i in range(12)]
    plan(s, state, a, wall=lambda: 0.0)
    s.upsert([mk(f"e{i}", t, a.embed_documents([t])[0].tolist(), model="model-a") for i, t in enumerate(texts)])
    three = Hashed("model-b", 5, fail_on=frozenset(texts[:3]))
    plan(s, state, three, wall=lambda: 0.0)
    strict = Reembedder(store=s, state=state, embedder=three, page_size=4, quarantine_after=1, max_failed=2)
    with pytest.raises(ReembedFailed, match="3 of 12"):
        while strict.step():
            pass
    assert read(state)["active"]["model"] == "model-a"  # type: ignore[index]
    plan(s, state, three, wall=lambda: 0.0)  # run again, allowing three
    lenient = Reembedder(store=s, state=state, embedder=three, page_size=4, quarantine_after=1, max_failed=3)
    while lenient.step():
        pass
    doc = read(state)
    assert doc is not None and doc["active"]["model"] == "model-b" and doc["failed"] is None
