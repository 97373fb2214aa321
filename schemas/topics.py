"""Topic names: the one place they are spelled (SPEC §5), but for `journal.entries`, which the API models
(`episodic_client.models`) spell because the journal endpoint's answer names it."""

from __future__ import annotations

from episodic_client.models import JOURNAL_TOPIC

JOURNAL_ENTRIES = JOURNAL_TOPIC  # spelled in the API models: `POST /v1/journal` answers with it
JOURNAL_EMBEDDABLE = "journal.embeddable"
JOURNAL_DLQ = "journal.dlq"
# the dead letters `episodic dlq replay` sent back: created by it on first use (not in ALL_TOPICS, so that a
# stack that never replayed anything is complete without it)
JOURNAL_DLQ_REPLAYS = "journal.dlq.replays"
MEMORY_INDEXED = "memory.indexed"
MEMORY_REFERENCED = "memory.referenced"
MEMORY_REVIEWED = "memory.reviewed"  # agents' reviews of recalled memories (issue 26), keyed by workspace
MEMORY_NUDGES = "memory.nudges"
MEMORY_HEALTH = "memory.health"
MEMORY_ARCHIVED = "memory.archived"
MEMORY_FORGOTTEN = "memory.forgotten"

ALL_TOPICS: tuple[str, ...] = (
    JOURNAL_ENTRIES,
    JOURNAL_EMBEDDABLE,
    JOURNAL_DLQ,
    MEMORY_INDEXED,
    MEMORY_REFERENCED,
    MEMORY_REVIEWED,
    MEMORY_NUDGES,
    MEMORY_HEALTH,
    MEMORY_ARCHIVED,
    MEMORY_FORGOTTEN,
)
