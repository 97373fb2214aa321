"""Memory identity: deterministic point ids and the exact-duplicate key (SPEC §5, §10)."""

from __future__ import annotations

import hashlib
import re
import unicodedata
import uuid

# A fixed namespace: point ids must be stable across processes, versions and machines.
POINT_NAMESPACE = uuid.UUID("6f1d3a52-8d0e-5b8a-9c43-2f6a7e0b9d11")

_WS = re.compile(r"\s+")


def point_id(workspace_id: str, entry_id: str) -> str:
    """uuid5 of (workspace_id, entry_id): two workspaces can never overwrite each other."""
    # A separator that cannot appear ambiguously: lengths are part of the name.
    name = f"{len(workspace_id)}:{workspace_id}|{len(entry_id)}:{entry_id}"
    return str(uuid.uuid5(POINT_NAMESPACE, name))


def normalise_summary(text: str) -> str:
    """Unicode NFKC, case-folded, whitespace collapsed."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def dedup_key(workspace_id: str, agent_id: str, entry_type: str, summary: str) -> str:
    """Exact-duplicate key: same workspace, agent and entry_type, normalised summary."""
    h = hashlib.sha256()
    for part in (workspace_id, agent_id, entry_type, normalise_summary(summary)):
        h.update(len(part).to_bytes(4, "big"))
        h.update(part.encode())
    return h.hexdigest()


def summary_digest(summary: str) -> str:
    """A short digest of the exact summary a dense vector was made from (`vector_of` in the payload): the
    invariant check tells a vector of another text from the memory's own (episodic.lifecycle.check)."""
    return hashlib.sha256(summary.encode()).hexdigest()[:16]
