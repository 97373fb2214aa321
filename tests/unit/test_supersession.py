"""Newer facts supersede older ones: the rule (episodic.domain.supersession) and recall's order
(episodic.retrieval.expand.newer_first), pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from episodic.domain.supersession import SupersedeRule, is_update
from episodic.retrieval.expand import PLACED, WALKED_RELATIONS, adjacent, newer_first

RULE = SupersedeRule()


def test_a_changed_day_on_one_subject_is_an_update() -> None:
    v = is_update(0.9, "the release train now leaves on Thursday", "The release train leaves on Tuesday", RULE)
    assert v.fold, v.reason


@pytest.mark.parametrize(
    ("new", "old", "cosine", "why"),
    [
        ("the release train leaves on Tuesday", "the release train leaves on tuesday!", 0.99, "same numbers"),
        ("the release train leaves soon", "The release train leaves on Tuesday", 0.9, "no number or date"),
        ("payments p99 at 450 ms", "checkout queue depth 120 after deploy", 0.9, "subject word jaccard"),
        ("steps: 1 open 2 pull 3 push 4 merge", "steps: 5 open 6 pull 7 push 8 merge", 0.95, "not one fact"),
        ("the release train leaves on Thursday", "The release train leaves on Tuesday", 0.7, "cosine"),
    ],
)
def test_what_is_not_an_update(new: str, old: str, cosine: float, why: str) -> None:
    v = is_update(cosine, new, old, RULE)
    assert not v.fold and why in v.reason
    assert not is_update(0.99, "leaves Thursday", "leaves Tuesday", SupersedeRule(enabled=False)).fold


@dataclass
class H:
    entry_id: str
    score: float
    superseded_by: str | None = None
    via: str = "direct"
    placed: str = "direct"
    relations: list[dict[str, Any]] = field(default_factory=list)


def test_the_newer_goes_right_above_what_it_replaces() -> None:
    old, mid, new = H("old", 0.9, superseded_by="new"), H("mid", 0.8), H("new", 0.5)
    out = newer_first([old, mid, new], [], k=3)
    assert [h.entry_id for h in out] == ["new", "old", "mid"] and new.score == 0.9 and new.via == "direct"
    assert [h.placed for h in out] == ["newer", "direct", "direct"]  # moved up: its place is the older one's


def test_a_newer_memory_already_above_keeps_its_own_placement() -> None:
    new, old = H("new", 0.9), H("old", 0.8, superseded_by="new")
    out = newer_first([new, old], [], k=2)
    assert [(h.entry_id, h.placed) for h in out] == [("new", "direct"), ("old", "direct")]


def test_a_newer_memory_that_did_not_match_is_brought_in_and_k_holds() -> None:
    old, other = H("old", 0.9, superseded_by="new"), H("other", 0.8)
    brought = H("new", 0.1)
    out = newer_first([old, other], [brought], k=2)
    assert [h.entry_id for h in out] == ["new", "old"] and brought.via == "supersedes"
    assert (brought.placed, old.placed) == ("newer", "direct")
    # not in scope (not found): the older stays where it was
    assert [h.entry_id for h in newer_first([H("old", 0.9, superseded_by="gone"), other], [], k=2)] == ["old", "other"]


def test_every_memory_brought_in_beside_the_direct_hits_has_a_placement() -> None:
    assert {PLACED[r] for r in WALKED_RELATIONS} == {"walk"}
    near = adjacent([H("a", 1.0, relations=[{"dst": "b", "relation": "next"}])], 0.5)
    assert {PLACED[via] for _, via in near.values()} == {"adjacent"}
