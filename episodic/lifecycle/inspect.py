"""Inspecting and listing memories (SPEC §11 `GET /v1/memory/{entry_id}`, `GET /v1/memories`), over the ports.

- `resolve_memories`: the memories a list of ids names (the reviews endpoint's lookup, and `memory_detail`'s).
- `memory_detail`: one memory by entry id, an alias or an entry folded into it (a near duplicate,
  `episodic.indexing.folding`) resolving to its memory, with its relations in both
  directions; `None` when there is none, `Forgotten` when a forget removed it.
- `memory_page`: a page of a workspace's memories, newest first (`ts` descending, then point id: a stable
  order, ties included), with an opaque cursor. The cursor holds where the page ended and a digest of the
  selection it belongs to, so a cursor passed with other filters is refused rather than silently wrong.
  Paging is by position, not by offset: memories written or forgotten between two pages neither shift
  nor repeat the ones after the cursor.

Values are read defensively: a stored memory missing a field (hand-made data, an older layout) is shown
with a neutral value, never an error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from episodic.domain.folding import ACROSS, FOLD_ACROSS
from episodic.domain.identity import point_id
from episodic.domain.review import retrievability, state_of
from episodic.domain.surprise import key_moment, surprise_of
from episodic.indexing.context import shown_context
from episodic.indexing.folding import AGENTS, FOLDED_INTO, UNFOLDED, folded_entries
from episodic.kernel.ports import DENSE, MemoryStore, PagePosition, Selection, StateStore
from episodic.lifecycle.forget import TOMBSTONE, tombstone_key
from episodic.store.rules import model_field


class BadCursor(ValueError):
    """A cursor that this service did not hand out for this listing."""


class Forgotten(LookupError):
    """The memory was removed by a forget."""

    def __init__(self, entry_id: str, forget_id: str, at: str) -> None:
        super().__init__(f"{entry_id!r} was forgotten (forget {forget_id} at {at})")
        self.entry_id, self.forget_id, self.at = entry_id, forget_id, at


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _ids(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def has_dense(p: dict[str, Any], vector: str = DENSE) -> bool:
    """Whether the memory has the active embedding generation's vector (`vector`), as its payload records."""
    if vector == DENSE:
        return p.get("has_dense") is True
    return isinstance(p.get(model_field(vector)), str)


def memory_item(p: dict[str, Any], vector: str = DENSE) -> dict[str, Any]:
    """The fields of a memory in a listing (episodic_client.models.MemoryItem)."""
    return {
        "entry_id": str(p.get("entry_id", "")),
        "ts": str(p.get("ts", "")),
        "entry_type": str(p.get("entry_type", "")),
        "severity": str(p.get("severity", "")),
        "agent_id": _str(p.get("agent_id")),
        "crew_id": _str(p.get("crew_id")),
        "run_id": _str(p.get("run_id")),
        "summary": str(p.get("summary", "")),
        "importance_score": _float(p.get("importance_score")),
        "reference_count": _int(p.get("reference_count"), 0),
        "occurrences": _int(p.get("occurrences"), 1),
        "aliases": _ids(p.get("aliases")),
        "has_dense": has_dense(p, vector),
        "folded_into": _str(p.get(FOLDED_INTO)) or None,
        "review_count": state_of(p).review_count,
    }


def review_of(p: dict[str, Any], now: datetime) -> dict[str, Any] | None:
    """A memory's review state as shown (episodic_client.models.MemoryReview); None when never reviewed."""
    st = state_of(p)
    if not st.reviewed:
        return None
    fields = st.fields()
    r = retrievability(st, now)
    return {
        "count": st.review_count,
        "ratings": fields["review_ratings"],
        "last_rating": st.last_rating,
        "last_reviewed_at": fields["last_reviewed_at"],
        "stability": fields["stability"],
        "difficulty": fields["difficulty"],
        "retrievability": None if r is None else round(r, 6),
    }


def resolve_memories(store: MemoryStore, workspace_id: str, entry_ids: list[str]) -> dict[str, dict[str, Any]]:
    """entry id -> the payload of the memory it names in the workspace: its own, the memory it is an alias
    of, or the memory a near duplicate was folded into (as `memory_detail` resolves one id); ids of no
    memory are left out. Three store calls for the whole list."""
    ids = list(dict.fromkeys(entry_ids))
    pids = {e: point_id(workspace_id, e) for e in ids}
    found = store.retrieve(sorted(set(pids.values())))
    out: dict[str, dict[str, Any]] = {e: found[pids[e]] for e in ids if pids[e] in found}
    missing = [e for e in ids if e not in out]
    if missing:
        owners = store.find_by_alias(workspace_id, missing)
        got = store.retrieve(sorted(set(owners.values()))) if owners else {}
        out.update({e: got[o] for e, o in owners.items() if o in got})
    into = {
        e: point_id(workspace_id, str(p[FOLDED_INTO]))
        for e, p in out.items()
        if _str(p.get(FOLDED_INTO)) and p.get(FOLD_ACROSS) != ACROSS
    }
    if into:  # a near duplicate folded into another memory of its agent: that memory answers (one folded into
        # another agent's memory answers itself: it is its agent's own, and the owner's text is not)
        got = store.retrieve(sorted(set(into.values())))
        out.update({e: got[o] for e, o in into.items() if o in got})
    return {e: p for e, p in out.items() if p.get("workspace_id") == workspace_id}


def memory_detail(
    store: MemoryStore, state: StateStore | None, workspace_id: str, entry_id: str, now: datetime | None = None
) -> dict[str, Any] | None:
    """The memory `entry_id` names in the workspace (its own id or an alias), with counters and relations
    (episodic_client.models.MemoryDetail); None when there is none; raises Forgotten when a forget removed it.
    `now`: when its review state's retrievability is computed (default: the wall clock)."""
    payload = resolve_memories(store, workspace_id, [entry_id]).get(entry_id)
    if payload is None:
        tomb = state.get(TOMBSTONE, tombstone_key(workspace_id, entry_id)) if state is not None else None
        if tomb is not None:
            raise Forgotten(entry_id, str(tomb.get("forget_id")), str(tomb.get("at")))
        return None
    own = str(payload.get("entry_id", entry_id))
    relations = [
        {"src": r.src, "dst": r.dst, "relation": r.relation, "weight": r.weight, "created_at": r.created_at}
        for r in store.relations_of(workspace_id, [own])
    ]
    refs = payload.get("refs")
    vector = str(getattr(store, "vector", DENSE))  # the active embedding generation's vector
    item = memory_item(payload, vector)
    del item["folded_into"]
    return {
        **item,
        "folded": [
            {
                "entry_id": e["entry_id"],
                "agent_id": _str(e.get("agent_id")),
                "ts": _str(e.get("ts")),
                "cosine": _float(e.get("cosine")) or 0.0,
                "at": str(e.get("at", "")),
                "occurrences": _int(e.get("occurrences"), 1),
                "aliases": _ids(e.get("aliases")),
                "rule": _str(e.get("rule")),
            }
            for e in folded_entries(payload)
        ],
        "unfolded": [
            {
                "from": str(u.get("from")),
                "at": _str(u.get("at")),
                "by": _str(u.get("by")),
                "cosine": _float(u.get("cosine")),
            }
            for u in payload.get(UNFOLDED) or []
            if isinstance(u, dict) and u.get("from")
        ],
        "surprise": surprise_of(payload),
        "key_moment": key_moment(surprise_of(payload)),
        "agents": _ids(payload.get(AGENTS)),
        "requested_id": entry_id,
        "workspace_id": workspace_id,
        "payload": _dict(payload.get("payload")),
        "refs": refs if isinstance(refs, dict) else None,
        "priority": _str(payload.get("priority")),
        "base_importance": _float(payload.get("base_importance")),
        "last_referenced_at": _str(payload.get("last_referenced_at")),
        "indexed_at": _str(payload.get("indexed_at")),
        "accepted_at": _str(payload.get("accepted_at")),
        "model": _str(payload.get(model_field(vector))) if has_dense(payload, vector) else None,
        "relations": sorted(relations, key=lambda r: (r["src"] != own, r["relation"], r["src"], r["dst"])),
        "context": shown_context(payload.get("context")),
        "review": review_of(payload, now or datetime.now(UTC)),
    }


# -- pages --------------------------------------------------------------------------------------------------


def _digest(selection: Selection) -> str:
    key = [selection.workspace_id, selection.agent_id, selection.run_id, sorted(selection.entry_types)]
    if selection.crew_id is not None:  # (cursors of listings without a crew stay valid)
        key.append(selection.crew_id)
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]


def encode_cursor(selection: Selection, position: PagePosition) -> str:
    raw = json.dumps({"v": 1, "s": _digest(selection), "ts": position.ts, "id": position.point_id})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(selection: Selection, cursor: str) -> PagePosition:
    """The position a cursor holds; BadCursor when it is not one of ours or belongs to another listing."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        ts, pid, digest = data["ts"], data["id"], data["s"]
    except (binascii.Error, ValueError, TypeError, KeyError) as e:
        raise BadCursor("not a cursor of this service (pass next_cursor as it came)") from e
    if data.get("v") != 1 or not all(isinstance(x, str) for x in (ts, pid, digest)):
        raise BadCursor("not a cursor of this service (pass next_cursor as it came)")
    if digest != _digest(selection):
        raise BadCursor("this cursor belongs to a listing with other parameters (workspace, agent, run or type)")
    return PagePosition(ts=ts, point_id=pid)


def memory_page(
    store: MemoryStore, selection: Selection, cursor: str | None, limit: int
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of `selection` newest first, and the cursor of the next page (None: this is the last)."""
    after = decode_cursor(selection, cursor) if cursor else None
    rows, position = store.page(selection, after, limit)
    vector = str(getattr(store, "vector", DENSE))
    items = [memory_item(p, vector) for _, p in rows]
    return items, encode_cursor(selection, position) if position is not None else None
