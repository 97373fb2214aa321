"""No repeats in the prompt budget: the hits a `<recalled-memory>` block keeps, each fact once. Pure.

The render spends its characters on distinct memories: walking the hits best first, a hit that says what an
already kept hit says is left out, and the kept hit counts it (`similar_left_out`, shown on its line as
`+N similar`). "Says the same" is the fold rule (`episodic.domain.folding.near_duplicate`: the same content
words, facts, names, negations and outcomes, measured on eval/data/fold_pairs.jsonl), over the two hits'
mean vectors' cosine, or a fold the store already recorded between them (an owner and its absorbed entry,
both visible in scope `crew_shared`). It is looser than the stream's fold in one way only: the two need not
share crew, entry type, priority or agent, which a fold needs because it changes who sees a memory and how
important it is, and which a render changes nothing of (both hits are already the caller's to read).

Hits without a vector (sparse mode, a memory written BM25-first) are compared by their words alone: the rule's
cosine is a gate that two texts with the same content words pass anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import numpy as np

from episodic.domain.folding import FoldRule, near_duplicate


class Comparable(Protocol):
    entry_id: str
    summary: str
    folded: list[str]
    similar_left_out: int

    @property
    def mean(self) -> np.ndarray | None: ...


def _cosine(a: Comparable, b: Comparable) -> float:
    if a.mean is None or b.mean is None or a.mean.shape != b.mean.shape:
        return 1.0  # no vectors to gate on: the words decide
    return float(a.mean @ b.mean)


def repeats(hit: Comparable, kept: Comparable, rule: FoldRule) -> bool:
    """Whether `hit` says what `kept` says: a fold the store recorded between them, or the fold rule."""
    if hit.entry_id in kept.folded or kept.entry_id in hit.folded:
        return True
    return near_duplicate(_cosine(hit, kept), hit.summary, kept.summary, rule).fold


H = TypeVar("H", bound=Comparable)


def distinct(hits: Sequence[H], k: int, rule: FoldRule) -> list[H]:
    """The first `k` hits that say different things, best first; each kept hit's `similar_left_out` counts
    the hits left out for it (the hits' own order is kept)."""
    kept: list[H] = []
    for hit in hits:
        same = next((other for other in kept if repeats(hit, other, rule)), None)
        if same is not None:
            same.similar_left_out += 1 + hit.similar_left_out
        elif len(kept) < k:
            kept.append(hit)
    return kept
