"""The eval's context-aware text construction, dev/holdout split and RM3 expansion (pure logic)."""

from __future__ import annotations

import numpy as np
import pytest

from eval.bm25 import Bm25Index, Bm25Spec
from eval.context import ContextSpec, date_line, render, rendered
from eval.data import Turn, holdout
from eval.prf import Rm3, expand, weigh_query


def turn(sid: str, i: int, role: str, content: str, date: str = "2023/05/20 (Sat) 00:59") -> Turn:
    return Turn(f"{sid}:{i}", sid, i, role, content, date, False)


def test_date_line_has_words_and_iso_form() -> None:
    assert date_line("2023/05/20 (Sat) 00:59") == "Saturday 20 May 2023 (2023-05-20)"
    assert date_line("not a date") == ""


def test_render_folds_only_earlier_turns_of_the_session_cut_to_words() -> None:
    a = turn("s1", 0, "user", "did you go to the concert last night with everyone")
    b = turn("s1", 1, "assistant", "Yes, last Tuesday, with my sister")
    c = turn("s2", 0, "user", "new session")
    spec = ContextSpec(prev=1, words=4, date=True)
    assert render(b, [a], spec) == (
        "Saturday 20 May 2023 (2023-05-20)\nuser: did you go\nassistant: Yes, last Tuesday, with my sister"
    )
    assert render(b, [a], spec, own=False) == "Saturday 20 May 2023 (2023-05-20)\nuser: did you go"  # role counts
    out = rendered([a, b, c], ContextSpec(prev=2))
    assert out[0] == a.text()  # nothing before the first turn
    assert out[1] == f"{a.text()}\n{b.text()}"
    assert out[2] == c.text()  # a new session starts without context
    assert rendered([a, b], ContextSpec()) == [a.text(), b.text()]


def test_holdout_is_a_stable_third() -> None:
    ids = [f"q{i}" for i in range(48)]
    h = holdout(ids)
    assert len(h) == 16 and h <= set(ids)
    assert holdout(reversed(ids)) == h


@pytest.fixture(scope="module")
def index() -> Bm25Index:
    docs = [
        "user: my sister loves yellow dresses",
        "assistant: the concert was loud",
        "user: I bought earrings for my sister",
        "user: the weather is nice",
    ]
    return Bm25Index(Bm25Spec(b=1.0), docs)


def test_rm3_adds_terms_of_the_top_documents(index: Bm25Index) -> None:
    q = index.query(["sister"])
    s = index.score(q)
    q2 = expand(index, q, s, Rm3(docs=2, terms=5, lam=0.5))
    assert q2.nnz > q.nnz  # expansion terms joined
    s2 = index.score(q2)
    assert np.argmax(s2[0]) in (0, 2)  # a document about the sister still leads
    assert s2[0, 1] < s2[0, 0] and s2[0, 1] < s2[0, 2]


def test_query_weights() -> None:
    index = Bm25Index(Bm25Spec(b=1.0), ["user: remind me to call my sister", "user: rare words here"])
    q = index.query(["remind me about my sister"])
    dropped = weigh_query(index, q, "drop-meta")
    assert dropped.nnz < q.nnz
    with pytest.raises(ValueError, match="unknown query weighting"):
        weigh_query(index, q, "bogus")


def test_run_level_rerank_lifts_a_candidate_whose_run_has_other_strong_candidates() -> None:
    from eval.memories import Memories
    from eval.methods import Ranked
    from eval.runlevel import run_level, run_scores
    from eval.views import Q

    mem = Memories(corpus=None)  # type: ignore[arg-type]
    mem.run = np.array([0, 0, 1, 2])  # memories 0 and 1 share a run
    q = Q({"S": np.array([1.0, 0.0, 2.0, 0.5])}, mem, frozenset(), "t")

    def inner(_: Q) -> Ranked:  # fused ranking: 2, 0, 3, 1
        return np.array([2, 0, 3, 1]), np.array([1.0, 0.9, 0.8, 0.7])

    idx, sc = inner(q)
    assert run_scores(q, idx, sc, "fused", "max", True).tolist() == [1.0, 0.9, 0.8, 0.9]
    assert run_scores(q, idx, sc, "fused", "top2", True).tolist() == pytest.approx([1.0, 1.6, 0.8, 1.6])
    assert run_scores(q, idx, sc, "fused", "max", False).tolist() == [0.0, 0.7, 0.0, 0.9]  # siblings only
    assert run_scores(q, idx, sc, "S", "sum", True).tolist() == [2.0, 1.0, 0.5, 1.0]
    assert run_level(inner, 0.0)(q)[0].tolist() == [2, 0, 3, 1]  # no weight: the fused order
    assert run_level(inner, 1.0, agg="top2")(q)[0].tolist() == [0, 1, 2, 3]  # run 0 holds two good candidates
