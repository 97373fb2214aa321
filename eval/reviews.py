"""Reviews from use, simulated on LongMemEval (issue 26): do agents' reviews rank better than mere retrievals?

    python -m eval.reviews [--set oracle|s|locomo|both|all] [--leg sparse|hybrid] [--k 5] [--after 1,30] [--span 7]
    python -m eval.reviews --surprise --set all --leg hybrid     # the surprise boost on against off (issue 47)
    (--leg hybrid, --surprise: need the dense cache: python -m eval.embcache --set all --split p32)

LongMemEval has no reviews, so this builds them. The questions of each part (dev, holdout: ``eval.data.holdout``)
are split in two halves by a stable hash: the **asked** half and the **new** half. Over ``--span`` days,
each asked question is recalled once (top ``--k``, the ranking multiplied by each memory's importance as it
is at that moment, as the store does), and a perfect reviewer rates every returned memory: ``good`` when it
holds an evidence turn of the question, ``again`` when it does not; every returned memory is also counted
referenced (what the product does today). ``--after`` days after the last review, two things are measured:

- **repeat**: the asked questions asked again (does the memory of what served come back first?);
- **new**: the other half's questions, never reviewed (do reviews made for other questions help or hurt
  questions nobody reviewed? In a workspace this is most of what agents ask).

Modes (``EPISODIC_REVIEW_RANKING`` and the baselines): ``none`` (importance flat: no reinforcement at all),
``off`` (SPEC §8: every retrieval reinforces, ``1 + log2(refs + 1)/8``: today's behaviour after the nightly
job), ``reinforce`` and ``fsrs`` (episodic.domain.review: the product's own functions, on payloads as the
importance agent writes them). Importance multiplies the leg's scores of its top ``DEPTH`` candidates (the
store multiplies the fused scores of its prefetch, 100+ deep: the same order wherever a candidate stays within
the top 30). Every memory here is `summary.generated` info (base 0.7) indexed at the same time, so recency
cancels and only the reinforcement term moves ranks.

What it shows and does not: the reviewer is perfect and every hit is reviewed (an upper bound on what
reviews can do); the questions are LongMemEval's (one question per evidence set, little overlap between
questions, so the ``new`` column mostly measures the harm of demoting memories some other question did
not need); one agent, one workspace per corpus. It does not show how real agents rate, nor what happens
when many agents ask overlapping questions over months.

Choose on dev, report holdout: each part runs on its own (its asked half reviewed, its two halves measured),
starting from no reviews.

``--surprise`` (issue 47, seed 003's key moments) measures the surprise boost: every memory gets its surprise
as the linker computes it (``surprises``: 1 - its best cosine to the memories indexed before it in its
workspace, one agent per corpus here), and ``fsrs`` runs twice in the same process, with
``EPISODIC_SURPRISE_BOOST`` at its default (0.5) and at 0, over the same questions; per column, the paired
bootstrap of ``eval.noise`` (the choice protocol) says, by part and by question type or category, whether
the boost loses or gains beyond the noise. The boost moves nothing in the other modes (it is a term of the
initial FSRS state, which only ``fsrs`` ranks by). Here every memory is indexed at the same instant, so the
boost is all that tells two never-reviewed memories' retrievability apart.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from episodic.domain.review import ReviewState, review
from episodic.domain.scoring import importance_of
from episodic.domain.surprise import BOOST, KEY_MOMENT, SURPRISE, surprise
from eval import noise
from eval.context import ContextSpec
from eval.data import load, set_names
from eval.embcache import RESULTS
from eval.memories import Memories
from eval.methods import DEPTH, Method, single
from eval.metrics import Score, evidence_recall, score, table
from eval.sentences import pieces as split_pieces
from eval.views import Dense, Q, Sparse, build, cache

MODES = ("none", "off", "reinforce", "fsrs")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
BASE = 0.7


def asked(question_key: str) -> bool:
    """The stable half of a part's questions that is asked (and reviewed) first."""
    return hashlib.sha1(f"review:{question_key}".encode()).digest()[0] % 2 == 0


@dataclass
class Workspace:
    """One corpus's memories as the importance agent would keep them, in one mode."""

    mode: str
    boost: float = BOOST  # EPISODIC_SURPRISE_BOOST
    surprise: np.ndarray | None = None  # each memory's surprise (`surprises`); None: no memory has one
    refs: dict[int, int] = field(default_factory=dict)
    states: dict[int, ReviewState] = field(default_factory=dict)

    def importance(self, idx: np.ndarray, now: datetime) -> np.ndarray:
        """The importance of the candidates at `now`, as decay (or the agent's rescore) computes it."""
        if self.mode == "none":
            return np.ones(len(idx))
        out = np.empty(len(idx))
        for n, i in enumerate(idx.tolist()):
            payload: dict[str, Any] = {
                "base_importance": BASE,
                "indexed_at": "2026-01-01T00:00:00Z",
                "reference_count": self.refs.get(i, 0),
            }
            if self.surprise is not None:
                payload[SURPRISE] = float(self.surprise[i])
            st = self.states.get(i)
            if st is not None:
                payload.update(st.fields())
            out[n] = importance_of(payload, now, reviews=self.mode, boost=self.boost)
        return out

    def rank(self, q: Q, method: Method, now: datetime) -> np.ndarray:
        idx, sc = method(q)
        imp = self.importance(idx, now)
        order = np.lexsort((np.arange(len(idx)), -(sc * imp)))
        return idx[order]

    def served(self, ranked: Sequence[int], q: Q, at: datetime) -> None:
        """One recall's hits referenced, and reviewed by a perfect reviewer."""
        for i in ranked:
            self.refs[i] = self.refs.get(i, 0) + 1
            used = bool(set(q.mem.aliases[i]) & q.evidence)
            self.states[i] = review(self.states.get(i, ReviewState()), "good" if used else "again", at)


def hits(q: Q, ranked: np.ndarray) -> list[list[str]]:
    return [q.mem.aliases[i] for i in ranked.tolist()]


def surprises(mem: Memories, split: str = "p32") -> np.ndarray:
    """Each memory's surprise as the linker writes it (`surprises_of`), from the dense leg's pieces
    (``split``) read from the embedding cache (KeyError when they are not cached)."""
    c = cache("minilm")
    chunk = c.chunker()
    rows = [c.matrix(split_pieces(t, split, chunk) if split else chunk(t)) for t in mem.texts(ContextSpec())]
    return surprises_of(rows, mem.at)


def surprises_of(rows: Sequence[np.ndarray], at: np.ndarray, block: int = 128) -> np.ndarray:
    """Each memory's surprise as the linker writes it (episodic.maintenance.linker, `_surprise`): its nearest
    memory with an earlier time (`at`, the `ts`), by the store's multivector max-sim (the sum over its unit
    piece vectors, `rows[i]`, of each one's best cosine to the other's pieces), that score lowered to the
    two memories' mean-vector cosine when either has more than one piece; 1 - that, 1.0 when nothing came
    before. `block` memories a step (about 1,000 pieces against every piece: a few hundred MB)."""
    n = len(rows)
    counts = np.array([len(r) for r in rows])
    pieces = np.concatenate(rows).astype(np.float32)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    means = np.stack([r.mean(axis=0) for r in rows])  # the linker's mean_vector: the normalised mean
    means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    out = np.ones(n)
    for a in range(0, n, block):
        b = min(n, a + block)
        lo, hi = starts[a], starts[b - 1] + counts[b - 1]
        piece_best = np.maximum.reduceat(pieces[lo:hi] @ pieces.T, starts, axis=1)  # piece x memory
        score_ = np.add.reduceat(piece_best, starts[a:b] - lo, axis=0)  # memory x memory: max-sim summed
        score_[at[a:b, None] <= at[None, :]] = -np.inf  # only what was held before (so never itself)
        for r, i in enumerate(range(a, b)):
            j = int(np.argmax(score_[r]))
            if not np.isfinite(score_[r, j]):
                continue  # nothing before it
            best = float(score_[r, j])
            if counts[i] > 1 or counts[j] > 1:
                best = min(best, float(means[i] @ means[j]))
            out[i] = surprise(best)
    return out


@dataclass
class Run:
    """One simulation's rankings: per column, each question with the hits it got."""

    columns: dict[str, list[tuple[Q, list[list[str]]]]]

    def scores(self) -> dict[str, Score]:
        return {c: score((h, q.evidence) for q, h in rows) for c, rows in self.columns.items()}

    def recalls(self, column: str) -> dict[str, tuple[float, float]]:
        """question key -> (R@5, R@10) in one column (eval.noise's pairing)."""
        return {
            key(q): (evidence_recall(h, q.evidence, 5), evidence_recall(h, q.evidence, 10))
            for q, h in self.columns[column]
        }


def key(q: Q) -> str:
    return f"{q.mem.corpus.name}/{q.id}"


def simulate(
    qs: list[Q],
    method: Method,
    mode: str,
    *,
    k: int,
    span_days: float,
    after_days: Sequence[float],
    boost: float = BOOST,
    surprise_of: Mapping[str, np.ndarray] | None = None,
) -> Run:
    """Review the asked half over `span_days`, then measure both halves `after` days later. `surprise_of`:
    corpus name -> its memories' surprise (`surprises`), weighed by `boost`."""
    keyed = sorted(qs, key=lambda q: hashlib.sha1(repr(sorted(q.evidence)).encode()).hexdigest())
    first = [q for q in keyed if asked(repr(sorted(q.evidence)))]
    rest = [q for q in keyed if not asked(repr(sorted(q.evidence)))]
    spaces: dict[str, Workspace] = {}

    def ws(q: Q) -> Workspace:  # one workspace per corpus (s, LoCoMo: one per haystack or conversation)
        name = q.mem.corpus.name
        if name not in spaces:
            spaces[name] = Workspace(mode, boost, None if surprise_of is None else surprise_of[name])
        return spaces[name]

    step = timedelta(days=span_days) / max(1, len(first))
    at = T0
    for q in first:
        ranked = ws(q).rank(q, method, at)[:k]
        ws(q).served(ranked.tolist(), q, at)
        at += step
    out: dict[str, list[tuple[Q, list[list[str]]]]] = {}
    for after in after_days:
        now = at + timedelta(days=after)
        out[f"repeat+{after:g}d"] = [(q, hits(q, ws(q).rank(q, method, now))) for q in first]
        out[f"new+{after:g}d"] = [(q, hits(q, ws(q).rank(q, method, now))) for q in rest]
    return Run(out)


def cells(view: str, qs: Sequence[Q]) -> dict[str, list[str]]:
    """'<set>/<part>' and '<set>/<part>/<type>' -> question keys (eval.compare's cells)."""
    out: dict[str, list[str]] = {view: [key(q) for q in qs]}
    for q in sorted(qs, key=lambda q: q.type):
        out.setdefault(f"{view}/{q.type}", []).append(key(q))
    return out


def surprise_report(views: Mapping[str, list[Q]], method: Method, *, k: int, span: float, after: list[float]) -> str:
    """fsrs with the surprise boost (BOOST) against fsrs without it (0), in one run: the scores of both and
    the paired differences, by part and type (eval.noise)."""
    lines: list[str] = []
    of: dict[str, np.ndarray] = {}
    for qs in views.values():
        for q in qs:
            if q.mem.corpus.name not in of:
                of[q.mem.corpus.name] = surprises(q.mem)
    for view, qs in views.items():
        if not qs:
            continue
        names = {q.mem.corpus.name for q in qs}
        values = np.concatenate([of[n] for n in sorted(names)])
        lines.append(
            f"\n{view}: {len(values)} memories, surprise median {np.median(values):.3f}, "
            f"key moments (>= {KEY_MOMENT}) {np.mean(values >= KEY_MOMENT):.1%}"
        )
        # interleaved: both arms over the same questions, one after the other, in this process
        off = simulate(qs, method, "fsrs", k=k, span_days=span, after_days=after, boost=0.0, surprise_of=of)
        on = simulate(qs, method, "fsrs", k=k, span_days=span, after_days=after, boost=BOOST, surprise_of=of)
        for column in on.columns:
            lines.append("")
            both = [("fsrs boost 0", off.scores()[column]), (f"fsrs boost {BOOST:g}", on.scores()[column])]
            lines.append(table(both, f"{view} {column}"))
            # the cells of the questions of this column (repeat: the asked half, new: the other)
            asked_qs = [q for q, _ in on.columns[column]]
            diffs = noise.differences(off.recalls(column), on.recalls(column), cells(view, asked_qs))
            lines.append(noise.table(diffs, f"{view} {column}: boost {BOOST:g} − boost 0"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.reviews", description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default="oracle", help="oracle, s, locomo, both (oracle and s), all, or a list")
    ap.add_argument("--leg", default="sparse", choices=("sparse", "hybrid"))
    ap.add_argument("--k", type=int, default=5, help="hits each asked question returns (and gets reviewed)")
    ap.add_argument("--span", type=float, default=7.0, help="days over which the asked questions are asked")
    ap.add_argument("--after", default="1,30", help="days after the last review when both halves are measured")
    ap.add_argument("--oracle-limit", type=int, default=None)
    ap.add_argument("--s-limit", type=int, default=None)
    ap.add_argument(
        "--surprise", action="store_true", help="fsrs with the surprise boost against without it, paired (issue 47)"
    )
    args = ap.parse_args(argv)
    after = [float(x) for x in args.after.split(",")]
    names = set_names(args.set)
    limits = {"oracle": args.oracle_limit, "s": args.s_limit, "locomo": None}
    rows: Mapping[str, Any] = {"S": Sparse()}
    method = single("S")
    if args.leg == "hybrid":  # the shipped tree (eval.experiments.shipped: the product's hybrid fusion)
        from eval.experiments import PIECE_PENALTY, RECOMMENDED_CONTEXT, shipped

        rows = {"S": Sparse(), "SC": Sparse(ctx=RECOMMENDED_CONTEXT)}
        rows["DP"] = Dense(split="p32", penalty=PIECE_PENALTY, candidates=200)
        method = shipped()
    views = build({n: load(n, limit=limits[n]) for n in names}, rows)
    if views.skipped:
        print(f"skipped (dense rows not cached): {views.skipped}", file=sys.stderr)
    lines = [
        f"eval.reviews: leg {args.leg}, k {args.k}, asked over {args.span:g} days, measured {args.after} days "
        f"after; depth {DEPTH}"
    ]
    if args.surprise:
        lines.append(surprise_report(views.views, method, k=args.k, span=args.span, after=after))
    for view, qs in [] if args.surprise else views.views.items():
        if not qs:
            continue
        runs = {m: simulate(qs, method, m, k=args.k, span_days=args.span, after_days=after) for m in MODES}
        per_mode = {m: r.scores() for m, r in runs.items()}
        for column in per_mode["none"]:
            title = f"{view} {column} ({'the asked half again' if column.startswith('repeat') else 'the other half'})"
            lines.append("")
            lines.append(table([(m, per_mode[m][column]) for m in MODES], title))
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"reviews-{'surprise-' if args.surprise else ''}{args.leg}-{args.set}.txt"
    (RESULTS / name).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
