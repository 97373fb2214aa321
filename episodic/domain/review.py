"""Reviews from use: a memory's FSRS state and what it does to importance (seed 003 "Memory Review", issue 26).
Pure, no IO.

An agent that was given memories says how each served it: `again` (it did not help, or misled), `hard`
(it helped, with effort), `good` (it helped), `easy` (it was exactly what was needed). Each review updates
the memory's FSRS state, as seed 003's MemoryReviewJob does:

- `stability` S: days until the probability of recall (retrievability) falls to 90 %;
- `difficulty` D: 1..10;
- `last_reviewed_at`, `review_count`, and the count per rating (`review_ratings`).

The FSRS formulas are those of the `fsrs` library (py-fsrs 6, Open Spaced Repetition, MIT: the reference
implementation of FSRS-6 with its default 21 parameters), used with no learning or relearning steps (a
memory is not a flash card drilled within minutes: its first review puts it straight into the Review state)
and without fuzzing (a replay must compute the same state). Retrievability is FSRS-6's power forgetting
curve `R(t) = (1 + F·t/S)^(−w20)`, t in days since the last review (fractional here: py-fsrs counts whole
days, which would leave a memory rated `again` an hour ago at R = 1).

What reviews do to ranking (`EPISODIC_REVIEW_RANKING`, `importance_with_reviews`): with `off`, nothing
(importance is SPEC §8's, from retrieval counts). With `reinforce`, a reviewed memory's reinforcement
counts the reviews that say it served (hard, good, easy) instead of every retrieval:
`1 + log2(used + 1)/8`; one never reviewed keeps SPEC §8's term. With `fsrs`, that term is also multiplied
by the memory's retrievability now (seed 003: `final_score = rrf_score × retrievability`): a memory rated
`again` has low stability, so its retrievability, and with it its rank, falls within days, and each `good`
lifts it back. A memory never reviewed is on the curve it starts with when indexed (`initial_state`: as
after one `good` review at `indexed_at`, seed 003 initialises every episode's FSRS state at creation), so
being reviewed `good` long ago never ranks below never being reviewed at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from fsrs import Card, Rating, Scheduler, State

from episodic.domain.surprise import BOOST, stability_boost, surprise_of
from episodic.domain.times import parse_time

RATINGS: tuple[str, ...] = ("again", "hard", "good", "easy")
USED_RATINGS: frozenset[str] = frozenset({"hard", "good", "easy"})  # the memory served (an FSRS pass)
ReviewRanking = Literal["off", "reinforce", "fsrs"]
REVIEW_RANKINGS: tuple[str, ...] = ("off", "reinforce", "fsrs")

# The payload fields of the review state (owner: the importance agent, episodic.maintenance.reviews)
REVIEW_FIELDS: tuple[str, ...] = (
    "review_count",
    "review_ratings",
    "last_rating",
    "last_reviewed_at",
    "stability",
    "difficulty",
)

_SCHEDULER = Scheduler(learning_steps=(), relearning_steps=(), enable_fuzzing=False)
_DECAY = -float(_SCHEDULER.parameters[20])  # FSRS-6: the curve's exponent is −w20
_FACTOR = 0.9 ** (1.0 / _DECAY) - 1.0  # so that R(S) = 0.9
_RATING = {"again": Rating.Again, "hard": Rating.Hard, "good": Rating.Good, "easy": Rating.Easy}
SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class ReviewState:
    """A memory's review state as stored (the REVIEW_FIELDS of its payload)."""

    review_count: int = 0
    ratings: dict[str, int] = field(default_factory=dict)
    last_rating: str | None = None
    last_reviewed_at: datetime | None = None
    stability: float | None = None
    difficulty: float | None = None

    @property
    def reviewed(self) -> bool:
        return self.review_count > 0 and self.stability is not None and self.last_reviewed_at is not None

    @property
    def used(self) -> int:
        """Reviews that said the memory served (hard, good, easy)."""
        return sum(n for r, n in self.ratings.items() if r in USED_RATINGS)

    def fields(self) -> dict[str, Any]:
        """The payload fields (REVIEW_FIELDS) of this state."""
        at = self.last_reviewed_at
        return {
            "review_count": self.review_count,
            "review_ratings": {r: self.ratings.get(r, 0) for r in RATINGS},
            "last_rating": self.last_rating,
            "last_reviewed_at": None if at is None else at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "stability": None if self.stability is None else round(self.stability, 6),
            "difficulty": None if self.difficulty is None else round(self.difficulty, 6),
        }


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def state_of(payload: Mapping[str, Any]) -> ReviewState:
    """The review state stored in a memory's payload; fields that are missing or malformed count as never
    reviewed (hand-made data, an older layout)."""
    count = _number(payload.get("review_count"))
    raw = payload.get("review_ratings")
    ratings = (
        {r: int(n) for r, n in raw.items() if r in RATINGS and _number(n) is not None and n > 0}
        if isinstance(raw, dict)
        else {}
    )
    last = payload.get("last_rating")
    stability = _number(payload.get("stability"))
    difficulty = _number(payload.get("difficulty"))
    return ReviewState(
        review_count=max(0, int(count)) if count is not None else 0,
        ratings=ratings,
        last_rating=last if last in RATINGS else None,
        last_reviewed_at=parse_time(payload.get("last_reviewed_at")),
        stability=stability if stability is not None and stability > 0 else None,
        difficulty=difficulty,
    )


def review(state: ReviewState, rating: str, at: datetime) -> ReviewState:
    """The state after one review rated `rating` at `at` (FSRS-6, py-fsrs's scheduler). A review dated before
    the last one (clock skew between services) counts as made at the last one."""
    if rating not in _RATING:
        raise ValueError(f"rating must be one of {', '.join(RATINGS)}; got {rating!r}")
    at = at.astimezone(UTC)
    if state.last_reviewed_at is not None and at < state.last_reviewed_at:
        at = state.last_reviewed_at
    if state.reviewed:
        card = Card(
            card_id=0,
            state=State.Review,
            stability=state.stability,
            difficulty=state.difficulty,
            due=at,
            last_review=state.last_reviewed_at,
        )
    else:
        card = Card(card_id=0, due=at)
    card, _ = _SCHEDULER.review_card(card, _RATING[rating], review_datetime=at)
    ratings = dict(state.ratings)
    ratings[rating] = ratings.get(rating, 0) + 1
    return ReviewState(
        review_count=state.review_count + 1,
        ratings=ratings,
        last_rating=rating,
        last_reviewed_at=at,
        stability=card.stability,
        difficulty=card.difficulty,
    )


def initial_state(at: datetime, surprise: float | None = None, boost: float = BOOST) -> ReviewState:
    """The FSRS state a memory starts with when it is indexed (seed 003 initialises every episode's state at
    creation): as after one `good` review then, without counting as a review, its stability boosted by
    (1 + boost x surprise), boost 0.5 by default (seed 003; `episodic.domain.surprise`)."""
    st = review(ReviewState(), "good", at)
    stability = None if st.stability is None else st.stability * stability_boost(surprise, boost)
    return ReviewState(stability=stability, difficulty=st.difficulty, last_reviewed_at=at, review_count=1)


def retrievability(state: ReviewState, now: datetime) -> float | None:
    """FSRS-6's probability of recall now, `(1 + F·t/S)^(−w20)` with t in fractional days since the last
    review; None for a memory never reviewed."""
    if not state.reviewed or state.stability is None or state.last_reviewed_at is None:
        return None
    days = max(0.0, (now - state.last_reviewed_at).total_seconds() / SECONDS_PER_DAY)
    return float((1.0 + _FACTOR * days / state.stability) ** _DECAY)


def reinforcement(
    payload: Mapping[str, Any], now: datetime, *, mode: str, refs: int, surprise_boost: float = BOOST
) -> float:
    """The reinforcement term of importance (SPEC §8's `1 + log2(refs + 1)/8` for `off` and for memories
    never reviewed; see the module doc for `reinforce` and `fsrs`; `surprise_boost`: EPISODIC_SURPRISE_BOOST,
    the surprise's weight on a never-reviewed memory's initial stability)."""
    boost = 1.0 + math.log2(max(0, refs) + 1) / 8.0
    if mode == "off":
        return boost
    state = state_of(payload)
    if not state.reviewed:
        if mode == "fsrs":  # every memory is on its forgetting curve, from its first (creation) state
            indexed = parse_time(payload.get("indexed_at"))
            start = initial_state(indexed, surprise_of(payload), surprise_boost) if indexed is not None else None
            r = retrievability(start, now) if start is not None else None
            return boost * (1.0 if r is None else r)
        return boost
    term = 1.0 + math.log2(state.used + 1) / 8.0
    if mode == "fsrs":
        r = retrievability(state, now)
        term *= 1.0 if r is None else r
    return term
