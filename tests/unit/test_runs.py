"""Run-level evidence at recall (episodic.domain.runs): a run is scored from its candidates, then each candidate
by its own score and its run's; the neighbour lift, a short memory lifted by its short run neighbours. Pure
decisions: table cases and properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from episodic.domain.runs import Turn, neighbour_lift, run_level, run_scores, words


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


def test_a_run_level_score_keeps_the_fused_unit() -> None:
    # the fused score plus weight x the best fused score x its run's share: the best run's best gains weight x top
    got = dict(run_level([("a", 0.02, "r1"), ("b", 0.01, "r2")], 0.5, depth=1))
    assert got == {"a": 0.02 + 0.5 * 0.02, "b": 0.01 + 0.5 * 0.02 * 0.5}


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


def _chat(*rows: tuple[str, float, int]) -> list[Turn]:
    """Candidates of one run in this order of the conversation: (entry id, fused score, words); each one's
    previous and next are the rows around it (the candidates are returned best first)."""
    ids = [r[0] for r in rows]
    turns = [
        Turn(f"p-{e}", score, e, ids[i - 1] if i else None, ids[i + 1] if i + 1 < len(ids) else None, n)
        for i, (e, score, n) in enumerate(rows)
    ]
    return sorted(turns, key=lambda t: -t.score)


def test_a_short_reply_climbs_with_the_short_question_before_it() -> None:
    # "When did you go to the lake?" matches the query; the reply "Last week, with Mel!" barely does
    cands = _chat(("q", 1.0, 7), ("reply", 0.3, 4), ("far", 0.6, 6))
    got = neighbour_lift(cands, 0.5, 80)
    assert [pid for pid, _ in got] == ["p-q", "p-reply", "p-far"]  # fused: q, far, reply
    assert dict(got)["p-reply"] == 0.3 + 0.5 * 1.0  # own + weight x its best neighbour's, in the fused unit
    assert dict(got)["p-far"] == 0.6 + 0.5 * 0.3  # its one neighbour is the reply
    assert dict(got)["p-q"] == 1.0 + 0.5 * 0.3


def test_long_memories_neither_lift_nor_are_lifted() -> None:
    cands = _chat(("report", 1.0, 200), ("next", 0.3, 5), ("other", 0.6, 5))
    got = dict(neighbour_lift(cands, 0.5, 80))
    assert got["p-report"] == 1.0  # long: not lifted by "next"
    assert got["p-next"] == 0.3 + 0.5 * 0.6  # its long previous does not count, its short next does
    assert [pid for pid, _ in neighbour_lift(_chat(("a", 1.0, 90), ("b", 0.3, 90)), 0.5, 80)] == ["p-a", "p-b"]
    assert dict(neighbour_lift(_chat(("a", 1.0, 90), ("b", 0.3, 5)), 0.5, 80))["p-b"] == 0.3  # one side long


def test_a_neighbour_outside_the_pool_lifts_nothing() -> None:
    lone = [Turn("p-x", 0.5, "x", "gone", "also-gone", 3), Turn("p-y", 0.9, "y", None, None, 3)]
    assert neighbour_lift(sorted(lone, key=lambda t: -t.score), 1.0, 80) == [("p-y", 0.9), ("p-x", 0.5)]


def test_neighbour_weight_zero_is_the_fused_order_and_scores() -> None:
    cands = _chat(("a", 0.9, 3), ("b", 0.5, 3))
    assert neighbour_lift(cands, 0.0, 80) == [("p-a", 0.9), ("p-b", 0.5)]
    assert neighbour_lift([], 1.0, 80) == []


def test_words_counts_whitespace_separated_words() -> None:
    assert words("Caroline: Yes,  last week!\n") == 4
    assert words("") == 0


chats = st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=10.0), st.integers(min_value=0, max_value=200)),
    min_size=1,
    max_size=40,
)


@given(chats, st.floats(min_value=0.01, max_value=4.0), st.integers(min_value=1, max_value=120))
def test_the_lift_returns_every_candidate_once_best_first_and_never_lowers_one(
    rows: list, weight: float, limit: int
) -> None:
    cands = _chat(*((f"e{i}", score, n) for i, (score, n) in enumerate(rows)))
    got = neighbour_lift(cands, weight, limit)
    assert sorted(pid for pid, _ in got) == sorted(c.point_id for c in cands)
    scores = [s for _, s in got]
    assert scores == sorted(scores, reverse=True)
    for c in cands:
        assert dict(got)[c.point_id] >= c.score
        if c.words > limit:
            assert dict(got)[c.point_id] == c.score  # a long memory keeps its fused score to the digit
