"""Hybrid fusions as Qdrant's engine computes them, in numpy, for one query at a time.

Each leg is a prefetch: its top ``limit`` candidates by score. Fusion runs over the union of the legs'
candidates; a candidate missing from a leg gets nothing from it.

- ``rrf``: Qdrant's weighted RRF (lib/segment/src/common/reciprocal_rank_fusion.rs): each leg adds
  ``1 / ((pos + 1) / w + k - 1)``, pos zero-based (weight 0: nothing).
  With w = 1 this is ``1 / (pos + k)``, so Qdrant's k=60 is the seed's "RRF k=60" (one-based rank + 59).
- ``dbsf``: Qdrant's distribution-based score fusion: each leg's scores mapped with its own
  mean ± 3 sample standard deviations to [0, 1] (not clamped), then summed.
- ``formula``: a Formula query over the prefetch scores, ``wd * dense + ws * bm25 / (bm25 + c)``
  (missing scores default to 0): a fixed saturation of BM25 instead of per-query normalisation.
"""

from __future__ import annotations

import numpy as np


def top(scores: np.ndarray, limit: int) -> np.ndarray:
    """Indices of the `limit` best scores, best first; ties by index (stable), as a leg returns them."""
    limit = min(limit, scores.shape[0])
    part = np.argpartition(-scores, limit - 1)[:limit] if limit < scores.shape[0] else np.arange(scores.shape[0])
    order = np.lexsort((part, -scores[part]))
    return part[order]


def rrf(legs: list[np.ndarray], k: float, weights: list[float] | None = None) -> dict[int, float]:
    weights = weights or [1.0] * len(legs)
    out: dict[int, float] = {}
    for idx, w in zip(legs, weights, strict=True):
        if w <= 0:
            for i in idx:
                out.setdefault(int(i), 0.0)
            continue
        pos = np.arange(len(idx), dtype=np.float64)
        contrib = 1.0 / ((pos + 1.0) / w + k - 1.0)
        for i, c in zip(idx, contrib, strict=True):
            out[int(i)] = out.get(int(i), 0.0) + float(c)
    return out


def _distr_norm(s: np.ndarray) -> np.ndarray:
    if len(s) < 2:
        return np.full(len(s), 0.5)
    mean, std = s.mean(), s.std(ddof=1)
    if std == 0:
        return np.full(len(s), 0.5)
    return (s - (mean - 3 * std)) / (6 * std)


def dbsf(legs: list[tuple[np.ndarray, np.ndarray]], weights: list[float] | None = None) -> dict[int, float]:
    """legs: (indices, their scores) per leg. Weights are an extension (Qdrant's DBSF has none)."""
    weights = weights or [1.0] * len(legs)
    out: dict[int, float] = {}
    for (idx, s), w in zip(legs, weights, strict=True):
        for i, v in zip(idx, _distr_norm(np.asarray(s, dtype=np.float64)) * w, strict=True):
            out[int(i)] = out.get(int(i), 0.0) + float(v)
    return out


def formula(
    dense: tuple[np.ndarray, np.ndarray], bm25: tuple[np.ndarray, np.ndarray], wd: float, ws: float, c: float
) -> dict[int, float]:
    """wd * cos + ws * bm25 / (bm25 + c) over the union of both prefetches; missing scores are 0."""
    d = {int(i): float(s) for i, s in zip(*dense, strict=True)}
    b = {int(i): float(s) for i, s in zip(*bm25, strict=True)}
    out = {}
    for i in d.keys() | b.keys():
        bs = b.get(i, 0.0)
        out[i] = wd * d.get(i, 0.0) + ws * (bs / (bs + c) if bs > 0 else 0.0)
    return out


def ranked(fused: dict[int, float], k: int) -> list[int]:
    """Top k of a fusion result, best first (ties by index)."""
    return [i for i, _ in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]
