"""`MemoryStore.explain_legs` (every backend): the legs the hybrid fuses, each run alone, so that the explorer's
"why" (episodic.retrieval.explain) reproduces the fused ranking: with distinct scores in every leg, Qdrant's
weighted RRF over the legs' ranks × importance is the hybrid's own score; the scope holds in every leg; and
the lexical confidence's scaled weights are the ones reported."""

from __future__ import annotations

import pytest

from episodic.kernel.ports import Fusion, MemoryStore, ScopeFilter
from episodic.store.sparse import Bm25Encoder
from tests.contract.conftest import MakePoint, e, mix

OWN = ScopeFilter(workspace_id="ws-a", scope="own", agent_id="agent-1")
FUSION = Fusion(k=3, dense_weight=2.0, sparse_weight=1.0, both_weight=0.5, prefetch_limit=50)


def seed(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [
            mk("a", "checkout ran out of memory in the night", mix((0, 1.0), (1, 0.2)), importance=0.9),
            mk("b", "checkout latency rose after the deploy", mix((0, 1.0), (1, 0.6)), importance=0.6),
            mk("c", "the memory limit was raised twice during the last week", mix((0, 0.4), (2, 1.0)), importance=0.7),
            mk("d", "cache warmed before the sale", e(3), importance=0.5),
            mk("theirs", "checkout ran out of memory again", e(0), agent="agent-2", importance=1.0),
        ]
    )


def rrf(rank: int, weight: float, k: int) -> float:
    return 1.0 / (rank / weight + k - 1)


def test_the_legs_rebuild_the_hybrids_scores(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    seed(store, mk)
    query = bm25.query("checkout out of memory")
    hits = store.query_hybrid(e(0), query, OWN, 4, FUSION)
    legs = store.explain_legs(e(0), query, OWN, 4, FUSION)
    assert [leg.name for leg in legs] == ["dense", "bm25", "bm25-of-dense"]
    assert [leg.weight for leg in legs] == [2.0, 1.0, 0.5]
    for leg in legs:
        assert "theirs" not in {eid for eid, _ in leg.ranked}  # the request's scope in every leg
        scores = [s for _, s in leg.ranked]
        assert scores == sorted(scores, reverse=True)
    for hit in hits:
        eid = hit.payload["entry_id"]
        fused = sum(rrf(n, leg.weight, FUSION.k) for leg in legs for n, (x, _) in enumerate(leg.ranked, 1) if x == eid)
        assert hit.score == pytest.approx(fused * hit.payload["importance_score"], rel=1e-4), eid


def test_without_a_vector_the_one_leg_is_bm25(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    seed(store, mk)
    legs = store.explain_legs(None, bm25.query("memory"), OWN, 4, FUSION)
    assert [leg.name for leg in legs] == ["bm25"] and {x for x, _ in legs[0].ranked} == {"a", "c"}
    assert store.explain_legs(None, bm25.query("the of"), OWN, 4, FUSION) == []  # no searchable term


def test_the_lexical_confidence_scales_the_weights_it_reports(
    store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder
) -> None:
    seed(store, mk)
    weak = Fusion(k=3, dense_weight=2.0, sparse_weight=1.0, prefetch_limit=50, lexical_full=50.0, lexical_floor=0.25)
    legs = store.explain_legs(e(0), bm25.query("checkout"), OWN, 4, weak)
    assert legs[0].weight == 2.0 and 0.25 <= legs[1].weight < 1.0
