"""The piece prior of the hybrid's dense leg (every backend): the store records how many dense rows each
memory has (`pieces`, per generation), and a `Fusion.piece_penalty` ranks the dense leg by
`cosine - penalty * ln(pieces)`; the dense mode and the raw cosine stay as they were (SPEC §7)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from episodic.domain.identity import point_id
from episodic.kernel.ports import Fusion, MemoryPoint, MemoryStore, ScopeFilter, SparseVec, StoredHit
from episodic.store.query import Filter, HasId, IsEmpty
from episodic.store.rules import stored_point
from tests.contract.conftest import DIM, MakePoint, e, mix
from tests.contract.conftest import as_qdrant as q

OWN = ScopeFilter(workspace_id="ws-a", scope="own", agent_id="agent-1")
NO_TERMS = SparseVec([], [])  # no query term: the dense leg alone ranks (the BM25 legs are left out)
DENSE_LEG = Fusion(k=3, dense_weight=1.0, sparse_weight=0.0)
PENALTY = 0.08


def pid(entry: str) -> str:
    return point_id("ws-a", entry)


def ids(hits: list[StoredHit]) -> list[str]:
    return [h.payload["entry_id"] for h in hits]


def many_pieces(best: float, n: int) -> list[list[float]]:
    """n rows: one at cosine `best` to e(0), the others orthogonal to it."""
    rows = [mix((0, best), (1, math.sqrt(1 - best * best)))]
    rows += [e(2 + i % (DIM - 2)) for i in range(n - 1)]
    return rows


def one_piece(best: float) -> list[float]:
    return mix((0, best), (DIM - 1, math.sqrt(1 - best * best)))


def test_the_store_records_each_memorys_piece_count(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("long", "a long memory", many_pieces(0.8, 20)), mk("short", "one", e(0)), mk("none", "x", None)])
    got = store.retrieve([pid("long"), pid("short"), pid("none")])
    assert got[pid("long")]["pieces"] == 20
    assert got[pid("short")]["pieces"] == 1
    assert "pieces" not in got[pid("none")]  # no dense rows, nothing to count
    store.set_dense(pid("none"), [e(1), e(2), e(3)], {})  # the densify backfill's write
    assert store.retrieve([pid("none")])[pid("none")]["pieces"] == 3
    store.set_dense(pid("long"), [e(1)], {})  # re-embedded with fewer pieces: the count follows
    assert store.retrieve([pid("long")])[pid("long")]["pieces"] == 1


def test_a_second_generation_records_its_own_count(store: MemoryStore, mk: MakePoint) -> None:
    s = q(store)
    s.upsert([mk("a", "alpha", many_pieces(0.9, 4)), mk("b", "bravo", e(0))])
    s.add_dense_vector("dense_1", 3)
    rows = {pid("a"): [[1.0, 0, 0], [0, 1.0, 0]], pid("b"): [[0, 0, 1.0]]}
    assert s.set_vectors("dense_1", rows, {"model@dense_1": "m2"}) == 2  # two counts, one write each
    got = s.retrieve([pid("a"), pid("b")])
    assert (got[pid("a")]["pieces"], got[pid("a")]["pieces_dense_1"]) == (4, 2)
    assert (got[pid("b")]["pieces"], got[pid("b")]["pieces_dense_1"]) == (1, 1)
    assert got[pid("a")]["model@dense_1"] == "m2"
    if hasattr(s, "payload_indexes"):  # the engine that reports them (Edge): both counts are indexed
        assert {"pieces", "pieces_dense_1"} <= s.payload_indexes()


def test_the_penalty_ranks_a_short_memory_above_a_long_ones_lucky_piece(store: MemoryStore, mk: MakePoint) -> None:
    # long: best piece 0.80 among 20 (0.80 - 0.08 ln 20 = 0.56); short: its only piece at 0.75.
    store.upsert([mk("long", "a long memory", many_pieces(0.80, 20)), mk("short", "a short one", one_piece(0.75))])
    assert ids(store.query_hybrid(e(0), NO_TERMS, OWN, 5, DENSE_LEG)) == ["long", "short"]
    penalised = Fusion(k=3, dense_weight=1.0, sparse_weight=0.0, piece_penalty=PENALTY)
    assert ids(store.query_hybrid(e(0), NO_TERMS, OWN, 5, penalised)) == ["short", "long"]
    # The dense mode is cosine x importance, unpenalised (SPEC §7).
    dense = store.query_dense(e(0), OWN, 5)
    assert ids(dense) == ["long", "short"]
    assert dense[0].score == pytest.approx(0.5 * 0.80, abs=1e-4)
    # A small penalty does not overturn a clear win: 0.80 - 0.01 ln 20 = 0.77 > 0.75.
    light = Fusion(k=3, dense_weight=1.0, sparse_weight=0.0, piece_penalty=0.01)
    assert ids(store.query_hybrid(e(0), NO_TERMS, OWN, 5, light)) == ["long", "short"]


def test_a_memory_without_a_recorded_count_counts_as_one_piece(store: MemoryStore, mk: MakePoint) -> None:
    # Written before the count existed: the engine gets the point without `pieces` in its payload.
    old = stored_point(mk("old", "written long ago", many_pieces(0.80, 20)))
    old.payload.pop("pieces")
    q(store).engine.upsert([MemoryPoint(old.point_id, old.sparse, old.payload, old.dense, old.vector)])
    store.upsert([mk("short", "a short one", one_piece(0.75))])
    assert "pieces" not in store.retrieve([pid("old")])[pid("old")]
    penalised = Fusion(k=3, dense_weight=1.0, sparse_weight=0.0, piece_penalty=PENALTY)
    assert ids(store.query_hybrid(e(0), NO_TERMS, OWN, 5, penalised)) == ["old", "short"]  # no penalty: 0.80


def test_the_penalised_leg_still_feeds_the_re_scored_leg(store: MemoryStore, mk: MakePoint, bm25: object) -> None:
    # With every leg on, the hybrid answers as before: a lexical and dense match first, nothing lost.
    store.upsert(
        [
            mk("both", "kafka consumer lag alert", many_pieces(0.9, 6)),
            mk("dense-only", "gardening", one_piece(0.7)),
            mk("sparse-only", "kafka lag on the orders topic", None),
        ]
    )
    fusion = Fusion(k=3, dense_weight=2.5, both_weight=0.5, head=5, head_weight=0.75, piece_penalty=PENALTY)
    got = ids(store.query_hybrid(e(0), bm25.query("kafka consumer lag"), OWN, 5, fusion))  # type: ignore[attr-defined]
    assert got[0] == "both" and set(got) == {"both", "dense-only", "sparse-only"}


def test_the_backfill_records_the_count_of_memories_written_before_it(store: MemoryStore, mk: MakePoint) -> None:
    engine = q(store).engine
    for eid, rows in (("old-long", many_pieces(0.80, 20)), ("old-short", [e(3), e(4)])):
        old = stored_point(mk(eid, eid, rows))
        old.payload.pop("pieces")  # as written before the store recorded it
        engine.upsert([MemoryPoint(old.point_id, old.sparse, old.payload, old.dense, old.vector)])
    store.upsert([mk("new", "counted", e(1)), mk("sparse", "no vector", None)])
    store.upsert([mk("short", "a short one", one_piece(0.75))])
    penalised = Fusion(k=3, dense_weight=1.0, sparse_weight=0.0, piece_penalty=PENALTY)
    assert ids(store.query_hybrid(e(0), NO_TERMS, OWN, 2, penalised)) == ["old-long", "short"]
    assert store.backfill_pieces(1) == 1  # one page at a time
    assert store.backfill_pieces(10) == 1  # the other one; counted and sparse-only memories are left alone
    assert store.backfill_pieces(10) == 0  # nothing left
    got = store.retrieve([pid("old-long"), pid("old-short"), pid("sparse")])
    assert (got[pid("old-long")]["pieces"], got[pid("old-short")]["pieces"]) == (20, 2)
    assert "pieces" not in got[pid("sparse")]
    assert ids(store.query_hybrid(e(0), NO_TERMS, OWN, 2, penalised)) == ["short", "old-long"]  # ranked as new ones


def test_the_backfill_leaves_a_count_written_meanwhile_alone(store: MemoryStore, mk: MakePoint) -> None:
    """The count is written only where it is still missing: a memory replaced between the backfill's read and
    its write (new rows, their own count) keeps the new count."""
    s = q(store)
    old = stored_point(mk("m", "old text", many_pieces(0.8, 9)))
    old.payload.pop("pieces")
    s.engine.upsert([MemoryPoint(old.point_id, old.sparse, old.payload, old.dense, old.vector)])
    store.upsert([mk("m", "new text", [e(1), e(2)])])  # replaced: 2 rows, count 2
    key_missing = Filter(must=(HasId((pid("m"),)), IsEmpty("pieces")))
    s.engine.set_payload_where(key_missing, {"pieces": 9})  # the backfill's stale write, as it would land
    assert store.retrieve([pid("m")])[pid("m")]["pieces"] == 2
    old2 = stored_point(mk("m2", "old", many_pieces(0.8, 4)))
    old2.payload.pop("pieces")
    s.engine.upsert([MemoryPoint(old2.point_id, old2.sparse, old2.payload, old2.dense, old2.vector)])
    s.engine.set_payload_where(Filter(must=(HasId((pid("m2"),)), IsEmpty("pieces"))), {"pieces": 4})
    assert store.retrieve([pid("m2")])[pid("m2")]["pieces"] == 4  # still missing there: written


def test_a_store_opened_with_an_older_generation_indexes_its_count_at_start(tmp_path: Path) -> None:
    """Edge (the engine that reports its payload indexes): a generation whose count index is missing (made
    before the index existed) gets it when the store is opened again."""
    import qdrant_edge as qe

    from episodic.store.edge import EdgeStore

    first = EdgeStore(tmp_path / "edge", prefetch_limit=50)
    first.ensure_collection(DIM)
    first.add_dense_vector("dense_1", 3)
    first._edge._open().update(qe.UpdateOperation.delete_field_index("pieces_dense_1"))
    assert "pieces_dense_1" not in first.payload_indexes()
    first.close()
    again = EdgeStore(tmp_path / "edge", prefetch_limit=50)
    try:
        again.ensure_collection(DIM)
        assert {"pieces", "pieces_dense_1"} <= again.payload_indexes()
    finally:
        again.close()
