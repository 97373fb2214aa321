"""Reviews from use, simulated on LongMemEval (issue 26): do agents' reviews rank better than mere retrievals?

    python -m eval.reviews [--set oracle|s|both] [--leg sparse|hybrid] [--k 5] [--after 1,30] [--span 7]
    (--leg hybrid: the shipped fusion tree; needs the dense cache: python -m eval.embcache --split p32 ...)

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
from eval.data import load
from eval.embcache import RESULTS
from eval.methods import DEPTH, Method, single
from eval.metrics import Score, score, table
from eval.views import Dense, Q, Sparse, build

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
            st = self.states.get(i)
            if st is not None:
                payload.update(st.fields())
            out[n] = importance_of(payload, now, reviews=self.mode)
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


def simulate(
    qs: list[Q], method: Method, mode: str, *, k: int, span_days: float, after_days: Sequence[float]
) -> dict[str, Score]:
    """Review the asked half over `span_days`, then measure both halves `after` days later."""
    keyed = sorted(qs, key=lambda q: hashlib.sha1(repr(sorted(q.evidence)).encode()).hexdigest())
    first = [q for q in keyed if asked(repr(sorted(q.evidence)))]
    rest = [q for q in keyed if not asked(repr(sorted(q.evidence)))]
    ws = Workspace(mode)
    step = timedelta(days=span_days) / max(1, len(first))
    at = T0
    for q in first:
        ranked = ws.rank(q, method, at)[:k]
        ws.served(ranked.tolist(), q, at)
        at += step
    out: dict[str, Score] = {}
    for after in after_days:
        now = at + timedelta(days=after)
        out[f"repeat+{after:g}d"] = score((hits(q, ws.rank(q, method, now)), q.evidence) for q in first)
        out[f"new+{after:g}d"] = score((hits(q, ws.rank(q, method, now)), q.evidence) for q in rest)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.reviews", description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default="oracle", choices=("oracle", "s", "both"))
    ap.add_argument("--leg", default="sparse", choices=("sparse", "hybrid"))
    ap.add_argument("--k", type=int, default=5, help="hits each asked question returns (and gets reviewed)")
    ap.add_argument("--span", type=float, default=7.0, help="days over which the asked questions are asked")
    ap.add_argument("--after", default="1,30", help="days after the last review when both halves are measured")
    ap.add_argument("--oracle-limit", type=int, default=None)
    ap.add_argument("--s-limit", type=int, default=None)
    args = ap.parse_args(argv)
    after = [float(x) for x in args.after.split(",")]
    names = ("oracle", "s") if args.set == "both" else (args.set,)
    limits = {"oracle": args.oracle_limit, "s": args.s_limit}
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
    for view, qs in views.views.items():
        if not qs:
            continue
        per_mode = {m: simulate(qs, method, m, k=args.k, span_days=args.span, after_days=after) for m in MODES}
        for column in per_mode["none"]:
            title = f"{view} {column} ({'the asked half again' if column.startswith('repeat') else 'the other half'})"
            lines.append("")
            lines.append(table([(m, per_mode[m][column]) for m in MODES], title))
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"reviews-{args.leg}-{args.set}.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
