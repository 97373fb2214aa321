"""What a token bound to an agent reads of its workspace: its own memories, and nothing of another agent's
that they point at (issue 45).

A memory's answer names other memories: its relations (`similar`, `supports`, `supersedes`, the run's
`previous` / `next`), the run context it was indexed with, the entries a fold absorbed and their agents, the
newer memory that superseded it, the memory it was folded into. Edges cross agents by design (the linker
relates similar memories of a whole workspace; a consolidated rule supports any entry id), and a bound token
reads through them: "a bound token cannot tell another agent's id from a missing one" (SECURITY.md) holds
only if each of them is checked. So for a bound token (`Principal.bound`), everything an answer names is kept
only when it names a memory the token may see whole (`may_see_memory`: its agent's, or for a lead its
crew's), and an id of no memory is dropped the same way, so the two read alike:

- relations: an edge whose two ends the token may see;
- context lines, `supersedes`, `superseded_by`, `folded_into`, the memory a part was `unfolded` from: those of
  memories it may see;
- a fold's parts and agents: the token's own (its crew's for a lead), and `occurrences` counts only them
  (an agent's entry folded into another agent's memory stays that agent's own, `fold_scope`: its own scope
  reads its own text; only the other agent's owner lists it, and this hides it there).

Workspace and admin tokens, and the open service, read their workspaces whole: `View.hides` is false and
nothing changes. One `View` per request; it reads the store for the ids it checks (one call per batch of ids,
cached), so it runs where the request's other store work runs: in the thread pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from episodic.domain.identity import point_id
from episodic.indexing.folding import FOLDED, folded_entries, folded_ids
from episodic.kernel.auth import Principal, may_see_memory
from episodic.kernel.ports import MemoryStore
from episodic.retrieval.engine import RecallHit

__all__ = ["View"]

_WHO = ("entry_id", "workspace_id", "agent_id", "crew_id")  # what deciding who may see a memory reads


def _occ(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1 else 1


class View:
    """One principal's view of one workspace (see the module doc)."""

    def __init__(self, store: MemoryStore, principal: Principal, workspace_id: str) -> None:
        self.store = store
        self.principal = principal
        self.workspace_id = workspace_id
        self._seen: dict[str, bool] = {}

    @property
    def hides(self) -> bool:
        return self.principal.bound

    def sees(self, payload: Mapping[str, Any], *, crew_id: Any = None) -> bool:
        """Whether the principal may see a memory of this payload's agent and crew whole (never through
        `agents`: a fold never makes another agent's memory one's own)."""
        crew = payload.get("crew_id", crew_id)
        return may_see_memory(self.principal, agent_id=payload.get("agent_id"), crew_id=crew)

    def visible(self, ids: Iterable[str]) -> set[str]:
        """Of `ids`, those that name a memory of the workspace (by its own id or an alias) that the principal
        may see whole; every id when it hides nothing."""
        ids = [str(i) for i in ids]
        if not self.hides:
            return set(ids)
        todo = sorted({i for i in ids if i not in self._seen})
        if todo:
            pids = {i: point_id(self.workspace_id, i) for i in todo}
            got = self.store.retrieve(sorted(set(pids.values())), fields=_WHO)
            found = {i: got[p] for i, p in pids.items() if p in got}
            rest = [i for i in todo if i not in found]
            owners = self.store.find_by_alias(self.workspace_id, rest) if rest else {}
            if owners:
                more = self.store.retrieve(sorted(set(owners.values())), fields=_WHO)
                found |= {i: more[o] for i, o in owners.items() if o in more}
            for i in todo:
                p = found.get(i)
                self._seen[i] = p is not None and p.get("workspace_id") == self.workspace_id and self.sees(p)
        return {i for i in ids if self._seen.get(i)}

    # -- what an answer names --------------------------------------------------------------------------------
    def _fold_fields(self, payload: Mapping[str, Any], agents: list[str], occurrences: int) -> dict[str, Any]:
        """A memory's fold fields as the principal may see them: its own parts and agents, and the count of
        what it stands for without the hidden parts."""
        crew = payload.get("crew_id")
        parts = folded_entries(dict(payload))
        shown = [e for e in parts if self.sees(e, crew_id=crew)]
        hidden = sum(_occ(e.get("occurrences")) for e in parts if e not in shown)
        return {
            "parts": shown,
            "agents": [a for a in agents if self.sees({"agent_id": a}, crew_id=crew)],
            "occurrences": max(1, occurrences - hidden),
        }

    def detail(self, d: dict[str, Any]) -> dict[str, Any]:
        """A `memory_detail` answer as the principal may see it."""
        if not self.hides:
            return d
        names = {str(r["src"]) for r in d["relations"]} | {str(r["dst"]) for r in d["relations"]}
        names |= {str(c["entry_id"]) for c in d.get("context") or []}
        names |= {str(u["from"]) for u in d.get("unfolded") or []}
        ok = self.visible(names)
        folds = self._fold_fields(d, list(d.get("agents") or []), int(d["occurrences"]))
        keep = {str(e["entry_id"]) for e in folds["parts"]}
        return {
            **d,
            "relations": [r for r in d["relations"] if str(r["src"]) in ok and str(r["dst"]) in ok],
            "context": None if d.get("context") is None else [c for c in d["context"] if c["entry_id"] in ok],
            "folded": [f for f in d.get("folded") or [] if f["entry_id"] in keep],
            "unfolded": [u for u in d.get("unfolded") or [] if str(u["from"]) in ok],
            "agents": folds["agents"],
            "occurrences": folds["occurrences"],
        }

    def items(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Listing items (`memory_item`): a `folded_into` the principal may not see reads as none."""
        if not self.hides:
            return items
        into = self.visible(str(i["folded_into"]) for i in items if i.get("folded_into"))
        return [{**i, "folded_into": i["folded_into"] if i.get("folded_into") in into else None} for i in items]

    def hits(self, hits: list[RecallHit]) -> list[RecallHit]:
        """Recall hits as the principal may see them (same order and length)."""
        if not self.hides:
            return hits
        folded = [h.point_id for h in hits if h.folded or h.agents]
        stored = self.store.retrieve(sorted(set(folded))) if folded else {}
        out = [h if h.point_id not in stored else _with_folds(h, self._fold_fields(
            stored[h.point_id], h.agents, h.occurrences)) for h in hits]  # fmt: skip
        names = [i for h in out for i in (*h.supersedes, h.superseded_by, *(c["entry_id"] for c in h.context or []))]
        ok = self.visible(n for n in names if n)
        return [
            replace(
                h,
                supersedes=[i for i in h.supersedes if i in ok],
                superseded_by=h.superseded_by if h.superseded_by in ok else None,
                context=None if h.context is None else [c for c in h.context if c["entry_id"] in ok],
                relations=[],
            )
            for h in out
        ]


def _with_folds(h: RecallHit, folds: dict[str, Any]) -> RecallHit:
    parts = {str(e["entry_id"]) for e in folds["parts"]}
    shown = folded_ids({FOLDED: folds["parts"]})
    return replace(h, folded=[i for i in h.folded if i in shown or i in parts], agents=folds["agents"],
                   occurrences=folds["occurrences"])  # fmt: skip
