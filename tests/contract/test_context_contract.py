"""Context-aware indexing and episode adjacency on every engine, through the real indexer (sparse-only: the
model is not what is tested here), the real BM25 encoder, the store's context leg and the recall engine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from episodic.domain.context_mode import ContextMode
from episodic.domain.identity import point_id
from episodic.indexing.context import adjacent_change
from episodic.indexing.indexer import Indexer
from episodic.kernel.ports import Fusion, MemoryPoint, MemoryStore, ScopeFilter, StateStore
from episodic.lifecycle.check import check_store
from episodic.lifecycle.forget import Forgetter, Position
from episodic.retrieval.engine import RecallEngine
from episodic.store.sparse import Bm25Encoder
from episodic_client.models import RecallRequest
from schemas.events import EmbeddableRecord, ForgetRecord, ForgetSelector
from tests.contract.conftest import DIM, Interleaved, MakePoint, e

T = datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC)
OWN = ScopeFilter(workspace_id="ws-a", scope="own", agent_id="agent-1")
# the context-folded BM25 leg alone (the dense and the entry's own BM25 legs weigh nothing)
CONTEXT_ONLY = Fusion(method="rrf", k=3, dense_weight=0.0, sparse_weight=0.0, context_weight=1.0)
TURN_ONLY = Fusion(method="rrf", k=3, dense_weight=0.0, sparse_weight=1.0)

CHAT = [
    "user: what did you buy for your sister's birthday?",
    "assistant: tell me and I will remember it",
    "user: a yellow dress, last Tuesday",
    "assistant: noted",
]


def rec(
    i: str,
    summary: str,
    *,
    t: int,
    run: str | None = "r1",
    ws: str = "ws-a",
    accepted: int | None = None,
    agent: str = "agent-1",
) -> EmbeddableRecord:
    return EmbeddableRecord.from_dict(
        {
            "id": i,
            "workspace_id": ws,
            "agent_id": agent,
            "run_id": run,
            "ts": (T + timedelta(seconds=t)).isoformat(),
            "entry_type": "summary.generated",
            "severity": "info",
            "summary": summary,
            "payload": {},
            "base_importance": 0.5,
            "accepted_at": T + timedelta(seconds=t if accepted is None else accepted, milliseconds=5),
        }
    )


def chat(run: str = "r1", ws: str = "ws-a", prefix: str = "c") -> list[EmbeddableRecord]:
    return [rec(f"{prefix}{i}", s, t=i, run=run, ws=ws) for i, s in enumerate(CHAT)]


def memory(store: MemoryStore, entry_id: str, ws: str = "ws-a") -> dict[str, Any]:
    return store.retrieve([point_id(ws, entry_id)])[point_id(ws, entry_id)]


def adjacency(store: MemoryStore, entry_id: str, ws: str = "ws-a") -> dict[str, str]:
    return {
        e["relation"]: e["dst"]
        for e in memory(store, entry_id, ws)["relations"]
        if e["relation"] in ("previous", "next")
    }


def context_ids(store: MemoryStore, entry_id: str, ws: str = "ws-a") -> list[str]:
    return [c["entry_id"] for c in memory(store, entry_id, ws)["context"]]


def hits(store: MemoryStore, query: str, fusion: Fusion, scope: ScopeFilter = OWN) -> list[str]:
    bm25 = Bm25Encoder()
    got = store.query_hybrid(e(0), bm25.query(query), scope, 10, fusion)
    return [h.payload["entry_id"] for h in got]


@pytest.fixture
def ix(store: MemoryStore, bm25: Bm25Encoder) -> Indexer:
    return Indexer(store=store, embedder=None, bm25=bm25, context=ContextMode("prev", 2, 16))


def test_a_new_collection_has_the_context_vector(store: MemoryStore) -> None:
    assert store.has_context


def test_an_entry_is_indexed_with_the_memories_before_it_in_its_run(store: MemoryStore, ix: Indexer) -> None:
    ix.index_batch(chat()[:2])
    ix.index_batch(chat()[2:])  # across batches: the earlier ones come from the store
    assert context_ids(store, "c0") == []
    assert context_ids(store, "c2") == ["c0", "c1"]
    assert context_ids(store, "c3") == ["c1", "c2"]
    assert memory(store, "c2")["context"][0]["text"] == "user: what did you buy for your sister's birthday?"
    assert memory(store, "c2")["summary"] == CHAT[2]  # the summary stays the entry's own
    # "sister" is in c2's context only: the context leg finds the reply, the entry's own BM25 does not
    assert "c2" in hits(store, "sister's birthday present", CONTEXT_ONLY)
    assert "c2" not in hits(store, "sister's birthday present", TURN_ONLY)


def test_the_context_does_not_depend_on_how_the_stream_was_batched(store: MemoryStore, ix: Indexer) -> None:
    ix.index_batch(chat(ws="ws-a"))
    for r in chat(ws="ws-b"):
        ix.index_batch([r])
    for i in range(len(CHAT)):
        a, b = memory(store, f"c{i}", "ws-a"), memory(store, f"c{i}", "ws-b")
        assert (a["context"], adjacency(store, f"c{i}", "ws-a")) == (b["context"], adjacency(store, f"c{i}", "ws-b"))
    before = memory(store, "c3", "ws-a")
    ix.index_batch(chat(ws="ws-a"))  # re-delivery rewrites nothing
    assert memory(store, "c3", "ws-a") == before


def test_context_stays_inside_its_run_and_workspace(store: MemoryStore, ix: Indexer) -> None:
    ix.index_batch(
        [
            rec("x0", "user: another run about the sister", t=0, run="r2"),
            rec("y0", "user: another workspace", t=1, ws="ws-b"),
            rec("n0", "user: no run at all", t=2, run=None),
            *chat(),
        ]
    )
    assert context_ids(store, "c1") == ["c0"]
    assert memory(store, "n0")["context"] == [] and adjacency(store, "n0") == {}
    assert adjacency(store, "x0") == {}


def test_an_entry_never_sees_later_entries_and_a_late_one_is_linked_in_between(store: MemoryStore, ix: Indexer) -> None:
    c = chat()
    ix.index_batch([c[0], c[1], c[3]])
    ix.index_batch([c[2]])  # stamped before c3, arrives after it
    assert adjacency(store, "c1") == {"previous": "c0", "next": "c2"}
    assert adjacency(store, "c2") == {"previous": "c1", "next": "c3"}
    assert adjacency(store, "c3") == {"previous": "c2"}
    assert context_ids(store, "c2") == ["c0", "c1"]  # not c3: it is later in the run
    assert context_ids(store, "c3") == ["c0", "c1"]  # indexed with what was there when it came, kept


def _version(r: EmbeddableRecord, summary: str, *, t: int, run: str | None = "r1") -> EmbeddableRecord:
    """A new version of `r` (same id) stamped `ts` = `t`, in `run`, accepted after everything else."""
    return rec(r.id, summary, t=t, run=run, ws=r.workspace_id, accepted=100)


@pytest.mark.parametrize(
    ("moves", "order"),
    [
        ({"c1": 10}, ["c0", "c2", "c3", "c1"]),
        ({"c0": 2}, ["c1", "c0", "c2", "c3"]),  # a tie with c2's ts, broken by id
        ({"c1": 10, "c2": 11}, ["c0", "c3", "c1", "c2"]),  # two neighbours move in one batch
        ({"c0": 10, "c2": 11}, ["c1", "c3", "c0", "c2"]),
        ({"c2": 11, "c1": 10}, ["c0", "c3", "c1", "c2"]),  # in the batch out of order
        ({"c3": -5, "c0": 10}, ["c1", "c2", "c3", "c0"]),  # c3's is older by ts: stale, it stays (issue 45)
    ],
    ids=["to-the-end", "into-the-middle", "two-adjacent", "two-apart", "two-reversed", "an-older-one-stays"],
)
def test_new_versions_that_move_in_their_run_leave_their_old_neighbours_joined(
    store: MemoryStore, state: StateStore, ix: Indexer, moves: dict[str, int], order: list[str]
) -> None:
    ix.index_batch(chat())
    c = {r.id: r for r in chat()}
    ix.index_batch([_version(c[i], f"{c[i].summary}, again", t=t) for i, t in moves.items()])
    for i, eid in enumerate(order):
        want = {"previous": order[i - 1]} if i else {}
        want |= {"next": order[i + 1]} if i + 1 < len(order) else {}
        assert adjacency(store, eid) == want, (eid, order)
    assert check_store(store, state).ok, check_store(store, state).as_dict()
    # a forget of the whole run walks the chain: it ends, and nothing of the run is left
    run = ForgetRecord(forget_id="f-run", workspace_id="ws-a", selector=ForgetSelector(run_id="r1"), requested_at=T)
    assert Forgetter(store=store, state=state).apply(run, Position(0, 9)).memories == 4


def test_a_new_version_that_leaves_its_run_is_cut_out_of_it(store: MemoryStore, state: StateStore, ix: Indexer) -> None:
    ix.index_batch(chat())
    ix.index_batch([_version(chat()[1], "assistant: noted elsewhere", t=20, run="r2")])
    assert adjacency(store, "c0") == {"next": "c2"} and adjacency(store, "c2") == {"previous": "c0", "next": "c3"}
    assert adjacency(store, "c1") == {}  # alone in r2
    ix.index_batch([_version(chat()[2], "user: no run any more", t=30, run=None)])
    assert adjacency(store, "c0") == {"next": "c3"} and adjacency(store, "c2") == {}
    assert check_store(store, state).ok, check_store(store, state).as_dict()


def test_a_forget_ends_on_run_edges_that_form_a_cycle(store: MemoryStore, state: StateStore, ix: Indexer) -> None:
    """Stores written before moves were detached can hold a cycle of run edges; the forget's relink walked
    it for ever (the long mixed-load test's forget by run stayed pending, its partition stalled)."""
    ix.index_batch(chat())
    for a, b in (("c2", "c3"), ("c3", "c2")):  # c2 <-> c3 point at each other both ways
        pid = point_id("ws-a", a)
        store.update_memories(
            [pid], lambda _, p, b=b: adjacent_change(p, {"previous": b, "next": b}, T.isoformat()), writer="test"
        )
    assert not check_store(store, state).ok  # the check sees the broken chain
    forget = ForgetRecord(forget_id="f", workspace_id="ws-a", selector=ForgetSelector(run_id="r1"), requested_at=T)
    assert Forgetter(store=store, state=state).apply(forget, Position(0, 1)).memories == 4


def test_entries_at_one_instant_are_planned_in_order_across_batches(
    store: MemoryStore, ix: Indexer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timestamps with one-second precision: a run's entries share an instant and their ids order them. The
    second batch finds the first batch's memories at its first entry's instant; they are earlier (smaller
    ids), so the batch is planned in order, with two reads of the run, as if it had come in one batch."""
    tie = [rec(f"s{i}", line, t=0) for i, line in enumerate([*CHAT, "user: and the shoes?", "assistant: red ones"])]
    ix.index_batch(tie[:3])
    reads: list[tuple[str, str]] = []
    run_memories = store.run_memories

    def counted(ws: str, run: str, **kw: Any) -> Any:
        reads.append((ws, run))
        return run_memories(ws, run, **kw)

    monkeypatch.setattr(store, "run_memories", counted)
    ix.index_batch(tie[3:])
    assert len(reads) == 2  # one read before the batch, one after: no read per entry
    monkeypatch.undo()
    one = [EmbeddableRecord.from_dict({**r.to_json_dict(), "workspace_id": "ws-b"}) for r in tie]
    ix.index_batch(one)
    for r in tie:
        a, b = memory(store, r.id, "ws-a"), memory(store, r.id, "ws-b")
        assert (a["context"], adjacency(store, r.id, "ws-a")) == (b["context"], adjacency(store, r.id, "ws-b"))
    assert context_ids(store, "s3") == ["s1", "s2"] and adjacency(store, "s3") == {"previous": "s2", "next": "s4"}


def test_in_one_batch_an_entry_sees_only_what_came_before_it(store: MemoryStore, ix: Indexer) -> None:
    c = chat()
    ix.index_batch([c[0], c[2], c[1]])  # c1 arrives after c2 in the same batch
    assert context_ids(store, "c2") == ["c0"]  # c1 came after it: as if in the next batch
    assert adjacency(store, "c2") == {"previous": "c1"}
    assert context_ids(store, "c1") == ["c0"]


def test_run_header_mode_indexes_the_runs_first_memory(store: MemoryStore, bm25: Bm25Encoder) -> None:
    ix = Indexer(store=store, embedder=None, bm25=bm25, context=ContextMode("run-header", 0, 4))
    ix.index_batch(chat()[:1])
    ix.index_batch(chat()[1:])
    assert [context_ids(store, f"c{i}") for i in range(4)] == [[], ["c0"], ["c0"], ["c0"]]
    assert memory(store, "c3")["context"][0]["text"] == "user: what did you"


def test_mode_off_writes_no_context_but_still_links_the_run(store: MemoryStore, bm25: Bm25Encoder) -> None:
    ix = Indexer(store=store, embedder=None, bm25=bm25, context=ContextMode("off", 0, 16))
    ix.index_batch(chat())
    assert "context" not in memory(store, "c2")
    assert adjacency(store, "c2") == {"previous": "c1", "next": "c3"}
    assert hits(store, "yellow dress", CONTEXT_ONLY) == []  # no context vectors


def test_the_date_line_is_folded_in_only_when_asked(store: MemoryStore, bm25: Bm25Encoder, ix: Indexer) -> None:
    dated = Indexer(store=store, embedder=None, bm25=bm25, context=ContextMode("prev", 2, 16, date=True))
    dated.index_batch(chat(ws="ws-a"))
    ix.index_batch(chat(ws="ws-b"))
    assert memory(store, "c2")["context_date"] == "Friday 20 November 2026 (2026-11-20)"
    assert memory(store, "c2")["summary"] == CHAT[2] and context_ids(store, "c2") == ["c0", "c1"]
    assert set(hits(store, "on friday in november", CONTEXT_ONLY)) == {"c0", "c1", "c2", "c3"}
    b = ScopeFilter(workspace_id="ws-b", scope="own", agent_id="agent-1")
    assert "context_date" not in memory(store, "c2", "ws-b") and hits(store, "friday november", CONTEXT_ONLY, b) == []


def test_a_memory_indexed_without_context_is_still_recalled(store: MemoryStore, bm25: Bm25Encoder) -> None:
    """Memories indexed before context was switched on (mode off, or an older version) have no context
    vector: the default five-leg hybrid still finds them through its dense and own-BM25 legs, and the
    memories indexed after them get them as context."""
    from episodic.kernel.settings import Settings
    from episodic.retrieval.engine import fusion_from_settings

    Indexer(store=store, embedder=None, bm25=bm25, context=ContextMode("off", 0, 16)).index_batch(chat()[:2])
    Indexer(store=store, embedder=None, bm25=bm25, context=ContextMode("prev", 2, 16)).index_batch(chat()[2:])
    assert "context" not in memory(store, "c0") and context_ids(store, "c2") == ["c0", "c1"]
    default = fusion_from_settings(Settings())
    assert default.context_weight > 0 and default.both_by_context  # the shipped tree, with the context leg
    # c0 through its own BM25, c2 through its context: each first in one leg of equal weight (a tie)
    assert set(hits(store, "sister's birthday", default)[:2]) == {"c0", "c2"}
    assert "c0" not in hits(store, "sister's birthday", CONTEXT_ONLY)  # c0 has no context vector


def test_forgetting_a_memory_takes_it_out_of_its_neighbours_context(
    store: MemoryStore, state: StateStore, ix: Indexer
) -> None:
    ix.index_batch(chat())
    assert "c2" in hits(store, "birthday", CONTEXT_ONLY)
    forget = ForgetRecord(
        forget_id="f1", workspace_id="ws-a", selector=ForgetSelector(entry_ids=["c0"]), requested_at=T
    )
    Forgetter(store=store, state=state).apply(forget, Position(0, 1))
    assert context_ids(store, "c1") == [] and context_ids(store, "c2") == ["c1"]
    assert "birthday" not in str(memory(store, "c2")["context"])
    assert hits(store, "birthday", CONTEXT_ONLY) == []  # the context vectors were rebuilt without it
    forget2 = ForgetRecord(
        forget_id="f2", workspace_id="ws-a", selector=ForgetSelector(entry_ids=["c2"]), requested_at=T
    )
    Forgetter(store=store, state=state).apply(forget2, Position(0, 2))
    assert adjacency(store, "c1") == {"next": "c3"} and adjacency(store, "c3") == {"previous": "c1"}


def test_recall_brings_a_hits_run_neighbours_below_it_when_asked(store: MemoryStore, ix: Indexer) -> None:
    ix.index_batch(chat())
    ix.index_batch([rec("z0", "user: the yellow dress is in the wardrobe", t=9, run="r9")])
    engine = RecallEngine(store=store, embedder=None, bm25=Bm25Encoder(), adjacent_weight=0.5)
    req = {"workspace_id": "ws-a", "agent_id": "agent-1", "query": "tuesday", "mode": "sparse", "k": 3}
    plain = engine.recall(RecallRequest.model_validate(req)).hits
    assert [h.entry_id for h in plain] == ["c2"] and plain[0].context is not None
    got = engine.recall(RecallRequest.model_validate({**req, "adjacent": True})).hits
    assert [(h.entry_id, h.via) for h in got] == [("c2", "direct"), ("c1", "adjacent"), ("c3", "adjacent")]
    assert got[1].score == pytest.approx(got[0].score * 0.5)
    one = engine.recall(RecallRequest.model_validate({**req, "adjacent": True, "k": 1})).hits
    assert [h.entry_id for h in one] == ["c2"]  # counted in k
    on = RecallEngine(store=store, embedder=None, bm25=Bm25Encoder(), adjacent=True)
    assert len(on.recall(RecallRequest.model_validate(req)).hits) == 3  # the service default
    assert len(on.recall(RecallRequest.model_validate({**req, "adjacent": False})).hits) == 1


# -- a collection created before the context vector existed ---------------------------------------------


def _old_edge(path: Path) -> None:
    import qdrant_edge as qe

    path.mkdir(parents=True)
    config = qe.EdgeConfig(
        vectors={
            "dense": qe.EdgeVectorParams(
                size=DIM,
                distance=qe.Distance.Cosine,
                multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim),
            )
        },
        sparse_vectors={"bm25": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
    )
    qe.EdgeShard.create(str(path), config).close()


def _old_client(path: Path) -> None:
    from qdrant_client import QdrantClient
    from qdrant_client import models as m

    client = QdrantClient(path=str(path))
    client.create_collection(
        "memories",
        vectors_config={
            "dense": m.VectorParams(
                size=DIM,
                distance=m.Distance.COSINE,
                multivector_config=m.MultiVectorConfig(comparator=m.MultiVectorComparator.MAX_SIM),
            )
        },
        sparse_vectors_config={"bm25": m.SparseVectorParams(modifier=m.Modifier.IDF)},
    )
    client.close()


@pytest.mark.parametrize("backend", ["edge", "qdrant-local-path"])
def test_an_old_collection_runs_without_the_context_vector(
    backend: str, tmp_path: Path, mk: MakePoint, bm25: Bm25Encoder, caplog: pytest.LogCaptureFixture
) -> None:
    if backend == "edge":
        from episodic.store.edge import EdgeStore

        _old_edge(tmp_path / "edge")
        store: MemoryStore = EdgeStore(tmp_path / "edge")
    else:
        from episodic.store.qdrant_server import QdrantServerStore

        _old_client(tmp_path / "qlocal")
        store = QdrantServerStore(path=tmp_path / "qlocal", collection="memories")
    try:
        with caplog.at_level("WARNING"):
            store.ensure_collection(DIM)
        assert not store.has_context
        assert "bm25_context" in caplog.text and "rebuilt" in caplog.text
        point = mk("e1", "a yellow dress", e(0))
        ctx = {"context": [{"entry_id": "e0", "text": "sister"}], "context_ids": ["e0"]}
        store.upsert(
            [
                MemoryPoint(
                    point.point_id, point.sparse, {**point.payload, **ctx}, point.dense, context=bm25.document("sister")
                )
            ]
        )
        assert "context" not in memory(store, "e1")  # not indexed with it: the hit does not claim it
        full = Fusion(
            method="rrf", k=3, both_weight=0.5, head=5, head_weight=0.75, context_weight=1.0, both_by_context=True
        )
        assert hits(store, "yellow dress", full) == ["e1"]  # the four-leg tree
        Indexer(store=store, embedder=None, bm25=bm25).index_batch(chat())
        assert "context" not in memory(store, "c2") and adjacency(store, "c2") == {"previous": "c1", "next": "c3"}
    finally:
        store.close()


def similar_of(store: MemoryStore, entry_id: str) -> set[str]:
    return {e["dst"] for e in memory(store, entry_id)["relations"] if e["relation"] == "similar"}


def test_the_linker_keeps_a_next_edge_the_indexer_wrote_while_it_searched(
    store: MemoryStore, ix: Indexer, bm25: Bm25Encoder
) -> None:
    """Two writers of one memory's edges: the indexer gives c1 its `next` edge while the linker is looking
    for c1's similar memories; the linker's write keeps it (and the indexer's later writes keep `similar`)."""
    from episodic.maintenance.linker import Linker
    from schemas.events import IndexedEvent

    c = chat()
    ix.index_batch(c[:2])
    for eid in ("c0", "c1"):
        store.set_dense(point_id("ws-a", eid), [e(0)], {"has_dense": True})
    event = IndexedEvent(
        entry_id="c1", workspace_id="ws-a", point_id=point_id("ws-a", "c1"), indexed_at=T, mode="vector"
    )
    racing = Interleaved(store, "similar_to_many", lambda: ix.index_batch([c[2]]))
    Linker(store=racing, threshold=0.5, top_k=3).link([event])  # type: ignore[arg-type]
    assert adjacency(store, "c1") == {"previous": "c0", "next": "c2"}
    assert similar_of(store, "c1") == {"c0"}
    # and the other way round: the indexer's neighbour write (c3 arrives, c2 gets `next`) keeps what the
    # linker wrote on c2 after the indexer had read c2 for its plan
    store.set_dense(point_id("ws-a", "c2"), [e(0)], {"has_dense": True})
    late = IndexedEvent(
        entry_id="c2", workspace_id="ws-a", point_id=point_id("ws-a", "c2"), indexed_at=T, mode="vector"
    )
    linker = Linker(store=store, threshold=0.5, top_k=3)
    racing_ix = Indexer(
        store=Interleaved(store, "run_memories", lambda: linker.link([late])),  # type: ignore[arg-type]
        embedder=None,
        bm25=bm25,
        context=ContextMode("prev", 2, 16),
    )
    racing_ix.index_batch([c[3]])
    assert adjacency(store, "c2") == {"previous": "c1", "next": "c3"}
    assert similar_of(store, "c2") == {"c0", "c1"}


@pytest.mark.parametrize("with_tombstones", [True, False])
def test_a_neighbour_forgotten_while_the_linker_links_keeps_no_edge(
    store: MemoryStore, state: StateStore, ix: Indexer, with_tombstones: bool
) -> None:
    """Forget c0 after the linker found it alive and before it writes c1's edges (the forget's own cut finds
    no edge yet): the linker cuts it again, so no edge to c0 is left and `episodic check` finds nothing. With the
    tombstones the linker also sees a memory forgotten but not yet deleted; without them, a deleted one."""
    from episodic.maintenance.linker import Linker
    from schemas.events import IndexedEvent

    ix.index_batch(chat()[:2])
    for eid in ("c0", "c1"):
        store.set_dense(point_id("ws-a", eid), [e(0)], {"has_dense": True})
    forget = ForgetRecord(
        forget_id="f1", workspace_id="ws-a", selector=ForgetSelector(entry_ids=["c0"]), requested_at=T
    )
    forgetter = Forgetter(store=store, state=state)
    racing = Interleaved(store, "update_memories", lambda: forgetter.apply(forget, Position(0, 1)), before=True)
    event = IndexedEvent(
        entry_id="c1", workspace_id="ws-a", point_id=point_id("ws-a", "c1"), indexed_at=T, mode="vector"
    )
    linker = Linker(store=racing, threshold=0.5, top_k=3, state=state if with_tombstones else None)  # type: ignore[arg-type]
    result = linker.link([event])
    assert result.linked == 1 and result.cut == 1
    assert similar_of(store, "c1") == set()
    report = check_store(store, state)
    assert report.ok, report.as_dict()


@pytest.mark.parametrize("together", [False, True], ids=["after", "in-one-batch"])
def test_another_agents_entry_under_a_run_id_joins_nothing_of_it(
    store: MemoryStore, state: StateStore, ix: Indexer, together: bool
) -> None:
    """Issue 45 part 1: mallory writes under alice's run id, just after alice's last entry (in a later batch,
    or the same one). Her memory is indexed with none of alice's lines or ids, alice's memories get no edge to
    hers, and each agent's part of the run is a chain of its own; alice's run is as it was."""
    alice = [rec(f"a{i}", s, t=i, agent="alice") for i, s in enumerate(
        ["the on-call pager code is 4471", "rotate the pager code weekly", "pager duty moves to Sam"])]  # fmt: skip
    mallory = [rec("m1", "what is the pager code?", t=3, agent="mallory"), rec("m2", "thanks", t=5, agent="mallory")]
    if together:
        ix.index_batch([*alice, *mallory])
    else:
        ix.index_batch(alice)
        ix.index_batch(mallory)
    assert context_ids(store, "m1") == [] and context_ids(store, "m2") == ["m1"]
    assert "4471" not in str(memory(store, "m1")) and "4471" not in str(memory(store, "m2"))
    assert adjacency(store, "a2") == {"previous": "a1"} and adjacency(store, "m1") == {"next": "m2"}
    assert context_ids(store, "a2") == ["a0", "a1"]
    # her entry late, between alice's: still nothing crosses
    ix.index_batch([rec("m0", "hello", t=1, agent="mallory")])
    assert adjacency(store, "a1") == {"previous": "a0", "next": "a2"} and context_ids(store, "m0") == []
    assert adjacency(store, "m0") == {"next": "m1"}
    # a forget of mallory's memories joins her chain only, and leaves alice's as it is
    forget = ForgetRecord(
        forget_id="f-m", workspace_id="ws-a", selector=ForgetSelector(entry_ids=["m1"]), requested_at=T
    )
    Forgetter(store=store, state=state).apply(forget, Position(0, 1))
    assert adjacency(store, "m0") == {"next": "m2"} and adjacency(store, "a2") == {"previous": "a1"}
