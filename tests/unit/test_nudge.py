"""The nudge's counting rules and replay marks (pure), and the book over an in-memory StateStore fake."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from episodic.kernel.errors import StoreUnavailable
from episodic.kernel.ports import StateStore
from episodic.maintenance import marks as replay
from episodic.maintenance.nudge import (
    MEMORY_UPDATED,
    NUDGE_TEXT,
    NudgeBook,
    Observed,
    fold,
    new_run,
    nudge_text,
    take_pending_nudge,
)

T0 = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)
SEED_TEXT = (
    "You have 72 new journal entries since your last memory update. Consider appending any recurring pattern "
    "you’ve noticed to ~/.memory/AGENT.md before the session ends — the consolidator won’t replace your "
    "personal observations."
)


class MemoryState(StateStore):
    """A dict-backed StateStore for pure-logic tests (the real one has its own contract suite)."""

    def __init__(self) -> None:
        self.docs: dict[tuple[str, str], dict[str, Any]] = {}

    def put_many(self, kind: str, docs: dict[str, dict[str, Any]]) -> None:
        for k, d in docs.items():
            self.docs[(kind, k)] = dict(d)

    def get_many(self, kind: str, keys: list[str]) -> dict[str, dict[str, Any]]:
        return {k: dict(self.docs[(kind, k)]) for k in keys if (kind, k) in self.docs}

    def delete(self, kind: str, keys: list[str]) -> None:
        for k in keys:
            self.docs.pop((kind, k), None)

    def scan(
        self, kind: str, *, where: dict[str, str] | None = None, limit: int | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        for (kd, k), d in list(self.docs.items()):
            if kd == kind and all(d.get(f) == v for f, v in (where or {}).items()):
                yield k, dict(d)

    def count(self, kind: str, *, where: dict[str, str] | None = None) -> int:
        return sum(1 for _ in self.scan(kind, where=where))

    def close(self) -> None:
        pass


def obs(offset: int, *, run: str = "r1", entry_type: str = "exec.output_chunk", ts: int | None = None) -> Observed:
    return Observed(0, offset, T0_MS + offset if ts is None else ts, "ws", "agent-a", run, entry_type)


def test_the_text_is_seed_001s_reminder() -> None:
    assert nudge_text(72) == SEED_TEXT
    assert "{count}" in NUDGE_TEXT


def test_one_nudge_when_a_window_reaches_the_threshold_and_none_after() -> None:
    doc = new_run(obs(0), T0)
    events = [fold(doc, obs(i), now=T0, threshold=60)[1] for i in range(150)]
    fired = [(i, e) for i, e in enumerate(events) if e is not None]
    assert len(fired) == 1 and fired[0][0] == 59
    event = fired[0][1]
    assert event is not None and (event.count, event.agent_id, event.run_id, event.workspace_id) == (
        60,
        "agent-a",
        "r1",
        "ws",
    )
    assert event.text == nudge_text(60) and doc["count"] == 150 and doc["pending"] == "yes"


def test_memory_updated_starts_a_new_window_with_a_new_nudge_id() -> None:
    doc = new_run(obs(0), T0)
    first = [e for i in range(60) if (e := fold(doc, obs(i), now=T0, threshold=60)[1])]
    assert fold(doc, obs(60, entry_type=MEMORY_UPDATED), now=T0, threshold=60) == (True, None)
    assert doc["count"] == 0 and doc["window"] == 1 and doc["nudge"] is None
    second = [e for i in range(61, 121) if (e := fold(doc, obs(i), now=T0, threshold=60)[1])]
    assert len(first) == len(second) == 1 and first[0].nudge_id != second[0].nudge_id
    assert len(doc["outbox"]) == 2  # neither confirmed published yet


def test_a_replayed_record_counts_nothing() -> None:
    doc = new_run(obs(0), T0)
    for i in range(10):
        fold(doc, obs(i), now=T0, threshold=60)
    assert [fold(doc, obs(i), now=T0, threshold=60)[0] for i in range(10)] == [False] * 10
    assert doc["count"] == 10
    # a recreated topic (offsets from 0 again) with later timestamps is new, not a replay
    assert fold(doc, obs(0, ts=T0_MS + 10_000), now=T0, threshold=60)[0] is True
    assert doc["count"] == 11


def test_replay_marks_per_partition() -> None:
    marks: replay.Marks = {}
    replay.advance(marks, 1, 7, 500)
    assert replay.seen(marks, 1, 7, 500) and replay.seen(marks, 1, 3, 400)
    assert not replay.seen(marks, 1, 8, 600) and not replay.seen(marks, 0, 7, 500)
    assert replay.clean({"1": [7, 500], "x": "junk", "2": [1]}) == {"1": [7, 500]}


def test_the_book_decides_once_across_a_restart_and_forgets_idle_runs() -> None:
    state = MemoryState()
    book = NudgeBook(state, threshold=60, idle_s=3600)
    applied = book.apply([obs(i) for i in range(59)], now=T0)
    assert applied.counted == 59 and applied.nudges == []
    # "restart": a new book over the same state; the batch is re-delivered, then one more record arrives
    book = NudgeBook(state, threshold=60, idle_s=3600)
    again = book.apply([obs(i) for i in range(60)], now=T0)
    assert (again.counted, again.replayed, len(again.nudges)) == (1, 59, 1)
    # decided but not confirmed: still in the outbox after another restart
    book = NudgeBook(state, threshold=60, idle_s=3600)
    assert [e.nudge_id for e in book.unsent()] == [again.nudges[0].nudge_id]
    book.mark_sent(again.nudges)
    assert book.unsent() == []
    # render: the text once, with the run's count now; another agent gets nothing
    assert take_pending_nudge(state, "ws", "someone-else", "r1") is None
    assert take_pending_nudge(state, "ws", "agent-a", "r1") == nudge_text(60)
    assert take_pending_nudge(state, "ws", None, "r1") is None
    # idle: forgotten after an hour without entries; resuming starts a fresh counter (a new generation)
    assert book.forget_idle(now=T0 + timedelta(minutes=59)) == 0
    assert book.forget_idle(now=T0 + timedelta(hours=1, seconds=1)) == 1 and book.tracked() == 0
    later = T0 + timedelta(hours=2)
    later_ms = int(later.timestamp() * 1000)
    resumed = book.apply([obs(i, ts=later_ms + i) for i in range(100, 160)], now=later)
    assert len(resumed.nudges) == 1 and resumed.nudges[0].nudge_id != again.nudges[0].nudge_id


def test_a_backlog_read_late_counts_but_does_not_nudge_until_a_live_entry() -> None:
    state = MemoryState()
    book = NudgeBook(state, threshold=60, idle_s=3600)
    day_ago = T0_MS - 86_400_000
    stale = book.apply([obs(i, ts=day_ago + i) for i in range(70)], now=T0)
    assert stale.counted == 70 and stale.nudges == []
    assert book.forget_idle(now=T0) == 1  # its last entry is a day old: idle already
    book.apply([obs(i, ts=day_ago + i) for i in range(70, 130)], now=T0)
    live = book.apply([obs(130)], now=T0)
    assert [n.count for n in live.nudges] == [61]


def test_a_run_with_an_unpublished_nudge_is_never_forgotten() -> None:
    state = MemoryState()
    book = NudgeBook(state, threshold=2, idle_s=60)
    assert len(book.apply([obs(0), obs(1)], now=T0).nudges) == 1
    assert book.forget_idle(now=T0 + timedelta(days=3)) == 0


class FlakyState(MemoryState):
    def __init__(self) -> None:
        super().__init__()
        self.fail_next = False

    def put_many(self, kind: str, docs: dict[str, dict[str, Any]]) -> None:
        if self.fail_next:
            self.fail_next = False
            raise StoreUnavailable("down for a moment")
        super().put_many(kind, docs)


def test_a_failed_write_is_retried_from_the_store_not_from_the_folded_cache() -> None:
    state = FlakyState()
    book = NudgeBook(state, threshold=60, idle_s=3600)
    book.apply([obs(i) for i in range(59)], now=T0)
    state.fail_next = True
    with pytest.raises(StoreUnavailable):
        book.apply([obs(59)], now=T0)
    retried = book.apply([obs(59)], now=T0)  # what the agent's retry loop does
    assert retried.counted == 1 and len(retried.nudges) == 1
