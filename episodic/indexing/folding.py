"""Near-duplicate folds as stored: what a fold writes, and how a forget takes one agent's part back out.

A fold never deletes an entry. The absorbed memory keeps its point, text, vectors and counters, and gets
`folded_into` (its owner's entry id): every recall and listing passes over it (`episodic.store.query`), and
`GET /v1/memory/{id}` of its id answers with the owner. The owner lists what it absorbed in `folded` (per
entry: its id, agent, ts, the cosine it folded at, its occurrences and aliases), the agents it now stands
for in `agents` (its own first), and counts them all in `occurrences`. Scope `own` matches `agent_id` or
`agents`, so each agent whose entry was folded finds the memory, and no other agent does.

Forgetting stays exact because the parts are still there (`unfold`):
- an absorbed entry forgotten (by id, or its agent): the owner drops it from `folded`, `agents` and
  `occurrences`;
- an owner forgotten while its absorbed entries stay: the oldest of them becomes the memory again (its
  `folded_into` cleared) and owns the others, so the other agents keep their part.

Who decides that two memories fold is the linker (`episodic.maintenance.linker`, by `episodic.domain.folding`);
this module only writes the decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from episodic.domain.folding import ACROSS, AGENTS, FOLD_ACROSS, FOLDED, FOLDED_INTO
from episodic.domain.identity import point_id
from episodic.domain.supersession import SUPERSEDED_BY, SUPERSEDES
from episodic.kernel.ports import Change, MemoryStore

__all__ = [
    "AGENTS",
    "FOLDED",
    "FOLDED_INTO",
    "agents_of",
    "fold",
    "folded_entries",
    "folded_ids",
    "unfold",
    "unfolded_from",
    "unsupersede",
]

UNFOLDED = (
    "unfolded"  # on a memory an operator took out of its owner: [{from, at, by, cosine}] (episodic.lifecycle.unfold)
)


def _occ(p: dict[str, Any]) -> int:
    v = p.get("occurrences")
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and v >= 1 else 1


def folded_entries(p: dict[str, Any]) -> list[dict[str, Any]]:
    """The entries folded into memory `p` (well-formed ones only)."""
    raw = p.get(FOLDED)
    return (
        [e for e in raw if isinstance(e, dict) and isinstance(e.get("entry_id"), str)] if isinstance(raw, list) else []
    )


def folded_ids(p: dict[str, Any]) -> list[str]:
    """Every entry id a memory stands for through folds: each absorbed entry's id and its aliases."""
    out: list[str] = []
    for e in folded_entries(p):
        out.append(str(e["entry_id"]))
        out.extend(str(a) for a in e.get("aliases") or [] if isinstance(a, str))
    return out


def agents_of(agent_id: Any, entries: Iterable[dict[str, Any]]) -> list[str]:
    """The agents a memory stands for: its own, then those of its folded entries, once each."""
    seen = [str(agent_id)] if agent_id is not None else []
    for e in entries:
        a = e.get("agent_id")
        if a is not None and str(a) not in seen:
            seen.append(str(a))
    return seen


def part_of(absorbed: dict[str, Any], *, cosine: float, at: str, rule: str | None = None) -> dict[str, Any]:
    """What an owner records of one absorbed memory (`rule`: the fold rule's reason, shown in the explorer)."""
    part = {
        "entry_id": str(absorbed.get("entry_id")),
        "agent_id": absorbed.get("agent_id"),
        "ts": absorbed.get("ts"),
        "cosine": round(float(cosine), 6),
        "at": at,
        "occurrences": _occ(absorbed),
        "aliases": [str(a) for a in absorbed.get("aliases") or [] if isinstance(a, str)],
    }
    if rule is not None:
        part["rule"] = rule[:500]
    return part


def owner_fields(owner: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The owner's fold fields for exactly these absorbed `entries`: its occurrences are its own (exact
    duplicates included) plus theirs."""
    own = _occ(owner) - sum(int(e.get("occurrences") or 1) for e in folded_entries(owner))
    return {
        FOLDED: entries,
        AGENTS: agents_of(owner.get("agent_id"), entries) if entries else [],
        "occurrences": max(1, own) + sum(int(e.get("occurrences") or 1) for e in entries),
    }


def fold(
    owner: dict[str, Any], absorbed: dict[str, Any], *, cosine: float, at: str, rule: str | None = None
) -> dict[str, Any]:
    """The owner's fields after absorbing `absorbed` (an entry already among its parts is replaced)."""
    eid = str(absorbed.get("entry_id"))
    entries = [e for e in folded_entries(owner) if e["entry_id"] != eid]
    return owner_fields(owner, [*entries, part_of(absorbed, cosine=cosine, at=at, rule=rule)])


def unfolded_from(p: dict[str, Any]) -> set[str]:
    """The owners an operator took memory `p` out of (`UNFOLDED`): the linker never folds it into them again."""
    raw = p.get(UNFOLDED)
    return (
        {str(u.get("from")) for u in raw if isinstance(u, dict) and u.get("from")} if isinstance(raw, list) else set()
    )


def unfold(store: MemoryStore, workspace_id: str, removed: dict[str, dict[str, Any]]) -> int:
    """Before `removed` (point id -> payload) are deleted: take their parts out of the memories that stay,
    under the write discipline (each owner's fields computed from the owner as it is at the write). Returns
    how many memories it rewrote."""
    gone = {str(p.get("entry_id")) for p in removed.values()}
    # 1. absorbed entries removed: their owners (those that stay) drop them
    owners: dict[str, set[str]] = {}
    for p in removed.values():
        into = p.get(FOLDED_INTO)
        if isinstance(into, str) and into not in gone:
            owner = point_id(workspace_id, into)
            if owner not in removed:
                owners.setdefault(owner, set()).add(str(p.get("entry_id")))

    def drop(pid: str, owner: dict[str, Any]) -> Change:
        return Change(owner_fields(owner, [e for e in folded_entries(owner) if e["entry_id"] not in owners[pid]]))

    written = len(store.update_memories(owners, drop, writer="fold", fields=_OWNER_FIELDS).applied) if owners else 0
    # 2. owners removed: the oldest absorbed entry that stays takes the memory over
    heirs: dict[str, list[dict[str, Any]]] = {}  # heir point id -> the parts it takes over
    marks: dict[str, dict[str, Any]] = {}
    for p in removed.values():
        rest = [e for e in folded_entries(p) if e["entry_id"] not in gone]
        if not rest:
            continue
        # the heir is the oldest part of the owner's own agent, if any (its other parts must not go to a
        # memory of another agent: they would leave their agent's own scope), else the oldest part
        same = [e for e in rest if e.get("agent_id") == p.get("agent_id")]
        heir = (same or rest)[0]
        others = [e for e in rest if e is not heir]
        heirs[point_id(workspace_id, heir["entry_id"])] = others
        for e in others:
            across = ACROSS if e.get("agent_id") != heir.get("agent_id") else None
            marks[point_id(workspace_id, e["entry_id"])] = {FOLDED_INTO: heir["entry_id"], FOLD_ACROSS: across}

    def take_over(pid: str, heir: dict[str, Any]) -> Change:
        return Change({**owner_fields({**heir, FOLDED: []}, heirs[pid]), FOLDED_INTO: None, FOLD_ACROSS: None})

    if heirs:
        written += len(store.update_memories(heirs, take_over, writer="fold", fields=_OWNER_FIELDS).applied)
    marks = {pid: m for pid, m in marks.items() if pid not in removed}
    if marks:  # the absorbed entries' own mark (a field only folds write)
        written += store.set_payloads(marks)
    return written


_OWNER_FIELDS = ("entry_id", "agent_id", "occurrences", FOLDED, FOLDED_INTO, FOLD_ACROSS)


def unsupersede(store: MemoryStore, workspace_id: str, removed: dict[str, dict[str, Any]]) -> int:
    """Before `removed` are deleted: the older memories they superseded (their `supersedes` edges) no longer
    say `superseded_by` a memory that is gone (the edges to the removed ones are cut by the caller)."""
    older: dict[str, str] = {}  # older point id -> the removed newer memory's entry id
    for p in removed.values():
        for e in p.get("relations") or []:
            if isinstance(e, dict) and e.get("relation") == SUPERSEDES and isinstance(e.get("dst"), str):
                older[point_id(workspace_id, e["dst"])] = str(p.get("entry_id"))
    older = {pid: eid for pid, eid in older.items() if pid not in removed}

    def clear(pid: str, payload: dict[str, Any]) -> Change | None:
        return Change({SUPERSEDED_BY: None}) if payload.get(SUPERSEDED_BY) == older[pid] else None

    return len(store.update_memories(older, clear, writer="fold", fields=(SUPERSEDED_BY,)).applied) if older else 0
