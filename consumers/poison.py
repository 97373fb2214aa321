"""What the embedding consumer does with records it cannot index: dead letters, and split batches.

A batch the store rejects deterministically is split in halves until the records that fail alone are found
(`consumers.batch.BatchApplier`); those records go to journal.dlq with their original bytes, the same
`DlqRecord` shape as the gate's, and the results of the halves that were indexed are put back together.
"""

from __future__ import annotations

from aiokafka import ConsumerRecord

from episodic.indexing.indexer import BatchResult, merge_into
from schemas.events import (
    BAD_CONTROL,
    BAD_EMBEDDABLE,
    FORGET_FAILED,
    ID_TAKEN,
    STORE_REJECTED,
    DlqRecord,
    ReplayHistory,
)

# The reasons live in schemas (the replay tool reads them too); the consumer's modules name them from here.
__all__ = [
    "BAD_CONTROL",
    "BAD_EMBEDDABLE",
    "FORGET_FAILED",
    "ID_TAKEN",
    "STORE_REJECTED",
    "Abandoned",
    "dead_letter",
    "merged",
]


class Abandoned(Exception):
    """A transient failure outlasted the drain: the batch stays uncommitted and is re-delivered."""


def merged(a: BatchResult, b: BatchResult) -> BatchResult:
    """Two halves of a split batch as one result."""
    out = BatchResult()
    merge_into(out, a)
    merge_into(out, b)
    return out


def dead_letter(reason: str, error: BaseException | str, msg: ConsumerRecord[bytes, bytes]) -> DlqRecord:
    """The dead letter of `msg`, with the replay history its headers carry (a replayed record failing again)."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return DlqRecord.build(
        reason=reason,
        error=text.splitlines()[0][:500] if text else reason,
        raw=msg.value,
        topic=msg.topic,
        partition=msg.partition,
        offset=msg.offset,
    ).with_replay(ReplayHistory.of_headers(msg.headers))
