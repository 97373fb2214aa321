"""Ports: the Embedder protocol and the MemoryStore interface, with the value types they speak.

The store: `episodic.store.facade.QdrantStore`, written once over an engine backend: `episodic.store.edge.EdgeStore`
(Qdrant Edge, embedded default) and `episodic.store.qdrant_server.QdrantServerStore` (qdrant-client against a
Qdrant server, or its local mode in tests). One contract suite (tests/contract) runs against both.

Size: over 400 lines: the ports are the contract between the core and the engines, and every value type
they speak is defined beside them (one interface, its value types and their docs; splitting them apart
would scatter the contract).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

Scope = Literal["own", "crew_shared"]
Mode = Literal["hybrid", "dense", "sparse"]

DENSE = "dense"  # named dense vector: a multivector (one row per chunk), cosine, max-sim
SPARSE = "bm25"  # named sparse vector with the IDF modifier
# Named sparse vector (IDF modifier) over the entry's text with its run context folded in (episodic.indexing.context).
# A collection created before it existed lacks it: the store then runs without it (`has_context`).
CONTEXT = "bm25_context"


@runtime_checkable
class Embedder(Protocol):
    """Provider-neutral embedder. `embed_documents` returns one (n_chunks × dim) array per text."""

    @property
    def dim(self) -> int: ...

    @property
    def model_id(self) -> str: ...

    @property
    def pieces(self) -> str:
        """How a text is cut into vectors (episodic.domain.chunking.Scheme's key, or any stable name for an embedder
        that does not chunk): with the model and the dim, an embedding generation's identity."""
        ...

    def embed_documents(self, texts: list[str]) -> list[np.ndarray]: ...

    def embed_query(self, text: str) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class SparseVec:
    indices: list[int]
    values: list[float]


@dataclass(frozen=True, slots=True)
class MemoryPoint:
    """A memory as written to the store."""

    point_id: str
    sparse: SparseVec
    payload: dict[str, Any]
    dense: list[list[float]] | None = None  # chunk vectors (unit norm); None in sparse-only mode
    vector: str = DENSE  # the named dense vector (the embedding generation, episodic.embedding.generations) they go to
    context: SparseVec | None = None  # BM25 of the context-folded text; None: not indexed with context


SEVERITIES: tuple[str, ...] = ("debug", "info", "warn", "error")  # lowest first


@dataclass(frozen=True, slots=True)
class RecallFilter:
    """Narrows a recall inside its scope; applied inside the store query (every leg), never to a top-k.

    `since` <= ts < `until` (RFC 3339 text, UTC); `entry_types` / `severities`: one of them (empty: any);
    `run_id`: only that run; `exclude_run_id`: not that run (memories without a run are kept);
    `crew_id`: only memories of that crew."""

    since: str | None = None
    until: str | None = None
    entry_types: tuple[str, ...] = ()
    severities: tuple[str, ...] = ()
    run_id: str | None = None
    exclude_run_id: str | None = None
    crew_id: str | None = None

    @property
    def empty(self) -> bool:
        return self == NO_FILTER


NO_FILTER = RecallFilter()


@dataclass(frozen=True, slots=True)
class ScopeFilter:
    """Who may see what. Workspace isolation is part of every filter the store builds from this; `filters`
    narrow inside the scope."""

    workspace_id: str
    scope: Scope | Literal["workspace"] = "own"  # workspace: every memory (the explorer's, for unbound tokens)
    agent_id: str | None = None
    crew_id: str | None = None
    high_value: float = 0.6  # crew_shared: crew entries with importance_score >= this
    filters: RecallFilter = NO_FILTER

    def __post_init__(self) -> None:
        if not self.workspace_id:
            raise ValueError("workspace_id is required")
        if self.scope == "own" and not self.agent_id:
            raise ValueError("scope 'own' requires agent_id")
        if self.scope == "crew_shared" and not self.crew_id:
            raise ValueError("scope 'crew_shared' requires crew_id")


@dataclass(frozen=True, slots=True)
class Selection:
    """Memories of one workspace, for listing and forgetting: optionally one agent, one run, one crew, some
    entry types (each given condition must hold)."""

    workspace_id: str
    agent_id: str | None = None
    run_id: str | None = None
    entry_types: tuple[str, ...] = ()
    crew_id: str | None = None

    def __post_init__(self) -> None:
        if not self.workspace_id:
            raise ValueError("workspace_id is required")


@dataclass(frozen=True, slots=True)
class PagePosition:
    """Where a page of memories ended (newest first: `ts` descending, then point id ascending)."""

    ts: str  # the last memory's ts, RFC 3339 as stored
    point_id: str


@dataclass(frozen=True, slots=True)
class Fusion:
    """How the hybrid legs are fused. `method`: 'rrf' (weighted) or 'dbsf'.

    Legs (each a prefetch of `prefetch_limit` candidates unless said otherwise):
    - dense: max-sim cosine (`dense_weight`), ranked by `cosine - piece_penalty * ln(pieces)` when
      `piece_penalty` > 0 (a memory cut into many pieces has more chances at a high best piece; the
      penalty takes that back, `store_query.DenseLeg`);
    - sparse: BM25 (`sparse_weight`);
    - both (`both_weight` > 0): the dense leg's candidates re-scored by BM25, so memories near in meaning
      that also share the query's words rank first;
    - head (`head` > 0 and `head_weight` > 0): BM25's top `head` again, a stepped extra weight for the
      best lexical matches;
    - context (`context_weight` > 0): BM25 over the entries' context-folded text (`CONTEXT`), which finds
      replies whose meaning sits in the entries before them; with `both_by_context` the "both" leg
      re-scores the dense candidates by it instead of by the entry's own BM25.
    Legs with weight 0 are left out. Without a query term the sparse-based legs are left out; on a
    collection without the context vector the context legs fall back to the entry's own BM25 (the
    four-leg tree).

    Lexical confidence (`lexical_full` > 0, RRF only): every BM25-based leg's weight is scaled by how
    strongly BM25 matched this query at all (`store_query.lexical_factor`): its best score over the
    request's scope, in units of one rare term's IDF in the workspace, divided by `lexical_full`, kept
    within [`lexical_floor`, 1]. Rank fusion gives a leg's first place its full weight whatever its score,
    so a query whose words match only common ones ("any tips?", "suggest") let BM25's arbitrary order
    outvote the dense leg; a query with a distinctive match keeps its full lexical weight.

    Time legs (`time_weight` > 0 and the request's `when`, the spans of time its query names: "in July 2023",
    `episodic.domain.timespan`): every leg of its own (dense, BM25, context) once more over the memories whose
    `ts` falls in one of the spans, at `time_weight` x its weight, so those memories gain rank without the
    others being filtered out.

    Run-level evidence (`run_weight` > 0, `episodic.domain.runs`): the fused top `run_pool` are re-ranked by
    their own score and their run's (the sum of its `run_depth` best fused scores among them), at `run_weight`.

    Neighbour lift (`neighbour_weight` > 0, `episodic.domain.runs.neighbour_lift`): the same fused top
    `run_pool`, each memory of at most `neighbour_words` words lifted by the best of its run neighbours
    (`previous` / `next`) among them that are as short, at `neighbour_weight`; before the run-level re-rank.
    """

    method: Literal["rrf", "dbsf"] = "rrf"
    k: int = 60
    dense_weight: float = 1.0
    sparse_weight: float = 1.0
    prefetch_limit: int = 100
    both_weight: float = 0.0
    head: int = 0
    head_weight: float = 0.0
    context_weight: float = 0.0
    both_by_context: bool = False
    piece_penalty: float = 0.0
    lexical_full: float = 0.0
    lexical_floor: float = 0.25
    time_weight: float = 0.0
    when: tuple[tuple[str, str], ...] = ()  # per request: [start, end) spans, RFC 3339 UTC
    run_weight: float = 0.0
    run_pool: int = 100
    run_depth: int = 3
    neighbour_weight: float = 0.0
    neighbour_words: int = 80


@dataclass(slots=True)
class StoredHit:
    point_id: str
    score: float
    payload: dict[str, Any]
    dense: list[list[float]] | None = None  # only when asked for (with_dense=True)
    vector: str | None = None  # the named dense vector (embedding generation) `dense` was read from


@dataclass(frozen=True, slots=True)
class SimilarRequest:
    """One memory's neighbour search (`MemoryStore.similar_to`'s arguments), for `similar_to_many`."""

    workspace_id: str
    rows: list[list[float]]
    limit: int
    exclude_entry_ids: tuple[str, ...] = ()
    fields: tuple[str, ...] | None = None
    using: str | None = None
    agent_id: str | None = None  # only this agent's memories (a memory's surprise: what its agent held)
    before_ts: str | None = None  # only memories with an earlier `ts`


@dataclass(frozen=True, slots=True)
class LegRanking:
    """One query leg run alone (`MemoryStore.explain_legs`): `ranked` holds (entry_id, raw leg score), best
    first; `weight` is the leg's weight in the fusion, 0 when the query does not use it."""

    name: str
    weight: float
    ranked: tuple[tuple[str, float], ...]


@dataclass(slots=True)
class Relation:
    src: str  # entry id
    dst: str
    relation: Literal["similar", "supports", "contradicts", "supersedes", "next", "previous"]
    weight: float
    created_at: str
    workspace_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def merge_relations(existing: Any, new: list[Relation]) -> list[dict[str, Any]]:
    """The payload form of a memory's outgoing edges: existing ones kept, new (dst, relation) pairs added."""
    merged: list[dict[str, Any]] = [dict(e) for e in (existing or []) if isinstance(e, dict)]
    seen = {(e.get("dst"), e.get("relation")) for e in merged}
    for r in new:
        if (r.dst, r.relation) in seen or r.dst == r.src:
            continue
        seen.add((r.dst, r.relation))
        merged.append({"dst": r.dst, "relation": r.relation, "weight": float(r.weight), "created_at": r.created_at})
    return merged


def relations_payload(edges: list[dict[str, Any]]) -> dict[str, Any]:
    """The payload fields that hold a memory's outgoing edges: `relations` and the keyword array `links`
    (the destinations, so that edges are found from either end)."""
    return {"relations": edges, "links": sorted({str(e["dst"]) for e in edges})}


REV = "rev"  # payload: a memory's revision, a fresh token on every write of any of its fields (episodic.store)
REVS = "revs"  # payload: the tokens of its last conditional writes (how a writer knows its write was applied)


@dataclass
class Change:
    """What one conditional writer writes to one memory (`MemoryStore.update_memories`): `fields` merged
    into its payload, `vectors` (named dense rows) and `context` (the context BM25 vector) replaced, or with
    `delete` the memory removed."""

    fields: dict[str, Any] = field(default_factory=dict)
    vectors: dict[str, list[list[float]]] = field(default_factory=dict)
    context: SparseVec | None = None
    delete: bool = False


@dataclass
class WriteReport:
    """How a conditional write went: `applied` (point ids written, or deleted), `unchanged` (the writer
    had nothing to write), `missing` (no such memory, or it went meanwhile), `conflicts` (writes that
    found the memory changed since their read: re-read and retried), `gave_up` (still conflicting after
    the last attempt: nothing of this writer was written to them)."""

    applied: list[str] = field(default_factory=list)
    unchanged: int = 0
    missing: int = 0
    conflicts: int = 0
    gave_up: list[str] = field(default_factory=list)


class MemoryStore(ABC):
    """The store port. Every query is scoped by a ScopeFilter (workspace isolation at the boundary).

    Scores: dense queries return the max-sim cosine × importance_score; sparse queries BM25 (IDF
    computed over the request's workspace only) × importance_score; hybrid the fused score ×
    importance_score. Payload carries everything recall returns (SPEC §6).
    """

    backend: str = "abstract"
    # The collection has the `CONTEXT` sparse vector (set by `ensure_collection`; false on a collection
    # created before it existed, which is then indexed and queried without it).
    has_context: bool = False

    @abstractmethod
    def ensure_collection(self, dim: int) -> None:
        """Create the collection and payload indexes if missing (idempotent)."""

    @abstractmethod
    def upsert(self, points: list[MemoryPoint]) -> None:
        """Insert or replace whole points (vectors and payload)."""

    @abstractmethod
    def upsert_if(self, points: list[MemoryPoint], expect: Mapping[str, str | None], *, writer: str) -> list[str]:
        """Write whole points, each only while the memory is still at the revision (payload `rev`) its
        writer read (`expect`; None: it was absent, or written before revisions). Returns the point ids
        another writer changed since (not written: re-read and decide again). Counted per `writer`.

        Raises:
            StoreError: a point without an expected revision, or one the store refuses."""

    @abstractmethod
    def update_memories(
        self,
        point_ids: Iterable[str],
        change: Callable[[str, dict[str, Any]], Change | None],
        *,
        writer: str,
        fields: Sequence[str] | None = None,
        attempts: int = 8,
        held: bool = False,
    ) -> WriteReport:
        """Read-modify-write under the write discipline: each memory is read (only `fields` when given), its
        `Change` computed by `change(point_id, payload)` (None: nothing to write) and written only while the
        memory is still at the revision read; one changed meanwhile is read again and `change` asked again
        (up to `attempts`). `change` must be a pure function of the payload it gets (see the facade).
        `held`: `change` touches nothing else (no store call), so a store whose writes run one at a time in
        this process may call it between its read and its write, in one hold (see the facade).

        Returns:
            The WriteReport (applied, unchanged, missing, conflicts, gave_up)."""

    @abstractmethod
    def retrieve(self, point_ids: list[str], *, fields: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        """Payloads of the points that exist (only `fields` when given), keyed by point id."""

    @abstractmethod
    def fetch(
        self, point_ids: list[str], *, with_dense: bool = False, using: str | None = None
    ) -> dict[str, StoredHit]:
        """The points that exist (score 0), with their dense chunk rows (of the vector `using`, the active one
        by default) when `with_dense`, by point id."""

    @abstractmethod
    def scroll_page(
        self, offset: str | None, limit: int, *, fields: Sequence[str] | None = None
    ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        """One page of every memory in point-id order: up to `limit` (point id, payload) from `offset` (None:
        the start) and the offset of the next page (None: done). Offsets are plain strings, so a job can
        store one and resume there. `fields`: only these payload fields (a cheap scan of big payloads)."""

    @abstractmethod
    def set_payloads(self, updates: Mapping[str, dict[str, Any]]) -> int:
        """Merge different fields into many memories in one engine call (point id -> fields), touching no
        other field. Memories that no longer exist are skipped; returns how many were written."""

    @abstractmethod
    def find_by_dedup_keys(self, workspace_id: str, keys: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """dedup_key -> (point_id, payload) for the keys that already have a memory in the workspace."""

    @abstractmethod
    def find_by_alias(self, workspace_id: str, entry_ids: list[str]) -> dict[str, str]:
        """entry id -> point id, for ids recorded as aliases of an existing memory in the workspace."""

    @abstractmethod
    def set_payload(self, point_id: str, fields: dict[str, Any]) -> None:
        """Merge `fields` into the point's payload."""

    @abstractmethod
    def delete(self, point_ids: list[str]) -> None:
        """Remove whole points (unknown ids are ignored)."""

    @abstractmethod
    def set_dense(self, point_id: str, dense: list[list[float]], fields: dict[str, Any]) -> None:
        """Add or replace the dense vectors of an existing point and merge `fields` into its payload."""

    def set_context(self, point_id: str, context: SparseVec, fields: dict[str, Any]) -> None:
        """Replace the point's context vector and merge `fields` into its payload (needs `has_context`)."""
        raise NotImplementedError(f"{type(self).__name__} has no context vector")

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
        """Up to `limit` memories of the run with `since` <= ts <= `until` (each optional, RFC 3339), newest
        first, or oldest first; ties at one instant in no stated order. `agent_id`: that agent's only."""
        raise NotImplementedError(f"{type(self).__name__} cannot list a run")

    def find_by_context(self, workspace_id: str, entry_ids: list[str]) -> list[tuple[str, dict[str, Any]]]:
        """(point id, payload) of the memories indexed with one of `entry_ids` in their context."""
        return []

    @abstractmethod
    def missing_dense(self, limit: int, *, quarantine_after: int | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Up to `limit` points indexed without a dense vector (sparse-only), oldest `indexed_at` first, for
        the backfill; with `quarantine_after`, not those whose `densify_failures` reached it. The payloads
        hold only the fields the backfill reads (`store_query.DENSIFY_FIELDS`)."""

    @abstractmethod
    def count(self, workspace_id: str | None = None, *, has_dense: bool | None = None) -> int:
        """Number of memories, optionally of one workspace and with/without a dense vector."""

    @abstractmethod
    def select(self, selection: Selection) -> Iterator[tuple[str, dict[str, Any]]]:
        """(point id, payload) of every memory in `selection`, in no particular order."""

    @abstractmethod
    def page(
        self, selection: Selection, after: PagePosition | None, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], PagePosition | None]:
        """Up to `limit` memories of `selection`, newest first (`ts` descending, then point id ascending),
        starting after `after`; and the position to pass for the next page (None: this was the last)."""

    @abstractmethod
    def count_without_dense(self, scope: ScopeFilter, *, using: str | None = None) -> int:
        """Memories inside `scope` that have no dense vector yet (written BM25-first, or quarantined), in the
        vector `using` (the active one by default)."""

    @abstractmethod
    def backfill_pieces(self, limit: int) -> int:
        """Record the row count (`pieces`) of up to `limit` memories whose active dense vector was written
        before the store recorded it; returns how many it wrote (0: none is left)."""

    @abstractmethod
    def count_quarantined(self, workspace_id: str | None, quarantine_after: int) -> int:
        """Memories (of one workspace, or all) still without a dense vector after `quarantine_after` or more
        failed attempts to embed them: the backfill no longer tries them."""

    @abstractmethod
    def workspaces(self, limit: int = 1_000_000) -> dict[str, int]:
        """Every workspace that has memories, with its number of memories (at most `limit` workspaces)."""

    @abstractmethod
    def scan_workspace(self, workspace_id: str, *, with_dense: bool = False) -> Iterator[StoredHit]:
        """Every memory of the workspace (score 0), in pages, with its dense rows when `with_dense`."""

    @abstractmethod
    def query_dense(
        self, vector: list[float], scope: ScopeFilter, limit: int, *, with_dense: bool = False
    ) -> list[StoredHit]: ...

    @abstractmethod
    def query_sparse(
        self, sparse: SparseVec, scope: ScopeFilter, limit: int, *, with_dense: bool = False
    ) -> list[StoredHit]: ...

    @abstractmethod
    def query_hybrid(
        self,
        vector: list[float],
        sparse: SparseVec,
        scope: ScopeFilter,
        limit: int,
        fusion: Fusion,
        *,
        with_dense: bool = False,
    ) -> list[StoredHit]: ...

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
        """Each leg of the query `query_hybrid` (or, without `vector`, `query_sparse`) would run, alone: its
        name, its weight in the fusion (after the lexical confidence) and its top `limit` candidates with their
        raw leg scores, best first (no importance multiplier). For the explorer's "why" (recall/ui); a store
        that cannot tell answers [] (the default)."""
        return []

    @abstractmethod
    def find_entries(
        self, scope: ScopeFilter, entry_ids: list[str], *, with_dense: bool = False, using: str | None = None
    ) -> list[StoredHit]:
        """The memories inside `scope` whose entry_id is one of `entry_ids` (score 0), for the walk; their
        dense rows from the vector `using` (the active one by default), as for the query they join."""

    @abstractmethod
    def linked_to(self, workspace_id: str, entry_ids: list[str]) -> list[tuple[str, dict[str, Any]]]:
        """(point id, payload) of the workspace's memories whose `links` name one of `entry_ids`."""

    @abstractmethod
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
        """The `limit` memories of the workspace nearest to `rows` (a memory's chunk vectors) by raw cosine,
        with no importance multiplier: a memory's score is the max over pairs of (row, its chunk). Only
        memories with a dense vector; never those whose entry_id is in `exclude_entry_ids`. Best first.
        `fields`: only these payload fields (default: the whole payload). `using`: the named vector the rows
        were read from (`StoredHit.vector`), so that a generation switch in between cannot rank one
        generation's rows against another's (default: the active one)."""

    def similar_to_many(self, requests: Sequence[SimilarRequest]) -> list[list[StoredHit]]:
        """`similar_to` for each request, in order. Engines that plan a batch of queries as one (Qdrant's
        `query_batch`) override this to share one pass over the segments between all of them."""
        return [
            self.similar_to(
                r.workspace_id, r.rows, r.limit, exclude_entry_ids=r.exclude_entry_ids, fields=r.fields, using=r.using
            )
            for r in requests
        ]

    # -- relations: stored on the source memory (payload `relations` + keyword array `links`) ------------
    @abstractmethod
    def add_relations(self, relations: list[Relation]) -> int:
        """Add edges src -> dst (idempotent per (dst, relation)); returns how many were new.

        A relation whose source memory does not exist (yet) is skipped and not counted.
        """

    @abstractmethod
    def relations_of(self, workspace_id: str, entry_ids: list[str]) -> list[Relation]:
        """Every edge that starts or ends at one of `entry_ids` in the workspace (both directions)."""

    @abstractmethod
    def remove_edges_to(self, workspace_id: str, entry_ids: list[str], *, sparing: Collection[str] = ()) -> int:
        """Drop every edge of the workspace that points at one of `entry_ids` (stored on other memories);
        returns how many were removed. A memory's own outgoing edges go with the memory when it is deleted:
        the points in `sparing` (point ids about to be deleted) are left as they are."""

    @abstractmethod
    def flush(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    def ping(self) -> bool:
        """True when the store answers."""
        try:
            self.count()
            return True
        except Exception:
            return False


class StateStore(ABC):
    """Small JSON documents that must survive a restart, keyed by (kind, key): the state of the
    maintenance agents and of the memory lifecycle (reference ledgers, tombstones, per-run counters,
    health snapshots, job cursors). Lives beside the memories, in the same engine.

    A document is a JSON object whose keys do not start with `_`; `where` matches top-level keyword
    (string) fields of the documents exactly, e.g. `where={"workspace_id": "ws-a"}`. Keys are strings
    of any content. Writes are whole documents (last write wins).
    """

    @abstractmethod
    def put_many(self, kind: str, docs: dict[str, dict[str, Any]]) -> None:
        """Write (insert or replace) `docs`, a mapping key -> document."""

    def put(self, kind: str, key: str, doc: dict[str, Any]) -> None:
        self.put_many(kind, {key: doc})

    @abstractmethod
    def get_many(self, kind: str, keys: list[str]) -> dict[str, dict[str, Any]]:
        """The documents that exist among `keys`, keyed by key."""

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        return self.get_many(kind, [key]).get(key)

    @abstractmethod
    def delete(self, kind: str, keys: list[str]) -> None:
        """Remove the documents (unknown keys are ignored)."""

    @abstractmethod
    def scan(
        self, kind: str, *, where: dict[str, str] | None = None, limit: int | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(key, document) of the kind's documents that match `where`, in no particular order."""

    @abstractmethod
    def count(self, kind: str, *, where: dict[str, str] | None = None) -> int: ...

    @abstractmethod
    def close(self) -> None: ...
