"""The memory store: the rules both adapters share (`stack.stores.open_store` picks the adapter).

The engine-neutral parts live here so that the two adapters cannot drift: the payload index schema,
the neutral importance for points that lack one, and input validation. Validation runs before anything
reaches an engine because some garbage (a sparse vector whose indices and values differ in length,
or repeat an index) makes the Qdrant Edge core panic instead of returning an error.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from episodic.errors import StoreError
from episodic.ports import DENSE, Fusion, MemoryPoint, SparseVec

IndexKind = Literal["keyword", "tenant", "float", "datetime", "bool"]

# Payload indexes, by field. `tenant` is a keyword index flagged as the tenant (workspace) partition.
PAYLOAD_INDEXES: dict[str, IndexKind] = {
    "workspace_id": "tenant",
    "crew_id": "keyword",
    "agent_id": "keyword",
    "entry_id": "keyword",
    "entry_type": "keyword",
    "severity": "keyword",
    "dedup_key": "keyword",
    "aliases": "keyword",  # keyword array: a match on any element
    "links": "keyword",  # entry ids this memory has an edge to (relations, read in both directions)
    "importance_score": "float",
    "ts": "datetime",
    "has_dense": "bool",
}

# A point without `importance_score` (never written by the indexer, but possible in hand-made data)
# ranks as an info-level routine memory (SPEC §10 base table), not as the most important one.
DEFAULT_IMPORTANCE = 0.5

# Candidates each leg fetches before the importance multiplier re-ranks them.
DEFAULT_PREFETCH = 100

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
    if len(sparse.indices) != len(sparse.values):
        raise StoreError(f"{what}: {len(sparse.indices)} indices but {len(sparse.values)} values (must be equal)")
    if len(set(sparse.indices)) != len(sparse.indices):
        raise StoreError(f"{what}: repeated indices")
    for i in sparse.indices:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i <= _MAX_SPARSE_INDEX:
            raise StoreError(f"{what}: index {i!r} is not an unsigned 32-bit integer")
    for v in sparse.values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise StoreError(f"{what}: value {v!r} is not a finite number")


def validate_points(points: Sequence[MemoryPoint], dim: int | None) -> None:
    for p in points:
        if not p.point_id:
            raise StoreError("point without an id")
        if not p.payload.get("workspace_id"):
            raise StoreError(f"point {p.point_id}: payload has no workspace_id")
        validate_sparse(p.sparse, what=f"point {p.point_id} sparse vector")
        if p.dense is not None:
            validate_dense(p.dense, dim, what=f"point {p.point_id} dense vector")


def dense_rows(vectors: object) -> list[list[float]] | None:
    """The dense chunk rows out of an engine's named-vector dict, if it has them."""
    if not isinstance(vectors, dict):
        return None
    rows = vectors.get(DENSE)
    if rows is None:
        return None
    return [[float(x) for x in row] for row in rows]


def stored_payload(point: MemoryPoint) -> dict[str, object]:
    """The payload as written: the caller's fields, with `has_dense` kept true to the vectors."""
    payload = dict(point.payload)
    payload["has_dense"] = point.dense is not None
    return payload


def hybrid_legs(
    adapter: Any, vector: list[float], sparse: SparseVec, scope: Any, flt: Any, limit: int, fusion: Fusion
) -> tuple[list[Any], list[float]]:
    """The hybrid query's prefetch legs and their RRF weights (see `Fusion`), built with the adapter's own
    prefetch constructors `_dense_leg(vector, flt, n)` and `_sparse_leg(sparse, scope, flt, n, inner=None)`
    (`inner`: re-score that prefetch's candidates by the BM25 query). One definition for both adapters;
    the dense prefetch is built once and also serves as the inner of the re-scored leg."""
    dense = adapter._dense_leg(vector, flt, limit)
    legs: list[Any] = []
    weights: list[float] = []

    def add(leg: Any, weight: float) -> None:
        if weight > 0 or fusion.method == "dbsf":
            legs.append(leg)
            weights.append(weight)

    add(dense, fusion.dense_weight)
    if sparse.indices:  # an empty sparse query contributes nothing; leave those legs out rather than ask the engine
        add(adapter._sparse_leg(sparse, scope, flt, limit), fusion.sparse_weight)
        if fusion.both_weight > 0:
            add(adapter._sparse_leg(sparse, scope, flt, limit, inner=dense), fusion.both_weight)
        if fusion.head > 0 and fusion.head_weight > 0:
            add(adapter._sparse_leg(sparse, scope, flt, min(fusion.head, limit)), fusion.head_weight)
    if not legs:  # every weight 0: the dense leg alone still ranks
        legs, weights = [dense], [1.0]
    return legs, weights
