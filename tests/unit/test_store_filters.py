"""Engine-neutral store rules (episodic.store.rules): input validation and payload shaping. No IO."""

from __future__ import annotations

import math

import numpy as np
import pytest

from episodic.kernel.errors import StoreError
from episodic.kernel.ports import MemoryPoint, SparseVec
from episodic.store.rules import (
    PAYLOAD_INDEXES,
    dense_rows,
    stored_payload,
    validate_dense,
    validate_payload,
    validate_points,
    validate_sparse,
    validate_vector,
)


def test_payload_indexes_cover_every_filtered_field() -> None:
    assert PAYLOAD_INDEXES["workspace_id"] == "tenant"
    for f in ("crew_id", "agent_id", "entry_id", "entry_type", "severity", "dedup_key", "aliases"):
        assert PAYLOAD_INDEXES[f] == "keyword"
    assert PAYLOAD_INDEXES["importance_score"] == "float"
    assert PAYLOAD_INDEXES["ts"] == "datetime"
    assert PAYLOAD_INDEXES["has_dense"] == "bool"


@pytest.mark.parametrize(
    "rows",
    [[], [[]], [[1.0, 0.0], [1.0]], [[math.nan, 1.0]], [[math.inf, 1.0]], [[0.0, 0.0]], [["a", 1.0]], [1.0, 0.0]],
)
def test_bad_dense_rows_are_rejected(rows: object) -> None:
    with pytest.raises(StoreError):
        validate_dense(rows, None)  # type: ignore[arg-type]


def test_dense_dim_is_checked_when_known() -> None:
    validate_dense([[1.0, 0.0, 0.0]], 3)
    validate_dense([[1.0, 0.0, 0.0]], None)
    with pytest.raises(StoreError, match="expected dim 4"):
        validate_dense([[1.0, 0.0, 0.0]], 4)
    with pytest.raises(StoreError, match="expected dim 2"):
        validate_vector([1.0, 0.0, 0.0], 2)


@pytest.mark.parametrize(
    "sparse",
    [
        SparseVec([1, 2], [1.0]),
        SparseVec([1, 1], [1.0, 1.0]),
        SparseVec([-1], [1.0]),
        SparseVec([2**32], [1.0]),
        SparseVec([True], [1.0]),  # type: ignore[list-item]
        SparseVec([1], [math.nan]),
        SparseVec([1.5], [1.0]),  # type: ignore[list-item]
    ],
)
def test_bad_sparse_vectors_are_rejected(sparse: SparseVec) -> None:
    with pytest.raises(StoreError):
        validate_sparse(sparse)


def test_empty_sparse_vector_is_allowed() -> None:
    validate_sparse(SparseVec([], []))
    validate_sparse(SparseVec([0, 2**32 - 1], [0.5, 2.0]))


def test_points_need_a_workspace() -> None:
    ok = MemoryPoint("p", SparseVec([], []), {"workspace_id": "w"}, dense=[[1.0]])
    validate_points([ok], 1)
    with pytest.raises(StoreError, match="workspace_id"):
        validate_points([MemoryPoint("p", SparseVec([], []), {})], 1)


def test_stored_payload_keeps_has_dense_true_to_the_vectors_and_copies() -> None:
    payload = {"workspace_id": "w", "has_dense": True}
    point = MemoryPoint("p", SparseVec([], []), payload, dense=None)
    out = stored_payload(point)
    assert out["has_dense"] is False
    assert payload["has_dense"] is True  # the caller's dict is not mutated
    assert stored_payload(MemoryPoint("p", SparseVec([], []), {"workspace_id": "w"}, dense=[[1.0]]))["has_dense"]


def test_dense_rows_reads_named_vectors() -> None:
    assert dense_rows({"dense": [[1, 0], [0, 1]], "bm25": object()}) == [[1.0, 0.0], [0.0, 1.0]]
    assert dense_rows({"bm25": object()}) is None
    assert dense_rows(None) is None


@pytest.mark.parametrize(
    "sparse",
    [
        SparseVec([1], [math.inf]),
        SparseVec([1, 2], [1.0, True]),  # type: ignore[list-item]
        SparseVec([np.int64(3), -2], [1.0, 1.0]),  # a numpy index among them takes the one-by-one path
        SparseVec([1], [np.float32("nan")]),  # type: ignore[list-item]
        SparseVec([1], ["0.5"]),  # type: ignore[list-item]
    ],
)
def test_bad_sparse_values_are_rejected_whatever_their_type(sparse: SparseVec) -> None:
    with pytest.raises(StoreError):
        validate_sparse(sparse)


def test_numpy_numbers_are_good_sparse_entries() -> None:
    validate_sparse(SparseVec([np.int64(3), np.uint32(7)], [np.float32(0.5), 2]))  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({"a": [1, {"b": math.nan}]}, r"payload\.a\[1\]\.b"),
        ({"a": np.float64("inf")}, r"payload\.a"),
        ({"a": {1: "x"}}, "key 1"),
        ({"a": [object()]}, r"payload\.a\[0\] is a object"),
        ({"a": {"b": {2, 3}}}, r"payload\.a\.b is a set"),
    ],
)
def test_bad_payloads_are_rejected_naming_the_place(payload: dict, where: str) -> None:
    with pytest.raises(StoreError, match=where):
        validate_payload(payload, what="p")


def test_json_payloads_and_numpy_numbers_pass() -> None:
    validate_payload(
        {
            "s": "x",
            "n": None,
            "b": True,
            "i": 3,
            "f": 0.5,
            "l": [1, "a", [2.5, None]],
            "np": np.int64(4),
            "g": np.float32(1),
        },
        what="p",
    )
