"""The simulated-review harness's mirror of the linker's surprise (eval.reviews.surprises_of, issue 47)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as hs

from eval.reviews import surprises_of


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, 4))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def reference(rows: list[np.ndarray], at: np.ndarray) -> list[float]:
    """One memory at a time, as the linker reads the store's answer: its nearest earlier memory by max-sim
    (summed over its pieces), lowered to the mean-vector cosine when either has several pieces."""
    out = []
    for i, r in enumerate(rows):
        earlier = [j for j in range(len(rows)) if at[j] < at[i]]
        if not earlier:
            out.append(1.0)
            continue
        sims = {j: float((r @ rows[j].T).max(axis=1).sum()) for j in earlier}
        j = max(earlier, key=lambda j: (sims[j], -j))
        best = sims[j]
        if len(r) > 1 or len(rows[j]) > 1:
            mi, mj = r.mean(axis=0), rows[j].mean(axis=0)
            best = min(best, float(mi @ mj / np.linalg.norm(mi) / np.linalg.norm(mj)))
        out.append(min(1.0, max(0.0, 1.0 - best)))
    return out


@settings(max_examples=200, deadline=None)
@given(seed=hs.integers(0, 2**32 - 1), n=hs.integers(1, 7), block=hs.integers(1, 4))
def test_surprise_is_one_minus_the_best_earlier_neighbour(seed: int, n: int, block: int) -> None:
    rng = np.random.default_rng(seed)
    rows = [unit(rng, int(rng.integers(1, 4))) for _ in range(n)]
    at = rng.integers(0, 4, size=n).astype(float)  # ties: a memory of the same instant was not held before
    got = surprises_of(rows, at, block=block)
    assert np.allclose(got, reference(rows, at), atol=1e-5)
    assert got[int(np.argmin(at))] == 1.0  # the first memory was a surprise
