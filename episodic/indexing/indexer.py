"""Turn a batch of embeddable records into memories (SPEC §5, §10 "Identity and duplicates").

Pure orchestration over the ports: one `embed_documents` call and one store upsert per batch. A batch is
read (`_read`: the records' points, the memories that absorbed their ids, the memories of their dedup keys),
decided (`episodic.indexing.decisions.decide`: one outcome per record, a pure function), then written
(`_plan`, `_write`, `_count`): what is written and counted follows from the decisions alone.

Size: over 400 lines: the read, the plan, the write with its embedding and its write discipline, and the
densify backfill that fills the vectors the write deferred; the decisions live in `decisions`.

- Point ids are uuid5(workspace_id, entry id): re-delivery of the same id is idempotent and never resets
  reference_count, last_referenced_at or importance; a changed summary under the same id replaces text
  and vectors and keeps those counters. Versions of one id are ordered by the entry's `ts`, then by the
  acceptance stamp (`accepted_at`, the gate's or the HTTP journal's clock, kept through re-delivery and
  replay): an older version never overwrites a newer one, whenever it comes back (counted `stale`).
- Exact duplicates (same workspace, agent, entry_type and normalised summary) keep one point: the first
  id stays `entry_id`, later ids go to `aliases` (the newest `alias_limit` of them, so that a repeated
  heartbeat cannot grow a point and every response without bound), `occurrences` counts every one of them
  (300 in one batch count 300), and the event says mode "duplicate" with `duplicate_of`. Every absorbed
  id is also kept in the state store for the forget horizon (`episodic.indexing.absorbed`): a re-delivered
  one changes nothing even after the alias list pushed it out, and a forget of the memory tombstones it.
- An entry id belongs to the agent that first wrote it (`episodic.indexing.ownership`): another agent's entry
  under it is left out, named in `BatchResult.refused` (the consumer dead-letters it as `id_taken`).
- No embedder, or `defer_dense`: points get only the sparse vector ("sparse-only"); `densify` adds the
  dense vectors later (the consumer's densify loop, which is also the backfill after sparse-only mode).
- Run context and adjacency (`episodic.indexing.context`): each new memory of a run is indexed with the
  agent's memories before it (a second BM25 vector over the context-folded text; `context` in its payload)
  and linked to its run neighbours by `previous` / `next` edges. Neither changes the summary nor the dense
  vector.

"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from episodic.domain.context_mode import ContextMode
from episodic.domain.folding import FOLD_ACROSS
from episodic.domain.identity import dedup_key, point_id, summary_digest
from episodic.domain.review import REVIEW_FIELDS
from episodic.domain.surprise import SURPRISE
from episodic.indexing import absorbed as absorbed_ids
from episodic.indexing.context import RunContext
from episodic.indexing.decisions import Decision, Known, Outcome, absorbed, decide, version_key
from episodic.kernel.errors import StoreError
from episodic.kernel.ports import (
    DENSE,
    REV,
    REVS,
    Change,
    Embedder,
    MemoryPoint,
    MemoryStore,
    Relation,
    StateStore,
    merge_relations,
)
from episodic.store.query import DENSIFY_FAILURES
from episodic.store.rules import model_field, vector_of_field
from episodic.store.sparse import Bm25Encoder
from schemas.events import EmbeddableRecord, IndexedEvent

if TYPE_CHECKING:
    from episodic.embedding.generations import ModelSwitch

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 8  # rounds of a batch's conditional writes before it fails (and comes back)
DEFAULT_ALIAS_LIMIT = 20  # alias ids kept per memory (the newest); `occurrences` counts them all
FINAL = (Outcome.TAKEN, Outcome.TOMBSTONED)  # decisions a lost write does not change (the record stays out)

# Kept by a new version of a memory (a changed summary under the same id), near-duplicate folds included,
# and the write discipline's history (a conditional writer whose write was read still finds its token).
COUNTER_FIELDS: tuple[str, ...] = ("reference_count", "last_referenced_at", "importance_score", "aliases")
COUNTER_FIELDS += ("occurrences", "indexed_at", "folded", "agents", "folded_into", REVS)  # folded: until re-linked
COUNTER_FIELDS += REVIEW_FIELDS  # the review state (issue 26): a new version keeps how it served
# What the linker wrote of a text (its similar edges are in `relations`, kept above): a version of the same text
# keeps them, one with another text is linked again (episodic.maintenance.linker, "Once").
LINKED_FIELDS: tuple[str, ...] = ("linked_at", SURPRISE, FOLD_ACROSS)


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
    failed: int = 0  # densify: memories whose text (or vector) failed this time
    stale: int = 0  # older versions (by ts, then acceptance stamp) of a memory: not written
    left_out: int = 0  # entries a forget covers (decided `tombstoned`): not indexed
    quarantined: list[str] = field(default_factory=list)  # densify: "workspace/entry" that reached the limit
    refused: list[tuple[EmbeddableRecord, str]] = field(default_factory=list)  # another agent's id: (entry, error)


@dataclass
class DensifyRound:
    """One densify round: the memories picked (point id, payload), the model and vector they are for, and
    once embedded, their vectors (or per text the exception the model raised)."""

    embedder: Embedder
    vector: str
    todo: list[tuple[str, dict[str, Any]]]
    vectors: list[Any] = field(default_factory=list)
    embed_seconds: float = 0.0

    @property
    def texts(self) -> list[str]:
        return [str(p.get("summary") or "") for _, p in self.todo]

    @property
    def chars(self) -> int:
        return sum(len(t) for t in self.texts)

    @property
    def point_ids(self) -> frozenset[str]:
        return frozenset(pid for pid, _ in self.todo)


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


memory_payload = _payload  # the payload of a new memory (also what `episodic import` writes, counters aside)


def _keep(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A new version of a memory keeps the old one's counters and edges (and adds its own edges); one of the
    same text (a re-delivery accepted again, later: the same version by the agent's clock, or the same text at a
    newer `ts`) also keeps what the linker decided of that text, so it is not linked again."""
    same_text = old.get("summary") == new.get("summary") and old.get("entry_type") == new.get("entry_type")
    for f in COUNTER_FIELDS + (LINKED_FIELDS if same_text else ()):
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
        alias_limit: int = DEFAULT_ALIAS_LIMIT,
        switch: ModelSwitch | None = None,
        state: StateStore | None = None,
    ) -> None:
        import time

        if alias_limit < 0:
            raise ValueError(f"alias_limit must be >= 0, got {alias_limit}")
        self.alias_limit = alias_limit
        self.store = store
        # where the ids each memory absorbed are kept (episodic.indexing.absorbed); None: the alias list only
        self.state = state
        self._pruned: str | None = None  # the UTC day absorbed ids were last pruned
        self.embedder = embedder
        # With a switch, documents are embedded by the active embedding generation's model and written to
        # its vector (episodic.embedding.generations); `embedder` is then unused.
        self.switch = switch
        self.bm25 = bm25
        self.runs = RunContext(store, bm25, context or ContextMode())
        self.clock = clock
        self.perf = perf or time.perf_counter

    @property
    def mode(self) -> str:
        return "vector" if self._model()[0] is not None else "sparse-only"

    def _prune(self, now: datetime) -> None:
        """Once a UTC day: the absorbed ids past the horizon go."""
        day = now.date().isoformat()
        if self.state is not None and self._pruned != day:
            absorbed_ids.prune(self.state, now)
            self._pruned = day

    def _model(self) -> tuple[Embedder | None, str]:
        """The document embedder and the named vector its rows go to."""
        if self.switch is None:
            return self.embedder, DENSE
        gen, embedder = self.switch.current()
        return embedder, gen.vector

    def index_batch(
        self,
        records: list[EmbeddableRecord],
        *,
        defer_dense: bool = False,
        forgotten: Collection[int] = (),
        _attempt: int = 1,
    ) -> BatchResult:
        """Index one batch: read what the store holds about its records, decide each one
        (`episodic.indexing.decisions.decide`), then write what the decisions say. `forgotten`: the positions
        of the records a forget covers (`Forgetter.admit`): decided `tombstoned`, counted in `left_out`.
        `defer_dense`: write the new points with their BM25 vectors only (searchable now, event mode
        "sparse-only") and leave the dense vectors to `densify`, which runs when the model is free: the
        consumer asks for it when embedding inline would keep the batch invisible too long.

        Writes follow the store's write discipline: a point is written whole only while it is still at the
        revision this batch read (or still absent), so a reference count, an edge or an alias another writer
        gave it meanwhile is never lost; the records whose memory changed in between are decided again from
        a fresh read (up to `WRITE_ATTEMPTS` rounds, then StoreError: the batch is not committed and comes
        back)."""
        result = BatchResult()
        if not records:
            return result
        now = self.clock()
        self._prune(now)
        known, existing = self._read(records, set(forgotten))
        decisions = decide(records, known)
        pending, moved = self._plan(records, decisions, known, iso(now))
        lost = self._write(result, pending, moved, existing, iso(now), defer_dense=defer_dense)
        pairs = list(zip(records, decisions, strict=True))
        self._count(result, [(r, d) for r, d in pairs if d.point_id not in lost or d.outcome in FINAL], pending,
                    existing, now)  # fmt: skip
        if lost:
            if _attempt >= WRITE_ATTEMPTS:
                raise StoreError(f"indexer: {len(lost)} memories kept changing under {_attempt} writes")
            log.info("indexer: %d memories changed since this batch read them; indexing them again", len(lost))
            again = [r for r, d in pairs if d.point_id in lost and d.outcome not in FINAL]
            merge_into(result, self.index_batch(again, defer_dense=defer_dense, _attempt=_attempt + 1))
        # Events in input order: re-sort by the record order they were produced for.
        order = {(r.workspace_id, r.id): i for i, r in enumerate(records)}
        result.events.sort(key=lambda e: order.get((e.workspace_id, e.entry_id), 0))
        return result

    # -- read ---------------------------------------------------------------------------------------------------
    def _read(
        self, records: list[EmbeddableRecord], forgotten: set[int]
    ) -> tuple[list[Known], dict[str, dict[str, Any]]]:
        """What the store (and the state store's absorbed ids) hold about each record: its point, the memory
        that absorbed its id, a memory of its dedup key. Also the stored points by point id."""
        pids = [point_id(r.workspace_id, r.id) for r in records]
        existing = self.store.retrieve(sorted(set(pids)))
        by_ws: dict[str, list[int]] = {}
        for i, r in enumerate(records):
            if i not in forgotten and pids[i] not in existing:
                by_ws.setdefault(r.workspace_id, []).append(i)
        held: dict[tuple[str, str], str] = {}  # (ws, entry id) -> point id of the memory that absorbed it
        twins: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        for ws, idx in by_ws.items():
            ids = sorted({records[i].id for i in idx})
            held.update({(ws, eid): pid for eid, pid in self.store.find_by_alias(ws, ids).items()})
            if self.state is not None:
                rest = [e for e in ids if (ws, e) not in held]
                found = absorbed_ids.holders(self.state, ws, rest)
                held.update({(ws, e): point_id(ws, owner) for e, owner in found.items()})
            keys = sorted({dedup_key(ws, records[i].agent_id, records[i].entry_type, records[i].summary) for i in idx})
            twins.update({(ws, k): hit for k, hit in self.store.find_by_dedup_keys(ws, keys).items()})
        missing = sorted({pid for pid in held.values() if pid not in existing})
        holders = {**existing, **(self.store.retrieve(missing) if missing else {})}
        known = []
        for i, r in enumerate(records):
            holder = held.get((r.workspace_id, r.id))
            twin = twins.get((r.workspace_id, dedup_key(r.workspace_id, r.agent_id, r.entry_type, r.summary)))
            known.append(
                Known(
                    stored=existing.get(pids[i]),
                    holder=(holder, holders[holder]) if holder in holders else None,
                    twin=twin,
                    forgotten=i in forgotten,
                )
            )
        return known, existing

    # -- plan: the payloads the decisions write -------------------------------------------------------------------
    def _plan(
        self, records: list[EmbeddableRecord], decisions: list[Decision], known: list[Known], indexed_at: str
    ) -> tuple[dict[str, tuple[EmbeddableRecord, dict[str, Any]]], set[str]]:
        """pid -> (record, payload) of the points to write (new memories, newer versions with the counters
        they keep, and the duplicates new memories absorb), and the new versions that leave their place in
        their run (another `ts` or `run_id`: their old neighbours are joined)."""
        pending: dict[str, tuple[EmbeddableRecord, dict[str, Any]]] = {}
        moved: set[str] = set()
        for rec, d, k in zip(records, decisions, known, strict=True):
            key = dedup_key(rec.workspace_id, rec.agent_id, rec.entry_type, rec.summary)
            if d.outcome is Outcome.NEW:
                pending[d.point_id] = (rec, _payload(rec, indexed_at=indexed_at, model=None, key=key))
            elif d.outcome is Outcome.NEWER and d.after is not None:  # the batch's earlier version: counters kept
                payload = pending[d.point_id][1]
                new = _payload(rec, indexed_at=payload["indexed_at"], model=None, key=key)
                pending[d.point_id] = (rec, _keep(payload, new))
            elif d.outcome is Outcome.NEWER:
                old = dict(k.stored or {})
                new = _payload(rec, indexed_at=old.get("indexed_at") or indexed_at, model=None, key=key)
                pending[d.point_id] = (rec, _keep(old, new))
                if old.get("run_id") != rec.run_id or old.get("ts") != new.get("ts"):
                    moved.add(d.point_id)  # it leaves its place in its run: its old neighbours are joined
        for pid, ids in absorbed(records, decisions).items():
            if pid in pending:
                pending[pid][1].update(self._with_duplicates(pending[pid][1], ids) or {})
        return pending, moved

    def _with_duplicates(self, payload: dict[str, Any], ids: list[str]) -> dict[str, Any] | None:
        """The alias fields of a memory (`payload` as read) that absorbs the duplicates `ids`: every one counted
        in `occurrences`, the newest `alias_limit` kept in `aliases`. Ids it holds already count no more (a
        re-delivery after a crash between this write and the next); None when nothing changes."""
        al = [str(a) for a in payload.get("aliases") or []]
        new = [a for a in dict.fromkeys(ids) if a not in al and a != payload.get("entry_id")]
        if not new:
            return None
        kept = (al + new)[-self.alias_limit :] if self.alias_limit else []
        return {"aliases": kept, "occurrences": int(payload.get("occurrences") or 1) + len(new)}

    # -- write --------------------------------------------------------------------------------------------------
    def _write(
        self,
        result: BatchResult,
        pending: dict[str, tuple[EmbeddableRecord, dict[str, Any]]],
        moved: set[str],
        existing: dict[str, dict[str, Any]],
        indexed_at: str,
        *,
        defer_dense: bool,
    ) -> set[str]:
        """Embed the points to write (one model call) and write them (one conditional upsert, the run
        neighbours' edges first). Returns the point ids whose write was lost to another writer."""
        if not pending:
            return set()
        embedder, vector = self._model()
        items = list(pending.items())
        t0 = self.perf()
        plan = self.runs.plan([(pid, rec, payload) for pid, (rec, payload) in items], indexed_at, moved)
        result.context_seconds = self.perf() - t0
        texts = [index_text(rec) for _, (rec, _) in items]
        dense: list[Any] | None = None
        result.chars = sum(len(t) for t in texts)
        if embedder is not None and defer_dense:
            result.deferred = len(texts)
        elif embedder is not None:
            t0 = self.perf()
            try:
                dense = embedder.embed_documents(texts)
            except Exception:
                log.exception("embedding failed for a batch of %d; indexing it sparse-only", len(texts))
                result.embed_failed = True
                dense = None
            result.embed_seconds = self.perf() - t0
            result.embedded = len(texts)
        points: list[MemoryPoint] = []
        for j, (pid, (_rec, payload)) in enumerate(items):
            vecs = dense[j].tolist() if dense is not None else None
            payload[model_field(vector)] = embedder.model_id if vecs is not None and embedder else None
            if vecs is not None:  # what the vector was made from (the invariant check reads it)
                payload[vector_of_field(vector)] = summary_digest(texts[j])
            payload["has_dense"] = vecs is not None
            sparse = self.bm25.document(texts[j])
            points.append(MemoryPoint(pid, sparse, payload, dense=vecs, vector=vector, context=plan.vectors.get(pid)))
        t0 = self.perf()
        self.runs.apply(plan, indexed_at)  # the neighbours' edges first: a crash in between loses none on re-delivery
        expect = {pid: (existing.get(pid) or {}).get(REV) for pid, _ in items}
        lost = set(self.store.upsert_if(points, expect, writer="indexer"))
        result.upsert_seconds = self.perf() - t0
        result.written = len(points) - len(lost)
        return lost

    def _count(
        self,
        result: BatchResult,
        final: list[tuple[EmbeddableRecord, Decision]],
        pending: dict[str, tuple[EmbeddableRecord, dict[str, Any]]],
        existing: dict[str, dict[str, Any]],
        now: datetime,
    ) -> None:
        """What the decisions that stand (those not lost to another writer) count and announce: the events,
        stale versions, refusals and entries left out; then the duplicates that stored memories absorb, and
        every absorbed id in the state store (`episodic.indexing.absorbed`)."""
        to_stored: dict[str, list[str]] = {}  # point id of a stored memory -> the duplicates it absorbs
        groups: dict[str, dict[str, list[str]]] = {}  # workspace -> owner entry id -> absorbed ids
        agents: dict[str, dict[str, str]] = {}  # workspace -> owner entry id -> its agent
        for rec, d in final:
            o, pid = d.outcome, d.point_id
            if o is Outcome.TOMBSTONED:
                result.left_out += 1
            elif o is Outcome.TAKEN:
                result.refused.append((rec, d.error or ""))
            elif o in (Outcome.ALIAS, Outcome.DUPLICATE):
                self._event(result, rec, pid, "duplicate", now, d.owner)
            elif o in (Outcome.NEW, Outcome.NEWER) and pending[pid][0] is rec:  # the last version written there
                self._event(result, rec, pid, "vector" if pending[pid][1]["has_dense"] else "sparse-only", now)
            elif o in (Outcome.SAME, Outcome.STALE) and d.after is None:  # the memory stays as stored
                self._event(result, rec, pid, "vector" if existing[pid].get("has_dense") else "sparse-only", now)
            if o is Outcome.STALE:
                result.stale += 1
                log.info("indexer: %s/%s is older than the version it follows (by ts, then acceptance); not written",
                         rec.workspace_id, rec.id)  # fmt: skip
            if o is Outcome.DUPLICATE:
                groups.setdefault(rec.workspace_id, {}).setdefault(str(d.owner), []).append(rec.id)
                agents.setdefault(rec.workspace_id, {})[str(d.owner)] = rec.agent_id
                if pid not in pending:
                    to_stored.setdefault(pid, []).append(rec.id)
        self._absorb(to_stored)
        if self.state is not None:
            for ws, ids in groups.items():
                absorbed_ids.record(self.state, ws, ids, agents[ws], now)

    @staticmethod
    def _event(
        result: BatchResult, rec: EmbeddableRecord, pid: str, mode: str, now: datetime, dup_of: str | None = None
    ) -> None:
        result.events.append(
            IndexedEvent(
                entry_id=rec.id,
                workspace_id=rec.workspace_id,
                point_id=pid,
                indexed_at=now,
                mode=mode,  # type: ignore[arg-type]
                duplicate_of=dup_of,
            )
        )

    def _absorb(self, duplicates: dict[str, list[str]]) -> None:
        """The batch's duplicates into their stored owners' `aliases` and `occurrences`, under the write
        discipline: each owner as it is at the write (another batch or an import may have added its own ids)."""
        if not duplicates:
            return

        def change(pid: str, payload: dict[str, Any]) -> Change | None:
            fields = self._with_duplicates(payload, duplicates[pid])
            return Change(fields) if fields else None

        fields = ("entry_id", "aliases", "occurrences")
        self.store.update_memories(sorted(duplicates), change, writer="aliases", fields=fields)

    def densify(self, limit: int = 32, *, quarantine_after: int | None = None) -> BatchResult:
        """Add dense vectors to up to `limit` memories that lack them (indexed sparse-only, or with the
        vector deferred), oldest first. The result has one `memory.indexed` event (mode "vector") per
        memory filled, so that the stages that need the vector learn it is there.

        A text the model (or the store) fails on must not stall the others: when the batch's model call
        fails, each text is embedded alone, and each one that still fails gets its `densify_failures`
        counted in its payload (so the count survives restarts); at `quarantine_after` failures it leaves
        the backfill (`missing_dense` skips it) and `result.quarantined` names it.

        The same in three steps (`densify_pick`, `densify_embed`, `densify_write`) lets the densify loop
        embed one round while the previous round's vectors are written."""
        work = self.densify_pick(limit, quarantine_after=quarantine_after)
        if work is None:
            return BatchResult()
        self.densify_embed(work)
        return self.densify_write(work, quarantine_after=quarantine_after)

    def densify_pick(
        self, limit: int, *, quarantine_after: int | None = None, skip: Collection[str] = ()
    ) -> DensifyRound | None:
        """Up to `limit` memories without a dense vector, oldest first, leaving out the point ids `skip`
        (a round being written); None without a model or with nothing to do."""
        embedder, vector = self._model()
        if embedder is None or limit <= 0:
            return None
        found = self.store.missing_dense(limit + len(skip), quarantine_after=quarantine_after)
        todo = [(pid, p) for pid, p in found if pid not in skip][:limit]
        return DensifyRound(embedder, vector, todo) if todo else None

    def densify_embed(self, work: DensifyRound) -> None:
        """The round's vectors (or, per text, the exception the model raised on it)."""
        t0 = self.perf()
        work.vectors = embed_each_on_failure(work.embedder, work.texts, what="densify")
        work.embed_seconds = self.perf() - t0

    def densify_write(self, work: DensifyRound, *, quarantine_after: int | None = None) -> BatchResult:
        """Write the round's vectors: each only to a memory that still has the summary it was computed
        from and no vector yet; one event per memory filled."""
        result = BatchResult(embedded=len(work.todo), embed_seconds=work.embed_seconds, chars=work.chars)
        vector, model_id = work.vector, work.embedder.model_id
        now = self.clock()
        # Whether a memory got its vector meanwhile is asked of the vector itself (the payload's `has_dense`
        # may describe another embedding generation's vector).
        named: dict[str, Any] = {} if self.switch is None else {"vector": vector}
        current = self.store.fetch([pid for pid, _ in work.todo], with_dense=True, using=named.get("vector"))
        rows: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # point id -> (payload embedded, its vector)
        for (pid, payload), v in zip(work.todo, work.vectors, strict=True):
            now_there = current.get(pid)
            if now_there is None or now_there.payload.get("summary") != payload.get("summary") or now_there.dense:
                continue  # replaced (or already embedded by the consumer) while the model ran: not this vector
            if isinstance(v, BaseException):
                self._densify_failed(result, pid, payload, v, quarantine_after)
                continue
            rows[pid] = (payload, {vector: v.tolist()})
        fields = {"has_dense": True, model_field(vector): model_id}

        def change(pid: str, now_read: dict[str, Any]) -> Change | None:
            # the vector of this summary only: one replaced since the model ran gets its own vector
            payload, vecs = rows[pid]
            return Change(fields, vectors=vecs) if now_read.get("summary") == payload.get("summary") else None

        applied: list[str] = []
        try:  # one read-modify-write for the round
            applied = self.store.update_memories(list(rows), change, writer="densify", fields=("summary",)).applied
        except StoreError:  # a vector is refused: find it (StoreUnavailable propagates: retried later)
            for pid in rows:
                try:
                    applied += self.store.update_memories([pid], change, writer="densify", fields=("summary",)).applied
                except StoreError as e:
                    self._densify_failed(result, pid, rows[pid][0], e, quarantine_after)
        done = set(applied)
        for pid, payload in work.todo:
            if pid in done:
                result.events.append(
                    IndexedEvent(
                        entry_id=str(payload.get("entry_id", "")),
                        workspace_id=str(payload.get("workspace_id", "")),
                        point_id=pid,
                        indexed_at=now,
                        mode="vector",
                    )
                )
        result.written = len(result.events)
        return result

    def _densify_failed(
        self, result: BatchResult, pid: str, payload: dict[str, Any], error: BaseException, after: int | None
    ) -> None:
        failures = int(payload.get(DENSIFY_FAILURES) or 0) + 1
        result.failed += 1
        self.store.set_payload(
            pid, {DENSIFY_FAILURES: failures, "densify_error": f"{type(error).__name__}: {error}"[:300]}
        )
        where = f"{payload.get('workspace_id')}/{payload.get('entry_id')}"
        if after is not None and failures >= after:
            result.quarantined.append(where)
            log.error("densify: %s failed %d times (%s); quarantined, it stays BM25-only", where, failures, error)
        else:
            log.warning("densify: %s failed (%d so far): %s", where, failures, error)


def _vector_of(
    summary: Any, fields: dict[str, Any], rows: dict[str, list[list[float]]]
) -> Callable[[str, dict[str, Any]], Change | None]:
    """The write of dense `rows` (and `fields`) made for `summary`: nothing when the memory's summary is another."""

    made_from = {vector_of_field(name): summary_digest(str(summary)) for name in rows}

    def change(_pid: str, payload: dict[str, Any]) -> Change | None:
        return Change({**fields, **made_from}, vectors=rows) if payload.get("summary") == summary else None

    return change


def older_version(rec: EmbeddableRecord, stored: dict[str, Any]) -> bool:
    """Whether `rec` is an older version of the stored memory (`episodic.indexing.decisions.version_key`: the
    entry's `ts`, then the acceptance stamp; a memory without a readable `ts` is older)."""
    return version_key(rec) < version_key(stored)


def merge_into(into: BatchResult, other: BatchResult) -> None:
    """Add another round's result: the records whose memory changed under the first write, or the other half
    of a batch the consumer split."""
    into.embedded += other.embedded
    into.written += other.written
    into.embed_seconds += other.embed_seconds
    into.upsert_seconds += other.upsert_seconds
    into.context_seconds += other.context_seconds
    into.embed_failed = into.embed_failed or other.embed_failed
    into.deferred += other.deferred
    into.chars += other.chars
    into.stale += other.stale
    into.left_out += other.left_out
    into.events += other.events
    into.refused += other.refused


def embed_each_on_failure(embedder: Embedder, texts: list[str], *, what: str) -> list[Any]:
    """One model call for the batch; if it fails, one call per text: a vector or the exception, per text."""
    try:
        return list(embedder.embed_documents(texts))
    except Exception as e:
        log.warning("%s: embedding a batch of %d failed (%s); embedding them one by one", what, len(texts), e)
    out: list[Any] = []
    for t in texts:
        try:
            out.append(embedder.embed_documents([t])[0])
        except Exception as e:
            out.append(e)
    return out
