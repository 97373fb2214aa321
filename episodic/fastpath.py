"""A hand-written validator and encoder for the common, clean journal record (SPEC §3, §10).

Profiling the gate showed pydantic owning the time of `route()`: validating the entry, then building the
`EmbeddableRecord` and serialising it, about 30 µs of the ~40 µs per record. `fast_route` checks every
rule of `schemas.journal.JournalEntry` directly on the dict that orjson parsed and writes the
`journal.embeddable` record with orjson (the model's field set and order; `ts` and `accepted_at` written
the way pydantic writes datetimes).

It only ever answers for records that it can prove valid. Anything it doubts (invalid input of any kind,
and valid input whose meaning orjson and the stdlib parser might not agree on) gets `None`, and the
caller runs the shared pydantic parser, so dead-letter reasons stay `parse_entry`'s. The differential
test (tests/unit/test_fastpath.py) checks that both paths give the same outcome for every input.

What it doubts, besides every invalid value:
- bytes orjson rejects (the stdlib accepts NaN, Infinity, lone surrogates: `parse_entry` decides);
- a float of magnitude >= 2**63 in `payload` or `refs`: orjson turns integers beyond 64 bits into floats
  (the stdlib keeps them ints), and such a float cannot be told from one (checked by walking the values);
- more than FAST_MAX_BRACKETS brackets: the model's payload check can hit the recursion limit;
- a `ts` other than `YYYY-MM-DD(T|t| )HH:MM:SS[.f{1,6}](Z|z|±HH:MM)` (the model also takes looser forms);
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import orjson

from schemas.journal import MAX_ID_LEN, MAX_PAYLOAD_BYTES, MAX_SUMMARY_CHARS

# Re-encoding JSON never grows it more than 4.5x (the worst case is a number such as `1e15` ->
# `1000000000000000.0`; strings only shrink), so a record of at most FAST_MAX_RAW_BYTES cannot hold a
# payload over MAX_PAYLOAD_BYTES as the model measures it; above that the payload is measured exactly.
FAST_MAX_RAW_BYTES = 12_000
FAST_MAX_BRACKETS = 256

SEVERITIES = frozenset({"debug", "info", "warn", "error"})
PRIORITIES = frozenset({"pin", "high", "permanent"})

_TS = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:[Zz]|[+-]\d{2}:\d{2})", re.ASCII)
# orjson parses integer literals outside [-2**63, 2**64) as floats; all such floats have |f| >= 2**63.
_HUGE = 9223372036854775808.0
_MISSING: Any = object()

# Field names of the forwarded record, in the model's order (EmbeddableRecord = JournalEntry + 2).
EMBEDDABLE_FIELDS: tuple[str, ...] = (
    "id",
    "workspace_id",
    "crew_id",
    "agent_id",
    "run_id",
    "ts",
    "entry_type",
    "severity",
    "summary",
    "payload",
    "refs",
    "priority",
    "base_importance",
    "accepted_at",
)


def datetime_json(value: datetime) -> str:
    """A datetime as pydantic writes it: ISO 8601, microseconds only when non-zero, `Z` for UTC."""
    text = value.isoformat()
    if text.endswith("+00:00"):
        return text[:-6] + "Z"
    return text


def ts_json(value: Any) -> str | None:
    """The model's `ts` as it serialises it, or None when the fast path does not take this value."""
    if type(value) is not str or _TS.fullmatch(value) is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z"))  # as schemas.journal._parse_rfc3339
    except ValueError:
        return None
    if parsed.tzinfo is None:  # pragma: no cover - the pattern requires an offset
        return None
    return datetime_json(parsed)


def _has_huge_float(value: Any) -> bool:
    """Whether a float that might be an integer literal orjson could not keep (|f| >= 2**63) is inside."""
    t = type(value)
    if t is float:
        return value >= _HUGE or value <= -_HUGE
    if t is dict:
        for v in value.values():
            if type(v) is not str and _has_huge_float(v):
                return True
    elif t is list:
        for v in value:
            if type(v) is not str and _has_huge_float(v):
                return True
    return False


def _required_id(value: Any) -> bool:
    # IdStr (strict str, 1..128) plus the model's not-blank rule
    return type(value) is str and 0 < len(value) <= MAX_ID_LEN and bool(value.strip())


def _optional_id(value: Any) -> bool:
    # crew_id / run_id: null or strict str 1..128 (blank allowed)
    return value is None or (type(value) is str and 0 < len(value) <= MAX_ID_LEN)


def _refs(value: Any) -> dict[str, Any] | None:
    """`refs` as the model serialises it (declared keys first, then the extras), or None to doubt."""
    if type(value) is not dict:
        return None
    episodic = value.get("episodic")
    if episodic is not None and type(episodic) is not bool:
        return None
    supports = value.get("supports")
    if supports is not None:
        if type(supports) is not list:
            return None
        for s in supports:
            if not (type(s) is str and 0 < len(s) <= MAX_ID_LEN):
                return None
    out: dict[str, Any] = {"episodic": episodic, "supports": supports}
    for k, v in value.items():
        if k != "episodic" and k != "supports":
            out[k] = v
    return out


class Clean:
    """A record the fast path proved valid: what `route()` needs, without a model."""

    __slots__ = ("entry", "forced", "payload", "refs", "ts")

    def __init__(self, entry: dict[str, Any], ts: str, payload: dict[str, Any], refs: dict[str, Any] | None) -> None:
        self.entry = entry
        self.ts = ts
        self.payload = payload
        self.refs = refs
        self.forced = refs is not None and refs["episodic"] is True


def validate(raw: bytes | bytearray | memoryview | None) -> Clean | None:
    """The validated entry if every SPEC §3 rule holds and nothing is in doubt; otherwise None."""
    if raw is None:
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict:
        return None
    get = obj.get
    if not (
        _required_id(get("id"))
        and _required_id(get("workspace_id"))
        and _required_id(get("agent_id"))
        and _required_id(get("entry_type"))
        and _optional_id(get("crew_id"))
        and _optional_id(get("run_id"))
    ):
        return None
    severity = get("severity")
    if type(severity) is not str or severity not in SEVERITIES:
        return None
    priority = get("priority")
    if priority is not None and (type(priority) is not str or priority not in PRIORITIES):
        return None
    summary = get("summary")
    if type(summary) is not str or not (0 < len(summary) <= MAX_SUMMARY_CHARS) or not summary.strip():
        return None
    ts = ts_json(get("ts"))
    if ts is None:
        return None
    data = raw if type(raw) is bytes else bytes(raw)
    if data.count(b"{") + data.count(b"[") > FAST_MAX_BRACKETS:
        return None
    payload = get("payload", _MISSING)
    if payload is _MISSING or payload is None:
        payload = {}
    elif type(payload) is not dict:
        return None
    elif len(data) > FAST_MAX_RAW_BYTES:
        # the model's own measure, for the records where the cheap bound does not settle it
        size = len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
        if size > MAX_PAYLOAD_BYTES:
            return None
    if _has_huge_float(payload):
        return None
    refs_in = get("refs")
    refs = None
    if refs_in is not None:
        refs = _refs(refs_in)
        if refs is None or _has_huge_float(refs):
            return None
    return Clean(obj, ts, payload, refs)


def embeddable_json(clean: Clean, base_importance: float, accepted_at: str) -> bytes:
    """The `journal.embeddable` record (EmbeddableRecord's JSON) of a clean entry."""
    e = clean.entry
    get = e.get
    return orjson.dumps(
        {
            "id": e["id"],
            "workspace_id": e["workspace_id"],
            "crew_id": get("crew_id"),
            "agent_id": e["agent_id"],
            "run_id": get("run_id"),
            "ts": clean.ts,
            "entry_type": e["entry_type"],
            "severity": e["severity"],
            "summary": e["summary"],
            "payload": clean.payload,
            "refs": clean.refs,
            "priority": get("priority"),
            "base_importance": base_importance,
            "accepted_at": accepted_at,
        }
    )
