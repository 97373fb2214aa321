"""Run-level evidence at recall: score a run (an agent's run, a conversation's session), then its memories;
and the neighbour lift, a short memory lifted by the short memories next to it in its run.
Pure, no IO (the store re-ranks the fused candidates with both: `episodic.store.facade.QdrantStore.query_hybrid`).

A question about one episode is usually answered by several memories of the run it happened in, and one of
them often matches the question's words less than its neighbours do (the reply after the question, the
detail told three turns later). So each run gets a score from its memories among the fused candidates (the
sum of its `depth` best fused scores) and every candidate is re-scored

    score + weight × best score × its run's score / the best run's score

(the fused score plus a share in [0, 1] of the best one, so a score keeps the fused unit), best first. A
run with one strong memory and a run with three good ones can then trade places, and a memory of the
strongest run climbs past an isolated memory of a weaker one. A memory without a run is a run of its own,
so where no run holds two candidates the order is the fused one.

Measured (docs/quality.md, "Conversations"): on LoCoMo dev it lifts R@5/R@10 by 3 to 6 points (one session
holds most answers), on LongMemEval oracle dev it loses (multi-session and knowledge-update questions, whose
evidence lies in several runs), so it is an option, off by default (`EPISODIC_RRF_RUN_WEIGHT`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Candidate = tuple[str, float, Hashable | None]  # (point id, fused score, its run; None: a run of its own)


def run_scores(candidates: Sequence[Candidate], depth: int) -> list[float]:
    """Each candidate's run score: the sum of the `depth` best fused scores of the candidates of its run."""
    members: dict[Hashable, list[float]] = {}
    for i, (_, score, run) in enumerate(candidates):
        members.setdefault(run if run is not None else ("", i), []).append(score)
    best = {run: sum(sorted(scores, reverse=True)[:depth]) for run, scores in members.items()}
    return [best[run if run is not None else ("", i)] for i, (_, _, run) in enumerate(candidates)]


def run_level(candidates: Sequence[Candidate], weight: float, depth: int = 3) -> list[tuple[str, float]]:
    """The candidates re-ranked by their own and their run's score (see the module doc), best first, ties in
    the fused order; `weight` <= 0 or no candidate: the fused order and scores."""
    if weight <= 0 or not candidates:
        return [(pid, score) for pid, score, _ in candidates]
    runs = run_scores(candidates, max(1, depth))
    top = max(score for _, score, _ in candidates)
    top_run = max(runs)
    shared = [top * r / top_run if top_run > 0 else 0.0 for r in runs]
    combined = [c[1] + weight * s for c, s in zip(candidates, shared, strict=True)]
    order = sorted(range(len(candidates)), key=lambda i: (-combined[i], i))
    return [(candidates[i][0], combined[i]) for i in order]


@dataclass(frozen=True, slots=True)
class Turn:
    """A fused candidate as the neighbour lift sees it: its point, score, entry id, its run neighbours' entry
    ids (its `previous` / `next` edges; None: none) and its summary's length in words."""

    point_id: str
    score: float
    entry_id: str
    previous: str | None
    next: str | None
    words: int

    @classmethod
    def of(cls, point_id: str, score: float, payload: Mapping[str, Any]) -> Turn:
        """A fused candidate from its stored payload (its `entry_id`, `relations` and `summary`)."""
        summary = payload.get("summary")
        return cls(
            point_id,
            score,
            str(payload.get("entry_id", point_id)),
            adjacent(payload, "previous"),
            adjacent(payload, "next"),
            words(summary) if isinstance(summary, str) else 1 << 30,  # no summary: never short
        )


def adjacent(payload: Mapping[str, Any], relation: str) -> str | None:
    """The entry id a memory's one `relation` (`previous` / `next`) edge points at, if any (its payload's
    `relations`; the indexer keeps one of each: episodic.indexing.context)."""
    for e in payload.get("relations") or []:
        if isinstance(e, dict) and e.get("relation") == relation and e.get("dst"):
            return str(e["dst"])
    return None


def words(summary: str) -> int:
    """A summary's length as the neighbour lift counts it: whitespace-separated words."""
    return len(summary.split())


def neighbour_lift(candidates: Sequence[Turn], weight: float, limit: int) -> list[tuple[str, float]]:
    """The candidates re-ranked by the neighbour lift, best first, ties in the fused order:

        score + weight × the best of its run neighbours' scores

    where a neighbour is the candidate's `previous` or `next` memory, counted only when it is a candidate
    too and both it and the candidate are short (at most `limit` words). A line of a chat ("Yes, last week,
    at the lake!") says what it is about through the lines around it, so the reply to a matching question
    climbs with it; a paragraph says it alone, and so does the paragraph next to it, so a run of long
    memories (an agent's reports, an assistant's answers) keeps its fused order. Measured (docs/quality.md,
    "Short turns"): +6 to +7 points of R@5 on LoCoMo dev, LongMemEval oracle within noise (its turns are long).
    A score keeps the fused unit: a memory the lift does not touch keeps its fused score to the digit (the
    explorer reads a raised one against its legs' ranks). `weight` <= 0 or no candidate: the fused order
    and scores."""
    if weight <= 0 or not candidates:
        return [(c.point_id, c.score) for c in candidates]
    score_of = {c.entry_id: c.score for c in reversed(candidates)}  # an entry twice (pieces): its best
    short = {c.entry_id for c in candidates if c.words <= limit}
    combined = []
    for c in candidates:
        near = [score_of[n] for n in (c.previous, c.next) if n is not None and n in short and n != c.entry_id]
        combined.append(c.score + (weight * max(near) if near and c.words <= limit else 0.0))
    order = sorted(range(len(candidates)), key=lambda i: (-combined[i], i))
    return [(candidates[i].point_id, combined[i]) for i in order]
