"""Export and import (issue 10 item 6) on the real stores and the real model.

- A round trip (export, import into an empty store of the other engine) gives the same recall answers:
  the same hits in the same order with the same scores, dense, hybrid and sparse, with the walk too; every
  memory comes back with its importance, counters, aliases and relations, and the vectors carried over.
- Another model id: the texts are embedded again. The target's forgets hold: a forgotten memory is left
  out, with its aliases and the edges to it.
- A bad file: every bad line named with its field, nothing written. The CLI: export to a file, import it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from episodic.domain.identity import point_id
from episodic.domain.review import ReviewState, review, state_of
from episodic.embedding.generations import Generation
from episodic.indexing.indexer import Indexer
from episodic.kernel.ports import DENSE, Fusion, MemoryStore, Relation, ScopeFilter, Selection, StateStore
from episodic.lifecycle.forget import TOMBSTONE, tombstone_key
from episodic.lifecycle.inspect import memory_detail
from episodic.lifecycle.portable import BadExport, Importer, check_export, export_workspace, read_export
from episodic.retrieval.engine import RecallEngine
from episodic.store.sparse import Bm25Encoder
from episodic_client.models import RecallRequest
from schemas.events import EmbeddableRecord
from stack.stores import open_state
from tests.tmpfs import fast_tmp_dir

pytestmark = [pytest.mark.integration]

WS = "acme"
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
REVIEWED = review(review(ReviewState(), "good", NOW - timedelta(days=3)), "again", NOW - timedelta(days=1))
TEXTS = [
    ("m01", "peer.escalation", "error", "checkout ran out of memory during the holiday traffic spike"),
    ("m02", "summary.generated", "info", "the billing deploy needs a canary before it reaches every region"),
    ("m03", "summary.generated", "info", "the payments queue overflowed while the ledger migration held locks"),
    ("m04", "eval.regression_detected", "warn", "answer quality dropped after the retriever switched models"),
    ("m05", "summary.generated", "info", "restarting the cache cluster cleared the stale session tokens"),
    ("m06", "summary.generated", "info", "the billing deploy needs a canary before it reaches every region"),  # dup
    ("m07", "approval.denied", "warn", "the database schema change was denied without a rollback plan"),
    ("m08", "summary.generated", "info", "memory limits on checkout pods were raised to four gigabytes"),
    ("m09", "summary.generated", "info", "the canary for billing caught a currency rounding bug"),
]
QUERIES = ["checkout out of memory", "billing canary deploy", "ledger migration locks", "schema change rollback"]


def record(i: str, entry_type: str, severity: str, summary: str, **extra: Any) -> EmbeddableRecord:
    return EmbeddableRecord.from_dict(
        {"id": i, "workspace_id": WS, "agent_id": "planner", "crew_id": "platform", "run_id": "r1",
         "ts": (NOW - timedelta(hours=int(i[1:]))).isoformat(), "entry_type": entry_type, "severity": severity,
         "summary": summary, "payload": {"n": i}, "base_importance": 0.7, "accepted_at": NOW, **extra}
    )  # fmt: skip


def stores(root: Path) -> Iterator[tuple[MemoryStore, StateStore]]:
    """An Edge store and a qdrant-client local store (384 dims), each with its state store."""
    from episodic.store.edge import EdgeStore
    from episodic.store.qdrant_server import QdrantServerStore

    made: list[MemoryStore] = [EdgeStore(root / "edge"), QdrantServerStore(path=root / "qlocal", collection="m")]
    for s in made:
        s.ensure_collection(384)
        yield s, open_state(s)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[list[tuple[MemoryStore, StateStore]]]:
    with fast_tmp_dir(tmp_path) as d:
        opened = list(stores(d))
        try:
            yield opened
        finally:
            for s, st in opened:
                st.close()
                s.close()


def fill(store: MemoryStore, embedder: Any) -> None:
    """Memories with a duplicate (alias), a consolidated rule (supports edges), similar edges and counters."""
    indexer = Indexer(store=store, embedder=embedder, bm25=Bm25Encoder(), clock=lambda: NOW)
    indexer.index_batch([record(*t) for t in TEXTS])
    rule = record(
        "m10", "memory.consolidated", "info", "always canary billing deploys", refs={"supports": ["m02", "m09"]}
    )
    indexer.index_batch([rule])
    store.add_relations(
        [Relation(src="m08", dst="m01", relation="similar", weight=0.83, created_at="t", workspace_id=WS)]
    )
    store.set_payload(point_id(WS, "m03"), {"reference_count": 4, "last_referenced_at": "2026-11-22T10:00:00Z",
                                            "importance_score": 0.93, "linked_at": "2026-11-22T09:00:00Z"})  # fmt: skip
    # how agents said it served (issue 26): the review state travels with it
    store.set_payload(point_id(WS, "m03"), REVIEWED.fields())


def answers(store: MemoryStore, embedder: Any) -> list[list[tuple[Any, ...]]]:
    engine = RecallEngine(store=store, embedder=embedder, bm25=Bm25Encoder(), clock=lambda: NOW)
    out = []
    for q in QUERIES:
        for mode in ("dense", "hybrid", "sparse"):
            for walk in (0, 1):
                req = RecallRequest(workspace_id=WS, agent_id="planner", query=q, k=6, mode=mode, walk_depth=walk)
                hits = engine.recall(req).hits
                out.append([(h.entry_id, round(h.score, 5), h.via, tuple(h.aliases), h.occurrences) for h in hits])
    return out


def context_answers(store: MemoryStore) -> list[list[str]]:
    """The context leg alone (the run context each memory was indexed with, BM25)."""
    only = Fusion(method="rrf", k=3, dense_weight=0.0, sparse_weight=0.0, context_weight=1.0)
    scope = ScopeFilter(workspace_id=WS, agent_id="planner", scope="own")
    bm25, zero = Bm25Encoder(), [0.0] * 384
    zero[0] = 1.0
    return [[h.payload["entry_id"] for h in store.query_hybrid(zero, bm25.query(q), scope, 5, only)] for q in QUERIES]


def details(store: MemoryStore, state: StateStore) -> dict[str, Any]:
    ids = [t[0] for t in TEXTS if t[0] != "m06"] + ["m10"]
    return {i: memory_detail(store, state, WS, i, NOW) for i in ids}


def same(got: list[list[tuple[Any, ...]]], want: list[list[tuple[Any, ...]]]) -> None:
    """The same hits in the same order (ids, via, aliases, occurrences), scores equal to 1e-4 (two engines)."""
    assert [[(h[0], *h[2:]) for h in hits] for hits in got] == [[(h[0], *h[2:]) for h in hits] for hits in want]
    assert [h[1] for hits in got for h in hits] == pytest.approx([h[1] for hits in want for h in hits], abs=1e-4)


def test_a_round_trip_gives_the_same_recall_and_the_same_memories(pair: Any, embedder: Any) -> None:
    (edge, edge_state), _ = pair
    fill(edge, embedder)
    want, want_details = answers(edge, embedder), details(edge, edge_state)
    assert all(want) and any(h[2] != "direct" for hits in want for h in hits)  # the walk follows edges
    # Edge -> qdrant-client, then that import exported again -> the Edge store emptied
    for (source, _), (target, target_state) in (pair, pair[::-1]):
        lines = list(export_workspace(source, WS, pieces=embedder.pieces))
        target.delete([pid for pid, _ in target.select(Selection(workspace_id=WS))])
        assert len(lines) == 9 and check_export(lines) == 9 and target.count(WS) == 0
        first = json.loads(lines[0])
        assert first["id"] == "m01" and first["memory"]["model"] == embedder.model_id
        assert first["memory"]["pieces"] == embedder.pieces
        assert not any(k.startswith("pieces") for k in first["memory"]["extra"])  # derived by the store again
        m03_line = next(json.loads(x)["memory"] for x in lines if json.loads(x)["id"] == "m03")
        assert m03_line["review_count"] == 2 and m03_line["last_rating"] == "again"  # a field of its own
        assert not {"review_count", "stability"} & set(m03_line["extra"]) and first["memory"]["review_count"] == 0
        report = Importer(store=target, state=target_state, embedder=embedder, bm25=Bm25Encoder()).run(
            read_export(lines)
        )
        assert (report.written, report.vectors_kept, report.embedded, report.replaced) == (9, 9, 0, 0)
        same(answers(target, embedder), want)
        assert details(target, target_state) == want_details
        got = memory_detail(target, target_state, WS, "m06")  # the alias resolves to its memory
        assert got is not None and got["entry_id"] == "m02" and got["occurrences"] == 2
        # the context vector is computed again from the run context the memory was indexed with
        assert context_answers(target) == context_answers(source) and all(context_answers(target))
        m03 = target.retrieve([point_id(WS, "m03")])[point_id(WS, "m03")]
        assert (m03["reference_count"], m03["importance_score"], m03["linked_at"]) == (4, 0.93, "2026-11-22T09:00:00Z")
        assert state_of(m03).fields() == REVIEWED.fields() and m03["review_ratings"]["again"] == 1
        assert want_details["m03"]["review"]["count"] == 2
        assert m03["pieces"] == source.retrieve([point_id(WS, "m03")])[point_id(WS, "m03")]["pieces"] >= 1
    # importing the same file again changes nothing
    again = Importer(store=target, state=target_state, embedder=embedder, bm25=Bm25Encoder()).run(read_export(lines))
    assert (again.written, again.replaced) == (9, 9) and target.count(WS) == 9
    same(answers(target, embedder), want)


def test_rows_cut_another_way_are_embedded_again(pair: Any, embedder: Any) -> None:
    """The same model, but the file's rows were cut into windows (or it does not say: a file from before
    `pieces`, cut into the windows of its time) while the target cuts sentence pieces: embedded again, so
    the target's memories are all cut its way."""
    from episodic.domain.chunking import LEGACY

    (source, _), (target, target_state) = pair
    fill(source, embedder)
    importer = Importer(store=target, state=target_state, embedder=embedder, bm25=Bm25Encoder())
    for pieces in (LEGACY, None):
        lines = [
            json.dumps({**(d := json.loads(line)), "memory": {**d["memory"], "pieces": pieces}}).encode()
            for line in export_workspace(source, WS)
        ]
        report = importer.run(read_export(lines))
        assert (report.written, report.vectors_kept, report.embedded) == (9, 0, 9)
    long_one = max(TEXTS, key=lambda t: len(embedder.chunk(t[3])))
    rows = target.fetch([point_id(WS, long_one[0])], with_dense=True)[point_id(WS, long_one[0])].dense
    assert rows is not None and len(rows) == len(embedder.chunk(long_one[3]))
    report = importer.run(read_export(list(export_workspace(source, WS, pieces=embedder.pieces))))
    assert (report.vectors_kept, report.embedded) == (9, 0)  # the same cut: carried over


def test_windows_of_unrecorded_sizes_are_carried_only_into_windows_of_unrecorded_sizes(
    pair: Any, embedder: Any
) -> None:
    """A file labelled `window` (the sizes its store was configured with were never recorded) cannot be
    compared with a target whose windows have recorded sizes: embedded again. Into a target whose windows
    were not recorded either (the two stores' settings are all there is to go on), carried over."""
    from episodic.domain.chunking import LEGACY

    (source, _), (target, target_state) = pair
    windows = embedder.with_pieces("window:254:32")
    fill(source, windows)
    lines = [
        json.dumps({**(d := json.loads(line)), "memory": {**d["memory"], "pieces": LEGACY}}).encode()
        for line in export_workspace(source, WS)
    ]
    recorded = Generation.made(DENSE, windows)
    unrecorded = Generation(vector=recorded.vector, model=recorded.model, dim=recorded.dim, pieces=LEGACY)
    for gen, kept in ((recorded, 0), (unrecorded, 9)):
        importer = Importer(store=target, state=target_state, embedder=windows, bm25=Bm25Encoder(), generation=gen)
        report = importer.run(read_export(lines))
        assert (report.written, report.vectors_kept, report.embedded) == (9, kept, 9 - kept)


def test_the_run_context_comes_back_and_its_vector_is_computed_again(pair: Any) -> None:
    """A run indexed in order (each memory with the two before it), exported and imported into the other
    engine: the same context lines, and the context leg finds a reply by the question before it."""
    (source, _), (target, target_state) = pair
    turns = ["what did you buy for your sister's birthday", "tell me and I will remember it",
             "a yellow dress, last Tuesday", "noted"]  # fmt: skip
    indexer = Indexer(store=source, embedder=None, bm25=Bm25Encoder(), clock=lambda: NOW)
    for i, text in enumerate(turns):  # one entry a batch: each sees the ones before it
        ts = (NOW + timedelta(minutes=i)).isoformat()
        indexer.index_batch([record(f"c{i}", "summary.generated", "info", text, ts=ts, run_id="chat")])
    lines = list(export_workspace(source, WS))
    Importer(store=target, state=target_state, embedder=None, bm25=Bm25Encoder()).run(read_export(lines))
    for store in (source, target):
        got = store.retrieve([point_id(WS, "c2")])[point_id(WS, "c2")]
        assert got["context_ids"] == ["c0", "c1"] and got["context"][0]["text"] == turns[0]
    only = Fusion(method="rrf", k=3, dense_weight=0.0, sparse_weight=0.0, context_weight=1.0)
    scope = ScopeFilter(workspace_id=WS, agent_id="planner", scope="own")
    q = Bm25Encoder().query("sister birthday present")
    found = [h.payload["entry_id"] for h in target.query_hybrid([1.0] + [0.0] * 383, q, scope, 5, only)]
    assert set(found) == {"c0", "c1", "c2"}  # c3's context (c1, c2) does not mention her


def test_a_run_is_joined_across_what_the_targets_forgets_left_out(pair: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """c0 -> c1 -> c2 -> c3 in one run; the target forgot c1 and c2. One memory a batch, so the left-out ones
    come in other batches than the edges to them: none is kept, and c0 / c3 become neighbours."""
    import episodic.lifecycle.portable as portable

    (source, _), (target, target_state) = pair
    indexer = Indexer(store=source, embedder=None, bm25=Bm25Encoder(), clock=lambda: NOW)
    for i in range(4):
        ts = (NOW + timedelta(minutes=i)).isoformat()
        indexer.index_batch([record(f"c{i}", "summary.generated", "info", f"turn {i}", ts=ts, run_id="chat")])
    tomb = {"workspace_id": WS, "forget_id": "f1", "at": "2026-11-23T00:00:00Z"}
    target_state.put_many(TOMBSTONE, {tombstone_key(WS, i): {**tomb, "entry_id": i} for i in ("c1", "c2")})
    monkeypatch.setattr(portable, "BATCH", 1)
    lines = list(export_workspace(source, WS))
    report = Importer(store=target, state=target_state, embedder=None, bm25=Bm25Encoder()).run(read_export(lines))
    assert sorted(report.forgotten) == [f"{WS}/c1", f"{WS}/c2"] and report.written == 2
    edges = {(r.src, r.relation, r.dst) for r in target.relations_of(WS, ["c0", "c3"])}
    assert edges == {("c0", "next", "c3"), ("c3", "previous", "c0")}


class Renamed:
    """The real model under another id: the import must embed the texts again."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id = "another-model"
        self.dim = inner.dim
        self.pieces = inner.pieces
        self.calls = 0

    def embed_documents(self, texts: list[str]) -> Any:
        self.calls += 1
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Any:
        return self.inner.embed_query(text)


def test_another_model_embeds_again_and_the_target_forgets_hold(pair: Any, embedder: Any) -> None:
    (source, _), (target, target_state) = pair
    fill(source, embedder)
    lines = list(export_workspace(source, WS))
    tomb = {"workspace_id": WS, "forget_id": "f1", "at": "2026-11-23T00:00:00Z"}
    target_state.put_many(TOMBSTONE, {tombstone_key(WS, i): {**tomb, "entry_id": i} for i in ("m01", "m06")})
    other = Renamed(embedder)
    report = Importer(store=target, state=target_state, embedder=other, bm25=Bm25Encoder()).run(read_export(lines))
    assert report.forgotten == [f"{WS}/m01"] and report.aliases_dropped == 1
    assert (report.written, report.embedded, report.vectors_kept) == (8, 8, 0) and other.calls >= 1
    assert target.retrieve([point_id(WS, "m01")]) == {}
    m08 = target.retrieve([point_id(WS, "m08")])[point_id(WS, "m08")]
    # its similar edge to the forgotten m01 is dropped; its run edges (previous / next) are kept
    assert {e["relation"]: e["dst"] for e in m08["relations"]} == {"previous": "m09", "next": "m07"}
    assert m08["links"] == ["m07", "m09"] and m08["model"] == "another-model"
    m02 = target.retrieve([point_id(WS, "m02")])[point_id(WS, "m02")]
    assert m02["aliases"] == [] and m02["occurrences"] == 2
    hits = RecallEngine(store=target, embedder=other, bm25=Bm25Encoder(), clock=lambda: NOW).recall(
        RecallRequest(workspace_id=WS, agent_id="planner", query="billing canary deploy", k=3, mode="dense")
    )
    assert hits.hits and hits.hits[0].entry_id in {"m02", "m09", "m10"}


def test_a_bad_file_names_every_bad_line_and_writes_nothing(pair: Any, embedder: Any) -> None:
    (source, _), (target, target_state) = pair
    fill(source, embedder)
    lines = list(export_workspace(source, WS))
    broken = json.loads(lines[2])
    broken["memory"]["reference_count"] = "many"
    lines[2] = json.dumps(broken).encode()
    bad_severity = json.loads(lines[4])
    bad_severity["severity"] = "fatal"
    lines[4] = json.dumps(bad_severity).encode()
    for i, pieces in ((5, 32), (6, "x" * 65)):  # not a string; longer than any scheme's key
        odd = json.loads(lines[i])
        odd["memory"]["pieces"] = pieces
        lines[i] = json.dumps(odd).encode()
    lines.insert(7, b"")  # blank lines are fine
    lines.append(b"{not json")
    with pytest.raises(BadExport) as e:
        Importer(store=target, state=target_state, embedder=embedder, bm25=Bm25Encoder()).run(read_export(lines))
    text = str(e.value)
    assert "line 3: memory.reference_count" in text and "line 5: severity" in text and "line 11" in text
    assert "line 6: memory.pieces" in text and "line 7: memory.pieces" in text
    assert e.value.total_bad == 5 and "nothing imported" in text
    assert target.count(WS) == 0


@pytest.mark.slow  # three model loads: the commands load the configured model as `episodic up` does
def test_the_cli_exports_to_a_file_and_imports_it_into_another_data_dir(
    tmp_path: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from episodic.embedding.generations import plan
    from episodic.kernel.settings import Settings
    from episodic.store.facade import QdrantStore
    from stack.cli import main
    from stack.stores import open_state, open_store

    source_dir, target_dir, out = tmp_path / "a", tmp_path / "b", tmp_path / "acme.jsonl"
    monkeypatch.setenv("EPISODIC_DATA_DIR", str(source_dir))
    store = open_store(Settings(), dim=embedder.dim)
    assert isinstance(store, QdrantStore)
    state = open_state(store)
    plan(store, state, embedder, wall=time.time)  # as `episodic up` does first: the generation, its pieces
    state.close()
    fill(store, embedder)
    want = answers(store, embedder)
    # the embedded store is single-process: a running stack (here: this open store) keeps export out, clearly
    assert main(["export", "--workspace", WS, "--out", str(out)]) == 1
    assert "stop `episodic up` first" in capsys.readouterr().err and not out.exists()
    store.close()
    assert main(["export", "--workspace", WS, "--out", str(out)]) == 0
    assert "exported 9 memories" in capsys.readouterr().err and len(out.read_bytes().splitlines()) == 9
    assert json.loads(out.read_bytes().splitlines()[0])["memory"]["pieces"] == embedder.pieces

    monkeypatch.setenv("EPISODIC_DATA_DIR", str(target_dir))
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(out.read_bytes() + b'{"id": "x"}\n')
    assert main(["import", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "line 10: workspace_id" in err and "nothing imported" in err
    assert main(["import", str(out), "--check"]) == 0
    assert main(["import", str(out)]) == 0
    assert "imported 9 of 9 memories into acme (0 replaced; vectors: 9 carried over" in capsys.readouterr().out
    # Imported again from a shell configured for windows: the target's generation (sentence pieces) decides
    # what is carried over and how anything is cut, not the shell's settings.
    monkeypatch.setenv("EPISODIC_CHUNK_MODE", "window")
    assert main(["import", str(out)]) == 0
    assert "(9 replaced; vectors: 9 carried over, 0 embedded again" in capsys.readouterr().out
    monkeypatch.delenv("EPISODIC_CHUNK_MODE")
    target = open_store(Settings(), dim=embedder.dim)
    try:
        assert target.count(WS) == 9
        same(answers(target, embedder), want)
    finally:
        target.close()


def test_a_round_trip_carries_near_duplicate_folds(pair: Any, embedder: Any) -> None:
    """A memory folded from two agents' entries (episodic.indexing.folding) comes back folded: the owner's
    parts and agents, the absorbed entry's mark and fold scope, scope own for both agents (each its own
    entry), GET of the absorbed id (itself: its agent's own text)."""
    from episodic.maintenance.linker import Linker
    from schemas.events import IndexedEvent

    (edge, _), (target, target_state) = pair
    indexer = Indexer(store=edge, embedder=embedder, bm25=Bm25Encoder(), clock=lambda: NOW)
    first = record("f1", "summary.generated", "info", "the checkout service was OOM-killed during the load test")
    indexer.index_batch([first, record("f3", "summary.generated", "info", "the cache cluster restarted cleanly")])
    later = EmbeddableRecord.from_dict(
        {"id": "f2", "workspace_id": WS, "agent_id": "tester", "crew_id": "platform", "run_id": "r2",
         "ts": NOW.isoformat(), "entry_type": "summary.generated", "severity": "info",
         "summary": "Checkout service OOM-killed during the load test!", "payload": {}, "base_importance": 0.7,
         "accepted_at": NOW}
    )  # fmt: skip
    indexer.index_batch([later])
    event = IndexedEvent(entry_id="f2", workspace_id=WS, point_id=point_id(WS, "f2"), indexed_at=NOW, mode="vector")
    assert Linker(store=edge, clock=lambda: NOW).link([event]).folded == 1
    lines = list(export_workspace(edge, WS, pieces=embedder.pieces))
    Importer(store=target, state=target_state, embedder=embedder, bm25=Bm25Encoder()).run(read_export(lines))
    owner = target.retrieve([point_id(WS, "f1")])[point_id(WS, "f1")]
    assert [p["entry_id"] for p in owner["folded"]] == ["f2"] and owner["agents"] == ["planner", "tester"]
    assert owner["occurrences"] == 2
    assert target.retrieve([point_id(WS, "f2")])[point_id(WS, "f2")]["folded_into"] == "f1"
    engine = RecallEngine(store=target, embedder=embedder, bm25=Bm25Encoder(), clock=lambda: NOW)
    # folded across agents (issue 47): each agent's own scope finds its own entry, in its own words
    assert target.retrieve([point_id(WS, "f2")])[point_id(WS, "f2")]["fold_scope"] == "crew"
    for agent, mine, other in (("planner", "f1", "f2"), ("tester", "f2", "f1")):
        hits = engine.recall(RecallRequest(workspace_id=WS, agent_id=agent, query="checkout OOM load test", k=3)).hits
        assert [h.entry_id for h in hits][:1] == [mine] and other not in {h.entry_id for h in hits}
    planner = engine.recall(RecallRequest(workspace_id=WS, agent_id="planner", query="checkout OOM load test", k=3))
    assert planner.hits[0].folded == ["f2"] and planner.hits[0].agents == ["planner", "tester"]
    detail = memory_detail(target, target_state, WS, "f2")
    assert detail is not None and (detail["entry_id"], detail["requested_id"]) == ("f2", "f2")  # answers itself
