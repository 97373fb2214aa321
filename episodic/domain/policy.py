"""Embedding policy and base importance (SPEC §4, §10). Pure functions, no IO."""

from __future__ import annotations

from dataclasses import dataclass

ALWAYS_TYPES: frozenset[str] = frozenset(
    {
        "peer.escalation",
        "summary.generated",
        "memory.consolidated",
        "approval.denied",
        "eval.regression_detected",
    }
)
WARN_ERROR_TYPES: frozenset[str] = frozenset({"keeper.decision", "mission.status_change"})
NEVER_TYPES: frozenset[str] = frozenset({"peer.conversation", "exec.output_chunk", "container.metrics"})
NEVER_PREFIXES: tuple[str, ...] = ("network.",)

PRIORITY_FLOORS: dict[str, float] = {"pin": 0.80, "high": 0.85, "permanent": 0.95}

_ALWAYS_BASE: dict[str, float] = {
    "peer.escalation": 0.90,
    "eval.regression_detected": 0.90,
    "approval.denied": 0.80,
    "memory.consolidated": 0.75,
    "summary.generated": 0.70,
}
_WARN_ERROR_BASE: dict[str, float] = {"error": 0.80, "warn": 0.65}
_FORCED_BASE: dict[str, float] = {"error": 0.70, "warn": 0.60, "info": 0.50, "debug": 0.50}

# Decision labels (also metric label values).
DECISIONS: tuple[str, ...] = ("embed", "forced", "skip_type", "skip_severity")


@dataclass(frozen=True, slots=True)
class Decision:
    embed: bool
    label: str  # one of DECISIONS
    base_importance: float | None


def type_policy(entry_type: str, severity: str) -> str:
    """The type/severity filter alone: 'embed', 'skip_type' or 'skip_severity'."""
    if entry_type in ALWAYS_TYPES:
        return "embed"
    if entry_type in WARN_ERROR_TYPES:
        return "embed" if severity in ("warn", "error") else "skip_severity"
    return "skip_type"  # NEVER_TYPES, network.* and everything else


def base_importance(entry_type: str, severity: str, priority: str | None = None) -> float:
    """Base importance of an entry that is embedded (SPEC §10 table), floored by its priority."""
    if entry_type in _ALWAYS_BASE:
        base = _ALWAYS_BASE[entry_type]
    elif entry_type in WARN_ERROR_TYPES and severity in _WARN_ERROR_BASE:
        base = _WARN_ERROR_BASE[severity]
    else:
        base = _FORCED_BASE.get(severity, 0.50)
    return apply_priority_floor(base, priority)


def apply_priority_floor(importance: float, priority: str | None) -> float:
    """`priority` floors importance (also after decay: a pinned memory never falls below 0.80)."""
    floor = PRIORITY_FLOORS.get(priority or "", 0.0)
    return round(max(importance, floor), 6)


def decide(entry_type: str, severity: str, *, forced: bool = False, priority: str | None = None) -> Decision:
    """Apply the embedding policy. `refs.episodic = true` (forced) is checked before the filter."""
    verdict = type_policy(entry_type, severity)
    if verdict == "embed":
        return Decision(True, "embed", base_importance(entry_type, severity, priority))
    if forced:
        return Decision(True, "forced", base_importance(entry_type, severity, priority))
    return Decision(False, verdict, None)
