"""The gate's routing decision for one raw journal record (SPEC §3, §4, §10). Pure: no IO, no framework.

`route()` turns the raw value of one `journal.entries` record, plus where it came from and the time of
acceptance, into exactly one of:

- `Forward`: the JSON of an `EmbeddableRecord` for `journal.embeddable`, keyed by workspace_id;
- `Skip`: a valid entry that the embedding policy does not embed (with its decision label);
- `DeadLetter`: the JSON of a `DlqRecord` for `journal.dlq` (original bytes, reason, source offsets).

It never raises: whatever the bytes are, the caller gets one of the three.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import msgspec

from episodic.domain.policy import ALWAYS_TYPES, NEVER_PREFIXES, NEVER_TYPES, WARN_ERROR_TYPES, decide
from schemas.events import DlqRecord, EmbeddableRecord
from schemas.journal import InvalidEntry, parse_entry

# A dead-letter record must fit in one Kafka message (the producer's default max.request.size is 1 MiB).
MAX_DLQ_RECORD_BYTES = 900_000
# Above this many raw bytes the DLQ keeps only the head of the original value (and says so in `error`).
MAX_DLQ_RAW_BYTES = 600_000

UNEXPECTED_REASON = "gate_error"  # a bug in the gate, not in the record; still dead-lettered, never raised

KNOWN_TYPES: frozenset[str] = ALWAYS_TYPES | WARN_ERROR_TYPES | NEVER_TYPES
OTHER_TYPE = "other"


def type_label(entry_type: str) -> str:
    """The `entry_type` metric label: known policy types as they are, `network.*` as one, the rest `other`.

    Producers choose entry types freely; labelling each one would let them blow up the series count.
    """
    if entry_type in KNOWN_TYPES:
        return entry_type
    for prefix in NEVER_PREFIXES:
        if entry_type.startswith(prefix):
            return prefix + "*"
    return OTHER_TYPE


METRIC_TYPE_LABELS: tuple[str, ...] = (
    *sorted(KNOWN_TYPES),
    *(p + "*" for p in NEVER_PREFIXES),
    OTHER_TYPE,
)


@dataclass(frozen=True, slots=True)
class Forward:
    """Send `value` to journal.embeddable with `key`."""

    key: bytes
    value: bytes
    entry_id: str
    entry_type: str
    decision: str  # "embed" | "forced"


@dataclass(frozen=True, slots=True)
class Skip:
    """A valid entry that the policy does not embed: counted, sent nowhere."""

    entry_id: str
    entry_type: str
    decision: str  # "skip_type" | "skip_severity"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Send `value` (a DlqRecord as JSON) to journal.dlq."""

    reason: str
    error: str
    value: bytes


Routed = Forward | Skip | DeadLetter


def dead_letter(
    raw: bytes | bytearray | memoryview | None,
    *,
    reason: str,
    error: str,
    topic: str,
    partition: int,
    offset: int,
) -> DeadLetter:
    """The DLQ record for `raw`, kept under one Kafka message: huge values lose `raw_text`, then their tail."""
    data = bytes(raw) if raw is not None else None
    rec = DlqRecord.build(reason=reason, error=error, raw=data, topic=topic, partition=partition, offset=offset)
    value = rec.to_json()
    if len(value) > MAX_DLQ_RECORD_BYTES:
        rec = msgspec.structs.replace(rec, raw_text=None)
        value = rec.to_json()
    if len(value) > MAX_DLQ_RECORD_BYTES and data is not None:
        note = f"{error} [raw value truncated to its first {MAX_DLQ_RAW_BYTES} of {len(data)} bytes]"
        rec = DlqRecord.build(
            reason=reason, error=note, raw=data[:MAX_DLQ_RAW_BYTES], topic=topic, partition=partition, offset=offset
        )
        rec = msgspec.structs.replace(rec, raw_text=None)
        value = rec.to_json()
    return DeadLetter(reason=rec.reason, error=rec.error, value=value)


def replayed_stamp(raw: bytes | bytearray | memoryview | None, now: datetime) -> datetime:
    """The acceptance stamp of a replayed record (`episodic dlq replay`): the one it already carries when it
    was accepted before (a record dead-lettered after the gate, from journal.embeddable, holds its
    `accepted_at`), else `now`. Re-stamping it `now` would make an old version newer than the versions
    accepted after it, and a replay would roll them back (issue 25). A stamp later than `now` is never kept:
    a replay can only make a record older, never newer."""
    try:
        obj = json.loads(bytes(raw)) if raw is not None else None
        stamp = (
            datetime.fromisoformat(str(obj["accepted_at"]).replace("Z", "+00:00")) if isinstance(obj, dict) else None
        )
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError):
        return now
    if stamp is None or stamp.tzinfo is None:
        return now
    return min(stamp, now)


def route(
    raw: bytes | bytearray | memoryview | None,
    *,
    topic: str,
    partition: int,
    offset: int,
    now: datetime,
) -> Routed:
    """Validate one raw record, apply the embedding policy, and say where it goes. Never raises."""
    try:
        try:
            entry = parse_entry(raw)
        except InvalidEntry as e:
            return dead_letter(raw, reason=e.reason, error=e.error, topic=topic, partition=partition, offset=offset)
        decision = decide(entry.entry_type, entry.severity, forced=entry.forced, priority=entry.priority)
        if not decision.embed or decision.base_importance is None:
            return Skip(entry_id=entry.id, entry_type=entry.entry_type, decision=decision.label)
        return Forward(
            key=entry.workspace_id.encode(),
            value=EmbeddableRecord.json_of(entry, base_importance=decision.base_importance, accepted_at=now),
            entry_id=entry.id,
            entry_type=entry.entry_type,
            decision=decision.label,
        )
    except Exception as e:  # a bug here must not stop the stream: dead-letter the record instead
        try:
            return dead_letter(
                raw,
                reason=UNEXPECTED_REASON,
                error=f"{type(e).__name__}: {e}"[:2000],
                topic=topic,
                partition=partition,
                offset=offset,
            )
        except Exception:  # pragma: no cover - last resort, still a record
            fallback = json.dumps(
                {
                    "reason": UNEXPECTED_REASON,
                    "error": type(e).__name__,
                    "source": {"topic": topic, "partition": partition, "offset": offset},
                    "raw_b64": "",
                    "raw_text": None,
                }
            ).encode()
            return DeadLetter(reason=UNEXPECTED_REASON, error=type(e).__name__, value=fallback)
