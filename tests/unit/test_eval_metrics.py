"""The eval harness's metrics and its numpy copies of Qdrant's fusions and BM25 IDF."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eval import fusion as F
from eval.bm25 import idf
from eval.metrics import Score, evidence_hit, evidence_recall, score, table


def test_recall_counts_evidence_in_top_k() -> None:
    ranked = [["a"], ["x"], ["b"], ["y"], ["z"], ["c"]]
    assert evidence_recall(ranked, {"a", "b", "c"}, 5) == pytest.approx(2 / 3)
    assert evidence_recall(ranked, {"a", "b", "c"}, 10) == 1.0
    assert evidence_recall(ranked, {"q"}, 10) == 0.0


def test_a_hit_covers_its_aliases() -> None:
    # an exact-duplicate memory returns once but stands for every turn id it absorbed
    ranked = [["x"], ["a", "b"]]
    assert evidence_recall(ranked, {"b"}, 2) == 1.0
    assert evidence_recall(ranked, {"a", "b", "c"}, 2) == pytest.approx(2 / 3)


def test_short_result_lists_and_hit() -> None:
    assert evidence_recall([], {"a"}, 5) == 0.0
    assert evidence_hit([["b"], ["a"]], {"a", "c"}, 2) == 1.0
    assert evidence_hit([["b"], ["a"]], {"a", "c"}, 1) == 0.0


def test_questions_without_evidence_are_refused() -> None:
    with pytest.raises(ValueError):
        evidence_recall([["a"]], set(), 5)
    with pytest.raises(ValueError):
        evidence_recall([["a"]], {"a"}, 0)


def test_score_averages_over_questions() -> None:
    s = score([([["a"]], {"a"}), ([["x"]] * 5 + [["b"]], {"b", "c"})])
    assert s.n == 2
    assert s.recall5 == pytest.approx(0.5)
    assert s.recall10 == pytest.approx((1 + 0.5) / 2)
    assert s.hit5 == pytest.approx(0.5)
    assert s.hit10 == 1.0
    assert score([]) == Score(0, 0.0, 0.0, 0.0, 0.0)
    assert "R@10" in table([("dense", s)])


def test_qdrant_idf() -> None:
    assert idf(np.array([1.0]), 10)[0] == pytest.approx(math.log(1 + 9.5 / 1.5))
    assert idf(np.array([10.0]), 10)[0] == pytest.approx(math.log(1 + 0.5 / 10.5))


def test_top_is_stable_and_best_first() -> None:
    s = np.array([0.1, 0.9, 0.5, 0.9, 0.0])
    assert list(F.top(s, 3)) == [1, 3, 2]
    assert list(F.top(s, 10)) == [1, 3, 2, 0, 4]


def test_rrf_matches_qdrant_position_score() -> None:
    # Qdrant: 1 / ((pos + 1) / w + k - 1), zero-based positions; w=1 gives 1 / (pos + k)
    out = F.rrf([np.array([7, 8]), np.array([8])], k=60)
    assert out[7] == pytest.approx(1 / 60)
    assert out[8] == pytest.approx(1 / 61 + 1 / 60)
    w = F.rrf([np.array([1, 2])], k=2, weights=[3.0])
    assert w[1] == pytest.approx(1 / (1 / 3 + 1))
    assert w[2] == pytest.approx(1 / (2 / 3 + 1))
    zero = F.rrf([np.array([1]), np.array([2])], k=2, weights=[1.0, 0.0])
    assert zero[2] == 0.0 and zero[1] == pytest.approx(0.5)
    assert F.ranked(F.rrf([np.array([3, 4]), np.array([4, 3])], k=60), 2) == [3, 4]  # tie: lower index


def test_dbsf_normalises_each_leg_by_three_sigma() -> None:
    s = np.array([1.0, 2.0, 3.0])
    mean, sd = 2.0, 1.0
    out = F.dbsf([(np.array([0, 1, 2]), s)])
    assert out[2] == pytest.approx((3 - (mean - 3 * sd)) / (6 * sd))
    both = F.dbsf([(np.array([0, 1]), np.array([0.9, 0.1])), (np.array([1]), np.array([5.0]))])
    assert both[1] == pytest.approx((0.1 - (0.5 - 3 * math.sqrt(0.32))) / (6 * math.sqrt(0.32)) + 0.5)


def test_formula_blend_defaults_missing_scores_to_zero() -> None:
    out = F.formula(
        (np.array([0, 1]), np.array([0.8, 0.5])), (np.array([1, 2]), np.array([10.0, 30.0])), 1.0, 0.5, 10.0
    )
    assert out[0] == pytest.approx(0.8)
    assert out[1] == pytest.approx(0.5 + 0.5 * 10 / 20)
    assert out[2] == pytest.approx(0.5 * 30 / 40)
