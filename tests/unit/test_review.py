"""Reviews from use, the pure part (episodic.domain.review, issue 26): FSRS state per rating, retrievability,
what reviews do to importance in each EPISODIC_REVIEW_RANKING mode, and stored state read defensively."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from episodic.domain.review import RATINGS, ReviewState, retrievability, review, state_of
from episodic.domain.scoring import decay_importance, importance_of

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def reviewed(*ratings: str, every_days: float = 2.0) -> ReviewState:
    st, at = ReviewState(), T0
    for r in ratings:
        st = review(st, r, at)
        at += timedelta(days=every_days)
    return st


def test_a_first_review_sets_stability_by_rating_and_counts_it() -> None:
    states = {r: reviewed(r) for r in RATINGS}
    s = [states[r].stability for r in RATINGS]
    assert all(x is not None for x in s)
    assert s == sorted(s) and len(set(s)) == 4  # again < hard < good < easy
    d = [states[r].difficulty for r in RATINGS]
    assert d == sorted(d, reverse=True)  # again is the hardest
    good = states["good"]
    assert (good.review_count, good.ratings, good.last_rating, good.last_reviewed_at) == (1, {"good": 1}, "good", T0)


def test_good_reviews_grow_stability_and_again_cuts_it() -> None:
    g1, g2 = reviewed("good"), reviewed("good", "good")
    lapse = reviewed("good", "good", "again")
    assert g2.stability > g1.stability  # type: ignore[operator]
    assert lapse.stability < g2.stability  # type: ignore[operator]
    assert lapse.review_count == 3 and lapse.used == 2 and lapse.ratings == {"good": 2, "again": 1}


def test_retrievability_is_one_at_the_review_falls_with_time_and_is_none_unreviewed() -> None:
    st = reviewed("good")
    assert retrievability(ReviewState(), T0) is None
    assert retrievability(st, T0) == pytest.approx(1.0)
    at_s = retrievability(st, T0 + timedelta(days=st.stability))  # type: ignore[arg-type]
    assert at_s == pytest.approx(0.9, abs=1e-6)  # stability: the days until R is 0.9
    later = [retrievability(st, T0 + timedelta(hours=h)) for h in (1, 24, 240, 2400)]
    assert later == sorted(later, reverse=True) and later[-1] < 0.7  # type: ignore[type-var]
    # an `again` memory falls within hours, not at the next whole day
    again = reviewed("again")
    assert retrievability(again, T0 + timedelta(hours=6)) < 0.95  # type: ignore[operator]


def test_a_review_dated_before_the_last_counts_at_the_last() -> None:
    st = reviewed("good")
    earlier = review(st, "good", T0 - timedelta(days=3))
    assert earlier.last_reviewed_at == T0


def test_a_bad_rating_is_refused() -> None:
    with pytest.raises(ValueError, match="rating must be one of again, hard, good, easy"):
        review(ReviewState(), "great", T0)


def test_stored_state_round_trips_and_garbage_reads_as_never_reviewed() -> None:
    st = reviewed("good", "again")
    back = state_of(st.fields())
    assert back.review_count == 2 and back.last_rating == "again" and back.last_reviewed_at == st.last_reviewed_at
    assert back.stability == pytest.approx(st.stability, abs=1e-5)
    for junk in (
        {},
        {"review_count": "3", "stability": "x"},
        {"review_count": 2, "stability": -1.0, "last_reviewed_at": "yesterday"},
        {"review_count": True, "review_ratings": ["good"], "last_rating": "great", "difficulty": float("nan")},
    ):
        assert not state_of(junk).reviewed


def payload(refs: int = 0, state: ReviewState | None = None) -> dict[str, object]:
    p: dict[str, object] = {"base_importance": 0.7, "indexed_at": "2026-05-01T09:00:00Z", "reference_count": refs}
    if state is not None:
        p.update(state.fields())
    return p


def test_off_is_the_spec_formula_whatever_the_reviews() -> None:
    now = T0 + timedelta(days=10)
    for st in (None, reviewed("again"), reviewed("easy", "easy")):
        assert importance_of(payload(5, st), now) == decay_importance(0.7, days=10, refs=5)
        assert importance_of(payload(5, st), now, reviews="off") == decay_importance(0.7, days=10, refs=5)


def test_reinforce_counts_the_reviews_that_served_instead_of_retrievals() -> None:
    now = T0 + timedelta(days=1)
    unreviewed = importance_of(payload(7), now, reviews="reinforce")
    assert unreviewed == decay_importance(0.7, days=1, refs=7)  # never reviewed: SPEC §8's term
    useless = importance_of(payload(7, reviewed("again")), now, reviews="reinforce")
    useful = importance_of(payload(7, reviewed("good", every_days=0)), now, reviews="reinforce")
    assert useless == pytest.approx(0.7 * (1 - 1 / 180))  # retrieved 7 times, never of use: no boost
    assert useless < useful < unreviewed  # one use counts as one reference; retrievals of no use count nothing


def test_fsrs_multiplies_by_retrievability_so_a_memory_of_no_use_sinks_with_time() -> None:
    bad, good = payload(1, reviewed("again")), payload(1, reviewed("good"))
    soon, later = T0 + timedelta(hours=1), T0 + timedelta(days=30)
    assert importance_of(bad, soon, reviews="fsrs") > importance_of(bad, later, reviews="fsrs")
    assert importance_of(good, later, reviews="fsrs") > importance_of(bad, later, reviews="fsrs")
    assert importance_of(bad, later, reviews="fsrs") < importance_of(bad, later, reviews="reinforce")
    # a priority floor holds whatever the reviews say
    pinned = {**bad, "priority": "pin"}
    assert importance_of(pinned, later, reviews="fsrs") == 0.8


def test_fsrs_puts_a_memory_never_reviewed_on_its_initial_curve() -> None:
    """Seed 003 gives every episode an FSRS state at creation: never reviewed is not better than reviewed."""
    never = payload(0)
    long_ago_good = payload(0, reviewed("good"))  # reviewed at T0, the day it was indexed
    for days in (1, 30, 120):
        now = T0 + timedelta(days=days)
        assert importance_of(never, now, reviews="fsrs") == pytest.approx(
            importance_of(long_ago_good, now, reviews="fsrs") / 1.125  # the same curve, without the use
        )
    assert importance_of(never, T0, reviews="fsrs") == pytest.approx(0.7)
    assert importance_of(never, T0 + timedelta(days=30), reviews="fsrs") < importance_of(
        never, T0 + timedelta(days=30), reviews="reinforce"
    )
    # without indexed_at there is no curve to be on
    assert importance_of({"base_importance": 0.7}, T0, reviews="fsrs") == 0.7


@given(
    surprise=hs.floats(min_value=0.0, max_value=1.0),
    days=hs.floats(min_value=0.0, max_value=400.0),
    boost=hs.floats(min_value=0.0, max_value=10.0),
)
def test_the_surprise_boost_moves_only_fsrs_and_zero_turns_it_off(surprise: float, days: float, boost: float) -> None:
    """EPISODIC_SURPRISE_BOOST (issue 47): a memory never reviewed with a surprise ranks in `fsrs` as one
    without when the boost is 0, never lower with a boost, and `off` / `reinforce` ignore it."""
    plain = {"base_importance": 0.7, "indexed_at": "2026-05-01T09:00:00Z", "reference_count": 2}
    marked = {**plain, "surprise": surprise}
    now = T0 + timedelta(days=days)
    flat = importance_of(plain, now, reviews="fsrs")
    assert importance_of(marked, now, reviews="fsrs", boost=0.0) == flat
    assert importance_of(marked, now, reviews="fsrs", boost=boost) >= flat
    for mode in ("off", "reinforce"):
        assert importance_of(marked, now, reviews=mode, boost=boost) == importance_of(plain, now, reviews=mode)


def test_the_surprise_boost_is_a_setting_with_seed_003s_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from episodic.kernel.settings import Settings

    assert Settings().surprise_boost == 0.5
    monkeypatch.setenv("EPISODIC_SURPRISE_BOOST", "0")
    assert Settings().surprise_boost == 0.0
    monkeypatch.setenv("EPISODIC_SURPRISE_BOOST", "-1")
    with pytest.raises(ValidationError, match="surprise_boost"):
        Settings()
