"""The memory store, written once over a thin engine backend (SPEC §6).

`QdrantStore` is the whole `MemoryStore`: input validation, the payload as stored, scopes and workspace
isolation, the query legs and their fusion, IDF over the request's workspace, the importance multiplier,
scrolls, finds, counts, relations (stored on the source memory) and hit conversion. It describes every
filter and query as engine-neutral values (`episodic.store.query`) and hands them to an `Engine`, which
does only what really differs between engines: the collection layout and payload indexes, the calls
themselves, lowering the descriptions into its library's types, and wrapping its errors in
`StoreError` / `StoreUnavailable`.

Engines: `episodic.store.edge` (Qdrant Edge, an in-process shard; `EdgeStore`) and
`episodic.store.qdrant_server` (qdrant-client against a server, or its local mode; `QdrantServerStore`). This
module imports neither; the composition root (`stack.stores.open_store`) picks one from the settings.

Embedding generations (episodic.embedding.generations): the collection may hold several named dense vectors, one
per model; `vector` is the active one (queries, "has a dense vector" filters, the densify backfill), a
query may name the one its query vector was made for, and the re-embed pass fills another one
(`set_vectors`, `without_vector`) before `use_dense_vector` switches to it.

Size: about 670 lines, because the whole store (its generations and the context vector included) is
written here once for both engines.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from abc import abstractmethod
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from episodic.domain.identity import point_id
from episodic.domain.runs import Turn, neighbour_lift, run_level
from episodic.kernel.errors import StoreError
from episodic.kernel.ports import (
    CONTEXT,
    DENSE,
    REV,
    REVS,
    Change,
    Fusion,
    LegRanking,
    MemoryPoint,
    MemoryStore,
    PagePosition,
    Relation,
    ScopeFilter,
    Selection,
    SimilarRequest,
    SparseVec,
    StoredHit,
    WriteReport,
    merge_relations,
    relations_payload,
)
from episodic.store.query import (
    DENSIFY_FIELDS,
    AtLeast,
    DatetimeRange,
    DenseLeg,
    Filter,
    HasDense,
    HasId,
    IsEmpty,
    Match,
    MatchAny,
    Query,
    RawScore,
    SparseLeg,
    Vocabulary,
    at_time,
    before_time,
    count_filter,
    dense_leg,
    hybrid_prefetch,
    in_workspace,
    lexical_factor,
    lexically_scaled,
    missing_dense_filter,
    nearest_filter,
    quarantined_filter,
    scope_filter,
    selection_filter,
    sparse_leg,
)
from episodic.store.rules import (
    PAYLOAD_INDEXES,
    IndexKind,
    dense_rows,
    float_rows,
    pieces_field,
    stored_point,
    validate_dense,
    validate_payload,
    validate_points,
    validate_sparse,
    validate_vector,
)

log = logging.getLogger(__name__)

# Candidates each leg fetches before the importance multiplier re-ranks them.
DEFAULT_PREFETCH = 100

SCROLL_PAGE = 256
WORKSPACES_LIMIT = 1_000_000


class Record(Protocol):
    """A point as both engines return it (their record types have these attributes)."""

    @property
    def id(self) -> Any: ...

    @property
    def payload(self) -> Mapping[str, Any] | None: ...

    @property
    def vector(self) -> Any: ...


class ScoredRecord(Record, Protocol):
    @property
    def score(self) -> float: ...


class Engine(Vocabulary):
    """What differs between engines. Every method wraps the engine's errors in StoreError (rejected)
    or StoreUnavailable (cannot be reached or opened). Filters and queries arrive engine-neutral; the
    engine lowers them with `store_query.Lowering(self)` (it is the Vocabulary)."""

    name: str  # MemoryStore.backend
    dense: str = DENSE  # the named dense vector whose rows reads `with_dense` return (the active generation)
    has_context: bool = False  # set by `ensure`: the collection has the `CONTEXT` sparse vector

    @abstractmethod
    def ensure(self, dim: int, indexes: Mapping[str, IndexKind], vector: str = DENSE) -> None:
        """Create or open the collection (multivector `vector` of `dim`, cosine, max-sim; sparse `bm25`
        and `bm25_context` with the IDF modifier), check its layout, and create the missing payload indexes.
        An existing collection may hold other dense vectors too (other embedding generations, `add_dense`).
        A collection created before `bm25_context` existed is opened as it is, with `has_context` false
        (the layout check: `vector` and `bm25` must be there; `bm25_context` may be missing)."""

    @abstractmethod
    def dense_vectors(self) -> dict[str, int]:
        """The collection's named dense vectors and their dims ({} when there is no collection yet)."""

    @abstractmethod
    def add_dense(self, name: str, dim: int) -> None:
        """Add the named dense multivector `name` of `dim` (cosine, max-sim) to the collection; no-op when
        it is there with that dim, StoreError with another."""

    @abstractmethod
    def drop_dense(self, name: str) -> None:
        """Remove the named dense vector (and its data) from the collection; no-op when absent."""

    @abstractmethod
    def set_vectors(self, name: str, rows: Mapping[str, list[list[float]]], fields: dict[str, Any]) -> int:
        """Write the named vector `name` of many points (point id -> rows) and merge `fields` into their
        payload, leaving their other vectors (the sparse ones included) as they are. Points that do not
        exist are skipped; returns how many were written."""

    @abstractmethod
    def upsert(self, points: Sequence[MemoryPoint], condition: Filter | None = None) -> None:
        """Write whole points, as given (validated, payload as stored, float rows). `condition`: an existing
        point is replaced only when it matches (a point that does not exist is inserted)."""

    @abstractmethod
    def set_vector_where(self, name: str, point_id: str, rows: list[list[float]], flt: Filter) -> None:
        """Replace the named dense rows of the point when it exists and matches `flt` (else nothing)."""

    @abstractmethod
    def set_context_where(self, point_id: str, context: SparseVec, flt: Filter) -> None:
        """Replace the context vector of the point when it exists and matches `flt` (else nothing)."""

    @abstractmethod
    def delete_where(self, flt: Filter) -> None:
        """Remove the points that match `flt` when the delete applies (one conditional write)."""

    @abstractmethod
    def set_payload(self, point_id: str, fields: dict[str, Any]) -> None:
        """Merge `fields` into an existing point's payload (StoreError when there is none)."""

    @abstractmethod
    def set_dense(self, point_id: str, rows: list[list[float]], fields: dict[str, Any], vector: str = DENSE) -> None:
        """Replace an existing point's dense rows (of the named vector `vector`) and merge `fields` into its
        payload, in one call."""

    @abstractmethod
    def set_context(self, point_id: str, context: SparseVec, fields: dict[str, Any]) -> None:
        """Replace an existing point's context vector and merge `fields` into its payload, in one call."""

    @abstractmethod
    def delete(self, point_ids: list[str]) -> None:
        """Remove the points (ids that do not exist are ignored)."""

    @abstractmethod
    def sibling(self, suffix: str) -> Engine:
        """An engine for the collection named after this one plus `_<suffix>`, on the same server or
        directory (and the same client, where the engine has one), not yet ensured."""

    @abstractmethod
    def retrieve(
        self,
        point_ids: list[str],
        with_dense: bool = False,
        fields: Sequence[str] | None = None,
        using: str | None = None,
    ) -> Sequence[Record]:
        """The points that exist, with payload (only `fields` when given), and with their dense rows (of the
        vector `using`, the active one by default) when `with_dense`."""

    @abstractmethod
    def scroll(
        self,
        flt: Filter | None,
        limit: int,
        offset: Any,
        with_dense: bool,
        fields: Sequence[str] | None = None,
        order_by: str | None = None,
        descending: bool = False,
        using: str | None = None,
    ) -> tuple[Sequence[Record], Any]:
        """One page of up to `limit` points from `offset` (None: the start; a point id: from that id on, in
        id order), and the next offset (None: done). `order_by`: by this payload field instead (it needs a
        range index; points without the field are left out; ties in no stated order), one page only
        (no offset, and the next offset is None). `fields`: only these payload fields."""

    @abstractmethod
    def set_payloads(self, updates: Mapping[str, dict[str, Any]]) -> int:
        """Merge different fields into many points in one call (point id -> fields). Points that do not
        exist (deleted meanwhile) are skipped; returns how many were written."""

    @abstractmethod
    def set_payload_where(self, flt: Filter, fields: dict[str, Any]) -> None:
        """Merge `fields` into the payload of the points that match `flt` when the write applies (one
        conditional write: a point changed meanwhile so that it no longer matches is left alone)."""

    def set_payloads_where(self, items: Sequence[tuple[Filter, dict[str, Any]]]) -> None:
        """Several conditional payload writes, in order, each as `set_payload_where` (engines override it to
        hold their write path once for all)."""
        for flt, fields in items:
            self.set_payload_where(flt, fields)

    # Writes one at a time in this process (Edge): `write_held` can read and write in one hold of the write path.
    holds_writes: bool = False

    def write_held(
        self,
        point_ids: list[str],
        fields: Sequence[str] | None,
        decide: Callable[[str, dict[str, Any] | None], dict[str, Any] | None],
    ) -> list[str]:
        """Engines with `holds_writes`: in one hold of the write path, read the points (only `fields`), ask
        `decide(point_id, payload)` (None: absent) for each in order, and merge the fields it returns into
        that point before the next is asked (None: nothing). No other write comes between a read and its
        write. Returns the point ids written. An exception from `decide` stops the rest and is raised as it
        is (what was written before it stays)."""
        raise NotImplementedError(f"{self.name} cannot hold its writes")

    def set_payloads_where_read(
        self, items: Sequence[tuple[Filter, dict[str, Any]]], point_ids: list[str], fields: Sequence[str]
    ) -> Sequence[Record]:
        """`set_payloads_where`, then the points `point_ids` read back (only `fields`). Engines that write one
        at a time in this process (Edge, local mode) read back in the same hold of their write path, so no
        other write comes between a write and the read that says whether it was applied: a writer that
        waited for the lock while others wrote more than `REVS_KEPT` times would otherwise find its token
        pushed out of `revs`, take its applied write for a conflict and apply it again (measured: 6 of 30
        runs of three racing writers counted an increment twice on a loaded machine)."""
        self.set_payloads_where(items)
        return self.retrieve(point_ids, fields=fields)

    def query_batch(self, queries: Sequence[Query]) -> list[Sequence[ScoredRecord]]:
        """Several queries at once, results in order (engines with a batch call override this)."""
        return [self.query(q) for q in queries]

    @abstractmethod
    def count(self, flt: Filter | None) -> int:
        """The exact number of points that match."""

    @abstractmethod
    def facet(self, key: str, flt: Filter | None, limit: int) -> dict[str, int]:
        """The values of the keyword-indexed field `key` among the points that match, with their exact counts
        (at most `limit` values)."""

    @abstractmethod
    def query(self, query: Query) -> Sequence[ScoredRecord]:
        """Run the query; records with payload (and the dense rows when `query.with_dense`), best first."""

    @abstractmethod
    def flush(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...


def _instant(record: Record) -> datetime:
    """A record's `ts` as an aware datetime (the engines order by the instant, not by the text)."""
    text = str((record.payload or {}).get("ts", ""))
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _newest_first(records: Iterable[Record]) -> list[Record]:
    """`ts` descending, then point id ascending (the order of a page)."""
    by_id = sorted(records, key=lambda r: str(r.id))
    return sorted(by_id, key=_instant, reverse=True)  # stable: ids stay ascending within an instant


def _hit(record: Record, score: float, with_dense: bool, vector: str = DENSE) -> StoredHit:
    dense = dense_rows(record.vector, vector) if with_dense else None
    return StoredHit(
        point_id=str(record.id),
        score=score,
        payload=dict(record.payload or {}),
        dense=dense,
        vector=vector if dense is not None else None,
    )


# -- the write discipline (the field ownership table is in episodic.store's docstring) -----------------

DEFAULT_ATTEMPTS = 16  # a conditional writer's reads and writes of one memory before it gives up
BACKOFF_S = 0.002  # after the n-th conflict a writer waits up to n times this (random: writers drift apart)
REVS_KEPT = 16  # conditional writes remembered per memory (`revs`)
HELD_CHUNK = 256  # memories read and written in one hold of the write path (`update_memories(held=True)`)


def _with_token(revs: Any, token: str) -> list[str]:
    """The `revs` after a conditional write `token` on a memory whose `revs` were `revs`."""
    kept = [str(r) for r in revs] if isinstance(revs, list) else []
    return [*kept[-(REVS_KEPT - 1) :], token]


def _applied(payload: Mapping[str, Any] | None, token: str) -> bool:
    """Whether the conditional write `token` was applied to the memory now read as `payload`: its token is in
    `revs` (a conditional write after it, made by a writer that read it, keeps it there; an unconditional
    partial write leaves `revs` alone)."""
    return payload is not None and token in (payload.get(REVS) or ())


def new_rev() -> str:
    """A revision token (unique per write: two writers can never both believe they wrote the same one)."""
    return uuid.uuid4().hex


def at_revision(point_id: str, rev: str | None) -> Filter:
    """The point `point_id` while it is still at revision `rev` (None: written before revisions existed)."""
    return Filter(must=(HasId((point_id,)), Match(REV, rev) if rev else IsEmpty(REV)))


# The lexical confidence's workspace size: how long a count is reused, and how many workspaces are remembered.
SIZE_TTL_S = 30.0
SIZE_CACHE_MAX = 10_000


class QdrantStore(MemoryStore):
    """The MemoryStore on any Qdrant engine. `prefetch_limit`: candidates per leg (at least `limit`)."""

    def __init__(self, engine: Engine, *, prefetch_limit: int = DEFAULT_PREFETCH) -> None:
        self.engine = engine
        self.backend = engine.name
        self.prefetch_limit = prefetch_limit
        self._dim: int | None = None
        # The active embedding generation: the named dense vector that queries, filters on "has a dense
        # vector" and the densify backfill use (episodic.embedding.generations switches it), and the known dims.
        self.vector = DENSE
        self._dims: dict[str, int] = {}
        # workspace -> (when counted, points): the lexical confidence's N, read again after SIZE_TTL_S
        self._sizes: dict[str, tuple[float, int]] = {}
        # writer -> conditional writes that found the memory changed since their read (and were retried)
        self.write_conflicts: Counter[str] = Counter()
        self.on_conflict: Callable[[str, int], None] | None = None  # (writer, n): the metric, set by the stack

    # -- lifecycle -----------------------------------------------------------------------------------

    def ensure_collection(self, dim: int, *, vector: str = DENSE) -> None:
        """Create or open the collection with its dense vector `vector` of `dim` (the active one)."""
        if dim < 1:
            raise StoreError(f"dimension must be positive, got {dim}")
        # every generation's row count is read by the piece prior of its queries: indexed like `pieces`
        others: dict[str, IndexKind] = {pieces_field(n): "float" for n in self.engine.dense_vectors() if n != DENSE}
        self.engine.ensure(dim, {**PAYLOAD_INDEXES, **others}, vector)
        self._dims[vector] = dim
        self.use_dense_vector(vector)
        if not self.engine.has_context:
            log.warning(
                "the memory collection has no %r vector (created before context-aware indexing): entries "
                "are indexed and recalled without their run context until it is rebuilt in the new layout",
                CONTEXT,
            )
        self.has_context = self.engine.has_context

    def flush(self) -> None:
        self.engine.flush()

    def close(self) -> None:
        self.engine.close()

    # -- embedding generations: named dense vectors beside each other (episodic.embedding.generations) -------------

    def dense_layout(self) -> dict[str, int]:
        """The collection's named dense vectors and their dims ({} before the collection exists)."""
        layout = self.engine.dense_vectors()
        self._dims.update(layout)
        return layout

    def add_dense_vector(self, name: str, dim: int) -> None:
        if dim < 1:
            raise StoreError(f"dimension must be positive, got {dim}")
        self.engine.add_dense(name, dim)
        self._dims[name] = dim
        active = self._dims.get(self.vector)
        if active is not None:  # the piece prior reads `pieces_<name>` for every candidate: index it
            self.engine.ensure(active, {pieces_field(name): "float"}, self.vector)

    def drop_dense_vector(self, name: str) -> None:
        if name == self.vector:
            raise StoreError(f"vector {name!r} is the active one: switch to another before dropping it")
        self.engine.drop_dense(name)
        self._dims.pop(name, None)

    def use_dense_vector(self, name: str) -> None:
        """Make `name` (a vector of the layout) the active one, at once, for every later call."""
        dim = self._dims.get(name)
        if dim is None:
            dim = self.dense_layout().get(name)
        if dim is None:
            raise StoreError(f"the collection has no dense vector {name!r}")
        self.vector, self._dim = name, dim
        self.engine.dense = name

    def set_vectors(self, name: str, rows: Mapping[str, list[list[float]]], fields: dict[str, Any]) -> int:
        """The named vector `name` of many points, and `fields` into their payloads; missing points skipped."""
        for pid, dense in rows.items():
            validate_dense(dense, self._dims.get(name), what=f"point {pid} vector {name!r}")
        validate_payload(fields, what=f"vector {name!r} payload update")
        if not rows:
            return 0
        # Each point's payload also records how many rows it has: one engine call per distinct count.
        by_count: dict[int, dict[str, list[list[float]]]] = {}
        for pid, d in rows.items():
            by_count.setdefault(len(d), {})[pid] = float_rows(d)
        key = pieces_field(name)
        return sum(
            self.engine.set_vectors(name, part, {**fields, key: n, REV: new_rev()}) for n, part in by_count.items()
        )

    def without_vector(
        self, name: str, limit: int, offset: str | None, *, fields: Sequence[str], failures: str, quarantine_after: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        """One page, in point id order from `offset`, of the memories without the vector `name` (except
        those with `quarantine_after` or more failures in the payload field `failures`), and the next offset."""
        flt = missing_dense_filter(quarantine_after, name, failures)
        records, nxt = self.engine.scroll(flt, limit, offset, False, tuple(fields))
        return [(str(r.id), dict(r.payload or {})) for r in records], (None if nxt is None else str(nxt))

    def count_without_vector(self, name: str, *, failures: str, quarantine_after: int | None = None) -> int:
        """Memories without the vector `name` (leaving out the quarantined ones, when `quarantine_after`)."""
        return self.engine.count(missing_dense_filter(quarantine_after, name, failures))

    def count_failing(self, name: str, *, failures: str, quarantine_after: int) -> int:
        """Memories without the vector `name` that failed it at least once and are not yet quarantined."""
        flt = Filter(
            must=(AtLeast(failures, 1.0),), must_not=(HasDense(name), AtLeast(failures, float(quarantine_after)))
        )
        return self.engine.count(flt)

    def _query_vector(self, using: str | None) -> tuple[str, int | None]:
        """The vector a query runs on (the active one unless the caller names the one its query vector was
        made for, so that a switch between embedding and querying cannot mix two models) and its dim."""
        name = self.vector if using is None else using
        return name, self._dims.get(name)

    # -- writes --------------------------------------------------------------------------------------

    def _stamped(self, points: Sequence[MemoryPoint]) -> tuple[list[MemoryPoint], dict[str, str]]:
        out: list[MemoryPoint] = []
        tokens: dict[str, str] = {}
        for p in points:  # each point's dense rows are checked against the dim of the vector they go to
            validate_points([p], self._dims.get(p.vector))
            tokens[p.point_id] = token = new_rev()
            fields = {**p.payload, REV: token, REVS: _with_token(p.payload.get(REVS), token)}
            stamped = MemoryPoint(p.point_id, p.sparse, fields, p.dense, p.vector, p.context)
            out.append(stored_point(stamped, context=self.has_context))
        return out, tokens

    def upsert(self, points: list[MemoryPoint]) -> None:
        if not points:
            return
        self.engine.upsert(self._stamped(points)[0])

    def upsert_if(self, points: list[MemoryPoint], expect: Mapping[str, str | None], *, writer: str) -> list[str]:
        """Write whole points, each only while the memory is still at the revision its writer read
        (`expect`: point id -> the `rev` read, None for a memory that was absent, or written before
        revisions). A point absent at the read is inserted only while it is still absent (or revision-less).
        Each point's payload should carry the `revs` of the memory it read (the indexer keeps them with the
        counters), so that a conditional writer whose write it read still finds its token. Returns the
        point ids that were not written because another writer changed them since (the caller
        re-reads and decides again)."""
        if not points:
            return []
        missing = [p.point_id for p in points if p.point_id not in expect]
        if missing:
            raise StoreError(f"upsert_if: no expected revision for points {missing[:3]}")
        stored, tokens = self._stamped(points)
        condition = Filter(should=tuple(at_revision(pid, expect[pid]) for pid in tokens))
        self.engine.upsert(stored, condition)
        after = self.retrieve(sorted(tokens), fields=[REVS])
        lost = sorted(pid for pid, token in tokens.items() if not _applied(after.get(pid), token))
        if lost:
            self._conflicted(writer, len(lost))
        return lost

    def _writing(self, writer: str) -> None:
        """`writer` is about to write through `update_memories` (an engine may care who: EdgeStore)."""

    def _conflicted(self, writer: str, n: int) -> None:
        self.write_conflicts[writer] += n
        if self.on_conflict is not None:
            self.on_conflict(writer, n)

    def update_memories(
        self,
        point_ids: Iterable[str],
        change: Callable[[str, dict[str, Any]], Change | None],
        *,
        writer: str,
        fields: Sequence[str] | None = None,
        attempts: int = DEFAULT_ATTEMPTS,
        held: bool = False,
    ) -> WriteReport:
        """Read-modify-write of memories under the write discipline: read each payload (only `fields` when
        given, and its revision), ask `change(point_id, payload)` what to write (None: nothing), write it
        only while the memory is still at the revision read, and read the revisions back. A memory another
        writer changed in between is read again and `change` asked again, up to `attempts` times.

        `change` must compute its write from the payload it is given (not from an earlier read): on a
        retry it sees the other writer's change and keeps it. A write can also be retried after it was
        applied: each conditional write leaves its token in the memory's `revs` (the last `REVS_KEPT`), which
        later conditional writes keep and unconditional partial writes do not touch, so a write is known
        applied even when another writer wrote right after it.

        `held` (a `change` that touches nothing but the payload it is given, so it may run inside the engine's
        write path): on an engine that writes one at a time in this process (Edge), each memory is read and
        its payload change written in one hold, where no other write can come between, so there is no
        condition to check, no conflict and no read-back. Such a write stamps a fresh `rev` and leaves `revs`
        alone, as an unconditional write does (nobody else needs its token). A vector, context or delete
        change, and every change on other engines, go the conditional way. An exception from `change` (or
        the fields' check) is raised as it is; held, the memories written before it stay written."""
        report = WriteReport()
        todo = sorted(set(point_ids))
        wanted = None if fields is None else sorted({*fields, REV, REVS, "entry_id", "workspace_id"})
        if held and self.engine.holds_writes:
            todo = self._update_held(todo, change, wanted, report, writer)
        if todo:
            self._writing(writer)
        for attempt in range(max(1, attempts)):
            if not todo:
                break
            current = self.retrieve(todo, fields=wanted)
            written: dict[str, str | None] = {}  # point id -> its new revision (None: deleted)
            fields_only: list[tuple[Filter, dict[str, Any]]] = []  # payload-only writes: one engine call
            payload_only: set[str] = set()
            for pid in todo:
                payload = current.get(pid)
                if payload is None:
                    report.missing += 1
                    continue
                ch = change(pid, payload)
                if ch is None:
                    report.unchanged += 1
                    continue
                if ch.delete or ch.vectors or ch.context is not None:
                    written[pid] = self._write_at(pid, payload, ch)
                else:
                    cond, stamped, written[pid] = self._stamp(pid, payload, ch)
                    fields_only.append((cond, stamped))
                    payload_only.add(pid)
            after: dict[str, dict[str, Any]] = {}
            if fields_only:
                records = self.engine.set_payloads_where_read(fields_only, sorted(payload_only), [REVS])
                after = {str(r.id): dict(r.payload or {}) for r in records}
            if others := sorted(set(written) - payload_only):  # vectors, context, deletes: idempotent if redone
                after |= self.retrieve(others, fields=[REVS])
            retry: list[str] = []
            for pid, token in written.items():
                if token is None:  # a delete: applied when the memory is gone
                    (report.applied if pid not in after else retry).append(pid)
                elif pid not in after:
                    report.missing += 1  # removed meanwhile (forgotten, retired): nothing to write
                elif _applied(after[pid], token):
                    report.applied.append(pid)
                else:
                    retry.append(pid)
            if retry:
                report.conflicts += len(retry)
                self._conflicted(writer, len(retry))
                time.sleep(random.uniform(0, BACKOFF_S * (attempt + 1)))
            todo = retry
        report.gave_up = todo
        if todo:
            log.warning(
                "%s: %d memories kept changing under the write; left as they are: %s", writer, len(todo), todo[:5]
            )
        return report

    def _update_held(
        self,
        todo: list[str],
        change: Callable[[str, dict[str, Any]], Change | None],
        wanted: Sequence[str] | None,
        report: WriteReport,
        writer: str,
    ) -> list[str]:
        """`update_memories(held=True)` on an engine that holds its writes, `HELD_CHUNK` memories a hold (other
        writers wait at most one chunk). Returns the memories left for the conditional way: those whose
        change is more than payload fields."""
        rest: list[str] = []

        def decide(pid: str, payload: dict[str, Any] | None) -> dict[str, Any] | None:
            if payload is None:
                report.missing += 1
                return None
            ch = change(pid, payload)
            if ch is None:
                report.unchanged += 1
                return None
            if ch.delete or ch.vectors or ch.context is not None:
                rest.append(pid)
                return None
            validate_payload(ch.fields, what=f"point {pid} payload update")
            self._writing(writer)  # only once there is something to write (a decay that changes nothing)
            fields = {**ch.fields, REV: new_rev()}
            fields.pop(REVS, None)  # the conditional writers' tokens are theirs: a held write leaves them
            return fields

        for i in range(0, len(todo), HELD_CHUNK):
            report.applied += self.engine.write_held(todo[i : i + HELD_CHUNK], wanted, decide)
        return rest

    def _stamp(self, pid: str, read: Mapping[str, Any], ch: Change) -> tuple[Filter, dict[str, Any], str]:
        """The condition (still at the revision read), the fields with the new revision, and its token."""
        validate_payload(ch.fields, what=f"point {pid} payload update")  # the writer's; the tokens are ours
        token = new_rev()
        return (
            at_revision(pid, read.get(REV)),
            {**ch.fields, REV: token, REVS: _with_token(read.get(REVS), token)},
            token,
        )

    def _write_at(self, pid: str, read: Mapping[str, Any], ch: Change) -> str | None:
        cond = at_revision(pid, read.get(REV))
        if ch.delete:
            self.engine.delete_where(cond)
            return None
        _, fields, token = self._stamp(pid, read, ch)
        for name, rows in ch.vectors.items():
            validate_dense(rows, self._dims.get(name), what=f"point {pid} vector {name!r}")
            fields[pieces_field(name)] = len(rows)
        if ch.context is not None:
            if not self.has_context:
                raise StoreError(f"the collection has no {CONTEXT!r} vector")
            validate_sparse(ch.context, what=f"point {pid} context vector")
        for name, rows in ch.vectors.items():  # the vectors first: the payload's write is the one read back
            self.engine.set_vector_where(name, pid, float_rows(rows), cond)
        if ch.context is not None:
            self.engine.set_context_where(pid, ch.context, cond)
        self.engine.set_payload_where(cond, fields)
        return token

    def set_payload(self, point_id: str, fields: dict[str, Any]) -> None:
        validate_payload(fields, what=f"point {point_id} payload update")
        self.engine.set_payload(point_id, {**fields, REV: new_rev()})

    def set_dense(
        self, point_id: str, dense: list[list[float]], fields: dict[str, Any], *, vector: str | None = None
    ) -> None:
        name, dim = self._query_vector(vector)
        validate_dense(dense, dim, what=f"point {point_id} dense vector")
        validate_payload(fields, what=f"point {point_id} payload update")
        fields = {**fields, "has_dense": True, pieces_field(name): len(dense), REV: new_rev()}
        self.engine.set_dense(point_id, float_rows(dense), fields, name)

    def set_context(self, point_id: str, context: SparseVec, fields: dict[str, Any]) -> None:
        if not self.has_context:
            raise StoreError(f"the collection has no {CONTEXT!r} vector")
        validate_sparse(context, what=f"point {point_id} context vector")
        self.engine.set_context(point_id, context, {**fields, REV: new_rev()})

    def delete(self, point_ids: list[str]) -> None:
        if point_ids:
            self.engine.delete(sorted(set(point_ids)))

    # -- reads ---------------------------------------------------------------------------------------

    def _scroll(
        self, flt: Filter | None, limit: int | None = None, *, with_dense: bool = False, using: str | None = None
    ) -> Iterator[Record]:
        offset: Any = None
        seen = 0
        while True:
            page = SCROLL_PAGE if limit is None else min(SCROLL_PAGE, limit - seen)
            if page <= 0:
                return
            records, offset = self.engine.scroll(flt, page, offset, with_dense, using=using)
            yield from records
            seen += len(records)
            if offset is None or not records:
                return

    def _scroll_payloads(self, flt: Filter, limit: int | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        for r in self._scroll(flt, limit):
            yield str(r.id), dict(r.payload or {})

    def retrieve(self, point_ids: list[str], *, fields: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        if not point_ids:
            return {}
        records = self.engine.retrieve(list(point_ids), fields=list(fields) if fields is not None else None)
        return {str(r.id): dict(r.payload or {}) for r in records}

    def fetch(
        self, point_ids: list[str], *, with_dense: bool = False, using: str | None = None
    ) -> dict[str, StoredHit]:
        if not point_ids:
            return {}
        vector = self._query_vector(using)[0]
        records = self.engine.retrieve(list(point_ids), with_dense, using=vector)
        return {str(r.id): _hit(r, 0.0, with_dense, vector) for r in records}

    def scroll_page(
        self, offset: str | None, limit: int, *, fields: Sequence[str] | None = None
    ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        if limit <= 0:
            raise StoreError(f"page size must be positive, got {limit}")
        records, nxt = self.engine.scroll(None, limit, offset, False, tuple(fields) if fields is not None else None)
        return [(str(r.id), dict(r.payload or {})) for r in records], (None if nxt is None else str(nxt))

    def set_payloads(self, updates: Mapping[str, dict[str, Any]]) -> int:
        if not updates:
            return 0
        return self.engine.set_payloads({pid: {**fields, REV: new_rev()} for pid, fields in updates.items()})

    def find_by_dedup_keys(self, workspace_id: str, keys: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        if not keys:
            return {}
        found: dict[str, tuple[str, dict[str, Any]]] = {}
        for pid, payload in self._scroll_payloads(in_workspace(workspace_id, MatchAny("dedup_key", tuple(keys)))):
            found.setdefault(payload["dedup_key"], (pid, payload))
        return found

    def find_by_alias(self, workspace_id: str, entry_ids: list[str]) -> dict[str, str]:
        if not entry_ids:
            return {}
        wanted = set(entry_ids)
        out: dict[str, str] = {}
        for pid, payload in self._scroll_payloads(in_workspace(workspace_id, MatchAny("aliases", tuple(wanted)))):
            for alias in payload.get("aliases") or []:
                if alias in wanted:
                    out.setdefault(alias, pid)
        return out

    def find_entries(
        self, scope: ScopeFilter, entry_ids: list[str], *, with_dense: bool = False, using: str | None = None
    ) -> list[StoredHit]:
        if not entry_ids:
            return []
        flt = Filter(must=(scope_filter(scope), MatchAny("entry_id", tuple(sorted(set(entry_ids))))))
        vector = self._query_vector(using)[0]
        return [_hit(r, 0.0, with_dense, vector) for r in self._scroll(flt, None, with_dense=with_dense, using=vector)]

    def linked_to(self, workspace_id: str, entry_ids: list[str]) -> list[tuple[str, dict[str, Any]]]:
        if not entry_ids:
            return []
        return list(self._scroll_payloads(in_workspace(workspace_id, MatchAny("links", tuple(sorted(set(entry_ids)))))))

    def run_memories(
        self,
        workspace_id: str,
        run_id: str,
        *,
        limit: int,
        until: str | None = None,
        since: str | None = None,
        oldest_first: bool = False,
        agent_id: str | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        if limit <= 0:
            return []
        conditions: list[Any] = [Match("run_id", run_id)]
        if agent_id is not None:
            conditions.append(Match("agent_id", agent_id))
        if until is not None or since is not None:
            conditions.append(DatetimeRange("ts", gte=since, lte=until))
        records, _ = self.engine.scroll(
            in_workspace(workspace_id, *conditions), limit, None, False, order_by="ts", descending=not oldest_first
        )
        return [(str(r.id), dict(r.payload or {})) for r in records]

    def find_by_context(self, workspace_id: str, entry_ids: list[str]) -> list[tuple[str, dict[str, Any]]]:
        if not entry_ids:
            return []
        return list(
            self._scroll_payloads(in_workspace(workspace_id, MatchAny("context_ids", tuple(sorted(entry_ids)))))
        )

    def missing_dense(self, limit: int, *, quarantine_after: int | None = None) -> list[tuple[str, dict[str, Any]]]:
        if limit <= 0:
            return []
        # Oldest first, in the engine (a range index on indexed_at), and only the fields the backfill reads.
        records, _ = self.engine.scroll(
            missing_dense_filter(quarantine_after, self.vector), limit, None, False, DENSIFY_FIELDS, "indexed_at"
        )
        return [(str(r.id), dict(r.payload or {})) for r in records]

    def count(self, workspace_id: str | None = None, *, has_dense: bool | None = None) -> int:
        return self.engine.count(count_filter(workspace_id, has_dense, self.vector))

    def select(self, selection: Selection) -> Iterator[tuple[str, dict[str, Any]]]:
        return self._scroll_payloads(selection_filter(selection))

    def page(
        self, selection: Selection, after: PagePosition | None, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], PagePosition | None]:
        """Newest first without an offset over `ts`: the rest of `after`'s instant in point id order, then
        the engine's `ts`-descending scroll of the older memories, whose last (possibly cut) instant is read
        again in point id order, so that ties have one stable order. One memory more than `limit` is read to
        know whether there is a next page."""
        if limit <= 0:
            return [], after
        want = limit + 1
        out: list[Record] = []
        flt = selection_filter(selection)
        if after is not None:
            same, _ = self.engine.scroll(
                selection_filter(selection, at_time(after.ts)), want + 1, after.point_id, False
            )
            out += [r for r in same if str(r.id) != after.point_id][:want]
            flt = selection_filter(selection, before_time(after.ts))
        if len(out) < want:
            older, _ = self.engine.scroll(flt, want - len(out), None, False, order_by="ts", descending=True)
            if older:
                last = _instant(older[-1])
                out += _newest_first(r for r in older if _instant(r) != last)
                last_ts = str((older[-1].payload or {}).get("ts"))
                tie, _ = self.engine.scroll(selection_filter(selection, at_time(last_ts)), want - len(out), None, False)
                out += tie
        records = out[:limit]
        more = len(out) > limit and records
        position = PagePosition(str((records[-1].payload or {}).get("ts")), str(records[-1].id)) if more else None
        return [(str(r.id), dict(r.payload or {})) for r in records], position

    def count_without_dense(self, scope: ScopeFilter, *, using: str | None = None) -> int:
        return self.engine.count(
            Filter(must=(scope_filter(scope),), must_not=(HasDense(self._query_vector(using)[0]),))
        )

    def count_quarantined(self, workspace_id: str | None, quarantine_after: int) -> int:
        return self.engine.count(quarantined_filter(workspace_id, quarantine_after, self.vector))

    def backfill_pieces(self, limit: int) -> int:
        # One read of the active vector: a generation switch meanwhile makes the scroll return the other
        # vector's rows, which `dense_rows` does not take for this one (nothing is written this round).
        vector = self.vector
        key = pieces_field(vector)
        flt = Filter(must=(HasDense(vector), IsEmpty(key)))
        records, _ = self.engine.scroll(flt, limit, None, True, ("entry_id",))
        by_count: dict[int, list[str]] = {}
        for r in records:
            if rows := dense_rows(r.vector, vector):
                by_count.setdefault(len(rows), []).append(str(r.id))
        # Written only where the count is still missing: a memory replaced since the scroll (its new rows
        # came with their own count) keeps that one.
        for n, ids in by_count.items():
            self.engine.set_payload_where(Filter(must=(HasId(tuple(ids)), IsEmpty(key))), {key: n, REV: new_rev()})
        return sum(len(ids) for ids in by_count.values())

    def workspaces(self, limit: int = WORKSPACES_LIMIT) -> dict[str, int]:
        return self.engine.facet("workspace_id", None, limit)

    def scan_workspace(self, workspace_id: str, *, with_dense: bool = False) -> Iterator[StoredHit]:
        vector = self.vector  # the active generation's rows, read once for the whole scan
        for r in self._scroll(in_workspace(workspace_id), with_dense=with_dense, using=vector):
            yield _hit(r, 0.0, with_dense, vector)

    # -- relations: stored on the source memory (payload `relations` + keyword array `links`) ------------

    def add_relations(self, relations: list[Relation]) -> int:
        by_pid: dict[str, list[Relation]] = {}
        for r in relations:
            by_pid.setdefault(point_id(r.workspace_id, r.src), []).append(r)
        gained: dict[str, int] = {}

        def change(pid: str, payload: dict[str, Any]) -> Change | None:
            have = payload.get("relations") or []
            merged = merge_relations(have, by_pid[pid])
            gained[pid] = len(merged) - len(have)
            return Change(relations_payload(merged)) if gained[pid] else None

        report = self.update_memories(by_pid, change, writer="relations", fields=("relations", "links"))
        return sum(gained[pid] for pid in report.applied)

    def remove_edges_to(self, workspace_id: str, entry_ids: list[str], *, sparing: Collection[str] = ()) -> int:
        gone = set(entry_ids)
        removed: dict[str, int] = {}

        def change(pid: str, payload: dict[str, Any]) -> Change | None:
            edges = [e for e in payload.get("relations") or [] if isinstance(e, dict)]
            kept = [e for e in edges if e.get("dst") not in gone]
            if len(kept) == len(edges) and not set(payload.get("links") or []) & gone:
                return None
            removed[pid] = len(edges) - len(kept)
            return Change(relations_payload(kept))

        pids = [pid for pid, _ in self.linked_to(workspace_id, sorted(gone)) if pid not in sparing]
        report = self.update_memories(pids, change, writer="edges", fields=("relations", "links"))
        return sum(removed[pid] for pid in report.applied)

    def relations_of(self, workspace_id: str, entry_ids: list[str]) -> list[Relation]:
        wanted = set(entry_ids)
        out: dict[tuple[str, str, str], Relation] = {}
        outgoing = self.retrieve([point_id(workspace_id, e) for e in sorted(wanted)])
        incoming = self.linked_to(workspace_id, sorted(wanted))
        for payload in [*outgoing.values(), *(p for _, p in incoming)]:
            src = str(payload.get("entry_id", ""))
            for e in payload.get("relations") or []:
                if not isinstance(e, dict) or (src not in wanted and e.get("dst") not in wanted):
                    continue
                rel = Relation(
                    src=src,
                    dst=str(e.get("dst")),
                    relation=e.get("relation", "similar"),
                    weight=float(e.get("weight", 0.0)),
                    created_at=str(e.get("created_at", "")),
                    workspace_id=workspace_id,
                )
                out[(rel.src, rel.dst, rel.relation)] = rel
        return list(out.values())

    # -- queries -------------------------------------------------------------------------------------

    def _leg_limit(self, limit: int, prefetch: int | None = None) -> int:
        return max(limit, prefetch if prefetch is not None else self.prefetch_limit)

    def _run(self, query: Query, vector: str | None = None) -> list[StoredHit]:
        rows = vector or self.vector
        return [_hit(r, float(r.score), query.with_dense, rows) for r in self.engine.query(query)]

    def query_dense(
        self,
        vector: list[float],
        scope: ScopeFilter,
        limit: int,
        *,
        with_dense: bool = False,
        using: str | None = None,
    ) -> list[StoredHit]:
        name, dim = self._query_vector(using)
        validate_vector(vector, dim)
        if limit <= 0:
            return []
        flt = scope_filter(scope)
        leg = dense_leg(vector, flt, self._leg_limit(limit), name)
        return self._run(Query(leg, flt, limit, with_dense, using=name), name)

    def similar_to(
        self,
        workspace_id: str,
        rows: list[list[float]],
        limit: int,
        *,
        exclude_entry_ids: Sequence[str] = (),
        fields: Sequence[str] | None = None,
        using: str | None = None,
    ) -> list[StoredHit]:
        only = tuple(fields) if fields is not None else None
        request = SimilarRequest(workspace_id, rows, limit, tuple(exclude_entry_ids), only, using)
        return self.similar_to_many([request])[0]

    def similar_to_many(self, requests: Sequence[SimilarRequest]) -> list[list[StoredHit]]:
        """Every request's rows in one engine batch (`query_batch`: one planned pass over the segments for
        all of them, which the linker's batches of new memories share), each memory's hits merged by max."""
        queries: list[Query] = []
        spans: list[tuple[int, int, int]] = []  # per request: its queries [a, b) and its limit
        for r in requests:
            name, dim = self._query_vector(r.using)
            validate_dense(r.rows, dim, what="similar_to rows")
            a = len(queries)
            if r.limit > 0:
                flt = nearest_filter(
                    r.workspace_id,
                    tuple(sorted(set(r.exclude_entry_ids))),
                    name,
                    agent_id=r.agent_id,
                    before_ts=r.before_ts,
                )
                queries.extend(
                    Query(dense_leg(row, flt, r.limit, name), flt, r.limit, score=RawScore(), fields=r.fields)
                    for row in float_rows(r.rows)
                )
            spans.append((a, len(queries), r.limit))
        results = self.engine.query_batch(queries) if queries else []
        out: list[list[StoredHit]] = []
        for a, b, limit in spans:
            best: dict[str, StoredHit] = {}
            for records in results[a:b]:
                for rec in records:
                    hit = best.get(str(rec.id))
                    if hit is None or rec.score > hit.score:
                        best[str(rec.id)] = _hit(rec, float(rec.score), False)
            out.append(sorted(best.values(), key=lambda h: -h.score)[:limit])
        return out

    def query_sparse(
        self, sparse: SparseVec, scope: ScopeFilter, limit: int, *, with_dense: bool = False
    ) -> list[StoredHit]:
        validate_sparse(sparse, what="query sparse vector")
        if limit <= 0 or not sparse.indices:
            return []  # no terms: nothing can match lexically
        flt = scope_filter(scope)
        return self._run(Query(sparse_leg(sparse, scope, flt, self._leg_limit(limit)), flt, limit, with_dense))

    def query_hybrid(
        self,
        vector: list[float],
        sparse: SparseVec,
        scope: ScopeFilter,
        limit: int,
        fusion: Fusion,
        *,
        with_dense: bool = False,
        using: str | None = None,
    ) -> list[StoredHit]:
        name, dim = self._query_vector(using)
        validate_vector(vector, dim)
        validate_sparse(sparse, what="query sparse vector")
        if limit <= 0:
            return []
        flt = scope_filter(scope)
        prefetch = self._leg_limit(limit, fusion.prefetch_limit)
        fusion = lexically_scaled(fusion, self._lexical_share(sparse, scope, flt, fusion))
        legs = hybrid_prefetch(vector, sparse, scope, flt, prefetch, fusion, name, context=self.has_context)
        if (fusion.run_weight <= 0 and fusion.neighbour_weight <= 0) or fusion.run_pool <= limit:
            return self._run(Query(legs, flt, limit, with_dense, using=name), name)
        fields = ("run_id", "entry_id", "relations", "summary") if fusion.neighbour_weight > 0 else ("run_id",)
        return self._by_run(Query(legs, flt, fusion.run_pool, fields=fields, using=name), limit, fusion, with_dense)

    def _by_run(self, pool: Query, limit: int, fusion: Fusion, with_dense: bool) -> list[StoredHit]:
        """The fused candidates of `pool` (the payload fields the re-ranks read) re-ranked by the neighbour
        lift and then by run-level evidence (`episodic.domain.runs`; each only when weighted), then the best
        `limit` read whole (with their dense rows when asked) and returned with the re-ranked score."""
        records = self.engine.query(pool)
        scored = [(str(r.id), float(r.score)) for r in records]
        if fusion.neighbour_weight > 0:
            turns = [Turn.of(pid, score, r.payload or {}) for (pid, score), r in zip(scored, records, strict=True)]
            scored = neighbour_lift(turns, fusion.neighbour_weight, fusion.neighbour_words)
        if fusion.run_weight > 0:
            run_of = {str(r.id): (r.payload or {}).get("run_id") or None for r in records}
            scored = run_level(
                [(pid, score, run_of[pid]) for pid, score in scored], fusion.run_weight, fusion.run_depth
            )
        ranked = scored[:limit]
        vector = pool.using or self.vector
        found = {str(r.id): r for r in self.engine.retrieve([pid for pid, _ in ranked], with_dense, using=vector)}
        return [_hit(found[pid], score, with_dense, vector) for pid, score in ranked if pid in found]

    def explain_legs(
        self,
        vector: list[float] | None,
        sparse: SparseVec,
        scope: ScopeFilter,
        limit: int,
        fusion: Fusion,
        *,
        using: str | None = None,
    ) -> list[LegRanking]:
        """The legs `query_hybrid` fuses (without `vector`: the one `query_sparse` runs), each run alone with
        its raw score, in one engine batch. Names: dense, bm25, bm25-of-dense (the dense candidates re-scored
        by the query's words), bm25-head, context."""
        flt = scope_filter(scope)
        prefetch = self._leg_limit(limit, fusion.prefetch_limit)
        if vector is None:
            if not sparse.indices:
                return []
            legs: tuple[Any, ...] = (sparse_leg(sparse, scope, flt, prefetch),)
            weights: tuple[float, ...] = (1.0,)
        else:
            name, dim = self._query_vector(using)
            validate_vector(vector, dim)
            scaled = lexically_scaled(fusion, self._lexical_share(sparse, scope, flt, fusion))
            fused = hybrid_prefetch(vector, sparse, scope, flt, prefetch, scaled, name, context=self.has_context)
            legs, weights = fused.legs, fused.weights
        names: list[str] = []
        for leg in legs:
            if isinstance(leg, DenseLeg):
                names.append("dense")
            elif isinstance(leg, SparseLeg) and leg.inner is not None:
                names.append("bm25-of-dense")
            elif isinstance(leg, SparseLeg) and leg.using == CONTEXT:
                names.append("context")
            else:
                names.append("bm25-head" if "bm25" in names else "bm25")
        queries = [Query(leg, flt, leg.limit, score=RawScore(), fields=("entry_id",)) for leg in legs]
        out = []
        for leg_name, weight, records in zip(names, weights, self.engine.query_batch(queries), strict=True):
            ranked = tuple((str((r.payload or {}).get("entry_id", "")), float(r.score)) for r in records)
            out.append(LegRanking(leg_name, float(weight), ranked))
        return out

    def _lexical_share(self, sparse: SparseVec, scope: ScopeFilter, flt: Filter, fusion: Fusion) -> float:
        """The share of their weight the BM25-based legs keep for this query (`Fusion.lexical_full`):
        1 when off, for DBSF (which weighs scores, not ranks) or without a query term; else from BM25's
        best raw score over `flt` (IDF over the workspace, as the legs have it) and the workspace's size.
        One cheap engine call before the hybrid query (a top-1 sparse search), and a count of the workspace
        at most once per `SIZE_TTL_S`."""
        if fusion.lexical_full <= 0 or fusion.method != "rrf" or not sparse.indices:
            return 1.0
        if max(fusion.sparse_weight, fusion.both_weight, fusion.head_weight, fusion.context_weight) <= 0:
            return 1.0  # no BM25-based leg to scale: no probe
        probe = Query(sparse_leg(sparse, scope, flt, 1), flt, 1, score=RawScore(), fields=())
        best = self.engine.query(probe)
        top = float(best[0].score) if best else 0.0
        return lexical_factor(top, self._workspace_size(scope.workspace_id), fusion.lexical_full, fusion.lexical_floor)

    def _workspace_size(self, workspace_id: str) -> int:
        """The workspace's point count, counted at most once per `SIZE_TTL_S` (it only enters as ln N, and a
        count costs three times the probe's search: 1.1 against 0.3 ms at 10k memories on Edge)."""
        now = time.monotonic()
        seen = self._sizes.get(workspace_id)
        if seen is not None and now - seen[0] < SIZE_TTL_S:
            return seen[1]
        if len(self._sizes) >= SIZE_CACHE_MAX:
            self._sizes.clear()
        points = self.count(workspace_id)
        self._sizes[workspace_id] = (now, points)
        return points
