"""What the indexer does with each record of a batch, decided before anything is written (pure, no IO).

`decide` gives every record exactly one `Decision`, in batch order, from the record, what the store and the
state store held about it when the batch was read (`Known`), and the decisions taken for the records before
it in the batch. `Indexer.index_batch` reads, decides, then writes what the decisions say; the counts that
follow from them (`occurrences`, stale versions, refusals, entries left out) are counted from the decisions
alone (`absorbed`, `tally`), so that a bound, a cut list or a merge cannot lose one (STYLE.md, "Decide, then
write").

The outcomes, checked in this order:

- `tombstoned`: a forget covers the record (a tombstone of its id, a forget rule, its text forgotten:
  `episodic.lifecycle.forget.Forgetter.admit` says which); nothing of it is written, nothing counts it.
- `taken`: its id belongs to another agent (`episodic.indexing.ownership`): the memory at its point id, the
  memory that holds it as an alias or absorbed id, or a record earlier in the batch. Dead-lettered
  (`id_taken`) by the consumer.
- `same`: its id is a memory (stored, or written earlier in the batch) with the same summary and entry type,
  and it is no newer: a re-delivery; nothing is written.
- `newer` / `stale`: otherwise the newer version (`version_key`: the entry's own `ts`, then the acceptance
  stamp; the same text with a newer `ts` too, so that the newest version wins in any order) replaces it
  and keeps its counters; an older one with another text is not written (`episodic_stale_versions_total`).
  The versions of one id all come from one agent's clock (an id belongs to the agent that first wrote it),
  so that agent's `ts` orders them; a retry or an outbox replay of an older version is accepted again
  later, so its acceptance stamp would call it newer.
- `alias`: its id is already one the agent's memory absorbed (one of its aliases, an absorbed id the state
  store keeps, or a duplicate earlier in the batch): a re-delivery of a duplicate, counted once already.
- `duplicate`: a new id whose dedup key (workspace, agent, entry type, normalised summary) is a memory's, stored
  or new in the batch: the memory absorbs it (its alias list keeps the newest ids, `occurrences` counts every
  one).
- `new`: a new memory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from episodic.domain.identity import dedup_key, point_id
from episodic.domain.times import parse_time
from episodic.indexing.ownership import refusal
from schemas.events import EmbeddableRecord

__all__ = ["Decision", "Known", "Outcome", "absorbed", "decide", "tally", "version_key"]

_NEVER = datetime.min.replace(tzinfo=UTC)


class Outcome(StrEnum):
    NEW = "new"
    SAME = "same"
    NEWER = "newer"
    STALE = "stale"
    ALIAS = "alias"
    DUPLICATE = "duplicate"
    TAKEN = "taken"
    TOMBSTONED = "tombstoned"


@dataclass(frozen=True, slots=True)
class Known:
    """What the store and the state store held about one record when its batch was read."""

    stored: Mapping[str, Any] | None = None  # the memory at the record's own point id
    holder: tuple[str, Mapping[str, Any]] | None = None  # (point id, payload): the memory that absorbed its id
    twin: tuple[str, Mapping[str, Any]] | None = None  # (point id, payload): a stored memory of its dedup key
    forgotten: bool = False  # a forget covers it


@dataclass(frozen=True, slots=True)
class Decision:
    """One record's outcome. `point_id`: the memory it acts on, its own (new, same, newer, stale, taken,
    tombstoned) or the one that absorbs it (alias, duplicate). `owner`: that memory's entry id (alias,
    duplicate: the event's `duplicate_of`). `after`: newer / same / stale against a record earlier in the
    batch, that record's index (None: against the stored memory). `error`: taken, the dead letter's error."""

    outcome: Outcome
    point_id: str
    owner: str | None = None
    after: int | None = None
    error: str | None = None


def version_key(version: EmbeddableRecord | Mapping[str, Any]) -> tuple[datetime, datetime]:
    """How versions of one id are ordered: the entry's `ts`, then its acceptance stamp (a stored memory
    without a readable one is older than any record)."""
    if isinstance(version, EmbeddableRecord):
        return version.ts_datetime, version.accepted_at
    return parse_time(version.get("ts")) or _NEVER, parse_time(version.get("accepted_at")) or _NEVER


def _same(rec: EmbeddableRecord, other: EmbeddableRecord | Mapping[str, Any]) -> bool:
    if isinstance(other, EmbeddableRecord):
        return other.summary == rec.summary and other.entry_type == rec.entry_type
    return other.get("summary") == rec.summary and other.get("entry_type") == rec.entry_type


def decide(records: Sequence[EmbeddableRecord], known: Sequence[Known]) -> list[Decision]:
    """One decision per record, in batch order (see the module doc)."""
    if len(known) != len(records):
        raise ValueError(f"decide: {len(records)} records but {len(known)} facts")
    out: list[Decision] = []
    written: dict[str, int] = {}  # point id -> the batch's latest record written there (new, newer)
    absorbed_here: dict[tuple[str, str], tuple[str, str, str]] = {}  # (ws, id) -> (point id, owner id, agent)
    keyed: dict[tuple[str, str], tuple[str, str]] = {}  # (ws, dedup key) -> (point id, entry id), new in batch
    keys_of: dict[str, tuple[str, str]] = {}  # point id -> its (ws, dedup key) in `keyed`

    def write(i: int, pid: str, ws: str, key: str, eid: str) -> None:
        """Record i is written at pid with this dedup key: the memory's text as later records see it."""
        written[pid] = i
        if pid in keys_of and keyed.get(keys_of[pid], ("",))[0] == pid:
            del keyed[keys_of[pid]]  # a newer version with another text: its old text is no memory's now
        keyed[(ws, key)], keys_of[pid] = (pid, eid), (ws, key)

    for i, (rec, k) in enumerate(zip(records, known, strict=True)):
        ws, pid = rec.workspace_id, point_id(rec.workspace_id, rec.id)
        key = dedup_key(ws, rec.agent_id, rec.entry_type, rec.summary)
        if k.forgotten:
            out.append(Decision(Outcome.TOMBSTONED, pid))
            continue
        if pid in written:  # the same id earlier in the batch
            j = written[pid]
            earlier = records[j]
            if why := refusal(rec, {"agent_id": earlier.agent_id}):
                out.append(Decision(Outcome.TAKEN, pid, error=why))
            elif _same(rec, earlier) and version_key(rec) <= version_key(earlier):
                out.append(Decision(Outcome.SAME, pid, after=j))
            elif version_key(rec) < version_key(earlier):
                out.append(Decision(Outcome.STALE, pid, after=j))
            else:
                out.append(Decision(Outcome.NEWER, pid, after=j))
                write(i, pid, ws, key, rec.id)
            continue
        if (ws, rec.id) in absorbed_here:  # absorbed by a duplicate earlier in the batch
            owner_pid, owner, agent = absorbed_here[(ws, rec.id)]
            if why := refusal(rec, {"agent_id": agent}):
                out.append(Decision(Outcome.TAKEN, pid, error=why))
            else:
                out.append(Decision(Outcome.ALIAS, owner_pid, owner=owner))
            continue
        if k.stored is not None:
            if why := refusal(rec, k.stored):
                out.append(Decision(Outcome.TAKEN, pid, error=why))
            elif _same(rec, k.stored) and version_key(rec) <= version_key(k.stored):
                out.append(Decision(Outcome.SAME, pid))
            elif version_key(rec) < version_key(k.stored):
                out.append(Decision(Outcome.STALE, pid))
            else:
                out.append(Decision(Outcome.NEWER, pid))
                write(i, pid, ws, key, rec.id)
            continue
        if k.holder is not None:
            holder_pid, holder = k.holder
            if why := refusal(rec, holder):
                out.append(Decision(Outcome.TAKEN, pid, error=why))
            else:
                out.append(Decision(Outcome.ALIAS, holder_pid, owner=str(holder.get("entry_id", ""))))
            continue
        # a stored memory of this text, unless the batch gave it another text; else one new in the batch
        stored_twin = k.twin if k.twin is not None and k.twin[0] not in written else None
        twin = (stored_twin[0], str(stored_twin[1].get("entry_id", ""))) if stored_twin else keyed.get((ws, key))
        if twin is not None:
            out.append(Decision(Outcome.DUPLICATE, twin[0], owner=twin[1]))
            absorbed_here[(ws, rec.id)] = (twin[0], twin[1], rec.agent_id)
            continue
        out.append(Decision(Outcome.NEW, pid))
        write(i, pid, ws, key, rec.id)
    return out


def absorbed(records: Sequence[EmbeddableRecord], decisions: Sequence[Decision]) -> dict[str, list[str]]:
    """Point id of a memory -> the ids of the batch's duplicates it absorbs, in batch order: its
    `occurrences` grow by that many, whatever its alias list keeps."""
    out: dict[str, list[str]] = {}
    for rec, d in zip(records, decisions, strict=True):
        if d.outcome is Outcome.DUPLICATE:
            out.setdefault(d.point_id, []).append(rec.id)
    return out


def tally(decisions: Sequence[Decision]) -> Counter[Outcome]:
    """How many records got each outcome (every outcome present, 0 when none)."""
    counts: Counter[Outcome] = Counter({o: 0 for o in Outcome})
    counts.update(d.outcome for d in decisions)
    return counts
