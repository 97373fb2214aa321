"""Records on the topics after the gate (SPEC §10 "Topic records"), msgspec Structs like the journal entry.

Every topic record is one Struct: `to_json()` writes it, `from_json()` reads and validates it (and raises
`InvalidRecord`, a ValueError, for anything else). `journal.embeddable` is written by the gate and read
by the embedding consumer for every record, so it is the journal entry's own definition plus two fields.
Size: every topic record after the gate in one module, the one place the topics' contracts are read.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
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


# Dead-letter reasons of the embedding consumer (the gate's are schemas.journal.DLQ_REASONS and gate_error).
BAD_EMBEDDABLE = "bad_embeddable"  # a record on journal.embeddable that does not decode
BAD_CONTROL = "bad_control"  # a control record (a forget) that does not decode, or that the consumer cannot apply
STORE_REJECTED = "store_rejected"  # a record the store (or the indexer) refuses, alone
FORGET_FAILED = "forget_failed"  # a forget the store refuses to apply (its status says failed, with the error)
ID_TAKEN = "id_taken"  # an entry under an id another agent's memory holds: an entry id belongs to its first writer
BAD_REVIEW = "bad_review"  # a record on memory.reviewed that does not decode (the importance agent's, issue 26)
CONTROL_REASONS = (BAD_CONTROL, FORGET_FAILED)  # dead letters that hold a forget, not a journal entry
TRUNCATED_NOTE = "[raw value truncated to its first"  # in `error` when the gate kept only the head of the bytes

# -- dead-letter replay (`episodic dlq replay`) --------------------------------------------------------------

# A replayed record carries this header (a `ReplayHistory` as JSON) on journal.entries; the gate passes it on
# to journal.embeddable, and whoever dead-letters the record again copies it into the new dead letter.
REPLAY_HEADER = "episodic-replay"
MAX_REPLAY_HISTORY = 10  # earlier failures kept with a record (the newest)
HISTORY_ERROR_CHARS = 300  # of each earlier failure's error


class DlqAttempt(msgspec.Struct, frozen=True):
    """One earlier failure of a replayed record: its reason and error, where it was read when it failed, the
    dead letter it was replayed from and when."""

    reason: str
    error: str
    source: DlqSource
    dead_letter: DlqSource
    replayed_at: AwareDatetime


class ReplayHistory(_Json, msgspec.Struct, frozen=True):
    """The `episodic-replay` header: how many times the record was replayed (this time included) and its
    earlier failures, oldest first."""

    replays: Annotated[int, Meta(ge=1)]
    history: list[DlqAttempt]

    @classmethod
    def of_headers(cls, headers: Any) -> ReplayHistory | None:
        """The history in a record's headers, or None (no header, or one that does not decode: a record's
        history is informative, a bad one must not fail the record)."""
        for key, value in headers or ():
            if key == REPLAY_HEADER:
                try:
                    return cls.from_json(bytes(value or b""))
                except InvalidRecord:
                    return None
        return None

    def header(self) -> tuple[str, bytes]:
        return (REPLAY_HEADER, self.to_json())


class DlqRecord(_Json, msgspec.Struct, frozen=True, omit_defaults=True):
    """`journal.dlq`: the original bytes, the reason and where they came from. A record that failed again
    after a replay also says how many times it was replayed and why it failed before (`history`, oldest
    first); both are left out of records never replayed."""

    reason: str
    error: str
    source: DlqSource
    raw_b64: str
    raw_text: str | None
    replays: int = 0
    history: list[DlqAttempt] = msgspec.field(default_factory=list)

    def with_replay(self, replay: ReplayHistory | None) -> DlqRecord:
        """This dead letter with the replay history of the record it holds (unchanged without one)."""
        if replay is None:
            return self
        return msgspec.structs.replace(self, replays=replay.replays, history=list(replay.history))

    @property
    def truncated(self) -> bool:
        """True when the gate kept only the head of an oversized value: the bytes are not the original."""
        return TRUNCATED_NOTE in self.error

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


class ReplayMark(_Json, msgspec.Struct, frozen=True, kw_only=True):
    """`journal.dlq.replays`, keyed `partition:offset` of the dead letter: it was replayed, where its bytes
    went and when. `episodic dlq replay` does not replay a marked dead letter again unless forced."""

    dead_letter: DlqSource
    replayed_to: DlqSource
    replays: int
    replayed_at: AwareDatetime
    forced: bool = False


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


# -- reviews from use (issue 26) -----------------------------------------------------------------------------

# How a recalled memory served the agent that reviewed it: the four FSRS ratings (seed 003 "Memory Review").
RATINGS: tuple[str, ...] = ("again", "hard", "good", "easy")
Rating = Literal["again", "hard", "good", "easy"]
MAX_REVIEWS = 100  # reviews in one event (and one `POST /v1/memory/review`)


class ReviewItem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    entry_id: Id  # the memory's own entry id (the recall service resolves aliases and folded ids first)
    rating: Rating


class ReviewedEvent(_Json, msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`memory.reviewed`: an agent's reviews of memories it was given, emitted by the recall service
    (`POST /v1/memory/review`) and applied by the importance agent, once per `event_id`, in order per
    workspace (keyed by workspace_id)."""

    event_id: NonEmpty
    workspace_id: Id
    agent_id: Id | None
    at: AwareDatetime
    reviews: Annotated[list[ReviewItem], Meta(min_length=1, max_length=MAX_REVIEWS)]
    run_id: AnyId | None = None


# -- forget (SPEC §11 "Forget is an event") -----------------------------------------------------------------

# A control record on `journal.embeddable` carries this header; its value says which (b"forget"). Control
# records are keyed by workspace like the entries, so they share the workspace's partition and order.
CONTROL_HEADER = "episodic-control"
FORGET = b"forget"
MAX_FORGET_IDS = 1000  # entry ids in one forget


def control_of(headers: Sequence[tuple[str, bytes | None]] | None) -> bytes | None:
    """The value of a record's control header (b"forget"), or None for a journal entry."""
    return next((bytes(v or b"") for k, v in headers or () if k == CONTROL_HEADER), None)


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
    requested_at: AwareDatetime  # the cut-off: see episodic.lifecycle.forget for what "before the forget" means
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
    """The five metrics, 0–100 each; null when there was nothing to measure (see episodic/domain/health.py)."""

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
