"""The memory service's HTTP API models (SPEC §7, §11). The OpenAPI document generated from these is the contract.
Size: every request and response model of the HTTP API in one module, the one place the contract is read.

One definition for both sides: the clients build and decode with them, and the service (`recall/`) declares its
routes with them (the engine distribution depends on this one). Needs pydantic only; the timestamps are
`episodic_client.timestamps`.

Validation rules (every violation is a 422 that names the field, never a 5xx):

- `workspace_id`: required string, 1..128 chars.
- `scope`: "own" (default) or "crew_shared". "own" requires `agent_id`; "crew_shared" requires `crew_id`
  and may omit `agent_id` (then it returns the crew's high-value memories only).
- `agent_id`, `crew_id`: null or a string of 1..128 chars.
- `query`: 1..`MAX_QUERY_CHARS` (4096) characters, not only whitespace.
- `k`: integer 1..50, default 5. `mode`: "hybrid" (default), "dense" or "sparse". `walk_depth`: 0 or 1.
  `adjacent`: true, false or null (the service default).
- Types are strict (`"5"` is not an integer, `true` is not a number) and unknown fields are rejected.
- Journal (`POST /v1/journal`): `entries`, 1..`MAX_JOURNAL_ENTRIES` journal entries (SPEC §3) in a body of
  at most `MAX_JOURNAL_BYTES`; each entry is validated on its own by the gate's parser.
- Render: `max_chars` (`MIN_RENDER_CHARS`..`MAX_RENDER_CHARS`) or `max_tokens` (about 4 characters a
  token), not both; neither means `DEFAULT_RENDER_CHARS`.
- Filters (SPEC §11), applied inside the store query (every leg), so a filtered recall still returns k hits
  when k memories pass: `since` <= ts < `until` (RFC 3339 with an offset; `until` after `since`),
  `entry_types` (1..`MAX_ENTRY_TYPES`), `min_severity` (that severity or above), `run_id` (only that run;
  on render `run_id` keeps its SPEC §7 meaning, the agent's current run for a pending nudge, and does not
  filter), `exclude_run_id` (not that run; memories without a run are kept). `crew_id` in scope `own`
  narrows to the agent's memories of that crew.
- `as_of` (RFC 3339 with an offset, like `since`): the instant the query's relative times ("two weeks ago", "last
  May") are read from, for the time legs (`EPISODIC_RRF_TIME_WEIGHT`); default the service's clock. Not a filter.
- Reviews (`POST /v1/memory/review`): `reviews`, 1..`MAX_REVIEWS` of `{entry_id, rating}`, `rating` one of
  again, hard, good, easy (`reviews.2.rating` names the third review's).
"""

from __future__ import annotations

from datetime import UTC
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationInfo, field_validator

from episodic_client.timestamps import format_timestamp, parse_timestamp

MAX_ID_LEN = 128
MAX_QUERY_CHARS = 4096
MAX_K = 50
CHARS_PER_TOKEN = 4
MIN_RENDER_CHARS = 400  # the wrapper and the preamble alone take about 330
MAX_RENDER_CHARS = 200_000
DEFAULT_RENDER_CHARS = 4000
MAX_JOURNAL_ENTRIES = 500
MAX_JOURNAL_BYTES = 1 << 20  # the whole request body; clients split larger batches

MAX_ENTRY_TYPES = 50
# The topic `POST /v1/journal` produces to (`JournalAccepted.topic`); the engine's topic names take it from here.
JOURNAL_TOPIC = "journal.entries"

Scope = Literal["own", "crew_shared"]
Role = Literal["agent", "lead"]  # what a token or a client is bound as (seed 001)
Mode = Literal["hybrid", "dense", "sparse"]
Via = Literal["direct", "similar", "supports", "adjacent", "supersedes"]
# Why a hit stands where it does (episodic.retrieval.expand.PLACED): its own fused score, the walk, run adjacency,
# or right above the older memory it supersedes. No diversity re-rank exists (MMR was measured worse, eval/README.md).
Placed = Literal["direct", "walk", "adjacent", "newer"]
Severity = Literal["debug", "info", "warn", "error"]

IdStr = Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_LEN)]


def scope_for_role(role: Role | None) -> Scope:
    """Seed 001's ScopeForRole: an agent (the default) reads its own past; a lead its crew's shared memory."""
    return "crew_shared" if role == "lead" else "own"


class RecallRequest(BaseModel):
    """`POST /v1/recall` body."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    workspace_id: IdStr = Field(description="the isolation boundary; a request sees only this workspace")
    # `scope` is declared before the ids so that their validators can see it.
    scope: Scope = Field(default="own", description="own: the agent's past; crew_shared: + high-value crew")
    agent_id: IdStr | None = Field(default=None, validate_default=True, description="required for own")
    crew_id: IdStr | None = Field(default=None, validate_default=True, description="required for crew_shared")
    query: StrictStr = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    k: StrictInt = Field(default=5, ge=1, le=MAX_K)
    mode: Mode = "hybrid"
    walk_depth: Literal[0, 1] = Field(
        default=0, description="1: also follow one hop of similar/supports relations (inside the scope)"
    )
    adjacent: bool | None = Field(
        default=None,
        description="true: each direct hit also brings its previous and next memory in its run, scored below "
        'it ("via": "adjacent"), counted in k; null: the service default (EPISODIC_RECALL_ADJACENT, off)',
    )
    since: StrictStr | None = Field(default=None, description="only memories with ts >= since (RFC 3339)")
    until: StrictStr | None = Field(default=None, description="only memories with ts < until (RFC 3339)")
    entry_types: list[IdStr] | None = Field(
        default=None, min_length=1, max_length=MAX_ENTRY_TYPES, description="only these entry types"
    )
    min_severity: Severity | None = Field(default=None, description="only this severity and above")
    run_id: IdStr | None = Field(default=None, description="only memories of this agent run")
    exclude_run_id: IdStr | None = Field(
        default=None, description="leave this run out (the run an agent is in); memories without a run stay"
    )
    as_of: StrictStr | None = Field(
        default=None,
        description="when the question is asked (RFC 3339): relative times in the query ('two weeks ago', "
        "'last May') are read from it rather than from the service's clock; it filters nothing",
    )

    # `run_id` filters the recall (False on render, where it names the run of a pending nudge)
    RUN_ID_FILTERS: ClassVar[bool] = True

    @field_validator("since", "until", "as_of")
    @classmethod
    def _rfc3339(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return None
        try:
            ts = parse_timestamp(v)
        except ValueError as e:
            raise ValueError(str(e).replace("ts ", "", 1)) from None
        canonical = format_timestamp(ts.astimezone(UTC))
        since = info.data.get("since")
        if info.field_name == "until" and since is not None and parse_timestamp(since) >= ts:
            raise ValueError(f"must be after since ({since})")
        return canonical

    @field_validator("exclude_run_id")
    @classmethod
    def _not_the_run(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and cls.RUN_ID_FILTERS and v == info.data.get("run_id"):
            raise ValueError("must differ from run_id (that would exclude everything run_id selects)")
        return v

    @property
    def run_filter(self) -> str | None:
        """The run the recall is narrowed to (None on render: there `run_id` is the nudge's run)."""
        return self.run_id if self.RUN_ID_FILTERS else None

    @field_validator("agent_id")
    @classmethod
    def _agent_for_own(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None and info.data.get("scope") == "own":
            raise ValueError("scope 'own' requires agent_id")
        return v

    @field_validator("crew_id")
    @classmethod
    def _crew_for_crew_shared(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None and info.data.get("scope") == "crew_shared":
            raise ValueError("scope 'crew_shared' requires crew_id")
        return v

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("query must not be blank")
        return v


class RenderRequest(RecallRequest):
    """`POST /v1/recall/render` body: the recall body plus a budget and an optional run id."""

    max_chars: StrictInt | None = Field(
        default=None,
        ge=MIN_RENDER_CHARS,
        le=MAX_RENDER_CHARS,
        description=f"hard bound on len(text), preamble included; default {DEFAULT_RENDER_CHARS}",
    )
    max_tokens: StrictInt | None = Field(
        default=None,
        ge=MIN_RENDER_CHARS // CHARS_PER_TOKEN,
        le=MAX_RENDER_CHARS // CHARS_PER_TOKEN,
        description=f"budget in tokens (about {CHARS_PER_TOKEN} characters a token); not with max_chars",
    )
    run_id: IdStr | None = Field(
        default=None, description="the agent's current run, for a pending nudge (not a filter on render)"
    )

    RUN_ID_FILTERS: ClassVar[bool] = False

    @field_validator("max_tokens")
    @classmethod
    def _one_budget(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and info.data.get("max_chars") is not None:
            raise ValueError("give max_chars or max_tokens, not both")
        return v

    @property
    def budget_chars(self) -> int:
        if self.max_chars is not None:
            return self.max_chars
        if self.max_tokens is not None:
            return self.max_tokens * CHARS_PER_TOKEN
        return DEFAULT_RENDER_CHARS


class ContextLine(BaseModel):
    entry_id: str = Field(description="the earlier memory of the run")
    text: str = Field(description="its summary as indexed: cut to its first EPISODIC_CONTEXT_WORDS words")


class Hit(BaseModel):
    entry_id: str
    score: float
    age_seconds: float = Field(description="now - ts, in seconds (0 for future timestamps)")
    summary: str
    entry_type: str
    severity: str
    agent_id: str | None
    crew_id: str | None
    ts: str = Field(description="RFC 3339, as produced")
    payload: dict[str, Any]
    via: Via = "direct"
    placed: Placed = Field(
        default="direct",
        description='why it stands where it does: "direct" (its own score for the query), "walk" (one hop from a '
        'direct hit along `via`, walk_depth 1), "adjacent" (a run neighbour of a direct hit) or "newer" (right '
        "above the older memory it supersedes, moved up or brought in)",
    )
    aliases: list[str] = Field(
        default_factory=list,
        description="later entry ids merged into this memory as exact duplicates (the newest "
        "EPISODIC_ALIAS_LIMIT of them, 20 by default)",
    )
    occurrences: int = Field(
        default=1,
        ge=1,
        description="how many entries this memory stands for: itself, every exact duplicate and every near "
        "duplicate folded into it",
    )
    folded: list[str] = Field(
        default_factory=list,
        description="entry ids of near duplicates folded into this memory (reworded, or written by another "
        "agent of the crew; EPISODIC_FOLD_*), with their aliases; each stays readable by GET /v1/memory/{id}",
    )
    supersedes: list[str] = Field(
        default_factory=list,
        description="entry ids of older memories this one updates (a changed number or date on the same "
        "subject; EPISODIC_SUPERSEDE_*): it is placed right above them",
    )
    superseded_by: str | None = Field(
        default=None, description="the newer memory that updates this one (shown right above it when in scope)"
    )
    agents: list[str] = Field(
        default_factory=list,
        description="when near duplicates from several agents were folded into it: those agents, the memory's "
        "own first, as far as the request's scope may see them (in scope own, only the agent's own); empty "
        "otherwise",
    )
    surprise: float | None = Field(
        default=None,
        description="1 - the best cosine to what its agent already held in the workspace when it was linked "
        "(seed 003); null without a dense vector or from before surprise was computed",
    )
    key_moment: bool = Field(default=False, description="surprise >= 0.7 (seed 003): unlike anything its agent held")
    similar_left_out: int = Field(
        default=0,
        ge=0,
        description="render only: how many lower-ranked hits that say the same thing (EPISODIC_FOLD_* rule) were "
        "left out of the block in favour of this one",
    )
    context: list[ContextLine] | None = Field(
        default=None,
        description="the earlier memories of its run it was indexed with, oldest first (the summary is the "
        "entry's own, unchanged); null when indexed without context",
    )


class RecallResponse(BaseModel):
    mode: Mode = Field(description="the requested mode")
    degraded: bool = Field(
        description="true when the answer may miss memories the mode should see: answered from the sparse leg "
        "only (no embedder), or a dense request while memories in the scope still wait for their dense vector"
    )
    hits: list[Hit]


class RenderResponse(BaseModel):
    text: str = Field(description="<recalled-memory>…</recalled-memory>, len(text) <= the budget")
    hits: list[Hit] = Field(description="the hits that made it into the text, in render order")
    nudge: str | None = Field(default=None, description="a pending nudge for run_id, outside the block")
    mode: Mode
    degraded: bool
    similar_left_out: int = Field(
        default=0,
        ge=0,
        description="hits left out because they say what a hit in the block says (each kept hit counts its own, "
        "and its line says `+N similar`); the block spends no two lines on one fact",
    )


class StatsResponse(BaseModel):
    indexed: int = Field(description="memories")
    dense: int = Field(description="memories with their dense vector")
    sparse_only: int = Field(description="memories without it yet (BM25 only): written BM25-first, or quarantined")
    quarantined: int = Field(
        default=0,
        description="of those, the ones the backfill gave up on after EPISODIC_DENSIFY_MAX_ATTEMPTS failed "
        "attempts to embed their text (they stay BM25-only)",
    )


class HealthzResponse(BaseModel):
    status: Literal["ok", "degraded"]
    episodic: Literal["vector", "sparse-only"]
    kafka: str
    qdrant: str
    kafka_bootstrap: str | None
    journal: Literal["durable", "volatile", "unknown"] = Field(
        default="unknown",
        description="durable: the journal is on Kafka's log; volatile: the embedded broker is the Tansu fallback "
        "(memory storage, no Java 17 here): what is not indexed yet is lost when it stops",
    )
    context: str = Field(
        default="off",
        description="context-aware indexing: the mode (e.g. prev:2/16w), off, or unavailable (the collection "
        "was created before it and has no bm25_context vector: recall runs without the context leg)",
    )


MAX_HEALTH_DAYS = 366


class HealthMetricsModel(BaseModel):
    """0–100 each; null when there was nothing to measure (definitions: docs/health.md)."""

    freshness: float | None = Field(description="100 × 0.5^(median age in days / half-life)")
    coverage: float | None = Field(description="accepted embeddable entries whose memory has a dense vector, %")
    coherence: float | None = Field(description="mean top-1 neighbour cosine of a sample, mapped to 0–100")
    efficiency: float | None = Field(description="mean query–memory cosine of recent recall hits, mapped to 0–100")
    reachability: float | None = Field(description="memories with at least one relation, either direction, %")


class HealthInputsModel(BaseModel):
    memories: int
    dense: int
    accepted: int
    covered: int
    reachable: int
    median_age_days: float | None
    coherence_sample: int
    mean_top1_cosine: float | None
    recall_hits: int
    mean_recall_cosine: float | None
    efficiency_window_days: int


class HealthSnapshotModel(BaseModel):
    """One stored daily snapshot of a workspace (`crew_id` null) or of one of its crews."""

    workspace_id: str
    crew_id: str | None
    date: str = Field(description="YYYY-MM-DD, UTC")
    computed_at: str = Field(description="RFC 3339")
    trigger: Literal["schedule", "admin"]
    score: float = Field(description="weighted 25/25/20/15/15 over the measured metrics")
    band: Literal["red", "yellow", "green"] = Field(description="red < 50, yellow 50–75, green ≥ 75")
    metrics: HealthMetricsModel
    inputs: HealthInputsModel
    duration_seconds: float


class HealthResponse(HealthSnapshotModel):
    """`GET /v1/memory/health`: the latest stored snapshot, and with `days=` the daily history."""

    history: list[HealthSnapshotModel] | None = Field(
        default=None, description="with days=N: the stored snapshots of the last N days (today included), oldest first"
    )


class HealthRunResponse(BaseModel):
    """`POST /v1/admin/run/health`: what the run computed (and stored, and published)."""

    workspaces: int = Field(description="workspaces snapshotted")
    failed: list[str] = Field(description="workspaces whose snapshot failed (store errors; see the log)")
    duration_seconds: float
    snapshots: list[HealthSnapshotModel]


class ErrorResponse(BaseModel):
    """Every 4xx/503 body carries `error`, a one-line message that names the field when there is one."""

    error: str
    detail: Any = None


# -- the memory lifecycle (SPEC §11): forget, inspect, list ------------------------------------------------

MAX_FORGET_IDS = 1000
MAX_PAGE = 100
DEFAULT_PAGE = 20
FORGET_SELECTORS = ("entry_ids", "agent_id", "run_id", "all")
DEFAULT_FORGET_WAIT_S = 10.0  # how long a forget's answer waits for it to be applied (the `wait` parameter)
MAX_FORGET_WAIT_S = 60.0


class ForgetRequest(BaseModel):
    """`POST /v1/memory/forget` body: the workspace and one selection. `entry_ids`: those memories (an alias
    id takes its whole memory); `run_id`: every memory of that run; `agent_id`: every memory of that agent,
    or, given with `entry_ids` or `run_id`, only that agent's memories among them; `all: true`: the whole
    workspace. Each of them also keeps out the entries of the selection still on their way."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    workspace_id: IdStr
    entry_ids: list[IdStr] | None = Field(default=None, min_length=1, max_length=MAX_FORGET_IDS)
    agent_id: IdStr | None = Field(default=None, description="alone: the agent's memories; else narrows")
    run_id: IdStr | None = None
    all: bool = Field(default=False, validate_default=True, description="true: every memory of the workspace")

    @field_validator("run_id", "all")
    @classmethod
    def _one_selection(cls, v: Any, info: ValidationInfo) -> Any:
        def given(name: str) -> bool:
            return info.data.get(name) not in (None, False)

        if info.field_name == "run_id":
            if v is not None and given("entry_ids"):
                raise ValueError("give entry_ids or run_id, not both (agent_id may narrow either)")
            return v
        if v is not False:
            also = [f for f in FORGET_SELECTORS[:-1] if given(f)]
            if also:
                raise ValueError(f"all: true is the whole workspace; give nothing else (also given: {', '.join(also)})")
        elif all(f in info.data and info.data[f] is None for f in FORGET_SELECTORS[:-1]):
            raise ValueError("give exactly one of entry_ids, agent_id, run_id, or all: true")
        return v


class ForgetRemoved(BaseModel):
    memories: int = Field(description="memories removed")
    entry_ids: int = Field(description="ids forgotten: the memories', their aliases', and ids asked for")
    edges: int = Field(description="relations removed: the memories' own and those pointing at them")


class ForgetResponse(BaseModel):
    """A forget and where it stands: `pending` (queued, not applied yet: poll `status_url`), `applied`, or
    `failed` (`failure` says why: it could not be queued, and nothing was removed; or the store refused to
    apply it, and what it removed before that stays removed). A failed forget can be asked for again."""

    forget_id: str
    workspace_id: str
    status: Literal["pending", "applied", "failed"]
    selector: dict[str, Any]
    requested_at: str
    applied_at: str | None = None
    removed: ForgetRemoved | None = None
    removed_ids: list[str] = Field(default_factory=list, description="the first 100 ids forgotten")
    status_url: str
    failure: str | None = None
    note: str | None = Field(
        default=None,
        description="set when the outcome is not known yet: the broker had not acknowledged the forget when the "
        "answer was given ('unknown: ... ask its status')",
    )


class RelationOut(BaseModel):
    src: str
    dst: str
    relation: str
    weight: float
    created_at: str


class FoldedPart(BaseModel):
    """One near duplicate folded into a memory (episodic.indexing.folding); its entry keeps its own point."""

    entry_id: str
    agent_id: str | None
    ts: str | None
    cosine: float = Field(description="the two memories' cosine when folded")
    at: str = Field(description="when it was folded")
    occurrences: int = Field(default=1, description="it and its exact duplicates")
    aliases: list[str] = Field(default_factory=list)
    rule: str | None = Field(
        default=None, description="why the fold rule folded it (null: folded before the reason was recorded)"
    )


class UnfoldedFrom(BaseModel):
    """An operator took this memory back out of a memory it had been folded into (the explorer's unfold)."""

    from_: str = Field(alias="from", description="the memory it was folded into")
    at: str | None
    by: str | None = Field(description="the operator's token name")
    cosine: float | None


class MemoryReview(BaseModel):
    """How agents said a memory served them (`POST /v1/memory/review`) and its FSRS state (issue 26)."""

    count: int = Field(description="reviews applied")
    ratings: dict[str, int] = Field(description="reviews by rating: again, hard, good, easy")
    last_rating: str | None
    last_reviewed_at: str | None
    stability: float | None = Field(description="FSRS stability: days until retrievability falls to 0.9")
    difficulty: float | None = Field(description="FSRS difficulty, 1..10")
    retrievability: float | None = Field(description="FSRS probability of recall now (0..1)")


class MemoryDetail(BaseModel):
    """`GET /v1/memory/{entry_id}`: one memory as stored, with its counters, aliases and relations."""

    entry_id: str
    requested_id: str = Field(
        description="the id asked for: entry_id, one of its aliases, or an entry folded into it (see folded)"
    )
    workspace_id: str
    crew_id: str | None
    agent_id: str | None
    run_id: str | None
    ts: str
    entry_type: str
    severity: str
    summary: str
    payload: dict[str, Any]
    refs: dict[str, Any] | None
    priority: str | None
    base_importance: float | None
    importance_score: float | None
    reference_count: int
    last_referenced_at: str | None
    indexed_at: str | None
    accepted_at: str | None
    has_dense: bool = Field(description="the dense vector is there (false: BM25 only, for now)")
    model: str | None = Field(description="the model that made the dense vector")
    aliases: list[str]
    occurrences: int
    folded: list[FoldedPart] = Field(
        default_factory=list, description="the near duplicates folded into this memory, oldest fold first"
    )
    agents: list[str] = Field(
        default_factory=list, description="the agents it stands for when folded from several (its own first)"
    )
    unfolded: list[UnfoldedFrom] = Field(
        default_factory=list, description="the memories an operator took it back out of (it never folds into them)"
    )
    surprise: float | None = Field(
        default=None, description="1 - the best cosine to what its agent held when it was linked (seed 003)"
    )
    key_moment: bool = Field(default=False, description="surprise >= 0.7: unlike anything its agent held")
    relations: list[RelationOut] = Field(description="edges from and to this memory")
    context: list[ContextLine] | None = Field(
        default=None, description="the earlier memories of its run it was indexed with (null: without context)"
    )
    review: MemoryReview | None = Field(
        default=None, description="how agents said it served them and its FSRS state (null: never reviewed)"
    )


class MemoryItem(BaseModel):
    """One memory in a listing (`GET /v1/memories`)."""

    entry_id: str
    ts: str
    entry_type: str
    severity: str
    agent_id: str | None
    crew_id: str | None
    run_id: str | None
    summary: str
    importance_score: float | None
    reference_count: int
    occurrences: int
    aliases: list[str]
    has_dense: bool
    folded_into: str | None = Field(
        default=None, description="folded into that memory as a near duplicate: recall shows that one, not this"
    )
    review_count: int = Field(default=0, description="agents' reviews of it (POST /v1/memory/review)")


class MemoryPage(BaseModel):
    memories: list[MemoryItem] = Field(description="newest first (ts descending, ties in a stable order)")
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last one")


class DecayRunResponse(BaseModel):
    """`POST /v1/admin/run/decay`: what the run did (counts and time)."""

    run_id: str
    reference_time: str = Field(description="the time every importance of the run was computed at (UTC)")
    started_at: str
    finished_at: str
    resumed: bool = Field(description="it continued a run that had stopped half way")
    duration_s: float = Field(description="seconds this call took")
    pages: int
    scanned: int = Field(description="memories read")
    updated: int = Field(description="memories whose importance changed")
    unchanged: int
    archived: int = Field(description="memories archived to memory.archived and removed (retention)")
    edges_removed: int = Field(description="edges of other memories that pointed at archived ones")
    ledger_pruned: int = Field(
        description="memory.referenced and memory.reviewed ledger entries past their horizon, removed"
    )
    retention: bool = Field(description="whether retention is on")


class JobBusyResponse(ErrorResponse):
    progress: dict[str, Any] = Field(description="the run in progress elsewhere: its holder, page and counts")


class JournalBatch(BaseModel):
    """`POST /v1/journal` body: journal entries, each validated on its own (a bad one does not sink the rest)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    entries: list[Any] = Field(
        min_length=1,
        max_length=MAX_JOURNAL_ENTRIES,
        description="journal entries (SPEC §3; schemas/journal_entry.schema.json), produced to journal.entries",
        json_schema_extra={"items": {"type": "object"}},
    )


class EntryError(BaseModel):
    """Why one entry of a batch was not accepted."""

    index: int = Field(description="its position in `entries`")
    id: str | None = Field(default=None, description="its `id`, when it has a string one")
    field: str = Field(description="the field at fault (`entry` when it is not a JSON object)")
    reason: str = Field(description="the gate's dead-letter reason, e.g. missing_field, bad_severity")
    error: str = Field(description="a one-line message that names the field")


class JournalAccepted(BaseModel):
    """202: the valid entries are on `journal.entries`, acknowledged by every in-sync replica."""

    accepted: int
    ids: list[str] = Field(description="ids of the accepted entries, in batch order")
    rejected: int
    errors: list[EntryError] = Field(description="the entries that were not accepted, with the field at fault")
    topic: str


class JournalRejected(BaseModel):
    """422: no entry of the batch is valid (nothing was produced)."""

    error: str
    errors: list[EntryError]
    detail: Any = None


class WhoAmI(BaseModel):
    """`GET /v1/whoami`: what the caller's token may do, so that a client can take its identity from it."""

    name: str
    auth: bool = Field(description="false: the service has no tokens file and is open")
    admin: bool
    workspaces: list[str] = Field(description="the workspaces it may read and write ([] for admin: all)")
    agent_id: str | None = Field(description="the agent a bound token acts as")
    crew_id: str | None
    role: Literal["agent", "lead"] | None = Field(description="null: a workspace token, not bound")
    scope: Scope | None = Field(description="the widest recall scope of a bound token (ScopeForRole)")


# -- reviews from use (issue 26) ----------------------------------------------------------------------------

MAX_REVIEWS = 100  # reviews in one request (schemas.events.MAX_REVIEWS)
REVIEWED_TOPIC = "memory.reviewed"
Rating = Literal["again", "hard", "good", "easy"]
RATINGS: tuple[str, ...] = ("again", "hard", "good", "easy")


class Review(BaseModel):
    """How one recalled memory served: `again` (it did not help, or misled), `hard` (it helped, with effort),
    `good` (it helped), `easy` (it was exactly what was needed)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    entry_id: IdStr = Field(description="the hit's entry_id (an alias or a folded entry's id counts for its memory)")
    rating: Rating


class ReviewRequest(BaseModel):
    """`POST /v1/memory/review` body: an agent's reviews of memories it was given. A bound token reviews as its
    agent (`agent_id` may be left out); an id of no memory the caller may see is ignored (listed in `ignored`)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    workspace_id: IdStr
    agent_id: IdStr | None = Field(default=None, description="the reviewing agent (a bound token: its own)")
    run_id: IdStr | None = Field(default=None, description="the run the memories were used in")
    reviews: list[Review] = Field(min_length=1, max_length=MAX_REVIEWS)
    review_id: IdStr | None = Field(
        default=None,
        description="idempotency key: a request sent again with the same review_id (a retry) is applied once "
        "(within the ledger's horizon, EPISODIC_REFERENCE_LEDGER_DAYS); the clients set one per call",
    )


class ReviewIgnored(BaseModel):
    index: int = Field(description="its position in `reviews`")
    entry_id: str
    reason: Literal["no_memory"] = Field(description="no memory of this id that the caller may see")


class ReviewAccepted(BaseModel):
    """202: the reviews are on `memory.reviewed`, acknowledged by the broker; the importance agent applies them
    (GET /v1/memory/{entry_id} shows the state once it has)."""

    accepted: int
    entry_ids: list[str] = Field(description="for each accepted review in order, the memory it counts for")
    ignored: list[ReviewIgnored]
    topic: str
