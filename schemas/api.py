"""Recall HTTP API models (SPEC §7). The OpenAPI document generated from these is the contract.

Validation rules (every violation is a 422 that names the field, never a 5xx):

- `workspace_id`: required string, 1..128 chars.
- `scope`: "own" (default) or "crew_shared". "own" requires `agent_id`; "crew_shared" requires `crew_id`
  and may omit `agent_id` (then it returns the crew's high-value memories only).
- `agent_id`, `crew_id`: null or a string of 1..128 chars.
- `query`: 1..`MAX_QUERY_CHARS` (4096) characters, not only whitespace.
- `k`: integer 1..50, default 5. `mode`: "hybrid" (default), "dense" or "sparse". `walk_depth`: 0 or 1.
- Types are strict (`"5"` is not an integer, `true` is not a number) and unknown fields are rejected.
- Render: `max_chars` (`MIN_RENDER_CHARS`..`MAX_RENDER_CHARS`) or `max_tokens` (about 4 characters a
  token), not both; neither means `DEFAULT_RENDER_CHARS`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationInfo, field_validator

MAX_ID_LEN = 128
MAX_QUERY_CHARS = 4096
MAX_K = 50
CHARS_PER_TOKEN = 4
MIN_RENDER_CHARS = 400  # the wrapper and the preamble alone take about 330
MAX_RENDER_CHARS = 200_000
DEFAULT_RENDER_CHARS = 4000

Scope = Literal["own", "crew_shared"]
Mode = Literal["hybrid", "dense", "sparse"]
Via = Literal["direct", "similar", "supports"]

IdStr = Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_LEN)]


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
    run_id: IdStr | None = Field(default=None, description="the agent run, for a pending nudge")

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
    aliases: list[str] = Field(default_factory=list, description="later entry ids merged as exact duplicates")


class RecallResponse(BaseModel):
    mode: Mode = Field(description="the requested mode")
    degraded: bool = Field(description="true when answered from the sparse leg only (no embedder)")
    hits: list[Hit]


class RenderResponse(BaseModel):
    text: str = Field(description="<recalled-memory>…</recalled-memory>, len(text) <= the budget")
    hits: list[Hit] = Field(description="the hits that made it into the text, in render order")
    nudge: str | None = Field(default=None, description="a pending nudge for run_id, outside the block")
    mode: Mode
    degraded: bool


class StatsResponse(BaseModel):
    indexed: int
    dense: int
    sparse_only: int


class HealthzResponse(BaseModel):
    status: Literal["ok", "degraded"]
    episodic: Literal["vector", "sparse-only"]
    kafka: str
    qdrant: str
    kafka_bootstrap: str | None


MAX_HEALTH_DAYS = 366


class HealthMetricsModel(BaseModel):
    """0–100 each; null when there was nothing to measure (definitions: README "Memory health")."""

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
