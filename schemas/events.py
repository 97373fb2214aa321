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

from schemas.journal import AnyId, Id, JournalEntry

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


NonEmpty = Annotated[str, Meta(min_length=1, max_length=128)]


class ReferencedHit(msgspec.Struct, frozen=True):
    entry_id: NonEmpty
    score: float
    cosine: float | None


class ReferencedEvent(_Json, msgspec.Struct, frozen=True):
    """`memory.referenced`: emitted by the recall service for the hits it returned (or rendered).

    `event_id` (a uuid the recall service sets on every event) is what makes a re-delivered event count
    once in the importance agent's ledger; an event without one (a producer older than the field) is
    keyed by a digest of its bytes instead."""

    workspace_id: NonEmpty
    scope: str
    mode: str
    at: AwareDatetime
    hits: list[ReferencedHit]
    event_id: NonEmpty | None = None


# -- forget (SPEC §11 "Forget is an event") -----------------------------------------------------------------

# A control record on `journal.embeddable` carries this header; its value says which (b"forget"). Control
# records are keyed by workspace like the entries, so they share the workspace's partition and order.
CONTROL_HEADER = "episodic-control"
FORGET = b"forget"
MAX_FORGET_IDS = 1000  # entry ids in one forget


class ForgetSelector(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What a forget removes from its workspace: one of `entry_ids`, `run_id`, `agent_id` or `all`. An
    `agent_id` given with `entry_ids` or `run_id` narrows them to that agent's memories (each given condition
    must hold): the recall service narrows a bound token's forgets so."""

    entry_ids: Annotated[list[Id], Meta(min_length=1, max_length=MAX_FORGET_IDS)] | None = None
    agent_id: Id | None = None
    run_id: AnyId | None = None
    all: bool = False

    def __post_init__(self) -> None:
        given = [name for name in ("entry_ids", "run_id") if getattr(self, name) is not None]
        if self.all:
            given.append("all")
        if self.agent_id is not None and not (given and given[0] in ("entry_ids", "run_id")):
            given.append("agent_id")
        if len(given) != 1:
            raise ValueError(
                f"a forget selector names one of entry_ids, run_id (either narrowed by agent_id), agent_id, all; "
                f"got {given}"
            )

    @property
    def kind(self) -> str:
        """`entry_ids`, `run_id`, `agent_id` or `all` (a metric label)."""
        if self.entry_ids is not None:
            return "entry_ids"
        if self.run_id is not None:
            return "run_id"
        return "agent_id" if self.agent_id is not None else "all"


class ForgetRecord(_Json, msgspec.Struct, frozen=True, kw_only=True):
    """A forget on `journal.embeddable` (header `episodic-control: forget`), produced by the recall service
    and applied by the embedding consumer in order with the workspace's entries."""

    forget_id: Id
    workspace_id: Id
    selector: ForgetSelector
    requested_at: AwareDatetime  # the cut-off: see episodic.forget for what "before the forget" means
    requested_by: str | None = None  # the token's name, for the record


class ForgottenEvent(_Json, msgspec.Struct, frozen=True, kw_only=True):
    """`memory.forgotten`: a forget was applied. The removed entry ids (memories and their aliases) come in
    parts of at most `MAX_FORGET_IDS`; `last` is true on the final part (a forget that removed nothing has
    one part with no ids)."""

    forget_id: str
    workspace_id: str
    selector: ForgetSelector
    at: AwareDatetime
    memories: int  # memories removed by the whole forget
    edges: int  # relations removed with them (theirs and those pointing at them)
    entry_ids: list[str] = msgspec.field(default_factory=list)
    part: int = 0
    last: bool = True


ARCHIVED_PAYLOAD_CHARS = 400


class ArchivedRecord(_Json, msgspec.Struct, frozen=True, kw_only=True):
    """`memory.archived`: a memory that retention removed from the index, as it was, except `payload`: the
    JSON text of the entry's payload cut to ARCHIVED_PAYLOAD_CHARS characters (`payload_truncated` says
    whether it was cut). Keyed by workspace_id; one record per memory (a crash between the archive and the
    removal can write it twice: consumers key it by (workspace_id, entry_id))."""

    entry_id: str
    workspace_id: str
    crew_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    ts: str | None = None
    entry_type: str | None = None
    severity: str | None = None
    summary: str = ""
    payload: str = "{}"
    payload_truncated: bool = False
    priority: str | None = None
    base_importance: float | None = None
    importance_score: float | None = None
    reference_count: int = 0
    indexed_at: str | None = None
    aliases: list[str] = msgspec.field(default_factory=list)
    occurrences: int = 1
    relations: list[dict[str, Any]] = msgspec.field(default_factory=list)
    archived_at: AwareDatetime
