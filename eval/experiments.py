"""The experiments of ``python -m eval.sweep``: which rows to compute and which methods to score.

Row names: D = the dense leg (MiniLM, "role: content", chunks 256/32, max-sim), S = BM25 (b=1.0) of
"role: content"; other names say what they fold in (``eval.context.ContextSpec.label``).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from episodic.kernel.settings import FUSION_BY_CHUNK_MODE, Settings
from eval.bm25 import Bm25Spec
from eval.context import ContextSpec, parse_ctx
from eval.methods import Method, adjacent, dbsf, default_hybrid, formula, fused_prf, lexical, rrf, single, tree
from eval.prf import Rm3
from eval.views import KEEP, Dense, Sparse, Views, build

log = logging.getLogger("eval.sweep")

Result = tuple[Views, dict[str, Method], str]


def base_methods() -> dict[str, Method]:
    return {"dense (D)": single("D"), "bm25 (S)": single("S"), "default hybrid": default_hybrid()}


def legs(a: argparse.Namespace) -> Result:
    views = build(a.sets, {"D": Dense(), "S": Sparse()})
    ms = base_methods()
    ms["rrf60 (seed)"] = rrf([("D", 100), ("S", 100)], 60, [1, 1])
    return views, ms, "Single legs and today's default"


BM25_CONTEXTS: dict[str, Sparse] = {
    "date": Sparse(ctx=ContextSpec(date=True)),
    **{f"prev{n}": Sparse(ctx=ContextSpec(prev=n)) for n in (1, 2)},
    **{f"prev{n}/{w}w": Sparse(ctx=ContextSpec(prev=n, words=w)) for n in (1, 2, 3) for w in (8, 16, 32)},
    "date+prev1/16w": Sparse(ctx=ContextSpec(prev=1, words=16, date=True)),
    # the context as a second field beside the turn's own vector (weight f): no length dilution
    **{f"prev{n} field {f}": Sparse(ctx=ContextSpec(prev=n), ctx_field=f) for n in (1, 2) for f in (0.1, 0.25)},
    "date+prev1 field 0.25": Sparse(ctx=ContextSpec(prev=1, date=True), ctx_field=0.25),
}


def bm25_context(a: argparse.Namespace) -> Result:
    rows: dict = {"D": Dense(), "S": Sparse()}
    rows.update({"S:" + n: r for n, r in BM25_CONTEXTS.items()})
    views = build(a.sets, rows)
    ms = base_methods()
    for rn in rows:
        if rn.startswith("S:"):
            ms[f"bm25 {rn[2:]}"] = single(rn)
            ms[f"hybrid, BM25 leg = {rn[2:]}"] = default_hybrid("D", rn)
            # an extra sparse leg: the turn's own BM25 stays, the context-folded one joins it
            ms[f"hybrid + {rn[2:]} leg"] = rrf(
                [("D", 100), ("S", "D", 100), ("S", 100), ("S", 5), (rn, 100)], 3, [1.0, 0.5, 1.0, 0.75, 1.0]
            )
    return views, ms, "Context-aware BM25 (dense leg unchanged)"


def dense_context(a: argparse.Namespace) -> Result:
    ctx = parse_ctx(a.ctx) if getattr(a, "ctx", None) else ContextSpec(prev=1, words=32)
    sctx = parse_ctx(a.sctx) if getattr(a, "sctx", None) else ContextSpec(prev=1, words=None, date=True)
    rows: dict = {"D": Dense(), "S": Sparse(), "Sc": Sparse(ctx=sctx)}
    for mix in (0.25, 0.5, 1.0):
        rows[f"Dmix{mix}"] = Dense(mix=mix)
    if not ctx.off:  # --ctx prev=0: the vector mixes only (nothing to embed)
        rows["Dc"] = Dense(ctx=ctx)
    views = build(a.sets, rows)
    ms = base_methods()
    for rn in rows:
        if rn.startswith("D") and rn != "D":
            ms[f"dense {rn}"] = single(rn)
            ms[f"hybrid, dense leg = {rn}"] = default_hybrid(rn, "S")
            ms[f"hybrid, dense = {rn}, BM25 = Sc"] = default_hybrid(rn, "Sc")
    ms["hybrid, BM25 = Sc"] = default_hybrid("D", "Sc")
    title = f"Context-aware dense leg (Dc = {ctx.label()}; Sc = BM25 {sctx.label()}; DmixA = unit(v + A v_prev))"
    return views, ms, title


def adjacency(a: argparse.Namespace) -> Result:
    sctx = parse_ctx(a.sctx) if getattr(a, "sctx", None) else ContextSpec(prev=1, date=True)
    views = build(a.sets, {"D": Dense(), "S": Sparse(), "Sc": Sparse(ctx=sctx), "SC": Sparse(ctx=RECOMMENDED_CONTEXT)})
    ms = base_methods()
    for name, inner in (("default", default_hybrid()), ("Sc hybrid", default_hybrid("D", "Sc"))):
        ms[name] = inner
        for which in ("next", "prev", "both"):
            for hits in (1, 3, 10):
                ms[f"{name} + adjacent {which}, top {hits} hits, right below"] = adjacent(inner, which, 0.0, hits)
            for f in (0.5, 0.9):
                ms[f"{name} + adjacent {which}, all hits, score x{f}"] = adjacent(inner, which, f, 10)
    # the product (episodic.retrieval.engine): k direct hits, each with its previous and next memory at f x its score,
    # over the shipped five-leg tree
    ms["shipped five-leg tree"] = recommended()
    for f in (0.5, 0.9):
        ms[f"shipped tree + adjacent (product: 10 direct, both, x{f})"] = adjacent(recommended(), "both", f, 10, 10)
    return views, ms, f"Episode adjacency (Sc = BM25 {sctx.label()})"


def prf(a: argparse.Namespace) -> Result:
    sctx = parse_ctx(a.sctx) if getattr(a, "sctx", None) else ContextSpec(prev=1, date=True)
    rows: dict = {"D": Dense(), "S": Sparse(), "Sc": Sparse(ctx=sctx)}
    variants: dict[str, Sparse] = {}
    for docs in (3, 10):
        for terms in (10, 30):
            for lam in (0.3, 0.5):
                variants[f"rm3 d{docs} t{terms} l{lam}"] = Sparse(ctx=sctx, rm3=Rm3(docs, terms, lam))
    variants["rm3 d10 t10 l0.5 idf-select"] = Sparse(ctx=sctx, rm3=Rm3(10, 10, 0.5, idf_select=True))
    for mode in ("idf", "sqrt-idf", "drop-meta"):
        variants[f"q-weight {mode}"] = Sparse(ctx=sctx, qweight=mode)
    for i, row in enumerate(variants.values()):
        rows[f"S{i}"] = row
    views = build(a.sets, rows)
    ms = base_methods()
    ms["bm25 Sc"] = single("Sc")
    ms["hybrid, BM25 = Sc"] = default_hybrid("D", "Sc")
    for i, name in enumerate(variants):
        ms[f"bm25 Sc {name}"] = single(f"S{i}")
        ms[f"hybrid, BM25 = Sc {name}"] = default_hybrid("D", f"S{i}")
        ms[f"hybrid Sc + {name} leg"] = rrf(
            [("D", 100), ("Sc", "D", 100), ("Sc", 100), ("Sc", 5), (f"S{i}", 100)], 3, [1.0, 0.5, 1.0, 0.75, 0.5]
        )
    return views, ms, f"Pseudo-relevance feedback and query term weights (Sc = BM25 {sctx.label()})"


FUSION_CONTEXTS = {
    "C1": ContextSpec(prev=1),
    "C1/32w": ContextSpec(prev=1, words=32),
    "C2/16w": ContextSpec(prev=2, words=16),
    "Cd1/32w": ContextSpec(prev=1, words=32, date=True),
}


def fusion(a: argparse.Namespace) -> Result:
    """The shipped four-leg tree with a context-folded BM25 leg C joining it or replacing S, RRF k and
    the C weight varied, against DBSF over the same legs."""
    rows: dict = {"D": Dense(), "S": Sparse()}
    rows.update({"S" + n: Sparse(ctx=c) for n, c in FUSION_CONTEXTS.items()})
    views = build(a.sets, rows)
    ms = base_methods()
    for n in FUSION_CONTEXTS:
        c = "S" + n
        ms[f"bm25 {n}"] = single(c)
        for k in (2, 3, 5):
            ms[f"rrf k={k} [D 1, S@D .5, S 1, S5 .75] (default tree)"] = rrf(
                [("D", 100), ("S", "D", 100), ("S", 100), ("S", 5)], k, [1, 0.5, 1, 0.75]
            )
            ms[f"rrf k={k} [D 1, {n}@D .5, {n} 1, {n}5 .75] (C replaces S)"] = rrf(
                [("D", 100), (c, "D", 100), (c, 100), (c, 5)], k, [1, 0.5, 1, 0.75]
            )
            for wc in (0.5, 1.0):
                ms[f"rrf k={k} [D 1, S@D .5, S 1, S5 .75, {n} {wc}]"] = rrf(
                    [("D", 100), ("S", "D", 100), ("S", 100), ("S", 5), (c, 100)], k, [1, 0.5, 1, 0.75, wc]
                )
            ms[f"rrf k={k} [D 1, {n}@D .5, S 1, S5 .75, {n} 1]"] = rrf(
                [("D", 100), (c, "D", 100), ("S", 100), ("S", 5), (c, 100)], k, [1, 0.5, 1, 0.75, 1]
            )
        ms[f"dbsf [D, S@D, S, {n}]"] = dbsf([("D", 100), ("S", "D", 100), ("S", 100), (c, 100)])
        ms[f"dbsf [D, S, {n}]"] = dbsf([("D", 100), ("S", 100), (c, 100)])
        ms[f"dbsf [D, {n}@D, {n}]"] = dbsf([("D", 100), (c, "D", 100), (c, 100)])
    ms["dbsf [D, S@D, S]"] = dbsf([("D", 100), ("S", "D", 100), ("S", 100)])
    ms["formula cos + 4 bm25/(bm25+20) (phase 1's best score formula)"] = formula("D", "S", 1.0, 4.0, 20.0)
    ms["dbsf [D, S]"] = dbsf([("D", 100), ("S", 100)])
    return views, ms, "Fusion with a context-folded BM25 leg (C<N>/<w>w: previous N turns, each cut to w words)"


def model(a: argparse.Namespace) -> Result:
    if not a.model:
        raise SystemExit("model: --model DIR (a sentence-transformers directory with a filled cache)")
    views = build(a.sets, {"D": Dense(), "M": Dense(model=a.model), "S": Sparse()})
    ms = base_methods()
    ms["dense M"] = single("M")
    ms["hybrid, dense = M"] = default_hybrid("M", "S")
    return views, ms, f"Dense model: D = all-MiniLM-L6-v2, M = {a.model}"


def bm25_options(a: argparse.Namespace) -> Result:
    """Phase 1's BM25 options, the sparse leg alone (no embeddings needed)."""
    base = Bm25Spec()  # qdrant_edge's english defaults, b=0.75, avg_len=64
    specs = {
        "english, stem+stop, k1.2 b.75 avg64": base,
        "no stemmer": replace(base, stemmer=False),
        "no stop words": replace(base, stopwords=False),
        "tokenizer Whitespace": replace(base, tokenizer="Whitespace"),
        "avg_len 32": replace(base, avg_len=32.0),
        "avg_len 256 (Qdrant's default)": replace(base, avg_len=256.0),
        "k 1.5": replace(base, k=1.5),
        "b 0.9, avg_len 48": replace(base, b=0.9, avg_len=48.0),
        "b 1.0 (shipped)": replace(base, b=1.0),
    }
    rows = {f"S{i}": Sparse(bm25=spec) for i, spec in enumerate(specs.values())}
    views = build(a.sets, rows)
    return views, {n: single(f"S{i}") for i, n in enumerate(specs)}, "BM25 options (sparse leg alone)"


def chunking(a: argparse.Namespace) -> Result:
    """Phase 1's chunking choice for the dense leg: max-sim over 256/32 chunks (the store) vs the head."""
    views = build(a.sets, {"D": Dense(), "Dh": Dense(pool="head"), "S": Sparse()})
    ms = base_methods()
    ms["dense, head only"] = single("Dh")
    ms["hybrid, dense = head only"] = default_hybrid("Dh", "S")
    return views, ms, "Chunking (dense leg): chunks 256/32 + max-sim vs the first chunk only"


# The recommendation: the shipped tree plus a BM25 leg over the previous two turns (16 words each) folded
# into the turn's text, which also replaces the turn's BM25 in the nested (dense candidates) leg.
RECOMMENDED_CONTEXT = ContextSpec(prev=2, words=16)


def recommended(d: str = "D", s: str = "S", c: str = "SC") -> Method:
    return shipped(d, s, c, wd=1.0, head=0.75, full=0.0)


# The shipped hybrid since the piece prior: the dense leg ranked by max-sim - 0.08 ln(pieces) over sentence
# pieces (the raw top 200 re-ranked, as the store does), weighted 2.5; BM25's top-5 leg (`head`) dropped;
# since the lexical confidence, every BM25-based leg scaled by BM25's best score (full 4, floor 0.25).
PIECE_PENALTY = float(Settings.model_fields["rrf_piece_penalty"].default)  # 0.08
LEXICAL_FULL = FUSION_BY_CHUNK_MODE["sentences"][2]  # 4
LEXICAL_FLOOR = float(Settings.model_fields["rrf_lexical_floor"].default)  # 0.25


def shipped(
    d: str = "DP",
    s: str = "S",
    c: str = "SC",
    wd: float = 2.5,
    head: float = 0.0,
    k: int = 3,
    full: float = LEXICAL_FULL,
    floor: float = LEXICAL_FLOOR,
) -> Method:
    """The shipped tree; `full` 0: without the lexical confidence (the default before it)."""
    if head > 0:
        legs = [(d, 100), (c, d, 100), (s, 100), (s, 5), (c, 100)]
        return lexical(legs, k, [wd, 0.5, 1.0, head, 1.0], full, floor, s)
    return lexical([(d, 100), (c, d, 100), (s, 100), (c, 100)], k, [wd, 0.5, 1.0, 1.0], full, floor, s)


def piece_prior(a: argparse.Namespace) -> Result:
    """The piece prior of the dense leg (``EPISODIC_RRF_PIECE_PENALTY``): max-sim - beta x ln(pieces), alone
    and in the five-leg tree (BM25's top-5 leg kept, weight 0.75) with dense weights 1-3 (k=3), beta over
    ``--betas``; then, at the chosen beta, the tree without the top-5 leg (what ships) and its fusion grid
    (k, dense weight, the re-scored leg's weight); ``--pool``: the store's inner prefetch (the raw top N
    re-ranked) against re-ranking every memory; ``--windows``: the same over the 256/32 windows (oracle
    only: the windows' s cache is not built)."""
    betas = [float(b) for b in (getattr(a, "betas", None) or "0.02,0.04,0.065,0.08,0.1,0.12,0.16,0.24").split(",")]
    rows: dict = {"S": Sparse(), "SC": Sparse(ctx=RECOMMENDED_CONTEXT), "D": Dense(split="p32")}
    rows.update({f"D{b}": Dense(split="p32", penalty=b) for b in betas})
    pools = [int(n) for n in (getattr(a, "pool", None) or "").split(",") if n]
    rows.update({f"DP{n}": Dense(split="p32", penalty=PIECE_PENALTY, candidates=n) for n in pools})
    windows = getattr(a, "windows", False)
    if windows:
        rows.update({"Dw": Dense(), **{f"Dw{b}": Dense(penalty=b) for b in betas}})
    views = build(a.sets, rows)
    ms: dict[str, Method] = {"bm25 (S)": single("S"), "dense, sentence pieces (D)": single("D")}
    ms["five legs, no prior (previous default)"] = recommended()
    for b in betas:
        ms[f"dense - {b} ln(pieces)"] = single(f"D{b}")
        for wd in (1.0, 1.5, 2.0, 2.5, 3.0):
            ms[f"five legs, dense - {b} ln(pieces), w {wd}"] = shipped(f"D{b}", wd=wd, head=0.75, full=0.0)
    chosen = f"D{PIECE_PENALTY}" if PIECE_PENALTY in betas else None
    if chosen:
        ms[f"beta {PIECE_PENALTY}, w 2.5, no top-5 leg (k 3)"] = shipped(chosen, full=0.0)
        for k in (2, 3, 4):
            for wd in (1.5, 2.5, 3.5):
                for wb in (0.0, 0.5, 1.0):
                    ms[f"no top-5 leg: rrf k={k} [D {wd}, C@D {wb}, S 1, C 1]"] = rrf(
                        [(chosen, 100), ("SC", chosen, 100), ("S", 100), ("SC", 100)], k, [wd, wb, 1.0, 1.0]
                    )
    for n in pools:
        ms[f"shipped (beta {PIECE_PENALTY}, w 2.5, no top-5 leg), raw top {n} re-ranked"] = shipped(f"DP{n}", full=0.0)
    if windows:
        ms["five legs over windows (no prior)"] = recommended("Dw")
        for b in betas:
            ms[f"windows: dense - {b} ln(windows)"] = single(f"Dw{b}")
            for wd in (1.0, 2.5):
                ms[f"windows: five legs, dense - {b} ln(windows), w {wd}"] = shipped(
                    f"Dw{b}", wd=wd, head=0.75, full=0.0
                )
                ms[f"windows: no top-5 leg, dense - {b} ln(windows), w {wd}"] = shipped(f"Dw{b}", wd=wd, full=0.0)
    return views, ms, "Piece prior: the dense leg ranked by max-sim - beta x ln(pieces)"


def final(a: argparse.Namespace) -> Result:
    """The recommendation against today's default and the single legs, every view."""
    rows: dict = {"D": Dense(), "S": Sparse(), "SC": Sparse(ctx=RECOMMENDED_CONTEXT)}
    alt = ContextSpec(prev=1, words=32)
    rows["SC1"] = Sparse(ctx=alt)
    views = build(a.sets, rows)
    ms = base_methods()
    ms["rrf60 (seed)"] = rrf([("D", 100), ("S", 100)], 60, [1, 1])
    ms[f"bm25 over {RECOMMENDED_CONTEXT.label()} (C)"] = single("SC")
    ms["RECOMMENDED rrf k=3 [D 1, C@D .5, S 1, S5 .75, C 1]"] = recommended()
    ms["same, C only as an extra leg [D 1, S@D .5, S 1, S5 .75, C 1]"] = rrf(
        [("D", 100), ("S", "D", 100), ("S", 100), ("S", 5), ("SC", 100)], 3, [1.0, 0.5, 1.0, 0.75, 1.0]
    )
    ms[f"same tree, C = {alt.label()}"] = recommended(c="SC1")
    ms["C replaces S everywhere (k=3)"] = default_hybrid("D", "SC")
    return views, ms, f"Recommended configuration (C = BM25 over {RECOMMENDED_CONTEXT.label()})"


def run_level(a: argparse.Namespace) -> Result:
    """Run-level evidence at recall: the fused top N re-ranked by turn + lam * run score
    (``eval.runlevel``), over today's tree, the recommended tree and its "C replaces S" variant."""
    from eval.runlevel import run_level as rl

    rows: dict = {"D": Dense(), "S": Sparse(), "SC": Sparse(ctx=RECOMMENDED_CONTEXT), "SR": Sparse(run_doc=True)}
    views = build(a.sets, rows)
    ms = base_methods()
    ms["bm25 over the whole run (SR)"] = single("SR")
    trees = {
        "default": ([("D", 100), ("S", "D", 100), ("S", 100), ("S", 5)], [1.0, 0.5, 1.0, 0.75]),
        "recommended": (
            [("D", 100), ("SC", "D", 100), ("S", 100), ("S", 5), ("SC", 100)],
            [1.0, 0.5, 1.0, 0.75, 1.0],
        ),
        "C extra leg": ([("D", 100), ("S", "D", 100), ("S", 100), ("S", 5), ("SC", 100)], [1, 0.5, 1, 0.75, 1]),
        "C replaces S": ([("D", 100), ("SC", "D", 100), ("SC", 100), ("SC", 5)], [1.0, 0.5, 1.0, 0.75]),
    }
    for tn, (legs_, w) in trees.items():
        ms[tn] = rrf(legs_, 3, w)
        for n in (50, 100):
            inner = rrf(legs_, 3, w, depth=n)
            for agg in ("max", "top2", "top3", "sum"):
                for own in (True, False):
                    for lam in (0.1, 0.25, 0.5, 1.0):
                        tag = "" if own else " siblings"
                        ms[f"{tn} top{n}, + {lam} run {agg}{tag}"] = rl(inner, lam, "fused", agg, own)
            for agg in ("max", "top2"):
                for lam in (0.25, 0.5, 1.0):
                    ms[f"{tn} top{n}, rrf with run rank ({agg}) w {lam}"] = rl(inner, lam, "fused", agg, True, "rrf")
            for src, agg in (("S", "sum"), ("S", "max"), ("D", "max"), ("SR", "max")):
                for lam in (0.1, 0.25, 0.5):
                    ms[f"{tn} top{n}, + {lam} run {src} {agg}"] = rl(inner, lam, src, agg, src == "SR")
    return views, ms, "Run-level evidence at recall (the fused top N re-ranked by turn + lam x run score)"


CONTEXT_MODES = {
    "prev1/16w": ContextSpec(prev=1, words=16),
    "prev2/16w": ContextSpec(prev=2, words=16),
    "prev3/16w": ContextSpec(prev=3, words=16),
    "prev2/8w": ContextSpec(prev=2, words=8),
    "prev2/32w": ContextSpec(prev=2, words=32),
    "header/16w": ContextSpec(header=True, words=16),
    "date+header/16w": ContextSpec(header=True, words=16, date=True),
    "header+prev1/16w": ContextSpec(header=True, prev=1, words=16),
    "date+prev2/16w": ContextSpec(prev=2, words=16, date=True),
}


def context_modes(a: argparse.Namespace) -> Result:
    """The product's EPISODIC_CONTEXT_MODE choices (off / prev:N / run-header, words per entry) as the C leg
    of the recommended tree, beside today's default (off)."""
    rows: dict = {"D": Dense(), "S": Sparse()}
    rows.update({f"SC{i}": Sparse(ctx=c) for i, c in enumerate(CONTEXT_MODES.values())})
    views = build(a.sets, rows)
    ms = base_methods()
    for i, name in enumerate(CONTEXT_MODES):
        ms[f"bm25 over {name}"] = single(f"SC{i}")
        ms[f"recommended tree, C = {name}"] = recommended(c=f"SC{i}")
    return views, ms, "Context modes as the C leg of the recommended tree (off = today's default)"


def sentence_chunks(a: argparse.Namespace) -> Result:
    """The dense leg over sentence pieces (``eval.sentences``; ``--split`` modes, comma-separated), alone and
    in place of D in the shipped tree (what ``EPISODIC_CHUNK_MODE=sentences`` ships), and as an extra dense
    leg beside D. ``--no-window``: without the 256/32 windows' row D (its cache not needed)."""
    modes = (getattr(a, "split", None) or "p32").split(",")
    window = not getattr(a, "no_window", False)
    rows: dict = {"S": Sparse(), "SC": Sparse(ctx=RECOMMENDED_CONTEXT)}
    if window:
        rows["D"] = Dense()
    rows.update({f"D{m}": Dense(split=m) for m in modes})
    leads = [int(w) for w in (getattr(a, "lead", None) or "").split(",") if w]
    rows.update({f"D{modes[0]}L{w}": Dense(split=modes[0], lead=ContextSpec(prev=1, words=w)) for w in leads})
    views = build(a.sets, rows)
    ms: dict[str, Method] = {"bm25 (S)": single("S"), f"bm25 over {RECOMMENDED_CONTEXT.label()} (C)": single("SC")}
    if window:
        ms["dense, 256/32 windows (D)"] = single("D")
        ms["shipped before (five legs, D = windows)"] = recommended()
    for m in modes:
        d = f"D{m}"
        ms[f"dense {m}"] = single(d)
        ms[f"five legs, D = {m}"] = recommended(d=d)
        if window:
            for w in (0.5, 1.0):
                ms[f"five legs (windows) + {m} leg w{w}"] = rrf(
                    [("D", 100), ("SC", "D", 100), ("S", 100), ("S", 5), ("SC", 100), (d, 100)],
                    3,
                    [1.0, 0.5, 1.0, 0.75, 1.0, w],
                )
    for w in leads:
        d = f"D{modes[0]}L{w}"
        ms[f"dense {modes[0]}, first piece led by prev1/{w}w"] = single(d)
        ms[f"five legs, D = {modes[0]} led by prev1/{w}w"] = recommended(d=d)
    if getattr(a, "grid", False):  # the fusion re-tuned over the first mode's pieces (eval/README.md: a plateau)
        d = f"D{modes[0]}"
        for k in (2, 3, 5, 8):
            for wd in (0.75, 1.0, 1.5, 2.0):
                for wb in (0.0, 0.5, 1.0):
                    for wh in (0.0, 0.75):
                        ms[f"{modes[0]}: rrf k={k} [D {wd}, C@D {wb}, S 1, S5 {wh}, C 1]"] = rrf(
                            [(d, 100), ("SC", d, 100), ("S", 100), ("S", 5), ("SC", 100)], k, [wd, wb, 1.0, wh, 1.0]
                        )
    return views, ms, f"Sentence pieces for the dense leg ({', '.join(modes)})"


def lexical_confidence(a: argparse.Namespace) -> Result:
    """Lexical confidence (``EPISODIC_RRF_LEXICAL_FULL``): the BM25-based legs of the shipped tree scaled by
    BM25's best score in rare-term IDFs (``eval.methods.lexical``), over ``full`` x ``floor`` x k, which legs
    (S and C only, or the re-scored leg too) and which row is probed (the entry's BM25 or the context's);
    beside it, the static alternative (lower BM25 weights for every query) and the tree without it."""
    rows: dict = {"S": Sparse(), "SC": Sparse(ctx=RECOMMENDED_CONTEXT)}
    rows["DP"] = Dense(split="p32", penalty=PIECE_PENALTY, candidates=200)
    views = build(a.sets, rows)
    tree = [("DP", 100), ("SC", "DP", 100), ("S", 100), ("SC", 100)]
    ms: dict[str, Method] = {"bm25 (S)": single("S"), "dense (DP)": single("DP")}
    ms["without it (previous default)"] = shipped(full=0.0)
    ms[f"SHIPPED: full {LEXICAL_FULL}, floor {LEXICAL_FLOOR}"] = shipped()
    for k in (2, 3):
        for full in (2.5, 3.0, 3.5, 4.0, 5.0, 6.0):
            for floor in (0.1, 0.25, 0.5):
                for probe in ("S", "SC"):
                    ms[f"k {k}, full {full}, floor {floor}, probe {probe}"] = lexical(
                        tree, k, [2.5, 0.5, 1.0, 1.0], full, floor, probe
                    )
                # the re-scored leg (dense candidates re-scored by BM25) left at its weight
                ms[f"k {k}, full {full}, floor {floor}, probe S, re-scored leg kept"] = lexical(
                    tree, k, [2.5, 0.5, 1.0, 1.0], full, floor, scaled=[False, False, True, True]
                )
        for ws in (0.25, 0.5, 1.0):
            for wc in (0.25, 0.5, 1.0):
                ms[f"static: k {k}, S {ws}, C {wc}"] = rrf(tree, k, [2.5, 0.5, ws, wc])
    return views, ms, "Lexical confidence: the BM25-based legs scaled by how strongly BM25 matched the query"


def folding(a: argparse.Namespace) -> Result:
    """Near-duplicate folding (``EPISODIC_FOLD_*``) and supersession (``EPISODIC_SUPERSEDE_*``), eval.folding:
    the shipped tree over the memories the linker leaves and in the order recall gives them, fold cosine x
    the words one memory may add (the rest of the rule always required: eval/fold_rule.py) and
    supersession cosine x subject Jaccard, beside the tree with neither (the previous default). Folds and
    supersessions are counted on stderr; the knowledge-update questions get their own columns (ku)."""
    from episodic.domain.folding import FoldRule
    from episodic.domain.supersession import SupersedeRule
    from eval.folding import fold_groups, folded, mmr, newer_first, supersessions

    rows: dict = {"S": Sparse(), "SC": Sparse(ctx=RECOMMENDED_CONTEXT)}
    rows["DP"] = Dense(split="p32", penalty=PIECE_PENALTY, candidates=200)
    views = build(a.sets, rows)
    views.by_category = True
    mems = {id(q.mem): q.mem for qs in views.views.values() for q in qs}
    ms: dict[str, Method] = {"neither (previous default)": shipped()}
    for cos in (0.80, 0.86, 0.90, 0.95):
        for add in (0, 2, 4):
            rule = FoldRule(cosine=cos, additions=add)
            n = sum(len(f.into) for m in mems.values() if (f := fold_groups(m, rule)) is not None)
            log.info("fold cosine %.2f additions %d: %d memories folded", cos, add, n)
            ms[f"fold cosine {cos}, additions {add} ({n} folded)"] = folded(shipped(), rule)
    for cos in (0.70, 0.75, 0.80, 0.86):
        for jac in (0.3, 0.5, 0.7):
            sup = SupersedeRule(cosine=cos, jaccard=jac)
            n = sum(len(s) for m in mems.values() if (s := supersessions(m, sup)) is not None)
            log.info("supersede cosine %.2f jaccard %.1f: %d memories superseded", cos, jac, n)
            ms[f"supersede cosine {cos}, jaccard {jac} ({n} superseded)"] = newer_first(shipped(), sup)
    ms["SHIPPED: fold 0.80/+2 + supersede 0.80/0.5"] = newer_first(folded(shipped(), FoldRule()), SupersedeRule())
    for lam in (0.5, 0.7, 0.85, 0.95):  # diversity in the top k (seed 002), over the fused top 30
        ms[f"MMR lambda {lam} (word Jaccard, top 30)"] = mmr(shipped(), lam)
    return views, ms, "Folding and supersession: the shipped tree over the memories and edges the linker leaves"


def folding_by_type(a: argparse.Namespace) -> Result:
    """Issue 26's per-category check of what ships: folding and supersession (each alone and both, the
    shipped rules) and MMR (seed 002's word Jaccard over the fused top 30; not shipped) against the tree with
    neither, every question type of each set apart, dev and holdout (``eval.sweep.type_table``). Folds and
    supersessions are counted on stderr."""
    from episodic.domain.folding import FoldRule
    from episodic.domain.supersession import SupersedeRule
    from eval.folding import fold_groups, folded, mmr, newer_first, supersessions

    rows: dict = {"S": Sparse(), "SC": Sparse(ctx=RECOMMENDED_CONTEXT)}
    rows["DP"] = Dense(split="p32", penalty=PIECE_PENALTY, candidates=200)
    views = build(a.sets, rows)
    views.by_type = True
    fold, sup = FoldRule(), SupersedeRule()
    for name, qs in views.views.items():
        mems = {id(q.mem): q.mem for q in qs}
        nf = sum(len(f.into) for m in mems.values() if (f := fold_groups(m, fold)) is not None)
        ns = sum(len(s) for m in mems.values() if (s := supersessions(m, sup)) is not None)
        n = sum(len(m.texts(ContextSpec())) for m in mems.values())
        log.info("%s: %d workspaces, %d memories, %d folded, %d superseded", name, len(mems), n, nf, ns)
    ms: dict[str, Method] = {
        "neither (off)": shipped(),
        "fold + supersede (shipped)": newer_first(folded(shipped(), fold), sup),
        "fold only": folded(shipped(), fold),
        "supersede only": newer_first(shipped(), sup),
        "MMR λ 0.95, neither": mmr(shipped(), 0.95),
        "MMR λ 0.85, neither": mmr(shipped(), 0.85),
        "shipped + MMR λ 0.95": newer_first(mmr(folded(shipped(), fold), 0.95), sup),
    }
    return views, ms, "Folding, supersession and MMR by question type (the shipped tree; R@5/R@10)"


# Issue 46's levers (eval/README.md, "Conversations"): what the context leg indexes, the dense leg's weight, the
# time legs, the run-level re-rank; each against the shipped tree on every set, by type.
CONVERSATION_CONTEXTS = {
    "prev2/16w (shipped)": ContextSpec(prev=2, words=16),
    "prev2/16w+date": ContextSpec(prev=2, words=16, date=True),
    "prev2/32w": ContextSpec(prev=2, words=32),
    "prev2/32w+date": ContextSpec(prev=2, words=32, date=True),
    "prev1+date": ContextSpec(prev=1, date=True),
    "prev3/32w+date": ContextSpec(prev=3, words=32, date=True),
    "prev1+next1+date (not streaming)": ContextSpec(prev=1, next=1, date=True),
}


def conversations(a: argparse.Namespace) -> Result:
    """The levers of issue 46 (``--set all``): the context leg's text (``CONVERSATION_CONTEXTS``; the shipped
    context and the dense leg otherwise), the dense weight, the time legs and the run-level re-rank
    (``eval.methods.tree``), alone and together, against the shipped tree. ``--against "shipped"`` runs the
    choice protocol over them."""
    rows: dict = {"S": Sparse(), "DP": Dense(split="p32", penalty=PIECE_PENALTY, candidates=200)}
    names = {label: f"SC{i}" for i, label in enumerate(CONVERSATION_CONTEXTS)}
    rows.update({names[label]: Sparse(ctx=c) for label, c in CONVERSATION_CONTEXTS.items()})
    views = build(a.sets, rows)
    views.by_type = getattr(a, "by_type", False)

    def legs(c: str) -> list:
        return [("DP", 100), (c, "DP", 100), ("S", 100), (c, 100)]

    shipped_c = names["prev2/16w (shipped)"]
    ms: dict[str, Method] = {"shipped": shipped(c=shipped_c)}
    for label, c in names.items():
        ms[f"context {label}"] = tree(legs(c), 3, [2.5, 0.5, 1, 1], LEXICAL_FULL, LEXICAL_FLOOR)
    for wd in (1.0, 1.5):
        ms[f"dense weight {wd}"] = tree(legs(shipped_c), 3, [wd, 0.5, 1, 1], LEXICAL_FULL, LEXICAL_FLOOR)
    for tw in (0.5, 1.0):
        ms[f"time legs {tw}"] = tree(legs(shipped_c), 3, [2.5, 0.5, 1, 1], LEXICAL_FULL, LEXICAL_FLOOR, time=tw)
    for run in (0.25, 0.5, 1.0):
        for depth in (1, 3):
            ms[f"run-level {run} (depth {depth})"] = tree(
                legs(shipped_c), 3, [2.5, 0.5, 1, 1], LEXICAL_FULL, LEXICAL_FLOOR, run=run, depth=depth
            )
    for label in ("prev2/16w+date", "prev2/32w+date", "prev1+date"):
        for wd in (1.0, 2.5):
            for run in (0.25, 0.5):
                ms[f"together: {label}, dense {wd}, time 1, run {run}"] = tree(
                    legs(names[label]), 3, [wd, 0.5, 1, 1], LEXICAL_FULL, LEXICAL_FLOOR, time=1.0, run=run
                )
    c = names["prev2/32w+date"]
    ms["score fusion: DBSF [DP, S, C = prev2/32w+date]"] = dbsf([("DP", 100), ("S", 100), (c, 100)])
    return views, ms, "Conversations: the context leg's text, dense weight, time legs, run-level (issue 46)"


def time_legs(a: argparse.Namespace) -> Result:
    """The time legs (``eval.methods.tree``) by how a relative time ("10 days ago", "last month") is read:
    from a clock after every set (what the pipeline harness gives: they match nothing), from the question's
    date (LongMemEval gives one: what a deployment asked then sees), or not at all (absolute times only)."""
    rows: dict = {"S": Sparse(), "DP": Dense(split="p32", penalty=PIECE_PENALTY, candidates=200)}
    rows["SC"] = Sparse(ctx=ContextSpec(prev=2, words=16))
    views = build(a.sets, rows)
    views.by_type = getattr(a, "by_type", False)
    legs: list = [("DP", 100), ("SC", "DP", 100), ("S", 100), ("SC", 100)]
    ms: dict[str, Method] = {"shipped": shipped()}
    for relative in ("now", "asked", "off"):
        for tw in (1.0, 0.5):
            ms[f"time legs {tw}, relative {relative}"] = tree(
                legs, 3, [2.5, 0.5, 1, 1], LEXICAL_FULL, LEXICAL_FLOOR, time=tw, relative=relative
            )
    for run in (0.5, 1.0):
        ms[f"time legs 1.0 asked + run-level {run} if timed"] = tree(
            legs,
            3,
            [2.5, 0.5, 1, 1],
            LEXICAL_FULL,
            LEXICAL_FLOOR,
            time=1.0,
            relative="asked",
            run=run,
            run_if_timed=True,
        )
    return views, ms, "Time legs: relative times from a later clock, from the question's date, or not read"


def adaptive(a: argparse.Namespace) -> Result:
    """Issue 46's adaptive levers against the shipped tree asked at the question's date (``as_of``: relative
    times from LongMemEval's question date and LoCoMo's last session's): the run-level re-rank gated per
    question by how concentrated the fused list is in one run (``eval.runlevel.share``, ``margin``) or by the
    dense and BM25 legs agreeing on the run (``agree``); the fused head kept and run-level below it; a turn
    lifted by its run neighbours only; the dense leg over each piece's vector mixed with the previous memory's
    (``Dense.mix``, no re-embedding). ``--against "as of (shipped)"``."""
    from eval import runlevel as R

    dp = Dense(split="p32", penalty=PIECE_PENALTY, candidates=200)
    rows: dict = {"S": Sparse(), "DP": dp, "SC": Sparse(ctx=RECOMMENDED_CONTEXT)}
    rows.update({f"DM{m}": replace(dp, mix=m) for m in (0.25, 0.5)})
    views = build(a.sets, rows)
    views.by_type = getattr(a, "by_type", False)
    weights = [2.5, 0.5, 1, 1]

    def legs(d: str = "DP") -> list:
        return [(d, 100), ("SC", d, 100), ("S", 100), ("SC", 100)]

    def asked(d: str = "DP", run: float = 0.0, post: R.Post | None = None) -> Method:
        return tree(legs(d), 3, weights, LEXICAL_FULL, LEXICAL_FLOOR, time=1.0, relative="asked", run=run, post=post)

    ms: dict[str, Method] = {
        "as of (shipped)": asked(),
        "time legs, clock (main)": tree(legs(), 3, weights, LEXICAL_FULL, LEXICAL_FLOOR, time=1.0),
        "run-level 0.5 (option)": asked(run=0.5),
    }
    gates = {"share of the top 10": R.share, "run margin": R.margin, "legs agree": R.agree}
    for label, gate in gates.items():
        for w in (0.5, 1.0):
            ms[f"run-level {w} x {label}"] = asked(post=R.gated(w, gate))
    for w in (0.5, 1.0):
        for keep in (3, 5):
            ms[f"run-level {w} below the fused top {keep}"] = asked(post=R.head_kept(w, keep))
    for w in (0.25, 0.5):
        ms[f"neighbour lift {w}"] = asked(post=R.neighbours(w))
    for m in (0.25, 0.5):
        ms[f"dense leg mixed with the previous turn {m}"] = asked(d=f"DM{m}")
    return views, ms, "Adaptive levers: gated run-level, neighbour lift, the dense leg with its neighbour (issue 46)"


def common_words(a: argparse.Namespace) -> Result:
    """The hybrid's dense leg embedding the query without the words more than a share of the workspace's
    memories hold (``episodic.domain.common_terms``; ``EPISODIC_DENSE_QUERY_COMMON``), by that share, alone
    and with the run-level option, against the shipped tree asked at the question's date.
    ``--against "as of (shipped)"``."""
    dp = Dense(split="p32", penalty=PIECE_PENALTY, candidates=200)
    shares = (0.1, 0.2, 0.3, 0.5)
    rows: dict = {"S": Sparse(), "DP": dp, "SC": Sparse(ctx=RECOMMENDED_CONTEXT)}
    rows.update({f"DQ{c}": replace(dp, common=c) for c in shares})
    views = build(a.sets, rows)
    views.by_type = getattr(a, "by_type", False)

    def asked(d: str = "DP", run: float = 0.0) -> Method:
        legs = [(d, 100), ("SC", d, 100), ("S", 100), ("SC", 100)]
        return tree(legs, 3, [2.5, 0.5, 1, 1], LEXICAL_FULL, LEXICAL_FLOOR, time=1.0, relative="asked", run=run)

    ms: dict[str, Method] = {"as of (shipped)": asked()}
    for c in shares:
        ms[f"dense query without words in > {c:.0%} of the memories"] = asked(f"DQ{c}")
    for c in (0.2,):
        for run in (0.25, 0.5):
            ms[f"dense query without words in > {c:.0%}, run-level {run}"] = asked(f"DQ{c}", run=run)
    return views, ms, "Common words: the dense query without the words most of the workspace's memories hold (issue 46)"


def dense_prf(a: argparse.Namespace) -> Result:
    """Dense pseudo-relevance feedback (issue 46's query-side expansion, in the embedding space): the hybrid's
    dense query moved towards its first pass's top d memories (each by its best piece), unit(q + beta x their
    mean), then asked again; the BM25 legs keep the query. Against the shipped tree asked at the question's
    date. ``--against "as of (shipped)"``."""
    dp = Dense(split="p32", penalty=PIECE_PENALTY, candidates=200, common=0.5)
    variants = [(3, 0.5), (5, 0.5), (5, 1.0), (10, 0.5), (10, 1.0), (3, 1.0)]
    rows: dict = {"S": Sparse(), "DP": dp, "SC": Sparse(ctx=RECOMMENDED_CONTEXT)}
    rows.update({f"DF{d}_{b}": replace(dp, prf=(d, b)) for d, b in variants})
    KEEP.add(dp)  # fused_prf asks its vectors again
    views = build(a.sets, rows)
    views.by_type = getattr(a, "by_type", False)

    def asked(d: str = "DP") -> Method:
        legs = [(d, 100), ("SC", d, 100), ("S", 100), ("SC", 100)]
        return tree(legs, 3, [2.5, 0.5, 1, 1], LEXICAL_FULL, LEXICAL_FLOOR, time=1.0, relative="asked")

    ms: dict[str, Method] = {"as of (shipped)": asked()}
    for d, b in variants:
        ms[f"dense PRF d{d} beta {b}"] = asked(f"DF{d}_{b}")
    for d, b in [(3, 0.5), (5, 0.5), (5, 1.0), (10, 0.5)]:
        ms[f"dense PRF from the fused top d{d} beta {b}"] = fused_prf(asked(), "DP", dp, d, b)
    return views, ms, "Dense pseudo-relevance feedback: the dense query moved towards its first pass's top (issue 46)"


def model_shipped(a: argparse.Namespace) -> Result:
    """Another sentence-transformers model (``--model DIR``, its cache filled with ``--split p32``) as the
    shipped tree's dense leg, asked at the question's date, beside MiniLM's: the dense leg alone and the hybrid.
    ``--against "as of (shipped)"``."""
    if not a.model:
        raise SystemExit("model-shipped: --model DIR (a sentence-transformers directory with a filled cache)")
    dp = Dense(split="p32", penalty=PIECE_PENALTY, candidates=200, common=0.5)
    rows: dict = {"S": Sparse(), "DP": dp, "DM": replace(dp, model=a.model), "SC": Sparse(ctx=RECOMMENDED_CONTEXT)}
    views = build(a.sets, rows)
    views.by_type = getattr(a, "by_type", False)

    def asked(d: str = "DP") -> Method:
        legs = [(d, 100), ("SC", d, 100), ("S", 100), ("SC", 100)]
        return tree(legs, 3, [2.5, 0.5, 1, 1], LEXICAL_FULL, LEXICAL_FLOOR, time=1.0, relative="asked")

    name = Path(a.model).name
    ms: dict[str, Method] = {
        "as of (shipped)": asked(),
        f"hybrid, dense leg {name}": asked("DM"),
        "dense leg alone (MiniLM)": single("DP"),
        f"dense leg alone ({name})": single("DM"),
    }
    return views, ms, f"The shipped tree with another dense model: {name} beside all-MiniLM-L6-v2 (issue 46)"


def short_turns(a: argparse.Namespace) -> Result:
    """Issue 46, fourth pass: the neighbour lift and the run-level re-rank gated per memory by its length
    (``eval.runlevel.short_neighbours``, ``short_runs``): chat lines lean on the lines around them, paragraphs
    do not. Against the shipped tree asked at the question's date. ``--against "as of (shipped)"``."""
    from eval import runlevel as R

    dp = Dense(split="p32", penalty=PIECE_PENALTY, candidates=200, common=0.5)
    rows: dict = {"S": Sparse(), "DP": dp, "SC": Sparse(ctx=RECOMMENDED_CONTEXT)}
    views = build(a.sets, rows)
    views.by_type = getattr(a, "by_type", False)

    def asked(post: R.Post | None = None) -> Method:
        legs = [("DP", 100), ("SC", "DP", 100), ("S", 100), ("SC", 100)]
        return tree(legs, 3, [2.5, 0.5, 1, 1], LEXICAL_FULL, LEXICAL_FLOOR, time=1.0, relative="asked", post=post)

    ms: dict[str, Method] = {"as of (shipped)": asked()}
    for w in (0.25, 0.5):
        ms[f"neighbour lift {w}"] = asked(R.neighbours(w))
        for limit in (40, 60, 80, 100):
            ms[f"neighbour lift {w}, both <= {limit} words"] = asked(R.short_neighbours(w, limit))
        ms[f"neighbour lift {w}, both soft 60"] = asked(R.short_neighbours(w, 60, soft=True))
        ms[f"neighbour lift {w}, the lifted <= 60 words"] = asked(R.short_neighbours(w, 60, both=False))
    ms["neighbour lift 0.75, both <= 80 words"] = asked(R.short_neighbours(0.75, 80))
    for limit in (40, 60):
        ms[f"run-level 0.25 x share of turns <= {limit} words"] = asked(R.short_runs(0.25, limit))
    return views, ms, "Short turns: neighbour lift and run-level gated by a memory's length (issue 46)"


EXPERIMENTS: dict[str, Callable[[argparse.Namespace], Result]] = {
    "legs": legs,
    "bm25-options": bm25_options,
    "chunking": chunking,
    "bm25-context": bm25_context,
    "dense-context": dense_context,
    "adjacency": adjacency,
    "prf": prf,
    "fusion": fusion,
    "model": model,
    "final": final,
    "run-level": run_level,
    "context-modes": context_modes,
    "sentences": sentence_chunks,
    "piece-prior": piece_prior,
    "lexical": lexical_confidence,
    "folding": folding,
    "folding-by-type": folding_by_type,
    "conversations": conversations,
    "time-legs": time_legs,
    "adaptive": adaptive,
    "common-words": common_words,
    "dense-prf": dense_prf,
    "model-shipped": model_shipped,
    "short-turns": short_turns,
}
