"""What the store checks and writes, whatever the engine (pure, no IO): the payload index schema, input
validation, and the payload and vectors as stored.

Validation runs before anything reaches an engine because some garbage (a sparse vector whose indices
and values differ in length, or repeat an index) makes the Qdrant Edge core panic instead of returning
an error.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Literal

import numpy as np

from episodic.kernel.errors import StoreError
from episodic.kernel.ports import DENSE, MemoryPoint, SparseVec

IndexKind = Literal["keyword", "tenant", "float", "datetime", "bool"]

# Payload indexes, by field. `tenant` is a keyword index flagged as the tenant (workspace) partition.
PAYLOAD_INDEXES: dict[str, IndexKind] = {
    "workspace_id": "tenant",
    "crew_id": "keyword",
    "agent_id": "keyword",
    "run_id": "keyword",  # recall's run_id / exclude_run_id, listing and forgetting by run
    "entry_id": "keyword",
    "entry_type": "keyword",
    "severity": "keyword",
    "dedup_key": "keyword",
    "aliases": "keyword",  # keyword array: a match on any element
    "agents": "keyword",  # a folded memory's agents (shown; scope `own` matches agent_id only, issue 47)
    "folded_into": "keyword",  # an absorbed memory's owner; recall passes over every memory that has one
    "fold_scope": "keyword",  # "crew": its owner is another agent's, so it stays its agent's own (scope own)
    "links": "keyword",  # entry ids this memory has an edge to (relations, read in both directions)
    "context_ids": "keyword",  # entry ids whose text this memory was indexed with (episodic.indexing.context)
    "importance_score": "float",
    "ts": "datetime",
    "indexed_at": "datetime",  # the densify backfill goes oldest first (order_by needs a range index)
    "densify_failures": "float",  # the backfill skips memories whose text failed too often (quarantine)
    "has_dense": "bool",
    "pieces": "float",  # read by the hybrid's piece prior (a Formula variable) for every dense candidate
}

# The fields whose values get graphs of their own when the dense index is built (Qdrant's `payload_m`
# links, per value with more points than `full_scan_threshold`): those that scope a recall. Every other
# index only filters (`enable_hnsw` off). Built for every indexed field, as before, each field whose values
# cover the store (severity, entry_type, has_dense, ts, importance_score, pieces, ...) cost one more graph of
# every memory: 2.7x the build time at 40k real memories (bench_index_build; issue 27, docs/scale.md).
GRAPH_FIELDS: frozenset[str] = frozenset({"workspace_id", "crew_id", "agent_id", "agents", "run_id"})
# A dense query whose filter narrows on a field outside GRAPH_FIELDS (store_query.off_graph) and keeps less
# than this share of the points searches with ACORN (the neighbours' neighbours): without it, a filter on
# severity, entry_type or a time window found 0.82-0.93 of the exact top 10 at 40k real memories, with it
# 1.00 (every field's graphs: 0.98-1.00).
ACORN_MAX_SELECTIVITY = 0.4
# The graph search's candidate list (Qdrant's default: ef_construct, 100). With graphs for the scoping fields
# only, an unfiltered dense leg found 0.986 of the exact top 10 at 100 and 0.994 at 128, for the same time
# (40k real memories; every field's graphs: 1.0, their extra links being more paths through the graph).
HNSW_EF_SEARCH = 128


def has_graph(field: str) -> bool:
    """Whether the dense index builds graphs per value of `field` (GRAPH_FIELDS)."""
    return field in GRAPH_FIELDS


# Sparse indices are u32 in Qdrant.
_MAX_SPARSE_INDEX = 2**32 - 1


def validate_dense(rows: Sequence[Sequence[float]], dim: int | None, *, what: str = "dense vector") -> None:
    """A multivector: at least one row, every row `dim` long (when known), finite and not all zero."""
    try:
        arr = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise StoreError(f"{what}: not a rectangular array of numbers ({e})") from e
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise StoreError(f"{what}: expected a non-empty list of rows, got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise StoreError(f"{what}: expected dim {dim}, got {arr.shape[1]}")
    if arr.shape[1] == 0:
        raise StoreError(f"{what}: empty rows")
    if not np.isfinite(arr).all():
        raise StoreError(f"{what}: non-finite values")
    if not (np.abs(arr).sum(axis=1) > 0).all():
        raise StoreError(f"{what}: a zero row has no direction (cosine undefined)")


def validate_vector(vector: Sequence[float], dim: int | None, *, what: str = "query vector") -> None:
    """One dense query vector: `dim` long (when known), finite, not all zero."""
    validate_dense([vector], dim, what=what)


def validate_sparse(sparse: SparseVec, *, what: str = "sparse vector") -> None:
    """Indices and values of equal length, indices unique u32, values finite. Empty is allowed:
    a text made only of stopwords has no BM25 terms; such a point is simply never a sparse match."""
    indices, values = sparse.indices, sparse.values
    if len(indices) != len(values):
        raise StoreError(f"{what}: {len(indices)} indices but {len(values)} values (must be equal)")
    if len(set(indices)) != len(indices):
        raise StoreError(f"{what}: repeated indices")
    # Plain ints and floats (what the BM25 encoder makes) are checked in C; anything else one by one.
    if not (
        all(type(i) is int for i in indices)
        and (not indices or (min(indices) >= 0 and max(indices) <= _MAX_SPARSE_INDEX))
    ):
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i <= _MAX_SPARSE_INDEX:
                raise StoreError(f"{what}: index {i!r} is not an unsigned 32-bit integer")
    if not (all(type(v) is float for v in values) and all(map(math.isfinite, values))):
        for v in values:
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise StoreError(f"{what}: value {v!r} is not a finite number")


_JSON_LEAVES = (type(None), str, bool, int)  # exact types (subclasses and numpy scalars take the general path)


def validate_payload(value: object, *, what: str, path: str = "payload", depth: int = 0) -> None:
    """JSON as the engines store it: objects with string keys, arrays, strings, finite numbers, booleans,
    null. NaN and infinities are valid Python but not JSON (Qdrant Edge refuses them with a TypeError)."""
    if depth > 64:
        raise StoreError(f"{what}: {path} is nested more than 64 levels deep")
    kind = type(value)
    if kind in _JSON_LEAVES:  # the common cases first, without the abstract base classes' checks
        return
    if kind is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise StoreError(f"{what}: {path} is {value!r}, not a finite number")
        return
    if value is None or isinstance(value, str | bool):
        return
    if isinstance(value, numbers.Integral):
        return
    if isinstance(value, numbers.Real):
        if not math.isfinite(value):
            raise StoreError(f"{what}: {path} is {value!r}, not a finite number")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise StoreError(f"{what}: {path} has a key {k!r} that is not a string")
            if type(v) not in _JSON_LEAVES:  # a leaf needs no path of its own
                validate_payload(v, what=what, path=f"{path}.{k}", depth=depth + 1)
        return
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            if type(v) not in _JSON_LEAVES:
                validate_payload(v, what=what, path=f"{path}[{i}]", depth=depth + 1)
        return
    raise StoreError(f"{what}: {path} is a {type(value).__name__}, not a JSON value")


def validate_points(points: Sequence[MemoryPoint], dim: int | None) -> None:
    for p in points:
        if not p.point_id:
            raise StoreError("point without an id")
        if not p.payload.get("workspace_id"):
            raise StoreError(f"point {p.point_id}: payload has no workspace_id")
        validate_payload(p.payload, what=f"point {p.point_id}")
        validate_sparse(p.sparse, what=f"point {p.point_id} sparse vector")
        if p.context is not None:
            validate_sparse(p.context, what=f"point {p.point_id} context vector")
        if p.dense is not None:
            validate_dense(p.dense, dim, what=f"point {p.point_id} dense vector")


def float_rows(rows: Sequence[Sequence[float]]) -> list[list[float]]:
    """Chunk rows as plain float lists (numpy scalars and ints are not what the engines take)."""
    return [list(map(float, row)) for row in rows]


def model_field(vector: str) -> str:
    """The payload field that records which model made a memory's named dense vector `vector` (an embedding
    generation, episodic.embedding.generations): `model` for the first one, `model@<vector>` for the others."""
    return "model" if vector == DENSE else f"model@{vector}"


def vector_of_field(vector: str) -> str:
    """The payload field that records the digest of the summary the named dense vector `vector` was made
    from (`episodic.domain.identity.summary_digest`): `vector_of`, or `vector_of_<vector>` for a later
    generation. Written with the rows by the indexer, densify, the re-embed pass and import."""
    return "vector_of" if vector == DENSE else f"vector_of_{vector}"


def pieces_field(vector: str) -> str:
    """The payload field that records how many rows (pieces of the text, episodic.domain.chunking) a memory's named
    dense vector `vector` has: `pieces` for the first generation, `pieces_<vector>` for the others. The store
    writes it with the rows; the hybrid's dense leg reads it (`store_query.DenseLeg.piece_penalty`)."""
    return "pieces" if vector == DENSE else f"pieces_{vector}"


def is_pieces_field(key: str) -> bool:
    """A row count that the store derives (`pieces_field` of any vector name)."""
    return key == "pieces" or key.startswith("pieces_")


def dense_rows(vectors: object, using: str = DENSE) -> list[list[float]] | None:
    """The dense chunk rows (of the named vector `using`) out of an engine's named-vector dict, if it has them."""
    if not isinstance(vectors, dict):
        return None
    rows = vectors.get(using)
    if rows is None:
        return None
    return [[float(x) for x in row] for row in rows]


def stored_payload(point: MemoryPoint) -> dict[str, object]:
    """The payload as written: the caller's fields, with `has_dense` kept true to the vectors and the count of
    the dense rows in `pieces_field(point.vector)`."""
    payload = dict(point.payload)
    payload["has_dense"] = point.dense is not None
    if point.dense is not None:
        payload[pieces_field(point.vector)] = len(point.dense)
    return payload


def stored_point(point: MemoryPoint, *, context: bool = True) -> MemoryPoint:
    """The point as an engine writes it: payload as stored, dense rows as float lists; without the context
    vector (and the payload that describes it) when the collection has none (`context` false)."""
    dense = float_rows(point.dense) if point.dense is not None else None
    payload = stored_payload(point)
    if not context or point.context is None:
        for key in ("context", "context_ids", "context_date"):
            payload.pop(key, None)
        return MemoryPoint(point.point_id, point.sparse, payload, dense, point.vector)
    return MemoryPoint(point.point_id, point.sparse, payload, dense, point.vector, point.context)
