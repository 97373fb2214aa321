"""Query-side changes to the BM25 leg: RM3 pseudo-relevance feedback and query term weights.

Both work on the store's sparse vectors, so a recall could run them in Python on what the engine returns:
RM3 reads the BM25 vectors of the first pass's top documents (``with_vectors``) and sends a second sparse
query whose term weights are the expanded query's (Qdrant multiplies each by its IDF, as for any query).

RM3 (Lavrenko & Croft's relevance model, interpolated with the query as in Anserini): over the top
``docs`` documents of the first pass, p(t|R) = sum_d w_d p(t|d), with p(t|d) the document's BM25 term
weights normalised to 1 and w_d its first-pass score normalised to 1; the ``terms`` most likely terms
are kept and the new query is (1 - lam) q/|q| + lam p(t|R).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from eval.bm25 import Bm25Index

# Words that ask about the memory itself rather than its content ("remind me what we discussed...").
META_WORDS = frozenset(
    {"remind", "remember", "recall", "mention", "mentioned", "told", "tell", "said", "say", "talk", "talked"}
    | {"discuss", "discussed", "conversation", "chat", "previous", "previously", "earlier", "wondering", "ask"}
)


@dataclass(frozen=True)
class Rm3:
    docs: int = 10
    terms: int = 10
    lam: float = 0.5
    idf_select: bool = False  # rank expansion terms by p(t|R) * idf (favours rare, specific terms)


def expand(ix: Bm25Index, q: sparse.csr_matrix, s: np.ndarray, rm3: Rm3) -> sparse.csr_matrix:
    """Expanded query vectors (rows of q) from the first-pass scores s (queries x docs)."""
    docs = ix.docs
    norm = np.asarray(docs.sum(axis=1)).ravel()
    norm[norm == 0] = 1.0
    p_td = sparse.diags(1.0 / norm) @ docs  # p(t|d)
    out = []
    for i in range(q.shape[0]):
        qi = q.getrow(i).toarray().ravel()
        if qi.sum() > 0:
            qi = qi / qi.sum()
        top = np.argsort(-s[i], kind="stable")[: rm3.docs]
        top = top[s[i, top] > 0]
        if len(top) == 0:
            out.append(qi)
            continue
        w = s[i, top] / s[i, top].sum()
        rel = np.asarray(p_td[top].T @ w).ravel()
        rank = rel * ix.idf if rm3.idf_select else rel
        keep = np.argsort(-rank, kind="stable")[: rm3.terms]
        exp = np.zeros_like(rel)
        exp[keep] = rel[keep]
        exp /= exp.sum() if exp.sum() > 0 else 1.0
        out.append((1 - rm3.lam) * qi + rm3.lam * exp)
    return sparse.csr_matrix(np.vstack(out))


def weigh_query(ix: Bm25Index, q: sparse.csr_matrix, mode: str) -> sparse.csr_matrix:
    """Query term weights: "idf" (each term weighted by its IDF once more: rare terms count more),
    "sqrt-idf", or "drop-meta" (META_WORDS removed)."""
    if mode == "idf":
        return sparse.csr_matrix(q @ sparse.diags(ix.idf))
    if mode == "sqrt-idf":
        return sparse.csr_matrix(q @ sparse.diags(np.sqrt(ix.idf)))
    if mode == "drop-meta":
        cols = {ix.vocab[i] for w in META_WORDS for i in ix.model.embed_query(w).indices if i in ix.vocab}
        keep = np.ones(q.shape[1])
        keep[list(cols)] = 0.0
        out = sparse.csr_matrix(q @ sparse.diags(keep))
        # a query made only of meta words keeps them rather than matching nothing
        empty = np.asarray(out.sum(axis=1)).ravel() == 0
        if empty.any():
            out = sparse.csr_matrix(sparse.vstack([q.getrow(i) if e else out.getrow(i) for i, e in enumerate(empty)]))
        return out
    raise ValueError(f"unknown query weighting {mode!r} (idf, sqrt-idf, drop-meta)")
