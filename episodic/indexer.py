"""Turn a batch of embeddable records into memories (SPEC §5, §10 "Identity and duplicates").

Pure orchestration over the ports: one `embed_documents` call and one store upsert per batch.

- Point ids are uuid5(workspace_id, entry id): re-delivery of the same id is idempotent and never resets
  reference_count, last_referenced_at or importance; a changed summary under the same id replaces text
  and vectors and keeps those counters.
- Exact duplicates (same workspace, agent, entry_type and normalised summary) keep one point: the first
  id stays `entry_id`, later ids go to `aliases`, `occurrences` grows, and the event says
  mode "duplicate" with `duplicate_of`. A re-delivered alias changes nothing.
- No embedder, or `defer_dense`: points get only the sparse vector ("sparse-only"); `densify` adds the
  dense vectors later (the consumer's densify loop, which is also the backfill after sparse-only mode).
- Run context and adjacency (`episodic.context`): each new memory of a run is indexed with the memories
  before it (a second BM25 vector over the context-folded text; `context` in its payload) and linked to its
  run neighbours by `previous` / `next` edges. Neither changes the summary nor the dense vector.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from episodic.context import ContextMode, RunContext
from episodic.identity import dedup_key, point_id
from episodic.ports import Embedder, MemoryPoint, MemoryStore, Relation, merge_relations
from episodic.sparse import Bm25Encoder
from schemas.events import EmbeddableRecord, IndexedEvent

log = logging.getLogger(__name__)

COUNTER_FIELDS = ("reference_count", "last_referenced_at", "importance_score", "aliases", "occurrences", "indexed_at")


DENSIFY_WINDOW = 16  # densify looks at up to 16x its batch of missing vectors to pick the oldest


def _now() -> datetime:
    return datetime.now(UTC)


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def index_text(record: EmbeddableRecord) -> str:
    """The text that is embedded and searched."""
    return record.summary


@dataclass
class BatchResult:
    events: list[IndexedEvent] = field(default_factory=list)
    embedded: int = 0  # texts sent to the model
    written: int = 0  # points upserted
    embed_seconds: float = 0.0
    upsert_seconds: float = 0.0
    context_seconds: float = 0.0  # run context and adjacency: the run look-ups and the context vectors
    embed_failed: bool = False
    deferred: int = 0  # points written sparse first; their dense vectors come from `densify`
    chars: int = 0  # characters of the texts that were (or would have been) embedded


def supports_relations(rec: EmbeddableRecord, created_at: str) -> list[Relation]:
    """`memory.consolidated` entries point at their evidence: refs.supports -> `supports` edges (weight 1)."""
    if rec.entry_type != "memory.consolidated" or not rec.supports:
        return []
    return [
        Relation(
            src=rec.id, dst=dst, relation="supports", weight=1.0, created_at=created_at, workspace_id=rec.workspace_id
        )
        for dst in rec.supports
    ]


def _payload(rec: EmbeddableRecord, *, indexed_at: str, model: str | None, key: str) -> dict[str, Any]:
    relations = merge_relations([], supports_relations(rec, indexed_at))
    return {
        "entry_id": rec.id,
        "workspace_id": rec.workspace_id,
        "crew_id": rec.crew_id,
        "agent_id": rec.agent_id,
        "run_id": rec.run_id,
        "ts": iso(rec.ts_datetime),
        "entry_type": rec.entry_type,
        "severity": rec.severity,
        "summary": rec.summary,
        "payload": rec.payload,
        "refs": {k: v for k, v in rec.refs.items() if v is not None} if rec.refs is not None else None,
        "priority": rec.priority,
        "base_importance": rec.base_importance,
        "importance_score": rec.base_importance,
        "reference_count": 0,
        "last_referenced_at": None,
        "indexed_at": indexed_at,
        "accepted_at": iso(rec.accepted_at),
        "model": model,
        "has_dense": model is not None,
        "aliases": [],
        "occurrences": 1,
        "dedup_key": key,
        "relations": relations,
        "links": sorted({e["dst"] for e in relations}),
    }


def _keep(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A new version of a memory keeps the old one's counters and edges (and adds its own edges)."""
    for f in COUNTER_FIELDS:
        if f in old:
            new[f] = old[f]
    own = [
        Relation(
            src=new["entry_id"], dst=e["dst"], relation=e["relation"], weight=e["weight"], created_at=e["created_at"]
        )
        for e in new.get("relations") or []
    ]
    new["relations"] = merge_relations(old.get("relations"), own)
    new["links"] = sorted({e["dst"] for e in new["relations"]})
    return new


class Indexer:
    def __init__(
        self,
        *,
        store: MemoryStore,
        embedder: Embedder | None,
        bm25: Bm25Encoder,
        clock: Callable[[], datetime] = _now,
        perf: Callable[[], float] | None = None,
        context: ContextMode | None = None,
    ) -> None:
        import time

        self.store = store
        self.embedder = embedder
        self.bm25 = bm25
        self.runs = RunContext(store, bm25, context or ContextMode())
        self.clock = clock
        self.perf = perf or time.perf_counter

    @property
    def mode(self) -> str:
        return "vector" if self.embedder is not None else "sparse-only"

    def index_batch(self, records: list[EmbeddableRecord], *, defer_dense: bool = False) -> BatchResult:
        """Index one batch. `defer_dense`: write the new points with their BM25 vectors only (searchable
        now, event mode "sparse-only") and leave the dense vectors to `densify`, which runs when the model
        is free: the consumer asks for it when embedding inline would keep the batch invisible too long."""
        result = BatchResult()
        if not records:
            return result
        now = self.clock()
        indexed_at = iso(now)
        pids = [point_id(r.workspace_id, r.id) for r in records]
        keys = [dedup_key(r.workspace_id, r.agent_id, r.entry_type, r.summary) for r in records]
        existing = self.store.retrieve(sorted(set(pids)))

        by_ws: dict[str, list[int]] = {}
        for i, r in enumerate(records):
            if pids[i] not in existing:
                by_ws.setdefault(r.workspace_id, []).append(i)
        aliases: dict[tuple[str, str], str] = {}
        dups: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        for ws, idx in by_ws.items():
            for eid, pid in self.store.find_by_alias(ws, sorted({records[i].id for i in idx})).items():
                aliases[(ws, eid)] = pid
            found = self.store.find_by_dedup_keys(ws, sorted({keys[i] for i in idx}))
            for k, hit in found.items():
                dups[(ws, k)] = hit

        # Decide, in batch order, with in-batch state.
        pending: dict[str, tuple[EmbeddableRecord, dict[str, Any]]] = {}  # pid -> (record, payload)
        alias_updates: dict[str, dict[str, Any]] = {}  # pid -> payload fields to merge
        events: list[IndexedEvent] = []

        def event(rec: EmbeddableRecord, pid: str, mode: str, dup_of: str | None = None) -> None:
            events.append(
                IndexedEvent(
                    entry_id=rec.id,
                    workspace_id=rec.workspace_id,
                    point_id=pid,
                    indexed_at=now,
                    mode=mode,  # type: ignore[arg-type]
                    duplicate_of=dup_of,
                )
            )

        for i, rec in enumerate(records):
            pid, key, ws = pids[i], keys[i], rec.workspace_id
            if pid in pending:  # same id twice in one batch: the later version wins, counters kept
                _, payload = pending[pid]
                pending[pid] = (
                    rec,
                    _keep(payload, _payload(rec, indexed_at=payload["indexed_at"], model=None, key=key)),
                )
                continue
            if pid in existing:
                old = existing[pid]
                if old.get("summary") == rec.summary and old.get("entry_type") == rec.entry_type:
                    event(rec, pid, "vector" if old.get("has_dense") else "sparse-only")
                    continue
                new = _payload(rec, indexed_at=old.get("indexed_at") or indexed_at, model=None, key=key)
                pending[pid] = (rec, _keep(old, new))
                continue
            if (ws, rec.id) in aliases:
                target = aliases[(ws, rec.id)]
                owner = existing.get(target) or self.store.retrieve([target]).get(target, {})
                event(rec, target, "duplicate", owner.get("entry_id"))
                continue
            owner_pid: str | None = None
            owner_payload: dict[str, Any] | None = None
            if (ws, key) in dups:
                owner_pid, owner_payload = dups[(ws, key)]
                owner_payload = alias_updates.get(owner_pid) or owner_payload
            else:
                for p, (r, pl) in pending.items():
                    if pl["dedup_key"] == key and r.workspace_id == ws:
                        owner_pid, owner_payload = p, pl
                        break
            if owner_pid is not None and owner_payload is not None:
                al = list(owner_payload.get("aliases") or [])
                if rec.id not in al and rec.id != owner_payload.get("entry_id"):
                    al.append(rec.id)
                    occ = int(owner_payload.get("occurrences") or 1) + 1
                    if owner_pid in pending:
                        owner_payload["aliases"], owner_payload["occurrences"] = al, occ
                    else:
                        merged = dict(owner_payload)
                        merged["aliases"], merged["occurrences"] = al, occ
                        alias_updates[owner_pid] = merged
                event(rec, owner_pid, "duplicate", owner_payload.get("entry_id"))
                continue
            pending[pid] = (rec, _payload(rec, indexed_at=indexed_at, model=None, key=key))

        # Embed (one model call) and write (one upsert).
        points: list[MemoryPoint] = []
        if pending:
            items = list(pending.items())
            t0 = self.perf()
            plan = self.runs.plan([(pid, rec, payload) for pid, (rec, payload) in items], indexed_at)
            result.context_seconds = self.perf() - t0
            texts = [index_text(rec) for _, (rec, _) in items]
            dense: list[Any] | None = None
            result.chars = sum(len(t) for t in texts)
            if self.embedder is not None and defer_dense:
                result.deferred = len(texts)
            elif self.embedder is not None:
                t0 = self.perf()
                try:
                    dense = self.embedder.embed_documents(texts)
                except Exception:
                    log.exception("embedding failed for a batch of %d; indexing it sparse-only", len(texts))
                    result.embed_failed = True
                    dense = None
                result.embed_seconds = self.perf() - t0
                result.embedded = len(texts)
            for j, (pid, (_rec, payload)) in enumerate(items):
                vecs = dense[j].tolist() if dense is not None else None
                payload["model"] = self.embedder.model_id if vecs is not None and self.embedder else None
                payload["has_dense"] = vecs is not None
                sparse = self.bm25.document(texts[j])
                points.append(MemoryPoint(pid, sparse, payload, dense=vecs, context=plan.vectors.get(pid)))
            t0 = self.perf()
            self.runs.apply(plan)  # the neighbours' edges first: a crash in between loses none on re-delivery
            self.store.upsert(points)
            result.upsert_seconds = self.perf() - t0
            result.written = len(points)
            for pid, (rec, payload) in items:
                event(rec, pid, "vector" if payload["has_dense"] else "sparse-only")
        for pid, merged in alias_updates.items():
            self.store.set_payload(pid, {"aliases": merged["aliases"], "occurrences": merged["occurrences"]})
        # Events in input order: re-sort by the record order they were produced for.
        order = {(r.workspace_id, r.id): i for i, r in enumerate(records)}
        events.sort(key=lambda e: order.get((e.workspace_id, e.entry_id), 0))
        result.events = events
        return result

    def densify(self, limit: int = 32) -> BatchResult:
        """Add dense vectors to up to `limit` memories that lack them (indexed sparse-only, or with the
        vector deferred). The result has one `memory.indexed` event (mode "vector") per memory filled, so
        that the stages that need the vector learn it is there; no events when there was nothing to do."""
        result = BatchResult()
        if self.embedder is None:
            return result
        # Oldest first (the store scrolls in id order): look at a wider window, take the earliest indexed.
        window = self.store.missing_dense(max(limit, limit * DENSIFY_WINDOW))
        todo = sorted(window, key=lambda t: (str(t[1].get("indexed_at") or ""), str(t[1].get("ts") or "")))[:limit]
        if not todo:
            return result
        texts = [str(p.get("summary") or "") for _, p in todo]
        t0 = self.perf()
        vecs = self.embedder.embed_documents(texts)
        result.embed_seconds = self.perf() - t0
        result.embedded = len(texts)
        result.chars = sum(len(t) for t in texts)
        now = self.clock()
        events = result.events
        current = self.store.retrieve([pid for pid, _ in todo])
        for (pid, payload), v in zip(todo, vecs, strict=True):
            now_there = current.get(pid)
            if now_there is None or now_there.get("summary") != payload.get("summary") or now_there.get("has_dense"):
                continue  # replaced (or already embedded by the consumer) while the model ran: not this vector
            self.store.set_dense(pid, v.tolist(), {"has_dense": True, "model": self.embedder.model_id})
            events.append(
                IndexedEvent(
                    entry_id=str(payload.get("entry_id", "")),
                    workspace_id=str(payload.get("workspace_id", "")),
                    point_id=pid,
                    indexed_at=now,
                    mode="vector",
                )
            )
        result.written = len(events)
        return result
