"""The words of a query that most of a workspace's memories hold: left out of the query the dense leg embeds.
Pure, no IO (the recall engine samples the workspace's memories: `episodic.retrieval.common`).

BM25 already gives a word found in half the memories almost no weight (its IDF), but the dense leg embeds
the whole question, and MiniLM's vector of "What does Melanie do to destress?" is pulled as much by the
name as by what is asked. In a conversation between Melanie and Caroline the name is in half the memories
(every turn of hers starts with it), so the dense leg ranks her small talk next to the answer. So a word
held by more than `above` of the workspace's memories (its document frequency, over BM25's own terms:
the same tokens, stems and stop words as the sparse leg) tells the memories apart no better than chance and
is left out of the dense query; the BM25 legs keep the whole query. It adapts per workspace: the same word
is kept where it is rare. Stop words (no BM25 term) stay, since the model reads them as grammar, and a query
made only of common words is kept whole.

The share shipped is 0.5 (`EPISODIC_DENSE_QUERY_COMMON`): a word in more than half the memories, where
BM25's classic (Robertson-Spärck Jones) IDF turns negative. Measured (docs/quality.md, "Conversations"):
LoCoMo dev R@5/R@10 +1.9/+4.0 in the mirror (the speakers' names), LongMemEval oracle unchanged (no
question word is in half its memories); from 0.2 down it starts taking words like "new" and "time" there.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

_TOKEN = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class TermShares:
    """Document frequencies of BM25 terms over a sample of one workspace's memories."""

    counts: Counter[int]
    documents: int

    @classmethod
    def of(cls, documents: Iterable[Sequence[int]]) -> TermShares:
        """From each sampled memory's BM25 term indices (a term counted once per memory)."""
        counts: Counter[int] = Counter()
        n = 0
        for terms in documents:
            counts.update(set(terms))
            n += 1
        return cls(counts, n)

    def share(self, term: int) -> float:
        """The share of the sampled memories that hold `term` (0 with no sample)."""
        return self.counts[term] / self.documents if self.documents else 0.0


def informative(query: str, terms_of: Callable[[str], Sequence[int]], shares: TermShares, above: float) -> str:
    """`query` without its common words: a whitespace-separated word goes when it has BM25 terms and every
    one of them is held by more than `above` of the sampled memories. The words kept stay in their order;
    a query every content word of which is common, `above` <= 0, or no sample: the query as it is."""
    if above <= 0 or not shares.documents:
        return query
    kept: list[str] = []
    dropped = False
    for word in _TOKEN.findall(query):
        terms = terms_of(word)
        if terms and all(shares.share(t) > above for t in terms):
            dropped = True
            continue
        kept.append(word)
    if not dropped or not any(terms_of(w) for w in kept):
        return query
    return " ".join(kept)
