"""Near-duplicate folding: when two memories are one memory written twice (pure, no IO).

Exact duplicates (same agent, type and normalised summary) fold at the indexer by their key
(`episodic.domain.identity.dedup_key`). A near duplicate is the same record reworded, or written by another
agent of the crew: "Checkout OOM-killed during load test" three times over crowds out everything else in
the top k. Seed 004 folds by an exact normalised hash, then by cosine >= 0.86; seed 002 merges at a word
Jaccard > 0.8. We take both signals, because each alone folds what it should not:

- **Meaning** (`cosine`, >= 0.86 by default): the two say the same thing. Cosine alone is not enough: "the
  release train leaves on Tuesday" and "the release train now leaves on Thursday" are near 0.9 and are an
  update, not a repeat.
- **Words** (`jaccard` over content words, >= 0.8 by default, seed 002's value): the two are worded alike.
  Jaccard alone folds short texts that share their few words and differ in the one that matters; at 0.5 the
  LongMemEval conversations had "what about muscovado sugar in the frosting?" fold into "what about
  turbinado sugar in the frosting?" (eval/README.md, "Folding and supersession").
- **Facts** (`fact_tokens`: numbers, weekdays, months): two texts that state different numbers or dates
  are never folded, however alike: that is a change (supersession's case), and folding it would lose the
  newer fact.

`compatible` says which memories may fold at all: same workspace, same crew, same entry type and priority
(a fold must not change who may see a memory in `crew_shared`, nor its base importance or priority floor).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Payload fields of a fold (written by episodic.indexing.folding, filtered on by episodic.store.query).
FOLDED_INTO = "folded_into"  # on an absorbed memory: its owner's entry id
FOLDED = "folded"  # on an owner: the entries it absorbed
AGENTS = "agents"  # on an owner: the agents it stands for, its own first

DEFAULT_FOLD_COSINE = 0.86  # seed 004
DEFAULT_FOLD_JACCARD = 0.8  # seed 002; 0.5 folded "what about muscovado sugar?" into "... turbinado sugar?"

_WORD = re.compile(r"[^\W_]+(?:[.:/'-][^\W_]+)*", re.UNICODE)
_DIGIT = re.compile(r"\d")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_CALENDAR = _words(
    "monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri sat sun "
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec today tomorrow yesterday"
)
# Function words that carry no content: two rewordings differ in them most (a short list on purpose:
# negations and quantifiers stay, they change what a text says).
_STOP = _words(
    "a an the of to in on at for by with from as is are was were be been being it its this that these those "
    "and or but so then than there here i we you he she they me us him her them my our your his their "
    "do does did have has had will would can could should shall may might must just also very really "
    "into onto over under about after before during while again once now"
)


def content_tokens(text: str) -> frozenset[str]:
    """The text's words, case-folded, without function words."""
    return frozenset(w for w in _WORD.findall(text.casefold()) if w not in _STOP)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b| (1.0 for two empty sets: nothing to tell them apart)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def fact_tokens(tokens: frozenset[str]) -> frozenset[str]:
    """The words that state a fact a rewording keeps verbatim: numbers (anything with a digit), weekdays,
    months and relative days."""
    return frozenset(t for t in tokens if _DIGIT.search(t) or t in _CALENDAR)


@dataclass(frozen=True, slots=True)
class FoldRule:
    """When a new memory folds into an existing one. `enabled` False: never (EPISODIC_FOLD_ENABLED)."""

    cosine: float = DEFAULT_FOLD_COSINE
    jaccard: float = DEFAULT_FOLD_JACCARD
    enabled: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.cosine <= 1.0 or not 0.0 <= self.jaccard <= 1.0:
            raise ValueError("fold cosine must be in (0, 1] and fold jaccard in [0, 1]")


@dataclass(frozen=True, slots=True)
class Verdict:
    fold: bool
    reason: str  # why (or why not): shown in logs and tests


def near_duplicate(cosine: float, new_text: str, old_text: str, rule: FoldRule) -> Verdict:
    """Whether a memory of `new_text` is a rewording of one of `old_text`, the two `cosine` apart (for
    memories of several pieces, the cosine of their mean vectors: one shared sentence is no duplicate)."""
    if not rule.enabled:
        return Verdict(False, "folding off")
    if cosine < rule.cosine:
        return Verdict(False, f"cosine {cosine:.3f} < {rule.cosine}")
    a, b = content_tokens(new_text), content_tokens(old_text)
    if fact_tokens(a) != fact_tokens(b):
        return Verdict(False, "different numbers or dates: " + ", ".join(sorted(fact_tokens(a) ^ fact_tokens(b))))
    j = jaccard(a, b)
    if j < rule.jaccard:
        return Verdict(False, f"word jaccard {j:.3f} < {rule.jaccard}")
    return Verdict(True, f"cosine {cosine:.3f}, word jaccard {j:.3f}")


FOLD_KEYS = ("workspace_id", "crew_id", "entry_type", "priority")


def compatible(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether two stored memories may fold at all: the same workspace, crew, entry type and priority, and
    the old one is not itself folded into another."""
    if old.get(FOLDED_INTO):
        return False
    return all(new.get(k) == old.get(k) for k in FOLD_KEYS)
