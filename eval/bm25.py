"""Exact BM25 in numpy over a corpus, with the document vectors of qdrant_edge.Bm25 and Qdrant's IDF.

The store indexes ``Bm25.embed_document`` vectors (term-frequency weights with k, b, avg_len) in a
sparse vector with the IDF modifier; at query time Qdrant multiplies each query term's weight by
``ln(1 + (N - n + 0.5) / (n + 0.5))`` with N the number of points and n those holding the term. This
module reproduces that scoring exactly so the options can be swept without a store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import sparse


@dataclass(frozen=True)
class Bm25Spec:
    """Every Bm25Config option we sweep. None keeps qdrant_edge's default."""

    k: float = 1.2
    b: float = 0.75
    avg_len: float = 64.0
    language: str | None = "english"
    tokenizer: str | None = None  # Word (default), Whitespace, Multilingual, Prefix
    stemmer: bool = True  # False: DisabledStemmer
    stopwords: bool = True  # False: an empty StopwordsSet
    ascii_folding: bool | None = None
    min_token_len: int | None = None
    max_token_len: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def config(self):
        from qdrant_edge import Bm25Config, DisabledStemmer, StopwordsSet, TokenizerType

        kw: dict[str, Any] = {"k": self.k, "b": self.b, "avg_len": self.avg_len, "language": self.language}
        if self.tokenizer:
            kw["tokenizer"] = getattr(TokenizerType, self.tokenizer)
        if not self.stemmer:
            kw["stemmer"] = DisabledStemmer()
        if not self.stopwords:
            kw["stopwords"] = StopwordsSet()
        for name in ("ascii_folding", "min_token_len", "max_token_len"):
            if getattr(self, name) is not None:
                kw[name] = getattr(self, name)
        return Bm25Config(**kw)

    def model(self):
        from qdrant_edge import Bm25

        return Bm25(self.config())


def _csr(vectors: list[tuple[list[int], list[float]]], vocab: dict[int, int]) -> sparse.csr_matrix:
    rows, cols, vals = [], [], []
    for r, (idx, val) in enumerate(vectors):
        for i, v in zip(idx, val, strict=True):
            c = vocab.setdefault(i, len(vocab))
            rows.append(r)
            cols.append(c)
            vals.append(v)
    return sparse.csr_matrix((vals, (rows, cols)), shape=(len(vectors), max(1, len(vocab))), dtype=np.float64)


def idf(doc_freq: np.ndarray, n_docs: int) -> np.ndarray:
    """Qdrant's IDF modifier."""
    return np.log(1.0 + (n_docs - doc_freq + 0.5) / (doc_freq + 0.5))


class Bm25Index:
    """One corpus's BM25 document vectors (docs x terms, csr) with Qdrant's IDF per term.

    ``query(texts)`` gives the query vectors (weight 1 per term, as ``Bm25.embed_query``), ``score(q)`` the
    store's scores for any query weights (a weighted query is what an expanded, RM3-style, query sends).
    """

    def __init__(self, spec: Bm25Spec, docs: list[str], extra: list[str] | None = None, weight: float = 0.0) -> None:
        """extra/weight: a second field per document (its context), added as weight x its own BM25 vector,
        so the document's own terms keep their length normalisation (a BM25F-style sum)."""
        self.model = spec.model()
        self.vocab: dict[int, int] = {}
        self.docs = _csr([self._vec(t) for t in docs], self.vocab)
        if extra is not None and weight > 0:
            ctx = _csr([self._vec(t) for t in extra], self.vocab)
            self.docs.resize(ctx.shape)
            self.docs = (self.docs + weight * ctx).tocsr()
        df = np.asarray((self.docs > 0).sum(axis=0)).ravel()
        self.idf = idf(df, self.docs.shape[0])
        self._weighted_t = (self.docs @ sparse.diags(self.idf)).T.tocsr()  # terms x docs, IDF folded in

    def _vec(self, text: str) -> tuple[list[int], list[float]]:
        if not text:
            return [], []
        v = self.model.embed_document(text)
        return list(v.indices), list(v.values)

    def query(self, texts: list[str]) -> sparse.csr_matrix:
        qv = []
        for t in texts:
            v = self.model.embed_query(t)
            # Query terms absent from the corpus score nothing; keep them out of the vocabulary.
            keep = [(self.vocab[i], x) for i, x in zip(v.indices, v.values, strict=True) if i in self.vocab]
            qv.append(([i for i, _ in keep], [x for _, x in keep]))
        rows = [r for r, (ids, _) in enumerate(qv) for _ in ids]
        cols = [i for ids, _ in qv for i in ids]
        vals = [x for _, xs in qv for x in xs]
        return sparse.csr_matrix((vals, (rows, cols)), shape=(len(texts), self.docs.shape[1]), dtype=np.float64)

    def score(self, q: sparse.csr_matrix) -> np.ndarray:
        return np.asarray((q @ self._weighted_t).todense())
