"""Newer facts supersede older ones: when a new memory is an update of an earlier one (pure, no IO).

"The release train leaves on Tuesday", then weeks later "the release train now leaves on Thursday": the two
are about one subject, and the newer changes a fact of the older. Recall should put the newer first and say
what it replaces (seed 001 reserves a `contradicts` relation; `supersedes` sits in the same table). The rule
is the fold rule's other side (`episodic.domain.folding`), right for the same reason:

- **One subject**: the two memories are near in meaning (`cosine`, >= 0.80 by default, the similar-edge
  threshold) and share their words once the facts are set aside (`jaccard` of the content words that are
  not facts, >= 0.5 by default).
- **A changed fact**: both state numbers or dates (`folding.fact_tokens`) and they differ, by at most
  `changed` (2) on each side: a value replaced by another, not two lists of figures (a numbered answer and
  another numbered answer differ in every figure). Without a fact on both sides there is nothing to say
  which is the update: two wordings of one fact fold, two different subjects are merely similar.

Which one supersedes is decided by time: the memory with the later `ts` is the update, whichever arrived
first (a late write of an old fact does not replace the newer one).
"""

from __future__ import annotations

from dataclasses import dataclass

from episodic.domain.folding import Verdict, content_tokens, fact_tokens, jaccard

SUPERSEDES = "supersedes"  # the relation: newer -> older
SUPERSEDED_BY = "superseded_by"  # on the older memory: the newer memory's entry id

DEFAULT_SUPERSEDE_COSINE = 0.80
DEFAULT_SUPERSEDE_JACCARD = 0.5
MAX_CHANGED = 2  # facts replaced on each side, at most


@dataclass(frozen=True, slots=True)
class SupersedeRule:
    """When a memory supersedes an earlier one. `enabled` False: never (EPISODIC_SUPERSEDE_ENABLED)."""

    cosine: float = DEFAULT_SUPERSEDE_COSINE
    jaccard: float = DEFAULT_SUPERSEDE_JACCARD
    enabled: bool = True
    changed: int = MAX_CHANGED

    def __post_init__(self) -> None:
        if not 0.0 < self.cosine <= 1.0 or not 0.0 <= self.jaccard <= 1.0 or self.changed < 1:
            raise ValueError("supersede cosine must be in (0, 1] and supersede jaccard in [0, 1]")


def is_update(cosine: float, text: str, other: str, rule: SupersedeRule) -> Verdict:
    """Whether two memories `cosine` apart are one subject with a changed fact (which is newer is the
    caller's: by `ts`)."""
    if not rule.enabled:
        return Verdict(False, "supersession off")
    if cosine < rule.cosine:
        return Verdict(False, f"cosine {cosine:.3f} < {rule.cosine}")
    a, b = content_tokens(text), content_tokens(other)
    fa, fb = fact_tokens(a), fact_tokens(b)
    if not fa or not fb:
        return Verdict(False, "no number or date on both sides")
    if fa == fb:
        return Verdict(False, "the same numbers and dates")
    if len(fa - fb) > rule.changed or len(fb - fa) > rule.changed:
        return Verdict(False, f"more than {rule.changed} numbers or dates changed: not one fact")
    j = jaccard(a - fa, b - fb)
    if j < rule.jaccard:
        return Verdict(False, f"subject word jaccard {j:.3f} < {rule.jaccard}")
    return Verdict(True, f"cosine {cosine:.3f}, subject jaccard {j:.3f}, facts {sorted(fb)} -> {sorted(fa)}")
