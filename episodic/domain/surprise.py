"""Key moments (seed 003 "Surprise Detection"): how unexpected a memory was when it was written. Pure.

A memory's surprise is 1 - the best cosine between it and what its agent already held: the agent's own
memories of the same workspace with an earlier `ts`, whatever their run (computed by the linker, which
searches the memory's neighbours anyway, when its dense vector lands). The workspace and not the run,
because a run starts empty: over the run, every run's first entry would be a surprise of 1.0, and agents
that write a few entries a run would see most of them marked. Memories of several pieces compare as the
linker folds them (the lower of their best pair's and their mean vectors' cosine), so one stock sentence
shared with an old memory does not make a new one expected.

- **Key moment**: surprise >= 0.7 (seed 003's threshold): nothing like it was held before. Hits, the
  render, the MCP tools and the explorer mark it.
- **Stability**: the FSRS state a memory starts with (`episodic.domain.review.initial_state`) has its
  stability boosted by (1 + 0.5 x surprise), seed 003's formula: a surprising memory fades more slowly.
  The 0.5 is EPISODIC_SURPRISE_BOOST (0: no boost). It moves ranking only where retrievability does, with
  EPISODIC_REVIEW_RANKING=fsrs, and only for memories never reviewed (a review starts the state anew);
  what it changes there is measured in docs/quality.md "Key moments".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

SURPRISE = "surprise"  # payload field (written by the linker)
KEY_MOMENT = 0.7  # seed 003: surprise >= 0.7 is a key moment
BOOST = 0.5  # seed 003: initial stability x (1 + 0.5 x surprise)


def surprise(best_cosine: float | None) -> float:
    """1 - the best cosine to what was held, in [0, 1]; 1.0 when nothing was held (the agent's first memory)."""
    if best_cosine is None or not math.isfinite(best_cosine):
        return 1.0
    return round(min(1.0, max(0.0, 1.0 - float(best_cosine))), 6)


def surprise_of(payload: Mapping[str, Any]) -> float | None:
    """The stored surprise of a memory (None when it has none, or it is malformed)."""
    v = payload.get(SURPRISE)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return min(1.0, max(0.0, float(v)))


def key_moment(value: float | None) -> bool:
    return value is not None and value >= KEY_MOMENT


def stability_boost(value: float | None, boost: float = BOOST) -> float:
    """The factor on a memory's initial FSRS stability, 1 + boost x surprise (1.0 without a surprise, or with
    a boost of 0: EPISODIC_SURPRISE_BOOST)."""
    return 1.0 + boost * (value or 0.0)
