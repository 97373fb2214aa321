"""What the maintenance agents ask of the store, on every adapter: raw nearest neighbours for the linker,
points with their vectors, resumable field-selected pages and batched payload updates for the decay job,
and dropping the edges that point at a removed memory."""

from __future__ import annotations

import math

import pytest

from episodic.domain.identity import point_id
from episodic.kernel.errors import StoreError
from episodic.kernel.ports import MemoryStore, Relation
from tests.contract.conftest import MakePoint, e, mix


def pid(entry_id: str, ws: str = "ws-a") -> str:
    return point_id(ws, entry_id)


def test_similar_to_scores_raw_cosine_without_the_importance_multiplier(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [
            mk("near", "a", mix((0, 0.9), (1, 0.1)), importance=0.1),
            mk("mid", "b", mix((0, 0.5), (1, 0.5)), importance=1.0),
            mk("far", "c", e(2), importance=1.0),
        ]
    )
    hits = store.similar_to("ws-a", [e(0)], 3)
    assert [h.payload["entry_id"] for h in hits] == ["near", "mid", "far"]
    assert hits[0].score == pytest.approx(0.9 / math.hypot(0.9, 0.1), abs=1e-5)  # not x 0.1
    assert hits[1].score == pytest.approx(math.sqrt(0.5), abs=1e-5)
    assert hits[2].score == pytest.approx(0.0, abs=1e-5)


def test_similar_to_stays_in_the_workspace_and_skips_the_memory_its_aliases_and_sparse_points(
    store: MemoryStore, mk: MakePoint
) -> None:
    store.upsert(
        [
            mk("self", "x", e(0)),
            mk("alias-held", "x", e(0)),  # an id listed as an alias of the new memory
            mk("mine", "y", mix((0, 0.8), (1, 0.2))),
            mk("other-agent", "y", mix((0, 0.7), (1, 0.3)), agent="agent-2"),  # same workspace: a candidate
            mk("theirs", "z", e(0), ws="ws-b"),
            mk("no-vector", "z", None),
        ]
    )
    hits = store.similar_to("ws-a", [e(0)], 10, exclude_entry_ids=["self", "alias-held"])
    assert [h.payload["entry_id"] for h in hits] == ["mine", "other-agent"]
    assert all(h.payload["workspace_id"] == "ws-a" for h in hits)


def test_similar_to_takes_the_best_pair_of_chunks(store: MemoryStore, mk: MakePoint) -> None:
    # candidates with two chunks each; the new memory has two chunks too: a score is the max over pairs
    store.upsert(
        [
            mk("a", "a", [e(2), mix((0, 0.6), (3, 0.4))]),  # its 2nd chunk meets the new memory's 1st
            mk("b", "b", [e(5), mix((1, 0.95), (4, 0.05))]),  # its 2nd chunk meets the new memory's 2nd
            mk("c", "c", [e(6), e(7)]),
        ]
    )
    hits = store.similar_to("ws-a", [e(0), e(1)], 2)
    assert [h.payload["entry_id"] for h in hits] == ["b", "a"]
    assert hits[0].score == pytest.approx(0.95 / math.hypot(0.95, 0.05), abs=1e-5)
    assert hits[1].score == pytest.approx(0.6 / math.hypot(0.6, 0.4), abs=1e-5)
    with pytest.raises(StoreError):
        store.similar_to("ws-a", [[0.0] * 8], 2)  # a zero row has no direction


def test_fetch_returns_payload_and_chunk_rows(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("two", "t", [e(0), e(1)]), mk("none", "n", None)])
    got = store.fetch([pid("two"), pid("none"), pid("missing")], with_dense=True)
    assert set(got) == {pid("two"), pid("none")}
    assert got[pid("two")].payload["entry_id"] == "two"
    assert got[pid("two")].dense is not None and len(got[pid("two")].dense or []) == 2
    assert got[pid("none")].dense is None
    assert store.fetch([pid("two")])[pid("two")].dense is None  # vectors only when asked
    assert store.fetch([]) == {}


def test_scroll_page_is_resumable_from_a_stored_offset_and_selects_fields(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk(f"m{i}", f"text {i}", e(i % 8), importance=0.1 * (i % 10)) for i in range(23)])
    seen: list[str] = []
    offset: str | None = None
    pages = 0
    while True:
        page, offset = store.scroll_page(offset, 10, fields=["entry_id", "importance_score"])
        pages += 1
        for point, payload in page:
            assert set(payload) <= {"entry_id", "importance_score"} and "summary" not in payload
            assert point == pid(payload["entry_id"])
            seen.append(point)
        if offset is None:
            break
        assert isinstance(offset, str)  # a job stores it (JSON) and resumes from it
    assert pages == 3 and len(seen) == len(set(seen)) == 23
    whole, _ = store.scroll_page(None, 1)
    assert "summary" in whole[0][1]  # no field list: the whole payload
    with pytest.raises(StoreError):
        store.scroll_page(None, 0)


def test_set_payloads_writes_different_values_and_skips_missing_points(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk(f"m{i}", f"text {i}", e(i), reference_count=i) for i in range(4)])
    updates = {pid(f"m{i}"): {"importance_score": 0.1 * (i + 1)} for i in range(4)}
    updates[pid("gone")] = {"importance_score": 0.9}
    assert store.set_payloads(updates) == 4
    got = store.retrieve([pid(f"m{i}") for i in range(4)])
    for i in range(4):
        p = got[pid(f"m{i}")]
        assert p["importance_score"] == pytest.approx(0.1 * (i + 1))
        assert p["reference_count"] == i and p["summary"] == f"text {i}"  # other fields untouched
    assert store.retrieve([pid("gone")]) == {}
    assert store.set_payloads({}) == 0


def test_remove_edges_to_drops_incoming_edges_and_keeps_the_rest(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk(f"m{i}", f"text {i}", e(i)) for i in range(4)] + [mk("m0", "other ws", e(0), ws="ws-b")])

    def rel(src: str, dst: str, kind: str = "similar", ws: str = "ws-a") -> Relation:
        return Relation(src=src, dst=dst, relation=kind, weight=0.9, created_at="t", workspace_id=ws)  # type: ignore[arg-type]

    store.add_relations(
        [rel("m1", "m0"), rel("m1", "m2"), rel("m3", "m0", "supports"), rel("m2", "m3"), rel("m0", "m9", ws="ws-b")]
    )
    store.upsert([mk("m9", "x", e(5), ws="ws-b")])
    assert store.remove_edges_to("ws-a", ["m0"]) == 2
    edges = {(r.src, r.dst, r.relation) for r in store.relations_of("ws-a", ["m0", "m1", "m2", "m3"])}
    assert edges == {("m1", "m2", "similar"), ("m2", "m3", "similar")}
    assert store.retrieve([pid("m1")])[pid("m1")]["links"] == ["m2"]
    assert store.retrieve([pid("m3")])[pid("m3")]["links"] == []
    # the other workspace keeps its own edge m0 -> m9
    assert {(r.src, r.dst) for r in store.relations_of("ws-b", ["m9"])} == {("m0", "m9")}
    assert store.remove_edges_to("ws-a", ["nothing-points-here"]) == 0


def test_remove_edges_to_leaves_the_spared_points_as_they_are(store: MemoryStore, mk: MakePoint) -> None:
    """A forget spares the memories it is about to delete: their own edges go with them, unwritten."""
    store.upsert([mk(f"m{i}", f"text {i}", e(i)) for i in range(3)])
    store.add_relations(
        [
            Relation(src=s, dst=d, relation="similar", weight=0.9, created_at="t", workspace_id="ws-a")
            for s, d in (("m1", "m0"), ("m2", "m0"), ("m2", "m1"))
        ]
    )
    assert store.remove_edges_to("ws-a", ["m0", "m1"], sparing={pid("m2")}) == 1  # m1 -> m0 only
    got = store.retrieve([pid("m1"), pid("m2")])
    assert got[pid("m1")]["links"] == []
    assert sorted(got[pid("m2")]["links"]) == ["m0", "m1"]


def test_similar_to_returns_only_the_fields_asked_for(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("a", "alpha", e(0), links=["z"])])
    [hit] = store.similar_to("ws-a", [e(0)], 1, fields=["entry_id", "links"])
    assert hit.payload == {"entry_id": "a", "links": ["z"]}
