"""Re-embed on a model change, with two real models, under load: recall keeps answering, never ranks one
model's query against the other's vectors, switches when the pass is done, and a restart mid-pass resumes.

Model A is the bundled all-MiniLM-L6-v2 (384-d, mean pooling). Model B is built here from the same weights
with CLS pooling and a 256-d Dense projection, saved to a directory and loaded by path, as a user would
point EPISODIC_EMBED_MODEL at it.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from episodic.domain.identity import point_id
from episodic.embedding.embedder import SentenceTransformerEmbedder, load_model
from episodic.embedding.generations import ModelSwitch, plan, read
from episodic.indexing.indexer import Indexer
from episodic.kernel.ports import DENSE
from episodic.kernel.settings import Settings
from episodic.lifecycle.reembed import Reembedder
from episodic.retrieval.engine import RecallEngine
from episodic.store.edge import EdgeStore
from episodic.store.facade import QdrantStore
from episodic.store.sparse import Bm25Encoder
from episodic.store.state import QdrantStateStore
from episodic_client.models import RecallRequest
from schemas.events import EmbeddableRecord
from stack.stores import ensure_existing
from tests.polling import poll

pytestmark = pytest.mark.integration

TOPICS = ("checkout", "payments", "dns", "kafka", "cache", "auth", "search", "billing", "deploy", "metrics")


def rec(i: int, summary: str) -> EmbeddableRecord:
    return EmbeddableRecord.from_dict(
        {
            "id": f"e{i}",
            "workspace_id": "w1",
            "agent_id": "a1",
            "crew_id": "c1",
            "ts": "2026-11-20T10:00:00Z",
            "entry_type": "summary.generated",
            "severity": "info",
            "summary": summary,
            "payload": {"i": i},
            "base_importance": 0.7,
            "accepted_at": datetime(2026, 11, 20, 10, 0, 1, tzinfo=UTC),
        }
    )


def text(i: int) -> str:
    return f"incident {i}: the {TOPICS[i % len(TOPICS)]} service failed in region r{i % 7} after deploy {i * 13}"


@pytest.fixture(scope="module")
def model_b(tmp_path_factory: pytest.TempPathFactory) -> SentenceTransformerEmbedder:
    import torch
    from sentence_transformers import SentenceTransformer, models

    from episodic.embedding.embedder import resolve_model_path

    base = SentenceTransformer(resolve_model_path("all-MiniLM-L6-v2"), device="cpu")
    torch.manual_seed(7)
    transformer = base[0]
    pooling = models.Pooling(384, pooling_mode="cls")
    projection = models.Dense(384, 256, bias=False, activation_function=torch.nn.Identity())
    path = tmp_path_factory.mktemp("model-b") / "minilm-cls-256"
    SentenceTransformer(modules=[transformer, pooling, projection, models.Normalize()], device="cpu").save(str(path))
    b = load_model(str(path), Settings())
    assert b.dim == 256
    return b


def open_edge(path: Path) -> tuple[QdrantStore, QdrantStateStore]:
    store = EdgeStore(path)
    ensure_existing(store, 384)  # as stack.stores.open_store: an existing collection opens with its layout
    return store, QdrantStateStore.beside(store)


class Recorded:
    """The store's query calls: which vector each named, and the length of the query vector."""

    def __init__(self, store: QdrantStore) -> None:
        self.calls: list[tuple[str | None, int, list[int]]] = []
        self._lock = threading.Lock()
        for name in ("query_hybrid", "query_dense"):
            setattr(store, name, self._wrap(getattr(store, name)))

    def _wrap(self, fn: Any) -> Any:
        def call(vector: list[float], *args: Any, **kw: Any) -> Any:
            hits = fn(vector, *args, **kw)
            rows = [len(h.dense[0]) for h in hits if h.dense]
            with self._lock:
                self.calls.append((kw.get("using"), len(vector), rows))
            return hits

        return call


def test_reindex_under_load_switches_without_mixing_and_resumes_after_a_restart(
    fast_dir: Path, embedder: SentenceTransformerEmbedder, model_b: SentenceTransformerEmbedder
) -> None:
    a = embedder
    bm25 = Bm25Encoder()
    path = fast_dir / "edge"
    n = 120

    # The store as model A wrote it.
    store, state = open_edge(path)
    plan(store, state, a, wall=time.time)
    switch_a = ModelSwitch(store=store, state=state, embedders=[a])
    Indexer(store=store, embedder=None, bm25=bm25, switch=switch_a).index_batch([rec(i, text(i)) for i in range(n)])
    assert store.count(has_dense=True) == n
    e0 = point_id("w1", "e0")
    assert store.retrieve([e0])[e0]["model"] == a.model_id

    # Started again with model B: a pending generation, recall still on A's vectors.
    doc = plan(store, state, model_b, wall=time.time)
    assert doc["active"]["vector"] == DENSE and doc["pending"]["vector"] == "dense_1"
    assert store.dense_layout() == {DENSE: 384, "dense_1": 256}
    switch = ModelSwitch(store=store, state=state, embedders=[model_b, a], poll_s=0.05)
    gen, query_model = switch.current()
    assert gen.vector == DENSE and query_model is a

    # A first run of the pass, stopped after a few pages (the process stops mid-reindex).
    first = Reembedder(store=store, state=state, embedder=model_b, page_size=16)
    assert first.step() and first.step()
    first.release()
    pending = read(state)["pending"]  # type: ignore[index]
    assert pending["done"] == 32 and pending["cursor"] is not None
    state.close()
    store.close()

    # Restart: the pass resumes at its cursor while ingestion and recall go on.
    store, state = open_edge(path)
    kept = read(state)["pending"]  # type: ignore[index]
    assert (kept["done"], kept["cursor"], kept["lease_until"]) == (32, pending["cursor"], 0)  # resumable at once
    recorded = Recorded(store)
    switch = ModelSwitch(store=store, state=state, embedders=[model_b, a], poll_s=0.05)
    assert switch.current()[0].vector == DENSE  # still A until the pass is done
    indexer = Indexer(store=store, embedder=None, bm25=bm25, switch=switch)
    engine = RecallEngine(store=store, embedder=None, bm25=bm25, switch=switch)
    errors: list[BaseException] = []
    answered: list[int] = []
    stop = threading.Event()

    def recall_loop() -> None:
        i = 0
        while not stop.is_set():
            try:
                res = engine.recall(RecallRequest(query=text(i % n), workspace_id="w1", agent_id="a1", k=5))
                answered.append(len(res.hits))
                assert res.hits and not res.degraded
            except BaseException as e:  # every failure is the test's finding
                errors.append(e)
                return
            i += 7

    def ingest_loop() -> None:
        i = n
        while not stop.is_set() and i < n + 200:
            try:
                indexer.index_batch([rec(j, text(j)) for j in range(i, i + 4)])
            except BaseException as e:
                errors.append(e)
                return
            i += 4
            time.sleep(0.05)

    loops = [threading.Thread(target=recall_loop), threading.Thread(target=ingest_loop)]
    for t in loops:
        t.start()
    second = Reembedder(store=store, state=state, embedder=model_b, page_size=16, retire_after_s=0.5)
    assert second.holder != first.holder
    done = threading.Event()
    runner = threading.Thread(target=lambda: (second.run(done), done.set()))
    runner.start()
    try:
        poll(lambda: switch.current()[0].vector == "dense_1", 240, "the switch to model B")
        poll(lambda: len(answered) > 20, 60, "recalls after the switch")
        time.sleep(0.5)  # recall and ingestion go on across the switch
    finally:
        stop.set()
        for t in loops:
            t.join(60)
        done.set()
        runner.join(60)
    assert not errors, errors[:3]

    # Every query named one generation and its vector has that generation's dim; every returned row too.
    dims = {DENSE: 384, "dense_1": 256}
    assert recorded.calls
    for using, qdim, rows in recorded.calls:
        assert using in dims and qdim == dims[using], (using, qdim)
        assert all(r == qdim for r in rows), (using, qdim, rows)
    used = [u for u, _, _ in recorded.calls]
    assert used[0] == DENSE and used[-1] == "dense_1"
    first_b = used.index("dense_1")
    assert set(used[first_b:]) == {"dense_1"}, "recall went back to model A after the switch"

    # The resumed run did not start over: it re-embedded about the rest (a page may be done twice).
    doc = read(state)
    assert doc is not None and doc["active"]["vector"] == "dense_1" and doc["pending"] is None
    # The old vector is dropped after its grace; every memory ends up with B's vector (densify the stragglers).
    poll(lambda: second.retire() == [] and store.dense_layout() == {"dense_1": 256}, 30, "the old vector dropped")
    while Indexer(store=store, embedder=None, bm25=bm25, switch=switch).densify(64).written:
        pass
    assert store.count(has_dense=False) == 0
    total = store.count()
    assert total >= n

    # Recall on B: a memory's own text finds it first; the memory says B made its vector.
    res = engine.recall(RecallRequest(query=text(42), workspace_id="w1", agent_id="a1", k=3, mode="dense"))
    assert res.hits[0].entry_id == "e42" and res.hits[0].cosine is not None and res.hits[0].cosine > 0.99
    e42 = point_id("w1", "e42")
    assert store.retrieve([e42])[e42]["model@dense_1"] == model_b.model_id
    state.close()
    store.close()

    # Another restart: B is active from the first request, with only B loaded.
    store, state = open_edge(path)
    try:
        switch = ModelSwitch(store=store, state=state, embedders=[model_b])
        assert switch.current() == (switch.current()[0], model_b) and store.vector == "dense_1"
        engine = RecallEngine(store=store, embedder=None, bm25=bm25, switch=switch)
        res = engine.recall(RecallRequest(query=text(7), workspace_id="w1", agent_id="a1", k=3, mode="dense"))
        assert res.hits[0].entry_id == "e7"
    finally:
        state.close()
        store.close()


def test_reindex_command_switches_the_store_and_says_so(
    fast_dir: Path,
    embedder: SentenceTransformerEmbedder,
    model_b: SentenceTransformerEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from stack.cli import main
    from stack.stores import open_state, open_store

    monkeypatch.setenv("EPISODIC_DATA_DIR", str(fast_dir))
    monkeypatch.delenv("EPISODIC_QDRANT_URL", raising=False)
    settings = Settings()
    store = open_store(settings, dim=384)
    state = open_state(store)
    assert isinstance(store, QdrantStore)
    plan(store, state, embedder, wall=time.time)
    switch = ModelSwitch(store=store, state=state, embedders=[embedder])
    Indexer(store=store, embedder=None, bm25=Bm25Encoder(), switch=switch).index_batch(
        [rec(i, text(i)) for i in range(20)]
    )
    state.close()
    store.close()

    assert main(["reindex", "--model", model_b.model_id, "--page-size", "8"]) == 0
    out = capsys.readouterr()
    assert "done: recall now ranks with" in out.out and "re-embed to" in out.out
    assert "set EPISODIC_EMBED_MODEL=" in out.err  # the stack is still configured with the old model
    assert main(["reindex", "--status"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["active"] == {"vector": "dense_1", "model": model_b.model_id, "dim": 256, "pieces": model_b.pieces}
    assert status["pending"] is None and status["retired"] == [] and status["memories"] == 20
    assert main(["reindex", "--model", model_b.model_id]) == 0
    assert "already the active model" in capsys.readouterr().out
    # The same model cut another way is another generation: the command re-cuts the store.
    monkeypatch.setenv("EPISODIC_CHUNK_MODE", "window")
    assert main(["reindex", "--model", model_b.model_id, "--page-size", "8"]) == 0
    assert "pieces window:" in capsys.readouterr().out
    assert main(["reindex", "--status"]) == 0
    active = json.loads(capsys.readouterr().out)["active"]
    assert (active["vector"], active["model"], active["pieces"]) == ("dense_2", model_b.model_id, "window:254:32")
    monkeypatch.setenv("EPISODIC_EMBED_MODEL", "none")
    with pytest.raises(SystemExit):
        main(["reindex"])  # no model configured, none named
    assert "--model is required" in capsys.readouterr().err
    monkeypatch.delenv("EPISODIC_EMBED_MODEL")
    assert main(["reindex", "--model", str(fast_dir / "no-such-model")]) == 2
    assert "no-such-model" in capsys.readouterr().err


FACTS = [
    f"We spent the morning on the {t} rollout and argued about the timeout budget for an hour. The canary looked "
    f"fine until lunch. By the way, the on-call rotation for {t} moves to team t{i} on the first of next month."
    for i, t in enumerate(TOPICS)
]


def test_a_change_of_pieces_re_embeds_the_store_with_the_same_model_and_no_second_copy_of_it(
    fast_dir: Path, embedder: SentenceTransformerEmbedder
) -> None:
    """EPISODIC_CHUNK_MODE is part of a generation: a store cut into the old windows, started with sentence
    pieces, is re-embedded in the background by the same weights, recall ranking the windows meanwhile. A
    process that only answers queries follows the active generation and starts nothing."""
    from episodic.domain.chunking import LEGACY
    from episodic.kernel.metrics import Metrics
    from stack.embedding import ReembedRunner, open_switch

    windows = embedder.with_pieces(LEGACY)  # windows of the configured sizes
    assert windows.model is embedder.model and windows.pieces == "window:254:32" != embedder.pieces
    assert embedder.chunk_mode == "sentences" and len(embedder.chunk(FACTS[0])) > 1
    assert windows.chunk(FACTS[0]) == [FACTS[0]]  # one window holds it
    store, state = open_edge(fast_dir / "edge")
    try:
        # The store as a stack in window mode wrote it.
        plan(store, state, windows, wall=time.time)
        Indexer(
            store=store,
            embedder=None,
            bm25=Bm25Encoder(),
            switch=ModelSwitch(store=store, state=state, embedders=[windows]),
        ).index_batch([rec(i, f) for i, f in enumerate(FACTS)])
        e3 = point_id("w1", "e3")
        assert store.retrieve([e3])[e3]["pieces"] == 1

        # A recall-only process configured for sentence pieces: it follows the windows, starts no re-embed.
        settings = Settings(chunk_mode="sentences")
        recall_only = open_switch(
            settings,
            store=store,
            state=state,
            embedder=embedder,
            metrics=Metrics(),
            shared_process=True,
            queries=True,
            documents=False,
        )
        assert read(state)["pending"] is None  # type: ignore[index]
        follows = recall_only.current()[1]
        assert follows is not None and follows.pieces == windows.pieces and follows.model is embedder.model

        # Started again in sentence mode (the default): same model, another cut, so a pending generation.
        switch = open_switch(
            settings, store=store, state=state, embedder=embedder, metrics=Metrics(), shared_process=True, queries=False
        )
        doc = read(state)
        assert doc is not None
        assert doc["active"] == {"vector": DENSE, "model": embedder.model_id, "dim": 384, "pieces": windows.pieces}
        assert doc["pending"]["vector"] == "dense_1" and doc["pending"]["pieces"] == embedder.pieces
        assert doc["pending"]["model"] == embedder.model_id
        gen, active_embedder = switch.current()
        assert gen.vector == DENSE and active_embedder is not None and active_embedder.pieces == windows.pieces
        assert active_embedder.model is embedder.model  # derived from the loaded model, not loaded again
        assert ReembedRunner.wanted(switch, embedder)
        ranks = RecallEngine.from_settings(settings, store=store, embedder=None, bm25=Bm25Encoder(), switch=switch)
        fusion = ranks._query_model()[2]
        assert (fusion.dense_weight, fusion.head) == (1.0, 5)  # the windows' own weights
        # Meanwhile new memories are cut the active generation's way.
        Indexer(store=store, embedder=None, bm25=Bm25Encoder(), switch=switch).index_batch(
            [rec(99, FACTS[9] + " Late.")]
        )
        late = point_id("w1", "e99")
        assert store.retrieve([late])[late]["pieces"] == 1

        assert Reembedder(store=store, state=state, embedder=embedder, retire_after_s=0.0).run(threading.Event())
        switch.refresh(force=True)
        gen, active_embedder = switch.current()
        assert (gen.vector, gen.pieces) == ("dense_1", embedder.pieces) and active_embedder is embedder
        fusion = ranks._query_model()[2]
        assert (fusion.dense_weight, fusion.head) == (2.5, 0)  # the sentence pieces' now
        rows = store.fetch([e3], with_dense=True)[e3].dense
        assert rows is not None and len(rows) == len(embedder.chunk(FACTS[3])) > 1
        assert store.retrieve([e3])[e3]["pieces_dense_1"] == len(rows)
        assert store.dense_layout() == {"dense_1": 384}  # the windows retired

        # The passing fact is now a piece of its own: recall finds its memory first.
        engine = RecallEngine(store=store, embedder=None, bm25=Bm25Encoder(), switch=switch)
        q = "which team takes over the on-call rotation for dns"
        res = engine.recall(RecallRequest(query=q, workspace_id="w1", agent_id="a1", k=3, mode="dense"))
        assert res.hits[0].entry_id == "e2", [h.entry_id for h in res.hits]

        # And back to windows: another generation, the same model again.
        doc = plan(store, state, windows, wall=time.time)
        assert doc["pending"]["vector"] == "dense_2" and doc["pending"]["pieces"] == windows.pieces
    finally:
        state.close()
        store.close()


def test_a_generation_whose_pieces_cannot_be_read_is_not_loaded_and_nothing_crashes(
    embedder: SentenceTransformerEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    from episodic.embedding.generations import Generation
    from stack.embedding import model_loader

    load = model_loader(Settings(), shared_process=True, queries=False, configured=embedder)
    assert load(Generation("dense_3", embedder.model_id, 384, "pages:7")) is None
    assert "not a piece scheme: 'pages:7'" in caplog.text
    legacy = load(Generation("dense", embedder.model_id, 384))  # the windows: the same weights, no second load
    assert legacy is not None and legacy.pieces == "window:254:32" and legacy.model is embedder.model
    assert embedder.with_pieces("window:1000:32").pieces == "window:254:32"  # never longer than the model reads


def test_an_embedder_for_the_targets_generation_is_derived_only_from_the_same_model(
    embedder: SentenceTransformerEmbedder, model_b: SentenceTransformerEmbedder
) -> None:
    """What an import (or any command without a ModelSwitch) embeds with: the target's generation decides."""
    from episodic.embedding.generations import Generation, embedder_making

    windows = Generation("dense", embedder.model_id, 384, "window:126:16")
    made = embedder_making(windows, embedder)
    assert made is not None and made.pieces == "window:126:16" and windows.made_by(made)
    assert embedder_making(Generation("dense", embedder.model_id, 384, embedder.pieces), embedder) is embedder
    assert embedder_making(windows, model_b) is None  # another model: not made here
    assert embedder_making(Generation("dense", embedder.model_id, 384, "pages"), embedder) is None
    assert embedder_making(windows, None) is None
