"""The ids a memory absorbed as exact duplicates, kept in the state store (issue 45, parts 3 and 5).

A memory keeps only its newest `alias_limit` alias ids (so a repeated heartbeat cannot grow a point and every
answer without bound), yet every id it absorbed is one it stands for. Each absorbed id is also kept as a
small state document (kind `absorbed`, key (workspace, id)) naming the memory that absorbed it, for
`HORIZON` after it was absorbed:

- a re-delivery of an id the alias list has pushed out is known as one the memory already counted (decision
  `alias`, `episodic.indexing.decisions`), not counted again;
- another agent's entry under such an id is refused like one under a kept alias (`id_taken`);
- a forget of the memory tombstones every id it absorbed within the horizon, not only the kept aliases
  (`episodic.lifecycle.forget`), so none of them comes back however it is sent again.

The horizon is the forget rules' (7 days, Kafka's default retention): nothing accepted before it can still be
on its way on a topic. An id absorbed longer ago than that, and pushed out of the alias list since, is known
only by the memory's text: re-sent after a forget (a new acceptance), it is a new memory. `prune` drops the
documents past the horizon, a day at a time (they carry their UTC `day`, an indexed field).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

import msgspec

from episodic.kernel.ports import StateStore

__all__ = ["ABSORBED", "HORIZON", "holders", "key", "owned_by", "prune", "record"]

ABSORBED = "absorbed"  # key(workspace, id) -> {workspace_id, entry_id, absorbed_by, agent_id, at, day}
HORIZON = timedelta(days=7)  # as long as a forget rule (episodic.lifecycle.forget.RULE_HORIZON)
PAGE = 256


def key(workspace_id: str, entry_id: str) -> str:
    """Unambiguous for any ids (a JSON array of the two), as a tombstone's key."""
    return msgspec.json.encode([workspace_id, entry_id]).decode()


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def record(state: StateStore, workspace_id: str, absorbed: Mapping[str, Iterable[str]], agents: Mapping[str, str],
           at: datetime) -> int:  # fmt: skip
    """Keep that the memory of entry id `owner` absorbed each of `absorbed[owner]` (their agent: `agents[owner]`).
    Returns how many documents were written."""
    docs = {
        key(workspace_id, eid): {
            "workspace_id": workspace_id,
            "entry_id": eid,
            "absorbed_by": owner,
            "agent_id": agents[owner],
            "at": _iso(at),
            "day": at.date().isoformat(),
        }
        for owner, ids in absorbed.items()
        for eid in ids
    }
    if docs:
        state.put_many(ABSORBED, docs)
    return len(docs)


def holders(state: StateStore, workspace_id: str, entry_ids: Iterable[str]) -> dict[str, str]:
    """entry id -> the entry id of the memory that absorbed it (within the horizon), for those that have one."""
    keys = {key(workspace_id, e): e for e in dict.fromkeys(entry_ids)}
    if not keys:
        return {}
    found = state.get_many(ABSORBED, sorted(keys))
    return {keys[k]: str(doc["absorbed_by"]) for k, doc in found.items() if doc.get("absorbed_by")}


def owned_by(state: StateStore, workspace_id: str, owners: Iterable[str]) -> dict[str, str]:
    """Every id the memories of entry ids `owners` absorbed (within the horizon): id -> its owner."""
    out: dict[str, str] = {}
    for owner in dict.fromkeys(owners):
        for _, doc in state.scan(ABSORBED, where={"workspace_id": workspace_id, "absorbed_by": owner}):
            out[str(doc.get("entry_id"))] = owner
    return out


def prune(state: StateStore, now: datetime, *, days: int = 31) -> int:
    """Drop the documents of the `days` UTC days before the horizon (run once a day is enough). Returns how
    many went."""
    edge = (now - HORIZON).date()
    gone = 0
    for back in range(1, days + 1):
        day = (edge - timedelta(days=back)).isoformat()
        while keys := [k for k, _ in state.scan(ABSORBED, where={"day": day}, limit=PAGE)]:
            state.delete(ABSORBED, keys)
            gone += len(keys)
    return gone
