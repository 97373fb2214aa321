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
from collections.abc import Callable

import numpy as np

from episodic.domain.runs import words as summary_words
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


# Issue 46's adaptive variants (`eval.sweep adaptive`): the store's run-level re-rank (``episodic.domain.runs``)
# applied per question only as strongly as a gate read from the fused list says, and a turn lifted by its run
# neighbours alone. Each is a ``post`` of ``eval.methods.tree``: (question, fused top N indices, scores) -> re-ranked.
Post = Callable[[Q, np.ndarray, np.ndarray], Ranked]


def _candidates(q: Q, idx: np.ndarray, sc: np.ndarray) -> list[tuple[str, float, int]]:
    return [
        (str(i), float(s), int(r)) for i, s, r in zip(idx.tolist(), sc.tolist(), q.mem.run[idx].tolist(), strict=True)
    ]


def _as_ranked(pairs: list[tuple[str, float]]) -> Ranked:
    return np.array([int(i) for i, _ in pairs], dtype=np.int64), np.array([s for _, s in pairs])


def share(q: Q, idx: np.ndarray, sc: np.ndarray, top: int = 10) -> float:
    """The fused score mass of the top `top` held by the run holding most of it (1: one run holds them all)."""
    mass: dict[int, float] = defaultdict(float)
    for s, r in zip(sc[:top].tolist(), q.mem.run[idx[:top]].tolist(), strict=True):
        mass[r] += s
    total = sum(mass.values())
    return max(mass.values()) / total if total > 0 else 0.0


def margin(q: Q, idx: np.ndarray, sc: np.ndarray, depth: int = 3) -> float:
    """1 − the second run's score / the best run's (run scores as the store's: the sum of its `depth` best)."""
    from episodic.domain.runs import run_scores as store_run_scores

    cands = _candidates(q, idx, sc)
    best = {r: v for (_, _, r), v in zip(cands, store_run_scores(cands, depth), strict=True)}
    top = sorted(best.values(), reverse=True)
    return 1.0 - (top[1] / top[0] if len(top) > 1 and top[0] > 0 else 0.0)


def agree(q: Q, idx: np.ndarray, sc: np.ndarray, top: int = 5, dense: str = "DP", bm25: str = "S") -> float:
    """1 when the dense and the BM25 leg alone put the same run first (the run most of their top `top` is
    from), else 0: two independent legs agreeing on the session."""

    def first(ix: np.ndarray) -> int | None:
        if not len(ix):
            return None
        runs = q.mem.run[ix]
        values, counts = np.unique(runs, return_counts=True)
        return int(values[np.argmax(counts)]) if counts.max() > 1 else int(runs[0])

    a, b = first(q.top(dense, top)), first(q.top(bm25, top))
    return 1.0 if a is not None and a == b else 0.0


def gated(weight: float, gate: Callable[[Q, np.ndarray, np.ndarray], float], depth: int = 3) -> Post:
    """The run-level re-rank at `weight` × the gate's value for this question (0: the fused order)."""
    from episodic.domain.runs import run_level as store_run_level

    def post(q: Q, idx: np.ndarray, sc: np.ndarray) -> Ranked:
        w = weight * gate(q, idx, sc)
        return _as_ranked(store_run_level(_candidates(q, idx, sc), w, depth)) if w > 0 else (idx, sc)

    return post


def head_kept(weight: float, keep: int, depth: int = 3) -> Post:
    """The fused top `keep` stay where they are; the run-level re-rank (over all candidates) orders the rest
    below them."""
    from episodic.domain.runs import run_level as store_run_level

    def post(q: Q, idx: np.ndarray, sc: np.ndarray) -> Ranked:
        again = _as_ranked(store_run_level(_candidates(q, idx, sc), weight, depth))[0]
        head = set(idx[:keep].tolist())
        out = np.concatenate([idx[:keep], again[[i not in head for i in again.tolist()]]]).astype(np.int64)
        return out, np.arange(len(out), 0, -1, dtype=np.float64)

    return post


def neighbours(weight: float, agg: str = "max") -> Post:
    """A turn lifted by its run neighbours' fused scores (the previous and next memory, where they are
    candidates): own/best + weight × max (or sum) of theirs/best; locality without the whole run."""

    def post(q: Q, idx: np.ndarray, sc: np.ndarray) -> Ranked:
        unit = _unit(sc)
        at = {i: p for p, i in enumerate(idx.tolist())}
        lift = np.zeros(len(idx))
        for p, i in enumerate(idx.tolist()):
            got = [unit[at[int(n)]] for n in (q.mem.prev[i], q.mem.next[i]) if n >= 0 and int(n) in at]
            lift[p] = (max(got) if agg == "max" else sum(got)) if got else 0.0
        final = unit + weight * lift
        o = np.lexsort((np.arange(len(idx)), -final))
        return idx[o], final[o]

    return post


def words(q: Q) -> np.ndarray:
    """Each memory's length in words (its summary as the store holds it, the speaker included: what
    ``episodic.domain.runs.neighbour_lift`` counts), computed once per workspace."""
    got = getattr(q.mem, "_words", None)
    if got is None:
        turns = q.mem.corpus.turns
        got = np.array([summary_words(turns[i].text()) for i in q.mem.first], dtype=np.float64)
        q.mem._words = got  # type: ignore[attr-defined]
    return got


def brevity(n: np.ndarray, limit: float, soft: bool) -> np.ndarray:
    """1 for a turn of at most `limit` words; above it 0 (hard) or limit / words (soft)."""
    return np.where(n <= limit, 1.0, (limit / np.maximum(n, 1.0)) if soft else 0.0)


def short_neighbours(weight: float, limit: float, soft: bool = False, both: bool = True) -> Post:
    """The neighbour lift (``neighbours``) only between short turns: memory i is lifted by neighbour n at
    weight × brevity(i) × brevity(n) (`both`; else brevity(i) alone). A chat line ("Yes, last week!") says what
    it is about through the lines around it; a paragraph stands alone, and so does its neighbour."""

    def post(q: Q, idx: np.ndarray, sc: np.ndarray) -> Ranked:
        unit = _unit(sc)
        g = brevity(words(q), limit, soft)
        at = {i: p for p, i in enumerate(idx.tolist())}
        lift = np.zeros(len(idx))
        for p, i in enumerate(idx.tolist()):
            got = [
                unit[at[int(n)]] * (g[int(n)] if both else 1.0)
                for n in (q.mem.prev[i], q.mem.next[i])
                if n >= 0 and int(n) in at
            ]
            lift[p] = g[i] * max(got) if got else 0.0
        final = unit + weight * lift
        o = np.lexsort((np.arange(len(idx)), -final))
        return idx[o], final[o]

    return post


def short_runs(weight: float, limit: float, depth: int = 3) -> Post:
    """The run-level re-rank (the store's: a run scored by the sum of its `depth` best candidates) at weight ×
    the share of the run's turns that are short (at most `limit` words): a run of chat lines is one exchange."""

    def post(q: Q, idx: np.ndarray, sc: np.ndarray) -> Ranked:
        n = words(q)
        runs = q.mem.run
        key = ("_short", limit)
        share = getattr(q.mem, "_short_share", {}).get(key)
        if share is None:
            short = np.bincount(runs, weights=(n <= limit).astype(np.float64), minlength=int(runs.max()) + 1)
            total = np.bincount(runs, minlength=int(runs.max()) + 1)
            share = short / np.maximum(total, 1)
            q.mem._short_share = {**getattr(q.mem, "_short_share", {}), key: share}  # type: ignore[attr-defined]
        unit = _unit(sc)
        rs = run_scores(q, idx, sc, "fused", f"top{depth}", True)
        final = unit + weight * share[runs[idx]] * _unit(rs)
        o = np.lexsort((np.arange(len(idx)), -final))
        return idx[o], final[o]

    return post
