"""Embedding policy (seed 001 "Embedding criteria") and base importance (SPEC §10), table-driven."""

from __future__ import annotations

import pytest

from episodic.domain.policy import apply_priority_floor, base_importance, decide

SEVERITIES = ("debug", "info", "warn", "error")

# seed 001's table: entry type -> severities at which it is embedded
SEED_001_TABLE: list[tuple[str, tuple[str, ...]]] = [
    ("peer.escalation", SEVERITIES),
    ("summary.generated", SEVERITIES),
    ("memory.consolidated", SEVERITIES),
    ("approval.denied", SEVERITIES),
    ("eval.regression_detected", SEVERITIES),
    ("keeper.decision", ("warn", "error")),
    ("mission.status_change", ("warn", "error")),
    ("peer.conversation", ()),
    ("exec.output_chunk", ()),
    ("container.metrics", ()),
    ("network.request", ()),
    ("network.dns.lookup", ()),
    ("network.", ()),
    ("tool.call", ()),
    ("", ()),
    ("Peer.Escalation", ()),  # types are case-sensitive
    ("networkx.foo", ()),  # only the `network.` prefix is a wildcard
]


@pytest.mark.parametrize(("entry_type", "embedded_at"), SEED_001_TABLE)
@pytest.mark.parametrize("severity", SEVERITIES)
def test_seed_001_table(entry_type: str, embedded_at: tuple[str, ...], severity: str) -> None:
    d = decide(entry_type, severity)
    assert d.embed is (severity in embedded_at)
    if d.embed:
        assert d.label == "embed"
        assert d.base_importance is not None
    else:
        assert d.base_importance is None
        want = "skip_severity" if entry_type in ("keeper.decision", "mission.status_change") else "skip_type"
        assert d.label == want


@pytest.mark.parametrize(("entry_type", "_embedded_at"), SEED_001_TABLE)
@pytest.mark.parametrize("severity", SEVERITIES)
def test_refs_episodic_forces_every_type(entry_type: str, _embedded_at: tuple[str, ...], severity: str) -> None:
    d = decide(entry_type, severity, forced=True)
    assert d.embed
    assert d.base_importance is not None
    assert d.label in ("embed", "forced")
    assert (d.label == "forced") is (decide(entry_type, severity).label != "embed")


BASE_TABLE: list[tuple[str, str, bool, float]] = [
    # (entry_type, severity, forced, base) — SPEC §10
    ("peer.escalation", "info", False, 0.90),
    ("peer.escalation", "debug", False, 0.90),
    ("eval.regression_detected", "error", False, 0.90),
    ("approval.denied", "info", False, 0.80),
    ("memory.consolidated", "info", False, 0.75),
    ("summary.generated", "info", False, 0.70),
    ("summary.generated", "error", False, 0.70),
    ("keeper.decision", "error", False, 0.80),
    ("keeper.decision", "warn", False, 0.65),
    ("mission.status_change", "error", False, 0.80),
    ("mission.status_change", "warn", False, 0.65),
    ("peer.conversation", "error", True, 0.70),
    ("peer.conversation", "warn", True, 0.60),
    ("peer.conversation", "info", True, 0.50),
    ("peer.conversation", "debug", True, 0.50),
    ("network.request", "error", True, 0.70),
    ("keeper.decision", "info", True, 0.50),
    ("keeper.decision", "debug", True, 0.50),
    ("custom.type", "warn", True, 0.60),
]


@pytest.mark.parametrize(("entry_type", "severity", "forced", "base"), BASE_TABLE)
def test_base_importance_table(entry_type: str, severity: str, forced: bool, base: float) -> None:
    d = decide(entry_type, severity, forced=forced)
    assert d.embed
    assert d.base_importance == pytest.approx(base)
    assert base_importance(entry_type, severity) == pytest.approx(base)


@pytest.mark.parametrize(("priority", "floor"), [(None, 0.0), ("pin", 0.80), ("high", 0.85), ("permanent", 0.95)])
@pytest.mark.parametrize(("entry_type", "severity", "forced", "base"), BASE_TABLE)
def test_priority_floors(
    entry_type: str, severity: str, forced: bool, base: float, priority: str | None, floor: float
) -> None:
    d = decide(entry_type, severity, forced=forced, priority=priority)
    assert d.base_importance == pytest.approx(max(base, floor))


@pytest.mark.parametrize(
    ("importance", "priority", "want"),
    [(0.1, "pin", 0.80), (0.9, "pin", 0.90), (0.05, "high", 0.85), (0.5, "permanent", 0.95), (0.3, None, 0.3)],
)
def test_floor_applies_after_decay(importance: float, priority: str | None, want: float) -> None:
    assert apply_priority_floor(importance, priority) == pytest.approx(want)


def test_priority_never_forces_embedding() -> None:
    assert not decide("peer.conversation", "info", priority="permanent").embed
