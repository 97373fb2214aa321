"""Words the fold rule lets a rewording swap: WordNet's senses of a word stem, and its part of speech.
Static data, no network.

Two rewordings of one fact swap words for synonyms ("the migration completed" / "finished", "asked for" /
"requested", "bought" / "purchased"); a near miss swaps a thing or a person for another of its kind
("niece" / "nephew", "checkout" / "payments"), or a doing for its opposite ("bought" / "sold"), which
WordNet keeps apart. The table (data/synonyms.tsv.gz, about 460 KB) holds, for each Snowball stem (the
rule's word unit, `episodic.domain.folding`) of a one-word WordNet lemma or of an irregular form ("fell",
"taught", "begun"): the synsets of its senses; apart, what its verb senses widen to (their hypernyms) and
its adjective senses (the adjectives they are similar to); its antonyms; and whether it is verbish (most of
its senses in use are verbs, adjectives or adverbs). It is made from WordNet 3.0 by `python -m
eval.wordnet_table` (how and why: that module), and read once per process, at the first comparison.

WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved. Its licence: data/WORDNET-LICENSE.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

TABLE = "synonyms.tsv.gz"


@dataclass(frozen=True, slots=True)
class Lexicon:
    own: dict[str, frozenset[int]]  # stem -> the synsets of its senses
    wide: dict[str, frozenset[int]]  # stem -> what its verb and adjective senses widen to (hypernyms, similar)
    verbish: frozenset[str]
    antonyms: frozenset[tuple[str, str]]
    against: dict[str, frozenset[str]] = field(default_factory=dict)  # stem -> its antonyms (from `antonyms`)

    def __post_init__(self) -> None:
        if self.antonyms and not self.against:
            by: dict[str, set[str]] = {}
            for a, b in self.antonyms:
                by.setdefault(a, set()).add(b)
            object.__setattr__(self, "against", {k: frozenset(v) for k, v in by.items()})

    def contrary(self, a: str, b: str) -> bool:
        """Whether stem `b` says the opposite of stem `a`: WordNet's antonym of it, or a word related to one
        ("flunked" to "passed": "fail" is the antonym of "pass", "flunk" a way to fail)."""
        return any(o == b or self.related(o, b) for o in self.against.get(a, ()))

    def related(self, a: str, b: str) -> bool:
        """Whether stems `a` and `b` say the same thing in other words: a shared sense, or one's sense is
        what the other's widens to; never two senses under one hypernym, never WordNet's antonyms."""
        if (a, b) in self.antonyms:
            return False
        oa, ob = self.own.get(a, _NONE), self.own.get(b, _NONE)
        return not (
            oa.isdisjoint(ob) and oa.isdisjoint(self.wide.get(b, _NONE)) and ob.isdisjoint(self.wide.get(a, _NONE))
        )

    def is_verbish(self, stem: str) -> bool:
        """Whether the stem says what happened or how (a verb, adjective or adverb), not what or who."""
        return stem in self.verbish


_NONE: frozenset[int] = frozenset()


def _ids(text: str) -> frozenset[int]:
    return frozenset(int(i, 16) for i in text.split(",")) if text else _NONE


def parse(text: str) -> Lexicon:
    """The table's lines (`stem<TAB>v or nothing<TAB>own<TAB>widened<TAB>antonym stems`, synsets in hex)."""
    own: dict[str, frozenset[int]] = {}
    wide: dict[str, frozenset[int]] = {}
    verbish: set[str] = set()
    antonyms: set[tuple[str, str]] = set()
    for line in text.splitlines():
        stem, flag, mine, widened, against = [*line.split("\t"), "", "", "", ""][:5]
        if not stem:
            continue
        if mine:
            own[stem] = _ids(mine)
        if widened:
            wide[stem] = _ids(widened)
        if flag == "v":
            verbish.add(stem)
        antonyms.update((stem, other) for other in against.split(",") if other)
    return Lexicon(own, wide, frozenset(verbish), frozenset(antonyms))


@cache
def lexicon() -> Lexicon:
    """The shipped table (read once)."""
    raw = resources.files("episodic.domain").joinpath("data", TABLE).read_bytes()
    return parse(gzip.decompress(raw).decode())


EMPTY = Lexicon({}, {}, frozenset(), frozenset())  # no synonyms, nothing verbish: only the same words fold
