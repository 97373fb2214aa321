"""Memory health: the five metrics, the score and the bands, as pure functions (SPEC §8, seed 001 "Health
scoring"). Each metric is one function from measured inputs to 0–100, or None when it cannot be measured
(nothing to measure: no memories, no dense vectors, no recalls in the window); docs/health.md states the same
definitions.

- freshness    = 100 × 0.5^(median age in days / half-life): the median of `now − ts` over the scope's
                 memories (future timestamps count as age 0). Half-life: EPISODIC_HEALTH_FRESHNESS_HALF_LIFE_DAYS.
- coverage     = 100 × covered / accepted. accepted: the distinct entry ids the gate forwarded on
                 journal.embeddable (the health agent's ledger), plus every id a memory holds (its entry_id and
                 its aliases: a memory's entries were accepted, even before the ledger existed). covered: the
                 ids held by memories that have a dense vector, so the duplicates folded into a memory count as
                 covered when their memory has one.
- coherence    = linear(mean top-1 neighbour cosine, floor, ceiling): for a stable sample of the scope's
                 memories with a dense vector, the best cosine between one of its chunk vectors and one of any
                 other memory's in the same scope (max-sim over chunks, as recall scores), averaged.
- efficiency   = linear(mean query–memory cosine, floor, ceiling) over the hits of the recalls in the last
                 EPISODIC_HEALTH_EFFICIENCY_WINDOW_DAYS days (`memory.referenced`, hits without a cosine skipped).
- reachability = 100 × memories with at least one relation in either direction / memories: an outgoing edge
                 (payload `links` not empty) or another memory of the workspace linking to its entry id or an alias.

linear(x, floor, ceiling) = 100 × clamp((x − floor) / (ceiling − floor), 0, 1).

score = Σ weight × metric / Σ weight over the measured metrics (weights 25/25/20/15/15); bands: red < 50,
yellow 50–75, green ≥ 75.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, time
from typing import Literal

import numpy as np

Band = Literal["red", "yellow", "green"]
BANDS: tuple[Band, ...] = ("red", "yellow", "green")
WEIGHTS: dict[str, int] = {"freshness": 25, "coverage": 25, "coherence": 20, "efficiency": 15, "reachability": 15}
METRICS: tuple[str, ...] = tuple(WEIGHTS)
RED_BELOW = 50.0
GREEN_FROM = 75.0
SECONDS_PER_DAY = 86_400.0
NN_BLOCK_ROWS = 8192  # rows of the pool multiplied at once: bounds the similarity block to sample × 8192


def band(score: float) -> Band:
    """red < 50, yellow 50–75, green ≥ 75."""
    if score < RED_BELOW:
        return "red"
    return "green" if score >= GREEN_FROM else "yellow"


def linear(value: float, floor: float, ceiling: float) -> float:
    """100 × clamp((value − floor) / (ceiling − floor), 0, 1)."""
    if ceiling <= floor:
        raise ValueError(f"ceiling {ceiling} must be above floor {floor}")
    return 100.0 * min(1.0, max(0.0, (value - floor) / (ceiling - floor)))


def median_age_days(timestamps: Iterable[datetime], now: datetime) -> float | None:
    """Median of `now − ts` in days (a timestamp in the future is age 0); None without timestamps."""
    ages = [max(0.0, (now - ts).total_seconds()) / SECONDS_PER_DAY for ts in timestamps]
    return statistics.median(ages) if ages else None


def freshness(median_age: float | None, half_life_days: float) -> float | None:
    """100 × 0.5^(median age / half-life): 100 for brand-new memories, 50 at one half-life."""
    if median_age is None:
        return None
    if half_life_days <= 0:
        raise ValueError("half_life_days must be positive")
    return 100.0 * 0.5 ** (max(0.0, median_age) / half_life_days)


def coverage(covered: int, accepted: int) -> float | None:
    """100 × covered / accepted; None when nothing was accepted."""
    if accepted <= 0:
        return None
    return 100.0 * min(covered, accepted) / accepted


def coherence(mean_top1_cosine: float | None, floor: float, ceiling: float) -> float | None:
    return None if mean_top1_cosine is None else linear(mean_top1_cosine, floor, ceiling)


def efficiency(mean_cosine: float | None, floor: float, ceiling: float) -> float | None:
    return None if mean_cosine is None else linear(mean_cosine, floor, ceiling)


def reachability(reachable: int, total: int) -> float | None:
    """100 × memories with at least one relation / memories; None without memories."""
    if total <= 0:
        return None
    return 100.0 * min(reachable, total) / total


def score(metrics: Mapping[str, float | None]) -> float:
    """The weighted mean of the measured metrics (weights 25/25/20/15/15); 0 when none was measured."""
    measured = [(WEIGHTS[name], value) for name, value in metrics.items() if name in WEIGHTS and value is not None]
    total = sum(w for w, _ in measured)
    if total == 0:
        return 0.0
    return sum(w * v for w, v in measured) / total


# -- inputs: pure reductions over what the store returns ------------------------------------------------


def stable_sample(keys: Sequence[str], k: int, salt: str = "health") -> list[int]:
    """Indices of the `k` keys with the smallest salted hash: the same memories are sampled every day (a
    trend compares like with like), new memories enter uniformly, and no RNG state is kept."""
    if k >= len(keys):
        return list(range(len(keys)))
    ranked = sorted(
        range(len(keys)), key=lambda i: hashlib.blake2b(f"{salt}\x00{keys[i]}".encode(), digest_size=8).digest()
    )
    return sorted(ranked[:k])


def top1_neighbour_cosines(
    rows: np.ndarray, owners: np.ndarray, sample: Sequence[int], *, block: int = NN_BLOCK_ROWS
) -> np.ndarray:
    """For each sampled memory, the best cosine between one of its rows and a row of another memory.

    `rows`: (R, d) unit chunk vectors of every memory in the scope; `owners`: (R,) the memory index of each
    row; `sample`: memory indices. Exact (no index): the sample's rows against the pool in blocks of
    `block` rows, so memory stays at sample rows × block. NaN for a memory that has no other memory.
    """
    if rows.ndim != 2 or owners.shape != (rows.shape[0],):
        raise ValueError("rows must be (R, d) and owners (R,)")
    sample_arr = np.asarray(sample, dtype=np.int64)
    best = np.full(len(sample_arr), -np.inf, dtype=np.float64)
    if len(sample_arr) == 0 or rows.shape[0] == 0:
        return np.full(len(sample_arr), np.nan)
    q_mask = np.isin(owners, sample_arr)
    q_rows = rows[q_mask].astype(np.float32, copy=False)
    q_owner = owners[q_mask]
    slot = {int(m): i for i, m in enumerate(sample_arr)}
    q_slot = np.array([slot[int(m)] for m in q_owner], dtype=np.int64)
    for start in range(0, rows.shape[0], block):
        pool = rows[start : start + block].astype(np.float32, copy=False)
        sims = q_rows @ pool.T  # (q, b)
        sims[q_owner[:, None] == owners[start : start + block][None, :]] = -np.inf  # not itself
        row_best = sims.max(axis=1)
        np.maximum.at(best, q_slot, row_best.astype(np.float64))
    best[np.isneginf(best)] = np.nan
    return best


def mean_finite(values: Iterable[float]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


# -- schedule ---------------------------------------------------------------------------------------------


def parse_daily_at(text: str) -> time:
    hh, _, mm = text.partition(":")
    return time(int(hh), int(mm), tzinfo=UTC)


def daily_due(now: datetime, daily_at: str, last_run: date | None) -> bool:
    """True when today's (UTC) scheduled time has passed and the daily run has not completed today. A
    process that was down at the scheduled time catches up when it starts."""
    now = now.astimezone(UTC)
    today = now.date()
    if last_run is not None and last_run >= today:
        return False
    return now.timetz() >= parse_daily_at(daily_at)


def gauge_workspaces(latest: Mapping[str, float], limit: int) -> list[str]:
    """The workspaces labelled in the gauges: the `limit` lowest scores (the ones to look at), ties by id."""
    return [ws for ws, _ in sorted(latest.items(), key=lambda kv: (kv[1], kv[0]))[: max(0, limit)]]
