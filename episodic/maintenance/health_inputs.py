"""What the health agent keeps between snapshots, in the StateStore (survives restarts): the ledger of
accepted embeddable entries (coverage's denominator) and the daily tallies of recall cosines (efficiency).

Ledger (kind `health.accepted`): one document per (workspace_id, entry id) forwarded on journal.embeddable,
with its crew and what a forget selects by (agent, run, ts, accepted_at): an entry a forget removed or keeps
out (`left_out`, over the forget's tombstones and rules) is not counted. The forget control
records on the same topic are not entries: the agent passes them by. Idempotent by construction: a
re-delivered or replayed record writes the same document again, so the count is of distinct entries, not of
deliveries. Kind `health.workspace` lists the workspaces seen, so that a workspace whose entries never became
memories still gets a snapshot.

Recall tallies (kind `health.recalls`): one document per (workspace_id, UTC day of the event's `at`): the
number of hits with a cosine and their sum, in total and per crew of the memory hit (looked up in the
store once per memory, then cached: a memory's crew does not change). Each document carries replay marks
(`episodic.maintenance.marks`), so a re-delivered memory.referenced event is counted once.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from episodic.domain.identity import point_id
from episodic.kernel.ports import MemoryStore, StateStore
from episodic.lifecycle.forget import RULES, parse_iso, selects, tombstoned
from episodic.maintenance.marks import advance, clean, seen
from schemas.events import EmbeddableRecord, ReferencedEvent

ACCEPTED_KIND = "health.accepted"
WORKSPACE_KIND = "health.workspace"
RECALLS_KIND = "health.recalls"
CREW_CACHE = 100_000


def accepted_key(workspace_id: str, entry_id: str) -> str:
    return json.dumps([workspace_id, entry_id], ensure_ascii=False)


def recalls_key(workspace_id: str, day: str) -> str:
    return json.dumps([workspace_id, day], ensure_ascii=False)


class Ledger:
    """The accepted embeddable entries, per workspace and crew."""

    def __init__(self, state: StateStore) -> None:
        self.state = state
        self._workspaces: set[str] = set()

    def record(self, records: Sequence[EmbeddableRecord]) -> int:
        """Write the ledger documents of a batch (a re-delivered entry writes the same document); returns how
        many records it folded."""
        docs = {
            accepted_key(r.workspace_id, r.id): {
                "workspace_id": r.workspace_id,
                "crew_id": r.crew_id or "",
                "entry_id": r.id,
                # what a forget selects by (episodic.lifecycle.forget.left_out)
                "agent_id": r.agent_id,
                "run_id": r.run_id,
                "ts": r.ts,
                "accepted_at": r.accepted_at.isoformat(),
            }
            for r in records
        }
        if docs:
            self.state.put_many(ACCEPTED_KIND, docs)
        new = {r.workspace_id for r in records} - self._workspaces
        if new:
            self.state.put_many(WORKSPACE_KIND, {ws: {"workspace_id": ws} for ws in new})
            self._workspaces |= new
        return len(records)


def accepted_ids(state: StateStore, workspace_id: str) -> dict[str, str]:
    """entry id -> crew id ("" for none) of every accepted entry of the workspace that no forget took or
    keeps out (a forgotten entry is neither a memory nor a gap in coverage)."""
    docs = {str(d.get("entry_id")): d for _, d in state.scan(ACCEPTED_KIND, where={"workspace_id": workspace_id})}
    gone = left_out(state, workspace_id, docs)
    return {e: str(d.get("crew_id") or "") for e, d in docs.items() if e not in gone}


def left_out(state: StateStore, workspace_id: str, entries: dict[str, dict[str, Any]]) -> set[str]:
    """Which of a workspace's accepted entries (entry id -> {"agent_id", "run_id", "ts", "accepted_at"}, as
    the health agent's ledger keeps them) a forget took or keeps out: tombstoned (for their agent), or
    accepted at or before a rule's cut-off (`accepted_at`, as the consumer's rule decides: never `ts`).
    Entries without an acceptance stamp are judged by their tombstones only."""
    if not entries:
        return set()
    out = tombstoned(state, workspace_id, {e: doc.get("agent_id") for e, doc in entries.items()})
    rules = list((state.get(RULES, workspace_id) or {}).get("rules") or [])
    for e, doc in entries.items():
        if e in out or not rules:
            continue
        times = [parse_iso(str(doc[k])) for k in ("accepted_at",) if doc.get(k)]
        for rule in rules:
            if selects(rule, doc.get("agent_id"), doc.get("run_id")) and any(
                t <= parse_iso(rule["before"]) for t in times
            ):
                out.add(e)
                break
    return out


def known_workspaces(state: StateStore) -> set[str]:
    return {str(d.get("workspace_id")) for _, d in state.scan(WORKSPACE_KIND) if d.get("workspace_id")}


@dataclass(frozen=True, slots=True)
class Referenced:
    """One memory.referenced event and where it came from."""

    partition: int
    offset: int
    ts_ms: int
    event: ReferencedEvent

    @property
    def day(self) -> str:
        return self.event.at.date().isoformat()


def new_tally(workspace_id: str, day: str) -> dict[str, Any]:
    return {"workspace_id": workspace_id, "day": day, "n": 0, "sum": 0.0, "crews": {}, "marks": {}}


def fold_recall(doc: dict[str, Any], item: Referenced, crew_of: dict[str, str]) -> bool:
    """Add one event's hit cosines to its day's tally (in place); False when it is a replay. Pure."""
    marks = clean(doc.get("marks"))
    if seen(marks, item.partition, item.offset, item.ts_ms):
        return False
    advance(marks, item.partition, item.offset, item.ts_ms)
    doc["marks"] = marks
    crews: dict[str, list[float]] = doc.setdefault("crews", {})
    for hit in item.event.hits:
        if hit.cosine is None or not math.isfinite(hit.cosine):
            continue
        doc["n"] = int(doc.get("n", 0)) + 1
        doc["sum"] = float(doc.get("sum", 0.0)) + hit.cosine
        crew = crew_of.get(hit.entry_id, "")
        if crew:
            n, total = crews.get(crew, [0, 0.0])
            crews[crew] = [int(n) + 1, float(total) + hit.cosine]
    return True


@dataclass
class Tallied:
    counted: int = 0
    replayed: int = 0


class RecallTally:
    """Folds memory.referenced events into the daily tallies (one agent task at a time)."""

    def __init__(self, state: StateStore, store: MemoryStore, *, crew_cache: int = CREW_CACHE) -> None:
        self.state = state
        self.store = store
        self.crew_cache = crew_cache
        self._crews: OrderedDict[tuple[str, str], str] = OrderedDict()

    def _crews_of(self, items: Sequence[Referenced]) -> dict[tuple[str, str], str]:
        wanted = {(i.event.workspace_id, h.entry_id) for i in items for h in i.event.hits if h.cosine is not None}
        missing = [k for k in wanted if k not in self._crews]
        if missing:
            pids = {point_id(ws, e): (ws, e) for ws, e in missing}
            found = self.store.retrieve(list(pids))
            for pid, key in pids.items():
                payload = found.get(pid)
                self._crews[key] = str(payload.get("crew_id") or "") if payload else ""
            while len(self._crews) > self.crew_cache:
                self._crews.popitem(last=False)
        return {k: self._crews.get(k, "") for k in wanted}

    def apply(self, items: Sequence[Referenced]) -> Tallied:
        result = Tallied()
        if not items:
            return result
        by_ws: dict[str, dict[str, str]] = {}
        for (ws, entry), crew in self._crews_of(items).items():
            by_ws.setdefault(ws, {})[entry] = crew
        keys = [recalls_key(i.event.workspace_id, i.day) for i in items]
        docs = self.state.get_many(RECALLS_KIND, list(dict.fromkeys(keys)))
        dirty: dict[str, dict[str, Any]] = {}
        for key, item in zip(keys, items, strict=True):
            doc = docs.get(key)
            if doc is None:
                doc = docs[key] = new_tally(item.event.workspace_id, item.day)
            if fold_recall(doc, item, by_ws.get(item.event.workspace_id, {})):
                result.counted += 1
                dirty[key] = doc
            else:
                result.replayed += 1
        if dirty:
            self.state.put_many(RECALLS_KIND, dirty)
        return result


def recall_cosines(state: StateStore, workspace_id: str, days: Sequence[str]) -> dict[str, tuple[int, float]]:
    """Hits and cosine sums over `days`: "" -> the workspace's, crew id -> that crew's."""
    out: dict[str, tuple[int, float]] = {"": (0, 0.0)}
    for doc in state.get_many(RECALLS_KIND, [recalls_key(workspace_id, d) for d in days]).values():
        n, total = out[""]
        out[""] = (n + int(doc.get("n", 0)), total + float(doc.get("sum", 0.0)))
        for crew, pair in (doc.get("crews") or {}).items():
            if isinstance(pair, list) and len(pair) == 2:
                cn, ct = out.get(crew, (0, 0.0))
                out[crew] = (cn + int(pair[0]), ct + float(pair[1]))
    return out


def prune_recalls(state: StateStore, workspace_id: str, keep_from: str) -> int:
    """Delete the workspace's tallies of days before `keep_from` (YYYY-MM-DD)."""
    old = [
        k
        for k, d in state.scan(RECALLS_KIND, where={"workspace_id": workspace_id})
        if str(d.get("day", "")) < keep_from
    ]
    if old:
        state.delete(RECALLS_KIND, old)
    return len(old)
