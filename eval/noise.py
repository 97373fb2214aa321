"""How much of a difference between two rankings is noise, and the choice protocol that reads it.

A figure over a few hundred questions moves by a few points when other questions are asked, so a change is
judged by a paired bootstrap over the questions (the same resampled questions for both rankings): the 95 %
interval of the mean difference of R@5 (and of R@10) per cell. A cell is a set's part (dev or holdout) and
one question type or category of it, or the whole part.

**The choice protocol** (docs/quality.md, "How a change is chosen"): a change to ranking, indexing or fusion
ships only if, on the dev part of both dev sets (LongMemEval oracle and s, LoCoMo),

- no cell *loses*: the interval of its difference lies wholly below 0, for R@5 or R@10, in any question type
  or category, and
- the whole dev part of some set gains (its interval wholly above 0) or the change is a cost, simplicity or
  robustness choice that only has to hold;

and then, once, on the holdout parts: no cell loses there either. `verdict` applies the first rule to two
sets of per-question recalls; `eval.compare` applies it to two results files of the pipeline harness, and
`eval.sweep --against` to the mirror's methods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
SEED = 46  # fixed: the same resamples in every run, so a table does not move between runs of the same data
LEVEL = 0.95


def _resamples(n: int, resamples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def interval(values: Sequence[float] | np.ndarray, resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, float]:
    """The bootstrap interval (percentile, `LEVEL`) of the mean of `values`; (mean, mean) for one value."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2:
        m = float(v.mean()) if len(v) else 0.0
        return m, m
    means = v[_resamples(len(v), resamples, seed)].mean(axis=1)
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


@dataclass(frozen=True, slots=True)
class Difference:
    """new − base over the same questions: the mean and its paired bootstrap interval."""

    n: int
    delta: float
    lo: float
    hi: float

    @property
    def loses(self) -> bool:
        return self.hi < 0

    @property
    def gains(self) -> bool:
        return self.lo > 0

    def cell(self) -> str:
        mark = " LOSS" if self.loses else (" gain" if self.gains else "")
        return f"{100 * self.delta:+.1f} [{100 * self.lo:+.1f}, {100 * self.hi:+.1f}]{mark}"


def paired(base: Sequence[float], new: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED) -> Difference:
    b = np.asarray(base, dtype=np.float64)
    n = np.asarray(new, dtype=np.float64)
    if b.shape != n.shape:
        raise ValueError(f"paired values differ in length: {b.shape} against {n.shape}")
    d = n - b
    lo, hi = interval(d, resamples, seed)
    return Difference(len(d), float(d.mean()) if len(d) else 0.0, lo, hi)


# A question's recalls: question id -> (R@5, R@10); its cell keys: question id -> the cells it counts in.
Recalls = Mapping[str, tuple[float, float]]


def differences(
    base: Recalls, new: Recalls, cells: Mapping[str, Sequence[str]]
) -> dict[str, tuple[Difference, Difference]]:
    """Per cell: the R@5 and R@10 differences over the questions both rankings answered. `cells`: cell name
    -> its question ids."""
    out: dict[str, tuple[Difference, Difference]] = {}
    for name, ids in cells.items():
        both = [i for i in ids if i in base and i in new]
        if not both:
            continue
        out[name] = (
            paired([base[i][0] for i in both], [new[i][0] for i in both]),
            paired([base[i][1] for i in both], [new[i][1] for i in both]),
        )
    return out


@dataclass(frozen=True, slots=True)
class Verdict:
    losses: tuple[str, ...]  # cells where R@5 or R@10 loses beyond the noise
    gains: tuple[str, ...]  # cells where R@5 or R@10 gains beyond it (and neither loses)

    @property
    def holds(self) -> bool:
        return not self.losses


def verdict(diffs: Mapping[str, tuple[Difference, Difference]]) -> Verdict:
    losses = tuple(c for c, (d5, d10) in diffs.items() if d5.loses or d10.loses)
    gains = tuple(c for c, (d5, d10) in diffs.items() if c not in losses and (d5.gains or d10.gains))
    return Verdict(losses, gains)


def table(diffs: Mapping[str, tuple[Difference, Difference]], title: str = "") -> str:
    """One row per cell: questions, ΔR@5 and ΔR@10 in points with their 95 % intervals; then the verdict."""
    lines = [f"## {title}", ""] if title else []
    lines += ["| cell (questions) | ΔR@5 [95 % interval] | ΔR@10 [95 % interval] |", "|---|---|---|"]
    for name, (d5, d10) in diffs.items():
        lines.append(f"| {name} ({d5.n}) | {d5.cell()} | {d10.cell()} |")
    v = verdict(diffs)
    lines.append("")
    lines.append(
        "verdict: "
        + ("holds (no cell loses beyond the noise)" if v.holds else "LOSES in " + ", ".join(v.losses))
        + (f"; gains in {', '.join(v.gains)}" if v.gains else "")
    )
    return "\n".join(lines)
