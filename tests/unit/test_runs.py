"""Run-level evidence at recall (episodic.domain.runs): a run is scored from its candidates, then each candidate
by its own score and its run's. Pure decisions: table cases and properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from episodic.domain.runs import run_level, run_scores


def test_a_run_of_several_good_candidates_lifts_them_past_a_lone_better_one() -> None:
    fused = [("lone", 1.0, "r1"), ("a", 0.8, "r2"), ("b", 0.7, "r2"), ("c", 0.6, "r2"), ("x", 0.5, "r3")]
    got = [pid for pid, _ in run_level(fused, 0.5)]
    assert got[:2] == ["a", "lone"]  # a: 0.8 + 0.5 x 1.0 = 1.3 > lone: 1.0 + 0.5 x (1.0 / 2.1)
    assert got[-1] == "x"


def test_the_run_score_sums_its_depth_best_candidates() -> None:
    fused = [("a", 4.0, "r"), ("b", 3.0, "r"), ("c", 2.0, "r"), ("d", 1.0, "r"), ("e", 5.0, None)]
    assert run_scores(fused, 3) == [9.0, 9.0, 9.0, 9.0, 5.0]
    assert run_scores(fused, 1) == [4.0, 4.0, 4.0, 4.0, 5.0]


def test_memories_without_a_run_are_runs_of_their_own_and_keep_the_fused_order() -> None:
    fused = [("a", 0.9, None), ("b", 0.5, None), ("c", 0.4, None)]
    assert [pid for pid, _ in run_level(fused, 1.0)] == ["a", "b", "c"]


def test_weight_zero_is_the_fused_order_and_scores() -> None:
    fused = [("a", 0.9, "r1"), ("b", 0.5, "r2"), ("c", 0.4, "r2")]
    assert run_level(fused, 0.0) == [("a", 0.9), ("b", 0.5), ("c", 0.4)]
    assert run_level([], 1.0) == []


candidates = st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=10.0), st.sampled_from(["r1", "r2", "r3", None])),
    min_size=1,
    max_size=40,
)


@given(candidates, st.floats(min_value=0.0, max_value=4.0), st.integers(min_value=1, max_value=5))
def test_every_candidate_comes_back_once_best_first(cands: list, weight: float, depth: int) -> None:
    fused = sorted(((f"p{i}", score, run) for i, (score, run) in enumerate(cands)), key=lambda c: -c[1])
    got = run_level(fused, weight, depth)
    assert sorted(pid for pid, _ in got) == sorted(pid for pid, _, _ in fused)
    scores = [s for _, s in got]
    assert scores == sorted(scores, reverse=True)


@given(candidates, st.floats(min_value=0.01, max_value=4.0))
def test_within_one_run_the_fused_order_stays(cands: list, weight: float) -> None:
    fused = [(f"p{i}", score, "same") for i, (score, _) in enumerate(cands)]
    fused.sort(key=lambda c: -c[1])
    assert [pid for pid, _ in run_level(fused, weight)] == [pid for pid, _, _ in fused]
