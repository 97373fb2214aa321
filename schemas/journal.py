"""The journal entry of SPEC §3 and the parser that turns raw Kafka bytes into one.

`parse_entry` never raises anything but `InvalidEntry`, whose `reason` is a short stable label
(used as the dead-letter reason and as a metric label) and whose `error` names the field.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError, field_validator

MAX_ID_LEN = 128
MAX_SUMMARY_CHARS = 16_384
MAX_PAYLOAD_BYTES = 64 * 1024

Severity = Literal["debug", "info", "warn", "error"]
Priority = Literal["pin", "high", "permanent"]

IdStr = Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_LEN)]

# Stable dead-letter reasons (also the values of the `reason` metric label).
DLQ_REASONS: tuple[str, ...] = (
    "not_utf8",
    "not_json",
    "not_object",
    "missing_field",
    "empty_field",
    "invalid_field",
    "bad_severity",
    "bad_timestamp",
    "oversize_summary",
    "oversize_payload",
    "payload_not_object",
)


class InvalidEntry(ValueError):
    """Raised for any record that is not a valid journal entry."""

    def __init__(self, reason: str, error: str) -> None:
        super().__init__(f"{reason}: {error}")
        self.reason = reason
        self.error = error


class Refs(BaseModel):
    """`refs`: free-form, with two keys the pipeline understands."""

    model_config = ConfigDict(extra="allow", frozen=True)

    episodic: StrictBool | None = None
    supports: list[IdStr] | None = None


def _parse_rfc3339(value: Any) -> datetime:
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


class JournalEntry(BaseModel):
    """One journal entry (topic `journal.entries`, key = workspace_id, value = UTF-8 JSON)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: IdStr
    workspace_id: IdStr
    crew_id: Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_LEN)] | None = None
    agent_id: IdStr
    run_id: Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_LEN)] | None = None
    ts: datetime
    entry_type: Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_LEN)]
    severity: Severity
    summary: Annotated[StrictStr, Field(min_length=1, max_length=MAX_SUMMARY_CHARS)]
    payload: dict[str, Any] = Field(default_factory=dict)
    refs: Refs | None = None
    priority: Priority | None = None

    @field_validator("ts", mode="before")
    @classmethod
    def _ts(cls, v: Any) -> datetime:
        return _parse_rfc3339(v)

    @field_validator("summary")
    @classmethod
    def _summary_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("summary is blank")
        return v

    @field_validator("id", "workspace_id", "agent_id", "entry_type")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v

    @field_validator("payload", mode="before")
    @classmethod
    def _payload(cls, v: Any) -> Any:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ValueError(f"payload must be a JSON object, got {type(v).__name__}")
        size = len(json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode())
        if size > MAX_PAYLOAD_BYTES:
            raise ValueError(f"payload is {size} bytes encoded, the limit is {MAX_PAYLOAD_BYTES}")
        return v

    @property
    def forced(self) -> bool:
        """`refs.episodic = true` forces embedding."""
        return bool(self.refs is not None and self.refs.episodic)

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=False)


def _classify(err: ValidationError) -> InvalidEntry:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "entry"
    field = str(first["loc"][0]) if first["loc"] else "entry"
    etype = first["type"]
    msg = first["msg"]
    if etype == "missing":
        return InvalidEntry("missing_field", f"{loc}: field required")
    if field == "severity":
        return InvalidEntry("bad_severity", f"severity: must be one of debug, info, warn, error ({msg})")
    if field == "ts":
        return InvalidEntry("bad_timestamp", f"ts: {msg.removeprefix('Value error, ')}")
    if field == "payload":
        if "bytes encoded" in msg:
            return InvalidEntry("oversize_payload", f"payload: {msg.removeprefix('Value error, ')}")
        return InvalidEntry("payload_not_object", f"payload: {msg.removeprefix('Value error, ')}")
    if field == "summary" and etype == "string_too_long":
        return InvalidEntry("oversize_summary", f"summary: longer than {MAX_SUMMARY_CHARS} characters")
    if etype == "string_too_short" or "blank" in msg:
        return InvalidEntry("empty_field", f"{loc}: must not be empty")
    return InvalidEntry("invalid_field", f"{loc}: {msg}")


def parse_entry(raw: bytes | bytearray | memoryview | None) -> JournalEntry:
    """Decode and validate one raw record value. Raises `InvalidEntry` only."""
    if raw is None:
        raise InvalidEntry("not_json", "record has no value (tombstone)")
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidEntry("not_utf8", f"value is not UTF-8: {e}") from None
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise InvalidEntry("not_json", f"value is not JSON: {e}") from None
    if not isinstance(obj, dict):
        kind = "null" if obj is None else type(obj).__name__
        raise InvalidEntry("not_object", f"value must be a JSON object, got {kind}")
    try:
        return JournalEntry.model_validate(obj)
    except ValidationError as e:
        raise _classify(e) from None
    except RecursionError:
        raise InvalidEntry("invalid_field", "payload nests too deeply") from None
