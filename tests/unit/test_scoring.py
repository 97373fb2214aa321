"""DecayAndReinforce at chosen ages and reference counts, the priority floors, retention eligibility. No IO."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from episodic.domain.scoring import (
    FLOOR_REACHED_DAYS,
    decay_importance,
    importance_of,
    recency_factor,
    reference_boost,
    retention_eligible,
)

NOW = datetime(2026, 11, 21, 3, 30, tzinfo=UTC)


def iso(dt: datetime) -> str:
    return dt.isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("days", "factor"),
    [(0, 1.0), (45, 0.75), (90, 0.5), (144, 0.2), (162, 0.1), (170, 0.1), (365, 0.1), (-3, 1.0)],
)
def test_recency_factor_falls_linearly_to_its_floor_at_day_162(days: float, factor: float) -> None:
    assert recency_factor(days) == pytest.approx(factor)


@pytest.mark.parametrize(("refs", "boost"), [(0, 0.0), (1, 1.0), (3, 2.0), (7, 3.0), (26, math.log2(27)), (-1, 0.0)])
def test_reference_boost_is_log2_of_refs_plus_one(refs: int, boost: float) -> None:
    assert reference_boost(refs) == pytest.approx(boost)


@pytest.mark.parametrize(
    ("base", "days", "refs", "expected"),
    [
        (0.9, 0, 0, 0.9),  # brand new, never referenced: the base
        (0.9, 90, 0, 0.45),  # half way down
        (0.9, 90, 1, 0.50625),  # 0.9 x 0.5 x (1 + 1/8)
        (0.5, 180, 0, 0.05),  # six months: the 0.1 floor
        (0.9, 182, 26, 0.9 * 0.1 * (1 + math.log2(27) / 8)),  # seed 001: an escalation recalled weekly
        (0.7, 30, 255, 0.7 * (1 - 30 / 180) * 2.0),  # 1 + 8/8 = 2: 1.1667 clamped to 1
    ],
)
def test_decay_curve_values(base: float, days: float, refs: int, expected: float) -> None:
    assert decay_importance(base, days=days, refs=refs) == pytest.approx(min(1.0, expected), abs=1e-6)


def test_seed_example_the_weekly_recalled_escalation_outranks_the_stale_info_entry() -> None:
    escalation = decay_importance(0.9, days=182, refs=26)
    info = decay_importance(0.5, days=182, refs=0)
    unrecalled = decay_importance(0.9, days=182, refs=0)
    assert escalation == pytest.approx(0.143492, abs=1e-6)
    assert escalation > unrecalled > info == 0.05


@pytest.mark.parametrize(("priority", "floor"), [("pin", 0.80), ("high", 0.85), ("permanent", 0.95)])
def test_priority_floors_apply_after_decay(priority: str, floor: float) -> None:
    assert decay_importance(0.9, days=400, refs=0, priority=priority) == floor
    assert decay_importance(0.9, days=0, refs=0, priority=priority) == max(0.9, floor)
    assert decay_importance(0.9, days=400, refs=0, priority="bogus") == pytest.approx(0.09)


def test_importance_of_reads_a_stored_payload_and_tolerates_missing_or_odd_fields() -> None:
    payload = {
        "base_importance": 0.9,
        "indexed_at": iso(NOW - timedelta(days=90)),
        "reference_count": 1,
        "priority": None,
    }
    assert importance_of(payload, NOW) == pytest.approx(0.50625)
    assert importance_of({}, NOW) == 0.5  # no base: info-level routine; no indexed_at: new
    assert importance_of({"base_importance": "x", "reference_count": True, "indexed_at": "garbage"}, NOW) == 0.5
    assert importance_of({"base_importance": 3.0, "indexed_at": iso(NOW)}, NOW) == 1.0  # clamped


def test_retention_takes_only_memories_at_the_floor_long_enough_never_referenced_and_unmarked() -> None:
    old = NOW - timedelta(days=FLOOR_REACHED_DAYS + 30)
    base = {"indexed_at": iso(old), "reference_count": 0, "last_referenced_at": None, "priority": None}
    assert retention_eligible(base, NOW, floor_days=30)
    assert not retention_eligible(base, NOW, floor_days=31)  # a day short
    assert not retention_eligible({**base, "reference_count": 1}, NOW, floor_days=30)
    assert not retention_eligible({**base, "last_referenced_at": iso(old)}, NOW, floor_days=30)
    for marker in ("pin", "high", "permanent"):
        assert not retention_eligible({**base, "priority": marker}, NOW, floor_days=30)
    assert not retention_eligible({**base, "indexed_at": None}, NOW, floor_days=0)
