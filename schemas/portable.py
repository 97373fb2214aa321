"""The export file (`episodic export`, `episodic import`): JSON lines, one memory a line.

A line is the memory's journal entry (SPEC §3, every field as the gate validates it) plus a `memory` object:
what the store learned about it since (importance, counters, aliases, relations, its dense vectors and the
model that made them). A line is still a journal entry: `episodic produce` takes the file too (the gate
ignores `memory`), which re-ingests the texts without their history.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from schemas.journal import Id

EXPORT_VERSION = 1
RELATIONS = ("similar", "supports", "contradicts", "supersedes", "next", "previous")


class ExportedRelation(msgspec.Struct, frozen=True):
    """An edge from this memory to another of its workspace (by entry id)."""

    dst: Id
    relation: Literal["similar", "supports", "contradicts", "supersedes", "next", "previous"]
    weight: float
    created_at: str = ""

    def __post_init__(self) -> None:
        if not math.isfinite(self.weight):
            raise ValueError("weight must be a finite number")


Count = Annotated[int, Meta(ge=0)]


class ExportedMemory(msgspec.Struct, frozen=True, kw_only=True):
    """The `memory` object of an export line. `dense`: the chunk vectors (one row per chunk) made by
    `model`, or null (BM25 only); `pieces`: how the text was cut into those rows (episodic.domain.chunking.Scheme's
    key; absent in files written before it was recorded: the token windows of that time, `LEGACY`).
    `extra`: the other fields the store kept on the memory (the linker's `linked_at`, the backfill's
    counters), put back as they were."""

    v: Literal[1]
    base_importance: float
    importance_score: float | None = None
    reference_count: Count = 0
    last_referenced_at: str | None = None
    # the review state (episodic.domain.review, issue 26); absent in files written before it: never reviewed
    review_count: Count = 0
    review_ratings: dict[Literal["again", "hard", "good", "easy"], Count] = msgspec.field(default_factory=dict)
    last_rating: Literal["again", "hard", "good", "easy"] | None = None
    last_reviewed_at: str | None = None
    stability: Annotated[float, Meta(gt=0)] | None = None
    difficulty: float | None = None
    indexed_at: str | None = None
    accepted_at: str | None = None
    aliases: list[Id] = msgspec.field(default_factory=list)
    occurrences: Annotated[int, Meta(ge=1)] = 1
    relations: list[ExportedRelation] = msgspec.field(default_factory=list)
    model: str | None = None
    pieces: Annotated[str, Meta(max_length=64)] | None = None
    dense: list[list[float]] | None = None
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("base_importance", "importance_score", "stability", "difficulty"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number")
        if self.dense is not None:
            if not self.dense or any(len(row) != len(self.dense[0]) or not row for row in self.dense):
                raise ValueError("dense must be non-empty rows of one length")
            if not all(math.isfinite(x) for row in self.dense for x in row):
                raise ValueError("dense holds a non-finite number")


class MemoryPart(msgspec.Struct, frozen=True):
    """The part of a line that is not the journal entry."""

    memory: ExportedMemory


_decode_memory = msgspec.json.Decoder(MemoryPart).decode


def parse_memory(line: bytes) -> ExportedMemory:
    """The `memory` object of an export line; ValueError naming the field (`memory.reference_count: ...`)."""
    try:
        return _decode_memory(line).memory
    except msgspec.ValidationError as e:
        text = str(e)
        where = text.rsplit(" - at `$.", 1)
        if len(where) == 2:
            raise ValueError(f"{where[1].rstrip('`')}: {where[0]}") from None
        raise ValueError(f"memory: {text}") from None
    except msgspec.DecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
