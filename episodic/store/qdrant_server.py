"""QdrantServerStore: the memory store on a Qdrant server or cluster through qdrant-client (SPEC §6).

`ClientEngine` is the thin backend under `episodic.store.facade.QdrantStore`: the same collection layout and the
same engine-side scoring as Qdrant Edge (a named multivector `dense`, cosine, max-sim; named sparse
vectors `bm25` and `bm25_context` with the IDF modifier, a collection from before `bm25_context` opened
as it is and run without it; prefetch legs fused by the engine; a Formula that multiplies by
`importance_score`), in qdrant-client's types, with its errors wrapped.
Size: one engine's whole translation (its calls, vocabulary and error mapping) stays in one module.

qdrant-client's local mode (`location=":memory:"` or `path=...`) speaks the same API and runs the
contract suite. Known local-mode differences, none of which changes results:
- payload indexes have no effect there (it scans), so creating them is a no-op with a warning, which we
  silence; the server builds them, with `workspace_id` as the tenant index;
- it searches exactly, so HNSW settings are ignored;
- it is single-process (the `path` directory is locked), like Qdrant Edge, and we serialise calls to it
  with a lock because its collections are plain Python objects.
"""

from __future__ import annotations

import copy
import functools
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from episodic.kernel.errors import StoreError, StoreUnavailable
from episodic.kernel.ports import CONTEXT, DENSE, SPARSE, MemoryPoint, SparseVec
from episodic.store.facade import DEFAULT_PREFETCH, Engine, QdrantStore, Record, ScoredRecord
from episodic.store.query import Filter, Lowering, Query
from episodic.store.rules import ACORN_MAX_SELECTIVITY, HNSW_EF_SEARCH, IndexKind, has_graph

try:
    from qdrant_client import QdrantClient
    from qdrant_client import models as m
    from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
except ImportError as e:  # pragma: no cover - a core dependency; guard for a clear hint
    raise ImportError("QdrantServerStore needs qdrant-client: pip install 'qdrant-client>=1.16'") from e


# As the embedded store's dense legs (episodic.store.edge): ACORN only for filters on fields without graphs.
_DENSE_PARAMS = m.SearchParams(hnsw_ef=HNSW_EF_SEARCH)
_ACORN_PARAMS = m.SearchParams(
    hnsw_ef=HNSW_EF_SEARCH, acorn=m.AcornSearchParams(enable=True, max_selectivity=ACORN_MAX_SELECTIVITY)
)


def _index_schema(name: str, kind: IndexKind) -> Any:
    """The payload index of field `name`: graphs per value only for the fields that scope a recall
    (`rules.GRAPH_FIELDS`, as the embedded store's)."""
    graph = has_graph(name)
    if kind == "tenant":
        return m.KeywordIndexParams(type=m.KeywordIndexType.KEYWORD, is_tenant=True, enable_hnsw=graph)
    if kind == "keyword":
        return m.KeywordIndexParams(type=m.KeywordIndexType.KEYWORD, enable_hnsw=graph)
    if kind == "float":
        return m.FloatIndexParams(type=m.FloatIndexType.FLOAT, enable_hnsw=graph)
    if kind == "datetime":
        return m.DatetimeIndexParams(type=m.DatetimeIndexType.DATETIME, enable_hnsw=graph)
    return m.BoolIndexParams(type=m.BoolIndexType.BOOL, enable_hnsw=graph)


@functools.lru_cache(maxsize=4)
def _times_importance(key: str, default: float) -> m.FormulaQuery:
    """The same for every query: built once (requests only read it)."""
    return m.FormulaQuery(formula=m.MultExpression(mult=["$score", key]), defaults={key: default})


def _dt(text: str | None) -> datetime | None:
    """RFC 3339 text as the aware datetime qdrant-client's DatetimeRange is typed for."""
    if text is None:
        return None
    dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


_RAW_SCORE = m.FormulaQuery(formula="$score")  # the prefetch's score as it is


@functools.lru_cache(maxsize=8)
def _piece_prior(key: str, penalty: float) -> m.FormulaQuery:
    """`$score - penalty * ln(key)`, key 1 (no penalty) when the payload lacks it."""
    return m.FormulaQuery(
        formula=m.SumExpression(sum=["$score", m.MultExpression(mult=[-penalty, m.LnExpression(ln=key)])]),
        defaults={key: 1},
    )


_MAXSIM = m.MultiVectorConfig(comparator=m.MultiVectorComparator.MAX_SIM)


def _with_payload(fields: Sequence[str] | None) -> list[str] | bool:
    return list(fields) if fields is not None else True


class ClientEngine(Engine):
    """A collection through qdrant-client: a server (`url`), or local mode (`location`/`path`)."""

    def __init__(
        self,
        url: str | None,
        api_key: str | None,
        *,
        collection: str,
        location: str | None,
        path: str | Path | None,
        timeout: float,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        if sum(x is not None for x in (url, location, path)) != 1:
            raise ValueError("give exactly one of url (a server), location (':memory:') or path (local mode)")
        self.collection = collection
        self.local = url is None
        self.name = "qdrant-local" if self.local else "qdrant"
        self._lock: Any = threading.RLock() if self.local else nullcontext()
        self._closed = False
        self._owner: ClientEngine | None = None  # set on a sibling: the engine whose client this is
        self._where = where = url or location or str(path)
        try:
            if url is not None:
                # options: the API key and TLS verification (`episodic.kernel.transport_security.qdrant_options`)
                kw = {"api_key": api_key, **(options or {})}
                self.client = QdrantClient(url=url, timeout=int(timeout), check_compatibility=False, **kw)
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
        if self._closed or (self._owner is not None and self._owner._closed):
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

    def ensure(self, dim: int, indexes: Mapping[str, IndexKind], vector: str = DENSE) -> None:
        with self._guard("ensure_collection"):
            if not self.client.collection_exists(self.collection):
                try:
                    self.client.create_collection(
                        self.collection,
                        vectors_config={
                            vector: m.VectorParams(size=dim, distance=m.Distance.COSINE, multivector_config=_MAXSIM)
                        },
                        sparse_vectors_config={
                            name: m.SparseVectorParams(modifier=m.Modifier.IDF) for name in (SPARSE, CONTEXT)
                        },
                        # Multitenancy recipe: every vector query is filtered by workspace, so build
                        # per-tenant graphs (payload_m) instead of one global graph (m=0).
                        hnsw_config=m.HnswConfigDiff(m=0, payload_m=16),
                    )
                except UnexpectedResponse as e:  # created by another process meanwhile
                    if e.status_code != 409 and not self.client.collection_exists(self.collection):
                        raise
            self._check_layout(dim, vector)
            with warnings.catch_warnings():
                # Local mode: "Payload indexes have no effect in the local Qdrant" (it scans).
                warnings.simplefilter("ignore", UserWarning)
                present = set(self.client.get_collection(self.collection).payload_schema or {})
                for name, kind in indexes.items():
                    if name not in present:
                        self.client.create_payload_index(
                            self.collection, name, field_schema=_index_schema(name, kind), wait=True
                        )

    def _check_layout(self, dim: int, vector: str) -> None:
        params = self.client.get_collection(self.collection).config.params
        vectors = params.vectors if isinstance(params.vectors, dict) else {}
        dense = vectors.get(vector)
        if dense is None or dense.multivector_config is None:
            raise StoreError(f"collection {self.collection!r} has no multivector {vector!r}")
        if dense.size != dim:
            raise StoreError(f"collection {self.collection!r} holds dim {dense.size} vectors, asked for {dim}")
        sparse_vectors = params.sparse_vectors or {}
        sparse = sparse_vectors.get(SPARSE)
        if sparse is None or sparse.modifier != m.Modifier.IDF:
            raise StoreError(f"collection {self.collection!r} has no IDF sparse vector {SPARSE!r}")
        context = sparse_vectors.get(CONTEXT)
        if context is not None and context.modifier != m.Modifier.IDF:
            raise StoreError(f"collection {self.collection!r}: sparse vector {CONTEXT!r} has no IDF modifier")
        # missing: a collection created before context-aware indexing, used without it
        self.has_context = context is not None

    def _layout(self) -> dict[str, int]:
        params = self.client.get_collection(self.collection).config.params
        vectors = params.vectors if isinstance(params.vectors, dict) else {}
        return {str(name): int(v.size) for name, v in vectors.items()}

    def dense_vectors(self) -> dict[str, int]:
        with self._guard("layout"):
            return self._layout() if self.client.collection_exists(self.collection) else {}

    def add_dense(self, name: str, dim: int) -> None:
        with self._guard("add_dense"):
            have = self._layout().get(name)
            if have is None:
                dense = m.DenseVectorConfig(size=dim, distance=m.Distance.COSINE, multivector_config=_MAXSIM)
                config = m.DenseVectorNameConfig(dense=dense)
                self.client.create_vector_name(self.collection, name, config, wait=True)
            elif have != dim:
                raise StoreError(f"collection {self.collection!r}: vector {name!r} has dim {have}, asked for {dim}")

    def drop_dense(self, name: str) -> None:
        with self._guard("drop_dense"):
            if name in self._layout():
                self.client.delete_vector_name(self.collection, name, wait=True)

    def set_vectors(self, name: str, rows: Mapping[str, list[list[float]]], fields: dict[str, Any]) -> int:
        """Two batch requests for the points that exist (their vectors, then `fields`); a point deleted
        between the check and the batch fails it, which is then applied point by point."""
        if not rows:
            return 0
        with self._guard("set_vectors"):
            found = self.client.retrieve(self.collection, list(rows), with_payload=False, with_vectors=False)
            present = [pid for pid in rows if pid in {str(r.id) for r in found}]
            if not present:
                return 0
            try:
                points = [m.PointVectors(id=pid, vector={name: rows[pid]}) for pid in present]
                self.client.update_vectors(self.collection, points=points, wait=True)
                self.client.set_payload(self.collection, payload=fields, points=list(present), wait=True)
                return len(present)
            except (UnexpectedResponse, KeyError):
                written = 0
                for pid in present:
                    if self.client.retrieve(self.collection, [pid], with_payload=False, with_vectors=False):
                        self.client.update_vectors(
                            self.collection, points=[m.PointVectors(id=pid, vector={name: rows[pid]})], wait=True
                        )
                        self.client.set_payload(self.collection, payload=fields, points=[pid], wait=True)
                        written += 1
                return written

    def _with_vectors(self, with_dense: bool, using: str | None = None) -> list[str] | bool:
        return [using or self.dense] if with_dense else False

    def flush(self) -> None:
        """Writes are acknowledged after the server applied them (wait=True); nothing is buffered here."""

    def close(self) -> None:
        if self._closed:
            return
        with self._lock:
            self._closed = True
            if self._owner is not None:  # a sibling: the client is its owner's to close
                return
            try:
                self.client.close()
            except Exception as e:
                raise StoreError(f"qdrant close: {e}") from e

    def sibling(self, suffix: str) -> ClientEngine:
        """The collection `<collection>_<suffix>` through the same client (local mode locks its path, so a
        second client could not open it) and the same lock; closing it leaves the client open."""
        twin = copy.copy(self)
        twin.collection = f"{self.collection}_{suffix}"
        twin._owner = self
        twin._closed = False
        return twin

    # -- writes --------------------------------------------------------------------------------------

    def upsert(self, points: Sequence[MemoryPoint], condition: Filter | None = None) -> None:
        structs = []
        for p in points:
            vectors: dict[str, Any] = {SPARSE: self.sparse_vector(list(p.sparse.indices), list(p.sparse.values))}
            if p.dense is not None:
                vectors[p.vector] = p.dense
            if p.context is not None and self.has_context:
                vectors[CONTEXT] = self.sparse_vector(list(p.context.indices), list(p.context.values))
            structs.append(m.PointStruct(id=p.point_id, vector=vectors, payload=p.payload))
        with self._guard("upsert"):
            update_filter = Lowering(self)(condition) if condition is not None else None
            self.client.upsert(self.collection, points=structs, wait=True, update_filter=update_filter)

    def delete(self, point_ids: list[str]) -> None:
        with self._guard("delete"):
            self.client.delete(self.collection, points_selector=m.PointIdsList(points=list(point_ids)), wait=True)

    def _require(self, point_id: str) -> None:
        # The server answers 404 for a missing point; local mode raises KeyError. Say it one way.
        if not self.client.retrieve(self.collection, [point_id], with_payload=False, with_vectors=False):
            raise StoreError(f"no point with id {point_id}")

    def set_payload(self, point_id: str, fields: dict[str, Any]) -> None:
        with self._guard("set_payload"):
            self._require(point_id)
            self.client.set_payload(self.collection, payload=fields, points=[point_id], wait=True)

    def set_payload_where(self, flt: Filter, fields: dict[str, Any]) -> None:
        with self._guard("set_payload_where"):
            self.client.set_payload(
                self.collection, payload=fields, points=m.FilterSelector(filter=Lowering(self)(flt)), wait=True
            )

    def set_payloads_where_read(
        self, items: Sequence[tuple[Filter, dict[str, Any]]], point_ids: list[str], fields: Sequence[str]
    ) -> Sequence[Record]:
        """Local mode: the writes and the read-back under one hold of its lock (see
        Engine.set_payloads_where_read). A server applies each conditional write atomically; its read-back
        is a separate call, as in the base class."""
        with self._lock:
            return super().set_payloads_where_read(items, point_ids, fields)

    def set_vector_where(self, name: str, point_id: str, rows: list[list[float]], flt: Filter) -> None:
        with self._guard("set_vector_where"):
            self.client.update_vectors(
                self.collection,
                points=[m.PointVectors(id=point_id, vector={name: rows})],
                update_filter=Lowering(self)(flt),
                wait=True,
            )

    def set_context_where(self, point_id: str, context: SparseVec, flt: Filter) -> None:
        vector = self.sparse_vector(list(context.indices), list(context.values))
        with self._guard("set_context_where"):
            self.client.update_vectors(
                self.collection,
                points=[m.PointVectors(id=point_id, vector={CONTEXT: vector})],
                update_filter=Lowering(self)(flt),
                wait=True,
            )

    def delete_where(self, flt: Filter) -> None:
        with self._guard("delete_where"):
            selector = m.FilterSelector(filter=Lowering(self)(flt))
            self.client.delete(self.collection, points_selector=selector, wait=True)

    def set_payloads(self, updates: Mapping[str, dict[str, Any]]) -> int:
        """One batch request (`batch_update_points`) for the points that exist; a point deleted between the
        check and the batch fails it (the server applies none of it after the failure; local mode stops
        there), so the batch is then applied point by point, skipping the missing ones."""
        if not updates:
            return 0
        with self._guard("set_payloads"):
            found = self.client.retrieve(self.collection, list(updates), with_payload=False, with_vectors=False)
            present = [pid for pid in updates if pid in {str(r.id) for r in found}]
            ops: list[Any] = [
                m.SetPayloadOperation(set_payload=m.SetPayload(payload=updates[pid], points=[pid])) for pid in present
            ]
            try:
                if ops:
                    self.client.batch_update_points(self.collection, ops, wait=True)
                return len(ops)
            except (UnexpectedResponse, KeyError):
                written = 0
                for pid in present:
                    if self.client.retrieve(self.collection, [pid], with_payload=False, with_vectors=False):
                        self.client.set_payload(self.collection, payload=updates[pid], points=[pid], wait=True)
                        written += 1
                return written

    def set_dense(self, point_id: str, rows: list[list[float]], fields: dict[str, Any], vector: str = DENSE) -> None:
        with self._guard("set_dense"):
            self._require(point_id)
            self.client.update_vectors(
                self.collection, points=[m.PointVectors(id=point_id, vector={vector: rows})], wait=True
            )
            self.client.set_payload(self.collection, payload=fields, points=[point_id], wait=True)

    def set_context(self, point_id: str, context: SparseVec, fields: dict[str, Any]) -> None:
        vector = self.sparse_vector(list(context.indices), list(context.values))
        with self._guard("set_context"):
            self._require(point_id)
            self.client.update_vectors(
                self.collection, points=[m.PointVectors(id=point_id, vector={CONTEXT: vector})], wait=True
            )
            self.client.set_payload(self.collection, payload=fields, points=[point_id], wait=True)

    # -- reads ---------------------------------------------------------------------------------------

    def retrieve(
        self,
        point_ids: list[str],
        with_dense: bool = False,
        fields: Sequence[str] | None = None,
        using: str | None = None,
    ) -> Sequence[Record]:
        with self._guard("retrieve"):
            return self.client.retrieve(
                self.collection,
                point_ids,
                with_payload=_with_payload(fields),
                with_vectors=self._with_vectors(with_dense, using),
            )

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
        lowered = Lowering(self)(flt) if flt is not None else None
        order = None
        if order_by is not None:
            order = m.OrderBy(key=order_by, direction=m.Direction.DESC if descending else m.Direction.ASC)
        with self._guard("scroll"):
            records, next_offset = self.client.scroll(
                self.collection,
                scroll_filter=lowered,
                limit=limit,
                offset=offset if order_by is None else None,
                with_payload=_with_payload(fields),
                with_vectors=self._with_vectors(with_dense, using),
                order_by=order,
            )
        return records, next_offset if order_by is None else None

    def count(self, flt: Filter | None) -> int:
        lowered = Lowering(self)(flt) if flt is not None else None
        with self._guard("count"):
            return int(self.client.count(self.collection, count_filter=lowered, exact=True).count)

    def facet(self, key: str, flt: Filter | None, limit: int) -> dict[str, int]:
        lowered = Lowering(self)(flt) if flt is not None else None
        with self._guard("facet"):
            hits = self.client.facet(self.collection, key, facet_filter=lowered, limit=limit, exact=True).hits
        return {str(h.value): int(h.count) for h in hits}

    def query(self, query: Query) -> Sequence[ScoredRecord]:
        lower = Lowering(self)
        prefetch, score, flt = lower(query.prefetch), lower(query.score), lower(query.filter)
        with self._guard("query"):
            return self.client.query_points(
                self.collection,
                prefetch=[prefetch],
                query=score,
                query_filter=flt,
                limit=query.limit,
                with_payload=_with_payload(query.fields),
                with_vectors=self._with_vectors(query.with_dense, query.using),
            ).points

    def query_batch(self, queries: Sequence[Query]) -> list[Sequence[ScoredRecord]]:
        """One request for all of them (`query_batch_points`)."""
        if not queries:
            return []
        requests = []
        for q in queries:
            lower = Lowering(self)
            requests.append(
                m.QueryRequest(
                    prefetch=[lower(q.prefetch)],
                    query=lower(q.score),
                    filter=lower(q.filter),
                    limit=q.limit,
                    with_payload=_with_payload(q.fields),
                    with_vector=self._with_vectors(q.with_dense, q.using),
                )
            )
        with self._guard("query_batch"):
            return [r.points for r in self.client.query_batch_points(self.collection, requests)]

    # -- the vocabulary: neutral filters and queries in qdrant-client's types --------------------------

    def match(self, key: str, value: str) -> m.FieldCondition:
        return m.FieldCondition(key=key, match=m.MatchValue(value=value))

    def match_any(self, key: str, values: list[str]) -> m.FieldCondition:
        return m.FieldCondition(key=key, match=m.MatchAny(any=values))

    def at_least(self, key: str, gte: float) -> m.FieldCondition:
        return m.FieldCondition(key=key, range=m.Range(gte=gte))

    def datetime_range(
        self, key: str, gte: str | None, gt: str | None, lte: str | None, lt: str | None
    ) -> m.FieldCondition:
        return m.FieldCondition(key=key, range=m.DatetimeRange(gte=_dt(gte), gt=_dt(gt), lte=_dt(lte), lt=_dt(lt)))

    def has_dense(self, using: str = DENSE) -> m.HasVectorCondition:
        return m.HasVectorCondition(has_vector=using)

    def is_empty(self, key: str) -> m.IsEmptyCondition:
        return m.IsEmptyCondition(is_empty=m.PayloadField(key=key))

    def has_id(self, ids: list[str]) -> m.HasIdCondition:
        return m.HasIdCondition(has_id=list(ids))

    def filter(self, must: list[Any] | None, should: list[Any] | None, must_not: list[Any] | None) -> m.Filter:
        return m.Filter(must=must, should=should, must_not=must_not)

    def sparse_vector(self, indices: list[int], values: list[float]) -> m.SparseVector:
        return m.SparseVector(indices=indices, values=values)

    def dense_leg(
        self, vector: list[float], flt: Any, limit: int, using: str = DENSE, *, acorn: bool = False
    ) -> m.Prefetch:
        # A one-row multivector: max-sim against it is the best chunk's cosine.
        params = _ACORN_PARAMS if acorn else _DENSE_PARAMS
        return m.Prefetch(query=[vector], using=using, filter=flt, limit=limit, params=params)

    def sparse_leg(self, vector: Any, flt: Any, limit: int, idf: Any, inner: Any | None, using: str) -> m.Prefetch:
        return m.Prefetch(
            prefetch=[inner] if inner is not None else None,
            query=vector,
            using=using,
            filter=flt,
            params=m.SearchParams(idf=m.IdfCorpusParams(corpus=idf)),
            limit=limit,
        )

    def fused(self, legs: list[Any], method: str, k: int, weights: list[float], flt: Any, limit: int) -> m.Prefetch:
        fuse: Any = (
            m.FusionQuery(fusion=m.Fusion.DBSF) if method == "dbsf" else m.RrfQuery(rrf=m.Rrf(k=k, weights=weights))
        )
        return m.Prefetch(prefetch=legs, query=fuse, filter=flt, limit=limit)

    def piece_prior(self, inner: Any, key: str, penalty: float, flt: Any, limit: int) -> m.Prefetch:
        return m.Prefetch(prefetch=[inner], query=_piece_prior(key, penalty), filter=flt, limit=limit)

    def times_importance(self, key: str, default: float) -> m.FormulaQuery:
        return _times_importance(key, default)

    def raw_score(self) -> m.FormulaQuery:
        return _RAW_SCORE


class QdrantServerStore(QdrantStore):
    """MemoryStore on a Qdrant server (`url`), or on qdrant-client's local mode (`location`/`path`)."""

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
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self._client = ClientEngine(
            url, api_key, collection=collection, location=location, path=path, timeout=timeout, options=options
        )
        super().__init__(self._client, prefetch_limit=prefetch_limit)
        self.collection = collection
        self.local = self._client.local

    @property
    def client(self) -> QdrantClient:
        """The qdrant-client underneath (for operations the store does not offer)."""
        return self._client.client
