"""Indexer against the real store (Qdrant Edge) and the real model: identity, duplicates, sparse-only."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from episodic.domain.identity import point_id
from episodic.indexing.indexer import Indexer
from episodic.kernel.ports import ScopeFilter
from episodic.kernel.settings import Settings
from episodic.store.sparse import Bm25Encoder
from schemas.events import EmbeddableRecord

pytestmark = pytest.mark.integration


def rec(i: str, summary: str, *, ws: str = "w1", agent: str = "a1", et: str = "summary.generated") -> EmbeddableRecord:
    return EmbeddableRecord.from_dict(
        {
            "id": i,
            "workspace_id": ws,
            "agent_id": agent,
            "crew_id": "c1",
            "ts": "2026-11-20T10:00:00Z",
            "entry_type": et,
            "severity": "info",
            "summary": summary,
            "payload": {"k": i},
            "base_importance": 0.7,
            "accepted_at": datetime(2026, 11, 20, 10, 0, 1, tzinfo=UTC),
        }
    )


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    from stack.stores import open_store

    s = open_store(Settings(data_dir=tmp_path), dim=384)
    yield s
    s.close()


@pytest.fixture
def indexer(store: Any, embedder: Any) -> Indexer:
    return Indexer(store=store, embedder=embedder, bm25=Bm25Encoder())


def payload_of(store: Any, ws: str, eid: str) -> dict[str, Any]:
    pid = point_id(ws, eid)
    got = store.retrieve([pid])
    assert pid in got, f"no point for {ws}/{eid}"
    return dict(got[pid])


def test_new_entries_become_points_with_vectors(indexer: Indexer, store: Any) -> None:
    res = indexer.index_batch([rec("e1", "checkout OOM in prod"), rec("e2", "TLS cert expires soon")])
    assert [(e.entry_id, e.mode) for e in res.events] == [("e1", "vector"), ("e2", "vector")]
    assert res.embedded == 2 and res.written == 2
    assert store.count("w1") == 2 and store.count("w1", has_dense=True) == 2
    p = payload_of(store, "w1", "e1")
    assert p["entry_id"] == "e1" and p["reference_count"] == 0 and p["occurrences"] == 1 and p["aliases"] == []
    assert p["importance_score"] == pytest.approx(0.7) and p["has_dense"] is True and p["model"]


def test_redelivery_is_idempotent_and_keeps_counters(indexer: Indexer, store: Any) -> None:
    indexer.index_batch([rec("e1", "checkout OOM in prod")])
    pid = point_id("w1", "e1")
    store.set_payload(
        pid, {"reference_count": 5, "last_referenced_at": "2026-11-21T00:00:00Z", "importance_score": 0.9}
    )
    res = indexer.index_batch([rec("e1", "checkout OOM in prod")])
    assert res.written == 0 and res.embedded == 0 and res.events[0].mode == "vector"
    p = payload_of(store, "w1", "e1")
    assert (p["reference_count"], p["last_referenced_at"], p["importance_score"]) == (5, "2026-11-21T00:00:00Z", 0.9)
    assert store.count("w1") == 1


def test_changed_summary_replaces_text_and_keeps_counters(indexer: Indexer, store: Any) -> None:
    indexer.index_batch([rec("e1", "checkout OOM in prod")])
    store.set_payload(point_id("w1", "e1"), {"reference_count": 3})
    res = indexer.index_batch([rec("e1", "payments ledger moved to Postgres 16")])
    assert res.written == 1
    p = payload_of(store, "w1", "e1")
    assert p["summary"] == "payments ledger moved to Postgres 16" and p["reference_count"] == 3
    scope = ScopeFilter(workspace_id="w1", agent_id="a1")
    hits = store.query_sparse(Bm25Encoder().query("ledger postgres"), scope, 5)
    assert [h.payload["entry_id"] for h in hits] == ["e1"]
    assert store.query_sparse(Bm25Encoder().query("checkout OOM"), scope, 5) == []


def test_exact_duplicates_keep_one_point_with_aliases(indexer: Indexer, store: Any) -> None:
    indexer.index_batch([rec("e1", "Checkout  OOM in prod")])
    res = indexer.index_batch([rec("e2", "checkout oom in PROD "), rec("e3", "checkout OOM in prod")])
    assert [(e.entry_id, e.mode, e.duplicate_of) for e in res.events] == [
        ("e2", "duplicate", "e1"),
        ("e3", "duplicate", "e1"),
    ]
    assert store.count("w1") == 1
    p = payload_of(store, "w1", "e1")
    assert p["aliases"] == ["e2", "e3"] and p["occurrences"] == 3
    # re-delivery of an alias changes nothing
    res = indexer.index_batch([rec("e2", "checkout oom in PROD ")])
    assert res.events[0].mode == "duplicate" and res.events[0].duplicate_of == "e1"
    assert payload_of(store, "w1", "e1")["occurrences"] == 3
    # another agent or entry type is not a duplicate
    indexer.index_batch(
        [rec("e4", "checkout OOM in prod", agent="a2"), rec("e5", "checkout OOM in prod", et="peer.escalation")]
    )
    assert store.count("w1") == 3


def test_duplicates_inside_one_batch(indexer: Indexer, store: Any) -> None:
    res = indexer.index_batch([rec("e1", "same text"), rec("e2", "Same   text"), rec("e1", "same text")])
    assert store.count("w1") == 1
    assert payload_of(store, "w1", "e1")["aliases"] == ["e2"]
    assert {e.entry_id: e.mode for e in res.events}["e2"] == "duplicate"


def test_same_id_in_two_workspaces_are_two_memories(indexer: Indexer, store: Any) -> None:
    indexer.index_batch([rec("e1", "alpha text", ws="w1"), rec("e1", "alpha text", ws="w2")])
    assert store.count("w1") == 1 and store.count("w2") == 1
    assert point_id("w1", "e1") != point_id("w2", "e1")


def test_sparse_only_then_backfill(store: Any, embedder: Any) -> None:
    bm25 = Bm25Encoder()
    sparse_ix = Indexer(store=store, embedder=None, bm25=bm25)
    res = sparse_ix.index_batch([rec("e1", "checkout OOM in prod"), rec("e2", "TLS cert expiry")])
    assert {e.mode for e in res.events} == {"sparse-only"}
    assert store.count("w1", has_dense=False) == 2 and store.count("w1", has_dense=True) == 0
    scope = ScopeFilter(workspace_id="w1", agent_id="a1")
    assert [h.payload["entry_id"] for h in store.query_sparse(bm25.query("OOM"), scope, 5)] == ["e1"]
    assert store.query_dense(embedder.embed_query("OOM").tolist(), scope, 5) == []
    full_ix = Indexer(store=store, embedder=embedder, bm25=bm25)
    assert len(full_ix.densify(10).events) == 2
    assert len(full_ix.densify(10).events) == 0
    assert store.count("w1", has_dense=True) == 2
    hits = store.query_dense(embedder.embed_query("out of memory in checkout").tolist(), scope, 1)
    assert hits[0].payload["entry_id"] == "e1" and hits[0].payload["has_dense"] is True


def test_long_text_is_chunked_and_its_tail_is_searchable(indexer: Indexer, store: Any, embedder: Any) -> None:
    filler = " ".join(f"The quarterly planning meeting covered budget line {i} and staffing." for i in range(60))
    tail = "Finally, the database failover drill revealed that replica promotion took eleven minutes."
    indexer.index_batch([rec("long", filler + " " + tail), rec("other", "Lunch menu for the offsite: tacos.")])
    assert len(embedder.chunk(filler + " " + tail)) > 1
    scope = ScopeFilter(workspace_id="w1", agent_id="a1")
    hits = store.query_dense(
        embedder.embed_query("how long did replica promotion take in the failover drill").tolist(), scope, 2
    )
    assert hits[0].payload["entry_id"] == "long"


def test_deferred_dense_is_searchable_at_once_then_densified(indexer: Indexer, store: Any, embedder: Any) -> None:
    res = indexer.index_batch(
        [rec("e1", "checkout OOM in prod"), rec("e2", "TLS cert expiry"), rec("e3", "checkout OOM in prod")],
        defer_dense=True,
    )
    assert res.deferred == 2 and res.embedded == 0
    assert {e.entry_id: e.mode for e in res.events} == {"e1": "sparse-only", "e2": "sparse-only", "e3": "duplicate"}
    scope = ScopeFilter(workspace_id="w1", agent_id="a1")
    assert [h.payload["entry_id"] for h in store.query_sparse(indexer.bm25.query("OOM"), scope, 5)] == ["e1"]
    assert store.count("w1", has_dense=False) == 2

    done = indexer.densify(1)  # bounded: one at a time
    assert len(done.events) == 1 and done.events[0].mode == "vector" and done.chars > 0
    rest = indexer.densify(10)
    assert {e.entry_id for e in [*done.events, *rest.events]} == {"e1", "e2"}
    assert indexer.densify(10).events == []
    assert store.count("w1", has_dense=True) == 2
    assert payload_of(store, "w1", "e1")["aliases"] == ["e3"]  # densify kept the payload
    hits = store.query_dense(embedder.embed_query("out of memory in checkout").tolist(), scope, 1)
    assert hits[0].payload["entry_id"] == "e1"


def test_densify_skips_a_memory_replaced_while_the_model_ran(store: Any, embedder: Any) -> None:
    bm25 = Bm25Encoder()
    Indexer(store=store, embedder=embedder, bm25=bm25).index_batch([rec("e1", "old text")], defer_dense=True)

    class Racing:
        """Embeds, and meanwhile the consumer re-indexes e1 with a new summary and its own vector."""

        dim = embedder.dim
        model_id = embedder.model_id

        def embed_documents(self, texts: list[str]) -> list[Any]:
            out = embedder.embed_documents(texts)
            Indexer(store=store, embedder=embedder, bm25=bm25).index_batch([rec("e1", "new text")])
            return out

    ix = Indexer(store=store, embedder=Racing(), bm25=bm25)  # type: ignore[arg-type]
    assert ix.densify(10).events == []
    assert payload_of(store, "w1", "e1")["summary"] == "new text"
    scope = ScopeFilter(workspace_id="w1", agent_id="a1")
    top = store.query_dense(embedder.embed_query("new text").tolist(), scope, 1, with_dense=True)[0]
    assert float(np.max(np.asarray(top.dense) @ embedder.embed_query("new text"))) > 0.99


def test_densify_fills_the_oldest_first(store: Any, embedder: Any) -> None:
    times = iter(datetime(2026, 11, 20, 10, m, tzinfo=UTC) for m in range(0, 60, 5))
    ix = Indexer(store=store, embedder=embedder, bm25=Bm25Encoder(), clock=lambda: next(times))
    # ids chosen so that the store's id order is not the arrival order
    for eid in ("zz-first", "aa-second", "mm-third", "bb-fourth"):
        ix.index_batch([rec(eid, f"memory {eid}")], defer_dense=True)
    order = [ix.densify(1).events[0].entry_id for _ in range(4)]
    assert order == ["zz-first", "aa-second", "mm-third", "bb-fourth"]


def test_a_text_the_model_fails_on_is_quarantined_and_the_others_get_their_vectors(store: Any, embedder: Any) -> None:
    bm25 = Bm25Encoder()
    Indexer(store=store, embedder=None, bm25=bm25).index_batch(
        [rec("ok1", "checkout OOM in prod"), rec("bad", "POISON text"), rec("ok2", "TLS cert expiry")]
    )

    class Picky:
        """The real model, except that it raises on one text (as a tokenizer bug on odd input would)."""

        dim = embedder.dim
        model_id = embedder.model_id

        def embed_documents(self, texts: list[str]) -> list[Any]:
            if any("POISON" in t for t in texts):
                raise RuntimeError("the model cannot read this text")
            return embedder.embed_documents(texts)

    ix = Indexer(store=store, embedder=Picky(), bm25=bm25)  # type: ignore[arg-type]
    first = ix.densify(10, quarantine_after=2)
    assert {e.entry_id for e in first.events} == {"ok1", "ok2"}  # the failing text blocks nobody
    assert first.failed == 1 and first.quarantined == []
    assert payload_of(store, "w1", "bad")["densify_failures"] == 1
    assert "cannot read this text" in payload_of(store, "w1", "bad")["densify_error"]
    second = ix.densify(10, quarantine_after=2)
    assert second.events == [] and second.failed == 1 and second.quarantined == ["w1/bad"]
    third = ix.densify(10, quarantine_after=2)  # quarantined: the backfill no longer tries it
    assert third.embedded == 0 and third.failed == 0
    assert store.count_quarantined("w1", 2) == 1 and store.count("w1", has_dense=False) == 1
    # a higher limit (a fixed model) lets it try again
    assert Indexer(store=store, embedder=embedder, bm25=bm25).densify(10, quarantine_after=5).written == 1
    assert store.count_quarantined("w1", 2) == 0


def test_duplicates_keep_the_newest_aliases_and_count_every_occurrence(store: Any, embedder: Any) -> None:
    ix = Indexer(store=store, embedder=embedder, bm25=Bm25Encoder(), alias_limit=3)
    ix.index_batch([rec("hb-0", "heartbeat: all systems nominal")])
    for i in range(1, 8):  # one batch per beat, and some in one batch
        ix.index_batch([rec(f"hb-{i}", "heartbeat: all systems nominal")])
    ix.index_batch([rec("hb-8", "Heartbeat:  all systems nominal"), rec("hb-9", "heartbeat: all systems nominal")])
    p = payload_of(store, "w1", "hb-0")
    assert p["aliases"] == ["hb-7", "hb-8", "hb-9"] and p["occurrences"] == 10
    again = ix.index_batch([rec("hb-9", "heartbeat: all systems nominal")])  # a re-delivered kept alias
    assert again.events[0].mode == "duplicate" and payload_of(store, "w1", "hb-0")["occurrences"] == 10
    assert store.count("w1") == 1


def test_every_duplicate_counts_beyond_the_alias_bound_and_none_counts_twice(store: Any) -> None:
    """Issue 45 part 3: 300 identical heartbeats in one batch are 300 occurrences (the alias list keeps the
    newest 20; each batch once counted at most 20). Re-delivered, in other batches, none counts again: the
    state store knows the ids the alias list pushed out (episodic.indexing.absorbed)."""
    from episodic.indexing import absorbed
    from episodic.store.state import QdrantStateStore

    state = QdrantStateStore.beside(store)
    ix = Indexer(store=store, embedder=None, bm25=Bm25Encoder(), state=state)
    beats = [rec(f"hb-{i}", "heartbeat: all workers alive") for i in range(300)]
    res = ix.index_batch(beats)
    assert [e.mode for e in res.events].count("duplicate") == 299 and res.written == 1
    p = payload_of(store, "w1", "hb-0")
    assert p["occurrences"] == 300 and p["aliases"] == [f"hb-{i}" for i in range(280, 300)]
    assert len(absorbed.owned_by(state, "w1", ["hb-0"])) == 299
    for s in range(0, 300, 64):  # the whole batch delivered again, in other cuts
        again = ix.index_batch(beats[s : s + 64])
        assert {e.mode for e in again.events} <= {"duplicate", "sparse-only"} and again.written == 0
    assert payload_of(store, "w1", "hb-0")["occurrences"] == 300 and store.count("w1") == 1
    # another agent's entry under an id only the state store still knows is refused, as under a kept alias
    taken = ix.index_batch([rec("hb-3", "not a heartbeat", agent="a2")])
    assert [r.id for r, _ in taken.refused] == ["hb-3"]
