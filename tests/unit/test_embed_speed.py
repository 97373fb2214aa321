"""The consumer's inline-or-defer decision for dense vectors (pure logic)."""

from __future__ import annotations

import pytest

from consumers.embedding import EmbedSpeed


def test_a_zero_budget_never_defers() -> None:
    speed = EmbedSpeed(0.0)
    assert not speed.defer(age_s=100.0, chars=10**6, model_busy=True)


@pytest.mark.parametrize(
    ("age_s", "chars", "busy", "defer"),
    [
        (0.05, 300, False, False),  # a fresh batch of short summaries: embed inline (0.05 + 0.06 s)
        (0.70, 1000, False, True),  # already old: 0.7 + 0.2 > 0.8
        (0.05, 16_384, False, True),  # one long report: ~3.3 s of model time
        (0.05, 300, True, True),  # the model is busy filling earlier vectors: do not queue behind it
        (0.85, 0, False, True),  # older than the budget already
    ],
)
def test_defer_when_inline_would_miss_the_budget(age_s: float, chars: int, busy: bool, defer: bool) -> None:
    speed = EmbedSpeed(0.8, prior=2e-4)
    assert speed.defer(age_s=age_s, chars=chars, model_busy=busy) is defer


def test_the_speed_estimate_follows_measurements_but_ignores_tiny_batches() -> None:
    speed = EmbedSpeed(0.8, prior=2e-4, alpha=0.5)
    speed.observe(50, 10.0)  # 50 chars: fixed costs dominate, ignored
    assert speed.per_char == pytest.approx(2e-4)
    speed.observe(10_000, 1.0)  # a slower model: 1e-4 s/char measured
    assert speed.per_char == pytest.approx(1.5e-4)
    for _ in range(30):
        speed.observe(10_000, 0.5)
    assert speed.per_char == pytest.approx(5e-5, rel=1e-3)
    assert not speed.defer(age_s=0.1, chars=10_000, model_busy=False)  # 0.1 + 0.5 s fits now
    speed.observe(1000, 0.0)  # nonsense timings are ignored
    assert speed.per_char == pytest.approx(5e-5, rel=1e-3)
