"""Why a recall ranked its hits as it did: each leg's rank and raw score, the fusion, the importance
multiplier, and where a hit came from (direct, walk, adjacency, folded duplicates). For the memory
explorer (recall/ui); the recall API does not pay for it.

`explain(engine, req, result)` runs the request's legs once more, each alone (`MemoryStore.explain_legs`:
one engine batch with the same scope, filters, prefetch, fusion weights and lexical confidence the hybrid
query used), and reports every hit's place in each. A leg's contribution to weighted RRF is Qdrant's
`1 / (rank / weight + k - 1)` (rank one-based; `weight / (k + rank)` near enough for small weights; see
eval/fusion.py); the fused score is their sum, and the hit's score is that × importance (dense and sparse
modes: the leg's score × importance), unless a re-rank of the fused pool raised it: the neighbour lift (a
short memory gains `neighbour_weight` × its short run neighbour's fused score) or run-level evidence
(`episodic.domain.runs`), both in the fused unit. A hit beyond a leg's prefetch is "not in this leg's top N".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from episodic.kernel.errors import EpisodicError, StoreError
from episodic.kernel.ports import Fusion, LegRanking
from episodic.retrieval.engine import QueryModel, RecallEngine, RecallResult
from episodic_client.models import RecallRequest


@dataclass(slots=True)
class LegPlace:
    leg: str
    weight: float
    rank: int | None  # 1-based; None: not among the leg's candidates
    score: float | None  # the raw leg score (cosine, BM25)
    rrf: float | None  # 1 / (rank / weight + k - 1) under RRF; None otherwise


@dataclass(slots=True)
class HitWhy:
    entry_id: str
    via: str
    importance: float | None
    cosine: float | None
    legs: list[LegPlace] = field(default_factory=list)
    fused: float | None = None  # the sum of the RRF contributions (hybrid with RRF only)


@dataclass(slots=True)
class Explanation:
    mode: str
    fusion: dict[str, Any]
    candidates: int  # candidates per leg
    hits: dict[str, HitWhy]
    legs: list[str]


def fusion_view(fusion: Fusion) -> dict[str, Any]:
    return {"method": fusion.method, "k": fusion.k, "lexical_full": fusion.lexical_full,
            "piece_penalty": fusion.piece_penalty, "neighbour_weight": fusion.neighbour_weight,
            "neighbour_words": fusion.neighbour_words, "run_weight": fusion.run_weight}  # fmt: skip


def leg_rankings(engine: RecallEngine, req: RecallRequest, model: QueryModel) -> list[LegRanking]:
    """The legs of `req` run alone with the query model `recall` uses (`RecallEngine.query_for`). It needs
    nothing of the recall's answer, so a caller may run it beside the recall (Qdrant Edge releases the GIL
    while it queries: two threads take 0.55x the time of one after the other). Raises StoreError."""
    _, using, fusion, qvec = model
    scope = engine.scope_filter(req)
    sparse = engine.bm25.query(req.query)
    try:
        if req.mode == "dense" and qvec is not None:
            found = engine.store.explain_legs(qvec.tolist(), sparse, scope, req.k, fusion, using=using)
            return [r for r in found if r.name == "dense"]
        vector = qvec.tolist() if (req.mode == "hybrid" and qvec is not None) else None
        return engine.store.explain_legs(vector, sparse, scope, req.k, fusion, using=using)
    except EpisodicError:
        raise
    except Exception as e:  # adapters should wrap; never let a raw driver error become a 500
        raise StoreError(f"store explain failed: {type(e).__name__}: {e}") from e


def explain(
    engine: RecallEngine,
    req: RecallRequest,
    result: RecallResult,
    model: QueryModel | None = None,
    rankings: list[LegRanking] | None = None,
) -> Explanation:
    """Each hit's place in each leg of `req` (see the module doc), with the query model `recall` used
    (made again when not given) and the legs' rankings (`leg_rankings`; run here when not given). Raises
    StoreError on store failure."""
    model = model if model is not None else engine.query_for(req)
    fusion = model[2]
    if rankings is None:
        rankings = leg_rankings(engine, req, model)
    prefetch = max(req.k, fusion.prefetch_limit)
    rrf = req.mode == "hybrid" and fusion.method == "rrf" and len(rankings) > 1
    whys: dict[str, HitWhy] = {}
    for hit in result.hits:
        why = HitWhy(hit.entry_id, hit.via, hit.importance, hit.cosine)
        for r in rankings:
            why.legs.append(_place(r, hit.entry_id, fusion.k if rrf else None))
        if rrf:
            why.fused = sum(p.rrf or 0.0 for p in why.legs)
        whys[hit.entry_id] = why
    return Explanation(req.mode, fusion_view(fusion), prefetch, whys, [r.name for r in rankings])


def _place(ranking: LegRanking, entry_id: str, k: int | None) -> LegPlace:
    for n, (eid, score) in enumerate(ranking.ranked, 1):
        if eid == entry_id:
            rrf = (1.0 / (n / ranking.weight + k - 1) if ranking.weight > 0 else 0.0) if k is not None else None
            return LegPlace(ranking.name, ranking.weight, n, score, rrf)
    return LegPlace(ranking.name, ranking.weight, None, None, None)
