"""Records on the topics after the gate (SPEC §10 "Topic records"), msgspec Structs like the journal entry.

Every topic record is one Struct: `to_json()` writes it, `from_json()` reads and validates it (and raises
`InvalidRecord`, a ValueError, for anything else). `journal.embeddable` is written by the gate and read
by the embedding consumer for every record, so it is the journal entry's own definition plus two fields.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Annotated, Any, Literal, Self

import msgspec
from msgspec import Meta

from schemas.journal import JournalEntry

IndexMode = Literal["vector", "sparse-only", "duplicate"]
AwareDatetime = Annotated[datetime, Meta(tz=True)]


class InvalidRecord(ValueError):
    """Bytes that are not a valid record of the expected topic."""


class _Json:
    """JSON in and out for a Struct (a mixin: no fields)."""

    __slots__ = ()

    def to_json(self) -> bytes:
        return msgspec.json.encode(self)

    def to_json_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, raw: bytes | bytearray | memoryview | str) -> Self:
        try:
            return msgspec.json.decode(raw, type=cls)
        except (msgspec.DecodeError, ValueError, RecursionError) as e:
            raise InvalidRecord(f"not a valid {cls.__name__}: {e}") from None

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Self:
        """The record from Python values (datetimes may be given as such or as RFC 3339 text)."""
        try:
            return msgspec.convert(obj, type=cls)
        except (msgspec.ValidationError, ValueError, RecursionError) as e:
            raise InvalidRecord(f"not a valid {cls.__name__}: {e}") from None


class EmbeddableRecord(JournalEntry, _Json, kw_only=True, frozen=True):
    """`journal.embeddable`: the validated entry plus its base importance and acceptance time."""

    base_importance: float
    accepted_at: AwareDatetime

    @classmethod
    def from_entry(cls, entry: JournalEntry, *, base_importance: float, accepted_at: datetime) -> EmbeddableRecord:
        fields = {name: getattr(entry, name) for name in JournalEntry.__struct_fields__}
        return cls(**fields, base_importance=base_importance, accepted_at=accepted_at)

    @classmethod
    def json_of(cls, entry: JournalEntry, *, base_importance: float, accepted_at: datetime) -> bytes:
        """`from_entry(...).to_json()`, the same bytes, without validating the entry a second time (the gate's
        path: constructing the record reruns the entry's rules, most of the cost of forwarding one)."""
        if type(entry) is not JournalEntry:  # a subclass writes more fields than the entry's
            return cls.from_entry(entry, base_importance=base_importance, accepted_at=accepted_at).to_json()
        head = msgspec.json.encode(entry)
        tail = (base_importance, accepted_at)
        parts = [head[:-1]]
        for key, value in zip(_EMBEDDABLE_EXTRA_KEYS, tail, strict=True):
            parts += (key, msgspec.json.encode(value))
        parts.append(b"}")
        return b"".join(parts)


# the fields EmbeddableRecord adds to the entry, as they are written after it (`,"name":`)
_EMBEDDABLE_EXTRA_KEYS = tuple(
    b',"' + name.encode() + b'":' for name in EmbeddableRecord.__struct_fields__[len(JournalEntry.__struct_fields__) :]
)


class DlqSource(msgspec.Struct, frozen=True):
    topic: str
    partition: int
    offset: int


class DlqRecord(_Json, msgspec.Struct, frozen=True):
    """`journal.dlq`: the original bytes, the reason and where they came from."""

    reason: str
    error: str
    source: DlqSource
    raw_b64: str
    raw_text: str | None

    @classmethod
    def build(cls, *, reason: str, error: str, raw: bytes | None, topic: str, partition: int, offset: int) -> DlqRecord:
        data = raw or b""
        try:
            text: str | None = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        return cls(
            reason=reason,
            error=error,
            source=DlqSource(topic=topic, partition=partition, offset=offset),
            raw_b64=base64.b64encode(data).decode("ascii"),
            raw_text=text,
        )

    def raw_bytes(self) -> bytes:
        return base64.b64decode(self.raw_b64)


class IndexedEvent(_Json, msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """`memory.indexed`: one per memory handled by the embedding consumer, and one more (mode "vector")
    when a memory written sparse first (deferred vector, or sparse-only mode then backfill) gets its dense
    vector. `duplicate_of` is left out unless set."""

    entry_id: str
    workspace_id: str
    point_id: str
    indexed_at: AwareDatetime
    mode: IndexMode
    duplicate_of: str | None = None


class ReferencedHit(msgspec.Struct, frozen=True):
    entry_id: str
    score: float
    cosine: float | None


class ReferencedEvent(_Json, msgspec.Struct, frozen=True):
    """`memory.referenced`: emitted by the recall service for the hits it returned."""

    workspace_id: str
    scope: str
    mode: str
    at: AwareDatetime
    hits: list[ReferencedHit]


class NudgeEvent(_Json, msgspec.Struct, frozen=True):
    """`memory.nudges`: a run wrote `count` journal entries since its last `memory.updated` (SPEC §10 "Nudge").

    `nudge_id` is derived from the run and its counting window, so the same decision always carries the same
    id: exactly one id per run per window (a consumer may rely on it as an idempotency key)."""

    workspace_id: str
    agent_id: str
    run_id: str
    count: int
    text: str
    at: AwareDatetime
    nudge_id: str


HealthBand = Literal["red", "yellow", "green"]
HealthTrigger = Literal["schedule", "admin"]


class HealthMetrics(msgspec.Struct, frozen=True):
    """The five metrics, 0–100 each; null when there was nothing to measure (see episodic/health.py)."""

    freshness: float | None
    coverage: float | None
    coherence: float | None
    efficiency: float | None
    reachability: float | None


class HealthInputs(msgspec.Struct, frozen=True):
    """What the metrics were computed from."""

    memories: int  # memories in the scope
    dense: int  # ... with a dense vector
    accepted: int  # distinct embeddable entry ids accepted by the gate (ledger ∪ the ids memories hold)
    covered: int  # ... held by a memory with a dense vector
    reachable: int  # memories with at least one relation, either direction
    median_age_days: float | None
    coherence_sample: int  # memories whose nearest neighbour was searched
    mean_top1_cosine: float | None
    recall_hits: int  # hits with a cosine in the efficiency window
    mean_recall_cosine: float | None
    efficiency_window_days: int


class HealthSnapshot(_Json, msgspec.Struct, frozen=True):
    """`memory.health`: one scope's daily snapshot (a workspace, or one crew of it when `crew_id` is set)."""

    workspace_id: str
    crew_id: str | None
    date: str  # YYYY-MM-DD, UTC
    computed_at: AwareDatetime
    trigger: HealthTrigger
    score: float
    band: HealthBand
    metrics: HealthMetrics
    inputs: HealthInputs
    duration_seconds: float
