"""Scoring formulas (SPEC §8): importance decay and reinforcement. Pure functions."""

from __future__ import annotations

import math

from episodic.policy import apply_priority_floor

DECAY_HORIZON_DAYS = 180.0
RECENCY_FLOOR = 0.1


def recency_factor(age_days: float) -> float:
    return max(RECENCY_FLOOR, 1.0 - max(age_days, 0.0) / DECAY_HORIZON_DAYS)


def reference_boost(refs: int) -> float:
    return math.log2(max(refs, 0) + 1)


def importance(base: float, age_days: float, refs: int, priority: str | None = None) -> float:
    """BASE × max(0.1, 1 − days/180) × (1 + log2(refs + 1)/8), clamped to [0, 1], priority-floored."""
    value = base * recency_factor(age_days) * (1.0 + reference_boost(refs) / 8.0)
    return apply_priority_floor(min(1.0, max(0.0, value)), priority)
