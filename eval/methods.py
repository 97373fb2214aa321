"""Ranking methods over a question's score rows, each expressible as a Qdrant query (or said otherwise).

A leg is a prefetch: ``("S", 100)`` is row S's top 100 (sparse rows: matched only); ``("S", "D", 100)`` a
nested prefetch, D's top 100 re-scored by S (the store's "B" leg: near in meaning *and* sharing the
query's words). Fusions are Qdrant's: weighted RRF ``1/((pos+1)/w + k - 1)`` and DBSF (each leg's
scores mapped by its mean +- 3 sigma, summed; a weight is that prefetch repeated, or a formula query's
multiplier). ``adjacent`` wraps a method with episode adjacency (a hit's session neighbours brought in
below it, counted in k), which the recall service would do in Python on the engine's answer.

A method returns the ranked memory indices with their fused scores (best first, at most ``DEPTH``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np

from eval import fusion as F
from eval.views import Dense, Q

DEPTH = 30
Leg = tuple  # (row, n) or (row, inner_row, m)
Ranked = tuple[np.ndarray, np.ndarray]  # memory indices, scores
Method = Callable[[Q], Ranked]


def leg(q: Q, spec: Leg) -> tuple[np.ndarray, np.ndarray]:
    idx = q.top(spec[0], spec[1]) if len(spec) == 2 else q.over(spec[0], spec[1], spec[2])
    return idx, q.rows[spec[0]][idx]


def _ranked(acc: dict[int, float], depth: int = DEPTH) -> Ranked:
    items = sorted(acc.items(), key=lambda kv: (-kv[1], kv[0]))[:depth]
    return np.array([i for i, _ in items], dtype=np.int64), np.array([v for _, v in items])


def single(row: str) -> Method:
    def run(q: Q) -> Ranked:
        idx, sc = leg(q, (row, DEPTH))
        return idx, sc

    return run


def rrf(legs: Sequence[Leg], k: float, weights: Sequence[float], depth: int = DEPTH) -> Method:
    def run(q: Q) -> Ranked:
        return _ranked(F.rrf([leg(q, s)[0] for s in legs], k, list(weights)), depth)

    return run


def lexical(
    legs: Sequence[Leg],
    k: float,
    weights: Sequence[float],
    full: float,
    floor: float,
    probe: str = "S",
    scaled: Sequence[bool] | None = None,
) -> Method:
    """Weighted RRF with lexical confidence, the store's own factor (``episodic.store.query.lexical_factor``
    of the best `probe` score and the workspace's memories): every leg whose score row is sparse (a name
    starting with "S": BM25 legs, BM25 re-scoring the dense candidates), or those `scaled`, gets its weight
    times it; the dense legs keep theirs."""
    from episodic.store.query import lexical_factor

    which = list(scaled) if scaled is not None else [spec[0].startswith("S") for spec in legs]

    def run(q: Q) -> Ranked:
        r = q.rows[probe]
        f = lexical_factor(float(r.max()), len(r), full, floor)
        w = [wt * f if sc else wt for sc, wt in zip(which, weights, strict=True)]
        return rrf(legs, k, w)(q)

    return run


# The time legs' reference instant for relative times ("last week"): after every set's sessions, as the recall
# service's clock is in the pipeline harness (which sends no question date), so relative times match nothing.
NOW = datetime(2026, 1, 1, tzinfo=UTC)
LATER = datetime(2031, 7, 1, tzinfo=UTC)  # a second instant: a span both give is absolute ("in May 2023")


def question_spans(q: Q, relative: str) -> tuple:
    """The spans the question names for the time legs. `relative`: "now" (relative times from `NOW`, as the
    pipeline resolves them), "asked" (from the question's date where the set gives one, as a deployment asked
    then would), "off" (absolute spans only)."""
    from episodic.domain.timespan import spans

    if relative == "off":
        later = spans(q.text, LATER)
        return tuple(s for s in spans(q.text, NOW) if s in later)
    if relative == "asked" and q.asked:
        from eval.data import haystack_time

        return spans(q.text, haystack_time(q.asked))
    return spans(q.text, NOW)


def tree(
    legs: Sequence[Leg],
    k: float,
    weights: Sequence[float],
    full: float = 0.0,
    floor: float = 0.25,
    *,
    probe: str = "S",
    time: float = 0.0,
    relative: str = "now",
    run_if_timed: bool = False,
    run: float = 0.0,
    depth: int = 3,
    pool: int = 100,
    post: Callable[[Q, np.ndarray, np.ndarray], Ranked] | None = None,
) -> Method:
    """The store's hybrid as it ranks (``episodic.store.query.hybrid_prefetch``, ``QdrantStore.query_hybrid``):
    weighted RRF over `legs` with the lexical confidence (`full` > 0, ``lexical``); the time legs (`time` > 0
    and the question names a time, ``episodic.domain.timespan``: each leg that searches on its own once more
    over the memories of those times, at `time` x its weight); the run-level re-rank of the fused top `pool`
    (`run` > 0, ``episodic.domain.runs``; `run_if_timed`: only for a question that names a time); `post`: another
    re-rank of the fused top `pool` instead (the question, its indices and scores -> the re-ranked ones)."""
    from episodic.domain.runs import run_level
    from episodic.store.query import lexical_factor

    def run_(q: Q) -> Ranked:
        f = lexical_factor(float(q.rows[probe].max()), len(q.rows[probe]), full, floor) if full > 0 else 1.0
        w = [wt * f if spec[0].startswith("S") else wt for spec, wt in zip(legs, weights, strict=True)]
        ranked = [leg(q, s)[0] for s in legs]
        found = question_spans(q, relative) if time > 0 else ()
        if found:
            at = q.mem.at
            inside = np.zeros(len(at), dtype=bool)
            for s in found:
                inside |= (at >= s.start.timestamp()) & (at < s.end.timestamp())
            for spec, wt in list(zip(legs, w, strict=True)):
                if len(spec) == 2 and wt > 0:
                    ranked.append(q.within(spec[0], spec[1], inside))
                    w.append(wt * time)
        by_run = run > 0 and (bool(found) or not run_if_timed)
        fused = _ranked(F.rrf(ranked, k, w), pool if by_run or post else DEPTH)
        if post is not None:
            idx, sc = post(q, *fused)
            return idx[:DEPTH], sc[:DEPTH]
        if not by_run:
            return fused
        idx, sc = fused
        again = run_level(
            [
                (str(i), float(s), int(r))
                for i, s, r in zip(idx.tolist(), sc.tolist(), q.mem.run[idx].tolist(), strict=True)
            ],
            run,
            depth,
        )[:DEPTH]
        return np.array([int(i) for i, _ in again], dtype=np.int64), np.array([s for _, s in again])

    return run_


def dbsf(legs: Sequence[Leg], weights: Sequence[float] | None = None) -> Method:
    def run(q: Q) -> Ranked:
        return _ranked(F.dbsf([leg(q, s) for s in legs], list(weights) if weights else None))

    return run


def formula(d: str, s: str, wd: float, ws: float, c: float, n: int = 100) -> Method:
    """A Formula query over D's and S's top n: wd * cos + ws * bm25 / (bm25 + c) (phase 1's score fusion)."""

    def run(q: Q) -> Ranked:
        return _ranked(F.formula(leg(q, (d, n)), leg(q, (s, n)), wd, ws, c))

    return run


def adjacent(
    inner: Method, which: str = "both", factor: float = 0.0, hits: int = 10, direct: int | None = None
) -> Method:
    """Episode adjacency: the top `hits` direct hits each bring their previous and/or next memory in the
    session. factor 0: a neighbour goes right below its hit; factor f > 0: it is scored f * the hit's
    score and everything is re-sorted (so it can fall below other direct hits). Duplicates keep their
    best place. `direct`: only that many direct hits compete (the recall service fetches k of them)."""

    def run(q: Q) -> Ranked:
        idx, sc = inner(q)
        if direct is not None:
            idx, sc = idx[:direct], sc[:direct]
        out: dict[int, float] = {}
        order: list[int] = []
        for r, (i, s) in enumerate(zip(idx.tolist(), sc.tolist(), strict=True)):
            cand = [(i, s)]
            if r < hits:
                before = q.mem.prev[i] if which in ("prev", "both") else -1
                after = q.mem.next[i] if which in ("next", "both") else -1
                for nb in (before, after):
                    if nb >= 0:
                        cand.append((int(nb), s * factor if factor else s - 1e-9))
            for j, v in cand:
                if j not in out:
                    order.append(j)
                    out[j] = v
                elif factor:
                    out[j] = max(out[j], v)
        if factor:
            return _ranked(out)
        return np.array(order[:DEPTH], dtype=np.int64), np.array([out[j] for j in order[:DEPTH]])

    return run


# today's shipped hybrid: RRF k=3 over D100 (w 1), S100 re-scored over D100 (w .5), S100 (w 1), S5 (w .75)
def default_hybrid(d: str = "D", s: str = "S") -> Method:
    return rrf([(d, 100), (s, d, 100), (s, 100), (s, 5)], 3, [1.0, 0.5, 1.0, 0.75])


def fused_prf(inner: Method, name: str, row: Dense, d: int, beta: float) -> Method:
    """Pseudo-relevance feedback from the fused answer: `inner` asked once, its dense row `name` (the ``Dense``
    `row`) asked again with the query moved towards the fused top `d` (``eval.views.moved_row``), then `inner`
    asked again over it; the BM25 rows keep the question."""
    from eval.views import moved_row

    def run(q: Q) -> Ranked:
        idx, _ = inner(q)
        again = Q({**q.rows, name: moved_row(q, row, q.text, idx[:d], beta)}, q.mem, q.evidence, q.type,
                  text=q.text, id=q.id, asked=q.asked)  # fmt: skip
        return inner(again)

    return run
