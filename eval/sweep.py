"""The sweep tool: retrieval choices measured offline, in numpy, exactly as the store scores them.

    python -m eval.sweep <experiment> [--set oracle|s|both] [--s-limit N] [--oracle-limit N]

Experiments (each prints a table and writes eval/results/sweep-<experiment>.txt):

- ``legs``: each single leg and today's shipped hybrid (the reference rows of every table).
- ``bm25-options`` / ``chunking``: phase 1's BM25 options (sparse leg alone) and dense chunking.
- ``bm25-context``: BM25 over context-folded text (previous N turns of the session, cut or whole, and
  the session date), alone, in place of the BM25 leg of the hybrid, and as an extra leg.
- ``dense-context``: the dense leg over context-folded text (needs ``eval.embcache --ctx``) and over
  vectors mixed with the previous turn's (no re-embedding).
- ``adjacency``: a direct hit's session neighbours brought in below it.
- ``prf``: RM3 on the BM25 leg; query-side term weights.
- ``fusion``: RRF (k, weights) and DBSF over the chosen legs.
- ``model``: another sentence-transformers model's dense leg (``--model DIR``; needs its cache).
- ``final``: the recommended configuration against today's default, every view.
- ``sentences``: the dense leg over sentence pieces (``--split p32,s1,...``; needs ``eval.embcache
  --split``), alone, in the five-leg tree and beside the windows.
- ``piece-prior``: the dense leg ranked by max-sim - beta x ln(pieces) (``--betas``), alone and in the
  five-leg tree with dense weights 1-3; ``--pool 100,200``: the store's inner prefetch; ``--windows``.
- ``lexical``: lexical confidence, the BM25-based legs scaled by BM25's best score in rare-term IDFs
  (full x floor x k, which legs, which row probed), beside lower BM25 weights for every query.
- ``folding``: near-duplicate folding, supersession and MMR (eval.folding), rules swept, knowledge-update
  columns; ``folding-by-type``: what ships against neither and MMR, one row per set, part and question type.

Every table has the dev part of each set; the holdout parts (``eval.data.holdout``: a third of the questions
by a stable hash, never used to choose) are scored and printed only with ``--holdout``, the final check of a
choice already made on dev (so a sweep cannot be read, even by accident, for what the holdout says); and
``asst``: the oracle's dev single-session-assistant questions, whose evidence sits in long assistant turns
(a check that a choice does not just fit short user turns).
The harness mirrors the engine: BM25 is qdrant_edge's ``Bm25`` with Qdrant's IDF (``eval.bm25``), dense
is max-sim over the cached chunk vectors (``eval.embcache``), fusions are Qdrant's (``eval.fusion``); on
the phase-2/3 subsets the pipeline and ``POST /v1/recall`` gave exactly the mirror's numbers.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np

from eval.data import SETS, load, set_names
from eval.embcache import RESULTS
from eval.methods import Method
from eval.metrics import Score, evidence_recall, score
from eval.noise import differences, verdict
from eval.noise import table as noise_table
from eval.views import Q, Views

ASST = "single-session-assistant"
KU = "knowledge-update"  # the category supersession is for (eval/README.md, "Supersession")
COLUMNS = (
    "s/dev",
    "s/holdout",
    "oracle/dev",
    "oracle/holdout",
    "locomo/dev",
    "locomo/holdout",
    "asst",
    "ku/dev",
    "ku/holdout",
)


def evaluate(views: Views, methods: Mapping[str, Method]) -> dict[str, dict[str, Score]]:
    v = dict(views.views)
    if "oracle/dev" in v:
        v["asst"] = [q for q in v["oracle/dev"] if q.type == ASST]
    if views.by_category:  # knowledge-update questions of both sets, dev and holdout
        for part in ("dev", "holdout"):
            v[f"ku/{part}"] = [q for s in ("s", "oracle") for q in v.get(f"{s}/{part}", []) if q.type == KU]
    if views.by_type:  # every question type of each set and part: '<set>/<part>/<type>'
        for name, qs in list(views.views.items()):
            for t in sorted({q.type for q in qs}):
                v[f"{name}/{t}"] = [q for q in qs if q.type == t]

    def run(m: Method, qs: list[Q]) -> Score:
        # a method over folded memories (eval.folding) says what each hit covers; else a hit covers its aliases
        cover = getattr(m, "cover", None)
        if cover is not None:
            return score(([cover(q.mem, i) for i in m(q)[0][:10]], q.evidence) for q in qs)
        return score(([q.mem.aliases[i] for i in m(q)[0][:10]], q.evidence) for q in qs)

    return {name: {vn: run(m, qs) for vn, qs in v.items() if qs} for name, m in methods.items()}


def recalls(views: Views, m: Method) -> dict[str, tuple[float, float]]:
    """Question id -> (R@5, R@10) of one method over every question of the views."""
    cover = getattr(m, "cover", None)
    out: dict[str, tuple[float, float]] = {}
    for qs in views.views.values():
        for q in qs:
            ranked = [cover(q.mem, i) if cover is not None else q.mem.aliases[i] for i in m(q)[0][:10]]
            out[q.id] = (evidence_recall(ranked, q.evidence, 5), evidence_recall(ranked, q.evidence, 10))
    return out


def verdicts(views: Views, methods: Mapping[str, Method], against: str, part: str = "dev") -> str:
    """The choice protocol (eval.noise) for every method against `against`: per set's `part`, whole and by
    question type or category, the paired bootstrap of ΔR@5/ΔR@10; one line per method, then each table."""
    cells: dict[str, list[str]] = {}
    for name, qs in views.views.items():
        if name.endswith("/" + part):
            cells[name] = [q.id for q in qs]
            for t in sorted({q.type for q in qs}):
                cells[f"{name}/{t}"] = [q.id for q in qs if q.type == t]
    base = recalls(views, methods[against])
    lines = [f"## The choice protocol against {against!r} ({part})", ""]
    tables = []
    for name, m in methods.items():
        if name == against:
            continue
        diffs = differences(base, recalls(views, m), cells)
        v = verdict(diffs)
        lines.append(
            f"- {name}: "
            + ("holds" if v.holds else "LOSES in " + ", ".join(v.losses))
            + (f"; gains in {', '.join(v.gains)}" if v.gains else "")
        )
        tables.append(noise_table(diffs, name))
    return "\n".join(lines) + "\n\n" + "\n\n".join(tables)


def dev_mean(r: Mapping[str, Score], part: str = "dev") -> float:
    got = [r[f"{v}/{part}"] for v in SETS if f"{v}/{part}" in r]
    cells = [x for s in got for x in (s.recall5, s.recall10)]
    return float(np.mean(cells)) if cells else 0.0


def table(res: dict[str, dict[str, Score]], title: str, views: Views, sort: bool = False) -> str:
    cols = [c for c in COLUMNS if any(c in r for r in res.values())]
    n = {c: next((r[c].n for r in res.values() if c in r), 0) for c in cols}
    holdout = any(c.endswith("/holdout") for c in cols)
    head = "| method | " + " | ".join(f"{c} ({n[c]} q)" for c in cols) + " | dev mean |" + " holdout mean |" * holdout
    lines = [f"## {title}", "", head, "|---" * (len(cols) + 2 + holdout) + "|"]
    names = sorted(res, key=lambda k: -dev_mean(res[k])) if sort else list(res)
    for name in names:
        r = res[name]
        cells = " | ".join(f"{r[c].recall5:.3f}/{r[c].recall10:.3f}" if c in r else "-" for c in cols)
        lines.append(f"| {name} | {cells} | {dev_mean(r):.3f} |" + f" {dev_mean(r, 'holdout'):.3f} |" * holdout)
    if views.skipped:
        lines.append(f"\n(corpora left out, embeddings not cached: {views.skipped})")
    return "\n".join(lines)


def type_table(res: dict[str, dict[str, Score]], title: str, views: Views) -> str:
    """The long table of a per-type experiment: one row per set, question type and part (the whole set's dev
    and holdout first), one column per method, and the second method's change against the first in points
    (R@5/R@10), the first being the baseline."""
    methods = list(res)
    cells = res[methods[0]]
    rows: list[str] = []
    for s in SETS:
        whole = [f"{s}/{p}" for p in ("dev", "holdout") if f"{s}/{p}" in cells]
        types = sorted({v.split("/")[2] for v in cells if v.startswith(f"{s}/") and v.count("/") == 2})
        rows += whole + [f"{s}/{p}/{t}" for t in types for p in ("dev", "holdout") if f"{s}/{p}/{t}" in cells]
    head = "| set / part / question type (questions) | " + " | ".join(methods)
    delta = len(methods) > 1
    head += f" | {methods[1]} − {methods[0]} (points) |" if delta else " |"
    lines = [f"## {title}", "", head, "|---" * (len(methods) + 1 + delta) + "|"]
    for v in rows:
        got = [res[m][v] for m in methods]
        line = f"| {v} ({cells[v].n}) | " + " | ".join(f"{g.recall5:.3f}/{g.recall10:.3f}" for g in got)
        if delta:
            d5, d10 = 100 * (got[1].recall5 - got[0].recall5), 100 * (got[1].recall10 - got[0].recall10)
            line += f" | {d5:+.1f}/{d10:+.1f}"
        lines.append(line + " |")
    if views.skipped:
        lines.append(f"\n(corpora left out, embeddings not cached: {views.skipped})")
    return "\n".join(lines)


def save(name: str, text: str, res: dict[str, dict[str, Score]]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"sweep-{name}.txt").write_text(text + "\n")
    data = {m: {v: vars_(s) for v, s in r.items()} for m, r in res.items()}
    (RESULTS / f"sweep-{name}.json").write_text(json.dumps(data, indent=1))


def vars_(s: Score) -> dict[str, float]:
    return {"n": s.n, "r5": s.recall5, "r10": s.recall10, "h5": s.hit5, "h10": s.hit10}


def main(argv: list[str] | None = None) -> int:
    from eval import experiments as X

    exps: dict[str, Callable[[argparse.Namespace], tuple[Views, dict[str, Method], str]]] = X.EXPERIMENTS
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("experiment", choices=sorted(exps))
    ap.add_argument(
        "--set", default="both", help="oracle, s, locomo, both (oracle and s) or all, or a comma-separated list"
    )
    ap.add_argument("--s-limit", type=int, default=None, help="first N s haystacks (types interleaved)")
    ap.add_argument("--oracle-limit", type=int, default=None, help="pool only the first N oracle questions")
    ap.add_argument("--oracle-type", default=None, help="pool only the oracle questions of this type")
    ap.add_argument("--model", default=None, help="model experiment: a sentence-transformers directory")
    ap.add_argument("--ctx", default=None, help="dense context, e.g. prev=1,words=64,date=1")
    ap.add_argument("--sctx", default=None, help="BM25 context for the later experiments, e.g. prev=1,date=1")
    ap.add_argument("--split", default=None, help="sentences experiment: split modes, e.g. p32,s1,+p32")
    ap.add_argument("--lead", default=None, help="sentences experiment: first piece led by prev1/Nw (N list)")
    ap.add_argument("--grid", action="store_true", help="sentences experiment: 96 fusion variants over the pieces")
    ap.add_argument("--no-window", action="store_true", help="sentences experiment: leave out the windows' row")
    ap.add_argument("--betas", default=None, help="piece-prior experiment: penalties, e.g. 0.04,0.08")
    ap.add_argument("--pool", default=None, help="piece-prior experiment: raw top N re-ranked, e.g. 100,200,400")
    ap.add_argument("--windows", action="store_true", help="piece-prior experiment: also over the 256/32 windows")
    ap.add_argument("--sort", action="store_true", help="rows by dev mean, best first")
    ap.add_argument(
        "--against", default=None, help="the choice protocol (eval.noise): every method against this one, by type"
    )
    ap.add_argument("--by-type", action="store_true", help="conversations: the long table, every type apart")
    ap.add_argument("--part", default="dev", choices=["dev", "holdout"], help="--against: the part judged")
    ap.add_argument(
        "--holdout", action="store_true", help="also score and print the holdout parts: the final check of a choice"
    )
    ap.add_argument("--tag", default="", help="suffix of the result files")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")  # the experiments' counts, on stderr
    t0 = time.monotonic()
    a.sets = {
        n: load(n, limit=a.s_limit, only=None) if n != "oracle" else load(n, limit=a.oracle_limit, only=a.oracle_type)
        for n in set_names(a.set)
    }
    if a.part == "holdout" and not a.holdout:
        raise SystemExit("--part holdout: the holdout is scored only with --holdout (the final check of a choice)")
    views, methods, title = exps[a.experiment](a)
    if not a.holdout:
        views = replace(views, views={k: qs for k, qs in views.views.items() if "/holdout" not in k})
    t1 = time.monotonic()
    res = evaluate(views, methods)
    text = type_table(res, title, views) if views.by_type else table(res, title, views, a.sort)
    if a.against:
        if a.against not in methods:
            raise SystemExit(f"--against {a.against!r}: no such method ({', '.join(methods)})")
        text += "\n\n" + verdicts(views, methods, a.against, a.part)
    text += f"\n\n(rows built in {t1 - t0:.0f}s, {len(methods)} methods scored in {time.monotonic() - t1:.0f}s)"
    print(text)
    save(a.experiment + a.tag, text, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
