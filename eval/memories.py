"""One workspace as the store holds it: the unique entries of a corpus, their aliases and their neighbours.

A ``Memories`` is the turns deduplicated by normalised summary, as the store's identity does (a memory keeps
the context of its first occurrence, streaming order), their alias turn ids, their previous/next memory in
the session (for adjacency) and their run. ``eval.views`` scores questions against it and ``eval.embcache``
fills the embedding cache with its texts; it lives apart from both so that neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from eval.context import ContextSpec, rendered
from eval.data import Corpus


@dataclass
class Memories:
    corpus: Corpus
    first: list[int] = field(default_factory=list)  # corpus turn index of each memory's first occurrence
    aliases: list[list[str]] = field(default_factory=list)
    prev: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # -1: none
    next: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    run: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # run (session) number
    at: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the memory's time (its first turn's), epoch s

    @classmethod
    def build(cls, corpus: Corpus) -> Memories:
        from episodic.domain.identity import normalise_summary

        m = cls(corpus)
        where: dict[str, int] = {}
        of_turn: list[int] = []
        for i, t in enumerate(corpus.turns):
            nk = normalise_summary(t.text())
            if nk not in where:
                where[nk] = len(m.first)
                m.first.append(i)
                m.aliases.append([])
            m.aliases[where[nk]].append(t.id)
            of_turn.append(where[nk])
        n = len(m.first)
        m.prev = np.full(n, -1, dtype=np.int64)
        m.next = np.full(n, -1, dtype=np.int64)
        turns = corpus.turns
        runs: dict[str, int] = {}
        m.run = np.array([runs.setdefault(turns[i].session_id, len(runs)) for i in m.first], dtype=np.int64)
        m.at = np.array([turns[i].at.timestamp() for i in m.first])
        for j, i in enumerate(m.first):
            if i > 0 and turns[i - 1].session_id == turns[i].session_id:
                m.prev[j] = of_turn[i - 1]
            if i + 1 < len(turns) and turns[i + 1].session_id == turns[i].session_id:
                m.next[j] = of_turn[i + 1]
        return m

    def texts(self, ctx: ContextSpec, own: bool = True) -> list[str]:
        all_ = rendered(self.corpus.turns, ctx, own)
        return [all_[i] for i in self.first]
