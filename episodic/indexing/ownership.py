"""An entry id belongs to the agent that first wrote it (issue 29).

The point id is uuid5(workspace_id, entry id), with no agent in it, so without this rule any agent of a
workspace could replace another agent's memory by reusing its id (the indexer would keep the victim's
importance, references, aliases and edges under the attacker's text). The indexer asks `refusal` about
every entry whose id the workspace already holds (a memory's own id, one of its aliases, or an entry earlier
in the same batch); an entry of another agent is left out and dead-lettered by the consumer as `id_taken`.
Dead-lettering rather than keeping a second memory keeps (workspace_id, id) the identity that SPEC §10 and
every id-based route rely on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.events import EmbeddableRecord

__all__ = ["refusal"]


def refusal(rec: EmbeddableRecord, owner: Mapping[str, Any] | None) -> str | None:
    """The dead letter's error when `owner` (the memory payload that holds `rec`'s id) is another agent's,
    else None. The error names no other agent: a dead letter must not tell who owns an id."""
    if owner is None or owner.get("agent_id") in (None, rec.agent_id):
        return None
    return (
        f"id: entry {rec.id!r} of workspace {rec.workspace_id!r} belongs to another agent's memory; an entry id "
        f"belongs to the agent that first wrote it: write agent {rec.agent_id!r}'s entry under a new id"
    )
