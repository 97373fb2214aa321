"""EdgeStore: the memory store on Qdrant Edge, an in-process Qdrant shard on disk (SPEC §6, embedded).

One shard directory holds the collection: a named multivector `dense` (cosine, max-sim over the chunk
rows) and a named sparse vector `bm25` with the IDF modifier. Scores come from the engine: the legs are
prefetches, fusion is Qdrant's RRF/DBSF, and the importance multiplier is a Formula over `$score`.

Qdrant Edge is single-process (the shard's WAL is locked by the process that opened it) and its thread
safety under concurrent update+query is not documented, so every shard call holds one RLock: the recall
service queries from a thread pool while the embedding consumer upserts.
Size: over 400 lines while it mirrors the other adapter; issue 8 part 2 writes the shared code once.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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
    import qdrant_edge as qe
except ImportError as e:  # pragma: no cover - a core dependency; guard for a clear hint
    raise ImportError("EdgeStore needs qdrant-edge-py: pip install 'qdrant-edge-py>=0.9'") from e

_SCROLL_PAGE = 256
_FATAL = (KeyboardInterrupt, SystemExit, GeneratorExit)


def _config(dim: int) -> qe.EdgeConfig:
    return qe.EdgeConfig(
        vectors={
            DENSE: qe.EdgeVectorParams(
                size=dim,
                distance=qe.Distance.Cosine,
                multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim),
            )
        },
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
    )


def _index_schema(kind: str) -> Any:
    if kind == "tenant":
        return qe.KeywordIndexParams(is_tenant=True)
    return {
        "keyword": qe.PayloadSchemaType.Keyword,
        "float": qe.PayloadSchemaType.Float,
        "datetime": qe.PayloadSchemaType.Datetime,
        "bool": qe.PayloadSchemaType.Bool,
    }[kind]


def _match(key: str, value: Any) -> qe.FieldCondition:
    return qe.FieldCondition(key, match=qe.MatchValue(value))


def _has_dense() -> qe.HasVectorCondition:
    # Not `has_dense == true`: qdrant-edge-py turns MatchValue(True) into the integer 1, which never
    # matches a JSON boolean, so a bool match cannot be expressed. The vector itself is the truth anyway.
    return qe.HasVectorCondition(DENSE)


def _workspace(workspace_id: str) -> qe.FieldCondition:
    return _match("workspace_id", workspace_id)


def scope_filter(scope: ScopeFilter) -> qe.Filter:
    """Workspace always; `own`: the agent's memories; `crew_shared`: the crew's memories that are the
    agent's own or high-value (only high-value ones without an agent)."""
    must: list[Any] = [_workspace(scope.workspace_id)]
    high = qe.FieldCondition("importance_score", range=qe.RangeFloat(gte=scope.high_value))
    if scope.scope == "own":
        must.append(_match("agent_id", scope.agent_id))
    else:
        must.append(_match("crew_id", scope.crew_id))
        if scope.agent_id:
            must.append(qe.Filter(should=[_match("agent_id", scope.agent_id), high]))
        else:
            must.append(high)
    return qe.Filter(must=must)


def _times_importance() -> qe.Formula:
    return qe.Formula(
        qe.Expression.Mult([qe.Expression.Variable("$score"), qe.Expression.Variable("importance_score")]),
        defaults={"importance_score": DEFAULT_IMPORTANCE},
    )


def _pid(value: Any) -> str:
    return str(value)


def _point_id(pid: str) -> uuid.UUID | str:
    try:
        return uuid.UUID(pid)
    except (ValueError, TypeError, AttributeError) as e:
        raise StoreError(f"point id {pid!r} is not a UUID") from e


class EdgeStore(MemoryStore):
    """MemoryStore on a Qdrant Edge shard at `path` (created on first `ensure_collection`)."""

    backend = "qdrant-edge"

    def __init__(self, path: str | Path, *, prefetch_limit: int = DEFAULT_PREFETCH) -> None:
        self.path = Path(path)
        self.prefetch_limit = prefetch_limit
        self._lock = threading.RLock()
        self._shard: qe.EdgeShard | None = None
        self._dim: int | None = None
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------------

    def _has_data(self) -> bool:
        return self.path.is_dir() and any(self.path.iterdir())

    @contextmanager
    def _guard(self, op: str) -> Iterator[None]:
        """Hold the shard lock and wrap engine errors (including Rust panics) in our exceptions."""
        with self._lock:
            try:
                yield
            except (StoreError, StoreUnavailable):
                raise
            except _FATAL:
                raise
            except BaseException as e:  # pyo3 PanicException derives from BaseException
                msg = str(e)
                if "not initialized" in msg or "WAL" in msg or isinstance(e, OSError):
                    raise StoreUnavailable(f"qdrant-edge {op} at {self.path}: {msg}") from e
                raise StoreError(f"qdrant-edge {op}: {msg}") from e

    def _open(self) -> qe.EdgeShard:
        """The open shard; an existing one on disk is loaded on first use."""
        if self._closed:
            raise StoreUnavailable(f"EdgeStore at {self.path} is closed")
        if self._shard is None:
            if not self._has_data():
                raise StoreUnavailable(f"no Qdrant Edge shard at {self.path}: call ensure_collection(dim)")
            with self._guard("load"):
                self._shard = qe.EdgeShard.load(str(self.path))
        return self._shard

    def ensure_collection(self, dim: int) -> None:
        if dim < 1:
            raise StoreError(f"dimension must be positive, got {dim}")
        with self._guard("ensure_collection"):
            if self._closed:
                raise StoreUnavailable(f"EdgeStore at {self.path} is closed")
            if self._shard is not None and self._dim != dim:
                # Opened lazily (or for another dim): reopen with the config so the engine checks it.
                self._shard.close()
                self._shard = None
            if self._shard is None:
                if self._has_data():
                    self._shard = qe.EdgeShard.load(str(self.path), _config(dim))
                else:
                    self.path.mkdir(parents=True, exist_ok=True)
                    self._shard = qe.EdgeShard.create(str(self.path), _config(dim))
            self._dim = dim
            present = set(self._shard.info().payload_schema)
            for name, kind in PAYLOAD_INDEXES.items():
                if name not in present:
                    self._shard.update(qe.UpdateOperation.create_field_index(name, _index_schema(kind)))

    def flush(self) -> None:
        with self._guard("flush"):
            if self._shard is not None:
                self._shard.flush()

    def close(self) -> None:
        with self._guard("close"):
            shard, self._shard, self._closed = self._shard, None, True
            if shard is not None:
                try:
                    shard.flush()
                finally:
                    shard.close()

    def optimize(self) -> bool:
        """Run the shard's segment optimizers (merge, index); blocking. Edge does not run them itself."""
        with self._guard("optimize"):
            return bool(self._open().optimize())

    def payload_indexes(self) -> set[str]:
        """Names of the indexed payload fields."""
        with self._guard("info"):
            return set(self._open().info().payload_schema)

    # -- writes --------------------------------------------------------------------------------------

    def upsert(self, points: list[MemoryPoint]) -> None:
        if not points:
            return
        validate_points(points, self._dim)
        edge_points = []
        for p in points:
            vectors: dict[str, Any] = {SPARSE: qe.SparseVector(list(p.sparse.indices), list(p.sparse.values))}
            if p.dense is not None:
                vectors[DENSE] = [list(map(float, row)) for row in p.dense]
            edge_points.append(qe.Point(_point_id(p.point_id), vectors, stored_payload(p)))
        with self._guard("upsert"):
            self._open().update(qe.UpdateOperation.upsert_points(edge_points))

    def set_payload(self, point_id: str, fields: dict[str, Any]) -> None:
        pid = _point_id(point_id)
        with self._guard("set_payload"):
            self._open().update(qe.UpdateOperation.set_payload([pid], dict(fields)))

    def set_dense(self, point_id: str, dense: list[list[float]], fields: dict[str, Any]) -> None:
        validate_dense(dense, self._dim, what=f"point {point_id} dense vector")
        pid = _point_id(point_id)
        rows = [list(map(float, row)) for row in dense]
        with self._guard("set_dense"):
            shard = self._open()
            shard.update(qe.UpdateOperation.update_vectors([qe.PointVectors(pid, {DENSE: rows})]))
            shard.update(qe.UpdateOperation.set_payload([pid], {**fields, "has_dense": True}))

    # -- reads ---------------------------------------------------------------------------------------

    def _scroll(self, flt: qe.Filter | None, limit: int | None = None, *, with_vector: bool = False) -> Iterator[Any]:
        offset: Any = None
        seen = 0
        while True:
            page = _SCROLL_PAGE if limit is None else min(_SCROLL_PAGE, limit - seen)
            if page <= 0:
                return
            with self._guard("scroll"):
                records, offset = self._open().scroll(
                    qe.ScrollRequest(
                        offset=offset,
                        limit=page,
                        filter=flt,
                        with_payload=True,
                        with_vector=[DENSE] if with_vector else False,
                    )
                )
            yield from records
            seen += len(records)
            if offset is None or not records:
                return

    def retrieve(self, point_ids: list[str]) -> dict[str, dict[str, Any]]:
        if not point_ids:
            return {}
        ids: list[Any] = [_point_id(p) for p in point_ids]
        with self._guard("retrieve"):
            records = self._open().retrieve(ids, True, False)
        return {_pid(r.id): dict(r.payload or {}) for r in records}

    def find_by_dedup_keys(self, workspace_id: str, keys: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        if not keys:
            return {}
        flt = qe.Filter(must=[_workspace(workspace_id), qe.FieldCondition("dedup_key", match=qe.MatchAny(keys))])
        found: dict[str, tuple[str, dict[str, Any]]] = {}
        for r in self._scroll(flt):
            payload = dict(r.payload or {})
            found.setdefault(payload["dedup_key"], (_pid(r.id), payload))
        return found

    def find_by_alias(self, workspace_id: str, entry_ids: list[str]) -> dict[str, str]:
        if not entry_ids:
            return {}
        wanted = set(entry_ids)
        flt = qe.Filter(must=[_workspace(workspace_id), qe.FieldCondition("aliases", match=qe.MatchAny(list(wanted)))])
        out: dict[str, str] = {}
        for r in self._scroll(flt):
            for alias in (r.payload or {}).get("aliases") or []:
                if alias in wanted:
                    out.setdefault(alias, _pid(r.id))
        return out

    def find_entries(self, scope: ScopeFilter, entry_ids: list[str], *, with_dense: bool = False) -> list[StoredHit]:
        if not entry_ids:
            return []
        flt = qe.Filter(
            must=[scope_filter(scope), qe.FieldCondition("entry_id", match=qe.MatchAny(sorted(set(entry_ids))))]
        )
        return [
            StoredHit(_pid(r.id), 0.0, dict(r.payload or {}), dense_rows(r.vector) if with_dense else None)
            for r in self._scroll(flt, None, with_vector=with_dense)
        ]

    def linked_to(self, workspace_id: str, entry_ids: list[str]) -> list[tuple[str, dict[str, Any]]]:
        if not entry_ids:
            return []
        flt = qe.Filter(
            must=[_workspace(workspace_id), qe.FieldCondition("links", match=qe.MatchAny(sorted(set(entry_ids))))]
        )
        return [(_pid(r.id), dict(r.payload or {})) for r in self._scroll(flt)]

    def missing_dense(self, limit: int) -> list[tuple[str, dict[str, Any]]]:
        if limit <= 0:
            return []
        flt = qe.Filter(must_not=[_has_dense()])
        return [(_pid(r.id), dict(r.payload or {})) for r in self._scroll(flt, limit)]

    def count(self, workspace_id: str | None = None, *, has_dense: bool | None = None) -> int:
        must: list[Any] = []
        if workspace_id is not None:
            must.append(_workspace(workspace_id))
        must_not: list[Any] = []
        if has_dense is not None:
            (must if has_dense else must_not).append(_has_dense())
        flt = qe.Filter(must=must, must_not=must_not) if must or must_not else None
        with self._guard("count"):
            return int(self._open().count(qe.CountRequest(exact=True, filter=flt)))

    # -- queries -------------------------------------------------------------------------------------

    def _leg_limit(self, limit: int, prefetch: int | None = None) -> int:
        return max(limit, prefetch if prefetch is not None else self.prefetch_limit)

    def _dense_leg(self, vector: list[float], flt: qe.Filter, limit: int) -> qe.Prefetch:
        return qe.Prefetch(limit=limit, query=qe.Query.Nearest([list(map(float, vector))], using=DENSE), filter=flt)

    def _sparse_leg(
        self, sparse: SparseVec, scope: ScopeFilter, flt: qe.Filter, limit: int, inner: qe.Prefetch | None = None
    ) -> qe.Prefetch:
        """BM25 over the scope, or (`inner`) over the inner prefetch's candidates only."""
        # IDF statistics over the request's workspace only (not the whole collection, not the scope).
        idf = qe.SearchParams(idf=qe.IdfParams(corpus=qe.Filter(must=[_workspace(scope.workspace_id)])))
        vec = qe.SparseVector(list(sparse.indices), list(sparse.values))
        return qe.Prefetch(
            limit=limit,
            query=qe.Query.Nearest(vec, using=SPARSE),
            filter=flt,
            params=idf,
            prefetches=[inner] if inner is not None else None,
        )

    def _run(self, prefetch: qe.Prefetch, flt: qe.Filter, limit: int, with_dense: bool) -> list[StoredHit]:
        request = qe.QueryRequest(
            limit=limit,
            prefetches=[prefetch],
            query=_times_importance(),
            filter=flt,
            with_payload=True,
            with_vector=[DENSE] if with_dense else False,
        )
        with self._guard("query"):
            points = self._open().query(request)
        hits = []
        for p in points:
            dense = dense_rows(p.vector) if with_dense else None
            hits.append(
                StoredHit(point_id=_pid(p.id), score=float(p.score), payload=dict(p.payload or {}), dense=dense)
            )
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
        fuse: Any = qe.Fusion.Dbsf() if fusion.method == "dbsf" else qe.Fusion.Rrf(k=fusion.k, weights=weights)
        fused = qe.Prefetch(limit=leg * len(legs), prefetches=legs, query=fuse, filter=flt)
        return self._run(fused, flt, limit, with_dense)
