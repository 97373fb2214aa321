"""Run-level (session-level) evidence at recall time: re-rank the fused top N by turn + run score.

A hit's run is its session (LongMemEval) or its agent run (the product). The fused list's top ``n``
candidates (what one engine query returns with their ``run_id``) are grouped by run; each run gets a score
from its candidates, and every candidate is re-scored ``turn + lam * run`` (both scaled to [0, 1] by the
list's best), or fused by rank (``combine="rrf"``: the turn's rank and its run's rank, RRF k=3, the run
leg weighted ``lam``). Sources of the run score:

- ``"fused"``: the candidates' fused scores, aggregated per run by ``agg``: ``max``, ``top2``/``top3``
  (sum of the run's best 2/3), ``sum`` or ``count``; ``own=False`` leaves the candidate itself out (only
  its siblings lift it);
- a row name (``"D"``, ``"S"``, ``"SR"``...): that row's scores of the run's candidates, aggregated the
  same way (``"SR"``, BM25 over the whole run as one document, is a reference: the store holds no
  run-level document, so it would need one more point per run rewritten on every entry).

Everything but ``SR`` is cheap at recall: one engine query for the fused top N with ``run_id`` in the
payload, then a few hundred float operations in Python.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from eval.methods import DEPTH, Method, Ranked
from eval.views import Q


def _agg(values: list[float], agg: str) -> float:
    if not values:
        return 0.0
    if agg == "max":
        return max(values)
    if agg == "sum":
        return float(sum(values))
    if agg == "count":
        return float(len(values))
    if agg.startswith("top"):
        return float(sum(sorted(values, reverse=True)[: int(agg[3:])]))
    raise ValueError(f"unknown aggregate {agg!r}")


def run_scores(q: Q, idx: np.ndarray, sc: np.ndarray, source: str, agg: str, own: bool) -> np.ndarray:
    """Each candidate's run score, from the candidates of its run (itself included unless own=False)."""
    vals = sc if source == "fused" else q.rows[source][idx]
    runs = q.mem.run[idx]
    members: dict[int, list[int]] = defaultdict(list)
    for pos, r in enumerate(runs.tolist()):
        members[r].append(pos)
    out = np.zeros(len(idx))
    for pos, r in enumerate(runs.tolist()):
        out[pos] = _agg([float(vals[p]) for p in members[r] if own or p != pos], agg)
    return out


def _unit(x: np.ndarray) -> np.ndarray:
    top = float(np.max(x)) if len(x) else 0.0
    return x / top if top > 0 else np.zeros_like(x)


def run_level(
    inner: Method,
    lam: float,
    source: str = "fused",
    agg: str = "max",
    own: bool = True,
    combine: str = "score",
) -> Method:
    """`inner` must return its top N (a method built with depth=N); the result is cut to DEPTH."""

    def run(q: Q) -> Ranked:
        idx, sc = inner(q)
        if not len(idx):
            return idx, sc
        rs = run_scores(q, idx, sc, source, agg, own)
        if combine == "score":
            final = _unit(sc) + lam * _unit(rs)
        else:  # rrf over the turn's own rank and its run's rank
            runs = q.mem.run[idx]
            best: dict[int, float] = {}
            for r, v in zip(runs.tolist(), rs.tolist(), strict=True):
                best[r] = max(best.get(r, -np.inf), v)
            order = sorted(best, key=lambda r: -best[r])
            run_pos = {r: p for p, r in enumerate(order)}
            pos = np.arange(len(idx), dtype=np.float64)
            final = 1.0 / (pos + 3.0) + np.array([1.0 / ((run_pos[r] + 1.0) / lam + 2.0) for r in runs.tolist()])
        o = np.lexsort((np.arange(len(idx)), -final))[:DEPTH]
        return idx[o], final[o]

    return run
