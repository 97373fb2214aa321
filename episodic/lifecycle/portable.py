"""Taking memories out and putting them back (`episodic export`, `episodic import`), over the store port.

**Export** writes every memory of a workspace, newest first (the store's stable page order), as one line of
`schemas.portable`: the journal entry plus a `memory` object with importance, counters, aliases, relations
(the memory's outgoing edges; the incoming ones are on the memories they start from), the dense vectors
and the model that made them.

**Import** checks the whole file before it writes anything: a line that is not a valid journal entry (the
gate's own parser) with a valid `memory` object stops the import with every bad line's number and field,
and nothing is written. Then, batch by batch:

- a memory whose id (or whose entry, by its agent, run or workspace) a forget of the target removed stays
  forgotten: the target's tombstones and forget rules (`episodic.lifecycle.forget.Forgetter.admit`) leave it out, and
  its aliases that a forget removed, and edges to memories left out, are dropped;
- the dense vectors are carried over when the target's model made them and cut the text the same way (same
  model id, size and `pieces` key; a file without `pieces` was cut into windows of unrecorded sizes, which
  are carried only into a store whose window sizes were not recorded either), else the
  text is embedded again with the target's model; without a model the memory is written BM25-only and the
  stack's backfill adds the vector when a model is there; BM25 vectors are always computed again (they are
  a function of the text), the context vector too: from the run context the memory was indexed with (its
  `context` lines and `context_date`, carried in `extra`), the same folded text the indexer made
  (`episodic.indexing.context`). A memory indexed without context, or a target collection without the context
  vector, gets none (recall still finds it by its other legs);
- a memory of the same workspace and id already in the target is replaced (so importing a file again
  changes nothing); memories of other ids are not touched.

A store failure half-way raises `ImportFailed` saying how many memories were written: importing the same
file again finishes the job (the writes are idempotent).

Size: a little over 400 lines: export, the checks of an import and its writes (forgets, versions, the
write discipline) are one format read top to bottom here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from episodic.domain.chunking import LEGACY
from episodic.domain.identity import dedup_key, point_id, summary_digest
from episodic.domain.review import state_of
from episodic.embedding.generations import Generation, model_key
from episodic.indexing.context import cut_out, folded_text, shown_context
from episodic.indexing.folding import FOLDED_INTO, folded_entries, owner_fields
from episodic.indexing.indexer import WRITE_ATTEMPTS, iso, memory_payload, older_version
from episodic.kernel.errors import EpisodicError
from episodic.kernel.ports import DENSE, REV, REVS, Embedder, MemoryPoint, MemoryStore, Selection, SparseVec, StateStore
from episodic.lifecycle.forget import TOMBSTONE, Forgetter, tombstone_key
from episodic.store.rules import is_pieces_field, model_field, vector_of_field
from episodic.store.sparse import Bm25Encoder
from schemas.events import EmbeddableRecord
from schemas.journal import InvalidEntry, JournalEntry, parse_entry
from schemas.portable import EXPORT_VERSION, ExportedMemory, parse_memory

PAGE = 100  # memories read per store page on export
BATCH = 64  # memories written per upsert on import
MAX_REPORTED = 20  # bad lines named in an import error
ENTRY_FIELDS = tuple(JournalEntry.__struct_fields__)
MEMORY_FIELDS = tuple(f for f in ExportedMemory.__struct_fields__ if f not in ("v", "dense", "extra"))
# payload fields that are neither the entry nor the memory object: derived again on import
DERIVED = ("entry_id", "has_dense", "dedup_key", "links", "relations")


# -- export -------------------------------------------------------------------------------------------------


def export_line(
    payload: dict[str, Any], dense: list[list[float]] | None, vector: str = DENSE, pieces: str | None = None
) -> dict[str, Any]:
    """One memory as an export line (a JSON object); `dense` are the rows of the store's active vector
    `vector` (an embedding generation, episodic.embedding.generations), whose model the payload records and whose
    cut is `pieces` (the generation's)."""
    entry = {name: payload.get(name) for name in ENTRY_FIELDS}
    entry["id"] = payload.get("entry_id")
    memory: dict[str, Any] = {"v": EXPORT_VERSION}
    memory.update({name: payload.get(name) for name in MEMORY_FIELDS})
    memory["reference_count"] = int(memory.get("reference_count") or 0)
    memory.update(state_of(payload).fields())  # the review state, normalised (never reviewed: zeros and nulls)
    memory["occurrences"] = int(memory.get("occurrences") or 1)
    memory["aliases"] = list(memory.get("aliases") or [])
    memory["relations"] = [
        {k: e.get(k) for k in ("dst", "relation", "weight", "created_at")}
        for e in payload.get("relations") or []
        if isinstance(e, dict)
    ]
    has_dense = dense is not None and (payload.get("has_dense") is True or vector != DENSE)
    memory["model"] = payload.get(model_field(vector)) if has_dense else None
    memory["pieces"] = pieces if has_dense else None
    memory["dense"] = dense if has_dense else None
    known = {*ENTRY_FIELDS, *MEMORY_FIELDS, *DERIVED}
    # `model@<vector>`: which model made another generation's vector; `pieces*`: how many rows a vector has
    # (the store writes it with the rows): both derived again on import
    memory["extra"] = {
        k: v for k, v in payload.items() if k not in known and not k.startswith("model@") and not is_pieces_field(k)
    }
    return {**{k: v for k, v in entry.items() if v is not None}, "memory": memory}


def export_workspace(store: MemoryStore, workspace_id: str, *, pieces: str | None = None) -> Iterator[bytes]:
    """Every memory of the workspace as export lines (JSON, no newline), newest first. `pieces`: how the
    active generation cut its rows (`generations.follow_active`), written beside them so an import can tell."""
    selection = Selection(workspace_id=workspace_id)
    vector = getattr(store, "vector", DENSE)  # the active embedding generation (QdrantStore)
    after = None
    while True:
        rows, after = store.page(selection, after, PAGE)
        hits = store.fetch([pid for pid, _ in rows], with_dense=True, using=vector)
        for pid, payload in rows:
            hit = hits.get(pid)
            line = export_line(payload, hit.dense if hit is not None else None, vector, pieces)
            yield json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode()
        if after is None:
            return


# -- import -------------------------------------------------------------------------------------------------


class BadExport(ValueError):
    """Lines of an import file that are not export lines; nothing was imported."""

    def __init__(self, problems: list[tuple[int, str]], total_bad: int) -> None:
        self.problems, self.total_bad = problems, total_bad
        shown = "\n".join(f"  line {n}: {why}" for n, why in problems)
        more = f"\n  ... and {total_bad - len(problems)} more" if total_bad > len(problems) else ""
        super().__init__(f"{total_bad} bad line(s), nothing imported:\n{shown}{more}")


class ImportFailed(RuntimeError):
    """The store failed half-way; `written` memories were written (importing the file again is safe)."""

    def __init__(self, written: int, error: BaseException) -> None:
        super().__init__(
            f"the store failed after {written} memories were written ({type(error).__name__}: {error}); "
            "importing the same file again finishes the import (writes are idempotent)"
        )
        self.written = written


@dataclass(frozen=True, slots=True)
class Imported:
    line: int
    entry: JournalEntry
    memory: ExportedMemory


def parse_line(raw: bytes) -> tuple[JournalEntry, ExportedMemory]:
    """One export line; ValueError naming the field."""
    try:
        entry = parse_entry(raw)
    except InvalidEntry as e:
        raise ValueError(f"{e.error} ({e.reason})") from None
    return entry, parse_memory(raw)


def read_export(lines: Iterable[bytes]) -> Iterator[Imported]:
    """The memories of an export file, in order; blank lines are skipped. Raises BadExport (after reading
    every line) when any line is bad: run it to the end once before writing anything."""
    problems: list[tuple[int, str]] = []
    bad = 0
    good: list[Imported] = []
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            entry, memory = parse_line(raw)
        except ValueError as e:
            bad += 1
            if len(problems) < MAX_REPORTED:
                problems.append((n, str(e)))
            continue
        if not bad:
            good.append(Imported(n, entry, memory))
        if len(good) >= BATCH:
            yield from good
            good = []
    if bad:
        raise BadExport(problems, bad)
    yield from good


def check_export(lines: Iterable[bytes]) -> int:
    """How many memories the file holds; BadExport when a line is bad."""
    return sum(1 for _ in read_export(lines))


@dataclass
class ImportReport:
    memories: int = 0  # lines read
    written: int = 0
    replaced: int = 0  # of those, memories the target had (same workspace and id)
    vectors_kept: int = 0
    embedded: int = 0
    sparse_only: int = 0
    forgotten: list[str] = field(default_factory=list)  # "workspace/entry" left out by the target's forgets
    aliases_dropped: int = 0
    workspaces: set[str] = field(default_factory=set)
    stale: list[str] = field(default_factory=list)  # "workspace/entry" the target holds a newer version of


def _record(item: Imported, now: datetime) -> EmbeddableRecord:
    accepted = _instant(item.memory.accepted_at) or now
    return EmbeddableRecord.from_entry(item.entry, base_importance=item.memory.base_importance, accepted_at=accepted)


def _instant(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


class Importer:
    """Writes checked export lines into a store (see the module doc)."""

    def __init__(
        self,
        *,
        store: MemoryStore,
        state: StateStore,
        embedder: Embedder | None,
        bm25: Bm25Encoder,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        generation: Generation | None = None,
        force: bool = False,
    ) -> None:
        """`generation`: the target's active generation (its model and pieces decide which rows are carried
        over; `embedder`, if any, must make it); None: the embedder's own (a store without generations).
        `force`: replace a memory even when the target holds a newer version of it (by ts, then acceptance stamp)."""
        self.force = force
        self.store, self.state, self.embedder, self.bm25, self.clock = store, state, embedder, bm25, clock
        # the generation the rows are written to: the target's, else the embedder's own
        self.target = generation or (Generation.made(DENSE, embedder) if embedder is not None else None)
        self.forgetter = Forgetter(store=store, state=state, clock=clock, bm25=bm25)

    def run(self, items: Iterable[Imported]) -> ImportReport:
        report = ImportReport()
        left: dict[str, list[dict[str, Any]]] = {}  # workspace -> the memories its forgets left out
        batch: list[Imported] = []
        for item in items:
            batch.append(item)
            if len(batch) >= BATCH:
                self._write(batch, report, left)
                batch = []
        self._write(batch, report, left)
        self._close_gaps(left)
        return report

    def _close_gaps(self, left: dict[str, list[dict[str, Any]]]) -> None:
        """After the last batch: no imported memory keeps an edge to one left out (a batch only knows its own
        left-outs), and a run's neighbours are joined across those gaps, as after a forget."""
        for ws, removed in left.items():
            cut_out(self.store, ws, removed)

    def _write(self, batch: list[Imported], report: ImportReport, left: dict[str, list[dict[str, Any]]]) -> None:
        if not batch:
            return
        now = self.clock()
        report.memories += len(batch)
        records = [_record(item, now) for item in batch]
        _, out = self.forgetter.admit(records)
        report.forgotten += [f"{r.workspace_id}/{r.id}" for r in out]
        gone = {(r.workspace_id, r.id) for r in out}
        for item, rec in zip(batch, records, strict=True):
            if (rec.workspace_id, rec.id) in gone:
                edges = [msgspec.to_builtins(r) for r in item.memory.relations]
                left.setdefault(rec.workspace_id, []).append({"entry_id": rec.id, "relations": edges})
        todo = [(item, rec) for item, rec in zip(batch, records, strict=True) if (rec.workspace_id, rec.id) not in gone]
        if not todo:
            return
        dead_aliases = self._tombstoned_aliases([item for item, _ in todo])
        vectors = self._vectors([item for item, _ in todo], report)
        points = []
        vector = getattr(self.store, "vector", DENSE)  # the target's active embedding generation (QdrantStore)
        for (item, rec), dense in zip(todo, vectors, strict=True):
            ws = rec.workspace_id
            report.workspaces.add(ws)
            payload = self._payload(item, rec, dense is not None, gone | dead_aliases, report)
            if vector != DENSE:  # the indexer's convention: the model of a later generation's vector
                payload[model_field(vector)] = payload.pop("model", None)
            if dense is not None:  # the rows are those of this summary (carried over or embedded again)
                payload[vector_of_field(vector)] = summary_digest(rec.summary)
            points.append(
                MemoryPoint(
                    point_id=point_id(ws, rec.id),
                    sparse=self.bm25.document(rec.summary),
                    payload=payload,
                    dense=dense,
                    vector=vector,
                    context=self._context(payload, rec.summary),
                )
            )
        fields = ("entry_id", REV, REVS, "ts", "accepted_at")
        existing = self.store.retrieve([p.point_id for p in points], fields=fields)
        if not self.force:  # an older version (by ts, then acceptance stamp) never replaces a newer one unless forced
            accepted = {point_id(rec.workspace_id, rec.id): rec for _, rec in todo}
            newer = {
                p.point_id
                for p in points
                if p.point_id in existing and older_version(accepted[p.point_id], existing[p.point_id])
            }
            report.stale += [f"{accepted[pid].workspace_id}/{accepted[pid].id}" for pid in sorted(newer)]
            points = [p for p in points if p.point_id not in newer]
        replaced = set(existing) & {p.point_id for p in points}
        try:  # an imported memory replaces the stored one whole, as it is at the write (the write discipline)
            todo_points, attempts = points, 0
            while todo_points:
                attempts += 1
                expect = {p.point_id: (existing.get(p.point_id) or {}).get(REV) for p in todo_points}
                for p in todo_points:  # the write discipline's history of the memory it replaces
                    p.payload[REVS] = (existing.get(p.point_id) or {}).get(REVS)
                lost = set(self.store.upsert_if(todo_points, expect, writer="import"))
                if lost and attempts >= WRITE_ATTEMPTS:
                    raise EpisodicError(f"{len(lost)} memories kept changing under the import's writes")
                todo_points = [p for p in todo_points if p.point_id in lost]
                existing = self.store.retrieve(sorted(lost), fields=("entry_id", REV, REVS)) if lost else {}
                replaced |= set(existing)
        except Exception as e:
            raise ImportFailed(report.written, e) from e
        report.written += len(points)
        report.replaced += len(replaced)

    def _context(self, payload: dict[str, Any], summary: str) -> SparseVec | None:
        """The context vector, computed again from the context lines the memory was indexed with (None when
        it was indexed without context, or the target has no context vector: the store then drops the lines)."""
        lines = shown_context(payload.get("context"))
        if lines is None or not self.store.has_context:
            return None
        date = payload.get("context_date")
        return self.bm25.document(folded_text([c["text"] for c in lines], summary, str(date) if date else None))

    def _tombstoned_aliases(self, items: list[Imported]) -> set[tuple[str, str]]:
        keys = {
            tombstone_key(i.entry.workspace_id, a): (i.entry.workspace_id, a) for i in items for a in i.memory.aliases
        }
        return {keys[k] for k in self.state.get_many(TOMBSTONE, sorted(keys))} if keys else set()

    def _vectors(self, items: list[Imported], report: ImportReport) -> list[list[list[float]] | None]:
        """Each memory's dense rows: carried over when the target's model made them and cut them the same
        way, else embedded again (one model call for the batch), else None (BM25 only; the backfill embeds it
        later). The same way means the same pieces key: windows of sizes not recorded (`LEGACY`, and a file
        without `pieces`) are carried only into a store whose windows were not recorded either, since the
        sizes the two stores were configured with cannot be compared."""
        embedder, target = self.embedder, self.target
        out: list[list[list[float]] | None] = [None] * len(items)
        again: list[int] = []
        for i, item in enumerate(items):
            m = item.memory
            if (
                target is not None
                and m.dense is not None
                and m.model is not None
                and model_key(m.model) == model_key(target.model)
                and len(m.dense[0]) == target.dim
                and (m.pieces or LEGACY) == target.pieces
            ):
                out[i] = m.dense
                report.vectors_kept += 1
            elif embedder is not None:
                again.append(i)
            else:
                report.sparse_only += 1
        if again and embedder is not None:
            rows = embedder.embed_documents([items[i].entry.summary for i in again])
            for i, r in zip(again, rows, strict=True):
                out[i] = r.tolist()
            report.embedded += len(again)
        return out

    def _payload(
        self, item: Imported, rec: EmbeddableRecord, dense: bool, gone: set[tuple[str, str]], report: ImportReport
    ) -> dict[str, Any]:
        m, ws = item.memory, rec.workspace_id
        key = dedup_key(ws, rec.agent_id, rec.entry_type, rec.summary)
        model = self.target.model if dense and self.target is not None else None
        # the source's backfill state, and row counts (the store writes its own with the rows)
        extra = {k: v for k, v in m.extra.items() if not k.startswith("densify_") and not is_pieces_field(k)}
        payload = {**extra, **memory_payload(rec, indexed_at=m.indexed_at or iso(self.clock()), model=model, key=key)}
        aliases = [a for a in m.aliases if (ws, a) not in gone]
        report.aliases_dropped += len(m.aliases) - len(aliases)
        counters = {"reference_count": m.reference_count, "last_referenced_at": m.last_referenced_at,
                    "importance_score": m.importance_score if m.importance_score is not None else m.base_importance,
                    "aliases": aliases, "occurrences": m.occurrences,
                    "review_count": m.review_count, "review_ratings": dict(m.review_ratings),
                    "last_rating": m.last_rating, "last_reviewed_at": m.last_reviewed_at,
                    "stability": m.stability, "difficulty": m.difficulty}  # fmt: skip
        edges = [msgspec.to_builtins(r) for r in m.relations if (ws, r.dst) not in gone and r.dst != rec.id]
        payload.update(counters, relations=edges, links=sorted({e["dst"] for e in edges}))
        if m.accepted_at:
            payload["accepted_at"] = m.accepted_at
        return _folds_kept(payload, ws, gone)


def _folds_kept(payload: dict[str, Any], ws: str, gone: set[tuple[str, str]]) -> dict[str, Any]:
    """Near-duplicate folds (carried in `extra`) without the parts forgotten here: an owner drops the absorbed
    entries that are tombstoned, and an absorbed entry whose owner is tombstoned stands on its own again."""
    into = payload.get(FOLDED_INTO)
    if isinstance(into, str) and (ws, into) in gone:
        payload[FOLDED_INTO] = None
    parts = folded_entries(payload)
    kept = [e for e in parts if (ws, e["entry_id"]) not in gone]
    if len(kept) != len(parts):
        payload.update(owner_fields(payload, kept))
    return payload
