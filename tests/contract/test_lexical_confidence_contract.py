"""Lexical confidence in the hybrid (every backend): with `Fusion.lexical_full` > 0 the BM25-based legs keep
only the share of their weight that BM25's best match over the request's scope earns
(`store_query.lexical_factor`). A query whose words match only common ones lets the dense leg rank; a query
with a distinctive match keeps BM25's full say; off (0), nothing changes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from episodic.kernel.ports import Fusion, MemoryStore, ScopeFilter, StoredHit
from episodic.store.sparse import Bm25Encoder
from tests.contract.conftest import MakePoint, e
from tests.contract.conftest import as_qdrant as q

OWN = ScopeFilter(workspace_id="ws-a", scope="own", agent_id="agent-1")
# BM25's first place (weight 1.5) outranks the dense leg's first place (weight 1) at full weight:
# 1 / (1/1.5 + 2) = 0.375 > 1 / (1 + 2) = 0.333; at a quarter of it, 0.214 < 0.333.
OFF = Fusion(k=3, dense_weight=1.0, sparse_weight=1.5)
ON = Fusion(k=3, dense_weight=1.0, sparse_weight=1.5, lexical_full=4.0, lexical_floor=0.25)


def ids(hits: list[StoredHit]) -> list[str]:
    return [h.payload["entry_id"] for h in hits]


def seed(store: MemoryStore, mk: MakePoint) -> None:
    """Twelve memories with "tips" in them (lexical only: no vector), one that means what the query means but
    shares none of its words (dense only), and one with three rare words (lexical only)."""
    common = [mk(f"tips-{i}", f"some tips about topic number {i}", None) for i in range(12)]
    store.upsert(
        [
            *common,
            mk("meaning", "winding down before sleep", e(0)),
            mk("rare", "kafka consumer lag on the orders topic", None),
        ]
    )


def test_a_query_that_matches_only_common_words_lets_the_dense_leg_rank(
    store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder
) -> None:
    seed(store, mk)
    weak = bm25.query("any tips for the evening?")  # "tip" is in 12 of 14 memories: a weak match
    assert ids(store.query_hybrid(e(0), weak, OWN, 3, OFF))[0].startswith("tips-")
    assert ids(store.query_hybrid(e(0), weak, OWN, 3, ON))[0] == "meaning"


def test_a_distinctive_match_keeps_bm25s_full_weight(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    seed(store, mk)
    strong = bm25.query("kafka consumer lag")  # three words only one memory holds
    assert ids(store.query_hybrid(e(0), strong, OWN, 3, OFF))[0] == "rare"
    assert ids(store.query_hybrid(e(0), strong, OWN, 3, ON))[0] == "rare"


def test_only_the_requests_scope_counts_as_a_match(store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder) -> None:
    # Another agent's memory matches the query's rare words strongly; this agent's only weakly. The strength
    # is BM25's best over what the request may see, so this agent's recall lets its dense leg rank.
    seed(store, mk)
    store.upsert([mk("theirs", "evening tips wind down routine", None, agent="agent-2")])
    weak = bm25.query("evening tips routine")
    assert ids(store.query_hybrid(e(0), weak, OWN, 3, OFF))[0].startswith("tips-")
    assert ids(store.query_hybrid(e(0), weak, OWN, 3, ON))[0] == "meaning"
    theirs = ScopeFilter(workspace_id="ws-a", scope="own", agent_id="agent-2")
    assert ids(store.query_hybrid(e(0), weak, theirs, 3, ON)) == ["theirs"]


def test_the_workspace_is_counted_once_per_ttl(
    store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import episodic.store.facade as store_module

    seed(store, mk)
    engine = q(store).engine
    counts: list[object] = []
    real = engine.count
    monkeypatch.setattr(engine, "count", lambda flt: counts.append(flt) or real(flt))
    clock = [1000.0]
    monkeypatch.setattr(store_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))  # this module's clock
    weak = bm25.query("any tips?")
    for _ in range(3):
        assert ids(store.query_hybrid(e(0), weak, OWN, 3, ON))[0] == "meaning"
    assert len(counts) == 1  # ln N barely moves: one count serves the next SIZE_TTL_S seconds
    clock[0] += store_module.SIZE_TTL_S
    store.query_hybrid(e(0), weak, OWN, 3, ON)
    assert len(counts) == 2
    store.query_hybrid(e(0), weak, OWN, 3, OFF)  # off: no probe, no count
    assert len(counts) == 2
