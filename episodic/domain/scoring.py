"""DecayAndReinforce and retention eligibility (seed 001 "Importance scoring", SPEC §8, §10). Pure, no IO.

    importance = BASE × RecencyFactor × (1 + ReferenceBoost / 8), clamped to [0, 1], then the priority floor
    RecencyFactor(days) = max(0.1, 1 − days / 180)     days since `indexed_at` (fractional)
    ReferenceBoost(refs) = log2(refs + 1)

BASE is the memory's `base_importance` (the SPEC §10 table, already floored by its priority at the gate).
The floor of the priority marker (pin 0.80, high 0.85, permanent 0.95) applies to the result too, so a
pinned memory never decays below 0.80.

Retention (seed 001's compaction): the recency factor reaches its 0.1 floor at day 162; a memory "has sat
at the floor for N days" when it is at least 162 + N days old. Eligible memories are also never referenced
and carry no priority marker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from episodic.domain.policy import PRIORITY_FLOORS, apply_priority_floor
from episodic.domain.review import REVIEW_FIELDS, reinforcement
from episodic.domain.surprise import BOOST
from episodic.domain.times import parse_time  # (re-exported: recall and the jobs parse times from here)

RECENCY_DAYS = 180.0
RECENCY_FLOOR = 0.1
REFERENCE_DIVISOR = 8.0
# the first day the recency factor sits at its floor: 1 - d/180 = 0.1
FLOOR_REACHED_DAYS = (1.0 - RECENCY_FLOOR) * RECENCY_DAYS
DEFAULT_BASE = 0.5  # a memory without base_importance ranks as info-level routine (SPEC §10)
SECONDS_PER_DAY = 86_400.0

# The payload fields DecayAndReinforce and retention read (the decay job scans only these).
DECAY_FIELDS: tuple[str, ...] = (
    "entry_id",
    "workspace_id",
    "base_importance",
    "importance_score",
    "priority",
    "indexed_at",
    "reference_count",
    "last_referenced_at",
    *REVIEW_FIELDS,
)


def recency_factor(days: float) -> float:
    """max(0.1, 1 − days/180); a memory from the future (clock skew) counts as brand new."""
    return max(RECENCY_FLOOR, 1.0 - max(0.0, days) / RECENCY_DAYS)


def reference_boost(refs: int) -> float:
    """log2(refs + 1): 0 for a memory never referenced, 1 after one reference, ~4.75 after 26."""
    return math.log2(max(0, refs) + 1)


def decay_importance(base: float, *, days: float, refs: int, priority: str | None = None) -> float:
    """The importance of a memory `days` after it was indexed, referenced `refs` times (6 decimals)."""
    raw = base * recency_factor(days) * (1.0 + reference_boost(refs) / REFERENCE_DIVISOR)
    return apply_priority_floor(min(1.0, max(0.0, raw)), priority)


def days_since(then: datetime | None, now: datetime) -> float:
    """Days from `then` to `now` (fractional); 0 when `then` is unknown."""
    if then is None:
        return 0.0
    return (now - then).total_seconds() / SECONDS_PER_DAY


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return default
    return float(value)


def _refs(payload: Mapping[str, Any]) -> int:
    return int(_number(payload.get("reference_count"), 0.0))


def _priority(payload: Mapping[str, Any]) -> str | None:
    p = payload.get("priority")
    return p if isinstance(p, str) and p in PRIORITY_FLOORS else None


def importance_of(payload: Mapping[str, Any], now: datetime, *, reviews: str = "off", boost: float = BOOST) -> float:
    """DecayAndReinforce for one stored memory (its payload), at `now`. `reviews` (EPISODIC_REVIEW_RANKING):
    with `reinforce` or `fsrs`, a memory agents reviewed is reinforced by its reviews instead of its
    retrievals (episodic.domain.review.reinforcement); `off` is SPEC §8's formula exactly. `boost`
    (EPISODIC_SURPRISE_BOOST) is the surprise's weight on the initial FSRS stability (`fsrs` only)."""
    base = min(1.0, max(0.0, _number(payload.get("base_importance"), DEFAULT_BASE)))
    days = days_since(parse_time(payload.get("indexed_at")), now)
    if reviews == "off":
        return decay_importance(base, days=days, refs=_refs(payload), priority=_priority(payload))
    term = reinforcement(payload, now, mode=reviews, refs=_refs(payload), surprise_boost=boost)
    return apply_priority_floor(min(1.0, max(0.0, base * recency_factor(days) * term)), _priority(payload))


def floor_since(payload: Mapping[str, Any]) -> datetime | None:
    """When the memory's recency factor reached its floor (indexed_at + 162 days); None without indexed_at."""
    indexed = parse_time(payload.get("indexed_at"))
    return None if indexed is None else indexed + timedelta(days=FLOOR_REACHED_DAYS)


def retention_eligible(payload: Mapping[str, Any], now: datetime, *, floor_days: float) -> bool:
    """Archive and remove? At the importance floor for at least `floor_days`, never referenced, no
    priority marker (pin, high and permanent memories are kept whatever their age)."""
    if _priority(payload) is not None or payload.get("priority"):
        return False
    if _refs(payload) > 0 or payload.get("last_referenced_at"):
        return False
    since = floor_since(payload)
    return since is not None and days_since(since, now) >= floor_days
