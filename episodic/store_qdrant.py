"""QdrantServerStore: the memory store on a Qdrant server or cluster through qdrant-client (SPEC §6).

The same collection layout and the same engine-side scoring as `EdgeStore`: a named multivector `dense`
(cosine, max-sim), a named sparse `bm25` with the IDF modifier, prefetch legs fused by the engine and
a Formula that multiplies by `importance_score`.

qdrant-client's local mode (`location=":memory:"` or `path=...`) speaks the same API and runs the
contract suite. Known local-mode differences, none of which changes results:
- payload indexes have no effect there (it scans), so creating them is a no-op with a warning, which we
  silence; the server builds them, with `workspace_id` as the tenant index;
- it searches exactly, so HNSW settings are ignored;
- it is single-process (the `path` directory is locked), like Qdrant Edge, and we serialise calls to it
  with a lock because its collections are plain Python objects.
Size: over 400 lines while it mirrors the other adapter; issue 8 part 2 writes the shared code once.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from episodic.errors import StoreError, StoreUnavailable
from episodic.ports import (
    DENSE,
    SPARSE,
    Fusion,
    MemoryPoint,
    MemoryStore,
    ScopeFilter,
    SparseVec,
    StoredHit,
)
from episodic.store import (
    DEFAULT_IMPORTANCE,
    DEFAULT_PREFETCH,
    PAYLOAD_INDEXES,
    dense_rows,
    hybrid_legs,
    stored_payload,
    validate_dense,
    validate_points,
    validate_sparse,
    validate_vector,
)

try:
    from qdrant_client import QdrantClient
    from qdrant_client import models as m
    from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
except ImportError as e:  # pragma: no cover - a core dependency; guard for a clear hint
    raise ImportError("QdrantServerStore needs qdrant-client: pip install 'qdrant-client>=1.16'") from e

_SCROLL_PAGE = 256


def _index_schema(kind: str) -> Any:
    if kind == "tenant":
        return m.KeywordIndexParams(type=m.KeywordIndexType.KEYWORD, is_tenant=True)
    return {
        "keyword": m.PayloadSchemaType.KEYWORD,
        "float": m.PayloadSchemaType.FLOAT,
        "datetime": m.PayloadSchemaType.DATETIME,
        "bool": m.PayloadSchemaType.BOOL,
    }[kind]


def _match(key: str, value: Any) -> m.FieldCondition:
    return m.FieldCondition(key=key, match=m.MatchValue(value=value))


def _has_dense() -> m.HasVectorCondition:
    # The same condition as EdgeStore (which cannot match booleans): the vector itself is the truth.
    return m.HasVectorCondition(has_vector=DENSE)


def _workspace(workspace_id: str) -> m.FieldCondition:
    return _match("workspace_id", workspace_id)


def scope_filter(scope: ScopeFilter) -> m.Filter:
    """Workspace always; `own`: the agent's memories; `crew_shared`: the crew's memories that are the
    agent's own or high-value (only high-value ones without an agent)."""
    must: list[Any] = [_workspace(scope.workspace_id)]
    high = m.FieldCondition(key="importance_score", range=m.Range(gte=scope.high_value))
    if scope.scope == "own":
        must.append(_match("agent_id", scope.agent_id))
    else:
        must.append(_match("crew_id", scope.crew_id))
        if scope.agent_id:
            must.append(m.Filter(should=[_match("agent_id", scope.agent_id), high]))
        else:
            must.append(high)
    return m.Filter(must=must)


def _times_importance() -> m.FormulaQuery:
    return m.FormulaQuery(
        formula=m.MultExpression(mult=["$score", "importance_score"]),
        defaults={"importance_score": DEFAULT_IMPORTANCE},
    )


class QdrantServerStore(MemoryStore):
    """MemoryStore on a Qdrant server (`url`), or on qdrant-client's local mode (`location`/`path`)."""

    backend = "qdrant"

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        collection: str = "episodic_memories",
        location: str | None = None,
        path: str | Path | None = None,
        prefetch_limit: int = DEFAULT_PREFETCH,
        timeout: float = 10.0,
    ) -> None:
        if sum(x is not None for x in (url, location, path)) != 1:
            raise ValueError("give exactly one of url (a server), location (':memory:') or path (local mode)")
        self.collection = collection
        self.prefetch_limit = prefetch_limit
        self.local = url is None
        if self.local:
            self.backend = "qdrant-local"
        self._lock: Any = threading.RLock() if self.local else nullcontext()
        self._dim: int | None = None
        self._closed = False
        where = url or location or str(path)
        self._where = where
        try:
            if url is not None:
                self.client = QdrantClient(url=url, api_key=api_key, timeout=int(timeout), check_compatibility=False)
            elif location is not None:
                self.client = QdrantClient(location=location)
            else:
                # Calls may come from a thread pool; they are serialised by self._lock.
                self.client = QdrantClient(path=str(path), force_disable_check_same_thread=True)
        except Exception as e:  # e.g. a local path locked by another process
            raise StoreUnavailable(f"cannot open Qdrant at {where}: {e}") from e

    # -- lifecycle -----------------------------------------------------------------------------------

    @contextmanager
    def _guard(self, op: str) -> Iterator[None]:
        if self._closed:
            raise StoreUnavailable(f"QdrantServerStore ({self._where}) is closed")
        with self._lock:
            try:
                yield
            except (StoreError, StoreUnavailable):
                raise
            except UnexpectedResponse as e:
                if e.status_code is not None and (e.status_code >= 500 or e.status_code in (408, 429)):
                    raise StoreUnavailable(f"qdrant {op}: {e}") from e
                raise StoreError(f"qdrant {op}: {e}") from e
            except (ResponseHandlingException, ResourceExhaustedResponse, ConnectionError, TimeoutError) as e:
                raise StoreUnavailable(f"qdrant {op} at {self._where}: {e}") from e
            except Exception as e:
                if type(e).__module__.startswith(("httpx", "httpcore", "grpc")):
                    raise StoreUnavailable(f"qdrant {op} at {self._where}: {e}") from e
                raise StoreError(f"qdrant {op}: {e}") from e

    def ensure_collection(self, dim: int) -> None:
        if dim < 1:
            raise StoreError(f"dimension must be positive, got {dim}")
        with self._guard("ensure_collection"):
            if not self.client.collection_exists(self.collection):
                try:
                    self.client.create_collection(
                        self.collection,
                        vectors_config={
                            DENSE: m.VectorParams(
                                size=dim,
                                distance=m.Distance.COSINE,
                                multivector_config=m.MultiVectorConfig(comparator=m.MultiVectorComparator.MAX_SIM),
                            )
                        },
                        sparse_vectors_config={SPARSE: m.SparseVectorParams(modifier=m.Modifier.IDF)},
                        # Multitenancy recipe: every vector query is filtered by workspace, so build
                        # per-tenant graphs (payload_m) instead of one global graph (m=0).
                        hnsw_config=m.HnswConfigDiff(m=0, payload_m=16),
                    )
                except UnexpectedResponse as e:  # created by another process meanwhile
                    if e.status_code != 409 and not self.client.collection_exists(self.collection):
                        raise
            self._check_layout(dim)
            self._dim = dim
            with warnings.catch_warnings():
                # Local mode: "Payload indexes have no effect in the local Qdrant" (it scans).
                warnings.simplefilter("ignore", UserWarning)
                present = set(self.client.get_collection(self.collection).payload_schema or {})
                for name, kind in PAYLOAD_INDEXES.items():
                    if name not in present:
                        self.client.create_payload_index(
                            self.collection, name, field_schema=_index_schema(kind), wait=True
                        )

    def _check_layout(self, dim: int) -> None:
        params = self.client.get_collection(self.collection).config.params
        vectors = params.vectors if isinstance(params.vectors, dict) else {}
        dense = vectors.get(DENSE)
        if dense is None or dense.multivector_config is None:
            raise StoreError(f"collection {self.collection!r} has no multivector {DENSE!r}")
        if dense.size != dim:
            raise StoreError(f"collection {self.collection!r} holds dim {dense.size} vectors, asked for {dim}")
        sparse = (params.sparse_vectors or {}).get(SPARSE)
        if sparse is None or sparse.modifier != m.Modifier.IDF:
            raise StoreError(f"collection {self.collection!r} has no IDF sparse vector {SPARSE!r}")

    def flush(self) -> None:
        """Writes are acknowledged after the server applied them (wait=True); nothing is buffered here."""

    def close(self) -> None:
        if self._closed:
            return
        with self._lock:
            self._closed = True
            try:
                self.client.close()
            except Exception as e:
                raise StoreError(f"qdrant close: {e}") from e

    # -- writes --------------------------------------------------------------------------------------

    def upsert(self, points: list[MemoryPoint]) -> None:
        if not points:
            return
        validate_points(points, self._dim)
        structs = []
        for p in points:
            vectors: dict[str, Any] = {
                SPARSE: m.SparseVector(indices=list(p.sparse.indices), values=list(p.sparse.values))
            }
            if p.dense is not None:
                vectors[DENSE] = [list(map(float, row)) for row in p.dense]
            structs.append(m.PointStruct(id=p.point_id, vector=vectors, payload=stored_payload(p)))
        with self._guard("upsert"):
            self.client.upsert(self.collection, points=structs, wait=True)

    def _require(self, point_id: str) -> None:
        # The server answers 404 for a missing point; local mode raises KeyError. Say it one way.
        if not self.client.retrieve(self.collection, [point_id], with_payload=False, with_vectors=False):
            raise StoreError(f"no point with id {point_id}")

    def set_payload(self, point_id: str, fields: dict[str, Any]) -> None:
        with self._guard("set_payload"):
            self._require(point_id)
            self.client.set_payload(self.collection, payload=dict(fields), points=[point_id], wait=True)

    def set_dense(self, point_id: str, dense: list[list[float]], fields: dict[str, Any]) -> None:
        validate_dense(dense, self._dim, what=f"point {point_id} dense vector")
        rows = [list(map(float, row)) for row in dense]
        with self._guard("set_dense"):
            self._require(point_id)
            self.client.update_vectors(
                self.collection, points=[m.PointVectors(id=point_id, vector={DENSE: rows})], wait=True
            )
            self.client.set_payload(
                self.collection, payload={**fields, "has_dense": True}, points=[point_id], wait=True
            )

    # -- reads ---------------------------------------------------------------------------------------

    def _scroll(
        self, flt: m.Filter | None, limit: int | None = None, *, with_vector: bool = False
    ) -> Iterator[m.Record]:
        offset: Any = None
        seen = 0
        while True:
            page = _SCROLL_PAGE if limit is None else min(_SCROLL_PAGE, limit - seen)
            if page <= 0:
                return
            with self._guard("scroll"):
                records, offset = self.client.scroll(
                    self.collection,
                    scroll_filter=flt,
                    limit=page,
                    offset=offset,
                    with_payload=True,
                    with_vectors=[DENSE] if with_vector else False,
                )
            yield from records
            seen += len(records)
            if offset is None or not records:
                return

    def retrieve(self, point_ids: list[str]) -> dict[str, dict[str, Any]]:
        if not point_ids:
            return {}
        with self._guard("retrieve"):
            records = self.client.retrieve(self.collection, list(point_ids), with_payload=True, with_vectors=False)
        return {str(r.id): dict(r.payload or {}) for r in records}

    def find_by_dedup_keys(self, workspace_id: str, keys: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        if not keys:
            return {}
        flt = m.Filter(
            must=[_workspace(workspace_id), m.FieldCondition(key="dedup_key", match=m.MatchAny(any=list(keys)))]
        )
        found: dict[str, tuple[str, dict[str, Any]]] = {}
        for r in self._scroll(flt):
            payload = dict(r.payload or {})
            found.setdefault(payload["dedup_key"], (str(r.id), payload))
        return found

    def find_by_alias(self, workspace_id: str, entry_ids: list[str]) -> dict[str, str]:
        if not entry_ids:
            return {}
        wanted = set(entry_ids)
        flt = m.Filter(
            must=[_workspace(workspace_id), m.FieldCondition(key="aliases", match=m.MatchAny(any=list(wanted)))]
        )
        out: dict[str, str] = {}
        for r in self._scroll(flt):
            for alias in (r.payload or {}).get("aliases") or []:
                if alias in wanted:
                    out.setdefault(alias, str(r.id))
        return out

    def find_entries(self, scope: ScopeFilter, entry_ids: list[str], *, with_dense: bool = False) -> list[StoredHit]:
        if not entry_ids:
            return []
        flt = m.Filter(
            must=[scope_filter(scope), m.FieldCondition(key="entry_id", match=m.MatchAny(any=sorted(set(entry_ids))))]
        )
        return [
            StoredHit(str(r.id), 0.0, dict(r.payload or {}), dense_rows(r.vector) if with_dense else None)
            for r in self._scroll(flt, None, with_vector=with_dense)
        ]

    def linked_to(self, workspace_id: str, entry_ids: list[str]) -> list[tuple[str, dict[str, Any]]]:
        if not entry_ids:
            return []
        flt = m.Filter(
            must=[_workspace(workspace_id), m.FieldCondition(key="links", match=m.MatchAny(any=sorted(set(entry_ids))))]
        )
        return [(str(r.id), dict(r.payload or {})) for r in self._scroll(flt)]

    def missing_dense(self, limit: int) -> list[tuple[str, dict[str, Any]]]:
        if limit <= 0:
            return []
        flt = m.Filter(must_not=[_has_dense()])
        return [(str(r.id), dict(r.payload or {})) for r in self._scroll(flt, limit)]

    def count(self, workspace_id: str | None = None, *, has_dense: bool | None = None) -> int:
        must: list[Any] = []
        if workspace_id is not None:
            must.append(_workspace(workspace_id))
        must_not: list[Any] = []
        if has_dense is not None:
            (must if has_dense else must_not).append(_has_dense())
        flt = m.Filter(must=must, must_not=must_not) if must or must_not else None
        with self._guard("count"):
            res = self.client.count(self.collection, count_filter=flt, exact=True)
        return int(res.count)

    # -- queries -------------------------------------------------------------------------------------

    def _leg_limit(self, limit: int, prefetch: int | None = None) -> int:
        return max(limit, prefetch if prefetch is not None else self.prefetch_limit)

    @staticmethod
    def _dense_leg(vector: list[float], flt: m.Filter, limit: int) -> m.Prefetch:
        # A one-row multivector: max-sim against it is the best chunk's cosine.
        return m.Prefetch(query=[list(map(float, vector))], using=DENSE, filter=flt, limit=limit)

    @staticmethod
    def _sparse_leg(
        sparse: SparseVec, scope: ScopeFilter, flt: m.Filter, limit: int, inner: m.Prefetch | None = None
    ) -> m.Prefetch:
        """BM25 over the scope, or (`inner`) over the inner prefetch's candidates only."""
        # IDF statistics over the request's workspace only (not the whole collection, not the scope).
        idf = m.SearchParams(idf=m.IdfCorpusParams(corpus=m.Filter(must=[_workspace(scope.workspace_id)])))
        return m.Prefetch(
            prefetch=[inner] if inner is not None else None,
            query=m.SparseVector(indices=list(sparse.indices), values=list(sparse.values)),
            using=SPARSE,
            filter=flt,
            params=idf,
            limit=limit,
        )

    def _run(self, prefetch: m.Prefetch, flt: m.Filter, limit: int, with_dense: bool) -> list[StoredHit]:
        with self._guard("query"):
            res = self.client.query_points(
                self.collection,
                prefetch=[prefetch],
                query=_times_importance(),
                query_filter=flt,
                limit=limit,
                with_payload=True,
                with_vectors=[DENSE] if with_dense else False,
            )
        hits = []
        for p in res.points:
            dense = dense_rows(p.vector) if with_dense else None
            hits.append(StoredHit(point_id=str(p.id), score=float(p.score), payload=dict(p.payload or {}), dense=dense))
        return hits

    def query_dense(
        self, vector: list[float], scope: ScopeFilter, limit: int, *, with_dense: bool = False
    ) -> list[StoredHit]:
        validate_vector(vector, self._dim)
        if limit <= 0:
            return []
        flt = scope_filter(scope)
        return self._run(self._dense_leg(vector, flt, self._leg_limit(limit)), flt, limit, with_dense)

    def query_sparse(
        self, sparse: SparseVec, scope: ScopeFilter, limit: int, *, with_dense: bool = False
    ) -> list[StoredHit]:
        validate_sparse(sparse, what="query sparse vector")
        if limit <= 0 or not sparse.indices:
            return []  # no terms: nothing can match lexically
        flt = scope_filter(scope)
        return self._run(self._sparse_leg(sparse, scope, flt, self._leg_limit(limit)), flt, limit, with_dense)

    def query_hybrid(
        self,
        vector: list[float],
        sparse: SparseVec,
        scope: ScopeFilter,
        limit: int,
        fusion: Fusion,
        *,
        with_dense: bool = False,
    ) -> list[StoredHit]:
        validate_vector(vector, self._dim)
        validate_sparse(sparse, what="query sparse vector")
        if limit <= 0:
            return []
        flt = scope_filter(scope)
        leg = self._leg_limit(limit, fusion.prefetch_limit)
        legs, weights = hybrid_legs(self, vector, sparse, scope, flt, leg, fusion)
        fuse: Any = (
            m.FusionQuery(fusion=m.Fusion.DBSF)
            if fusion.method == "dbsf"
            else m.RrfQuery(rrf=m.Rrf(k=fusion.k, weights=weights))
        )
        fused = m.Prefetch(prefetch=legs, query=fuse, filter=flt, limit=leg * len(legs))
        return self._run(fused, flt, limit, with_dense)
