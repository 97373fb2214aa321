"""The in-session memory nudge (seed 001 "In-session memory nudge", SPEC §8 and §10 "Nudge").

Every journal entry of a run (not only the embeddable ones) counts; a `memory.updated` entry from the run
starts a new counting window at 0. When a window reaches the threshold (60), exactly one nudge is decided
for it. Runs are keyed by (workspace_id, run_id); entries without a run_id do not count.

State: one document per run in the StateStore (kind `nudge.run`), so counts survive a restart. Exactly one
nudge per run per window, under at-least-once delivery of journal.entries:

1. A batch of records is folded into the run documents (a record older than `idle_s`, a backlog read long
   after its run went quiet, counts but triggers no nudge; the run's next live entry does); a record
   already applied is recognised by the document's replay mark (`episodic.maintenance.marks`) and skipped, so a
   re-delivered batch counts nothing twice.
2. A nudge decided in the batch is written into the document's `outbox` (with a `nudge_id` derived from the
   run, the counter's generation and the window) together with the counts, in one write, before anything
   is published: the decision is durable before it is visible.
3. The nudge is published on memory.nudges and the broker's ack awaited; then it leaves the outbox; then
   the batch's offsets are committed.

A crash before (2) re-delivers the batch and the same decision is made again. A crash after (2) leaves the
nudge in the outbox (the re-delivered records are replays): at start the agent reads memory.nudges for
the outbox's ids and publishes only those not there, so a crash between the broker's ack and (3) does not
publish twice. `NudgeEvent.nudge_id` is the same for the same decision either way.

Idle runs: a run with no entry for `idle_s` (EPISODIC_NUDGE_RUN_IDLE_S, judged by the records' Kafka
timestamps, so a backlog read late is not mistaken for activity) is forgotten (its document is
deleted; never one with a nudge still in its outbox). If it resumes, it starts a new counter (a new
generation, window 0) as if it had just written memory.updated: it can be nudged again after another
threshold of entries, under a new nudge id.
"""

from __future__ import annotations

import json
import math
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from episodic.kernel.ports import StateStore
from episodic.maintenance.marks import advance, clean, seen
from episodic_client.timestamps import format_timestamp, parse_timestamp
from schemas.events import InvalidRecord, NudgeEvent

MEMORY_UPDATED = "memory.updated"
RUN_KIND = "nudge.run"
DELIVERED_KIND = "nudge.delivered"
NUDGE_NAMESPACE = uuid.UUID("5f0c3d1e-8a47-5b9e-b1d2-6c7e8f9a0b1c")
NUDGE_TEXT = (
    "You have {count} new journal entries since your last memory update. Consider appending any recurring "
    "pattern you’ve noticed to ~/.memory/AGENT.md before the session ends — the consolidator won’t "
    "replace your personal observations."
)
DEFAULT_CACHE_RUNS = 50_000


def nudge_text(count: int) -> str:
    """Seed 001's reminder with the count filled in."""
    return NUDGE_TEXT.format(count=count)


def run_key(workspace_id: str, run_id: str) -> str:
    return json.dumps([workspace_id, run_id], ensure_ascii=False)


def nudge_id(workspace_id: str, run_id: str, generation: str, window: int) -> str:
    return str(uuid.uuid5(NUDGE_NAMESPACE, f"{workspace_id}\x00{run_id}\x00{generation}\x00{window}"))


@dataclass(frozen=True, slots=True)
class Observed:
    """One journal record as the nudge agent sees it: where it came from and the fields that matter."""

    partition: int
    offset: int
    ts_ms: int  # the Kafka record timestamp
    workspace_id: str
    agent_id: str
    run_id: str
    entry_type: str


def new_run(obs: Observed, now: datetime) -> dict[str, Any]:
    """A run's counter document, before its first entry is folded in."""
    return {
        "workspace_id": obs.workspace_id,
        "agent_id": obs.agent_id,
        "run_id": obs.run_id,
        "generation": format_timestamp(now),  # tells a resumed run's counter from the forgotten one
        "window": 0,
        "count": 0,
        "nudge": None,  # this window's nudge: {"nudge_id", "count", "at"}
        "outbox": [],  # nudges decided and not yet confirmed published (NudgeEvent as JSON)
        "pending": "no",  # "yes" while the outbox is not empty (a keyword the store can match)
        "last_seen": format_timestamp(activity(obs, now)),
        "marks": {},
    }


def activity(obs: Observed, now: datetime) -> datetime:
    """When the record was written (its Kafka timestamp; `now` when it has none)."""
    return datetime.fromtimestamp(obs.ts_ms / 1000, UTC) if obs.ts_ms > 0 else now


def fold(
    doc: dict[str, Any], obs: Observed, *, now: datetime, threshold: int, idle_s: float = math.inf
) -> tuple[bool, NudgeEvent | None]:
    """Apply one record to its run's document (in place). Returns whether it was applied (False: a replay)
    and the nudge it triggers, if any. A record older than `idle_s` (a backlog read long after the run
    went quiet) counts but triggers nothing: a later, live entry of the run does. Pure."""
    marks = clean(doc.get("marks"))
    if seen(marks, obs.partition, obs.offset, obs.ts_ms):
        return False, None
    advance(marks, obs.partition, obs.offset, obs.ts_ms)
    doc["marks"] = marks
    at = activity(obs, now)
    doc["last_seen"] = format_timestamp(max(at, _ts(doc.get("last_seen")) or at))
    doc["agent_id"] = obs.agent_id
    if obs.entry_type == MEMORY_UPDATED:
        doc["window"] = int(doc.get("window", 0)) + 1
        doc["count"] = 0
        doc["nudge"] = None
        return True, None
    doc["count"] = count = int(doc.get("count", 0)) + 1
    if count < threshold or doc.get("nudge") or (now - at).total_seconds() >= idle_s:
        return True, None
    event = NudgeEvent(
        workspace_id=obs.workspace_id,
        agent_id=obs.agent_id,
        run_id=obs.run_id,
        count=count,
        text=nudge_text(count),
        at=now,
        nudge_id=nudge_id(obs.workspace_id, obs.run_id, str(doc.get("generation", "")), int(doc.get("window", 0))),
    )
    doc["nudge"] = {"nudge_id": event.nudge_id, "count": count, "at": format_timestamp(now)}
    doc["outbox"] = [*list(doc.get("outbox") or []), event.to_json_dict()]
    doc["pending"] = "yes"
    return True, event


def is_idle(doc: dict[str, Any], now: datetime, idle_s: float) -> bool:
    """True when the run saw no entry for `idle_s` and has nothing left to publish."""
    if doc.get("outbox"):
        return False
    last = _ts(doc.get("last_seen"))
    return last is None or (now - last).total_seconds() >= idle_s  # a damaged document is not worth keeping


def _ts(value: Any) -> datetime | None:
    try:
        return parse_timestamp(value)
    except ValueError:
        return None


def outbox_events(doc: dict[str, Any]) -> list[NudgeEvent]:
    out = []
    for item in doc.get("outbox") or []:
        try:
            out.append(NudgeEvent.from_dict(item))
        except InvalidRecord:
            continue
    return out


@dataclass
class Applied:
    counted: int = 0  # records applied
    replayed: int = 0  # records already applied before (re-delivered)
    nudges: list[NudgeEvent] = field(default_factory=list)


class NudgeBook:
    """The run counters over the StateStore, with a write-through cache of recently active runs. Used by one
    agent task at a time (its calls run in a worker thread, one after the other)."""

    def __init__(
        self, state: StateStore, *, threshold: int, idle_s: float, cache_runs: int = DEFAULT_CACHE_RUNS
    ) -> None:
        self.state = state
        self.threshold = threshold
        self.idle_s = idle_s
        self.cache_runs = cache_runs
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def _load(self, keys: Iterable[str]) -> None:
        missing = [k for k in dict.fromkeys(keys) if k not in self._cache]
        if missing:
            self._cache.update(self.state.get_many(RUN_KIND, missing))

    def _trim(self) -> None:
        while len(self._cache) > self.cache_runs:
            self._cache.popitem(last=False)  # written through: the store has it

    def apply(self, observed: list[Observed], *, now: datetime) -> Applied:
        """Fold a batch (in offset order) and write the runs it touched, outboxes included, in one call.
        The nudges returned are the ones decided in this batch (already in their runs' outboxes)."""
        result = Applied()
        if not observed:
            return result
        keys = [run_key(o.workspace_id, o.run_id) for o in observed]
        self._load(keys)
        dirty: dict[str, dict[str, Any]] = {}
        for key, obs in zip(keys, observed, strict=True):
            doc = self._cache.get(key)
            if doc is None:
                doc = self._cache[key] = new_run(obs, now)
            applied, event = fold(doc, obs, now=now, threshold=self.threshold, idle_s=self.idle_s)
            if applied:
                result.counted += 1
                dirty[key] = doc
            else:
                result.replayed += 1
            if event is not None:
                result.nudges.append(event)
            self._cache.move_to_end(key)
        self._write(dirty)
        self._trim()
        return result

    def _write(self, dirty: dict[str, dict[str, Any]]) -> None:
        """Write the changed runs; on failure forget them here too, so that a retry folds from the store."""
        if not dirty:
            return
        try:
            self.state.put_many(RUN_KIND, dirty)
        except BaseException:
            for key in dirty:
                self._cache.pop(key, None)
            raise

    def mark_sent(self, events: list[NudgeEvent]) -> None:
        """The broker acknowledged these nudges: take them out of their runs' outboxes."""
        if not events:
            return
        sent = {e.nudge_id for e in events}
        keys = [run_key(e.workspace_id, e.run_id) for e in events]
        self._load(keys)
        dirty: dict[str, dict[str, Any]] = {}
        for key in dict.fromkeys(keys):
            doc = self._cache.get(key)
            if doc is None:
                continue
            left = [n for n in doc.get("outbox") or [] if n.get("nudge_id") not in sent]
            doc["outbox"] = left
            doc["pending"] = "yes" if left else "no"
            dirty[key] = doc
        self._write(dirty)

    def unsent(self) -> list[NudgeEvent]:
        """Nudges decided before a stop or a crash whose publication was not confirmed."""
        out: list[NudgeEvent] = []
        for key, doc in self.state.scan(RUN_KIND, where={"pending": "yes"}):
            self._cache[key] = doc
            out.extend(outbox_events(doc))
        return out

    def forget_idle(self, *, now: datetime) -> int:
        """Delete the counters of runs idle for `idle_s` (and their delivery marks); returns how many."""
        idle = [key for key, doc in self.state.scan(RUN_KIND) if is_idle(doc, now, self.idle_s)]
        for start in range(0, len(idle), 256):
            chunk = idle[start : start + 256]
            self.state.delete(RUN_KIND, chunk)
            self.state.delete(DELIVERED_KIND, chunk)
        for key in idle:
            self._cache.pop(key, None)
        return len(idle)

    def tracked(self) -> int:
        return self.state.count(RUN_KIND)


def take_pending_nudge(state: StateStore, workspace_id: str, agent_id: str | None, run_id: str) -> str | None:
    """The render hook: the text of the run's nudge for its current window, once. Later calls for the same
    window return None (a `nudge.delivered` mark); a new window's nudge is returned again. The count in the
    text is the run's count now (it may have grown since the nudge was decided). A render for another
    agent than the run's gets nothing. Two renders racing may both get it (no transaction to prevent it)."""
    key = run_key(workspace_id, run_id)
    doc = state.get(RUN_KIND, key)
    if not doc or not isinstance(doc.get("nudge"), dict):
        return None
    if agent_id is not None and doc.get("agent_id") != agent_id:
        return None
    nid = doc["nudge"].get("nudge_id")
    delivered = state.get(DELIVERED_KIND, key)
    if delivered and delivered.get("nudge_id") == nid:
        return None
    state.put(
        DELIVERED_KIND,
        key,
        {"workspace_id": workspace_id, "nudge_id": nid, "at": format_timestamp(datetime.now(UTC))},
    )
    return nudge_text(max(int(doc.get("count", 0)), int(doc["nudge"].get("count", 0))))


def nudge_state(state: StateStore, workspace_id: str, run_id: str) -> dict[str, Any] | None:
    """Read-only (the memory explorer): the run's counter, its agent, this window's nudge if one was decided
    (`text`, `at`) and whether a render delivered it. Unlike `take_pending_nudge`, marks nothing."""
    key = run_key(workspace_id, run_id)
    doc = state.get(RUN_KIND, key)
    if not doc:
        return None
    nudge = doc.get("nudge") if isinstance(doc.get("nudge"), dict) else None
    delivered = state.get(DELIVERED_KIND, key) if nudge is not None else None
    return {
        "agent_id": doc.get("agent_id"),
        "count": int(doc.get("count", 0) or 0),
        "window": int(doc.get("window", 0) or 0),
        "last_seen": doc.get("last_seen"),
        "nudge": None
        if nudge is None
        else {
            "at": nudge.get("at"),
            "text": nudge_text(max(int(doc.get("count", 0) or 0), int(nudge.get("count", 0) or 0))),
            "delivered": bool(delivered and delivered.get("nudge_id") == nudge.get("nudge_id")),
        },
    }
