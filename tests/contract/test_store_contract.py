"""The MemoryStore contract: every adapter must pass every test here (SPEC §6, §7, §10)."""

from __future__ import annotations

import math
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from episodic.domain.identity import point_id
from episodic.kernel.errors import StoreError
from episodic.kernel.ports import Fusion, MemoryPoint, MemoryStore, ScopeFilter, SparseVec, StoredHit
from episodic.store.query import DENSIFY_FIELDS
from episodic.store.sparse import Bm25Encoder
from tests.contract.conftest import DIM, PERSISTENT_BACKENDS, MakePoint, e, make_store, mix

OWN = ScopeFilter(workspace_id="ws-a", scope="own", agent_id="agent-1")
RRF = Fusion()
DBSF = Fusion(method="dbsf")


def pid(entry: str, ws: str = "ws-a") -> str:
    return point_id(ws, entry)


def ids(hits: list[StoredHit]) -> list[str]:
    return [h.payload["entry_id"] for h in hits]


def query_all(
    store: MemoryStore, bm25: Bm25Encoder, vector: list[float], text: str, scope: ScopeFilter, limit: int = 50
) -> dict[str, list[StoredHit]]:
    q = bm25.query(text)
    return {
        "dense": store.query_dense(vector, scope, limit),
        "sparse": store.query_sparse(q, scope, limit),
        "hybrid": store.query_hybrid(vector, q, scope, limit, RRF),
        "hybrid-dbsf": store.query_hybrid(vector, q, scope, limit, DBSF),
    }


# -- writes and reads ---------------------------------------------------------------------------------


def test_upsert_then_retrieve_returns_payload_and_has_dense(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("e1", "disk full on node 7", e(0)), mk("e2", "disk cleaned", None)])
    got = store.retrieve([pid("e1"), pid("e2"), pid("missing")])
    assert set(got) == {pid("e1"), pid("e2")}
    assert got[pid("e1")]["summary"] == "disk full on node 7"
    assert got[pid("e1")]["payload"] == {"k": [1, 2, {"nested": True}]}
    assert got[pid("e1")]["crew_id"] == "crew-1"
    assert got[pid("e1")]["has_dense"] is True
    assert got[pid("e2")]["has_dense"] is False
    assert store.retrieve([]) == {}


def test_reupsert_same_id_replaces_vectors_and_payload(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    store.upsert([mk("e1", "alpha incident in payments", e(0), importance=0.5)])
    store.upsert([mk("e1", "beta outage in search", e(1), importance=0.7)])
    assert store.count("ws-a") == 1
    assert store.retrieve([pid("e1")])[pid("e1")]["summary"] == "beta outage in search"
    assert store.query_sparse(bm25.query("alpha payments"), OWN, 5) == []
    assert ids(store.query_sparse(bm25.query("beta search"), OWN, 5)) == ["e1"]
    (hit,) = store.query_dense(e(1), OWN, 5)
    assert hit.score == pytest.approx(0.7, abs=1e-4)
    (hit,) = store.query_dense(e(0), OWN, 5)
    assert hit.score == pytest.approx(0.0, abs=1e-4)  # the old chunk is gone


def test_set_payload_merges_fields(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("e1", "merge me", e(0), reference_count=0)])
    store.set_payload(pid("e1"), {"reference_count": 3, "last_referenced_at": "2026-01-02T00:00:00Z"})
    p = store.retrieve([pid("e1")])[pid("e1")]
    assert p["reference_count"] == 3
    assert p["last_referenced_at"] == "2026-01-02T00:00:00Z"
    assert p["summary"] == "merge me"  # untouched fields kept
    assert p["payload"] == {"k": [1, 2, {"nested": True}]}


def test_set_payload_and_set_dense_on_missing_point_raise(store: MemoryStore) -> None:
    with pytest.raises(StoreError):
        store.set_payload(pid("nope"), {"x": 1})
    with pytest.raises(StoreError):
        store.set_dense(pid("nope"), [e(0)], {})
    assert store.count() == 0


def test_count_by_workspace_and_has_dense(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [
            mk("a1", "one", e(0)),
            mk("a2", "two", None),
            mk("a3", "three", None),
            mk("b1", "one", e(0), ws="ws-b"),
        ]
    )
    assert store.count() == 4
    assert store.count("ws-a") == 3
    assert store.count("ws-b") == 1
    assert store.count("ws-zzz") == 0
    assert store.count("ws-a", has_dense=True) == 1
    assert store.count("ws-a", has_dense=False) == 2
    assert store.count(has_dense=False) == 2
    assert store.count(has_dense=True) == 2
    assert store.ping() is True


def test_find_by_dedup_keys_is_per_workspace(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [
            mk("e1", "x", e(0), dedup_key="k1"),
            mk("e2", "y", e(0), dedup_key="k2"),
            mk("b1", "x", e(0), ws="ws-b", dedup_key="k3"),
        ]
    )
    found = store.find_by_dedup_keys("ws-a", ["k1", "k3", "k-unknown"])
    assert set(found) == {"k1"}
    point, payload = found["k1"]
    assert point == pid("e1")
    assert payload["entry_id"] == "e1"
    assert set(store.find_by_dedup_keys("ws-b", ["k1", "k3"])) == {"k3"}
    assert store.find_by_dedup_keys("ws-a", []) == {}


def test_find_by_alias_is_per_workspace(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [
            mk("e1", "x", e(0), aliases=["e7", "e8"]),
            mk("e2", "y", e(0), aliases=[]),
            mk("b1", "x", e(0), ws="ws-b", aliases=["e9"]),
        ]
    )
    assert store.find_by_alias("ws-a", ["e8", "e9", "e2", "e1"]) == {"e8": pid("e1")}
    assert store.find_by_alias("ws-b", ["e8", "e9"]) == {"e9": pid("b1", "ws-b")}
    store.set_payload(pid("e2"), {"aliases": ["e10"]})
    assert store.find_by_alias("ws-a", ["e10"]) == {"e10": pid("e2")}


# -- isolation and scopes -----------------------------------------------------------------------------


def test_workspace_isolation_in_every_mode(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    text = "payment gateway timeout escalated to oncall"
    store.upsert(
        [
            mk("same", text, e(0), ws="ws-a", importance=0.5),
            mk("same", text, e(0), ws="ws-b", importance=0.9),  # same entry id, agent, crew, text
            mk("other", text, e(0), ws="ws-b", importance=0.9),
            mk("sparse-b", text, None, ws="ws-b", importance=0.9),
        ]
    )
    for scope in (
        OWN,
        ScopeFilter(workspace_id="ws-a", scope="crew_shared", crew_id="crew-1", agent_id="agent-1"),
        ScopeFilter(workspace_id="ws-a", scope="crew_shared", crew_id="crew-1", high_value=0.0),
    ):
        for mode, hits in query_all(store, bm25, e(0), text, scope).items():
            assert [h.point_id for h in hits] == [pid("same", "ws-a")], (mode, scope)
            assert all(h.payload["workspace_id"] == "ws-a" for h in hits)
    scope_b = ScopeFilter(workspace_id="ws-b", scope="own", agent_id="agent-1")
    for mode, hits in query_all(store, bm25, e(0), text, scope_b).items():
        assert {h.payload["workspace_id"] for h in hits} == {"ws-b"}, mode
        assert pid("same", "ws-a") not in {h.point_id for h in hits}


@pytest.fixture
def crew_points(store: MemoryStore, mk: MakePoint) -> None:
    text = "deploy pipeline blocked by failing migration"
    store.upsert(
        [
            mk("own-low", text, e(0), agent="agent-1", importance=0.3),
            mk("own-high", text, e(0), agent="agent-1", importance=0.9),
            mk("mate-low", text, e(0), agent="agent-2", importance=0.3),
            mk("mate-edge", text, e(0), agent="agent-2", importance=0.6),  # exactly the threshold
            mk("mate-high", text, e(0), agent="agent-2", importance=0.95),
            mk("other-crew", text, e(0), agent="agent-3", crew="crew-2", importance=0.95),
            mk("own-no-crew", text, e(0), agent="agent-1", crew=None, importance=0.4),
            mk("other-ws", text, e(0), agent="agent-1", ws="ws-b", importance=0.95),
        ]
    )


@pytest.mark.usefixtures("crew_points")
@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        (OWN, {"own-low", "own-high", "own-no-crew"}),
        (  # own (whatever the crew, none included) + the crew's high-value memories
            ScopeFilter(workspace_id="ws-a", scope="crew_shared", crew_id="crew-1", agent_id="agent-1"),
            {"own-low", "own-high", "own-no-crew", "mate-edge", "mate-high"},
        ),
        (
            ScopeFilter(workspace_id="ws-a", scope="crew_shared", crew_id="crew-1"),
            {"own-high", "mate-edge", "mate-high"},
        ),
        (
            ScopeFilter(workspace_id="ws-a", scope="crew_shared", crew_id="crew-1", agent_id="agent-1", high_value=0.9),
            {"own-low", "own-high", "own-no-crew", "mate-high"},
        ),
        (
            ScopeFilter(workspace_id="ws-a", scope="crew_shared", crew_id="crew-2", agent_id="agent-1"),
            {"own-low", "own-high", "own-no-crew", "other-crew"},
        ),
    ],
    ids=["own", "crew+agent", "crew-only", "crew-threshold-0.9", "other-crew"],
)
def test_scopes(store: MemoryStore, bm25: Bm25Encoder, scope: ScopeFilter, expected: set[str]) -> None:
    for mode, hits in query_all(store, bm25, e(0), "deploy pipeline migration", scope).items():
        assert set(ids(hits)) == expected, mode


# -- scores -------------------------------------------------------------------------------------------


def test_dense_score_is_cosine_times_importance(store: MemoryStore, mk: MakePoint) -> None:
    close = mix((0, 0.95), (1, math.sqrt(1 - 0.95**2)))
    store.upsert(
        [
            mk("exact-low", "a", e(0), importance=0.3),  # cosine 1.00
            mk("close-high", "b", close, importance=0.9),  # cosine 0.95
            mk("far", "c", mix((0, 0.5), (2, math.sqrt(0.75))), importance=1.0),  # cosine 0.50
        ]
    )
    hits = store.query_dense(e(0), OWN, 10)
    assert ids(hits) == ["close-high", "far", "exact-low"]
    expected = {"close-high": 0.95 * 0.9, "far": 0.5 * 1.0, "exact-low": 1.0 * 0.3}
    for h in hits:
        assert h.score == pytest.approx(expected[h.payload["entry_id"]], abs=1e-4)


def test_missing_importance_gets_the_neutral_default(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("no-imp", "a", e(0), importance=None)])
    (hit,) = store.query_dense(e(0), OWN, 5)
    assert hit.score == pytest.approx(0.5, abs=1e-4)


def test_sparse_and_hybrid_scores_multiply_importance(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    text = "rollback of billing service release"
    store.upsert(
        [
            # Without the multiplier "exact-low" wins both legs (exact text, cosine 1).
            mk("exact-low", text, e(0), importance=0.3),
            mk("close-high", text + " yesterday evening", mix((0, 0.95), (1, 0.31)), importance=0.9),
            mk("filler", "unrelated gardening notes", e(5), importance=0.9),
        ]
    )
    q = bm25.query(text)
    sparse = store.query_sparse(q, OWN, 10)
    assert ids(sparse) == ["close-high", "exact-low"]
    by_id = {h.payload["entry_id"]: h.score for h in sparse}
    # Same terms, so the raw BM25 of exact-low is larger; the 3x importance must still win.
    assert by_id["close-high"] > by_id["exact-low"] > 0
    for fusion in (RRF, DBSF):
        got = ids(store.query_hybrid(e(0), q, OWN, 10, fusion))
        assert got[0] == "close-high", fusion.method
        assert got.index("exact-low") > got.index("close-high"), fusion.method


def test_rrf_scores_follow_weighted_rrf_times_importance(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    store.upsert(
        [
            mk("both", "kafka consumer lag alert", e(0), importance=0.8),
            mk("dense-only", "gardening", mix((0, 0.9), (1, math.sqrt(0.19))), importance=0.8),
        ]
    )
    fusion = Fusion(k=10, dense_weight=1.0, sparse_weight=1.0)
    hits = store.query_hybrid(e(0), bm25.query("kafka consumer lag"), OWN, 5, fusion)
    assert ids(hits) == ["both", "dense-only"]
    # Qdrant's RRF: sum over legs of 1 / (k + rank), rank from 0, here with weight 1.
    assert hits[0].score == pytest.approx(0.8 * (1 / 10 + 1 / 10), rel=1e-3)
    assert hits[1].score == pytest.approx(0.8 * (1 / 11), rel=1e-3)


def test_rrf_weights_shift_the_ranking(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    store.upsert(
        [
            mk("dense-best", "gardening notes", e(0), importance=0.5),
            # Sparse-only, so each document is in exactly one leg, both at rank 0: only weights decide.
            mk("sparse-best", "postgres vacuum stuck", None, importance=0.5),
        ]
    )
    q = bm25.query("postgres vacuum stuck")
    dense_heavy = store.query_hybrid(e(0), q, OWN, 5, Fusion(dense_weight=3.0, sparse_weight=1.0))
    sparse_heavy = store.query_hybrid(e(0), q, OWN, 5, Fusion(dense_weight=1.0, sparse_weight=3.0))
    assert ids(dense_heavy)[0] == "dense-best"
    assert ids(sparse_heavy)[0] == "sparse-best"


def test_idf_is_computed_per_workspace(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    target = "kubernetes node drained"
    points: list[MemoryPoint] = []
    # ws-a: every memory mentions kubernetes; ws-b: only one of six does.
    for i, word in enumerate(["alpha", "bravo", "charlie", "delta", "echo"]):
        points.append(mk(f"a{i}", f"kubernetes {word} rollout", e(1), ws="ws-a", importance=1.0))
        points.append(mk(f"b{i}", f"{word} invoice printed", e(1), ws="ws-b", importance=1.0))
    points.append(mk("t", target, e(0), ws="ws-a", importance=1.0))
    points.append(mk("t", target, e(0), ws="ws-b", importance=1.0))
    store.upsert(points)

    q = bm25.query("kubernetes")
    doc = bm25.document(target)
    (qi,) = q.indices
    weight = q.values[0] * doc.values[doc.indices.index(qi)]

    def idf(n: int, df: int) -> float:
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    hits_b = store.query_sparse(q, ScopeFilter(workspace_id="ws-b", agent_id="agent-1"), 10)
    assert ids(hits_b) == ["t"]
    assert hits_b[0].score == pytest.approx(weight * idf(6, 1), rel=1e-3)  # rare in ws-b
    assert hits_b[0].score != pytest.approx(weight * idf(12, 7), rel=1e-2)  # not collection-wide
    hits_a = store.query_sparse(q, OWN, 10)
    t_a = next(h for h in hits_a if h.payload["entry_id"] == "t")
    assert t_a.score == pytest.approx(weight * idf(6, 6), rel=1e-3)  # common in ws-a
    assert hits_b[0].score > 10 * t_a.score


def test_multivector_max_sim_uses_the_best_chunk(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [
            mk("two-chunks", "long text", [e(0), e(1)], importance=1.0),
            mk("one-chunk", "short text", [e(2)], importance=1.0),
        ]
    )
    hits = store.query_dense(e(1), OWN, 5)
    assert ids(hits)[0] == "two-chunks"
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    hits = store.query_dense(mix((0, 0.6), (1, 0.8)), OWN, 5)
    assert hits[0].score == pytest.approx(0.8, abs=1e-4)  # max(0.6, 0.8), not the mean
    with_rows = store.query_dense(e(1), OWN, 1, with_dense=True)[0]
    assert with_rows.dense is not None and len(with_rows.dense) == 2
    assert with_rows.dense[1] == pytest.approx(e(1), abs=1e-5)
    assert store.query_dense(e(1), OWN, 1)[0].dense is None


def test_hybrid_returns_union_and_strong_in_both_first(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    store.upsert(
        [
            mk("both", "database migration rollback", e(0)),
            mk("dense-only", "garden watering schedule", mix((0, 0.9), (4, math.sqrt(0.19)))),
            mk("sparse-only", "database migration plan", None),  # no dense vector at all
            mk("weak", "weekly lunch menu", e(6)),
        ]
    )
    q = bm25.query("database migration rollback")
    for fusion in (RRF, DBSF):
        hits = store.query_hybrid(e(0), q, OWN, 10, fusion)
        got = ids(hits)
        assert got[0] == "both", fusion.method
        assert {"both", "dense-only", "sparse-only"} <= set(got), fusion.method
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def _lexical_vs_semantic(store: MemoryStore, mk: MakePoint) -> None:
    """Dense ranking near-nolex > near-lex > filler-0..3 >> lex-far; BM25 for "rollback": lex-far > near-lex."""
    store.upsert(
        [
            mk("near-nolex", "garden watering schedule", mix((0, 0.95), (1, math.sqrt(1 - 0.95**2)))),
            mk("near-lex", "rollback of the release", mix((0, 0.8), (2, 0.6))),
            *(
                mk(f"filler-{i}", f"unrelated note number {i}", mix((0, 0.7 - 0.05 * i), (3 + i, 0.6)))
                for i in range(4)
            ),
            mk("lex-far", "rollback rollback, the rollback runbook", e(4)),
        ]
    )


def test_hybrid_both_leg_rescores_the_dense_candidates_by_bm25(
    store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder
) -> None:
    _lexical_vs_semantic(store, mk)
    only_both = Fusion(dense_weight=0, sparse_weight=0, both_weight=1.0, k=1, prefetch_limit=4)
    got = ids(store.query_hybrid(e(0), bm25.query("rollback"), OWN, 4, only_both))
    # the dense top 4 (near-nolex, near-lex, filler-0, filler-1) ranked by BM25: near-lex first, and
    # lex-far (the best BM25 match, far in meaning) cannot enter through this leg
    assert got[0] == "near-lex" and "lex-far" not in got
    assert set(got) <= {"near-nolex", "near-lex", "filler-0", "filler-1"}


def test_hybrid_head_leg_is_bm25s_top_n(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    _lexical_vs_semantic(store, mk)
    only_head = Fusion(dense_weight=0, sparse_weight=0, head=1, head_weight=1.0, k=1, prefetch_limit=10)
    assert ids(store.query_hybrid(e(0), bm25.query("rollback"), OWN, 5, only_head)) == ["lex-far"]


def test_hybrid_default_fusion_ranks_the_lexical_matches_first(
    store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder
) -> None:
    from episodic.kernel.settings import Settings
    from episodic.retrieval.engine import fusion_from_settings

    _lexical_vs_semantic(store, mk)
    fusion = fusion_from_settings(Settings())
    # the shipped default: dense (with the piece prior), BM25 and the dense candidates re-scored by BM25
    assert fusion.both_weight > 0 and fusion.piece_penalty > 0 and fusion.head == 0
    hits = store.query_hybrid(e(0), bm25.query("rollback"), OWN, 7, fusion)
    got = ids(hits)
    # in a pool this small every memory is a dense candidate: the two BM25 matches lead
    assert set(got[:2]) == {"near-lex", "lex-far"} and set(got) == {
        "near-nolex",
        "near-lex",
        "lex-far",
        *(f"filler-{i}" for i in range(4)),
    }
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # no query term: the sparse-based legs drop out and the dense leg ranks alone
    assert ids(store.query_hybrid(e(0), SparseVec([], []), OWN, 3, fusion)) == ["near-nolex", "near-lex", "filler-0"]


def _runs(store: MemoryStore, mk: MakePoint) -> None:
    """Dense and BM25 ("ferry") both rank `lone` (run r1) first; run r2 holds three weaker matches, run r3 one."""
    store.upsert(
        [
            mk("lone", "the ferry ferry to the island", e(0), run_id="r1"),
            mk("r2-a", "the ferry was late", mix((0, 0.9), (1, math.sqrt(0.19))), run_id="r2"),
            mk("r2-b", "ferry tickets bought at the pier", mix((0, 0.85), (2, math.sqrt(1 - 0.85**2))), run_id="r2"),
            mk("r2-c", "we took the ferry back", mix((0, 0.8), (3, 0.6)), run_id="r2"),
            mk("r3", "a ferry timetable", mix((0, 0.7), (4, math.sqrt(0.51))), run_id="r3"),
        ]
    )


def test_hybrid_run_level_lifts_a_run_of_matches_past_a_lone_one(
    store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder
) -> None:
    _runs(store, mk)
    q = bm25.query("ferry")
    plain = Fusion(k=3, dense_weight=1.0)
    assert ids(store.query_hybrid(e(0), q, OWN, 5, plain))[0] == "lone"
    by_run = replace(plain, run_weight=1.0, run_pool=5)
    hits = store.query_hybrid(e(0), q, OWN, 3, by_run, with_dense=True)
    assert ids(hits)[0] == "r2-a" and len(hits) == 3  # the run of three weaker matches leads; k kept
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].payload["summary"] == "the ferry was late"  # read whole, with the rows asked for
    assert hits[0].dense is not None and len(hits[0].dense) == 1
    # a pool no bigger than k: no re-ranking (nothing to lift from below)
    assert ids(store.query_hybrid(e(0), q, OWN, 5, replace(by_run, run_pool=5)))[0] == "lone"


def _edges(src: str, previous: str | None, nxt: str | None) -> list[dict[str, Any]]:
    at = "2026-01-01T00:00:01Z"
    pairs = (("previous", previous), ("next", nxt))
    return [{"src": src, "dst": d, "relation": r, "weight": 1.0, "created_at": at} for r, d in pairs if d]


def test_hybrid_neighbour_lift_raises_a_short_reply_with_its_question(
    store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder
) -> None:
    """A chat: "q" asks about the ferry, "reply" answers without a word of it; "other" (another run) is only
    nearer in meaning than the reply. The lift puts the reply above "other"; long memories keep the fused order."""
    long = " and then we walked along the harbour wall for a while" * 8  # 90 more words
    for tail, lifted in (("", True), (long, False)):
        store.upsert(
            [
                mk("q", "did you take the ferry?" + tail, e(0), run_id="r1", relations=_edges("q", None, "reply")),
                mk("reply", "yes, last week with Mel" + tail, e(1), run_id="r1", relations=_edges("reply", "q", None)),
                mk("other", "a timetable of the boats" + tail, mix((0, 0.5), (2, math.sqrt(0.75))), run_id="r2"),
                *(mk(f"filler-{i}", f"lunch menu {i}", e(3 + i), run_id="r3") for i in range(3)),
            ]
        )
        q = bm25.query("ferry")
        plain = Fusion(k=3, dense_weight=1.0, run_pool=6)
        before = ids(store.query_hybrid(e(0), q, OWN, 3, plain))
        assert before[:2] == ["q", "other"]
        lifted_hits = store.query_hybrid(e(0), q, OWN, 3, replace(plain, neighbour_weight=1.0, neighbour_words=80))
        assert ids(lifted_hits)[:2] == (["q", "reply"] if lifted else before[:2])  # third: a tie at 0 when long
        assert [h.score for h in lifted_hits] == sorted((h.score for h in lifted_hits), reverse=True)
        assert all(h.payload.get("summary") for h in lifted_hits)  # read whole


def test_hybrid_time_legs_favour_the_memories_of_the_named_time(
    store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder
) -> None:
    store.upsert(
        [
            mk("may", "we painted a sunset together", mix((0, 0.9), (1, math.sqrt(0.19))), ts="2023-05-08T13:56:00Z"),
            mk("july", "we painted a sunset", e(0), ts="2023-07-12T10:00:00Z"),
            mk("other", "lunch menu", e(5), ts="2023-05-09T10:00:00Z"),
        ]
    )
    q = bm25.query("painted sunset")
    plain = Fusion(k=3, dense_weight=1.0)
    assert ids(store.query_hybrid(e(0), q, OWN, 3, plain))[0] == "july"
    in_may = replace(plain, time_weight=1.0, when=(("2023-05-01T00:00:00Z", "2023-06-01T00:00:00Z"),))
    got = ids(store.query_hybrid(e(0), q, OWN, 3, in_may))
    assert got[0] == "may" and set(got) == {"may", "july", "other"}  # favoured, nothing filtered out
    assert ids(store.query_hybrid(e(0), q, OWN, 3, replace(in_may, time_weight=0.0)))[0] == "july"


def test_sparse_only_points_are_in_sparse_and_hybrid_not_dense(
    store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder
) -> None:
    store.upsert([mk("s", "certificate expired on gateway", None), mk("d", "unrelated", e(3))])
    q = bm25.query("certificate expired")
    assert "s" not in ids(store.query_dense(e(0), OWN, 10))
    assert ids(store.query_sparse(q, OWN, 10)) == ["s"]
    assert "s" in ids(store.query_hybrid(e(0), q, OWN, 10, RRF))


def test_missing_dense_then_set_dense_backfills(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [
            mk("s1", "first", None, importance=0.8),
            mk("s2", "second", None, ws="ws-b"),
            mk("d1", "third", e(2)),
        ]
    )
    todo = store.missing_dense(10)
    assert {p for p, _ in todo} == {pid("s1"), pid("s2", "ws-b")}
    assert {pl["summary"] for _, pl in todo} == {"first", "second"}
    assert len(store.missing_dense(1)) == 1
    assert store.missing_dense(0) == []

    store.set_dense(pid("s1"), [e(0), e(1)], {"model": "test-model"})
    assert {p for p, _ in store.missing_dense(10)} == {pid("s2", "ws-b")}
    payload = store.retrieve([pid("s1")])[pid("s1")]
    assert payload["has_dense"] is True
    assert payload["model"] == "test-model"
    assert payload["summary"] == "first"  # merged, not replaced
    assert store.count("ws-a", has_dense=True) == 2
    (hit, *_) = store.query_dense(e(1), OWN, 5)
    assert hit.payload["entry_id"] == "s1"
    assert hit.score == pytest.approx(0.8, abs=1e-4)


def test_missing_dense_is_oldest_first_with_only_the_fields_the_backfill_reads(
    store: MemoryStore, mk: MakePoint
) -> None:
    store.upsert(
        [
            mk(f"m{i}", f"memory {i}", None, indexed_at=f"2026-01-0{9 - i}T00:00:00Z", payload={"big": "x" * 1000})
            for i in range(5)
        ]
    )
    todo = store.missing_dense(3)
    assert [p["entry_id"] for _, p in todo] == ["m4", "m3", "m2"]  # indexed_at ascending
    assert all(set(p) <= set(DENSIFY_FIELDS) for _, p in todo), todo[0][1].keys()
    assert todo[0][1]["summary"] == "memory 4" and todo[0][1]["workspace_id"] == "ws-a"
    assert store.retrieve([pid("m0")], fields=["summary"]) == {pid("m0"): {"summary": "memory 0"}}


def test_quarantined_memories_leave_the_backfill_and_are_counted(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("ok", "fine text", None), mk("bad", "poison text", None), mk("d", "dense", e(1))])
    store.set_payload(pid("bad"), {"densify_failures": 2})
    assert {p for p, _ in store.missing_dense(10, quarantine_after=3)} == {pid("ok"), pid("bad")}
    assert store.count_quarantined("ws-a", 3) == 0
    store.set_payload(pid("bad"), {"densify_failures": 3})
    assert {p for p, _ in store.missing_dense(10, quarantine_after=3)} == {pid("ok")}
    assert store.count_quarantined("ws-a", 3) == store.count_quarantined(None, 3) == 1
    assert store.count_quarantined("ws-b", 3) == 0
    assert {p for p, _ in store.missing_dense(10)} == {pid("ok"), pid("bad")}  # no threshold: all of them
    store.set_dense(pid("bad"), [e(2)], {})  # embedded after all (a raised threshold, a fixed model)
    assert store.count_quarantined("ws-a", 3) == 0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_payload_that_is_not_json_is_rejected_with_a_store_error(
    store: MemoryStore, mk: MakePoint, bad: float
) -> None:
    with pytest.raises(StoreError, match=r"payload\.payload\.x"):
        store.upsert([mk("nan", "text", e(0), payload={"x": bad})])
    store.upsert([mk("fine", "text", e(0))])
    with pytest.raises(StoreError, match="not a finite number"):
        store.set_payload(pid("fine"), {"score": bad})
    assert store.retrieve([pid("nan")]) == {}


# -- limits and garbage -------------------------------------------------------------------------------


def test_limit_is_respected_and_hits_are_sorted(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    store.upsert(
        [
            mk(f"e{i}", f"incident number {i} in cluster", mix((0, 1.0), (1 + i % 7, 0.1 * i)), importance=0.5)
            for i in range(20)
        ]
    )
    for mode, hits in query_all(store, bm25, e(0), "incident cluster", OWN, limit=5).items():
        assert len(hits) == 5, mode
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True), mode
    assert len(store.query_dense(e(0), OWN, 30)) == 20
    assert store.query_dense(e(0), OWN, 0) == []


@pytest.mark.parametrize(
    "bad",
    [
        "upsert-wrong-dim",
        "upsert-ragged-rows",
        "upsert-no-rows",
        "upsert-nan",
        "upsert-zero-row",
        "upsert-sparse-length-mismatch",
        "upsert-sparse-repeated-index",
        "upsert-sparse-negative-index",
        "upsert-no-workspace",
        "upsert-bad-id",
        "query-wrong-dim",
        "query-nan",
        "hybrid-wrong-dim",
        "sparse-length-mismatch",
        "set-dense-wrong-dim",
    ],
)
def test_garbage_raises_store_error_and_store_survives(store: MemoryStore, mk: MakePoint, bad: str) -> None:
    good = mk("good", "a good memory", e(0))
    store.upsert([good])
    broken_sparse = SparseVec([1, 2], [1.0])
    ops = {
        "upsert-wrong-dim": lambda: store.upsert([mk("x", "t", [[1.0] * (DIM - 1)])]),
        "upsert-ragged-rows": lambda: store.upsert([mk("x", "t", [e(0), [1.0, 0.0]])]),
        "upsert-no-rows": lambda: store.upsert([MemoryPoint(pid("x"), good.sparse, dict(good.payload), dense=[])]),
        "upsert-nan": lambda: store.upsert([mk("x", "t", [[math.nan] + [0.0] * (DIM - 1)])]),
        "upsert-zero-row": lambda: store.upsert([mk("x", "t", [[0.0] * DIM])]),
        "upsert-sparse-length-mismatch": lambda: store.upsert(
            [MemoryPoint(pid("x"), broken_sparse, dict(good.payload), dense=[e(0)])]
        ),
        "upsert-sparse-repeated-index": lambda: store.upsert(
            [MemoryPoint(pid("x"), SparseVec([3, 3], [1.0, 2.0]), dict(good.payload))]
        ),
        "upsert-sparse-negative-index": lambda: store.upsert(
            [MemoryPoint(pid("x"), SparseVec([-1], [1.0]), dict(good.payload))]
        ),
        "upsert-no-workspace": lambda: store.upsert(
            [MemoryPoint(pid("x"), good.sparse, {"entry_id": "x"}, dense=[e(0)])]
        ),
        "upsert-bad-id": lambda: store.upsert([MemoryPoint("not-a-uuid", good.sparse, dict(good.payload))]),
        "query-wrong-dim": lambda: store.query_dense([1.0] * (DIM + 1), OWN, 5),
        "query-nan": lambda: store.query_dense([math.nan] * DIM, OWN, 5),
        "hybrid-wrong-dim": lambda: store.query_hybrid([1.0, 0.0], good.sparse, OWN, 5, RRF),
        "sparse-length-mismatch": lambda: store.query_sparse(broken_sparse, OWN, 5),
        "set-dense-wrong-dim": lambda: store.set_dense(pid("good"), [[1.0, 0.0]], {}),
    }
    with pytest.raises(StoreError):
        ops[bad]()
    assert store.count() == 1
    assert ids(store.query_dense(e(0), OWN, 5)) == ["good"]


def test_empty_sparse_vectors_are_not_errors(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    # A text made only of stopwords has no BM25 terms: the memory is still stored and dense-searchable,
    # and a query without terms finds nothing lexically instead of failing the request.
    store.upsert([mk("stop", "the of and", e(0)), mk("real", "queue backlog growing", e(1))])
    assert store.retrieve([pid("stop")])[pid("stop")]["summary"] == "the of and"
    empty = bm25.query("the of")
    assert empty.indices == []
    assert store.query_sparse(empty, OWN, 5) == []
    assert ids(store.query_hybrid(e(0), empty, OWN, 5, RRF))[0] == "stop"
    assert ids(store.query_dense(e(0), OWN, 5))[0] == "stop"


def test_ensure_collection_is_idempotent_and_checks_dim(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("e1", "kept", e(0))])
    store.ensure_collection(DIM)
    assert store.count() == 1
    with pytest.raises(StoreError):
        store.ensure_collection(DIM * 2)


def test_concurrent_upserts_and_queries(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    errors: list[BaseException] = []
    q = bm25.query("thread memory")

    def work(t: int) -> None:
        try:
            for i in range(10):
                store.upsert([mk(f"t{t}-{i}", f"thread memory {t} {i}", e((t + i) % DIM))])
                store.query_hybrid(e(t), q, OWN, 5, RRF)
                store.query_sparse(q, OWN, 5)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    assert errors == []
    assert store.count("ws-a") == 40


# -- persistence --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", PERSISTENT_BACKENDS)
def test_restart_loses_nothing(backend: str, tmp_path: Path, mk: MakePoint, bm25: Bm25Encoder) -> None:
    # On the real disk (tmp_path), not tmpfs.
    s = make_store(backend, tmp_path)
    s.upsert([mk("e1", "persisted memory about dns", [e(0), e(1)], importance=0.7), mk("e2", "sparse one", None)])
    s.set_payload(pid("e1"), {"reference_count": 5})
    s.flush()
    s.close()

    s = make_store(backend, tmp_path)
    try:
        assert s.count() == 2
        assert s.count(has_dense=False) == 1
        assert s.retrieve([pid("e1")])[pid("e1")]["reference_count"] == 5
        (hit, *_) = s.query_dense(e(1), OWN, 5)
        assert hit.payload["entry_id"] == "e1"
        assert hit.score == pytest.approx(0.7, abs=1e-4)
        assert ids(s.query_sparse(bm25.query("dns"), OWN, 5)) == ["e1"]
    finally:
        s.close()


def test_edge_reopens_lazily_and_rejects_a_second_opener(fast_tmp: Path, mk: MakePoint) -> None:
    from episodic.kernel.errors import StoreUnavailable
    from episodic.store.edge import EdgeStore

    s = make_store("edge", fast_tmp)
    s.upsert([mk("e1", "x", e(0))])
    with pytest.raises(StoreUnavailable):
        EdgeStore(fast_tmp / "edge").count()  # single-process: the shard's WAL is locked
    s.close()
    with pytest.raises(StoreUnavailable):
        s.count()  # closed
    lazy = EdgeStore(fast_tmp / "edge")  # no ensure_collection: loads what is on disk
    try:
        assert lazy.count() == 1
        assert lazy.payload_indexes() >= {"workspace_id", "importance_score", "ts", "has_dense", "aliases"}
        with pytest.raises(StoreError):
            lazy.ensure_collection(DIM + 1)
    finally:
        lazy.close()
    with pytest.raises(StoreUnavailable):
        EdgeStore(fast_tmp / "nothing-here").count()
