"""The corpora as the store holds them, and per-question score rows for every leg a sweep asks for.

The questions are asked against a ``Memories`` (``eval.memories``: one workspace's unique entries), with
their part (dev/holdout, ``eval.data.holdout``).

A ``Row`` names one scoring of every memory for a query: ``Dense`` (max-sim cosine over the cached
chunk vectors of the rendered text) or ``Sparse`` (the store's BM25 of the rendered text, optionally with
an RM3 expansion or query-side term weights). ``build`` computes the requested rows for every question
and returns ``Q`` objects grouped in views: ``<set>/dev`` and ``<set>/holdout``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from eval import fusion as F
from eval.bm25 import Bm25Index, Bm25Spec
from eval.context import ContextSpec
from eval.data import Corpus, holdout_of, load
from eval.embcache import EmbeddingCache
from eval.memories import Memories
from eval.prf import Rm3, expand, weigh_query
from eval.sentences import pieces as split_pieces

BM25 = Bm25Spec(k=1.2, b=1.0, avg_len=64.0)  # the shipped BM25 (eval/README.md, phase 1)
MAXN = 200  # the deepest prefetch any method asks for


@dataclass(frozen=True)
class Dense:
    ctx: ContextSpec = field(default_factory=ContextSpec)
    model: str = "minilm"
    pool: str = "max"  # "max": multivector max-sim (the store); "head": first chunk only
    mix: float = 0.0  # > 0: unit(v + mix * v_prev) over the previous memory's vector (no re-embedding)
    split: str = ""  # "": the store's 256/32 windows; else eval.sentences modes ("p32", "s1", "+p32": both)
    lead: ContextSpec | None = None  # the context lines (own=False) put before the first piece
    penalty: float = 0.0  # > 0: max-sim - penalty * ln(pieces), the hybrid's dense leg (EPISODIC_RRF_PIECE_PENALTY)
    candidates: int = 0  # > 0 with a penalty: only the raw max-sim top N are re-ranked (the store's inner prefetch)
    common: float = 0.0  # > 0: the query without the words more than this share of the memories hold (the store's)
    prf: tuple[int, float] = (0, 0.0)  # (d, beta): the query moved to unit(q + beta * mean of the top d's best pieces)


@dataclass(frozen=True)
class Sparse:
    ctx: ContextSpec = field(default_factory=ContextSpec)
    bm25: Bm25Spec = BM25
    ctx_field: float = 0.0  # > 0: the context as a second field of this weight beside the turn's own vector
    rm3: Rm3 | None = None
    qweight: str | None = None  # eval.prf.weigh_query modes
    run_doc: bool = False  # score each memory by its whole run (session) as one document (all its texts)


Row = Dense | Sparse


@dataclass
class Q:
    """One question: its score rows (name -> scores over the memories) and cached leg candidates."""

    rows: dict[str, np.ndarray]
    mem: Memories
    evidence: frozenset[str]
    type: str
    _legs: dict = field(default_factory=dict)
    text: str = ""  # the question (the time legs read the times it names)
    id: str = ""
    asked: str = ""  # when it was asked (LongMemEval's question date; LoCoMo: its last session's), Turn.date's form

    def top(self, row: str, n: int) -> np.ndarray:
        """A prefetch: the row's best n, best first; a sparse row returns matched memories only."""
        key = (row, n)
        if key not in self._legs:
            r = self.rows[row]
            idx = F.top(r, n)
            self._legs[key] = idx[r[idx] > 0] if row.startswith("S") else idx
        return self._legs[key]

    def within(self, row: str, n: int, inside: np.ndarray) -> np.ndarray:
        """A prefetch over a filter: the row's best n of the memories where `inside` holds, best first (a
        sparse row: matched ones only)."""
        r = self.rows[row]
        idx = np.flatnonzero(inside & np.isfinite(r) & ((r > 0) if row.startswith("S") else True))
        return idx[np.lexsort((idx, -r[idx]))][:n]

    def over(self, row: str, inner: str, m: int) -> np.ndarray:
        """A nested prefetch: `inner`'s top m re-scored by `row` (zero sparse scores dropped)."""
        key = (row, inner, m)
        if key not in self._legs:
            c = self.top(inner, m)
            r = self.rows[row]
            if row.startswith("S"):
                c = c[r[c] > 0]
            self._legs[key] = c[np.lexsort((c, -r[c]))]
        return self._legs[key]


_CACHES: dict[str, EmbeddingCache] = {}


def cache(model: str) -> EmbeddingCache:
    if model not in _CACHES:
        _CACHES[model] = EmbeddingCache(model)
    return _CACHES[model]


def informative_queries(mem: Memories, queries: list[str], above: float) -> list[str]:
    """The queries as the recall engine embeds them for the hybrid's dense leg (`episodic.domain.common_terms`):
    without the words held by more than `above` of the memories (here all of them, the engine a sample)."""
    from episodic.domain.common_terms import TermShares, informative
    from episodic.store.sparse import Bm25Encoder

    enc = Bm25Encoder()
    shares = TermShares.of(enc.document(t).indices for t in mem.texts(ContextSpec()))
    return [informative(q, lambda w: enc.query(w).indices, shares, above) for q in queries]


def dense_rows(mem: Memories, queries: list[str], row: Dense) -> np.ndarray | None:
    """Cosine, queries x memories; None when a chunk is not in the model's embedding cache."""
    c = cache(row.model)
    asked = list(queries)
    if row.common > 0:  # new query texts: embedded here (a query is short; the documents' vectors are cached)
        queries = informative_queries(mem, queries, row.common)
        if missing := c.missing(queries, "query"):
            c.fill(missing, "query")
    chunk = c.chunker()
    pieces: list[str] = []
    owner: list[int] = []
    leads = mem.texts(row.lead, own=False) if row.lead is not None else None
    for i, text in enumerate(mem.texts(row.ctx)):
        ch = split_pieces(text, row.split, chunk) if row.split else chunk(text)
        if leads and leads[i]:
            ch = [f"{leads[i]}\n{ch[0]}", *ch[1:]]
        if row.pool == "head":
            ch = ch[:1]
        pieces.extend(ch)
        owner.extend([i] * len(ch))
    if c.missing(pieces) or c.missing(queries, "query"):
        return None
    dm = c.matrix(pieces)
    qm = c.matrix(queries, kind="query")
    starts = np.flatnonzero(np.r_[True, np.diff(owner) != 0])
    if row.mix:  # every chunk plus the previous memory's first-chunk vector, renormalised
        prev = mem.prev[np.asarray(owner)]
        dm = dm + row.mix * np.where((prev >= 0)[:, None], dm[starts[np.maximum(prev, 0)]], 0.0)
        dm /= np.linalg.norm(dm, axis=1, keepdims=True)
    counts = np.diff(np.r_[starts, len(owner)])
    if row in KEEP:
        VECTORS[(id(mem), row)] = (dict(zip(asked, qm, strict=True)), dm, starts, counts)
    sims = _scored(qm, dm, starts, counts, row)
    d, beta = row.prf
    if d > 0 and beta > 0:  # dense pseudo-relevance feedback (Rocchio over the first pass's best pieces)
        top = np.argsort(-sims, axis=1, kind="stable")[:, :d]
        moved = np.stack([_moved(qm[qi], dm, starts, counts, top[qi], beta) for qi in range(len(qm))])
        sims = _scored(moved, dm, starts, counts, row)
    return sims


# the vectors behind the dense rows in KEEP, for methods that ask the dense leg again (eval.methods.fused_prf):
# (id(memories), row) -> (query text -> its vector as embedded, piece matrix, each memory's first piece, counts);
# only those rows, so that a sweep does not hold every row's piece matrix
KEEP: set[Dense] = set()
VECTORS: dict[tuple[int, Dense], tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]] = {}


def _moved(
    v: np.ndarray, dm: np.ndarray, starts: np.ndarray, counts: np.ndarray, toward: np.ndarray, beta: float
) -> np.ndarray:
    """unit(v + beta x the mean of the memories `toward`, each by its best piece for `v`)."""
    best = [starts[m] + int(np.argmax(dm[starts[m] : starts[m] + counts[m]] @ v)) for m in toward]
    v = v + beta * dm[best].mean(axis=0)
    return v / np.linalg.norm(v)


def moved_row(q: Q, row: Dense, text: str, toward: np.ndarray, beta: float) -> np.ndarray:
    """The dense row (one in KEEP when it was built) asked again with its query moved towards the memories
    `toward` (``_moved``)."""
    qv, dm, starts, counts = VECTORS[(id(q.mem), row)]
    return _scored(_moved(qv[text], dm, starts, counts, toward, beta)[None, :], dm, starts, counts, row)[0]


def _scored(qm: np.ndarray, dm: np.ndarray, starts: np.ndarray, counts: np.ndarray, row: Dense) -> np.ndarray:
    """Max-sim over each memory's pieces, with the store's piece prior over its candidates."""
    sims = np.maximum.reduceat(qm @ dm.T, starts, axis=1)
    if row.penalty:  # the store's piece prior over its count of rows (store_query.DenseLeg.piece_penalty)
        penalised = sims - row.penalty * np.log(counts)[None, :]
        if row.candidates and row.candidates < sims.shape[1]:
            raw_top = np.argpartition(-sims, row.candidates - 1, axis=1)[:, : row.candidates]
            keep = np.zeros(sims.shape, dtype=bool)
            np.put_along_axis(keep, raw_top, True, axis=1)
            penalised = np.where(keep, penalised, -np.inf)
        sims = penalised
    return sims


def sparse_rows(mem: Memories, queries: list[str], row: Sparse) -> np.ndarray:
    if row.ctx_field:
        ix = Bm25Index(row.bm25, mem.texts(ContextSpec()), mem.texts(row.ctx, own=False), row.ctx_field)
    elif row.run_doc:  # one document per run: its memories' texts joined; every memory gets its run's score
        docs: list[list[str]] = [[] for _ in range(int(mem.run.max()) + 1 if len(mem.run) else 0)]
        for r, t in zip(mem.run.tolist(), mem.texts(row.ctx), strict=True):
            docs[r].append(t)
        ix = Bm25Index(row.bm25, ["\n".join(d) for d in docs])
        return ix.score(ix.query(queries))[:, mem.run]
    else:
        ix = Bm25Index(row.bm25, mem.texts(row.ctx))
    q = ix.query(queries)
    if row.qweight:
        q = weigh_query(ix, q, row.qweight)
    s = ix.score(q)
    if row.rm3 is not None:
        s = ix.score(expand(ix, q, s, row.rm3))
    return s


@dataclass
class Views:
    views: dict[str, list[Q]]
    skipped: dict[str, int]  # corpora left out per set (a dense row not cached yet)
    by_category: bool = False  # eval.sweep adds the knowledge-update columns (ku/dev, ku/holdout)
    by_type: bool = False  # eval.sweep scores every question type apart ('<set>/<part>/<type>') in a long table


_MEM: dict[str, Memories] = {}


def build(sets: Mapping[str, list[Corpus] | None], rows: Mapping[str, Row]) -> Views:
    """Views '<set>/dev' and '<set>/holdout' with every requested row computed for every question.

    Row names starting with "S" must be Sparse rows (their prefetches keep matched memories only)."""
    out: dict[str, list[Q]] = {}
    skipped: dict[str, int] = {}
    for name, corpora in sets.items():
        corpora = corpora if corpora is not None else load(name)
        hold = holdout_of(corpora)
        out[f"{name}/dev"], out[f"{name}/holdout"] = [], []
        for c in corpora:
            mem = _MEM.setdefault(c.name, Memories.build(c))
            qs = c.scored_questions
            texts = [q.question for q in qs]
            mats: dict[str, np.ndarray] = {}
            for rn, row in rows.items():
                if rn.startswith("S") != isinstance(row, Sparse):
                    raise ValueError(f"row {rn!r}: names starting with 'S' are sparse rows, others dense")
                m = sparse_rows(mem, texts, row) if isinstance(row, Sparse) else dense_rows(mem, texts, row)
                if m is None:
                    break
                mats[rn] = m
            if len(mats) < len(rows):
                skipped[name] = skipped.get(name, 0) + 1
                continue
            for qi, q in enumerate(qs):
                part = "holdout" if q.id in hold else "dev"
                out[f"{name}/{part}"].append(
                    Q(
                        {rn: m[qi] for rn, m in mats.items()},
                        mem,
                        q.evidence,
                        q.type,
                        text=q.question,
                        id=q.id,
                        asked=q.date,
                    )
                )
    return Views(out, skipped)
