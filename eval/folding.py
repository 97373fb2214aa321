"""Near-duplicate folding and supersession in the mirror (``episodic.maintenance.linker`` with
``episodic.domain.folding`` and ``episodic.domain.supersession``).

The linker folds a new memory into an earlier one, in stream order, when the two memories' cosine reaches
the rule's (the max-sim of their pieces and the cosine of their mean vectors, the lower of the two) and the
rule's words and facts agree; the absorbed memory leaves every recall (its owner stands for it, and covers
its turn ids as an alias would). Here: ``fold_groups`` computes the same folds over a workspace's cached
piece vectors (each memory's candidates are the earlier memories not absorbed themselves; the linker's
candidates are its top 9 by max-sim, which only differs when more than nine earlier memories clear the
fold cosine), and ``folded`` wraps a ranking method: the absorbed memories are dropped from its ranking
and each owner covers its absorbed memories' ids.

Supersession: ``supersessions`` finds, for each memory in stream order, the nearest earlier memory it is an
update of (or that is an update of it, by the turns' dates), with the same cosine; ``newer_first`` wraps a
method as recall does it (``episodic.retrieval.expand.newer_first``): a superseded memory in the ranking gets
the newer one right above it, moved up or brought in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from episodic.domain.folding import FoldRule, near_duplicate
from episodic.domain.supersession import SupersedeRule, is_update
from eval.context import ContextSpec
from eval.methods import Method, Ranked
from eval.sentences import pieces as split_pieces
from eval.views import Memories, Q, cache

BLOCK = 512  # memories per block of the mean-vector cosine matrix


@dataclass
class Folds:
    into: dict[int, int]  # absorbed memory -> owner memory
    cover: dict[int, list[str]]  # owner memory -> every turn id it stands for (its own aliases first)


def _piece_vectors(mem: Memories, split: str = "p32") -> list[np.ndarray] | None:
    c = cache("minilm")
    chunk = c.chunker()
    per: list[list[str]] = [split_pieces(t, split, chunk) for t in mem.texts(ContextSpec())]
    flat = [p for ps in per for p in ps]
    if c.missing(flat):
        return None
    m = c.matrix(flat)
    out, at = [], 0
    for ps in per:
        out.append(m[at : at + len(ps)])
        at += len(ps)
    return out


_FOLDS: dict[tuple[str, FoldRule], Folds] = {}


def _unit_means(rows: list[np.ndarray]) -> np.ndarray:
    """Each memory's mean piece vector, normalised (what the linker compares: folding and supersession)."""
    means = np.stack([r.mean(axis=0) for r in rows])
    return means / np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)


def fold_groups(mem: Memories, rule: FoldRule) -> Folds | None:
    """The linker's folds over the workspace, memories in stream order; None when a piece is not cached."""
    key = (mem.corpus.name, rule)
    if key in _FOLDS:
        return _FOLDS[key]
    rows = _piece_vectors(mem)
    if rows is None:
        return None
    means = _unit_means(rows)
    texts = mem.texts(ContextSpec())
    into: dict[int, int] = {}
    n = len(rows)
    for start in range(0, n, BLOCK):
        block = means[start : start + BLOCK] @ means.T  # (block, n)
        for off in range(block.shape[0]):
            j = start + off
            cand = np.flatnonzero(block[off, :j] >= rule.cosine)  # mean cosine: the lower bound to clear
            scored = []
            for i in cand.tolist():
                if i in into:
                    continue
                maxsim = float((rows[j] @ rows[i].T).max())
                scored.append((min(maxsim, float(block[off, i])), i))
            for cos, i in sorted(scored, key=lambda t: (-t[0], t[1])):
                if cos >= rule.cosine and near_duplicate(cos, texts[j], texts[i], rule).fold:
                    into[j] = i
                    break
    cover = {i: list(mem.aliases[i]) for i in set(into.values())}
    for j, i in sorted(into.items()):
        cover[i].extend(mem.aliases[j])
    folds = Folds(into, cover)
    _FOLDS[key] = folds
    return folds


def folded(method: Method, rule: FoldRule) -> Method:
    """``method`` over the workspace as the linker leaves it under ``rule``: absorbed memories dropped, owners
    covering them (``cover(mem, i)``, read by ``eval.sweep.evaluate``)."""

    def run(q: Q) -> Ranked:
        idx, sc = method(q)
        folds = fold_groups(q.mem, rule)
        if folds is None or not folds.into:
            return idx, sc
        keep = np.array([i not in folds.into for i in idx.tolist()], dtype=bool)
        return idx[keep], sc[keep]

    def cover(mem: Memories, i: int) -> list[str]:
        folds = fold_groups(mem, rule)
        return folds.cover.get(i, mem.aliases[i]) if folds is not None else mem.aliases[i]

    run.cover = cover  # type: ignore[attr-defined]
    return run


_SUPER: dict[tuple[str, SupersedeRule], dict[int, int]] = {}


def supersessions(mem: Memories, rule: SupersedeRule) -> dict[int, int] | None:
    """older memory -> the newer memory that supersedes it (by the turns' dates; in stream order when they tie),
    one decision per memory against the earlier ones, as the linker makes it; None when a piece is not cached."""
    key = (mem.corpus.name, rule)
    if key in _SUPER:
        return _SUPER[key]
    rows = _piece_vectors(mem)
    if rows is None:
        return None
    means = _unit_means(rows)
    texts = mem.texts(ContextSpec())
    dates = [mem.corpus.turns[i].date for i in mem.first]
    by: dict[int, int] = {}
    for start in range(0, len(rows), BLOCK):
        block = means[start : start + BLOCK] @ means.T
        for off in range(block.shape[0]):
            j = start + off
            cand = np.flatnonzero(block[off, :j] >= rule.cosine)
            scored = sorted(
                ((min(float((rows[j] @ rows[i].T).max()), float(block[off, i])), i) for i in cand.tolist()),
                key=lambda t: (-t[0], t[1]),
            )
            for cos, i in scored:
                if cos >= rule.cosine and is_update(cos, texts[j], texts[i], rule).fold:
                    newer, older = (j, i) if dates[j] >= dates[i] else (i, j)
                    by[older] = newer
                    break
    _SUPER[key] = by
    return by


def newer_first(method: Method, rule: SupersedeRule) -> Method:
    """``method`` with recall's supersession order: each superseded memory's newer one right above it."""

    def run(q: Q) -> Ranked:
        idx, sc = method(q)
        by = supersessions(q.mem, rule)
        if not by:
            return idx, sc
        out: list[int] = []
        scores: list[float] = []
        for i, s in zip(idx.tolist(), sc.tolist(), strict=True):
            if i in out:
                continue
            n = by.get(i)
            if n is not None and n not in out:
                out.append(n)
                scores.append(s)
            out.append(i)
            scores.append(s)
        return np.array(out[: len(idx)], dtype=np.int64), np.array(scores[: len(idx)])

    for attr in ("cover",):
        if hasattr(method, attr):
            setattr(run, attr, getattr(method, attr))
    return run


def mmr(method: Method, lam: float, pool: int = 30) -> Method:
    """``method``'s top ``pool`` re-picked greedily by maximal marginal relevance (seed 002: MMR with word
    Jaccard): each pick maximises ``lam`` x its score (over the best) - (1 - ``lam``) x its highest content-word
    Jaccard with a memory already picked."""
    from episodic.domain.folding import content_tokens, jaccard

    words: dict[tuple[str, int], frozenset[str]] = {}

    def run(q: Q) -> Ranked:
        idx, sc = method(q)
        idx, sc = idx[:pool], sc[:pool]
        if len(idx) < 2:
            return idx, sc
        texts = q.mem.texts(ContextSpec())
        toks = [words.setdefault((q.mem.corpus.name, i), content_tokens(texts[i])) for i in idx.tolist()]
        rel = sc / max(float(sc.max()), 1e-12)
        left, picked = list(range(len(idx))), list[int]()
        while left:
            best = max(
                left,
                key=lambda c: lam * rel[c] - (1 - lam) * max((jaccard(toks[c], toks[p]) for p in picked), default=0.0),
            )
            picked.append(best)
            left.remove(best)
        return idx[picked], sc[picked]

    if hasattr(method, "cover"):  # over folded memories: the owners still cover what they absorbed
        run.cover = method.cover  # type: ignore[attr-defined]
    return run
