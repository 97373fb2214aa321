"""Replay marks: apply each Kafka record to a stored document at most once, under at-least-once delivery.

A document that folds records (a run's counter, a day's recall cosines) keeps, per source partition, the
offset of the last record it applied and the largest record timestamp it has seen. The agents read a
partition in order and commit offsets after the document is written, so after a crash the records since
the last commit come again: a record is a replay when its offset is at or below the mark *and* its
timestamp is at or below the largest one seen. The second condition keeps a topic that was created anew
(the embedded broker keeps topics in memory, so its offsets restart at 0 after a restart while the
documents survive on disk) from having its new records taken for replays: those carry later timestamps.
The one case it misses is a recreated topic whose new records carry timestamps older than the old ones
(a producer clock behind by more than the downtime): they would be skipped.

Works when all the records a document folds come from one partition, as keyed topics give (journal.entries
and memory.referenced are keyed by workspace); marks are kept per partition anyway.
"""

from __future__ import annotations

from typing import Any

Marks = dict[str, list[int]]  # str(partition) -> [offset, max timestamp ms]; JSON-friendly


def seen(marks: Any, partition: int, offset: int, ts_ms: int) -> bool:
    """True when the record at (partition, offset) with timestamp `ts_ms` was already applied."""
    if not isinstance(marks, dict):
        return False
    mark = marks.get(str(partition))
    if not (isinstance(mark, list) and len(mark) == 2):
        return False
    return offset <= int(mark[0]) and ts_ms <= int(mark[1])


def advance(marks: Marks, partition: int, offset: int, ts_ms: int) -> None:
    """Record that (partition, offset) was applied (call in offset order, after `seen` said False)."""
    mark = marks.get(str(partition))
    top = max(ts_ms, int(mark[1])) if isinstance(mark, list) and len(mark) == 2 else ts_ms
    marks[str(partition)] = [offset, top]


def clean(marks: Any) -> Marks:
    """The marks of a stored document, tolerating a missing or damaged field."""
    if not isinstance(marks, dict):
        return {}
    out: Marks = {}
    for part, mark in marks.items():
        if isinstance(mark, list) and len(mark) == 2 and all(isinstance(x, int) for x in mark):
            out[str(part)] = [int(mark[0]), int(mark[1])]
    return out
