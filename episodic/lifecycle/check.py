"""`episodic check`: the store's invariants, read back from the store and the state (issue 25).

For tests and for operators: every memory of every workspace is read once (payloads only), the tombstones
and forgotten texts of the workspace beside it, and each rule below that does not hold is one violation
(kind, workspace, entry, detail). Nothing is written.

- `forgotten_present`: a tombstoned id (a forget's or retention's) is a memory again, or an alias of one,
  for the agent the tombstone holds for;
- `forgotten_text`: a memory whose text a forget removed and that was accepted at or before that forget;
- `forgotten_in_context`: a forgotten id still in another memory's run context (`context_ids`);
- `edge_to_forgotten` / `edge_to_missing`: an edge (`relations` / `links`) to a forgotten id, or to an id
  that is no memory of the workspace (neither an entry id nor an alias);
- `alias_twice`: an id that two memories list (as entry id or alias);
- `folded_into_missing`: a memory folded into an id that is no memory of the workspace: recall passes over
  every folded memory, so nothing would ever show it;
- `run_edge_one_way`: a memory's `previous` (`next`) edge to a memory of the workspace whose `next`
  (`previous`) edge does not point back: the run's chain is broken (a cycle of run edges shows up here too);
- `vector_of_other_text`: the memory's active dense vector was made from another summary than the one it
  holds (the digest the writers record beside the rows, `vector_of`; memories written before it are counted
  as `unverified`, not as violations);
- `counter_out_of_range`: reference_count < 0, occurrences < 1, importance or base importance outside
  [0, 1], or an `occurrences` smaller than the ids the memory lists.

Size: one pass over the store with a rule per block; every rule reads top to bottom here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from episodic.domain.identity import dedup_key, summary_digest
from episodic.domain.runs import adjacent
from episodic.kernel.ports import MemoryStore, StateStore
from episodic.lifecycle.forget import TEXT_TOMBSTONE, TOMBSTONE, parse_iso, tombstone_key
from episodic.store.rules import vector_of_field

MAX_SHOWN = 1000  # violations listed in full (all are counted)


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    workspace_id: str
    entry_id: str
    detail: str


@dataclass
class CheckReport:
    workspaces: int = 0
    memories: int = 0
    unverified_vectors: int = 0  # vectors written before their text's digest was recorded
    counts: dict[str, int] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.counts

    def add(self, kind: str, workspace_id: str, entry_id: str, detail: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if len(self.violations) < MAX_SHOWN:
            self.violations.append(Violation(kind, workspace_id, entry_id, detail))

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "workspaces": self.workspaces,
            "memories": self.memories,
            "unverified_vectors": self.unverified_vectors,
            "violations": dict(sorted(self.counts.items())),
            "shown": [
                {"kind": v.kind, "workspace_id": v.workspace_id, "entry_id": v.entry_id, "detail": v.detail}
                for v in self.violations
            ],
        }


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _instant(text: Any) -> datetime | None:
    try:
        return parse_iso(str(text)) if text else None
    except ValueError:
        return None


def check_store(store: MemoryStore, state: StateStore, *, workspaces: Iterable[str] | None = None) -> CheckReport:
    """Every invariant above over the given workspaces (default: all of the store's)."""
    report = CheckReport()
    vector = str(getattr(store, "vector", "dense"))
    for ws in sorted(workspaces if workspaces is not None else store.workspaces()):
        report.workspaces += 1
        _check_workspace(store, state, ws, vector, report)
    return report


def _check_workspace(store: MemoryStore, state: StateStore, ws: str, vector: str, report: CheckReport) -> None:
    memories = [dict(hit.payload) for hit in store.scan_workspace(ws)]
    report.memories += len(memories)
    dead = {str(doc.get("entry_id")): doc for _, doc in state.scan(TOMBSTONE, where={"workspace_id": ws})}
    texts = {key: doc for key, doc in state.scan(TEXT_TOMBSTONE, where={"workspace_id": ws})}
    owners: dict[str, list[str]] = {}  # id -> the memories that list it (entry id or alias)
    for p in memories:
        for i in {str(p.get("entry_id")), *(str(a) for a in p.get("aliases") or [])}:
            owners.setdefault(i, []).append(str(p.get("entry_id")))

    def forgotten(entry_id: str, agent_id: Any) -> dict[str, Any] | None:
        tomb = dead.get(entry_id)
        return tomb if tomb is not None and tomb.get("agent_id") in (None, agent_id) else None

    for p in memories:
        eid, agent = str(p.get("entry_id")), p.get("agent_id")
        for i in [eid, *(str(a) for a in p.get("aliases") or [])]:
            tomb = forgotten(i, agent)
            if tomb is not None:
                role = "entry id" if i == eid else "alias"
                report.add("forgotten_present", ws, eid, f"{role} {i} was forgotten by {tomb.get('forget_id')}")
        key = dedup_key(ws, str(agent), str(p.get("entry_type")), str(p.get("summary") or ""))
        text = texts.get(tombstone_key(ws, key))
        accepted, before = _instant(p.get("accepted_at")), _instant((text or {}).get("before"))
        if text is not None and accepted is not None and before is not None and accepted <= before:
            report.add("forgotten_text", ws, eid, f"its text was forgotten by {text.get('forget_id')}")
        for c in p.get("context_ids") or []:
            if str(c) in dead:
                report.add("forgotten_in_context", ws, eid, f"its run context still holds {c}")
        for dst in {str(e.get("dst")) for e in p.get("relations") or [] if isinstance(e, dict)} | {
            str(x) for x in p.get("links") or []
        }:
            if dst in dead and dst not in owners:
                report.add("edge_to_forgotten", ws, eid, f"edge to {dst}")
            elif dst not in owners:
                report.add("edge_to_missing", ws, eid, f"edge to {dst}, which is no memory of the workspace")
        into = p.get("folded_into")
        if isinstance(into, str) and into not in owners:
            report.add("folded_into_missing", ws, eid, f"folded into {into}, which is no memory of the workspace")
        _counters(p, ws, eid, report)
        _vector(p, ws, eid, vector, report)
    _run_edges(memories, ws, report)
    for i, listed in owners.items():
        if len(listed) > 1:
            report.add("alias_twice", ws, i, f"listed by {sorted(listed)}")


def _run_edges(memories: list[dict[str, Any]], ws: str, report: CheckReport) -> None:
    back = {"previous": "next", "next": "previous"}
    by_id = {str(p.get("entry_id")): p for p in memories}
    for eid, p in by_id.items():
        for e in p.get("relations") or []:
            rel = e.get("relation") if isinstance(e, dict) else None
            other = by_id.get(str(e.get("dst"))) if rel in back else None
            if rel in back and other is not None and adjacent(other, back[rel]) != eid:
                report.add("run_edge_one_way", ws, eid, f"{rel} {e.get('dst')}, whose {back[rel]} is not this memory")


def _counters(p: dict[str, Any], ws: str, eid: str, report: CheckReport) -> None:
    refs, occ = _num(p.get("reference_count") or 0), _num(p.get("occurrences") or 1)
    bad: list[str] = []
    if refs is None or refs < 0:
        bad.append(f"reference_count {p.get('reference_count')!r}")
    if occ is None or occ < 1:
        bad.append(f"occurrences {p.get('occurrences')!r}")
    elif occ < 1 + len(p.get("aliases") or []):
        bad.append(f"occurrences {int(occ)} < 1 + {len(p.get('aliases') or [])} aliases")
    for name in ("importance_score", "base_importance"):
        if name in p and p[name] is not None:
            v = _num(p[name])
            if v is None or not 0.0 <= v <= 1.0:
                bad.append(f"{name} {p[name]!r}")
    if bad:
        report.add("counter_out_of_range", ws, eid, "; ".join(bad))


def _vector(p: dict[str, Any], ws: str, eid: str, vector: str, report: CheckReport) -> None:
    made_from = p.get(vector_of_field(vector))
    if made_from is None:
        if p.get("has_dense"):
            report.unverified_vectors += 1
        return
    if made_from != summary_digest(str(p.get("summary") or "")):
        report.add("vector_of_other_text", ws, eid, f"its {vector!r} vector was made from another summary")
