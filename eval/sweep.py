"""Phase-1 sweeps: exact dense, BM25 and fusions in numpy over cached embeddings (no pipeline).

    python -m eval.sweep [--set oracle|s|both] [--part bm25|text|chunk|fusion|all]

Needs the embedding cache (``python -m eval.embcache``); s haystacks whose chunks are not cached yet
are skipped and the count is printed. Results go to stdout and eval/results/sweep-<part>.txt.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np

from episodic.identity import normalise_summary
from eval import fusion as F
from eval.bm25 import Bm25Spec
from eval.bm25 import scores as bm25_scores
from eval.data import Corpus, load
from eval.embcache import RESULTS, EmbeddingCache
from eval.metrics import Score, score


@dataclass
class Prepared:
    """One corpus as the store would hold it: unique (normalised) texts with their alias turn ids."""

    corpus: Corpus
    role: bool
    docs: list[str] = field(default_factory=list)
    aliases: list[list[str]] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    evidence: list[frozenset[str]] = field(default_factory=list)
    types: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, corpus: Corpus, role: bool = True) -> Prepared:
        p = cls(corpus, role)
        where: dict[str, int] = {}
        for t in corpus.turns:
            text = t.text(role)
            nk = normalise_summary(text)
            if nk in where:
                p.aliases[where[nk]].append(t.id)
                continue
            where[nk] = len(p.docs)
            p.docs.append(text)
            p.aliases.append([t.id])
        for q in corpus.scored_questions:
            p.queries.append(q.question)
            p.evidence.append(q.evidence)
            p.types.append(q.type)
        return p


_CACHE: EmbeddingCache | None = None
_CHUNKERS: dict[tuple[int, int], Callable[[str], list[str]]] = {}


def emb_cache() -> EmbeddingCache:
    global _CACHE
    if _CACHE is None:
        _CACHE = EmbeddingCache()
    return _CACHE


def chunker(tokens: int, overlap: int) -> Callable[[str], list[str]]:
    if (tokens, overlap) not in _CHUNKERS:
        _CHUNKERS[(tokens, overlap)] = emb_cache().chunker(tokens, overlap)
    return _CHUNKERS[(tokens, overlap)]


@cache
def _chunks(text: str, tokens: int, overlap: int) -> tuple[str, ...]:
    return tuple(chunker(tokens, overlap)(text))


def dense_scores(p: Prepared, tokens: int = 256, overlap: int = 32, pool: str = "max") -> np.ndarray | None:
    """Cosine, queries × docs; None when some chunk is not in the embedding cache.

    pool: "max" (multivector max-sim over the chunks, the store's scoring), "head" (the first chunk only:
    what plain truncation at 256 word pieces embeds), "mean" (one vector per doc: the normalised mean
    of its chunk vectors).
    """
    c = emb_cache()
    pieces: list[str] = []
    owner: list[int] = []
    for i, d in enumerate(p.docs):
        ch = _chunks(d, tokens, overlap)
        if pool == "head":
            ch = ch[:1]
        pieces.extend(ch)
        owner.extend([i] * len(ch))
    if c.missing(pieces):
        return None
    dm = c.matrix(pieces)
    qm = c.matrix(p.queries, kind="query")
    starts = np.flatnonzero(np.r_[True, np.diff(owner) != 0])
    if pool == "mean":
        sums = np.add.reduceat(dm, starts, axis=0)
        docs = sums / np.linalg.norm(sums, axis=1, keepdims=True)
        return qm @ docs.T
    return np.maximum.reduceat(qm @ dm.T, starts, axis=1)


def hits(p: Prepared, order: Iterable[int]) -> list[list[str]]:
    return [p.aliases[i] for i in order]


# ---- methods: (dense row, sparse row) -> top-10 doc indices -------------------------------------------

Method = Callable[[np.ndarray, np.ndarray], list[int]]


def m_dense(d: np.ndarray, s: np.ndarray) -> list[int]:
    return list(F.top(d, 10))


def m_sparse(d: np.ndarray, s: np.ndarray) -> list[int]:
    t = F.top(s, 10)
    return [int(i) for i in t if s[i] > 0]


def m_rrf(k: int, wd: float = 1.0, ws: float = 1.0, limit: int = 100) -> Method:
    def run(d: np.ndarray, s: np.ndarray) -> list[int]:
        td, ts = F.top(d, limit), F.top(s, limit)
        ts = ts[s[ts] > 0]
        return F.ranked(F.rrf([td, ts], k, [wd, ws]), 10)

    return run


def m_dbsf(limit: int = 100, wd: float = 1.0, ws: float = 1.0) -> Method:
    def run(d: np.ndarray, s: np.ndarray) -> list[int]:
        td, ts = F.top(d, limit), F.top(s, limit)
        ts = ts[s[ts] > 0]
        return F.ranked(F.dbsf([(td, d[td]), (ts, s[ts])], [wd, ws]), 10)

    return run


def m_minmax(wd: float, ws: float, limit: int = 100) -> Method:
    def run(d: np.ndarray, s: np.ndarray) -> list[int]:
        td, ts = F.top(d, limit), F.top(s, limit)
        ts = ts[s[ts] > 0]
        return F.ranked(F.minmax([(td, d[td]), (ts, s[ts])], [wd, ws]), 10)

    return run


def m_formula(wd: float, ws: float, c: float, limit: int = 100) -> Method:
    def run(d: np.ndarray, s: np.ndarray) -> list[int]:
        td, ts = F.top(d, limit), F.top(s, limit)
        ts = ts[s[ts] > 0]
        return F.ranked(F.formula((td, d[td]), (ts, s[ts]), wd, ws, c), 10)

    return run


def m_mult(gamma: float, limit: int = 100) -> Method:
    """Formula bm25 · exp(γ · cos) over both prefetches (missing bm25 = 0): BM25 boosted by the dense leg."""

    def run(d: np.ndarray, s: np.ndarray) -> list[int]:
        td, ts = F.top(d, limit), F.top(s, limit)
        ts = ts[s[ts] > 0]
        dd = {int(i): float(d[i]) for i in td}
        ss = {int(i): float(s[i]) for i in ts}
        return F.ranked({i: ss.get(i, 0.0) * float(np.exp(gamma * dd.get(i, 0.0))) for i in dd.keys() | ss.keys()}, 10)

    return run


# ---- evaluation -------------------------------------------------------------------------------------


@dataclass
class Legs:
    """Per-corpus dense and sparse score matrices for one configuration."""

    items: list[tuple[Prepared, np.ndarray, np.ndarray]]
    skipped: int = 0

    def run(self, method: Method, qtype: str | None = None) -> Score:
        pairs = []
        for p, dm, sm in self.items:
            for qi in range(len(p.queries)):
                if qtype and p.types[qi] != qtype:
                    continue
                pairs.append((hits(p, method(dm[qi], sm[qi])), p.evidence[qi]))
        return score(pairs)


def legs(
    corpora: list[Corpus],
    *,
    role_dense: bool = True,
    role_sparse: bool = True,
    bm25: Bm25Spec | None = None,
    tokens: int = 256,
    overlap: int = 32,
    pool: str = "max",
    need_dense: bool = True,
) -> Legs:
    bm25 = bm25 or Bm25Spec()
    out = Legs([])
    for c in corpora:
        pd_ = _prepared(c, role_dense)
        ps = _prepared(c, role_sparse)
        if need_dense:
            dm = _dense(c, role_dense, tokens, overlap, pool)
            if dm is None:
                out.skipped += 1
                continue
        else:
            dm = np.zeros((len(pd_.queries), len(pd_.docs)))
        sm = _sparse(c, role_sparse, bm25)
        if len(ps.docs) != len(pd_.docs):  # the two texts dedupe differently: score on the dense docs
            sm = _remap(ps, pd_, sm)
        out.items.append((pd_, dm, sm))
    return out


_PREP: dict[tuple[str, bool], Prepared] = {}
_DENSE: dict[tuple, np.ndarray | None] = {}
_SPARSE: dict[tuple, np.ndarray] = {}


def _prepared(c: Corpus, role: bool) -> Prepared:
    k = (c.name, role)
    if k not in _PREP:
        _PREP[k] = Prepared.build(c, role)
    return _PREP[k]


def _dense(c: Corpus, role: bool, tokens: int, overlap: int, pool: str) -> np.ndarray | None:
    k = (c.name, role, tokens, overlap, pool)
    if _DENSE.get(k) is None:
        _DENSE[k] = dense_scores(_prepared(c, role), tokens, overlap, pool)
    return _DENSE[k]


def _sparse(c: Corpus, role: bool, spec: Bm25Spec) -> np.ndarray:
    k = (c.name, role, spec)
    if k not in _SPARSE:
        p = _prepared(c, role)
        _SPARSE[k] = bm25_scores(spec, p.docs, p.queries)
    return _SPARSE[k]


def _remap(src: Prepared, dst: Prepared, sm: np.ndarray) -> np.ndarray:
    """Scores of src's docs moved onto dst's docs via their first turn id (max over merged docs)."""
    first = {a: i for i, al in enumerate(src.aliases) for a in al}
    out = np.zeros((sm.shape[0], len(dst.docs)))
    for j, al in enumerate(dst.aliases):
        out[:, j] = sm[:, [first[a] for a in al]].max(axis=1)
    return out


# ---- parts ---------------------------------------------------------------------------------------------

SETS = ("oracle", "s", "asst")
# "asst": the oracle's single-session-assistant questions, whose evidence is in (long) assistant turns:
# a check that a choice does not just exploit this set's short user-turn evidence.
ASST = "single-session-assistant"
BASE = {"rrf60 (seed)": m_rrf(60)}


def fmt(rows: list[dict], title: str) -> str:
    """Wide table: one line per (config, method), R@5/R@10 per set."""
    sets = sorted({r["set"] for r in rows}, key=lambda s: SETS.index(s))
    keys = list(dict.fromkeys((r["config"], r["method"]) for r in rows))
    by = {(r["set"], r["config"], r["method"]): r for r in rows}
    w = max(len(f"{c} | {m}") for c, m in keys)
    head = (
        f"{'config | method':<{w}}"
        + "".join(f"  {s + ' R@5':>11} {s + ' R@10':>11} {s + ' hit@10':>12}" for s in sets)
        + "  mean R@10"
    )
    lines = [f"## {title}", head, "-" * len(head)]
    for c, m in keys:
        cells = ""
        r10s = []
        for s in sets:
            r = by.get((s, c, m))
            if r is None:
                cells += f"  {'-':>11} {'-':>11} {'-':>12}"
                continue
            cells += f"  {r['r5']:>11.3f} {r['r10']:>11.3f} {r['h10']:>12.3f}"
            r10s.append(r["r10"])
        lines.append(f"{f'{c} | {m}':<{w}}{cells}  {np.mean(r10s):>9.3f}")
    skipped = {r["set"]: r["skipped"] for r in rows if r["skipped"]}
    if skipped:
        lines.append(f"(corpora skipped, embeddings not cached yet: {skipped})")
    return "\n".join(lines)


def _rows(sets, configs, methods):
    rows = []
    for cname, kw in configs:
        for sname, corpora in sets.items():
            lg = legs(corpora, **kw)
            for mname, m in methods.items():
                for label, qtype in [(sname, None)] + ([("asst", ASST)] if sname == "oracle" else []):
                    s = lg.run(m, qtype)
                    rows.append(
                        {
                            "set": label,
                            "config": cname,
                            "method": mname,
                            "skipped": lg.skipped,
                            "n": s.n,
                            "r5": s.recall5,
                            "r10": s.recall10,
                            "h5": s.hit5,
                            "h10": s.hit10,
                        }
                    )
    return rows


def part_bm25(sets) -> list[tuple[str, list[dict]]]:
    base = Bm25Spec()
    specs = {
        "current (english, stem+stop, k1.2 b.75 avg64)": base,
        "no stemmer": replace(base, stemmer=False),
        "no stopwords": replace(base, stopwords=False),
        "no stem, no stop": replace(base, stemmer=False, stopwords=False),
        "ascii_folding": replace(base, ascii_folding=True),
        "min_token_len 2": replace(base, min_token_len=2),
        "tokenizer Whitespace": replace(base, tokenizer="Whitespace"),
        "tokenizer Multilingual": replace(base, tokenizer="Multilingual"),
        "avg_len 16": replace(base, avg_len=16),
        "avg_len 32": replace(base, avg_len=32),
        "avg_len 128": replace(base, avg_len=128),
        "avg_len 256 (qdrant default)": replace(base, avg_len=256),
        "b 0.5": replace(base, b=0.5),
        "b 0.9": replace(base, b=0.9),
        "b 1.0": replace(base, b=1.0),
        "b 0.3": replace(base, b=0.3),
        "k 0.9": replace(base, k=0.9),
        "k 1.5": replace(base, k=1.5),
        "k 2.0": replace(base, k=2.0),
    }
    configs = [(n, {"bm25": s, "need_dense": False}) for n, s in specs.items()]
    rows = _rows(sets, configs, {"sparse": m_sparse})
    out = [("BM25 options (sparse leg alone)", rows)]
    return out


def part_bm25grid(sets) -> list[tuple[str, list[dict]]]:
    configs = []
    for b, avg, k in itertools.product((0.75, 0.9, 1.0), (24, 32, 48, 64, 100), (1.2, 1.6)):
        spec = Bm25Spec(k=k, b=b, avg_len=avg)
        configs.append((f"b={b} avg_len={avg} k={k}", {"bm25": spec, "need_dense": False}))
    for role in (True, False):
        for stop in (True, False):
            spec = Bm25Spec(k=1.2, b=0.75, avg_len=64, stopwords=stop)
            configs.append(
                (
                    f"role={role} stopwords={stop} (b=.75 avg=64)",
                    {"bm25": spec, "role_sparse": role, "need_dense": False},
                )
            )
    return [("BM25 k/b/avg_len grid and indexed text (sparse leg alone)", _rows(sets, configs, {"sparse": m_sparse}))]


def part_text(sets, bm25: Bm25Spec | None = None) -> list[tuple[str, list[dict]]]:
    configs = [
        ("role prefix on both legs", {"bm25": bm25}),
        ("content only, both legs", {"role_dense": False, "role_sparse": False, "bm25": bm25}),
        ("dense content / sparse role", {"role_dense": False, "role_sparse": True, "bm25": bm25}),
        ("dense role / sparse content", {"role_dense": True, "role_sparse": False, "bm25": bm25}),
    ]
    methods = {"dense": m_dense, "sparse": m_sparse, **BASE}
    return [("Indexed text (role prefix)", _rows(sets, configs, methods))]


def part_chunk(sets, bm25: Bm25Spec | None = None) -> list[tuple[str, list[dict]]]:
    configs = [
        ("head only (truncate at 256)", {"pool": "head", "bm25": bm25}),
        ("chunks 256/32 + max-sim", {"bm25": bm25}),
        ("chunks 256/32, mean vector", {"pool": "mean", "bm25": bm25}),
        ("chunks 256/0 + max-sim", {"overlap": 0, "bm25": bm25}),
    ]
    extra = [
        ("chunks 128/32 + max-sim", {"tokens": 128, "overlap": 32, "bm25": bm25}),
        ("chunks 128/32, mean vector", {"tokens": 128, "overlap": 32, "pool": "mean", "bm25": bm25}),
    ]
    methods = {"dense": m_dense, **BASE}
    return [("Chunking (dense leg)", _rows(sets, configs + extra, methods))]


def fusion_methods() -> dict[str, Method]:
    ms: dict[str, Method] = {"dense": m_dense, "sparse": m_sparse}
    for k in (2, 10, 20, 60):
        for wd, ws in ((1, 1), (1, 0.5), (1, 0.75), (0.75, 1), (0.5, 1), (1, 0.25), (2, 1), (1, 2), (3, 1)):
            ms[f"rrf k={k} w={wd}/{ws}"] = m_rrf(k, wd, ws)
    for k in (1, 2, 3, 5):
        for wd in (0.2, 0.3, 0.4, 0.5, 0.6):
            ms[f"rrf k={k} w={wd}/1"] = m_rrf(k, wd, 1.0)
    ms["dbsf"] = m_dbsf()
    ms["dbsf [dense, sparse, sparse]"] = m_dbsf(wd=1.0, ws=2.0)  # a doubled prefetch = weight 2
    for wd, ws in ((1, 0.5), (1, 0.75), (0.75, 1), (0.5, 1)):
        ms[f"dbsf* w={wd}/{ws}"] = m_dbsf(wd=wd, ws=ws)
    for wd, ws in ((1, 1), (1, 0.5), (1, 0.75), (0.5, 1)):
        ms[f"minmax* w={wd}/{ws}"] = m_minmax(wd, ws)
    for ws in (0.5, 1.0, 2.0, 4.0):
        for c in (5.0, 10.0, 20.0):
            ms[f"formula cos+{ws}*b/(b+{c:g})"] = m_formula(1.0, ws, c)
    for g in (2.0, 4.0, 8.0):
        ms[f"formula bm25*exp({g:g}*cos)"] = m_mult(g)
    return ms


def part_fusion(sets, bm25: Bm25Spec | None = None, pool: str = "max") -> list[tuple[str, list[dict]]]:
    cfg = [(f"dense {pool}", {"bm25": bm25, "pool": pool})]
    rows = _rows(sets, cfg, fusion_methods())
    return [("Fusion methods (prefetch 100; * = not expressible in the engine)", rows)]


def part_prefetch(
    sets, method: Callable[[int], Method], name: str, bm25: Bm25Spec | None = None, pool: str = "max"
) -> list[tuple[str, list[dict]]]:
    ms = {f"{name} prefetch {n}": method(n) for n in (20, 50, 100, 200, 500)}
    return [("Prefetch limit", _rows(sets, [(f"dense {pool}", {"bm25": bm25, "pool": pool})], ms))]


RECOMMENDED_BM25 = Bm25Spec(k=1.2, b=1.0, avg_len=64.0)


def robust(bm25: Bm25Spec | None = None, pool: str = "max") -> str:
    """Engine-expressible fusions on four views, ranked by their mean R@5/R@10, with the worst margin
    over the best single leg: the full pooled oracle, its assistant-evidence questions, a smaller pooled
    oracle (first 150 questions, 1.7k turns) and the s haystacks."""
    spec = bm25 or RECOMMENDED_BM25
    views = {
        "oracle": (load("oracle"), None),
        "asst": (load("oracle"), ASST),
        "o150": (load("oracle", limit=150), None),
        "s": (load("s"), None),
    }
    methods: dict[str, Method] = {"dense": m_dense, "sparse": m_sparse, "rrf60 (seed)": m_rrf(60)}
    for k in (1, 2, 3, 5):
        for wd in (0.3, 0.4, 0.5, 0.6, 0.75, 1.0):
            methods[f"rrf k={k} w={wd}/1"] = m_rrf(k, wd, 1.0)
    methods["dbsf"] = m_dbsf()
    methods["dbsf [d,s,s]"] = m_dbsf(wd=1, ws=2)
    methods["dbsf [d,s,s,s]"] = m_dbsf(wd=1, ws=3)
    lgs = {v: legs(c, bm25=spec, pool=pool) for v, (c, _) in views.items()}
    res = {m: {v: lgs[v].run(f, qt) for v, (_, qt) in views.items()} for m, f in methods.items()}
    attrs = ("recall5", "recall10")

    def best_leg(v: str, a: str) -> float:
        return max(getattr(res["dense"][v], a), getattr(res["sparse"][v], a))

    rows = []
    for m, r in res.items():
        margin = min(getattr(r[v], a) - best_leg(v, a) for v in views for a in attrs)
        mean = float(np.mean([getattr(r[v], a) for v in views for a in attrs]))
        rows.append((mean, margin, m, r))
    rows.sort(key=lambda x: -x[0])
    n = ", ".join(f"{v}={res['dense'][v].n}" for v in views)
    lines = [f"## Fusion robustness (R@5/R@10 per view; BM25 {spec}; dense {pool}; questions: {n})"]
    for mean, margin, m, r in rows:
        cells = " ".join(f"{v} {r[v].recall5:.3f}/{r[v].recall10:.3f}" for v in views)
        lines.append(f"{m:18} mean {mean:.3f} worst-margin-vs-best-leg {margin:+.3f} | {cells}")
    return "\n".join(lines)


def part_final(sets, bm25: Bm25Spec | None = None, pool: str = "max") -> list[tuple[str, list[dict]]]:
    """The decision table: the seed's setup against the recommended one, same embeddings."""
    seed = [("seed BM25 (b=0.75)", {"bm25": Bm25Spec(), "pool": pool})]
    seed_methods = {"dense": m_dense, "sparse": m_sparse, "rrf60 (seed)": m_rrf(60)}
    rec = [("tuned BM25 (b=1.0)", {"bm25": bm25 or RECOMMENDED_BM25, "pool": pool})]
    rec_methods = {
        "sparse": m_sparse,
        "rrf60 (seed)": m_rrf(60),
        "HYBRID rrf k=2 w=0.5/1": m_rrf(2, 0.5, 1.0),
        "rrf k=2 w=1/1": m_rrf(2, 1.0, 1.0),
        "dbsf [dense, sparse, sparse]": m_dbsf(wd=1.0, ws=2.0),
        "dbsf": m_dbsf(),
    }
    return [("Decision table (prefetch 100)", _rows(sets, seed, seed_methods) + _rows(sets, rec, rec_methods))]


def parse_bm25(text: str | None) -> Bm25Spec:
    """'b=1.0,avg_len=48,stopwords=0' -> Bm25Spec (unset fields keep the current defaults)."""
    spec = Bm25Spec()
    if not text:
        return spec
    kw: dict[str, object] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        cur = getattr(spec, name.strip())
        kw[name.strip()] = value.strip() in ("1", "true", "True") if isinstance(cur, bool) else type(cur or 0.0)(value)
    return replace(spec, **kw)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--set", default="both", choices=["oracle", "s", "both"])
    ap.add_argument(
        "--part",
        default="all",
        choices=["bm25", "bm25grid", "text", "chunk", "fusion", "prefetch", "final", "robust", "all"],
    )
    ap.add_argument("--bm25", default=None, help="BM25 options for the non-BM25 parts, e.g. b=1.0,avg_len=48")
    ap.add_argument("--pool", default="max", choices=["max", "head", "mean"], help="dense leg for fusion parts")
    ap.add_argument("--limit", type=int, default=None, help="first N questions of each set")
    ap.add_argument("--tag", default="", help="suffix of the result files")
    a = ap.parse_args(argv)
    names = ("oracle", "s") if a.set == "both" else (a.set,)
    sets = {n: load(n, limit=a.limit) for n in names}
    spec = parse_bm25(a.bm25)
    parts = (
        ["bm25", "bm25grid", "text", "chunk", "fusion", "prefetch", "final", "robust"] if a.part == "all" else [a.part]
    )
    for part in parts:
        t0 = time.monotonic()
        if part == "robust":
            text = robust(parse_bm25(a.bm25) if a.bm25 else None, a.pool)
            print(text, flush=True)
            (RESULTS / f"sweep-robust{a.tag}.txt").write_text(text + "\n")
            continue
        if part in ("bm25", "bm25grid"):
            out = globals()[f"part_{part}"](sets)
        elif part == "prefetch":
            out = part_prefetch(sets, lambda n: m_rrf(60, limit=n), "rrf60", bm25=spec, pool=a.pool)
        elif part == "fusion":
            out = part_fusion(sets, bm25=spec, pool=a.pool)
        elif part == "final":
            out = part_final(sets, bm25=parse_bm25(a.bm25) if a.bm25 else None, pool=a.pool)
        else:
            out = globals()[f"part_{part}"](sets, bm25=spec)
        text = f"BM25 for this part: {spec}\n" + "\n\n".join(fmt(rows, title) for title, rows in out)
        print(text + f"\n({time.monotonic() - t0:.0f}s)\n", flush=True)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"sweep-{part}{a.tag}.txt").write_text(text + "\n")
        (RESULTS / f"sweep-{part}{a.tag}.json").write_text(json.dumps([r for _, rows in out for r in rows], indent=1))


if __name__ == "__main__":
    sys.exit(main())
