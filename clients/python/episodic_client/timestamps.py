"""RFC 3339 timestamps as the journal and the API take them: `parse_timestamp` and `format_timestamp`.

One definition for both sides: the API models (`episodic_client.models`, the `since` / `until` filters) and
the engine's journal entry (`schemas.journal`, its `ts`) import them from here, so the client checks a
timestamp exactly as the gate will. Standard library only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["format_timestamp", "parse_timestamp"]


def parse_timestamp(value: Any) -> datetime:
    """`ts` as the journal takes it: RFC 3339 with an offset (also what Python's ISO parser reads beyond it).

    Raises:
        ValueError: not a string, not RFC 3339, or without an offset (the message names `ts`).
    """
    if not isinstance(value, str):
        raise ValueError("ts must be an RFC 3339 string, e.g. 2026-11-21T10:00:00Z")
    text = value.strip()
    if len(text) < 20 or text[10] not in "Tt ":
        raise ValueError(f"ts {value!r} is not an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.f](Z|±HH:MM))")
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError as e:
        raise ValueError(f"ts {value!r} is not an RFC 3339 timestamp: {e}") from None
    if parsed.tzinfo is None:
        raise ValueError(f"ts {value!r} has no UTC offset (RFC 3339 requires Z or ±HH:MM)")
    return parsed


def format_timestamp(value: datetime) -> str:
    """The canonical text of a timestamp: RFC 3339, `Z` for UTC, microseconds only when there are some.

    The same text msgspec's JSON encoder wrote when this lived beside the journal entry (tests/unit/
    test_journal.py checks them against each other): an offset is rounded to whole minutes, half a minute
    down (seconds beyond it are dropped), and one that would round to ±24:00 stays ±23:59, the largest that
    RFC 3339 writes (writing it `Z` would move the instant by a day, not by under a minute).
    """
    if value.tzinfo is UTC:  # the common case (parse_timestamp of `...Z`): a fast path
        return value.isoformat()[:-6] + "Z"
    offset = value.utcoffset()
    if offset is None:
        return value.isoformat()
    text = value.replace(tzinfo=None).isoformat()
    seconds = offset.days * 86400 + offset.seconds
    minutes = min((abs(seconds) + 29) // 60, 1439)  # 23:59:31 and beyond: +23:59 (as msgspec), never Z
    if minutes == 0:
        return text + "Z"
    hours, mins = divmod(minutes, 60)
    return f"{text}{'-' if seconds < 0 else '+'}{hours:02d}:{mins:02d}"
