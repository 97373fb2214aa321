"""Records on the topics after the gate (SPEC §10 "Topic records")."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from schemas.journal import JournalEntry

IndexMode = Literal["vector", "sparse-only", "duplicate"]


class EmbeddableRecord(JournalEntry):
    """`journal.embeddable`: the validated entry plus its base importance and acceptance time."""

    base_importance: float
    accepted_at: datetime


class DlqSource(BaseModel):
    topic: str
    partition: int
    offset: int


class DlqRecord(BaseModel):
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


class IndexedEvent(BaseModel):
    """`memory.indexed`: one per memory handled by the embedding consumer, and one more (mode "vector")
    when a memory written sparse first (deferred vector, or sparse-only mode then backfill) gets its dense
    vector."""

    model_config = ConfigDict(extra="forbid")

    entry_id: str
    workspace_id: str
    point_id: str
    indexed_at: datetime
    mode: IndexMode
    duplicate_of: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class ReferencedHit(BaseModel):
    entry_id: str
    score: float
    cosine: float | None


class ReferencedEvent(BaseModel):
    """`memory.referenced`: emitted by the recall service for the hits it returned."""

    workspace_id: str
    scope: str
    mode: str
    at: datetime
    hits: list[ReferencedHit]
