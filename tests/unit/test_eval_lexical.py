"""The eval mirror's lexical confidence (`eval.methods.lexical`) ranks as the store does: the store's own
factor (`episodic.store.query.lexical_factor`) scales the sparse rows' legs only."""

from __future__ import annotations

import numpy as np

from eval.methods import lexical, rrf
from eval.views import Q

LEGS = [("D", 3), ("S", 5)]  # memory 4 is not among the dense leg's three
WEIGHTS = [1.0, 1.5]  # BM25's first place outranks the dense leg's first at full weight (0.375 > 0.333)


def question(best_bm25: float) -> Q:
    dense = np.array([0.9, 0.8, 0.7, 0.6, 0.5])  # memory 0 first
    sparse = np.array([0.0, 0.0, 0.0, 0.0, best_bm25])  # only memory 4 matches
    return Q({"D": dense, "S": sparse}, None, frozenset(), "x")  # type: ignore[arg-type]


def test_a_weak_lexical_match_lets_the_dense_leg_rank_and_a_strong_one_keeps_bm25s_say() -> None:
    weak, strong = question(0.5), question(20.0)  # in rare-term IDFs of 5 memories (ln 4): 0.36 and 14
    assert rrf(LEGS, 3, WEIGHTS)(weak)[0][0] == 4  # without it, BM25's first place wins
    assert lexical(LEGS, 3, WEIGHTS, full=4.0, floor=0.25)(weak)[0][0] == 0
    assert lexical(LEGS, 3, WEIGHTS, full=4.0, floor=0.25)(strong)[0][0] == 4
    off = lexical(LEGS, 3, WEIGHTS, full=0.0, floor=0.25)(weak)
    assert off[0].tolist() == rrf(LEGS, 3, WEIGHTS)(weak)[0].tolist()
    # `scaled` picks the legs: scaling none leaves the order as without it
    assert lexical(LEGS, 3, WEIGHTS, 4.0, 0.25, scaled=[False, False])(weak)[0][0] == 4
