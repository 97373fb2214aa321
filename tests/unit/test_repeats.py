"""No repeats in the prompt budget (episodic.retrieval.repeats) and key moments (episodic.domain.surprise), pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from episodic.domain.folding import FoldRule
from episodic.domain.review import initial_state
from episodic.domain.surprise import key_moment, stability_boost, surprise, surprise_of
from episodic.domain.synonyms import lexicon
from episodic.retrieval.render import render
from episodic.retrieval.repeats import distinct

lexicon()  # the fold rule's word table, read once here rather than inside a hypothesis example's deadline

RULE = FoldRule()


@dataclass
class H:
    entry_id: str
    summary: str
    folded: list[str] = field(default_factory=list)
    similar_left_out: int = 0
    mean: np.ndarray | None = None
    entry_type: str = "summary.generated"
    severity: str = "info"
    agent_id: str | None = "a"
    age_seconds: float = 0.0
    score: float = 1.0
    surprise: float | None = None

    @property
    def key_moment(self) -> bool:
        return key_moment(self.surprise)


ISSUE = [
    H("e1", "The checkout service was OOM-killed during the Black Friday load test."),
    H("e2", "Checkout got OOM-killed in the Black Friday load test."),
    H("e3", "The payments service was OOM-killed during the Black Friday load test."),
    H("e4", "The checkout service was OOM-killed during the Black Friday load test!"),
    H("e5", "Billing needs a canary before production."),
]


def test_the_issue_s_four_agents_take_one_line_and_the_near_miss_keeps_its_own() -> None:
    hits = [H(h.entry_id, h.summary) for h in ISSUE]
    kept = distinct(hits, 4, RULE)
    assert [h.entry_id for h in kept] == ["e1", "e3", "e5"]  # payments is another fact: kept
    assert kept[0].similar_left_out == 2
    text = render(kept, 2000).text
    assert "+2 similar" in text and text.count("Black Friday") == 2


def test_a_recorded_fold_and_a_vector_gate_decide_too() -> None:
    a, b = H("a", "Checkout OOM-killed", folded=["b"]), H("b", "the database is on fire")
    assert [h.entry_id for h in distinct([a, b], 5, RULE)] == ["a"]  # the store said b is a part of a
    far = np.array([1.0, 0.0], dtype=np.float32), np.array([0.0, 1.0], dtype=np.float32)
    c, d = H("c", "Checkout OOM-killed", mean=far[0]), H("d", "checkout OOM-killed", mean=far[1])
    assert len(distinct([c, d], 5, RULE)) == 2  # the same words, but the vectors say otherwise


@given(st.lists(st.sampled_from([h.summary for h in ISSUE]), max_size=12), st.integers(1, 6))
def test_kept_plus_left_out_never_exceeds_the_hits(texts: list[str], k: int) -> None:
    hits = [H(f"e{i}", t) for i, t in enumerate(texts)]
    kept = distinct(hits, k, RULE)
    assert len(kept) <= k and len(kept) + sum(h.similar_left_out for h in kept) <= len(hits)
    assert len({h.summary.rstrip("!.").casefold() for h in kept}) == len(kept)  # no two kept say the same


def test_surprise_key_moments_and_the_stability_boost() -> None:
    assert surprise(None) == 1.0 and surprise(0.25) == 0.75 and surprise(1.2) == 0.0
    assert key_moment(0.7) and not key_moment(0.69) and not key_moment(None)
    assert surprise_of({"surprise": 0.8}) == 0.8 and surprise_of({"surprise": "x"}) is None
    at = datetime(2026, 1, 1, tzinfo=UTC)
    plain, boosted = initial_state(at), initial_state(at, 1.0)
    assert plain.stability and boosted.stability and boosted.stability == plain.stability * 1.5
    assert stability_boost(0.4) == 1.2
    text = render([H("k", "the region failed over to eu-west", surprise=0.9)], 500).text
    assert "· key moment]" in text
