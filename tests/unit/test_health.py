"""Health arithmetic, bands, the nearest-neighbour reduction and the daily schedule (pure, no IO)."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest

from episodic.domain import health as H
from episodic.maintenance.health_job import HealthConfig, Memory, WorkspaceData, scope_snapshot

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("score", "band"),
    [(0.0, "red"), (49.99, "red"), (50.0, "yellow"), (74.99, "yellow"), (75.0, "green"), (100.0, "green")],
)
def test_bands_red_below_50_yellow_to_75_green_from_75(score: float, band: str) -> None:
    assert H.band(score) == band


def test_weights_are_25_25_20_15_15_and_the_score_is_their_weighted_mean() -> None:
    assert H.WEIGHTS == {"freshness": 25, "coverage": 25, "coherence": 20, "efficiency": 15, "reachability": 15}
    metrics = {"freshness": 100.0, "coverage": 80.0, "coherence": 60.0, "efficiency": 40.0, "reachability": 20.0}
    assert H.score(metrics) == pytest.approx((2500 + 2000 + 1200 + 600 + 300) / 100)


def test_unmeasured_metrics_leave_the_weights_of_the_measured_ones() -> None:
    # efficiency unknown (no recalls): the other four carry 85 % of the weight between them
    metrics = {"freshness": 100.0, "coverage": 100.0, "coherence": 0.0, "efficiency": None, "reachability": 0.0}
    assert H.score(metrics) == pytest.approx((2500 + 2500) / 85)
    assert H.score({m: None for m in H.METRICS}) == 0.0


def test_freshness_halves_every_half_life_of_median_age() -> None:
    assert H.freshness(0.0, 60) == 100.0
    assert H.freshness(60.0, 60) == pytest.approx(50.0)
    assert H.freshness(120.0, 60) == pytest.approx(25.0)
    assert H.freshness(None, 60) is None
    ages = [NOW - timedelta(days=d) for d in (1, 2, 30)] + [NOW + timedelta(days=5)]  # a future ts is age 0
    assert H.median_age_days(ages, NOW) == pytest.approx(1.5)
    assert H.median_age_days([], NOW) is None


def test_coverage_reachability_and_the_linear_maps() -> None:
    assert H.coverage(75, 100) == 75.0
    assert H.coverage(0, 0) is None
    assert H.reachability(3, 4) == 75.0
    assert H.reachability(0, 0) is None
    assert H.linear(0.55, 0.3, 0.8) == pytest.approx(50.0)
    assert H.linear(0.1, 0.3, 0.8) == 0.0 and H.linear(0.95, 0.3, 0.8) == 100.0
    assert H.coherence(None, 0.3, 0.8) is None
    assert H.efficiency(0.45, 0.2, 0.7) == pytest.approx(50.0)
    with pytest.raises(ValueError):
        H.linear(0.5, 0.8, 0.3)


def test_top1_neighbour_is_the_best_chunk_pair_of_another_memory_never_itself() -> None:
    e = np.eye(4, dtype=np.float32)
    # memory 0 has two chunks (e0, e1); memory 1 = e0 (identical to memory 0's first chunk); memory 2 = e3
    close = (e[0] + 0.1 * e[3]) / np.linalg.norm(e[0] + 0.1 * e[3])
    rows = np.stack([e[0], e[1], close, e[3]])
    owners = np.array([0, 0, 1, 2])
    best = H.top1_neighbour_cosines(rows, owners, [0, 1, 2])
    assert best[0] == pytest.approx(float(close @ e[0]))  # max over its chunks against memory 1
    assert best[1] == pytest.approx(float(close @ e[0]))
    assert best[2] == pytest.approx(float(close @ e[3]))  # its own row (1.0) is excluded
    # in blocks of one row, the same answer
    assert np.allclose(H.top1_neighbour_cosines(rows, owners, [0, 1, 2], block=1), best)
    alone = H.top1_neighbour_cosines(e[:1], np.array([0]), [0])
    assert math.isnan(alone[0])


def test_the_stable_sample_keeps_its_members_as_the_set_grows() -> None:
    keys = [f"point-{i}" for i in range(1000)]
    first = {keys[i] for i in H.stable_sample(keys, 50)}
    grown = keys + [f"point-{i}" for i in range(1000, 1100)]
    second = {grown[i] for i in H.stable_sample(grown, 50)}
    assert len(first) == 50 and len(first & second) >= 40  # only newcomers with smaller hashes displace
    assert H.stable_sample(keys[:3], 10) == [0, 1, 2]


@pytest.mark.parametrize(
    ("now", "last", "due"),
    [
        (datetime(2026, 3, 10, 2, 59, tzinfo=UTC), date(2026, 3, 9), False),  # before today's time
        (datetime(2026, 3, 10, 3, 0, tzinfo=UTC), date(2026, 3, 9), True),
        (datetime(2026, 3, 10, 3, 0, tzinfo=UTC), date(2026, 3, 10), False),  # done today
        (datetime(2026, 3, 10, 23, 0, tzinfo=UTC), None, True),  # never ran: catch up
        (datetime(2026, 3, 10, 1, 0, tzinfo=UTC), None, False),
    ],
)
def test_the_daily_run_is_due_once_a_day_after_its_utc_time(now: datetime, last: date | None, due: bool) -> None:
    assert H.daily_due(now, "03:00", last) is due


def test_gauges_label_the_lowest_scores_only() -> None:
    latest = {"a": 90.0, "b": 20.0, "c": 55.0, "d": 20.0}
    assert H.gauge_workspaces(latest, 2) == ["b", "d"]
    assert H.gauge_workspaces(latest, 0) == []


def _mem(ids: tuple[str, ...], crew: str, age_days: float, dense: bool, links_out: bool = False) -> Memory:
    return Memory(ids=ids, crew=crew, ts=NOW - timedelta(days=age_days), dense=dense, links_out=links_out)


def test_a_scope_snapshot_from_gathered_data() -> None:
    e = np.eye(3, dtype=np.float32)
    memories = [
        _mem(("m1", "m1-dup"), "c1", 10, True, links_out=True),  # a duplicate folded in: two entries covered
        _mem(("m2",), "c1", 20, True),  # linked to by m1
        _mem(("m3",), "c2", 30, False),  # sparse-only: not covered, no vector for coherence
    ]
    data = WorkspaceData(
        workspace_id="ws",
        memories=memories,
        keys=["p1", "p2", "p3"],
        rows=np.stack([e[0], (e[0] + e[1]) / np.sqrt(2)]),
        owners=np.array([0, 1]),
        incoming={"m2"},
        accepted={"m1": "c1", "m1-dup": "c1", "m2": "c1", "m3": "c2", "lost": "c2"},
        recalls={"": (4, 2.0), "c1": (4, 2.0)},
    )
    config = HealthConfig(half_life_days=20)
    ws = scope_snapshot(data, None, config=config, now=NOW, trigger="admin")
    assert ws.inputs.memories == 3 and ws.inputs.dense == 2
    assert (ws.inputs.accepted, ws.inputs.covered) == (5, 3)  # m1, m1-dup, m2 of m1, m1-dup, m2, m3, lost
    assert ws.metrics.coverage == 60.0
    assert ws.inputs.reachable == 2 and ws.metrics.reachability == pytest.approx(66.67)
    assert ws.metrics.freshness == pytest.approx(50.0)  # median age 20 days, half-life 20
    cos = float(1 / np.sqrt(2))
    assert ws.inputs.mean_top1_cosine == pytest.approx(cos, abs=1e-4)
    assert ws.metrics.coherence == pytest.approx(H.linear(cos, 0.3, 0.8), abs=0.01)
    assert ws.metrics.efficiency == pytest.approx(H.linear(0.5, 0.2, 0.7))
    assert ws.band == H.band(ws.score) and ws.date == "2026-03-10" and ws.crew_id is None

    c2 = scope_snapshot(data, "c2", config=config, now=NOW, trigger="admin")
    assert (c2.inputs.memories, c2.inputs.accepted, c2.inputs.covered) == (1, 2, 0)
    assert c2.metrics.coverage == 0.0 and c2.metrics.coherence is None and c2.metrics.efficiency is None
    assert c2.metrics.reachability == 0.0
