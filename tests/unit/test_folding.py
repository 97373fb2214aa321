"""The near-duplicate rule (episodic.domain.folding) and the fold fields (episodic.indexing.folding), pure."""

from __future__ import annotations

import pytest

from episodic.domain.folding import FoldRule, compatible, content_tokens, fact_tokens, jaccard, near_duplicate
from episodic.indexing.folding import fold, folded_ids, owner_fields

RULE = FoldRule()


def test_rewordings_fold() -> None:
    v = near_duplicate(
        0.93, "Checkout OOM-killed during load test", "The checkout was OOM-killed in the load test", RULE
    )
    assert v.fold, v.reason


@pytest.mark.parametrize(
    ("new", "old", "why"),
    [
        ("the release train now leaves on Thursday", "The release train leaves on Tuesday", "numbers or dates"),
        ("p99 latency 450 ms on checkout", "p99 latency 120 ms on checkout", "numbers or dates"),
        ("checkout deploy failed in canary", "payments service healthy after the rollback", "jaccard"),
    ],
)
def test_changes_and_other_events_do_not_fold(new: str, old: str, why: str) -> None:
    v = near_duplicate(0.95, new, old, RULE)
    assert not v.fold and why in v.reason


def test_below_the_cosine_or_off_nothing_folds() -> None:
    assert not near_duplicate(0.85, "same words", "same words", RULE).fold
    assert not near_duplicate(0.99, "same words", "same words", FoldRule(enabled=False)).fold
    with pytest.raises(ValueError):
        FoldRule(cosine=0.0)


def test_tokens() -> None:
    assert content_tokens("The p99 was 4.5s on Tuesday!") == {"p99", "4.5s", "tuesday"}
    assert fact_tokens(content_tokens("deploy v2.3 on March 3")) == {"v2.3", "march", "3"}
    assert jaccard(frozenset(), frozenset()) == 1.0 and jaccard(frozenset("ab"), frozenset("bc")) == 1 / 3


def test_compatible_needs_crew_type_priority_and_an_unfolded_owner() -> None:
    base = {"workspace_id": "w", "crew_id": "c", "entry_type": "t", "priority": None}
    assert compatible(base, dict(base))
    for key, value in (("crew_id", "c2"), ("entry_type", "t2"), ("priority", "pin"), ("workspace_id", "w2")):
        assert not compatible(base, {**base, key: value})
    assert not compatible(base, {**base, "folded_into": "x"})


def test_fold_fields_count_every_part_once() -> None:
    owner = {"entry_id": "a", "agent_id": "A", "occurrences": 2}  # itself and an exact duplicate
    b = {"entry_id": "b", "agent_id": "B", "occurrences": 3, "aliases": ["b2", "b3"]}
    owner |= fold(owner, b, cosine=0.9, at="t")
    assert owner["occurrences"] == 5 and owner["agents"] == ["A", "B"]
    owner |= fold(owner, b, cosine=0.95, at="t2")  # the same entry again (a re-link): replaced, not added
    assert owner["occurrences"] == 5 and folded_ids(owner) == ["b", "b2", "b3"]
    owner |= owner_fields(owner, [])
    assert owner["occurrences"] == 2 and owner["agents"] == [] and owner["folded"] == []
