"""The journal entry of SPEC §3: one msgspec definition, and the parser that turns raw Kafka bytes into one.

`JournalEntry` declares every rule once: the types and `Meta` constraints (lengths, not blank, the
enums) and, in `__post_init__`, the three rules a type cannot say (`ts` is RFC 3339 with an offset,
`payload` is an object of at most 64 KiB nested at most `MAX_DEPTH` levels, `refs` has a boolean `episodic`
and a list of ids `supports`). msgspec decodes and validates a clean record in one pass, so the gate
needs no second, hand-written validator.

`parse_entry` never raises anything but `InvalidEntry`, whose `reason` is a short stable label (the
dead-letter reason and a metric label) and whose `error` starts with the field it is about. When the fast
decode refuses a record, `_explain` reads it again with the standard library's JSON parser, which is the
reference (it takes lone surrogate escapes and duplicate keys, as the parser before msgspec did; NaN and
±Infinity, which it takes too, are refused as `invalid_field`: they are not JSON numbers), and checks the
fields one by one against the same definition in the entry's field order, so the first field that fails
gives the reason, whatever the order of the keys in the record.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta
from msgspec.structs import force_setattr

from episodic_client.timestamps import format_timestamp, parse_timestamp

MAX_ID_LEN = 128
MAX_SUMMARY_CHARS = 16_384
MAX_PAYLOAD_BYTES = 64 * 1024
# Objects and arrays nest at most this many levels in an entry, the entry itself being the first: the depth
# that orjson writes, and where the gate stopped forwarding before this limit was stated (docs/pipeline.md,
# "Bad input").
MAX_DEPTH = 254

Severity = Literal["debug", "info", "warn", "error"]
Priority = Literal["pin", "high", "permanent"]

# Required ids, entry_type and summary must not be blank (`s.strip() == ""`). The rule is checked in
# `__post_init__` (str.strip is a tenth of the cost of a Meta pattern, which msgspec runs through `re`); the
# pattern below only documents it in the JSON Schema (ECMA-262's \s is close to str.isspace(), not equal).
_NOT_BLANK = {"pattern": r"\S"}
Id = Annotated[str, Meta(min_length=1, max_length=MAX_ID_LEN, extra_json_schema=_NOT_BLANK)]
# crew_id, run_id and the ids in refs.supports may be blank (they always could)
AnyId = Annotated[str, Meta(min_length=1, max_length=MAX_ID_LEN)]
Summary = Annotated[str, Meta(min_length=1, max_length=MAX_SUMMARY_CHARS, extra_json_schema=_NOT_BLANK)]
NOT_BLANK_FIELDS = ("id", "workspace_id", "agent_id", "entry_type", "summary")
Timestamp = Annotated[
    str, Meta(extra_json_schema={"format": "date-time", "description": "RFC 3339 with a UTC offset (Z or ±HH:MM)"})
]

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


class _RuleError(ValueError):
    """A rule of `__post_init__` failed: the dead-letter reason and the field path go with it."""

    def __init__(self, reason: str, loc: str, message: str) -> None:
        super().__init__(f"{loc}: {message}")
        self.reason = reason
        self.loc = loc
        self.message = message


class RefKeys(msgspec.Struct, frozen=True):
    """The keys of `refs` that the pipeline reads; any other key is kept as it is."""

    episodic: bool | None = None  # true forces embedding
    supports: list[AnyId] | None = None  # a consolidated rule's evidence (entry ids)


def _depth(value: Any) -> int:
    """Levels of objects and arrays in `value`, itself included (without recursion: any depth is fine)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        for child in node.values() if type(node) is dict else node:
            if type(child) is dict or type(child) is list:
                stack.append((child, level + 1))
    return deepest


def _check_nesting(field: str, value: dict[str, Any], encoded: bytes | None) -> None:
    """`encoded` (the value's JSON, when at hand) spares the walk for values with few brackets."""
    limit = MAX_DEPTH - 1  # the entry is the first level
    if (encoded is None or encoded.count(b"[") + encoded.count(b"{") > limit) and _depth(value) > limit:
        raise _RuleError("invalid_field", field, f"nests deeper than {MAX_DEPTH} levels (the entry included)")


def check_payload(value: Any) -> dict[str, Any]:
    """The payload rule: null is {}; an object of at most MAX_PAYLOAD_BYTES as compact UTF-8 JSON."""
    if value is None:
        return {}
    if type(value) is not dict:
        raise _RuleError("payload_not_object", "payload", f"payload must be a JSON object, got {type(value).__name__}")
    try:
        encoded = msgspec.json.encode(value)
    except UnicodeEncodeError as e:  # a lone surrogate: not valid UTF-8 once encoded
        raise _RuleError("payload_not_object", "payload", str(e)) from None
    except RecursionError:
        raise _RuleError("invalid_field", "payload", f"nests deeper than {MAX_DEPTH} levels") from None
    size = len(encoded)
    if size > MAX_PAYLOAD_BYTES * 4 // 9:
        # The measure is the compact JSON that Python writes (NaN and ±Infinity as such, `1e+16`), which is
        # at most 9/4 of msgspec's (`null` for `-Infinity`): below that bound the cheap length settles it.
        try:
            size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
        except RecursionError:
            raise _RuleError("invalid_field", "payload", f"nests deeper than {MAX_DEPTH} levels") from None
    if size > MAX_PAYLOAD_BYTES:
        raise _RuleError(
            "oversize_payload", "payload", f"payload is {size} bytes encoded, the limit is {MAX_PAYLOAD_BYTES}"
        )
    _check_nesting("payload", value, encoded)
    return value


def _check_not_blank(value: str, loc: str) -> None:
    if not value.strip():
        raise _RuleError("empty_field", loc, "must not be blank")


def _check_string(value: str, loc: str) -> None:
    try:
        value.encode()
    except UnicodeEncodeError:
        raise _RuleError("invalid_field", loc, "not valid unicode (a lone surrogate)") from None


def check_refs(value: dict[str, Any]) -> dict[str, Any]:
    """The refs rule: `episodic` a boolean, `supports` a list of ids; the known keys first, then the others."""
    keys = msgspec.convert(value, RefKeys)
    if keys.supports:
        for i, s in enumerate(keys.supports):
            _check_string(s, f"refs.supports.{i}")
    refs = {"episodic": keys.episodic, "supports": keys.supports}
    for k, v in value.items():
        if k != "episodic" and k != "supports":
            refs[k] = v
    if len(refs) > 2:  # free-form keys: only their nesting is checked
        try:
            encoded: bytes | None = msgspec.json.encode(refs)
        except (UnicodeEncodeError, RecursionError):  # a lone surrogate fails when the record is written, as before
            encoded = None
        _check_nesting("refs", refs, encoded)
    return refs


class JournalEntry(msgspec.Struct, kw_only=True, frozen=True):
    """One journal entry (topic `journal.entries`, key = workspace_id, value = UTF-8 JSON). Unknown keys are
    ignored. `ts` holds its canonical text (`format_timestamp`); `ts_datetime` is the parsed value."""

    id: Id
    workspace_id: Id
    crew_id: AnyId | None = None
    agent_id: Id
    run_id: AnyId | None = None
    ts: Timestamp
    entry_type: Id
    severity: Severity
    summary: Summary
    payload: dict[str, Any] | None = None  # null or absent is {}
    refs: dict[str, Any] | None = None
    priority: Priority | None = None

    def __post_init__(self) -> None:
        if not (
            self.id.strip()
            and self.workspace_id.strip()
            and self.agent_id.strip()
            and self.entry_type.strip()
            and self.summary.strip()
        ):
            for name in NOT_BLANK_FIELDS:
                _check_not_blank(getattr(self, name), name)
        try:
            force_setattr(self, "ts", format_timestamp(parse_timestamp(self.ts)))
        except ValueError as e:
            raise _RuleError("bad_timestamp", "ts", str(e)) from None
        force_setattr(self, "payload", check_payload(self.payload))
        if self.refs is not None:
            force_setattr(self, "refs", check_refs(self.refs))

    @property
    def ts_datetime(self) -> datetime:
        return datetime.fromisoformat(self.ts)

    @property
    def forced(self) -> bool:
        """`refs.episodic = true` forces embedding."""
        return self.refs is not None and self.refs["episodic"] is True

    @property
    def supports(self) -> list[str]:
        """`refs.supports`, or []."""
        return (self.refs or {}).get("supports") or []


_decode_entry = msgspec.json.Decoder(JournalEntry).decode


def parse_entry(raw: bytes | bytearray | memoryview | None) -> JournalEntry:
    """Decode and validate one raw record value. Raises `InvalidEntry` only."""
    if raw is not None:
        data = raw if type(raw) is bytes else bytes(raw)
        try:
            if data.isascii() or data.decode("utf-8"):  # msgspec does not check the strings that it skips
                return _decode_entry(data)
        except (msgspec.DecodeError, ValueError, RecursionError):
            pass
    return _explain(raw)


# -- why a record is refused (the slow path: only for records that are refused or unusual) ---------------

_FIELDS = {f.name: f for f in msgspec.structs.fields(JournalEntry)}
_MSG_AT = re.compile(r" - at `\$[^`]*`$")


def _explain(raw: bytes | bytearray | memoryview | None) -> JournalEntry:
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
        for name in _FIELDS:
            _check_field(name, obj)
        return msgspec.convert(obj, JournalEntry)
    except _RuleError as e:
        raise InvalidEntry(e.reason, f"{e.loc}: {e.message}") from None
    except (msgspec.ValidationError, RecursionError) as e:  # pragma: no cover - the fields passed one by one
        raise InvalidEntry("invalid_field", f"entry: {e}") from None


def _check_field(name: str, obj: dict[str, Any]) -> None:
    """Raise `_RuleError` with the reason of the first rule of field `name` that `obj` breaks."""
    field = _FIELDS[name]
    if name not in obj:
        if field.required:
            raise _RuleError("missing_field", name, "field required")
        return
    value = obj[name]
    if name == "ts":
        try:
            parse_timestamp(value)
        except ValueError as e:
            raise _RuleError("bad_timestamp", "ts", str(e)) from None
    elif name == "payload":
        check_payload(value)
        _check_finite(value, "payload")
    elif name == "refs":
        if value is not None:
            _convert(value, dict[str, Any], "refs")
            _convert(value.get("episodic"), bool | None, "refs.episodic")
            supports = _convert(value.get("supports"), list[Any] | None, "refs.supports")
            for i, s in enumerate(supports or ()):
                _convert(s, AnyId, f"refs.supports.{i}")
            check_refs(value)
            _check_finite(value, "refs")
    elif name == "severity":
        if value not in ("debug", "info", "warn", "error") or type(value) is not str:
            raise _RuleError("bad_severity", name, f"must be one of debug, info, warn, error (got {value!r:.40})")
    else:
        _convert(value, field.type, name)
        if name in NOT_BLANK_FIELDS:
            _check_not_blank(value, name)


def _check_finite(value: Any, loc: str) -> None:
    """NaN and ±Infinity (which the standard library's parser takes, and 1e400 becomes) are not JSON numbers
    (RFC 8259): refused rather than forwarded, since the entry could not be written back as the same JSON.
    Only this slow path can meet them: msgspec's decoder refuses them, and the fast path never sees one."""
    stack: list[tuple[Any, str]] = [(value, loc)]
    while stack:
        v, path = stack.pop()
        if type(v) is float and not math.isfinite(v):
            raise _RuleError("invalid_field", path, f"{v!r} is not a JSON number (RFC 8259): send null or a string")
        if isinstance(v, dict):
            stack.extend((item, f"{path}.{key}") for key, item in v.items())
        elif isinstance(v, list):
            stack.extend((item, f"{path}.{i}") for i, item in enumerate(v))


def _convert(value: Any, type_: Any, loc: str) -> Any:
    if type(value) is str:
        _check_string(value, loc)
    try:
        return msgspec.convert(value, type_)
    except msgspec.ValidationError as e:
        message = _MSG_AT.sub("", str(e))
    if "of length >=" in message:
        raise _RuleError("empty_field", loc, "must not be empty")
    if loc == "summary" and "of length <=" in message:
        raise _RuleError("oversize_summary", loc, f"longer than {MAX_SUMMARY_CHARS} characters")
    raise _RuleError("invalid_field", loc, message)
