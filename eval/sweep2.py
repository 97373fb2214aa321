"""Nested-prefetch hybrids (dense re-rank of BM25 candidates, 3-leg RRF, DBSF) on the robust() views.

    python -m eval.sweep2 [--quick]

Every method is expressible as a Qdrant query tree (see ``describe`` strings). Legs:

- ``D(n)``: dense (multivector max-sim) top n.
- ``S(n)``: sparse (BM25) top n, matched only.
- ``R(N)``: nested prefetch: query = dense vector, prefetch = S(N), limit N -> the BM25 top-N
  re-ordered by dense max-sim (dense scores).
- ``B(M)``: nested prefetch: query = sparse vector, prefetch = D(M) -> the dense top-M re-ordered by BM25
  (zero-BM25 candidates dropped; bm25 scores).

Fusions: Qdrant's weighted RRF ``1/((pos+1)/w + k - 1)`` and DBSF (mean ± 3σ per leg, summed; a weight
w is that prefetch repeated w times). Output: eval/results/sweep-rerank.txt.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from eval import fusion as F
from eval.data import load
from eval.embcache import RESULTS
from eval.metrics import Score, score
from eval.sweep import ASST, RECOMMENDED_BM25, Prepared, legs

MAXN = 200


@dataclass
class Q:
    d: np.ndarray
    s: np.ndarray
    td: np.ndarray  # dense top MAXN
    ts: np.ndarray  # sparse top MAXN, matched only
    p: Prepared
    ev: frozenset[str]
    _rr: dict

    def D(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        i = self.td[:n]
        return i, self.d[i]

    def S(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        i = self.ts[:n]
        return i, self.s[i]

    def R(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if ("R", n) not in self._rr:
            c = self.ts[:n]
            o = c[np.lexsort((c, -self.d[c]))]
            self._rr[("R", n)] = (o, self.d[o])
        return self._rr[("R", n)]

    def B(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        if ("B", m) not in self._rr:
            c = self.td[:m]
            c = c[self.s[c] > 0]
            o = c[np.lexsort((c, -self.s[c]))]
            self._rr[("B", m)] = (o, self.s[o])
        return self._rr[("B", m)]

    def Z(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        """B(m) if the engine keeps zero-BM25 candidates: matched first by BM25, then the rest, by index."""
        if ("Z", m) not in self._rr:
            c = self.td[:m]
            o = c[np.lexsort((c, -self.s[c]))]
            self._rr[("Z", m)] = (o, self.s[o])
        return self._rr[("Z", m)]

    def T(self, spec: tuple[int, float]) -> tuple[np.ndarray, np.ndarray]:
        """Sparse top-n with score_threshold thr (a prefetch's score_threshold): BM25 grows with ln(corpus
        size) through the IDF, so this leg fires more in large pools."""
        n, thr = spec
        i = self.ts[:n]
        i = i[self.s[i] >= thr]
        return i, self.s[i]


Leg = tuple[str, int]  # ("D"|"S"|"R"|"B"|"Z", limit) or ("F", (limit, method-with-limit))
Method = Callable[[Q], list[int]]


def _get(q: Q, leg) -> tuple[np.ndarray, np.ndarray]:
    if leg[0] == "F":  # a nested fusion used as a prefetch: its ranked output, positions as scores
        key = ("F", id(leg[1]))
        if key not in q._rr:
            idx = np.asarray(leg[1](q), dtype=np.int64)
            q._rr[key] = (idx, -np.arange(len(idx), dtype=np.float64))
        return q._rr[key]
    return getattr(q, leg[0])(leg[1])


def _rank(fused: np.ndarray, cand: np.ndarray, limit: int = 10) -> list[int]:
    cand = np.unique(cand)
    v = fused[cand]
    o = np.lexsort((cand, -v))
    return [int(i) for i in cand[o][:limit]]


def rrf(legs_: list[Leg], k: float, w: list[float], limit: int = 10) -> Method:
    def run(q: Q) -> list[int]:
        acc = np.zeros(q.d.shape[0])
        cand = []
        for leg, wt in zip(legs_, w, strict=True):
            idx, _ = _get(q, leg)
            if len(idx) == 0:
                continue
            cand.append(idx)
            if wt > 0:
                pos = np.arange(len(idx), dtype=np.float64)
                acc[idx] += 1.0 / ((pos + 1.0) / wt + k - 1.0)
        if not cand:
            return []
        return _rank(acc, np.concatenate(cand), limit)

    return run


def dbsf(legs_: list[Leg], w: list[float], limit: int = 10) -> Method:
    def run(q: Q) -> list[int]:
        acc = np.zeros(q.d.shape[0])
        cand = []
        for leg, wt in zip(legs_, w, strict=True):
            idx, sc = _get(q, leg)
            if len(idx) == 0:
                continue
            cand.append(idx)
            acc[idx] += wt * F._distr_norm(np.asarray(sc, dtype=np.float64))
        if not cand:
            return []
        return _rank(acc, np.concatenate(cand), limit)

    return run


def single(leg: Leg) -> Method:
    def run(q: Q) -> list[int]:
        return [int(i) for i in _get(q, leg)[0][:10]]

    return run


def build_views() -> dict[str, list[Q]]:
    spec = RECOMMENDED_BM25
    oracle = legs(load("oracle"), bm25=spec, pool="max")
    o150 = legs(load("oracle", limit=150), bm25=spec, pool="max")
    s = legs(load("s"), bm25=spec, pool="max")
    print(f"s haystacks skipped (no cached embeddings): {s.skipped}", flush=True)

    def qs(lg, qtype=None) -> list[Q]:
        out = []
        for p, dm, sm in lg.items:
            for qi in range(len(p.queries)):
                if qtype and p.types[qi] != qtype:
                    continue
                d, sv = dm[qi], sm[qi]
                ts = F.top(sv, MAXN)
                out.append(Q(d, sv, F.top(d, MAXN), ts[sv[ts] > 0], p, p.evidence[qi], {}))
        return out

    views = {"oracle": qs(oracle), "asst": None, "o150": qs(o150), "s": qs(s)}
    # asst: the oracle's single-session-assistant questions (same Q objects, so caches are shared)
    p = oracle.items[0][0]
    views["asst"] = [q for q, t in zip(views["oracle"], p.types, strict=True) if t == ASST]
    return views


def evaluate(views: dict[str, list[Q]], m: Method) -> dict[str, Score]:
    return {v: score(([q.p.aliases[i] for i in m(q)], q.ev) for q in qs) for v, qs in views.items()}


def methods(quick: bool = False) -> dict[str, tuple[Method, str]]:
    """name -> (method, engine structure)."""
    ms: dict[str, tuple[Method, str]] = {
        "dense": (single(("D", 10)), "dense"),
        "sparse": (single(("S", 10)), "sparse"),
        "rrf60 (seed)": (rrf([("D", 100), ("S", 100)], 60, [1, 1]), "RRF k=60 [D100, S100]"),
        "rrf k=2 w=0.5/1 (default)": (rrf([("D", 100), ("S", 100)], 2, [0.5, 1]), "RRF k=2 [D100 w.5, S100 w1]"),
    }
    Ns = (30, 50, 100, 200)
    ks = (1, 2, 3, 5)
    for n in Ns:
        ms[f"R{n} alone"] = (single(("R", n)), f"dense query over prefetch S{n}")
    # 1. two legs: dense re-rank of sparse top-N + sparse top-100
    for n in Ns:
        for k in ks:
            for wa in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0):
                ms[f"rrf k={k} [R{n} {wa}, S100 1]"] = (
                    rrf([("R", n), ("S", 100)], k, [wa, 1.0]),
                    f"RRF k={k} [R{n} (dense over S{n}) w{wa}, S100 w1]",
                )
    # 2. three legs: dense top-100, R(N), sparse top-100
    for n in (30, 50, 100, 200):
        for k in ks:
            for wd in (0.1, 0.25, 0.5):
                for wa in (0.25, 0.5, 1.0, 1.5):
                    ms[f"rrf k={k} [D100 {wd}, R{n} {wa}, S100 1]"] = (
                        rrf([("D", 100), ("R", n), ("S", 100)], k, [wd, wa, 1.0]),
                        f"RRF k={k} [D100 w{wd}, R{n} w{wa}, S100 w1]",
                    )
    # 3. DBSF (integer weights = repeated prefetches)
    for n in Ns:
        for wa, ws in ((1, 1), (1, 2), (2, 1), (1, 3)):
            ms[f"dbsf [R{n}x{wa}, S100x{ws}]"] = (
                dbsf([("R", n), ("S", 100)], [wa, ws]),
                f"DBSF [R{n}]*{wa} + [S100]*{ws}",
            )
        for wd, wa, ws in ((1, 1, 1), (1, 1, 2), (1, 2, 2), (1, 2, 3), (1, 1, 3)):
            ms[f"dbsf [D100x{wd}, R{n}x{wa}, S100x{ws}]"] = (
                dbsf([("D", 100), ("R", n), ("S", 100)], [wd, wa, ws]),
                f"DBSF [D100]*{wd} + [R{n}]*{wa} + [S100]*{ws}",
            )
    # 4a. BM25 re-rank of dense top-M (lexical order among semantic neighbours) as extra leg
    for m in (50, 100, 200):
        for k in (1, 2, 3):
            for wb in (0.5, 1.0):
                ms[f"rrf k={k} [D100 0.5, B{m} {wb}, S100 1]"] = (
                    rrf([("D", 100), ("B", m), ("S", 100)], k, [0.5, wb, 1.0]),
                    f"RRF k={k} [D100 w.5, B{m} (sparse over D{m}) w{wb}, S100 w1]",
                )
            ms[f"rrf k={k} [R100 1, B{m} 1, S100 1]"] = (
                rrf([("R", 100), ("B", m), ("S", 100)], k, [1.0, 1.0, 1.0]),
                f"RRF k={k} [R100 w1, B{m} w1, S100 w1]",
            )
    # 4b. rank-dependent sparse weight: a short sparse prefetch on top of the long one
    for top in (3, 5, 10):
        for k in (1, 2, 3):
            for wd in (0.5, 1.0):
                ms[f"rrf k={k} [D100 {wd}, S100 1, S{top} 1]"] = (
                    rrf([("D", 100), ("S", 100), ("S", top)], k, [wd, 1.0, 1.0]),
                    f"RRF k={k} [D100 w{wd}, S100 w1, S{top} w1]",
                )
                ms[f"rrf k={k} [R100 {wd}, S100 1, S{top} 1]"] = (
                    rrf([("R", 100), ("S", 100), ("S", top)], k, [wd, 1.0, 1.0]),
                    f"RRF k={k} [R100 w{wd}, S100 w1, S{top} w1]",
                )
    if quick:
        keep = list(ms)[:4] + [n for n in ms if "R50" in n or "R100" in n][:40]
        ms = {n: ms[n] for n in keep}
    return ms


def methods2() -> dict[str, tuple[Method, str]]:
    """Round 2: combine the tricks that helped each view (short sparse prefetch for oracle R@5, the B leg
    for asst/oracle, dense weight for s)."""
    ms = {n: v for n, v in methods().items() if n in ("dense", "sparse", "rrf60 (seed)", "rrf k=2 w=0.5/1 (default)")}
    for k in (1, 2, 3):
        for wd in (0.5, 0.75, 1.0):
            for top in (3, 4, 5, 7):
                for wt in (0.5, 1.0):
                    ms[f"rrf k={k} [D100 {wd}, S100 1, S{top} {wt}]"] = (
                        rrf([("D", 100), ("S", 100), ("S", top)], k, [wd, 1.0, wt]),
                        f"RRF k={k} [D100 w{wd}, S100 w1, S{top} w{wt}]",
                    )
                    for m in (50, 100):
                        for wb in (0.25, 0.5):
                            ms[f"rrf k={k} [D100 {wd}, B{m} {wb}, S100 1, S{top} {wt}]"] = (
                                rrf([("D", 100), ("B", m), ("S", 100), ("S", top)], k, [wd, wb, 1.0, wt]),
                                f"RRF k={k} [D100 w{wd}, B{m} (sparse over D{m}) w{wb}, S100 w1, S{top} w{wt}]",
                            )
    return ms


def methods3() -> dict[str, tuple[Method, str]]:
    """Round 3: a finer grid around the best 4-leg tree [D100, B<M>, S100, S<top>]."""
    ms = {n: v for n, v in methods().items() if n in ("dense", "sparse", "rrf60 (seed)", "rrf k=2 w=0.5/1 (default)")}
    for k in (2, 3, 4, 5):
        for wd in (0.75, 1.0, 1.25):
            for m in (50, 100, 200):
                for wb in (0.5, 0.75, 1.0):
                    for top in (5, 6, 8, 10):
                        for wt in (0.5, 0.75, 1.0):
                            ms[f"rrf k={k} [D100 {wd}, B{m} {wb}, S100 1, S{top} {wt}]"] = (
                                rrf([("D", 100), ("B", m), ("S", 100), ("S", top)], k, [wd, wb, 1.0, wt]),
                                f"RRF k={k} [D100 w{wd}, B{m} (sparse over D{m}) w{wb}, S100 w1, S{top} w{wt}]",
                            )
    return ms


def methods4() -> dict[str, tuple[Method, str]]:
    """Round 4: stability of the chosen tree around k=3, D100 w1, B100 w.5, S5 w.5 (prefetch limits too)."""
    ms = {n: v for n, v in methods().items() if n in ("dense", "sparse", "rrf60 (seed)", "rrf k=2 w=0.5/1 (default)")}
    for k in (2, 3, 4):
        for ld in (50, 100, 200):
            for m in (75, 100, 150):
                for ls in (50, 100, 200):
                    for top in (4, 5, 6):
                        for wt in (0.5, 0.625, 0.75):
                            ms[f"rrf k={k} [D{ld} 1.0, B{m} 0.5, S{ls} 1, S{top} {wt}]"] = (
                                rrf([("D", ld), ("B", m), ("S", ls), ("S", top)], k, [1.0, 0.5, 1.0, wt]),
                                f"RRF k={k} [D{ld} w1, B{m} w.5, S{ls} w1, S{top} w{wt}]",
                            )
    return ms


BEST4 = ([("D", 100), ("B", 100), ("S", 100), ("S", 5)], 3, [1.0, 0.5, 1.0, 0.625])


def methods5() -> dict[str, tuple[Method, str]]:
    """Round 5: (a) the B leg if the engine keeps zero-BM25 candidates when re-scoring (Z leg);
    (b) outer RRF over nested fusions (a fusion as a prefetch)."""
    ms = {n: v for n, v in methods().items() if n in ("dense", "sparse", "rrf60 (seed)", "rrf k=2 w=0.5/1 (default)")}
    legs4, k4, w4 = BEST4
    ms["BEST4 rrf k=3 [D100 1, B100 .5, S100 1, S5 .625]"] = (rrf(legs4, k4, w4), "")
    for k in (2, 3, 4):
        for wb in (0.25, 0.5, 0.75):
            for wt in (0.5, 0.625, 0.75):
                for m in (50, 100):
                    ms[f"rrf k={k} [D100 1.0, Z{m} {wb}, S100 1, S5 {wt}]"] = (
                        rrf([("D", 100), ("Z", m), ("S", 100), ("S", 5)], k, [1.0, wb, 1.0, wt]),
                        "",
                    )
    inner = {
        "H4": rrf(legs4, k4, w4, limit=100),
        "Hdef": rrf([("D", 100), ("S", 100)], 2, [0.5, 1.0], limit=100),
        "DB[R100,S100x2]": dbsf([("R", 100), ("S", 100)], [1, 2], limit=100),
        "DB[R200,S100x2]": dbsf([("R", 200), ("S", 100)], [1, 2], limit=100),
        "DB[R50,S100]": dbsf([("R", 50), ("S", 100)], [1, 1], limit=100),
        "DB[D100,S100x3]": dbsf([("D", 100), ("S", 100)], [1, 3], limit=100),
    }
    for a in ("H4", "Hdef"):
        for b in ("DB[R100,S100x2]", "DB[R200,S100x2]", "DB[R50,S100]", "DB[D100,S100x3]"):
            for k in (1, 2, 3, 5, 10):
                for wb in (0.5, 1.0):
                    ms[f"rrf k={k} [{a} 1, {b} {wb}]"] = (rrf([("F", inner[a]), ("F", inner[b])], k, [1.0, wb]), "")
    return ms


def methods6() -> dict[str, tuple[Method, str]]:
    """Round 6: a stepped sparse weight (S100 + S10 + S5) and a stepped dense weight (D100 + D3)."""
    ms = {n: v for n, v in methods().items() if n in ("dense", "sparse", "rrf60 (seed)", "rrf k=2 w=0.5/1 (default)")}
    legs4, k4, w4 = BEST4
    ms["BEST4 rrf k=3 [D100 1, B100 .5, S100 1, S5 .625]"] = (rrf(legs4, k4, w4), "")
    for k in (2, 3, 4):
        for wd in (0.75, 1.0):
            for wt in (0.5, 0.625, 0.75):
                for w10 in (0.25, 0.5):
                    ms[f"rrf k={k} [D100 {wd}, B100 0.5, S100 1, S10 {w10}, S5 {wt}]"] = (
                        rrf([("D", 100), ("B", 100), ("S", 100), ("S", 10), ("S", 5)], k, [wd, 0.5, 1.0, w10, wt]),
                        "",
                    )
                for wd3 in (0.25, 0.5):
                    ms[f"rrf k={k} [D100 {wd}, D3 {wd3}, B100 0.5, S100 1, S5 {wt}]"] = (
                        rrf([("D", 100), ("D", 3), ("B", 100), ("S", 100), ("S", 5)], k, [wd, wd3, 0.5, 1.0, wt]),
                        "",
                    )
                for wb5 in (0.25, 0.5):
                    ms[f"rrf k={k} [D100 {wd}, B100 0.5, B5 {wb5}, S100 1, S5 {wt}]"] = (
                        rrf([("D", 100), ("B", 100), ("B", 5), ("S", 100), ("S", 5)], k, [wd, 0.5, wb5, 1.0, wt]),
                        "",
                    )
    return ms


def methods_final() -> dict[str, tuple[Method, str]]:
    """The curated table (eval/results/sweep-rerank.txt): baselines, the best tree and its neighbours,
    and the best of each candidate family from rounds 1-6."""
    ms = {n: v for n, v in methods().items() if n in ("dense", "sparse", "rrf60 (seed)", "rrf k=2 w=0.5/1 (default)")}
    legs4, k4, w4 = BEST4
    ms["BEST4 rrf k=3 [D100 1, B100 .5, S100 1, S5 .625]"] = (rrf(legs4, k4, w4), "")
    for k, wd, m, wb, top, wt in (
        (3, 1.0, 100, 0.5, 5, 0.5),
        (3, 1.0, 100, 0.5, 5, 0.75),
        (2, 1.0, 100, 0.5, 5, 0.625),
        (4, 1.0, 100, 0.5, 5, 0.625),
        (3, 0.75, 100, 0.5, 5, 0.625),
        (3, 1.25, 100, 0.5, 5, 0.625),
        (3, 1.0, 75, 0.5, 5, 0.625),
        (3, 1.0, 150, 0.5, 5, 0.625),
        (3, 1.0, 100, 0.25, 5, 0.625),
        (3, 1.0, 100, 0.75, 5, 0.625),
        (3, 1.0, 100, 0.5, 4, 0.625),
        (3, 1.0, 100, 0.5, 6, 0.625),
    ):
        ms[f"rrf k={k} [D100 {wd}, B{m} {wb}, S100 1, S{top} {wt}]"] = (
            rrf([("D", 100), ("B", m), ("S", 100), ("S", top)], k, [wd, wb, 1.0, wt]),
            "",
        )
    for thr, wt in ((9.0, 0.75), (8.0, 0.75), (10.0, 0.75), (9.0, 0.625), (9.0, 0.875), (10.0, 0.625)):
        ms[f"rrf k=3 [D100 1, B100 .5, S100 1, T5>={thr:g} {wt}]"] = (
            rrf([("D", 100), ("B", 100), ("S", 100), ("T", (5, thr))], 3, [1.0, 0.5, 1.0, wt]),
            "",
        )
    for k in (2, 4):
        ms[f"rrf k={k} [D100 1, B100 .5, S100 1, T5>=9 0.75]"] = (
            rrf([("D", 100), ("B", 100), ("S", 100), ("T", (5, 9.0))], k, [1.0, 0.5, 1.0, 0.75]),
            "",
        )
    ms["rrf k=3 [D100 1, Z100 .5, S100 1, T5>=9 .75] (zeros kept)"] = (
        rrf([("D", 100), ("Z", 100), ("S", 100), ("T", (5, 9.0))], 3, [1.0, 0.5, 1.0, 0.75]),
        "",
    )
    ms["rrf k=3 [D100 1, Z100 .5, S100 1, S5 .625] (zeros kept)"] = (
        rrf([("D", 100), ("Z", 100), ("S", 100), ("S", 5)], 3, [1.0, 0.5, 1.0, 0.625]),
        "",
    )
    ms["rrf k=1 [D100 .5, B50 .5, S100 1]"] = (rrf([("D", 100), ("B", 50), ("S", 100)], 1, [0.5, 0.5, 1.0]), "")
    ms["rrf k=3 [D100 1, S100 1, S3 1]"] = (rrf([("D", 100), ("S", 100), ("S", 3)], 3, [1.0, 1.0, 1.0]), "")
    ms["rrf k=2 [D100 .5, S100 1, S5 1]"] = (rrf([("D", 100), ("S", 100), ("S", 5)], 2, [0.5, 1.0, 1.0]), "")
    ms["rrf k=1 [R50 .5, S100 1] (cand. 1)"] = (rrf([("R", 50), ("S", 100)], 1, [0.5, 1.0]), "")
    ms["rrf k=1 [D100 .5, R50 .5, S100 1] (cand. 2)"] = (
        rrf([("D", 100), ("R", 50), ("S", 100)], 1, [0.5, 0.5, 1.0]),
        "",
    )
    ms["rrf k=2 [D100 .5, R50 .25, S100 1] (cand. 2)"] = (
        rrf([("D", 100), ("R", 50), ("S", 100)], 2, [0.5, 0.25, 1.0]),
        "",
    )
    ms["dbsf [R50, S100] (cand. 3)"] = (dbsf([("R", 50), ("S", 100)], [1, 1]), "")
    ms["dbsf [R100, S100 x2] (cand. 3)"] = (dbsf([("R", 100), ("S", 100)], [1, 2]), "")
    ms["dbsf [D100, R50, S100 x3] (cand. 3)"] = (dbsf([("D", 100), ("R", 50), ("S", 100)], [1, 1, 3]), "")
    ms["R50 alone (dense over S50)"] = (single(("R", 50)), "")
    return ms


def methods7() -> dict[str, tuple[Method, str]]:
    """Round 7: a thresholded sparse boost leg T(n, thr) = S top-n with score_threshold thr."""
    ms = {n: v for n, v in methods().items() if n in ("dense", "sparse", "rrf60 (seed)", "rrf k=2 w=0.5/1 (default)")}
    legs4, k4, w4 = BEST4
    ms["BEST4 rrf k=3 [D100 1, B100 .5, S100 1, S5 .625]"] = (rrf(legs4, k4, w4), "")
    for k in (2, 3):
        for n in (5, 10, 20):
            for thr in (8.0, 10.0, 12.0, 14.0, 16.0):
                for wt in (0.5, 0.75, 1.0):
                    ms[f"rrf k={k} [D100 1, B100 .5, S100 1, T{n}>={thr:g} {wt}]"] = (
                        rrf([("D", 100), ("B", 100), ("S", 100), ("T", (n, thr))], k, [1.0, 0.5, 1.0, wt]),
                        "",
                    )
                    ms[f"rrf k={k} [D100 1, B100 .5, S100 1, S5 .625, T{n}>={thr:g} {wt}]"] = (
                        rrf(
                            [("D", 100), ("B", 100), ("S", 100), ("S", 5), ("T", (n, thr))],
                            k,
                            [1.0, 0.5, 1.0, 0.625, wt],
                        ),
                        "",
                    )
                    ms[f"rrf k={k} [D100 .5, S100 1, T{n}>={thr:g} {wt}]"] = (
                        rrf([("D", 100), ("S", 100), ("T", (n, thr))], k, [0.5, 1.0, wt]),
                        "",
                    )
    return ms


def methods8() -> dict[str, tuple[Method, str]]:
    """Round 8: plateau of [D100 1, B100 .5, S100 1, T<n> >= thr] (the thresholded short sparse leg)."""
    ms = {n: v for n, v in methods().items() if n in ("dense", "sparse", "rrf60 (seed)", "rrf k=2 w=0.5/1 (default)")}
    for k in (2, 3, 4):
        for n in (4, 5, 6):
            for thr in (6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0):
                for wt in (0.5, 0.625, 0.75, 0.875):
                    ms[f"rrf k={k} [D100 1, B100 .5, S100 1, T{n}>={thr:g} {wt}]"] = (
                        rrf([("D", 100), ("B", 100), ("S", 100), ("T", (n, thr))], k, [1.0, 0.5, 1.0, wt]),
                        "",
                    )
    return ms


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tag", default="")
    ap.add_argument("--round", type=int, default=1)
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    views = build_views()
    print(f"views built in {time.monotonic() - t0:.0f}s: " + ", ".join(f"{v}={len(q)}" for v, q in views.items()))
    ms = {
        2: methods2,
        3: methods3,
        4: methods4,
        5: methods5,
        6: methods6,
        7: methods7,
        8: methods8,
        9: methods_final,
    }.get(a.round, lambda: methods(a.quick))()
    res: dict[str, dict[str, Score]] = {}
    t1 = time.monotonic()
    for i, (name, (m, _)) in enumerate(ms.items()):
        res[name] = evaluate(views, m)
        if i % 100 == 0:
            print(f"  {i}/{len(ms)} methods, {time.monotonic() - t1:.0f}s", flush=True)
    attrs = ("recall5", "recall10")

    def best_leg(v: str, a_: str) -> float:
        return max(getattr(res["dense"][v], a_), getattr(res["sparse"][v], a_))

    rows = []
    for name, r in res.items():
        leg_margin = min(getattr(r[v], a_) - best_leg(v, a_) for v in views for a_ in attrs)
        seed_margin = min(getattr(r[v], a_) - getattr(res["rrf60 (seed)"][v], a_) for v in views for a_ in attrs)
        mean = float(np.mean([getattr(r[v], a_) for v in views for a_ in attrs]))
        rows.append((mean, min(leg_margin, seed_margin), leg_margin, seed_margin, name, r))
    rows.sort(key=lambda x: -x[0])
    n = ", ".join(f"{v}={len(q)}" for v, q in views.items())
    head = (
        f"## Nested-prefetch hybrids (BM25 {RECOMMENDED_BM25}; dense max-sim; questions: {n})\n"
        "worst = min over views and R@5/R@10 of (method - max(best leg, rrf60)); leg/seed = the two parts.\n"
        "Legs: D=dense top-n, S=sparse top-n, R<N>=sparse top-N re-scored by dense (nested prefetch),\n"
        "B<M>=dense top-M re-scored by BM25 (nested prefetch). Sorted by mean of the 8 cells."
    )
    lines = [head]
    for mean, worst, lm, sm, name, r in rows:
        cells = " ".join(f"{v} {r[v].recall5:.3f}/{r[v].recall10:.3f}" for v in views)
        lines.append(f"{name:38} mean {mean:.3f} worst {worst:+.4f} (leg {lm:+.4f} seed {sm:+.3f}) | {cells}")
    text = "\n".join(lines)
    # a second ranking: methods with worst > 0, by s mean then overall mean
    pos = [r for r in rows if r[1] > 0]
    pos.sort(key=lambda x: (-(x[5]["s"].recall5 + x[5]["s"].recall10), -x[0]))
    text += "\n\n## worst > 0, sorted by s R@5+R@10 then mean\n" + "\n".join(
        f"{name:38} mean {mean:.3f} worst {worst:+.3f} | "
        + " ".join(f"{v} {r[v].recall5:.3f}/{r[v].recall10:.3f}" for v in views)
        for mean, worst, lm, sm, name, r in pos
    )
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"sweep-rerank{a.tag}.txt").write_text(text + "\n")
    print(f"({time.monotonic() - t0:.0f}s)")


if __name__ == "__main__":
    sys.exit(main())
