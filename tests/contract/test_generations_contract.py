"""Embedding generations in the store: a second named dense vector beside the first, filled point by point,
queried by name, switched to at once, dropped after (every backend, and across a restart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from episodic.domain.identity import point_id
from episodic.kernel.errors import StoreError
from episodic.kernel.ports import DENSE, Fusion, MemoryPoint, MemoryStore, ScopeFilter
from episodic.store.sparse import Bm25Encoder
from tests.contract.conftest import DIM, PERSISTENT_BACKENDS, MakePoint, e, make_store
from tests.contract.conftest import as_qdrant as q

OWN = ScopeFilter(workspace_id="ws-a", agent_id="agent-1", crew_id="crew-1", scope="own")
NEXT = "dense_1"
NEXT_DIM = 3
FIELDS = ("entry_id", "summary")


def pid(entry_id: str) -> str:
    return point_id("ws-a", entry_id)


def u(i: int) -> list[float]:
    """The i-th basis vector of the second generation's (smaller) space."""
    v = [0.0] * NEXT_DIM
    v[i] = 1.0
    return v


def test_a_second_vector_is_filled_beside_the_first_and_queried_by_name(
    store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder
) -> None:
    s = q(store)
    s.upsert([mk("e1", "one", e(0)), mk("e2", "two", e(1)), mk("e3", "three", None)])
    assert s.dense_layout() == {DENSE: DIM}
    s.add_dense_vector(NEXT, NEXT_DIM)
    s.add_dense_vector(NEXT, NEXT_DIM)  # idempotent
    with pytest.raises(StoreError):
        s.add_dense_vector(NEXT, NEXT_DIM + 1)
    assert s.dense_layout() == {DENSE: DIM, NEXT: NEXT_DIM}
    assert s.count_without_vector(NEXT, failures="reembed_failures") == 3

    page, nxt = s.without_vector(NEXT, 2, None, fields=FIELDS, failures="reembed_failures", quarantine_after=3)
    assert len(page) == 2 and all(set(p) <= set(FIELDS) for _, p in page)
    rest, end = s.without_vector(NEXT, 2, nxt, fields=FIELDS, failures="reembed_failures", quarantine_after=3)
    assert len(rest) == 1 and end is None  # the page after `nxt` holds the third one, in id order
    assert {i for i, _ in page} | {rest[0][0]} == {pid("e1"), pid("e2"), pid("e3")}
    written = s.set_vectors(NEXT, {pid("e1"): [u(0)], pid("e2"): [u(1)], point_id("ws-a", "gone"): [u(2)]}, {"m": "x"})
    assert written == 2  # the missing point is skipped
    assert s.count_without_vector(NEXT, failures="reembed_failures") == 1

    # The active generation is untouched: its rows, its queries, its "has a dense vector".
    assert s.vector == DENSE
    assert s.count(has_dense=True) == 2
    assert [h.payload["entry_id"] for h in s.query_dense(e(1), OWN, 1)] == ["e2"]
    assert s.fetch([pid("e1")], with_dense=True)[pid("e1")].dense == [e(0)]
    # A query names the generation its vector was made for, whatever is active.
    assert [h.payload["entry_id"] for h in s.query_dense(u(0), OWN, 1, using=NEXT)] == ["e1"]
    with pytest.raises(StoreError):
        s.query_dense(u(0), OWN, 1)  # a 3-d vector against the 8-d active generation

    s.use_dense_vector(NEXT)
    assert s.vector == NEXT
    assert s.count(has_dense=True) == 2 and s.count(has_dense=False) == 1
    assert [h.payload["entry_id"] for h in s.query_dense(u(1), OWN, 1)] == ["e2"]
    assert s.fetch([pid("e2")], with_dense=True)[pid("e2")].dense == [u(1)]
    assert [p["entry_id"] for _, p in s.missing_dense(10)] == ["e3"]
    s.set_dense(pid("e3"), [u(2)], {"m": "y"})
    assert s.count(has_dense=False) == 0
    hybrid = s.query_hybrid(u(2), bm25.query("three"), OWN, 1, Fusion())
    assert [h.payload["entry_id"] for h in hybrid] == ["e3"]

    with pytest.raises(StoreError):
        s.drop_dense_vector(NEXT)  # the active one
    s.drop_dense_vector(DENSE)
    assert s.dense_layout() == {NEXT: NEXT_DIM}
    # A point written now goes to the active generation by name.
    s.upsert([MemoryPoint(pid("e4"), mk("e4", "four", None).sparse, mk("e4", "four", None).payload, [u(0)], NEXT)])
    assert s.count(has_dense=True) == 4
    with pytest.raises(StoreError):  # a point still tagged with the dropped generation's dim is refused
        s.upsert([mk("e5", "five", e(0))])


@pytest.mark.parametrize("backend", PERSISTENT_BACKENDS)
def test_generations_survive_a_restart(backend: str, tmp_path: Path, mk: MakePoint) -> None:
    s = q(make_store(backend, tmp_path))
    s.upsert([mk("e1", "one", e(0))])
    s.add_dense_vector(NEXT, NEXT_DIM)
    s.set_vectors(NEXT, {pid("e1"): [u(0)]}, {})
    s.flush()
    s.close()

    s = q(make_store(backend, tmp_path))  # opens with the first generation active, the second still there
    try:
        assert s.dense_layout() == {DENSE: DIM, NEXT: NEXT_DIM}
        s.use_dense_vector(NEXT)
        assert [h.payload["entry_id"] for h in s.query_dense(u(0), OWN, 1)] == ["e1"]
        s.drop_dense_vector(DENSE)
        s.flush()
    finally:
        s.close()

    s = q(make_store(backend, tmp_path, dim=NEXT_DIM, vector=NEXT))  # now only the second one
    try:
        assert s.dense_layout() == {NEXT: NEXT_DIM}
        assert s.vector == NEXT
        assert [h.payload["entry_id"] for h in s.query_dense(u(0), OWN, 1)] == ["e1"]
    finally:
        s.close()


def test_the_neighbours_of_a_memory_are_searched_in_the_generation_its_rows_came_from(
    store: MemoryStore, mk: MakePoint
) -> None:
    """The linker reads a memory's rows, then searches its neighbours: a switch in between must not rank the
    old generation's rows against the new one's vectors (or fail on their dim)."""
    s = q(store)
    s.upsert([mk("e1", "one", e(0)), mk("e2", "two", e(1)), mk("e3", "three", e(1))])
    s.add_dense_vector(NEXT, NEXT_DIM)
    s.set_vectors(NEXT, {pid("e1"): [u(0)], pid("e2"): [u(0)], pid("e3"): [u(2)]}, {})
    read = s.fetch([pid("e2")], with_dense=True)[pid("e2")]
    assert (read.vector, read.dense) == (DENSE, [e(1)])
    s.use_dense_vector(NEXT)  # the switch, between the read and the search
    hits = s.similar_to("ws-a", read.dense or [], 1, exclude_entry_ids=["e2"], using=read.vector)
    assert [h.payload["entry_id"] for h in hits] == ["e3"]  # e3 is e2's twin in the old generation
    assert [h.payload["entry_id"] for h in s.similar_to("ws-a", [u(0)], 1, exclude_entry_ids=["e2"])] == ["e1"]
    assert s.fetch([pid("e2")], with_dense=True)[pid("e2")].vector == NEXT
    assert s.fetch([pid("e2")])[pid("e2")].vector is None  # no rows read, no vector named
    with pytest.raises(StoreError):
        s.similar_to("ws-a", read.dense or [], 1)  # the old rows against the active (3-d) generation
