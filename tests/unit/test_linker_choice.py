"""Which similar edges the linker writes: top k above the threshold, one edge per pair. No IO."""

from __future__ import annotations

from episodic.maintenance.linker import Candidate, choose_similar


def c(entry_id: str, cosine: float, *links: str) -> Candidate:
    return Candidate(entry_id, cosine, frozenset(links))


def test_top_k_strictly_above_the_threshold_best_first() -> None:
    got = choose_similar(
        "new", [c("a", 0.81), c("b", 0.95), c("x", 0.80), c("d", 0.9), c("e", 0.85)], threshold=0.8, top_k=3
    )
    assert [(x.entry_id, x.cosine) for x in got] == [("b", 0.95), ("d", 0.9), ("e", 0.85)]
    assert choose_similar("new", [c("x", 0.80), c("y", 0.2)], threshold=0.8, top_k=3) == []


def test_a_candidate_that_already_points_at_the_source_is_passed_over_and_the_next_one_fills_in() -> None:
    got = choose_similar("new", [c("a", 0.99, "new"), c("b", 0.9), c("c", 0.88), c("d", 0.87)], threshold=0.8, top_k=3)
    assert [x.entry_id for x in got] == ["b", "c", "d"]


def test_never_the_source_itself_nor_a_candidate_twice() -> None:
    got = choose_similar("new", [c("new", 1.0), c("a", 0.9), c("a", 0.9)], threshold=0.8, top_k=3)
    assert [x.entry_id for x in got] == ["a"]
