"""Unfolding: an operator takes a near duplicate back out of the memory it was folded into.

The fold rule is measured, not perfect (eval/README.md "The fold rule, measured"): where it folded two
memories that say different things, an operator (a workspace or admin token, never an agent's bound token:
`episodic.kernel.auth.may_unfold`) takes the part out on its owner's page in the explorer, as a forget is
asked there, with a confirmation page first. A fold never deleted the part (`episodic.indexing.folding`), so
an unfold only writes fields, in this order:

1. **the part is its own memory again**: its `folded_into` and `fold_scope` cleared (recall, listings and
   `GET /v1/memory/{id}` see it again, as its own agent's), a `similar` edge to its former owner (weight: the
   cosine it folded at: the two are alike, only not one memory), and `unfolded` records from which owner, when
   and by whom. The linker never folds it into that owner again (a re-delivery, a new version of the entry).
2. **the owner** drops it from `folded`, `agents` and `occurrences` (`owner_fields`, computed from the owner
   as it is at the write).

Both writes are conditional (`MemoryStore.update_memories`, the write discipline): a fold or forget that
runs meanwhile is read again, never overwritten. A crash between the two leaves the part visible and the
owner still counting it; asking again completes it (the unfold is idempotent, and says what it did).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from episodic.domain.folding import FOLD_ACROSS, FOLDED_INTO
from episodic.domain.identity import point_id
from episodic.indexing.folding import UNFOLDED, folded_entries, owner_fields
from episodic.kernel.ports import Change, MemoryStore, relations_payload

SIMILAR = "similar"
_PART_FIELDS = ("entry_id", "workspace_id", "relations", FOLDED_INTO, FOLD_ACROSS, UNFOLDED)
_OWNER_FIELDS = ("entry_id", "agent_id", "occurrences", "folded", "agents")


class NotFolded(LookupError):
    """`entry_id` is not a part of `owner_id` (never was, unfolded already, or either memory is gone)."""


@dataclass(slots=True)
class Unfolded:
    """What an unfold did: the part, its former owner, and how many memories it rewrote (0: nothing left)."""

    workspace_id: str
    owner_id: str
    entry_id: str
    agent_id: str | None
    cosine: float | None
    at: str
    by: str
    rewritten: int = 0
    owner_occurrences: int | None = None  # the owner's count after it
    notes: list[str] = field(default_factory=list)


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def part_of_owner(owner: dict[str, Any], entry_id: str) -> dict[str, Any] | None:
    """The owner's record of its part `entry_id` (None: it lists no such part)."""
    return next((e for e in folded_entries(owner) if e["entry_id"] == entry_id), None)


def unfold_part(
    store: MemoryStore, workspace_id: str, owner_id: str, entry_id: str, *, by: str, now: datetime | None = None
) -> Unfolded:
    """Take part `entry_id` out of memory `owner_id` (see the module doc). Raises NotFolded when it is not
    one of its parts; the caller checks who may (`episodic.kernel.auth.may_unfold`)."""
    at = _iso(now or datetime.now(UTC))
    owner_pid, part_pid = point_id(workspace_id, owner_id), point_id(workspace_id, entry_id)
    found = store.retrieve([owner_pid, part_pid])
    owner, part = found.get(owner_pid), found.get(part_pid)
    if owner_pid == part_pid or owner is None or part is None or part.get("workspace_id") != workspace_id:
        raise NotFolded(f"{entry_id!r} is not a part of memory {owner_id!r} in {workspace_id!r}")
    record = part_of_owner(owner, entry_id)
    if record is None and part.get(FOLDED_INTO) != owner_id:
        raise NotFolded(f"{entry_id!r} is not a part of memory {owner_id!r} (unfolded already, or never folded)")
    cosine = record.get("cosine") if record is not None else None
    weight = float(cosine) if isinstance(cosine, int | float) and not isinstance(cosine, bool) else None
    out = Unfolded(workspace_id, owner_id, entry_id, part.get("agent_id"), weight, at, by)

    def stand_alone(pid: str, now_part: dict[str, Any]) -> Change | None:
        if now_part.get(FOLDED_INTO) != owner_id:
            return None  # unfolded meanwhile (or folded elsewhere since): nothing of this unfold to write
        kept = [
            e
            for e in now_part.get("relations") or []
            if isinstance(e, dict) and not (e.get("relation") == SIMILAR and e.get("dst") == owner_id)
        ]
        edge = {"dst": owner_id, "relation": SIMILAR, "weight": round(min(1.0, weight or 0.0), 6), "created_at": at}
        marks = [u for u in now_part.get(UNFOLDED) or [] if isinstance(u, dict) and u.get("from") != owner_id]
        mark = {"from": owner_id, "at": at, "by": by, "cosine": weight}
        return Change(
            {**relations_payload([*kept, edge]), FOLDED_INTO: None, FOLD_ACROSS: None, UNFOLDED: [*marks, mark]}
        )

    written = store.update_memories([part_pid], stand_alone, writer="unfold", fields=_PART_FIELDS)
    out.rewritten += len(written.applied)
    if written.gave_up:
        out.notes.append("the part changed under every attempt: ask again")
        return out

    def drop(pid: str, now_owner: dict[str, Any]) -> Change | None:
        if part_of_owner(now_owner, entry_id) is None:
            return None
        rest = [e for e in folded_entries(now_owner) if e["entry_id"] != entry_id]
        fields = owner_fields(now_owner, rest)
        out.owner_occurrences = int(fields["occurrences"])
        return Change(fields)

    dropped = store.update_memories([owner_pid], drop, writer="unfold", fields=_OWNER_FIELDS)
    out.rewritten += len(dropped.applied)
    if dropped.gave_up:
        out.notes.append("its former owner changed under every attempt: ask again to take the part out of its count")
    return out
